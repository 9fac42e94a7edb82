//! What travels in a request's payload and in a reply's header data.
//!
//! A request is a fixed [`REQUEST_HEADER`]-byte header followed by the
//! caller's body. A reply carries no header: its payload is the handler's
//! answer and its 64 bits of header data the [`Status`], so a reply is
//! sent from the handler's buffer as it is.

use crate::error::WireError;

/// Bytes of the request header.
pub const REQUEST_HEADER: usize = 32;
const MAGIC: u32 = u32::from_le_bytes(*b"PRPC");

/// Which way a request's bulk data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BulkKind {
    /// No bulk buffer.
    None = 0,
    /// The server puts into the client's buffer (the client reads).
    Read = 1,
    /// The server gets from the client's buffer (the client writes).
    Write = 2,
}

/// Header flag: a connect request, answered by the service itself with
/// its [`ServiceInfo`].
pub(crate) const FLAG_CONNECT: u8 = 1;

/// A request's 64 bits of header data: bit 0 set when an earlier send of
/// the same xid may have reached the service (its outcome is unknown, or it
/// was delivered). A send after nothing but refusals leaves it clear: the
/// service never saw the request, so it is new wherever its xid falls.
pub(crate) const HDR_MAYBE_RESENT: u64 = 1;

/// The request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// The operation, the handler's to interpret.
    pub opcode: u32,
    /// Flags ([`FLAG_CONNECT`]).
    pub(crate) flags: u8,
    /// The direction of the bulk buffer.
    pub bulk: BulkKind,
    /// Length of the client's bulk buffer.
    pub bulk_len: u64,
    /// The largest reply the client can take.
    pub reply_max: u64,
}

impl RequestHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; REQUEST_HEADER] {
        let mut b = [0u8; REQUEST_HEADER];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.opcode.to_le_bytes());
        b[8] = self.flags;
        b[9] = self.bulk as u8;
        b[16..24].copy_from_slice(&self.bulk_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.reply_max.to_le_bytes());
        b
    }

    /// The header at the start of `b`: anything malformed is an error, not
    /// a panic (a peer controls these bytes).
    pub fn decode(b: &[u8]) -> Result<RequestHeader, WireError> {
        let h: &[u8; REQUEST_HEADER] = b
            .get(..REQUEST_HEADER)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Short(b.len()))?;
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&h[r]);
            u64::from_le_bytes(w)
        };
        if word(0..4) as u32 != MAGIC {
            return Err(WireError::BadMagic);
        }
        let bulk = match h[9] {
            0 => BulkKind::None,
            1 => BulkKind::Read,
            2 => BulkKind::Write,
            k => return Err(WireError::BadBulkKind(k)),
        };
        Ok(RequestHeader {
            opcode: word(4..8) as u32,
            flags: h[8],
            bulk,
            bulk_len: word(16..24),
            reply_max: word(24..32),
        })
    }
}

/// How a request ended, in the reply's header data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Status {
    /// The handler answered; the payload is its reply.
    Ok = 0,
    /// The handler failed; the payload is its message (UTF-8).
    HandlerFailed = 1,
    /// The handler's reply was larger than the client's reply buffer.
    ReplyTooLarge = 2,
    /// The request was malformed.
    BadRequest = 3,
    /// A resend whose first execution's reply has left the reply cache: it
    /// may have been executed, so it is not executed again.
    ReplyLost = 4,
}

impl Status {
    /// The status carried in header data `v`.
    pub fn from_u64(v: u64) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::HandlerFailed,
            2 => Status::ReplyTooLarge,
            3 => Status::BadRequest,
            4 => Status::ReplyLost,
            _ => return None,
        })
    }
}

/// What a client learns at connect time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The largest request (header and body) the service takes.
    pub max_request: u64,
    /// The chunk size the service moves bulk data in.
    pub bulk_chunk: u64,
}

impl ServiceInfo {
    /// Bytes of the encoded form.
    pub const LEN: usize = 16;

    /// The encoded form.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.max_request.to_le_bytes());
        v.extend_from_slice(&self.bulk_chunk.to_le_bytes());
        v
    }

    /// Decode; a short reply is an error.
    pub fn decode(b: &[u8]) -> Result<ServiceInfo, WireError> {
        if b.len() < Self::LEN {
            return Err(WireError::Short(b.len()));
        }
        let w = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Ok(ServiceInfo {
            max_request: w(0),
            bulk_chunk: w(8),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_headers_round_trip(opcode: u32, flags in 0u8..2, k in 0u8..3, bulk_len: u64, reply_max: u64) {
            let bulk = [BulkKind::None, BulkKind::Read, BulkKind::Write][k as usize];
            let h = RequestHeader { opcode, flags, bulk, bulk_len, reply_max };
            prop_assert_eq!(RequestHeader::decode(&h.encode()), Ok(h));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = RequestHeader::decode(&b);
            let _ = ServiceInfo::decode(&b);
        }
    }

    #[test]
    fn malformed_headers_are_typed_errors() {
        assert_eq!(RequestHeader::decode(&[0; 8]), Err(WireError::Short(8)));
        assert_eq!(RequestHeader::decode(&[0; 32]), Err(WireError::BadMagic));
        let mut b = RequestHeader {
            opcode: 1,
            flags: 0,
            bulk: BulkKind::None,
            bulk_len: 0,
            reply_max: 0,
        }
        .encode();
        b[9] = 7;
        assert_eq!(RequestHeader::decode(&b), Err(WireError::BadBulkKind(7)));
    }

    #[test]
    fn statuses_round_trip_and_unknown_ones_do_not() {
        for s in [
            Status::Ok,
            Status::HandlerFailed,
            Status::ReplyTooLarge,
            Status::BadRequest,
            Status::ReplyLost,
        ] {
            assert_eq!(Status::from_u64(s as u64), Some(s));
        }
        assert_eq!(Status::from_u64(99), None);
    }
}
