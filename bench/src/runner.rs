//! Running one benchmark on one implementation and collecting its records:
//! raw sockets in this process, portals-rs as a job of [`Params::ranks`]
//! ranks (two, or N for the collectives) that re-executes this program
//! (`ptl-bench rank ...`) under the runtime's launcher, the C peers
//! through `bench/c/run_peer.sh -n N`, and UCX and libfabric through their
//! own tools ([`crate::tool_peers`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use portals_runtime::launch::{launch, CpuBind, LaunchSpec, Output};
use portals_runtime::JobOptions;
use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::impls::{Impl, Level, Progress, RawTransport};
use crate::params::{scale_iters, Bench, Params};
use crate::raw::{self, Placement, Stats, UDP_MAX_PAYLOAD};
use crate::record::Record;
use crate::stats::Summary;
use crate::tool_peers::ToolPeer;

/// Name of the hidden subcommand a project rank runs.
pub const RANK_SUBCOMMAND: &str = "rank";

/// What a project rank is asked to run (the JSON argument of `ptl-bench rank`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankJob {
    /// Portals or MPI level.
    pub level: Level,
    /// Label for the records.
    pub label: String,
    /// The benchmark.
    pub params: Params,
}

/// Where the pieces live and how long a run may take.
#[derive(Debug, Clone)]
pub struct Runner {
    /// The `ptl-bench` executable the project ranks run.
    pub exe: PathBuf,
    /// `bench/c`: the C peers, their Makefile and `run_peer.sh`.
    pub peer_dir: PathBuf,
    /// Longest one run (one implementation, one benchmark) may take.
    pub timeout: Duration,
    /// Bind each rank to its own CPU (`--bind-to core`), as the peers do;
    /// only when there are no more ranks than CPUs (see [`Runner::binds`]).
    pub bind: bool,
    /// With [`bind`](Self::bind): bind also when there are more ranks than
    /// CPUs, round-robin, the project's ranks and the peers' alike (Open
    /// MPI: `--bind-to core:overload-allowed`). Unbound, oversubscribed
    /// ranks pair up differently as the scheduler moves them, and short
    /// collectives' timings change with the pairing.
    pub bind_oversubscribed: bool,
}

impl Runner {
    /// Defaults: this executable, the source tree's `bench/c`, 15 minutes,
    /// ranks bound to cores.
    pub fn new() -> Result<Runner> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::io("finding the ptl-bench executable", e))?;
        Ok(Runner {
            exe,
            peer_dir: default_peer_dir(),
            timeout: Duration::from_secs(900),
            bind: true,
            bind_oversubscribed: false,
        })
    }

    /// Whether a job of `ranks` ranks is bound to cores: when binding is on
    /// and every rank can have a CPU of its own. Oversubscribed jobs (4
    /// ranks on 2 CPUs) run unbound on both sides, as `mpiexec --bind-to
    /// none` does, so that the scheduler can move a rank off a CPU whose
    /// other rank is busy.
    pub fn binds(&self, ranks: usize) -> bool {
        self.bind
            && crate::cpu::allowed_cpus()
                .is_ok_and(|c| self.bind_oversubscribed || ranks <= c.len())
    }

    /// Run `p` on `imp`; the records it printed (rank 0 for jobs).
    pub fn run(&self, imp: &Impl, p: &Params) -> Result<Vec<Record>> {
        p.validate().map_err(BenchError::Invalid)?;
        if !imp.supports(p.bench) {
            return Err(BenchError::Invalid(imp.lacks(p.bench)));
        }
        let recs = match imp {
            Impl::RawPingPong { .. } | Impl::RawStream { .. } => run_raw(imp, p),
            Impl::Project {
                level,
                nal,
                progress,
                uring,
            } => self.run_project(*level, nal, *progress, *uring, &imp.label(), p),
            Impl::Peer(name) => self.run_peer(name, p),
            Impl::Tool(t) => crate::tool_peers::run(*t, p, self.binds(2), self.timeout),
            Impl::Rpc(server) => crate::rpc::run(self, *server, p),
        }?;
        // Right after the run, while the CPUs are still busy: the line
        // transfer time its points were measured at (see `c2c.rs`).
        // A property of the host at the time, not of the run's binding: an
        // oversubscribed run's points get it too.
        if p.bench.settles() && p.settle_ms > 0 && !recs.is_empty() {
            if let Some(ns) = crate::c2c::first_two_cpus_ns() {
                let ns = (ns * 10.0).round() / 10.0;
                return Ok(recs.into_iter().map(|r| r.with("c2c_ns", ns)).collect());
            }
        }
        Ok(recs)
    }

    fn run_project(
        &self,
        level: Level,
        nal: &str,
        progress: Progress,
        uring: bool,
        label: &str,
        p: &Params,
    ) -> Result<Vec<Record>> {
        let what = format!("{label} {}", p.run_name());
        let job = RankJob {
            level,
            label: label.to_string(),
            params: p.clone(),
        };
        let arg = serde_json::to_string(&job).map_err(|e| BenchError::Invalid(e.to_string()))?;
        let ranks = u32::try_from(p.ranks)
            .map_err(|_| BenchError::Invalid(format!("{} ranks", p.ranks)))?;
        let mut spec = LaunchSpec::new(ranks, &self.exe);
        spec.args = vec![OsString::from(RANK_SUBCOMMAND), OsString::from(arg)];
        // The transport settings of ptl-bench's own environment reach
        // the ranks, as under ptlrun: the launcher writes the options that
        // always have a value (`PTL_WAIT_SPIN_US`, ...) into the ranks'
        // environment, so defaults here would silently undo them.
        // Progress and back end are the variant's.
        spec.options = JobOptions {
            progress: match progress {
                Progress::Thread => nal_tcp::ProgressMode::Thread,
                Progress::Poll => nal_tcp::ProgressMode::Poll,
            },
            backend: if uring {
                nal_tcp::Backend::IoUring
            } else {
                nal_tcp::Backend::Epoll
            },
            timeout: Duration::from_secs(60),
            ..JobOptions::from_env()?
        };
        // After the options' variables, so it overrides their PTL_NAL: a NAL
        // this build's runtime does not know is passed through untouched.
        spec.env = vec![(portals_runtime::env::NAL.to_string(), nal.to_string())];
        // The launcher pins rank i to the i-th CPU before it starts, so
        // every thread of the rank shares that CPU.
        spec.cpu_bind = if self.binds(p.ranks) {
            CpuBind::Core
        } else {
            CpuBind::None
        };
        spec.output = Output::Capture;
        spec.timeout = Some(self.timeout);
        let out = launch(&spec)?;
        let stdout = out.stdout_of(0);
        if out.status != 0 {
            let errs: Vec<String> = out
                .output
                .iter()
                .filter(|l| l.stderr)
                .map(|l| format!("[{}] {}", l.rank, l.text))
                .collect();
            return Err(BenchError::Run {
                what,
                why: format!(
                    "{} (status {}){}",
                    out.reason.unwrap_or_default(),
                    out.status,
                    tail(&errs.join("\n"))
                ),
            });
        }
        parse_records(&stdout, &what)
    }

    fn run_peer(&self, name: &str, p: &Params) -> Result<Vec<Record>> {
        let what = format!("{name} {}", p.run_name());
        let script = self.peer_dir.join("run_peer.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .arg("-n")
            .arg(p.ranks.to_string())
            .arg(name)
            .arg(p.bench.name())
            .args(p.c_args())
            .env("PEER_TIMEOUT", self.timeout.as_secs().max(1).to_string())
            .env("PEER_BIND", self.bind_value(p.ranks));
        // A collective prints a known number of records; a job that then
        // hangs in MPI_Finalize (MPICH 4.0.2 over UCX 1.13 TCP with more
        // than two ranks does, often) is stopped after a grace period and
        // its records are kept, marked `stopped_after_output`.
        let expected = p.expected_records();
        let out = run_stopping_after(cmd, expected, FINALIZE_GRACE)
            .map_err(|e| BenchError::io(format!("running {}", script.display()), e))?;
        if !out.stopped && !out.status.success() {
            return Err(BenchError::Run {
                what,
                why: format!("{}{}", out.status, tail(&out.stderr)),
            });
        }
        let recs = parse_records(&out.stdout, &what)?;
        Ok(if out.stopped {
            recs.into_iter()
                .map(|r| r.with("stopped_after_output", true))
                .collect()
        } else {
            recs
        })
    }

    /// `core` or `none`: the value of `PEER_BIND` for the C peers.
    fn bind_value(&self, ranks: usize) -> &'static str {
        if self.binds(ranks) {
            "core"
        } else {
            "none"
        }
    }
}

/// How long a peer job may take to exit after printing all its records.
pub const FINALIZE_GRACE: Duration = Duration::from_secs(10);

/// What a command run by [`run_stopping_after`] printed, and how it ended.
struct Captured {
    stdout: String,
    stderr: String,
    status: std::process::ExitStatus,
    /// Stopped (SIGTERM) after printing every expected record.
    stopped: bool,
}

/// Run `cmd` to its end, capturing its output; once it has printed
/// `expected` record lines (lines starting with `{`), give it `grace` to
/// exit, then send it SIGTERM (`run_peer.sh` execs `timeout`, which passes
/// the signal on to the whole MPI job).
fn run_stopping_after(
    mut cmd: Command,
    expected: Option<usize>,
    grace: Duration,
) -> std::io::Result<Captured> {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Instant;

    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (Some(out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(std::io::Error::other("no pipes to the child"));
    };
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stdout = String::new();
    let mut records = 0;
    let mut deadline: Option<Instant> = None;
    let mut stopped = false;
    loop {
        let line = match deadline {
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
        };
        match line {
            Ok(l) => {
                if l.trim_start().starts_with('{') {
                    records += 1;
                }
                stdout.push_str(&l);
                stdout.push('\n');
                if deadline.is_none() && expected.is_some_and(|n| records >= n) {
                    deadline = Some(Instant::now() + grace);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if child.try_wait()?.is_none() {
                    let pid = libc::pid_t::try_from(child.id())
                        .map_err(|_| std::io::Error::other("child pid out of range"))?;
                    // SAFETY: kill(2) with the pid of our own child, which
                    // has not been reaped yet (try_wait just saw it running).
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    stopped = true;
                }
                // The pipe closes once the job's processes are gone.
                let rest: Vec<String> = rx.iter().collect();
                for l in rest {
                    stdout.push_str(&l);
                    stdout.push('\n');
                }
                break;
            }
        }
    }
    let status = child.wait()?;
    Ok(Captured {
        stdout,
        stderr: errs.join().unwrap_or_default(),
        status,
        stopped,
    })
}

/// Wait for `child` at most `limit`, killing it after that; its status.
pub(crate) fn wait_with_timeout(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(Some(s));
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `bench/c` in the source tree this program was built from.
pub fn default_peer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("c")
}

/// The last lines of an error output, prefixed with a newline (empty if none).
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let from = lines.len().saturating_sub(12);
    format!("\n{}", lines[from..].join("\n"))
}

/// Parse every line that looks like a JSON object as a [`Record`]; other
/// lines (a launcher's chatter) are ignored.
pub fn parse_records(text: &str, what: &str) -> Result<Vec<Record>> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            Record::parse_line(l).map_err(|e| BenchError::Parse {
                what: format!("output of {what}"),
                why: format!("{e} in line {l}"),
            })
        })
        .collect()
}

/// Raw-socket runs: every point measured `p.reps` times in a fresh pair of
/// processes; a repetition's value is its average, `value` the median over
/// repetitions, `sample_median` the median of the per-repetition medians.
fn run_raw(imp: &Impl, p: &Params) -> Result<Vec<Record>> {
    let label = imp.label();
    let io = |e: std::io::Error| BenchError::io(format!("{label} {}", p.bench), e);
    let mut records = Vec::new();
    for &size in &p.sizes {
        let mut reps: Vec<Stats> = Vec::with_capacity(p.reps);
        let mut window = None;
        for _ in 0..p.reps {
            let st = match *imp {
                Impl::RawPingPong {
                    transport,
                    mode,
                    pinned,
                } => {
                    let iters = scale_iters(p.iters, size, 8192, 20);
                    let place = placement(pinned);
                    match transport {
                        RawTransport::Tcp => raw::tcp_pingpong_with(size, iters, mode, place),
                        RawTransport::Udp if size > UDP_MAX_PAYLOAD => break,
                        RawTransport::Udp => raw::udp_pingpong_with(size, iters, mode, place),
                    }
                }
                Impl::RawStream { pinned } => {
                    if size == 0 {
                        break;
                    }
                    let batch = raw::stream_batch(size);
                    window = Some(batch);
                    let msgs = if p.bench == Bench::RpcBulk {
                        // About the bytes an rpc-bulk repetition moves.
                        scale_iters(p.iters, size, 8 << 20, 2) * batch
                    } else {
                        scale_iters(p.iters, size, 65536, 2) * batch
                    };
                    raw::tcp_stream_with(size, msgs, placement(pinned))
                }
                _ => {
                    return Err(BenchError::Invalid(format!(
                        "{label} is not a raw benchmark"
                    )))
                }
            };
            reps.push(st.map_err(io)?);
        }
        let Some(first) = reps.first() else { continue };
        let mut means: Vec<f64> = reps.iter().map(|s| s.mean).collect();
        let mut medians: Vec<f64> = reps.iter().map(|s| s.median).collect();
        let (Some(agg), Some(med)) = (Summary::of(&mut means), Summary::of(&mut medians)) else {
            continue;
        };
        let pinned = !label.ends_with("-unpinned");
        let mut r = Record::new(
            p.bench.name(),
            &label,
            size as u64,
            first.messages as u64,
            first.unit.as_str(),
            agg,
        )
        .with("sample_median", med.median)
        .with("pinned", pinned);
        if let Some(w) = window {
            r = r.with("window", w);
        }
        if p.bench == Bench::RpcBulk {
            // One stream is the floor of both a put and a get.
            for op in ["put", "get"] {
                records.push(r.clone().with("op", op).with("same_stream", true));
            }
            continue;
        }
        records.push(r);
    }
    Ok(records)
}

fn placement(pinned: bool) -> Placement {
    if pinned {
        Placement::Pinned
    } else {
        Placement::Unpinned
    }
}

/// The body of `ptl-bench rank JOB`: bind to a CPU if asked, run the
/// benchmark as this rank, print rank 0's records on stdout.
pub fn rank_main(job_json: &str) -> Result<()> {
    let job: RankJob = serde_json::from_str(job_json).map_err(|e| BenchError::Parse {
        what: "rank job description".into(),
        why: e.to_string(),
    })?;
    job.params.validate().map_err(BenchError::Invalid)?;
    let mut emit = |r: Record| -> Result<()> {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        writeln!(o, "{}", r.to_line())
            .and_then(|_| o.flush())
            .map_err(|e| BenchError::io("writing a record", e))
    };
    match job.level {
        Level::Mpi => crate::mpi_level::run(&job.params, &job.label, &mut emit),
        Level::Portals => crate::portals_level::run(&job.params, &job.label, &mut emit),
    }
}

/// Whether a project variant can run here: a tiny Portals-level latency job.
/// Used to detect NALs (`udp`) this build does not have yet.
pub fn probe_project(runner: &Runner, nal: &str) -> Result<()> {
    let imp = Impl::Project {
        level: Level::Portals,
        nal: nal.to_string(),
        progress: Progress::Thread,
        uring: false,
    };
    let mut p = Params::preset(Bench::Latency, crate::params::Preset::Smoke);
    p.sizes = vec![8];
    let mut quick = runner.clone();
    quick.timeout = Duration::from_secs(30);
    let recs = quick.run(&imp, &p)?;
    if recs.is_empty() {
        return Err(BenchError::Run {
            what: format!("{imp} probe"),
            why: "printed no record".into(),
        });
    }
    Ok(())
}

/// Whether a C peer runs here: a tiny latency point (one-sided latency for
/// the variant that has only the one-sided benchmarks).
pub fn probe_peer(runner: &Runner, name: &str) -> Result<()> {
    let bench = if Impl::Peer(name.to_string()).supports(Bench::Latency) {
        Bench::Latency
    } else {
        Bench::RmaLatency
    };
    let mut p = Params::preset(bench, crate::params::Preset::Smoke);
    p.sizes = vec![8];
    let mut quick = runner.clone();
    quick.timeout = Duration::from_secs(60);
    let recs = quick.run(&Impl::Peer(name.to_string()), &p)?;
    if recs.is_empty() {
        return Err(BenchError::Run {
            what: format!("{name} probe"),
            why: "printed no record".into(),
        });
    }
    Ok(())
}

/// Whether a tool peer (UCX, libfabric) runs here: a tiny latency point.
pub fn probe_tool(runner: &Runner, peer: ToolPeer) -> Result<()> {
    let mut p = Params::preset(Bench::Latency, crate::params::Preset::Smoke);
    p.sizes = vec![8];
    let mut quick = runner.clone();
    quick.timeout = Duration::from_secs(60);
    let recs = quick.run(&Impl::Tool(peer), &p)?;
    if recs.is_empty() {
        return Err(BenchError::Run {
            what: format!("{} probe", peer.label()),
            why: "printed no record".into(),
        });
    }
    Ok(())
}

/// Build the C peers (`make -C bench/c` for each MPI whose `mpicc` exists);
/// returns the MPI families built (`openmpi`, `mpich`).
pub fn build_peers(peer_dir: &std::path::Path) -> Result<Vec<&'static str>> {
    let mut built = Vec::new();
    for (family, cc) in [("openmpi", "mpicc.openmpi"), ("mpich", "mpicc.mpich")] {
        if !on_path(cc) {
            continue;
        }
        let out = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(peer_dir)
            .arg(family)
            .output()
            .map_err(|e| BenchError::io("running make", e))?;
        if !out.status.success() {
            return Err(BenchError::Run {
                what: format!("make -C {} {family}", peer_dir.display()),
                why: tail(&String::from_utf8_lossy(&out.stderr)),
            });
        }
        built.push(family);
    }
    Ok(built)
}

/// Whether `prog` is an executable on `PATH`.
pub fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| {
            std::fs::metadata(d.join(prog)).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(bind: bool, bind_oversubscribed: bool) -> Runner {
        Runner {
            exe: PathBuf::from("ptl-bench"),
            peer_dir: PathBuf::from("bench/c"),
            timeout: Duration::from_secs(1),
            bind,
            bind_oversubscribed,
        }
    }

    #[test]
    fn oversubscribed_runs_are_bound_only_when_asked() {
        let cpus = crate::cpu::allowed_cpus().expect("affinity").len();
        let (fits, over) = (cpus, cpus + 1);
        assert!(runner(true, false).binds(fits));
        assert!(!runner(true, false).binds(over));
        assert!(runner(true, true).binds(over));
        assert_eq!(runner(true, true).bind_value(over), "core");
        assert!(!runner(false, true).binds(fits), "--no-bind wins");
        assert_eq!(runner(false, false).bind_value(fits), "none");
    }
}
