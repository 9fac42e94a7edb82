//! Round-trip time estimation and the retransmission timeout (RFC 6298).
//!
//! Samples come only from datagrams transmitted once (Karn's algorithm), so
//! an ack for a retransmission never corrupts the estimate. The RTO is
//! `srtt + 4·rttvar`, clamped to `[min, max]`; back-off doubles it per
//! consecutive expiry and is owned by the caller, which resets it on
//! progress (RFC 6298 §5.5–5.7).

use std::time::Duration;

/// How many times the smoothed RTT one sample may count for at most.
const OUTLIER: u32 = 8;

/// Smoothed RTT and variance of one peer.
#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    min_rtt: Option<Duration>,
    rttvar: Duration,
    initial: Duration,
    min: Duration,
    max: Duration,
    /// Doublings at most (see [`Config::max_backoff`](super::Config::max_backoff)).
    max_backoff: u32,
}

impl RttEstimator {
    pub(crate) fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        RttEstimator {
            srtt: None,
            min_rtt: None,
            rttvar: Duration::ZERO,
            initial,
            min,
            max,
            max_backoff: 16,
        }
    }

    /// The estimator a peer starts with under `cfg`.
    pub(crate) fn for_config(cfg: &super::Config) -> Self {
        RttEstimator {
            max_backoff: cfg.max_backoff,
            ..RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max)
        }
    }

    /// Feed one RTT measurement.
    ///
    /// A sample more than [`OUTLIER`] times the smoothed RTT is counted as
    /// that much: on a path whose round trip is tens of microseconds, an
    /// ack that takes 100 ms says the peer (or this process) was not
    /// running, not that the network slowed down, and taken whole it would
    /// inflate the RTO a thousandfold for the next dozen samples, making
    /// every loss in that time cost that much. A real increase is still
    /// followed, by up to 2× per sample.
    pub(crate) fn on_sample(&mut self, r: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        let r = match self.srtt {
            Some(s) => r.min(s * OUTLIER),
            None => r,
        };
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let err = srtt.max(r) - srtt.min(r);
                // rttvar = 3/4 rttvar + 1/4 |srtt - r|; srtt = 7/8 srtt + 1/8 r
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
    }

    /// The smoothed RTT, once there has been a sample.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The smallest RTT seen: an ack arriving sooner than this after a
    /// retransmission must be for an earlier transmission.
    pub(crate) fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The current RTO without back-off.
    pub(crate) fn rto(&self) -> Duration {
        match self.srtt {
            None => self.initial,
            Some(srtt) => (srtt + self.rttvar * 4).clamp(self.min, self.max),
        }
    }

    /// The RTO after `exp` consecutive expiries: doubled each time, capped.
    pub(crate) fn backed_off(&self, exp: u32) -> Duration {
        let base = self.rto();
        // 2^16 times any sane RTO exceeds `max`; stop doubling before overflow.
        base.checked_mul(1u32 << exp.min(self.max_backoff).min(16))
            .unwrap_or(self.max)
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_millis(50),
            Duration::from_millis(5),
            Duration::from_secs(2),
        )
    }

    #[test]
    fn initial_rto_before_any_sample() {
        let e = est();
        assert_eq!(e.rto(), Duration::from_millis(50));
        assert_eq!(e.srtt(), None);
    }

    #[test]
    fn follows_rfc6298_formulas() {
        let mut e = est();
        e.on_sample(Duration::from_millis(100));
        // first sample: srtt = r, rttvar = r/2, rto = r + 4 r/2 = 300 ms
        assert_eq!(e.srtt(), Some(Duration::from_millis(100)));
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.on_sample(Duration::from_millis(20));
        // rttvar = 3/4*50 + 1/4*80 = 57.5; srtt = 7/8*100 + 1/8*20 = 90
        assert_eq!(e.srtt(), Some(Duration::from_millis(90)));
        assert_eq!(e.rto(), Duration::from_millis(90 + 230));
    }

    #[test]
    fn clamps_to_min_and_max() {
        let mut e = est();
        e.on_sample(Duration::from_micros(10));
        for _ in 0..50 {
            e.on_sample(Duration::from_micros(10));
        }
        assert_eq!(e.rto(), Duration::from_millis(5));
        let mut e = est();
        e.on_sample(Duration::from_secs(10));
        assert_eq!(e.rto(), Duration::from_secs(2));
    }

    #[test]
    fn back_off_doubles_until_the_cap() {
        let mut e = est();
        for _ in 0..20 {
            e.on_sample(Duration::from_micros(100));
        }
        let base = e.rto();
        assert_eq!(base, Duration::from_millis(5));
        assert_eq!(e.backed_off(0), base);
        assert_eq!(e.backed_off(1), base * 2);
        assert_eq!(e.backed_off(4), base * 16);
        assert_eq!(e.backed_off(9), Duration::from_secs(2));
        assert_eq!(e.backed_off(u32::MAX), Duration::from_secs(2));
    }
}
