//! MPI programs started by Open MPI's launcher, `mpirun`, instead of
//! `ptlrun`: they find its PMIx server and join through it, with no change
//! to their code. The README's examples run on 2 and 4 ranks with their
//! output checked; ranks given different job secrets fail at once, saying
//! why.
//!
//! Skipped, with a message, where `mpirun.openmpi` is not installed
//! (Debian: `apt-get install openmpi-bin`; `.ci/run` installs it). Every
//! run has a timeout after which the job is killed.

use std::time::Duration;

use portals_tests::examples::{assert_cg_ok, assert_hello_ok, assert_ring_ok};
use portals_tests::launcher::Run;
use portals_tests::openmpi;

const CG: &str = env!("CARGO_BIN_EXE_example-cg");
const HELLO: &str = env!("CARGO_BIN_EXE_example-hello");
const RING: &str = env!("CARGO_BIN_EXE_example-ring");
const FAULT: &str = env!("CARGO_BIN_EXE_fault_check");

/// Generous for one job (a debug build of cg on 4 ranks takes seconds),
/// yet short enough that a hung job fails its test well before nextest's
/// limit (5 minutes) would kill it without cleaning up.
const TIMEOUT: Duration = Duration::from_secs(90);

/// How long a job that fails at start-up may take to end: far less than a
/// start-up timeout (60 s by default), so the job was aborted, not timed
/// out.
const FAST_FAILURE: Duration = Duration::from_secs(30);

/// `mpirun.openmpi --oversubscribe <args>`; `None` where it is missing.
fn mpirun(args: &[&str]) -> Option<Run> {
    openmpi::run(args, &[], TIMEOUT)
}

#[test]
fn the_cg_and_ring_examples_run_on_2_and_4_ranks() {
    for n in [2u32, 4] {
        let ranks = n.to_string();
        let Some(r) = mpirun(&["-n", &ranks, CG]) else {
            return;
        };
        assert_cg_ok(&r, n, "mpirun");
        let Some(r) = mpirun(&["-n", &ranks, RING, "20"]) else {
            return;
        };
        assert_ring_ok(&r, n, 20, "mpirun");
    }
}

#[test]
fn hello_names_every_rank_once() {
    for n in [2u32, 4] {
        let Some(r) = mpirun(&["-n", &n.to_string(), HELLO]) else {
            return;
        };
        assert_hello_ok(&r, n, "mpirun");
    }
}

/// Two parts of one job (MPMD) given different secrets derive different
/// job keys: each rank sees the other's, says so and aborts the job.
#[test]
fn ranks_with_different_secrets_fail_with_a_key_mismatch() {
    let Some(r) = mpirun(&[
        "-n",
        "1",
        "-x",
        "PTL_JOB_SECRET=one",
        HELLO,
        ":",
        "-n",
        "1",
        "-x",
        "PTL_JOB_SECRET=two",
        HELLO,
    ]) else {
        return;
    };
    assert!(!r.ok(), "{}", r.describe());
    assert!(!r.stdout.contains("hello from"), "{}", r.describe());
    assert!(r.stderr.contains("job key mismatch"), "{}", r.describe());
    assert!(r.took < FAST_FAILURE, "{}", r.describe());
}

/// A rank that calls `abort(3)` or panics while the others block in a
/// receive or a probe ends the whole job at once through `PMIx_Abort`,
/// and `mpirun` exits with that rank's status (101 for a panic).
#[test]
fn one_ranks_abort_or_panic_ends_the_job_with_its_status() {
    for (scenario, status) in [("abort", 3), ("panic", 101)] {
        let Some(r) = mpirun(&["-n", "4", FAULT, scenario]) else {
            return;
        };
        assert_eq!(r.code, Some(status), "{scenario}: {}", r.describe());
        assert!(r.took < FAST_FAILURE, "{scenario}: {}", r.describe());
        let says = format!("aborts the job with status {status}");
        assert!(r.stderr.contains(&says), "{scenario}: {}", r.describe());
    }
}
