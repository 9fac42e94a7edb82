//! A comparison run's results file (`results/<name>.json`): every record of
//! every run, the medians over the rounds, what failed, and how and where it
//! was measured.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::machine::Machine;
use crate::record::Record;
use crate::stats::Summary;

/// A run that failed (the comparison goes on without it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Benchmark name.
    pub bench: String,
    /// Implementation label.
    pub implementation: String,
    /// Round in which it failed.
    pub round: usize,
    /// The error.
    pub error: String,
}

/// How the results were produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The exact command line.
    pub command: String,
    /// Start time, UTC, ISO 8601.
    pub started: String,
    /// Wall-clock duration of the whole comparison, seconds.
    pub duration_s: f64,
    /// Preset (`full`, `quick`, `smoke`).
    pub preset: String,
    /// Rounds: every point is measured once per round, rounds interleave
    /// the implementations.
    pub rounds: usize,
    /// Implementations measured.
    pub impls: Vec<String>,
    /// Implementations left out, and why.
    pub skipped: Vec<(String, String)>,
    /// Where it ran.
    pub machine: Machine,
}

/// Everything a comparison produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// How and where.
    pub meta: Meta,
    /// Medians over the rounds, one per point and implementation.
    pub records: Vec<Record>,
    /// Every record of every run, with its `round`.
    pub runs: Vec<Record>,
    /// Runs that failed.
    pub failures: Vec<Failure>,
}

impl Results {
    /// Read a results file.
    pub fn load(path: &Path) -> Result<Results> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::io(format!("reading {}", path.display()), e))?;
        serde_json::from_str(&text).map_err(|e| BenchError::Parse {
            what: path.display().to_string(),
            why: e.to_string(),
        })
    }

    /// Write it as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|e| BenchError::Parse {
            what: "results".into(),
            why: e.to_string(),
        })?;
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))
    }
}

/// What distinguishes two points of one benchmark and size: the overlap
/// compute factor, the COMB method and work interval, the match-list length,
/// the ranks of a collective (or application kernel), the operation, ranks and compute factor of a
/// non-blocking collective, the one-sided operation (and the target's
/// compute time).
pub fn point_key(r: &Record) -> String {
    match r.bench.as_str() {
        "allreduce" | "bcast" | "app-cg" | "app-halo" | "app-coll" => {
            format!("{} ranks", r.extra_f64("ranks").unwrap_or(2.0))
        }
        "overlap" => format!("x{}", r.extra_f64("compute_factor").unwrap_or(0.0)),
        "nbc-overlap" => format!(
            "{} {} ranks x{}",
            r.extra_str("op").unwrap_or("?"),
            r.extra_f64("ranks").unwrap_or(2.0),
            r.extra_f64("compute_factor").unwrap_or(0.0)
        ),
        "nbc-progress" => format!(
            "{} {} ranks {}us",
            r.extra_str("op").unwrap_or("?"),
            r.extra_f64("ranks").unwrap_or(2.0),
            r.extra_f64("compute_us").unwrap_or(0.0)
        ),
        "comb" => format!(
            "{} {}us",
            r.extra_str("method").unwrap_or("?"),
            r.extra_f64("work_interval_us").unwrap_or(0.0)
        ),
        "matchlist" => format!("{} posted", r.extra_f64("posted").unwrap_or(0.0)),
        "rpc-rate" => format!(
            "{} {} clients",
            r.extra_str("op").unwrap_or("?"),
            r.extra_f64("clients").unwrap_or(1.0)
        ),
        "rpc-bulk" | "rpc-cpu" => r.extra_str("op").unwrap_or("?").to_string(),
        "rma-latency" => r.extra_str("op").unwrap_or("?").to_string(),
        "rma-overlap" => format!(
            "{}, target computes {} us",
            r.extra_str("op").unwrap_or("?"),
            r.extra_f64("compute_us").unwrap_or(0.0)
        ),
        _ => String::new(),
    }
}

/// Medians over rounds: records of the same benchmark, implementation,
/// size and [`point_key`] become one, whose `value` is the median of their
/// values, `min`/`max`/`mean` over those values, `reps` their number, and
/// whose other fields come from the run closest to the median. Order of
/// first appearance is kept.
pub fn aggregate(runs: &[Record]) -> Vec<Record> {
    let mut order: Vec<(String, String, u64, String)> = Vec::new();
    let mut groups: HashMap<(String, String, u64, String), Vec<&Record>> = HashMap::new();
    for r in runs {
        let k = (
            r.bench.clone(),
            r.implementation.clone(),
            r.size,
            point_key(r),
        );
        let g = groups.entry(k.clone()).or_default();
        if g.is_empty() {
            order.push(k);
        }
        g.push(r);
    }
    let mut out = Vec::with_capacity(order.len());
    for k in order {
        let Some(g) = groups.get(&k) else { continue };
        let mut vals: Vec<f64> = g.iter().map(|r| r.value).collect();
        let Some(s) = Summary::of(&mut vals) else {
            continue;
        };
        let Some(rep) = g.iter().min_by(|a, b| {
            (a.value - s.median)
                .abs()
                .total_cmp(&(b.value - s.median).abs())
        }) else {
            continue;
        };
        let mut r = (*rep).clone();
        r.extra.remove("round");
        r.extra
            .insert("reps_per_run".into(), serde_json::json!(rep.reps));
        r.value = s.median;
        r.min = s.min;
        r.max = s.max;
        r.mean = s.mean;
        r.reps = s.count as u32;
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(bench: &str, imp: &str, size: u64, value: f64, round: usize) -> Record {
        Record::point(bench, imp, size, value).with("round", round)
    }

    #[test]
    fn medians_over_rounds() {
        let mut runs = Vec::new();
        for (round, v) in [3.0, 1.0, 2.0].into_iter().enumerate() {
            runs.push(rec("latency", "mpi-tcp-thread", 8, v, round));
            runs.push(rec("latency", "openmpi-tcp", 8, v * 2.0, round));
            runs.push(rec("overlap", "mpich", 1024, v, round).with("compute_factor", 2.0));
            runs.push(rec("overlap", "mpich", 1024, 0.0, round).with("compute_factor", 0.0));
        }
        let agg = aggregate(&runs);
        assert_eq!(agg.len(), 4);
        assert_eq!(agg[0].implementation, "mpi-tcp-thread");
        assert_eq!(
            (agg[0].value, agg[0].min, agg[0].max, agg[0].reps),
            (2.0, 1.0, 3.0, 3)
        );
        assert_eq!(agg[1].value, 4.0);
        assert!(agg[0].extra.get("round").is_none());
        assert_eq!(point_key(&agg[2]), "x2");
        assert_eq!(point_key(&agg[3]), "x0");
        let coll = Record::point("bcast", "mpich", 8, 1.0).with("ranks", 4);
        assert_eq!(point_key(&coll), "4 ranks");
        let nbc = Record::point("nbc-overlap", "mpich", 8, 1.0)
            .with("op", "ibcast")
            .with("ranks", 4)
            .with("compute_factor", 2.0);
        assert_eq!(point_key(&nbc), "ibcast 4 ranks x2");
        let fao = Record::point("rma-overlap", "mpich", 8, 1.0)
            .with("op", "fetch_and_op")
            .with("compute_us", 10000.0);
        assert_eq!(point_key(&fao), "fetch_and_op, target computes 10000 us");
        for r in &agg {
            r.check().expect("sane");
        }
    }
}
