//! Match bits of the RPC protocol: a message kind in the top bits, the
//! request's transfer id (xid) in the rest.
//!
//! One xid names one request and everything that belongs to it — its reply
//! and its bulk buffer — so a client can post the reply entry and expose
//! its bulk buffer before it sends, and a resend reuses all three.

/// Bits reserved for the message kind, at the top of the match bits.
pub const KIND_BITS: u32 = 4;
/// Bits left for the xid.
pub const XID_BITS: u32 = 64 - KIND_BITS;
/// The mask of the xid bits.
pub const XID_MASK: u64 = (1 << XID_BITS) - 1;

/// What a message is, carried in the top [`KIND_BITS`] of its match bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A request, put into a service's request buffers.
    Request = 1,
    /// A reply, put into the client's reply entry for the xid.
    Reply = 2,
    /// The client's bulk buffer, which the server reads or writes.
    Bulk = 3,
    /// An early reply: an empty put telling the client that its request
    /// is executing, so its resend budget starts over (ptlrpc's early
    /// reply, for handlers that run longer than the timeout).
    Early = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Request,
            2 => Kind::Reply,
            3 => Kind::Bulk,
            4 => Kind::Early,
            _ => return None,
        })
    }
}

/// The match bits of message `kind` for request `xid`; `None` when `xid`
/// does not fit in [`XID_BITS`].
pub fn encode(kind: Kind, xid: u64) -> Option<u64> {
    if xid > XID_MASK {
        return None;
    }
    Some(((kind as u64) << XID_BITS) | xid)
}

/// The kind and xid of match bits; `None` for a kind this protocol does
/// not know.
pub fn decode(bits: u64) -> Option<(Kind, u64)> {
    let kind = Kind::from_u8((bits >> XID_BITS) as u8)?;
    Some((kind, bits & XID_MASK))
}

/// The match bits and ignore bits of an entry that takes every message of
/// `kind`, whatever its xid.
pub fn any_xid(kind: Kind) -> (u64, u64) {
    ((kind as u64) << XID_BITS, XID_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encode_then_decode_is_the_identity(xid in 0..=XID_MASK, k in 1u8..=4) {
            let kind = Kind::from_u8(k).unwrap();
            let bits = encode(kind, xid).unwrap();
            prop_assert_eq!(decode(bits), Some((kind, xid)));
        }

        #[test]
        fn an_any_xid_entry_matches_exactly_its_kind(xid in 0..=XID_MASK, k in 1u8..=4, other in 1u8..=4) {
            let kind = Kind::from_u8(k).unwrap();
            let (mb, ignore) = any_xid(kind);
            let bits = encode(Kind::from_u8(other).unwrap(), xid).unwrap();
            prop_assert_eq!((bits ^ mb) & !ignore == 0, k == other);
        }
    }

    #[test]
    fn an_xid_too_wide_for_its_bits_is_refused() {
        assert_eq!(encode(Kind::Request, XID_MASK + 1), None);
        assert_eq!(encode(Kind::Request, u64::MAX), None);
        assert!(encode(Kind::Bulk, XID_MASK).is_some());
    }

    #[test]
    fn unknown_kinds_do_not_decode() {
        assert_eq!(decode(0), None);
        assert_eq!(decode(0xf << XID_BITS), None);
    }
}
