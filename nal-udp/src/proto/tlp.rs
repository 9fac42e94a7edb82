//! Tail loss probe, after RFC 8985 (RACK-TLP).
//!
//! Fast retransmit needs later datagrams to be acknowledged, so it never
//! sees the loss of the *last* datagram of a flight: the common case of a
//! blocking exchange, where one message goes out and nothing follows until
//! the answer comes back. Without a probe, such a loss waits for the
//! retransmission timer, whose floor is tens of round trips (it must ride
//! out a descheduled peer), so at 10 % loss a job spends most of its time
//! waiting for timers.
//!
//! The probe timer runs at [`pto`] (twice the smallest RTT seen plus the
//! peer's ack delay plus [`Config::tail_probe_slack`], at most the RTO)
//! after the latest new transmission or acknowledged progress. On expiry
//! the newest unacknowledged datagram is sent again, asking for an
//! immediate acknowledgment: if it was lost, this repairs it; if only its
//! ack was held back or lost, the answer's cumulative ack and SACK tell the
//! sender at once; and every hole the answer shows before it had a whole
//! probe timeout to arrive, so it is resent at once (probing the oldest
//! instead repaired one hole per probe timeout). Either way the sender
//! learns the state of the whole flight within a round trip. Without an
//! answer it probes again, sooner: the probe asked for an immediate
//! answer, so the peer's ack delay no longer counts ([`pto_after_probe`]). At 30 % loss a probe and its
//! answer both get through only half the time, and waiting for the
//! retransmission timer instead costs several times as much: its floor
//! rides out a descheduled peer, and each expiry doubles it.
//!
//! The probes are bounded so that a peer that is merely slow (descheduled,
//! or polling for progress) or gone costs a few datagrams, never a
//! cascade: [`MAX_TAIL_PROBES`] between two acknowledgments that make
//! progress, whatever the application sends meanwhile, and never later than
//! the retransmission timer; none while pull data may be queued on the
//! path. The budget left carries over a retransmission timeout, so an
//! expiry that found the path still losing goes on probing rather than
//! waiting out the doubled timer. A probe neither backs off the timer nor
//! counts towards declaring the peer dead (liveness stays with the
//! retransmission timer and the peer timeout), and it keeps the transmit
//! number of the datagram it repeats, so that the ack of the original
//! cannot make everything sent since look lost.
//!
//! The smallest RTT knows nothing of a peer that is merely late: on a host
//! with more threads than cores most probes found the original waiting,
//! unacknowledged, and each woke the peer once more. The peer counts such
//! late duplicates and reports the count in every datagram
//! ([`super::wire::HeaderFields::late_dups`]); each rise doubles an extra
//! wait added to the probe timeout (and to the retransmission timeout),
//! which halves again after [`CALM_ACKS`] calm acknowledgments
//! ([`TailProbe::back_off`]).
//!
//! Measured in simulated time (`tests/loss_recovery.rs`, the cg pattern,
//! 30 % loss, 150 µs compute per iteration, three seeds): 3 probes and a
//! fresh ack delay before each gave 2.98 ms per iteration against
//! 0.27 ms lossless (146 timer expiries in 300 iterations); 8 probes, 2.45;
//! the shorter wait after a probe, 2.20 ms (20 expiries). The `ring`
//! pattern (two one-datagram messages per hop, 2 000 hops, three seeds,
//! `explore`), 20.2 µs per hop lossless: probing the oldest with one
//! budget for all flights gave 81–87 µs per hop at 10 % loss and 237–247
//! at 30 %; early retransmit, probing the newest and a budget per flight,
//! with the driver's ack delay halved to 50 µs, 55 and 162–169.

use std::time::{Duration, Instant};

use super::config::Config;
use super::rtt::RttEstimator;

/// The probe timeout under `cfg`, or `None` when probes are off or there
/// is no RTT sample yet (before the first sample the retransmission timer's
/// initial value is the only sane guess).
pub(crate) fn pto(rtt: &RttEstimator, cfg: &Config) -> Option<Duration> {
    // An ack comes back within a round trip of the path plus the longest
    // the peer holds an ack back when it has nothing to send (a one-way
    // message, such as the MPI layer's engine acknowledgment).
    probe_wait(rtt, cfg, cfg.ack_delay)
}

/// The probe timeout after a probe went unanswered: the probe asked for an
/// immediate acknowledgment, so the peer's ack delay no longer counts.
/// (At 30 % loss a probe and its answer both get through only half the
/// time; waiting the ack delay again for each of them doubled the cost.)
fn pto_after_probe(rtt: &RttEstimator, cfg: &Config) -> Option<Duration> {
    probe_wait(rtt, cfg, Duration::ZERO)
}

/// Twice the path's round trip (the smallest seen: room for jitter) plus
/// the time the peer may hold its answer back plus the slack, never later
/// than the retransmission timer would fire (then the probe is pointless).
/// The smoothed RTT would not do on loopback: it mixes in every ack the
/// peer held back and every reply that waited for the application, ten
/// times the path, and each loss would cost that much. Where datagrams
/// queue behind our own pull data, the probe is held back instead (see
/// `SendState::on_tail_probe`).
pub(crate) fn probe_wait(
    rtt: &RttEstimator,
    cfg: &Config,
    held_back: Duration,
) -> Option<Duration> {
    let slack = cfg.tail_probe_slack?;
    let path = rtt.min_rtt()?;
    Some((path * 2 + held_back + slack).min(rtt.rto()))
}

/// The probe timer of one peer's send side.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TailProbe {
    at: Option<Instant>,
    /// Probes sent since the timer was last armed.
    sent: u32,
    /// Added to every probe timeout: learnt from probes that reached a
    /// peer which had the original and had simply not answered yet (see
    /// [`TailProbe::back_off`]).
    extra: Duration,
    /// Acknowledgments that made progress since `extra` last changed.
    calm: u32,
}

/// The extra wait is at most this many retransmission timeouts. A peer
/// descheduled for a few milliseconds at a time (a 2-core host running
/// two ranks and their progress threads) answered later than twice the
/// RTO floor often enough to keep the timer firing, and an ack of an
/// original the timer resent made the datagrams sent since look lost.
pub(crate) const MAX_EXTRA_RTOS: u32 = 4;

/// Acknowledgments that make progress, with no late duplicate reported
/// meanwhile, after which the learnt extra wait halves. A host that stays
/// busy keeps a probe needless at most about once per this many
/// acknowledgments; one that calms down is back to probing at the path's
/// pace after a few hundred.
pub(crate) const CALM_ACKS: u32 = 64;

/// Probes between two acknowledgments that make progress, at most. Eight
/// probes at 30 % loss leave a flight unrepaired with probability
/// 0.51^8 ≈ 0.5 % (three left 13 %, each a retransmission timeout); in
/// practice the retransmission timer (1 ms floor) ends the series earlier.
pub(crate) const MAX_TAIL_PROBES: u32 = 8;

impl TailProbe {
    /// An ack made progress while data is still unacknowledged: (re)start
    /// the timer with a fresh budget of probes. `rto_at` is the
    /// retransmission timer; a probe due no earlier is not armed.
    pub(crate) fn arm(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        rto_at: Option<Instant>,
    ) {
        self.sent = 0;
        self.schedule(now, rtt, cfg, rto_at);
    }

    /// New data went out: restart the timer, but only within the budget of
    /// probes left since the last progress. A peer that went silent (dead,
    /// or the path down) thus gets [`MAX_TAIL_PROBES`] probes in all, not
    /// that many for every message the application keeps sending it.
    pub(crate) fn on_new_data(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        rto_at: Option<Instant>,
    ) {
        if self.sent < MAX_TAIL_PROBES {
            self.schedule(now, rtt, cfg, rto_at);
        }
    }

    fn schedule(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        rto_at: Option<Instant>,
    ) {
        let wait = if self.sent == 0 {
            pto(rtt, cfg)
        } else {
            pto_after_probe(rtt, cfg)
        };
        self.at = wait
            .map(|p| now + p + self.extra)
            .filter(|&at| rto_at.is_none_or(|r| at < r));
    }

    /// The peer reported a retransmission of ours that it already had and
    /// had not acknowledged yet: a probe that only its late answer (a
    /// descheduled process, a progress thread not yet woken) made
    /// necessary. Loss is not the cause, and the minimum RTT knows nothing
    /// of that delay, so wait longer before every probe: double the extra
    /// wait (at least one probe timeout, at most [`MAX_EXTRA_RTOS`]
    /// retransmission timeouts). A probe already armed moves by as much.
    ///
    /// Without this, on a host with more threads than cores, most probes
    /// were needless, and each one woke the peer's progress thread.
    pub(crate) fn back_off(&mut self, rtt: &RttEstimator, cfg: &Config) {
        let Some(base) = pto(rtt, cfg) else {
            return;
        };
        let old = self.extra;
        self.extra = (old * 2).max(base).min(rtt.rto() * MAX_EXTRA_RTOS);
        self.calm = 0;
        if let Some(at) = &mut self.at {
            *at += self.extra.saturating_sub(old);
        }
    }

    /// An acknowledgment made progress: after [`CALM_ACKS`] of them without
    /// a late duplicate, the extra wait halves.
    pub(crate) fn on_progress(&mut self) {
        if self.extra.is_zero() {
            return;
        }
        self.calm += 1;
        if self.calm >= CALM_ACKS {
            self.calm = 0;
            self.extra /= 2;
            if self.extra < Duration::from_micros(1) {
                self.extra = Duration::ZERO;
            }
        }
    }

    /// The extra wait learnt from late answers.
    pub(crate) fn extra(&self) -> Duration {
        self.extra
    }

    /// The retransmission timer took over (or the peer is gone): no probe
    /// until the next new datagram, within the budget left.
    pub(crate) fn disarm(&mut self) {
        self.at = None;
    }

    /// An acknowledgment made progress and left nothing unacknowledged: no
    /// probe is due, and the next flight starts with a fresh budget. (Only
    /// disarming here let the probes of flight after flight add up, until
    /// a blocking exchange had none left and every loss waited for the
    /// retransmission timer and its back-off.)
    pub(crate) fn idle(&mut self) {
        self.at = None;
        self.sent = 0;
    }

    /// When the probe is due.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.at
    }

    /// Whether the probe is due at `now`; if so it is consumed, and the
    /// next one scheduled while the budget lasts.
    pub(crate) fn fire(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        rto_at: Option<Instant>,
    ) -> bool {
        match self.at {
            Some(at) if at <= now => {
                self.at = None;
                self.sent += 1;
                if self.sent < MAX_TAIL_PROBES {
                    self.schedule(now, rtt, cfg, rto_at);
                }
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt_with(sample: Duration) -> RttEstimator {
        let cfg = Config::default();
        let mut r = RttEstimator::for_config(&cfg);
        for _ in 0..20 {
            r.on_sample(sample);
        }
        r
    }

    #[test]
    fn pto_is_two_path_rtts_plus_ack_delay_and_slack_capped_by_the_rto() {
        let cfg = Config::default();
        let slack = cfg.tail_probe_slack.unwrap();
        let mut r = rtt_with(Duration::from_micros(40));
        assert_eq!(
            pto(&r, &cfg),
            Some(Duration::from_micros(80) + cfg.ack_delay + slack)
        );
        // acks held back up to the ack delay raise the smoothed RTT, not
        // the probe timeout
        for _ in 0..20 {
            r.on_sample(Duration::from_micros(40) + cfg.ack_delay);
        }
        assert_eq!(
            pto(&r, &cfg),
            Some(Duration::from_micros(80) + cfg.ack_delay + slack)
        );
        // a long path: the RTO (srtt + 4 rttvar, about srtt here) is sooner
        let r = rtt_with(Duration::from_millis(100));
        assert_eq!(pto(&r, &cfg), Some(r.rto()));
        // no sample yet, or probes off: no probe
        assert_eq!(pto(&RttEstimator::for_config(&cfg), &cfg), None);
        let off = Config {
            tail_probe_slack: None,
            ..Config::default()
        };
        assert_eq!(pto(&rtt_with(Duration::from_micros(40)), &off), None);
    }

    #[test]
    fn a_probe_after_an_unanswered_probe_does_not_wait_for_the_ack_delay() {
        let cfg = Config::default();
        let r = rtt_with(Duration::from_micros(40));
        let slack = cfg.tail_probe_slack.unwrap();
        assert_eq!(
            pto_after_probe(&r, &cfg),
            Some(Duration::from_micros(80) + slack)
        );
        assert!(pto_after_probe(&r, &cfg) < pto(&r, &cfg));
    }

    #[test]
    fn late_answers_lengthen_the_wait_up_to_a_few_rtos_and_calm_shortens_it() {
        let cfg = Config::default();
        let r = rtt_with(Duration::from_micros(40));
        let base = pto(&r, &cfg).unwrap();
        let t0 = Instant::now();
        let rto_at = Some(t0 + Duration::from_secs(1));
        let mut p = TailProbe::default();
        p.arm(t0, &r, &cfg, rto_at);
        assert_eq!(p.deadline(), Some(t0 + base));
        // the first late answer doubles the wait, and moves the armed probe
        p.back_off(&r, &cfg);
        assert_eq!(p.extra(), base);
        assert_eq!(p.deadline(), Some(t0 + base * 2));
        p.back_off(&r, &cfg);
        assert_eq!(p.extra(), base * 2);
        for _ in 0..20 {
            p.back_off(&r, &cfg);
        }
        assert_eq!(p.extra(), r.rto() * MAX_EXTRA_RTOS);
        // a probe due no sooner than the timer is not armed at all
        let near = Some(t0 + base + p.extra() - Duration::from_micros(1));
        p.arm(t0, &r, &cfg, near);
        assert_eq!(p.deadline(), None);
        // calm: the extra halves every CALM_ACKS acknowledgments
        let before = p.extra();
        for _ in 1..CALM_ACKS {
            p.on_progress();
        }
        assert_eq!(p.extra(), before);
        p.on_progress();
        assert_eq!(p.extra(), before / 2);
        for _ in 0..CALM_ACKS * 40 {
            p.on_progress();
        }
        assert_eq!(p.extra(), Duration::ZERO);
        p.arm(t0, &r, &cfg, rto_at);
        assert_eq!(p.deadline(), Some(t0 + base));
        // a late answer resets the count towards calm
        p.back_off(&r, &cfg);
        for _ in 1..CALM_ACKS {
            p.on_progress();
        }
        p.back_off(&r, &cfg);
        assert_eq!(p.extra(), base * 2);
    }

    #[test]
    fn fires_a_bounded_number_of_times_per_arming() {
        let cfg = Config::default();
        let r = rtt_with(Duration::from_micros(40));
        let p_to = pto(&r, &cfg).unwrap();
        let again = pto_after_probe(&r, &cfg).unwrap();
        let t0 = Instant::now();
        let rto_at = Some(t0 + Duration::from_secs(1));
        let mut p = TailProbe::default();
        p.arm(t0, &r, &cfg, rto_at);
        let mut at = p.deadline().unwrap();
        assert_eq!(at, t0 + p_to);
        assert!(!p.fire(at - Duration::from_micros(1), &r, &cfg, rto_at));
        for k in 1..=MAX_TAIL_PROBES {
            assert!(p.fire(at, &r, &cfg, rto_at), "probe {k}");
            match p.deadline() {
                Some(next) => {
                    assert_eq!(next, at + again);
                    at = next;
                }
                None => assert_eq!(k, MAX_TAIL_PROBES),
            }
        }
        assert!(!p.fire(at + Duration::from_secs(1), &r, &cfg, rto_at));
        // new data does not bring more probes, only progress does
        p.on_new_data(at, &r, &cfg, rto_at);
        assert_eq!(p.deadline(), None);
        p.arm(at, &r, &cfg, rto_at);
        assert_eq!(p.deadline(), Some(at + p_to));
        p.on_new_data(at + p_to, &r, &cfg, rto_at);
        assert_eq!(p.deadline(), Some(at + p_to * 2));
        // not armed when the retransmission timer comes first
        p.arm(t0, &r, &cfg, Some(t0 + Duration::from_micros(50)));
        assert_eq!(p.deadline(), None);
    }
}
