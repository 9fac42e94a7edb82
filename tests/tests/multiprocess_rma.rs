//! MPI one-sided communication (RMA windows) between real processes
//! (`rma_check`), on shared memory, TCP and UDP, both progress modes, and
//! UDP with loss; shared windows on shared memory and `auto`, and refused
//! across (posed) hosts. Every job has a timeout.

use std::time::Duration;

use nal_tcp::ProgressMode;
use nal_udp::FaultConfig;
use portals_runtime::launch::{launch, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{assert_job_ok, run_job_limited, LaunchOutcome};

const RMA: &str = env!("CARGO_BIN_EXE_rma_check");
const LIMIT: Duration = Duration::from_secs(180);

fn run(ranks: u32, scenario: &str, options: JobOptions) -> LaunchOutcome {
    run_job_limited(RMA, ranks, &[scenario], options, LIMIT)
}

fn on_every_transport(mut f: impl FnMut(&str, JobOptions)) {
    for nal in [NalKind::Shm, NalKind::Tcp, NalKind::Udp] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            let options = JobOptions {
                nal,
                progress,
                ..JobOptions::default()
            };
            f(&format!("{nal:?} {progress:?}"), options);
        }
    }
    for (progress, seed) in [(ProgressMode::Thread, 31), (ProgressMode::Poll, 32)] {
        f(
            &format!("Udp {progress:?} 5% loss"),
            JobOptions {
                nal: NalKind::Udp,
                progress,
                udp_fault: Some(FaultConfig {
                    loss: 0.05,
                    dup: 0.01,
                    reorder: 0.02,
                    seed,
                }),
                ..JobOptions::default()
            },
        );
    }
}

/// Each scenario of `rma_check` on four ranks, every transport and mode:
/// `passive` (exclusive-lock puts of every rank's row into every window,
/// read back byte for byte with lock_all gets; a window over caller memory
/// and an allocated one; a 200 KiB zero-copy put and get), `counters`
/// (concurrent fetch_and_op sums exactly, the fetched values a
/// permutation; one CAS winner; get-then-put under an exclusive lock loses
/// no update), `accumulate` (sums longer than max_atomic_size, one
/// origin's replace/sum/product sequence applied in order, get_accumulate,
/// no-op fetches, rput/rget/raccumulate/rget_accumulate, a dropped rget
/// fills its buffer), `fence`, `pscw` (puts, then gets and accumulates
/// in an access epoch; and a live window dropped), `errors` (every
/// misuse's typed error — no epoch, a second lock, post or start, a rank
/// outside the start group, ranges of every operation, ranks out of
/// range, unsupported op/type pairs — and the target windows untouched),
/// `flushes` (flush, flush_all, flush_local, flush_local_all each make a
/// put visible to a third rank's get, epoch still open),
/// `dynamic` (attach, address exchange, get/put/fetch by address, a
/// detached region refused and returned with its data, a later region
/// found).
#[test]
fn rma_operations_and_synchronisation_on_every_transport() {
    on_every_transport(|what, options| {
        let out = run(4, "all", options);
        assert_job_ok(&out, 4, "OK all", &format!("rma all {what}"));
    });
}

/// Passive-target progress: rank 1 sleeps without MPI calls while rank 0
/// locks it, puts, gets, fetch-and-adds and unlocks; the progress thread
/// serves all of it (thread mode, every transport).
#[test]
fn passive_target_operations_complete_while_the_target_sleeps() {
    for nal in [NalKind::Shm, NalKind::Tcp, NalKind::Udp] {
        let options = JobOptions {
            nal,
            progress: ProgressMode::Thread,
            ..JobOptions::default()
        };
        let out = run(2, "progress", options);
        assert_job_ok(&out, 2, "OK progress", &format!("rma progress {nal:?}"));
        assert!(out.stdout_of(1).contains("completed while sleeping"));
    }
}

/// Names of shared-window objects in `/dev/shm`.
fn shared_objects() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(nal_shm::MAPPING_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

/// `shared` on four ranks over shared memory and `auto`: direct stores
/// into the own and the next rank's part, read back by every rank
/// directly and through engine gets; an engine put seen by a direct load;
/// contiguous parts, one of them empty; and no object left in /dev/shm.
#[test]
fn shared_windows_are_loaded_and_stored_directly_and_through_the_engine() {
    let before = shared_objects();
    for nal in [NalKind::Shm, NalKind::Auto] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            let options = JobOptions {
                nal,
                progress,
                ..JobOptions::default()
            };
            let out = run(4, "shared", options);
            assert_job_ok(
                &out,
                4,
                "OK shared",
                &format!("shared {nal:?} {progress:?}"),
            );
        }
    }
    let left: Vec<_> = shared_objects()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(
        left.is_empty(),
        "shared-window objects left behind: {left:?}"
    );
}

/// Ranks posing as two hosts get `RmaUnsupported` on every rank (no
/// hang, the job goes on) and a window once they agree again.
#[test]
fn a_shared_window_across_hosts_is_refused_on_every_rank() {
    let options = JobOptions {
        nal: NalKind::Tcp,
        ..JobOptions::default()
    };
    let out = run(4, "shared_hosts", options);
    assert_job_ok(&out, 4, "OK shared_hosts", "shared across hosts");
}

/// `free_finalize` on two ranks, every transport and mode: windows
/// created, used and freed in a loop, the last free right before
/// finalize; no rank's closing barrier fails because the other left it
/// and departed first.
#[test]
fn a_window_freed_right_before_finalize_on_every_transport() {
    on_every_transport(|what, options| {
        let out = run(2, "free_finalize", options);
        assert_job_ok(
            &out,
            2,
            "OK free_finalize",
            &format!("free_finalize {what}"),
        );
    });
}

/// `last_before_finalize` over shared memory with the receiver's progress
/// thread holding each acknowledgment back for half a second
/// (`nal_shm::ANSWER_DELAY_ENV`, as a preempted thread would): rank 1
/// receives rank 0's last message (taken by that thread) and finalizes at
/// once, while the acknowledgment rank 0's send waits for is not yet
/// queued. The departure notice goes behind it, so rank 0's send
/// completes instead of failing with `PeerFinalized` (the `Window::free`
/// barrier failure seen under load).
#[test]
fn the_departure_notice_never_overtakes_an_acknowledgment() {
    for progress in [ProgressMode::Thread, ProgressMode::Poll] {
        let mut spec = LaunchSpec::new(2, RMA);
        spec.args = vec!["last_before_finalize".into()];
        spec.options = JobOptions {
            nal: NalKind::Shm,
            progress,
            timeout: Duration::from_secs(60),
            ..JobOptions::default()
        };
        spec.env = vec![(nal_shm::ANSWER_DELAY_ENV.into(), "500".into())];
        spec.output = Output::Capture;
        spec.timeout = Some(LIMIT);
        let out = launch(&spec).expect("launch");
        assert_job_ok(
            &out,
            2,
            "OK last_before_finalize",
            &format!("last message before finalize, {progress:?}"),
        );
    }
}
