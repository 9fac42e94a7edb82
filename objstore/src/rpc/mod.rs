//! The object store over `portals-rpc`: small requests name the object,
//! object data moves one-sided through the client's exposed buffer (the
//! server pulls a put's data from it, pushes a get's data into it), in
//! calls of at most [`CALL_CHUNK`] bytes (an object in memory: up to
//! [`MAX_PART`] bytes), each moved by the server in the service's bulk
//! chunks. An object of any size streams through one call-sized buffer on
//! each side.
//!
//! Operations (the request body, little-endian; replies likewise):
//!
//! | opcode | body | bulk | reply |
//! |---|---|---|---|
//! | [`PUT`] | name | write: the whole object (≤ [`MAX_PART`]) | size |
//! | [`PUT_OPEN`] | name | – | handle |
//! | [`PUT_WRITE`] | handle, offset | write: the next part | – |
//! | [`PUT_COMMIT`] | handle | – | size |
//! | [`PUT_ABORT`] | handle | – | – |
//! | [`GET`] | offset, name | read: up to its length from offset | size, bytes pushed, version |
//! | [`STAT`] | name | – | size |
//! | [`LIST`] | – | – | (u16 name length, name, u64 size)* |
//! | [`DELETE`] | name | – | – |
//! | [`PUT_SMALL`] | u16 name length, name, the object (≤ [`INLINE_MAX`]) | – | size |
//! | [`GET_SMALL`] | name | – | size, version, the object if ≤ [`INLINE_MAX`] |
//!
//! Objects of at most [`INLINE_MAX`] bytes travel inside the request or
//! the reply ([`PUT_SMALL`], [`GET_SMALL`]; Lustre's short I/O): no bulk
//! buffer is exposed and the server makes no transfer of its own, which
//! saves a round trip and three Portals objects per call. A client uses
//! them only with a service whose largest request holds a small put
//! ([`MAX_REQUEST`]), which tells it the service is new enough.
//!
//! A large get is several [`GET`] calls; the version (the file's inode: a
//! put renames a new file in) must stay the same across them, or the get
//! fails instead of returning a mix of two objects. Handler errors travel
//! as text prefixed by a [`Code`], so the client gets them back typed.

pub mod client;
pub mod server;

/// Put a whole small object in one call.
pub const PUT: u32 = 1;
/// Start a multi-call put.
pub const PUT_OPEN: u32 = 2;
/// Append a part to a multi-call put.
pub const PUT_WRITE: u32 = 3;
/// Commit a multi-call put.
pub const PUT_COMMIT: u32 = 4;
/// Abandon a multi-call put.
pub const PUT_ABORT: u32 = 5;
/// Read (part of) an object.
pub const GET: u32 = 6;
/// Size of an object.
pub const STAT: u32 = 7;
/// Every object.
pub const LIST: u32 = 8;
/// Remove an object.
pub const DELETE: u32 = 9;

/// Put a whole small object inside the request.
pub const PUT_SMALL: u32 = 10;
/// Get a small object inside the reply.
pub const GET_SMALL: u32 = 11;

/// Largest object that travels inside a request or a reply.
pub const INLINE_MAX: usize = 8 << 10;

/// The largest request of the service: a small put with the longest name
/// (255 bytes) and the request header, rounded up.
pub const MAX_REQUEST: usize = 12 << 10;

/// The reply to [`GET_SMALL`] before the object: size and version.
pub const GET_SMALL_HEADER: usize = 16;

// A small put of the longest name fits a request.
const _: () = assert!(portals_rpc::wire::REQUEST_HEADER + 2 + 255 + INLINE_MAX <= MAX_REQUEST);

/// Most object bytes one call moves (the client's buffer per call).
pub const CALL_CHUNK: usize = 16 << 20;

/// Most object bytes one put call moves from an object in memory
/// ([`client::ObjClient::put_bytes`] exposes it whole, so a large object
/// is one call, its chunks pulled back to back without a round trip per
/// call). The server's memory stays its pull depth of bulk chunks
/// whatever the part's size.
pub const MAX_PART: usize = 1 << 30;

/// The bulk chunk the service moves data in. 1 MiB rather than 4: a put
/// writes a chunk to the file only once it has all arrived, and the last
/// chunk's write overlaps nothing, so smaller chunks overlap more of a
/// 16 MB put (medians of interleaved runs on the 2-core host: 1115-1628
/// against 1036-1083 MB/s); a 1 MB object is one chunk either way, and
/// smaller chunks measured slower there (docs/PERFORMANCE.md).
pub const BULK_CHUNK: usize = 1 << 20;

// A call's part is moved in whole bulk chunks or less.
const _: () = assert!(BULK_CHUNK <= CALL_CHUNK);
const _: () = assert!(CALL_CHUNK <= MAX_PART);

/// Largest list reply (the clients' reply buffer).
pub const MAX_REPLY: usize = 4 << 20;

/// The kind of a handler error, sent as the text's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Not a valid object name.
    InvalidName,
    /// No such object.
    NotFound,
    /// No such multi-call put (never opened, committed, or abandoned).
    BadHandle,
    /// The object changed between the calls of one get.
    Changed,
    /// A malformed request.
    BadRequest,
    /// The server failed (file system, bulk transfer).
    Internal,
}

impl Code {
    const ALL: [Code; 6] = [
        Code::InvalidName,
        Code::NotFound,
        Code::BadHandle,
        Code::Changed,
        Code::BadRequest,
        Code::Internal,
    ];

    /// The prefix.
    pub fn tag(self) -> &'static str {
        match self {
            Code::InvalidName => "invalid-name",
            Code::NotFound => "not-found",
            Code::BadHandle => "bad-handle",
            Code::Changed => "changed",
            Code::BadRequest => "bad-request",
            Code::Internal => "internal",
        }
    }

    /// Split `tag: message` into its code and message (unknown tags are
    /// [`Code::Internal`]).
    pub fn parse(text: &str) -> (Code, &str) {
        for c in Code::ALL {
            if let Some(rest) = text
                .strip_prefix(c.tag())
                .and_then(|r| r.strip_prefix(": "))
            {
                return (c, rest);
            }
        }
        (Code::Internal, text)
    }
}

/// Little-endian u64 at `at`, if the slice holds it.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_text() {
        for c in Code::ALL {
            let text = format!("{}: why", c.tag());
            assert_eq!(Code::parse(&text), (c, "why"));
        }
        assert_eq!(Code::parse("bulk failed"), (Code::Internal, "bulk failed"));
        assert_eq!(u64_at(&[1, 0, 0, 0, 0, 0, 0, 0, 9], 0), Some(1));
        assert_eq!(u64_at(&[1, 0, 0], 0), None);
        assert_eq!(u64_at(&[0; 8], usize::MAX), None);
    }
}
