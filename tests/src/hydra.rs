//! Running jobs under MPICH's launcher, `mpiexec.hydra`, in tests: find it,
//! run it with `-launcher fork` (no ssh) and a timeout, and tear the job
//! down if it outlasts the timeout.
//!
//! Shared by this crate's tests (`portals_tests::hydra`) and by
//! `portals-runtime`'s PMI tests, which include this file by path; so it
//! uses nothing but `std` and `libc`, and brings the generic launcher
//! runner ([`launcher`], also `portals_tests::launcher`) along by path.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[path = "launcher.rs"]
pub mod launcher;

pub use launcher::Run;

/// What a test prints when it skips for want of hydra.
pub const SKIP: &str = "SKIPPED: mpiexec.hydra not found in PATH (Debian/Ubuntu package mpich)";

/// The `mpiexec.hydra` on `PATH`, if any.
pub fn mpiexec() -> Option<PathBuf> {
    launcher::find_in_path("mpiexec.hydra")
}

/// Run `mpiexec.hydra -launcher fork ARGS` with `env` added to its
/// environment, stdin closed and output captured; `None` (after printing
/// [`SKIP`]) where hydra is not installed.
///
/// The job variables of whatever launcher started the test (PMI, PMIx,
/// Open MPI, Slurm: [`launcher::is_launcher_var`]) and of `ptlrun` are
/// removed, so that the job's processes see only hydra's. If the run
/// outlasts `timeout`, hydra is interrupted (it then kills the job), its
/// process group killed after a grace period, and the test panics. What
/// of the job outlives hydra is killed ([`launcher::run`]).
pub fn run(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Option<Run> {
    let Some(mpiexec) = mpiexec() else {
        eprintln!("{SKIP}");
        return None;
    };
    let mut cmd = Command::new(&mpiexec);
    cmd.args(["-launcher", "fork"]).args(args);
    launcher::scrub_env(&mut cmd, |var| {
        launcher::is_launcher_var(var)
            || [
                "PTL_RANK",
                "PTL_SIZE",
                "PTL_JOB_KEY",
                "PTL_BOOTSTRAP",
                "PTL_JOB_SECRET",
            ]
            .contains(&var)
    });
    cmd.envs(env.iter().copied());
    Some(launcher::run(
        cmd,
        &format!("mpiexec.hydra {args:?}"),
        timeout,
        // SIGINT: hydra kills every process of the job.
        |pid| launcher::signal(pid, false, libc::SIGINT),
    ))
}
