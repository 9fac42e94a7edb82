//! A real Slurm cluster of one node for a test: [`Cluster::for_test`]
//! brings up `munged`, `slurmctld` and `slurmd` with a configuration of
//! their own in a fresh private directory, waits until the node is idle,
//! and runs jobs with [`Cluster::srun`]; dropping the cluster cancels its
//! jobs, stops the daemons and removes the directory.
//!
//! Nothing of the machine's own Slurm or MUNGE setup is used or touched:
//! the daemons get their own key, socket, ports, state and spool
//! directories, and the client commands find the cluster through
//! `SLURM_CONF`. Clusters are brought up one at a time per process.
//!
//! A test skips (printing `SKIPPED: ...`) only where the cluster cannot be
//! had at all: not root (slurmd must start jobs as their user, and the
//! daemons run as root here), or Slurm or MUNGE not installed (Debian:
//! `slurmd slurmctld slurm-client munge`). Installed daemons that fail to
//! come up fail the test, with their logs.

use std::fmt;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::launcher::{self, Run};

/// How long the daemons may take to bring the node up (idle).
const START_LIMIT: Duration = Duration::from_secs(30);

/// How long a client command (`sinfo`, `squeue`, `scancel`) may take; it
/// waits for slurmctld, which answers at once when healthy, and retries
/// for much longer when it is not.
const CLIENT_LIMIT: Duration = Duration::from_secs(5);

/// How long a daemon may take to exit once asked to (SIGTERM) before it is
/// killed.
const STOP_LIMIT: Duration = Duration::from_secs(5);

/// Lines of a daemon's log shown when it fails.
const LOG_TAIL: usize = 40;

/// The partition the cluster's node is in.
const PARTITION: &str = "ptl";

/// A directory of its own (mode 0700) under the temporary directory,
/// removed with everything in it on drop. Also used by the Open MPI runner
/// ([`crate::openmpi`]) for the session directory of each `mpirun`.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Create a fresh directory whose name starts with
    /// `portals-tests-<tag>`.
    pub fn new(tag: &str) -> std::io::Result<TempDir> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        // Unix socket paths (munge's, the PMIx servers') must fit in 108
        // bytes, so a long TMPDIR is passed over for /tmp.
        let mut base = std::env::temp_dir();
        if base.as_os_str().len() > 40 {
            base = PathBuf::from("/tmp");
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut last = None;
        for _ in 0..16 {
            let seq = SEQ.fetch_add(1, Ordering::Relaxed);
            let name = format!("portals-tests-{tag}.{}.{seq}.{nanos:x}", std::process::id());
            let path = base.join(name);
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Why a cluster could not be had.
#[derive(Debug)]
pub enum ClusterError {
    /// This machine cannot run one (not root, or Slurm or MUNGE not
    /// installed): the test skips.
    Unavailable(String),
    /// The daemons are installed but one failed to come up: the test fails.
    Daemon {
        /// The daemon at fault: `munged`, `slurmctld` or `slurmd`.
        daemon: &'static str,
        /// What went wrong.
        problem: String,
        /// The end of the daemons' logs.
        logs: String,
    },
    /// Preparing the cluster's directory and files failed.
    Setup(String),
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Unavailable(why) => write!(f, "no Slurm cluster here: {why}"),
            ClusterError::Daemon {
                daemon,
                problem,
                logs,
            } => write!(f, "{daemon}: {problem}\n{logs}"),
            ClusterError::Setup(why) => write!(f, "preparing a Slurm cluster: {why}"),
        }
    }
}

impl std::error::Error for ClusterError {}

/// A daemon of the cluster, in a process group of its own; stopped (and
/// reaped) on drop.
struct Daemon {
    name: &'static str,
    child: Option<Child>,
    /// Its log file (if it was given one) and the file its stderr goes to:
    /// a daemon that fails early writes to stderr only.
    log: Option<PathBuf>,
    stderr: PathBuf,
}

impl Daemon {
    fn start(
        name: &'static str,
        program: &Path,
        args: &[&str],
        dir: &Path,
    ) -> Result<Daemon, ClusterError> {
        let stderr = dir.join(format!("{name}.stderr"));
        let file = fs::File::create(&stderr)
            .map_err(|e| ClusterError::Setup(format!("{}: {e}", stderr.display())))?;
        let out = file
            .try_clone()
            .map_err(|e| ClusterError::Setup(format!("{}: {e}", stderr.display())))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(file)
            .process_group(0);
        launcher::scrub_env(&mut cmd, client_env_var);
        let child = cmd.spawn().map_err(|e| ClusterError::Daemon {
            daemon: name,
            problem: format!("cannot start {}: {e}", program.display()),
            logs: String::new(),
        })?;
        Ok(Daemon {
            name,
            child: Some(child),
            log: None,
            stderr,
        })
    }

    /// The end of its log (or, where that is empty, of its stderr).
    fn logs(&self) -> String {
        let text = self
            .log
            .as_ref()
            .and_then(|p| fs::read_to_string(p).ok())
            .filter(|t| !t.trim().is_empty())
            .or_else(|| fs::read_to_string(&self.stderr).ok())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
        format!(
            "--- {} log (last {} lines):\n{}\n",
            self.name,
            tail.len(),
            tail.join("\n")
        )
    }

    /// `Err` with its logs if it has exited.
    fn check(&mut self) -> Result<(), ClusterError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => {
                self.child = None;
                Err(ClusterError::Daemon {
                    daemon: self.name,
                    problem: format!("exited ({st}) while the cluster was starting"),
                    logs: self.logs(),
                })
            }
            Err(e) => Err(ClusterError::Daemon {
                daemon: self.name,
                problem: format!("cannot wait for it: {e}"),
                logs: self.logs(),
            }),
        }
    }

    /// Ask it to stop (SIGTERM to its process group), kill the group if it
    /// has not within [`STOP_LIMIT`], and reap it.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        launcher::signal(child.id(), true, libc::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < STOP_LIMIT {
            if !matches!(child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Also the rest of its group (slurmctld's slurmscriptd), should it
        // have outlived the daemon.
        launcher::signal(child.id(), true, libc::SIGKILL);
        let _ = child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Variables of the test's environment that neither the daemons nor the
/// jobs may see: those of a launcher that started the test, and the
/// runtime's own (`PTL_*`), which would override what the job is given.
fn client_env_var(var: &str) -> bool {
    launcher::is_launcher_var(var) || var.starts_with("PTL_")
}

/// A program from Slurm or MUNGE: on `PATH`, or in the `sbin` directories
/// a non-login shell's `PATH` may lack.
fn program(name: &str) -> Option<PathBuf> {
    launcher::find_in_path(name).or_else(|| {
        ["/usr/local/sbin", "/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    })
}

/// This host's name as slurmd looks itself up in `slurm.conf`: without
/// its domain.
fn short_hostname() -> Result<String, ClusterError> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`,
    // which lives through the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(ClusterError::Setup(format!(
            "gethostname: {}",
            std::io::Error::last_os_error()
        )));
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..len]).into_owned();
    let short = name.split('.').next().unwrap_or_default().to_string();
    if short.is_empty() {
        return Err(ClusterError::Setup("this host has no name".into()));
    }
    Ok(short)
}

/// Two TCP ports free right now, for slurmctld and slurmd. Both listeners
/// are held until both ports are known, so the two differ.
fn free_ports() -> Result<(u16, u16), ClusterError> {
    let bind = || {
        TcpListener::bind(("0.0.0.0", 0))
            .and_then(|l| Ok((l.local_addr()?.port(), l)))
            .map_err(|e| ClusterError::Setup(format!("finding a free port: {e}")))
    };
    let (a, _la) = bind()?;
    let (b, _lb) = bind()?;
    Ok((a, b))
}

/// The Slurm and MUNGE programs a cluster needs.
struct Programs {
    munged: PathBuf,
    slurmctld: PathBuf,
    slurmd: PathBuf,
    srun: PathBuf,
    sinfo: PathBuf,
    squeue: PathBuf,
    scancel: PathBuf,
}

impl Programs {
    fn find() -> Result<Programs, ClusterError> {
        let mut missing = Vec::new();
        let mut get = |name: &str, package: &str| {
            program(name).unwrap_or_else(|| {
                missing.push(format!("{name} ({package})"));
                PathBuf::new()
            })
        };
        let programs = Programs {
            munged: get("munged", "munge"),
            slurmctld: get("slurmctld", "slurmctld"),
            slurmd: get("slurmd", "slurmd"),
            srun: get("srun", "slurm-client"),
            sinfo: get("sinfo", "slurm-client"),
            squeue: get("squeue", "slurm-client"),
            scancel: get("scancel", "slurm-client"),
        };
        if missing.is_empty() {
            Ok(programs)
        } else {
            Err(ClusterError::Unavailable(format!(
                "not installed: {} (Debian/Ubuntu packages in parentheses)",
                missing.join(", ")
            )))
        }
    }
}

/// A running single-node Slurm cluster (see the module docs). Dropping it
/// cancels its jobs, stops its daemons and removes its directory.
pub struct Cluster {
    programs: Programs,
    host: String,
    conf: PathBuf,
    /// munged, slurmctld, slurmd: stopped in the reverse order.
    daemons: Vec<Daemon>,
    /// Whether the node came up: only then can jobs have been started
    /// (and need cancelling), and slurmctld answer.
    up: bool,
    /// Declared after the daemons, so that it is removed after they have
    /// stopped writing to it.
    dir: TempDir,
    /// One cluster at a time per process (the tests of one binary may run
    /// on threads of one process): two would compete for the CPUs, and the
    /// orphan sweep on drop takes every adopted Slurm process for its own.
    _serial: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Bring up a cluster for a test: `None`, after printing a
    /// `SKIPPED: ...` line, where this machine cannot run one (see
    /// [`ClusterError::Unavailable`]).
    ///
    /// # Panics
    ///
    /// If the daemons are installed but the cluster does not come up, with
    /// the daemons' logs.
    pub fn for_test() -> Option<Cluster> {
        match Cluster::start() {
            Ok(c) => Some(c),
            Err(ClusterError::Unavailable(why)) => {
                eprintln!("SKIPPED: no Slurm cluster: {why}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Bring up a cluster: munged, then slurmctld and slurmd, then wait
    /// (at most 30 s) until the node is idle.
    pub fn start() -> Result<Cluster, ClusterError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(ClusterError::Unavailable(
                "not root (slurmd must be root to start jobs)".into(),
            ));
        }
        let programs = Programs::find()?;
        static SERIAL: Mutex<()> = Mutex::new(());
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        // Before slurmd starts: the slurmstepd processes it starts for jobs
        // detach from it, and must be adopted by the test so that they
        // can be cleaned up should a job outlive the cluster.
        launcher::become_subreaper();
        let dir = TempDir::new("slurm")
            .map_err(|e| ClusterError::Setup(format!("creating a directory: {e}")))?;
        let host = short_hostname()?;
        let mut cluster = Cluster {
            programs,
            conf: dir.path().join("slurm.conf"),
            host,
            daemons: Vec::new(),
            up: false,
            dir,
            _serial: serial,
        };
        cluster.start_munged()?;
        cluster.write_conf()?;
        let conf = cluster.conf.to_string_lossy().into_owned();
        let args = ["-D", "-f", &conf];
        for (name, program) in [
            ("slurmctld", cluster.programs.slurmctld.clone()),
            ("slurmd", cluster.programs.slurmd.clone()),
        ] {
            let mut d = Daemon::start(name, &program, &args, cluster.dir.path())?;
            d.log = Some(cluster.dir.path().join(format!("{name}.log")));
            cluster.daemons.push(d);
        }
        cluster.wait_until_idle()?;
        cluster.up = true;
        Ok(cluster)
    }

    /// munged with a fresh key and a socket of its own, ready to answer.
    fn start_munged(&mut self) -> Result<(), ClusterError> {
        let dir = self.dir.path();
        let key = dir.join("munge.key");
        let mut bytes = [0u8; 1024];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .and_then(|()| {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o400)
                    .open(&key)?
                    .write_all(&bytes)
            })
            .map_err(|e| ClusterError::Setup(format!("writing the munge key: {e}")))?;
        let socket = dir.join("munge.socket");
        let log = dir.join("munged.log");
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let args = [
            // In the foreground, so that it is our child, stopped with the
            // cluster; forced, since the directory checks it makes for a
            // system-wide daemon reject some harmless layouts (a sticky
            // /tmp above the key).
            "--foreground".to_string(),
            "--force".to_string(),
            format!("--socket={}", path(&socket)),
            format!("--key-file={}", path(&key)),
            format!("--pid-file={}", path(&dir.join("munged.pid"))),
            format!("--log-file={}", path(&log)),
            format!("--seed-file={}", path(&dir.join("munged.seed"))),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut munged = Daemon::start("munged", &self.programs.munged, &args, dir)?;
        munged.log = Some(log);
        self.daemons.push(munged);
        let t0 = Instant::now();
        loop {
            if UnixStream::connect(&socket).is_ok() {
                return Ok(());
            }
            for d in &mut self.daemons {
                d.check()?;
            }
            if t0.elapsed() > START_LIMIT {
                return Err(ClusterError::Daemon {
                    daemon: "munged",
                    problem: format!("no socket at {} after {START_LIMIT:?}", socket.display()),
                    logs: self.logs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A minimal `slurm.conf` for one node, this host, with everything in
    /// the cluster's directory.
    fn write_conf(&self) -> Result<(), ClusterError> {
        let dir = self.dir.path().to_string_lossy().into_owned();
        for sub in ["state", "spool"] {
            DirBuilder::new()
                .mode(0o700)
                .create(self.dir.path().join(sub))
                .map_err(|e| ClusterError::Setup(format!("{dir}/{sub}: {e}")))?;
        }
        // Empty: no SPANK plugins from the system's plugstack.conf.
        fs::write(self.dir.path().join("plugstack.conf"), "")
            .map_err(|e| ClusterError::Setup(format!("{dir}/plugstack.conf: {e}")))?;
        let (ctld_port, slurmd_port) = free_ports()?;
        let host = &self.host;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let conf = format!(
            "# One test's single-node cluster (portals-tests, tests/src/slurm.rs).
ClusterName=ptltests
# The loopback address, so that the host name need not resolve.
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
# Both the daemons and the clients (srun) reach munged through this
# socket, for authentication and for signing job credentials alike.
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
PlugStackConfig={dir}/plugstack.conf
# Nothing that needs cgroups or accounting, which a container may lack.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node is what this file says, whatever slurmd detects: it must not
# be drained for having fewer CPUs than listed.
SlurmdParameters=config_overrides
ReturnToService=2
# No mail is sent; without this, slurmctld complains that /bin/mail is
# missing.
MailProg=/bin/true
# A cancelled job is killed 2 s after SIGTERM (30 s by default).
KillWait=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES State=UP MaxTime=INFINITE
"
        );
        fs::write(&self.conf, conf)
            .map_err(|e| ClusterError::Setup(format!("{}: {e}", self.conf.display())))
    }

    /// Wait until `sinfo` reports the node idle.
    fn wait_until_idle(&mut self) -> Result<(), ClusterError> {
        let t0 = Instant::now();
        let mut state = String::new();
        while t0.elapsed() < START_LIMIT {
            for d in &mut self.daemons {
                d.check()?;
            }
            let node = self.host.clone();
            if let Ok(r) = self.client(
                &self.programs.sinfo,
                &["--noheader", "--Node", "--nodes", &node, "--format=%T"],
            ) {
                state = format!("{} {}", r.stdout.trim(), r.stderr.trim())
                    .trim()
                    .to_string();
                if r.ok() && r.stdout.trim() == "idle" {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(ClusterError::Daemon {
            daemon: "slurmd",
            problem: format!(
                "node {} not idle after {START_LIMIT:?} (sinfo: {state:?})",
                self.host
            ),
            logs: self.logs(),
        })
    }

    /// The end of every daemon's log.
    fn logs(&self) -> String {
        self.daemons.iter().map(Daemon::logs).collect()
    }

    /// A command that talks to this cluster (`srun`, `sinfo`, ...), with
    /// the test's launcher and runtime variables removed.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        launcher::scrub_env(&mut cmd, client_env_var);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// Run a client command, killed after [`CLIENT_LIMIT`]; `Err` with
    /// what it said if it overran (slurmctld not answering).
    fn client(&self, program: &Path, args: &[&str]) -> Result<Run, Run> {
        let mut cmd = self.command(program);
        cmd.args(args);
        let what = format!("{} {args:?}", program.display());
        launcher::try_run(cmd, &what, CLIENT_LIMIT, |pid| {
            launcher::signal(pid, true, libc::SIGKILL)
        })
    }

    /// The cluster's `slurm.conf`, for commands a test runs itself (with
    /// `SLURM_CONF` set to it).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// Run `srun --overcommit --job-name=<unique> ARGS` on this cluster
    /// and capture its output (the ranks' output: srun forwards it).
    ///
    /// `--overcommit` lets a job have more tasks than the node has CPUs
    /// (4 ranks on 2 cores). srun's environment is the test's without
    /// launcher variables (`PMI_*`, `PMIX_*`, `OMPI_*`, `SLURM_*`) or the
    /// runtime's (`PTL_*`), plus `SLURM_CONF`; pass the job's variables
    /// with `--export`. A run that outlasts `timeout` has its job
    /// cancelled, srun killed, and the test panics.
    pub fn srun(&self, args: &[&str], timeout: Duration) -> Run {
        static JOBS: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "ptl-{}-{}",
            std::process::id(),
            JOBS.fetch_add(1, Ordering::Relaxed)
        );
        let mut cmd = self.command(&self.programs.srun);
        cmd.arg("--overcommit")
            .arg(format!("--job-name={name}"))
            .args(args);
        launcher::run(cmd, &format!("srun {args:?}"), timeout, |_| {
            // Cancelling the job ends its tasks, and srun with them.
            let _ = self.client(&self.programs.scancel, &["--name", &name]);
        })
    }

    /// Cancel every job of the cluster and wait (bounded) until none is
    /// left, so that no job outlives it.
    fn cancel_jobs(&self) {
        let pending = || {
            self.client(&self.programs.squeue, &["--noheader", "--format=%i"])
                .map_or(true, |r| !r.ok() || !r.stdout.trim().is_empty())
        };
        if !pending() {
            return;
        }
        let _ = self.client(&self.programs.scancel, &["--partition", PARTITION]);
        let t0 = Instant::now();
        while pending() && t0.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.up {
            self.cancel_jobs();
        }
        while let Some(mut d) = self.daemons.pop() {
            d.stop();
        }
        // What of the jobs survived slurmd: their slurmstepd processes
        // (adopted by this process, as slurmd detaches them, and ours, as
        // clusters are serialized per process), and the tasks they started,
        // which have this cluster's SLURM_CONF. Also the steps that ended
        // normally: their slurmstepd is a zombie until reaped here.
        let conf = format!("SLURM_CONF={}", self.conf.display());
        launcher::kill_orphans(|o| {
            launcher::environ_has(o.environ, &conf)
                || fs::read_to_string(format!("/proc/{}/comm", o.pid))
                    .is_ok_and(|c| c.trim_end() == "slurmstepd")
        });
    }
}
