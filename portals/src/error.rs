//! The error type of every fallible Portals call.

use crate::types::{PortalIndex, ProcessId};

/// Result alias used throughout the crate.
pub type Result<T, E = PtlError> = std::result::Result<T, E>;

/// Errors returned by Portals calls. Each corresponds to a `PTL_*` return code
/// of the 3.3 API where one exists.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PtlError {
    /// A handle that does not name a live object of this network interface:
    /// it was freed or unlinked, or it belongs to another interface.
    #[error("invalid {kind} handle (stale, unlinked, or from another network interface)")]
    InvalidHandle {
        /// Which kind of object the handle was meant to name.
        kind: &'static str,
    },
    /// The portal index is outside the portal table (`PTL_PT_INDEX_INVALID`).
    #[error("portal index {index:?} is outside the portal table of {size} entries")]
    InvalidPortalIndex {
        /// The offending index.
        index: PortalIndex,
        /// The number of entries in the table.
        size: u32,
    },
    /// The access-control index is outside the table (`PTL_AC_INDEX_INVALID`).
    #[error("access-control index {index} is outside the table of {size} entries")]
    InvalidAcIndex {
        /// The offending index.
        index: u32,
        /// The number of entries in the table.
        size: u32,
    },
    /// A process id that must be concrete contains a wildcard, or is otherwise
    /// unusable (`PTL_PROCESS_INVALID`).
    #[error("process id {0} is not a concrete process")]
    InvalidProcess(ProcessId),
    /// An argument is out of range; the message says which.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A limit of the network interface was reached (`PTL_NO_SPACE`).
    #[error("no space: the limit of {limit} {what} is reached")]
    NoSpace {
        /// What ran out.
        what: &'static str,
        /// The configured limit.
        limit: usize,
    },
    /// The match entry already has a memory descriptor (`PTL_ME_IN_USE`).
    #[error("the match entry already has a memory descriptor attached")]
    MeInUse,
    /// The memory descriptor has an operation in progress that reads or
    /// writes its memory, so it cannot be unlinked or accessed now
    /// (`PTL_MD_IN_USE`). Retry after the pending event arrives.
    #[error("the memory descriptor has a transfer in progress")]
    MdInUse,
    /// The memory descriptor is inactive (threshold reached or high-water
    /// mark exceeded) and cannot initiate an operation (`PTL_MD_ILLEGAL`).
    #[error("the memory descriptor is inactive (threshold or high-water mark reached)")]
    MdInactive,
    /// `md_update` found events (or transfers about to produce events) in the
    /// test event queue and left the descriptor unchanged (`PTL_MD_NO_UPDATE`).
    #[error("the test event queue is not empty; the memory descriptor was not updated")]
    MdNoUpdate,
    /// A local region lies outside the memory descriptor.
    #[error("region {offset}+{length} lies outside the {md_length}-byte memory descriptor")]
    OutOfRange {
        /// Start of the requested region.
        offset: u64,
        /// Length of the requested region.
        length: u64,
        /// Length of the memory descriptor.
        md_length: u64,
    },
    /// The event queue is empty (`PTL_EQ_EMPTY`); returned by blocking waits
    /// that time out.
    #[error("no event arrived before the timeout")]
    Timeout,
    /// Events were dropped because the event queue was full
    /// (`PTL_EQ_DROPPED`). Reported once per overflow episode, before the
    /// events that were kept are returned.
    #[error("event queue overflow: {dropped} events were dropped")]
    EqDropped {
        /// How many events were dropped since the last report.
        dropped: u64,
    },
    /// The network interface is shutting down or its transport failed.
    #[error("the network interface is shut down")]
    Shutdown,
    /// An atomic operation that cannot be carried out (unsupported
    /// operation and type, bad length or operand, larger than
    /// [`crate::NiLimits::max_atomic_size`]). Nothing was sent.
    #[error("atomic operation refused: {0}")]
    Atomic(#[from] crate::atomic::AtomicError),
    /// The transport (NAL) reported an error.
    #[error("transport error: {0}")]
    Nal(String),
    /// A scatter/gather list (an iovec descriptor's segments) was refused;
    /// nothing was created and the segments were not accessed.
    #[error("invalid iovec: {0}")]
    Iovec(#[from] IovecError),
}

/// Why a scatter/gather list was refused (see
/// [`crate::Engine::md_bind_iovec`]).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IovecError {
    /// More segments than [`crate::NiLimits::max_iovecs`].
    #[error("{count} segments exceed the limit of {limit} (NiLimits::max_iovecs)")]
    TooManySegments {
        /// Segments in the list.
        count: usize,
        /// The limit in force.
        limit: usize,
    },
    /// A segment of length zero: refused rather than skipped, so that every
    /// segment holds at least one byte of the logical buffer.
    #[error("segment {index} is empty (zero-length segments are refused)")]
    EmptySegment {
        /// Position of the segment in the list.
        index: usize,
    },
    /// The lengths up to and including this segment sum past `u64::MAX`.
    #[error("the segment lengths overflow u64 at segment {index}")]
    LengthOverflow {
        /// Position of the segment in the list.
        index: usize,
    },
    /// A raw segment longer than `isize::MAX` bytes (no Rust slice can
    /// cover it).
    #[error("segment {index} is longer than isize::MAX bytes")]
    SegmentTooLong {
        /// Position of the segment in the list.
        index: usize,
    },
    /// A raw segment with a null base address.
    #[error("segment {index} has a null base address")]
    NullSegment {
        /// Position of the segment in the list.
        index: usize,
    },
}
