//! Request-based operations (`MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`,
//! `MPI_Rget_accumulate`) and their requests.
//!
//! The engine never touches the caller's buffers here: the data to send
//! is copied into a descriptor the request owns, and what comes back lands
//! in one and is copied into the caller's buffer when the request
//! completes. So a request that is leaked (`mem::forget`) leaves nothing
//! pointing at caller memory; dropping one waits for it. A request
//! completes when its operation completed at the target (acknowledged or
//! replied), and a flush of its target waits for it too.
//!
//! The request borrows its buffer until it completes: touching an
//! `rget`'s buffer before then does not compile,
//! ```compile_fail,E0499
//! # use mpi_on_portals::traits::*;
//! # fn f(world: &mpi_on_portals::SimpleCommunicator) -> mpi_on_portals::Result<()> {
//! let win = world.allocate_window::<u64>(8)?;
//! let all = win.lock_all()?;
//! let mut buf = vec![0u64; 4];
//! let req = win.rget(1, 0, &mut buf)?;
//! buf[0] += 1;
//! req.wait()?;
//! # Ok(()) }
//! ```
//! nor freeing an `rput`'s data before it completes:
//! ```compile_fail,E0505
//! # use mpi_on_portals::traits::*;
//! # fn f(world: &mpi_on_portals::SimpleCommunicator) -> mpi_on_portals::Result<()> {
//! let win = world.allocate_window::<u64>(8)?;
//! let all = win.lock_all()?;
//! let data = vec![1u64; 4];
//! let req = win.rput(1, 0, &data)?;
//! drop(data);
//! req.wait()?;
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

use portals::{AckReq, CtHandle, MdHandle, MdOptions, PtlError};

use super::ops::OneOp;
use super::{release_md, AtomicElement, RmaOp, WinCore, Window};
use crate::comm::Rank;
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

/// A request of a one-sided operation. [`RmaRequest::wait`] or
/// [`RmaRequest::test`]; dropping it waits (errors are logged).
#[must_use = "dropping a request waits for it"]
pub struct RmaRequest<'b> {
    core: Arc<WinCore>,
    id: u64,
    target: u32,
    ct: CtHandle,
    mds: Vec<MdHandle>,
    expect: u64,
    /// Where fetched data goes, and the descriptor it arrives in.
    out: Option<(&'b mut [u8], MdHandle)>,
    done: bool,
    _b: PhantomData<&'b [u8]>,
}

impl std::fmt::Debug for RmaRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmaRequest")
            .field("target", &self.target)
            .field("done", &self.done)
            .finish()
    }
}

impl<'b> RmaRequest<'b> {
    fn new(
        core: &Arc<WinCore>,
        target: u32,
        op: OneOp<'_>,
        expect: u64,
        out: Option<(&'b mut [u8], MdHandle)>,
    ) -> Self {
        let (ct, mds) = op.into_parts();
        let mut st = core.lock();
        let id = st.next_req;
        st.next_req += 1;
        st.requests.push((id, target, ct, expect));
        drop(st);
        RmaRequest {
            core: core.clone(),
            id,
            target,
            ct,
            mds,
            expect,
            out,
            done: false,
            _b: PhantomData,
        }
    }

    fn finish(&mut self) -> Result<()> {
        self.done = true;
        let ni = self.core.ni();
        let waited = ni.ct_wait(self.ct, self.expect, None);
        let mut r = match waited {
            Ok(v) if v.failure > 0 => Err(MpiError::RmaFailed {
                rank: self.target as Rank,
                why: "the target refused the operation or could not be reached".into(),
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(MpiError::Portals(e)),
        };
        if r.is_ok() {
            if let Some((buf, md)) = self.out.take() {
                r = ni.md_read(md, 0, buf).map_err(MpiError::Portals);
            }
        }
        for md in self.mds.drain(..) {
            release_md(ni, md);
        }
        self.core.lock().requests.retain(|q| q.0 != self.id);
        match ni.ct_free(self.ct) {
            Ok(()) | Err(PtlError::InvalidHandle { .. }) => {}
            Err(e) => tracing::warn!(error = %e, "could not free an RMA request counter"),
        }
        r
    }

    /// Wait for completion (at the target; fetched data is in the caller's
    /// buffer).
    pub fn wait(mut self) -> Result<()> {
        self.finish()
    }

    /// Whether the operation completed; if so the request is finished
    /// (later calls return `Ok(true)` and do nothing).
    pub fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let ni = self.core.ni();
        let _ = ni.poll_test();
        let v = ni.ct_get(self.ct).map_err(MpiError::Portals)?;
        if v.success + v.failure < self.expect {
            return Ok(false);
        }
        self.finish().map(|()| true)
    }
}

impl Drop for RmaRequest<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.finish() {
                tracing::error!(error = %e, "an RMA request dropped before completion failed");
            }
        }
    }
}

impl<T: Equivalence> Window<'_, T> {
    /// [`Window::put`] as a request (`MPI_Rput`); `data` is copied.
    pub fn rput<'b>(&self, target: Rank, disp: usize, data: &'b [T]) -> Result<RmaRequest<'b>> {
        let (t, off) = self
            .core
            .target(target, disp, data.len(), std::mem::size_of::<T>())?;
        let ni = self.core.ni();
        let mut op = OneOp::new(ni)?;
        if data.is_empty() {
            return Ok(RmaRequest::new(&self.core, t, op, 0, None));
        }
        let md = op.bind(MdOptions::CT_ACK, bytemuck::cast_slice(data).to_vec())?;
        ni.put(md, AckReq::Ack, &self.core.remote(t, off), 0)
            .map_err(MpiError::Portals)?;
        Ok(RmaRequest::new(&self.core, t, op, 1, None))
    }

    /// [`Window::get`] as a request (`MPI_Rget`): `buf` holds the data
    /// once the request completed.
    pub fn rget<'b>(&self, target: Rank, disp: usize, buf: &'b mut [T]) -> Result<RmaRequest<'b>> {
        let (t, off) = self
            .core
            .target(target, disp, buf.len(), std::mem::size_of::<T>())?;
        let ni = self.core.ni();
        let mut op = OneOp::new(ni)?;
        let bytes: &'b mut [u8] = bytemuck::cast_slice_mut(buf);
        if bytes.is_empty() {
            return Ok(RmaRequest::new(&self.core, t, op, 0, None));
        }
        let md = op.bind(MdOptions::CT_REPLY, vec![0u8; bytes.len()])?;
        ni.get(md, &self.core.remote(t, off))
            .map_err(MpiError::Portals)?;
        Ok(RmaRequest::new(&self.core, t, op, 1, Some((bytes, md))))
    }
}

impl<T: AtomicElement> Window<'_, T> {
    /// [`Window::accumulate`] as a request (`MPI_Raccumulate`).
    pub fn raccumulate<'b>(
        &self,
        target: Rank,
        disp: usize,
        data: &'b [T],
        op: impl Into<RmaOp>,
    ) -> Result<RmaRequest<'b>> {
        self.rget_accumulate_inner(target, disp, data, None, op.into())
    }

    /// [`Window::get_accumulate`] as a request (`MPI_Rget_accumulate`):
    /// `result` holds the previous values once the request completed.
    pub fn rget_accumulate<'b>(
        &self,
        target: Rank,
        disp: usize,
        data: &'b [T],
        result: &'b mut [T],
        op: impl Into<RmaOp>,
    ) -> Result<RmaRequest<'b>> {
        if data.len() != result.len() {
            return Err(MpiError::InvalidBuffer(
                "rget_accumulate needs a result buffer as long as its data",
            ));
        }
        self.rget_accumulate_inner(target, disp, data, Some(result), op.into())
    }

    fn rget_accumulate_inner<'b>(
        &self,
        target: Rank,
        disp: usize,
        data: &'b [T],
        result: Option<&'b mut [T]>,
        op: RmaOp,
    ) -> Result<RmaRequest<'b>> {
        let spec = op.spec::<T>()?;
        let esize = std::mem::size_of::<T>();
        let (t, off) = self.core.target(target, disp, data.len(), esize)?;
        let ni = self.core.ni();
        let mut rop = OneOp::new(ni)?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let res = result.map(bytemuck::cast_slice_mut::<T, u8>);
        if bytes.is_empty() || (spec.is_none() && res.is_none()) {
            return Ok(RmaRequest::new(&self.core, t, rop, 0, None));
        }
        let chunk = self.atomic_chunk()?;
        let Some(res) = res else {
            // Accumulate only: acknowledged pieces from one copy.
            let Some(spec) = spec else {
                return Ok(RmaRequest::new(&self.core, t, rop, 0, None));
            };
            let md = rop.bind(MdOptions::CT_ACK, bytes.to_vec())?;
            let mut n = 0;
            for start in (0..bytes.len()).step_by(chunk) {
                self.core.keep_order(t, chunk)?;
                let len = chunk.min(bytes.len() - start) as u64;
                let remote = self.core.remote(t, off + start as u64);
                ni.atomic(md, start as u64, len, AckReq::Ack, &remote, 0, spec)
                    .map_err(MpiError::Portals)?;
                n += 1;
            }
            return Ok(RmaRequest::new(&self.core, t, rop, n, None));
        };
        let get_md = rop.bind(MdOptions::CT_REPLY, vec![0u8; bytes.len()])?;
        let Some(spec) = spec else {
            ni.get(get_md, &self.core.remote(t, off))
                .map_err(MpiError::Portals)?;
            return Ok(RmaRequest::new(&self.core, t, rop, 1, Some((res, get_md))));
        };
        let put_md = rop.bind(MdOptions::empty(), bytes.to_vec())?;
        let mut n = 0;
        for start in (0..bytes.len()).step_by(chunk) {
            self.core.keep_order(t, chunk)?;
            let len = chunk.min(bytes.len() - start) as u64;
            let remote = self.core.remote(t, off + start as u64);
            let s = start as u64;
            ni.fetch_atomic(get_md, s, put_md, s, len, &remote, 0, spec)
                .map_err(MpiError::Portals)?;
            n += 1;
        }
        Ok(RmaRequest::new(&self.core, t, rop, n, Some((res, get_md))))
    }
}
