//! The send side's unit tests: sequencing, windows, loss detection, tail
//! probes and the retransmission timer, driven by hand-made acks.

use super::*;
use crate::proto::wire::Sack;
use std::time::Duration;

fn cfg() -> Config {
    Config {
        max_datagram: 1472,
        eager_completion: EagerCompletion::OnAck,
        send_window: 8,
        recv_window: 8,
        ..Config::default()
    }
}

fn ack(cum: u64, window: u32, sacked: &[u64]) -> AckInfo {
    let mut sack = Sack::ZERO;
    for &s in sacked {
        sack.set((s - cum - 1) as usize, true);
    }
    AckInfo {
        cum_ack: cum,
        window,
        sack,
        ack_requested: false,
    }
}

struct Fixture {
    s: SendState,
    cfg: Config,
    layout: Layout,
    rtt: RttEstimator,
    events: VecDeque<Event>,
    stats: Stats,
    copies: BufPool,
    t0: Instant,
}

fn fixture() -> Fixture {
    let cfg = cfg();
    Fixture {
        s: SendState::new(9, &cfg),
        layout: Layout::new(&cfg),
        rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
        cfg,
        events: VecDeque::new(),
        stats: Stats::default(),
        copies: BufPool::new(4),
        t0: Instant::now(),
    }
}

impl Fixture {
    fn send(&mut self, len: usize, token: u64) {
        let m = OutMsg::new(
            token,
            [0; HEADER_LEN],
            len as u64,
            Body::Owned(vec![7; len]),
            false,
        );
        self.s.enqueue(m, &self.cfg, &mut self.events);
    }
    fn pump(&mut self, at: Instant) -> Vec<(u64, SegFrame)> {
        let mut out = Vec::new();
        while let Some(x) = self.s.next_new(at, &self.rtt, &self.cfg, &self.layout) {
            out.push(x);
        }
        out
    }
    fn ack(&mut self, at: Instant, a: AckInfo) -> bool {
        self.s.on_ack(
            at,
            &a,
            &mut self.rtt,
            &self.cfg,
            AckEffects {
                events: &mut self.events,
                stats: &mut self.stats,
                copies: &mut self.copies,
            },
        )
    }
}

#[test]
fn fragments_medium_messages_and_completes_on_ack() {
    let mut f = fixture();
    let total = f.layout.msg_cap + 2 * f.layout.frag_cap + 10;
    f.send(total, 42);
    let segs = f.pump(f.t0);
    assert_eq!(segs.len(), 4);
    assert_eq!(
        segs[0],
        (
            0,
            SegFrame::Msg {
                msg: 0,
                len: f.layout.msg_cap as u32
            }
        )
    );
    assert_eq!(
        segs[3],
        (
            3,
            SegFrame::Frag {
                msg: 0,
                offset: (f.layout.msg_cap + 2 * f.layout.frag_cap) as u64,
                len: 10
            }
        )
    );
    assert!(f.events.is_empty());
    let t1 = f.t0 + Duration::from_millis(1);
    assert!(f.ack(t1, ack(3, 8, &[])));
    assert!(f.events.is_empty(), "one fragment still unacknowledged");
    assert!(f.ack(t1, ack(4, 8, &[])));
    assert_eq!(
        f.events.pop_front(),
        Some(Event::SendComplete {
            peer: 9,
            token: 42,
            ok: true
        })
    );
    assert!(!f.s.has_unacked());
    assert_eq!(f.s.deadline(), None);
    assert_eq!(f.rtt.srtt(), Some(Duration::from_millis(1)));
}

#[test]
fn respects_own_and_peer_windows() {
    let mut f = fixture();
    for t in 0..20 {
        f.send(10, t);
    }
    assert_eq!(f.pump(f.t0).len(), 8);
    // the peer shrinks its window to 2 above its cumulative ack
    assert!(f.ack(f.t0, ack(1, 2, &[])));
    assert!(f.pump(f.t0).is_empty());
    assert!(f.ack(f.t0, ack(8, 3, &[])));
    assert_eq!(f.pump(f.t0).len(), 3);
    assert_eq!(f.s.in_flight(), 3);
}

#[test]
fn sack_gap_triggers_fast_retransmit_of_the_hole_only() {
    let mut f = fixture();
    for t in 0..6 {
        f.send(10, t);
    }
    assert_eq!(f.pump(f.t0).len(), 6);
    // seq 1 lost; 2 and 3 arrived: not enough evidence yet
    f.ack(f.t0, ack(1, 8, &[2, 3]));
    assert_eq!(f.s.next_retransmit(f.t0, &f.rtt, &mut f.stats), None);
    f.ack(f.t0, ack(1, 8, &[2, 3, 4]));
    assert_eq!(
        f.s.next_retransmit(f.t0, &f.rtt, &mut f.stats),
        Some((1, SegFrame::Msg { msg: 1, len: 10 }))
    );
    assert_eq!(f.s.next_retransmit(f.t0, &f.rtt, &mut f.stats), None);
    assert_eq!(f.stats.retransmits, 1);
    // the retransmission is lost too; later transmissions reveal it
    for t in 6..10 {
        f.send(10, t);
    }
    let later = f.pump(f.t0);
    assert_eq!(later.len(), 3);
    f.ack(f.t0, ack(1, 8, &[2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(
        f.s.next_retransmit(f.t0, &f.rtt, &mut f.stats).map(|x| x.0),
        Some(1)
    );
}

#[test]
fn early_retransmit_repairs_the_first_of_two_when_the_second_is_acked() {
    let mut f = fixture();
    for t in 0..2 {
        f.send(10, t);
    }
    assert_eq!(f.pump(f.t0).len(), 2);
    // seq 0 lost, 1 arrived; nothing else to send: one later ack is
    // all the evidence this flight can give
    f.ack(f.t0, ack(0, 8, &[1]));
    assert_eq!(
        f.s.next_retransmit(f.t0, &f.rtt, &mut f.stats),
        Some((0, SegFrame::Msg { msg: 0, len: 10 }))
    );
    assert_eq!(f.stats.fast_retransmits, 1);
    // with more data queued behind the flight, the usual threshold holds
    let mut f = fixture();
    for t in 0..12 {
        f.send(10, t);
    }
    assert_eq!(f.pump(f.t0).len(), 8);
    f.ack(f.t0, ack(0, 8, &[1]));
    assert_eq!(f.s.next_retransmit(f.t0, &f.rtt, &mut f.stats), None);
}

/// Give the fixture's estimator a round trip, so that probes can run.
fn with_rtt(f: &mut Fixture, sample: Duration) {
    for _ in 0..4 {
        f.rtt.on_sample(sample);
    }
}

/// Advance to the probe timer and fire it.
fn fire_probe(f: &mut Fixture) -> Instant {
    let at = f.s.tlp.deadline().expect("a probe is armed");
    assert!(f.s.on_tail_probe(at, &f.rtt, &f.cfg, &mut f.stats, None));
    at
}

#[test]
fn a_tail_probe_resends_the_newest_and_its_answer_repairs_every_hole_before_it() {
    let mut f = fixture();
    with_rtt(&mut f, Duration::from_micros(40));
    for t in 0..3 {
        f.send(10, t);
    }
    assert_eq!(f.pump(f.t0).len(), 3);
    // all three lost: the probe repeats the newest
    let at = fire_probe(&mut f);
    assert_eq!(
        f.s.next_retransmit(at, &f.rtt, &mut f.stats).map(|x| x.0),
        Some(2)
    );
    assert_eq!(f.s.next_retransmit(at, &f.rtt, &mut f.stats), None);
    // its immediate answer names both holes; both go again at once
    let back = at + Duration::from_micros(40);
    assert!(f.ack(back, ack(0, 8, &[2])));
    let mut again = Vec::new();
    while let Some((seq, _)) = f.s.next_retransmit(back, &f.rtt, &mut f.stats) {
        again.push(seq);
    }
    assert_eq!(again, [0, 1]);
}

#[test]
fn every_flight_gets_a_fresh_probe_budget() {
    let mut f = fixture();
    with_rtt(&mut f, Duration::from_micros(40));
    // Flights that each need three probes before their ack comes: more
    // probes in all than one budget, but each flight has its own.
    let mut now = f.t0;
    for flight in 0..4 {
        f.send(10, flight);
        assert_eq!(f.pump(now).len(), 1);
        for _ in 0..3 {
            now = fire_probe(&mut f);
            assert!(f.s.next_retransmit(now, &f.rtt, &mut f.stats).is_some());
        }
        now += Duration::from_micros(40);
        assert!(f.ack(now, ack(flight + 1, 8, &[])));
        assert!(!f.s.has_unacked());
    }
    assert_eq!(f.stats.tail_probes, 12);
}

#[test]
fn rto_resends_only_the_oldest_and_backs_off_until_dead() {
    let mut f = fixture();
    for t in 0..4 {
        f.send(10, t);
    }
    f.pump(f.t0);
    let mut at = f.t0;
    let mut expiries = Vec::new();
    loop {
        let d = f.s.deadline().unwrap();
        expiries.push(d - at);
        at = d;
        match f.s.on_timeout(at, &f.rtt, &f.cfg, &mut f.stats, true, None) {
            TimerOutcome::Retransmit => {
                assert_eq!(
                    f.s.next_retransmit(at, &f.rtt, &mut f.stats).map(|x| x.0),
                    Some(0)
                );
                assert_eq!(f.s.next_retransmit(at, &f.rtt, &mut f.stats), None);
            }
            TimerOutcome::Dead => break,
            TimerOutcome::Idle => panic!("timer armed but idle"),
        }
    }
    assert_eq!(f.stats.retransmits, u64::from(f.cfg.max_retransmits));
    // 50 ms initial RTO, then doubling up to the 2 s cap
    let ms: Vec<u128> = expiries.iter().map(|d| d.as_millis()).collect();
    assert_eq!(
        ms,
        vec![50, 100, 200, 400, 800, 1600, 2000, 2000, 2000, 2000]
    );
    f.s.fail_all(&mut f.events);
    let failed: Vec<_> = f.events.drain(..).collect();
    assert_eq!(
        failed,
        (0..4)
            .map(|t| Event::SendComplete {
                peer: 9,
                token: t,
                ok: false
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn large_messages_wait_for_done_and_limit_rendezvous() {
    let mut f = fixture();
    f.cfg.max_large_in_flight = 2;
    for t in 0..3 {
        let m = OutMsg::new(
            t,
            [0; HEADER_LEN],
            1 << 20,
            Body::Owned(vec![0; 1 << 20]),
            true,
        );
        f.s.enqueue(m, &f.cfg, &mut f.events);
    }
    let segs = f.pump(f.t0);
    assert_eq!(
        segs,
        vec![
            (0, SegFrame::Rndv { msg: 0 }),
            (1, SegFrame::Rndv { msg: 1 })
        ]
    );
    f.ack(f.t0, ack(2, 8, &[]));
    assert!(f.events.is_empty());
    assert!(f.s.pullable(1).is_some() && f.s.pullable(2).is_none());
    assert!(f.s.on_done(1, &mut f.events));
    assert!(
        !f.s.on_done(1, &mut f.events),
        "a second notice is not a completion"
    );
    assert_eq!(
        f.events.pop_front(),
        Some(Event::SendComplete {
            peer: 9,
            token: 1,
            ok: true
        })
    );
    assert_eq!(f.pump(f.t0), vec![(2, SegFrame::Rndv { msg: 2 })]);
}

#[test]
fn stale_and_invalid_acks() {
    let mut f = fixture();
    f.send(10, 1);
    f.pump(f.t0);
    assert!(!f.s.ack_valid(&ack(2, 8, &[])));
    assert!(f.s.ack_valid(&ack(1, 8, &[])));
    assert!(f.ack(f.t0, ack(1, 8, &[])));
    // an older ack arriving late changes nothing
    assert!(!f.ack(f.t0, ack(0, 0, &[])));
    assert!(f.s.window_open(&f.cfg));
}

#[test]
fn an_acknowledged_messages_buffer_goes_back_to_the_copy_pool() {
    let mut f = fixture();
    let total = f.layout.msg_cap + f.layout.frag_cap;
    f.send(total, 1);
    assert_eq!(f.pump(f.t0).len(), 2);
    let t1 = f.t0 + Duration::from_millis(1);
    assert!(f.ack(t1, ack(1, 8, &[])));
    // half acknowledged: the fragment may still be resent from it
    assert_eq!(f.copies.take().capacity(), 0, "nothing returned yet");
    assert!(f.ack(t1, ack(2, 8, &[])));
    let back = f.copies.take();
    assert_eq!(back.len(), total, "the message's own buffer");
    assert!(back.iter().all(|&b| b == 7));
}
