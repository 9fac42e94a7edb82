//! Requests (`MPI_Request`): the table entry of a pending operation, and
//! the wait/test family.

use std::ffi::c_int;

use mpi_on_portals::request::{wait_any, Request};
use mpi_on_portals::{MpiError, Status};

use crate::consts::*;
use crate::datatype::Ty;
use crate::error::{class_of, fail, Fail, Res};
use crate::ptr;
use crate::state::{self, handle, slot};

/// How a request ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct Done {
    pub source: c_int,
    pub tag: c_int,
    pub bytes: usize,
    pub cancelled: bool,
    pub err: c_int,
}

impl Done {
    /// The status of an operation with `MPI_PROC_NULL` (or of an empty
    /// request).
    pub fn empty() -> Done {
        Done {
            source: MPI_PROC_NULL,
            tag: MPI_ANY_TAG,
            ..Done::default()
        }
    }

    pub fn of(s: &Status) -> Done {
        Done {
            source: s.source_rank(),
            tag: s.tag(),
            bytes: s.count_bytes(),
            cancelled: s.is_cancelled(),
            err: MPI_SUCCESS,
        }
    }

    /// From a wait's result; a truncation keeps its status.
    pub fn from_result(r: Result<Status, MpiError>) -> (Done, Option<Fail>) {
        match r {
            Ok(s) => (Done::of(&s), None),
            Err(MpiError::Truncated(s)) => {
                let mut d = Done::of(&s);
                d.err = MPI_ERR_TRUNCATE;
                (d, Some(MpiError::Truncated(s).into()))
            }
            Err(e) => {
                let d = Done {
                    err: class_of(&e),
                    ..Done::empty()
                };
                (d, Some(e.into()))
            }
        }
    }

    /// Write into a C status unless it is `MPI_STATUS_IGNORE`.
    pub(crate) fn write(&self, s: *mut MpiStatus, with_error: bool) {
        if ptr::ignored(s) {
            return;
        }
        let bytes = self.bytes as u64;
        let hi = ((bytes >> 32) << 1) as c_int;
        // SAFETY: not null or MPI_STATUS_IGNORE: MPI requires a writable
        // status.
        unsafe {
            (*s).count_lo = bytes as u32 as c_int;
            (*s).count_hi_and_cancelled = hi | self.cancelled as c_int;
            (*s).source = self.source;
            (*s).tag = self.tag;
            if with_error {
                (*s).error = self.err;
            }
        }
    }
}

/// A receive into a non-contiguous type: where the packed data goes.
pub struct Unpack {
    pub tmp: Vec<u8>,
    pub dst: usize,
    pub count: usize,
    pub ty: Ty,
}

/// How a persistent request starts again (`MPI_Start`).
#[derive(Clone, Copy)]
pub enum Persist {
    Send {
        buf: usize,
        count: c_int,
        dt: c_int,
        dest: c_int,
        tag: c_int,
        comm: c_int,
        mode: crate::p2p::Mode,
    },
    Recv {
        buf: usize,
        count: c_int,
        dt: c_int,
        src: c_int,
        tag: c_int,
        comm: c_int,
    },
}

/// A request's table entry.
#[derive(Default)]
pub struct ReqEntry {
    pub live: Option<Request<'static>>,
    /// Completed without a live request (`MPI_PROC_NULL`, done at start).
    pub done: Option<Done>,
    /// Packed send data, alive until the send completes.
    pub keep: Option<Vec<u8>>,
    pub unpack: Option<Unpack>,
    pub persist: Option<Persist>,
    pub comm: c_int,
}

/// Store `e`; its handle.
pub fn add(e: ReqEntry) -> Result<c_int, Fail> {
    state::with(|st| {
        st.reqs
            .insert(e)
            .map(|i| handle(i, KIND_REQUEST))
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many requests"))
    })
}

fn req_slot(h: c_int) -> Result<usize, Fail> {
    slot(h, KIND_REQUEST)
        .ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}")))
}

/// What a wait takes out of an entry.
enum Taken {
    /// `MPI_REQUEST_NULL` or an inactive persistent request.
    Inactive,
    Ready(Done),
    Live(Request<'static>),
}

fn take(h: c_int) -> Result<Taken, Fail> {
    if h == MPI_REQUEST_NULL {
        return Ok(Taken::Inactive);
    }
    let i = req_slot(h)?;
    state::with(|st| {
        let e = st
            .reqs
            .get_mut(i)
            .ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}")))?;
        Ok(match (e.live.take(), e.done.take()) {
            (Some(r), _) => Taken::Live(r),
            (None, Some(d)) => Taken::Ready(d),
            (None, None) => Taken::Inactive,
        })
    })
}

fn put_back(h: c_int, r: Request<'static>) {
    if let Some(i) = slot(h, KIND_REQUEST) {
        if let Some(st) = state::lock().as_mut() {
            if let Some(e) = st.reqs.get_mut(i) {
                e.live = Some(r);
            }
        }
    }
}

/// Finish request `*h` with `d`: unpack, free (or deactivate) the entry,
/// set the handle to `MPI_REQUEST_NULL` unless persistent.
fn finish(h: &mut c_int, mut d: Done) -> Done {
    let Some(i) = slot(*h, KIND_REQUEST) else {
        return d;
    };
    let mut g = state::lock();
    let Some(st) = g.as_mut() else {
        return d;
    };
    let persistent = st.reqs.get(i).is_some_and(|e| e.persist.is_some());
    let e = if persistent {
        st.reqs.get_mut(i).map(|e| {
            e.keep = None;
            e.unpack.take()
        })
    } else {
        st.reqs.remove(i).map(|e| e.unpack)
    };
    drop(g);
    if let Some(Some(u)) = e {
        let n = d.bytes.min(u.tmp.len());
        // SAFETY: the receive's buffer, lent by the C program until this
        // completion, holds `count` elements of the type.
        unsafe { u.ty.unpack(&u.tmp[..n], u.dst as *mut u8, u.count) };
        d.bytes = n;
    }
    if !persistent {
        *h = MPI_REQUEST_NULL;
    }
    d
}

/// What a wait needs of an entry, claimed in one lock: a non-persistent
/// entry leaves the table, a persistent one becomes inactive.
struct Claim {
    taken: Taken,
    comm: c_int,
    unpack: Option<Unpack>,
    /// Packed send data: dropped once the send is complete.
    keep: Option<Vec<u8>>,
    persistent: bool,
}

fn claim(h: c_int) -> Result<Claim, Fail> {
    if h == MPI_REQUEST_NULL {
        return Ok(Claim {
            taken: Taken::Inactive,
            comm: MPI_COMM_WORLD,
            unpack: None,
            keep: None,
            persistent: true,
        });
    }
    let i = req_slot(h)?;
    state::with(|st| {
        let bad = || Fail::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}"));
        let persistent = st.reqs.get(i).ok_or_else(bad)?.persist.is_some();
        let mut e = if persistent {
            let e = st.reqs.get_mut(i).ok_or_else(bad)?;
            ReqEntry {
                live: e.live.take(),
                done: e.done.take(),
                keep: e.keep.take(),
                unpack: e.unpack.take(),
                persist: None,
                comm: e.comm,
            }
        } else {
            st.reqs.remove(i).ok_or_else(bad)?
        };
        let taken = match (e.live.take(), e.done.take()) {
            (Some(r), _) => Taken::Live(r),
            (None, Some(d)) => Taken::Ready(d),
            (None, None) => Taken::Inactive,
        };
        Ok(Claim {
            taken,
            comm: e.comm,
            unpack: e.unpack.take(),
            keep: e.keep.take(),
            persistent,
        })
    })
}

/// Wait for `*h`; its status. Errors go to the request's communicator.
pub fn wait_one(h: &mut c_int) -> Result<Done, Fail> {
    let c = claim(*h)?;
    let (mut d, err) = match c.taken {
        Taken::Inactive => (Done::empty(), None),
        Taken::Ready(d) => (d, None),
        Taken::Live(r) => Done::from_result(r.wait()),
    };
    drop(c.keep);
    if let Some(u) = c.unpack {
        let n = d.bytes.min(u.tmp.len());
        // SAFETY: the receive's buffer, lent by the C program until this
        // completion, holds `count` elements of the type.
        unsafe { u.ty.unpack(&u.tmp[..n], u.dst as *mut u8, u.count) };
        d.bytes = n;
    }
    if !c.persistent {
        *h = MPI_REQUEST_NULL;
    }
    match err {
        Some(f) => Err(f.on_comm(c.comm)),
        None => Ok(d),
    }
}

/// Test `*h`: its status if complete.
fn test_one(h: &mut c_int) -> Result<Option<Done>, Fail> {
    match take(*h)? {
        Taken::Inactive => Ok(Some(Done::empty())),
        Taken::Ready(d) => Ok(Some(finish(h, d))),
        Taken::Live(r) => match r.is_complete() {
            Ok(true) => {
                put_back(*h, r);
                wait_one(h).map(Some)
            }
            Ok(false) => {
                put_back(*h, r);
                Ok(None)
            }
            Err(e) => {
                put_back(*h, r);
                Err(Fail::from(e).on_comm(comm_of(*h)))
            }
        },
    }
}

fn comm_of(h: c_int) -> c_int {
    slot(h, KIND_REQUEST)
        .and_then(|i| {
            state::lock()
                .as_ref()
                .and_then(|st| st.reqs.get(i).map(|e| e.comm))
        })
        .unwrap_or(MPI_COMM_WORLD)
}

entry! {
    fn MPI_Wait | PMPI_Wait(request: *mut c_int, status: *mut MpiStatus) {
        let mut h = ptr::read(request, "request")?;
        let r = wait_one(&mut h);
        ptr::out(request, h, "request")?;
        let d = r?;
        d.write(status, false);
        Ok(())
    }
}

entry! {
    fn MPI_Test | PMPI_Test(request: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) {
        let mut h = ptr::read(request, "request")?;
        let r = test_one(&mut h);
        ptr::out(request, h, "request")?;
        match r? {
            Some(d) => {
                d.write(status, false);
                ptr::out(flag, 1, "flag")
            }
            None => ptr::out(flag, 0, "flag"),
        }
    }
}

/// Statuses array element `i`, or ignore.
fn status_at(statuses: *mut MpiStatus, i: usize) -> *mut MpiStatus {
    if ptr::ignored(statuses) {
        statuses
    } else {
        statuses.wrapping_add(i)
    }
}

entry! {
    fn MPI_Waitall | PMPI_Waitall(count: c_int, requests: *mut c_int, statuses: *mut MpiStatus) {
        let n = ptr::count(count)?;
        let reqs = ptr::slice_mut(requests, n, "array_of_requests")?;
        let mut first: Option<Fail> = None;
        let mut any_err = false;
        for (i, h) in reqs.iter_mut().enumerate() {
            match wait_one(h) {
                Ok(d) => d.write(status_at(statuses, i), true),
                Err(f) => {
                    any_err = true;
                    let d = Done { err: f.class, ..Done::empty() };
                    d.write(status_at(statuses, i), true);
                    first.get_or_insert(f);
                }
            }
        }
        match first {
            Some(f) if any_err && n > 1 && !ptr::ignored(statuses) => {
                Err(Fail { class: MPI_ERR_IN_STATUS, ..f })
            }
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
}

entry! {
    fn MPI_Waitany | PMPI_Waitany(
        count: c_int,
        requests: *mut c_int,
        index: *mut c_int,
        status: *mut MpiStatus,
    ) {
        let n = ptr::count(count)?;
        let reqs = ptr::slice_mut(requests, n, "array_of_requests")?;
        // Anything already complete first, then wait on the live ones.
        let mut live: Vec<Request<'static>> = Vec::new();
        let mut at: Vec<usize> = Vec::new();
        for i in 0..n {
            match take(reqs[i])? {
                Taken::Inactive => {}
                Taken::Ready(d) => {
                    for (j, r) in at.iter().zip(live.drain(..)) {
                        put_back(reqs[*j], r);
                    }
                    let d = finish(&mut reqs[i], d);
                    ptr::out(index, i as c_int, "index")?;
                    d.write(status, false);
                    return Ok(());
                }
                Taken::Live(r) => {
                    live.push(r);
                    at.push(i);
                }
            }
        }
        if live.is_empty() {
            ptr::out(index, MPI_UNDEFINED, "index")?;
            Done::empty().write(status, false);
            return Ok(());
        }
        let r = wait_any(&mut live);
        let (k, res) = match r {
            Ok((k, s)) => (k, Ok(s)),
            Err(e) => {
                for (j, r) in at.iter().zip(live) {
                    put_back(reqs[*j], r);
                }
                return Err(e.into());
            }
        };
        let i = at.remove(k);
        for (j, r) in at.iter().zip(live) {
            put_back(reqs[*j], r);
        }
        let (d, err) = Done::from_result(res);
        let d = finish(&mut reqs[i], d);
        ptr::out(index, i as c_int, "index")?;
        d.write(status, false);
        match err {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
}

/// Test every request; the completed ones' indices and statuses.
fn test_some(
    reqs: &mut [c_int],
    indices: &mut [c_int],
    statuses: *mut MpiStatus,
) -> Result<Option<usize>, Fail> {
    let mut k = 0;
    let mut active = 0;
    for i in 0..reqs.len() {
        if reqs[i] == MPI_REQUEST_NULL {
            continue;
        }
        let persistent_inactive = matches!(take_peek(reqs[i]), Some(false));
        if persistent_inactive {
            continue;
        }
        active += 1;
        if let Some(d) = test_one(&mut reqs[i])? {
            indices[k] = i as c_int;
            d.write(status_at(statuses, k), true);
            k += 1;
        }
    }
    Ok((active > 0).then_some(k))
}

/// For a valid handle: whether it is active.
fn take_peek(h: c_int) -> Option<bool> {
    let i = slot(h, KIND_REQUEST)?;
    let g = state::lock();
    let e = g.as_ref()?.reqs.get(i)?;
    Some(e.live.is_some() || e.done.is_some())
}

entry! {
    fn MPI_Testsome | PMPI_Testsome(
        incount: c_int,
        requests: *mut c_int,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MpiStatus,
    ) {
        let n = ptr::count(incount)?;
        let reqs = ptr::slice_mut(requests, n, "array_of_requests")?;
        let idx = ptr::slice_mut(indices, n, "array_of_indices")?;
        let r = test_some(reqs, idx, statuses)?;
        ptr::out(outcount, r.map_or(MPI_UNDEFINED, |k| k as c_int), "outcount")
    }
}

entry! {
    fn MPI_Waitsome | PMPI_Waitsome(
        incount: c_int,
        requests: *mut c_int,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MpiStatus,
    ) {
        let n = ptr::count(incount)?;
        let reqs = ptr::slice_mut(requests, n, "array_of_requests")?;
        let idx = ptr::slice_mut(indices, n, "array_of_indices")?;
        match test_some(reqs, idx, statuses)? {
            Some(0) => {
                let mut i: c_int = 0;
                let mut s = MpiStatus::default();
                // SAFETY: the arrays checked above, forwarded.
                let rc = unsafe { PMPI_Waitany(incount, requests, &mut i, &mut s) };
                if rc != MPI_SUCCESS {
                    return fail(rc, "MPI_Waitsome: a request failed");
                }
                idx[0] = i;
                if !ptr::ignored(statuses) {
                    // SAFETY: at least one status slot (incount > 0 here).
                    unsafe { *statuses = s };
                }
                let more = test_some(reqs, &mut idx[1..], status_at(statuses, 1))?.unwrap_or(0);
                ptr::out(outcount, 1 + more as c_int, "outcount")
            }
            r => ptr::out(outcount, r.map_or(MPI_UNDEFINED, |k| k as c_int), "outcount"),
        }
    }
}

entry! {
    fn MPI_Testany | PMPI_Testany(
        count: c_int,
        requests: *mut c_int,
        index: *mut c_int,
        flag: *mut c_int,
        status: *mut MpiStatus,
    ) {
        let n = ptr::count(count)?;
        let reqs = ptr::slice_mut(requests, n, "array_of_requests")?;
        let mut active = false;
        for i in 0..n {
            if reqs[i] == MPI_REQUEST_NULL || take_peek(reqs[i]) == Some(false) {
                continue;
            }
            active = true;
            if let Some(d) = test_one(&mut reqs[i])? {
                d.write(status, false);
                ptr::out(index, i as c_int, "index")?;
                return ptr::out(flag, 1, "flag");
            }
        }
        ptr::out(index, MPI_UNDEFINED, "index")?;
        if !active {
            Done::empty().write(status, false);
        }
        ptr::out(flag, (!active) as c_int, "flag")
    }
}

entry! {
    fn MPI_Testall | PMPI_Testall(
        count: c_int,
        requests: *mut c_int,
        flag: *mut c_int,
        statuses: *mut MpiStatus,
    ) {
        let n = ptr::count(count)?;
        let reqs = ptr::slice(requests, n, "array_of_requests")?;
        for &h in reqs {
            if h == MPI_REQUEST_NULL {
                continue;
            }
            let i = req_slot(h)?;
            let r = state::with(|st| {
                let e = st.reqs.get(i).ok_or_else(|| Fail::new(MPI_ERR_REQUEST, "invalid request"))?;
                Ok(match &e.live {
                    Some(r) => r.is_complete()?,
                    None => true,
                })
            })?;
            if !r {
                return ptr::out(flag, 0, "flag");
            }
        }
        ptr::out(flag, 1, "flag")?;
        // SAFETY: the same arrays, forwarded.
        let rc = unsafe { PMPI_Waitall(count, requests, statuses) };
        if rc != MPI_SUCCESS {
            return fail(rc, "a request failed");
        }
        Ok(())
    }
}

entry! {
    /// A send still pending completes in the background; a persistent
    /// request's pending operation too.
    fn MPI_Request_free | PMPI_Request_free(request: *mut c_int) {
        let h = ptr::read(request, "request")?;
        let i = req_slot(h)?;
        let e = state::with(|st| {
            st.reqs.remove(i).ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}")))
        })?;
        if let Some(r) = e.live {
            if e.keep.is_some() || e.unpack.is_some() {
                // Its memory is ours: finish it before dropping that.
                let _ = r.wait();
            } else {
                mpi_on_portals::raw::detach(r);
            }
        }
        ptr::out(request, MPI_REQUEST_NULL, "request")
    }
}

entry! {
    /// Receives can be cancelled; a send cannot (the call succeeds, and
    /// `MPI_Test_cancelled` says false).
    fn MPI_Cancel | PMPI_Cancel(request: *mut c_int) {
        let h = ptr::read(request, "request")?;
        let i = req_slot(h)?;
        state::with(|st| {
            let e = st.reqs.get(i).ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}")))?;
            if let Some(r) = &e.live {
                r.cancel()?;
            }
            Ok(())
        })
    }
}

entry! {
    fn MPI_Test_cancelled | PMPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) {
        let s = ptr::read(status, "status")?;
        ptr::out(flag, s.count_hi_and_cancelled & 1, "flag")
    }
}

/// The bytes a status says arrived.
fn status_bytes(s: &MpiStatus) -> u64 {
    (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled as u32 as u64) >> 1) << 32)
}

/// Whole units of `unit` bytes in `bytes`, or `MPI_UNDEFINED`.
fn units(bytes: u64, unit: usize) -> c_int {
    if unit == 0 {
        0
    } else if bytes % unit as u64 != 0 {
        MPI_UNDEFINED
    } else {
        c_int::try_from(bytes / unit as u64).unwrap_or(MPI_UNDEFINED)
    }
}

entry! {
    fn MPI_Get_count | PMPI_Get_count(status: *const MpiStatus, datatype: c_int, count: *mut c_int) {
        let s = ptr::read(status, "status")?;
        let size = crate::datatype::ty(datatype)?.size();
        ptr::out(count, units(status_bytes(&s), size), "count")
    }
}

entry! {
    /// Basic elements: the received bytes over the size of the one basic
    /// type a derived type is made of. A derived type mixing basic types
    /// (a struct) does not record its type map: unsupported.
    fn MPI_Get_elements | PMPI_Get_elements(status: *const MpiStatus, datatype: c_int, count: *mut c_int) {
        use crate::datatype::Elem;
        let s = ptr::read(status, "status")?;
        let unit = match crate::datatype::ty(datatype)? {
            Ty::Basic { size, .. } => size,
            Ty::Derived(d) => match d.elem {
                Some(Elem::I8 | Elem::U8) => 1,
                Some(Elem::I16 | Elem::U16) => 2,
                Some(Elem::I32 | Elem::U32 | Elem::F32) => 4,
                Some(Elem::I64 | Elem::U64 | Elem::F64) => 8,
                None => {
                    return fail(
                        MPI_ERR_UNSUPPORTED_OPERATION,
                        "MPI_Get_elements of a derived type mixing basic types",
                    )
                }
            },
        };
        ptr::out(count, units(status_bytes(&s), unit), "count")
    }
}

entry! {
    fn MPI_Start | PMPI_Start(request: *mut c_int) {
        let h = ptr::read(request, "request")?;
        start(h)
    }
}

entry! {
    fn MPI_Startall | PMPI_Startall(count: c_int, requests: *mut c_int) {
        let n = ptr::count(count)?;
        for &h in ptr::slice(requests, n, "array_of_requests")? {
            start(h)?;
        }
        Ok(())
    }
}

fn start(h: c_int) -> Res {
    let i = req_slot(h)?;
    let p = state::with(|st| {
        let e = st
            .reqs
            .get(i)
            .ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}")))?;
        if e.live.is_some() || e.done.is_some() {
            return fail(MPI_ERR_REQUEST, "the persistent request is already active");
        }
        e.persist
            .ok_or_else(|| Fail::new(MPI_ERR_REQUEST, "not a persistent request"))
    })?;
    let mut fresh = match p {
        Persist::Send {
            buf,
            count,
            dt,
            dest,
            tag,
            comm,
            mode,
        } => crate::p2p::start_send(buf as *const _, count, dt, dest, tag, comm, mode)?,
        Persist::Recv {
            buf,
            count,
            dt,
            src,
            tag,
            comm,
        } => crate::p2p::start_recv(buf as *mut _, count, dt, src, tag, comm)?,
    };
    fresh.persist = Some(p);
    state::with(|st| {
        if let Some(e) = st.reqs.get_mut(i) {
            *e = fresh;
        }
        Ok(())
    })
}
