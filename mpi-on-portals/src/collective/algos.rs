//! The collective algorithms, over point-to-point messages on the
//! communicator's collective context. Costs use the usual model: α per
//! message, β per byte moved, γ per byte combined, `n` processes, `m` bytes.

use std::ops::Range;

use crate::comm::CommData;
use crate::datatype::Equivalence;
use crate::device::{Mode, SlotOp};
use crate::error::{MpiError, Result, COLLECTIVE_WRONG_SIZE};

use super::op::Operation;

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

// ----- barrier -------------------------------------------------------------

/// Dissemination barrier: ⌈log₂ n⌉ rounds of one zero-byte exchange.
/// Cost ⌈log₂ n⌉ α.
pub(crate) fn barrier(c: &Coll) -> Result<()> {
    if let Some(()) = on_slots(c, 0, |s| dissemination(s))? {
        return Ok(());
    }
    dissemination(c)
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

// ----- reduce ----------------------------------------------------------------

/// Reduce into `acc` at `root`. Short vectors and non-commutative
/// operations go along a binomial tree: ⌈log₂ n⌉ (α + mβ + mγ).
/// Commutative operations reduce towards the root directly; others towards
/// rank 0 in rank order (every partial result covers a contiguous block of
/// ranks), then move to the root. Long vectors with a commutative operation
/// use Rabenseifner's reduce-scatter + gather: ≈ (2 log₂ p + p) α + 2 m β +
/// m γ, where p is the largest power of two ≤ n (see
/// [`reduce_scatter_gather`]), so every rank moves and combines about m
/// bytes instead of m log₂ n.
pub(crate) fn reduce<T: Equivalence, O: Operation<T> + ?Sized>(
    c: &Coll,
    root: usize,
    acc: &mut [T],
    op: &O,
) -> Result<()> {
    let n = c.n();
    if n == 1 {
        return Ok(());
    }
    if std::mem::size_of_val(acc) >= REDUCE_LONG
        && op.is_commutative()
        && acc.len() >= largest_pow2_le(n)
    {
        return reduce_scatter_gather(c, root, acc, op);
    }
    let commutative = op.is_commutative();
    let top = if commutative { root } else { 0 };
    let vr = (c.me() + n - top) % n;
    let real = |v: usize| (v + top) % n;
    let mut tmp = vec![T::zeroed(); acc.len()];
    let mut mask = 1;
    while mask < n {
        if vr & mask == 0 {
            let src = vr | mask;
            if src < n {
                c.recv(real(src), TAG_REDUCE, &mut tmp)?;
                // `acc` covers lower ranks than `tmp`.
                op.apply(acc, &mut tmp);
                acc.copy_from_slice(&tmp);
            }
        } else {
            c.send(real(vr & !mask), TAG_REDUCE, acc)?;
            break;
        }
        mask <<= 1;
    }
    if top != root {
        if c.me() == top {
            c.send(root, TAG_REDUCE, acc)?;
        } else if c.me() == root {
            c.recv(top, TAG_REDUCE, acc)?;
        }
    }
    Ok(())
}

/// One step of recursive halving: the partner (among the survivors), the
/// block indices sent, and the block indices kept.
type HalvingStep = (usize, Range<usize>, Range<usize>);

/// The recursive-halving schedule of survivor `nr` among `pof2` ranks: per
/// step its partner (among the survivors), the range of block indices it
/// sends and the range it keeps (and combines into); and the block it ends
/// with, fully reduced. Blocks are the `pof2` near-equal parts of the
/// vector.
fn halving_schedule(nr: usize, pof2: usize) -> (Vec<HalvingStep>, usize) {
    let (mut send_idx, mut recv_idx, mut last_idx) = (0, 0, pof2);
    let mut steps = Vec::new();
    let mut mask = 1;
    while mask < pof2 {
        let partner = nr ^ mask;
        let half = pof2 / (mask * 2);
        let (s, r) = if nr < partner {
            send_idx = recv_idx + half;
            (send_idx..last_idx, recv_idx..send_idx)
        } else {
            recv_idx = send_idx + half;
            (send_idx..recv_idx, recv_idx..last_idx)
        };
        steps.push((partner, s, r));
        send_idx = recv_idx;
        mask <<= 1;
        if mask < pof2 {
            last_idx = recv_idx + pof2 / mask;
        }
    }
    (steps, recv_idx)
}

/// Rabenseifner's reduce for a commutative operation: fold onto the largest
/// power of two p ≤ n (the first 2·(n−p) ranks pair up, one of each pair
/// sits out); reduce-scatter by recursive halving, after which each of the
/// p survivors holds one p-th of the result; then every survivor sends its
/// block straight to the root. Cost ≈ (2 log₂ p + p) α + 2 m β + m γ.
fn reduce_scatter_gather<T: Equivalence, O: Operation<T> + ?Sized>(
    c: &Coll,
    root: usize,
    acc: &mut [T],
    op: &O,
) -> Result<()> {
    let count = acc.len();
    let (pof2, rem, newrank) = fold(c, acc, op, TAG_REDUCE)?;
    // Block b is elements bounds[b]..bounds[b + 1].
    let bounds: Vec<usize> = (0..=pof2)
        .map(|b| b * (count / pof2) + b.min(count % pof2))
        .collect();
    let span = |r: Range<usize>| bounds[r.start]..bounds[r.end];
    let mut held = None;
    if let Some(nr) = newrank {
        let (steps, block) = halving_schedule(nr, pof2);
        let mut tmp = vec![T::zeroed(); count];
        for (partner, s, r) in steps {
            let dst = unfold_rank(partner, rem);
            let (s, r) = (span(s), span(r));
            let rlen = r.len();
            c.sendrecv(dst, &acc[s], dst, &mut tmp[..rlen], TAG_REDUCE)?;
            op.apply(&tmp[..rlen], &mut acc[r]);
        }
        held = Some(span(block..block + 1));
    }
    if c.me() == root {
        let mut reqs = Reqs::new(c);
        let from = (0..pof2).filter(|&v| Some(v) != newrank).map(|v| {
            let b = halving_schedule(v, pof2).1;
            (unfold_rank(v, rem), span(b..b + 1))
        });
        post_recvs(c, TAG_REDUCE, from, acc, &mut reqs)?;
        reqs.wait_all()
    } else if let Some(r) = held {
        c.send(root, TAG_REDUCE, &acc[r])
    } else {
        Ok(())
    }
}

// ----- all-reduce ------------------------------------------------------------

/// Fold a non-power-of-two communicator onto the largest power of two
/// `pof2 ≤ n`: among the first `2·rem` ranks, even ranks hand their data to
/// the next odd rank and sit out. Returns this rank's index among the `pof2`
/// survivors (None if it sits out), keeping rank order.
fn fold<X: Exchange, T: Equivalence, O: Operation<T> + ?Sized>(
    c: &X,
    acc: &mut [T],
    op: &O,
    tag: u32,
) -> Result<(usize, usize, Option<usize>)> {
    let (n, me) = (c.n(), c.me());
    let pof2 = largest_pow2_le(n);
    let rem = n - pof2;
    let newrank = if me < 2 * rem {
        if me % 2 == 0 {
            c.send(me + 1, tag, acc)?;
            None
        } else {
            with_scratch(acc.len(), |tmp: &mut [T]| -> Result<()> {
                c.recv(me - 1, tag, tmp)?;
                op.apply(tmp, acc); // the even rank is the lower one
                Ok(())
            })?;
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    };
    Ok((pof2, rem, newrank))
}

fn unfold_rank(newrank: usize, rem: usize) -> usize {
    if newrank < rem {
        newrank * 2 + 1
    } else {
        newrank + rem
    }
}

/// All-reduce. Recursive doubling (log₂ n (α + mβ + mγ), any associative
/// operation, combining in rank order) for short vectors and non-commutative
/// operations; Rabenseifner's reduce-scatter + all-gather
/// (2 log₂ n α + 2 m β + m γ) for long vectors. Non-powers of two fold onto
/// the largest power of two first (one extra exchange each side).
pub(crate) fn all_reduce<T: Equivalence, O: Operation<T> + ?Sized>(
    c: &Coll,
    acc: &mut [T],
    op: &O,
) -> Result<()> {
    let n = c.n();
    if n == 1 {
        return Ok(());
    }
    let size = std::mem::size_of_val(acc);
    if let Some(()) = on_slots(c, size, |s| all_reduce_short(s, acc, op))? {
        return Ok(());
    }
    let long = size >= ALLREDUCE_LONG && op.is_commutative() && acc.len() >= largest_pow2_le(n);
    if !long {
        return all_reduce_short(c, acc, op);
    }
    let (pof2, rem, newrank) = fold(c, acc, op, TAG_ALLREDUCE)?;
    if let Some(nr) = newrank {
        rabenseifner(c, acc, op, pof2, rem, nr)?;
    }
    hand_back(c, acc)
}

/// Recursive doubling after the fold, then the hand-back.
fn all_reduce_short<X: Exchange, T: Equivalence, O: Operation<T> + ?Sized>(
    c: &X,
    acc: &mut [T],
    op: &O,
) -> Result<()> {
    let (pof2, rem, newrank) = fold(c, acc, op, TAG_ALLREDUCE)?;
    if let Some(nr) = newrank {
        with_scratch(acc.len(), |tmp: &mut [T]| -> Result<()> {
            let mut mask = 1;
            while mask < pof2 {
                let dst = unfold_rank(nr ^ mask, rem);
                c.sendrecv(dst, acc, dst, tmp, TAG_ALLREDUCE)?;
                if dst < c.me() {
                    op.apply(tmp, acc);
                } else {
                    op.apply(acc, tmp);
                    acc.copy_from_slice(tmp);
                }
                mask <<= 1;
            }
            Ok(())
        })?;
    }
    hand_back(c, acc)
}

/// Bytes of scratch a short collective takes from the stack instead of the
/// heap: as much as a slot carries.
const STACK_SCRATCH: usize = 256;

/// Run `f` on `len` zeroed elements of scratch: on the stack when they fit
/// in [`STACK_SCRATCH`] bytes (an 8-byte all-reduce spent about 300 of its
/// 6000 instructions allocating and freeing a vector), else on the heap.
fn with_scratch<T: Equivalence, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    #[repr(C, align(16))]
    struct Aligned([u8; STACK_SCRATCH]);
    let mut buf = Aligned([0; STACK_SCRATCH]);
    let size = std::mem::size_of::<T>();
    let bytes = len.saturating_mul(size);
    // Zero-sized elements: no bytes would make `len` of them.
    if size > 0 && bytes <= STACK_SCRATCH {
        // Fails only for an alignment above 16.
        if let Ok(tmp) = bytemuck::try_cast_slice_mut::<u8, T>(&mut buf.0[..bytes]) {
            return f(tmp);
        }
    }
    f(&mut vec![T::zeroed(); len])
}

/// Hand the result back to the ranks that sat out of the fold.
fn hand_back<X: Exchange, T: Equivalence>(c: &X, acc: &mut [T]) -> Result<()> {
    let pof2 = largest_pow2_le(c.n());
    let rem = c.n() - pof2;
    let me = c.me();
    if me < 2 * rem {
        if me % 2 == 1 {
            c.send(me - 1, TAG_ALLREDUCE, acc)?;
        } else {
            c.recv(me + 1, TAG_ALLREDUCE, acc)?;
        }
    }
    Ok(())
}

fn rabenseifner<T: Equivalence, O: Operation<T> + ?Sized>(
    c: &Coll,
    acc: &mut [T],
    op: &O,
    pof2: usize,
    rem: usize,
    nr: usize,
) -> Result<()> {
    let count = acc.len();
    let cnts: Vec<usize> = (0..pof2)
        .map(|i| count / pof2 + usize::from(i < count % pof2))
        .collect();
    let disps: Vec<usize> = cnts
        .iter()
        .scan(0, |s, &x| {
            let d = *s;
            *s += x;
            Some(d)
        })
        .collect();
    let span = |a: usize, b: usize| -> Range<usize> {
        let start = disps.get(a).copied().unwrap_or(count);
        let end = disps.get(b).copied().unwrap_or(count);
        start..end
    };
    let mut tmp = vec![T::zeroed(); count];
    // Reduce-scatter by recursive halving.
    let (mut send_idx, mut recv_idx, mut last_idx) = (0, 0, pof2);
    let mut mask = 1;
    while mask < pof2 {
        let newdst = nr ^ mask;
        let dst = unfold_rank(newdst, rem);
        let half = pof2 / (mask * 2);
        let (s, r) = if nr < newdst {
            send_idx = recv_idx + half;
            (span(send_idx, last_idx), span(recv_idx, send_idx))
        } else {
            recv_idx = send_idx + half;
            (span(send_idx, recv_idx), span(recv_idx, last_idx))
        };
        let rlen = r.len();
        c.sendrecv(dst, &acc[s], dst, &mut tmp[..rlen], TAG_ALLREDUCE)?;
        op.apply(&tmp[..rlen], &mut acc[r]);
        send_idx = recv_idx;
        mask <<= 1;
        if mask < pof2 {
            last_idx = recv_idx + pof2 / mask;
        }
    }
    // All-gather by recursive doubling.
    mask >>= 1;
    while mask > 0 {
        let newdst = nr ^ mask;
        let dst = unfold_rank(newdst, rem);
        let half = pof2 / (mask * 2);
        let (s, r) = if nr < newdst {
            if mask != pof2 / 2 {
                last_idx += half;
            }
            recv_idx = send_idx + half;
            (span(send_idx, recv_idx), span(recv_idx, last_idx))
        } else {
            recv_idx = send_idx - half;
            (span(send_idx, last_idx), span(recv_idx, send_idx))
        };
        let (o, i) = split(acc, s, r);
        c.sendrecv(dst, o, dst, i, TAG_ALLREDUCE)?;
        if nr > newdst {
            send_idx = recv_idx;
        }
        mask >>= 1;
    }
    Ok(())
}

// ----- gather / scatter --------------------------------------------------------

/// Gather equal blocks to `root`. A binomial tree for small totals
/// (⌈log₂ n⌉ α + (n−1)/n·m β at the root's link), direct sends for large
/// ones ((n−1) α + m β). `recv` (root only) holds n blocks in rank order.
pub(crate) fn gather<T: Equivalence>(
    c: &Coll,
    root: usize,
    send: &[T],
    recv: Option<&mut [T]>,
) -> Result<()> {
    let (n, me, blk) = (c.n(), c.me(), send.len());
    if n * std::mem::size_of_val(send) > TREE_MAX {
        return match recv {
            Some(out) => {
                out[root * blk..(root + 1) * blk].copy_from_slice(send);
                let mut reqs = Reqs::new(c);
                post_recvs(
                    c,
                    TAG_GATHER,
                    (0..n)
                        .filter(|&r| r != root)
                        .map(|r| (r, r * blk..(r + 1) * blk)),
                    out,
                    &mut reqs,
                )?;
                reqs.wait_all()
            }
            None => c.send(root, TAG_GATHER, send),
        };
    }
    let vr = (me + n - root) % n;
    let real = |v: usize| (v + root) % n;
    // Blocks of the subtree, in relative order.
    let mut tmp = vec![T::zeroed(); blk * n];
    tmp[..blk].copy_from_slice(send);
    let mut mask = 1;
    while mask < n {
        if vr & mask == 0 {
            let src = vr | mask;
            if src < n {
                let have = (src + mask).min(n) - src;
                let at = (src - vr) * blk;
                c.recv(real(src), TAG_GATHER, &mut tmp[at..at + have * blk])?;
            }
        } else {
            let have = (vr + mask).min(n) - vr;
            c.send(real(vr - mask), TAG_GATHER, &tmp[..have * blk])?;
            break;
        }
        mask <<= 1;
    }
    if let Some(out) = recv {
        for j in 0..n {
            let r = real(j);
            out[r * blk..(r + 1) * blk].copy_from_slice(&tmp[j * blk..(j + 1) * blk]);
        }
    }
    Ok(())
}

/// Scatter equal blocks from `root`: the mirror image of [`gather`].
pub(crate) fn scatter<T: Equivalence>(
    c: &Coll,
    root: usize,
    send: Option<&[T]>,
    recv: &mut [T],
) -> Result<()> {
    let (n, me, blk) = (c.n(), c.me(), recv.len());
    if n * std::mem::size_of_val(recv) > TREE_MAX {
        return match send {
            Some(all) => {
                for r in (0..n).filter(|&r| r != root) {
                    c.send(r, TAG_SCATTER, &all[r * blk..(r + 1) * blk])?;
                }
                recv.copy_from_slice(&all[root * blk..(root + 1) * blk]);
                Ok(())
            }
            None => c.recv(root, TAG_SCATTER, recv),
        };
    }
    let vr = (me + n - root) % n;
    let real = |v: usize| (v + root) % n;
    // Blocks of the subtree, in relative order (the root's: all of them).
    let mut tmp = vec![T::zeroed(); blk * n];
    if let Some(all) = send {
        for j in 0..n {
            let r = real(j);
            tmp[j * blk..(j + 1) * blk].copy_from_slice(&all[r * blk..(r + 1) * blk]);
        }
    }
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            let have = (vr + mask).min(n) - vr;
            c.recv(real(vr - mask), TAG_SCATTER, &mut tmp[..have * blk])?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            let give = (vr + 2 * mask).min(n) - (vr + mask);
            let at = mask * blk;
            c.send(real(vr + mask), TAG_SCATTER, &tmp[at..at + give * blk])?;
        }
        mask >>= 1;
    }
    recv.copy_from_slice(&tmp[..blk]);
    Ok(())
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

/// Gather blocks of different sizes to `root`: direct sends.
pub(crate) fn gather_v<T: Equivalence>(
    c: &Coll,
    root: usize,
    send: &[T],
    recv: Option<(&mut [T], &[usize], &[usize])>,
) -> Result<()> {
    match recv {
        Some((out, counts, displs)) => {
            let me = c.me();
            let mine = displs[me]..displs[me] + counts[me];
            if mine.len() != send.len() || mine.end > out.len() {
                return Err(MpiError::InvalidBuffer(
                    "the root's own count differs from its send buffer",
                ));
            }
            out[mine].copy_from_slice(send);
            let mut reqs = Reqs::new(c);
            post_recvs(
                c,
                TAG_GATHER,
                (0..c.n())
                    .filter(|&r| r != me)
                    .map(|r| (r, displs[r]..displs[r] + counts[r])),
                out,
                &mut reqs,
            )?;
            reqs.wait_all()
        }
        None => c.send(root, TAG_GATHER, send),
    }
}

/// Scatter blocks of different sizes from `root`: direct sends.
pub(crate) fn scatter_v<T: Equivalence>(
    c: &Coll,
    root: usize,
    send: Option<(&[T], &[usize], &[usize])>,
    recv: &mut [T],
) -> Result<()> {
    match send {
        Some((all, counts, displs)) => {
            let me = c.me();
            for r in (0..c.n()).filter(|&r| r != me) {
                c.send(r, TAG_SCATTER, &all[displs[r]..displs[r] + counts[r]])?;
            }
            let mine = displs[me]..displs[me] + counts[me];
            if mine.len() != recv.len() {
                return Err(MpiError::InvalidBuffer(
                    "the root's own count differs from its receive buffer",
                ));
            }
            recv.copy_from_slice(&all[mine]);
            Ok(())
        }
        None => c.recv(root, TAG_SCATTER, recv),
    }
}

// ----- all-gather -------------------------------------------------------------

/// All-gather of blocks (`counts[r]` elements at `displs[r]` of `out`; this
/// rank's block must already be in place). Recursive doubling for small,
/// equal blocks on a power of two (log₂ n α + (n−1)/n·m β); a ring
/// otherwise ((n−1) α + (n−1)/n·m β).
pub(crate) fn all_gather<T: Equivalence>(
    c: &Coll,
    out: &mut [T],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    let (n, me) = (c.n(), c.me());
    if n == 1 {
        return Ok(());
    }
    let equal = counts.iter().all(|&x| x == counts[0])
        && displs.iter().enumerate().all(|(i, &d)| d == i * counts[0]);
    let total: usize = counts.iter().sum::<usize>() * std::mem::size_of::<T>();
    if equal && n.is_power_of_two() && total <= TREE_MAX {
        let blk = counts[0];
        let mut mask = 1;
        while mask < n {
            let peer = me ^ mask;
            // Each side holds the `mask` blocks of its aligned group.
            let mine = (me & !(mask - 1)) * blk..((me & !(mask - 1)) + mask) * blk;
            let theirs = (peer & !(mask - 1)) * blk..((peer & !(mask - 1)) + mask) * blk;
            let (o, i) = split(out, mine, theirs);
            c.sendrecv(peer, o, peer, i, TAG_ALLGATHER)?;
            mask <<= 1;
        }
        return Ok(());
    }
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let range = |r: usize| displs[r]..displs[r] + counts[r];
    for s in 0..n - 1 {
        let o = range((me + n - s) % n);
        let i = range((me + n - s - 1) % n);
        let (ob, ib) = split(out, o, i);
        c.sendrecv(right, ob, left, ib, TAG_ALLGATHER)?;
    }
    Ok(())
}

// ----- all-to-all ---------------------------------------------------------------

/// All-to-all with `send_range(r)` of `send` going to rank r, and
/// `recv_range(r)` of `recv` coming from rank r. Small exchanges post every
/// transfer at once ((n−1) α overlapped); large ones go pairwise, partner
/// `me ± i` at step i, so each link carries one transfer at a time.
pub(crate) fn all_to_all<T: Equivalence>(
    c: &Coll,
    send: &[T],
    send_range: &dyn Fn(usize) -> Range<usize>,
    recv: &mut [T],
    recv_range: &dyn Fn(usize) -> Range<usize>,
) -> Result<()> {
    let (n, me) = (c.n(), c.me());
    let (sm, rm) = (send_range(me), recv_range(me));
    if sm.len() != rm.len() {
        return Err(MpiError::InvalidBuffer(
            "this rank sends itself a different count than it receives",
        ));
    }
    recv[rm].copy_from_slice(&send[sm]);
    if n == 1 {
        return Ok(());
    }
    let per_rank = std::mem::size_of_val(send) / n.max(1);
    if per_rank <= ALLTOALL_SHORT {
        let mut reqs = Reqs::new(c);
        post_recvs(
            c,
            TAG_ALLTOALL,
            (1..n).map(|i| (me + n - i) % n).map(|r| (r, recv_range(r))),
            recv,
            &mut reqs,
        )?;
        for i in 1..n {
            let dst = (me + i) % n;
            let b = bytes(&send[send_range(dst)]);
            // SAFETY: `send` stays borrowed as long as `reqs`, which
            // completes every request before it goes away.
            let id = unsafe {
                c.c.dev.isend(
                    c.c.coll_ctx,
                    c.c.me,
                    c.world(dst),
                    TAG_ALLTOALL,
                    b.as_ptr(),
                    b.len(),
                    Mode::Standard,
                    None,
                    false,
                )?
            };
            reqs.live.push((id, 0, false));
        }
        return reqs.wait_all();
    }
    for i in 1..n {
        let dst = (me + i) % n;
        let src = (me + n - i) % n;
        let rr = recv_range(src);
        c.sendrecv(
            dst,
            &send[send_range(dst)],
            src,
            &mut recv[rr],
            TAG_ALLTOALL,
        )?;
    }
    Ok(())
}

// ----- scans -----------------------------------------------------------------------

/// Inclusive (`exclusive` = false) or exclusive prefix reduction, by
/// recursive doubling: ⌈log₂ n⌉ (α + mβ + 2mγ), combining in rank order.
/// With `exclusive`, rank 0's `acc` is left as it was.
pub(crate) fn scan<T: Equivalence, O: Operation<T> + ?Sized>(
    c: &Coll,
    acc: &mut [T],
    op: &O,
    exclusive: bool,
) -> Result<()> {
    let (n, me) = (c.n(), c.me());
    let mut partial = acc.to_vec();
    let mut have = !exclusive;
    let mut tmp = vec![T::zeroed(); acc.len()];
    let mut mask = 1;
    while mask < n {
        let dst = me + mask;
        let src = me.checked_sub(mask);
        match (dst < n, src) {
            (true, Some(s)) => c.sendrecv(dst, &partial, s, &mut tmp, TAG_SCAN)?,
            (true, None) => c.send(dst, TAG_SCAN, &partial)?,
            (false, Some(s)) => c.recv(s, TAG_SCAN, &mut tmp)?,
            (false, None) => {}
        }
        if src.is_some() {
            // What came from below covers lower ranks.
            op.apply(&tmp, &mut partial);
            if have {
                op.apply(&tmp, acc);
            } else {
                acc.copy_from_slice(&tmp);
                have = true;
            }
        }
        mask <<= 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{halving_schedule, split, with_scratch, STACK_SCRATCH};

    #[test]
    fn scratch_is_zeroed_and_as_long_as_asked_on_the_stack_and_on_the_heap() {
        let fits = STACK_SCRATCH / 8;
        for len in [0, 1, fits, fits + 1, 1000] {
            let (n, zero, on_stack) = with_scratch(len, |t: &mut [u64]| {
                let z = t.iter().all(|&x| x == 0);
                t.fill(7);
                let addr = t.as_ptr() as usize;
                let here = &len as *const usize as usize;
                (t.len(), z, addr.abs_diff(here) < 64 * 1024)
            });
            assert_eq!((n, zero), (len, true), "{len}");
            if len > 0 {
                assert_eq!(on_stack, len <= fits, "{len} elements on the stack");
            }
        }
        // A second call gets zeroes again, not the last call's sevens.
        assert!(with_scratch(4, |t: &mut [u64]| t.iter().all(|&x| x == 0)));
        assert_eq!(with_scratch(3, |t: &mut [()]| t.len()), 3);
        assert_eq!(with_scratch(2, |t: &mut [[u8; 3]]| t.len()), 2);
    }

    #[test]
    fn halving_leaves_every_block_with_exactly_one_survivor() {
        for pof2 in [1usize, 2, 4, 8, 16, 64] {
            let mut owners = vec![None; pof2];
            for nr in 0..pof2 {
                let (steps, block) = halving_schedule(nr, pof2);
                assert_eq!(steps.len(), pof2.trailing_zeros() as usize);
                assert!(owners[block].replace(nr).is_none(), "block {block} twice");
                // Each step keeps half of what the previous one kept, and
                // ends on the final block; partners mirror each other.
                let mut kept = 0..pof2;
                for (partner, s, r) in &steps {
                    assert_eq!(s.len(), r.len());
                    assert!(r.start >= kept.start && r.end <= kept.end);
                    assert!(s.start >= kept.start && s.end <= kept.end);
                    let theirs = halving_schedule(*partner, pof2).0;
                    let mirror = theirs.iter().find(|t| t.0 == nr).expect("partner step");
                    assert_eq!((&mirror.1, &mirror.2), (r, s));
                    kept = r.clone();
                }
                assert_eq!(kept, block..block + 1);
            }
        }
    }

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
