//! MPI one-sided communication (RMA windows) between real processes
//! (`rma_check`), on shared memory, TCP and UDP, both progress modes, and
//! UDP with loss. Every job has a timeout.

use std::time::Duration;

use nal_tcp::ProgressMode;
use nal_udp::FaultConfig;
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
/// fills its buffer), `fence`, `pscw` (and a live window dropped),
/// `errors` (every misuse's typed error, target untouched),
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
