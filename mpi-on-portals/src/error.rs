//! MPI errors.

use crate::status::Status;

/// What an MPI call can fail with.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MpiError {
    /// The message was longer than the receive buffer (`MPI_ERR_TRUNCATE`).
    /// The bytes that fit were delivered; the status says how many and from
    /// whom.
    #[error("message truncated: {} bytes sent, {} delivered", .0.message_len(), .0.count_bytes())]
    Truncated(Status),
    /// A block of a non-blocking collective arrived longer than the room
    /// its receiver posted for it (`MPI_ERR_TRUNCATE`): the members' counts
    /// or types disagree. The bytes that fit were delivered.
    #[error("a block of a non-blocking collective was longer than its receive buffer (the members' counts disagree)")]
    CollectiveTruncated,
    /// A rank outside the communicator (`MPI_ERR_RANK`).
    #[error("rank {rank} is not in a communicator of size {size}")]
    InvalidRank {
        /// The rank.
        rank: i32,
        /// The communicator size.
        size: i32,
    },
    /// A negative or otherwise unusable tag (`MPI_ERR_TAG`).
    #[error("invalid tag {0}: tags are non-negative")]
    InvalidTag(i32),
    /// A buffer whose length is not a whole number of elements, or too large.
    #[error("invalid buffer: {0}")]
    InvalidBuffer(&'static str),
    /// A datatype layout that cannot describe memory: overlapping blocks,
    /// negative displacements or strides, a size that overflows, or a view
    /// that reaches past its buffer (`MPI_ERR_TYPE`).
    #[error("invalid datatype: {0}")]
    InvalidDatatype(&'static str),
    /// Received bytes that are not a valid value of the type they are
    /// unpacked into, e.g. a `bool` other than 0 or 1 (received data is
    /// untrusted). Nothing was written to the buffer.
    #[error("invalid data received: {0}")]
    InvalidData(&'static str),
    /// `buffered_send` without enough attached buffer space (`MPI_ERR_BUFFER`).
    #[error(
        "buffered send of {need} bytes does not fit the {free} free bytes of the attached buffer"
    )]
    BufferSpace {
        /// Bytes needed.
        need: usize,
        /// Bytes free.
        free: usize,
    },
    /// The peer is gone or unreachable: the operation cannot complete. Also
    /// reported to operations that only wait for the peer (a receive posted
    /// for it, a send waiting for it to fetch the data or acknowledge a
    /// synchronous send) once the transport gives up on it; the peer stays
    /// failed for the rest of the job.
    #[error("communication with rank {rank} failed: {why}")]
    PeerFailed {
        /// World rank of the peer.
        rank: i32,
        /// What the transport reported.
        why: String,
    },
    /// The operation waits for a rank that has finalized (left MPI) without
    /// sending what it waits for: a receive or probe naming it, one from any
    /// source when every other member of the communicator has left, or a
    /// send waiting for its receive. Such a program is erroneous; the
    /// operation fails instead of waiting forever (a rank that returned an
    /// error from `main` would otherwise hang the others, and their
    /// finalize with them).
    #[error("rank {rank} finalized without sending or receiving what this operation waits for")]
    PeerFinalized {
        /// World rank of the peer that left.
        rank: i32,
    },
    /// Unexpected messages overflowed every unexpected-message buffer and
    /// data was lost. The device no longer raises it: a short message that
    /// finds no buffer room (the pool at its cap) is kept as an envelope
    /// and pulled from its sender's read portal when received (see the
    /// device module docs). Kept so that code matching on it, and the C
    /// interface's error classes, stay valid.
    #[error("unexpected-message buffers overflowed: {bytes} bytes from rank {sender} (tag {tag}) were dropped")]
    UnexpectedOverflow {
        /// Sender's rank.
        sender: i32,
        /// Message tag.
        tag: i32,
        /// Bytes lost.
        bytes: usize,
    },
    /// An event queue overflowed; the library lost track of messages. Raise
    /// the event-queue sizes (`PTL_MPI_EQ_EVENTS`, `PTL_MPI_ENVELOPES`).
    #[error("event queue overflow ({0} events lost)")]
    EventQueueOverflow(u64),
    /// A ready-mode send arrived with no receive posted (erroneous program):
    /// its data is gone.
    #[error("a ready send from rank {sender} (tag {tag}) found no posted receive")]
    ReadySendUnmatched {
        /// Sender's rank.
        sender: i32,
        /// Message tag.
        tag: i32,
    },
    /// The request was already completed and forgotten (its scope ended,
    /// or it was waited for before).
    #[error("the request was already completed")]
    StaleRequest,
    /// Context ids are exhausted (13-bit space).
    #[error("no free context id: {0}")]
    NoContext(String),
    /// The job could not start.
    #[error("initialization failed: {0}")]
    Init(String),
    /// A one-sided operation or synchronisation call outside the epoch it
    /// needs (`MPI_ERR_RMA_SYNC`): an operation on a target no access epoch
    /// covers, an unlock without a lock, a second lock of one target, a
    /// `complete` without a `start`. Nothing was sent.
    #[error("RMA synchronisation: {0}")]
    RmaEpoch(String),
    /// A one-sided operation outside the target's window
    /// (`MPI_ERR_RMA_RANGE`). Nothing was sent.
    #[error("RMA range: {len} elements at displacement {disp} do not fit rank {rank}'s window of {size} elements")]
    RmaRange {
        /// Target rank in the window's communicator.
        rank: i32,
        /// Displacement asked for (elements).
        disp: usize,
        /// Elements asked for.
        len: usize,
        /// The target window's size (elements).
        size: usize,
    },
    /// An accumulate operation the element type does not support, or a
    /// window call this implementation does not offer for the arguments
    /// given (`MPI_ERR_OP`, `MPI_ERR_RMA_FLAVOR`). Nothing was sent.
    #[error("RMA unsupported: {0}")]
    RmaUnsupported(String),
    /// A one-sided operation reached its target but failed there, or the
    /// target could not be reached (`MPI_ERR_RMA_CONFLICT`-class failures
    /// reported by the transport).
    #[error("RMA operation on rank {rank} failed: {why}")]
    RmaFailed {
        /// Target rank in the window's communicator.
        rank: i32,
        /// What failed.
        why: String,
    },
    /// An error from the Portals layer.
    #[error("portals: {0}")]
    Portals(#[from] portals::PtlError),
}

/// A collective message longer or shorter than the receiver's room: the
/// members called the collective with different lengths.
pub(crate) const COLLECTIVE_WRONG_SIZE: MpiError =
    MpiError::InvalidBuffer("collective message of the wrong size (mismatched calls?)");

/// Result alias.
pub type Result<T, E = MpiError> = std::result::Result<T, E>;
