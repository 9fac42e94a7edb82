//! Collectives and communicator management between real processes: 1, 2, 3,
//! 4 and 7 ranks (the last oversubscribes the machine and exercises the
//! non-power-of-two paths), results checked against local computation.

use nal_tcp::{Backend, ProgressMode};
use portals_tests::{assert_job_ok as assert_ok, run_job, LaunchOutcome};

fn run(program: &str, ranks: u32, args: &[&str]) -> LaunchOutcome {
    run_job(program, ranks, args, ProgressMode::Thread, Backend::Epoll)
}

const CHECK: &str = env!("CARGO_BIN_EXE_coll_check");

#[test]
fn every_collective_at_every_size_on_1_to_4_ranks() {
    for n in 1..=4 {
        assert_ok(
            &run(CHECK, n, &["sizes"]),
            n,
            "OK sizes",
            &format!("sizes n={n}"),
        );
    }
}

#[test]
fn every_collective_on_7_ranks() {
    assert_ok(&run(CHECK, 7, &["sizes"]), 7, "OK sizes", "sizes n=7");
}

#[test]
fn splits_dups_groups_and_interleaving_with_point_to_point() {
    for n in [1, 2, 3, 4, 7] {
        assert_ok(
            &run(CHECK, n, &["comms"]),
            n,
            "OK comms",
            &format!("comms n={n}"),
        );
    }
}
