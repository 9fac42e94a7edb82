//! MPI programs started by Slurm's `srun` on a real (single-node) Slurm
//! cluster that each test brings up for itself: they join through the PMI
//! that `srun --mpi=pmi2` or `--mpi=pmix` provides, with no change to their
//! code. The README's examples run on 2 and 4 ranks with their output
//! checked; ranks given different job secrets fail at once, saying why;
//! and ranks started without any PMI (`--mpi=none`) refuse to run as
//! several unrelated one-rank jobs.
//!
//! Each test function brings the cluster up once (a few seconds) and runs
//! several jobs on it. Skipped, with a message, where the cluster cannot be
//! had: not root, or Slurm and MUNGE not installed (Debian: `slurmd
//! slurmctld slurm-client munge`; `.ci/run` installs them). Every job has a
//! timeout after which it is cancelled.

use std::time::Duration;

use portals_tests::examples::{assert_cg_ok, assert_hello_ok, assert_ring_ok};
use portals_tests::launcher::Run;
use portals_tests::slurm::Cluster;

const CG: &str = env!("CARGO_BIN_EXE_example-cg");
const HELLO: &str = env!("CARGO_BIN_EXE_example-hello");
const RING: &str = env!("CARGO_BIN_EXE_example-ring");
const FAULT: &str = env!("CARGO_BIN_EXE_fault_check");

/// Generous for one job (a debug build of cg on 4 ranks takes seconds),
/// yet short enough that one hung job fails its test well before nextest's
/// limit (5 minutes) would kill it without cleaning up.
const TIMEOUT: Duration = Duration::from_secs(90);

/// How long a job that fails at start-up may take to end: far less than a
/// start-up timeout (60 s by default), so the job was aborted, not timed
/// out.
const FAST_FAILURE: Duration = Duration::from_secs(30);

/// `srun --mpi=<mpi> -n <n> <program> <args>`.
fn srun(cluster: &Cluster, mpi: &str, n: u32, program: &str, args: &[&str]) -> Run {
    let mpi = format!("--mpi={mpi}");
    let n = n.to_string();
    let mut all = vec![mpi.as_str(), "-n", &n, program];
    all.extend(args);
    cluster.srun(&all, TIMEOUT)
}

/// cg, ring and hello on 2 and 4 ranks, each checked.
fn the_examples_run(cluster: &Cluster, mpi: &str) {
    for n in [2u32, 4] {
        let what = format!("srun --mpi={mpi}");
        assert_cg_ok(&srun(cluster, mpi, n, CG, &[]), n, &what);
        assert_ring_ok(&srun(cluster, mpi, n, RING, &["20"]), n, 20, &what);
        assert_hello_ok(&srun(cluster, mpi, n, HELLO, &[]), n, &what);
    }
}

/// Two ranks of one job given different secrets derive different job
/// keys: each sees the other's in the key-value space, says so and aborts
/// the job.
fn different_secrets_fail_with_a_key_mismatch(cluster: &Cluster, mpi: &str) {
    let script = format!("PTL_JOB_SECRET=s$SLURM_PROCID exec {HELLO}");
    let r = srun(cluster, mpi, 2, "/bin/sh", &["-c", &script]);
    assert!(!r.ok(), "{mpi}: {}", r.describe());
    assert!(!r.stdout.contains("hello from"), "{mpi}: {}", r.describe());
    assert!(
        r.stderr.contains("job key mismatch"),
        "{mpi}: {}",
        r.describe()
    );
    assert!(r.took < FAST_FAILURE, "{mpi}: {}", r.describe());
}

/// A rank that calls `abort(3)` while the others block in a receive or a
/// probe ends the whole step at once (PMI-2 or PMIx abort).
fn one_ranks_abort_ends_the_step(cluster: &Cluster, mpi: &str) {
    let r = srun(cluster, mpi, 4, FAULT, &["abort"]);
    assert!(!r.ok(), "{mpi}: {}", r.describe());
    assert!(r.took < FAST_FAILURE, "{mpi}: {}", r.describe());
    assert!(
        r.stderr.contains("aborts the job with status 3"),
        "{mpi}: {}",
        r.describe()
    );
}

#[test]
fn under_srun_mpi_pmi2() {
    let Some(cluster) = Cluster::for_test() else {
        return;
    };
    the_examples_run(&cluster, "pmi2");
    different_secrets_fail_with_a_key_mismatch(&cluster, "pmi2");
    one_ranks_abort_ends_the_step(&cluster, "pmi2");
}

#[test]
fn under_srun_mpi_pmix() {
    let Some(cluster) = Cluster::for_test() else {
        return;
    };
    the_examples_run(&cluster, "pmix");
    different_secrets_fail_with_a_key_mismatch(&cluster, "pmix");
    one_ranks_abort_ends_the_step(&cluster, "pmix");
}

/// Tasks of one srun step without a PMI would each run as a job of one
/// rank, silently computing the wrong thing: they see that they are one
/// task of several, refuse, and name the fix.
#[test]
fn without_pmi_the_tasks_refuse_and_name_the_fix() {
    let Some(cluster) = Cluster::for_test() else {
        return;
    };
    let r = srun(&cluster, "none", 2, HELLO, &[]);
    assert!(!r.ok(), "{}", r.describe());
    assert!(!r.stdout.contains("hello from"), "{}", r.describe());
    assert!(
        r.stderr.contains("but no PMI") && r.stderr.contains("--mpi=pmix"),
        "{}",
        r.describe()
    );
    assert!(r.took < FAST_FAILURE, "{}", r.describe());
}
