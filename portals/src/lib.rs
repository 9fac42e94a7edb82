//! # portals
//!
//! A Portals 3.x one-sided data-movement engine (Sandia's Portals 3.3 API
//! shape, with the high-water-mark semantics of Brightwell, Riesen and
//! Maccabe's MPI on Portals 3.0), written as a sans-I/O state machine plus
//! pluggable transports (NALs).
//!
//! * [`NetworkInterface`] is what applications use: portal table, match
//!   entries ([`NetworkInterface::me_attach`]), memory descriptors
//!   ([`NetworkInterface::md_attach`], [`MdOptions`], [`Threshold`]), event
//!   queues ([`NetworkInterface::eq_wait`]), access control, and the data
//!   movement operations `put`, `get` and `get_put`.
//! * Portals 4's counting events ([`NetworkInterface::ct_alloc`],
//!   [`NetworkInterface::ct_wait`], [`MdOptions::CT_COMM`] and siblings)
//!   and triggered operations ([`NetworkInterface::triggered_put`]), which
//!   the engine issues by itself when a counter reaches a threshold.
//! * Portals 4's atomic operations ([`NetworkInterface::atomic`],
//!   [`NetworkInterface::fetch_atomic`], [`NetworkInterface::swap`] and
//!   their triggered forms) on the types and operations of [`atomic`].
//! * [`Engine`] is the deterministic core the interface wraps; transports
//!   drive it through [`NiCore`] and the [`Nal`] trait.
//! * [`wire`] is the header codec shared by all transports.
//! * [`loopback`] connects interfaces inside one process.
//!
//! ## Memory ownership
//! The safe API takes ownership of a descriptor's buffer (`Vec<u8>`) and
//! gives it back on unlink; while attached, bytes are read and written
//! through [`NetworkInterface::md_read`] / [`NetworkInterface::md_write`],
//! which refuse ranges a transfer is using. The `unsafe` raw-pointer
//! variants ([`NetworkInterface::md_attach_raw`]) serve zero-copy callers
//! such as an MPI library that scopes its requests.
//!
//! A descriptor may also be a list of segments (`PTL_MD_IOVEC`):
//! [`NetworkInterface::md_attach_iovec`] and friends take a `Vec<Vec<u8>>`
//! (or, raw, a list of [`Iovec`]) and treat it as one logical buffer, the
//! segments' concatenation; transports read and write the segments in
//! place. Owned segments come back from
//! [`NetworkInterface::md_unlink_iovec`].
//!
//! ## Deviations from Portals 3.3, on purpose
//! * A request dropped at the target (no match, rejected, access denied)
//!   still answers an acknowledgment-requesting put or a get, with a
//!   negative response ([`FailType::Dropped`]), so an initiator never waits
//!   forever (Portals 4 does the same).
//! * `*Start` events are opt-in ([`MdOptions::EVENT_START`]).
//! * `md_update` never replaces the memory, and its emptiness test also
//!   counts transfers matched but not yet complete.
//! * A full event queue keeps its old events and drops new ones, reporting
//!   [`PtlError::EqDropped`] on the next read.
//! * A descriptor that unlinks itself keeps its owned buffer until
//!   [`NetworkInterface::md_unlink`] takes it back.
//! * Extension: with [`MdOptions::CT_TRUNCATED_FAILS`] a truncated
//!   incoming request counts as a failure on the descriptor's counting
//!   event (Portals 4 counts it as a success).

#![warn(missing_docs)]

pub mod acl;
pub mod atomic;
pub mod engine;
mod eq;
pub mod error;
pub mod event;
#[doc(hidden)]
pub mod fuzzing;
mod handle;
pub mod loopback;
pub mod md;
mod me;
pub mod nal;
pub mod ni;
pub mod types;
pub mod wire;

pub use acl::AcEntry;
pub use atomic::{AtomicOp, AtomicSpec, Datatype};
pub use engine::{
    CtEvent, Engine, NiLimits, NiStatus, Outbound, Payload, Pieces, RecvAction, RecvToken, Region,
    SendToken, Trigger,
};
pub use error::{IovecError, PtlError, Result};
pub use event::{Event, EventKind, MdSnapshot};
pub use handle::{CtHandle, EqHandle, MdHandle, MeHandle};
pub use md::{Iovec, MdDesc, MdOptions};
pub use nal::{Nal, NiCore};
pub use ni::{NetworkInterface, NiConfig};
pub use types::{
    AcIndex, AckReq, FailType, Nid, Pid, PortalIndex, Position, ProcessId, Remote, Threshold,
    Unlink, NID_ANY, PID_ANY,
};
