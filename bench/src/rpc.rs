//! The object-store benchmarks: `rpc-rate` (4 KB gets and puts per second
//! from 1, 4, 16 clients) and `rpc-bulk` (one client putting and getting
//! 1 MB to 256 MB objects, MB/s; with it `rpc-cpu`, the server's CPU
//! seconds per GB moved), on the object store over portals-rpc
//! (`objstore-server`, standalone over TCP), over gRPC
//! (`objstore-grpc-server`, tonic), and over plain TCP sockets
//! (`objstore-raw-server`: the same store with no RPC layer, the floor
//! under both; `objstore::raw`).
//!
//! Both run the same way: a fresh server on a fresh store directory, then
//! `objstore-load` (one load generator, either transport: the same loop,
//! the same clients) per point, which prints one JSON line per
//! repetition. The server's CPU time is read from `/proc/PID/stat` around
//! each repetition (user + system: what `getrusage(RUSAGE_SELF)` would
//! report in the server, without the setup and the pre-stored object).
//!
//! The store lives on tmpfs (`/dev/shm`) when there is one, so that the
//! numbers are the transport's and the service's, not the disk's; every
//! put still does its fsyncs and renames. The binaries come from the
//! directory of the `ptl-bench` executable (`cargo build --release -p
//! objstore -p portals-bench`). Processes are not pinned.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{BenchError, Result};
use crate::impls::RpcServer;
use crate::params::{scale_iters, Bench, Params};
use crate::record::Record;
use crate::runner::{wait_with_timeout, Runner};

/// One repetition, as `objstore-load` prints it.
#[derive(Debug, Deserialize)]
struct Rep {
    requests: u64,
    bytes: u64,
    secs: f64,
    server_cpu_s: Option<f64>,
}

/// A server process and its store directory, both removed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn store_dir() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!(
        "ptl-bench-objstore-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}

fn binary(runner: &Runner, name: &str) -> Result<PathBuf> {
    let dir = runner.exe.parent().unwrap_or(Path::new("."));
    let p = dir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(BenchError::Invalid(format!(
            "{} not found: build it beside ptl-bench (cargo build --release -p objstore)",
            p.display()
        )))
    }
}

fn start_server(runner: &Runner, which: RpcServer) -> Result<Server> {
    let exe = binary(runner, which.binary())?;
    let dir = store_dir();
    let mut child = Command::new(&exe)
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| BenchError::io(format!("starting {}", exe.display()), e))?;
    let Some(out) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(BenchError::Invalid("no pipe from the server".into()));
    };
    // Read the address line on a thread: a server that never prints one
    // must not hang the benchmark.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let mut server = Server {
        child,
        dir,
        addr: String::new(),
    };
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    match line.trim().strip_prefix("listening on ") {
        Some(a) => server.addr = a.to_string(),
        None => {
            return Err(BenchError::Run {
                what: exe.display().to_string(),
                why: format!("no address line (got {line:?})"),
            })
        }
    }
    Ok(server)
}

/// Run `objstore-load` once; its repetitions.
#[allow(clippy::too_many_arguments)]
fn load(
    runner: &Runner,
    server: &Server,
    which: RpcServer,
    op: &str,
    size: usize,
    clients: usize,
    requests: usize,
    warmup: usize,
    reps: usize,
) -> Result<Vec<Rep>> {
    let exe = binary(runner, "objstore-load")?;
    let what = format!("objstore-load {op} {size} x{clients}");
    let mut child = Command::new(&exe)
        .args(["--rpc", which.load_arg()])
        .args(["--connect", &server.addr, "--op", op])
        .args([
            "--size",
            &size.to_string(),
            "--clients",
            &clients.to_string(),
        ])
        .args([
            "--requests",
            &requests.to_string(),
            "--warmup",
            &warmup.to_string(),
        ])
        .args(["--reps", &reps.to_string()])
        .args(["--server-pid", &server.child.id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::io(format!("starting {}", exe.display()), e))?;
    // Drain the pipes while waiting (the output is small, but a pipe must
    // never fill up under a waiting parent).
    let (mut so, mut se) = (child.stdout.take(), child.stderr.take());
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = so.as_mut() {
            let _ = std::io::Read::read_to_string(o, &mut s);
        }
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = se.as_mut() {
            let _ = std::io::Read::read_to_string(e, &mut s);
        }
        s
    });
    let status = wait_with_timeout(&mut child, runner.timeout)
        .map_err(|e| BenchError::io(what.clone(), e))?;
    let (stdout, stderr) = (
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    );
    match status {
        Some(s) if s.success() => {}
        Some(s) => {
            return Err(BenchError::Run {
                what,
                why: format!("{s}: {}", stderr.trim()),
            })
        }
        None => {
            return Err(BenchError::Run {
                what,
                why: format!("ran past {:?}", runner.timeout),
            })
        }
    }
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| {
            serde_json::from_str::<Rep>(l).map_err(|e| BenchError::Parse {
                what: what.clone(),
                why: format!("{e} in {l}"),
            })
        })
        .collect()
}

/// Run `p` (rpc-rate or rpc-bulk) on the store served by `which`.
pub fn run(runner: &Runner, which: RpcServer, p: &Params) -> Result<Vec<Record>> {
    let label = which.label();
    let server = start_server(runner, which)?;
    let mut records = Vec::new();
    match p.bench {
        Bench::RpcRate => {
            for &size in &p.sizes {
                for op in ["get", "put"] {
                    for &clients in &p.clients {
                        let reps = load(
                            runner, &server, which, op, size, clients, p.iters, p.warmup, p.reps,
                        )?;
                        let mut vals: Vec<f64> = reps
                            .iter()
                            .filter(|r| r.secs > 0.0)
                            .map(|r| r.requests as f64 / r.secs)
                            .collect();
                        let r = Record::of_values(Bench::RpcRate, label, size, p.iters, &mut vals)?
                            .with("op", op)
                            .with("clients", clients);
                        records.push(r);
                    }
                }
            }
        }
        Bench::RpcBulk => {
            for &size in &p.sizes {
                let iters = scale_iters(p.iters, size, 8 << 20, 2);
                for op in ["put", "get"] {
                    let reps = load(runner, &server, which, op, size, 1, iters, p.warmup, p.reps)?;
                    let mut mbs: Vec<f64> = reps
                        .iter()
                        .filter(|r| r.secs > 0.0)
                        .map(|r| r.bytes as f64 / r.secs / 1e6)
                        .collect();
                    let mut cpu: Vec<f64> = reps
                        .iter()
                        .filter_map(|r| Some(r.server_cpu_s? / (r.bytes as f64 / 1e9)))
                        .filter(|v| v.is_finite())
                        .collect();
                    records.push(
                        Record::of_values(Bench::RpcBulk, label, size, iters, &mut mbs)?
                            .with("op", op),
                    );
                    if !cpu.is_empty() {
                        let mut r =
                            Record::of_values(Bench::RpcBulk, label, size, iters, &mut cpu)?
                                .with("op", op);
                        r.bench = Bench::RpcCpu.name().to_string();
                        r.unit = Bench::RpcCpu.unit().to_string();
                        records.push(r);
                    }
                }
            }
        }
        b => {
            return Err(BenchError::Invalid(format!(
                "{label} has no {b} benchmark (rpc-rate, rpc-bulk)"
            )))
        }
    }
    Ok(records)
}
