//! What one benchmark run measures: the benchmark, its sizes, iteration
//! counts and benchmark-specific knobs, with the defaults of the C peer
//! programs in `bench/c/` so that both sides measure the same thing.
//!
//! [`Params`] is the one description of a run. It becomes command-line
//! flags for a C peer ([`Params::c_args`]), the JSON argument of a
//! portals-rs rank (serde), or arguments of the raw-socket calls.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The benchmarks, named as in the `bench` field of a [`crate::record::Record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bench {
    /// Ping-pong half round trip.
    Latency,
    /// Unidirectional streaming with a window of outstanding sends.
    Bandwidth,
    /// Bidirectional streaming.
    Bibw,
    /// Ping-pong bandwidth: size / half round trip, the `MB/sec` that
    /// `fi_pingpong` reports. Not streaming: one message in flight.
    PingpongBw,
    /// 8-byte message rate with a window.
    Msgrate,
    /// Wait-time overlap (seed 000, Figs. 10–12).
    Overlap,
    /// COMB host CPU availability (seed 001 §7).
    Comb,
    /// Latency behind N posted receives.
    Matchlist,
    /// `all_reduce` (`MPI_Allreduce`, sum of doubles) latency on N ranks.
    Allreduce,
    /// `broadcast` (`MPI_Bcast` from rank 0) latency on N ranks.
    Bcast,
    /// Overlap of the non-blocking collectives (`MPI_Ibarrier`,
    /// `MPI_Ibcast`, `MPI_Iallreduce`) with computation on N ranks.
    #[serde(rename = "nbc-overlap")]
    NbcOverlap,
    /// Whether the non-blocking collectives complete during a long compute
    /// with no MPI call: % found complete by one check after it.
    #[serde(rename = "nbc-progress")]
    NbcProgress,
    /// One-sided put, get (+ flush) and 8-byte fetch-and-op latency in a
    /// passive-target epoch.
    #[serde(rename = "rma-latency")]
    RmaLatency,
    /// One-sided put bandwidth: windows of puts, then a flush, in one
    /// `lock_all` epoch.
    #[serde(rename = "rma-bw")]
    RmaBw,
    /// Passive-target progress: the origin's lock–op–unlock time while the
    /// target computes without calling the library.
    #[serde(rename = "rma-overlap")]
    RmaOverlap,
    /// Object-store small-request rate (4 KB get and put, N clients).
    #[serde(rename = "rpc-rate")]
    RpcRate,
    /// Object-store bulk throughput (put and get of 1 MB to 256 MB objects).
    #[serde(rename = "rpc-bulk")]
    RpcBulk,
    /// Server CPU seconds per GB moved; measured by the `rpc-bulk` runs.
    #[serde(rename = "rpc-cpu")]
    RpcCpu,
    /// Application kernel: conjugate gradient on the 2-D Poisson equation
    /// (size = grid side, iters = iteration cap), ms per solve.
    #[serde(rename = "app-cg")]
    AppCg,
    /// Application kernel: 1-D Jacobi halo exchange (size = cells per rank,
    /// iters = steps), ms per solve.
    #[serde(rename = "app-halo")]
    AppHalo,
    /// Application kernel: collective-heavy loop (size = bytes of the large
    /// all-reduce and broadcast, iters = iterations), ms per solve.
    #[serde(rename = "app-coll")]
    AppColl,
}

impl Bench {
    /// Every benchmark, in the order `compare` runs them.
    pub const ALL: [Bench; 21] = [
        Bench::Latency,
        Bench::Bandwidth,
        Bench::Bibw,
        Bench::PingpongBw,
        Bench::Msgrate,
        Bench::Overlap,
        Bench::Comb,
        Bench::Matchlist,
        Bench::Allreduce,
        Bench::Bcast,
        Bench::NbcOverlap,
        Bench::NbcProgress,
        Bench::RmaLatency,
        Bench::RmaBw,
        Bench::RmaOverlap,
        Bench::RpcRate,
        Bench::RpcBulk,
        Bench::RpcCpu,
        Bench::AppCg,
        Bench::AppHalo,
        Bench::AppColl,
    ];

    /// What `compare` runs when no benchmark is named: all but
    /// `nbc-overlap` (a job per implementation and rank count that a
    /// comparison of the point-to-point paths does not need) and the
    /// object-store benchmarks (`rpc`, their own services). Name them with
    /// `--benches nbc-overlap` or `--benches rpc`.
    pub const DEFAULT: [Bench; 13] = [
        Bench::Latency,
        Bench::Bandwidth,
        Bench::Bibw,
        Bench::PingpongBw,
        Bench::Msgrate,
        Bench::Overlap,
        Bench::Comb,
        Bench::Matchlist,
        Bench::Allreduce,
        Bench::Bcast,
        Bench::RmaLatency,
        Bench::RmaBw,
        Bench::RmaOverlap,
    ];

    /// The one-sided (RMA) benchmarks: the group `rma`.
    pub const RMA: [Bench; 3] = [Bench::RmaLatency, Bench::RmaBw, Bench::RmaOverlap];

    /// The object-store benchmarks that run (`rpc-cpu` comes with
    /// `rpc-bulk`): the group `rpc`, not part of a default comparison.
    pub const RPC: [Bench; 2] = [Bench::RpcRate, Bench::RpcBulk];

    /// The application kernels (`crate::apps`): the group `apps`, not part
    /// of a default comparison (`ptl-bench apps` runs them).
    pub const APPS: [Bench; 3] = [Bench::AppCg, Bench::AppHalo, Bench::AppColl];

    /// The blocking collective benchmarks (the group `collectives`). These
    /// and `nbc-overlap` run on any number of ranks ([`Params::ranks`]);
    /// the others need exactly two.
    pub const COLLECTIVES: [Bench; 2] = [Bench::Allreduce, Bench::Bcast];

    /// The name used in records, file names and C program names.
    pub fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::Bandwidth => "bandwidth",
            Bench::Bibw => "bibw",
            Bench::PingpongBw => "pingpong-bw",
            Bench::Msgrate => "msgrate",
            Bench::Overlap => "overlap",
            Bench::Comb => "comb",
            Bench::Matchlist => "matchlist",
            Bench::Allreduce => "allreduce",
            Bench::Bcast => "bcast",
            Bench::NbcOverlap => "nbc-overlap",
            Bench::NbcProgress => "nbc-progress",
            Bench::RmaLatency => "rma-latency",
            Bench::RmaBw => "rma-bw",
            Bench::RmaOverlap => "rma-overlap",
            Bench::RpcRate => "rpc-rate",
            Bench::RpcBulk => "rpc-bulk",
            Bench::RpcCpu => "rpc-cpu",
            Bench::AppCg => "app-cg",
            Bench::AppHalo => "app-halo",
            Bench::AppColl => "app-coll",
        }
    }

    /// Parse a benchmark name.
    pub fn from_name(s: &str) -> Option<Bench> {
        Bench::ALL.into_iter().find(|b| b.name() == s)
    }

    /// Parse a benchmark name or a group: `collectives` (allreduce and
    /// bcast), `rma` (rma-latency, rma-bw, rma-overlap), `apps` (app-cg,
    /// app-halo, app-coll).
    pub fn parse_group(s: &str) -> Option<Vec<Bench>> {
        match s {
            "collectives" => return Some(Bench::COLLECTIVES.to_vec()),
            "rma" => return Some(Bench::RMA.to_vec()),
            "apps" => return Some(Bench::APPS.to_vec()),
            _ => {}
        }
        if s == "rpc" {
            return Some(Bench::RPC.to_vec());
        }
        Bench::from_name(s).map(|b| vec![b])
    }

    /// Whether this is an object-store benchmark.
    pub fn is_rpc(self) -> bool {
        matches!(self, Bench::RpcRate | Bench::RpcBulk | Bench::RpcCpu)
    }

    /// Whether this benchmark runs on any number of ranks (the
    /// collectives, blocking and non-blocking, and the application
    /// kernels).
    pub fn is_collective(self) -> bool {
        Bench::COLLECTIVES.contains(&self)
            || matches!(self, Bench::NbcOverlap | Bench::NbcProgress)
            || self.is_app()
    }

    /// Whether its runs settle for [`SETTLE_MS`] before the first point:
    /// the benchmarks timed in tight loops of short iterations.
    pub fn settles(self) -> bool {
        matches!(
            self,
            Bench::Latency
                | Bench::PingpongBw
                | Bench::Bandwidth
                | Bench::Bibw
                | Bench::Msgrate
                | Bench::Matchlist
                | Bench::Allreduce
                | Bench::Bcast
        )
    }

    /// Whether this is an application kernel.
    pub fn is_app(self) -> bool {
        Bench::APPS.contains(&self)
    }

    /// Whether this is a one-sided (RMA) benchmark.
    pub fn is_rma(self) -> bool {
        Bench::RMA.contains(&self)
    }

    /// Unit of the benchmark's `value`.
    pub fn unit(self) -> &'static str {
        match self {
            Bench::Latency
            | Bench::Matchlist
            | Bench::Allreduce
            | Bench::Bcast
            | Bench::RmaLatency
            | Bench::RmaOverlap => "us",
            Bench::Bandwidth | Bench::Bibw | Bench::PingpongBw | Bench::RmaBw | Bench::RpcBulk => {
                "MB/s"
            }
            Bench::Msgrate => "msg/s",
            Bench::RpcRate => "req/s",
            Bench::RpcCpu => "cpu-s/GB",
            Bench::AppCg | Bench::AppHalo | Bench::AppColl => "ms",
            Bench::Overlap | Bench::Comb | Bench::NbcOverlap | Bench::NbcProgress => "%",
        }
    }

    /// True if a larger value is better.
    pub fn higher_is_better(self) -> bool {
        !matches!(
            self,
            Bench::Latency
                | Bench::Matchlist
                | Bench::Allreduce
                | Bench::Bcast
                | Bench::RmaLatency
                | Bench::RmaOverlap
                | Bench::RpcCpu
                | Bench::AppCg
                | Bench::AppHalo
                | Bench::AppColl
        )
    }
}

impl fmt::Display for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// COMB's two ways of receiving while working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CombMethod {
    /// Keep receives posted; test them once after every work interval.
    #[default]
    Poll,
    /// Post, work, wait: per interval post the receives, work, wait for them.
    Pww,
}

impl CombMethod {
    /// Name as in the C program's `-p` flag and the records' `method` field.
    pub fn name(self) -> &'static str {
        match self {
            CombMethod::Poll => "poll",
            CombMethod::Pww => "pww",
        }
    }
}

/// How much to measure: the C programs' full defaults, a short run, or a
/// smoke test that only checks that everything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// The C programs' defaults (the published run).
    #[default]
    Full,
    /// Fewer sizes and iterations: minutes instead of the better part of an hour.
    Quick,
    /// Tiny sizes, one or two iterations: seconds (CI).
    Smoke,
}

/// One benchmark run's parameters (the C programs' `struct opts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// The benchmark.
    pub bench: Bench,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Base iterations per repetition, scaled down for large sizes.
    pub iters: usize,
    /// Warm-up iterations, scaled like `iters`.
    pub warmup: usize,
    /// Repetitions per point inside one run; the median is reported.
    pub reps: usize,
    /// Outstanding operations (bandwidth, bibw, msgrate) or COMB queue depth.
    pub window: usize,
    /// Overlap compute factors (× transfer time), COMB work intervals (µs)
    /// or the RMA target's compute times (µs; `rma-overlap`).
    pub factors: Vec<f64>,
    /// Match-list lengths.
    pub posted: Vec<usize>,
    /// COMB method.
    pub method: CombMethod,
    /// COMB work per point, µs.
    pub total_us: f64,
    /// Byte cap for the distinct receive buffers of one window.
    pub mem_cap: usize,
    /// Ranks of the job: any number for the collective benchmarks, 2 for
    /// the others.
    #[serde(default = "two")]
    pub ranks: usize,
    /// Concurrent clients of the object-store request-rate benchmark.
    #[serde(default)]
    pub clients: Vec<usize>,
    /// Milliseconds of untimed iterations of the first point before its
    /// first repetition (see [`SETTLE_MS`]); 0: none.
    #[serde(default)]
    pub settle_ms: u64,
}

/// Default settling time of the benchmarks timed in tight loops (latency,
/// pingpong-bw, bandwidth, bibw, msgrate, matchlist, allreduce, bcast),
/// the project's and the C peers' alike.
///
/// Why: on this host (a VM with 2 vCPUs) a loop that starts on idle CPUs
/// runs at half speed or less for its first 10–100 ms — a shared-memory
/// ping-pong 0.7–1.1 µs, then 0.38 — whatever the library: a
/// library-free busy loop on both CPUs just before it removes the slow
/// phase, and a raw two-thread cache-line ping-pong shows it too. The C
/// peers' launchers keep the CPUs busy for most of a second before their
/// loop starts and the project's ranks start in milliseconds, so a fixed
/// count of warm-up iterations measured the two in different states.
/// Every run now settles for this long, in the loop it measures (no idle
/// gap in between), coordinated by the first rank so that every rank runs
/// the same iterations.
pub const SETTLE_MS: u64 = 300;

fn two() -> usize {
    2
}

/// Most ranks a collective run may ask for (the machine is one host).
pub const MAX_RANKS: usize = 64;

/// Powers of two from `min` to `max` (with 0 first if `min` is 0).
pub fn pow2_sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    if min == 0 {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

/// Same scaling as the C programs: `base` up to `threshold`, then
/// proportionally fewer, never below `floor`.
pub fn scale_iters(base: usize, size: usize, threshold: usize, floor: usize) -> usize {
    if size <= threshold {
        base
    } else {
        ((base as f64 * threshold as f64 / size as f64) as usize).max(floor)
    }
}

/// Parse a size with an optional K or M suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1024),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|v| v.checked_mul(mul))
        .ok_or_else(|| format!("bad size '{s}' (a number with an optional K or M suffix)"))
}

/// Format a size the way the tables show it (`0`, `8`, `4K`, `16M`).
pub fn size_label(size: u64) -> String {
    if size >= 1 << 20 && size & ((1 << 20) - 1) == 0 {
        format!("{}M", size >> 20)
    } else if size >= 1024 && size & 1023 == 0 {
        format!("{}K", size >> 10)
    } else {
        size.to_string()
    }
}

impl Params {
    /// The parameters of `bench` for a preset.
    pub fn preset(bench: Bench, preset: Preset) -> Params {
        let mut p = Params {
            bench,
            sizes: Vec::new(),
            iters: 1,
            warmup: 0,
            reps: 5,
            window: 1,
            factors: Vec::new(),
            posted: Vec::new(),
            method: CombMethod::Poll,
            total_us: 500_000.0,
            mem_cap: 256 << 20,
            ranks: 2,
            clients: Vec::new(),
            settle_ms: 0,
        };
        if preset != Preset::Smoke && bench.settles() {
            p.settle_ms = SETTLE_MS;
        }
        match (bench, preset) {
            (Bench::Latency, Preset::Full) => {
                p.sizes = pow2_sizes(0, 4 << 20);
                (p.iters, p.warmup) = (10_000, 1000);
            }
            (Bench::Latency, Preset::Quick) => {
                p.sizes = vec![
                    0,
                    8,
                    1 << 10,
                    16 << 10,
                    64 << 10,
                    256 << 10,
                    1 << 20,
                    4 << 20,
                ];
                (p.iters, p.warmup) = (2000, 200);
            }
            (Bench::Latency, Preset::Smoke) => {
                p.sizes = vec![0, 1 << 10];
                (p.iters, p.warmup) = (2, 1);
            }
            (Bench::PingpongBw, _) => {
                // The latency loop's counts: it is the same ping-pong,
                // from the sizes where a bandwidth means something.
                (p.sizes, p.iters, p.warmup) = match preset {
                    Preset::Full => (pow2_sizes(1 << 10, 4 << 20), 10_000, 1000),
                    Preset::Quick => (
                        vec![1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20],
                        2000,
                        200,
                    ),
                    Preset::Smoke => (vec![1 << 10, 64 << 10], 2, 1),
                };
            }
            (Bench::Bandwidth | Bench::Bibw, Preset::Full) => {
                p.sizes = pow2_sizes(1 << 10, 16 << 20);
                (p.iters, p.warmup, p.window) = (200, 20, 64);
            }
            (Bench::Bandwidth | Bench::Bibw, Preset::Quick) => {
                p.sizes = vec![4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];
                (p.iters, p.warmup, p.window) = (20, 2, 64);
            }
            (Bench::Bandwidth | Bench::Bibw, Preset::Smoke) => {
                p.sizes = vec![1 << 10, 64 << 10];
                (p.iters, p.warmup, p.window) = (2, 1, 4);
            }
            (Bench::Msgrate, _) => {
                p.sizes = vec![8];
                (p.iters, p.warmup, p.window) = match preset {
                    Preset::Full => (2000, 200, 64),
                    Preset::Quick => (200, 20, 64),
                    Preset::Smoke => (2, 1, 4),
                };
            }
            (Bench::Overlap, Preset::Full) => {
                p.sizes = pow2_sizes(1 << 10, 4 << 20);
                (p.iters, p.warmup) = (200, 10);
                p.factors = vec![0.5, 1.0, 2.0, 4.0];
            }
            (Bench::Overlap, Preset::Quick) => {
                p.sizes = vec![4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];
                (p.iters, p.warmup) = (20, 2);
                p.factors = vec![0.5, 2.0];
            }
            (Bench::Overlap, Preset::Smoke) => {
                p.sizes = vec![1 << 10];
                (p.iters, p.warmup) = (2, 1);
                p.factors = vec![1.0];
            }
            (Bench::Comb, _) => {
                p.sizes = vec![100 << 10];
                p.window = 4;
                (p.factors, p.total_us) = match preset {
                    Preset::Full => (vec![10.0, 100.0, 1000.0, 10_000.0], 500_000.0),
                    Preset::Quick => (vec![100.0, 1000.0], 100_000.0),
                    Preset::Smoke => (vec![1000.0], 5000.0),
                };
            }
            (Bench::Matchlist, _) => {
                p.sizes = vec![8];
                (p.iters, p.warmup, p.posted) = match preset {
                    Preset::Full => (
                        2000,
                        200,
                        vec![1, 10, 100, 1000, 10_000, 100_000, 1_000_000],
                    ),
                    Preset::Quick => (200, 20, vec![1, 100, 1000]),
                    Preset::Smoke => (2, 1, vec![1, 10]),
                };
            }
            (Bench::Allreduce | Bench::Bcast, Preset::Full) => {
                p.sizes = pow2_sizes(8, 1 << 20);
                (p.iters, p.warmup) = (1000, 100);
            }
            (Bench::Allreduce | Bench::Bcast, Preset::Quick) => {
                p.sizes = vec![8, 64, 1 << 10, 16 << 10, 128 << 10, 1 << 20];
                (p.iters, p.warmup) = (200, 20);
            }
            (Bench::Allreduce | Bench::Bcast, Preset::Smoke) => {
                p.sizes = vec![8, 1 << 10];
                (p.iters, p.warmup) = (2, 1);
            }
            // Sizes on both sides of the triggered all-reduce's limit (one
            // atomic: 512 B by default; above it the start runs the
            // blocking algorithm).
            (Bench::NbcOverlap, Preset::Full) => {
                p.sizes = vec![8, 64, 512, 1 << 10, 8 << 10];
                (p.iters, p.warmup) = (100, 5);
                p.factors = vec![1.0, 2.0, 4.0];
            }
            (Bench::NbcOverlap, Preset::Quick) => {
                p.sizes = vec![8, 1 << 10];
                (p.iters, p.warmup) = (50, 5);
                p.factors = vec![1.0, 4.0];
            }
            (Bench::NbcOverlap, Preset::Smoke) => {
                p.sizes = vec![8, 1 << 10];
                (p.iters, p.warmup) = (2, 1);
                p.factors = vec![1.0];
            }
            // Factors are compute times in µs, far above T0; the chains'
            // sizes (up to the 512 B triggered all-reduce) and 8 KB, past it.
            // 40 iterations: a run of the full set computes ~2 s per rank.
            (Bench::NbcProgress, Preset::Full) => {
                p.sizes = vec![8, 64, 512, 8 << 10];
                (p.iters, p.warmup) = (40, 4);
                p.factors = vec![200.0, 1000.0, 5000.0];
            }
            (Bench::NbcProgress, Preset::Quick) => {
                p.sizes = vec![8, 8 << 10];
                (p.iters, p.warmup) = (30, 3);
                p.factors = vec![1000.0];
            }
            (Bench::NbcProgress, Preset::Smoke) => {
                p.sizes = vec![8, 8 << 10];
                (p.iters, p.warmup) = (2, 1);
                p.factors = vec![200.0];
            }
            (Bench::RmaLatency, _) => {
                // Puts and gets of each size, then one 8-byte fetch-and-op.
                p.sizes = vec![8];
                (p.iters, p.warmup) = match preset {
                    Preset::Full => (10_000, 1000),
                    Preset::Quick => (2000, 200),
                    Preset::Smoke => (2, 1),
                };
            }
            (Bench::RmaBw, _) => {
                // The window is memory on both ranks: 64 MiB, four 16 MB puts.
                p.mem_cap = 64 << 20;
                (p.sizes, p.iters, p.warmup, p.window) = match preset {
                    Preset::Full => (pow2_sizes(1 << 10, 16 << 20), 200, 20, 64),
                    Preset::Quick => (
                        vec![4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20],
                        20,
                        2,
                        64,
                    ),
                    Preset::Smoke => (vec![1 << 10, 64 << 10], 2, 1, 4),
                };
            }
            (Bench::RmaOverlap, _) => {
                // Puts of each size, then one 8-byte fetch-and-op, while the
                // target computes 0 (the reference) or 10 ms.
                (p.sizes, p.iters, p.warmup, p.factors) = match preset {
                    Preset::Full => (vec![8, 64 << 10], 20, 2, vec![0.0, 10_000.0]),
                    Preset::Quick => (vec![8, 64 << 10], 10, 1, vec![0.0, 10_000.0]),
                    Preset::Smoke => (vec![8], 2, 1, vec![0.0, 1000.0]),
                };
            }
            // iters: requests per client per repetition.
            (Bench::RpcRate, _) => {
                p.sizes = vec![4 << 10];
                (p.iters, p.warmup, p.clients) = match preset {
                    Preset::Full => (2000, 200, vec![1, 4, 16]),
                    Preset::Quick => (500, 50, vec![1, 4, 16]),
                    Preset::Smoke => (5, 1, vec![1, 2]),
                };
            }
            // iters: requests per repetition at 8 MB, fewer for larger
            // objects ([`scale_iters`], at least 2).
            (Bench::RpcBulk | Bench::RpcCpu, _) => {
                (p.sizes, p.iters, p.warmup) = match preset {
                    Preset::Full => (vec![1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20], 64, 2),
                    Preset::Quick => (vec![1 << 20, 16 << 20, 256 << 20], 32, 1),
                    Preset::Smoke => (vec![1 << 20], 2, 1),
                };
            }
            // Full: about 0.2-1 s per solve for the project on 4 ranks of a
            // 2-CPU machine (the peers' busy polling takes far longer
            // oversubscribed); quick: about a quarter of that; smoke: only
            // checks that each runs and gets its answer.
            (Bench::AppCg | Bench::AppHalo | Bench::AppColl, _) => {
                let (full, quick, smoke) = match bench {
                    Bench::AppCg => ((256, 2000), (128, 1000), (32, 500)),
                    Bench::AppHalo => ((4096, 2000), (2048, 500), (64, 20)),
                    _ => ((8192, 1000), (8192, 250), (1024, 10)),
                };
                let ((n, it), warm) = match preset {
                    Preset::Full => (full, 1),
                    Preset::Quick => (quick, 1),
                    Preset::Smoke => (smoke, 0),
                };
                (p.sizes, p.iters, p.warmup) = (vec![n], it, warm);
            }
        }
        p.reps = match preset {
            Preset::Full => 5,
            Preset::Quick => 3,
            Preset::Smoke => 1,
        };
        p
    }

    /// Check the parameters; a message for the first problem.
    pub fn validate(&self) -> Result<(), String> {
        if self.sizes.is_empty() {
            return Err("no message sizes".into());
        }
        if self.iters == 0 || self.reps == 0 || self.window == 0 || self.mem_cap == 0 {
            return Err("iterations, repetitions, window and memory cap must be > 0".into());
        }
        if self.sizes.iter().any(|&s| s > i32::MAX as usize) {
            return Err("message sizes must fit an MPI count (2^31 - 1)".into());
        }
        if self.factors.iter().any(|f| !f.is_finite() || *f < 0.0) {
            return Err("compute factors / work intervals must be finite and >= 0".into());
        }
        if matches!(
            self.bench,
            Bench::Overlap | Bench::NbcOverlap | Bench::NbcProgress
        ) && self.factors.is_empty()
        {
            return Err(format!("{} needs at least one compute factor", self.bench));
        }
        if self.bench == Bench::RmaOverlap && self.factors.is_empty() {
            return Err("rma-overlap needs at least one target compute time".into());
        }
        if self.bench == Bench::Comb && (self.factors.is_empty() || self.total_us <= 0.0) {
            return Err("comb needs work intervals and a positive work total".into());
        }
        if self.bench == Bench::Matchlist && self.posted.is_empty() {
            return Err("matchlist needs at least one list length".into());
        }
        if self.bench.is_collective() {
            if !(1..=MAX_RANKS).contains(&self.ranks) {
                return Err(format!("{} runs on 1 to {MAX_RANKS} ranks", self.bench));
            }
        } else if self.ranks != 2 {
            return Err(format!("{} runs on exactly 2 ranks", self.bench));
        }
        if self.bench == Bench::RpcCpu {
            return Err("rpc-cpu is measured by the rpc-bulk runs (run rpc-bulk)".into());
        }
        if self.bench == Bench::RpcRate && (self.clients.is_empty() || self.clients.contains(&0)) {
            return Err("rpc-rate needs client counts > 0".into());
        }
        if self.bench == Bench::AppCg && self.sizes.iter().any(|&s| s < self.ranks) {
            return Err("app-cg needs a grid side of at least the number of ranks".into());
        }
        if self.bench == Bench::AppColl && self.sizes.contains(&0) {
            return Err("app-coll sizes must be at least 8".into());
        }
        if matches!(
            self.bench,
            Bench::Allreduce | Bench::NbcOverlap | Bench::NbcProgress | Bench::AppColl
        ) && self.sizes.iter().any(|s| s % 8 != 0)
        {
            return Err(format!(
                "{} sizes must be multiples of 8 (doubles)",
                self.bench
            ));
        }
        Ok(())
    }

    /// Name of this run in progress messages and failures: the benchmark,
    /// with the COMB method (`comb-poll`) or the ranks of a collective
    /// (`allreduce-4ranks`).
    pub fn run_name(&self) -> String {
        if self.bench == Bench::Comb {
            format!("comb-{}", self.method.name())
        } else if self.bench.is_collective() {
            format!("{}-{}ranks", self.bench, self.ranks)
        } else {
            self.bench.name().to_string()
        }
    }

    /// How many records a run prints (known for the benchmarks on any
    /// number of ranks, whose peer jobs may hang in `MPI_Finalize` after
    /// printing them all): one per size for the blocking collectives; for
    /// `nbc-overlap` a baseline and one per factor, for the barrier (size
    /// 0) and each size of the broadcast, the all-reduce, the all-gather
    /// and the all-to-all; for `nbc-progress` one per compute time, for the
    /// barrier and each size of the broadcast and the all-reduce.
    pub fn expected_records(&self) -> Option<usize> {
        match self.bench {
            Bench::Allreduce | Bench::Bcast => Some(self.sizes.len()),
            Bench::AppCg | Bench::AppHalo | Bench::AppColl => Some(self.sizes.len()),
            Bench::NbcOverlap => Some((1 + 4 * self.sizes.len()) * (1 + self.factors.len())),
            Bench::NbcProgress => Some((1 + 2 * self.sizes.len()) * self.factors.len()),
            _ => None,
        }
    }

    /// Largest message size (at least 1: buffers are never empty).
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0).max(1)
    }

    /// Largest buffer of distinct receive slots any window needs.
    pub fn max_window_bytes(&self) -> usize {
        self.sizes
            .iter()
            .map(|&s| s.max(1) * self.window_for(s))
            .max()
            .unwrap_or(1)
    }

    /// Window actually used for `size`: distinct receive buffers stay
    /// within `mem_cap` (as in `bench/c/bandwidth.c`).
    pub fn window_for(&self, size: usize) -> usize {
        (self.mem_cap / size.max(1)).min(self.window).max(1)
    }

    /// The same run as flags of a C peer program (`bench/c/`).
    pub fn c_args(&self) -> Vec<String> {
        let list = |v: Vec<String>| v.join(",");
        let mut a = vec![
            "-s".into(),
            list(self.sizes.iter().map(|s| s.to_string()).collect()),
            "-i".into(),
            self.iters.to_string(),
            "-w".into(),
            self.warmup.to_string(),
            "-r".into(),
            self.reps.to_string(),
            "-W".into(),
            self.window.to_string(),
            "-C".into(),
            self.mem_cap.to_string(),
        ];
        if self.settle_ms > 0 {
            a.push("-S".into());
            a.push(self.settle_ms.to_string());
        }
        if !self.factors.is_empty() {
            a.push("-f".into());
            a.push(list(self.factors.iter().map(|f| f.to_string()).collect()));
        }
        if self.bench == Bench::Matchlist {
            a.push("-n".into());
            a.push(list(self.posted.iter().map(|n| n.to_string()).collect()));
        }
        if self.bench == Bench::Comb {
            a.push("-p".into());
            a.push(self.method.name().into());
            a.push("-T".into());
            a.push(format!("{}", self.total_us.round() as u64));
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_scaling() {
        assert_eq!(pow2_sizes(0, 4), vec![0, 1, 2, 4]);
        assert_eq!(pow2_sizes(1024, 4096), vec![1024, 2048, 4096]);
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert!(parse_size("x").is_err());
        assert_eq!(scale_iters(10_000, 8, 8192, 20), 10_000);
        assert_eq!(scale_iters(10_000, 4 << 20, 8192, 20), 20);
        assert_eq!(size_label(0), "0");
        assert_eq!(size_label(100 << 10), "100K");
        assert_eq!(size_label(4 << 20), "4M");
    }

    #[test]
    fn presets_are_valid_and_translate_to_c_flags() {
        for b in Bench::ALL {
            for pr in [Preset::Full, Preset::Quick, Preset::Smoke] {
                let p = Params::preset(b, pr);
                if b == Bench::RpcCpu {
                    assert!(p.validate().is_err(), "rpc-cpu comes with rpc-bulk");
                    continue;
                }
                p.validate().expect("preset valid");
                let json = serde_json::to_string(&p).expect("serialise");
                let back: Params = serde_json::from_str(&json).expect("parse");
                assert_eq!(back, p);
            }
            assert_eq!(Bench::from_name(b.name()), Some(b));
        }
        let c = Params::preset(Bench::Comb, Preset::Smoke).c_args();
        assert!(
            c.windows(2).any(|w| w[0] == "-p" && w[1] == "poll"),
            "{c:?}"
        );
        assert!(
            c.windows(2).any(|w| w[0] == "-T" && w[1] == "5000"),
            "{c:?}"
        );
        let m = Params::preset(Bench::Matchlist, Preset::Smoke).c_args();
        assert!(
            m.windows(2).any(|w| w[0] == "-n" && w[1] == "1,10"),
            "{m:?}"
        );
        let mut a = Params::preset(Bench::Allreduce, Preset::Quick);
        a.ranks = 4;
        assert_eq!(a.validate(), Ok(()));
        a.sizes = vec![12];
        assert!(a.validate().is_err());
        let mut nbc = Params::preset(Bench::NbcOverlap, Preset::Smoke);
        assert!(nbc.bench.is_collective());
        // barrier + 4 operations at 2 sizes, each a baseline and 1 factor
        assert_eq!(nbc.expected_records(), Some(18));
        assert!(nbc.c_args().windows(2).any(|w| w[0] == "-f" && w[1] == "1"));
        nbc.ranks = 4;
        assert_eq!(nbc.validate(), Ok(()));
        nbc.factors.clear();
        assert!(nbc.validate().is_err());
        assert_eq!(
            Bench::parse_group("nbc-overlap"),
            Some(vec![Bench::NbcOverlap])
        );
        assert!(!Bench::DEFAULT.contains(&Bench::NbcOverlap));
        let prog = Params::preset(Bench::NbcProgress, Preset::Smoke);
        assert_eq!(
            (prog.validate(), prog.expected_records()),
            (Ok(()), Some(5))
        );
        assert!(prog.bench.is_collective() && !Bench::DEFAULT.contains(&prog.bench));
        assert!(prog
            .c_args()
            .windows(2)
            .any(|w| w[0] == "-f" && w[1] == "200"));
        assert_eq!(Bench::parse_group("apps"), Some(Bench::APPS.to_vec()));
        let mut cg = Params::preset(Bench::AppCg, Preset::Full);
        cg.ranks = 8;
        assert_eq!((cg.validate(), cg.expected_records()), (Ok(()), Some(1)));
        assert_eq!(cg.run_name(), "app-cg-8ranks");
        cg.sizes = vec![4];
        assert!(cg.validate().is_err(), "fewer rows than ranks");
        let mut coll = Params::preset(Bench::AppColl, Preset::Smoke);
        coll.sizes = vec![12];
        assert!(coll.validate().is_err());
        assert!(Bench::APPS.iter().all(|b| !Bench::DEFAULT.contains(b)));
        let mut l = Params::preset(Bench::Latency, Preset::Smoke);
        l.ranks = 4;
        assert!(l.validate().is_err());
        assert_eq!(
            Bench::parse_group("collectives"),
            Some(Bench::COLLECTIVES.to_vec())
        );
        assert_eq!(Bench::parse_group("bcast"), Some(vec![Bench::Bcast]));
        assert_eq!(Bench::parse_group("nope"), None);
        assert_eq!(Bench::parse_group("rpc"), Some(Bench::RPC.to_vec()));
        assert!(Bench::RpcRate.is_rpc() && !Bench::RpcCpu.higher_is_better());
        assert_eq!(Bench::parse_group("rma"), Some(Bench::RMA.to_vec()));
        let o = Params::preset(Bench::RmaOverlap, Preset::Full).c_args();
        assert!(
            o.windows(2).any(|w| w[0] == "-f" && w[1] == "0,10000"),
            "{o:?}"
        );
        let rb = Params::preset(Bench::RmaBw, Preset::Full);
        assert_eq!(rb.window_for(16 << 20), 4);
        assert!(rb
            .c_args()
            .windows(2)
            .any(|w| w[0] == "-C" && w[1] == (64 << 20).to_string()));
        let bw = Params::preset(Bench::Bandwidth, Preset::Full);
        assert_eq!(bw.window_for(16 << 20), 16);
        assert_eq!(bw.window_for(1024), 64);
    }
}
