//! Events: what an event queue reports about operations on memory
//! descriptors (`ptl_event_t`).

use crate::handle::{EqHandle, MdHandle};
use crate::md::MdOptions;
use crate::types::{FailType, PortalIndex, ProcessId, Threshold};

/// The kind of an event (`ptl_event_kind_t`).
///
/// The completion kinds (`Put`, `Get`, `Atomic`, `FetchAtomic`, `Reply`,
/// `Sent`, `Ack`, `Unlink`) are
/// always generated unless the memory descriptor sets
/// [`MdOptions::EVENT_END_DISABLE`]; the `*Start` kinds are generated only
/// when it sets [`MdOptions::EVENT_START`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A put matched this descriptor; its data is arriving (`PUT_START`).
    PutStart,
    /// A put's data is in this descriptor's memory (`PUT_END`).
    Put,
    /// A get matched this descriptor; its reply is being sent (`GET_START`).
    GetStart,
    /// A get was answered from this descriptor's memory (`GET_END`): the
    /// reply has left, and the memory may change again.
    Get,
    /// A reply to a get started arriving in this descriptor (`REPLY_START`).
    ReplyStart,
    /// A reply to a get is in this descriptor's memory (`REPLY_END`).
    Reply,
    /// A put from this descriptor started leaving (`SEND_START`).
    SendStart,
    /// A put's data has left this descriptor's memory; the memory may be
    /// reused (`SEND_END`).
    Sent,
    /// The target acknowledged a put from this descriptor.
    Ack,
    /// The descriptor was unlinked automatically because it was consumed.
    Unlink,
    /// An atomic operation was applied to this descriptor's memory
    /// (`PTL_EVENT_ATOMIC`; its start, with [`MdOptions::EVENT_START`], is a
    /// `PutStart`).
    Atomic,
    /// A fetching atomic operation or swap was applied to this descriptor's
    /// memory and the old values have left in the reply
    /// (`PTL_EVENT_FETCH_ATOMIC`; its start is a `GetStart`).
    FetchAtomic,
}

/// The state of a memory descriptor at the time of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdSnapshot {
    /// Address of the first byte of the descriptor's memory.
    pub start: usize,
    /// Length of the descriptor's memory.
    pub length: u64,
    /// Threshold remaining after the operation.
    pub threshold: Threshold,
    /// The high-water-mark size (meaningful with [`MdOptions::MAX_SIZE`]).
    pub max_size: u64,
    /// The descriptor's options.
    pub options: MdOptions,
    /// The user's value attached to the descriptor.
    pub user_ptr: u64,
    /// The event queue the descriptor reports to.
    pub eq: Option<EqHandle>,
    /// The locally managed offset after the operation.
    pub local_offset: u64,
}

/// One entry of an event queue.
///
/// For events at a target (`Put*`, `Get*`) `initiator` is the process that
/// sent the request; for events at an initiator (`Sent`, `Ack`, `Reply*`) it
/// is the target the operation was sent to. `Unlink` events carry the id of
/// the local process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The remote process (see the type-level docs).
    pub initiator: ProcessId,
    /// The portal index of the operation.
    pub pt_index: PortalIndex,
    /// The match bits of the request.
    pub match_bits: u64,
    /// The length the initiator asked for.
    pub rlength: u64,
    /// The length actually moved (after truncation; 0 for a rejected
    /// zero-byte acceptance).
    pub mlength: u64,
    /// The offset in the target descriptor where the data was put or from
    /// which it was read (for `Ack`/`Reply` as reported by the target).
    pub offset: u64,
    /// The descriptor the event is about.
    pub md_handle: MdHandle,
    /// The descriptor's state when the event was generated.
    pub md: MdSnapshot,
    /// The initiator's 64 bits of header data (puts only).
    pub hdr_data: u64,
    /// Per-queue sequence number: consecutive for consecutive events of one
    /// queue; a gap never occurs without an [`crate::PtlError::EqDropped`].
    pub sequence: u64,
    /// Whether the operation succeeded.
    pub fail: FailType,
}
