//! The match-bit layout of seed 001 §3.1 (Fig. 2):
//!
//! ```text
//!  63   61 60          48 47            32 31                   0
//! +-------+--------------+----------------+----------------------+
//! | proto |  context id  |  source rank   |         tag          |
//! |  (3)  |     (13)     |      (16)      |         (32)         |
//! +-------+--------------+----------------+----------------------+
//! ```
//!
//! Receives ignore the protocol bits (they match any protocol), and
//! `ANY_SOURCE` / `ANY_TAG` become ignore bits over the source and tag
//! fields.

/// Short (eager) message: standard, ready, and synchronous (then the header
/// data names the sender's acknowledgment entry).
pub(crate) const PROTO_SHORT: u64 = 1;
/// Long message: eager put plus a read-portal entry the receiver can get
/// from if the put arrived unexpected (the header data names that entry).
pub(crate) const PROTO_LONG: u64 = 2;

const PROTO_SHIFT: u32 = 61;
const CTX_SHIFT: u32 = 48;
const SRC_SHIFT: u32 = 32;

pub(crate) const PROTO_MASK: u64 = 0b111 << PROTO_SHIFT;
pub(crate) const CTX_MASK: u64 = 0x1fff << CTX_SHIFT;
pub(crate) const SRC_MASK: u64 = 0xffff << SRC_SHIFT;
pub(crate) const TAG_MASK: u64 = 0xffff_ffff;

/// Largest context id (13 bits).
pub const MAX_CONTEXT: u16 = 0x1fff;
/// Largest rank that fits the source field (16 bits).
pub const MAX_RANK: u32 = 0xffff;

/// Match bits of a message.
#[inline]
pub(crate) fn encode(proto: u64, ctx: u16, src: u32, tag: u32) -> u64 {
    (proto << PROTO_SHIFT) | ((ctx as u64) << CTX_SHIFT) | ((src as u64) << SRC_SHIFT) | tag as u64
}

/// The fields of received match bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) proto: u64,
    pub(crate) ctx: u16,
    pub(crate) src: u32,
    pub(crate) tag: u32,
}

#[inline]
pub(crate) fn decode(bits: u64) -> Fields {
    Fields {
        proto: (bits & PROTO_MASK) >> PROTO_SHIFT,
        ctx: ((bits & CTX_MASK) >> CTX_SHIFT) as u16,
        src: ((bits & SRC_MASK) >> SRC_SHIFT) as u32,
        tag: (bits & TAG_MASK) as u32,
    }
}

/// Match and ignore bits of a receive for `ctx`, from `src` (None: any
/// source) with `tag` (None: any tag).
#[inline]
pub(crate) fn receive(ctx: u16, src: Option<u32>, tag: Option<u32>) -> (u64, u64) {
    let bits = encode(0, ctx, src.unwrap_or(0), tag.unwrap_or(0));
    let mut ignore = PROTO_MASK;
    if src.is_none() {
        ignore |= SRC_MASK;
    }
    if tag.is_none() {
        ignore |= TAG_MASK;
    }
    (bits, ignore)
}

/// True if message `bits` satisfies a receive's `(match, ignore)`.
#[inline]
pub(crate) fn accepts(recv: (u64, u64), bits: u64) -> bool {
    (bits ^ recv.0) & !recv.1 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_their_documented_positions() {
        let b = encode(PROTO_LONG, 0x1abc, 0xfedc, 0x8765_4321);
        assert_eq!(b >> 61, PROTO_LONG);
        assert_eq!((b >> 48) & 0x1fff, 0x1abc);
        assert_eq!((b >> 32) & 0xffff, 0xfedc);
        assert_eq!(b & 0xffff_ffff, 0x8765_4321);
        assert_eq!(
            decode(b),
            Fields {
                proto: PROTO_LONG,
                ctx: 0x1abc,
                src: 0xfedc,
                tag: 0x8765_4321
            }
        );
    }

    #[test]
    fn wildcards_ignore_exactly_their_fields() {
        let m = encode(PROTO_SHORT, 3, 7, 42);
        assert!(accepts(receive(3, Some(7), Some(42)), m));
        assert!(accepts(receive(3, None, Some(42)), m));
        assert!(accepts(receive(3, Some(7), None), m));
        assert!(accepts(receive(3, None, None), m));
        assert!(!accepts(receive(4, None, None), m), "context is never wild");
        assert!(!accepts(receive(3, Some(8), None), m));
        assert!(!accepts(receive(3, None, Some(41)), m));
        assert!(accepts(
            receive(3, Some(7), Some(42)),
            encode(PROTO_LONG, 3, 7, 42)
        ));
    }
}
