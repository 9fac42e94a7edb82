//! The receive side of one peer: out-of-order buffering, in-order message
//! starts, reassembly of eager messages straight into the sink, and ack
//! scheduling.
//!
//! Only message *starts* need sequence order. A continuation fragment of
//! the eager message already started is delivered the moment it arrives,
//! wherever it falls in the window; everything else that arrives early is
//! copied into a pooled buffer in its window slot until the gap before it
//! fills. Because a sender sequences an eager message's fragments before
//! the next message, at most one eager message per peer is ever being
//! reassembled, so its fragment bitmap is a single reused allocation.

use std::time::Instant;

use bitvec::order::Lsb0;
use bitvec::vec::BitVec;

use super::config::{Config, MAX_EAGER_FRAGS};
use super::pool::BufPool;
use super::seq::RecvWindow;
use super::types::{MsgId, PeerId, Sink};
use super::wire::HEADER_LEN;

/// When to acknowledge: coalesce up to `ack_every` datagrams or `ack_delay`,
/// but at once when the sender needs to hear about a hole or a duplicate.
#[derive(Debug, Default)]
pub(crate) struct AckTimer {
    pending: u32,
    deadline: Option<Instant>,
    immediate: bool,
}

impl AckTimer {
    /// A sequenced datagram was accepted; `urgent` if it was out of order.
    pub(crate) fn on_sequenced(&mut self, now: Instant, urgent: bool, cfg: &Config) {
        self.pending += 1;
        if urgent || self.pending >= cfg.ack_every {
            self.immediate = true;
        } else if self.deadline.is_none() {
            self.deadline = Some(now + cfg.ack_delay);
        }
    }

    /// Acknowledge with the next datagram, even if it is a bare ack.
    pub(crate) fn request_now(&mut self) {
        self.immediate = true;
    }

    /// Send a held-back ack with the next datagram instead of at its
    /// deadline. Returns whether one was held back.
    pub(crate) fn release(&mut self) -> bool {
        if self.deadline.take().is_some() {
            self.immediate = true;
            return true;
        }
        false
    }

    /// The delayed-ack timer.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Check the delayed-ack timer.
    pub(crate) fn on_timer(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| d <= now) {
            self.deadline = None;
            self.immediate = true;
        }
    }

    /// Whether a bare ack must go out now.
    pub(crate) fn due(&self) -> bool {
        self.immediate
    }

    /// A datagram (which always carries the ack) went to the peer.
    pub(crate) fn on_sent(&mut self) {
        self.pending = 0;
        self.deadline = None;
        self.immediate = false;
    }
}

/// The eager message being reassembled.
#[derive(Debug)]
struct Eager {
    msg: u64,
    total: u64,
    wanted: u64,
    first_len: u64,
    frag_size: u64,
    n_frags: u64,
    seen: u64,
    delivered: u64,
    completed: bool,
}

/// Receive state from one peer.
#[derive(Debug)]
pub(crate) struct RecvState {
    pub(crate) win: RecvWindow,
    /// Datagrams waiting for in-order processing, by window slot.
    slots: Vec<Option<Vec<u8>>>,
    buffered: usize,
    next_msg: u64,
    current: Option<Eager>,
    frag_seen: BitVec<u64, Lsb0>,
    pub(crate) ack: AckTimer,
    /// In-order processing waits for pull capacity.
    pub(crate) stalled: bool,
}

/// A frame that breaks the protocol; the reason is for logs.
pub(crate) type Violation = &'static str;

impl RecvState {
    pub(crate) fn new(cfg: &Config) -> Self {
        RecvState {
            win: RecvWindow::new(cfg.recv_window),
            slots: (0..cfg.recv_window).map(|_| None).collect(),
            buffered: 0,
            next_msg: 0,
            current: None,
            frag_seen: BitVec::new(),
            ack: AckTimer::default(),
            stalled: false,
        }
    }

    /// Keep a copy of datagram `seq` until it can be processed in order.
    pub(crate) fn buffer(&mut self, seq: u64, raw: &[u8], pool: &mut BufPool) {
        let mut v = pool.get();
        portals_copy::extend_from_slice(&mut v, raw);
        self.put_back(seq, v);
    }

    /// Put a buffered datagram (back) into its slot.
    pub(crate) fn put_back(&mut self, seq: u64, v: Vec<u8>) {
        let slot = self.win.index(seq);
        if self.slots[slot].replace(v).is_none() {
            self.buffered += 1;
        }
    }

    /// Take the buffered datagram `seq`, if any.
    pub(crate) fn take(&mut self, seq: u64) -> Option<Vec<u8>> {
        let slot = self.win.index(seq);
        let v = self.slots[slot].take();
        if v.is_some() {
            self.buffered -= 1;
        }
        v
    }

    /// Index the next message start must carry.
    pub(crate) fn next_msg(&self) -> u64 {
        self.next_msg
    }

    /// Whether a continuation fragment of `msg` can be delivered right now,
    /// ahead of sequence order.
    pub(crate) fn accepts_fragment(&self, msg: u64) -> bool {
        self.current.as_ref().is_some_and(|c| c.msg == msg)
    }

    /// Whether an eager message has started but not got all its wanted bytes.
    pub(crate) fn awaiting_data(&self) -> bool {
        self.current.as_ref().is_some_and(|c| !c.completed)
    }

    /// Forget the eager message in progress before another starts or the
    /// peer dies; aborts it if bytes were still wanted. Returns whether it
    /// had to abort.
    pub(crate) fn close_current(&mut self, peer: PeerId, sink: &mut dyn Sink) -> bool {
        match self.current.take() {
            Some(c) if !c.completed => {
                sink.on_abort(MsgId { peer, index: c.msg });
                true
            }
            _ => false,
        }
    }

    /// Start an eager message (a `Msg` frame processed in order); false if
    /// the sink held it back (nothing changed).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_eager(
        &mut self,
        peer: PeerId,
        msg: u64,
        total: u64,
        frag_size: u32,
        header: &[u8; HEADER_LEN],
        data: &[u8],
        sink: &mut dyn Sink,
    ) -> Result<bool, Violation> {
        if msg != self.next_msg {
            return Err("message index out of order");
        }
        let first_len = data.len() as u64;
        let rest = total
            .checked_sub(first_len)
            .ok_or("first chunk longer than message")?;
        let frag_size = u64::from(frag_size);
        let n_frags = if rest == 0 {
            0
        } else if frag_size == 0 {
            return Err("zero fragment size");
        } else {
            rest.div_ceil(frag_size)
        };
        if n_frags > MAX_EAGER_FRAGS {
            return Err("too many fragments");
        }
        let id = MsgId { peer, index: msg };
        let wanted = sink.on_message(peer, id, header, total).min(total);
        if sink.take_held() {
            return Ok(false);
        }
        self.next_msg += 1;
        let first = first_len.min(wanted);
        if first > 0 {
            sink.on_data(id, 0, &data[..first as usize]);
        }
        let completed = first == wanted;
        if completed {
            sink.on_complete(id);
        }
        if n_frags > 0 {
            self.frag_seen.clear();
            self.frag_seen.resize(n_frags as usize, false);
            self.current = Some(Eager {
                msg,
                total,
                wanted,
                first_len,
                frag_size,
                n_frags,
                seen: 0,
                delivered: first,
                completed,
            });
        }
        Ok(true)
    }

    /// A continuation fragment of the eager message in progress.
    pub(crate) fn on_fragment(
        &mut self,
        peer: PeerId,
        msg: u64,
        offset: u64,
        data: &[u8],
        sink: &mut dyn Sink,
    ) -> Result<(), Violation> {
        let cur = match self.current.as_mut() {
            Some(c) if c.msg == msg => c,
            _ => return Err("fragment of no message in progress"),
        };
        let rel = offset
            .checked_sub(cur.first_len)
            .ok_or("fragment overlaps the first chunk")?;
        if rel % cur.frag_size != 0 {
            return Err("misaligned fragment");
        }
        let k = rel / cur.frag_size;
        if k >= cur.n_frags || data.len() as u64 != cur.frag_size.min(cur.total - offset) {
            return Err("fragment outside the message");
        }
        // k < n_frags <= MAX_EAGER_FRAGS
        let k = k as usize;
        if self.frag_seen[k] {
            return Err("fragment repeated");
        }
        self.frag_seen.set(k, true);
        cur.seen += 1;
        let id = MsgId { peer, index: msg };
        if offset < cur.wanted {
            let n = (cur.wanted - offset).min(data.len() as u64);
            sink.on_data(id, offset, &data[..n as usize]);
            cur.delivered += n;
        }
        if !cur.completed && cur.delivered == cur.wanted {
            cur.completed = true;
            sink.on_complete(id);
        }
        if cur.seen == cur.n_frags {
            self.current = None;
        }
        Ok(())
    }

    /// Start a large message (a `Rndv` frame processed in order): match it
    /// and return the wanted length; `None` if the sink held it back
    /// (nothing changed).
    pub(crate) fn start_large(
        &mut self,
        peer: PeerId,
        msg: u64,
        total: u64,
        header: &[u8; HEADER_LEN],
        sink: &mut dyn Sink,
    ) -> Result<Option<u64>, Violation> {
        if msg != self.next_msg {
            return Err("message index out of order");
        }
        let id = MsgId { peer, index: msg };
        let wanted = sink.on_message(peer, id, header, total).min(total);
        if sink.take_held() {
            return Ok(None);
        }
        self.next_msg += 1;
        Ok(Some(wanted))
    }

    /// Drop every buffered datagram (peer death); returns how many.
    pub(crate) fn clear(&mut self, pool: &mut BufPool) -> usize {
        let n = self.buffered;
        for slot in &mut self.slots {
            if let Some(v) = slot.take() {
                pool.put(v);
            }
        }
        self.buffered = 0;
        self.current = None;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Rec {
        log: Vec<String>,
        want: u64,
    }

    impl Sink for Rec {
        fn on_message(&mut self, _: PeerId, m: MsgId, _: &[u8; 88], total: u64) -> u64 {
            self.log.push(format!("start {} {total}", m.index));
            self.want
        }
        fn on_data(&mut self, m: MsgId, offset: u64, data: &[u8]) {
            self.log
                .push(format!("data {} {offset}+{}", m.index, data.len()));
        }
        fn on_complete(&mut self, m: MsgId) {
            self.log.push(format!("complete {}", m.index));
        }
        fn on_abort(&mut self, m: MsgId) {
            self.log.push(format!("abort {}", m.index));
        }
    }

    #[test]
    fn reassembles_with_truncation_and_rejects_repeats() {
        let mut r = RecvState::new(&Config::default());
        let mut sink = Rec {
            want: 25,
            ..Rec::default()
        };
        let h = [0u8; HEADER_LEN];
        // 10-byte first chunk, then fragments of 8: 10..18, 18..26, 26..30
        r.start_eager(1, 0, 30, 8, &h, &[0; 10], &mut sink).unwrap();
        assert!(r.accepts_fragment(0) && r.awaiting_data());
        r.on_fragment(1, 0, 26, &[0; 4], &mut sink).unwrap();
        assert_eq!(
            r.on_fragment(1, 0, 26, &[0; 4], &mut sink),
            Err("fragment repeated")
        );
        assert!(r.on_fragment(1, 0, 14, &[0; 8], &mut sink).is_err());
        assert!(r.on_fragment(1, 0, 18, &[0; 7], &mut sink).is_err());
        r.on_fragment(1, 0, 18, &[0; 8], &mut sink).unwrap();
        r.on_fragment(1, 0, 10, &[0; 8], &mut sink).unwrap();
        assert!(!r.accepts_fragment(0));
        assert_eq!(
            sink.log,
            vec![
                "start 0 30",
                "data 0 0+10",
                "data 0 18+7",
                "data 0 10+8",
                "complete 0"
            ]
        );
    }

    #[test]
    fn enforces_message_order_and_aborts_unfinished() {
        let mut r = RecvState::new(&Config::default());
        let mut sink = Rec {
            want: u64::MAX,
            ..Rec::default()
        };
        let h = [0u8; HEADER_LEN];
        assert!(r.start_eager(1, 1, 5, 0, &h, &[0; 5], &mut sink).is_err());
        r.start_eager(1, 0, 0, 0, &h, &[], &mut sink).unwrap();
        r.start_eager(1, 1, 20, 10, &h, &[0; 10], &mut sink)
            .unwrap();
        assert!(r.close_current(1, &mut sink));
        assert_eq!(
            sink.log,
            vec![
                "start 0 0",
                "complete 0",
                "start 1 20",
                "data 1 0+10",
                "abort 1"
            ]
        );
        assert!(r
            .start_eager(1, 2, 1 << 40, 1, &h, &[0; 1], &mut sink)
            .is_err());
    }

    #[test]
    fn ack_timer_coalesces_and_escalates() {
        let cfg = Config::default();
        let t = Instant::now();
        let mut a = AckTimer::default();
        a.on_sequenced(t, false, &cfg);
        assert!(!a.due());
        assert_eq!(a.deadline(), Some(t + cfg.ack_delay));
        for _ in 1..cfg.ack_every {
            a.on_sequenced(t, false, &cfg);
        }
        assert!(a.due());
        a.on_sent();
        a.on_sequenced(t, false, &cfg);
        a.on_timer(t + cfg.ack_delay);
        assert!(a.due());
        a.on_sent();
        a.on_sequenced(t, true, &cfg);
        assert!(a.due());
    }

    #[test]
    fn a_released_ack_is_due_at_once_and_nothing_held_releases_nothing() {
        let cfg = Config::default();
        let t = Instant::now();
        let mut a = AckTimer::default();
        assert!(!a.release());
        assert!(!a.due());
        a.on_sequenced(t, false, &cfg);
        assert!(!a.due());
        assert!(a.release());
        assert!(a.due());
        assert_eq!(a.deadline(), None);
        a.on_sent();
        assert!(!a.release());
        assert!(!a.due());
    }
}
