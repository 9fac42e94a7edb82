//! User-defined datatypes, views, `bool`, complex numbers,
//! `#[derive(Equivalence)]` and attributes through rsmpi's face
//! (`src/bin/rsmpi_datatypes.rs`): values arrive where the layouts say on
//! 2 and 4 ranks over TCP and UDP in both progress modes, and bad layouts or received
//! bytes that are not valid values end the job naming the call. Every job
//! has a timeout.

use std::time::Duration;

use nal_tcp::ProgressMode;
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{assert_job_ok, run_job_limited, LaunchOutcome};

const LIMIT: Duration = Duration::from_secs(90);

fn run(ranks: u32, scenario: &str) -> LaunchOutcome {
    run_on(ranks, scenario, NalKind::Tcp, ProgressMode::Thread)
}

fn run_on(ranks: u32, scenario: &str, nal: NalKind, progress: ProgressMode) -> LaunchOutcome {
    let options = JobOptions {
        nal,
        progress,
        ..JobOptions::default()
    };
    run_job_limited(
        env!("CARGO_BIN_EXE_rsmpi_datatypes"),
        ranks,
        &[scenario],
        options,
        LIMIT,
    )
}

/// TCP and UDP, in both progress modes: 2 and 4 ranks over TCP with a
/// progress thread and over UDP polling, 2 ranks in the other two.
#[test]
fn user_datatypes_views_bools_complex_numbers_derived_structs_and_attributes_work() {
    let runs = [
        (2, NalKind::Tcp, ProgressMode::Thread),
        (4, NalKind::Tcp, ProgressMode::Thread),
        (2, NalKind::Udp, ProgressMode::Poll),
        (4, NalKind::Udp, ProgressMode::Poll),
        (2, NalKind::Tcp, ProgressMode::Poll),
        (2, NalKind::Udp, ProgressMode::Thread),
    ];
    for (ranks, nal, progress) in runs {
        let out = run_on(ranks, "all", nal, progress);
        assert_job_ok(
            &out,
            ranks,
            "OK all",
            &format!("{ranks} ranks {nal:?} {progress:?}"),
        );
    }
}

fn assert_aborts_naming(scenario: &str, call: &str, why: &str) {
    let out = run(2, scenario);
    let lines = out.transcript();
    assert_eq!(out.status, 1, "{scenario}: {:?}\n{lines}", out.reason);
    assert!(
        lines.contains(&format!("MPI error in {call}: ")) && lines.contains(why),
        "{scenario}: no message naming {call} and {why:?}\n{lines}"
    );
}

#[test]
fn a_received_bool_that_is_not_0_or_1_aborts_naming_the_call() {
    assert_aborts_naming("bad-bool", "Source::receive_into", "neither 0 nor 1");
}

#[test]
fn a_message_shorter_than_one_value_received_by_value_aborts_naming_the_call() {
    assert_aborts_naming("short-value", "Source::receive", "less than the");
}

#[test]
fn a_view_past_its_buffer_aborts_naming_the_call() {
    assert_aborts_naming("bad-view", "Destination::send", "reaches past its buffer");
}

#[test]
fn an_overlapping_layout_aborts_naming_the_call() {
    assert_aborts_naming("overlap", "UserDatatype::indexed", "overlap");
}
