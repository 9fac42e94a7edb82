//! `ptl-bench`: the benchmark suite of portals-rs against raw sockets, Open
//! MPI, MPICH, UCX and libfabric. `ptl-bench --help` lists the subcommands; every benchmark
//! prints JSON lines (`portals_bench::record::Record`).
//!
//! ```text
//! ptl-bench latency --quick                      # portals + MPI level, thread and poll
//! ptl-bench overlap --impls mpi-tcp-thread,openmpi-tcp --sizes 256K,1M
//! ptl-bench collectives --ranks 2,4 --quick          # all_reduce and broadcast
//! ptl-bench nbc-overlap --impls mpi-shm-thread,openmpi-sm --ranks 4
//! ptl-bench rma --impls mpi-tcp-thread,openmpi-tcp-pt2pt,mpich-net --quick
//! ptl-bench latency --impls ucx-shm,libfabric-tcp,portals-tcp-thread --sizes 8
//! ptl-bench bandwidth --pingpong --impls libfabric-shm,portals-tcp-thread
//! ptl-bench raw latency --transport tcp --mode busy
//! ptl-bench apps --quick                         # cg, halo, coll: thread vs poll vs peers
//! ptl-bench compare --quick                      # everything, interleaved, into results/
//! ptl-bench report results/compare.json --doc docs/PERFORMANCE.md
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use portals_bench::compare::{compare, CompareOpts, Progressed};
use portals_bench::impls::{Impl, Level, Progress, RawTransport};
use portals_bench::params::{parse_size, Bench, CombMethod, Params, Preset, MAX_RANKS};
use portals_bench::raw::PollMode;
use portals_bench::record::Record;
use portals_bench::report::{report, results_markdown, write_plots};
use portals_bench::runner::{build_peers, rank_main, Runner, RANK_SUBCOMMAND};
use portals_bench::{BenchError, Result};

/// Benchmarks of portals-rs (Portals and MPI level) side by side with raw
/// sockets, Open MPI, MPICH, UCX and libfabric. Project runs are two-process jobs (N for the
/// collectives) started through the portals-rs runtime, ranks bound to cores.
#[derive(Debug, Parser)]
#[command(name = "ptl-bench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Ping-pong half round trip, 0 B – 4 MB (Portals and MPI level).
    Latency(BenchArgs),
    /// Streaming with a window of outstanding sends, 1 KB – 16 MB.
    Bandwidth {
        #[command(flatten)]
        args: BenchArgs,
        /// Both ranks send and receive at once (bench `bibw`).
        #[arg(long, conflicts_with = "pingpong")]
        bidirectional: bool,
        /// Ping-pong bandwidth instead: size / half round trip, one message
        /// in flight (bench `pingpong-bw`, what fi_pingpong reports; Portals
        /// level and the UCX and libfabric peers).
        #[arg(long)]
        pingpong: bool,
    },
    /// 8-byte messages per second with a window.
    Msgrate(BenchArgs),
    /// Wait-time overlap (seed 000, Figs. 10–12): non-blocking receive,
    /// calibrated compute, wait; overlap % = 1 − wait/transfer.
    Overlap(BenchArgs),
    /// COMB CPU availability while 100 KB messages stream in.
    Comb {
        #[command(flatten)]
        args: BenchArgs,
        /// COMB method: poll (test after each work interval), pww
        /// (post-work-wait), or both.
        #[arg(long, value_enum, default_value = "both")]
        method: MethodArg,
    },
    /// Latency of a message that matches after N posted receives.
    Matchlist(BenchArgs),
    /// all_reduce (sum of doubles) and broadcast latency, 8 B – 1 MB, on N
    /// ranks (MPI level): average per call, max over the ranks.
    Collectives {
        #[command(flatten)]
        args: BenchArgs,
        /// Which collective.
        #[arg(long, value_enum, default_value = "both")]
        op: OpArg,
        /// Rank counts, comma separated; each is a job of its own.
        #[arg(long, value_delimiter = ',', default_value = "2", value_parser = parse_ranks)]
        ranks: Vec<usize>,
    },
    /// Overlap of the non-blocking collectives (ibarrier, ibcast from rank
    /// 0, iallreduce: sum of doubles, iallgather, ialltoall: size bytes per
    /// rank and per pair) with computation on N ranks: every
    /// rank starts one, computes factor × its time alone (no MPI call),
    /// waits; overlap % = 1 − wait/time alone (MPI level).
    NbcOverlap {
        #[command(flatten)]
        args: BenchArgs,
        /// Rank counts, comma separated; each is a job of its own.
        #[arg(long, value_delimiter = ',', default_value = "4", value_parser = parse_ranks)]
        ranks: Vec<usize>,
    },
    /// Whether the non-blocking collectives (ibarrier, ibcast, iallreduce)
    /// complete while every rank computes with no MPI call: start, compute
    /// --factors µs, one completion check, wait; % found complete (MPI
    /// level).
    NbcProgress {
        #[command(flatten)]
        args: BenchArgs,
        /// Rank counts, comma separated; each is a job of its own.
        #[arg(long, value_delimiter = ',', default_value = "2", value_parser = parse_ranks)]
        ranks: Vec<usize>,
    },
    /// One-sided operations on a window, passive target (MPI level):
    /// put/get/fetch-and-op latency (rma-latency), put bandwidth (rma-bw),
    /// and the origin's lock–op–unlock time while the target computes
    /// (rma-overlap; --factors are the target's compute times in µs).
    Rma {
        #[command(flatten)]
        args: BenchArgs,
        /// Which benchmark.
        #[arg(long, value_enum, default_value = "all")]
        which: RmaArg,
    },
    /// Application kernels (cg, halo exchange, a collective-heavy loop) on
    /// 2, 4 and 8 ranks: mpi-{tcp,udp,shm}-{thread,poll} and the C peers,
    /// interleaved rounds; writes results/NAME.json and .md with the
    /// thread/poll ratio per transport and the ratio to each peer.
    Apps(AppsArgs),
    /// The raw-socket floor: TCP/UDP ping-pong and TCP stream.
    Raw(RawArgs),
    /// Everything, interleaved and repeated, against raw sockets and the C
    /// peers; writes results/NAME.json, .md and SVG plots.
    Compare(CompareArgs),
    /// Regenerate tables and SVG plots (and with --doc, docs/PERFORMANCE.md)
    /// from a results file.
    Report {
        /// The results file written by `compare`.
        results: PathBuf,
        /// Also write the performance document here (its Reading section is kept).
        #[arg(long)]
        doc: Option<PathBuf>,
    },
    /// Internal: run one benchmark as a rank of a job (started by ptl-bench).
    #[command(name = RANK_SUBCOMMAND, hide = true)]
    Rank {
        /// The job description (JSON).
        job: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MethodArg {
    Poll,
    Pww,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OpArg {
    Allreduce,
    Bcast,
    Both,
}

impl OpArg {
    fn benches(self) -> Vec<Bench> {
        match self {
            OpArg::Allreduce => vec![Bench::Allreduce],
            OpArg::Bcast => vec![Bench::Bcast],
            OpArg::Both => Bench::COLLECTIVES.to_vec(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RmaArg {
    Latency,
    Bw,
    Overlap,
    All,
}

impl RmaArg {
    fn benches(self) -> Vec<Bench> {
        match self {
            RmaArg::Latency => vec![Bench::RmaLatency],
            RmaArg::Bw => vec![Bench::RmaBw],
            RmaArg::Overlap => vec![Bench::RmaOverlap],
            RmaArg::All => Bench::RMA.to_vec(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LevelArg {
    Portals,
    Mpi,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProgressArg {
    Thread,
    Poll,
    Both,
}

impl ProgressArg {
    fn modes(self) -> Vec<Progress> {
        match self {
            ProgressArg::Thread => vec![Progress::Thread],
            ProgressArg::Poll => vec![Progress::Poll],
            ProgressArg::Both => vec![Progress::Thread, Progress::Poll],
        }
    }
}

/// Options shared by the benchmark subcommands.
#[derive(Debug, Args)]
struct BenchArgs {
    /// Implementations to run, comma separated: portals-NAL-PROGRESS,
    /// mpi-NAL-PROGRESS (PROGRESS: thread, poll), raw-tcp-busy, raw-tcp, openmpi-tcp,
    /// openmpi-tcp-pt2pt (rma only), openmpi-sm, openmpi, mpich, mpich-net, capi-shm, capi-tcp
    /// (the MPICH builds on portals-rs via mpi-capi), ucx-shm, ucx-tcp, ucx-shm-put,
    /// ucx-tcp-put, libfabric-shm, libfabric-tcp, libfabric-udp. Default: the
    /// project variants chosen by --level, --nal and --progress.
    #[arg(long, value_delimiter = ',')]
    impls: Vec<String>,
    /// Project API level.
    #[arg(long, value_enum, default_value = "both")]
    level: LevelArg,
    /// NALs for the project variants: tcp, udp, shm (shared memory), or
    /// auto (the default transport: shared memory on one host); passed
    /// through as PTL_NAL.
    #[arg(long, value_delimiter = ',', default_value = "tcp")]
    nal: Vec<String>,
    /// Progress modes for the project variants.
    #[arg(long, value_enum, default_value = "both")]
    progress: ProgressArg,
    #[command(flatten)]
    knobs: Knobs,
}

/// Sizes, iterations and presets.
#[derive(Debug, Args, Clone)]
struct Knobs {
    /// Short run: fewer sizes and iterations.
    #[arg(long, conflicts_with = "smoke")]
    quick: bool,
    /// Smoke test: tiny sizes, 1-2 iterations (checks that it runs).
    #[arg(long)]
    smoke: bool,
    /// Message sizes, comma separated, K/M suffixes (powers of 1024).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Base iterations per repetition (scaled down for large sizes).
    #[arg(long)]
    iters: Option<usize>,
    /// Warm-up iterations.
    #[arg(long)]
    warmup: Option<usize>,
    /// Milliseconds each run spends in untimed iterations of its first
    /// point before timing anything (latency, bandwidth, msgrate,
    /// matchlist and the collectives; the project and the C peers alike):
    /// a loop that starts on idle CPUs runs slower for its first 10-100 ms
    /// here. 0 turns it off. Default: 300, 0 with --smoke.
    #[arg(long)]
    settle_ms: Option<u64>,
    /// Repetitions per point inside one run (median reported).
    #[arg(long)]
    reps: Option<usize>,
    /// Window of outstanding operations (bandwidth, msgrate) / COMB queue depth.
    #[arg(long)]
    window: Option<usize>,
    /// Overlap compute factors (× transfer time), COMB work intervals (µs)
    /// or rma-overlap / nbc-progress compute times (µs).
    #[arg(long, value_delimiter = ',')]
    factors: Vec<f64>,
    /// Match-list lengths.
    #[arg(long, value_delimiter = ',')]
    posted: Vec<usize>,
    /// COMB work per point, µs.
    #[arg(long)]
    total_us: Option<f64>,
    /// Do not bind ranks to cores (default: bound, like mpiexec --bind-to core).
    #[arg(long)]
    no_bind: bool,
    /// Bind ranks also when there are more of them than CPUs (round-robin,
    /// the project's and the peers' alike; default: such runs are unbound,
    /// like mpiexec --bind-to none).
    #[arg(long, conflicts_with = "no_bind")]
    bind_oversubscribed: bool,
    /// Give up on one run (one implementation, one benchmark) after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Append the JSON lines to this file instead of printing them.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Directory of the C peers (default: bench/c of this source tree).
    #[arg(long)]
    peer_dir: Option<PathBuf>,
}

impl Knobs {
    fn preset(&self) -> Preset {
        if self.smoke {
            Preset::Smoke
        } else if self.quick {
            Preset::Quick
        } else {
            Preset::Full
        }
    }

    fn params(&self, bench: Bench) -> Params {
        let mut p = Params::preset(bench, self.preset());
        if !self.sizes.is_empty() {
            p.sizes = self.sizes.clone();
        }
        if let Some(v) = self.iters {
            p.iters = v;
        }
        if let Some(v) = self.warmup {
            p.warmup = v;
        }
        if let Some(v) = self.settle_ms {
            p.settle_ms = v;
        }
        if let Some(v) = self.reps {
            p.reps = v;
        }
        if let Some(v) = self.window {
            p.window = v;
        }
        if !self.factors.is_empty() {
            p.factors = self.factors.clone();
        }
        if !self.posted.is_empty() {
            p.posted = self.posted.clone();
        }
        if let Some(v) = self.total_us {
            p.total_us = v;
        }
        p
    }

    fn runner(&self) -> Result<Runner> {
        let mut r = Runner::new()?;
        r.bind = !self.no_bind;
        r.bind_oversubscribed = self.bind_oversubscribed;
        r.timeout = Duration::from_secs(self.timeout.max(1));
        if let Some(d) = &self.peer_dir {
            r.peer_dir = d.clone();
        }
        Ok(r)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RawBench {
    Latency,
    Bandwidth,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    Tcp,
    Udp,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Blocking,
    Busy,
    All,
}

/// Options of `ptl-bench raw`.
#[derive(Debug, Args)]
struct RawArgs {
    /// Which benchmark.
    #[arg(value_enum, default_value = "all")]
    bench: RawBench,
    /// Ping-pong transport.
    #[arg(long, value_enum, default_value = "all")]
    transport: TransportArg,
    /// Ping-pong receive mode.
    #[arg(long, value_enum, default_value = "all")]
    mode: ModeArg,
    /// Leave the two processes to the scheduler (labels get `-unpinned`).
    #[arg(long)]
    no_pin: bool,
    #[command(flatten)]
    knobs: Knobs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KernelArg {
    Cg,
    Halo,
    Coll,
    All,
}

/// Options of `ptl-bench apps`.
#[derive(Debug, Args)]
struct AppsArgs {
    /// Which kernels.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    kernel: Vec<KernelArg>,
    /// Rank counts; each is a job of its own (more ranks than CPUs run
    /// oversubscribed, unbound).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8", value_parser = parse_ranks)]
    ranks: Vec<usize>,
    /// Rounds; every point is the median over them (default 5; --quick 3;
    /// --smoke 1).
    #[arg(long)]
    rounds: Option<usize>,
    /// Exactly these implementations (default: mpi-{tcp,udp,shm}-{thread,poll}
    /// and the C peers that run here).
    #[arg(long, value_delimiter = ',')]
    impls: Vec<String>,
    /// NALs of the project variants.
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp,shm")]
    nal: Vec<String>,
    /// Leave out the C peers.
    #[arg(long)]
    no_peers: bool,
    /// Name of the results (results/NAME.json, .md).
    #[arg(long, default_value = "apps")]
    name: String,
    /// Directory for the results.
    #[arg(long, default_value = "results")]
    out_dir: PathBuf,
    #[command(flatten)]
    knobs: Knobs,
}

/// Options of `ptl-bench compare`.
#[derive(Debug, Args)]
struct CompareArgs {
    /// Short run: fewer sizes and iterations, 3 rounds.
    #[arg(long, conflicts_with = "smoke")]
    quick: bool,
    /// Smoke test: tiny sizes, 1 round.
    #[arg(long)]
    smoke: bool,
    /// Rounds per benchmark; every point's value is the median over them
    /// (default 5; --quick 3; --smoke 1).
    #[arg(long)]
    rounds: Option<usize>,
    /// Repetitions inside each run.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Benchmarks (default: all but nbc-overlap and rpc); `collectives` =
    /// allreduce,bcast; `rma` = rma-latency,rma-bw,rma-overlap.
    #[arg(long, value_delimiter = ',', value_parser = parse_bench)]
    benches: Vec<BenchGroup>,
    /// Rank counts of the collective benchmarks (and nbc-overlap).
    #[arg(long, value_delimiter = ',', default_value = "2,4", value_parser = parse_ranks)]
    ranks: Vec<usize>,
    /// Exactly these implementations (no detection).
    #[arg(long, value_delimiter = ',')]
    impls: Vec<String>,
    /// NALs for the project (default: tcp, plus udp and shm if a probe job
    /// works).
    #[arg(long, value_delimiter = ',')]
    nal: Vec<String>,
    /// Progress modes of the project variants.
    #[arg(long, value_enum, default_value = "both")]
    progress: ProgressArg,
    /// Leave out the peers (the C MPI programs, UCX and libfabric).
    #[arg(long)]
    no_peers: bool,
    /// Leave out the raw-socket floor.
    #[arg(long)]
    no_raw: bool,
    /// Name of the results (results/NAME.json); default `compare`, `quick` or `smoke`.
    #[arg(long)]
    name: Option<String>,
    /// Directory for the results.
    #[arg(long, default_value = "results")]
    out_dir: PathBuf,
    /// Also write the performance document (e.g. docs/PERFORMANCE.md).
    #[arg(long)]
    doc: Option<PathBuf>,
    /// Do not bind ranks to cores.
    #[arg(long)]
    no_bind: bool,
    /// Bind ranks also when there are more of them than CPUs (round-robin,
    /// the project's and the peers' alike).
    #[arg(long, conflicts_with = "no_bind")]
    bind_oversubscribed: bool,
    /// Give up on one run after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Directory of the C peers (default: bench/c of this source tree).
    #[arg(long)]
    peer_dir: Option<PathBuf>,
}

/// A benchmark name or a group of them (`collectives`).
#[derive(Debug, Clone)]
struct BenchGroup(Vec<Bench>);

fn parse_bench(s: &str) -> std::result::Result<BenchGroup, String> {
    Bench::parse_group(s).map(BenchGroup).ok_or_else(|| {
        format!(
            "unknown benchmark '{s}' ({}, collectives, rma, rpc)",
            Bench::ALL.map(|b| b.name()).join(", ")
        )
    })
}

fn parse_ranks(s: &str) -> std::result::Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_RANKS).contains(n))
        .ok_or_else(|| format!("bad rank count '{s}' (1 to {MAX_RANKS})"))
}

/// Where records go: stdout or a file (appended).
struct Sink(Box<dyn Write>);

impl Sink {
    fn open(out: &Option<PathBuf>) -> Result<Sink> {
        Ok(Sink(match out {
            Some(p) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| BenchError::io(format!("opening {}", p.display()), e))?,
            ),
            None => Box::new(std::io::stdout()),
        }))
    }

    fn put(&mut self, records: &[Record]) -> Result<()> {
        for r in records {
            writeln!(self.0, "{}", r.to_line())
                .map_err(|e| BenchError::io("writing records", e))?;
        }
        self.0
            .flush()
            .map_err(|e| BenchError::io("writing records", e))
    }
}

fn bar(len: u64) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(250));
    pb
}

/// Run `params` on each implementation in turn, with a progress bar.
fn run_list(impls: &[Impl], params: &[Params], knobs: &Knobs) -> Result<()> {
    for p in params {
        p.validate()
            .map_err(|e| BenchError::Invalid(format!("{}: {e}", p.run_name())))?;
    }
    let runner = knobs.runner()?;
    if impls.iter().any(|i| matches!(i, Impl::Peer(_))) {
        build_peers(&runner.peer_dir)?;
    }
    let mut sink = Sink::open(&knobs.out)?;
    let jobs: Vec<(&Impl, &Params)> = params
        .iter()
        .flat_map(|p| {
            impls
                .iter()
                .filter(|i| i.supports(p.bench))
                .map(move |i| (i, p))
        })
        .collect();
    if jobs.is_empty() {
        return Err(BenchError::Invalid(
            "none of the implementations has this benchmark".into(),
        ));
    }
    let pb = bar(jobs.len() as u64);
    let mut failed = 0;
    for (imp, p) in jobs {
        pb.set_message(format!("{} {imp}", p.bench));
        match runner.run(imp, p) {
            Ok(recs) => sink.put(&recs)?,
            Err(e) => {
                failed += 1;
                pb.suspend(|| eprintln!("ptl-bench: {e}"));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    if failed > 0 {
        return Err(BenchError::Run {
            what: "benchmark".into(),
            why: format!("{failed} run(s) failed (see above)"),
        });
    }
    Ok(())
}

fn parse_impls(list: &[String]) -> Result<Vec<Impl>> {
    list.iter()
        .map(|s| Impl::parse(s.trim()).map_err(BenchError::Invalid))
        .collect()
}

fn bench_cmd(bench: Bench, args: &BenchArgs, variants: &[Params]) -> Result<()> {
    let impls = if args.impls.is_empty() {
        let mut v = Impl::project_variants(&args.nal, &args.progress.modes());
        v.retain(|i| match (args.level, i) {
            (LevelArg::Both, _) => true,
            (LevelArg::Mpi, Impl::Project { level, .. }) => *level == Level::Mpi,
            (LevelArg::Portals, Impl::Project { level, .. }) => *level == Level::Portals,
            _ => true,
        });
        v.retain(|i| i.supports(bench));
        v
    } else {
        let impls = parse_impls(&args.impls)?;
        // Named but without this benchmark: say so rather than skip quietly.
        for i in &impls {
            let mut benches: Vec<Bench> = variants.iter().map(|p| p.bench).collect();
            benches.dedup();
            for b in benches.into_iter().filter(|&b| !i.supports(b)) {
                eprintln!("ptl-bench: left out: {}", i.lacks(b));
            }
        }
        impls
    };
    run_list(&impls, variants, &args.knobs)
}

fn raw_cmd(a: &RawArgs) -> Result<()> {
    let pinned = !a.no_pin;
    let mut impls = Vec::new();
    if matches!(a.bench, RawBench::Latency | RawBench::All) {
        let ts: &[RawTransport] = match a.transport {
            TransportArg::Tcp => &[RawTransport::Tcp],
            TransportArg::Udp => &[RawTransport::Udp],
            TransportArg::All => &[RawTransport::Tcp, RawTransport::Udp],
        };
        let ms: &[PollMode] = match a.mode {
            ModeArg::Blocking => &[PollMode::Blocking],
            ModeArg::Busy => &[PollMode::BusyPoll],
            ModeArg::All => &[PollMode::BusyPoll, PollMode::Blocking],
        };
        for &transport in ts {
            for &mode in ms {
                impls.push(Impl::RawPingPong {
                    transport,
                    mode,
                    pinned,
                });
            }
        }
    }
    let mut params = Vec::new();
    if matches!(a.bench, RawBench::Latency | RawBench::All) {
        params.push(a.knobs.params(Bench::Latency));
    }
    if matches!(a.bench, RawBench::Bandwidth | RawBench::All) {
        impls.push(Impl::RawStream { pinned });
        params.push(a.knobs.params(Bench::Bandwidth));
    }
    run_list(&impls, &params, &a.knobs)
}

/// The host's load averages (1, 5, 15 min), for the record of a run.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn apps_cmd(a: &AppsArgs) -> Result<()> {
    let preset = a.knobs.preset();
    let mut benches = Vec::new();
    for k in &a.kernel {
        let bs: &[Bench] = match k {
            KernelArg::Cg => &[Bench::AppCg],
            KernelArg::Halo => &[Bench::AppHalo],
            KernelArg::Coll => &[Bench::AppColl],
            KernelArg::All => &Bench::APPS,
        };
        for &b in bs {
            if !benches.contains(&b) {
                benches.push(b);
            }
        }
    }
    let opts = CompareOpts {
        preset,
        rounds: a.rounds.unwrap_or(match preset {
            Preset::Full => 5,
            Preset::Quick => 3,
            Preset::Smoke => 1,
        }),
        reps: a.knobs.reps.unwrap_or(1),
        benches,
        ranks: a.ranks.clone(),
        impls: if a.impls.is_empty() {
            None
        } else {
            Some(parse_impls(&a.impls)?)
        },
        nals: Some(a.nal.clone()),
        progress: vec![Progress::Thread, Progress::Poll],
        peers: !a.no_peers,
        raw: false,
        runner: a.knobs.runner()?,
        command: std::env::args()
            .map(|s| if s.contains(' ') { format!("'{s}'") } else { s })
            .collect::<Vec<_>>()
            .join(" "),
    };
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| BenchError::io(format!("creating {}", a.out_dir.display()), e))?;
    let load_before = loadavg();
    let pb = bar(0);
    pb.set_message("detecting implementations");
    let res = compare(&opts, &|ev| match ev {
        Progressed::Note(s) => pb.suspend(|| eprintln!("ptl-bench: {s}")),
        Progressed::Planned(n) => pb.set_length(n as u64),
        Progressed::Start { bench, imp, round } => {
            pb.set_message(format!("{bench} {imp} (round {})", round + 1))
        }
        Progressed::Done { .. } => pb.inc(1),
    })?;
    pb.finish_and_clear();
    let json = a.out_dir.join(format!("{}.json", a.name));
    res.save(&json)?;
    let md_path = a.out_dir.join(format!("{}.md", a.name));
    let md = portals_bench::apps::table::document(&res, &json, &load_before, &loadavg());
    std::fs::write(&md_path, &md)
        .map_err(|e| BenchError::io(format!("writing {}", md_path.display()), e))?;
    print!("{md}");
    eprintln!(
        "ptl-bench: {} points from {} runs ({} failed): {}, {}",
        res.records.len(),
        res.runs.len(),
        res.failures.len(),
        json.display(),
        md_path.display()
    );
    if res.failures.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Run {
            what: "apps".into(),
            why: format!("{} run(s) failed (see above)", res.failures.len()),
        })
    }
}

fn compare_cmd(a: &CompareArgs) -> Result<()> {
    let preset = if a.smoke {
        Preset::Smoke
    } else if a.quick {
        Preset::Quick
    } else {
        Preset::Full
    };
    let mut runner = Runner::new()?;
    runner.bind = !a.no_bind;
    runner.bind_oversubscribed = a.bind_oversubscribed;
    runner.timeout = Duration::from_secs(a.timeout.max(1));
    if let Some(d) = &a.peer_dir {
        runner.peer_dir = d.clone();
    }
    let name = a.name.clone().unwrap_or_else(|| {
        match preset {
            Preset::Full => "compare",
            Preset::Quick => "quick",
            Preset::Smoke => "smoke",
        }
        .to_string()
    });
    let opts = CompareOpts {
        preset,
        rounds: a.rounds.unwrap_or(match preset {
            Preset::Full => 5,
            Preset::Quick => 3,
            Preset::Smoke => 1,
        }),
        reps: a.reps,
        benches: if a.benches.is_empty() {
            Bench::DEFAULT.to_vec()
        } else {
            let mut v: Vec<Bench> = Vec::new();
            for b in a.benches.iter().flat_map(|g| g.0.iter().copied()) {
                if !v.contains(&b) {
                    v.push(b);
                }
            }
            v
        },
        ranks: a.ranks.clone(),
        impls: if a.impls.is_empty() {
            None
        } else {
            Some(parse_impls(&a.impls)?)
        },
        nals: if a.nal.is_empty() {
            None
        } else {
            Some(a.nal.clone())
        },
        progress: a.progress.modes(),
        peers: !a.no_peers,
        raw: !a.no_raw,
        runner,
        command: std::env::args()
            .map(|s| if s.contains(' ') { format!("'{s}'") } else { s })
            .collect::<Vec<_>>()
            .join(" "),
    };
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| BenchError::io(format!("creating {}", a.out_dir.display()), e))?;
    let pb = bar(0);
    pb.set_message("detecting implementations");
    let res = compare(&opts, &|ev| match ev {
        Progressed::Note(s) => pb.suspend(|| eprintln!("ptl-bench: {s}")),
        Progressed::Planned(n) => pb.set_length(n as u64),
        Progressed::Start { bench, imp, round } => {
            pb.set_message(format!("{bench} {imp} (round {})", round + 1))
        }
        Progressed::Done { .. } => pb.inc(1),
    })?;
    pb.finish_and_clear();
    let json = a.out_dir.join(format!("{name}.json"));
    res.save(&json)?;
    let plots = write_plots(&res, &a.out_dir, &name)?;
    let md = a.out_dir.join(format!("{name}.md"));
    std::fs::write(&md, results_markdown(&res, &json, &plots))
        .map_err(|e| BenchError::io(format!("writing {}", md.display()), e))?;
    if let Some(doc) = &a.doc {
        report(&json, Some(doc))?;
        eprintln!("ptl-bench: wrote {}", doc.display());
    }
    eprintln!(
        "ptl-bench: {} points from {} runs ({} failed) in {:.0} s: {}, {}, {} plots",
        res.records.len(),
        res.runs.len(),
        res.failures.len(),
        res.meta.duration_s,
        json.display(),
        md.display(),
        plots.len()
    );
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Latency(a) => bench_cmd(Bench::Latency, &a, &[a.knobs.params(Bench::Latency)]),
        Cmd::Bandwidth {
            args,
            bidirectional,
            pingpong,
        } => {
            let b = if bidirectional {
                Bench::Bibw
            } else if pingpong {
                Bench::PingpongBw
            } else {
                Bench::Bandwidth
            };
            bench_cmd(b, &args, &[args.knobs.params(b)])
        }
        Cmd::Msgrate(a) => bench_cmd(Bench::Msgrate, &a, &[a.knobs.params(Bench::Msgrate)]),
        Cmd::Overlap(a) => bench_cmd(Bench::Overlap, &a, &[a.knobs.params(Bench::Overlap)]),
        Cmd::Comb { args, method } => {
            let methods = match method {
                MethodArg::Poll => vec![CombMethod::Poll],
                MethodArg::Pww => vec![CombMethod::Pww],
                MethodArg::Both => vec![CombMethod::Poll, CombMethod::Pww],
            };
            let ps: Vec<Params> = methods
                .into_iter()
                .map(|m| {
                    let mut p = args.knobs.params(Bench::Comb);
                    p.method = m;
                    p
                })
                .collect();
            bench_cmd(Bench::Comb, &args, &ps)
        }
        Cmd::Matchlist(a) => bench_cmd(Bench::Matchlist, &a, &[a.knobs.params(Bench::Matchlist)]),
        Cmd::Collectives { args, op, ranks } => {
            let mut ps = Vec::new();
            for b in op.benches() {
                for &n in &ranks {
                    let mut p = args.knobs.params(b);
                    p.ranks = n;
                    ps.push(p);
                }
            }
            bench_cmd(Bench::Allreduce, &args, &ps)
        }
        Cmd::NbcOverlap { args, ranks } => {
            let ps: Vec<Params> = ranks
                .iter()
                .map(|&n| {
                    let mut p = args.knobs.params(Bench::NbcOverlap);
                    p.ranks = n;
                    p
                })
                .collect();
            bench_cmd(Bench::NbcOverlap, &args, &ps)
        }
        Cmd::NbcProgress { args, ranks } => {
            let ps: Vec<Params> = ranks
                .iter()
                .map(|&n| {
                    let mut p = args.knobs.params(Bench::NbcProgress);
                    p.ranks = n;
                    p
                })
                .collect();
            bench_cmd(Bench::NbcProgress, &args, &ps)
        }
        Cmd::Rma { args, which } => {
            let benches = which.benches();
            let ps: Vec<Params> = benches.iter().map(|&b| args.knobs.params(b)).collect();
            bench_cmd(benches[0], &args, &ps)
        }
        Cmd::Apps(a) => apps_cmd(&a),
        Cmd::Raw(a) => raw_cmd(&a),
        Cmd::Compare(a) => compare_cmd(&a),
        Cmd::Report { results, doc } => {
            for f in report(&results, doc.as_deref())? {
                eprintln!("ptl-bench: wrote {}", f.display());
            }
            Ok(())
        }
        Cmd::Rank { job } => rank_main(&job),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let is_rank = matches!(cli.cmd, Cmd::Rank { .. });
    if is_rank {
        portals_runtime::init_logging();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptl-bench{}: {e}", if is_rank { " rank" } else { "" });
            ExitCode::FAILURE
        }
    }
}
