//! MPI point-to-point between real processes, through the launcher, over
//! both progress modes; a subset also on the io_uring back end. Every job
//! has a timeout.

use nal_tcp::{Backend, ProgressMode};
use portals_tests::{assert_job_ok, run_job, LaunchOutcome};

fn run(ranks: u32, args: &[&str], progress: ProgressMode) -> LaunchOutcome {
    run_on(ranks, args, progress, Backend::Epoll)
}

fn run_on(ranks: u32, args: &[&str], progress: ProgressMode, backend: Backend) -> LaunchOutcome {
    run_job(
        env!("CARGO_BIN_EXE_mpi_check"),
        ranks,
        args,
        progress,
        backend,
    )
}

fn assert_ok(out: &LaunchOutcome, ranks: u32, what: &str) {
    assert_job_ok(out, ranks, "OK ", what)
}

const MODES: [ProgressMode; 2] = [ProgressMode::Thread, ProgressMode::Poll];

#[test]
fn every_send_mode_expected_and_unexpected_short_and_long_two_ranks() {
    for p in MODES {
        assert_ok(&run(2, &["modes"], p), 2, &format!("modes {p:?}"));
    }
}

#[test]
fn every_send_mode_four_ranks() {
    assert_ok(&run(4, &["modes"], ProgressMode::Thread), 4, "modes 4");
}

#[test]
fn non_overtaking_order_under_a_random_mix_two_ranks() {
    for (p, seed) in [
        (ProgressMode::Thread, "1"),
        (ProgressMode::Poll, "2"),
        (ProgressMode::Thread, "3"),
    ] {
        assert_ok(
            &run(2, &["order", "2000", seed], p),
            2,
            &format!("order {p:?} seed {seed}"),
        );
    }
}

#[test]
fn non_overtaking_order_with_wildcards_from_three_senders() {
    for (p, seed) in [(ProgressMode::Thread, "4"), (ProgressMode::Poll, "5")] {
        assert_ok(
            &run(4, &["order", "1000", seed], p),
            4,
            &format!("order 4 {p:?} seed {seed}"),
        );
    }
}

#[test]
fn unexpected_buffers_recycle_under_a_flood() {
    for p in MODES {
        assert_ok(&run(2, &["flood", "10"], p), 2, &format!("flood {p:?}"));
    }
}

#[test]
fn probe_cancel_and_truncation() {
    for p in MODES {
        assert_ok(&run(2, &["misc"], p), 2, &format!("misc {p:?}"));
    }
}

#[test]
fn synchronous_ring_of_four() {
    assert_ok(&run(4, &["ring"], ProgressMode::Thread), 4, "ring");
}

#[test]
fn a_posted_receive_completes_while_the_receiver_computes() {
    let out = run(2, &["progress"], ProgressMode::Thread);
    assert_ok(&out, 2, "progress thread");
    assert!(out.stdout_of(1).contains("completed while computing"));
    // And the contrast: without a progress thread nothing moves meanwhile.
    assert_ok(
        &run(2, &["progress", "poll"], ProgressMode::Poll),
        2,
        "progress poll",
    );
}

/// The protocol mix (every send mode, ordering, unexpected-buffer recycling,
/// probe/cancel/truncation) with the progress thread waiting in io_uring,
/// and the same in polling mode on that back end.
#[test]
fn a_subset_on_the_io_uring_back_end_in_both_progress_modes() {
    for p in MODES {
        for (ranks, args) in [
            (2, &["modes"][..]),
            (4, &["order", "1000", "6"][..]),
            (2, &["flood", "5"][..]),
            (2, &["misc"][..]),
        ] {
            assert_ok(
                &run_on(ranks, args, p, Backend::IoUring),
                ranks,
                &format!("io_uring {p:?} {args:?}"),
            );
        }
    }
    // Progress independence needs the progress thread, here in io_uring.
    let out = run_on(2, &["progress"], ProgressMode::Thread, Backend::IoUring);
    assert_ok(&out, 2, "progress thread io_uring");
    assert!(out.stdout_of(1).contains("completed while computing"));
}
