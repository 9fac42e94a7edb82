//! Running a job launcher (`mpiexec.hydra`, `srun`, `mpirun`) in a test:
//! in a process group of its own, with stdin closed, its output captured
//! and a timeout after which it is asked to stop and then killed.
//!
//! Part of [`hydra`](super)'s module tree, not a sibling of it, because
//! `portals-runtime`'s PMI tests include `hydra.rs` by path: they get this
//! file with it. So it uses nothing but `std` and `libc`, and has nothing
//! in it that the hydra runner does not use (an unused item would be dead
//! code in those tests).
//!
//! Launchers do not always take every process they started down with
//! them: Open MPI puts each rank in a process group of its own, and a
//! launcher killed outright leaves its ranks running. So the test process
//! makes itself a child subreaper (orphaned descendants become its
//! children instead of init's), every run marks its processes with an
//! environment variable of its own, and once the launcher has ended, the
//! marked processes still alive and what is left of its process group are
//! killed and reaped.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Grace between asking a launcher to stop (it then kills its job) and
/// killing it, and for its output to close once it has ended.
pub const GRACE: Duration = Duration::from_secs(5);

/// The variable that marks the processes of one run (see the module docs).
/// Not `PTL_*`: the launch helpers remove those.
const MARK: &str = "PORTALS_TESTS_RUN";

/// The program `name` in a directory of `PATH`, if any.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Remove from `cmd`'s environment every variable of the test's own
/// environment that `drop` selects, so that a launcher started by the test
/// sees only what the test gives it, not what started the test.
pub fn scrub_env(cmd: &mut Command, drop: impl Fn(&str) -> bool) {
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(&drop) {
            cmd.env_remove(name);
        }
    }
}

/// Whether `var` is one of the variables through which a launcher tells
/// its processes about their job: PMI's (`PMI_*`), PMIx's (`PMIX_*`), Open
/// MPI's (`OMPI_*`) or Slurm's (`SLURM_*`). A test run under a launcher
/// has them from it, and must not hand them on to the jobs it starts.
pub fn is_launcher_var(var: &str) -> bool {
    ["PMI_", "PMIX_", "OMPI_", "SLURM_"]
        .iter()
        .any(|prefix| var.starts_with(prefix))
}

/// How a launcher run ended.
#[derive(Debug)]
pub struct Run {
    /// The launcher's exit status, `None` if a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Everything the job wrote to stdout (launchers merge the ranks').
    pub stdout: String,
    /// Everything the job and the launcher wrote to stderr.
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

    /// Whether the launcher exited with status 0.
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

/// What `reader` read, once the stream has ended; a process the launcher
/// failed to kill may hold it open, so wait a grace period at most.
fn collect(rx: &mpsc::Receiver<String>, what: &str) -> String {
    rx.recv_timeout(GRACE)
        .unwrap_or_else(|_| format!("(output not closed: a process outlived {what})\n"))
}

/// Send `sig` to the process `pid`, or to its process group.
pub fn signal(pid: u32, group: bool, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    let target = if group { -pid } else { pid };
    // SAFETY: kill has no memory-safety preconditions. The callers' pids
    // name children not reaped yet, or process groups they led: Linux does
    // not reuse a pid while a group of that id has members, so signalling
    // an emptied group could only reach a process that took the pid over
    // in the microseconds since (after the pids wrapped around).
    let _ = unsafe { libc::kill(target, sig) };
}

/// A launcher started by [`run`]. Dropping this kills what is left of
/// the run: the launcher itself if it has not been reaped (a panic in the
/// test, say), the rest of its process group, and its marked descendants.
struct Launched {
    child: Child,
    mark: String,
    reaped: bool,
}

impl Launched {
    fn try_wait(&mut self) -> Option<ExitStatus> {
        let st = self.child.try_wait().expect("wait for the launcher");
        self.reaped |= st.is_some();
        st
    }

    fn kill(&mut self) -> ExitStatus {
        signal(self.child.id(), true, libc::SIGKILL);
        let st = self.child.wait().expect("reap the launcher");
        self.reaped = true;
        st
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if !self.reaped {
            signal(self.child.id(), true, libc::SIGKILL);
            let _ = self.child.wait();
        }
        // Whatever of the job outlived the launcher: its process group
        // (which outlives its leader while it has members) and the marked
        // processes, wherever they moved. Once orphaned, they are ours to
        // reap, zombies too (an exited helper of the launcher's).
        signal(self.child.id(), true, libc::SIGKILL);
        let mark = format!("{MARK}={}", self.mark);
        let group = self.child.id();
        kill_orphans(|o| o.pgid == group || environ_has(o.environ, &mark));
    }
}

/// Make the test process the reaper of its orphaned descendants (once per
/// process; see the module docs). [`run`] does this itself; a test that
/// starts daemons which start processes of their own calls it first.
pub fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and has no
        // memory-safety preconditions. If it fails, orphans go to init as
        // before and are not cleaned up; nothing else changes.
        let _ = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    });
}

/// Whether `environ` (a process's environment as `/proc/PID/environ` has
/// it: `NAME=value` entries, each ended by a NUL) has the entry `entry`.
pub fn environ_has(environ: &[u8], entry: &str) -> bool {
    environ.split(|&b| b == 0).any(|v| v == entry.as_bytes())
}

/// A child of this process that it did not start: a process orphaned by
/// a launcher or daemon and adopted (see [`become_subreaper`]).
#[derive(Debug)]
pub struct Orphan<'a> {
    /// Its pid.
    pub pid: u32,
    /// Its process group.
    pub pgid: u32,
    /// Whether it has exited and waits to be reaped.
    pub zombie: bool,
    /// Its environment (see [`environ_has`]); empty for a zombie.
    pub environ: &'a [u8],
}

/// Kill and reap the children of this process that `select` picks:
/// orphans left by a launcher or daemon (see [`Orphan`]), alive or
/// zombies. Repeats while it finds some, since their own children are
/// orphaned in turn.
///
/// `select` must pick only orphans, never a child some other code
/// started and will wait for (another thread's launcher): its wait would
/// then fail.
pub fn kill_orphans(select: impl Fn(&Orphan) -> bool) {
    let me = std::process::id();
    for _ in 0..100 {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut found = false;
        for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid pgrp ...": comm may contain anything,
            // so split at its last closing parenthesis.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let (Some(state), Some(ppid), Some(pgid)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let (Ok(ppid), Ok(pgid)) = (ppid.parse::<u32>(), pgid.parse::<u32>()) else {
                continue;
            };
            if ppid != me {
                continue;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let orphan = Orphan {
                pid,
                pgid,
                zombie: state == "Z",
                environ: &environ,
            };
            if !select(&orphan) {
                continue;
            }
            found = true;
            if !orphan.zombie {
                signal(orphan.pid, false, libc::SIGKILL);
            }
            let Ok(pid) = libc::pid_t::try_from(orphan.pid) else {
                continue;
            };
            // SAFETY: waitpid writes only to the status integer, which
            // lives through the call. The pid is our child and one that
            // `select` claimed, so no other code is waiting for it.
            let _ = unsafe { libc::waitpid(pid, &mut 0, 0) };
        }
        if !found {
            return;
        }
    }
}

/// Run `cmd` (a launcher, named `what` in messages) with stdin closed and
/// output captured, in a process group of its own, so that a timeout can
/// take down the launcher and whatever it started without touching the
/// test.
///
/// If the run outlasts `timeout`, `interrupt` is called with the
/// launcher's pid to ask it to stop (it should then end the job); after
/// [`GRACE`], the launcher's process group is killed, and the test panics.
/// On every path, processes of the job that outlived the launcher are
/// killed (see the module docs).
pub fn run(cmd: Command, what: &str, timeout: Duration, interrupt: impl FnOnce(u32)) -> Run {
    try_run(cmd, what, timeout, interrupt).unwrap_or_else(|run| {
        panic!(
            "{what} did not finish within {timeout:?}: {}",
            run.describe()
        )
    })
}

/// [`run`], but a run that outlasted `timeout` is returned as `Err`
/// (with what it wrote until it was stopped) instead of panicking.
pub fn try_run(
    mut cmd: Command,
    what: &str,
    timeout: Duration,
    interrupt: impl FnOnce(u32),
) -> Result<Run, Run> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    become_subreaper();
    let mark = format!(
        "{}.{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    cmd.env(MARK, &mark)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let t0 = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
    let mut launched = Launched {
        child,
        mark,
        reaped: false,
    };
    let out = reader(launched.child.stdout.take().expect("stdout"));
    let err = reader(launched.child.stderr.take().expect("stderr"));
    let mut interrupt = Some(interrupt);
    let mut interrupted: Option<Instant> = None;
    let status = loop {
        if let Some(st) = launched.try_wait() {
            break st;
        }
        match interrupted {
            None if t0.elapsed() > timeout => {
                if let Some(f) = interrupt.take() {
                    f(launched.child.id());
                }
                interrupted = Some(Instant::now());
            }
            Some(at) if at.elapsed() > GRACE => break launched.kill(),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.code(),
        signal: status.signal(),
        stdout: collect(&out, what),
        stderr: collect(&err, what),
        took: t0.elapsed(),
    };
    drop(launched);
    if interrupted.is_none() {
        Ok(run)
    } else {
        Err(run)
    }
}
