//! The application kernels (`ptl-bench apps`) on 2 ranks: each Rust kernel
//! over TCP and shared memory, and each C kernel under Open MPI, solves
//! its problem and prints a record whose answer fields say so (a wrong
//! answer fails the run). Tiny sizes: these check answers, not speed.
//! Every run has a timeout (`Runner::timeout`).

mod common;

use std::time::Duration;

use common::{ptl_bench, records};
use portals_bench::impls::Impl;
use portals_bench::params::{Bench, Params, Preset};
use portals_bench::record::Record;
use portals_bench::runner::{build_peers, on_path, Runner};

fn runner() -> Runner {
    let mut r = Runner::new().expect("runner");
    r.exe = env!("CARGO_BIN_EXE_ptl-bench").into();
    r.timeout = Duration::from_secs(120);
    r
}

/// Run `bench` (smoke sizes, 2 ranks) on `imp`; its one record.
fn run_one(runner: &Runner, imp: &str, bench: Bench) -> Record {
    let p = Params::preset(bench, Preset::Smoke);
    let recs = runner
        .run(&Impl::parse(imp).expect("impl"), &p)
        .unwrap_or_else(|e| panic!("{imp} {bench}: {e}"));
    let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
    let mut recs = records(&text.join("\n"), bench.name(), &[imp]);
    assert_eq!(recs.len(), 1, "{imp} {bench}: one record per size");
    recs.remove(0)
}

/// The record's answer fields are those of a correct solve.
fn assert_answer(r: &Record, what: &str) {
    assert_eq!(r.extra_str("check"), Some("ok"), "{what}: {r:?}");
    assert_eq!(r.extra_f64("ranks"), Some(2.0), "{what}");
    assert_eq!(r.unit, "ms", "{what}");
    assert!(r.value > 0.0, "{what}: a solve takes time");
    match r.bench.as_str() {
        "app-cg" => {
            let it = r.extra_f64("iterations").unwrap_or(0.0);
            // 32x32 converges well before the cap of 500.
            assert!(it > 1.0 && it < 500.0, "{what}: {it} iterations");
            assert!(r.extra_f64("residual").is_some_and(|x| x < 1e-8), "{what}");
            assert!(r.extra_f64("error").is_some_and(|x| x < 1e-6), "{what}");
        }
        "app-halo" => {
            assert!(
                r.extra_f64("max_diff").is_some_and(|x| x <= 1e-12),
                "{what}"
            )
        }
        _ => assert_eq!(r.extra_f64("sweeps"), Some(4.0), "{what}"),
    }
}

#[test]
fn rust_kernels_solve_on_2_ranks_over_tcp_and_shm() {
    let runner = runner();
    for imp in ["mpi-tcp-thread", "mpi-shm-thread"] {
        for b in Bench::APPS {
            let r = run_one(&runner, imp, b);
            assert_answer(&r, &format!("{imp} {b}"));
        }
    }
}

#[test]
fn c_kernels_solve_on_2_ranks_under_open_mpi() {
    if !on_path("mpicc.openmpi") {
        eprintln!("SKIPPED: mpicc.openmpi is not installed (Debian: libopenmpi-dev)");
        return;
    }
    let runner = runner();
    let built = build_peers(&runner.peer_dir).expect("make -C bench/c");
    assert!(built.contains(&"openmpi"));
    for b in Bench::APPS {
        let r = run_one(&runner, "openmpi-sm", b);
        assert_answer(&r, &format!("openmpi-sm {b}"));
    }
}

/// The same kernel in Rust and in C computes the same thing: cg takes the
/// same number of iterations to the same residual (the sums are the same
/// operations in the same order on 2 ranks).
#[test]
fn rust_and_c_cg_agree() {
    if !on_path("mpicc.openmpi") {
        eprintln!("SKIPPED: mpicc.openmpi is not installed (Debian: libopenmpi-dev)");
        return;
    }
    let runner = runner();
    build_peers(&runner.peer_dir).expect("make -C bench/c");
    let rust = run_one(&runner, "mpi-shm-poll", Bench::AppCg);
    let c = run_one(&runner, "openmpi-sm", Bench::AppCg);
    assert_eq!(
        rust.extra_f64("iterations"),
        c.extra_f64("iterations"),
        "{rust:?}\n{c:?}"
    );
    let (a, b) = (
        rust.extra_f64("residual").unwrap_or(f64::NAN),
        c.extra_f64("residual").unwrap_or(f64::NAN),
    );
    assert!((a - b).abs() <= 1e-3 * b.abs(), "residuals {a} and {b}");
}

/// A kernel that does not reach its answer fails the run: cg capped at 3
/// iterations cannot converge, in Rust or in C.
#[test]
fn an_unconverged_cg_fails_the_run() {
    let runner = runner();
    let mut p = Params::preset(Bench::AppCg, Preset::Smoke);
    p.iters = 3;
    let mut imps = vec!["mpi-tcp-poll"];
    if on_path("mpicc.openmpi") {
        build_peers(&runner.peer_dir).expect("make -C bench/c");
        imps.push("openmpi-sm");
    }
    for imp in imps {
        let err = runner
            .run(&Impl::parse(imp).expect("impl"), &p)
            .expect_err(&format!("{imp}: 3 iterations of cg cannot converge"));
        assert!(
            err.to_string().contains("WRONG ANSWER"),
            "{imp}: the failure says why: {err}"
        );
    }
}

/// `ptl-bench apps` writes the results file and the tables: the JSON's
/// medians carry the answer check, the Markdown has the kernel's table
/// with the thread/poll ratio column.
#[test]
fn apps_command_writes_results_and_tables() {
    let dir = std::env::temp_dir().join(format!("ptl-bench-apps-{}", std::process::id()));
    let out = dir.to_str().expect("utf-8 temp dir");
    ptl_bench(
        &[
            "apps",
            "--smoke",
            "--kernel",
            "halo",
            "--ranks",
            "2",
            "--impls",
            "mpi-shm-thread,mpi-shm-poll",
            "--out-dir",
            out,
            "--name",
            "t",
        ],
        120,
    );
    let res = portals_bench::results::Results::load(&dir.join("t.json")).expect("results");
    assert_eq!(res.records.len(), 2, "one median per implementation");
    assert!(res
        .records
        .iter()
        .all(|r| r.extra_str("check") == Some("ok")));
    let md = std::fs::read_to_string(dir.join("t.md")).expect("tables");
    assert!(md.contains("### app-halo (size 64)"), "{md}");
    assert!(md.contains("**shm thread/poll**"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}
