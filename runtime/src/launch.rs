//! Starting a job of N local processes: what `ptlrun` does, as a library so
//! tests and benchmarks can launch jobs too.
//!
//! The launcher runs the rendezvous server, starts every rank with its
//! environment, forwards each rank's output line by line with a `[rank]`
//! prefix, and supervises: the first rank that fails (non-zero exit or a
//! signal) fails the job — the others are terminated (SIGTERM, then SIGKILL
//! after a grace period) and its status becomes the job's.
//!
//! The first rank to fail is not always the first one the launcher sees
//! exit: the survivors of a rank killed by a signal notice the lost
//! connection at once and may be reaped before it. So after the first
//! failure the supervisor fails every fence at once but waits a settle
//! window (1 s, or until every rank exited) before it picks the cause: a
//! rank killed by a signal first, then one that failed on its own, last
//! one that reported a peer's failure (MPI's finalize does, see
//! [`crate::Job::report_peer_failure`]) — and only then terminates the
//! rest.
//!
//! The ranks never outlive the launcher: a launcher that is asked to stop
//! (SIGTERM, SIGINT or SIGHUP, once [`end_jobs_on_termination_signals`]
//! is in force, as it is in `ptlrun`) terminates them the same way and
//! exits with 128 + the signal's number; one that dies abruptly (SIGKILL)
//! takes them with it, since every rank is started with the kernel's
//! parent-death signal (`PR_SET_PDEATHSIG`, SIGKILL) armed. That signal is
//! tied to the *thread* that started the rank, which is why [`launch`]
//! starts and supervises its ranks on the caller's thread.
//!
//! Each rank leads its own process group and is signalled as a group, so
//! a rank that is a wrapper (a script, `valgrind`, `perf record`) does not
//! leave the program it started running. The parent-death signal reaches
//! only the rank itself: a SIGKILLed launcher still orphans the
//! grandchildren of a wrapper that does not pass the signal on.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::env::{self, JobOptions};
use crate::error::RuntimeError;
use crate::kvs::{KvsClient, KvsServer};

/// What to do with the ranks' output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Print to our stdout/stderr, each line prefixed with `[rank] `.
    Forward,
    /// Print without prefixes.
    ForwardRaw,
    /// Keep it in [`LaunchOutcome::output`] (for tests).
    Capture,
}

/// Where the ranks meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// This launcher runs the rendezvous server, listening here (port 0
    /// picks a free port). To let processes on other hosts join, listen on
    /// an address they can reach.
    Serve(SocketAddr),
    /// Join the rendezvous server another launcher runs (host:port); the
    /// job key must be given.
    Join(String),
}

/// Where the launcher places its ranks on the host's CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuBind {
    /// Nowhere in particular: the scheduler places and moves them.
    #[default]
    None,
    /// The `i`-th rank started here on the `i`-th CPU the launcher may use,
    /// round-robin when there are more ranks than CPUs (as `mpirun
    /// --bind-to core:overload-allowed`); a rank's threads, its progress
    /// thread among them, share its CPU. Unbound, four ranks on two CPUs
    /// pair up differently as the scheduler moves them, and an 8-byte
    /// all-reduce alternated between about 5.5 and 8.5 µs per call; bound,
    /// it stayed at 5.7–6.9 (docs/PERFORMANCE.md, stop 36).
    Core,
}

/// A job to launch.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// Number of ranks started here.
    pub ranks: u32,
    /// Number of ranks in the whole job (more than `ranks` when other hosts
    /// start the rest); `None` means `ranks`.
    pub size: Option<u32>,
    /// Rank of the first process started here.
    pub first_rank: u32,
    /// The job key; `None` draws a fresh one (only with
    /// [`Rendezvous::Serve`]).
    pub job_key: Option<u64>,
    /// Where the ranks meet.
    pub rendezvous: Rendezvous,
    /// The program every rank runs.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Transport options passed to every rank.
    pub options: JobOptions,
    /// Output handling.
    pub output: Output,
    /// Kill the job after this long.
    pub timeout: Option<Duration>,
    /// Grace period between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Extra environment variables for every rank.
    pub env: Vec<(String, String)>,
    /// CPU placement of the ranks.
    pub cpu_bind: CpuBind,
}

impl LaunchSpec {
    /// `ranks` copies of `program` with default options.
    pub fn new(ranks: u32, program: impl Into<PathBuf>) -> Self {
        LaunchSpec {
            ranks,
            size: None,
            first_rank: 0,
            job_key: None,
            rendezvous: Rendezvous::Serve(SocketAddr::from(([127, 0, 0, 1], 0))),
            program: program.into(),
            args: Vec::new(),
            options: JobOptions::default(),
            output: Output::Forward,
            timeout: None,
            grace: Duration::from_secs(2),
            env: Vec::new(),
            cpu_bind: CpuBind::None,
        }
    }
}

/// One captured line of output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Which rank printed it.
    pub rank: u32,
    /// True for stderr.
    pub stderr: bool,
    /// The text, without the newline.
    pub text: String,
}

/// How a job ended.
#[derive(Debug)]
pub struct LaunchOutcome {
    /// 0 if every rank exited 0; otherwise the status of the first rank that
    /// failed (its exit code, or 128 + signal number), or 124 on timeout.
    pub status: i32,
    /// The first rank that failed.
    pub failed_rank: Option<u32>,
    /// Why the job failed, for humans.
    pub reason: Option<String>,
    /// Captured output with [`Output::Capture`].
    pub output: Vec<Line>,
}

impl LaunchOutcome {
    /// The captured lines of one rank's stdout, joined with newlines.
    pub fn stdout_of(&self, rank: u32) -> String {
        self.output
            .iter()
            .filter(|l| l.rank == rank && !l.stderr)
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every captured line, one per line, each prefixed with its rank
    /// (`[2]`, or `[2!]` for stderr): what a failing test or a launcher
    /// shows of a job.
    pub fn transcript(&self) -> String {
        self.output
            .iter()
            .map(|l| format!("[{}{}] {}", l.rank, if l.stderr { "!" } else { "" }, l.text))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A fresh random 64-bit job key.
pub fn fresh_job_key() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    // No /dev/urandom: mix time and pid, still unique per launch.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15
}

fn status_code(s: ExitStatus) -> i32 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// The termination signal this process received, 0 if none: set by the
/// handler [`end_jobs_on_termination_signals`] installs, read by [`launch`].
static TERMINATED_BY: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_termination(sig: libc::c_int) {
    // Only an atomic store: the one kind of work a signal handler may do.
    TERMINATED_BY.store(sig, Ordering::SeqCst);
}

/// The signals that ask a launcher to stop.
const TERMINATION_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Make SIGTERM, SIGINT and SIGHUP end the jobs [`launch`] supervises in
/// this process instead of killing the process outright: the supervisor
/// aborts the rendezvous, terminates every rank (SIGTERM, then SIGKILL
/// after the grace period) and returns with status 128 + the signal's
/// number, as `mpirun` and `mpiexec` do. For launcher programs (`ptlrun`);
/// a library user that handles these signals itself should not call it.
pub fn end_jobs_on_termination_signals() -> Result<(), RuntimeError> {
    for sig in TERMINATION_SIGNALS {
        // SAFETY: an all-zero sigaction is a valid value to fill in; the
        // handler only stores to an atomic, which is async-signal-safe;
        // SA_RESTART keeps the supervisor's blocking calls from failing
        // with EINTR.
        let rc = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = note_termination as extern "C" fn(libc::c_int) as usize;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(RuntimeError::Launch(format!(
                "cannot handle signal {sig}: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// The name of a termination signal, for messages.
fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// Arm the parent-death signal in a child about to run a rank, so that
/// the rank is killed if the launcher dies without terminating it.
fn die_with_launcher(cmd: &mut Command) {
    let launcher = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec; it calls
    // only prctl and getppid, which are async-signal-safe, and allocates
    // nothing (raw OS errors carry no heap data).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The launcher may have died between fork and prctl: then the
            // signal will never come, and the rank must not start.
            if libc::getppid() != launcher {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Pin the rank about to start to `cpu` (it and every thread it starts).
fn pin_to(cmd: &mut Command, cpu: usize) {
    let set = nal_sys::affinity::single_cpu(cpu);
    // SAFETY: the closure runs in the forked child before exec; it makes
    // one system call on a set built before the fork, and allocates
    // nothing (raw OS errors carry no heap data).
    unsafe {
        cmd.pre_exec(move || nal_sys::affinity::set(&set));
    }
}

/// Signal a rank and every process of its group (each rank leads its
/// own). A group outlives its leader while anything in it runs, and the
/// kernel does not reuse the number of a live group, so this never
/// reaches a stranger.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; a group that is
    // gone at worst gets ESRCH.
    let _ = unsafe { libc::kill(-(pid as libc::pid_t), sig) };
}

/// How long the supervisor keeps collecting failures after the first one
/// before it decides which rank to blame and terminates the rest: the
/// survivors of a rank that died notice within microseconds (a closed
/// connection) and may be reaped before it.
const SETTLE: Duration = Duration::from_secs(1);

/// A rank that failed.
struct Failure {
    rank: u32,
    /// Its status: the exit code, or 128 + the signal's number.
    code: i32,
    /// The signal that killed it, if one did.
    signaled: Option<i32>,
}

impl Failure {
    fn describe(&self) -> String {
        match self.signaled {
            Some(sig) => format!(
                "rank {} exited with status {} (killed by signal {sig})",
                self.rank, self.code
            ),
            None => format!("rank {} exited with status {}", self.rank, self.code),
        }
    }
}

/// The failure that caused the others, among those seen in the settle
/// window (in the order they were seen): first a rank killed by a signal
/// (nothing in the job sends one before this decision), then a rank that
/// failed on its own, last a rank that said it saw a peer fail
/// (`consequence`, see [`crate::Job::report_peer_failure`]); the earliest
/// within a class.
fn blame(failures: &[Failure], consequence: impl Fn(u32) -> bool) -> Option<&Failure> {
    failures
        .iter()
        .enumerate()
        .min_by_key(|(i, f)| {
            let class = if f.signaled.is_some() {
                0
            } else if !consequence(f.rank) {
                1
            } else {
                2
            };
            (class, *i)
        })
        .map(|(_, f)| f)
}

/// The rendezvous side of a job: the server this launcher runs, or the
/// address of another launcher's.
enum Meeting {
    Local(KvsServer),
    Remote(String, u64),
}

impl Meeting {
    fn addr(&self) -> String {
        match self {
            Meeting::Local(s) => s.addr().to_string(),
            Meeting::Remote(a, _) => a.clone(),
        }
    }

    /// Make every rank's fences fail, here and on other hosts.
    fn abort(&self, why: &str) {
        match self {
            Meeting::Local(s) => s.break_job(why),
            Meeting::Remote(a, key) => {
                if let Ok(mut c) = KvsClient::connect(a, Duration::from_secs(2)) {
                    let _ = c.abort(*key, why);
                }
            }
        }
    }
}

/// Run only the rendezvous server for a job of `size` ranks that other
/// launchers (`Rendezvous::Join`) or hand-started processes join; returns
/// when every rank has joined and left, or fails naming the ranks that
/// never came.
pub fn serve(
    listen: SocketAddr,
    size: u32,
    job_key: u64,
    timeout: Duration,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), RuntimeError> {
    let kvs = KvsServer::start(listen, size, job_key, timeout)?;
    on_ready(kvs.addr());
    kvs.wait_finished(timeout)
}

/// Launch and supervise a job; returns when every rank has exited.
pub fn launch(spec: &LaunchSpec) -> Result<LaunchOutcome, RuntimeError> {
    if spec.ranks == 0 {
        return Err(RuntimeError::Launch("a job needs at least one rank".into()));
    }
    let size = spec.size.unwrap_or(spec.first_rank + spec.ranks);
    if spec
        .first_rank
        .checked_add(spec.ranks)
        .is_none_or(|end| end > size)
    {
        return Err(RuntimeError::Launch(format!(
            "ranks {}..{} do not fit a job of {size}",
            spec.first_rank,
            spec.first_rank as u64 + spec.ranks as u64
        )));
    }
    let (key, meeting) = match &spec.rendezvous {
        Rendezvous::Serve(listen) => {
            let key = spec.job_key.unwrap_or_else(fresh_job_key);
            (
                key,
                Meeting::Local(KvsServer::start(*listen, size, key, spec.options.timeout)?),
            )
        }
        Rendezvous::Join(addr) => {
            let key = spec.job_key.ok_or_else(|| {
                RuntimeError::Launch("joining a rendezvous needs the job key".into())
            })?;
            (key, Meeting::Remote(addr.clone(), key))
        }
    };
    let kvs = &meeting;
    let captured = Arc::new(Mutex::new(Vec::new()));
    let (done_tx, done_rx) = mpsc::channel::<(u32, ExitStatus)>();
    let mut pids = Vec::new();
    let mut io_threads = Vec::new();
    let bind_cpus = match spec.cpu_bind {
        CpuBind::None => None,
        CpuBind::Core => Some(
            nal_sys::affinity::allowed_cpus()
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| {
                    RuntimeError::Launch("cannot read the CPUs this launcher may use".into())
                })?,
        ),
    };
    for rank in spec.first_rank..spec.first_rank + spec.ranks {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, size.to_string())
            .env(env::JOB_KEY, format!("{key:x}"))
            .env(env::BOOTSTRAP, kvs.addr())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in spec.options.to_env() {
            cmd.env(k, v);
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        die_with_launcher(&mut cmd);
        if let Some(cpus) = &bind_cpus {
            let i = (rank - spec.first_rank) as usize % cpus.len();
            pin_to(&mut cmd, cpus[i]);
        }
        // Its own process group, so that terminating the rank reaches
        // what it started too (a wrapper script's program, a tool such as
        // `valgrind` or `perf` in front of it), as `mpirun` does.
        cmd.process_group(0);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for &p in &pids {
                    signal(p, libc::SIGKILL);
                }
                return Err(RuntimeError::Launch(format!(
                    "cannot start {}: {e}",
                    spec.program.display()
                )));
            }
        };
        pids.push(child.id());
        let streams: [(Option<Box<dyn Read + Send>>, bool); 2] = [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                true,
            ),
        ];
        for (stream, is_err) in streams {
            let Some(stream) = stream else { continue };
            let captured = captured.clone();
            let mode = spec.output;
            io_threads.push(std::thread::spawn(move || {
                forward(stream, rank, is_err, mode, &captured)
            }));
        }
        let done = done_tx.clone();
        std::thread::spawn(move || {
            if let Ok(st) = child.wait() {
                let _ = done.send((rank, st));
            }
        });
    }
    drop(done_tx);

    let start = Instant::now();
    // Indexed by local slot (rank - first_rank).
    let first = spec.first_rank;
    let mut alive = vec![true; spec.ranks as usize];
    let mut left = spec.ranks as usize;
    let mut status = 0;
    let mut failed_rank = None;
    let mut reason = None;
    let mut kill_at: Option<Instant> = None;
    let mut terminated = false;
    // The failures seen since the first one, while the settle window runs.
    let mut failures: Vec<Failure> = Vec::new();
    let mut settle_until: Option<Instant> = None;
    loop {
        if reason.is_none() && settle_until.is_some_and(|t| left == 0 || Instant::now() >= t) {
            let consequence = |rank: u32| match &meeting {
                Meeting::Local(server) => server.saw_peer_fail(rank),
                Meeting::Remote(..) => false,
            };
            if let Some(f) = blame(&failures, consequence) {
                status = f.code;
                failed_rank = Some(f.rank);
                reason = Some(f.describe());
            }
            for (r, &p) in pids.iter().enumerate() {
                if alive[r] {
                    signal(p, libc::SIGTERM);
                }
            }
            kill_at = Some(Instant::now() + spec.grace);
        }
        if left == 0 {
            break;
        }
        let sig = TERMINATED_BY.load(Ordering::SeqCst);
        if sig != 0 && !terminated {
            terminated = true;
            status = 128 + sig;
            failed_rank = None;
            let why = format!("{} received: the job was terminated", signal_name(sig));
            kvs.abort(&why);
            reason = Some(why);
            for (r, &p) in pids.iter().enumerate() {
                if alive[r] {
                    signal(p, libc::SIGTERM);
                }
            }
            kill_at = Some(Instant::now() + spec.grace);
        }
        let wait = match (spec.timeout, kill_at) {
            (_, Some(k)) => k.saturating_duration_since(Instant::now()),
            (Some(t), None) => t.saturating_sub(start.elapsed()),
            (None, None) => Duration::from_secs(3600),
        };
        // Wake up now and then to see whether a termination signal came
        // or the settle window ended.
        let wait = wait.min(Duration::from_millis(100));
        match done_rx.recv_timeout(wait.max(Duration::from_millis(1))) {
            Ok((rank, st)) => {
                alive[(rank - first) as usize] = false;
                left -= 1;
                let code = status_code(st);
                if code != 0 && reason.is_none() {
                    if settle_until.is_none() {
                        // Fences fail at once; who is to blame is decided
                        // when the window closes.
                        kvs.abort(&format!("rank {rank} exited with status {code}"));
                        settle_until = Some(Instant::now() + SETTLE);
                    }
                    failures.push(Failure {
                        rank,
                        code,
                        signaled: st.signal(),
                    });
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if kill_at.is_some_and(|k| Instant::now() >= k) {
                    for (r, &p) in pids.iter().enumerate() {
                        if alive[r] {
                            signal(p, libc::SIGKILL);
                        }
                    }
                    kill_at = Some(Instant::now() + Duration::from_secs(3600));
                } else if kill_at.is_none() && spec.timeout.is_some_and(|t| start.elapsed() >= t) {
                    status = 124;
                    let why = format!("job timed out after {:?}", spec.timeout.unwrap_or_default());
                    kvs.abort(&why);
                    reason = Some(why);
                    for (r, &p) in pids.iter().enumerate() {
                        if alive[r] {
                            signal(p, libc::SIGTERM);
                        }
                    }
                    kill_at = Some(Instant::now() + spec.grace);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for t in io_threads {
        let _ = t.join();
    }
    if let Meeting::Local(server) = &meeting {
        remove_inbox_names(server, key, first, &pids);
    }
    // Ranks on other hosts still use our rendezvous (for their last
    // fences): serve them until they are done.
    if let Meeting::Local(server) = &meeting {
        if reason.is_none() && spec.ranks < size {
            if let Err(e) = server.wait_finished(spec.options.timeout) {
                status = 1;
                reason = Some(e.to_string());
            }
        }
    }
    let output = std::mem::take(&mut *captured.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(LaunchOutcome {
        status,
        failed_rank,
        reason,
        output,
    })
}

/// Every local rank has exited: remove the shared-memory inbox names
/// they published, which a rank killed during start-up (before its peers
/// mapped its inbox) leaves in `/dev/shm`. Only names whose pid is the
/// rank's own process are touched, and removing one that is already gone
/// does nothing.
fn remove_inbox_names(server: &KvsServer, job_key: u64, first: u32, pids: &[u32]) {
    for (i, &pid) in pids.iter().enumerate() {
        let rank = first + i as u32;
        let Some(text) = server.published(&crate::transport::contact_key(rank)) else {
            continue;
        };
        if let Some(addr) = crate::transport::published_shm_addr(rank, &text) {
            if addr.pid == pid {
                nal_shm::remove_inbox_name(job_key, &addr);
            }
        }
    }
}

fn forward(
    stream: Box<dyn Read + Send>,
    rank: u32,
    is_err: bool,
    mode: Output,
    captured: &Mutex<Vec<Line>>,
) {
    let mut r = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        let text = String::from_utf8_lossy(&buf);
        match mode {
            Output::Capture => captured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Line {
                    rank,
                    stderr: is_err,
                    text: text.into_owned(),
                }),
            Output::Forward | Output::ForwardRaw => {
                let prefix = if mode == Output::Forward {
                    format!("[{rank}] ")
                } else {
                    String::new()
                };
                let line = format!("{prefix}{text}\n");
                let _ = if is_err {
                    std::io::stderr().lock().write_all(line.as_bytes())
                } else {
                    std::io::stdout().lock().write_all(line.as_bytes())
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(rank: u32, code: i32, signaled: Option<i32>) -> Failure {
        Failure {
            rank,
            code,
            signaled,
        }
    }

    #[test]
    fn a_signal_beats_an_own_failure_which_beats_a_consequence() {
        let consequence = |r: u32| r == 0 || r == 3;
        // Seen in this order: two survivors first, then the cause.
        let seen = [
            failed(0, 1, None),
            failed(3, 1, None),
            failed(1, 3, None),
            failed(2, 137, Some(9)),
        ];
        let pick = |n: usize| blame(&seen[..n], consequence).map(|f| f.rank);
        assert_eq!(pick(0), None);
        assert_eq!(pick(2), Some(0), "only consequences: the earliest");
        assert_eq!(pick(3), Some(1), "an own failure beats consequences");
        assert_eq!(pick(4), Some(2), "a signal beats everything");
        assert_eq!(
            seen[3].describe(),
            "rank 2 exited with status 137 (killed by signal 9)"
        );
    }
}
