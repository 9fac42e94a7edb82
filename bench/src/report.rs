//! Tables, plots and the performance document, all produced from a results
//! file ([`Results`]) so that no number is typed by hand:
//!
//! - `results/<name>.md`: the tables of one comparison;
//! - `results/<name>-<plot>.svg`: latency, bandwidth, overlap % and the
//!   collectives' latency (one plot per rank count) against size, and the
//!   non-blocking broadcast's and all-reduce's overlap at the largest
//!   compute factor (one plot per rank count);
//! - `docs/PERFORMANCE.md`: machine, command, goals, plots, tables, and a
//!   section for the human reading of the numbers, which is kept when the
//!   document is regenerated.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use crate::error::{BenchError, Result};
use crate::impls::{family_of, Family, Impl, Level};
use crate::nbc_overlap::NbcOp;
use crate::params::{size_label, Bench};
use crate::plot::{draw, Chart, Series};
use crate::record::Record;
use crate::results::{point_key, Results};

/// Start of the hand-written section of `PERFORMANCE.md`.
pub const READING_BEGIN: &str =
    "<!-- reading:begin (written by hand; kept by `ptl-bench report`) -->";
/// End of the hand-written section.
pub const READING_END: &str = "<!-- reading:end -->";

/// What an implementation label means, for the document.
pub fn describe(label: &str) -> String {
    if let Some(t) = crate::tool_peers::ToolPeer::parse(label) {
        return t.describe();
    }
    let base = label.trim_end_matches("-unpinned");
    let s = match base {
        "raw-tcp-busy" => "raw TCP ping-pong, busy-polled non-blocking sockets (the floor)".into(),
        "raw-tcp-blocking" => "raw TCP ping-pong, blocking reads".into(),
        "raw-udp-busy" => "raw UDP ping-pong, busy-polled".into(),
        "raw-udp-blocking" => "raw UDP ping-pong, blocking reads".into(),
        "raw-tcp" => "raw TCP stream, blocking writes, 1-byte ack per batch".into(),
        "openmpi-tcp" => {
            "Open MPI, ob1 + TCP BTL over loopback (its RMA windows use osc sm: shared memory)"
                .into()
        }
        "openmpi-tcp-pt2pt" => {
            "Open MPI, ob1 + TCP BTL over loopback, osc pt2pt (RMA as messages over TCP)".into()
        }
        "openmpi-sm" => "Open MPI, ob1 + shared-memory BTL (vader)".into(),
        "openmpi" => "Open MPI defaults".into(),
        "mpich" => "MPICH defaults (ch4:ucx, shared memory on one node)".into(),
        "mpich-net" => "MPICH with UCX restricted to TCP over loopback".into(),
        "rpc-tonic" => {
            "object store over gRPC: tonic 0.12 (HTTP/2 over TCP), data streamed in 1 MiB messages".into()
        }
        "rpc-raw-tcp" => {
            "object store over plain TCP sockets, no RPC layer: header, then the object's bytes on the connection (the store's floor)".into()
        }
        "rpc-portals-tcp" => {
            "object store over portals-rpc, standalone over TCP: one-sided bulk in the client's buffer".into()
        }
        _ => {
            let parts: Vec<&str> = base.split('-').collect();
            match parts.as_slice() {
                [lvl @ ("portals" | "mpi"), nal, prog, rest @ ..] => format!(
                    "portals-rs, {} level, {nal} NAL, {}",
                    if *lvl == "mpi" { "MPI" } else { "Portals" },
                    match (*prog, rest) {
                        ("thread", ["uring"]) => "progress thread polling with io_uring",
                        ("thread", _) => "progress thread",
                        _ => "progress only inside calls (polling)",
                    }
                ),
                _ => String::new(),
            }
        }
    };
    if base != label {
        format!("{s}, processes not pinned")
    } else {
        s
    }
}

/// Format a value with about three significant digits.
pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn bench_records<'r>(res: &'r Results, bench: &str) -> Vec<&'r Record> {
    res.records.iter().filter(|r| r.bench == bench).collect()
}

/// Implementation columns for a set of records: raw, project, peers, each
/// in the order of the run's implementation list.
fn columns(res: &Results, recs: &[&Record]) -> Vec<String> {
    let present: BTreeSet<&str> = recs.iter().map(|r| r.implementation.as_str()).collect();
    let mut cols: Vec<String> = res
        .meta
        .impls
        .iter()
        .filter(|i| present.contains(i.as_str()))
        .cloned()
        .collect();
    for p in &present {
        if !cols.iter().any(|c| c == p) {
            cols.push(p.to_string());
        }
    }
    cols.sort_by_key(|c| family_of(c));
    cols
}

/// Where an `nbc-overlap` row sorts: operation, rank count, size, factor.
type NbcOrder = (usize, u64, u64, u64);

/// Rows of `nbc-overlap`: (size, point key) sorted by operation (barrier,
/// broadcast, all-reduce), rank count, size and compute factor.
fn nbc_rows(recs: &[&Record]) -> Vec<(u64, String)> {
    let mut keyed: Vec<(NbcOrder, (u64, String))> = Vec::new();
    for r in recs {
        let op = r
            .extra_str("op")
            .and_then(NbcOp::from_name)
            .map_or(NbcOp::ALL.len(), |o| o as usize);
        let num = |k: &str| r.extra_f64(k).unwrap_or(0.0);
        // Factors sort by their bits: non-negative finite floats order so.
        let sort = (
            op,
            num("ranks") as u64,
            r.size,
            num("compute_factor").to_bits(),
        );
        let row = (r.size, point_key(r));
        if !keyed.iter().any(|(_, x)| *x == row) {
            keyed.push((sort, row));
        }
    }
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, row)| row).collect()
}

/// Rows: (size, point key), sorted by size, keys in order of appearance.
fn rows(recs: &[&Record]) -> Vec<(u64, String)> {
    let mut rows: Vec<(u64, String)> = Vec::new();
    for r in recs {
        let k = (r.size, point_key(r));
        if !rows.contains(&k) {
            rows.push(k);
        }
    }
    rows.sort_by_key(|(s, _)| *s);
    rows
}

fn find<'r>(recs: &[&'r Record], imp: &str, size: u64, key: &str) -> Option<&'r Record> {
    recs.iter()
        .find(|r| r.implementation == imp && r.size == size && point_key(r) == key)
        .copied()
}

/// The MPI peers' network paths: every project variant is divided by them.
/// (`openmpi-tcp`'s one-sided operations are shared memory; its `osc pt2pt`
/// variant is the TCP path there.)
pub const MPI_NET_PEERS: [&str; 3] = ["openmpi-tcp", "openmpi-tcp-pt2pt", "mpich-net"];
/// The Portals-level peers' TCP paths: the Portals-level variants are
/// divided by them too.
const PORTALS_NET_PEERS: [&str; 2] = ["ucx-tcp", "libfabric-tcp"];

/// The (project, peer) pairs of the ratio tables: every project column
/// over the MPI network paths (`openmpi-tcp`, `mpich-net`) and the
/// Portals-level columns also over the Portals-level TCP paths (`ucx-tcp`,
/// `libfabric-tcp`), those present; with none of these present, every
/// project column over every peer.
fn ratio_pairs(cols: &[String]) -> Vec<(String, String)> {
    let present = |names: &[&str]| -> Vec<String> {
        cols.iter()
            .filter(|c| names.contains(&c.as_str()))
            .cloned()
            .collect()
    };
    let (mpi_net, portals_net) = (present(&MPI_NET_PEERS), present(&PORTALS_NET_PEERS));
    let projects = cols.iter().filter(|c| family_of(c) == Family::Project);
    let mut pairs = Vec::new();
    if mpi_net.is_empty() && portals_net.is_empty() {
        let peers: Vec<&String> = cols
            .iter()
            .filter(|c| family_of(c) == Family::Peer)
            .collect();
        for x in projects {
            pairs.extend(peers.iter().map(|p| (x.clone(), p.to_string())));
        }
        return pairs;
    }
    for x in projects {
        pairs.extend(mpi_net.iter().map(|p| (x.clone(), p.clone())));
        let portals_level = matches!(
            Impl::parse(x),
            Ok(Impl::Project {
                level: Level::Portals,
                ..
            })
        );
        if portals_level {
            pairs.extend(portals_net.iter().map(|p| (x.clone(), p.clone())));
        }
    }
    pairs
}

/// [`ratio_pairs`] for one benchmark: the one-sided benchmarks leave out
/// `openmpi-tcp`, whose windows are shared memory on one node (its
/// `osc pt2pt` variant is the TCP path there).
fn ratio_pairs_for(bench: Bench, cols: &[String]) -> Vec<(String, String)> {
    let mut pairs = ratio_pairs(cols);
    if bench.is_rma() {
        pairs.retain(|(_, p)| p != "openmpi-tcp");
    }
    pairs
}

fn heading(bench: &str) -> String {
    let b = Bench::from_name(bench);
    let what = match b {
        Some(Bench::Latency) => "ping-pong half round trip",
        Some(Bench::Bandwidth) => "unidirectional streaming bandwidth",
        Some(Bench::Bibw) => "bidirectional bandwidth (both directions summed)",
        Some(Bench::PingpongBw) => {
            "ping-pong bandwidth = size / half round trip, one message in flight (fi_pingpong's MB/sec; not streaming)"
        }
        Some(Bench::Msgrate) => "8-byte message rate",
        Some(Bench::Overlap) => "overlap % = 100·(1 − wait/transfer), by compute factor",
        Some(Bench::Comb) => "CPU availability while 100 KB messages stream in (COMB)",
        Some(Bench::Matchlist) => "half round trip behind N posted receives",
        Some(Bench::Allreduce) => {
            "all_reduce, sum of size/8 doubles: average per call, max over the ranks, by rank count"
        }
        Some(Bench::Bcast) => {
            "broadcast of size bytes from rank 0: average per call, max over the ranks, by rank count"
        }
        Some(Bench::RpcRate) => "object store, 4 KB requests per second, all clients together",
        Some(Bench::RpcBulk) => {
            "object store, one client putting / getting objects of this size (raw-tcp: one TCP stream, the floor for both)"
        }
        Some(Bench::RpcCpu) => "object store, server CPU seconds (user + system) per GB moved by rpc-bulk",
        Some(Bench::NbcOverlap) => {
            "non-blocking collectives, overlap % = 100·(1 − (start + wait)/T0), T0 = the collective alone; \
             every rank computes factor × T0 between start and wait; max over the ranks; by \
             operation, rank count and factor"
        }
        Some(Bench::NbcProgress) => {
            "non-blocking collectives, % of iterations complete at one check after a long compute \
             with no MPI call (project: peek, no progress of its own; peers: MPI_Test); min over the \
             ranks; by operation, rank count and compute time"
        }
        Some(Bench::RmaLatency) => {
            "one-sided operation + flush in a passive-target epoch, µs per operation (fetch_and_op: 8 B, sum)"
        }
        Some(Bench::RmaBw) => "one-sided put bandwidth: windows of puts, then a flush, in one lock_all epoch",
        Some(Bench::RmaOverlap) => {
            "origin's lock(exclusive)–op–unlock time while the target computes without calling the library (≪ compute time needs progress at the target)"
        }
        Some(Bench::AppCg) => "application kernel: conjugate gradient, ms per solve, max over the ranks",
        Some(Bench::AppHalo) => "application kernel: 1-D halo exchange, ms per solve, max over the ranks",
        Some(Bench::AppColl) => {
            "application kernel: all_reduce 8 B + size B, broadcast, barrier per iteration; ms per solve"
        }
        None => "",
    };
    let dir = match b {
        Some(b) if b.higher_is_better() => "higher is better",
        Some(_) => "lower is better",
        None => "",
    };
    format!("{bench}: {what} ({dir})")
}

/// A Markdown table with columns `size | point | heads...`, one row per
/// point; `cell(size, key, column)` fills it.
fn write_table(
    md: &mut String,
    heads: &[String],
    rows: &[(u64, String)],
    cell: impl Fn(u64, &str, usize) -> String,
) {
    let _ = writeln!(md, "| size | point | {} |", heads.join(" | "));
    let _ = writeln!(md, "|---|---|{}", "---:|".repeat(heads.len()));
    for (size, key) in rows {
        let cells: Vec<String> = (0..heads.len()).map(|i| cell(*size, key, i)).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            size_label(*size),
            key,
            cells.join(" | ")
        );
    }
    md.push('\n');
}

/// The Markdown tables of every benchmark: medians per implementation, and
/// ratios project / peer.
pub fn tables(res: &Results) -> String {
    let mut md = String::new();
    for b in Bench::ALL {
        let nbc = b == Bench::NbcOverlap;
        let all = bench_records(res, b.name());
        let recs: Vec<&Record> = all
            .iter()
            .copied()
            // the overlap baseline rows carry no overlap value
            .filter(|r| {
                !(matches!(b, Bench::Overlap | Bench::NbcOverlap)
                    && r.extra_f64("compute_factor") == Some(0.0))
            })
            .collect();
        if recs.is_empty() {
            continue;
        }
        let unit = recs.first().map_or("", |r| r.unit.as_str());
        let cols = columns(res, &recs);
        let rws = if nbc { nbc_rows(&recs) } else { rows(&recs) };
        let _ = writeln!(md, "### {}\n", heading(b.name()));
        let _ = writeln!(md, "Medians over rounds, {unit}.\n");
        write_table(&mut md, &cols, &rws, |size, key, i| {
            find(&recs, &cols[i], size, key).map_or("–".into(), |r| fmt_value(r.value))
        });
        if nbc {
            // A ratio of overlaps near 0 % says nothing: the times instead.
            let _ = writeln!(
                md,
                "Time per iteration (start + compute + wait), µs, medians over rounds; \
                 x0 is T0, the collective alone:\n"
            );
            let rws = nbc_rows(&all);
            write_table(&mut md, &cols, &rws, |size, key, i| {
                find(&all, &cols[i], size, key)
                    .and_then(|r| r.extra_f64("total_us"))
                    .map_or("–".into(), fmt_value)
            });
            continue;
        }
        let pairs = ratio_pairs_for(b, &cols);
        if !pairs.is_empty() {
            let better = if b.higher_is_better() { "> 1" } else { "< 1" };
            let _ = writeln!(
                md,
                "Ratio project / peer, same run ({better} means the project is better):\n"
            );
            let head: Vec<String> = pairs.iter().map(|(x, p)| format!("{x} / {p}")).collect();
            write_table(&mut md, &head, &rws, |size, key, i| {
                let (x, p) = &pairs[i];
                match (find(&recs, x, size, key), find(&recs, p, size, key)) {
                    (Some(a), Some(c)) if c.value > 0.0 => format!("{:.2}", a.value / c.value),
                    _ => "–".into(),
                }
            });
        }
    }
    md
}

fn value_of(res: &Results, bench: &str, imp: &str, size: u64, key: &str) -> Option<f64> {
    res.records
        .iter()
        .find(|r| {
            r.bench == bench && r.implementation == imp && r.size == size && point_key(r) == key
        })
        .map(|r| r.value)
}

/// The issue's goals, checked against the results. Every number comes from
/// the results file.
pub fn goals(res: &Results) -> String {
    let mut md =
        String::from("| goal | point | project | reference | result |\n|---|---|---:|---:|---|\n");
    let mut any = false;
    let mut row =
        |goal: &str, point: String, proj: String, reference: String, met: Option<bool>| {
            any = true;
            let verdict = match met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "–",
            };
            let _ = writeln!(
                md,
                "| {goal} | {point} | {proj} | {reference} | {verdict} |"
            );
        };
    // 1. MPI small-message latency over TCP <= Open MPI's TCP BTL.
    for imp in ["mpi-tcp-thread", "mpi-tcp-poll"] {
        for size in [0u64, 8] {
            if let (Some(x), Some(o)) = (
                value_of(res, "latency", imp, size, ""),
                value_of(res, "latency", "openmpi-tcp", size, ""),
            ) {
                row(
                    "MPI latency over TCP ≤ openmpi-tcp",
                    format!("{} B, {imp}", size),
                    format!("{} us", fmt_value(x)),
                    format!("{} us ({:.2}×)", fmt_value(o), x / o),
                    Some(x <= o),
                );
            }
        }
    }
    // 2. Bandwidth at 1-4 MB >= Open MPI's TCP BTL.
    for imp in ["mpi-tcp-thread", "mpi-tcp-poll"] {
        for size in [1u64 << 20, 2 << 20, 4 << 20] {
            if let (Some(x), Some(o)) = (
                value_of(res, "bandwidth", imp, size, ""),
                value_of(res, "bandwidth", "openmpi-tcp", size, ""),
            ) {
                row(
                    "MPI bandwidth 1–4 MB ≥ openmpi-tcp",
                    format!("{}, {imp}", size_label(size)),
                    format!("{} MB/s", fmt_value(x)),
                    format!("{} MB/s ({:.2}×)", fmt_value(o), x / o),
                    Some(x >= o),
                );
            }
        }
    }
    // 3. Overlap >= 90 % for 256 KB-4 MB with compute >= 2x transfer, thread mode.
    let overlap_points: Vec<&Record> = res
        .records
        .iter()
        .filter(|r| {
            r.bench == "overlap"
                && r.implementation == "mpi-tcp-thread"
                && (256 << 10..=4 << 20).contains(&r.size)
                && r.extra_f64("compute_factor").is_some_and(|f| f >= 2.0)
        })
        .collect();
    for r in overlap_points {
        let key = point_key(r);
        let others: Vec<String> = ["mpi-tcp-poll", "openmpi-tcp", "mpich-net"]
            .iter()
            .filter_map(|p| {
                value_of(res, "overlap", p, r.size, &key).map(|v| format!("{p} {}", fmt_value(v)))
            })
            .collect();
        row(
            "overlap ≥ 90 % (thread mode, ≥ 256 KB, compute ≥ 2× transfer)",
            format!("{} {key}", size_label(r.size)),
            format!("{} %", fmt_value(r.value)),
            others.join(", "),
            Some(r.value >= 90.0),
        );
    }
    // 4. CPU availability >= 90 % while receiving 100 KB messages.
    for r in res
        .records
        .iter()
        .filter(|r| r.bench == "comb" && r.implementation == "mpi-tcp-thread")
    {
        let key = point_key(r);
        let others: Vec<String> = ["mpi-tcp-poll", "openmpi-tcp", "mpich-net"]
            .iter()
            .filter_map(|p| {
                value_of(res, "comb", p, r.size, &key).map(|v| format!("{p} {}", fmt_value(v)))
            })
            .collect();
        row(
            "CPU availability ≥ 90 % (100 KB stream)",
            format!("{key}, {}", r.implementation),
            format!("{} %", fmt_value(r.value)),
            others.join(", "),
            Some(r.value >= 90.0),
        );
    }
    for g in crate::rma_goals::rows(res) {
        row(&g.goal, g.point, g.project, g.reference, g.met);
    }
    if any {
        md
    } else {
        "No goal could be checked: the results lack the points they need.\n".into()
    }
}

/// The records of `bench` that `keep` accepts, grouped by [`point_key`]
/// (keys in sorted order).
fn by_key<'r>(
    res: &'r Results,
    bench: &str,
    keep: impl Fn(&Record) -> bool,
) -> BTreeMap<String, Vec<&'r Record>> {
    let mut groups: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in bench_records(res, bench).into_iter().filter(|r| keep(r)) {
        groups.entry(point_key(r)).or_default().push(r);
    }
    groups
}

/// The charts of a results file: latency, bandwidth, bidirectional
/// bandwidth against size, overlap % against size for each compute factor,
/// and the collectives' latency against size for each rank count. Returns
/// (file stem suffix, chart).
pub fn charts(res: &Results) -> Vec<(String, Chart)> {
    let series_of = |recs: &[&Record], res: &Results| -> Vec<Series> {
        columns(res, recs)
            .into_iter()
            .map(|c| Series {
                points: recs
                    .iter()
                    .filter(|r| r.implementation == c)
                    .map(|r| (r.size, r.value))
                    .collect(),
                label: c,
            })
            .collect()
    };
    let mut out = Vec::new();
    for (b, title, y, log) in [
        (
            Bench::Latency,
            "Latency: ping-pong half round trip",
            "half round trip (us)",
            true,
        ),
        (
            Bench::Bandwidth,
            "Bandwidth: unidirectional, window of sends",
            "MB/s (10^6 B/s)",
            true,
        ),
        (
            Bench::Bibw,
            "Bidirectional bandwidth",
            "MB/s, both directions",
            true,
        ),
        (
            Bench::PingpongBw,
            "Ping-pong bandwidth: size / half round trip",
            "MB/s (10^6 B/s)",
            true,
        ),
        (
            Bench::RmaBw,
            "One-sided put bandwidth: windows of puts, then a flush",
            "MB/s (10^6 B/s)",
            true,
        ),
    ] {
        let recs = bench_records(res, b.name());
        if !recs.is_empty() {
            out.push((
                b.name().to_string(),
                Chart {
                    title: title.into(),
                    y_desc: y.into(),
                    log_y: log,
                    y_range: None,
                    series: series_of(&recs, res),
                },
            ));
        }
    }
    let overlap = by_key(res, "overlap", |r| {
        r.extra_f64("compute_factor").is_some_and(|f| f > 0.0)
    });
    for (key, recs) in overlap {
        out.push((
            format!("overlap-{key}"),
            Chart {
                title: format!(
                    "Overlap, compute = {} transfer time",
                    key.trim_start_matches('x').to_string() + "×"
                ),
                y_desc: "overlap % (100·(1 − wait/transfer))".into(),
                log_y: false,
                y_range: Some((0.0, 105.0)),
                series: series_of(&recs, res),
            },
        ));
    }
    // Non-blocking broadcast and all-reduce: overlap against size at the
    // largest compute factor, per rank count (the barrier has one size).
    let top = bench_records(res, Bench::NbcOverlap.name())
        .iter()
        .filter_map(|r| r.extra_f64("compute_factor"))
        .fold(0.0f64, f64::max);
    let nbc = by_key(res, Bench::NbcOverlap.name(), |r| {
        top > 0.0
            && r.extra_f64("compute_factor") == Some(top)
            && r.extra_str("op") != Some(NbcOp::Ibarrier.name())
    });
    for (key, recs) in nbc {
        out.push((
            format!(
                "nbc-overlap-{}",
                key.replace(" ranks", "ranks").replace(' ', "-")
            ),
            Chart {
                title: format!("Non-blocking collective overlap, {key} (compute = factor × T0)"),
                y_desc: "overlap % (100·(1 − (start + wait)/T0))".into(),
                log_y: false,
                y_range: Some((0.0, 105.0)),
                series: series_of(&recs, res),
            },
        ));
    }
    for (b, what) in [
        (Bench::Allreduce, "all_reduce (sum of doubles)"),
        (Bench::Bcast, "broadcast from rank 0"),
    ] {
        for (key, recs) in by_key(res, b.name(), |_| true) {
            out.push((
                format!("{}-{}", b.name(), key.replace(' ', "")),
                Chart {
                    title: format!("{what}, {key}"),
                    y_desc: "us per call (max over ranks)".into(),
                    log_y: true,
                    y_range: None,
                    series: series_of(&recs, res),
                },
            ));
        }
    }
    out
}

/// Draw every chart as `<dir>/<name>-<chart>.svg`; the files written.
pub fn write_plots(res: &Results, dir: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (suffix, chart) in charts(res) {
        let path = dir.join(format!("{name}-{suffix}.svg"));
        if draw(&chart, &path)? {
            files.push(path);
        }
    }
    Ok(files)
}

/// `to` relative to the directory `from` (both relative to the same base or
/// both absolute).
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let abs = |p: &Path| -> PathBuf {
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().unwrap_or_default().join(p)
        };
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                c => out.push(c),
            }
        }
        out
    };
    let (f, t) = (abs(from), abs(to));
    let fc: Vec<_> = f.components().collect();
    let tc: Vec<_> = t.components().collect();
    let common = fc.iter().zip(&tc).take_while(|(a, b)| a == b).count();
    let mut r = PathBuf::new();
    for _ in common..fc.len() {
        r.push("..");
    }
    for c in &tc[common..] {
        r.push(c);
    }
    r
}

/// The range of the core-to-core line transfer times measured after the
/// runs (`c2c_ns`, see `c2c.rs`), if any run has one.
fn c2c_line(runs: &[Record]) -> Option<String> {
    let ns: Vec<f64> = runs.iter().filter_map(|r| r.extra_f64("c2c_ns")).collect();
    let lo = ns.iter().copied().reduce(f64::min)?;
    let hi = ns.iter().copied().reduce(f64::max)?;
    Some(format!(
        "- Core-to-core cache-line transfer after each tight-loop run (`c2c_ns`): {lo:.0}–{hi:.0} ns{}",
        if hi > 2.0 * lo {
            " — the CPUs' placement changed during the run: compare shared-memory points only between runs with similar `c2c_ns` (see `bench/src/c2c.rs`)"
        } else {
            ""
        }
    ))
}

fn header(res: &Results, json: &str) -> String {
    let m = &res.meta;
    let mc = &m.machine;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "- Results file: `{json}` ({} points from {} runs)",
        res.records.len(),
        res.runs.len()
    );
    let _ = writeln!(
        md,
        "- Measured: {}, {:.0} s, preset `{}`, {} rounds per point (median reported), implementations interleaved per benchmark",
        m.started, m.duration_s, m.preset, m.rounds
    );
    let _ = writeln!(
        md,
        "- Machine: {} ({} logical CPUs, {} usable; {} GiB), {}",
        mc.cpu, mc.cpus, mc.cpus_allowed, mc.memory_gib, mc.kernel
    );
    if let Some(line) = c2c_line(&res.runs) {
        let _ = writeln!(md, "{line}");
    }
    let _ = writeln!(
        md,
        "- Software: {}; Open MPI: {}; MPICH: {}; UCX: {}; libfabric: {}",
        or_dash(&mc.rustc),
        or_dash(&mc.openmpi),
        or_dash(&mc.mpich),
        or_dash(&mc.ucx),
        or_dash(&mc.libfabric)
    );
    let _ = writeln!(md, "- Command:\n\n  ```sh\n  {}\n  ```\n", m.command);
    let _ = writeln!(md, "| implementation | what |\n|---|---|");
    for i in &m.impls {
        let _ = writeln!(md, "| `{i}` | {} |", describe(i));
    }
    md.push('\n');
    if !m.skipped.is_empty() {
        let _ = writeln!(md, "Left out:\n");
        for (what, why) in &m.skipped {
            let _ = writeln!(md, "- `{what}`: {why}");
        }
        md.push('\n');
    }
    if !res.failures.is_empty() {
        let _ = writeln!(
            md,
            "Failed runs (the implementation sat out the rest of that benchmark):\n"
        );
        for f in &res.failures {
            let first = f.error.lines().next().unwrap_or("");
            let _ = writeln!(
                md,
                "- `{}` {} round {}: {first}",
                f.implementation, f.bench, f.round
            );
        }
        md.push('\n');
    }
    md
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "–"
    } else {
        s
    }
}

/// Image links to the plots (relative to `dir`, where the Markdown file
/// lives), then the tables.
fn plots_and_tables(md: &mut String, res: &Results, dir: &Path, plots: &[PathBuf]) {
    for p in plots {
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        let _ = writeln!(md, "![{stem}]({})\n", relative(dir, p).display());
    }
    *md += "## Tables\n\n";
    *md += &tables(res);
}

/// `results/<name>.md`: header, goals, plots and tables of one comparison.
pub fn results_markdown(res: &Results, json: &Path, plots: &[PathBuf]) -> String {
    let dir = json.parent().unwrap_or(Path::new("."));
    let mut md = format!("# ptl-bench results: {}\n\n", json.display());
    md += &header(res, &json.display().to_string());
    md += "## Goals\n\n";
    md += &goals(res);
    md += "\n## Plots\n\n";
    plots_and_tables(&mut md, res, dir, plots);
    md
}

/// The hand-written reading kept from an existing document (between the
/// markers), or a placeholder.
fn kept_reading(existing: Option<&str>) -> String {
    existing
        .and_then(|d| {
            let a = d.find(READING_BEGIN)? + READING_BEGIN.len();
            let b = d[a..].find(READING_END)? + a;
            Some(d[a..b].trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            "_To be written after the measured run: where the project wins, where it loses, \
             and why (with profiles for every missed goal). Only numbers that appear in the \
             generated tables above or below may be quoted._"
                .to_string()
        })
}

/// `docs/PERFORMANCE.md` for these results. `doc` is where it will be
/// written (for relative links), `existing` its current text (its reading
/// section is kept).
pub fn performance_doc(
    res: &Results,
    json: &Path,
    plots: &[PathBuf],
    doc: &Path,
    existing: Option<&str>,
) -> String {
    let doc_dir = doc.parent().unwrap_or(Path::new("."));
    let json_rel = relative(doc_dir, json);
    let mut md = String::from("# Performance\n\n");
    let _ = writeln!(
        md,
        "<!-- Generated by `ptl-bench report {}` from the results file; every number below comes \
         from it. Edit only the Reading section; re-run the report for the rest. -->\n",
        json.display()
    );
    md += "portals-rs against the physical floor (raw sockets on loopback) and the MPI libraries \
           users would otherwise pick, measured side by side in one run by `ptl-bench compare`. \
           Project / peer ratios compare numbers from that same run.\n\n";
    md += &header(res, &json_rel.display().to_string());
    md += "## Goals (issue 6)\n\n";
    md += &goals(res);
    md += "\n## Reading\n\n";
    md += READING_BEGIN;
    md += "\n\n";
    md += &kept_reading(existing);
    md += "\n\n";
    md += READING_END;
    md += "\n\n## Plots\n\n";
    plots_and_tables(&mut md, res, doc_dir, plots);
    md
}

/// Regenerate the tables, plots and (with `doc`) the performance document
/// from a results file. Returns the files written.
pub fn report(json: &Path, doc: Option<&Path>) -> Result<Vec<PathBuf>> {
    let res = Results::load(json)?;
    let dir = json
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = json
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .ok_or_else(|| BenchError::Invalid(format!("{} has no file name", json.display())))?;
    let mut written = write_plots(&res, dir, &name)?;
    let plots = written.clone();
    let md_path = dir.join(format!("{name}.md"));
    std::fs::write(&md_path, results_markdown(&res, json, &plots))
        .map_err(|e| BenchError::io(format!("writing {}", md_path.display()), e))?;
    written.push(md_path);
    if let Some(doc) = doc {
        let existing = std::fs::read_to_string(doc).ok();
        let text = performance_doc(&res, json, &plots, doc, existing.as_deref());
        if let Some(parent) = doc.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| BenchError::io(format!("creating {}", parent.display()), e))?;
        }
        std::fs::write(doc, text)
            .map_err(|e| BenchError::io(format!("writing {}", doc.display()), e))?;
        written.push(doc.to_path_buf());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::results::{aggregate, Meta};

    fn rec(bench: &str, imp: &str, size: u64, v: f64) -> Record {
        Record::point(bench, imp, size, v)
    }

    fn sample() -> Results {
        let mut runs = Vec::new();
        for (imp, k) in [
            ("raw-tcp-busy", 0.5),
            ("mpi-tcp-thread", 1.0),
            ("openmpi-tcp", 1.2),
        ] {
            for size in [0u64, 8, 1024, 1 << 20] {
                runs.push(rec("latency", imp, size, k * (5.0 + size as f64 / 1000.0)));
            }
        }
        for imp in ["mpi-tcp-thread", "openmpi-tcp"] {
            for size in [256u64 << 10, 1 << 20] {
                runs.push(rec("overlap", imp, size, 95.0).with("compute_factor", 2.0));
                runs.push(rec("overlap", imp, size, 0.0).with("compute_factor", 0.0));
                runs.push(rec("bandwidth", imp, size, 1000.0));
            }
            for ranks in [2, 4] {
                for size in [8u64, 1 << 20] {
                    runs.push(
                        rec("allreduce", imp, size, 10.0 * ranks as f64).with("ranks", ranks),
                    );
                }
            }
            for (op, size) in [("ibarrier", 0u64), ("iallreduce", 8), ("ibcast", 8)] {
                for f in [0.0, 2.0] {
                    let v = if f > 0.0 { 80.0 } else { 0.0 };
                    runs.push(
                        rec("nbc-overlap", imp, size, v)
                            .with("op", op)
                            .with("ranks", 4)
                            .with("compute_factor", f)
                            .with("total_us", 10.0 * (1.0 + f)),
                    );
                }
            }
            runs.push(
                rec("comb", imp, 100 << 10, 91.0)
                    .with("method", "poll")
                    .with("work_interval_us", 1000.0),
            );
        }
        Results {
            meta: Meta {
                command: "ptl-bench compare --quick".into(),
                started: "2000-01-01T00:00:00Z".into(),
                duration_s: 1.0,
                preset: "quick".into(),
                rounds: 1,
                impls: vec![
                    "raw-tcp-busy".into(),
                    "mpi-tcp-thread".into(),
                    "openmpi-tcp".into(),
                ],
                skipped: vec![("udp NAL".into(), "not built".into())],
                machine: Machine::default(),
            },
            records: aggregate(&runs),
            runs,
            failures: Vec::new(),
        }
    }

    #[test]
    fn the_header_gives_the_core_to_core_range_and_flags_a_placement_change() {
        let rec = |ns: Option<f64>| {
            let r = Record::of_values(Bench::Latency, "openmpi-sm", 8, 10, &mut [0.1, 0.2])
                .expect("record");
            match ns {
                Some(ns) => r.with("c2c_ns", ns),
                None => r,
            }
        };
        assert_eq!(c2c_line(&[rec(None)]), None);
        let steady = c2c_line(&[rec(Some(48.0)), rec(None), rec(Some(61.0))]).expect("a line");
        assert!(steady.contains("48–61 ns"), "{steady}");
        assert!(!steady.contains("placement changed"), "{steady}");
        let flipped = c2c_line(&[rec(Some(48.0)), rec(Some(250.0))]).expect("a line");
        assert!(flipped.contains("48–250 ns"), "{flipped}");
        assert!(flipped.contains("placement changed"), "{flipped}");
    }

    #[test]
    fn tables_goals_and_doc() {
        let res = sample();
        let t = tables(&res);
        assert!(
            t.contains("| size | point | raw-tcp-busy | mpi-tcp-thread | openmpi-tcp |"),
            "{t}"
        );
        assert!(t.contains("mpi-tcp-thread / openmpi-tcp"), "{t}");
        assert!(t.contains("| 1M | x2 |"), "{t}");
        assert!(!t.contains("| x0 |"), "{t}");
        assert!(t.contains("### allreduce: all_reduce"), "{t}");
        assert!(t.contains("| 8 | 4 ranks | 40.0 | 40.0 |"), "{t}");
        assert!(t.contains("| 1M | 2 ranks | 1.00 |"), "{t}");
        // nbc-overlap: rows by operation, the baselines only in the
        // times table, no ratios.
        let nbc = &t[t.find("### nbc-overlap").expect("nbc-overlap table")..];
        let (pct, times) = nbc.split_at(nbc.find("Time per iteration").expect("times"));
        let order: Vec<usize> = ["| 0 | ibarrier", "| 8 | ibcast", "| 8 | iallreduce"]
            .iter()
            .map(|k| pct.find(k).expect(k))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{pct}");
        assert!(
            pct.contains("| 8 | ibcast 4 ranks x2 | 80.0 | 80.0 |"),
            "{pct}"
        );
        assert!(!pct.contains("x0 |") && !pct.contains("Ratio"), "{pct}");
        assert!(
            times.contains("| 8 | ibcast 4 ranks x0 | 10.0 | 10.0 |"),
            "{times}"
        );
        assert!(
            times.contains("| 8 | ibcast 4 ranks x2 | 30.0 | 30.0 |"),
            "{times}"
        );
        let g = goals(&res);
        assert!(
            g.contains("MPI latency over TCP") && g.contains("met"),
            "{g}"
        );
        assert!(g.contains("CPU availability"), "{g}");
        let dir = std::env::temp_dir().join(format!("ptl-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("results")).expect("dir");
        let json = dir.join("results").join("t.json");
        res.save(&json).expect("save");
        let doc = dir.join("docs").join("PERFORMANCE.md");
        let files = report(&json, Some(&doc)).expect("report");
        assert!(
            files.iter().any(|f| f.ends_with("t-latency.svg")),
            "{files:?}"
        );
        for f in [
            "t-overlap-x2.svg",
            "t-allreduce-2ranks.svg",
            "t-allreduce-4ranks.svg",
            "t-nbc-overlap-ibcast-4ranks-x2.svg",
            "t-nbc-overlap-iallreduce-4ranks-x2.svg",
        ] {
            assert!(files.iter().any(|p| p.ends_with(f)), "{f}: {files:?}");
        }
        let text = std::fs::read_to_string(&doc).expect("doc");
        assert!(text.contains("](../results/t-latency.svg)"), "{text}");
        assert!(text.contains("To be written after the measured run"));
        // The reading survives regeneration.
        let edited = text.replace("_To be written after the measured run", "HAND WRITTEN _x");
        std::fs::write(&doc, edited).expect("edit");
        report(&json, Some(&doc)).expect("report again");
        let again = std::fs::read_to_string(&doc).expect("doc");
        assert!(again.contains("HAND WRITTEN"), "{again}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ratios_by_level() {
        let cols: Vec<String> = [
            "portals-tcp-thread",
            "mpi-tcp-thread",
            "openmpi-tcp",
            "ucx-tcp",
            "ucx-shm",
            "libfabric-tcp",
        ]
        .map(String::from)
        .to_vec();
        let pairs = ratio_pairs(&cols);
        let has = |x: &str, p: &str| pairs.iter().any(|(a, b)| a == x && b == p);
        assert!(has("portals-tcp-thread", "openmpi-tcp"));
        assert!(has("portals-tcp-thread", "ucx-tcp"));
        assert!(has("portals-tcp-thread", "libfabric-tcp"));
        assert!(has("mpi-tcp-thread", "openmpi-tcp"));
        assert!(
            !has("mpi-tcp-thread", "ucx-tcp"),
            "MPI level over a Portals-level peer"
        );
        assert!(!pairs.iter().any(|(_, p)| p == "ucx-shm"), "{pairs:?}");
        assert_eq!(pairs.len(), 4, "{pairs:?}");
        // One-sided: openmpi-tcp is shared memory there, its pt2pt variant the TCP path.
        let rma_cols: Vec<String> = ["mpi-tcp-thread", "openmpi-tcp", "openmpi-tcp-pt2pt"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            ratio_pairs_for(Bench::RmaLatency, &rma_cols),
            vec![(
                "mpi-tcp-thread".to_string(),
                "openmpi-tcp-pt2pt".to_string()
            )]
        );
        assert_eq!(ratio_pairs_for(Bench::Latency, &rma_cols).len(), 2);
        // No network path at all: every peer.
        let only_shm: Vec<String> = ["portals-tcp-poll", "libfabric-shm"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            ratio_pairs(&only_shm),
            vec![("portals-tcp-poll".to_string(), "libfabric-shm".to_string())]
        );
        assert!(describe("libfabric-udp").contains("udp;ofi_rxd"));
        assert!(describe("ucx-shm-put").contains("ucp_put_bw"));
    }

    #[test]
    fn relative_paths_and_labels() {
        assert_eq!(
            relative(Path::new("/a/docs"), Path::new("/a/results/x.svg")),
            PathBuf::from("../results/x.svg")
        );
        assert_eq!(
            relative(Path::new("/a/results"), Path::new("/a/results/x.svg")),
            PathBuf::from("x.svg")
        );
        assert!(describe("mpi-tcp-poll").contains("polling"));
        assert!(describe("portals-tcp-thread-uring").contains("io_uring"));
        assert!(!describe("portals-tcp-thread").contains("io_uring"));
        assert!(describe("raw-tcp-busy-unpinned").contains("not pinned"));
        assert_eq!(fmt_value(1234.5), "1234");
        assert_eq!(fmt_value(3.256), "3.26");
    }
}
