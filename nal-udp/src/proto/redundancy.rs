//! Redundant copies of small datagrams on a path that loses them.
//!
//! Every recovery mechanism of the protocol needs at least one probe
//! timeout (about two round trips plus the peer's ack delay) to notice the
//! loss of the last datagram of a flight. A latency-bound exchange — a
//! token passed back and forth, one small message per hop — pays that for
//! every loss: at 30 % loss on loopback about ten hops' worth per lost
//! token, so such a job ran 20× slower than without loss, whatever the
//! probes did. Sending a small sequenced datagram twice, back to back, on a
//! path that is losing datagrams makes the loss of both (9 % at 30 %
//! independent loss) the rare case; it costs one extra datagram per small
//! message, only while the loss lasts, and nothing on a clean path.
//!
//! Who decides: the receiver of a path is the only side that knows what
//! the path lost. The *sender* of a sequenced datagram marks it original,
//! retransmission or copy ([`Transmission`]); the receiver counts, among
//! the sequence numbers it receives for the first time, those that came
//! as a retransmission or a copy — their original never arrived — in an
//! exponentially weighted average ([`LossMeter`]), and reports it in every
//! datagram's header ([`wire::HeaderFields::loss_report`]). The sender
//! copies while the report is at least [`Config::copy_above_loss_ppm`].
//! Because copies are marked, the report measures the loss of originals
//! whether copies are on or not: turning them on does not make the report
//! fall and turn them off again. A spurious retransmission (a descheduled
//! peer, a slow ack) arrives as a duplicate and counts nothing, so a
//! loaded host with a clean path never turns copies on.
//!
//! Copies go right after their original: on a path whose losses come in
//! bursts both may be lost together, and the copy then costs a datagram
//! and saves nothing; the probes still recover the loss.

use super::config::Config;
use super::wire::{self, Transmission};

/// Weight of one arrival in the average: 1/32, so the report follows a
/// change of the path within a few dozen datagrams and one loss on a clean
/// path moves it by 3 %, which decays below the default threshold within
/// about 14 clean arrivals.
const SHIFT: u32 = 5;

/// The receiver's estimate of the loss on the path from one peer to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LossMeter {
    /// In units of 1/65536 ([`wire::LOSS_REPORT_ONE`] is every datagram).
    share: u32,
}

impl LossMeter {
    /// A sequence number arrived for the first time, as `how`.
    pub(crate) fn on_first_arrival(&mut self, how: Transmission) {
        let lost = u32::from(how != Transmission::Original);
        // share += (lost * ONE - share) / 32, in integers: converges to the
        // share of originals lost, never exceeds ONE.
        self.share = self.share - (self.share >> SHIFT) + ((lost * wire::LOSS_REPORT_ONE) >> SHIFT);
    }

    /// What to report to the peer.
    pub(crate) fn report(&self) -> u32 {
        self.share
    }
}

/// Whether a sequenced datagram of `len` bytes to a peer that reports
/// `peer_report` should be followed by a copy.
pub(crate) fn wants_copy(peer_report: u32, len: usize, cfg: &Config) -> bool {
    let Some(above) = cfg.copy_above_loss_ppm else {
        return false;
    };
    // report / ONE >= above / 10^6, without rounding the threshold.
    len <= cfg.copy_max_bytes
        && u64::from(peer_report) * 1_000_000 >= u64::from(above) * u64::from(wire::LOSS_REPORT_ONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(m: &LossMeter) -> f64 {
        f64::from(m.report()) / f64::from(wire::LOSS_REPORT_ONE)
    }

    #[test]
    fn the_report_follows_the_share_of_originals_lost() {
        let mut m = LossMeter::default();
        for _ in 0..1000 {
            m.on_first_arrival(Transmission::Original);
        }
        assert_eq!(m.report(), 0);
        // Three arrivals in ten are repairs: the report settles near 30 %.
        for i in 0..2000 {
            m.on_first_arrival(match i % 10 {
                0 => Transmission::Retransmission,
                1 | 2 => Transmission::Copy,
                _ => Transmission::Original,
            });
        }
        assert!((share(&m) - 0.3).abs() < 0.06, "{}", share(&m));
        for _ in 0..200 {
            m.on_first_arrival(Transmission::Original);
        }
        assert!(share(&m) < 0.01, "{}", share(&m));
    }

    #[test]
    fn the_report_never_exceeds_one() {
        let mut m = LossMeter::default();
        for _ in 0..10_000 {
            m.on_first_arrival(Transmission::Copy);
        }
        assert!(m.report() <= wire::LOSS_REPORT_ONE);
        assert!(share(&m) > 0.99);
    }

    #[test]
    fn one_loss_on_a_clean_path_turns_copies_on_only_briefly() {
        let cfg = Config::default();
        let mut m = LossMeter::default();
        m.on_first_arrival(Transmission::Retransmission);
        assert!(wants_copy(m.report(), 100, &cfg));
        let mut clean = 0;
        while wants_copy(m.report(), 100, &cfg) {
            m.on_first_arrival(Transmission::Original);
            clean += 1;
        }
        assert!(clean <= 16, "{clean}");
    }

    #[test]
    fn only_small_datagrams_are_copied_and_only_when_enabled() {
        let cfg = Config::default();
        let lossy = wire::LOSS_REPORT_ONE / 4;
        assert!(wants_copy(lossy, cfg.copy_max_bytes, &cfg));
        assert!(!wants_copy(lossy, cfg.copy_max_bytes + 1, &cfg));
        assert!(!wants_copy(0, 100, &cfg));
        let off = Config {
            copy_above_loss_ppm: None,
            ..Config::default()
        };
        assert!(!wants_copy(lossy, 100, &off));
    }
}
