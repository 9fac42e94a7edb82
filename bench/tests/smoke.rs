//! CI smoke test of every `ptl-bench` benchmark: tiny sizes, one or two
//! iterations, both progress modes (and at the Portals level both pollers
//! of the progress thread), Portals and MPI level; each run must
//! finish and print well-formed records. (Full runs are not part of CI.)

mod common;

use common::{covers, ptl_bench, records};

const T: u64 = 90;
const MPI: [&str; 2] = ["mpi-tcp-thread", "mpi-tcp-poll"];
const ALL: [&str; 5] = [
    "portals-tcp-thread",
    "portals-tcp-thread-uring",
    "portals-tcp-poll",
    "mpi-tcp-thread",
    "mpi-tcp-poll",
];

#[test]
fn latency_smoke() {
    let out = ptl_bench(&["latency", "--smoke"], T);
    let recs = records(&out.stdout, "latency", &ALL);
    covers(&recs, &ALL, &[0, 1024], 1);
    assert!(recs.iter().all(|r| r.unit == "us"));
}

/// Settling (`--settle-ms`): every rank runs the same untimed iterations
/// before the first point, decided by rank 0 — a disagreement leaves one
/// rank waiting for a message that never comes, and the run times out.
/// The first point says how many it ran; later points do not. Each point
/// also carries the line transfer time measured after its run (`c2c_ns`)
/// where the host has two CPUs to measure it between (and the other one
/// kept up).
#[test]
fn runs_settle_before_their_first_point_in_step_and_say_how_long() {
    for bench in ["latency", "bandwidth", "msgrate"] {
        let impls: &[&str] = if bench == "msgrate" { &MPI } else { &ALL };
        let sizes = if bench == "msgrate" { "8" } else { "8,1K" };
        let out = ptl_bench(
            &[bench, "--smoke", "--settle-ms", "30", "--sizes", sizes],
            T,
        );
        let recs = records(&out.stdout, bench, impls);
        for i in impls {
            let mine: Vec<_> = recs.iter().filter(|r| r.implementation == *i).collect();
            assert!(!mine.is_empty(), "{bench} {i}: no record");
            let first = mine[0].extra_f64("settle_iters");
            assert!(first.is_some_and(|n| n >= 1.0), "{bench} {i}: {first:?}");
            assert!(
                mine[1..]
                    .iter()
                    .all(|r| r.extra_f64("settle_iters").is_none()),
                "{bench} {i}: only the first point settles"
            );
            for r in &mine {
                if let Some(ns) = r.extra_f64("c2c_ns") {
                    assert!(ns > 0.0 && ns < 100_000.0, "{bench} {i}: c2c {ns}");
                }
            }
        }
        // Off: nothing settles.
        let out = ptl_bench(&[bench, "--smoke", "--settle-ms", "0", "--sizes", "8"], T);
        let recs = records(&out.stdout, bench, impls);
        assert!(recs.iter().all(|r| r.extra_f64("settle_iters").is_none()));
    }
}

#[test]
fn bandwidth_smoke() {
    let out = ptl_bench(&["bandwidth", "--smoke"], T);
    let recs = records(&out.stdout, "bandwidth", &ALL);
    covers(&recs, &ALL, &[1024, 65536], 1);
    assert!(recs.iter().all(|r| r.extra_f64("window") == Some(4.0)));
    let out = ptl_bench(&["bandwidth", "--smoke", "--bidirectional"], T);
    covers(&records(&out.stdout, "bibw", &MPI), &MPI, &[1024, 65536], 1);
}

#[test]
fn msgrate_and_matchlist_smoke() {
    let out = ptl_bench(&["msgrate", "--smoke"], T);
    covers(&records(&out.stdout, "msgrate", &MPI), &MPI, &[8], 1);
    let out = ptl_bench(&["matchlist", "--smoke"], T);
    let recs = records(&out.stdout, "matchlist", &MPI);
    covers(&recs, &MPI, &[8], 2);
    for i in MPI {
        let posted: Vec<f64> = recs
            .iter()
            .filter(|r| r.implementation == i)
            .filter_map(|r| r.extra_f64("posted"))
            .collect();
        assert_eq!(posted, vec![1.0, 10.0], "{i}");
    }
}

#[test]
fn overlap_smoke() {
    let out = ptl_bench(&["overlap", "--smoke"], T);
    let recs = records(&out.stdout, "overlap", &MPI);
    // baseline row (factor 0) + one factor
    covers(&recs, &MPI, &[1024], 2);
    for r in &recs {
        for k in [
            "compute_factor",
            "compute_us",
            "wait_us",
            "wait_max_us",
            "total_us",
            "transfer_us",
        ] {
            assert!(r.extra_f64(k).is_some(), "{k} missing in {}", r.to_line());
        }
        assert!(r.value <= 100.0);
        // The longest single wait is at least any repetition's average.
        let wait = r.extra_f64("wait_us").expect("checked above");
        let max = r.extra_f64("wait_max_us").expect("checked above");
        assert!(max >= wait, "wait_max_us below wait_us in {}", r.to_line());
    }
}

#[test]
fn comb_smoke() {
    let out = ptl_bench(&["comb", "--smoke", "--method", "both"], T);
    let recs = records(&out.stdout, "comb", &MPI);
    covers(&recs, &MPI, &[100 << 10], 2);
    for m in ["poll", "pww"] {
        assert_eq!(
            recs.iter()
                .filter(|r| r.extra_str("method") == Some(m))
                .count(),
            2,
            "{m}"
        );
    }
    assert!(recs
        .iter()
        .all(|r| r.extra_f64("dry_us").is_some_and(|d| d > 0.0)));
}

#[test]
fn collectives_smoke() {
    let out = ptl_bench(&["collectives", "--smoke", "--ranks", "2,4"], T);
    let (ar, bc): (Vec<&str>, Vec<&str>) = out
        .stdout
        .lines()
        .partition(|l| l.contains("\"allreduce\""));
    for (bench, lines) in [("allreduce", ar), ("bcast", bc)] {
        let recs = records(&lines.join("\n"), bench, &MPI);
        // one record per size and rank count
        covers(&recs, &MPI, &[8, 1024], 2);
        for i in MPI {
            let ranks: Vec<f64> = recs
                .iter()
                .filter(|r| r.implementation == i)
                .filter_map(|r| r.extra_f64("ranks"))
                .collect();
            assert_eq!(ranks, vec![2.0, 2.0, 4.0, 4.0], "{bench} {i}");
        }
    }
    // allreduce over doubles: sizes must be multiples of 8
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_ptl-bench"))
        .args([
            "collectives",
            "--smoke",
            "--op",
            "allreduce",
            "--sizes",
            "12",
        ])
        .output()
        .expect("run ptl-bench");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("multiples of 8"));
}

#[test]
fn nbc_overlap_smoke() {
    const SHM: [&str; 2] = ["mpi-shm-thread", "mpi-shm-poll"];
    let out = ptl_bench(
        &[
            "nbc-overlap",
            "--smoke",
            "--impls",
            "mpi-shm-thread,mpi-shm-poll",
            "--ranks",
            "2,4",
        ],
        2 * T,
    );
    let recs = records(&out.stdout, "nbc-overlap", &SHM);
    for i in SHM {
        for ranks in [2.0, 4.0] {
            let mine: Vec<_> = recs
                .iter()
                .filter(|r| r.implementation == i && r.extra_f64("ranks") == Some(ranks))
                .collect();
            // The barrier (size 0), then the broadcast, the all-reduce, the
            // all-gather and the all-to-all at 8 B and 1 KB; each a baseline
            // and one compute factor.
            let points: Vec<(&str, u64, f64)> = mine
                .iter()
                .map(|r| {
                    (
                        r.extra_str("op").unwrap_or("?"),
                        r.size,
                        r.extra_f64("compute_factor").unwrap_or(-1.0),
                    )
                })
                .collect();
            let mut want = vec![("ibarrier", 0, 0.0), ("ibarrier", 0, 1.0)];
            for op in ["ibcast", "iallreduce", "iallgather", "ialltoall"] {
                for size in [8, 1024] {
                    want.extend([(op, size, 0.0), (op, size, 1.0)]);
                }
            }
            assert_eq!(points, want, "{i} on {ranks} ranks");
            for r in mine {
                let line = r.to_line();
                assert!((0.0..=100.0).contains(&r.value), "overlap in {line}");
                let t0 = r.extra_f64("nbc_us").unwrap_or(-1.0);
                let total = r.extra_f64("total_us").unwrap_or(-1.0);
                assert!(t0 > 0.0 && total > 0.0, "times in {line}");
                for k in ["start_us", "wait_us", "compute_us"] {
                    assert!(r.extra_f64(k).is_some_and(|v| v >= 0.0), "{k} in {line}");
                }
                if r.extra_f64("compute_factor") == Some(0.0) {
                    assert_eq!((r.value, total), (0.0, t0), "baseline {line}");
                }
            }
        }
    }
}

#[test]
fn nbc_progress_smoke() {
    const TCP: [&str; 2] = ["mpi-tcp-thread", "mpi-tcp-poll"];
    let out = ptl_bench(
        &[
            "nbc-progress",
            "--smoke",
            "--impls",
            "mpi-tcp-thread,mpi-tcp-poll",
            "--ranks",
            "2,4",
        ],
        2 * T,
    );
    let recs = records(&out.stdout, "nbc-progress", &TCP);
    for i in TCP {
        for ranks in [2.0, 4.0] {
            let mine: Vec<_> = recs
                .iter()
                .filter(|r| r.implementation == i && r.extra_f64("ranks") == Some(ranks))
                .collect();
            // The barrier, then the broadcast and the all-reduce at 8 B (a
            // chain) and 8 KB (the all-reduce's fallback); one compute time.
            let points: Vec<(&str, u64, f64)> = mine
                .iter()
                .map(|r| {
                    (
                        r.extra_str("op").unwrap_or("?"),
                        r.size,
                        r.extra_f64("compute_us").unwrap_or(-1.0),
                    )
                })
                .collect();
            let want = vec![
                ("ibarrier", 0, 200.0),
                ("ibcast", 8, 200.0),
                ("ibcast", 8192, 200.0),
                ("iallreduce", 8, 200.0),
                ("iallreduce", 8192, 200.0),
            ];
            assert_eq!(points, want, "{i} on {ranks} ranks");
            for r in mine {
                let line = r.to_line();
                assert!((0.0..=100.0).contains(&r.value), "% complete in {line}");
                assert_eq!(r.extra_str("check"), Some("peek"), "{line}");
                // The compute is wall-clock time: never shorter than asked.
                let c = r.extra_f64("compute_meas_us").unwrap_or(-1.0);
                assert!(c >= 200.0, "compute in {line}");
                for k in ["start_us", "wait_us", "nbc_us"] {
                    assert!(r.extra_f64(k).is_some_and(|v| v >= 0.0), "{k} in {line}");
                }
            }
        }
    }
}

/// Issue 20 part 3 as behaviour, not timing: with a progress thread (TCP,
/// 2 ranks) some non-blocking barrier is found complete by the one `peek`
/// after 20 ms of compute with no MPI call (a progress thread only has to
/// be scheduled once in 20 ms, in one of 20 iterations); in polling mode
/// never, since the rank that starts first can only learn of the other's
/// start in a later call, and the figure is the minimum over the ranks.
#[test]
fn nbc_progress_barrier_completes_during_compute_only_with_a_progress_thread() {
    const TCP: [&str; 2] = ["mpi-tcp-thread", "mpi-tcp-poll"];
    let out = ptl_bench(
        &[
            "nbc-progress",
            "--impls",
            "mpi-tcp-thread,mpi-tcp-poll",
            "--ranks",
            "2",
            "--sizes",
            "8",
            "--iters",
            "20",
            "--warmup",
            "2",
            "--reps",
            "1",
            "--factors",
            "20000",
        ],
        2 * T,
    );
    let recs = records(&out.stdout, "nbc-progress", &TCP);
    let barrier = |i: &str| {
        recs.iter()
            .find(|r| r.implementation == i && r.extra_str("op") == Some("ibarrier"))
            .map(|r| r.value)
            .unwrap_or_else(|| panic!("no ibarrier record of {i}"))
    };
    assert!(barrier("mpi-tcp-thread") > 0.0, "{}", out.stdout);
    assert_eq!(barrier("mpi-tcp-poll"), 0.0, "{}", out.stdout);
}

#[test]
fn raw_smoke() {
    let out = ptl_bench(
        &["raw", "--smoke", "--transport", "tcp", "--mode", "busy"],
        T,
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    let (lat, bw): (Vec<&str>, Vec<&str>) = lines.iter().partition(|l| l.contains("\"latency\""));
    covers(
        &records(&lat.join("\n"), "latency", &["raw-tcp-busy"]),
        &["raw-tcp-busy"],
        &[0, 1024],
        1,
    );
    covers(
        &records(&bw.join("\n"), "bandwidth", &["raw-tcp"]),
        &["raw-tcp"],
        &[1024, 65536],
        1,
    );
}

/// The one-sided benchmarks at the MPI level, both progress modes: every
/// operation of each reported, on windows that the ranks check (the
/// target verifies the fetch-and-op sum).
#[test]
fn rma_smoke() {
    let ops = |recs: &[portals_bench::record::Record], imp: &str| -> Vec<String> {
        recs.iter()
            .filter(|r| r.implementation == imp)
            .filter_map(|r| r.extra_str("op").map(String::from))
            .collect()
    };
    let out = ptl_bench(&["rma", "--which", "latency", "--smoke"], T);
    let recs = records(&out.stdout, "rma-latency", &MPI);
    for i in MPI {
        assert_eq!(ops(&recs, i), ["put", "get", "fetch_and_op"], "{i}");
    }
    let out = ptl_bench(&["rma", "--which", "bw", "--smoke"], T);
    covers(
        &records(&out.stdout, "rma-bw", &MPI),
        &MPI,
        &[1024, 65536],
        1,
    );
    let out = ptl_bench(&["rma", "--which", "overlap", "--smoke"], T);
    let recs = records(&out.stdout, "rma-overlap", &MPI);
    for i in MPI {
        // put 8 B and fetch_and_op, target idle then computing 1 ms
        assert_eq!(
            ops(&recs, i),
            ["put", "fetch_and_op", "put", "fetch_and_op"],
            "{i}"
        );
    }
    assert!(recs
        .iter()
        .all(|r| r.extra_f64("target_compute_us").is_some()));
}

#[test]
fn compare_and_report_smoke() {
    let dir = std::env::temp_dir().join(format!("ptl-bench-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = dir.join("results");
    let doc = dir.join("docs").join("PERFORMANCE.md");
    let (o, d) = (out_dir.to_string_lossy(), doc.to_string_lossy());
    ptl_bench(
        &[
            "compare",
            "--smoke",
            "--rounds",
            "2",
            "--benches",
            "latency,overlap,bcast",
            "--ranks",
            "4",
            "--impls",
            "raw-tcp-busy,mpi-tcp-thread,mpi-tcp-poll",
            "--name",
            "t",
            "--out-dir",
            &o,
            "--doc",
            &d,
        ],
        T,
    );
    let res = portals_bench::results::Results::load(&out_dir.join("t.json")).expect("results");
    assert!(res.failures.is_empty(), "{:?}", res.failures);
    assert_eq!(res.meta.rounds, 2);
    for r in res.records.iter().chain(&res.runs) {
        r.check().expect("sane record");
    }
    // medians over 2 rounds
    assert!(res.records.iter().all(|r| r.reps == 2), "{:?}", res.records);
    for f in [
        "t.md",
        "t-latency.svg",
        "t-overlap-x1.svg",
        "t-bcast-4ranks.svg",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    let bcast: Vec<_> = res.records.iter().filter(|r| r.bench == "bcast").collect();
    assert_eq!(bcast.len(), 4, "{bcast:?}"); // 2 sizes × 2 project variants
    assert!(bcast.iter().all(|r| r.extra_f64("ranks") == Some(4.0)));
    let md = std::fs::read_to_string(out_dir.join("t.md")).expect("md");
    assert!(md.contains("| 8 | 4 ranks |"), "{md}");
    let text = std::fs::read_to_string(&doc).expect("doc");
    assert!(text.contains("mpi-tcp-thread") && text.contains("reading:begin"));
    // report regenerates from the JSON alone
    ptl_bench(
        &[
            "report",
            &out_dir.join("t.json").to_string_lossy(),
            "--doc",
            &d,
        ],
        T,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// ptl-bench hands the transport settings of its own environment to its
/// ranks, as ptlrun does (it used to write the defaults over them, so
/// `PTL_WAIT_SPIN_US=1000 ptl-bench ...` measured the default): a
/// malformed one is refused naming the variable, never silently replaced,
/// and a valid one runs.
#[test]
fn transport_settings_in_the_environment_are_read_not_overwritten() {
    let with_spin = |us: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ptl-bench"))
            .args(["latency", "--smoke", "--impls", "mpi-tcp-poll"])
            .env("PTL_WAIT_SPIN_US", us)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run ptl-bench")
    };
    let bad = with_spin("soon");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "a malformed PTL_WAIT_SPIN_US ran");
    assert!(err.contains("PTL_WAIT_SPIN_US"), "{err}");
    let good = with_spin("0");
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let recs = records(
        &String::from_utf8_lossy(&good.stdout),
        "latency",
        &["mpi-tcp-poll"],
    );
    covers(&recs, &["mpi-tcp-poll"], &[0, 1024], 1);
}
