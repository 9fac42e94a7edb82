//! The pull receiver and server in isolation.

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
    let r1 = rx.next_request(now, &rtt, &cfg).unwrap();
    let r2 = rx.next_request(now, &rtt, &cfg).unwrap();
    assert_eq!(
        rx.next_request(now, &rtt, &cfg),
        None,
        "two blocks in flight"
    );
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
    let again = rx.next_request(now, &rtt, &cfg).unwrap();
    assert_eq!((again.first_frag, again.mask), (0, 0b0100));
    assert_eq!(stats.pull_rerequests, 1);
    // block 1 complete -> the third block (2 fragments) was opened
    let r3 = rx.next_request(now, &rtt, &cfg).unwrap();
    assert_eq!((r3.first_frag, r3.mask), (8, 0b11));
    assert_eq!(rx.next_request(now, &rtt, &cfg), None);
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
    assert_eq!(rx.next_request(now, &rtt, &cfg), None);
    assert_eq!(rx.next_done(now, &rtt, &cfg), Some(7));
    assert_eq!(rx.next_done(now, &rtt, &cfg), None);
    assert_eq!(rx.active(), 1, "still counts against capacity");
    let late = now + Duration::from_secs(1);
    assert!(!rx.on_timeout(late, &rtt, &cfg, &mut stats, true));
    assert_eq!(rx.next_done(late, &rtt, &cfg), Some(7));
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
    assert_eq!(rx.next_request(now, &rtt, &cfg), None);
    assert_eq!(rx.next_done(now, &rtt, &cfg), Some(3));
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
    while rx.next_request(t0, &rtt, &cfg).is_some() {}
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
        while rx.next_request(at, &rtt, &cfg).is_some() {
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

/// One peer's pull of message 7, eight fragments of 100 bytes in one
/// block, on a path with a 20 µs RTT sample: the fixture of the probe tests.
struct OneBlock {
    cfg: Config,
    rtt: RttEstimator,
    rx: PullReceiver,
    sink: Rec,
    stats: Stats,
}

impl OneBlock {
    /// The pull started and its first request (every fragment) sent at `t0`.
    fn requested(t0: Instant) -> OneBlock {
        let cfg = Config {
            pull_block_frags: 8,
            pull_blocks_in_flight: 1,
            ..Config::default()
        };
        let mut rtt = rtt();
        rtt.on_sample(Duration::from_micros(20));
        let mut rx = PullReceiver::default();
        rx.start(7, 800, 100, &cfg);
        assert_eq!(rx.next_request(t0, &rtt, &cfg).unwrap().mask, 0xff);
        OneBlock {
            cfg,
            rtt,
            rx,
            sink: Rec::default(),
            stats: Stats::default(),
        }
    }

    /// Fragment `k` arrives at `now`.
    fn arrives(&mut self, now: Instant, k: u64) -> DataOutcome {
        let f = self;
        f.rx.on_data(
            now,
            1,
            7,
            k * 100,
            &[0; 100],
            &mut f.sink,
            &mut f.rtt,
            &f.cfg,
            &mut f.stats,
        )
    }

    /// Run the timers at `now`; the peer may not be declared dead.
    fn timers(&mut self, now: Instant) {
        let f = self;
        assert!(!f.rx.on_timeout(now, &f.rtt, &f.cfg, &mut f.stats, true));
    }

    fn next_request(&mut self, now: Instant) -> Option<PullRequest> {
        self.rx.next_request(now, &self.rtt, &self.cfg)
    }

    fn next_done(&mut self, now: Instant) -> Option<u64> {
        self.rx.next_done(now, &self.rtt, &self.cfg)
    }
}

/// The tail of a round is lost: the answers stop with fragments missing.
/// A probe timeout later (not the RTO), the probe asks for the highest
/// missing fragment alone; when it arrives, the holes before it are asked
/// for at once. A lost notice is probed the same way. The probes stop
/// after [`MAX_PULL_PROBES`] without new data.
#[test]
fn a_lost_tail_is_probed_for_its_highest_fragment_long_before_the_rto() {
    let t0 = Instant::now();
    let mut f = OneBlock::requested(t0);
    let rto = f.rtt.rto();
    let pto = tlp::probe_wait(&f.rtt, &f.cfg, Duration::ZERO).unwrap();
    assert!(pto * 4 < rto, "{pto:?} against {rto:?}");
    // Fragments 0-4 arrive 10 µs apart; 5-7 are lost.
    let mut now = t0;
    for k in 0..5u64 {
        now += Duration::from_micros(10);
        assert_eq!(f.arrives(now, k), DataOutcome::Progress);
    }
    assert_eq!(f.next_request(now), None, "no holes yet");
    let due = f.rx.deadline().unwrap();
    assert!(
        due - now < pto + Duration::from_micros(30),
        "{:?}",
        due - now
    );
    f.timers(due);
    assert_eq!((f.stats.pull_probes, f.stats.pull_timeouts), (1, 0));
    let probe = f.next_request(due).unwrap();
    assert_eq!(probe.mask, 1 << 7, "only the highest missing fragment");
    // It arrives: fragments 5 and 6 were asked for before it, so they are
    // asked for again at once.
    now = due + Duration::from_micros(20);
    f.arrives(now, 7);
    let holes = f.next_request(now).unwrap();
    assert_eq!(holes.mask, 0b0110_0000);
    for k in [5u64, 6] {
        f.arrives(now, k);
    }
    assert_eq!(f.sink.complete, vec![7]);
    // The notice goes out and its acknowledgment is lost: probed too.
    assert_eq!(f.next_done(now), Some(7));
    // Probed until the budget is spent; then the RTO takes over.
    let done_at = now;
    while f.stats.pull_timeouts == 0 {
        let due = f.rx.deadline().unwrap();
        f.timers(due);
        assert_eq!(f.next_done(due), Some(7));
        now = due;
    }
    assert_eq!(f.stats.pull_probes, 1 + u64::from(MAX_PULL_PROBES));
    assert!(now - done_at >= rto, "the RTO came after the probes");
    assert!(f.rx.on_done_ack(7));
    assert_eq!(f.rx.deadline(), None);
}

/// A probe is queued, and before it goes out the round's last fragment
/// arrives after all (it was only late): the holes before it are known
/// lost now, so the queued request asks for all of them, not for one.
#[test]
fn a_queued_probe_becomes_a_full_request_when_the_rounds_last_fragment_arrives() {
    let t0 = Instant::now();
    let mut f = OneBlock::requested(t0);
    for k in 0..5u64 {
        f.arrives(t0, k);
    }
    let due = f.rx.deadline().unwrap();
    f.timers(due);
    assert_eq!(f.stats.pull_probes, 1);
    f.arrives(due, 7);
    let req = f.next_request(due).unwrap();
    assert_eq!(req.mask, 0b0110_0000, "fragments 5 and 6, not only 6");
    assert_eq!(f.next_request(due), None);
}
