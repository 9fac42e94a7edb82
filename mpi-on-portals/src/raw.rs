//! Requests on raw memory, for foreign-function interfaces.
//!
//! The safe API ties a non-blocking operation's buffer to a
//! [`Scope`]. A C program lends its buffers by
//! pointer until it waits, which no Rust lifetime can express: these
//! functions start the same operations on a pointer and a length and
//! return a [`Request<'static>`](Request). The caller promises what the
//! scope would have enforced. Used by the MPICH-ABI C library (`mpi-capi`).

use crate::collective::{
    CommunicatorCollectives, ImmediateCollectives, ImmediateRoot, Operation, Partition,
    PartitionMut,
};
use crate::comm::{CommData, Communicator, Process, Rank, Tag, ANY_TAG};
use crate::device::Mode;
use crate::error::{MpiError, Result};
use crate::p2p::Source;
use crate::request::{Request, Scope};
use crate::{Equivalence, SimpleCommunicator};

/// The completion rule of a send (`MPI_Isend`, `MPI_Issend`, `MPI_Irsend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// Standard mode.
    Standard,
    /// Synchronous: complete once the receive matched.
    Synchronous,
    /// Ready: the receive must already be posted.
    Ready,
}

fn check_tag(tag: Tag) -> Result<u32> {
    u32::try_from(tag).map_err(|_| MpiError::InvalidTag(tag))
}

/// Start a send of `len` bytes at `ptr` to `dest`.
///
/// # Safety
/// The `len` bytes at `ptr` must stay valid and unmodified until the
/// request completes (or, once [`detach`]ed, for good).
pub unsafe fn immediate_send(
    dest: &Process<'_>,
    ptr: *const u8,
    len: usize,
    tag: Tag,
    mode: SendMode,
) -> Result<Request<'static>> {
    let c = dest.comm;
    let dst = c.world_rank(dest.rank)?;
    let tag = check_tag(tag)?;
    let mode = match mode {
        SendMode::Standard => Mode::Standard,
        SendMode::Synchronous => Mode::Synchronous,
        SendMode::Ready => Mode::Ready,
    };
    let id = c.dev.bulk_post(len, || {
        // SAFETY: forwarded from our caller.
        unsafe {
            c.dev
                .isend(c.ctx, c.me, dst, tag, ptr, len, mode, None, false)
        }
    })?;
    Ok(Request::raw(c.dev.clone(), id, false))
}

/// Start a receive into `len` bytes at `ptr` from `src` (a process, or any
/// process), with `tag` ([`ANY_TAG`] for any).
///
/// # Safety
/// The `len` bytes at `ptr` must stay valid, and untouched by anything
/// else, until the request completes.
pub unsafe fn immediate_receive<S: Source>(
    src: &S,
    ptr: *mut u8,
    len: usize,
    tag: Tag,
) -> Result<Request<'static>> {
    let c: &CommData = src.comm();
    let source = src.source()?;
    if source.is_none() {
        c.dev.watch_members(c.ctx, &c.ranks);
    }
    let tag = if tag == ANY_TAG {
        None
    } else {
        Some(check_tag(tag)?)
    };
    let id = c.dev.bulk_post(len, || {
        // SAFETY: forwarded from our caller.
        unsafe { c.dev.irecv(c.ctx, source, tag, ptr, len) }
    })?;
    Ok(Request::raw(c.dev.clone(), id, true))
}

/// Start a broadcast of `len` bytes at `ptr` from `root` of `comm`
/// (`MPI_Ibcast`); see [`crate::Root::immediate_broadcast_into`].
///
/// # Safety
/// As for [`immediate_receive`].
pub unsafe fn immediate_broadcast(
    comm: &SimpleCommunicator,
    root: Rank,
    ptr: *mut u8,
    len: usize,
) -> Result<Request<'static>> {
    let c = comm.data();
    c.world_rank(root)?;
    // SAFETY: forwarded from our caller.
    let id = c
        .dev
        .collective_post(|| unsafe { c.dev.ibcast(c.ctx, root as u32, ptr, len) })?;
    Ok(Request::raw(c.dev.clone(), id, false))
}

/// Start an all-reduce of `recv` (already holding this member's
/// contribution) with `op` (`MPI_Iallreduce`); see
/// [`CommunicatorCollectives::immediate_all_reduce_into`], whose fallback
/// for operations the engine has no atomic for (run here, blocking) it
/// shares.
///
/// # Safety
/// The `n` elements at `recv` must stay valid, and untouched by anything
/// else, until the request completes.
pub unsafe fn immediate_all_reduce<T: Equivalence, O: Operation<T>>(
    comm: &SimpleCommunicator,
    recv: *mut T,
    n: usize,
    op: O,
) -> Result<Request<'static>> {
    let c = comm.data();
    let bytes = n * std::mem::size_of::<T>();
    match op.atomic().filter(|_| c.dev.atomic_fits(bytes)) {
        Some(spec) => {
            // SAFETY: forwarded from our caller.
            let id = c
                .dev
                .collective_post(|| unsafe { c.dev.iallreduce(c.ctx, recv.cast(), bytes, spec) })?;
            Ok(Request::raw(c.dev.clone(), id, false))
        }
        None => {
            // SAFETY: the caller lends `n` elements at `recv`; this call
            // is done with them when it returns.
            let v = unsafe { std::slice::from_raw_parts_mut(recv, n) };
            let send = v.to_vec();
            comm.all_reduce_into(&send[..], v, op)?;
            Ok(Request::raw(c.dev.clone(), c.dev.completed_req(), false))
        }
    }
}

/// Start an all-gather (`MPI_Iallgather`) of equal blocks of bytes: `send`
/// (one block) to every member, every member's block into `recv` in rank
/// order; see [`ImmediateCollectives::immediate_all_gather_into`].
///
/// # Safety
/// `send` and `recv` are lent memory the caller made `'static`: it must
/// stay valid, `recv` untouched by anything else, until the request
/// completes.
pub unsafe fn immediate_all_gather(
    comm: &SimpleCommunicator,
    send: &'static [u8],
    recv: &'static mut [u8],
) -> Result<Request<'static>> {
    comm.immediate_all_gather_into(&Scope::detached(), send, recv)
}

/// Start an all-to-all (`MPI_Ialltoall`) of equal blocks of bytes; see
/// [`ImmediateCollectives::immediate_all_to_all_into`].
///
/// # Safety
/// As for [`immediate_all_gather`].
pub unsafe fn immediate_all_to_all(
    comm: &SimpleCommunicator,
    send: &'static [u8],
    recv: &'static mut [u8],
) -> Result<Request<'static>> {
    comm.immediate_all_to_all_into(&Scope::detached(), send, recv)
}

/// Start a gather (`MPI_Igather`) of equal blocks of bytes to `root`:
/// at the root `recv` takes every member's block in rank order (and is
/// ignored elsewhere); see [`ImmediateRoot::immediate_gather_into_root`].
///
/// # Safety
/// As for [`immediate_all_gather`].
pub unsafe fn immediate_gather(
    comm: &SimpleCommunicator,
    root: Rank,
    send: &'static [u8],
    recv: &'static mut [u8],
) -> Result<Request<'static>> {
    let p = comm.process_at_rank(root);
    if comm.rank() == root {
        p.immediate_gather_into_root(&Scope::detached(), send, recv)
    } else {
        p.immediate_gather_into(&Scope::detached(), send)
    }
}

/// Start a scatter (`MPI_Iscatter`) of equal blocks of bytes from `root`:
/// block r of the root's `send` (ignored elsewhere) into member r's
/// `recv`; see [`ImmediateRoot::immediate_scatter_into_root`].
///
/// # Safety
/// As for [`immediate_all_gather`].
pub unsafe fn immediate_scatter(
    comm: &SimpleCommunicator,
    root: Rank,
    send: &'static [u8],
    recv: &'static mut [u8],
) -> Result<Request<'static>> {
    let p = comm.process_at_rank(root);
    if comm.rank() == root {
        p.immediate_scatter_into_root(&Scope::detached(), send, recv)
    } else {
        p.immediate_scatter_into(&Scope::detached(), recv)
    }
}

/// Start a gather with per-rank block sizes (`MPI_Igatherv`) of bytes to
/// `root`: at the root, `recv` (`None` elsewhere) takes member r's `send`
/// in its block r; see
/// [`ImmediateRoot::immediate_gather_varcount_into_root`].
///
/// # Safety
/// As for [`immediate_all_gather`] (the partition's buffer is the lent
/// memory; its counts are read in this call only).
pub unsafe fn immediate_gather_varcount(
    comm: &SimpleCommunicator,
    root: Rank,
    send: &'static [u8],
    recv: Option<PartitionMut<'static, u8>>,
) -> Result<Request<'static>> {
    let p = comm.process_at_rank(root);
    // SAFETY (both arms): the buffers are lent for 'static by our
    // caller; the partition's bookkeeping is not used after the start.
    Ok(match recv {
        Some(mut part) => unsafe {
            p.immediate_gather_varcount_into_root(&Scope::detached(), send, &mut part)?
                .unbound()
        },
        None => p.immediate_gather_varcount_into(&Scope::detached(), send)?,
    })
}

/// Start a scatter with per-rank block sizes (`MPI_Iscatterv`) of bytes
/// from `root`: block r of the root's `send` (`None` elsewhere) into
/// member r's `recv`; see
/// [`ImmediateRoot::immediate_scatter_varcount_into_root`].
///
/// # Safety
/// As for [`immediate_gather_varcount`].
pub unsafe fn immediate_scatter_varcount(
    comm: &SimpleCommunicator,
    root: Rank,
    send: Option<Partition<'static, u8>>,
    recv: &'static mut [u8],
) -> Result<Request<'static>> {
    let p = comm.process_at_rank(root);
    Ok(match send {
        // SAFETY: as in immediate_gather_varcount.
        Some(part) => unsafe {
            p.immediate_scatter_varcount_into_root(&Scope::detached(), &part, recv)?
                .unbound()
        },
        None => p.immediate_scatter_varcount_into(&Scope::detached(), recv)?,
    })
}

/// Start an all-gather with per-rank block sizes (`MPI_Iallgatherv`) of
/// bytes; see [`ImmediateCollectives::immediate_all_gather_varcount_into`].
///
/// # Safety
/// As for [`immediate_gather_varcount`].
pub unsafe fn immediate_all_gather_varcount(
    comm: &SimpleCommunicator,
    send: &'static [u8],
    mut recv: PartitionMut<'static, u8>,
) -> Result<Request<'static>> {
    let r = comm.immediate_all_gather_varcount_into(&Scope::detached(), send, &mut recv)?;
    // SAFETY: as in immediate_gather_varcount.
    Ok(unsafe { r.unbound() })
}

/// Start an all-to-all with per-pair block sizes (`MPI_Ialltoallv`,
/// `MPI_Ialltoallw` in bytes); see
/// [`ImmediateCollectives::immediate_all_to_all_varcount_into`].
///
/// # Safety
/// As for [`immediate_gather_varcount`].
pub unsafe fn immediate_all_to_all_varcount(
    comm: &SimpleCommunicator,
    send: Partition<'static, u8>,
    mut recv: PartitionMut<'static, u8>,
) -> Result<Request<'static>> {
    let r = comm.immediate_all_to_all_varcount_into(&Scope::detached(), &send, &mut recv)?;
    // SAFETY: as in immediate_gather_varcount.
    Ok(unsafe { r.unbound() })
}

/// Which reduction a typed raw start runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction<'c> {
    /// To a root (`MPI_Ireduce`); `recv` is ignored elsewhere.
    Root(Rank),
    /// Inclusive prefix (`MPI_Iscan`).
    Scan,
    /// Exclusive prefix (`MPI_Iexscan`): rank 0's `recv` is untouched.
    ExclusiveScan,
    /// Reduce, then scatter equal blocks (`MPI_Ireduce_scatter_block`):
    /// `send` holds size × `recv.len()` elements.
    ScatterBlock,
    /// Reduce, then scatter blocks of these counts in rank order
    /// (`MPI_Ireduce_scatter`): `send` holds their sum, `recv` this
    /// member's count.
    Scatter(&'c [usize]),
}

/// Start a reduction of `send` into `recv` with `op`; see
/// [`ImmediateRoot::immediate_reduce_into_root`],
/// [`ImmediateCollectives::immediate_scan_into`],
/// [`ImmediateCollectives::immediate_exclusive_scan_into`],
/// [`ImmediateCollectives::immediate_reduce_scatter_block_into`] and
/// [`ImmediateCollectives::immediate_reduce_scatter_into`], whose
/// fallback for operations the engine has no atomic for (run here,
/// blocking) they share.
///
/// # Safety
/// As for [`immediate_all_gather`].
pub unsafe fn immediate_reduce<T: Equivalence, O: Operation<T>>(
    comm: &SimpleCommunicator,
    which: Reduction<'_>,
    send: &'static [T],
    recv: &'static mut [T],
    op: O,
) -> Result<Request<'static>> {
    let s = Scope::detached();
    match which {
        Reduction::Root(root) => {
            let p = comm.process_at_rank(root);
            if comm.rank() == root {
                p.immediate_reduce_into_root(&s, send, recv, op)
            } else {
                p.immediate_reduce_into(&s, send, op)
            }
        }
        Reduction::Scan => comm.immediate_scan_into(&s, send, recv, op),
        Reduction::ExclusiveScan => comm.immediate_exclusive_scan_into(&s, send, recv, op),
        Reduction::ScatterBlock => comm.immediate_reduce_scatter_block_into(&s, send, recv, op),
        Reduction::Scatter(counts) => {
            comm.immediate_reduce_scatter_into(&s, send, recv, counts, op)
        }
    }
}

/// Let a request finish in the background: nobody will wait for it
/// (`MPI_Request_free`). Its memory must stay valid until it has.
pub fn detach(req: Request<'static>) {
    req.detach();
}
