//! Scatter/gather descriptors (`PTL_MD_IOVEC`): creating a descriptor over
//! a list of segments and taking the segments back. Everything else —
//! matching, offsets, truncation, thresholds, the high-water mark, reads,
//! writes, transfers — treats the list as one logical buffer, their
//! concatenation, through the descriptor's memory (`crate::md::iovec`).

use super::Engine;
use crate::error::Result;
use crate::handle::{MdHandle, MeHandle};
use crate::md::iovec::{Iovec, Segments};
use crate::md::{MdDesc, Memory};
use crate::types::Unlink;

impl Engine {
    /// Attach a descriptor owning the segments `segs` to a match entry
    /// (`PtlMDAttach` with `PTL_MD_IOVEC`). The descriptor's memory is the
    /// segments' concatenation: every offset and length is in that logical
    /// buffer. The segments come back, as they were given, from
    /// [`Engine::md_unlink_iovec`].
    ///
    /// Refused with [`crate::PtlError::Iovec`] (and the segments dropped)
    /// for more than [`crate::NiLimits::max_iovecs`] segments or an empty
    /// segment (see [`crate::error::IovecError`]); an empty list is a
    /// descriptor of length zero.
    pub fn md_attach_iovec(
        &mut self,
        me: MeHandle,
        desc: &MdDesc,
        segs: Vec<Vec<u8>>,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        let mem = Memory::Iovec(Segments::owned(segs, self.limits.max_iovecs)?);
        self.md_attach_mem(me, desc, mem, unlink)
    }

    /// Bind a descriptor owning the segments `segs`, not attached to any
    /// match entry (`PtlMDBind` with `PTL_MD_IOVEC`); as for
    /// [`Engine::md_attach_iovec`].
    pub fn md_bind_iovec(
        &mut self,
        desc: &MdDesc,
        segs: Vec<Vec<u8>>,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        let mem = Memory::Iovec(Segments::owned(segs, self.limits.max_iovecs)?);
        self.md_bind_mem(desc, mem, unlink)
    }

    /// [`Engine::md_unlink`] for any descriptor, giving its owned memory
    /// back as a list of buffers: the segments of an iovec descriptor, or
    /// the one buffer of an ordinary descriptor. `None` for caller memory.
    pub fn md_unlink_iovec(&mut self, md: MdHandle) -> Result<Option<Vec<Vec<u8>>>> {
        let k = self.md_key(md)?;
        Ok(self.remove_md(k)?.into_segments())
    }

    /// Attach a descriptor over caller segments to a match entry, for a
    /// layer that does several engine calls under one lock (see
    /// [`crate::NiCore::with_engine`]); otherwise as
    /// [`crate::NetworkInterface::md_attach_iovec_raw`].
    ///
    /// # Safety
    /// As for [`crate::NetworkInterface::md_attach_iovec_raw`].
    pub unsafe fn md_attach_iovec_raw(
        &mut self,
        me: MeHandle,
        desc: &MdDesc,
        list: &[Iovec],
        unlink: Unlink,
    ) -> Result<MdHandle> {
        let mem = self.raw_iovec(list)?;
        self.md_attach_mem(me, desc, mem, unlink)
    }

    /// Bind a descriptor over caller segments, as
    /// [`Engine::md_bind_raw`] does over one region; otherwise as
    /// [`crate::NetworkInterface::md_bind_iovec_raw`].
    ///
    /// # Safety
    /// As for [`crate::NetworkInterface::md_bind_iovec_raw`].
    pub unsafe fn md_bind_iovec_raw(
        &mut self,
        desc: &MdDesc,
        list: &[Iovec],
        unlink: Unlink,
    ) -> Result<MdHandle> {
        let mem = self.raw_iovec(list)?;
        self.md_bind_mem(desc, mem, unlink)
    }

    /// The memory of a descriptor over the caller's segments `list`,
    /// checked against the limits. Only the list is read.
    pub(crate) fn raw_iovec(&self, list: &[Iovec]) -> Result<Memory> {
        Ok(Memory::Iovec(Segments::raw(list, self.limits.max_iovecs)?))
    }
}
