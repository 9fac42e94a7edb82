//! Point-to-point: blocking, non-blocking and persistent sends and
//! receives in every mode, probes, `MPI_Sendrecv`, attached buffers.

use std::borrow::Cow;
use std::ffi::{c_int, c_void};

use mpi_on_portals::raw::{self, SendMode};
use mpi_on_portals::traits::*;
use mpi_on_portals::SimpleCommunicator;

use crate::consts::*;
use crate::datatype::{builtin_bytes, comm_ty};
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::request::{add, wait_one, Done, Persist, ReqEntry, Unpack};
use crate::state;

/// The send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Standard,
    Synchronous,
    Ready,
    Buffered,
}

/// Start a send; the request's entry (not yet in the table).
pub fn start_send(
    buf: *const c_void,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    mode: Mode,
) -> Result<ReqEntry, Fail> {
    let n = ptr::count(count)?;
    let bytes = match builtin_bytes(dt, n) {
        Some(len) => Cow::Borrowed(ptr::slice(buf.cast::<u8>(), len, "buf")?),
        None => comm_ty(dt)?.send_bytes(buf, n)?,
    };
    state::with_comm(comm, |c| {
        let done = ReqEntry {
            done: Some(Done::empty()),
            comm,
            ..ReqEntry::default()
        };
        if dest == MPI_PROC_NULL {
            return Ok(done);
        }
        let p = c.process_at_rank(dest);
        let sm = match mode {
            Mode::Buffered => {
                p.buffered_send_with_tag(&bytes[..], tag)?;
                return Ok(done);
            }
            Mode::Standard => SendMode::Standard,
            Mode::Synchronous => SendMode::Synchronous,
            Mode::Ready => SendMode::Ready,
        };
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        let keep = match bytes {
            Cow::Borrowed(_) => None,
            Cow::Owned(v) => Some(v),
        };
        // SAFETY: a borrowed buffer is the C program's, lent until the
        // request completes (MPI's rule); a packed one moves into the entry
        // with the request, and a vector's heap buffer does not move.
        let r = unsafe { raw::immediate_send(&p, ptr, len, tag, sm)? };
        Ok(ReqEntry {
            live: Some(r),
            keep,
            comm,
            ..ReqEntry::default()
        })
    })
}

/// Start a receive; the request's entry.
pub fn start_recv(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    src: c_int,
    tag: c_int,
    comm: c_int,
) -> Result<ReqEntry, Fail> {
    let n = ptr::count(count)?;
    let t = comm_ty(dt)?;
    state::with_comm(comm, |c| {
        if src == MPI_PROC_NULL {
            return Ok(ReqEntry {
                done: Some(Done::empty()),
                comm,
                ..ReqEntry::default()
            });
        }
        let len = n
            .checked_mul(t.extent())
            .ok_or_else(|| Fail::new(MPI_ERR_COUNT, "count too large"))?;
        if len > 0 && buf.is_null() {
            return fail(MPI_ERR_BUFFER, "buf is NULL");
        }
        let mut unpack = None;
        let (p, l) = if t.contiguous() {
            (buf.cast::<u8>(), len)
        } else {
            let mut tmp = vec![0u8; n * t.size()];
            let p = tmp.as_mut_ptr();
            let l = tmp.len();
            unpack = Some(Unpack {
                tmp,
                dst: buf as usize,
                count: n,
                ty: t,
            });
            (p, l)
        };
        // SAFETY: the C program lends `buf` until the request completes (MPI's
        // rule); a temporary moves into the entry and its heap buffer stays.
        let r = unsafe {
            if src == MPI_ANY_SOURCE {
                raw::immediate_receive(&c.any_process(), p, l, tag)?
            } else {
                raw::immediate_receive(&c.process_at_rank(src), p, l, tag)?
            }
        };
        Ok(ReqEntry {
            live: Some(r),
            unpack,
            comm,
            ..ReqEntry::default()
        })
    })
}

fn blocking_send(
    buf: *const c_void,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    mode: Mode,
) -> Res {
    if mode == Mode::Buffered {
        start_send(buf, count, dt, dest, tag, comm, mode)?;
        return Ok(());
    }
    let n = ptr::count(count)?;
    let bytes = match builtin_bytes(dt, n) {
        Some(len) => Cow::Borrowed(ptr::slice(buf.cast::<u8>(), len, "buf")?),
        None => comm_ty(dt)?.send_bytes(buf, n)?,
    };
    state::with_comm(comm, |c| {
        if dest == MPI_PROC_NULL {
            return Ok(());
        }
        let p = c.process_at_rank(dest);
        match mode {
            Mode::Synchronous => p.synchronous_send_with_tag(&bytes[..], tag)?,
            Mode::Ready => p.ready_send_with_tag(&bytes[..], tag)?,
            _ => p.send_with_tag(&bytes[..], tag)?,
        }
        Ok(())
    })
}

macro_rules! send_fn {
    ($name:ident, $pname:ident, $mode:expr) => {
        entry! {
            fn $name | $pname(
                buf: *const c_void,
                count: c_int,
                datatype: c_int,
                dest: c_int,
                tag: c_int,
                comm: c_int,
            ) {
                blocking_send(buf, count, datatype, dest, tag, comm, $mode).map_err(|f| f.on_comm(comm))
            }
        }
    };
}

send_fn!(MPI_Send, PMPI_Send, Mode::Standard);
send_fn!(MPI_Ssend, PMPI_Ssend, Mode::Synchronous);
send_fn!(MPI_Rsend, PMPI_Rsend, Mode::Ready);
send_fn!(MPI_Bsend, PMPI_Bsend, Mode::Buffered);

macro_rules! isend_fn {
    ($name:ident, $pname:ident, $mode:expr) => {
        entry! {
            fn $name | $pname(
                buf: *const c_void,
                count: c_int,
                datatype: c_int,
                dest: c_int,
                tag: c_int,
                comm: c_int,
                request: *mut c_int,
            ) {
                (|| {
                    let e = start_send(buf, count, datatype, dest, tag, comm, $mode)?;
                    ptr::out(request, add(e)?, "request")
                })()
                .map_err(|f: Fail| f.on_comm(comm))
            }
        }
    };
}

isend_fn!(MPI_Isend, PMPI_Isend, Mode::Standard);
isend_fn!(MPI_Issend, PMPI_Issend, Mode::Synchronous);
isend_fn!(MPI_Irsend, PMPI_Irsend, Mode::Ready);
isend_fn!(MPI_Ibsend, PMPI_Ibsend, Mode::Buffered);

macro_rules! send_init_fn {
    ($name:ident, $pname:ident, $mode:expr) => {
        entry! {
            fn $name | $pname(
                buf: *const c_void,
                count: c_int,
                datatype: c_int,
                dest: c_int,
                tag: c_int,
                comm: c_int,
                request: *mut c_int,
            ) {
                (|| {
                    ptr::count(count)?;
                    comm_ty(datatype)?;
                    state::comm(comm)?;
                    let e = ReqEntry {
                        persist: Some(Persist::Send {
                            buf: buf as usize, count, dt: datatype, dest, tag, comm, mode: $mode,
                        }),
                        comm,
                        ..ReqEntry::default()
                    };
                    ptr::out(request, add(e)?, "request")
                })()
                .map_err(|f: Fail| f.on_comm(comm))
            }
        }
    };
}

send_init_fn!(MPI_Send_init, PMPI_Send_init, Mode::Standard);
send_init_fn!(MPI_Ssend_init, PMPI_Ssend_init, Mode::Synchronous);
send_init_fn!(MPI_Rsend_init, PMPI_Rsend_init, Mode::Ready);
send_init_fn!(MPI_Bsend_init, PMPI_Bsend_init, Mode::Buffered);

entry! {
    fn MPI_Recv_init | PMPI_Recv_init(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        request: *mut c_int,
    ) {
        (|| {
            ptr::count(count)?;
            comm_ty(datatype)?;
            state::comm(comm)?;
            let e = ReqEntry {
                persist: Some(Persist::Recv { buf: buf as usize, count, dt: datatype, src: source, tag, comm }),
                comm,
                ..ReqEntry::default()
            };
            ptr::out(request, add(e)?, "request")
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Irecv | PMPI_Irecv(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        request: *mut c_int,
    ) {
        (|| {
            let e = start_recv(buf, count, datatype, source, tag, comm)?;
            ptr::out(request, add(e)?, "request")
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// A blocking receive, in place when the type is contiguous.
fn recv(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    src: c_int,
    tag: c_int,
    comm: c_int,
) -> Result<Done, Fail> {
    let n = ptr::count(count)?;
    let len = match builtin_bytes(dt, n) {
        Some(len) => len,
        None => {
            let t = comm_ty(dt)?;
            if !t.contiguous() && src != MPI_PROC_NULL {
                let mut h = add(start_recv(buf, count, dt, src, tag, comm)?)?;
                return wait_one(&mut h);
            }
            n.checked_mul(t.extent())
                .ok_or_else(|| Fail::new(MPI_ERR_COUNT, "count too large"))?
        }
    };
    state::with_comm(comm, |c| {
        if src == MPI_PROC_NULL {
            return Ok(Done::empty());
        }
        let b = ptr::slice_mut(buf.cast::<u8>(), len, "buf")?;
        let r = if src == MPI_ANY_SOURCE {
            c.any_process().receive_into_with_tag(b, tag)
        } else {
            c.process_at_rank(src).receive_into_with_tag(b, tag)
        };
        let (d, err) = Done::from_result(r);
        match err {
            Some(f) => Err(f),
            None => Ok(d),
        }
    })
}

entry! {
    fn MPI_Recv | PMPI_Recv(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        status: *mut MpiStatus,
    ) {
        let d = recv(buf, count, datatype, source, tag, comm).map_err(|f| f.on_comm(comm))?;
        d.write(status, false);
        Ok(())
    }
}

entry! {
    fn MPI_Sendrecv | PMPI_Sendrecv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        dest: c_int,
        sendtag: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        source: c_int,
        recvtag: c_int,
        comm: c_int,
        status: *mut MpiStatus,
    ) {
        (|| {
            let mut rh = add(start_recv(recvbuf, recvcount, recvtype, source, recvtag, comm)?)?;
            let sent = blocking_send(sendbuf, sendcount, sendtype, dest, sendtag, comm, Mode::Standard);
            let d = wait_one(&mut rh)?;
            sent?;
            d.write(status, false);
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Sendrecv_replace | PMPI_Sendrecv_replace(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        dest: c_int,
        sendtag: c_int,
        source: c_int,
        recvtag: c_int,
        comm: c_int,
        status: *mut MpiStatus,
    ) {
        (|| {
            let t = comm_ty(datatype)?;
            let copy = t.send_bytes(buf, ptr::count(count)?)?.into_owned();
            let mut rh = add(start_recv(buf, count, datatype, source, recvtag, comm)?)?;
            let sent = blocking_send(copy.as_ptr().cast(), copy.len() as c_int, 0x4c00010d, dest, sendtag, comm, Mode::Standard);
            let d = wait_one(&mut rh)?;
            sent?;
            d.write(status, false);
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

fn probe(
    c: &SimpleCommunicator,
    src: c_int,
    tag: c_int,
    block: bool,
) -> Result<Option<Done>, Fail> {
    if src == MPI_PROC_NULL {
        return Ok(Some(Done::empty()));
    }
    let s = match (src == MPI_ANY_SOURCE, block) {
        (true, true) => Some(c.any_process().probe_with_tag(tag)?),
        (true, false) => c.any_process().immediate_probe_with_tag(tag)?,
        (false, true) => Some(c.process_at_rank(src).probe_with_tag(tag)?),
        (false, false) => c.process_at_rank(src).immediate_probe_with_tag(tag)?,
    };
    Ok(s.map(|s| {
        let mut d = Done::of(&s);
        d.bytes = s.message_len();
        d
    }))
}

entry! {
    fn MPI_Probe | PMPI_Probe(source: c_int, tag: c_int, comm: c_int, status: *mut MpiStatus) {
        let c = state::comm(comm)?;
        let d = probe(&c, source, tag, true).map_err(|f| f.on_comm(comm))?;
        d.unwrap_or_else(Done::empty).write(status, false);
        Ok(())
    }
}

entry! {
    fn MPI_Iprobe | PMPI_Iprobe(source: c_int, tag: c_int, comm: c_int, flag: *mut c_int, status: *mut MpiStatus) {
        let c = state::comm(comm)?;
        match probe(&c, source, tag, false).map_err(|f| f.on_comm(comm))? {
            Some(d) => {
                d.write(status, false);
                ptr::out(flag, 1, "flag")
            }
            None => ptr::out(flag, 0, "flag"),
        }
    }
}

/// The buffer `MPI_Buffer_attach` was given, handed back by detach.
static ATTACHED: std::sync::Mutex<Option<(usize, c_int)>> = std::sync::Mutex::new(None);

entry! {
    /// The library keeps its own copy space of `size` bytes (the C buffer
    /// is not written); detach hands the C pointer back.
    fn MPI_Buffer_attach | PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) {
        let n = ptr::count(size)?;
        let mut a = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
        if a.is_some() {
            return fail(MPI_ERR_BUFFER, "a buffer is already attached");
        }
        state::with(|st| {
            st.universe.buffer_attach(n);
            Ok(())
        })?;
        *a = Some((buffer as usize, size));
        Ok(())
    }
}

entry! {
    fn MPI_Buffer_detach | PMPI_Buffer_detach(buffer: *mut c_void, size: *mut c_int) {
        let taken = ATTACHED.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (b, n) = taken.unwrap_or((0, 0));
        if taken.is_some() {
            // Waits for the buffered sends under the state lock (detach is
            // rare; other threads' calls wait meanwhile).
            let g = state::lock();
            if let Some(st) = g.as_ref() {
                st.universe.buffer_detach()?;
            }
        }
        ptr::out(buffer.cast::<*mut c_void>(), b as *mut c_void, "buffer")?;
        ptr::out(size, n, "size")
    }
}
