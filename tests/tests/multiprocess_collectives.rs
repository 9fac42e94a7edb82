//! Collectives and communicator management between real processes: 1, 2, 3,
//! 4 and 7 ranks (the last oversubscribes the machine and exercises the
//! non-power-of-two paths), results checked against local computation.

use std::time::Duration;

use nal_tcp::{Backend, ProgressMode};
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{assert_job_ok as assert_ok, run_job, run_job_limited, LaunchOutcome};

fn run(program: &str, ranks: u32, args: &[&str]) -> LaunchOutcome {
    run_job(program, ranks, args, ProgressMode::Thread, Backend::Epoll)
}

const CHECK: &str = env!("CARGO_BIN_EXE_coll_check");

fn run_poll(ranks: u32, args: &[&str]) -> LaunchOutcome {
    run_job(CHECK, ranks, args, ProgressMode::Poll, Backend::Epoll)
}

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

#[test]
fn every_collective_in_polling_mode_on_3_ranks() {
    assert_ok(&run_poll(3, &["sizes"]), 3, "OK sizes", "sizes poll n=3");
}

#[test]
fn product_min_logical_bitwise_and_commutative_user_reductions() {
    for n in 1..=4 {
        assert_ok(&run(CHECK, n, &["ops"]), n, "OK ops", &format!("ops n={n}"));
    }
    assert_ok(&run(CHECK, 7, &["ops"]), 7, "OK ops", "ops n=7");
    assert_ok(&run_poll(3, &["ops"]), 3, "OK ops", "ops poll n=3");
}

#[test]
fn context_ids_run_out_cleanly_are_reused_and_never_match_stale_messages() {
    for n in [1, 2, 3] {
        assert_ok(
            &run(CHECK, n, &["contexts"]),
            n,
            "OK contexts",
            &format!("contexts n={n}"),
        );
    }
    assert_ok(
        &run_poll(2, &["contexts"]),
        2,
        "OK contexts",
        "contexts poll n=2",
    );
}

/// Short all-reduces and barriers on the communicators' slots (`coll_check
/// slots`): back-to-back instances with late members, on the world and a
/// split, right results and no point-to-point message, on 2 (with a
/// length mismatch reported to both), 3 and 4 ranks, both progress modes,
/// over TCP, and on 3 ranks over shared memory and UDP.
#[test]
fn short_all_reduces_and_barriers_run_on_slots_without_point_to_point_messages() {
    for n in [2, 3, 4] {
        assert_ok(
            &run(CHECK, n, &["slots"]),
            n,
            "OK slots",
            &format!("slots n={n}"),
        );
    }
    assert_ok(&run_poll(3, &["slots"]), 3, "OK slots", "slots poll n=3");
    for nal in [NalKind::Shm, NalKind::Udp] {
        let options = JobOptions {
            nal,
            progress: ProgressMode::Thread,
            ..JobOptions::default()
        };
        let out = run_job_limited(CHECK, 3, &["slots"], options, Duration::from_secs(120));
        assert_ok(&out, 3, "OK slots", &format!("slots {nal:?} n=3"));
    }
}

/// `PTL_COLL_FLAT`: forced on, every short all-reduce and barrier on slots
/// runs through one member, with every result right (including on 5 ranks,
/// where recursive doubling would fold); forced off, none does, whatever
/// the host's load. Left to `auto`, the form follows the job's
/// oversubscription, which every rank works out alike: 4 ranks on this
/// host's cores agree either way (a disagreement would hang or fail the
/// results).
#[test]
fn short_collectives_run_through_one_member_when_asked_and_never_when_not() {
    for (flat, form, ranks) in [(true, "flat", [2, 5]), (false, "tree", [3, 4])] {
        for n in ranks {
            for nal in [NalKind::Shm, NalKind::Tcp] {
                let options = JobOptions {
                    nal,
                    coll_flat: Some(flat),
                    ..JobOptions::default()
                };
                let out = run_job_limited(
                    CHECK,
                    n,
                    &["slots", form],
                    options,
                    Duration::from_secs(120),
                );
                assert_ok(&out, n, "OK slots", &format!("slots {form} {nal:?} n={n}"));
            }
        }
    }
    let out = run_job_limited(
        CHECK,
        4,
        &["slots"],
        JobOptions::default(),
        Duration::from_secs(120),
    );
    assert_ok(&out, 4, "OK slots", "slots auto n=4");
}
