//! Collectives. Data movement runs on bytes (contiguous datatypes);
//! reductions dispatch on the element type to `mpi_on_portals`'s typed
//! collectives with the predefined operation, or call the C function of
//! an `MPI_Op_create` operation.

use std::ffi::{c_int, c_void};

use mpi_on_portals::collective::{Integer, Numeric, Operation};
use mpi_on_portals::traits::*;
use mpi_on_portals::{Partition, PartitionMut, SimpleCommunicator, SystemOperation, UserOperation};

use crate::consts::*;
use crate::datatype::{comm_ty, Elem, Ty};
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::request::{add, Done, ReqEntry};
use crate::state::{self, handle, slot, UserOp};

/// `MPI_User_function`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);

/// Something to do with a typed buffer and its operation.
pub(crate) trait Visit {
    fn visit<T: mpi_on_portals::Equivalence>(self, op: &dyn Operation<T>) -> Res;
}

enum Kind {
    Sum,
    Prod,
    Max,
    Min,
    Land,
    Lor,
    Lxor,
    Band,
    Bor,
    Bxor,
    Loc(bool),
    User(UserOp),
}

fn kind(op: c_int) -> Result<Kind, Fail> {
    Ok(match op {
        MPI_SUM => Kind::Sum,
        MPI_PROD => Kind::Prod,
        MPI_MAX => Kind::Max,
        MPI_MIN => Kind::Min,
        MPI_LAND => Kind::Land,
        MPI_LOR => Kind::Lor,
        MPI_LXOR => Kind::Lxor,
        MPI_BAND => Kind::Band,
        MPI_BOR => Kind::Bor,
        MPI_BXOR => Kind::Bxor,
        MPI_MINLOC => Kind::Loc(false),
        MPI_MAXLOC => Kind::Loc(true),
        _ => {
            let u = slot(op, KIND_OP)
                .and_then(|i| state::lock().as_ref().and_then(|st| st.ops.get(i).copied()));
            match u {
                Some(u) => Kind::User(u),
                None => return fail(MPI_ERR_OP, format!("invalid operation {op:#x}")),
            }
        }
    })
}

fn arith<T: Numeric + mpi_on_portals::Equivalence, V: Visit>(k: &Kind, v: V) -> Res {
    match k {
        Kind::Sum => v.visit::<T>(&SystemOperation::sum()),
        Kind::Prod => v.visit::<T>(&SystemOperation::product()),
        Kind::Max => v.visit::<T>(&SystemOperation::max()),
        Kind::Min => v.visit::<T>(&SystemOperation::min()),
        _ => fail(
            MPI_ERR_OP,
            "this operation is not defined on floating-point types",
        ),
    }
}

fn int<T: Integer + mpi_on_portals::Equivalence, V: Visit>(k: &Kind, v: V) -> Res {
    match k {
        Kind::Land => v.visit::<T>(&SystemOperation::logical_and()),
        Kind::Lor => v.visit::<T>(&SystemOperation::logical_or()),
        Kind::Lxor => v.visit::<T>(&SystemOperation::logical_xor()),
        Kind::Band => v.visit::<T>(&SystemOperation::bitwise_and()),
        Kind::Bor => v.visit::<T>(&SystemOperation::bitwise_or()),
        Kind::Bxor => v.visit::<T>(&SystemOperation::bitwise_xor()),
        _ => arith::<T, V>(k, v),
    }
}

/// A user operation on elements of `N` bytes.
fn user<const N: usize, V: Visit>(u: UserOp, dt: c_int, v: V) -> Res {
    let f = u.f;
    let call = move |input: &[[u8; N]], inout: &mut [[u8; N]]| {
        let mut len = input.len() as c_int;
        let mut d = dt;
        // SAFETY: the C function MPI_Op_create registered, called as MPI
        // calls it: `len` elements of `d` in each buffer.
        unsafe {
            f(
                input.as_ptr() as *mut c_void,
                inout.as_mut_ptr().cast(),
                &mut len,
                &mut d,
            )
        }
    };
    if u.commute {
        v.visit::<[u8; N]>(&UserOperation::commutative(call))
    } else {
        v.visit::<[u8; N]>(&UserOperation::associative(call))
    }
}

/// MINLOC/MAXLOC on a {value, int} pair at offsets 0 and `at`.
fn loc<const N: usize, X: Copy + PartialOrd + bytemuck::Pod, V: Visit>(
    at: usize,
    max: bool,
    v: V,
) -> Res {
    let call = move |input: &[[u8; N]], inout: &mut [[u8; N]]| {
        let sz = std::mem::size_of::<X>();
        for (i, o) in input.iter().zip(inout.iter_mut()) {
            let a: X = bytemuck::pod_read_unaligned(&i[..sz]);
            let b: X = bytemuck::pod_read_unaligned(&o[..sz]);
            let ia: i32 = bytemuck::pod_read_unaligned(&i[at..at + 4]);
            let ib: i32 = bytemuck::pod_read_unaligned(&o[at..at + 4]);
            let better = if max { a > b } else { a < b };
            if better || (a == b && ia < ib) {
                *o = *i;
            }
        }
    };
    v.visit::<[u8; N]>(&UserOperation::commutative(call))
}

/// Run `v` with the typed form of `dt` and `op`.
pub(crate) fn dispatch<V: Visit>(dt: c_int, op: c_int, v: V) -> Res {
    let t = comm_ty(dt)?;
    let k = kind(op)?;
    if let Kind::Loc(max) = k {
        return match dt as u32 {
            0x4c000816 => loc::<8, i32, V>(4, max, v),  // 2INT
            0x8c000000 => loc::<8, f32, V>(4, max, v),  // FLOAT_INT
            0x8c000001 => loc::<16, f64, V>(8, max, v), // DOUBLE_INT
            0x8c000002 => loc::<16, i64, V>(8, max, v), // LONG_INT
            _ => fail(
                MPI_ERR_OP,
                "MINLOC/MAXLOC need a pair type (MPI_2INT, MPI_DOUBLE_INT, ...)",
            ),
        };
    }
    if let Kind::User(u) = k {
        return match t.extent() {
            1 => user::<1, V>(u, dt, v),
            2 => user::<2, V>(u, dt, v),
            4 => user::<4, V>(u, dt, v),
            8 => user::<8, V>(u, dt, v),
            12 => user::<12, V>(u, dt, v),
            16 => user::<16, V>(u, dt, v),
            24 => user::<24, V>(u, dt, v),
            32 => user::<32, V>(u, dt, v),
            64 => user::<64, V>(u, dt, v),
            n => fail(
                MPI_ERR_TYPE,
                format!("user operations on {n}-byte elements are not supported"),
            ),
        };
    }
    match t.elem() {
        Some(Elem::I8) => int::<i8, V>(&k, v),
        Some(Elem::U8) => int::<u8, V>(&k, v),
        Some(Elem::I16) => int::<i16, V>(&k, v),
        Some(Elem::U16) => int::<u16, V>(&k, v),
        Some(Elem::I32) => int::<i32, V>(&k, v),
        Some(Elem::U32) => int::<u32, V>(&k, v),
        Some(Elem::I64) => int::<i64, V>(&k, v),
        Some(Elem::U64) => int::<u64, V>(&k, v),
        Some(Elem::F32) => arith::<f32, V>(&k, v),
        Some(Elem::F64) => arith::<f64, V>(&k, v),
        None => fail(
            MPI_ERR_TYPE,
            "predefined operations need a predefined numeric datatype",
        ),
    }
}

/// `n` elements of `T` at `p`: `MPI_ERR_BUFFER` if `p` is NULL or
/// misaligned for `T` while `n > 0`.
pub(crate) fn typed<'a, T>(p: *const c_void, n: usize, what: &str) -> Result<&'a [T], Fail> {
    check_data(p as usize, n, std::mem::align_of::<T>(), what)?;
    ptr::slice(p.cast::<T>(), n, what)
}

/// [`typed`], writable.
pub(crate) fn typed_mut<'a, T>(p: *mut c_void, n: usize, what: &str) -> Result<&'a mut [T], Fail> {
    check_data(p as usize, n, std::mem::align_of::<T>(), what)?;
    ptr::slice_mut(p.cast::<T>(), n, what)
}

/// A data buffer (unlike an array argument) that is NULL is
/// `MPI_ERR_BUFFER`, as is one misaligned for its element type.
fn check_data(addr: usize, n: usize, align: usize, what: &str) -> Res {
    if n > 0 && addr == 0 {
        return fail(MPI_ERR_BUFFER, format!("{what} is NULL"));
    }
    if n > 0 && addr % align != 0 {
        return fail(
            MPI_ERR_BUFFER,
            format!("{what} is not aligned for its datatype"),
        );
    }
    Ok(())
}

/// Which reduction.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Red {
    All,
    Root(c_int),
    Scan,
    Exscan,
    Local,
    Immediate,
}

struct Reduction<'c> {
    comm: &'c SimpleCommunicator,
    send: *const c_void,
    recv: *mut c_void,
    n: usize,
    which: Red,
    /// For `Red::Immediate`: the request made.
    req: &'c mut Option<mpi_on_portals::request::Request<'static>>,
}

impl Visit for Reduction<'_> {
    fn visit<T: mpi_on_portals::Equivalence>(self, op: &dyn Operation<T>) -> Res {
        let c = self.comm;
        let n = self.n;
        let root_here = matches!(self.which, Red::Root(r) if r == c.rank());
        // The receive buffer matters everywhere but at a reduce's non-roots.
        let recv: Option<&mut [T]> = if matches!(self.which, Red::Root(_)) && !root_here {
            None
        } else {
            Some(typed_mut(self.recv, n, "recvbuf")?)
        };
        let send: Vec<T> = if ptr::in_place(self.send) {
            match &recv {
                Some(r) => r.to_vec(),
                None => return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE at a non-root"),
            }
        } else {
            typed::<T>(self.send, n, "sendbuf")?.to_vec()
        };
        match (self.which, recv) {
            (Red::All, Some(r)) => c.all_reduce_into(&send[..], r, op)?,
            (Red::Scan, Some(r)) => c.scan_into(&send[..], r, op)?,
            (Red::Exscan, Some(r)) => c.exclusive_scan_into(&send[..], r, op)?,
            (Red::Root(root), Some(r)) => {
                c.process_at_rank(root).reduce_into_root(&send[..], r, op)?
            }
            (Red::Root(root), None) => c.process_at_rank(root).reduce_into(&send[..], op)?,
            (Red::Local, Some(r)) => op.apply(&send, r),
            (Red::Immediate, Some(r)) => {
                r.copy_from_slice(&send);
                // SAFETY: the C program lends recvbuf until the request
                // completes.
                *self.req = Some(unsafe {
                    mpi_on_portals::raw::immediate_all_reduce(c, r.as_mut_ptr(), n, op)?
                });
            }
            _ => return fail(MPI_ERR_INTERN, "reduction without a receive buffer"),
        }
        Ok(())
    }
}

fn reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: c_int,
    op: c_int,
    comm: c_int,
    which: Red,
) -> Res {
    let n = ptr::count(count)?;
    let c = state::comm(comm)?;
    if let Red::Root(root) = which {
        check_root(&c, root)?;
    }
    let mut req = None;
    dispatch(
        dt,
        op,
        Reduction {
            comm: &c,
            send,
            recv,
            n,
            which,
            req: &mut req,
        },
    )
}

entry! {
    fn MPI_Allreduce | PMPI_Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int) {
        reduce(sendbuf, recvbuf, count, datatype, op, comm, Red::All).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Reduce | PMPI_Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, root: c_int, comm: c_int) {
        reduce(sendbuf, recvbuf, count, datatype, op, comm, Red::Root(root)).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Scan | PMPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int) {
        reduce(sendbuf, recvbuf, count, datatype, op, comm, Red::Scan).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Exscan | PMPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int) {
        reduce(sendbuf, recvbuf, count, datatype, op, comm, Red::Exscan).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Reduce_local | PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int) {
        let n = ptr::count(count)?;
        let c = state::comm(MPI_COMM_SELF)?;
        let mut req = None;
        dispatch(datatype, op, Reduction { comm: &c, send: inbuf, recv: inoutbuf, n, which: Red::Local, req: &mut req })
    }
}

entry! {
    fn MPI_Iallreduce | PMPI_Iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let n = ptr::count(count)?;
            let c = state::comm(comm)?;
            let mut req = None;
            dispatch(datatype, op, Reduction { comm: &c, send: sendbuf, recv: recvbuf, n, which: Red::Immediate, req: &mut req })?;
            let h = add(ReqEntry { live: req, comm, ..ReqEntry::default() })?;
            ptr::out(request, h, "request")
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    /// Reduces the whole vector, then keeps this rank's block.
    fn MPI_Reduce_scatter_block | PMPI_Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: c_int, op: c_int, comm: c_int) {
        let size = state::comm(comm)?.size() as usize;
        let n = ptr::count(recvcount)?;
        let counts = vec![recvcount; size];
        reduce_scatter(sendbuf, recvbuf, &counts, n * size, datatype, op, comm)
    }
}

entry! {
    fn MPI_Reduce_scatter | PMPI_Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: c_int, op: c_int, comm: c_int) {
        let size = state::comm(comm)?.size() as usize;
        let counts = ptr::slice(recvcounts, size, "recvcounts")?.to_vec();
        let mut total = 0;
        for &c in &counts {
            total += ptr::count(c)?;
        }
        reduce_scatter(sendbuf, recvbuf, &counts, total, datatype, op, comm)
    }
}

fn reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    counts: &[c_int],
    total: usize,
    dt: c_int,
    op: c_int,
    comm: c_int,
) -> Res {
    let (c, t) = (state::comm(comm)?, comm_ty(dt)?);
    let me = c.rank() as usize;
    let ext = t.extent();
    let mut all = vec![0u64; (total * ext).div_ceil(8)];
    let allp = all.as_mut_ptr().cast::<c_void>();
    let before: usize = counts[..me].iter().map(|&x| x as usize).sum();
    let mine = counts[me] as usize;
    if ptr::in_place(send) {
        // The whole vector is in recvbuf.
        let b = typed::<u8>(recv, total * ext, "recvbuf")?;
        bytemuck::cast_slice_mut::<u64, u8>(&mut all)[..total * ext].copy_from_slice(b);
    }
    // MPI_IN_PLACE stays: the reduction then starts from `all`.
    reduce(send, allp, total as c_int, dt, op, comm, Red::All).map_err(|f| f.on_comm(comm))?;
    let out = typed_mut::<u8>(recv, mine * ext, "recvbuf")?;
    out.copy_from_slice(
        &bytemuck::cast_slice::<u64, u8>(&all)[before * ext..(before + mine) * ext],
    );
    Ok(())
}

entry! {
    fn MPI_Op_create | PMPI_Op_create(user_fn: Option<UserFn>, commute: c_int, op: *mut c_int) {
        let Some(f) = user_fn else {
            return fail(MPI_ERR_ARG, "user_fn is NULL");
        };
        let h = state::with(|st| {
            st.ops
                .insert(UserOp { f, commute: commute != 0 })
                .map(|i| handle(i, KIND_OP))
                .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many operations"))
        })?;
        ptr::out(op, h, "op")
    }
}

entry! {
    fn MPI_Op_free | PMPI_Op_free(op: *mut c_int) {
        let h = ptr::read(op, "op")?;
        let i = slot(h, KIND_OP).ok_or_else(|| Fail::new(MPI_ERR_OP, format!("{h:#x} is not a user-defined operation")))?;
        state::with(|st| st.ops.remove(i).map(|_| ()).ok_or_else(|| Fail::new(MPI_ERR_OP, "invalid operation")))?;
        ptr::out(op, MPI_OP_NULL, "op")
    }
}

entry! {
    fn MPI_Op_commutative | PMPI_Op_commutative(op: c_int, commute: *mut c_int) {
        let c = match kind(op)? {
            Kind::User(u) => u.commute,
            _ => true,
        };
        ptr::out(commute, c as c_int, "commute")
    }
}

/// Bytes of `count` elements of a contiguous datatype.
pub(crate) fn bytes_of(count: c_int, dt: c_int) -> Result<(usize, Ty), Fail> {
    let n = ptr::count(count)?;
    let t = comm_ty(dt)?;
    if !t.contiguous() {
        return fail(
            MPI_ERR_TYPE,
            "collectives take contiguous datatypes only here",
        );
    }
    Ok((n * t.extent(), t))
}

entry! {
    fn MPI_Barrier | PMPI_Barrier(comm: c_int) {
        let c = state::comm(comm)?;
        c.barrier().map_err(|e| Fail::from(e).on_comm(comm))
    }
}

entry! {
    fn MPI_Ibarrier | PMPI_Ibarrier(comm: c_int, request: *mut c_int) {
        let c = state::comm(comm)?;
        let r = c.immediate_barrier().map_err(|e| Fail::from(e).on_comm(comm))?;
        let h = add(ReqEntry { live: Some(r), comm, ..ReqEntry::default() })?;
        ptr::out(request, h, "request")
    }
}

entry! {
    fn MPI_Bcast | PMPI_Bcast(buffer: *mut c_void, count: c_int, datatype: c_int, root: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let (len, _) = bytes_of(count, datatype)?;
            let b = typed_mut::<u8>(buffer, len, "buffer")?;
            c.process_at_rank(root).broadcast_into(b)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Ibcast | PMPI_Ibcast(buffer: *mut c_void, count: c_int, datatype: c_int, root: c_int, comm: c_int, request: *mut c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let (len, _) = bytes_of(count, datatype)?;
            if len > 0 && buffer.is_null() {
                return fail(MPI_ERR_BUFFER, "buffer is NULL");
            }
            // SAFETY: the C program lends the buffer until the request
            // completes.
            let r = unsafe { mpi_on_portals::raw::immediate_broadcast(&c, root, buffer.cast(), len)? };
            let h = add(ReqEntry { live: Some(r), comm, ..ReqEntry::default() })?;
            ptr::out(request, h, "request")
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// The send block of a gather-like call (`MPI_IN_PLACE`: the root's own
/// block of `recv`).
pub(crate) fn send_block<'a>(send: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    typed::<u8>(send, len, "sendbuf")
}

/// The blocks of a varcount collective's buffer, in bytes.
pub(crate) struct Blocks {
    pub counts: Vec<usize>,
    pub displs: Vec<usize>,
    /// The end of the furthest block: the buffer's length.
    pub end: usize,
}

/// Blocks of `counts[i]` elements of `dt` at `displs[i]` elements (the
/// `v` forms).
pub(crate) fn vblocks(
    counts: *const c_int,
    displs: *const c_int,
    n: usize,
    dt: c_int,
) -> Result<Blocks, Fail> {
    let ext = bytes_of(0, dt)?.1.extent();
    blocks(counts, displs, n, ext, |_, c| Ok(ptr::count(c)? * ext))
}

/// Blocks of `counts[i]` elements of `types[i]` at `displs[i]` bytes (the
/// `w` forms).
pub(crate) fn wblocks(
    counts: *const c_int,
    displs: *const c_int,
    types: *const c_int,
    n: usize,
) -> Result<Blocks, Fail> {
    let ts = ptr::slice(types, n, "datatypes")?;
    blocks(counts, displs, n, 1, |i, c| Ok(bytes_of(c, ts[i])?.0))
}

fn blocks(
    counts: *const c_int,
    displs: *const c_int,
    n: usize,
    unit: usize,
    len: impl Fn(usize, c_int) -> Result<usize, Fail>,
) -> Result<Blocks, Fail> {
    let c = ptr::slice(counts, n, "counts")?;
    let d = ptr::slice(displs, n, "displs")?;
    let mut b = Blocks {
        counts: Vec::with_capacity(n),
        displs: Vec::with_capacity(n),
        end: 0,
    };
    for i in 0..n {
        let l = len(i, c[i])?;
        let at = usize::try_from(d[i])
            .map_err(|_| Fail::new(MPI_ERR_ARG, format!("negative displacement {}", d[i])))?
            * unit;
        b.end = b.end.max(at + l);
        b.counts.push(l);
        b.displs.push(at);
    }
    Ok(b)
}

/// `MPI_ERR_ROOT` unless `root` is a rank of `c`.
pub(crate) fn check_root(c: &SimpleCommunicator, root: c_int) -> Res {
    if root < 0 || root >= c.size() {
        return fail(
            MPI_ERR_ROOT,
            format!(
                "root {root} is not a rank of a {}-member communicator",
                c.size()
            ),
        );
    }
    Ok(())
}

entry! {
    fn MPI_Gather | PMPI_Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let p = c.process_at_rank(root);
            if c.rank() == root {
                let (rl, _) = bytes_of(recvcount, recvtype)?;
                let size = c.size() as usize;
                let recv = typed_mut::<u8>(recvbuf, rl * size, "recvbuf")?;
                let mine: Vec<u8> = if ptr::in_place(sendbuf) {
                    let me = root as usize;
                    recv[me * rl..(me + 1) * rl].to_vec()
                } else {
                    let (sl, _) = bytes_of(sendcount, sendtype)?;
                    send_block(sendbuf, sl)?.to_vec()
                };
                p.gather_into_root(&mine[..], recv)?;
            } else {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                p.gather_into(send_block(sendbuf, sl)?)?;
            }
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Gatherv | PMPI_Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, root: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let p = c.process_at_rank(root);
            if c.rank() == root {
                let size = c.size() as usize;
                let Blocks { counts: cs, displs: ds, end } = vblocks(recvcounts, displs, size, recvtype)?;
                let recv = typed_mut::<u8>(recvbuf, end, "recvbuf")?;
                let me = root as usize;
                let mine: Vec<u8> = if ptr::in_place(sendbuf) {
                    recv[ds[me]..ds[me] + cs[me]].to_vec()
                } else {
                    let (sl, _) = bytes_of(sendcount, sendtype)?;
                    send_block(sendbuf, sl)?.to_vec()
                };
                let mut part = PartitionMut::new(recv, cs, ds)?;
                p.gather_varcount_into_root(&mine[..], &mut part)?;
            } else {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                p.gather_varcount_into(send_block(sendbuf, sl)?)?;
            }
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Scatter | PMPI_Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let p = c.process_at_rank(root);
            if c.rank() == root {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                let size = c.size() as usize;
                let send = typed::<u8>(sendbuf, sl * size, "sendbuf")?;
                if ptr::in_place(recvbuf) {
                    let mut scratch = vec![0u8; sl];
                    p.scatter_into_root(send, &mut scratch[..])?;
                } else {
                    let recv = typed_mut::<u8>(recvbuf, sl, "recvbuf")?;
                    p.scatter_into_root(send, recv)?;
                }
            } else {
                let (rl, _) = bytes_of(recvcount, recvtype)?;
                p.scatter_into(typed_mut::<u8>(recvbuf, rl, "recvbuf")?)?;
            }
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Scatterv | PMPI_Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            check_root(&c, root)?;
            let p = c.process_at_rank(root);
            if c.rank() == root {
                let size = c.size() as usize;
                let Blocks { counts: cs, displs: ds, end } = vblocks(sendcounts, displs, size, sendtype)?;
                let send = typed::<u8>(sendbuf, end, "sendbuf")?;
                let me = root as usize;
                let mut scratch;
                let recv: &mut [u8] = if ptr::in_place(recvbuf) {
                    scratch = vec![0u8; cs[me]];
                    &mut scratch[..]
                } else {
                    typed_mut::<u8>(recvbuf, cs[me], "recvbuf")?
                };
                let part = Partition::new(send, cs, ds)?;
                p.scatter_varcount_into_root(&part, recv)?;
            } else {
                let (rl, _) = bytes_of(recvcount, recvtype)?;
                p.scatter_varcount_into(typed_mut::<u8>(recvbuf, rl, "recvbuf")?)?;
            }
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Allgather | PMPI_Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            let (rl, _) = bytes_of(recvcount, recvtype)?;
            let size = c.size() as usize;
            let recv = typed_mut::<u8>(recvbuf, rl * size, "recvbuf")?;
            let me = c.rank() as usize;
            let mine: Vec<u8> = if ptr::in_place(sendbuf) {
                recv[me * rl..(me + 1) * rl].to_vec()
            } else {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                send_block(sendbuf, sl)?.to_vec()
            };
            c.all_gather_into(&mine[..], recv)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Allgatherv | PMPI_Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            let size = c.size() as usize;
            let Blocks { counts: cs, displs: ds, end } = vblocks(recvcounts, displs, size, recvtype)?;
            let recv = typed_mut::<u8>(recvbuf, end, "recvbuf")?;
            let me = c.rank() as usize;
            let mine: Vec<u8> = if ptr::in_place(sendbuf) {
                recv[ds[me]..ds[me] + cs[me]].to_vec()
            } else {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                send_block(sendbuf, sl)?.to_vec()
            };
            let mut part = PartitionMut::new(recv, cs, ds)?;
            c.all_gather_varcount_into(&mine[..], &mut part)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Alltoall | PMPI_Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            let (rl, _) = bytes_of(recvcount, recvtype)?;
            let size = c.size() as usize;
            let recv = typed_mut::<u8>(recvbuf, rl * size, "recvbuf")?;
            let send: Vec<u8> = if ptr::in_place(sendbuf) {
                recv.to_vec()
            } else {
                let (sl, _) = bytes_of(sendcount, sendtype)?;
                typed::<u8>(sendbuf, sl * size, "sendbuf")?.to_vec()
            };
            c.all_to_all_into(&send[..], recv)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Alltoallv | PMPI_Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: c_int, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: c_int, comm: c_int) {
        (|| {
            let c = state::comm(comm)?;
            let size = c.size() as usize;
            let Blocks { counts: rc, displs: rd, end: rend } = vblocks(recvcounts, rdispls, size, recvtype)?;
            let recv = typed_mut::<u8>(recvbuf, rend, "recvbuf")?;
            let (send, sc, sd): (Vec<u8>, _, _) = if ptr::in_place(sendbuf) {
                (recv.to_vec(), rc.clone(), rd.clone())
            } else {
                let Blocks { counts: sc, displs: sd, end: send } = vblocks(sendcounts, sdispls, size, sendtype)?;
                (typed::<u8>(sendbuf, send, "sendbuf")?.to_vec(), sc, sd)
            };
            let sp = Partition::new(&send[..], sc, sd)?;
            let mut rp = PartitionMut::new(recv, rc, rd)?;
            c.all_to_all_varcount_into(&sp, &mut rp)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// A completed request, for collectives that have no non-blocking form
/// underneath: they run to completion in the call.
pub fn completed(comm: c_int, request: *mut c_int) -> Res {
    let h = add(ReqEntry {
        done: Some(Done::empty()),
        comm,
        ..ReqEntry::default()
    })?;
    ptr::out(request, h, "request")
}
