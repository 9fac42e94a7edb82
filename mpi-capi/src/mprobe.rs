//! Matched probes (`MPI_Mprobe`, `MPI_Improbe`, `MPI_Mrecv`,
//! `MPI_Imrecv`), emulated: `mpi-on-portals` has no matched-probe
//! primitive, so a message handle records the probed message's envelope
//! (source and tag) and the receive names exactly that envelope. Messages
//! of one source and tag are non-overtaking, so the receive gets the
//! probed message unless another thread receives from the same source and
//! tag in between (then it gets the next one: a documented deviation).

use std::ffi::{c_int, c_void};

use mpi_on_portals::traits::*;

use crate::consts::*;
use crate::error::Fail;
use crate::p2p::start_recv;
use crate::ptr;
use crate::request::{add, wait_one, Done, ReqEntry};
use crate::state::{self, handle, slot};

/// A probed message: its communicator and envelope.
#[derive(Clone, Copy, Debug)]
pub struct Msg {
    pub comm: c_int,
    pub source: c_int,
    pub tag: c_int,
}

fn probe(source: c_int, tag: c_int, comm: c_int, block: bool) -> Result<Option<Done>, Fail> {
    let c = state::comm(comm)?;
    if source == MPI_PROC_NULL {
        return Ok(Some(Done::empty()));
    }
    let s = match (source == MPI_ANY_SOURCE, block) {
        (true, true) => Some(c.any_process().probe_with_tag(tag)?),
        (true, false) => c.any_process().immediate_probe_with_tag(tag)?,
        (false, true) => Some(c.process_at_rank(source).probe_with_tag(tag)?),
        (false, false) => c.process_at_rank(source).immediate_probe_with_tag(tag)?,
    };
    Ok(s.map(|s| {
        let mut d = Done::of(&s);
        d.bytes = s.message_len();
        d
    }))
}

/// A message handle for `d` (`MPI_MESSAGE_NO_PROC` for `MPI_PROC_NULL`).
fn message(comm: c_int, d: &Done) -> Result<c_int, Fail> {
    if d.source == MPI_PROC_NULL {
        return Ok(MPI_MESSAGE_NO_PROC);
    }
    let m = Msg {
        comm,
        source: d.source,
        tag: d.tag,
    };
    state::with(|st| {
        st.msgs
            .insert(m)
            .map(|i| handle(i, KIND_MESSAGE))
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many messages"))
    })
}

entry! {
    fn MPI_Mprobe | PMPI_Mprobe(source: c_int, tag: c_int, comm: c_int, msg: *mut c_int, status: *mut MpiStatus) {
        (|| {
            let d = probe(source, tag, comm, true)?.unwrap_or_else(Done::empty);
            ptr::out(msg, message(comm, &d)?, "message")?;
            d.write(status, false);
            Ok(())
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Improbe | PMPI_Improbe(source: c_int, tag: c_int, comm: c_int, flag: *mut c_int, msg: *mut c_int, status: *mut MpiStatus) {
        (|| match probe(source, tag, comm, false)? {
            Some(d) => {
                ptr::out(msg, message(comm, &d)?, "message")?;
                d.write(status, false);
                ptr::out(flag, 1, "flag")
            }
            None => ptr::out(flag, 0, "flag"),
        })()
        .map_err(|f: Fail| f.on_comm(comm))
    }
}

/// Take message `*msg` (setting it to `MPI_MESSAGE_NULL`); `None` for
/// `MPI_MESSAGE_NO_PROC`.
fn take(msg: *mut c_int) -> Result<Option<Msg>, Fail> {
    let h = ptr::read(msg, "message")?;
    if h == MPI_MESSAGE_NO_PROC {
        ptr::out(msg, MPI_MESSAGE_NULL, "message")?;
        return Ok(None);
    }
    let m = slot(h, KIND_MESSAGE)
        .and_then(|i| state::lock().as_mut().and_then(|st| st.msgs.remove(i)))
        .ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("invalid message {h:#x}")))?;
    ptr::out(msg, MPI_MESSAGE_NULL, "message")?;
    Ok(Some(m))
}

fn start(buf: *mut c_void, count: c_int, dt: c_int, msg: *mut c_int) -> Result<ReqEntry, Fail> {
    match take(msg)? {
        None => Ok(ReqEntry {
            done: Some(Done::empty()),
            ..ReqEntry::default()
        }),
        Some(m) => {
            start_recv(buf, count, dt, m.source, m.tag, m.comm).map_err(|f| f.on_comm(m.comm))
        }
    }
}

entry! {
    fn MPI_Mrecv | PMPI_Mrecv(buf: *mut c_void, count: c_int, datatype: c_int, msg: *mut c_int, status: *mut MpiStatus) {
        let mut h = add(start(buf, count, datatype, msg)?)?;
        let d = wait_one(&mut h)?;
        d.write(status, false);
        Ok(())
    }
}

entry! {
    fn MPI_Imrecv | PMPI_Imrecv(buf: *mut c_void, count: c_int, datatype: c_int, msg: *mut c_int, request: *mut c_int) {
        let h = add(start(buf, count, datatype, msg)?)?;
        ptr::out(request, h, "request")
    }
}
