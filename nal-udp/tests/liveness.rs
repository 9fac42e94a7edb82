//! The liveness watch: a process that only waits (nothing outstanding
//! towards a peer) still learns that the peer died, within
//! `Config::peer_timeout`, and never gives up on a live one.

mod common;

use std::time::Duration;

use common::*;
use nal_udp::proto::Config;

fn spec(src: u64, dst: u64, no: u64, total: u64) -> MsgSpec {
    MsgSpec {
        src,
        dst,
        no,
        total,
        seed: src * 1000 + no,
        want: total,
        borrowed: false,
    }
}

/// Node `n` waits in the library for `d` (as a driver reports it: on every
/// pass of a thread about to sleep, here every 50 ms), or until `done`.
fn wait(sim: &mut Sim, n: usize, d: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
    let end = sim.now + d;
    while sim.now < end {
        sim.nodes[n].ep.note_waiting(sim.now);
        let step = Duration::from_millis(50).min(end - sim.now);
        if sim.run_until(step, &mut done) {
            return true;
        }
    }
    done(sim)
}

fn cfg(timeout_ms: u64) -> Config {
    Config {
        peer_timeout: Some(Duration::from_millis(timeout_ms)),
        ..Config::default()
    }
}

/// The survivor has a posted receive and nothing else: no send, no message
/// in progress. Its peer crashes. It must learn within the timeout (plus
/// one probe interval), by probing.
#[test]
fn a_waiting_survivor_learns_that_a_silent_peer_died_within_the_timeout() {
    let cfg = cfg(2000);
    let mut sim = Sim::new(2, cfg.clone(), LinkCfg::default(), 31);
    sim.record_tx = true;
    sim.send(spec(1, 0, 0, 100));
    assert!(sim.run_until(Duration::from_secs(1), |s| s.nodes[0].sink.completed == 1));
    sim.crash(1);
    let crash_at = sim.now;
    assert!(wait(&mut sim, 0, Duration::from_secs(30), |s| !s.nodes[0]
        .dead
        .is_empty()));
    let (peer, at) = sim.nodes[0].dead[0];
    assert_eq!(peer, 1);
    let took = at - crash_at;
    let timeout = cfg.peer_timeout.unwrap();
    assert!(
        took >= timeout && took <= timeout + timeout / 16 + Duration::from_millis(50),
        "declared dead after {took:?}"
    );
    assert_eq!(sim.nodes[0].ep.stats().watch_deaths, 1);
    let probes = sim
        .tx_log
        .iter()
        .filter(|r| r.src == 0 && r.at > crash_at && r.ack_requested)
        .count();
    assert!((10..=16).contains(&probes), "{probes} probes");
}

/// A live peer with nothing to say for a minute, over a path losing 30 %
/// each way, while the other side waits on it the whole time: it answers
/// the probes and is never declared dead; its message then arrives.
#[test]
fn a_live_but_silent_peer_is_never_declared_dead_at_30_percent_loss() {
    let cfg = cfg(1000);
    let mut sim = Sim::new(2, cfg, LinkCfg::lossy(0.3), 32);
    sim.send(spec(1, 0, 0, 100));
    assert!(wait(&mut sim, 0, Duration::from_secs(5), |s| s.nodes[0]
        .sink
        .completed
        == 1));
    assert!(!wait(&mut sim, 0, Duration::from_secs(60), |s| !s.nodes[0]
        .dead
        .is_empty()
        || !s.nodes[1].dead.is_empty()));
    let st = sim.nodes[0].ep.stats();
    assert!(st.probes_sent > 100, "{st:?}");
    assert_eq!(st.peers_dead, 0);
    sim.send(spec(1, 0, 1, 100));
    assert!(wait(&mut sim, 0, Duration::from_secs(5), |s| s.nodes[0]
        .sink
        .completed
        == 2));
}

/// Nobody waits: an idle endpoint sends nothing and sets no timer, however
/// long its peers stay silent; the first wait counts silence from its own
/// start, not from the last datagram.
#[test]
fn an_idle_endpoint_probes_nobody() {
    let cfg = cfg(1000);
    let mut sim = Sim::new(2, cfg.clone(), LinkCfg::default(), 33);
    sim.send(spec(1, 0, 0, 100));
    assert!(sim.run_until(Duration::from_secs(1), |s| s.nodes[0].sink.completed == 1));
    sim.run_for(Duration::from_secs(100));
    assert_eq!(sim.nodes[0].ep.poll_timeout(), None);
    let sent = sim.nodes[0].ep.stats().datagrams_sent;
    sim.run_for(Duration::from_secs(100));
    assert_eq!(sim.nodes[0].ep.stats().datagrams_sent, sent);
    // a peer silent for 200 s is still given the whole timeout once waited on
    sim.crash(1);
    let start = sim.now;
    assert!(wait(&mut sim, 0, Duration::from_secs(10), |s| !s.nodes[0]
        .dead
        .is_empty()));
    assert!(sim.nodes[0].dead[0].1 - start >= cfg.peer_timeout.unwrap());
}

/// The survivor's driver waits as the real one does: it notes the wait,
/// sleeps until the endpoint's next timer, wakes a millisecond late (epoll
/// rounds its timeout up to whole milliseconds; a loaded host adds more),
/// says it slept, and runs the timers. The late wake-ups must not break the
/// wait into pieces that each restart the silence clock: the silent peer is
/// declared dead within the timeout plus one probe interval. Its own entry
/// in the peer table is never probed.
#[test]
fn a_waiter_that_wakes_late_from_every_sleep_still_learns_that_its_peer_died() {
    use std::time::Instant;

    use nal_udp::proto::{Endpoint, Event};

    let cfg = cfg(800);
    let timeout = cfg.peer_timeout.unwrap();
    let t0 = Instant::now();
    let mut ep = Endpoint::new(cfg, 7, 0).unwrap();
    ep.add_peer(0);
    ep.add_peer(1);
    let mut sink = Checker::new(0, t0);
    let mut buf = vec![0u8; ep.max_datagram()];
    let mut now = t0;
    let mut probes = 0;
    let died = 'wait: loop {
        assert!(now - t0 < timeout * 4, "still not declared dead");
        ep.note_waiting(now);
        while let Some((to, _)) = ep.poll_transmit(now, &mut buf) {
            assert_eq!(to, 1, "probed itself");
            probes += 1;
        }
        let due = ep
            .poll_timeout()
            .expect("a waiting endpoint watches its peer");
        now = now.max(due) + Duration::from_millis(1);
        ep.note_slept(now);
        ep.handle_timeout(now, &mut sink);
        while let Some(ev) = ep.poll_event() {
            if ev == (Event::PeerDead { peer: 1 }) {
                break 'wait now;
            }
        }
    };
    let took = died - t0;
    assert!(
        took >= timeout && took <= timeout + timeout / 16 + Duration::from_millis(20),
        "declared dead after {took:?}"
    );
    assert_eq!(ep.stats().watch_deaths, 1);
    assert!(probes >= 10, "{probes} probes");
}
