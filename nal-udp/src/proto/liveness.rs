//! Liveness of peers this process waits on while it has nothing outstanding
//! towards them.
//!
//! The retransmission, pull and keep-alive timers only watch a peer while
//! this endpoint is owed something by it at the protocol level. A process
//! blocked in a receive that no message has started for owes and is owed
//! nothing, so a peer that dies (or whose host does) would go unnoticed
//! forever. While the driver reports that the application waits
//! ([`Endpoint::note_waiting`](super::Endpoint::note_waiting)), every live
//! peer silent for a [probe interval](probe_interval) gets a probe (a bare
//! ack asking for an immediate answer) every interval, and one silent for
//! the whole [`Config::peer_timeout`] *while the application waited* is
//! declared dead. Any datagram from the peer counts as an answer, so a live
//! peer that merely has nothing to say is never declared dead: it answers
//! a probe from its progress engine. Idle processes probe nobody.

use std::time::{Duration, Instant};

use super::config::Config;

/// Probes a silent peer gets before it is declared dead: enough that a
/// live peer on a path losing half its datagrams in each direction still
/// answers one of them (each round trip fails with probability 0.75;
/// 0.75^15 ≈ 1.3 %, and at 30 % loss 0.51^15 ≈ 4·10⁻⁵).
pub(crate) const PROBES_PER_TIMEOUT: u32 = 16;

/// Time between probes to a silent peer under `timeout`.
pub(crate) fn probe_interval(timeout: Duration) -> Duration {
    timeout / PROBES_PER_TIMEOUT
}

/// Whether (and since when) the application has been waiting.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Waiting {
    /// Start of the current waiting episode.
    since: Option<Instant>,
    /// Last time the driver said the application waits.
    last_note: Option<Instant>,
}

impl Waiting {
    /// The application waits at `now`. Returns true when this starts a new
    /// episode (the peers' watch timers must be armed).
    pub(crate) fn note(&mut self, now: Instant, cfg: &Config) -> bool {
        let Some(timeout) = cfg.peer_timeout else {
            return false;
        };
        let fresh = !self.active(now, timeout);
        if fresh {
            self.since = Some(now);
        }
        self.last_note = Some(now);
        fresh
    }

    /// The thread that noted the last wait slept in the library from then
    /// until `now`: the same wait goes on, however long the sleep took.
    /// Measured as a gap between notes, a sleep to a timer's deadline would
    /// end the episode whenever the wake-up came late (epoll rounds its
    /// timeout up to whole milliseconds; a loaded host adds more) and
    /// restart the silence clock at every wake-up, so that a dead peer was
    /// never found. Returns true when this starts an episode (none was in
    /// force).
    pub(crate) fn note_slept(&mut self, now: Instant, cfg: &Config) -> bool {
        if self.since.is_none() {
            return self.note(now, cfg);
        }
        if cfg.peer_timeout.is_some() {
            self.last_note = Some(now);
        }
        false
    }

    /// An application that leaves its wait for a moment (to look at an
    /// event, to post the next receive) and comes back within a probe
    /// interval keeps the episode going; otherwise a waiter that sleeps in
    /// slices would restart the silence clock on every slice and never
    /// detect anything.
    fn active(&self, now: Instant, timeout: Duration) -> bool {
        self.last_note
            .is_some_and(|n| now.saturating_duration_since(n) <= probe_interval(timeout))
    }

    /// The start of the episode in force at `now`, if one is.
    pub(crate) fn episode(&self, now: Instant, cfg: &Config) -> Option<Instant> {
        let timeout = cfg.peer_timeout?;
        self.since.filter(|_| self.active(now, timeout))
    }
}

/// What the watch timer of one peer decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchOutcome {
    /// Nothing to do (not due, or nobody waits any more).
    Idle,
    /// Send a probe.
    Probe,
    /// Silent for the whole timeout while the application waited.
    Dead,
}

/// The watch on one peer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PeerWatch {
    /// When the last datagram from the peer arrived.
    last_heard: Option<Instant>,
    timer: Option<Instant>,
}

impl PeerWatch {
    /// Any datagram from the peer: it is alive.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = Some(now);
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.timer
    }

    /// Whether the peer has been silent for the whole
    /// [`Config::peer_timeout`] (always, without one), so that a timer that
    /// exhausted its retransmissions may declare it dead. Consecutive
    /// expiries alone say little on a lossy path: at 30 % loss each
    /// retransmission round trip fails half the time, and ten in a row
    /// happen every thousand or so. A peer never heard from is counted
    /// from the first look.
    pub(crate) fn silent_for(&mut self, now: Instant, cfg: &Config) -> bool {
        let Some(timeout) = cfg.peer_timeout else {
            return true;
        };
        let heard = *self.last_heard.get_or_insert(now);
        now.saturating_duration_since(heard) >= timeout
    }

    /// A waiting episode began at `now`: look at the peer one interval from
    /// now.
    pub(crate) fn arm(&mut self, now: Instant, cfg: &Config) {
        if let Some(timeout) = cfg.peer_timeout {
            self.timer = Some(now + probe_interval(timeout));
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.timer = None;
    }

    /// Run the timer if it expired.
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        waiting: &Waiting,
        cfg: &Config,
    ) -> WatchOutcome {
        if self.timer.is_none_or(|t| t > now) {
            return WatchOutcome::Idle;
        }
        self.timer = None;
        let (Some(timeout), Some(since)) = (cfg.peer_timeout, waiting.episode(now, cfg)) else {
            // Nobody waits: stay quiet until the next episode.
            return WatchOutcome::Idle;
        };
        // Silence from before the application started waiting does not
        // count: an idle job must not find its peers dead on its first wait.
        let silent_since = self.last_heard.map_or(since, |h| h.max(since));
        let silent = now.saturating_duration_since(silent_since);
        if silent >= timeout {
            return WatchOutcome::Dead;
        }
        let interval = probe_interval(timeout);
        let death = silent_since + timeout;
        if silent >= interval {
            self.timer = Some((now + interval).min(death));
            WatchOutcome::Probe
        } else {
            self.timer = Some(silent_since + interval);
            WatchOutcome::Idle
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ms: u64) -> Config {
        Config {
            peer_timeout: Some(Duration::from_millis(ms)),
            ..Config::default()
        }
    }

    #[test]
    fn silent_peer_is_probed_then_dead_after_the_timeout() {
        let c = cfg(1600);
        let t0 = Instant::now();
        let mut w = Waiting::default();
        let mut p = PeerWatch::default();
        assert!(w.note(t0, &c));
        p.arm(t0, &c);
        let mut probes = 0;
        let now = loop {
            let now = p.deadline().unwrap();
            w.note(now, &c);
            match p.on_timeout(now, &w, &c) {
                WatchOutcome::Probe => probes += 1,
                WatchOutcome::Dead => break now,
                WatchOutcome::Idle => {}
            }
        };
        assert_eq!(now - t0, Duration::from_millis(1600));
        assert_eq!(probes, PROBES_PER_TIMEOUT - 1);
    }

    #[test]
    fn answers_and_pauses_in_waiting_keep_the_peer_alive() {
        let c = cfg(1600);
        let t0 = Instant::now();
        let mut w = Waiting::default();
        let mut p = PeerWatch::default();
        w.note(t0, &c);
        p.arm(t0, &c);
        for k in 1..100u32 {
            let now = t0 + Duration::from_millis(100) * k;
            w.note(now, &c);
            if k % 10 == 0 {
                p.heard(now);
            }
            if p.deadline().is_some_and(|d| d <= now) {
                assert_ne!(p.on_timeout(now, &w, &c), WatchOutcome::Dead);
            }
        }
        // No one waits: the timer lapses quietly, and the next episode
        // counts silence from its own start.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(p.on_timeout(later, &w, &c), WatchOutcome::Idle);
        assert_eq!(p.deadline(), None);
        assert!(w.note(later, &c));
        p.arm(later, &c);
        let d = p.deadline().unwrap();
        assert_eq!(p.on_timeout(d, &w, &c), WatchOutcome::Probe);
    }

    #[test]
    fn disabled_without_a_timeout() {
        let c = Config {
            peer_timeout: None,
            ..Config::default()
        };
        let mut w = Waiting::default();
        let mut p = PeerWatch::default();
        let t0 = Instant::now();
        assert!(!w.note(t0, &c));
        p.arm(t0, &c);
        assert_eq!(p.deadline(), None);
    }
}
