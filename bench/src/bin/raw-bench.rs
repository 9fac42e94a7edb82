//! `raw-bench`: raw-socket physical-limit benchmarks over loopback (temporary
//! CLI until `ptl-bench` exists). Prints the same JSON lines as the C peer
//! benchmarks in `bench/c/` (see `portals_bench::record`), with `impl` set to
//! `raw-tcp-blocking`, `raw-tcp-busy`, `raw-udp-blocking`, `raw-udp-busy`
//! (bench `latency`) or `raw-tcp` (bench `bandwidth`), with `-unpinned`
//! appended under `--no-pin`.
//!
//! Every point is measured `--reps` times, each time in a fresh pair of
//! processes; a repetition's value is its block average (as in the C
//! programs) and `value` is the median over repetitions.
//!
//! ```text
//! cargo run --release -p portals-bench --bin raw-bench -- latency --transport tcp --mode busy
//! cargo run --release -p portals-bench --bin raw-bench -- bandwidth --sizes 1K,1M,16M
//! ```

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use portals_bench::raw::{self, Placement, PollMode, Stats, UDP_MAX_PAYLOAD};
use portals_bench::record::Record;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Bench {
    /// Ping-pong half round trip (TCP and/or UDP).
    Latency,
    /// TCP unidirectional streaming throughput.
    Bandwidth,
    /// Both.
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

/// Raw-socket loopback benchmarks printing JSON lines.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Which benchmark to run.
    #[arg(value_enum, default_value = "all")]
    bench: Bench,
    /// Ping-pong transport.
    #[arg(long, value_enum, default_value = "all")]
    transport: TransportArg,
    /// Ping-pong receive mode.
    #[arg(long, value_enum, default_value = "all")]
    mode: ModeArg,
    /// Message sizes, comma separated, K/M suffixes allowed (default: latency
    /// 0 and 1 B..4 MiB, UDP up to 32 KiB plus 65507; bandwidth 1 KiB..16 MiB).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Base iterations (latency: round trips up to 8 KiB, default 10000;
    /// bandwidth: batches up to 64 KiB, default 200); scaled down above.
    #[arg(long)]
    iters: Option<usize>,
    /// Repetitions per point (median reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Do not pin the two processes to two CPUs (default: pinned, like
    /// `mpiexec --bind-to core`).
    #[arg(long)]
    no_pin: bool,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1024),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .map(|v| v * mul)
        .map_err(|e| format!("bad size '{s}': {e}"))
}

/// Same scaling as the C programs: `base` up to `threshold` bytes, then
/// proportionally fewer, never below `floor`.
fn scale_iters(base: usize, size: usize, threshold: usize, floor: usize) -> usize {
    if size <= threshold {
        base
    } else {
        ((base as f64 * threshold as f64 / size as f64) as usize).max(floor)
    }
}

fn pow2_sizes(max: usize) -> Vec<usize> {
    let mut v = vec![0];
    let mut s = 1;
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

/// Aggregate repetitions: each repetition contributes its `mean`.
fn emit(
    out: &mut impl Write,
    bench: &str,
    implementation: &str,
    size: usize,
    reps: &[Stats],
    extra: serde_json::Map<String, serde_json::Value>,
) -> io::Result<()> {
    let Some(first) = reps.first() else {
        return Ok(());
    };
    let mut means: Vec<f64> = reps.iter().map(|s| s.mean).collect();
    let mut medians: Vec<f64> = reps.iter().map(|s| s.median).collect();
    let (Some(agg), Some(med)) = (
        Stats::from_samples(&mut means, first.unit, first.messages),
        Stats::from_samples(&mut medians, first.unit, first.messages),
    ) else {
        return Ok(());
    };
    let mut rec = Record {
        bench: bench.to_string(),
        implementation: implementation.to_string(),
        size: size as u64,
        iters: first.messages as u64,
        value: agg.median,
        unit: first.unit.as_str().to_string(),
        reps: reps.len() as u32,
        min: agg.min,
        max: agg.max,
        mean: agg.mean,
        extra,
    };
    rec.extra
        .insert("sample_median".into(), serde_json::json!(med.median));
    writeln!(out, "{}", rec.to_line())?;
    out.flush()
}

fn run(cli: &Cli) -> io::Result<()> {
    let reps = cli.reps.max(1);
    let placement = if cli.no_pin {
        Placement::Unpinned
    } else {
        Placement::Pinned
    };
    let suffix = if cli.no_pin { "-unpinned" } else { "" };
    let mut extra = serde_json::Map::new();
    extra.insert("pinned".into(), serde_json::json!(!cli.no_pin));
    let mut out = io::stdout().lock();
    if matches!(cli.bench, Bench::Latency | Bench::All) {
        let transports: &[&str] = match cli.transport {
            TransportArg::Tcp => &["tcp"],
            TransportArg::Udp => &["udp"],
            TransportArg::All => &["tcp", "udp"],
        };
        let modes: &[PollMode] = match cli.mode {
            ModeArg::Blocking => &[PollMode::Blocking],
            ModeArg::Busy => &[PollMode::BusyPoll],
            ModeArg::All => &[PollMode::Blocking, PollMode::BusyPoll],
        };
        for &t in transports {
            let sizes = if !cli.sizes.is_empty() {
                cli.sizes.clone()
            } else if t == "tcp" {
                pow2_sizes(4 << 20)
            } else {
                let mut v = pow2_sizes(32 << 10);
                v.push(UDP_MAX_PAYLOAD);
                v
            };
            for &mode in modes {
                let name = format!("raw-{t}-{}{suffix}", mode.label());
                for &size in &sizes {
                    if t == "udp" && size > UDP_MAX_PAYLOAD {
                        eprintln!("raw-bench: skipping UDP size {size} (> {UDP_MAX_PAYLOAD})");
                        continue;
                    }
                    let iters = scale_iters(cli.iters.unwrap_or(10_000), size, 8192, 20);
                    let mut rs = Vec::with_capacity(reps);
                    for _ in 0..reps {
                        rs.push(if t == "tcp" {
                            raw::tcp_pingpong_with(size, iters, mode, placement)?
                        } else {
                            raw::udp_pingpong_with(size, iters, mode, placement)?
                        });
                    }
                    emit(&mut out, "latency", &name, size, &rs, extra.clone())?;
                }
            }
        }
    }
    if matches!(cli.bench, Bench::Bandwidth | Bench::All) {
        let sizes = if cli.sizes.is_empty() {
            pow2_sizes(16 << 20)
                .into_iter()
                .filter(|&s| s >= 1024)
                .collect()
        } else {
            cli.sizes.clone()
        };
        for size in sizes.into_iter().filter(|&s| s > 0) {
            let batch = raw::stream_batch(size);
            let messages = scale_iters(cli.iters.unwrap_or(200), size, 65536, 4) * batch;
            let mut rs = Vec::with_capacity(reps);
            for _ in 0..reps {
                rs.push(raw::tcp_stream_with(size, messages, placement)?);
            }
            let mut extra = extra.clone();
            extra.insert("window".into(), serde_json::json!(batch));
            let name = format!("raw-tcp{suffix}");
            emit(&mut out, "bandwidth", &name, size, &rs, extra)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raw-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
