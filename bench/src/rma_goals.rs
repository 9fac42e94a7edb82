//! The one-sided (RMA) goals of issue 17, checked against a results file:
//!
//! - passive-target operations complete while the target computes: the
//!   origin's delay plus its lock–op–unlock time (`rma-overlap`) ends
//!   before the target's compute does, measured wall time
//!   (`target_compute_us`, else the nominal `compute_us`); peers without
//!   progress at the target wait for its next library call, after it;
//! - the 8-byte fetch-and-op latency over TCP is at most 0.8 × the faster
//!   TCP peer's;
//! - put bandwidth from 1 to 16 MB is at least the best peer's on the same
//!   kind of path (TCP against TCP, shared memory against shared memory).
//!
//! `openmpi-tcp` is no TCP reference here: on one node its windows use
//! `osc sm`, shared memory; `openmpi-tcp-pt2pt` is Open MPI's TCP path.

use crate::impls::{Impl, Level};
use crate::params::size_label;
use crate::record::Record;
use crate::report::fmt_value;
use crate::results::{point_key, Results};

/// The TCP paths of the peers' one-sided operations.
pub const TCP_PEERS: [&str; 2] = ["openmpi-tcp-pt2pt", "mpich-net"];
/// The shared-memory paths of the peers' one-sided operations
/// (`openmpi-tcp` included: its windows are in shared memory).
pub const SHM_PEERS: [&str; 3] = ["openmpi-sm", "openmpi-tcp", "mpich"];

/// One row of the goals table.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalRow {
    /// The goal.
    pub goal: String,
    /// Which point and implementation.
    pub point: String,
    /// The project's value.
    pub project: String,
    /// What it is compared with.
    pub reference: String,
    /// Met, missed, or nothing to decide.
    pub met: Option<bool>,
}

/// The project's MPI-level variants in the results, with their NAL.
fn mpi_variants(res: &Results) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    for r in res.records.iter().filter(|r| r.bench.starts_with("rma-")) {
        if v.iter().any(|(l, _)| *l == r.implementation) {
            continue;
        }
        if let Ok(Impl::Project {
            level: Level::Mpi,
            nal,
            ..
        }) = Impl::parse(&r.implementation)
        {
            v.push((r.implementation.clone(), nal));
        }
    }
    v
}

fn value(res: &Results, bench: &str, imp: &str, size: u64, key: &str) -> Option<f64> {
    res.records
        .iter()
        .find(|r| {
            r.bench == bench && r.implementation == imp && r.size == size && point_key(r) == key
        })
        .map(|r| r.value)
}

/// The peers of `names` that have the point, with their values.
fn peer_values(
    res: &Results,
    names: &[&str],
    bench: &str,
    size: u64,
    key: &str,
) -> Vec<(String, f64)> {
    names
        .iter()
        .filter_map(|p| value(res, bench, p, size, key).map(|v| (p.to_string(), v)))
        .collect()
}

fn list(peers: &[(String, f64)], unit: &str) -> String {
    peers
        .iter()
        .map(|(p, v)| format!("{p} {} {unit}", fmt_value(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reference peers for a project NAL: TCP peers for `tcp` (and `udp`,
/// the other network path), shared-memory peers otherwise.
fn peers_for(nal: &str) -> &'static [&'static str] {
    if nal == "tcp" || nal == "udp" {
        &TCP_PEERS
    } else {
        &SHM_PEERS
    }
}

/// The goal rows these results can decide (none without RMA records).
pub fn rows(res: &Results) -> Vec<GoalRow> {
    let mut out = Vec::new();
    let variants = mpi_variants(res);
    // 1. Completion while the target computes.
    let computing: Vec<&Record> = res
        .records
        .iter()
        .filter(|r| {
            r.bench == "rma-overlap"
                && r.extra_f64("compute_us").is_some_and(|c| c > 0.0)
                && variants.iter().any(|(l, _)| *l == r.implementation)
        })
        .collect();
    for r in computing {
        let c = r
            .extra_f64("target_compute_us")
            .filter(|&t| t > 0.0)
            .or(r.extra_f64("compute_us"))
            .unwrap_or(0.0);
        let delay = r.extra_f64("delay_us").unwrap_or(0.0);
        let key = point_key(r);
        let all_peers: Vec<&str> = TCP_PEERS.iter().chain(SHM_PEERS.iter()).copied().collect();
        let peers = peer_values(res, &all_peers, "rma-overlap", r.size, &key);
        out.push(GoalRow {
            goal: "passive target completes while the target computes (delay + lock–op–unlock < its compute)".into(),
            point: format!(
                "{} {key} (took {} us), {}",
                size_label(r.size),
                fmt_value(c),
                r.implementation
            ),
            project: format!("{} us", fmt_value(r.value)),
            reference: list(&peers, "us"),
            met: Some(delay + r.value < c),
        });
    }
    // 2. 8-byte fetch-and-op latency over TCP.
    for (imp, nal) in variants.iter().filter(|(_, n)| n == "tcp") {
        let Some(x) = value(res, "rma-latency", imp, 8, "fetch_and_op") else {
            continue;
        };
        let peers = peer_values(res, &TCP_PEERS, "rma-latency", 8, "fetch_and_op");
        let best = peers
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(_, v)| *v);
        out.push(GoalRow {
            goal: "8 B fetch_and_op latency ≤ 0.8 × the faster TCP peer".into(),
            point: format!("8 B, {imp} ({nal})"),
            project: format!("{} us", fmt_value(x)),
            reference: list(&peers, "us"),
            met: best.map(|b| x <= 0.8 * b),
        });
    }
    // 3. Put bandwidth 1-16 MB against the best peer on the same kind of path.
    for (imp, nal) in &variants {
        for size in [1u64 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20] {
            let Some(x) = value(res, "rma-bw", imp, size, "") else {
                continue;
            };
            let peers = peer_values(res, peers_for(nal), "rma-bw", size, "");
            let best = peers
                .iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(_, v)| *v);
            out.push(GoalRow {
                goal: "put bandwidth 1–16 MB ≥ the peers' (same kind of path)".into(),
                point: format!("{}, {imp}", size_label(size)),
                project: format!("{} MB/s", fmt_value(x)),
                reference: list(&peers, "MB/s"),
                met: best.map(|b| x >= b),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::results::{aggregate, Meta};

    fn results(runs: Vec<Record>) -> Results {
        Results {
            meta: Meta {
                command: "ptl-bench compare --benches rma".into(),
                started: "2000-01-01T00:00:00Z".into(),
                duration_s: 1.0,
                preset: "quick".into(),
                rounds: 1,
                impls: Vec::new(),
                skipped: Vec::new(),
                machine: Machine::default(),
            },
            records: aggregate(&runs),
            runs,
            failures: Vec::new(),
        }
    }

    fn overlap(imp: &str, v: f64) -> Record {
        Record::point("rma-overlap", imp, 8, v)
            .with("op", "put")
            .with("compute_us", 10_000.0)
            .with("delay_us", 1000.0)
            .with("target_compute_us", 5000.0)
    }

    #[test]
    fn rma_goals_use_the_right_references() {
        let runs = vec![
            overlap("mpi-tcp-thread", 40.0),
            // ends after the target's measured 5 ms, though within the nominal 10
            overlap("mpi-tcp-poll", 4500.0),
            overlap("openmpi-tcp-pt2pt", 9500.0),
            // the reference row (target idle) decides nothing
            Record::point("rma-overlap", "mpi-tcp-thread", 8, 30.0)
                .with("op", "put")
                .with("compute_us", 0.0),
            Record::point("rma-latency", "mpi-tcp-thread", 8, 20.0).with("op", "fetch_and_op"),
            Record::point("rma-latency", "openmpi-tcp-pt2pt", 8, 30.0).with("op", "fetch_and_op"),
            Record::point("rma-latency", "mpich-net", 8, 100.0).with("op", "fetch_and_op"),
            // shared memory: not a TCP reference
            Record::point("rma-latency", "openmpi-tcp", 8, 0.1).with("op", "fetch_and_op"),
            Record::point("rma-bw", "mpi-tcp-thread", 1 << 20, 500.0),
            Record::point("rma-bw", "mpich-net", 1 << 20, 400.0),
            Record::point("rma-bw", "openmpi-sm", 1 << 20, 5000.0),
            Record::point("rma-bw", "mpi-shm-thread", 1 << 20, 4000.0),
        ];
        let rows = rows(&results(runs));
        let find = |goal: &str, point: &str| {
            rows.iter()
                .find(|r| r.goal.contains(goal) && r.point.contains(point))
                .unwrap_or_else(|| panic!("no row {goal} {point}: {rows:?}"))
        };
        assert_eq!(find("while the target", "mpi-tcp-thread").met, Some(true));
        assert_eq!(find("while the target", "mpi-tcp-poll").met, Some(false));
        assert_eq!(
            rows.iter()
                .filter(|r| r.goal.contains("while the target"))
                .count(),
            2,
            "only project rows with compute: {rows:?}"
        );
        // 20 <= 0.8 * min(30, 100) = 24; openmpi-tcp (0.1, shared memory) is no reference.
        let fao = find("fetch_and_op", "mpi-tcp-thread");
        assert_eq!(fao.met, Some(true));
        assert!(!fao.reference.contains("openmpi-tcp "), "{fao:?}");
        assert_eq!(find("put bandwidth", "mpi-tcp-thread").met, Some(true));
        let shm = find("put bandwidth", "mpi-shm-thread");
        assert_eq!(shm.met, Some(false));
        assert!(shm.reference.contains("openmpi-sm"), "{shm:?}");
    }
}
