//! The implementations a benchmark can run on, and their labels (the
//! `impl` field of a record):
//!
//! | label | what |
//! |---|---|
//! | `raw-tcp-busy`, `raw-tcp-blocking`, `raw-udp-busy`, `raw-udp-blocking` | raw-socket ping-pong ([`crate::raw`]); latency only |
//! | `raw-tcp` | raw TCP stream; bandwidth only |
//! | `portals-<nal>-<progress>` | the Portals API over a NAL (`tcp`, `udp`, `shm`, or `auto`: the default, shared memory on one host), progress `thread` or `poll`; latency and bandwidth |
//! | `mpi-<nal>-<progress>` | `mpi-on-portals` over a NAL; every benchmark |
//! | `portals-<nal>-thread-uring`, `mpi-<nal>-thread-uring` | as above, with the progress thread's poller on `io_uring` (`PTL_BACKEND=io_uring`) instead of `epoll`; threads waiting in the library always use `epoll`, so polling mode has no such variant |
//! | `openmpi-tcp`, `openmpi-sm`, `openmpi`, `mpich`, `mpich-net` | the C peers (`bench/c/run_peer.sh`); every benchmark but `pingpong-bw` |
//! | `capi-shm`, `capi-tcp` | the same MPICH-built C benchmarks on portals-rs through `mpi-capi`'s `libmpich.so.12` (`ptlrun --nal shm`/`tcp`) |
//! | `openmpi-tcp-pt2pt` | `openmpi-tcp` with `--mca osc pt2pt`: Open MPI's one-sided operations over TCP (its default `osc sm` is shared memory); the `rma-*` benchmarks only |
//! | `ucx-shm`, `ucx-tcp`, `ucx-shm-put`, `ucx-tcp-put` | Portals-level peer UCX, `ucx_perftest` ([`crate::tool_peers`]); latency, bandwidth, pingpong-bw |
//! | `libfabric-shm`, `libfabric-tcp`, `libfabric-udp` | Portals-level peer libfabric, `fi_pingpong` ([`crate::tool_peers`]); latency, pingpong-bw |
//! | `rpc-portals-tcp`, `rpc-tonic`, `rpc-raw-tcp` | the object store over portals-rpc (standalone, TCP), over gRPC (`tonic`) and over plain TCP sockets with no RPC layer (the store's floor), driven by `objstore-load` ([`crate::rpc`]); rpc-rate, rpc-bulk (and with it rpc-cpu); `raw-tcp` is rpc-bulk's transport floor, with no store |
//!
//! A `-unpinned` suffix on a raw label means the two processes were left to
//! the scheduler.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::params::Bench;
use crate::raw::PollMode;
use crate::tool_peers::ToolPeer;

/// The peer MPI variants `bench/c/run_peer.sh` knows.
pub const PEERS: [&str; 8] = [
    "openmpi-tcp",
    "openmpi-tcp-pt2pt",
    "openmpi-sm",
    "openmpi",
    "mpich",
    "mpich-net",
    // The MPICH build of each benchmark on portals-rs (mpi-capi).
    "capi-shm",
    "capi-tcp",
];

/// The peer variant that exists only for the one-sided benchmarks: Open MPI
/// over TCP with `osc pt2pt` (on one node its default `osc sm` would put
/// the windows in shared memory).
pub const RMA_ONLY_PEER: &str = "openmpi-tcp-pt2pt";

/// Which API of the project a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The Portals API (puts and events).
    Portals,
    /// `mpi-on-portals`.
    Mpi,
}

impl Level {
    /// Label prefix.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portals => "portals",
            Level::Mpi => "mpi",
        }
    }
}

/// How a project process makes progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Progress {
    /// Progress thread (`PTL_PROGRESS=thread`).
    Thread,
    /// Progress only inside library calls (`PTL_PROGRESS=poll`).
    Poll,
}

impl Progress {
    /// Label suffix and `PTL_PROGRESS` value.
    pub fn name(self) -> &'static str {
        match self {
            Progress::Thread => "thread",
            Progress::Poll => "poll",
        }
    }
}

/// Raw-socket transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RawTransport {
    /// TCP with `TCP_NODELAY`.
    Tcp,
    /// UDP datagrams.
    Udp,
}

/// Grouping used by tables: physical floor, project, peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Raw sockets.
    Raw,
    /// portals-rs.
    Project,
    /// Open MPI / MPICH.
    Peer,
}

/// One implementation to measure.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Impl {
    /// Raw-socket ping-pong (latency).
    RawPingPong {
        /// Transport.
        transport: RawTransport,
        /// How the reader waits.
        mode: PollMode,
        /// Processes pinned to two CPUs.
        pinned: bool,
    },
    /// Raw TCP stream (bandwidth).
    RawStream {
        /// Processes pinned to two CPUs.
        pinned: bool,
    },
    /// portals-rs, two ranks launched by the runtime.
    Project {
        /// Portals or MPI.
        level: Level,
        /// NAL name passed as `PTL_NAL` (`tcp`, `udp`).
        nal: String,
        /// Progress mode.
        progress: Progress,
        /// The progress thread polls with `io_uring` instead of `epoll`
        /// (thread mode only).
        uring: bool,
    },
    /// A C peer run through `bench/c/run_peer.sh`.
    Peer(String),
    /// A Portals-level peer measured by its own tool (UCX, libfabric).
    Tool(ToolPeer),
    /// The object store, served one of three ways.
    Rpc(RpcServer),
}

/// Which server of the object store an `rpc-*` implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpcServer {
    /// `objstore-server`: portals-rpc, standalone over TCP (the project).
    Portals,
    /// `objstore-grpc-server`: gRPC with tonic (the peer).
    Tonic,
    /// `objstore-raw-server`: plain TCP sockets, no RPC layer (the floor).
    Raw,
}

impl RpcServer {
    /// The record label.
    pub fn label(self) -> &'static str {
        match self {
            RpcServer::Portals => "rpc-portals-tcp",
            RpcServer::Tonic => "rpc-tonic",
            RpcServer::Raw => "rpc-raw-tcp",
        }
    }

    /// The server binary (beside `ptl-bench`).
    pub fn binary(self) -> &'static str {
        match self {
            RpcServer::Portals => "objstore-server",
            RpcServer::Tonic => "objstore-grpc-server",
            RpcServer::Raw => "objstore-raw-server",
        }
    }

    /// `objstore-load --rpc` for this server.
    pub fn load_arg(self) -> &'static str {
        match self {
            RpcServer::Portals => "portals",
            RpcServer::Tonic => "tonic",
            RpcServer::Raw => "raw",
        }
    }
}

impl Impl {
    /// The record label.
    pub fn label(&self) -> String {
        let pin = |p: bool| if p { "" } else { "-unpinned" };
        match self {
            Impl::RawPingPong {
                transport,
                mode,
                pinned,
            } => {
                let t = match transport {
                    RawTransport::Tcp => "tcp",
                    RawTransport::Udp => "udp",
                };
                format!("raw-{t}-{}{}", mode.label(), pin(*pinned))
            }
            Impl::RawStream { pinned } => format!("raw-tcp{}", pin(*pinned)),
            Impl::Project {
                level,
                nal,
                progress,
                uring,
            } => format!(
                "{}-{nal}-{}{}",
                level.name(),
                progress.name(),
                if *uring { "-uring" } else { "" }
            ),
            Impl::Peer(p) => p.clone(),
            Impl::Tool(t) => t.label().to_string(),
            Impl::Rpc(server) => server.label().into(),
        }
    }

    /// Parse a label (see the module documentation).
    pub fn parse(label: &str) -> Result<Impl, String> {
        if PEERS.contains(&label) {
            return Ok(Impl::Peer(label.to_string()));
        }
        if let Some(t) = ToolPeer::parse(label) {
            return Ok(Impl::Tool(t));
        }
        match label {
            "rpc-portals-tcp" => return Ok(Impl::Rpc(RpcServer::Portals)),
            "rpc-tonic" => return Ok(Impl::Rpc(RpcServer::Tonic)),
            "rpc-raw-tcp" => return Ok(Impl::Rpc(RpcServer::Raw)),
            _ => {}
        }
        let (base, pinned) = match label.strip_suffix("-unpinned") {
            Some(b) => (b, false),
            None => (label, true),
        };
        let parts: Vec<&str> = base.split('-').collect();
        match parts.as_slice() {
            ["raw", "tcp"] => Ok(Impl::RawStream { pinned }),
            ["raw", t, m] => {
                let transport = match *t {
                    "tcp" => RawTransport::Tcp,
                    "udp" => RawTransport::Udp,
                    _ => return Err(format!("unknown raw transport in '{label}'")),
                };
                let mode = match *m {
                    "busy" => PollMode::BusyPoll,
                    "blocking" => PollMode::Blocking,
                    _ => return Err(format!("unknown raw mode in '{label}' (busy, blocking)")),
                };
                Ok(Impl::RawPingPong {
                    transport,
                    mode,
                    pinned,
                })
            }
            [lvl @ ("portals" | "mpi"), nal, prog, rest @ ..] if pinned => {
                let level = if *lvl == "mpi" {
                    Level::Mpi
                } else {
                    Level::Portals
                };
                let progress = match *prog {
                    "thread" => Progress::Thread,
                    "poll" => Progress::Poll,
                    _ => return Err(format!("unknown progress mode in '{label}' (thread, poll)")),
                };
                if nal.is_empty() || !nal.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(format!("bad NAL name in '{label}'"));
                }
                let uring = match rest {
                    [] => false,
                    ["uring"] if progress == Progress::Thread => true,
                    ["uring"] => {
                        return Err(format!(
                            "'{label}': only a progress thread polls with io_uring (use thread)"
                        ))
                    }
                    _ => return Err(format!("unknown suffix in '{label}' (-uring)")),
                };
                Ok(Impl::Project {
                    level,
                    nal: nal.to_string(),
                    progress,
                    uring,
                })
            }
            _ => Err(format!(
                "unknown implementation '{label}' (raw-tcp-busy, raw-tcp, portals-tcp-thread, \
                 mpi-tcp-poll, {}, {}, ...)",
                PEERS.join(", "),
                ToolPeer::ALL.map(|t| t.label()).join(", ")
            )),
        }
    }

    /// The table group.
    pub fn family(&self) -> Family {
        match self {
            Impl::RawPingPong { .. } | Impl::RawStream { .. } | Impl::Rpc(RpcServer::Raw) => {
                Family::Raw
            }
            Impl::Project { .. } | Impl::Rpc(RpcServer::Portals) => Family::Project,
            Impl::Peer(_) | Impl::Tool(_) | Impl::Rpc(RpcServer::Tonic) => Family::Peer,
        }
    }

    /// Whether this implementation has a version of `bench`.
    pub fn supports(&self, bench: Bench) -> bool {
        match self {
            Impl::RawPingPong { .. } => bench == Bench::Latency,
            Impl::RawStream { .. } => matches!(bench, Bench::Bandwidth | Bench::RpcBulk),
            Impl::Rpc(_) => matches!(bench, Bench::RpcRate | Bench::RpcBulk),
            Impl::Project {
                level: Level::Portals,
                ..
            } => matches!(bench, Bench::Latency | Bench::Bandwidth | Bench::PingpongBw),
            Impl::Peer(p) if p == RMA_ONLY_PEER => bench.is_rma(),
            // Ping-pong bandwidth is the Portals-level peers' figure.
            Impl::Project { .. } | Impl::Peer(_) => bench != Bench::PingpongBw && !bench.is_rpc(),
            Impl::Tool(t) => t.supports(bench),
        }
    }

    /// Why this implementation has no version of `bench` (for the note
    /// that leaves it out).
    pub fn lacks(&self, bench: Bench) -> String {
        match self {
            Impl::Tool(t) => t.lacks(bench),
            _ => format!("{self} has no {bench} benchmark"),
        }
    }

    /// The project variants for these NALs and progress modes, MPI and
    /// Portals level; with a progress thread also, at the Portals level,
    /// the `io_uring` poller (the MPI level adds nothing to that
    /// comparison).
    pub fn project_variants(nals: &[String], progress: &[Progress]) -> Vec<Impl> {
        let mut v = Vec::new();
        for level in [Level::Portals, Level::Mpi] {
            for nal in nals {
                for &pr in progress {
                    v.push(Impl::Project {
                        level,
                        nal: nal.clone(),
                        progress: pr,
                        uring: false,
                    });
                    if level == Level::Portals && pr == Progress::Thread {
                        v.push(Impl::Project {
                            level,
                            nal: nal.clone(),
                            progress: pr,
                            uring: true,
                        });
                    }
                }
            }
        }
        v
    }

    /// The raw-socket floor: TCP and UDP ping-pong (busy and blocking) and
    /// the TCP stream, pinned.
    pub fn raw_variants() -> Vec<Impl> {
        let mut v = Vec::new();
        for transport in [RawTransport::Tcp, RawTransport::Udp] {
            for mode in [PollMode::BusyPoll, PollMode::Blocking] {
                v.push(Impl::RawPingPong {
                    transport,
                    mode,
                    pinned: true,
                });
            }
        }
        v.push(Impl::RawStream { pinned: true });
        v
    }
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// Family of a label as found in a record (labels that do not parse count
/// as peers).
pub fn family_of(label: &str) -> Family {
    Impl::parse(label).map_or(Family::Peer, |i| i.family())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        let mut all = Impl::raw_variants();
        all.extend(Impl::project_variants(
            &["tcp".into(), "udp".into()],
            &[Progress::Thread, Progress::Poll],
        ));
        all.extend(PEERS.iter().map(|p| Impl::Peer(p.to_string())));
        all.extend(ToolPeer::ALL.map(Impl::Tool));
        all.push(Impl::RawStream { pinned: false });
        for i in &all {
            assert_eq!(Impl::parse(&i.label()).as_ref(), Ok(i), "{i}");
        }
        assert_eq!(
            Impl::parse("raw-udp-busy-unpinned").map(|i| i.family()),
            Ok(Family::Raw)
        );
        assert!(Impl::parse("mpi-tcp-sometimes").is_err());
        assert!(Impl::parse("mpi-tcp-thread-unpinned").is_err());
        assert!(
            Impl::parse("portals-tcp-poll-uring").is_err(),
            "no poller thread"
        );
        assert!(Impl::parse("portals-tcp-thread-epoll").is_err());
        assert!(all.iter().any(|i| i.label() == "portals-udp-thread-uring"));
        assert_eq!(
            Impl::parse("mpi-tcp-thread-uring"),
            Ok(Impl::Project {
                level: Level::Mpi,
                nal: "tcp".into(),
                progress: Progress::Thread,
                uring: true,
            })
        );
        assert!(Impl::parse("lam").is_err());
        assert_eq!(family_of("mpi-tcp-thread"), Family::Project);
        assert_eq!(family_of("libfabric-udp"), Family::Peer);
    }

    #[test]
    fn support_matrix() {
        let p = Impl::parse("portals-tcp-poll").expect("label");
        assert!(p.supports(Bench::Latency) && p.supports(Bench::Bandwidth));
        assert!(!p.supports(Bench::Overlap));
        assert!(p.supports(Bench::PingpongBw));
        let m = Impl::parse("mpi-tcp-thread").expect("label");
        assert!(Bench::ALL
            .iter()
            .all(|&b| m.supports(b) == (b != Bench::PingpongBw && !b.is_rpc())));
        for label in ["rpc-tonic", "rpc-portals-tcp", "rpc-raw-tcp"] {
            let r = Impl::parse(label).expect("label");
            assert_eq!(r.label(), label);
            assert!(r.supports(Bench::RpcRate) && r.supports(Bench::RpcBulk));
            assert!(!r.supports(Bench::Latency) && !r.supports(Bench::RpcCpu));
        }
        assert_eq!(family_of("rpc-portals-tcp"), Family::Project);
        assert_eq!(family_of("rpc-tonic"), Family::Peer);
        assert_eq!(family_of("rpc-raw-tcp"), Family::Raw);
        assert!(Impl::parse("raw-tcp")
            .expect("label")
            .supports(Bench::RpcBulk));
        let f = Impl::parse("libfabric-shm").expect("label");
        assert!(f.supports(Bench::PingpongBw) && !f.supports(Bench::Bandwidth));
        assert!(f.lacks(Bench::Bandwidth).contains("ping-pong"));
        assert!(Impl::parse("ucx-tcp")
            .expect("label")
            .supports(Bench::Bandwidth));
        let pt = Impl::parse(RMA_ONLY_PEER).expect("label");
        assert!(pt.supports(Bench::RmaLatency) && !pt.supports(Bench::Latency));
        let om = Impl::parse("openmpi-tcp").expect("label");
        assert!(Bench::RMA.iter().all(|&b| om.supports(b)));
        let r = Impl::parse("raw-tcp").expect("label");
        assert!(r.supports(Bench::Bandwidth) && !r.supports(Bench::Latency));
    }
}
