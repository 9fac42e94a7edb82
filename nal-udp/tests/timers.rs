//! Timer, back-off, liveness and flow-control behaviour in the simulator.

mod common;

use std::time::Duration;

use common::*;
use nal_udp::proto::wire::Kind;
use nal_udp::proto::{Config, EagerCompletion, OutPayload, SendError};

const MB: u64 = 1 << 20;

fn spec(src: u64, dst: u64, no: u64, total: u64) -> MsgSpec {
    MsgSpec {
        src,
        dst,
        no,
        total,
        seed: (src << 40) ^ (dst << 32) ^ no,
        want: u64::MAX,
        borrowed: total > Config::default().eager_max,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Peer 1 crashes while peer 0 is pulling a large message from it, has
/// eager and large sends to it outstanding, and half an eager message from
/// it. Peer 0 must back off exponentially, declare 1 dead once within the
/// bound, fail every pending send and abort every receive in progress.
#[test]
fn crashed_peer_is_declared_dead_after_exponential_back_off() {
    let cfg = Config {
        eager_completion: EagerCompletion::OnAck,
        ..Config::default()
    };
    let mut sim = Sim::new(2, cfg.clone(), LinkCfg::default(), 21);
    sim.record_tx = true;
    // a warm-up exchange gives both sides RTT samples
    for no in 0..20 {
        sim.send(spec(0, 1, no, 100));
        sim.send(spec(1, 0, no, 100));
    }
    assert!(sim.run_until(Duration::from_secs(1), |s| s.all_sends_done()));
    sim.send(spec(1, 0, 20, 8 * MB));
    // the continuation fragments of this medium message never arrive
    sim.send(spec(1, 0, 21, 100_000));
    sim.drop_filter = Some(Box::new(|r: &TxRecord| r.src == 1 && r.kind == Kind::Frag));
    assert!(sim.run_until(Duration::from_secs(1), |s| s.nodes[0]
        .sink
        .in_progress_from(1)
        == 2
        && s.nodes[0].sink.bytes > 200_000));
    for no in 20..30 {
        sim.send(spec(0, 1, no, 2000));
    }
    sim.send(spec(0, 1, 30, 4 * MB));
    assert_eq!(
        sim.nodes[0].sink.in_progress_from(1),
        2,
        "pull and medium message under way"
    );
    let crash_at = sim.now;
    let probes_before = sim.nodes[0].ep.stats().tail_probes;
    sim.crash(1);
    assert!(sim.run_until(Duration::from_secs(30), |s| !s.nodes[0].dead.is_empty()));
    let node = &sim.nodes[0];
    let (peer, dead_at) = node.dead[0];
    assert_eq!(peer, 1);
    let took = dead_at - crash_at;
    // retransmissions run out long before the peer has been silent for
    // the peer timeout; the first expiry after that declares it dead
    let timeout = cfg.peer_timeout.unwrap();
    assert!(
        took >= timeout && took <= timeout + Duration::from_millis(500),
        "declared dead after {took:?}"
    );
    // every send to it that was pending failed, the earlier ones succeeded
    for no in 0..31u64 {
        let st = node.tokens[&spec(0, 1, no, 0).token()];
        match (no, st) {
            (0..=19, TokenState::Done { ok: true, .. }) => {}
            (20..=30, TokenState::Done { ok: false, at }) => assert_eq!(at, dead_at),
            other => panic!("send {other:?}"),
        }
    }
    assert_eq!(node.sink.in_progress(), 0);
    let mut aborted = node.sink.aborted.clone();
    aborted.sort();
    assert_eq!(aborted, vec![(1, 20), (1, 21)]);
    // the retransmission timer doubled from expiry to expiry, at most
    // `max_backoff` times
    let seq_tx: Vec<_> = sim
        .tx_log
        .iter()
        .filter(|r| r.src == 0 && r.at > crash_at && r.seq.is_some())
        .collect();
    let oldest = seq_tx.iter().filter_map(|r| r.seq).min().unwrap();
    // (after the tail loss probes, which come first and do not back off)
    let probes = (node.ep.stats().tail_probes - probes_before) as usize;
    assert!(probes <= 3, "{probes} tail probes");
    let times: Vec<_> = seq_tx
        .iter()
        .filter(|r| r.seq == Some(oldest))
        .map(|r| r.at)
        .skip(probes)
        .collect();
    let gaps: Vec<f64> = times.windows(2).map(|w| ms(w[1] - w[0])).collect();
    assert!(gaps.len() >= 8, "too few retransmissions: {gaps:?}");
    for (i, w) in gaps.windows(2).enumerate() {
        let doubled = (w[1] / w[0] - 2.0).abs() < 0.01;
        let capped = i + 1 >= cfg.max_backoff as usize && (w[1] / w[0] - 1.0).abs() < 0.01;
        assert!(doubled || capped, "back-off not exponential: {gaps:?}");
    }
    assert!(gaps.iter().all(|&g| g >= ms(cfg.rto_min)), "{gaps:?}");
    // and it never stormed: per back-off step one retransmission, and one
    // re-request per pull block in flight
    let after = sim
        .tx_log
        .iter()
        .filter(|r| r.src == 0 && r.at > crash_at)
        .count();
    let steps = took.as_secs_f64() * 1e3 / (ms(cfg.rto_min) * f64::from(1u32 << cfg.max_backoff));
    assert!(
        (after as f64) < f64::from(1 + cfg.pull_blocks_in_flight + 1) * steps + 50.0,
        "{after} datagrams sent to a dead peer"
    );
    // nothing is left to do: no timer keeps the driver awake
    assert_eq!(sim.nodes[0].ep.poll_timeout(), None);
    let r = sim.nodes[0]
        .ep
        .send(sim.now, 1, &[0; 88], OutPayload::Inline(vec![1]), 99);
    assert_eq!(r, Err(SendError::PeerDead(1)));
    // a dead peer that comes back is ignored
    sim.nodes[1].crashed = false;
    sim.send(spec(1, 0, 22, 10));
    sim.run_for(Duration::from_millis(100));
    assert!(sim.nodes[0].ep.stats().dead_peer_drops > 0);
}

/// With nothing of its own outstanding, a receiver waiting for the rest of
/// an eager message probes the sender, and declares it dead when probes go
/// unanswered.
#[test]
fn waiting_receiver_probes_and_detects_a_silent_sender() {
    let cfg = Config::default();
    let mut sim = Sim::new(2, cfg.clone(), LinkCfg::default(), 22);
    sim.record_tx = true;
    sim.drop_filter = Some(Box::new(|r: &TxRecord| r.src == 1 && r.kind == Kind::Frag));
    sim.send(spec(1, 0, 0, 100_000));
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.nodes[0].sink.in_progress_from(1), 1);
    sim.crash(1);
    let crash_at = sim.now;
    assert!(sim.run_until(Duration::from_secs(30), |s| !s.nodes[0].dead.is_empty()));
    let probes: Vec<_> = sim
        .tx_log
        .iter()
        .filter(|r| r.src == 0 && r.at > crash_at && r.ack_requested)
        .map(|r| r.at)
        .collect();
    assert!(probes.len() >= cfg.max_retransmits as usize, "{probes:?}");
    let (_, dead_at) = sim.nodes[0].dead[0];
    let timeout = cfg.peer_timeout.unwrap();
    assert!(
        dead_at - crash_at >= timeout && dead_at - crash_at <= timeout + Duration::from_millis(500)
    );
    let gaps: Vec<f64> = probes.windows(2).map(|w| ms(w[1] - w[0])).collect();
    for (i, w) in gaps.windows(2).enumerate() {
        let doubled = w[1] >= w[0] * 1.99;
        let capped = i + 1 >= cfg.max_backoff as usize && (w[1] / w[0] - 1.0).abs() < 0.01;
        assert!(doubled || capped, "{gaps:?}");
    }
    assert_eq!(sim.nodes[0].sink.aborted, vec![(1, 0)]);
}

/// A long outage shorter than the death bound: timers back off (few
/// datagrams during the outage), nobody is declared dead, everything is
/// delivered once the network heals, and the back-off resets.
#[test]
fn recovers_when_loss_stops() {
    let cfg = Config {
        eager_completion: EagerCompletion::OnAck,
        ..Config::default()
    };
    let mut sim = Sim::new(2, cfg.clone(), LinkCfg::lossy(0.05), 23);
    sim.record_tx = true;
    let mut plan = Vec::new();
    for no in 0..300u64 {
        for (src, dst) in [(0, 1), (1, 0)] {
            let total = if no % 100 == 7 { 3 * MB } else { 500 + no * 37 };
            let s = spec(src, dst, no, total);
            sim.send_at(Duration::from_micros(no * 1000), s);
            plan.push(s);
        }
    }
    sim.run_for(Duration::from_millis(150));
    let outage_start = sim.now;
    sim.set_all_links(|l| l.blackhole = true);
    sim.run_for(Duration::from_millis(1500));
    let outage_end = sim.now;
    sim.set_all_links(|l| l.blackhole = false);
    let total = plan.len() as u64;
    assert!(
        sim.run_until(Duration::from_secs(10), |s| s.total_finished() == total
            && s.all_sends_done())
    );
    assert_all_delivered(&sim, &plan);
    for n in &sim.nodes {
        let st = n.ep.stats();
        assert!(st.rto_expiries + st.pull_timeouts > 0, "{st:?}");
        assert_eq!(st.peers_dead, 0);
    }
    // during the outage: new datagrams until the windows filled, then only
    // back-off retransmissions, a handful per node
    let mut seen = std::collections::HashSet::new();
    let mut retransmitted = 0;
    for r in &sim.tx_log {
        let Some(seq) = r.seq else { continue };
        let again = !seen.insert((r.src, seq));
        if again && r.at > outage_start && r.at < outage_end {
            retransmitted += 1;
        }
    }
    let others = sim
        .tx_log
        .iter()
        .filter(|r| r.at > outage_start && r.at < outage_end && r.seq.is_none())
        .count();
    // one per timer (retransmission, pull) and node per capped back-off step
    let outage = ms(outage_end - outage_start);
    let steps = outage / (ms(cfg.rto_min) * f64::from(1u32 << cfg.max_backoff));
    assert!(
        (retransmitted as f64) <= 4.0 * steps + 24.0,
        "{retransmitted} retransmissions into the outage"
    );
    assert!(
        (others as f64) <= 4.0 * steps + 24.0 + 2.0 * 64.0,
        "{others} other datagrams sent into the outage"
    );
    // back-off was reset: a new message goes through at network speed
    let start = sim.now;
    let s = spec(0, 1, 300, 1000);
    sim.send(s);
    sim.set_all_links(|l| l.loss = 0.0);
    assert!(sim.run_until(Duration::from_secs(1), |s| s.all_sends_done()));
    let took = sim.nodes[1].sink.completed_at[&(0, 300)] - start;
    assert!(
        took < Duration::from_millis(1),
        "delivery took {took:?} after recovery"
    );
}

/// A path RTT above the initial RTO costs a few spurious retransmissions at
/// the start, until the estimator has samples; after that, none.
#[test]
fn rto_adapts_to_a_long_path() {
    let cfg = Config::default();
    let link = LinkCfg {
        delay: Duration::from_millis(60),
        bandwidth: Some(100e6),
        ..LinkCfg::default()
    };
    let mut sim = Sim::new(2, cfg.clone(), link, 24);
    sim.record_tx = true;
    let mut plan = Vec::new();
    for no in 0..400u64 {
        let s = spec(0, 1, no, 1000 + (no % 7) * 10_000);
        sim.send_at(Duration::from_millis(no * 5), s);
        plan.push(s);
    }
    let total = plan.len() as u64;
    assert!(
        sim.run_until(Duration::from_secs(20), |s| s.total_finished() == total
            && s.all_sends_done())
    );
    assert_all_delivered(&sim, &plan);
    let st = sim.nodes[0].ep.stats();
    assert!(st.retransmits <= 3, "{st:?}");
    let late = sim
        .tx_log
        .iter()
        .filter(|r| r.at > sim.t0 + Duration::from_millis(500) && r.src == 0)
        .filter(|r| r.kind != Kind::Ack)
        .count() as u64;
    assert!(late > 100);
    // every retransmission happened in the first RTTs
    assert_eq!(st.rto_expiries, st.retransmits);
}

/// A receiver that allows fewer large messages in flight than its sender
/// holds back in-order processing and shrinks its window; the sender waits
/// instead of retransmitting, and nothing is lost or reordered.
#[test]
fn receiver_short_of_pull_capacity_stalls_without_loss() {
    let sender = Config {
        max_large_in_flight: 16,
        ..Config::default()
    };
    let receiver = Config {
        max_large_in_flight: 1,
        pull_blocks_in_flight: 1,
        ..Config::default()
    };
    let mut sim = Sim::with_configs(vec![sender, receiver], LinkCfg::default(), 25);
    let mut plan = Vec::new();
    for no in 0..60u64 {
        let total = if no % 3 == 0 { MB + no } else { 100 + no };
        let s = spec(0, 1, no, total);
        sim.send(s);
        plan.push(s);
    }
    let total = plan.len() as u64;
    assert!(
        sim.run_until(Duration::from_secs(20), |s| s.total_finished() == total
            && s.all_sends_done())
    );
    assert_all_delivered(&sim, &plan);
    let st = sim.nodes[0].ep.stats();
    assert_eq!(st.retransmits, 0, "{st:?}");
    assert_eq!(sim.nodes[1].ep.stats().out_of_window_drops, 0);
    assert!(sim.nodes[1].ep.stats().max_buffered_datagrams > 0);
}

/// A receiver short of pull capacity, tiny windows that fill up behind its
/// held-back rendezvous, traffic both ways and loss. Completion notices
/// travel outside the sequence space, so finishing a pull never waits for
/// window space, and the stall always clears.
#[test]
fn stalled_receiver_with_tiny_windows_completes_both_ways() {
    let small = Config {
        recv_window: 4,
        send_window: 4,
        ..Config::default()
    };
    let a = Config {
        max_large_in_flight: 8,
        ..small.clone()
    };
    let b = Config {
        max_large_in_flight: 1,
        pull_blocks_in_flight: 1,
        ..small
    };
    let mut sim = Sim::with_configs(vec![a, b], LinkCfg::lossy(0.05), 26);
    let mut plan = Vec::new();
    for no in 0..40u64 {
        for (src, dst) in [(0, 1), (1, 0)] {
            let total = if no % 2 == 0 { 300_000 + no } else { 10 + no };
            let s = spec(src, dst, no, total);
            sim.send(s);
            plan.push(s);
        }
    }
    let total = plan.len() as u64;
    assert!(
        sim.run_until(Duration::from_secs(30), |s| s.total_finished() == total
            && s.all_sends_done())
    );
    assert_all_delivered(&sim, &plan);
    assert!(
        sim.nodes[1].ep.stats().max_buffered_datagrams > 0,
        "node 1 never held back"
    );
}

/// The loss-recovery timings the UDP transport runs with (`UdpConfig`).
fn driver_timings() -> Config {
    Config {
        ack_delay: Duration::from_micros(50),
        tail_probe_slack: Some(Duration::from_micros(50)),
        rto_min: Duration::from_millis(1),
        ..Config::default()
    }
}

/// One-way messages from 0 to 1, one every `gap`; `pause` deschedules 1
/// for that long right after each has reached it (zero: never). The first
/// 20 go to a prompt peer, so that the sender has its round trip.
fn one_way_stream(link: LinkCfg, msgs: u64, gap: Duration, pause: Duration, seed: u64) -> Sim {
    let mut sim = Sim::new(2, driver_timings(), link, seed);
    let mut plan = Vec::new();
    for no in 0..msgs {
        let s = spec(0, 1, no, 64);
        sim.send(s);
        plan.push(s);
        let arrive = Duration::from_micros(30);
        sim.run_for(arrive);
        if no >= 20 && !pause.is_zero() {
            sim.pause(1, pause);
        }
        sim.run_for(gap - arrive);
    }
    assert!(
        sim.run_until(Duration::from_secs(5), |s| s.total_finished() == msgs
            && s.all_sends_done())
    );
    assert_all_delivered(&sim, &plan);
    sim
}

/// A peer descheduled for longer than a tail probe waits, but well inside
/// the retransmission timeout, gets the probe while it still owes the
/// original's acknowledgment. It says so (`late_dups`), and the sender
/// waits longer before its next probe: a handful of needless probes in
/// all, instead of one per message, each of which woke the peer. A peer
/// that answers in time but over a path that loses datagrams reports no
/// late duplicate, so loss is still repaired at the path's pace.
#[test]
fn probes_wait_longer_for_a_peer_that_says_it_answers_late() {
    const MSGS: u64 = 300;
    let sim = one_way_stream(
        LinkCfg::default(),
        MSGS,
        Duration::from_micros(600),
        Duration::from_micros(400),
        41,
    );
    let (tx, rx) = (sim.nodes[0].ep.stats(), sim.nodes[1].ep.stats());
    assert!(rx.late_dups > 0, "{rx:?}");
    assert!(tx.tail_probe_backoffs > 0, "{tx:?}");
    assert!(
        tx.tail_probes <= MSGS / 20,
        "{} tail probes for {MSGS} messages to a late peer: {tx:?} {rx:?}",
        tx.tail_probes
    );

    // Below the loss at which small datagrams go twice (module
    // `redundancy`), so that losses are repaired by probes.
    let lossy = LinkCfg {
        loss: 0.015,
        ..LinkCfg::default()
    };
    let sim = one_way_stream(
        lossy,
        4 * MSGS,
        Duration::from_micros(600),
        Duration::ZERO,
        42,
    );
    let (tx, rx) = (sim.nodes[0].ep.stats(), sim.nodes[1].ep.stats());
    assert!(tx.tail_probes > MSGS / 40, "{tx:?}");
    assert_eq!(rx.late_dups, 0, "{rx:?}");
    assert_eq!(tx.tail_probe_backoffs, 0, "{tx:?}");
}
