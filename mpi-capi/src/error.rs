//! Errors at the boundary: every entry point runs under [`guard`], which
//! catches panics and hands a failure to the error handler of the object
//! the call names (`MPI_ERRORS_ARE_FATAL` by default: the job is aborted
//! with a message naming the call; `MPI_ERRORS_RETURN`: the error class is
//! returned).

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mpi_on_portals::MpiError;

use crate::consts::*;
use crate::state;

/// A failed call: its error class, what went wrong, and the handle whose
/// error handler decides (a communicator or window; `None`: the world's).
#[derive(Debug)]
pub struct Fail {
    pub class: c_int,
    pub msg: String,
    pub on: On,
}

/// The object whose error handler a failure goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    World,
    Comm(c_int),
    Win(c_int),
}

pub type Res = Result<(), Fail>;

impl Fail {
    pub fn new(class: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            class,
            msg: msg.into(),
            on: On::World,
        }
    }

    /// Route the failure to `comm`'s error handler.
    pub fn on_comm(mut self, comm: c_int) -> Fail {
        if self.on == On::World {
            self.on = On::Comm(comm);
        }
        self
    }

    /// Route the failure to `win`'s error handler.
    pub fn on_win(mut self, win: c_int) -> Fail {
        if self.on == On::World {
            self.on = On::Win(win);
        }
        self
    }
}

/// The MPI error class of a library error.
pub fn class_of(e: &MpiError) -> c_int {
    match e {
        MpiError::Truncated(_) | MpiError::CollectiveTruncated => MPI_ERR_TRUNCATE,
        MpiError::InvalidRank { .. } => MPI_ERR_RANK,
        MpiError::InvalidTag(_) => MPI_ERR_TAG,
        MpiError::InvalidBuffer(_) => MPI_ERR_BUFFER,
        MpiError::BufferSpace { .. } => MPI_ERR_BUFFER,
        MpiError::PeerFailed { .. } | MpiError::PeerFinalized { .. } => MPI_ERR_PROC_ABORTED,
        MpiError::StaleRequest => MPI_ERR_REQUEST,
        MpiError::RmaEpoch(_) => MPI_ERR_RMA_SYNC,
        MpiError::RmaRange { .. } => MPI_ERR_RMA_RANGE,
        MpiError::RmaUnsupported(_) => MPI_ERR_RMA_FLAVOR,
        MpiError::RmaFailed { .. } => MPI_ERR_RMA_CONFLICT,
        _ => MPI_ERR_OTHER,
    }
}

impl From<MpiError> for Fail {
    fn from(e: MpiError) -> Fail {
        Fail::new(class_of(&e), e.to_string())
    }
}

/// The rooted collectives: their only rank argument is the root.
const ROOTED: &[&str] = &[
    "MPI_Bcast",
    "MPI_Ibcast",
    "MPI_Reduce",
    "MPI_Ireduce",
    "MPI_Gather",
    "MPI_Igather",
    "MPI_Gatherv",
    "MPI_Igatherv",
    "MPI_Scatter",
    "MPI_Iscatter",
    "MPI_Scatterv",
    "MPI_Iscatterv",
];

/// An invalid rank in a rooted collective is an invalid root
/// (`MPI_ERR_ROOT`, as MPI names it); the engine reports any bad rank as
/// `MPI_ERR_RANK`.
fn as_root_error(name: &str, mut f: Fail) -> Fail {
    if f.class == MPI_ERR_RANK && ROOTED.contains(&name) {
        f.class = MPI_ERR_ROOT;
    }
    f
}

/// Run an entry point's body: its result as an MPI return code, a panic
/// as `MPI_ERR_INTERN`, either through the error handler.
pub fn guard(name: &'static str, body: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(f)) => raise(name, as_root_error(name, f)),
        Err(_) => raise(
            name,
            Fail::new(MPI_ERR_INTERN, "internal error (a panic in the library)"),
        ),
    }
}

/// Hand `f` to its error handler: return its class, or end the job.
pub fn raise(name: &str, f: Fail) -> c_int {
    let (handler, object) = state::errhandler_of(f.on);
    if handler == MPI_ERRORS_RETURN || crate::errhandler::call(handler, object, f.class) {
        return f.class;
    }
    let msg = format!("MPI error in {name}: {} ({})", f.msg, class_string(f.class));
    state::fatal(&msg)
}

/// What an error class means (`MPI_Error_string` of a class).
pub fn class_string(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "MPI_SUCCESS: no error",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER: invalid buffer pointer",
        MPI_ERR_COUNT => "MPI_ERR_COUNT: invalid count argument",
        MPI_ERR_TYPE => "MPI_ERR_TYPE: invalid datatype",
        MPI_ERR_TAG => "MPI_ERR_TAG: invalid tag",
        MPI_ERR_COMM => "MPI_ERR_COMM: invalid communicator",
        MPI_ERR_RANK => "MPI_ERR_RANK: invalid rank",
        MPI_ERR_ROOT => "MPI_ERR_ROOT: invalid root",
        MPI_ERR_GROUP => "MPI_ERR_GROUP: invalid group",
        MPI_ERR_OP => "MPI_ERR_OP: invalid reduce operation",
        MPI_ERR_ARG => "MPI_ERR_ARG: invalid argument",
        MPI_ERR_UNKNOWN => "MPI_ERR_UNKNOWN: unknown error",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE: message truncated",
        MPI_ERR_OTHER => "MPI_ERR_OTHER: other error",
        MPI_ERR_INTERN => "MPI_ERR_INTERN: internal error",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS: see the statuses",
        MPI_ERR_PENDING => "MPI_ERR_PENDING: pending request",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST: invalid request",
        MPI_ERR_NO_MEM => "MPI_ERR_NO_MEM: out of memory",
        MPI_ERR_UNSUPPORTED_OPERATION => {
            "MPI_ERR_UNSUPPORTED_OPERATION: not implemented by this library"
        }
        MPI_ERR_WIN => "MPI_ERR_WIN: invalid window",
        MPI_ERR_KEYVAL => "MPI_ERR_KEYVAL: invalid attribute key",
        MPI_ERR_RMA_CONFLICT => "MPI_ERR_RMA_CONFLICT: one-sided operation failed",
        MPI_ERR_RMA_SYNC => "MPI_ERR_RMA_SYNC: one-sided operation outside its epoch",
        MPI_ERR_SIZE => "MPI_ERR_SIZE: invalid size",
        MPI_ERR_DISP => "MPI_ERR_DISP: invalid displacement",
        MPI_ERR_RMA_RANGE => "MPI_ERR_RMA_RANGE: outside the target window",
        MPI_ERR_RMA_FLAVOR => "MPI_ERR_RMA_FLAVOR: unsupported one-sided operation",
        MPI_ERR_PROC_ABORTED => "MPI_ERR_PROC_ABORTED: the peer process failed or left",
        _ => "unknown error class",
    }
}

/// An unimplemented function of `mpi.h`: `MPI_ERR_UNSUPPORTED_OPERATION`
/// through the world's error handler.
pub fn unsupported(name: &'static str) -> c_int {
    guard(name, || {
        Err(Fail::new(
            MPI_ERR_UNSUPPORTED_OPERATION,
            "this function is not implemented by the portals-rs MPI library",
        ))
    })
}

/// Shorthand: fail with `class`.
pub fn fail<T>(class: c_int, msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::new(class, msg))
}
