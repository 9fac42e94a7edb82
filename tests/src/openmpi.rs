//! Running jobs under Open MPI's launcher, `mpirun.openmpi`, in tests:
//! find it, run it on this host with a timeout, and tear the job down if it
//! outlasts the timeout.
//!
//! The programs started are this workspace's, not Open MPI programs: they
//! use `mpirun` only to be started and to meet through its PMIx server.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::launcher::{self, Run};
use crate::slurm::TempDir;

/// What a test prints when it skips for want of Open MPI.
pub const SKIP: &str =
    "SKIPPED: mpirun.openmpi not found in PATH (Debian/Ubuntu package openmpi-bin)";

/// The `mpirun.openmpi` on `PATH`, if any.
pub fn mpirun() -> Option<PathBuf> {
    launcher::find_in_path("mpirun.openmpi")
}

/// Run `mpirun.openmpi --oversubscribe ARGS` with `env` added to its
/// environment, stdin closed and output captured; `None` (after printing
/// [`SKIP`]) where Open MPI is not installed.
///
/// `--oversubscribe` lets a job have more ranks than the host has cores.
/// The variables of whatever launcher started the test (PMI, PMIx, Open
/// MPI, Slurm) and the runtime's (`PTL_*`) are removed, so that the job
/// sees only this mpirun's; pass the job's variables with `-x NAME=value`.
/// Running as root is allowed (Open MPI refuses it by default). Open MPI's
/// session directory goes into a temporary directory of the run's own,
/// removed afterwards, so that a killed run leaves nothing in `/tmp`.
///
/// If the run outlasts `timeout`, mpirun is sent SIGTERM (it then kills
/// the ranks), killed after a grace period with whatever of the job is
/// left, and the test panics.
pub fn run(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Option<Run> {
    let Some(mpirun) = mpirun() else {
        eprintln!("{SKIP}");
        return None;
    };
    let tmp = TempDir::new("openmpi").expect("a temporary directory for mpirun");
    let mut cmd = Command::new(&mpirun);
    cmd.arg("--oversubscribe").args(args);
    launcher::scrub_env(&mut cmd, |var| {
        launcher::is_launcher_var(var) || var.starts_with("PTL_")
    });
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("TMPDIR", tmp.path())
        .envs(env.iter().copied());
    let run = launcher::run(cmd, &format!("mpirun.openmpi {args:?}"), timeout, |pid| {
        launcher::signal(pid, false, libc::SIGTERM)
    });
    drop(tmp);
    Some(run)
}
