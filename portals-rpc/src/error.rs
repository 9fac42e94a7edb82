//! Typed errors of clients, services and bulk transfers.

use portals::{ProcessId, PtlError};

/// Why a call failed at the client.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RpcError {
    /// The request (header and body) is larger than the service takes;
    /// nothing was sent.
    #[error("request of {size} bytes exceeds the service's maximum of {max}")]
    RequestTooLarge {
        /// Bytes of the request with its header.
        size: u64,
        /// The service's maximum.
        max: u64,
    },
    /// No reply after the first send and every resend.
    #[error("no reply from {server} after {attempts} sends")]
    Timeout {
        /// The server.
        server: ProcessId,
        /// How many times the request was sent.
        attempts: u32,
    },
    /// The service's request buffers stayed full through every back-off.
    #[error("{server} refused the request {refusals} times: its request buffers are full")]
    Busy {
        /// The server.
        server: ProcessId,
        /// How many sends it refused.
        refusals: u32,
    },
    /// The transport gave up on the server: its connection closed or
    /// never completed the handshake.
    #[error(
        "server {0} failed: its connection closed or never completed the handshake \
         (the server died, runs under another job key, or is not a portals-rpc server)"
    )]
    PeerFailed(ProcessId),
    /// The handler returned an error; its message.
    #[error("the handler failed: {0}")]
    Remote(String),
    /// The handler's reply was larger than the client's reply buffer
    /// ([`crate::ClientConfig::max_reply`]).
    #[error("the reply did not fit in the {0}-byte reply buffer")]
    ReplyTooLarge(u64),
    /// The server found the request malformed.
    #[error("the server refused the request as malformed")]
    BadRequest,
    /// A resend's reply had left the server's reply cache: the request may
    /// have been executed, and was not executed again.
    #[error("the reply to a resent request was lost; it may have been executed once")]
    ReplyLost,
    /// The server answered with something this client does not understand.
    #[error("malformed reply: {0}")]
    Protocol(&'static str),
    /// A Portals call failed.
    #[error("portals: {0}")]
    Portals(#[from] PtlError),
}

/// Why a bulk transfer failed in a handler.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BulkError {
    /// The request has no bulk buffer in this direction.
    #[error("the request has no bulk buffer to {0}")]
    WrongDirection(&'static str),
    /// The range lies outside the client's buffer.
    #[error("range {offset}+{len} is outside the {bulk_len}-byte bulk buffer")]
    OutOfRange {
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
        /// The client's buffer length.
        bulk_len: u64,
    },
    /// The client died or became unreachable.
    #[error("client {0} failed during the bulk transfer")]
    PeerFailed(ProcessId),
    /// The client's buffer is gone (it gave up on the request).
    #[error("the client's bulk buffer is gone")]
    Gone,
    /// No completion within the service's bulk timeout.
    #[error("the bulk transfer did not complete in time")]
    Timeout,
    /// The service is stopping.
    #[error("the service is stopping")]
    Stopping,
    /// A Portals call failed.
    #[error("portals: {0}")]
    Portals(#[from] PtlError),
}

/// A handler's failure, sent to the client as [`RpcError::Remote`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct HandlerError(pub String);

impl From<BulkError> for HandlerError {
    fn from(e: BulkError) -> Self {
        HandlerError(e.to_string())
    }
}

impl From<&str> for HandlerError {
    fn from(s: &str) -> Self {
        HandlerError(s.to_string())
    }
}

impl From<String> for HandlerError {
    fn from(s: String) -> Self {
        HandlerError(s)
    }
}

/// A malformed header from a peer.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the header needs.
    #[error("{0} bytes are too few for the header")]
    Short(usize),
    /// Not an RPC request.
    #[error("bad magic number")]
    BadMagic,
    /// An unknown bulk direction.
    #[error("unknown bulk kind {0}")]
    BadBulkKind(u8),
}

/// Why a service could not start or stopped.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceError {
    /// The configuration is unusable; the message says why.
    #[error("invalid service configuration: {0}")]
    Config(&'static str),
    /// A Portals call failed.
    #[error("portals: {0}")]
    Portals(#[from] PtlError),
}
