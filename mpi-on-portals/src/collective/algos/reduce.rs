//! The reductions: to one root, to every process (all-reduce), and the
//! prefix reductions (scans).

use std::ops::Range;

use crate::datatype::Equivalence;
use crate::error::{Result, COLLECTIVE_WRONG_SIZE};

use crate::collective::op::Operation;

use super::{
    largest_pow2_le, on_slots, post_recvs, split, Coll, Exchange, Reqs, ALLREDUCE_LONG,
    REDUCE_LONG, TAG_ALLREDUCE, TAG_REDUCE, TAG_SCAN,
};

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
    if let Some(()) = on_slots(c, size, |s| {
        if s.flat() {
            all_reduce_flat(s, acc, op)
        } else {
            all_reduce_short(s, acc, op)
        }
    })? {
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

/// All-reduce through one member (see `SlotOp::flat`): everyone sends its
/// vector to rank 0, which combines them in rank order (so any associative
/// operation gives what recursive doubling gives) and sends the result to
/// each.
fn all_reduce_flat<X: Exchange, T: Equivalence, O: Operation<T> + ?Sized>(
    c: &X,
    acc: &mut [T],
    op: &O,
) -> Result<()> {
    let (n, me) = (c.n(), c.me());
    if me != 0 {
        c.send(0, TAG_ALLREDUCE, acc)?;
        return c.recv(0, TAG_ALLREDUCE, acc);
    }
    // A contribution of the wrong length (a member that disagrees on it:
    // an erroneous program) must not leave the members waiting for an
    // answer, nor hand them a result without it: rank 0 still takes every
    // slot of the instance, then answers every member with an empty
    // message (one byte when its own vector is empty), which no member
    // that agreed with it takes, so each gets the same error (recursive
    // doubling, which this replaces, let each member of a pair see it) and
    // the communicator stays usable. A member that disagreed and expects
    // exactly that length would take it: a one-byte datatype against an
    // empty one, the rarest of erroneous programs. Any other failure (a
    // member died) fails every member's own wait as well (see
    // `Device::slots_recv`).
    let mut wrong = false;
    with_scratch(acc.len(), |tmp: &mut [T]| -> Result<()> {
        for src in 1..n {
            match c.recv(src, TAG_ALLREDUCE, tmp) {
                Ok(()) => {
                    // tmp = acc ∘ tmp: the lower ranks' part on the left.
                    op.apply(acc, tmp);
                    acc.copy_from_slice(tmp);
                }
                Err(e) if e == COLLECTIVE_WRONG_SIZE => wrong = true,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })?;
    let refusal: &[u8] = if acc.is_empty() { &[0] } else { &[] };
    for dst in 1..n {
        if wrong {
            c.send::<u8>(dst, TAG_ALLREDUCE, refusal)?;
        } else {
            c.send(dst, TAG_ALLREDUCE, acc)?;
        }
    }
    if wrong {
        return Err(COLLECTIVE_WRONG_SIZE);
    }
    Ok(())
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
    use super::{halving_schedule, with_scratch, STACK_SCRATCH};

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
}
