//! The one-sided benchmarks on `mpi-on-portals`' windows, call for call as
//! `bench/c/rma.c` (rank 0 the origin, rank 1 the target, windows from
//! `allocate_window`, passive-target locks):
//!
//! - `rma-latency`: per repetition a barrier; the origin locks the target
//!   (shared) and times put + flush, get + flush of each size, then an
//!   8-byte `fetch_and_op` (sum) + flush; unlock; the target waits in the
//!   closing barrier. µs per operation.
//! - `rma-bw`: per repetition a barrier, `lock_all`, per iteration a window
//!   of puts to distinct displacements and a flush; MB/s.
//! - `rma-overlap`: per iteration a barrier; the target computes `c` µs
//!   (calibrated busy loop, no library call) while the origin, after `c/10`
//!   µs of its own loop, times lock (exclusive) + put or fetch-and-op +
//!   unlock. µs; the target's measured compute time comes along.
//!
//! A byte window carries the puts and gets, a one-element `u64` window the
//! fetch-and-op (a window has one element type).

use std::time::Instant;

use mpi_on_portals::traits::*;
use mpi_on_portals::{LockType, Rank, SimpleCommunicator, SystemOperation, Tag, Window};

use crate::error::{BenchError, Result};
use crate::params::{scale_iters, Bench, Params};
use crate::record::Record;
use crate::stats::median;
use crate::timing::timed;
use crate::work::Work;

const ORIGIN: Rank = 0;
const TARGET: Rank = 1;
/// Tag of the target's compute time, sent after each overlap repetition.
const TAG_COMPUTE: Tag = 7;

/// A one-sided operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RmaKind {
    Put,
    Get,
    FetchAndOp,
}

impl RmaKind {
    fn name(self) -> &'static str {
        match self {
            RmaKind::Put => "put",
            RmaKind::Get => "get",
            RmaKind::FetchAndOp => "fetch_and_op",
        }
    }
}

/// The points of `rma.c`: every size with put (and get when `with_get`),
/// then one 8-byte fetch-and-op.
fn points(p: &Params, with_get: bool) -> Vec<(RmaKind, usize)> {
    let mut v = Vec::new();
    for &n in &p.sizes {
        v.push((RmaKind::Put, n));
        if with_get {
            v.push((RmaKind::Get, n));
        }
    }
    v.push((RmaKind::FetchAndOp, 8));
    v
}

/// The two windows of a run.
struct Wins {
    bytes: Window<'static, u8>,
    word: Window<'static, u64>,
}

impl Wins {
    fn new(world: &SimpleCommunicator, bytes: usize) -> Result<Wins> {
        Ok(Wins {
            bytes: world.allocate_window::<u8>(bytes.max(8))?,
            word: world.allocate_window::<u64>(1)?,
        })
    }

    /// One operation of `n` bytes at displacement 0 of the target, then
    /// (with `flush`) its completion there.
    fn issue(&self, op: RmaKind, sbuf: &[u8], rbuf: &mut [u8], flush: bool) -> Result<()> {
        match op {
            RmaKind::Put => self.bytes.put(TARGET, 0, sbuf)?,
            RmaKind::Get => self.bytes.get(TARGET, 0, rbuf)?,
            RmaKind::FetchAndOp => {
                self.word
                    .fetch_and_op(TARGET, 0, &1u64, SystemOperation::sum())?;
            }
        }
        if flush {
            match op {
                RmaKind::FetchAndOp => self.word.flush(TARGET)?,
                _ => self.bytes.flush(TARGET)?,
            }
        }
        Ok(())
    }

    /// Lock the target (`kind`) on the window `op` uses, run `body`, unlock.
    fn locked<R>(
        &self,
        op: RmaKind,
        kind: LockType,
        body: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        if op == RmaKind::FetchAndOp {
            let g = self.word.lock(TARGET, kind)?;
            let r = body()?;
            g.unlock()?;
            Ok(r)
        } else {
            let g = self.bytes.lock(TARGET, kind)?;
            let r = body()?;
            g.unlock()?;
            Ok(r)
        }
    }

    fn free(self) -> Result<()> {
        self.bytes.free()?;
        self.word.free()?;
        Ok(())
    }
}

/// Run one of the one-sided benchmarks as this rank; `out` keeps rank 0's
/// records. `work`: the busy loop of `rma-overlap`, calibrated here if
/// `None`.
pub fn run(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    work: Option<Work>,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    if world.size() != 2 {
        return Err(BenchError::Invalid(format!("{} needs 2 ranks", p.bench)));
    }
    match p.bench {
        Bench::RmaLatency => latency(world, label, p, out),
        Bench::RmaBw => bandwidth(world, label, p, out),
        Bench::RmaOverlap => overlap(world, label, p, work.unwrap_or_else(Work::calibrate), out),
        b => Err(BenchError::Invalid(format!(
            "{b} is not a one-sided benchmark"
        ))),
    }
}

/// `rma-latency`.
fn latency(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let max = p.max_size();
    let wins = Wins::new(world, max)?;
    let sbuf = vec![0x5au8; max];
    let mut rbuf = vec![0u8; max];
    let rank = world.rank();
    let mut fetches = 0u64;
    for (op, n) in points(p, true) {
        let iters = scale_iters(p.iters, n, 8192, 20);
        let warm = scale_iters(p.warmup, n, 8192, 2);
        let mut vals = Vec::with_capacity(p.reps);
        for _ in 0..p.reps {
            world.barrier()?;
            if rank == ORIGIN {
                let secs = wins.locked(op, LockType::Shared, || {
                    timed(warm, iters, || {
                        wins.issue(op, &sbuf[..n], &mut rbuf[..n], true)
                    })
                })?;
                vals.push(secs * 1e6 / iters as f64);
            } else {
                vals.push(0.0);
            }
            if op == RmaKind::FetchAndOp {
                fetches += (warm + iters) as u64;
            }
            world.barrier()?;
        }
        out(
            Record::of_values(Bench::RmaLatency, label, n, iters, &mut vals)?.with("op", op.name()),
        )?;
    }
    // Every fetch-and-op added 1 to the target's word: check the sum.
    if rank == TARGET {
        let got = wins.word.local()?;
        if got.first() != Some(&fetches) {
            return Err(BenchError::Invalid(format!(
                "fetch_and_op: the target's word is {got:?}, expected {fetches}"
            )));
        }
    }
    world.barrier()?;
    wins.free()
}

/// `rma-bw`.
fn bandwidth(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let max = p.max_size();
    let win = world.allocate_window::<u8>(p.max_window_bytes().max(8))?;
    let sbuf = vec![0x5au8; max];
    let rank = world.rank();
    for &n in &p.sizes {
        let w = p.window_for(n);
        let iters = scale_iters(p.iters, n, 65536, 2);
        let warm = scale_iters(p.warmup, n, 65536, 1);
        let mut vals = Vec::with_capacity(p.reps);
        for _ in 0..p.reps {
            world.barrier()?;
            if rank == ORIGIN {
                let g = win.lock_all()?;
                let secs = timed(warm, iters, || {
                    for j in 0..w {
                        win.put(TARGET, j * n, &sbuf[..n])?;
                    }
                    Ok(win.flush(TARGET)?)
                })?;
                g.unlock()?;
                vals.push(n as f64 * w as f64 * iters as f64 / secs / 1e6);
            } else {
                vals.push(0.0);
            }
            world.barrier()?;
        }
        out(Record::of_values(Bench::RmaBw, label, n, iters, &mut vals)?
            .with("op", "put")
            .with("window", w))?;
    }
    win.free()?;
    Ok(())
}

/// `rma-overlap`.
fn overlap(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    work: Work,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let max = p.max_size();
    let wins = Wins::new(world, max)?;
    let sbuf = vec![0x5au8; max];
    let mut rbuf = vec![0u8; max];
    let rank = world.rank();
    let (iters, warm) = (p.iters, p.warmup);
    for &c_us in &p.factors {
        for (op, n) in points(p, false) {
            let (mut vals, mut target_us) = (Vec::new(), Vec::new());
            for _ in 0..p.reps {
                let mut sum = 0.0;
                for i in 0..warm + iters {
                    world.barrier()?;
                    let t0 = if rank == TARGET {
                        let t0 = Instant::now();
                        work.run_us(c_us);
                        t0
                    } else {
                        work.run_us(c_us / 10.0);
                        let t0 = Instant::now();
                        wins.locked(op, LockType::Exclusive, || {
                            wins.issue(op, &sbuf[..n], &mut rbuf[..n], false)
                        })?;
                        t0
                    };
                    if i >= warm {
                        sum += t0.elapsed().as_secs_f64();
                    }
                }
                let us = sum * 1e6 / iters as f64;
                // The target's compute wall time, after the timed part.
                if rank == TARGET {
                    world
                        .process_at_rank(ORIGIN)
                        .send_with_tag(&us, TAG_COMPUTE)?;
                } else {
                    let (t, _) = world
                        .process_at_rank(TARGET)
                        .receive_with_tag::<f64>(TAG_COMPUTE)?;
                    target_us.push(t);
                }
                vals.push(us);
            }
            let tc = if target_us.is_empty() {
                0.0
            } else {
                median(&mut target_us)
            };
            out(
                Record::of_values(Bench::RmaOverlap, label, n, iters, &mut vals)?
                    .with("op", op.name())
                    .with("compute_us", c_us)
                    .with("delay_us", c_us / 10.0)
                    .with("target_compute_us", tc),
            )?;
        }
    }
    world.barrier()?;
    wins.free()
}
