//! The receive side of a per-peer sequence space.
//!
//! Sequence numbers are 64-bit and start at 0, so they never wrap in the life
//! of a job (at a billion datagrams a second that would take 584 years); the
//! 8 bytes they cost per datagram buy freedom from serial-number arithmetic.
//!
//! Two cursors split the space:
//! * `deliver_nxt`: every sequence number below it has been *processed in
//!   order* (handed to the upper layer, or consumed by the protocol);
//! * `rcv_nxt`: every sequence number below it has been *received*; this is
//!   the cumulative ack.
//!
//! `deliver_nxt <= rcv_nxt`; they differ only while in-order processing is
//! stalled (see `recv`). The receiver accepts sequence numbers in
//! `[deliver_nxt, deliver_nxt + size)` and records which ones it has in a
//! ring of `size` bits, so out-of-order state is bounded by the window no
//! matter what a peer sends. The window it advertises is what is left of
//! that range above the cumulative ack, which is how a stalled receiver
//! throttles its sender.

use bitvec::order::Lsb0;
use bitvec::vec::BitVec;

use super::wire::{Sack, MAX_SACK_BITS};

/// Where an arriving sequence number falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SeqClass {
    /// Already received.
    Duplicate,
    /// Beyond the window: a correct sender never does this.
    Beyond,
    /// New and inside the window.
    New,
}

/// Receive-side sequence window of one peer.
#[derive(Debug)]
pub(crate) struct RecvWindow {
    deliver_nxt: u64,
    rcv_nxt: u64,
    /// One past the highest sequence number received.
    high: u64,
    size: u64,
    /// Bit `seq % size` is set iff `seq` in `[deliver_nxt, deliver_nxt+size)`
    /// has been received.
    received: BitVec<u64, Lsb0>,
}

impl RecvWindow {
    /// A window of `size` sequence numbers (`size >= 1`).
    pub(crate) fn new(size: u32) -> Self {
        let size = u64::from(size.max(1));
        RecvWindow {
            deliver_nxt: 0,
            rcv_nxt: 0,
            high: 0,
            size,
            received: BitVec::repeat(false, size as usize),
        }
    }

    fn slot(&self, seq: u64) -> usize {
        // `size` came from a u32, so the remainder fits in usize.
        (seq % self.size) as usize
    }

    fn end(&self) -> u64 {
        self.deliver_nxt + self.size
    }

    /// First sequence number not yet processed in order.
    pub(crate) fn deliver_nxt(&self) -> u64 {
        self.deliver_nxt
    }

    /// First sequence number not yet received (the cumulative ack).
    pub(crate) fn rcv_nxt(&self) -> u64 {
        self.rcv_nxt
    }

    /// One past the highest sequence number received.
    pub(crate) fn high(&self) -> u64 {
        self.high
    }

    /// Ring index of `seq`, for parallel per-slot storage.
    pub(crate) fn index(&self, seq: u64) -> usize {
        self.slot(seq)
    }

    /// Classify an arriving sequence number.
    pub(crate) fn classify(&self, seq: u64) -> SeqClass {
        if seq < self.rcv_nxt {
            SeqClass::Duplicate
        } else if seq >= self.end() {
            SeqClass::Beyond
        } else if self.received[self.slot(seq)] {
            SeqClass::Duplicate
        } else {
            SeqClass::New
        }
    }

    /// Record `seq` as received. It must have been classified [`SeqClass::New`].
    pub(crate) fn mark(&mut self, seq: u64) {
        debug_assert_eq!(self.classify(seq), SeqClass::New);
        let slot = self.slot(seq);
        self.received.set(slot, true);
        self.high = self.high.max(seq + 1);
        while self.rcv_nxt < self.end() && self.received[self.slot(self.rcv_nxt)] {
            self.rcv_nxt += 1;
        }
    }

    /// Whether `seq` has been received.
    #[cfg(test)]
    pub(crate) fn is_received(&self, seq: u64) -> bool {
        seq < self.rcv_nxt
            || (seq < self.end() && seq >= self.deliver_nxt && self.received[self.slot(seq)])
    }

    /// `deliver_nxt` has been processed; move past it. Requires it received.
    pub(crate) fn advance_delivered(&mut self) {
        debug_assert!(self.deliver_nxt < self.rcv_nxt);
        let slot = self.slot(self.deliver_nxt);
        self.received.set(slot, false);
        self.deliver_nxt += 1;
    }

    /// Window to advertise: how many sequence numbers at or above the
    /// cumulative ack the receiver will accept.
    pub(crate) fn advertised(&self) -> u32 {
        // `end - rcv_nxt <= size`, which came from a u32.
        (self.end() - self.rcv_nxt) as u32
    }

    /// Whether anything above the cumulative ack has been received.
    pub(crate) fn has_gap(&self) -> bool {
        self.high > self.rcv_nxt
    }

    /// Fill `out` with the selective-ack bitmap relative to the cumulative ack.
    pub(crate) fn sack(&self, out: &mut Sack) {
        out.fill(false);
        if !self.has_gap() {
            return;
        }
        let first = self.rcv_nxt + 1;
        let last = self.high.min(self.end());
        for seq in first..last {
            let bit = (seq - first) as usize;
            if bit >= MAX_SACK_BITS {
                break;
            }
            if self.received[self.slot(seq)] {
                out.set(bit, true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_arrivals_advance_the_cumulative_ack() {
        let mut w = RecvWindow::new(4);
        for s in 0..3 {
            assert_eq!(w.classify(s), SeqClass::New);
            w.mark(s);
            assert_eq!(w.rcv_nxt(), s + 1);
        }
        assert_eq!(w.classify(1), SeqClass::Duplicate);
        // nothing delivered yet: the window is pinned at deliver_nxt = 0
        assert_eq!(w.advertised(), 1);
        assert_eq!(w.classify(4), SeqClass::Beyond);
        w.advance_delivered();
        w.advance_delivered();
        assert_eq!(w.advertised(), 3);
        assert_eq!(w.classify(5), SeqClass::New);
        assert_eq!(w.classify(6), SeqClass::Beyond);
    }

    #[test]
    fn gaps_show_in_the_sack_and_fill_in() {
        let mut w = RecvWindow::new(8);
        w.mark(0);
        w.advance_delivered();
        w.mark(2);
        w.mark(4);
        assert!(w.has_gap());
        assert_eq!(w.rcv_nxt(), 1);
        let mut sack = Sack::ZERO;
        w.sack(&mut sack);
        // bit i is seq rcv_nxt + 1 + i: seqs 2 and 4
        assert_eq!(sack.iter_ones().collect::<Vec<_>>(), vec![0, 2]);
        assert!(w.is_received(2) && !w.is_received(3));
        w.mark(1);
        assert_eq!(w.rcv_nxt(), 3);
        w.mark(3);
        assert_eq!(w.rcv_nxt(), 5);
        assert!(!w.has_gap());
        w.sack(&mut sack);
        assert!(sack.not_any());
    }

    #[test]
    fn ring_slots_are_reused_after_delivery() {
        let mut w = RecvWindow::new(3);
        for s in 0..1000u64 {
            assert_eq!(w.classify(s), SeqClass::New, "seq {s}");
            w.mark(s);
            w.advance_delivered();
            assert_eq!(w.classify(s), SeqClass::Duplicate);
        }
        assert_eq!(w.advertised(), 3);
    }

    #[test]
    fn full_window_does_not_alias() {
        let mut w = RecvWindow::new(2);
        w.mark(1);
        w.mark(0);
        assert_eq!(w.rcv_nxt(), 2);
        assert_eq!(w.advertised(), 0);
        // seq 2 maps to the slot of seq 0, which is still occupied
        assert_eq!(w.classify(2), SeqClass::Beyond);
        w.advance_delivered();
        assert_eq!(w.classify(2), SeqClass::New);
    }
}
