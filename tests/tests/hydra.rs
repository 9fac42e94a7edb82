//! MPI programs started by MPICH's launcher, `mpiexec.hydra`, instead of
//! `ptlrun`: they find hydra's PMI variables and join through PMI, with no
//! change to their code. The README's examples run on 1, 2 and 4 ranks
//! with their output checked, over an inherited descriptor (`PMI_FD`) and
//! a TCP port (`-pmi-port`); the start-up errors a user can make under
//! hydra fail the job at once, saying why.
//!
//! Skipped, with a message, where `mpiexec.hydra` is not installed (Debian:
//! `apt-get install mpich`; `.ci/run` installs it). Every run has a
//! timeout after which the job is killed.

use std::time::Duration;

use portals_tests::examples::{assert_cg_ok, assert_hello_ok, assert_ring_ok, count};
use portals_tests::hydra::{self, Run};

const CG: &str = env!("CARGO_BIN_EXE_example-cg");
const HELLO: &str = env!("CARGO_BIN_EXE_example-hello");
const RING: &str = env!("CARGO_BIN_EXE_example-ring");
const COLL: &str = env!("CARGO_BIN_EXE_coll_check");
const FAULT: &str = env!("CARGO_BIN_EXE_fault_check");

/// Generous: a debug build of cg on 4 ranks takes a few seconds alone, and
/// the machine may be busy.
const TIMEOUT: Duration = Duration::from_secs(240);

/// How long a job that fails at start-up may take to end: far less than a
/// start-up timeout (60 s by default), so the job was aborted, not timed
/// out.
const FAST_FAILURE: Duration = Duration::from_secs(30);

/// `mpiexec.hydra -launcher fork <args>`; `None` where hydra is missing.
fn mpiexec(args: &[&str]) -> Option<Run> {
    hydra::run(args, &[], TIMEOUT)
}

#[test]
fn the_cg_example_runs_on_1_2_and_4_ranks() {
    for n in [1u32, 2, 4] {
        let Some(r) = mpiexec(&["-n", &n.to_string(), CG]) else {
            return;
        };
        assert_cg_ok(&r, n, "hydra");
    }
}

#[test]
fn hello_names_every_rank_once() {
    for n in [1u32, 2, 4] {
        let Some(r) = mpiexec(&["-n", &n.to_string(), HELLO]) else {
            return;
        };
        assert_hello_ok(&r, n, "hydra");
    }
}

#[test]
fn the_ring_example_and_the_collectives_run_on_4_ranks() {
    let Some(r) = mpiexec(&["-n", "4", RING, "20"]) else {
        return;
    };
    assert_ring_ok(&r, 4, 20, "hydra");
    let Some(r) = mpiexec(&["-n", "4", COLL, "sizes"]) else {
        return;
    };
    assert!(r.ok(), "collectives: {}", r.describe());
    for rank in 0..4 {
        let line = format!("OK sizes rank {rank}");
        assert_eq!(count(&r.stdout, &line), 1, "{line}: {}", r.describe());
    }
}

/// Over a TCP port instead of an inherited descriptor, with a job secret
/// every rank is given.
#[test]
fn a_pmi_port_and_a_job_secret() {
    let Some(r) = mpiexec(&[
        "-pmi-port",
        "-genv",
        "PTL_JOB_SECRET",
        "s3cret",
        "-n",
        "2",
        HELLO,
    ]) else {
        return;
    };
    assert!(r.ok(), "{}", r.describe());
    assert_eq!(count(&r.stdout, "hello from rank"), 2, "{}", r.describe());
}

/// Two parts of one job given different secrets derive different job keys:
/// each rank sees the other's in the key-value space, says so and aborts
/// the job.
#[test]
fn ranks_with_different_secrets_fail_with_a_key_mismatch() {
    let Some(r) = mpiexec(&[
        "-n",
        "1",
        "-env",
        "PTL_JOB_SECRET",
        "one",
        HELLO,
        ":",
        "-n",
        "1",
        "-env",
        "PTL_JOB_SECRET",
        "two",
        HELLO,
    ]) else {
        return;
    };
    assert!(!r.ok(), "{}", r.describe());
    assert!(!r.stdout.contains("hello from"), "{}", r.describe());
    assert!(
        r.stderr.contains("job key mismatch")
            && r.stderr.contains("the same PTL_JOB_SECRET")
            && r.stderr.contains("aborting the job"),
        "{}",
        r.describe()
    );
    assert!(r.took < FAST_FAILURE, "{}", r.describe());
}

/// One process of the job never joins (it is not an MPI program at all):
/// the others give up after the start-up timeout, say so and abort the
/// job, which ends it long before the stray process would.
#[test]
fn a_rank_that_never_joins_times_out_clearly() {
    let Some(r) = mpiexec(&[
        "-genv",
        "PTL_BOOTSTRAP_TIMEOUT",
        "2",
        "-n",
        "2",
        HELLO,
        ":",
        "-n",
        "1",
        "sleep",
        "100",
    ]) else {
        return;
    };
    assert!(!r.ok(), "{}", r.describe());
    assert!(
        r.stderr
            .contains("not every rank reached the start-up fence within 2s"),
        "{}",
        r.describe()
    );
    assert!(r.took < FAST_FAILURE, "{}", r.describe());
}

/// A rank that calls `abort(3)` or panics while the others block in a
/// receive or a probe ends the whole job at once through PMI, with that
/// status (the client asks hydra for PMI-1, whose abort carries it; see
/// `VersionPreference::Auto`).
#[test]
fn one_ranks_abort_or_panic_ends_the_job_through_pmi() {
    for (scenario, says, code) in [
        ("abort", "aborts the job with status 3", 3),
        ("panic", "aborts the job with status 101", 101),
    ] {
        let Some(r) = mpiexec(&["-n", "4", FAULT, scenario]) else {
            return;
        };
        assert_eq!(r.code, Some(code), "{scenario}: {}", r.describe());
        assert!(r.took < FAST_FAILURE, "{scenario}: {}", r.describe());
        assert!(r.stderr.contains(says), "{scenario}: {}", r.describe());
    }
}
