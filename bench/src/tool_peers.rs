//! The Portals-level peers: the one-sided / RDMA-style layers users of
//! portals-rs would otherwise pick, measured with their own benchmark tools
//! from Debian packages, on loopback:
//!
//! | label | tool (package) | transport | latency | bandwidth | pingpong-bw |
//! |---|---|---|---|---|---|
//! | `ucx-shm` | `ucx_perftest` (`ucx-utils`) | `UCX_TLS=posix,cma,self` | `-t tag_lat` | `-t tag_bw` | `-t tag_lat` |
//! | `ucx-tcp` | `ucx_perftest` | `UCX_TLS=tcp`, `UCX_NET_DEVICES=lo` | `-t tag_lat` | `-t tag_bw` | `-t tag_lat` |
//! | `ucx-shm-put` | `ucx_perftest` | as `ucx-shm` | `-t ucp_put_lat` | `-t ucp_put_bw` | `-t ucp_put_lat` |
//! | `ucx-tcp-put` | `ucx_perftest` | as `ucx-tcp` | `-t ucp_put_lat` | `-t ucp_put_bw` | `-t ucp_put_lat` |
//! | `libfabric-shm` | `fi_pingpong` (`libfabric-bin`) | `-p shm -e rdm` | usec/xfer | – | MB/sec |
//! | `libfabric-tcp` | `fi_pingpong` | `-p "tcp;ofi_rxm" -e rdm`, `FI_TCP_IFACE=lo` | usec/xfer | – | MB/sec |
//! | `libfabric-udp` | `fi_pingpong` | `-p "udp;ofi_rxd" -e rdm`, `FI_UDP_IFACE=lo` | usec/xfer | – | MB/sec |
//!
//! # What the figures mean
//!
//! - `ucx_perftest` latency tests are ping-pongs whose `overall_lat` column
//!   is total time / (2 × iterations): the half round trip of our
//!   `latency`. `tag_lat` sends with UCP tag matching (the receiver matches
//!   and completes every message, as a Portals target matches every put and
//!   gets an event); `ucp_put_lat` puts into the peer's memory and the peer
//!   polls the buffer's last byte (no completion event at the target).
//!   UCP puts cannot be empty, so their 0-byte point puts one byte
//!   (`wire_size` in the record), as the raw TCP ping-pong does.
//! - `tag_bw` / `ucp_put_bw` stream one way from the client with at most
//!   `-O` messages outstanding; we pass our window (`-O W`, `-n` = windows ×
//!   W, `-w` = warm-up windows × W). Ours stops after each window for the
//!   receiver's acknowledgement, UCX's window slides, so UCX never idles on
//!   an ack. Their `overall_bw` is in MiB/s; records are in MB/s (× 1.048576).
//!   UCT's `put_bw` needs a UCT device and does not exist over TCP ("tcp/lo
//!   does not support operation put short"), so the put variants use UCP's.
//! - `fi_pingpong` only ping-pongs: `usec/xfer` = elapsed / (2 ×
//!   iterations), our half round trip, and `MB/sec` = 2 × size × iterations
//!   / elapsed µs = size / half round trip (10^6 B/s). That is the
//!   `pingpong-bw` benchmark (one message in flight), not streaming
//!   bandwidth, so the libfabric peers have no `bandwidth`. It has no
//!   warm-up (for `tcp;ofi_rxm` and `udp;ofi_rxd` the first round trip also
//!   sets up the connection) and times with `gettimeofday`, so it runs at
//!   least [`FI_MIN_ITERS`] round trips. `ucx_perftest` latency points run
//!   at least [`UCX_MIN_ITERS`] (its first round trips are slow).
//!
//! # How a point is run
//!
//! Each repetition of each size is a fresh server + client pair (neither
//! tool takes a list of sizes): the server is started on a free port
//! (asked of the kernel), the client once the port is listening (seen in
//! `/proc/net/tcp`), connecting to 127.0.0.1. Both tools' control sockets
//! listen on every address (neither has an option to bind one); the data
//! goes over loopback or shared memory. With core binding on (two CPUs or
//! more, no `--no-bind`) the client, which measures and prints, runs on the
//! first allowed CPU and the server on the second, as `mpiexec --bind-to
//! core` places ranks 0 and 1. Both processes are killed when the run's
//! time limit passes; a server still running 10 s after its client printed
//! its result is killed and the result kept (`stopped_after_output`); a
//! client still running 10 s after its server exited is killed and the
//! point fails.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};
use crate::params::{scale_iters, Bench, Params};
use crate::record::Record;
use crate::runner::on_path;

/// Fewest round trips `fi_pingpong` is asked for: it times with
/// `gettimeofday` (1 µs), so a couple of shared-memory round trips can read
/// as no time at all.
pub const FI_MIN_ITERS: usize = 10;

/// Fewest round trips `ucx_perftest` is asked for in a latency point. Its
/// first round trips take milliseconds (connection and memory set-up), so
/// the 2 of a smoke run measured anything from 0.3 µs to 4 ms, and a
/// shared-memory put once read as no time at all, which failed the probe
/// (`compare_includes_tool_peers`). A thousand 8-byte puts cost under
/// 100 µs; messages over 64 KiB keep their scaled count.
pub const UCX_MIN_ITERS: usize = 1000;

/// How long a server may take to exit after its client printed the result.
const SERVER_GRACE: Duration = Duration::from_secs(10);

/// How often a waiting loop looks again; the tools time themselves, so
/// this only delays the next point a little.
const POLL: Duration = Duration::from_millis(5);

/// Attempts at starting a server: one that exits before listening most
/// likely lost its port to another process between our probe and its bind.
const SERVER_ATTEMPTS: usize = 3;

/// Which UCX transports a `ucx-*` peer runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UcxPath {
    /// Shared memory: `UCX_TLS=posix,cma,self`.
    Shm,
    /// TCP over loopback: `UCX_TLS=tcp`, `UCX_NET_DEVICES=lo`.
    Tcp,
}

/// Which UCP operations a `ucx-*` peer measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UcxOps {
    /// Tagged sends and receives (`tag_lat`, `tag_bw`).
    Tag,
    /// One-sided puts (`ucp_put_lat`, `ucp_put_bw`).
    Put,
}

/// Which libfabric provider a `libfabric-*` peer runs over (RDM endpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FiProvider {
    /// `shm`.
    Shm,
    /// `tcp;ofi_rxm`: reliable datagrams over TCP connections.
    Tcp,
    /// `udp;ofi_rxd`: reliable datagrams over UDP.
    Udp,
}

/// A peer measured by its own benchmark tool (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolPeer {
    /// `ucx_perftest`.
    Ucx {
        /// Transports.
        path: UcxPath,
        /// Operations.
        ops: UcxOps,
    },
    /// `fi_pingpong`.
    Libfabric(FiProvider),
}

impl ToolPeer {
    /// Every tool peer, in the order `compare` lists them.
    pub const ALL: [ToolPeer; 7] = [
        ToolPeer::Ucx {
            path: UcxPath::Shm,
            ops: UcxOps::Tag,
        },
        ToolPeer::Ucx {
            path: UcxPath::Tcp,
            ops: UcxOps::Tag,
        },
        ToolPeer::Ucx {
            path: UcxPath::Shm,
            ops: UcxOps::Put,
        },
        ToolPeer::Ucx {
            path: UcxPath::Tcp,
            ops: UcxOps::Put,
        },
        ToolPeer::Libfabric(FiProvider::Shm),
        ToolPeer::Libfabric(FiProvider::Tcp),
        ToolPeer::Libfabric(FiProvider::Udp),
    ];

    /// The record label.
    pub fn label(self) -> &'static str {
        match self {
            ToolPeer::Ucx {
                path: UcxPath::Shm,
                ops: UcxOps::Tag,
            } => "ucx-shm",
            ToolPeer::Ucx {
                path: UcxPath::Tcp,
                ops: UcxOps::Tag,
            } => "ucx-tcp",
            ToolPeer::Ucx {
                path: UcxPath::Shm,
                ops: UcxOps::Put,
            } => "ucx-shm-put",
            ToolPeer::Ucx {
                path: UcxPath::Tcp,
                ops: UcxOps::Put,
            } => "ucx-tcp-put",
            ToolPeer::Libfabric(FiProvider::Shm) => "libfabric-shm",
            ToolPeer::Libfabric(FiProvider::Tcp) => "libfabric-tcp",
            ToolPeer::Libfabric(FiProvider::Udp) => "libfabric-udp",
        }
    }

    /// The peer with this label.
    pub fn parse(label: &str) -> Option<ToolPeer> {
        ToolPeer::ALL.into_iter().find(|t| t.label() == label)
    }

    /// The benchmark program.
    pub fn tool(self) -> &'static str {
        match self {
            ToolPeer::Ucx { .. } => "ucx_perftest",
            ToolPeer::Libfabric(_) => "fi_pingpong",
        }
    }

    /// The Debian package that has [`ToolPeer::tool`].
    pub fn package(self) -> &'static str {
        match self {
            ToolPeer::Ucx { .. } => "ucx-utils",
            ToolPeer::Libfabric(_) => "libfabric-bin",
        }
    }

    /// Whether this peer has a version of `bench`.
    pub fn supports(self, bench: Bench) -> bool {
        match self {
            ToolPeer::Ucx { .. } => {
                matches!(bench, Bench::Latency | Bench::Bandwidth | Bench::PingpongBw)
            }
            ToolPeer::Libfabric(_) => matches!(bench, Bench::Latency | Bench::PingpongBw),
        }
    }

    /// Why this peer has no version of `bench` (for a note that says so).
    pub fn lacks(self, bench: Bench) -> String {
        match (self, bench) {
            (ToolPeer::Libfabric(_), Bench::Bandwidth) => format!(
                "{} has no bandwidth: fi_pingpong only ping-pongs; its MB/sec is \
                 size / half round trip, benchmark pingpong-bw (`ptl-bench bandwidth --pingpong`)",
                self.label()
            ),
            _ => format!(
                "{} has no {bench} benchmark (latency, {}pingpong-bw)",
                self.label(),
                if matches!(self, ToolPeer::Ucx { .. }) {
                    "bandwidth, "
                } else {
                    ""
                }
            ),
        }
    }

    /// What it measures, for the document.
    pub fn describe(self) -> String {
        match self {
            ToolPeer::Ucx { path, ops } => {
                let tests = match ops {
                    UcxOps::Tag => "UCP tag matching (tag_lat, tag_bw)",
                    UcxOps::Put => "UCP one-sided puts (ucp_put_lat, ucp_put_bw)",
                };
                let over = match path {
                    UcxPath::Shm => "shared memory (UCX_TLS=posix,cma,self)",
                    UcxPath::Tcp => "TCP over loopback (UCX_TLS=tcp, UCX_NET_DEVICES=lo)",
                };
                format!("UCX ucx_perftest, {tests} over {over}")
            }
            ToolPeer::Libfabric(p) => format!(
                "libfabric fi_pingpong, RDM endpoint, {} provider{}; ping-pong only \
                 (latency, pingpong-bw)",
                fi_provider(p),
                match p {
                    FiProvider::Shm => "",
                    FiProvider::Tcp => " over loopback (FI_TCP_IFACE=lo)",
                    FiProvider::Udp => " over loopback (FI_UDP_IFACE=lo)",
                }
            ),
        }
    }

    /// The environment both processes get.
    pub fn env(self) -> Vec<(&'static str, &'static str)> {
        match self {
            ToolPeer::Ucx {
                path: UcxPath::Shm, ..
            } => vec![("UCX_TLS", "posix,cma,self")],
            ToolPeer::Ucx {
                path: UcxPath::Tcp, ..
            } => vec![("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "lo")],
            ToolPeer::Libfabric(FiProvider::Shm) => Vec::new(),
            // Without these the providers publish the first interface's
            // address (eth0), not 127.0.0.1.
            ToolPeer::Libfabric(FiProvider::Tcp) => vec![("FI_TCP_IFACE", "lo")],
            ToolPeer::Libfabric(FiProvider::Udp) => vec![("FI_UDP_IFACE", "lo")],
        }
    }

    /// The `ucx_perftest -t` test of `bench` (`None` for libfabric).
    fn ucx_test(self, bench: Bench) -> Option<&'static str> {
        let ToolPeer::Ucx { ops, .. } = self else {
            return None;
        };
        Some(match (ops, bench) {
            (UcxOps::Tag, Bench::Bandwidth) => "tag_bw",
            (UcxOps::Tag, _) => "tag_lat",
            (UcxOps::Put, Bench::Bandwidth) => "ucp_put_bw",
            (UcxOps::Put, _) => "ucp_put_lat",
        })
    }

    /// The server's and the client's arguments for one point.
    pub fn args(self, bench: Bench, shape: &Shape, port: u16) -> (Vec<String>, Vec<String>) {
        let port = port.to_string();
        match self {
            ToolPeer::Ucx { .. } => {
                let test = self.ucx_test(bench).unwrap_or("tag_lat");
                let mut client = vec![
                    "127.0.0.1".to_string(),
                    "-p".into(),
                    port.clone(),
                    "-t".into(),
                    test.into(),
                    "-s".into(),
                    shape.wire_size.to_string(),
                    "-n".into(),
                    shape.tool_iters.to_string(),
                    "-w".into(),
                    shape.tool_warmup.to_string(),
                ];
                if let Some(w) = shape.window {
                    client.push("-O".into());
                    client.push(w.to_string());
                }
                // Final figures only, as CSV.
                client.push("-f".into());
                client.push("-v".into());
                // The server learns the test from the client.
                (vec!["-p".into(), port], client)
            }
            ToolPeer::Libfabric(p) => {
                let common = vec![
                    "-p".to_string(),
                    fi_provider(p).to_string(),
                    "-e".into(),
                    "rdm".into(),
                    "-I".into(),
                    shape.tool_iters.to_string(),
                    "-S".into(),
                    shape.size.to_string(),
                ];
                let mut server = common.clone();
                server.extend(["-B".to_string(), port.clone()]);
                let mut client = common;
                client.extend(["-P".to_string(), port, "127.0.0.1".into()]);
                (server, client)
            }
        }
    }
}

/// The provider string passed to `fi_pingpong -p`: the utility provider
/// that gives the core one RDM endpoints is named, so the record says which
/// stack was measured.
fn fi_provider(p: FiProvider) -> &'static str {
    match p {
        FiProvider::Shm => "shm",
        FiProvider::Tcp => "tcp;ofi_rxm",
        FiProvider::Udp => "udp;ofi_rxd",
    }
}

/// The counts of one point, ours and the tool's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Message size in bytes.
    pub size: usize,
    /// The size the tool is asked for: UCP puts cannot be empty ("Message
    /// size too small, need to be at least 1"), so a 0-byte put moves one
    /// byte, as a 0-byte raw TCP message does.
    pub wire_size: usize,
    /// The record's `iters`: round trips, or windows for bandwidth.
    pub iters: usize,
    /// Messages (`-n`) or round trips (`-I`) the tool is asked for.
    pub tool_iters: usize,
    /// Warm-up messages or round trips (`ucx_perftest -w`; `fi_pingpong`
    /// has none).
    pub tool_warmup: usize,
    /// Outstanding sends (`ucx_perftest -O`), bandwidth only.
    pub window: Option<usize>,
}

impl Shape {
    /// The counts of `peer` running `p` at `size`, scaled as the project's
    /// loops scale theirs.
    pub fn of(peer: ToolPeer, p: &Params, size: usize) -> Shape {
        let wire_size = match peer {
            ToolPeer::Ucx {
                ops: UcxOps::Put, ..
            } => size.max(1),
            _ => size,
        };
        if p.bench == Bench::Bandwidth {
            let w = p.window_for(size);
            let iters = scale_iters(p.iters, size, 65536, 2);
            let warm = scale_iters(p.warmup, size, 65536, 1);
            return Shape {
                size,
                wire_size,
                iters,
                tool_iters: iters * w,
                tool_warmup: warm * w,
                window: Some(w),
            };
        }
        let mut iters = scale_iters(p.iters, size, 8192, 20);
        let warm = scale_iters(p.warmup, size, 8192, 2);
        iters = iters.max(match peer {
            ToolPeer::Libfabric(_) => FI_MIN_ITERS,
            // Large messages take long enough to time by themselves.
            ToolPeer::Ucx { .. } if size <= 65536 => UCX_MIN_ITERS,
            ToolPeer::Ucx { .. } => 1,
        });
        Shape {
            size,
            wire_size,
            iters,
            tool_iters: iters,
            tool_warmup: warm,
            window: None,
        }
    }
}

/// One repetition's figure and how the server ended.
struct Measured {
    value: f64,
    stopped: bool,
}

/// Run `p` on `peer`: every size `p.reps` times, each a fresh process
/// pair; a record per size whose value is the median over the repetitions.
/// `bind`: client and server on CPUs of their own. `timeout`: for the
/// whole run.
pub fn run(peer: ToolPeer, p: &Params, bind: bool, timeout: Duration) -> Result<Vec<Record>> {
    let label = peer.label();
    let what = format!("{label} {}", p.run_name());
    if !peer.supports(p.bench) {
        return Err(BenchError::Invalid(peer.lacks(p.bench)));
    }
    if !on_path(peer.tool()) {
        return Err(BenchError::Run {
            what,
            why: format!(
                "{} not found on PATH (Debian package {})",
                peer.tool(),
                peer.package()
            ),
        });
    }
    let deadline = Instant::now() + timeout;
    let cpus = if bind { cpu_pair() } else { None };
    let mut records = Vec::with_capacity(p.sizes.len());
    for &size in &p.sizes {
        let shape = Shape::of(peer, p, size);
        let mut vals = Vec::with_capacity(p.reps);
        let mut stopped = false;
        for _ in 0..p.reps {
            let m = run_point(peer, p.bench, &shape, cpus, deadline, &what)?;
            vals.push(m.value);
            stopped |= m.stopped;
        }
        let mut r = Record::of_values(p.bench, label, size, shape.iters, &mut vals)?
            .with("tool", peer.tool())
            .with("pinned", cpus.is_some());
        r = match (peer.ucx_test(p.bench), peer) {
            (Some(t), _) => r.with("ucx_test", t),
            (None, ToolPeer::Libfabric(fp)) => r.with("fi_provider", fi_provider(fp)),
            (None, _) => r,
        };
        if let Some(w) = shape.window {
            r = r.with("window", w);
        }
        if shape.wire_size != size {
            r = r.with("wire_size", shape.wire_size);
        }
        if stopped {
            r = r.with("stopped_after_output", true);
        }
        records.push(r);
    }
    Ok(records)
}

/// CPUs for (client, server): the first two allowed ones, if there are two.
fn cpu_pair() -> Option<(libc::cpu_set_t, libc::cpu_set_t)> {
    let cpus = crate::cpu::allowed_cpus().ok()?;
    match cpus.as_slice() {
        [a, b, ..] => Some((crate::cpu::single_cpu(*a), crate::cpu::single_cpu(*b))),
        _ => None,
    }
}

/// One repetition of one point: a server, a client, the client's figure.
fn run_point(
    peer: ToolPeer,
    bench: Bench,
    shape: &Shape,
    cpus: Option<(libc::cpu_set_t, libc::cpu_set_t)>,
    deadline: Instant,
    what: &str,
) -> Result<Measured> {
    let io = |e: std::io::Error| BenchError::io(format!("{what}: running {}", peer.tool()), e);
    let run_err = |why: String| BenchError::Run {
        what: what.to_string(),
        why,
    };
    let (mut server, client_args) = start_server(peer, bench, shape, cpus, deadline, what)?;
    let mut client = Proc::start(command(peer, &client_args, cpus.map(|(c, _)| c))).map_err(io)?;
    let shown = |args: &[String]| shell_line(peer, args);
    // A client whose server has gone has nobody left to finish with
    // (seen: fi_pingpong over udp;ofi_rxd waiting forever at 1 MiB): it
    // gets the same grace as a server, not the rest of the run's time.
    let mut until = deadline;
    let mut server_gone = false;
    let status = loop {
        if let Some(st) = client.try_wait().map_err(io)? {
            break Some(st);
        }
        if !server_gone && server.try_wait().map_err(io)?.is_some() {
            server_gone = true;
            until = deadline.min(Instant::now() + SERVER_GRACE);
        }
        if Instant::now() >= until {
            break None;
        }
        std::thread::sleep(POLL);
    };
    let Some(status) = status else {
        client.kill();
        server.kill();
        let (out, err) = client.output();
        let (sout, serr) = server.output();
        let when = if server_gone {
            format!("{} s after its server exited", SERVER_GRACE.as_secs())
        } else {
            "at the run's time limit".to_string()
        };
        return Err(run_err(format!(
            "timed out: `{}` still running {when} (killed){}\nserver:{}",
            shown(&client_args),
            tail(&out, &err),
            tail(&sout, &serr)
        )));
    };
    let (out, err) = client.output();
    if !status.success() {
        server.kill();
        let (sout, serr) = server.output();
        return Err(run_err(format!(
            "`{}` failed ({status}){}\nserver:{}",
            shown(&client_args),
            tail(&out, &err),
            tail(&sout, &serr)
        )));
    }
    let grace = deadline.min(Instant::now() + SERVER_GRACE);
    let stopped = match server.wait_until(grace).map_err(io)? {
        Some(st) if st.success() => false,
        Some(st) => {
            let (sout, serr) = server.output();
            return Err(run_err(format!(
                "the {} server failed ({st}) after its client succeeded{}",
                peer.tool(),
                tail(&sout, &serr)
            )));
        }
        None => {
            server.kill();
            true
        }
    };
    let value = figure(peer, bench, shape, &out).map_err(|why| BenchError::Parse {
        what: format!("output of {what} (`{}`)", shown(&client_args)),
        why: format!("{why}; it printed:{}", tail(&out, &err)),
    })?;
    Ok(Measured { value, stopped })
}

/// Start a server on a free port and wait until it listens; returns it
/// and the client's arguments.
fn start_server(
    peer: ToolPeer,
    bench: Bench,
    shape: &Shape,
    cpus: Option<(libc::cpu_set_t, libc::cpu_set_t)>,
    deadline: Instant,
    what: &str,
) -> Result<(Proc, Vec<String>)> {
    let io = |e: std::io::Error| BenchError::io(format!("{what}: starting {}", peer.tool()), e);
    let mut last = String::new();
    for _ in 0..SERVER_ATTEMPTS {
        let port = free_port().map_err(io)?;
        let (server_args, client_args) = peer.args(bench, shape, port);
        let mut server =
            Proc::start(command(peer, &server_args, cpus.map(|(_, s)| s))).map_err(io)?;
        loop {
            match listening_by(server.child.id(), port) {
                Some(true) => return Ok((server, client_args)),
                // No /proc/net/tcp to look at: give it a moment instead.
                None => {
                    std::thread::sleep(Duration::from_millis(300));
                    return Ok((server, client_args));
                }
                Some(false) => {}
            }
            if let Some(st) = server.try_wait().map_err(io)? {
                let (out, err) = server.output();
                last = format!(
                    "`{}` exited ({st}) before listening{}",
                    shell_line(peer, &server_args),
                    tail(&out, &err)
                );
                break;
            }
            if Instant::now() >= deadline {
                server.kill();
                let (out, err) = server.output();
                return Err(BenchError::Run {
                    what: what.to_string(),
                    why: format!(
                        "timed out: `{}` never listened on port {port} (killed){}",
                        shell_line(peer, &server_args),
                        tail(&out, &err)
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
    }
    Err(BenchError::Run {
        what: what.to_string(),
        why: last,
    })
}

/// The tool with `args`, the peer's environment, output captured, bound to
/// `cpu` if given.
fn command(peer: ToolPeer, args: &[String], cpu: Option<libc::cpu_set_t>) -> Command {
    let mut c = Command::new(peer.tool());
    c.args(args)
        .envs(peer.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(set) = cpu {
        // SAFETY: the closure runs in the forked child before exec and
        // makes one system call on a copy of a plain, initialised
        // cpu_set_t; it allocates nothing and touches no lock.
        unsafe {
            c.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    c
}

/// The command line as one would type it (for error messages).
fn shell_line(peer: ToolPeer, args: &[String]) -> String {
    let quote = |s: &str| {
        if s.is_empty() || s.contains([';', ' ', '"', '\'']) {
            format!("\"{s}\"")
        } else {
            s.to_string()
        }
    };
    let mut parts: Vec<String> = peer
        .env()
        .iter()
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .collect();
    parts.push(peer.tool().to_string());
    parts.extend(args.iter().map(|a| quote(a)));
    parts.join(" ")
}

/// A port nobody listens on now (the kernel's choice for port 0).
fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(l.local_addr()?.port())
}

/// Whether process `pid` listens on TCP `port` (any address, IPv4 or 6);
/// `None` if `/proc` cannot tell. Whose listener it is matters: the port
/// was free when [`free_port`] asked, but another process may take it
/// before the server binds. Then the server fails to bind and exits (and
/// is started again on another port), while "someone listens" would
/// have sent the client to the other process (seen in CI: `fi_pingpong`'s
/// server "Address already in use", its client "Connection refused").
fn listening_by(pid: u32, port: u16) -> Option<bool> {
    let mut readable = false;
    let mut inodes = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        readable = true;
        inodes.extend(listen_inodes(&text, port));
    }
    if !readable {
        return None;
    }
    if inodes.is_empty() {
        return Some(false);
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    }))
}

/// The inodes of the LISTEN (`0A`) sockets on `port` in a `/proc/net/tcp`
/// table.
fn listen_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let on_port = f.get(1)?.rsplit(':').next()?;
            (f.get(3) == Some(&"0A") && u16::from_str_radix(on_port, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

/// The client's figure for `bench`, in the record's unit; bandwidths count
/// the point's size, not a 0-byte put's one wire byte.
fn figure(
    peer: ToolPeer,
    bench: Bench,
    shape: &Shape,
    out: &str,
) -> std::result::Result<f64, String> {
    let payload = shape.size as f64 / shape.wire_size.max(1) as f64;
    match peer {
        ToolPeer::Ucx { .. } => {
            let u = parse_ucx(out)?;
            match bench {
                Bench::Bandwidth => Ok(u.overall_bw_mib_s * MIB_PER_MB * payload),
                Bench::PingpongBw => Ok(shape.size as f64 / u.overall_lat_us),
                _ => Ok(u.overall_lat_us),
            }
        }
        ToolPeer::Libfabric(_) => {
            let f = parse_fi_pingpong(out)?;
            Ok(if bench == Bench::PingpongBw {
                f.mb_per_s
            } else {
                f.usec_per_xfer
            })
        }
    }
}

/// MiB/s → MB/s (10^6 B/s).
const MIB_PER_MB: f64 = 1_048_576.0 / 1e6;

/// The final figures of `ucx_perftest -f -v` (CSV).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UcxFigures {
    /// Iterations measured.
    pub iters: u64,
    /// `overall_lat`, µs: total time / iterations, / 2 for ping-pongs.
    pub overall_lat_us: f64,
    /// `overall_bw`, MiB/s (2^20 B/s).
    pub overall_bw_mib_s: f64,
}

/// Parse `ucx_perftest -f -v` output: the CSV header
/// (`iterations,...,overall_lat,...,overall_bw,...`) and the last line
/// after it with as many numeric fields. Log lines in between are skipped.
pub fn parse_ucx(out: &str) -> std::result::Result<UcxFigures, String> {
    let mut lines = out.lines().map(str::trim);
    let header: Vec<&str> = lines
        .by_ref()
        .find(|l| l.starts_with("iterations,"))
        .ok_or("no CSV header (a line starting with `iterations,`)")?
        .split(',')
        .map(str::trim)
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no `{name}` column in the CSV header"))
    };
    let (it, lat, bw) = (col("iterations")?, col("overall_lat")?, col("overall_bw")?);
    let row: Vec<f64> = lines
        .filter_map(|l| {
            let v: Vec<f64> = l
                .split(',')
                .map(|f| f.trim().parse::<f64>())
                .collect::<std::result::Result<_, _>>()
                .ok()?;
            (v.len() == header.len()).then_some(v)
        })
        .next_back()
        .ok_or("no result line after the CSV header")?;
    let f = UcxFigures {
        iters: row[it] as u64,
        overall_lat_us: row[lat],
        overall_bw_mib_s: row[bw],
    };
    if f.iters == 0 || !(f.overall_lat_us.is_finite() && f.overall_lat_us > 0.0) {
        return Err(format!(
            "no measured iterations or no positive latency ({} iterations, {} us)",
            f.iters, f.overall_lat_us
        ));
    }
    if !(f.overall_bw_mib_s.is_finite() && f.overall_bw_mib_s >= 0.0) {
        return Err(format!("bad bandwidth {}", f.overall_bw_mib_s));
    }
    Ok(f)
}

/// The result line of `fi_pingpong`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FiFigures {
    /// `usec/xfer`: elapsed / (2 × iterations), the half round trip.
    pub usec_per_xfer: f64,
    /// `MB/sec`: 2 × size × iterations / elapsed µs (10^6 B/s).
    pub mb_per_s: f64,
}

/// Parse `fi_pingpong` output: the header (`bytes #sent #ack total time
/// MB/sec usec/xfer Mxfers/sec`) and the next line with as many fields.
/// Every message must have been acknowledged (`#ack` = `=N`).
pub fn parse_fi_pingpong(out: &str) -> std::result::Result<FiFigures, String> {
    let mut lines = out.lines().map(str::trim);
    let header: Vec<&str> = lines
        .by_ref()
        .find(|l| l.starts_with("bytes") && l.contains("usec/xfer"))
        .ok_or("no result header (a line starting with `bytes` naming `usec/xfer`)")?
        .split_whitespace()
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no `{name}` column in the header"))
    };
    let (ack, mbs, usec) = (col("#ack")?, col("MB/sec")?, col("usec/xfer")?);
    let row: Vec<&str> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == header.len())
        .ok_or("no result line after the header")?;
    if !row[ack].starts_with('=') {
        return Err(format!(
            "not every message was acknowledged (#ack {}: + means that many fewer)",
            row[ack]
        ));
    }
    let num = |i: usize, name: &str| {
        row[i]
            .parse::<f64>()
            .map_err(|_| format!("`{name}` is not a number: {}", row[i]))
    };
    let f = FiFigures {
        usec_per_xfer: num(usec, "usec/xfer")?,
        mb_per_s: num(mbs, "MB/sec")?,
    };
    if !(f.usec_per_xfer.is_finite() && f.usec_per_xfer > 0.0 && f.mb_per_s.is_finite()) {
        return Err(format!(
            "no usable figures (usec/xfer {}, MB/sec {}): its gettimeofday timer saw \
             (almost) no elapsed time; ask for more iterations",
            row[usec], row[mbs]
        ));
    }
    Ok(f)
}

/// The last lines of a process's output, prefixed with a newline.
fn tail(out: &str, err: &str) -> String {
    let lines: Vec<&str> = out
        .lines()
        .chain(err.lines())
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return " (no output)".into();
    }
    let from = lines.len().saturating_sub(15);
    format!("\n{}", lines[from..].join("\n"))
}

/// A started tool process whose output is being collected; killed (and
/// reaped) when dropped before it exited.
struct Proc {
    child: Child,
    readers: Option<(JoinHandle<String>, JoinHandle<String>)>,
    exited: bool,
}

impl Proc {
    fn start(mut cmd: Command) -> std::io::Result<Proc> {
        let mut child = cmd.spawn()?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("no pipes to the tool"));
        };
        // Read both pipes as the process runs, so a chatty tool never
        // blocks on a full pipe.
        let read = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                let _ = r.read_to_end(&mut b);
                String::from_utf8_lossy(&b).into_owned()
            })
        };
        let readers = (read(Box::new(out)), read(Box::new(err)));
        Ok(Proc {
            child,
            readers: Some(readers),
            exited: false,
        })
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let st = self.child.try_wait()?;
        self.exited |= st.is_some();
        Ok(st)
    }

    /// Wait until it exits or `until` passes (`None`).
    fn wait_until(&mut self, until: Instant) -> std::io::Result<Option<ExitStatus>> {
        loop {
            if let Some(st) = self.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    fn kill(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.exited = true;
        }
    }

    /// Its stdout and stderr; kills it first if it still runs.
    fn output(&mut self) -> (String, String) {
        self.kill();
        match self.readers.take() {
            Some((o, e)) => (o.join().unwrap_or_default(), e.join().unwrap_or_default()),
            None => (String::new(), String::new()),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Preset;

    #[test]
    fn labels_and_support() {
        for t in ToolPeer::ALL {
            assert_eq!(ToolPeer::parse(t.label()), Some(t));
            assert!(t.supports(Bench::Latency) && t.supports(Bench::PingpongBw));
            assert!(!t.supports(Bench::Overlap));
            assert!(!t.describe().is_empty());
        }
        let fi = ToolPeer::Libfabric(FiProvider::Udp);
        assert!(!fi.supports(Bench::Bandwidth));
        assert!(fi.lacks(Bench::Bandwidth).contains("pingpong-bw"));
        assert!(ToolPeer::parse("ucx-ib").is_none());
    }

    #[test]
    fn command_lines() {
        let ucx = ToolPeer::parse("ucx-tcp-put").expect("label");
        let mut p = Params::preset(Bench::Bandwidth, Preset::Full);
        p.sizes = vec![4 << 20];
        let shape = Shape::of(ucx, &p, 4 << 20);
        // 200 windows scaled to 3 at 4 MiB, 64 messages each
        assert_eq!(
            (shape.iters, shape.window, shape.tool_iters),
            (3, Some(64), 192)
        );
        let (server, client) = ucx.args(Bench::Bandwidth, &shape, 4242);
        assert_eq!(server, ["-p", "4242"]);
        assert_eq!(
            shell_line(ucx, &client),
            "UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest 127.0.0.1 -p 4242 -t ucp_put_bw \
             -s 4194304 -n 192 -w 64 -O 64 -f -v"
        );
        let put0 = Shape::of(ucx, &Params::preset(Bench::Latency, Preset::Smoke), 0);
        assert_eq!((put0.size, put0.wire_size), (0, 1));
        assert_eq!(put0.tool_iters, UCX_MIN_ITERS, "a smoke run times enough");
        let fi = ToolPeer::parse("libfabric-tcp").expect("label");
        let mut l = Params::preset(Bench::Latency, Preset::Smoke);
        l.sizes = vec![8];
        let shape = Shape::of(fi, &l, 8);
        assert_eq!(shape.tool_iters, FI_MIN_ITERS);
        let (server, client) = fi.args(Bench::Latency, &shape, 7);
        assert_eq!(server.join(" "), "-p tcp;ofi_rxm -e rdm -I 10 -S 8 -B 7");
        assert_eq!(
            shell_line(fi, &client),
            "FI_TCP_IFACE=lo fi_pingpong -p \"tcp;ofi_rxm\" -e rdm -I 10 -S 8 -P 7 127.0.0.1"
        );
    }

    #[test]
    fn parses_ucx_perftest() {
        let out = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n\
                   [1.2] [vm:1 :0] UCX  WARN  something\n  \
                   40,336.146,358.224,358.224,11166.20,11166.20,2792,2792\n";
        let f = parse_ucx(out).expect("parses");
        assert_eq!(f.iters, 40);
        assert_eq!(f.overall_lat_us, 358.224);
        assert_eq!(f.overall_bw_mib_s, 11166.20);
        let tag = ToolPeer::ALL[0];
        let p = Params::preset(Bench::Bandwidth, Preset::Smoke);
        let shape = Shape::of(tag, &p, 4 << 20);
        let v = figure(tag, Bench::Bandwidth, &shape, out).expect("bw");
        assert!((v - 11166.20 * 1.048576).abs() < 1e-6);
        let v = figure(tag, Bench::PingpongBw, &shape, out).expect("pp");
        assert!((v - 4194304.0 / 358.224).abs() < 1e-6);
        let put = ToolPeer::parse("ucx-shm-put").expect("label");
        let empty = Shape::of(put, &p, 0);
        assert_eq!(empty.wire_size, 1);
        assert_eq!(figure(put, Bench::Bandwidth, &empty, out), Ok(0.0));
        for bad in [
            "",
            "Waiting for connection...\n",
            "iterations,overall_lat\n10,1.0\n",
            "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n",
            "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n\
             10,1,1,x,1,1,1,1\n",
            "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n\
             10,0,0,0,1,1,1,1\n",
        ] {
            assert!(parse_ucx(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_fi_pingpong() {
        let out =
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
                   64k     20      =20      2.5m        0.00s   8115.91       8.07       0.12\n";
        let f = parse_fi_pingpong(out).expect("parses");
        assert_eq!((f.usec_per_xfer, f.mb_per_s), (8.07, 8115.91));
        for bad in [
            "",
            "fi_getinfo(): -61\n",
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n",
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
             8       1k      +3       15k         0.00s      3.79       2.11       0.47\n",
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
             0       2       =2       0           0.00s      -nan       0.00        inf\n",
        ] {
            assert!(parse_fi_pingpong(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn proc_net_tcp() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                 0: 00000000:5BA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   \
                 1: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert_eq!(listen_inodes(t, 0x5BA0), vec![1]);
        assert!(
            listen_inodes(t, 0x1F90).is_empty(),
            "established, not listening"
        );
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listen");
        let port = l.local_addr().expect("addr").port();
        let me = std::process::id();
        assert_ne!(
            listening_by(me, port),
            Some(false),
            "our own listener on {port}"
        );
        // Someone else's listener is not ours: pid 1 holds no socket of ours.
        assert_ne!(
            listening_by(1, port),
            Some(true),
            "pid 1 is not listening on {port}"
        );
        drop(l);
        assert_ne!(
            listening_by(me, port),
            Some(true),
            "closed listener on {port}"
        );
    }
}
