//! The `apps` tables: per kernel and rank count, each transport's thread
//! and poll time with their ratio (issue 22's goal: thread/poll ≤ 1.0), and
//! each project variant's time against the peers that take the same path
//! (shared memory: `openmpi-sm`, `mpich`; network: `openmpi-tcp`,
//! `mpich-net`). Ratios are project / other: below 1 the project's
//! default mode or the project is faster.

use std::fmt::Write as _;
use std::path::Path;

use crate::params::Bench;
use crate::record::Record;
use crate::results::Results;

/// The project's NALs, in table order.
const NALS: [&str; 3] = ["tcp", "udp", "shm"];
/// Peers on the shared-memory path.
const SM_PEERS: [&str; 2] = ["openmpi-sm", "mpich"];
/// Peers on the network path (TCP on loopback).
const NET_PEERS: [&str; 2] = ["openmpi-tcp", "mpich-net"];

/// The median record of `imp` for this kernel and rank count.
fn find<'a>(recs: &'a [Record], bench: Bench, imp: &str, ranks: f64) -> Option<&'a Record> {
    recs.iter().find(|r| {
        r.bench == bench.name() && r.implementation == imp && r.extra_f64("ranks") == Some(ranks)
    })
}

fn ms(r: Option<&Record>) -> String {
    match r {
        Some(r) if r.value < 10.0 => format!("{:.2}", r.value),
        Some(r) => format!("{:.1}", r.value),
        None => "–".into(),
    }
}

/// `a / b` of two records' values, two decimals; "–" if either is missing.
fn ratio(a: Option<&Record>, b: Option<&Record>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.value > 0.0 => format!("{:.2}", a.value / b.value),
        _ => "–".into(),
    }
}

/// The rank counts measured for `bench`, ascending.
fn rank_counts(recs: &[Record], bench: Bench) -> Vec<f64> {
    let mut v: Vec<f64> = recs
        .iter()
        .filter(|r| r.bench == bench.name())
        .filter_map(|r| r.extra_f64("ranks"))
        .collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The peers (of the four) with a record for `bench`.
fn peers_present(recs: &[Record], bench: Bench, among: &[&'static str]) -> Vec<&'static str> {
    among
        .iter()
        .copied()
        .filter(|p| {
            recs.iter()
                .any(|r| r.bench == bench.name() && r.implementation == *p)
        })
        .collect()
}

/// The Markdown tables of the application kernels in `recs` (medians over
/// rounds, as in a results file's `records`); empty if there are none.
pub fn markdown(recs: &[Record]) -> String {
    let mut md = String::new();
    for b in Bench::APPS {
        let ranks = rank_counts(recs, b);
        if ranks.is_empty() {
            continue;
        }
        let size = recs
            .iter()
            .find(|r| r.bench == b.name())
            .map_or(0, |r| r.size);
        let _ = writeln!(
            md,
            "### {b} (size {size}): ms per solve, medians over rounds (lower is better)\n"
        );
        let nals: Vec<&str> = NALS
            .iter()
            .copied()
            .filter(|n| {
                recs.iter().any(|r| {
                    r.bench == b.name() && r.implementation.starts_with(&format!("mpi-{n}-"))
                })
            })
            .collect();
        let mut head = vec!["ranks".to_string()];
        for n in &nals {
            head.extend([
                format!("{n} thread"),
                format!("{n} poll"),
                format!("**{n} thread/poll**"),
            ]);
        }
        let sm = peers_present(recs, b, &SM_PEERS);
        let net = peers_present(recs, b, &NET_PEERS);
        head.extend(sm.iter().chain(&net).map(|p| p.to_string()));
        let _ = writeln!(md, "| {} |", head.join(" | "));
        let _ = writeln!(md, "|---:|{}", "---:|".repeat(head.len() - 1));
        for &k in &ranks {
            let mut row = vec![format!("{k}")];
            for n in &nals {
                let t = find(recs, b, &format!("mpi-{n}-thread"), k);
                let p = find(recs, b, &format!("mpi-{n}-poll"), k);
                row.extend([ms(t), ms(p), ratio(t, p)]);
            }
            row.extend(sm.iter().chain(&net).map(|p| ms(find(recs, b, p, k))));
            let _ = writeln!(md, "| {} |", row.join(" | "));
        }
        md.push('\n');
        // Each thread-mode (default) variant against the peers on its path.
        let mut pairs: Vec<(String, &str)> = Vec::new();
        for n in &nals {
            let peers = if *n == "shm" { &sm } else { &net };
            pairs.extend(peers.iter().map(|p| (format!("mpi-{n}-thread"), *p)));
        }
        if pairs.is_empty() {
            continue;
        }
        let _ = writeln!(md, "Ratio project (thread mode) / peer:\n");
        let heads: Vec<String> = pairs.iter().map(|(x, p)| format!("{x} / {p}")).collect();
        let _ = writeln!(md, "| ranks | {} |", heads.join(" | "));
        let _ = writeln!(md, "|---:|{}", "---:|".repeat(heads.len()));
        for &k in &ranks {
            let cells: Vec<String> = pairs
                .iter()
                .map(|(x, p)| ratio(find(recs, b, x, k), find(recs, b, p, k)))
                .collect();
            let _ = writeln!(md, "| {k} | {} |", cells.join(" | "));
        }
        md.push('\n');
    }
    md
}

/// `results/NAME.md` of an `apps` run: how and where it ran (with the
/// host's load averages before and after, `/proc/loadavg`'s first three
/// fields), the [`markdown`] tables, and the runs that failed.
pub fn document(res: &Results, json: &Path, load_before: &str, load_after: &str) -> String {
    let m = &res.meta;
    let mut md = format!(
        "# ptl-bench apps: {}\n\n- Command: `{}`\n- Measured: {}, {:.0} s, {} rounds per point \
         (median), implementations interleaved per kernel and rank count\n- Host load \
         average (1/5/15 min) before: {load_before}; after: {load_after}\n- Machine: {} ({} \
         usable CPUs)\n\n",
        json.display(),
        m.command,
        m.started,
        m.duration_s,
        m.rounds,
        m.machine.cpu,
        m.machine.cpus_allowed,
    );
    md += &markdown(&res.records);
    for f in &res.failures {
        let _ = writeln!(
            md,
            "- FAILED: {} {} round {}: {}",
            f.implementation, f.bench, f.round, f.error
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(b: Bench, imp: &str, ranks: usize, ms: f64) -> Record {
        Record::point(b.name(), imp, 256, ms).with("ranks", ranks)
    }

    #[test]
    fn thread_poll_and_peer_ratios() {
        let recs = vec![
            rec(Bench::AppCg, "mpi-tcp-thread", 4, 300.0),
            rec(Bench::AppCg, "mpi-tcp-poll", 4, 200.0),
            rec(Bench::AppCg, "mpi-shm-thread", 4, 100.0),
            rec(Bench::AppCg, "mpi-shm-poll", 4, 100.0),
            rec(Bench::AppCg, "openmpi-sm", 4, 50.0),
            rec(Bench::AppCg, "mpich-net", 4, 600.0),
            rec(Bench::AppCg, "mpi-tcp-thread", 2, 10.0),
        ];
        let md = markdown(&recs);
        assert!(md.contains("### app-cg (size 256)"), "{md}");
        // tcp thread/poll = 1.50, shm = 1.00; no udp columns; the peers.
        assert!(
            md.contains("| 4 | 300.0 | 200.0 | 1.50 | 100.0 | 100.0 | 1.00 | 50.0 | 600.0 |"),
            "{md}"
        );
        assert!(!md.contains("udp"), "{md}");
        // 2 ranks: only tcp thread measured, the rest blank.
        assert!(
            md.contains("| 2 | 10.0 | – | – | – | – | – | – | – |"),
            "{md}"
        );
        // shm against openmpi-sm (2.00), tcp against mpich-net (0.50).
        assert!(
            md.contains("mpi-tcp-thread / mpich-net | mpi-shm-thread / openmpi-sm"),
            "{md}"
        );
        assert!(md.contains("| 4 | 0.50 | 2.00 |"), "{md}");
        assert!(!md.contains("app-halo"));
        assert_eq!(markdown(&[]), "");
    }
}
