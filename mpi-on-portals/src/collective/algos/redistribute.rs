//! Moving blocks without combining them: gather and scatter (equal and
//! varying blocks), all-gather and all-to-all.

use std::ops::Range;

use crate::datatype::Equivalence;
use crate::device::Mode;
use crate::error::{MpiError, Result};

use super::{
    bytes, post_recvs, split, Coll, Exchange, Reqs, ALLTOALL_SHORT, TAG_ALLGATHER, TAG_ALLTOALL,
    TAG_GATHER, TAG_SCATTER, TREE_MAX,
};

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
