//! The atomic operations of [`NetworkInterface`] (Portals 4): immediate
//! and triggered. The semantics are the engine's (`engine/atomics.rs`).

use super::NetworkInterface;
use crate::atomic::AtomicSpec;
use crate::engine::Trigger;
use crate::error::Result;
use crate::handle::MdHandle;
use crate::types::{AckReq, Remote};

impl NetworkInterface {
    /// Apply `spec` at the target to `length` bytes of its descriptor with
    /// the bytes of `md` at `local_offset` as source (`PtlAtomic`); see
    /// [`crate::Engine::atomic`]. Events as for a put.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
    ) -> Result<()> {
        let out = self
            .core
            .with_engine(|e| e.atomic(md, local_offset, length, ack, remote, hdr_data, spec))?;
        self.nal.send(out);
        // A self-send may have released triggered operations.
        self.core.send_triggered();
        Ok(())
    }

    /// As [`NetworkInterface::atomic`] with the source in `put_md` and the
    /// target's old values returned into `get_md` (`PtlFetchAtomic`); see
    /// [`crate::Engine::fetch_atomic`].
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_atomic(
        &self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
    ) -> Result<()> {
        let out = self.core.with_engine(|e| {
            e.fetch_atomic(
                get_md,
                local_get_offset,
                put_md,
                local_put_offset,
                length,
                remote,
                hdr_data,
                spec,
            )
        })?;
        self.nal.send(out);
        self.core.send_triggered();
        Ok(())
    }

    /// Swap, compare-and-swap or masked swap (`PtlSwap`); see
    /// [`crate::Engine::swap`].
    #[allow(clippy::too_many_arguments)]
    pub fn swap(
        &self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        operand: Option<&[u8]>,
        spec: AtomicSpec,
    ) -> Result<()> {
        let out = self.core.with_engine(|e| {
            e.swap(
                get_md,
                local_get_offset,
                put_md,
                local_put_offset,
                length,
                remote,
                hdr_data,
                operand,
                spec,
            )
        })?;
        self.nal.send(out);
        self.core.send_triggered();
        Ok(())
    }

    /// [`NetworkInterface::atomic`] once `trigger` is reached
    /// (`PtlTriggeredAtomic`); see [`crate::Engine::triggered_atomic`].
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_atomic(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        trigger: Trigger,
    ) -> Result<()> {
        let r = self.core.with_engine(|e| {
            e.triggered_atomic(
                md,
                local_offset,
                length,
                ack,
                remote,
                hdr_data,
                spec,
                trigger,
            )
        });
        self.core.send_triggered();
        r
    }

    /// [`NetworkInterface::fetch_atomic`] once `trigger` is reached
    /// (`PtlTriggeredFetchAtomic`).
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_fetch_atomic(
        &self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        trigger: Trigger,
    ) -> Result<()> {
        let r = self.core.with_engine(|e| {
            e.triggered_fetch_atomic(
                get_md,
                local_get_offset,
                put_md,
                local_put_offset,
                length,
                remote,
                hdr_data,
                spec,
                trigger,
            )
        });
        self.core.send_triggered();
        r
    }

    /// [`NetworkInterface::swap`] once `trigger` is reached
    /// (`PtlTriggeredSwap`).
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_swap(
        &self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        operand: Option<&[u8]>,
        spec: AtomicSpec,
        trigger: Trigger,
    ) -> Result<()> {
        let r = self.core.with_engine(|e| {
            e.triggered_swap(
                get_md,
                local_get_offset,
                put_md,
                local_put_offset,
                length,
                remote,
                hdr_data,
                operand,
                spec,
                trigger,
            )
        });
        self.core.send_triggered();
        r
    }
}
