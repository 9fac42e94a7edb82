//! Non-blocking collectives (`MPI_I*`) and the all-to-all with one
//! datatype per peer (`MPI_Alltoallw`). Each start checks its arguments,
//! lends the C buffers to a raw start of `mpi_on_portals::raw` and
//! stores the request; a copy the start needs beyond the call (the
//! `MPI_IN_PLACE` block a member sends from, a scratch block) moves into
//! the request's entry, which outlives the transfers.

use std::ffi::{c_int, c_void};

use mpi_on_portals::collective::Operation;
use mpi_on_portals::raw::{self, Reduction};
use mpi_on_portals::request::Request;
use mpi_on_portals::traits::*;
use mpi_on_portals::{Partition, PartitionMut, SimpleCommunicator};

use crate::coll::{
    bytes_of, check_root, dispatch, send_block, typed, typed_mut, vblocks, wblocks, Blocks, Visit,
};
use crate::consts::*;
use crate::datatype::{comm_ty, Ty};
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::request::{add, ReqEntry};
use crate::state;

/// Store a started request (and what it keeps) under a new handle.
fn issue(comm: c_int, r: Request<'static>, keep: Option<Vec<u8>>, request: *mut c_int) -> Res {
    let h = add(ReqEntry {
        live: Some(r),
        keep,
        comm,
        ..ReqEntry::default()
    })?;
    ptr::out(request, h, "request")
}

/// A typed non-blocking reduction's start, for [`dispatch`].
struct Start<'c> {
    comm: &'c SimpleCommunicator,
    which: Reduction<'c>,
    send: *const c_void,
    recv: *mut c_void,
    /// Elements in `send` (and, in place, in `recv` on entry).
    n_send: usize,
    /// Elements this member receives.
    n_recv: usize,
    out: &'c mut Option<(Request<'static>, Option<Vec<u8>>)>,
}

impl Visit for Start<'_> {
    fn visit<T: mpi_on_portals::Equivalence>(self, op: &dyn Operation<T>) -> Res {
        let c = self.comm;
        let gets = !matches!(self.which, Reduction::Root(r) if r != c.rank());
        let mut keep = None;
        let send: &'static [T] = if ptr::in_place(self.send) {
            if !gets {
                return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE at a non-root");
            }
            // The vector this member contributes is in recvbuf: the
            // transfers send from a copy the request keeps.
            let (v, s) = kept_copy(typed::<T>(self.recv, self.n_send, "recvbuf")?);
            keep = Some(v);
            s
        } else {
            typed::<T>(self.send, self.n_send, "sendbuf")?
        };
        let recv: &'static mut [T] = if gets {
            typed_mut::<T>(self.recv, self.n_recv, "recvbuf")?
        } else {
            &mut []
        };
        // SAFETY: the C program lends both buffers until the request
        // completes; an in-place copy is kept by the request's entry.
        let r = unsafe { raw::immediate_reduce(c, self.which, send, recv, op)? };
        *self.out = Some((r, keep));
        Ok(())
    }
}

/// A copy of `src` for the request's entry to keep, and the copy as
/// `'static` elements (aligned for `T` inside the byte buffer).
fn kept_copy<T: mpi_on_portals::Equivalence>(src: &[T]) -> (Vec<u8>, &'static [T]) {
    let bytes: &[u8] = bytemuck::cast_slice(src);
    let align = std::mem::align_of::<T>();
    let mut v = vec![0u8; bytes.len() + align];
    let off = v.as_ptr().align_offset(align);
    v[off..off + bytes.len()].copy_from_slice(bytes);
    // SAFETY: `off` aligns the start for `T`, `src.len()` elements fit
    // after it, and every bit pattern is a `T` (Pod). The Vec moves,
    // unchanged, into the request's entry, freed only after the request
    // completes (a Vec's heap buffer does not move with it).
    let s = unsafe { std::slice::from_raw_parts(v.as_ptr().add(off).cast::<T>(), src.len()) };
    (v, s)
}

/// Start reduction `which` of `count` elements per member (`n_send` for
/// a reduce-scatter-block's whole vector) and store its request.
#[allow(clippy::too_many_arguments)]
fn start_reduction(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: c_int,
    op: c_int,
    comm: c_int,
    which: Reduction<'_>,
    request: *mut c_int,
) -> Res {
    let c = state::comm(comm)?;
    let mut n_recv = ptr::count(count)?;
    let n_send = match which {
        Reduction::Root(root) => {
            check_root(&c, root)?;
            n_recv
        }
        Reduction::ScatterBlock => n_recv * c.size() as usize,
        Reduction::Scatter(counts) => {
            n_recv = counts[c.rank() as usize];
            counts.iter().sum()
        }
        _ => n_recv,
    };
    let mut out = None;
    dispatch(
        dt,
        op,
        Start {
            comm: &c,
            which,
            send,
            recv,
            n_send,
            n_recv,
            out: &mut out,
        },
    )?;
    let (r, keep) = out.ok_or_else(|| Fail::new(MPI_ERR_INTERN, "no request started"))?;
    issue(comm, r, keep, request)
}

entry! {
    /// Predefined operations the engine has as atomics run as triggered
    /// atomics; other operations run the blocking reduction in the call.
    fn MPI_Ireduce | PMPI_Ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, root: c_int, comm: c_int, request: *mut c_int) {
        start_reduction(sendbuf, recvbuf, count, datatype, op, comm, Reduction::Root(root), request).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Iscan | PMPI_Iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int, request: *mut c_int) {
        start_reduction(sendbuf, recvbuf, count, datatype, op, comm, Reduction::Scan, request).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Iexscan | PMPI_Iexscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int, request: *mut c_int) {
        start_reduction(sendbuf, recvbuf, count, datatype, op, comm, Reduction::ExclusiveScan, request).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Ireduce_scatter_block | PMPI_Ireduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: c_int, op: c_int, comm: c_int, request: *mut c_int) {
        start_reduction(sendbuf, recvbuf, recvcount, datatype, op, comm, Reduction::ScatterBlock, request).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Ireduce_scatter | PMPI_Ireduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: c_int, op: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let size = state::comm(comm)?.size() as usize;
            let counts = ptr::slice(recvcounts, size, "recvcounts")?
                .iter()
                .map(|&n| ptr::count(n))
                .collect::<Result<Vec<usize>, Fail>>()?;
            start_reduction(sendbuf, recvbuf, 0, datatype, op, comm, Reduction::Scatter(&counts), request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Igatherv | PMPI_Igatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, root: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let (mut keep, mut part) = (None, None);
            if c.rank() == root {
                let Blocks { counts, displs, end } = vblocks(recvcounts, displs, c.size() as usize, recvtype)?;
                let recv: &'static mut [u8] = typed_mut::<u8>(recvbuf, end, "recvbuf")?;
                let me = root as usize;
                // MPI_IN_PLACE: the root's block is in `recv` already.
                keep = ptr::in_place(sendbuf).then(|| recv[displs[me]..displs[me] + counts[me]].to_vec());
                part = Some(PartitionMut::new(recv, counts, displs)?);
            }
            // SAFETY: `keep` goes into the request's entry below.
            let send = unsafe { gathered(sendbuf, sendcount, sendtype, &keep)? };
            // SAFETY: the C program lends both buffers until the request
            // completes; the in-place copy is kept by the entry.
            let r = unsafe { raw::immediate_gather_varcount(&c, root, send, part)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// The block a member contributes to a gather: the in-place copy, or
/// `sendcount` elements at `sendbuf`.
///
/// # Safety
/// `keep` must move, unchanged, into the request's entry (see [`kept`]).
unsafe fn gathered(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    keep: &Option<Vec<u8>>,
) -> Result<&'static [u8], Fail> {
    match keep {
        // SAFETY: forwarded from our caller.
        Some(v) => Ok(unsafe { kept(v) }),
        None => send_block(sendbuf, bytes_of(sendcount, sendtype)?.0),
    }
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Iscatterv | PMPI_Iscatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let (mut keep, mut part) = (None, None);
            if c.rank() == root {
                let Blocks { counts, displs, end } = vblocks(sendcounts, displs, c.size() as usize, sendtype)?;
                let send: &'static [u8] = typed::<u8>(sendbuf, end, "sendbuf")?;
                // MPI_IN_PLACE: the root's block stays in `send`; the
                // start's copy of it goes to a scratch block.
                keep = ptr::in_place(recvbuf).then(|| vec![0u8; counts[root as usize]]);
                part = Some(Partition::new(send, counts, displs)?);
            }
            let recv: &'static mut [u8] = match &mut keep {
                // SAFETY: `keep` goes into the request's entry below.
                Some(v) => unsafe { kept_mut(v) },
                None => typed_mut::<u8>(recvbuf, bytes_of(recvcount, recvtype)?.0, "recvbuf")?,
            };
            // SAFETY: as in MPI_Igatherv.
            let r = unsafe { raw::immediate_scatter_varcount(&c, root, part, recv)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Iallgatherv | PMPI_Iallgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            let Blocks { counts, displs, end } = vblocks(recvcounts, displs, c.size() as usize, recvtype)?;
            let recv: &'static mut [u8] = typed_mut::<u8>(recvbuf, end, "recvbuf")?;
            let me = c.rank() as usize;
            let keep = ptr::in_place(sendbuf).then(|| recv[displs[me]..displs[me] + counts[me]].to_vec());
            // SAFETY: `keep` goes into the request's entry below.
            let send = unsafe { gathered(sendbuf, sendcount, sendtype, &keep)? };
            let part = PartitionMut::new(recv, counts, displs)?;
            // SAFETY: as in MPI_Igatherv.
            let r = unsafe { raw::immediate_all_gather_varcount(&c, send, part)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// Start an all-to-all of byte blocks: `send` describes the send buffer's
/// blocks unless it is `MPI_IN_PLACE` (then the receive blocks, in a copy
/// of `recvbuf` the result keeps).
fn all_to_all_start(
    c: &SimpleCommunicator,
    sendbuf: *const c_void,
    send: impl FnOnce() -> Result<Blocks, Fail>,
    recvbuf: *mut c_void,
    recv: Blocks,
) -> Result<(Request<'static>, Option<Vec<u8>>), Fail> {
    let rbuf: &'static mut [u8] = typed_mut::<u8>(recvbuf, recv.end, "recvbuf")?;
    let (keep, sp) = if ptr::in_place(sendbuf) {
        let v = rbuf.to_vec();
        // SAFETY: `v` moves into the request's entry with the request.
        let s = unsafe { kept(&v) };
        (
            Some(v),
            Partition::new(s, recv.counts.clone(), recv.displs.clone())?,
        )
    } else {
        let b = send()?;
        (
            None,
            Partition::new(typed::<u8>(sendbuf, b.end, "sendbuf")?, b.counts, b.displs)?,
        )
    };
    let rp = PartitionMut::new(rbuf, recv.counts, recv.displs)?;
    // SAFETY: the C program lends both buffers until the request
    // completes (for MPI_Alltoallw: until this call waits for it).
    let r = unsafe { raw::immediate_all_to_all_varcount(c, sp, rp)? };
    Ok((r, keep))
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Ialltoallv | PMPI_Ialltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: c_int, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            let n = c.size() as usize;
            let recv = vblocks(recvcounts, rdispls, n, recvtype)?;
            let (r, keep) = all_to_all_start(&c, sendbuf, || vblocks(sendcounts, sdispls, n, sendtype), recvbuf, recv)?;
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// The arguments of `MPI_(I)alltoallw` that describe the buffers.
struct W {
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const c_int,
}

/// Start `MPI_(I)alltoallw`: one contiguous datatype per peer
/// (`MPI_ERR_TYPE` otherwise), byte displacements.
fn alltoallw(w: W, comm: c_int) -> Result<(Request<'static>, Option<Vec<u8>>), Fail> {
    let c = state::comm(comm)?;
    let n = c.size() as usize;
    let recv = wblocks(w.recvcounts, w.rdispls, w.recvtypes, n)?;
    let send = || wblocks(w.sendcounts, w.sdispls, w.sendtypes, n);
    all_to_all_start(&c, w.sendbuf, send, w.recvbuf, recv)
}

entry! {
    /// One contiguous datatype per peer (`MPI_ERR_TYPE` otherwise), byte
    /// displacements.
    fn MPI_Ialltoallw | PMPI_Ialltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const c_int, comm: c_int, request: *mut c_int) {
        let w = W { sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes };
        alltoallw(w, comm)
            .and_then(|(r, keep)| issue(comm, r, keep, request))
            .map_err(|f| f.on_comm(comm))
    }
}

entry! {
    /// The non-blocking form, waited for: one round of puts. With a
    /// non-contiguous datatype, every block is packed, exchanged and
    /// unpacked (one copy each way, as point-to-point does).
    fn MPI_Alltoallw | PMPI_Alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const c_int, comm: c_int) {
        let w = W { sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes };
        (|| {
            let n = state::comm(comm)?.size() as usize;
            let in_place = ptr::in_place(sendbuf);
            if !contiguous_all(recvtypes, n)? || (!in_place && !contiguous_all(sendtypes, n)?) {
                return alltoallw_packed(&w, comm);
            }
            let (r, keep) = alltoallw(w, comm)?;
            r.wait()?;
            // The in-place copy outlives the transfers.
            drop(keep);
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// Whether all `n` datatypes are contiguous (`MPI_ERR_TYPE` for an
/// invalid one).
fn contiguous_all(types: *const c_int, n: usize) -> Result<bool, Fail> {
    for &t in ptr::slice(types, n, "datatypes")? {
        if !comm_ty(t)?.contiguous() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The blocks of one side of an all-to-all-w: (datatype, count, byte
/// displacement) per peer.
fn w_side(
    counts: *const c_int,
    displs: *const c_int,
    types: *const c_int,
    n: usize,
) -> Result<Vec<(Ty, usize, usize)>, Fail> {
    let (c, d, t) = (
        ptr::slice(counts, n, "counts")?,
        ptr::slice(displs, n, "displs")?,
        ptr::slice(types, n, "datatypes")?,
    );
    (0..n)
        .map(|i| {
            let at = usize::try_from(d[i])
                .map_err(|_| Fail::new(MPI_ERR_ARG, format!("negative displacement {}", d[i])))?;
            Ok((comm_ty(t[i])?, ptr::count(c[i])?, at))
        })
        .collect()
}

/// `MPI_Alltoallw` with non-contiguous datatypes: pack every send block
/// (from `recvbuf` in place), exchange the packed blocks, unpack every
/// received one.
fn alltoallw_packed(w: &W, comm: c_int) -> Res {
    let c = state::comm(comm)?;
    let n = c.size() as usize;
    let recv = w_side(w.recvcounts, w.rdispls, w.recvtypes, n)?;
    let (send, sbuf) = if ptr::in_place(w.sendbuf) {
        (recv.clone(), w.recvbuf as *const c_void)
    } else {
        (w_side(w.sendcounts, w.sdispls, w.sendtypes, n)?, w.sendbuf)
    };
    let mut packed = Vec::new();
    let (mut sc, mut sd) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (t, count, at) in &send {
        let b = t.send_bytes(sbuf.wrapping_byte_add(*at), *count)?;
        sd.push(packed.len());
        sc.push(b.len());
        packed.extend_from_slice(&b);
    }
    let rc: Vec<usize> = recv.iter().map(|(t, count, _)| t.size() * count).collect();
    let rd = mpi_on_portals::collective::displacements(&rc);
    let total = rc.iter().sum();
    if total > 0 && w.recvbuf.is_null() {
        return fail(MPI_ERR_BUFFER, "recvbuf is NULL");
    }
    let mut got = vec![0u8; total];
    let sp = Partition::new(&packed[..], sc, sd)?;
    let mut rp = PartitionMut::new(&mut got[..], rc.clone(), rd.clone())?;
    c.all_to_all_varcount_into(&sp, &mut rp)?;
    drop(rp);
    for (i, (t, count, at)) in recv.iter().enumerate() {
        // SAFETY: MPI requires recvbuf to hold `count` elements of the
        // type at byte displacement `at`; nothing else uses it during
        // the call.
        unsafe {
            t.unpack(
                &got[rd[i]..rd[i] + rc[i]],
                w.recvbuf.wrapping_byte_add(*at).cast(),
                *count,
            )
        };
    }
    Ok(())
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Iallgather | PMPI_Iallgather(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            let (rl, _) = bytes_of(recvcount, recvtype)?;
            let size = c.size() as usize;
            let recv: &'static mut [u8] = typed_mut::<u8>(recvbuf, rl * size, "recvbuf")?;
            let me = c.rank() as usize;
            // MPI_IN_PLACE: this member's block is in `recv`; the request
            // keeps a copy to send from (the transfers read it until the
            // request completes).
            let keep = ptr::in_place(sendbuf).then(|| recv[me * rl..(me + 1) * rl].to_vec());
            // SAFETY: `keep` goes into the request's entry below.
            let send = unsafe { gathered(sendbuf, sendcount, sendtype, &keep)? };
            // SAFETY: the C program lends both buffers until the request
            // completes; the in-place copy is kept by the entry.
            let r = unsafe { raw::immediate_all_gather(&c, send, recv)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Ialltoall | PMPI_Ialltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            let (rl, _) = bytes_of(recvcount, recvtype)?;
            let size = c.size() as usize;
            let recv: &'static mut [u8] = typed_mut::<u8>(recvbuf, rl * size, "recvbuf")?;
            let keep = ptr::in_place(sendbuf).then(|| recv.to_vec());
            let send: &'static [u8] = match &keep {
                // SAFETY: `keep` goes into the request's entry below.
                Some(v) => unsafe { kept(v) },
                None => {
                    let (sl, _) = bytes_of(sendcount, sendtype)?;
                    typed::<u8>(sendbuf, sl * size, "sendbuf")?
                }
            };
            // SAFETY: as in MPI_Iallgather.
            let r = unsafe { raw::immediate_all_to_all(&c, send, recv)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Igather | PMPI_Igather(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let at_root = c.rank() == root;
            let (recv, keep): (&'static mut [u8], Option<Vec<u8>>) = if at_root {
                let (rl, _) = bytes_of(recvcount, recvtype)?;
                let recv: &'static mut [u8] = typed_mut::<u8>(recvbuf, rl * c.size() as usize, "recvbuf")?;
                // MPI_IN_PLACE: the root's block is in `recv` already.
                let keep = ptr::in_place(sendbuf).then(|| {
                    let me = root as usize;
                    recv[me * rl..(me + 1) * rl].to_vec()
                });
                (recv, keep)
            } else {
                (&mut [], None)
            };
            // SAFETY: `keep` goes into the request's entry below.
            let send = unsafe { gathered(sendbuf, sendcount, sendtype, &keep)? };
            // SAFETY: as in MPI_Iallgather.
            let r = unsafe { raw::immediate_gather(&c, root, send, recv)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    /// Contiguous datatypes only, as the blocking collectives.
    fn MPI_Iscatter | PMPI_Iscatter(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let at_root = c.rank() == root;
            let send: &'static [u8] = if at_root {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                typed::<u8>(sendbuf, sl * c.size() as usize, "sendbuf")?
            } else {
                &[]
            };
            // MPI_IN_PLACE at the root: its block stays in `send`; the
            // start's copy of it goes to a scratch buffer the request keeps.
            let mut keep = (at_root && ptr::in_place(recvbuf)).then(|| vec![0u8; send.len() / c.size().max(1) as usize]);
            let recv: &'static mut [u8] = match &mut keep {
                // SAFETY: `keep` goes into the request's entry below.
                Some(v) => unsafe { kept_mut(v) },
                None => {
                    let (rl, _) = bytes_of(recvcount, recvtype)?;
                    typed_mut::<u8>(recvbuf, rl, "recvbuf")?
                }
            };
            // SAFETY: as in MPI_Iallgather.
            let r = unsafe { raw::immediate_scatter(&c, root, send, recv)? };
            issue(comm, r, keep, request)
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// A buffer the request's entry keeps (`ReqEntry::keep`), lent to the
/// transfers as `'static`.
///
/// # Safety
/// The Vec behind `v` must move, unchanged, into the request's entry, which
/// is freed only after the request completes (a Vec's heap buffer does
/// not move with it).
unsafe fn kept(v: &[u8]) -> &'static [u8] {
    // SAFETY: forwarded from our caller.
    unsafe { std::slice::from_raw_parts(v.as_ptr(), v.len()) }
}

/// [`kept`], for a scratch buffer the transfers write.
///
/// # Safety
/// As for [`kept`], and nothing else touches the buffer meanwhile.
unsafe fn kept_mut(v: &mut [u8]) -> &'static mut [u8] {
    // SAFETY: forwarded from our caller.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr(), v.len()) }
}
