//! The communication calls of a window (`MPI_Put`, `MPI_Get`,
//! `MPI_Accumulate`, `MPI_Get_accumulate`, `MPI_Fetch_and_op`,
//! `MPI_Compare_and_swap`) and the flushes that complete them.

use portals::{
    AckReq, AtomicOp, AtomicSpec, CtHandle, MdDesc, MdHandle, MdOptions, NetworkInterface,
    PtlError, Remote, Unlink,
};

use super::{release_md, AtomicElement, RmaOp, WinCore, Window, COPY_LIMIT, WIN_PT};
use crate::comm::Rank;
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

/// Atomics up to this many bytes travel in one datagram or frame on every
/// transport, so one origin's are applied in the order sent; longer ones
/// (an interface configured with a larger `max_atomic_size`) wait for the
/// earlier ones' acknowledgments.
const ORDERED_ATOMIC_BYTES: usize = 1024;

/// Copied descriptors per target before acknowledged ones are reclaimed
/// without a flush.
const REAP_AT: usize = 64;

fn ptl(e: PtlError) -> MpiError {
    MpiError::Portals(e)
}

/// One operation waited for before its call returns: its own counting
/// event and descriptors, released on drop (also on errors), so that no
/// descriptor over caller memory outlives the call.
pub(super) struct OneOp<'a> {
    ni: &'a NetworkInterface,
    ct: CtHandle,
    mds: Vec<MdHandle>,
}

impl<'a> OneOp<'a> {
    pub(super) fn new(ni: &'a NetworkInterface) -> Result<Self> {
        Ok(OneOp {
            ni,
            ct: ni.ct_alloc().map_err(ptl)?,
            mds: Vec::new(),
        })
    }

    /// A descriptor owning `buf`, counting `opts` events.
    pub(super) fn bind(&mut self, opts: MdOptions, buf: Vec<u8>) -> Result<MdHandle> {
        let md = self
            .ni
            .md_bind(&MdDesc::new(opts).ct(self.ct), buf, Unlink::Retain)
            .map_err(ptl)?;
        self.mds.push(md);
        Ok(md)
    }

    /// A descriptor over `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` stays valid, and untouched by anyone but the
    /// engine (only read by it, for a source), until this value drops.
    pub(super) unsafe fn bind_raw(
        &mut self,
        opts: MdOptions,
        ptr: *mut u8,
        len: usize,
    ) -> Result<MdHandle> {
        // SAFETY: forwarded from our caller; `drop` unlinks the descriptor
        // (retrying while in use) before the memory can go.
        let md = unsafe {
            self.ni
                .md_bind_raw(&MdDesc::new(opts).ct(self.ct), ptr, len, Unlink::Retain)
        }
        .map_err(ptl)?;
        self.mds.push(md);
        Ok(md)
    }

    /// Wait for `n` counted events; a failed one fails the operation.
    pub(super) fn wait(&self, n: u64, target: u32) -> Result<()> {
        let v = self.ni.ct_wait(self.ct, n, None).map_err(ptl)?;
        if v.failure > 0 {
            return Err(MpiError::RmaFailed {
                rank: target as Rank,
                why: "the target refused the operation or could not be reached".into(),
            });
        }
        Ok(())
    }

    /// Hand the counter and descriptors over (to a request).
    pub(super) fn into_parts(self) -> (CtHandle, Vec<MdHandle>) {
        let mut me = std::mem::ManuallyDrop::new(self);
        (me.ct, std::mem::take(&mut me.mds))
    }
}

impl Drop for OneOp<'_> {
    fn drop(&mut self) {
        for md in self.mds.drain(..) {
            release_md(self.ni, md);
        }
        if let Err(e) = self.ni.ct_free(self.ct) {
            tracing::warn!(error = %e, "could not free an RMA counter");
        }
    }
}

/// Where an access lands at its target: the entry's match bits and the
/// offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Loc {
    pub(super) bits: u64,
    pub(super) off: u64,
}

impl std::ops::Add<u64> for Loc {
    type Output = Loc;
    fn add(self, by: u64) -> Loc {
        Loc {
            bits: self.bits,
            off: self.off + by,
        }
    }
}

impl WinCore {
    /// Compare-and-swap one `U` at `off` of rank index `t`'s exposure; the
    /// previous value. The request and the reply share one descriptor:
    /// the new value after the `U` the old one lands in.
    pub(super) fn compare_and_swap<U: AtomicElement>(
        &self,
        t: u32,
        off: Loc,
        compare: &U,
        value: &U,
    ) -> Result<U> {
        let sz = std::mem::size_of::<U>();
        let ni = self.ni();
        let mut op = OneOp::new(ni)?;
        let mut buf = vec![0u8; 2 * sz];
        buf[sz..].copy_from_slice(bytemuck::bytes_of(value));
        let md = op.bind(MdOptions::CT_REPLY, buf)?;
        let spec = AtomicSpec {
            op: AtomicOp::Cswap,
            datatype: U::DATATYPE,
        };
        ni.swap(
            md,
            0,
            md,
            sz as u64,
            sz as u64,
            &self.remote(t, off),
            0,
            Some(bytemuck::bytes_of(compare)),
            spec,
        )
        .map_err(ptl)?;
        op.wait(1, t)?;
        let mut out = U::zeroed();
        ni.md_read(md, 0, bytemuck::bytes_of_mut(&mut out))
            .map_err(ptl)?;
        Ok(out)
    }

    pub(super) fn remote(&self, t: u32, at: Loc) -> Remote {
        Remote::new(self.ids[t as usize], WIN_PT, at.bits).with_offset(at.off)
    }

    /// Check an access of `n` elements of `esize` bytes at `disp` on rank
    /// `target`: the rank, the epoch, the range. Returns the rank index
    /// and where the bytes are (a dynamic window looks `disp`, an
    /// address, up in the target's region table).
    pub(super) fn target(
        &self,
        target: Rank,
        disp: usize,
        n: usize,
        esize: usize,
    ) -> Result<(u32, Loc)> {
        let t = self.rank(target)?;
        if !self.lock().epochs.covers(t) {
            return Err(MpiError::RmaEpoch(format!(
                "no access epoch covers rank {target}: lock it, lock_all, fence, or start a group containing it"
            )));
        }
        if self.dynamic {
            return Ok((t, self.resolve(t, disp, n, esize)?));
        }
        let size = self.sizes[t as usize] as usize / esize;
        if disp.checked_add(n).is_none_or(|end| end > size) {
            return Err(MpiError::RmaRange {
                rank: target,
                disp,
                len: n,
                size,
            });
        }
        Ok((
            t,
            Loc {
                bits: self.data_bits,
                off: (disp * esize) as u64,
            },
        ))
    }

    /// Send `bytes` (copied into a window-owned descriptor) with `issue`
    /// to target `t`; completed remotely by the next flush of `t`.
    pub(super) fn buffered(
        &self,
        t: u32,
        bytes: Vec<u8>,
        issue: impl FnOnce(&NetworkInterface, MdHandle) -> portals::Result<()>,
    ) -> Result<()> {
        let ni = self.ni();
        let mut st = self.lock();
        let p = &mut st.pending[t as usize];
        let ct = match p.ct {
            Some(c) => c,
            None => {
                let c = ni.ct_alloc().map_err(ptl)?;
                p.ct = Some(c);
                c
            }
        };
        if p.mds.len() >= REAP_AT {
            let v = ni.ct_get(ct).map_err(ptl)?;
            if v.success + v.failure >= p.issued {
                for md in p.mds.drain(..) {
                    release_md(ni, md);
                }
            }
        }
        let md = ni
            .md_bind(
                &MdDesc::new(MdOptions::CT_ACK).ct(ct),
                bytes,
                Unlink::Retain,
            )
            .map_err(ptl)?;
        if let Err(e) = issue(ni, md) {
            release_md(ni, md);
            return Err(ptl(e));
        }
        p.issued += 1;
        p.mds.push(md);
        Ok(())
    }

    /// Before an atomic piece of `chunk` bytes to `t`: a payload this long
    /// may span datagrams, whose data UDP completes in any order, so only
    /// the earlier operations' acknowledgments keep accumulates in order.
    pub(super) fn keep_order(&self, t: u32, chunk: usize) -> Result<()> {
        if chunk > ORDERED_ATOMIC_BYTES {
            self.flush(t)?;
        }
        Ok(())
    }

    /// Wait until every operation to `t` completed at `t` (`MPI_Win_flush`).
    pub(super) fn flush(&self, t: u32) -> Result<()> {
        let ni = self.ni();
        let (ct, issued, kept, reqs) = {
            let st = self.lock();
            let p = &st.pending[t as usize];
            let reqs: Vec<(CtHandle, u64)> = st
                .requests
                .iter()
                .filter(|r| r.1 == t)
                .map(|r| (r.2, r.3))
                .collect();
            (p.ct, p.issued, p.mds.len(), reqs)
        };
        let mut failed = false;
        if let Some(ct) = ct {
            let v = ni.ct_wait(ct, issued, None).map_err(ptl)?;
            let mut st = self.lock();
            let p = &mut st.pending[t as usize];
            if v.failure > p.failed_seen {
                p.failed_seen = v.failure;
                failed = true;
            }
            let n = kept.min(p.mds.len());
            for md in p.mds.drain(..n) {
                release_md(ni, md);
            }
        }
        for (ct, n) in reqs {
            // A request completed meanwhile frees its counter: done too.
            match ni.ct_wait(ct, n, None) {
                Ok(_) | Err(PtlError::InvalidHandle { .. }) => {}
                Err(e) => return Err(ptl(e)),
            }
        }
        if failed {
            return Err(MpiError::RmaFailed {
                rank: t as Rank,
                why: "an earlier put or accumulate was refused by the target or lost".into(),
            });
        }
        Ok(())
    }
}

impl<T: Equivalence> Window<'_, T> {
    fn esize() -> usize {
        std::mem::size_of::<T>()
    }

    /// Put `data` into rank `target`'s window at element `disp`
    /// (`MPI_Put`). Returns when `data` may be reused: at once for up to
    /// [`COPY_LIMIT`] bytes (copied; completed at the target by the next
    /// flush, unlock or fence), else once the target acknowledged it.
    pub fn put(&self, target: Rank, disp: usize, data: &[T]) -> Result<()> {
        let (t, off) = self.core.target(target, disp, data.len(), Self::esize())?;
        if data.is_empty() {
            return Ok(());
        }
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let remote = self.core.remote(t, off);
        if bytes.len() <= COPY_LIMIT {
            return self.core.buffered(t, bytes.to_vec(), |ni, md| {
                ni.put(md, AckReq::Ack, &remote, 0)
            });
        }
        let ni = self.core.ni();
        let mut op = OneOp::new(ni)?;
        // SAFETY: `data` is borrowed until this call returns, after `op`
        // dropped its descriptor; a put only reads it.
        let md = unsafe { op.bind_raw(MdOptions::CT_ACK, bytes.as_ptr() as *mut u8, bytes.len())? };
        ni.put(md, AckReq::Ack, &remote, 0).map_err(ptl)?;
        op.wait(1, t)
    }

    /// Get elements `disp..disp + buf.len()` of rank `target`'s window
    /// into `buf` (`MPI_Get`); returns with the data.
    pub fn get(&self, target: Rank, disp: usize, buf: &mut [T]) -> Result<()> {
        let (t, off) = self.core.target(target, disp, buf.len(), Self::esize())?;
        if buf.is_empty() {
            return Ok(());
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let ni = self.core.ni();
        let mut op = OneOp::new(ni)?;
        // SAFETY: `buf` is borrowed mutably until this call returns, after
        // `op` dropped its descriptor.
        let md = unsafe { op.bind_raw(MdOptions::CT_REPLY, bytes.as_mut_ptr(), bytes.len())? };
        ni.get(md, &self.core.remote(t, off)).map_err(ptl)?;
        op.wait(1, t)
    }

    /// Complete every operation of this process to `target` at the target
    /// (`MPI_Win_flush`).
    pub fn flush(&self, target: Rank) -> Result<()> {
        let t = self.core.rank(target)?;
        self.core.flush(t)
    }

    /// [`Window::flush`] to every rank (`MPI_Win_flush_all`).
    pub fn flush_all(&self) -> Result<()> {
        let mut first = Ok(());
        for t in 0..self.core.size() {
            let r = self.core.flush(t);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Local completion (`MPI_Win_flush_local`). Blocking calls are
    /// locally complete when they return and requests when waited for, so
    /// this completes remotely, as [`Window::flush`] does (stronger, and
    /// what reclaims the copies).
    pub fn flush_local(&self, target: Rank) -> Result<()> {
        self.flush(target)
    }

    /// [`Window::flush_local`] to every rank (`MPI_Win_flush_local_all`).
    pub fn flush_local_all(&self) -> Result<()> {
        self.flush_all()
    }

    /// `MPI_Win_sync`. The owner reaches its memory only through the
    /// engine (see the module docs), so the public and private copies are
    /// one; what remains is a shared window's direct loads and stores
    /// ([`Window::shared_query`]), which a full memory fence orders with
    /// the other processes' accesses.
    pub fn sync(&self) -> Result<()> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

impl<T: AtomicElement> Window<'_, T> {
    /// Combine `data` into rank `target`'s window at `disp` with `op`
    /// (`MPI_Accumulate`), element-wise atomically. Copied; completed at
    /// the target by the next flush. Longer than the interface's
    /// `max_atomic_size`, it goes in element-aligned pieces.
    pub fn accumulate(
        &self,
        target: Rank,
        disp: usize,
        data: &[T],
        op: impl Into<RmaOp>,
    ) -> Result<()> {
        let spec = op.into().spec::<T>()?;
        let (t, off) = self.core.target(target, disp, data.len(), Self::esize())?;
        let Some(spec) = spec else {
            return Ok(()); // MPI_NO_OP leaves the target alone
        };
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let chunk = self.atomic_chunk()?;
        for (i, piece) in bytes.chunks(chunk).enumerate() {
            self.core.keep_order(t, chunk)?;
            let remote = self.core.remote(t, off + (i * chunk) as u64);
            let len = piece.len() as u64;
            self.core.buffered(t, piece.to_vec(), |ni, md| {
                ni.atomic(md, 0, len, AckReq::Ack, &remote, 0, spec)
            })?;
        }
        Ok(())
    }

    /// Bytes per atomic piece: the largest whole number of elements within
    /// the interface's `max_atomic_size`.
    pub(super) fn atomic_chunk(&self) -> Result<usize> {
        let max = self.core.ni().limits().max_atomic_size as usize;
        let n = max / Self::esize();
        if n == 0 {
            return Err(MpiError::RmaUnsupported(format!(
                "the interface's max_atomic_size ({max} bytes) is below one element"
            )));
        }
        Ok(n * Self::esize())
    }

    /// Combine `data` into rank `target`'s window at `disp` with `op` and
    /// return the previous values in `result` (`MPI_Get_accumulate`);
    /// returns with them. With [`RmaOp::NoOp`] only fetches.
    pub fn get_accumulate(
        &self,
        target: Rank,
        disp: usize,
        data: &[T],
        result: &mut [T],
        op: impl Into<RmaOp>,
    ) -> Result<()> {
        let spec = op.into().spec::<T>()?;
        if data.len() != result.len() {
            return Err(MpiError::InvalidBuffer(
                "get_accumulate needs a result buffer as long as its data",
            ));
        }
        let (t, off) = self.core.target(target, disp, data.len(), Self::esize())?;
        if data.is_empty() {
            return Ok(());
        }
        let ni = self.core.ni();
        let mut op = OneOp::new(ni)?;
        let res: &mut [u8] = bytemuck::cast_slice_mut(result);
        // SAFETY: `result` is borrowed mutably until this call returns,
        // after `op` dropped its descriptor.
        let get_md = unsafe { op.bind_raw(MdOptions::CT_REPLY, res.as_mut_ptr(), res.len())? };
        let Some(spec) = spec else {
            ni.get(get_md, &self.core.remote(t, off)).map_err(ptl)?;
            return op.wait(1, t);
        };
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let put_md = op.bind(MdOptions::empty(), bytes.to_vec())?;
        let chunk = self.atomic_chunk()?;
        let mut n = 0;
        for start in (0..bytes.len()).step_by(chunk) {
            self.core.keep_order(t, chunk)?;
            let len = chunk.min(bytes.len() - start) as u64;
            let remote = self.core.remote(t, off + start as u64);
            let s = start as u64;
            ni.fetch_atomic(get_md, s, put_md, s, len, &remote, 0, spec)
                .map_err(ptl)?;
            n += 1;
        }
        op.wait(n, t)
    }

    /// Apply `op` with `value` to element `disp` of rank `target`'s window
    /// and return its previous value (`MPI_Fetch_and_op`).
    pub fn fetch_and_op(
        &self,
        target: Rank,
        disp: usize,
        value: &T,
        op: impl Into<RmaOp>,
    ) -> Result<T> {
        let mut out = [T::zeroed()];
        self.get_accumulate(target, disp, std::slice::from_ref(value), &mut out, op)?;
        Ok(out[0])
    }

    /// Replace element `disp` of rank `target`'s window with `value` if it
    /// equals `compare`; return its previous value either way
    /// (`MPI_Compare_and_swap`).
    pub fn compare_and_swap(&self, target: Rank, disp: usize, compare: &T, value: &T) -> Result<T> {
        let (t, off) = self.core.target(target, disp, 1, Self::esize())?;
        self.core.compare_and_swap(t, off, compare, value)
    }
}
