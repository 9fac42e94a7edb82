//! What can go wrong when talking PMI to a process manager.

use std::io;
use std::time::Duration;

/// Errors of the PMI client.
///
/// Every failure caused by what the process manager sent (or did not send)
/// is reported as one of these; nothing read from the socket or the
/// environment can make the client panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmiError {
    /// A `PMI_*` environment variable is malformed, or one the chosen
    /// protocol needs is missing.
    #[error("PMI environment variable {var}: {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The process manager named by `PMI_PORT` could not be reached.
    #[error("cannot connect to the process manager at {endpoint}: {source}")]
    Connect {
        /// `host:port` as the launcher gave it.
        endpoint: String,
        /// The last connection error.
        #[source]
        source: io::Error,
    },
    /// Reading from or writing to the PMI socket failed.
    #[error("PMI {request}: connection error: {source}")]
    Io {
        /// The command in progress.
        request: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The process manager closed the connection before (or while) replying.
    #[error("PMI {request}: the process manager closed the connection")]
    Closed {
        /// The command in progress.
        request: &'static str,
    },
    /// No complete reply arrived in time.
    #[error("PMI {request}: no reply within {after:?}")]
    Timeout {
        /// The command in progress.
        request: &'static str,
        /// The timeout that expired.
        after: Duration,
    },
    /// A reply that does not follow the wire format.
    #[error("PMI {request}: malformed reply ({why}): {reply:?}")]
    Malformed {
        /// The command in progress.
        request: &'static str,
        /// What is wrong with it.
        why: String,
        /// The reply (possibly cut short), for diagnosis.
        reply: String,
    },
    /// A well-formed reply to some other command.
    #[error("PMI {request}: expected cmd={expected} in reply, got cmd={got}")]
    UnexpectedCommand {
        /// The command in progress.
        request: &'static str,
        /// The reply command the protocol prescribes.
        expected: &'static str,
        /// What came instead.
        got: String,
    },
    /// A reply without a field the protocol requires.
    #[error("PMI {request}: reply lacks the field {key}")]
    MissingKey {
        /// The command in progress.
        request: &'static str,
        /// The missing field.
        key: &'static str,
    },
    /// The process manager refused the command (`rc` not 0).
    #[error("PMI {request} failed: rc={rc} {msg}")]
    Server {
        /// The command.
        request: &'static str,
        /// The server's return code.
        rc: i64,
        /// The server's explanation (`msg` or `errmsg`), possibly empty.
        msg: String,
    },
    /// The process manager does not speak the PMI version asked for.
    #[error("the process manager refused PMI {wanted} (it offers {offered})")]
    VersionMismatch {
        /// What the client asked for, e.g. `2.0`.
        wanted: &'static str,
        /// What the server said it speaks, or `unknown`.
        offered: String,
    },
    /// A key or value longer than the process manager accepts.
    #[error("PMI {what} is {len} bytes; the process manager accepts at most {max}")]
    TooLong {
        /// `key` or `value`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit (see [`PmiClient::max_key_len`](super::PmiClient::max_key_len)).
        max: usize,
    },
    /// A key or value with characters the wire format cannot carry.
    #[error("PMI {what} {text:?} is not allowed: {why}")]
    InvalidToken {
        /// `key` or `value`.
        what: &'static str,
        /// The offending text.
        text: String,
        /// Why.
        why: &'static str,
    },
    /// `get` found no value under the key.
    #[error("PMI key {key:?} not found")]
    KeyNotFound {
        /// The key asked for.
        key: String,
    },
    /// [`decode_value`](super::decode_value) was given something that is not
    /// the output of [`encode_value`](super::encode_value).
    #[error("PMI value is not hex-encoded: {why}")]
    BadEncoding {
        /// What is wrong.
        why: &'static str,
    },
    /// The call is not allowed in this state (e.g. `get` before the first
    /// fence, any call after `abort`).
    #[error("PMI misuse: {0}")]
    Usage(&'static str),
    /// An earlier timeout, connection or framing error left the connection
    /// out of step with the server; no further commands can be sent on it.
    #[error("PMI connection unusable after an earlier error")]
    Poisoned,
}

/// Result of PMI operations.
pub type Result<T, E = PmiError> = std::result::Result<T, E>;
