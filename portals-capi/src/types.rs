//! The C types, constants and return codes of `portals.h` (Portals 3.3
//! names; the values are this library's own).

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_uint, c_void};

/// Sizes, lengths and offsets.
pub type ptl_size_t = u64;
/// Any handle. Handles are opaque 64-bit values; compare them with
/// `PtlHandleIsEqual` (or `==`, which gives the same answer here).
pub type ptl_handle_any_t = u64;
/// A network interface handle.
pub type ptl_handle_ni_t = ptl_handle_any_t;
/// A match entry handle.
pub type ptl_handle_me_t = ptl_handle_any_t;
/// A memory descriptor handle.
pub type ptl_handle_md_t = ptl_handle_any_t;
/// An event queue handle.
pub type ptl_handle_eq_t = ptl_handle_any_t;
/// A portal table index.
pub type ptl_pt_index_t = u32;
/// An access-control table index.
pub type ptl_ac_index_t = u32;
/// Match and ignore bits.
pub type ptl_match_bits_t = u64;
/// The 64 bits of header data a put carries.
pub type ptl_hdr_data_t = u64;
/// A node id.
pub type ptl_nid_t = u32;
/// A process id within a node.
pub type ptl_pid_t = u32;
/// A user id.
pub type ptl_uid_t = u32;
/// A job id. Deviation: 64 bits wide, the job key of the job.
pub type ptl_jid_t = u64;
/// Event sequence numbers.
pub type ptl_seq_t = u64;
/// A timeout in milliseconds; `PTL_TIME_FOREVER` waits forever.
pub type ptl_time_t = c_int;
/// A status register index (`PtlNIStatus`).
pub type ptl_sr_index_t = c_int;
/// A status register value.
pub type ptl_sr_value_t = u64;
/// Names a network interface type (`PtlNIInit`).
pub type ptl_interface_t = c_int;
/// `PTL_RETAIN` or `PTL_UNLINK`.
pub type ptl_unlink_t = c_int;
/// `PTL_INS_BEFORE` or `PTL_INS_AFTER`.
pub type ptl_ins_pos_t = c_int;
/// `PTL_ACK_REQ`, `PTL_NOACK_REQ` or `PTL_ACK_REQ_LAZY`.
pub type ptl_ack_req_t = c_int;
/// The kind of an event (`PTL_EVENT_*`).
pub type ptl_event_kind_t = c_int;
/// Whether an operation succeeded (`PTL_NI_OK`, `PTL_NI_*`).
pub type ptl_ni_fail_t = c_int;

/// An event handler (`PtlEQAlloc`). Deviation: handlers are not supported;
/// pass `PTL_EQ_HANDLER_NONE`.
pub type ptl_eq_handler_t = Option<unsafe extern "C" fn(event: *mut ptl_event_t)>;

/// The address of a process: node id and process id, each of which may be
/// a wildcard (`PTL_NID_ANY`, `PTL_PID_ANY`) where a match criterion is
/// meant.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ptl_process_id_t {
    /// Node id. Under `ptlrun`, the rank.
    pub nid: ptl_nid_t,
    /// Process id. Under `ptlrun`, 0.
    pub pid: ptl_pid_t,
}

/// One segment of a `PTL_MD_IOVEC` descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ptl_md_iovec_t {
    /// Address of the segment's first byte (not NULL).
    pub iov_base: *mut c_void,
    /// Length of the segment in bytes (not 0: empty segments are refused
    /// with `PTL_MD_ILLEGAL`).
    pub iov_len: ptl_size_t,
}

/// A memory descriptor: memory plus the rules for using it.
///
/// `start` and `length` name memory the C program owns: the library reads
/// and writes it in place (zero-copy) from creation until the descriptor
/// is unlinked (`PtlMDUnlink` or `PtlMEUnlink` returning `PTL_OK`, or a
/// `PTL_EVENT_UNLINK` event); the program must keep it valid and must not
/// touch bytes a transfer may be using until the event that ends it.
/// With `PTL_MD_IOVEC`, `start` points to an array of `length`
/// `ptl_md_iovec_t` (the array is copied, the segments are not).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ptl_md_t {
    /// First byte of the memory, or the iovec array.
    pub start: *mut c_void,
    /// Length in bytes, or the number of iovec entries.
    pub length: ptl_size_t,
    /// Operations left before the descriptor becomes inactive, or
    /// `PTL_MD_THRESH_INF`.
    pub threshold: c_int,
    /// The high-water mark size, with `PTL_MD_MAX_SIZE`.
    pub max_size: ptl_size_t,
    /// `PTL_MD_*` option bits.
    pub options: c_uint,
    /// Any value; reported in every event of the descriptor.
    pub user_ptr: *mut c_void,
    /// Where events go, or `PTL_EQ_NONE`.
    pub eq_handle: ptl_handle_eq_t,
}

/// One event.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ptl_event_t {
    /// What happened (`PTL_EVENT_*`).
    pub r#type: ptl_event_kind_t,
    /// At a target, the initiator; at an initiator, the target.
    pub initiator: ptl_process_id_t,
    /// The initiator's user id. Deviation: the local user id (every process
    /// of a job runs as one user).
    pub uid: ptl_uid_t,
    /// The job id (the job key: only processes of this job get in).
    pub jid: ptl_jid_t,
    /// The portal index of the operation.
    pub pt_index: ptl_pt_index_t,
    /// The match bits of the request.
    pub match_bits: ptl_match_bits_t,
    /// The length requested.
    pub rlength: ptl_size_t,
    /// The length moved (after truncation).
    pub mlength: ptl_size_t,
    /// The offset in the target descriptor.
    pub offset: ptl_size_t,
    /// The descriptor the event is about.
    pub md_handle: ptl_handle_md_t,
    /// The descriptor's state after the operation. Deviation: for a
    /// `PTL_MD_IOVEC` descriptor `start` is the first segment's address,
    /// `length` the total bytes, and `PTL_MD_IOVEC` is not in `options`.
    pub md: ptl_md_t,
    /// The initiator's header data (puts).
    pub hdr_data: ptl_hdr_data_t,
    /// Deviation: always 0 (no event links).
    pub link: ptl_seq_t,
    /// `PTL_NI_OK` or why the operation failed.
    pub ni_fail_type: ptl_ni_fail_t,
    /// Per-queue sequence number; consecutive unless events were dropped.
    pub sequence: ptl_seq_t,
}

/// The limits of a network interface (`PtlNIInit`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ptl_ni_limits_t {
    /// Match entries.
    pub max_mes: c_int,
    /// Memory descriptors.
    pub max_mds: c_int,
    /// Event queues.
    pub max_eqs: c_int,
    /// Largest access-control index.
    pub max_ac_index: c_int,
    /// Largest portal index.
    pub max_pt_index: c_int,
    /// Most segments of an iovec descriptor.
    pub max_md_iovecs: c_int,
    /// Longest match list.
    pub max_me_list: c_int,
    /// Largest `PtlGetPut` descriptor, in bytes (no limit: `INT_MAX`).
    pub max_getput_md: c_int,
}

// ----- return codes --------------------------------------------------------

/// Success.
pub const PTL_OK: c_int = 0;
/// The access-control index is outside the table.
pub const PTL_AC_INDEX_INVALID: c_int = 1;
/// Events were lost to a full event queue; the event returned is valid.
pub const PTL_EQ_DROPPED: c_int = 2;
/// The event queue is empty (or the wait timed out).
pub const PTL_EQ_EMPTY: c_int = 3;
/// Not a live event queue handle.
pub const PTL_EQ_INVALID: c_int = 4;
/// A failure with no code of its own (see the call's documentation).
pub const PTL_FAIL: c_int = 5;
/// Not a live handle.
pub const PTL_HANDLE_INVALID: c_int = 6;
/// The interface was initialised already; the handle returned is valid.
pub const PTL_IFACE_DUP: c_int = 7;
/// No such interface, or it cannot be initialised (again).
pub const PTL_IFACE_INVALID: c_int = 8;
/// The descriptor is not legal: bad options, threshold or length, a region
/// outside it, or it is inactive.
pub const PTL_MD_ILLEGAL: c_int = 9;
/// Not a live memory descriptor handle.
pub const PTL_MD_INVALID: c_int = 10;
/// The descriptor has a transfer in progress.
pub const PTL_MD_IN_USE: c_int = 11;
/// `PtlMDUpdate` found the test event queue not empty.
pub const PTL_MD_NO_UPDATE: c_int = 12;
/// Not a live match entry handle.
pub const PTL_ME_INVALID: c_int = 13;
/// The match entry already has a descriptor.
pub const PTL_ME_IN_USE: c_int = 14;
/// The match list is too long.
pub const PTL_ME_LIST_TOO_LONG: c_int = 15;
/// Not a live network interface handle.
pub const PTL_NI_INVALID: c_int = 16;
/// `PtlInit` was not called.
pub const PTL_NO_INIT: c_int = 17;
/// A limit of the interface was reached.
pub const PTL_NO_SPACE: c_int = 18;
/// The process id asked for at `PtlNIInit` is not this process's.
pub const PTL_PID_INVALID: c_int = 19;
/// The process id is not usable here (a wildcard where a real process is
/// needed).
pub const PTL_PROCESS_INVALID: c_int = 20;
/// No portal index has an empty match list (`PtlMEAttachAny`).
pub const PTL_PT_FULL: c_int = 21;
/// The portal index is outside the portal table.
pub const PTL_PT_INDEX_INVALID: c_int = 22;
/// A pointer argument is NULL (or a length overflows).
pub const PTL_SEGV: c_int = 23;
/// No such status register.
pub const PTL_SR_INDEX_INVALID: c_int = 24;
/// An error the library does not know (a bug: please report it).
pub const PTL_UNKNOWN_ERROR: c_int = 25;
/// One past the largest return code.
pub const PTL_MAX_ERRNO: c_int = 26;

// ----- other constants ----------------------------------------------------

/// Wildcard node id.
pub const PTL_NID_ANY: ptl_nid_t = 0xFFFFFFFF;
/// Wildcard process id.
pub const PTL_PID_ANY: ptl_pid_t = 0xFFFFFFFF;
/// Wildcard user id (`PtlACEntry`).
pub const PTL_UID_ANY: ptl_uid_t = 0xFFFFFFFF;
/// Wildcard job id (`PtlACEntry`).
pub const PTL_JID_ANY: ptl_jid_t = 0xFFFFFFFFFFFFFFFF;
/// Any portal index (`PtlACEntry`).
pub const PTL_PT_INDEX_ANY: ptl_pt_index_t = 0xFFFFFFFF;
/// A handle that names nothing.
pub const PTL_INVALID_HANDLE: ptl_handle_any_t = 0xFFFFFFFFFFFFFFFF;
/// "No event queue" in a memory descriptor and in `PtlMDUpdate`.
pub const PTL_EQ_NONE: ptl_handle_eq_t = 0xFFFFFFFFFFFFFFFF;
/// The one interface: the job `ptlrun` (or a PMI launcher) started this
/// process in, or a job of one.
pub const PTL_IFACE_DEFAULT: ptl_interface_t = 0;
/// Infinite threshold.
pub const PTL_MD_THRESH_INF: c_int = -1;
/// Wait forever (`PtlEQPoll`).
pub const PTL_TIME_FOREVER: ptl_time_t = -1;

/// Keep the object when its descriptor is consumed.
pub const PTL_RETAIN: ptl_unlink_t = 0;
/// Unlink the object when its descriptor is consumed.
pub const PTL_UNLINK: ptl_unlink_t = 1;
/// At the head of the list / before the base entry.
pub const PTL_INS_BEFORE: ptl_ins_pos_t = 0;
/// At the tail of the list / after the base entry.
pub const PTL_INS_AFTER: ptl_ins_pos_t = 1;
/// Do not ask for an acknowledgment.
pub const PTL_NOACK_REQ: ptl_ack_req_t = 0;
/// Ask for an acknowledgment.
pub const PTL_ACK_REQ: ptl_ack_req_t = 1;
/// Ask for an acknowledgment that the target's transport may hold back to
/// share a write with its next message to the initiator (an extension of
/// Portals 3.3, `portals::AckReq::Lazy`): for an initiator that only
/// reclaims memory on it. A refusal (`PTL_NI_DROPPED`) is never held back.
pub const PTL_ACK_REQ_LAZY: ptl_ack_req_t = 2;

/// Status register: messages dropped at this interface (no match,
/// rejected, malformed, access denied, stale responses).
pub const PTL_SR_DROP_COUNT: ptl_sr_index_t = 0;
/// Status register: messages refused by the access-control table.
pub const PTL_SR_PERMISSIONS_VIOLATIONS: ptl_sr_index_t = 1;

// ----- memory descriptor options -------------------------------------------

/// Accept puts.
pub const PTL_MD_OP_PUT: c_uint = 1 << 0;
/// Accept gets.
pub const PTL_MD_OP_GET: c_uint = 1 << 1;
/// Use the offset the request carries (no local offset).
pub const PTL_MD_MANAGE_REMOTE: c_uint = 1 << 2;
/// Accept a request longer than the space left, moving what fits.
pub const PTL_MD_TRUNCATE: c_uint = 1 << 3;
/// Never send acknowledgments.
pub const PTL_MD_ACK_DISABLE: c_uint = 1 << 4;
/// `start` is an array of `length` `ptl_md_iovec_t`.
pub const PTL_MD_IOVEC: c_uint = 1 << 5;
/// The high-water mark: once `local offset + max_size > length` the
/// descriptor is exhausted.
pub const PTL_MD_MAX_SIZE: c_uint = 1 << 6;
/// No `*_START` events.
pub const PTL_MD_EVENT_START_DISABLE: c_uint = 1 << 7;
/// No completion (`*_END`, `ACK`) events; `UNLINK` events stay.
pub const PTL_MD_EVENT_END_DISABLE: c_uint = 1 << 8;

// ----- event kinds ----------------------------------------------------------

/// A get matched; its reply is leaving.
pub const PTL_EVENT_GET_START: ptl_event_kind_t = 1;
/// A get was answered (also the target's event of a `PtlGetPut`).
pub const PTL_EVENT_GET_END: ptl_event_kind_t = 2;
/// A put matched; its data is arriving.
pub const PTL_EVENT_PUT_START: ptl_event_kind_t = 3;
/// A put's data is in the descriptor.
pub const PTL_EVENT_PUT_END: ptl_event_kind_t = 4;
/// A reply started arriving.
pub const PTL_EVENT_REPLY_START: ptl_event_kind_t = 5;
/// A reply is in the descriptor.
pub const PTL_EVENT_REPLY_END: ptl_event_kind_t = 6;
/// A put started leaving.
pub const PTL_EVENT_SEND_START: ptl_event_kind_t = 7;
/// A put's data has left; the memory may be reused.
pub const PTL_EVENT_SEND_END: ptl_event_kind_t = 8;
/// The target acknowledged a put.
pub const PTL_EVENT_ACK: ptl_event_kind_t = 9;
/// The descriptor unlinked itself.
pub const PTL_EVENT_UNLINK: ptl_event_kind_t = 10;

// ----- failure types --------------------------------------------------------

/// The operation succeeded.
pub const PTL_NI_OK: ptl_ni_fail_t = 0;
/// The message or its response could not be delivered (peer gone).
pub const PTL_NI_FAIL: ptl_ni_fail_t = 1;
/// Extension: the target dropped the request (no match, rejected, access
/// denied) and said so in a negative acknowledgment or reply.
pub const PTL_NI_DROPPED: ptl_ni_fail_t = 2;
/// Extension: the transfer started but did not complete; the bytes
/// deposited are undefined.
pub const PTL_NI_INCOMPLETE: ptl_ni_fail_t = 3;
