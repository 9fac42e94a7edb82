//! Announced long sends: a long message that is likely to arrive before its
//! receive is posted sends its envelope alone, and the receiver pulls the
//! data once a receive matches it — the rendezvous of Open MPI's and
//! MPICH's long protocols, chosen per target from what the last long
//! messages to it met.
//!
//! **Why.** The long protocol of seed 001 (§3.3) puts the whole message at
//! once. Expected, that is the fastest way: the data moves once, with no
//! round trip in front of it. Unexpected, the long-unexpected entry takes it
//! as zero bytes, and the receiver gets the data later: the bytes cross the
//! network twice (the transport reads the truncated payload and throws it
//! away), and the receiver's progress wakes for every segment of data it
//! discards. Issue 22 traced COMB's two context switches per 100 KB message
//! to exactly that. An announcement is a zero-byte put with the same match
//! bits, whose header data carries the length: unexpected, it costs one
//! small message; expected, one round trip more than the put.
//!
//! **When.** Per target, from what the target's answers say. A long put
//! acknowledged with zero bytes met no posted receive: the next
//! [`crate::MpiConfig::long_announce`] long sends to that target are
//! announced. The receiver's get of an announced message says whether a
//! posted receive matched the announcement ([`HDR_EXPECTED`] in the get's
//! match bits, which the sender's read-portal entry ignores): each expected
//! one counts the run down, and an unexpected one starts it again. So a
//! target whose receives run behind keeps getting announcements, and one
//! whose receives are posted early gets puts again after a short run.
//!
//! **Header data of an announcement.** [`HDR_ANNOUNCE`], the message's
//! length in bits 32–59, and the low 32 bits of the send's unique bits.
//! It is also the match bits of the send's read-portal entry, so the
//! receiver's get names it unchanged (plus, from a posted receive,
//! [`HDR_EXPECTED`]). Messages of [`MAX_ANNOUNCED`] bytes and more are put.
//! The unique part is the low half of a counter of every send: two live
//! announced sends to one target can share match bits only if they have
//! the same length and 2³² sends were started between them.

use super::HDR_UNIQUE;

/// Header-data flag of a long send: the put carries no data; the length is
/// in bits 32–59, and the sender waits for the receiver's get.
pub(crate) const HDR_ANNOUNCE: u64 = 1 << 61;
/// Flag a receiver sets in the match bits of its get of an announced
/// message: a posted receive matched the announcement (the sender's
/// read-portal entry ignores this bit, and the sender learns from it).
pub(crate) const HDR_EXPECTED: u64 = 1 << 60;
/// Announced lengths are below this (28 bits).
pub(crate) const MAX_ANNOUNCED: usize = 1 << 28;

const LEN_SHIFT: u32 = 32;

// The flags and the length field must sit above the unique bits of every
// other protocol's header data.
const _: () = assert!(HDR_UNIQUE < HDR_EXPECTED);
const _: () = assert!(((MAX_ANNOUNCED as u64 - 1) << LEN_SHIFT) < HDR_EXPECTED);

/// The header data of an announced send of `len` bytes (below
/// [`MAX_ANNOUNCED`]) with unique bits `unique`.
pub(super) fn header(len: usize, unique: u64) -> u64 {
    HDR_ANNOUNCE | ((len as u64) << LEN_SHIFT) | (unique & 0xffff_ffff)
}

/// The length an announcement's header data `hdr` carries, if it is one.
/// A peer's value: any 28-bit length is taken as told, and the receive
/// pulls at most its own buffer's length of it.
pub(super) fn announced_len(hdr: u64) -> Option<u64> {
    (hdr & HDR_ANNOUNCE != 0).then_some((hdr >> LEN_SHIFT) & (MAX_ANNOUNCED as u64 - 1))
}

/// Which long sends are announced, per target (world rank).
pub(super) struct Announcing {
    /// Long sends to announce after an unexpected one; 0: never,
    /// `usize::MAX`: always.
    run: usize,
    /// Per target, long sends still to announce.
    left: Vec<usize>,
}

impl Announcing {
    /// No target announced yet, for `ranks` targets, with run length `run`
    /// ([`crate::MpiConfig::long_announce`]).
    pub(super) fn new(run: usize, ranks: u32) -> Self {
        let start = if run == usize::MAX { usize::MAX } else { 0 };
        Announcing {
            run,
            left: vec![start; ranks as usize],
        }
    }

    /// Whether a long send of `len` bytes to `dst` is announced.
    pub(super) fn wants(&self, dst: u32, len: usize) -> bool {
        len < MAX_ANNOUNCED && self.left.get(dst as usize).is_some_and(|&n| n > 0)
    }

    /// A long message to `dst` met no posted receive (a put acknowledged
    /// with zero bytes, or an announcement pulled from the saved ones).
    pub(super) fn unexpected(&mut self, dst: u32) {
        if let Some(n) = self.left.get_mut(dst as usize) {
            *n = self.run;
        }
    }

    /// An announcement to `dst` met a posted receive.
    pub(super) fn expected(&mut self, dst: u32) {
        if self.run == usize::MAX {
            return;
        }
        if let Some(n) = self.left.get_mut(dst as usize) {
            *n = n.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_carries_length_and_unique_bits_below_the_flags() {
        let h = header(100_000, 0x1234_5678_9abc_def0);
        assert_eq!(announced_len(h), Some(100_000));
        assert_eq!(h & 0xffff_ffff, 0x9abc_def0);
        assert_eq!(h & HDR_EXPECTED, 0);
        assert_eq!(announced_len(h | HDR_EXPECTED), Some(100_000));
        let biggest = header(MAX_ANNOUNCED - 1, u64::MAX);
        assert_eq!(announced_len(biggest), Some(MAX_ANNOUNCED as u64 - 1));
        assert_eq!(biggest & HDR_EXPECTED, 0);
        // A put's header data (unique bits only) is no announcement.
        assert_eq!(announced_len(HDR_UNIQUE), None);
    }

    #[test]
    fn an_unexpected_message_starts_a_run_that_expected_ones_count_down() {
        let mut a = Announcing::new(2, 3);
        assert!(!a.wants(1, 1 << 20));
        a.unexpected(1);
        assert!(a.wants(1, 1 << 20));
        assert!(!a.wants(0, 1 << 20) && !a.wants(2, 1 << 20));
        a.expected(1);
        assert!(a.wants(1, 1 << 20));
        // Unexpected again: the run starts over.
        a.unexpected(1);
        a.expected(1);
        assert!(a.wants(1, 1 << 20));
        a.expected(1);
        assert!(!a.wants(1, 1 << 20));
        // Too long to announce; outside the job: never.
        a.unexpected(2);
        assert!(!a.wants(2, MAX_ANNOUNCED));
        a.unexpected(7);
        assert!(!a.wants(7, 1 << 20));
    }

    #[test]
    fn run_zero_never_announces_and_the_largest_run_always_does() {
        let mut never = Announcing::new(0, 2);
        never.unexpected(0);
        assert!(!never.wants(0, 1 << 20));
        let mut always = Announcing::new(usize::MAX, 2);
        assert!(always.wants(0, 1 << 20));
        for _ in 0..1000 {
            always.expected(0);
        }
        assert!(always.wants(0, 1 << 20));
    }
}
