//! Smoke test of the Portals-level peers UCX (`ucx_perftest`, Debian
//! package `ucx-utils`) and libfabric (`fi_pingpong`, `libfabric-bin`):
//! every peer runs each of its benchmarks once at tiny sizes and iteration
//! counts, through `ptl-bench`, and prints sane records; then a one-round
//! `compare` picks them up. Each tool's part is skipped with a message when
//! the tool is not installed.

mod common;

use common::{covers, ptl_bench, records};
use portals_bench::runner::on_path;
use portals_bench::tool_peers::ToolPeer;

const T: u64 = 120;

/// The labels of the peers run by `tool`, or `None` (with a message) when
/// it is not installed.
fn installed(tool: &str) -> Option<Vec<&'static str>> {
    let labels: Vec<&str> = ToolPeer::ALL
        .iter()
        .filter(|t| t.tool() == tool)
        .map(|t| t.label())
        .collect();
    if on_path(tool) {
        return Some(labels);
    }
    let package = ToolPeer::ALL
        .iter()
        .find(|t| t.tool() == tool)
        .map_or("?", |t| t.package());
    eprintln!(
        "SKIPPED: {tool} is not installed (Debian package {package}); {} not run",
        labels.join(", ")
    );
    None
}

/// Latency, ping-pong bandwidth and (where the peer has it) bandwidth,
/// with a 0-byte point where the tool allows it.
fn run_all(labels: &[&str], streams: bool) {
    let list = labels.join(",");
    let small = ["--iters", "20", "--warmup", "2", "--reps", "1"];
    let mut args = vec!["latency", "--impls", &list, "--sizes", "0,1K"];
    args.extend(small);
    let recs = records(&ptl_bench(&args, T).stdout, "latency", labels);
    covers(&recs, labels, &[0, 1024], 1);
    assert!(recs.iter().all(|r| r.unit == "us" && r.value > 0.0));
    let mut args = vec!["bandwidth", "--pingpong", "--impls", &list, "--sizes", "1K"];
    args.extend(small);
    let recs = records(&ptl_bench(&args, T).stdout, "pingpong-bw", labels);
    covers(&recs, labels, &[1024], 1);
    assert!(recs.iter().all(|r| r.unit == "MB/s" && r.value > 0.0));
    if streams {
        let mut args = vec!["bandwidth", "--impls", &list, "--sizes", "64K"];
        args.extend([
            "--iters", "2", "--warmup", "1", "--reps", "1", "--window", "4",
        ]);
        let recs = records(&ptl_bench(&args, T).stdout, "bandwidth", labels);
        covers(&recs, labels, &[65536], 1);
        assert!(recs.iter().all(|r| r.extra_f64("window") == Some(4.0)));
    }
}

#[test]
fn ucx_perftest_peers() {
    let Some(labels) = installed("ucx_perftest") else {
        return;
    };
    run_all(&labels, true);
}

#[test]
fn fi_pingpong_peers() {
    let Some(labels) = installed("fi_pingpong") else {
        return;
    };
    run_all(&labels, false);
    // No streaming bandwidth: a note says so, and nothing runs.
    let out = ptl_bench(
        &[
            "bandwidth",
            "--impls",
            "libfabric-shm,portals-tcp-thread",
            "--smoke",
        ],
        T,
    );
    assert!(
        out.stderr.contains("fi_pingpong only ping-pongs"),
        "{}",
        out.stderr
    );
    let recs = records(&out.stdout, "bandwidth", &["portals-tcp-thread"]);
    covers(&recs, &["portals-tcp-thread"], &[1024, 65536], 1);
}

#[test]
fn compare_includes_tool_peers() {
    let tools: Vec<&str> = ["ucx_perftest", "fi_pingpong"]
        .into_iter()
        .filter(|t| installed(t).is_some())
        .collect();
    if tools.is_empty() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ptl-bench-tools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = dir.to_string_lossy();
    // Detection, not an explicit list: the installed tools' peers must be
    // found by their probes.
    ptl_bench(
        &[
            "compare",
            "--smoke",
            "--benches",
            "pingpong-bw",
            "--nal",
            "tcp",
            "--progress",
            "thread",
            "--no-raw",
            "--name",
            "t",
            "--out-dir",
            &o,
        ],
        2 * T,
    );
    let res = portals_bench::results::Results::load(&dir.join("t.json")).expect("results");
    assert!(res.failures.is_empty(), "{:?}", res.failures);
    for t in ToolPeer::ALL.iter().filter(|t| tools.contains(&t.tool())) {
        assert!(
            res.meta.impls.iter().any(|i| i == t.label()),
            "{} not detected: {:?}",
            t.label(),
            res.meta.skipped
        );
        assert!(
            res.records.iter().any(|r| r.implementation == t.label()),
            "no {} record",
            t.label()
        );
    }
    let md = std::fs::read_to_string(dir.join("t.md")).expect("md");
    assert!(md.contains("### pingpong-bw"), "{md}");
    assert!(dir.join("t-pingpong-bw.svg").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}
