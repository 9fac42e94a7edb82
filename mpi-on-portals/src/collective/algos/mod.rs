//! The collective algorithms, over point-to-point messages on the
//! communicator's collective context. Costs use the usual model: α per
//! message, β per byte moved, γ per byte combined, `n` processes, `m` bytes.
//! Here: what every algorithm uses (the exchange, the request set, the
//! thresholds and tags), barrier and broadcast; the reductions are in
//! `reduce`, gathers, scatters, all-gather and all-to-all in
//! `redistribute`.

use std::ops::Range;

use crate::comm::CommData;
use crate::datatype::Equivalence;
use crate::device::{Mode, SlotOp};
use crate::error::{MpiError, Result, COLLECTIVE_WRONG_SIZE};

mod redistribute;
mod reduce;

pub(crate) use redistribute::{all_gather, all_to_all, gather, gather_v, scatter, scatter_v};
pub(crate) use reduce::{all_reduce, reduce, scan};

pub(crate) const TAG_BARRIER: u32 = 1;
pub(crate) const TAG_BCAST: u32 = 2;
pub(crate) const TAG_REDUCE: u32 = 3;
pub(crate) const TAG_ALLREDUCE: u32 = 4;
pub(crate) const TAG_GATHER: u32 = 5;
pub(crate) const TAG_SCATTER: u32 = 6;
pub(crate) const TAG_ALLGATHER: u32 = 7;
pub(crate) const TAG_ALLTOALL: u32 = 8;
pub(crate) const TAG_SCAN: u32 = 9;

/// Broadcasts of at least this many bytes use scatter + all-gather.
pub(crate) const BCAST_LONG: usize = 512 << 10;
/// All-reductions of at least this many bytes use Rabenseifner's algorithm
/// (commutative operations only).
pub(crate) const ALLREDUCE_LONG: usize = 64 << 10;
/// Reductions to one root of at least this many bytes use Rabenseifner's
/// reduce-scatter + gather (commutative operations only).
pub(crate) const REDUCE_LONG: usize = 64 << 10;
/// Gathers and scatters of at most this many bytes in total use binomial
/// trees; larger ones go directly to or from the root.
pub(crate) const TREE_MAX: usize = 64 << 10;
/// All-to-alls of at most this many bytes per process post every transfer
/// at once; larger ones exchange pairwise.
pub(crate) const ALLTOALL_SHORT: usize = 32 << 10;

/// Point-to-point on the collective context.
pub(crate) struct Coll<'a> {
    pub(crate) c: &'a CommData,
}

fn bytes<T: Equivalence>(s: &[T]) -> &[u8] {
    bytemuck::cast_slice(s)
}

fn bytes_mut<T: Equivalence>(s: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(s)
}

impl Coll<'_> {
    fn world(&self, r: usize) -> u32 {
        self.c.ranks[r]
    }
}

impl Exchange for Coll<'_> {
    fn comm(&self) -> &CommData {
        self.c
    }

    /// Send `data` to communicator rank `dst`, blocking.
    fn send<T: Equivalence>(&self, dst: usize, tag: u32, data: &[T]) -> Result<()> {
        let b = bytes(data);
        // SAFETY: we wait for completion while `data` is borrowed.
        let id = unsafe {
            self.c.dev.isend(
                self.c.coll_ctx,
                self.c.me,
                self.world(dst),
                tag,
                b.as_ptr(),
                b.len(),
                Mode::Standard,
                None,
                false,
            )?
        };
        self.c.dev.wait(id).map(|_| ())
    }

    /// Receive exactly `buf.len()` elements from `src`, blocking.
    fn recv<T: Equivalence>(&self, src: usize, tag: u32, buf: &mut [T]) -> Result<()> {
        let want = std::mem::size_of_val(buf);
        let b = bytes_mut(buf);
        // SAFETY: we wait for completion while `buf` is borrowed.
        let id = unsafe {
            self.c.dev.irecv(
                self.c.coll_ctx,
                Some((src as u32, self.world(src))),
                Some(tag),
                b.as_mut_ptr(),
                b.len(),
            )?
        };
        let s = self.c.dev.wait(id)?;
        if s.count_bytes() != want {
            return Err(COLLECTIVE_WRONG_SIZE);
        }
        Ok(())
    }

    /// Send to `dst` and receive from `src` at the same time (no deadlock
    /// whatever the order the peers call in).
    fn sendrecv<T: Equivalence>(
        &self,
        dst: usize,
        out: &[T],
        src: usize,
        inc: &mut [T],
        tag: u32,
    ) -> Result<()> {
        let want = std::mem::size_of_val(inc);
        let ib = bytes_mut(inc);
        let ob = bytes(out);
        // SAFETY: both buffers stay borrowed until both requests are waited
        // for below (also on the error path).
        unsafe {
            let r = self.c.dev.irecv(
                self.c.coll_ctx,
                Some((src as u32, self.world(src))),
                Some(tag),
                ib.as_mut_ptr(),
                ib.len(),
            )?;
            let s = match self.c.dev.isend(
                self.c.coll_ctx,
                self.c.me,
                self.world(dst),
                tag,
                ob.as_ptr(),
                ob.len(),
                Mode::Standard,
                None,
                false,
            ) {
                Ok(s) => s,
                Err(e) => {
                    let _ = self.c.dev.cancel(r);
                    let _ = self.c.dev.wait(r);
                    return Err(e);
                }
            };
            let rs = self.c.dev.wait(r);
            let ss = self.c.dev.wait(s);
            let st = rs?;
            ss?;
            if st.count_bytes() != want {
                return Err(COLLECTIVE_WRONG_SIZE);
            }
        }
        Ok(())
    }
}

/// The messages of the algorithms that run on point-to-point messages and
/// on slots alike (see [`on_slots`]).
pub(crate) trait Exchange {
    /// The communicator.
    fn comm(&self) -> &CommData;
    /// Members.
    fn n(&self) -> usize {
        self.comm().ranks.len()
    }
    /// This process's rank.
    fn me(&self) -> usize {
        self.comm().me as usize
    }
    /// Send `data` to `dst`.
    fn send<T: Equivalence>(&self, dst: usize, tag: u32, data: &[T]) -> Result<()>;
    /// Receive exactly `buf.len()` elements from `src`.
    fn recv<T: Equivalence>(&self, src: usize, tag: u32, buf: &mut [T]) -> Result<()>;
    /// Send to `dst` and receive from `src`, whatever order the peers call
    /// in.
    fn sendrecv<T: Equivalence>(
        &self,
        dst: usize,
        out: &[T],
        src: usize,
        inc: &mut [T],
        tag: u32,
    ) -> Result<()>;
}

/// One instance of a collective on the communicator's slots
/// (`device/slots.rs`): each message is a put into the receiver's slot for
/// its sender. At most one message per ordered pair of members per
/// instance, which is what the algorithms run here send; tags are not
/// needed.
pub(crate) struct SlotColl<'a> {
    c: &'a CommData,
    op: SlotOp,
}

impl SlotColl<'_> {
    /// Whether the instance runs through one member (`SlotOp::flat`).
    pub(crate) fn flat(&self) -> bool {
        self.op.flat()
    }
}

impl Exchange for SlotColl<'_> {
    fn comm(&self) -> &CommData {
        self.c
    }
    fn send<T: Equivalence>(&self, dst: usize, _tag: u32, data: &[T]) -> Result<()> {
        self.c.dev.slots_send(self.op, dst, bytes(data))
    }
    fn recv<T: Equivalence>(&self, src: usize, _tag: u32, buf: &mut [T]) -> Result<()> {
        self.c.dev.slots_recv(self.op, src, bytes_mut(buf))
    }
    fn sendrecv<T: Equivalence>(
        &self,
        dst: usize,
        out: &[T],
        src: usize,
        inc: &mut [T],
        tag: u32,
    ) -> Result<()> {
        // A slot put never waits for its receiver, so sending first
        // cannot deadlock.
        self.send(dst, tag, out)?;
        self.recv(src, tag, inc)
    }
}

/// Run `f` as an instance on the slots of `c`'s communicator if they carry
/// messages of `bytes` bytes (`None` otherwise: the caller runs the
/// point-to-point version). Every member decides alike.
fn on_slots<R>(
    c: &Coll,
    bytes: usize,
    f: impl FnOnce(&SlotColl) -> Result<R>,
) -> Result<Option<R>> {
    let Some(op) = c.c.dev.slots_begin(c.c.ctx, bytes)? else {
        return Ok(None);
    };
    let r = f(&SlotColl { c: c.c, op }).and_then(|r| c.c.dev.slots_flush(op).map(|()| r));
    c.c.dev.slots_end(op);
    r.map(Some)
}

/// Two disjoint ranges of one slice, one to read and one to write.
fn split<T>(buf: &mut [T], read: Range<usize>, write: Range<usize>) -> (&[T], &mut [T]) {
    if read.is_empty() {
        return (&[], &mut buf[write]);
    }
    if write.is_empty() {
        return (&buf[read], &mut []);
    }
    debug_assert!(read.end <= write.start || write.end <= read.start);
    if read.start < write.start {
        let (a, b) = buf.split_at_mut(write.start);
        (&a[read], &mut b[..write.end - write.start])
    } else {
        let (a, b) = buf.split_at_mut(read.start);
        (&b[..read.end - read.start], &mut a[write])
    }
}

fn largest_pow2_le(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// Requests of a collective on buffers it borrows. Every way out of the
/// collective completes them: [`Reqs::wait_all`], or — on an early return
/// with an error — dropping the set, which cancels the receives and waits
/// for everything, so no buffer is given back while the engine may still
/// use it.
struct Reqs<'a> {
    dev: &'a crate::device::Device,
    /// Request, expected length (receives), and whether it is a receive.
    live: Vec<(crate::device::ReqId, usize, bool)>,
}

impl<'a> Reqs<'a> {
    fn new(c: &'a Coll) -> Self {
        Reqs {
            dev: &c.c.dev,
            live: Vec::new(),
        }
    }

    /// Wait for every request; the first error, once all are complete.
    fn wait_all(mut self) -> Result<()> {
        let mut first = None;
        for (id, len, is_recv) in std::mem::take(&mut self.live) {
            match self.dev.wait(id) {
                Ok(s) if !is_recv || s.count_bytes() == len => {}
                Ok(_) => {
                    first.get_or_insert(COLLECTIVE_WRONG_SIZE);
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Reqs<'_> {
    fn drop(&mut self) {
        for (id, _, is_recv) in self.live.drain(..) {
            if is_recv {
                let _ = self.dev.cancel(id);
            }
            if let Err(e) = self.dev.wait(id) {
                tracing::debug!(error = %e, "a request of a failed collective failed too");
            }
        }
    }
}

/// Post receives from `(rank, range)` pairs into `out`, adding them to
/// `reqs`.
fn post_recvs<T: Equivalence>(
    c: &Coll,
    tag: u32,
    from: impl Iterator<Item = (usize, Range<usize>)>,
    out: &mut [T],
    reqs: &mut Reqs,
) -> Result<()> {
    let n = out.len();
    let base = bytes_mut(out).as_mut_ptr();
    let size = std::mem::size_of::<T>();
    for (r, range) in from {
        if range.end > n {
            return Err(MpiError::InvalidBuffer("partition outside its buffer"));
        }
        let len = range.len() * size;
        // SAFETY: the ranges are disjoint parts of `out` (checked by the
        // callers' partitions), which stays borrowed as long as `reqs`, and
        // `reqs` completes every request before it goes away.
        let id = unsafe {
            c.c.dev.irecv(
                c.c.coll_ctx,
                Some((r as u32, c.world(r))),
                Some(tag),
                base.add(range.start * size),
                len,
            )?
        };
        reqs.live.push((id, len, true));
    }
    Ok(())
}

// ----- barrier -------------------------------------------------------------

/// Dissemination barrier: ⌈log₂ n⌉ rounds of one zero-byte exchange.
/// Cost ⌈log₂ n⌉ α.
pub(crate) fn barrier(c: &Coll) -> Result<()> {
    if let Some(()) = on_slots(c, 0, |s| {
        if s.flat() {
            gather_release(s)
        } else {
            dissemination(s)
        }
    })? {
        return Ok(());
    }
    dissemination(c)
}

/// A barrier through one member (see `SlotOp::flat`): everyone tells rank
/// 0 it arrived; rank 0, once all have, releases each.
fn gather_release<X: Exchange>(c: &X) -> Result<()> {
    let (n, me) = (c.n(), c.me());
    if me != 0 {
        c.send::<u8>(0, TAG_BARRIER, &[])?;
        return c.recv::<u8>(0, TAG_BARRIER, &mut []);
    }
    // Arrivals carry no data, so nothing can be wrong with one; a wait
    // that fails (a member died) fails every member's own wait as well.
    for src in 1..n {
        c.recv::<u8>(src, TAG_BARRIER, &mut [])?;
    }
    for dst in 1..n {
        c.send::<u8>(dst, TAG_BARRIER, &[])?;
    }
    Ok(())
}

pub(crate) fn dissemination<X: Exchange>(c: &X) -> Result<()> {
    let (n, me) = (c.n(), c.me());
    let mut k = 1;
    while k < n {
        c.sendrecv::<u8>((me + k) % n, &[], (me + n - k) % n, &mut [], TAG_BARRIER)?;
        k <<= 1;
    }
    Ok(())
}

// ----- broadcast -------------------------------------------------------------

/// Broadcast from `root`: a binomial tree for small messages
/// (⌈log₂ n⌉ (α + mβ)), scatter + ring all-gather for large ones
/// (≈ (log₂ n + n) α + 2 m β).
pub(crate) fn bcast(c: &Coll, root: usize, buf: &mut [u8]) -> Result<()> {
    let n = c.n();
    if n == 1 {
        return Ok(());
    }
    if buf.len() >= BCAST_LONG && n > 2 {
        return bcast_scatter_allgather(c, root, buf);
    }
    let vr = (c.me() + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            c.recv(real(vr - mask), TAG_BCAST, buf)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            c.send(real(vr + mask), TAG_BCAST, buf)?;
        }
        mask >>= 1;
    }
    Ok(())
}

fn bcast_scatter_allgather(c: &Coll, root: usize, buf: &mut [u8]) -> Result<()> {
    let (n, len) = (c.n(), buf.len());
    let vr = (c.me() + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let chunk = len.div_ceil(n);
    let block = |j: usize| -> Range<usize> { (j * chunk).min(len)..((j + 1) * chunk).min(len) };
    let blocks =
        |a: usize, b: usize| -> Range<usize> { (a * chunk).min(len)..(b * chunk).min(len) };
    // Binomial scatter: the subtree of relative rank v covers ranks
    // [v, v + mask) and receives exactly their blocks.
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            let r = blocks(vr, (vr + mask).min(n));
            c.recv(real(vr - mask), TAG_BCAST, &mut buf[r])?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            let r = blocks(vr + mask, (vr + 2 * mask).min(n));
            c.send(real(vr + mask), TAG_BCAST, &buf[r])?;
        }
        mask >>= 1;
    }
    // Ring all-gather of the blocks.
    let (right, left) = (real((vr + 1) % n), real((vr + n - 1) % n));
    for s in 0..n - 1 {
        let out = block((vr + n - s) % n);
        let inc = block((vr + n - s - 1) % n);
        let (o, i) = split(buf, out, inc);
        c.sendrecv(right, o, left, i, TAG_BCAST)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_handles_empty_and_ordered_ranges() {
        let mut v: Vec<u32> = (0..10).collect();
        let (r, w) = split(&mut v, 0..0, 0..5);
        assert_eq!((r.len(), w.len()), (0, 5));
        let (r, w) = split(&mut v, 2..4, 4..4);
        assert_eq!((r, w.len()), (&[2, 3][..], 0));
        let (r, w) = split(&mut v, 6..8, 1..3);
        assert_eq!(r, &[6, 7]);
        w.copy_from_slice(&[9, 9]);
        let (r, w) = split(&mut v, 1..3, 6..9);
        assert_eq!((r, w.len()), (&[9, 9][..], 3));
    }
}
