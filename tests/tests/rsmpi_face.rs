//! rsmpi's face (mpi-rsmpi): a program written exactly as for rsmpi
//! (`src/bin/rsmpi_check.rs`, `#![deny(warnings)]`) runs correctly on 2
//! and 4 ranks over TCP and UDP in both progress modes, and bad input ends
//! the job with a message naming the call instead of hanging. Every job has
//! a timeout.

use std::time::Duration;

use nal_tcp::ProgressMode;
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{assert_job_ok, run_job_limited, LaunchOutcome};

const LIMIT: Duration = Duration::from_secs(90);

fn run(ranks: u32, scenario: &str, nal: NalKind, progress: ProgressMode) -> LaunchOutcome {
    let options = JobOptions {
        nal,
        progress,
        ..JobOptions::default()
    };
    run_job_limited(
        env!("CARGO_BIN_EXE_rsmpi_check"),
        ranks,
        &[scenario],
        options,
        LIMIT,
    )
}

#[test]
fn an_rsmpi_program_runs_unchanged_over_tcp_and_udp_in_both_progress_modes() {
    for nal in [NalKind::Tcp, NalKind::Udp] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            for ranks in [2, 4] {
                let out = run(ranks, "all", nal, progress);
                assert_job_ok(
                    &out,
                    ranks,
                    "OK all",
                    &format!("{nal:?} {progress:?} {ranks} ranks"),
                );
            }
        }
    }
}

/// The job fails with MPI's error status, and the failing rank says which
/// call failed and why.
fn assert_aborts_naming(scenario: &str, call: &str, why: &str) {
    let out = run(2, scenario, NalKind::Tcp, ProgressMode::Thread);
    let lines = out.transcript();
    assert_eq!(out.status, 1, "{scenario}: {:?}\n{lines}", out.reason);
    assert!(
        lines.contains(&format!("MPI error in {call}: ")) && lines.contains(why),
        "{scenario}: no message naming {call} and {why:?}\n{lines}"
    );
}

#[test]
fn a_root_out_of_range_aborts_naming_the_call() {
    assert_aborts_naming(
        "bad-root",
        "broadcast_into",
        "rank 2 is not in a communicator of size 2",
    );
}

#[test]
fn mismatched_counts_abort_naming_the_call() {
    assert_aborts_naming("bad-count", "reduce_local_into", "differ in length");
}

#[test]
fn a_reduce_scatter_with_the_wrong_number_of_blocks_aborts_naming_the_call() {
    assert_aborts_naming(
        "bad-block",
        "reduce_scatter_block_into",
        "must hold size blocks",
    );
}

#[test]
fn a_broadcast_with_mismatched_counts_aborts_naming_the_call() {
    // The first rank to see the mismatch names it; the others end with it.
    assert_aborts_naming(
        "bad-bcast",
        "broadcast_into",
        "collective message of the wrong size",
    );
}

#[test]
fn unpacking_past_the_packed_bytes_aborts_naming_the_call() {
    assert_aborts_naming(
        "bad-unpack",
        "Communicator::unpack_into",
        "shorter than the output buffer",
    );
}

#[test]
fn a_negative_destination_aborts_naming_the_call() {
    assert_aborts_naming(
        "bad-rank",
        "Destination::send",
        "rank -5 is not in a communicator of size 2",
    );
}
