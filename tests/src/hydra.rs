//! Running jobs under MPICH's launcher, `mpiexec.hydra`, in tests: find it,
//! run it with `-launcher fork` (no ssh) and a timeout, and tear the job
//! down if it outlasts the timeout.
//!
//! Shared by this crate's tests (`portals_tests::hydra`) and by
//! `portals-runtime`'s PMI tests, which include this file by path; so it
//! uses nothing but `std` and `libc`.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a test prints when it skips for want of hydra.
pub const SKIP: &str = "SKIPPED: mpiexec.hydra not found in PATH (Debian/Ubuntu package mpich)";

/// Grace between asking hydra to stop (SIGINT: it kills every process of
/// the job) and killing its process group.
const GRACE: Duration = Duration::from_secs(5);

/// The `mpiexec.hydra` on `PATH`, if any.
pub fn mpiexec() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpiexec.hydra"))
        .find(|p| p.is_file())
}

/// How a hydra run ended.
#[derive(Debug)]
pub struct Run {
    /// `mpiexec.hydra`'s exit status, `None` if a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Everything the job wrote to stdout (hydra merges the ranks').
    pub stdout: String,
    /// Everything the job and hydra wrote to stderr.
    pub stderr: String,
    /// How long the run took.
    pub took: Duration,
}

impl Run {
    /// The run's status and output, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "exit {:?} signal {:?} after {:?}\n--- stdout:\n{}--- stderr:\n{}",
            self.code, self.signal, self.took, self.stdout, self.stderr
        )
    }

    /// Whether hydra exited with status 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Read `stream` to its end on a thread of its own.
fn reader(mut stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

/// What `reader` read, once the stream has ended; a process hydra failed
/// to kill may hold it open, so wait a grace period at most.
fn collect(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(GRACE)
        .unwrap_or_else(|_| "(output not closed: a process outlived mpiexec.hydra)\n".into())
}

fn signal(child: &Child, group: bool, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    let target = if group { -pid } else { pid };
    // SAFETY: kill has no memory-safety preconditions; the child is not
    // reaped yet, so its pid (and process group id) still name it.
    let _ = unsafe { libc::kill(target, sig) };
}

/// Run `mpiexec.hydra -launcher fork ARGS` with `env` added to its
/// environment, stdin closed and output captured; `None` (after printing
/// [`SKIP`]) where hydra is not installed.
///
/// PMI and `ptlrun` variables of whatever started the test are removed,
/// so that the job's processes see only hydra's. If the run outlasts
/// `timeout`, hydra is interrupted (it then kills the job), its process
/// group killed after a grace period, and the test panics.
pub fn run(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Option<Run> {
    let Some(mpiexec) = mpiexec() else {
        eprintln!("{SKIP}");
        return None;
    };
    let mut cmd = Command::new(&mpiexec);
    cmd.args(["-launcher", "fork"]).args(args);
    for var in [
        "PMI_FD",
        "PMI_PORT",
        "PMI_ID",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_JOBID",
        "PTL_RANK",
        "PTL_SIZE",
        "PTL_JOB_KEY",
        "PTL_BOOTSTRAP",
        "PTL_JOB_SECRET",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout can take down hydra
        // and whatever it started without touching the test.
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("start mpiexec.hydra");
    let out = reader(child.stdout.take().expect("stdout"));
    let err = reader(child.stderr.take().expect("stderr"));
    let mut interrupted: Option<Instant> = None;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for mpiexec.hydra") {
            break st;
        }
        match interrupted {
            None if t0.elapsed() > timeout => {
                signal(&child, false, libc::SIGINT);
                interrupted = Some(Instant::now());
            }
            Some(at) if at.elapsed() > GRACE => {
                signal(&child, true, libc::SIGKILL);
                break child.wait().expect("reap mpiexec.hydra");
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.code(),
        signal: status.signal(),
        stdout: collect(&out),
        stderr: collect(&err),
        took: t0.elapsed(),
    };
    assert!(
        interrupted.is_none(),
        "mpiexec.hydra {args:?} did not finish within {timeout:?}: {}",
        run.describe()
    );
    Some(run)
}
