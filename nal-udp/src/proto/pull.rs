//! Receiver-driven pull of large messages (Open-MX's large-message model).
//!
//! After the rendezvous has been matched (`Sink::on_message`), the receiver
//! asks for the wanted prefix of the payload in *blocks* of up to 64
//! fragments, keeping a few blocks per peer requested at once. When it has
//! every wanted byte it sends a completion notice (`Done`), repeated until
//! the sender acknowledges it (`DoneAck`); only then does the sender report
//! the send complete and stop reading the payload.
//!
//! None of this is sequenced: the receiver owns recovery. It re-requests the
//! missing fragments of a block as soon as the last fragment of a request
//! round arrives with holes before it, and otherwise, like unacknowledged
//! notices, when that peer's pull traffic has been silent for a backed-off
//! RTO. Keeping notices out of the sequence space matters: a receiver that
//! holds back in-order processing for lack of pull capacity must be able to
//! finish a pull without window space towards the sender, or two such
//! receivers could wait on each other forever.
//!
//! Pull state is O(blocks in flight) per message, however large the message,
//! and an unwanted large message costs nothing but its rendezvous and notice.
//! The sending side ([`PullServer`]) answers requests from a bounded job
//! queue, reading the payload straight into the outgoing datagram.

use std::collections::VecDeque;
use std::time::Instant;

use super::config::Config;
use super::rtt::RttEstimator;
use super::types::{MsgId, PeerId, Sink, Stats};

/// Most pull requests a sender keeps queued per peer; requests beyond it are
/// dropped (the receiver's timer asks again), so a peer cannot grow it.
pub(crate) const MAX_PULL_JOBS: usize = 256;
/// Most notice acknowledgments a sender keeps queued per peer (same reason).
pub(crate) const MAX_DONE_ACKS: usize = 64;

fn mask_of(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[derive(Debug)]
struct Block {
    /// Fragment index of bit 0.
    first: u64,
    /// Fragments in this block.
    n: u32,
    received: u64,
    /// Fragments asked for in the latest request.
    round: u64,
    /// A request for it is queued for transmission.
    queued: bool,
    /// When its first request went out, while no answer has come and it has
    /// not been asked for again: the pending RTT sample (Karn's rule).
    first_request: Option<Instant>,
    /// Requested more than once.
    repeated: bool,
}

impl Block {
    fn full(&self) -> u64 {
        mask_of(self.n)
    }
    fn missing(&self) -> u64 {
        self.full() & !self.received
    }
}

#[derive(Debug)]
struct ActivePull {
    msg: u64,
    wanted: u64,
    frag_size: u64,
    n_frags: u64,
    /// Next block index to request for the first time.
    next_block: u64,
    blocks: Vec<Block>,
    delivered: u64,
    /// Every wanted byte is here; the notice awaits its acknowledgment.
    finished: bool,
    /// A notice is queued for transmission.
    done_queued: bool,
}

/// A pull request ready to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PullRequest {
    pub(crate) msg: u64,
    pub(crate) limit: u64,
    pub(crate) first_frag: u64,
    pub(crate) frag_size: u32,
    pub(crate) mask: u64,
}

/// What an arriving pull-data fragment did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataOutcome {
    /// New bytes delivered.
    Progress,
    /// Already had it.
    Duplicate,
    /// No pull in progress for that message.
    Stale,
    /// Not a fragment the receiver could have asked for.
    Violation,
}

/// Pulls in progress from one peer, including finished ones whose notice is
/// not yet acknowledged.
#[derive(Debug, Default)]
pub(crate) struct PullReceiver {
    pulls: Vec<ActivePull>,
    blocks_in_flight: u32,
    /// (message, first fragment of block) whose request awaits transmission.
    requests: VecDeque<(u64, u64)>,
    /// Messages whose notice awaits transmission.
    dones: VecDeque<u64>,
    timer: Option<Instant>,
    timeouts: u32,
}

impl PullReceiver {
    /// Pulls in progress or awaiting a notice acknowledgment.
    pub(crate) fn active(&self) -> usize {
        self.pulls.len()
    }

    /// The silence timer.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.timer
    }

    fn outstanding(&self) -> bool {
        self.blocks_in_flight > 0 || self.pulls.iter().any(|p| p.finished)
    }

    /// Start pulling `wanted` bytes of message `msg` in fragments of
    /// `frag_size > 0` bytes. With nothing wanted, go straight to the notice.
    pub(crate) fn start(&mut self, msg: u64, wanted: u64, frag_size: u64, cfg: &Config) {
        let frag_size = frag_size.max(1);
        self.pulls.push(ActivePull {
            msg,
            wanted,
            frag_size,
            n_frags: wanted.div_ceil(frag_size),
            next_block: 0,
            blocks: Vec::new(),
            delivered: 0,
            finished: wanted == 0,
            done_queued: wanted == 0,
        });
        if wanted == 0 {
            self.dones.push_back(msg);
        }
        self.fill(cfg);
    }

    /// Open new blocks, oldest message first, up to the per-peer budget.
    fn fill(&mut self, cfg: &Config) {
        let per_block = u64::from(cfg.pull_block_frags);
        'budget: while self.blocks_in_flight < cfg.pull_blocks_in_flight {
            for p in &mut self.pulls {
                let first = p.next_block * per_block;
                if first < p.n_frags {
                    p.next_block += 1;
                    // at most 64, from the config
                    let n = (p.n_frags - first).min(per_block) as u32;
                    p.blocks.push(Block {
                        first,
                        n,
                        received: 0,
                        round: 0,
                        queued: true,
                        first_request: None,
                        repeated: false,
                    });
                    self.requests.push_back((p.msg, first));
                    self.blocks_in_flight += 1;
                    continue 'budget;
                }
            }
            break;
        }
    }

    fn arm(&mut self, now: Instant, rtt: &RttEstimator) {
        if self.timer.is_none() {
            self.timer = Some(now + rtt.backed_off(self.timeouts));
        }
    }

    /// Next request to transmit.
    pub(crate) fn next_request(&mut self, now: Instant, rtt: &RttEstimator) -> Option<PullRequest> {
        while let Some((msg, first)) = self.requests.pop_front() {
            let Some(p) = self.pulls.iter_mut().find(|p| p.msg == msg) else {
                continue;
            };
            let Some(b) = p.blocks.iter_mut().find(|b| b.first == first) else {
                continue;
            };
            b.queued = false;
            let mask = b.missing();
            if mask == 0 {
                continue;
            }
            if b.round == 0 {
                b.first_request = Some(now);
            } else {
                b.repeated = true;
                b.first_request = None;
            }
            b.round = mask;
            let req = PullRequest {
                msg,
                limit: p.wanted,
                first_frag: first,
                // `frag_size` came from a u32 on the wire
                frag_size: p.frag_size as u32,
                mask,
            };
            self.arm(now, rtt);
            return Some(req);
        }
        None
    }

    /// Next completion notice to transmit.
    pub(crate) fn next_done(&mut self, now: Instant, rtt: &RttEstimator) -> Option<u64> {
        while let Some(msg) = self.dones.pop_front() {
            let Some(p) = self.pulls.iter_mut().find(|p| p.msg == msg) else {
                continue;
            };
            p.done_queued = false;
            if p.finished {
                self.arm(now, rtt);
                return Some(msg);
            }
        }
        None
    }

    /// The sender acknowledged the notice for `msg`: the pull is over.
    /// Returns false if no notice for it was outstanding.
    pub(crate) fn on_done_ack(&mut self, msg: u64) -> bool {
        let Some(i) = self.pulls.iter().position(|p| p.msg == msg && p.finished) else {
            return false;
        };
        self.pulls.remove(i);
        self.timeouts = 0;
        if !self.outstanding() {
            self.timer = None;
        }
        true
    }

    /// A pull-data fragment arrived.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_data(
        &mut self,
        now: Instant,
        peer: PeerId,
        msg: u64,
        offset: u64,
        data: &[u8],
        sink: &mut dyn Sink,
        rtt: &mut RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
    ) -> DataOutcome {
        let Some(pi) = self.pulls.iter().position(|p| p.msg == msg) else {
            return DataOutcome::Stale;
        };
        let p = &mut self.pulls[pi];
        if p.finished {
            return DataOutcome::Duplicate;
        }
        if offset % p.frag_size != 0 {
            return DataOutcome::Violation;
        }
        let idx = offset / p.frag_size;
        if idx >= p.n_frags || data.len() as u64 != p.frag_size.min(p.wanted - offset) {
            return DataOutcome::Violation;
        }
        let per_block = u64::from(cfg.pull_block_frags);
        let first = idx - idx % per_block;
        let Some(bi) = p.blocks.iter().position(|b| b.first == first) else {
            return if first < p.next_block * per_block {
                DataOutcome::Duplicate
            } else {
                DataOutcome::Violation
            };
        };
        let b = &mut p.blocks[bi];
        let bit = 1u64 << (idx - first);
        if b.received & bit != 0 {
            return DataOutcome::Duplicate;
        }
        b.received |= bit;
        // A receiver that only pulls sends nothing sequenced, so request to
        // first answer is its only RTT measurement.
        if let Some(at) = b.first_request.take() {
            if !b.repeated {
                rtt.on_sample(now.saturating_duration_since(at));
            }
        }
        let id = MsgId { peer, index: msg };
        sink.on_data(id, offset, data);
        p.delivered += data.len() as u64;
        self.timeouts = 0;
        self.timer = Some(now + rtt.rto());
        if b.missing() == 0 {
            p.blocks.swap_remove(bi);
            self.blocks_in_flight -= 1;
        } else if b.round != 0 && bit == 1u64 << (63 - b.round.leading_zeros()) {
            // The last fragment of the round is here; what is still missing
            // from the round was most likely lost.
            if b.round & !b.received != 0 && !b.queued {
                b.queued = true;
                self.requests.push_back((msg, b.first));
                stats.pull_rerequests += 1;
            }
        }
        if p.delivered == p.wanted {
            sink.on_complete(id);
            p.finished = true;
            p.done_queued = true;
            self.dones.push_back(msg);
        }
        self.fill(cfg);
        DataOutcome::Progress
    }

    /// Check the silence timer. Returns true when the peer must be declared
    /// dead (only if `may_die`: it has been silent long enough).
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
        may_die: bool,
    ) -> bool {
        match self.timer {
            Some(at) if at <= now => {}
            _ => return false,
        }
        self.timer = None;
        if !self.outstanding() {
            return false;
        }
        stats.pull_timeouts += 1;
        self.timeouts += 1;
        if self.timeouts > cfg.max_retransmits && may_die {
            return true;
        }
        for p in &mut self.pulls {
            if p.finished && !p.done_queued {
                p.done_queued = true;
                self.dones.push_back(p.msg);
            }
            for b in &mut p.blocks {
                if !b.queued && b.missing() != 0 {
                    b.queued = true;
                    self.requests.push_back((p.msg, b.first));
                    stats.pull_rerequests += 1;
                }
            }
        }
        self.timer = Some(now + rtt.backed_off(self.timeouts));
        false
    }

    /// The peer is dead: abort every pull not yet complete.
    pub(crate) fn abort_all(&mut self, peer: PeerId, sink: &mut dyn Sink) {
        for p in self.pulls.drain(..) {
            if !p.finished {
                sink.on_abort(MsgId { peer, index: p.msg });
            }
        }
        self.requests.clear();
        self.dones.clear();
        self.blocks_in_flight = 0;
        self.timer = None;
    }
}

/// A queued answer to a pull request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PullJob {
    msg: u64,
    limit: u64,
    first_frag: u64,
    frag_size: u64,
    mask: u64,
}

/// Why a pull request was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PullReject {
    /// It asks for bytes outside the message or fragments we cannot send.
    Violation,
    /// Too many requests queued.
    Full,
}

/// Pull requests from one peer waiting to be answered.
#[derive(Debug, Default)]
pub(crate) struct PullServer {
    jobs: VecDeque<PullJob>,
    /// Completion notices to acknowledge.
    done_acks: VecDeque<u64>,
}

impl PullServer {
    /// Queue a request for a message of `total` bytes; `max_frag` is the
    /// largest fragment that fits our datagrams.
    pub(crate) fn on_pull(
        &mut self,
        total: u64,
        max_frag: usize,
        req: PullRequest,
    ) -> Result<(), PullReject> {
        let PullRequest {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        } = req;
        let frag_size = u64::from(frag_size);
        if limit > total || frag_size == 0 || frag_size > max_frag as u64 {
            return Err(PullReject::Violation);
        }
        let n_frags = limit.div_ceil(frag_size);
        if first_frag >= n_frags {
            return Err(PullReject::Violation);
        }
        let avail = n_frags - first_frag;
        let mask = if avail >= 64 {
            mask
        } else {
            mask & mask_of(avail as u32)
        };
        if mask == 0 {
            return Err(PullReject::Violation);
        }
        if let Some(job) = self.jobs.iter_mut().find(|j| {
            j.msg == msg
                && j.first_frag == first_frag
                && j.frag_size == frag_size
                && j.limit == limit
        }) {
            job.mask |= mask;
            return Ok(());
        }
        if self.jobs.len() >= MAX_PULL_JOBS {
            return Err(PullReject::Full);
        }
        self.jobs.push_back(PullJob {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        });
        Ok(())
    }

    /// Next fragment to send: (message, offset, length).
    pub(crate) fn next(&mut self) -> Option<(u64, u64, usize)> {
        let job = self.jobs.front_mut()?;
        let bit = job.mask.trailing_zeros();
        job.mask &= !(1u64 << bit);
        // first_frag + bit < n_frags, so offset < limit <= MAX_MESSAGE_LEN
        let offset = (job.first_frag + u64::from(bit)) * job.frag_size;
        let len = job.frag_size.min(job.limit - offset) as usize;
        let msg = job.msg;
        if job.mask == 0 {
            self.jobs.pop_front();
        }
        Some((msg, offset, len))
    }

    /// Acknowledge a completion notice (every notice, even a repeated one:
    /// the first acknowledgment may have been lost).
    pub(crate) fn queue_done_ack(&mut self, msg: u64) {
        if !self.done_acks.contains(&msg) && self.done_acks.len() < MAX_DONE_ACKS {
            self.done_acks.push_back(msg);
        }
    }

    /// Next notice acknowledgment to send.
    pub(crate) fn next_done_ack(&mut self) -> Option<u64> {
        self.done_acks.pop_front()
    }

    /// Forget everything (peer death).
    pub(crate) fn clear(&mut self) {
        self.jobs.clear();
        self.done_acks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Default)]
    struct Rec {
        data: Vec<(u64, u64, usize)>,
        complete: Vec<u64>,
        abort: Vec<u64>,
    }

    impl Sink for Rec {
        fn on_message(&mut self, _: PeerId, _: MsgId, _: &[u8; 88], _: u64) -> u64 {
            unreachable!()
        }
        fn on_data(&mut self, msg: MsgId, offset: u64, data: &[u8]) {
            self.data.push((msg.index, offset, data.len()));
        }
        fn on_complete(&mut self, msg: MsgId) {
            self.complete.push(msg.index);
        }
        fn on_abort(&mut self, msg: MsgId) {
            self.abort.push(msg.index);
        }
    }

    fn cfg() -> Config {
        Config {
            pull_block_frags: 4,
            pull_blocks_in_flight: 2,
            ..Config::default()
        }
    }

    fn req(msg: u64, limit: u64, first_frag: u64, frag_size: u32, mask: u64) -> PullRequest {
        PullRequest {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        }
    }

    fn rtt() -> RttEstimator {
        RttEstimator::new(
            Duration::from_millis(50),
            Duration::from_millis(5),
            Duration::from_secs(2),
        )
    }

    #[test]
    fn pulls_in_blocks_with_bounded_blocks_in_flight() {
        let cfg = cfg();
        let mut rtt = rtt();
        let now = Instant::now();
        let mut rx = PullReceiver::default();
        let mut sink = Rec::default();
        let mut stats = Stats::default();
        // 10 fragments of 100 bytes, the last one 50
        rx.start(7, 950, 100, &cfg);
        let r1 = rx.next_request(now, &rtt).unwrap();
        let r2 = rx.next_request(now, &rtt).unwrap();
        assert_eq!(rx.next_request(now, &rtt), None, "two blocks in flight");
        assert_eq!((r1.first_frag, r1.mask, r1.limit), (0, 0b1111, 950));
        assert_eq!((r2.first_frag, r2.mask), (4, 0b1111));
        // serve them through a pull server
        let mut tx = PullServer::default();
        for r in [r1, r2] {
            tx.on_pull(950, 1000, r).unwrap();
        }
        let mut served = Vec::new();
        while let Some(j) = tx.next() {
            served.push(j);
        }
        assert_eq!(served.len(), 8);
        // deliver all but fragment 2
        for &(msg, off, len) in &served {
            if off == 200 {
                continue;
            }
            let out = rx.on_data(
                now,
                1,
                msg,
                off,
                &vec![0; len],
                &mut sink,
                &mut rtt,
                &cfg,
                &mut stats,
            );
            assert_eq!(out, DataOutcome::Progress);
        }
        // fragment 3 (the round's last) arrived with fragment 2 missing
        let again = rx.next_request(now, &rtt).unwrap();
        assert_eq!((again.first_frag, again.mask), (0, 0b0100));
        assert_eq!(stats.pull_rerequests, 1);
        // block 1 complete -> the third block (2 fragments) was opened
        let r3 = rx.next_request(now, &rtt).unwrap();
        assert_eq!((r3.first_frag, r3.mask), (8, 0b11));
        assert_eq!(rx.next_request(now, &rtt), None);
        let dup = rx.on_data(
            now, 1, 7, 0, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        assert_eq!(dup, DataOutcome::Duplicate);
        let bad = rx.on_data(
            now, 1, 7, 150, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        assert_eq!(bad, DataOutcome::Violation);
        let bad_len = rx.on_data(
            now, 1, 7, 900, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        assert_eq!(bad_len, DataOutcome::Violation);
        assert_eq!(
            rx.on_data(now, 1, 9, 0, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats),
            DataOutcome::Stale
        );
        rx.on_data(
            now, 1, 7, 200, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        rx.on_data(
            now, 1, 7, 800, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        let last = rx.on_data(
            now, 1, 7, 900, &[0; 50], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        assert_eq!(last, DataOutcome::Progress);
        assert_eq!(sink.complete, vec![7]);
        let bytes: usize = sink.data.iter().map(|d| d.2).sum();
        assert_eq!(bytes, 950);
        // the notice goes out and is repeated until acknowledged
        assert_eq!(rx.next_request(now, &rtt), None);
        assert_eq!(rx.next_done(now, &rtt), Some(7));
        assert_eq!(rx.next_done(now, &rtt), None);
        assert_eq!(rx.active(), 1, "still counts against capacity");
        let late = now + Duration::from_secs(1);
        assert!(!rx.on_timeout(late, &rtt, &cfg, &mut stats, true));
        assert_eq!(rx.next_done(late, &rtt), Some(7));
        let again = rx.on_data(
            late, 1, 7, 0, &[0; 100], &mut sink, &mut rtt, &cfg, &mut stats,
        );
        assert_eq!(again, DataOutcome::Duplicate);
        assert!(rx.on_done_ack(7));
        assert!(!rx.on_done_ack(7));
        assert_eq!(rx.active(), 0);
        assert_eq!(rx.deadline(), None);
        assert!(sink.abort.is_empty());
    }

    #[test]
    fn nothing_wanted_goes_straight_to_the_notice() {
        let cfg = cfg();
        let rtt = rtt();
        let now = Instant::now();
        let mut rx = PullReceiver::default();
        let mut sink = Rec::default();
        rx.start(3, 0, 100, &cfg);
        assert_eq!(rx.next_request(now, &rtt), None);
        assert_eq!(rx.next_done(now, &rtt), Some(3));
        // a finished pull is not aborted when the peer dies
        rx.abort_all(1, &mut sink);
        assert!(sink.abort.is_empty());
    }

    #[test]
    fn silence_re_requests_with_back_off_then_gives_up() {
        let cfg = Config {
            max_retransmits: 3,
            ..cfg()
        };
        let rtt = rtt();
        let t0 = Instant::now();
        let mut rx = PullReceiver::default();
        let mut sink = Rec::default();
        let mut stats = Stats::default();
        rx.start(1, 1000, 100, &cfg);
        while rx.next_request(t0, &rtt).is_some() {}
        let mut at = t0;
        let mut gaps = Vec::new();
        loop {
            let d = rx.deadline().unwrap();
            gaps.push((d - at).as_millis());
            at = d;
            if rx.on_timeout(at, &rtt, &cfg, &mut stats, true) {
                break;
            }
            let mut n = 0;
            while rx.next_request(at, &rtt).is_some() {
                n += 1;
            }
            assert_eq!(n, 2, "both blocks asked for again");
        }
        assert_eq!(gaps, vec![50, 100, 200, 400]);
        rx.abort_all(1, &mut sink);
        assert_eq!(sink.abort, vec![1]);
    }

    #[test]
    fn server_validates_and_bounds_requests() {
        let mut tx = PullServer::default();
        assert_eq!(
            tx.on_pull(100, 50, req(0, 101, 0, 10, 1)),
            Err(PullReject::Violation)
        );
        assert_eq!(
            tx.on_pull(100, 50, req(0, 100, 0, 60, 1)),
            Err(PullReject::Violation)
        );
        assert_eq!(
            tx.on_pull(100, 50, req(0, 100, 10, 10, 1)),
            Err(PullReject::Violation)
        );
        // mask bits beyond the end are ignored; none left is a violation
        assert_eq!(
            tx.on_pull(100, 50, req(0, 100, 8, 10, 0b100)),
            Err(PullReject::Violation)
        );
        tx.on_pull(100, 50, req(0, 100, 8, 10, 0b111)).unwrap();
        tx.on_pull(100, 50, req(0, 100, 8, 10, 0b1)).unwrap();
        assert_eq!(tx.next(), Some((0, 80, 10)));
        assert_eq!(tx.next(), Some((0, 90, 10)));
        assert_eq!(tx.next(), None);
        for i in 0..MAX_PULL_JOBS as u64 {
            tx.on_pull(1 << 30, 50, req(i, 1 << 30, 0, 10, 1)).unwrap();
        }
        assert_eq!(
            tx.on_pull(1 << 30, 50, req(9999, 1 << 30, 0, 10, 1)),
            Err(PullReject::Full)
        );
    }
}
