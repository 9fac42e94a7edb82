//! Fault injection for the socket driver: drop, duplicate and reorder
//! outgoing datagrams with a seeded random generator, so that tests of the
//! whole stack (portals, MPI) can run over a lossy network on loopback and
//! be reproduced from their seed.

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Probabilities (each in `0.0..=1.0`) of what happens to an outgoing
/// datagram, and the seed of the generator that decides.
///
/// Parsed from and printed as `loss=0.05,dup=0.01,reorder=0.02,seed=7`
/// (any subset, any order); that is the format of the `PTL_UDP_FAULT`
/// environment variable the runtime reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// The datagram is not sent.
    pub loss: f64,
    /// The datagram is sent twice.
    pub dup: f64,
    /// The datagram is held back and sent after the next one.
    pub reorder: f64,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            seed: 0,
        }
    }
}

/// A fault specification that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid fault specification {spec:?}: {why} (expected e.g. loss=0.05,dup=0.01,reorder=0.02,seed=7)")]
pub struct FaultParseError {
    spec: String,
    why: &'static str,
}

impl FromStr for FaultConfig {
    type Err = FaultParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| FaultParseError {
            spec: s.to_string(),
            why,
        };
        let mut f = FaultConfig::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| err("missing '='"))?;
            let prob = || -> Result<f64, FaultParseError> {
                let p: f64 = v.trim().parse().map_err(|_| err("not a number"))?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(err("probabilities must be within 0..=1"))
                }
            };
            match k.trim() {
                "loss" => f.loss = prob()?,
                "dup" => f.dup = prob()?,
                "reorder" => f.reorder = prob()?,
                "seed" => f.seed = v.trim().parse().map_err(|_| err("seed is not a u64"))?,
                _ => return Err(err("unknown key (loss, dup, reorder, seed)")),
            }
        }
        Ok(f)
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={},dup={},reorder={},seed={}",
            self.loss, self.dup, self.reorder, self.seed
        )
    }
}

/// What to do with one outgoing datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Send it.
    Send,
    /// Do not send it.
    Drop,
    /// Send it twice.
    Duplicate,
    /// Keep it and send it after the next datagram.
    Hold,
}

/// The seeded decision maker, plus what it decided (for statistics).
#[derive(Debug)]
pub struct FaultInjector {
    cfg: FaultConfig,
    rng: ChaCha8Rng,
    /// Datagrams dropped so far.
    pub dropped: u64,
    /// Datagrams duplicated so far.
    pub duplicated: u64,
    /// Datagrams held back so far.
    pub reordered: u64,
}

impl FaultInjector {
    /// An injector for `cfg`, its generator seeded with `cfg.seed ^ salt`
    /// (the driver passes its process id, so that processes started with
    /// one seed still make different decisions).
    pub fn new(cfg: FaultConfig, salt: u64) -> Self {
        FaultInjector {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ salt),
            dropped: 0,
            duplicated: 0,
            reordered: 0,
        }
    }

    /// Decide the fate of the next datagram.
    pub fn decide(&mut self) -> Fate {
        let x: f64 = self.rng.gen();
        let c = &self.cfg;
        if x < c.loss {
            self.dropped += 1;
            Fate::Drop
        } else if x < c.loss + c.dup {
            self.duplicated += 1;
            Fate::Duplicate
        } else if x < c.loss + c.dup + c.reorder {
            self.reordered += 1;
            Fate::Hold
        } else {
            Fate::Send
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prints_and_rejects() {
        let f: FaultConfig = "loss=0.05, dup=0.01,reorder=0.2,seed=9".parse().unwrap();
        assert_eq!(
            f,
            FaultConfig {
                loss: 0.05,
                dup: 0.01,
                reorder: 0.2,
                seed: 9
            }
        );
        assert_eq!(f.to_string().parse::<FaultConfig>().unwrap(), f);
        assert_eq!("".parse::<FaultConfig>().unwrap(), FaultConfig::default());
        for bad in ["loss", "loss=2", "loss=x", "jitter=1", "seed=-1"] {
            assert!(bad.parse::<FaultConfig>().is_err(), "{bad}");
        }
    }

    #[test]
    fn fates_follow_the_probabilities_and_the_seed() {
        let cfg = FaultConfig {
            loss: 0.1,
            dup: 0.05,
            reorder: 0.05,
            seed: 3,
        };
        let mut a = FaultInjector::new(cfg, 1);
        let mut b = FaultInjector::new(cfg, 1);
        let n = 100_000;
        let fates: Vec<Fate> = (0..n).map(|_| a.decide()).collect();
        assert!(
            fates.iter().all(|f| *f == b.decide()),
            "same seed, same fates"
        );
        let frac = |x: u64| x as f64 / n as f64;
        assert!((frac(a.dropped) - 0.1).abs() < 0.01, "{}", a.dropped);
        assert!((frac(a.duplicated) - 0.05).abs() < 0.01);
        assert!((frac(a.reordered) - 0.05).abs() < 0.01);
        let mut c = FaultInjector::new(cfg, 2);
        assert!(
            fates.iter().any(|f| *f != c.decide()),
            "another salt differs"
        );
        let mut none = FaultInjector::new(FaultConfig::default(), 0);
        assert!((0..1000).all(|_| none.decide() == Fate::Send));
    }
}
