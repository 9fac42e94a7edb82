//! The flat non-blocking collectives at rsmpi's names: gather, scatter,
//! all-gather, all-to-all (and varcount forms), reduce, scan, exclusive
//! scan and reduce-scatter (equal blocks or not). Each start checks its
//! arguments, copies this process's own block locally, and hands the rest to the device as
//! one plan of triggered puts or atomics (`device/nbc/flat.rs`), which
//! the transport's progress thread runs while every application thread
//! computes or sleeps. Reductions with an operation the engine has no
//! atomic for (user-defined operations, `u128`) run the blocking algorithm
//! in the start and return a completed request.

use super::{
    algos, check_blocks, coll, same_len, Elements, ElementsMut, Operation, Partition, PartitionMut,
    Root,
};
use crate::comm::{CommData, Communicator};
use crate::datatype::Equivalence;
use crate::device::FlatPlan;
use crate::error::{MpiError, Result};
use crate::request::{Request, Scope};

fn bytes<T: Equivalence>(s: &[T]) -> (*const u8, usize) {
    (s.as_ptr().cast(), std::mem::size_of_val(s))
}

fn at<T: Equivalence>(s: &mut [T], from: usize, count: usize) -> (*mut u8, usize) {
    let blk = &mut s[from..from + count];
    (blk.as_mut_ptr().cast(), std::mem::size_of_val(blk))
}

/// A plan with nothing in it (filled in by each collective).
fn plan(notifiers: usize, notify: bool, src: (*const u8, usize)) -> FlatPlan {
    FlatPlan {
        notifiers: notifiers as u32,
        notify,
        recv: Vec::new(),
        acc: None,
        src,
        sends: Vec::new(),
        spec: None,
        forward: None,
        owned: None,
    }
}

/// Start `plan` on `c`.
///
/// # Safety
/// The regions of `plan` must be borrowed for `'a` (receiving ones
/// mutably), so that the scope completes the request before they can be
/// used again.
unsafe fn start<'a>(c: &CommData, scope: &Scope<'a>, plan: FlatPlan) -> Result<Request<'a>> {
    // SAFETY: forwarded from our caller.
    let id = c
        .dev
        .collective_post(|| unsafe { c.dev.iflat(c.ctx, plan) })?;
    Ok(Request::new(c.dev.clone(), id, false, scope))
}

/// A request that completed in its start (the blocking fallback).
fn done(c: &CommData) -> Request<'static> {
    Request::unscoped(c.dev.clone(), c.dev.completed_req())
}

fn sz<T>() -> usize {
    std::mem::size_of::<T>()
}

/// The start of a rooted collective at the root (`true`) or elsewhere.
fn rooted(c: &CommData, root: Result<usize>, at_root: bool, what: &'static str) -> Result<usize> {
    let root = root?;
    if (root == c.me as usize) != at_root {
        return Err(MpiError::InvalidBuffer(what));
    }
    Ok(root)
}

/// Non-blocking collectives every member calls, at rsmpi's names (its
/// `CommunicatorCollectives`' `immediate_*` methods; the barrier and the
/// all-reduce are in [`super::CommunicatorCollectives`]). Every member
/// starts the same collectives in the same order; any number may be
/// outstanding. The buffers are lent until the request completes.
pub trait ImmediateCollectives: Communicator {
    /// Start an all-gather (`MPI_Iallgather`): every member's `send`
    /// block, in rank order, lands in every member's `recv`, which holds
    /// `size × send.len()` elements.
    fn immediate_all_gather_into<'a, T, S, R>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
    {
        let (send, recv) = (send.elements(), recv.elements_mut());
        let c = self.data();
        let (n, me, blk) = (c.ranks.len(), c.me as usize, send.len());
        if recv.len() != n * blk {
            return Err(MpiError::InvalidBuffer(
                "all_gather: the receive buffer must hold size × send elements",
            ));
        }
        recv[me * blk..(me + 1) * blk].copy_from_slice(send);
        let mut p = plan(n, true, bytes(send));
        for r in (0..n).filter(|&r| r != me) {
            let (ptr, len) = at(recv, r * blk, blk);
            p.recv.push((r as u32, ptr, len));
            p.sends.push((r as u32, 0, blk * sz::<T>()));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start an all-gather with per-rank block sizes (`MPI_Iallgatherv`):
    /// member r's `send` lands in block r of every member's `recv`.
    fn immediate_all_gather_varcount_into<'a, 'b: 'a, T, S>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut PartitionMut<'b, T>,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
    {
        let send = send.elements();
        let c = self.data();
        let (n, me) = (c.ranks.len(), c.me as usize);
        check_blocks(n, &recv.counts, "all_gather_varcount: one block per rank")?;
        if recv.counts[me] != send.len() {
            return Err(MpiError::InvalidBuffer(
                "all_gather_varcount: my block size differs from my send buffer",
            ));
        }
        let d = recv.displs[me];
        recv.buf[d..d + send.len()].copy_from_slice(send);
        let mut p = plan(n, true, bytes(send));
        for r in (0..n).filter(|&r| r != me) {
            let (ptr, len) = at(recv.buf, recv.displs[r], recv.counts[r]);
            p.recv.push((r as u32, ptr, len));
            p.sends.push((r as u32, 0, send.len() * sz::<T>()));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start an all-to-all (`MPI_Ialltoall`): block r of every member's
    /// `send` lands in block (sender) of member r's `recv`; both hold
    /// `size` equal blocks.
    fn immediate_all_to_all_into<'a, T, S, R>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
    {
        let (send, recv) = (send.elements(), recv.elements_mut());
        let c = self.data();
        let (n, me) = (c.ranks.len(), c.me as usize);
        if send.len() % n != 0 || recv.len() != send.len() {
            return Err(MpiError::InvalidBuffer(
                "all_to_all: buffers must hold size equal blocks",
            ));
        }
        let blk = send.len() / n;
        recv[me * blk..(me + 1) * blk].copy_from_slice(&send[me * blk..(me + 1) * blk]);
        let mut p = plan(n, true, bytes(send));
        for r in (0..n).filter(|&r| r != me) {
            let (ptr, len) = at(recv, r * blk, blk);
            p.recv.push((r as u32, ptr, len));
            p.sends
                .push((r as u32, r * blk * sz::<T>(), blk * sz::<T>()));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start an all-to-all with per-pair block sizes (`MPI_Ialltoallv`):
    /// block r of `send` goes to member r, block s of `recv` comes from
    /// member s.
    fn immediate_all_to_all_varcount_into<'a, 'b: 'a, 'c: 'a, T>(
        &self,
        scope: &Scope<'a>,
        send: &'a Partition<'c, T>,
        recv: &'a mut PartitionMut<'b, T>,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
    {
        let c = self.data();
        let (n, me) = (c.ranks.len(), c.me as usize);
        check_blocks(
            n,
            &send.counts,
            "all_to_all_varcount: one send block per rank",
        )?;
        check_blocks(
            n,
            &recv.counts,
            "all_to_all_varcount: one receive block per rank",
        )?;
        if send.counts[me] != recv.counts[me] {
            return Err(MpiError::InvalidBuffer(
                "all_to_all_varcount: my block to myself differs in size from the one I receive",
            ));
        }
        let (sd, rd, cnt) = (send.displs[me], recv.displs[me], send.counts[me]);
        recv.buf[rd..rd + cnt].copy_from_slice(&send.buf[sd..sd + cnt]);
        let mut p = plan(n, true, bytes(send.buf));
        for r in (0..n).filter(|&r| r != me) {
            let (ptr, len) = at(recv.buf, recv.displs[r], recv.counts[r]);
            p.recv.push((r as u32, ptr, len));
            p.sends.push((
                r as u32,
                send.displs[r] * sz::<T>(),
                send.counts[r] * sz::<T>(),
            ));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start an inclusive prefix reduction (`MPI_Iscan`): member r's
    /// `recv` gets `send₀ op … op send_r`. With an operation the engine
    /// has as an atomic on `T`, each member's triggered atomics land on
    /// every higher member's `recv` (applied in arrival order: a float
    /// sum's rounding may vary between runs); otherwise it runs the
    /// blocking scan in this call.
    fn immediate_scan_into<'a, T, S, R, O>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "scan: send and receive buffers differ in length",
        )?;
        let c = self.data();
        recv.copy_from_slice(send);
        let Some(spec) = op.atomic() else {
            algos::scan(&coll(c), recv, &op, false)?;
            return Ok(done(c));
        };
        let (n, me) = (c.ranks.len(), c.me as usize);
        let mut p = plan(n - 1, me > 0, bytes(send));
        p.spec = Some(spec);
        if me > 0 {
            let (ptr, len) = at(recv, 0, recv.len());
            p.acc = Some((ptr, len, me as u32));
        }
        for r in me + 1..n {
            p.sends.push((r as u32, 0, std::mem::size_of_val(send)));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start an exclusive prefix reduction (`MPI_Iexscan`): member r's
    /// `recv` gets `send₀ op … op send_{r−1}`; rank 0's is left unchanged.
    /// With an atomic operation, member r (below the last) accumulates
    /// `send₀ … send_r` in a temporary from the lower members' triggered
    /// atomics and forwards it to member r+1; otherwise the blocking scan
    /// runs in this call.
    fn immediate_exclusive_scan_into<'a, T, S, R, O>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "exclusive_scan: send and receive buffers differ in length",
        )?;
        let c = self.data();
        let (n, me) = (c.ranks.len(), c.me as usize);
        let Some(spec) = op.atomic() else {
            let mut acc = send.to_vec();
            algos::scan(&coll(c), &mut acc, &op, true)?;
            if me != 0 {
                recv.copy_from_slice(&acc);
            }
            return Ok(done(c));
        };
        let mut p = plan(n - 1, me > 0, bytes(send));
        p.spec = Some(spec);
        if me > 0 {
            let (ptr, len) = at(recv, 0, recv.len());
            p.recv.push((me as u32 - 1, ptr, len));
        }
        if me + 1 < n {
            // Words, so that every element type is aligned in it.
            let b = std::mem::size_of_val(send);
            let mut tmp = vec![0u64; b.div_ceil(8)];
            let t: &mut [u8] = bytemuck::cast_slice_mut(&mut tmp[..]);
            t[..b].copy_from_slice(bytemuck::cast_slice(send));
            // The heap block does not move with the vector.
            p.acc = Some((tmp.as_mut_ptr().cast(), b, me as u32));
            p.forward = Some(me as u32 + 1);
            p.owned = Some(Box::new(tmp));
        }
        for r in me + 1..n - 1 {
            p.sends.push((r as u32, 0, std::mem::size_of_val(send)));
        }
        // SAFETY: both buffers are borrowed for 'a; the temporary is owned
        // by the request.
        unsafe { start(c, scope, p) }
    }

    /// Start a reduction whose result is scattered in equal blocks
    /// (`MPI_Ireduce_scatter_block`): member r's `recv` gets block r of
    /// every member's `send` reduced with `op`; `send` holds
    /// `size × recv.len()` elements. With an atomic operation each member
    /// sends block r as triggered atomics to member r; otherwise a
    /// blocking all-reduce runs in this call.
    fn immediate_reduce_scatter_block_into<'a, T, S, R, O>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        let (send, recv) = (send.elements(), recv.elements_mut());
        let c = self.data();
        let counts = vec![recv.len(); c.ranks.len()];
        scatter_reduced(c, scope, send, recv, &counts, op)
    }

    /// Start a reduction whose result is scattered in blocks of
    /// `counts[r]` elements (`MPI_Ireduce_scatter`): member r's `recv`
    /// (`counts[r]` elements) gets block r of every member's `send`
    /// reduced with `op`; `send` holds the blocks in rank order. As
    /// [`Self::immediate_reduce_scatter_block_into`] otherwise.
    fn immediate_reduce_scatter_into<'a, T, S, R, O>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
        counts: &[usize],
        op: O,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        let c = self.data();
        check_blocks(c.ranks.len(), counts, "reduce_scatter: one count per rank")?;
        scatter_reduced(c, scope, send.elements(), recv.elements_mut(), counts, op)
    }
}

/// The reduce-scatter of block r (of `counts[r]` elements, in rank
/// order) to member r.
fn scatter_reduced<'a, T: Equivalence, O: Operation<T>>(
    c: &CommData,
    scope: &Scope<'a>,
    send: &'a [T],
    recv: &'a mut [T],
    counts: &[usize],
    op: O,
) -> Result<Request<'a>> {
    let (n, me) = (c.ranks.len(), c.me as usize);
    let displs = super::displacements(counts);
    if counts.iter().sum::<usize>() != send.len() || counts[me] != recv.len() {
        return Err(MpiError::InvalidBuffer(
            "reduce_scatter: the send buffer must hold every block, the receive buffer this member's",
        ));
    }
    let mine = displs[me]..displs[me] + counts[me];
    let Some(spec) = op.atomic() else {
        let mut all = send.to_vec();
        algos::all_reduce(&coll(c), &mut all, &op)?;
        recv.copy_from_slice(&all[mine]);
        return Ok(done(c));
    };
    recv.copy_from_slice(&send[mine]);
    let mut p = plan(n, true, bytes(send));
    p.spec = Some(spec);
    let (ptr, len) = at(recv, 0, counts[me]);
    p.acc = Some((ptr, len, n as u32 - 1));
    for r in (0..n).filter(|&r| r != me) {
        p.sends
            .push((r as u32, displs[r] * sz::<T>(), counts[r] * sz::<T>()));
    }
    // SAFETY: both buffers are borrowed for 'a.
    unsafe { start(c, scope, p) }
}

impl<C: Communicator + ?Sized> ImmediateCollectives for C {}

/// Rooted non-blocking collectives, at rsmpi's names (its `Root`'s
/// `immediate_*` methods; the broadcast is in [`Root`]). The `_root` forms
/// are called by the root, the others by every other member; the wrong
/// one, or a root out of range, is an error at the start.
pub trait ImmediateRoot: Root {
    /// Start a gather (`MPI_Igather`), as a non-root: `send` goes to the
    /// root.
    fn immediate_gather_into<'a, T, S>(&self, scope: &Scope<'a>, send: &'a S) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
    {
        let (c, root) = self.root();
        let root = rooted(
            c,
            root,
            false,
            "gather_into: the root calls gather_into_root",
        )?;
        contribute(c, scope, root, send.elements(), None)
    }

    /// Start a gather (`MPI_Igather`), as the root: every member's `send`
    /// lands in `recv` in rank order; `recv` holds `size × send.len()`
    /// elements.
    fn immediate_gather_into_root<'a, T, S, R>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
    {
        let (c, root) = self.root();
        let root = rooted(c, root, true, "gather_into_root: called by a non-root")?;
        let (send, recv) = (send.elements(), recv.elements_mut());
        let (n, blk) = (c.ranks.len(), send.len());
        if recv.len() != n * blk {
            return Err(MpiError::InvalidBuffer(
                "gather: the receive buffer must hold size × send elements",
            ));
        }
        recv[root * blk..(root + 1) * blk].copy_from_slice(send);
        let mut p = plan(1, true, bytes(send));
        for r in (0..n).filter(|&r| r != root) {
            let (ptr, len) = at(recv, r * blk, blk);
            p.recv.push((r as u32, ptr, len));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start a gather with per-rank block sizes (`MPI_Igatherv`), as a
    /// non-root: `send` goes to the root's block for this member.
    fn immediate_gather_varcount_into<'a, T, S>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
    {
        let (c, root) = self.root();
        let why = "gather_varcount_into: the root calls gather_varcount_into_root";
        let root = rooted(c, root, false, why)?;
        contribute(c, scope, root, send.elements(), None)
    }

    /// Start a gather with per-rank block sizes (`MPI_Igatherv`), as the
    /// root: member r's `send` lands in block r of `recv` (a block
    /// shorter than what a member sends receives its start only).
    fn immediate_gather_varcount_into_root<'a, 'b: 'a, T, S>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut PartitionMut<'b, T>,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
    {
        let (c, root) = self.root();
        let why = "gather_varcount_into_root: called by a non-root";
        let root = rooted(c, root, true, why)?;
        let send = send.elements();
        let n = c.ranks.len();
        check_blocks(n, &recv.counts, "gather_varcount: one block per rank")?;
        if recv.counts[root] != send.len() {
            return Err(MpiError::InvalidBuffer(
                "gather_varcount: the root's block size differs from its send buffer",
            ));
        }
        let d = recv.displs[root];
        recv.buf[d..d + send.len()].copy_from_slice(send);
        let mut p = plan(1, true, bytes(send));
        for r in (0..n).filter(|&r| r != root) {
            let (ptr, len) = at(recv.buf, recv.displs[r], recv.counts[r]);
            p.recv.push((r as u32, ptr, len));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start a scatter (`MPI_Iscatter`), as a non-root: this member's
    /// block of the root's buffer lands in `recv`.
    fn immediate_scatter_into<'a, T, R>(
        &self,
        scope: &Scope<'a>,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        let (c, root) = self.root();
        let root = rooted(
            c,
            root,
            false,
            "scatter_into: the root calls scatter_into_root",
        )?;
        receive_block(c, scope, root, recv.elements_mut())
    }

    /// Start a scatter (`MPI_Iscatter`), as the root: block r of `send`
    /// goes to member r; `send` holds `size × recv.len()` elements.
    fn immediate_scatter_into_root<'a, T, S, R>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
    {
        let (c, root) = self.root();
        let root = rooted(c, root, true, "scatter_into_root: called by a non-root")?;
        let (send, recv) = (send.elements(), recv.elements_mut());
        let (n, blk) = (c.ranks.len(), recv.len());
        if send.len() != n * blk {
            return Err(MpiError::InvalidBuffer(
                "scatter: the send buffer must hold size × receive elements",
            ));
        }
        recv.copy_from_slice(&send[root * blk..(root + 1) * blk]);
        let mut p = plan(n - 1, false, bytes(send));
        for r in (0..n).filter(|&r| r != root) {
            p.sends
                .push((r as u32, r * blk * sz::<T>(), blk * sz::<T>()));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start a scatter with per-rank block sizes (`MPI_Iscatterv`), as a
    /// non-root.
    fn immediate_scatter_varcount_into<'a, T, R>(
        &self,
        scope: &Scope<'a>,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        let (c, root) = self.root();
        let why = "scatter_varcount_into: the root calls scatter_varcount_into_root";
        let root = rooted(c, root, false, why)?;
        receive_block(c, scope, root, recv.elements_mut())
    }

    /// Start a scatter with per-rank block sizes (`MPI_Iscatterv`), as the
    /// root: block r of `send` goes to member r.
    fn immediate_scatter_varcount_into_root<'a, 'b: 'a, T, R>(
        &self,
        scope: &Scope<'a>,
        send: &'a Partition<'b, T>,
        recv: &'a mut R,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        let (c, root) = self.root();
        let why = "scatter_varcount_into_root: called by a non-root";
        let root = rooted(c, root, true, why)?;
        let recv = recv.elements_mut();
        let n = c.ranks.len();
        check_blocks(n, &send.counts, "scatter_varcount: one block per rank")?;
        if send.counts[root] != recv.len() {
            return Err(MpiError::InvalidBuffer(
                "scatter_varcount: the root's block size differs from its receive buffer",
            ));
        }
        let d = send.displs[root];
        recv.copy_from_slice(&send.buf[d..d + recv.len()]);
        let mut p = plan(n - 1, false, bytes(send.buf));
        for r in (0..n).filter(|&r| r != root) {
            p.sends.push((
                r as u32,
                send.displs[r] * sz::<T>(),
                send.counts[r] * sz::<T>(),
            ));
        }
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }

    /// Start a reduction to the root (`MPI_Ireduce`), as a non-root:
    /// contribute `send`. With an operation the engine has as an atomic
    /// on `T`, `send` goes to the root as triggered atomics; otherwise the
    /// blocking reduction runs in this call.
    fn immediate_reduce_into<'a, T, S, O>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        op: O,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        O: Operation<T>,
    {
        let (c, root) = self.root();
        let root = rooted(
            c,
            root,
            false,
            "reduce_into: the root calls reduce_into_root",
        )?;
        let send = send.elements();
        match op.atomic() {
            Some(spec) => contribute(c, scope, root, send, Some(spec)),
            None => {
                let mut acc = send.to_vec();
                algos::reduce(&coll(c), root, &mut acc, &op)?;
                Ok(done(c))
            }
        }
    }

    /// Start a reduction to the root (`MPI_Ireduce`), as the root: `recv`
    /// gets every member's `send` reduced with `op`. With an atomic
    /// operation every other member's atomics land on `recv` in arrival
    /// order; otherwise the blocking reduction runs in this call.
    fn immediate_reduce_into_root<'a, T, S, R, O>(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Result<Request<'a>>
    where
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        let (c, root) = self.root();
        let root = rooted(c, root, true, "reduce_into_root: called by a non-root")?;
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "reduce: send and receive buffers differ in length",
        )?;
        recv.copy_from_slice(send);
        let Some(spec) = op.atomic() else {
            algos::reduce(&coll(c), root, recv, &op)?;
            return Ok(done(c));
        };
        let mut p = plan(1, true, bytes(send));
        p.spec = Some(spec);
        let (ptr, len) = at(recv, 0, recv.len());
        p.acc = Some((ptr, len, c.ranks.len() as u32 - 1));
        // SAFETY: both buffers are borrowed for 'a.
        unsafe { start(c, scope, p) }
    }
}

impl<P: Root + ?Sized> ImmediateRoot for P {}

/// A non-root's part of a gather (a put) or a reduction (atomics): `send`
/// to the root, whose entries the root's one notice announces.
fn contribute<'a, T: Equivalence>(
    c: &CommData,
    scope: &Scope<'a>,
    root: usize,
    send: &'a [T],
    spec: Option<portals::AtomicSpec>,
) -> Result<Request<'a>> {
    let mut p = plan(1, false, bytes(send));
    p.spec = spec;
    p.sends.push((root as u32, 0, std::mem::size_of_val(send)));
    // SAFETY: `send` is borrowed for 'a.
    unsafe { start(c, scope, p) }
}

/// A non-root's part of a scatter: its block from the root lands in
/// `recv`; every non-root announces its entry.
fn receive_block<'a, T: Equivalence>(
    c: &CommData,
    scope: &Scope<'a>,
    root: usize,
    recv: &'a mut [T],
) -> Result<Request<'a>> {
    let mut p = plan(c.ranks.len() - 1, true, (std::ptr::null(), 0));
    let (ptr, len) = at(recv, 0, recv.len());
    p.recv.push((root as u32, ptr, len));
    // SAFETY: `recv` is borrowed for 'a.
    unsafe { start(c, scope, p) }
}
