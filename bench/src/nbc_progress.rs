//! `nbc-progress`: do the non-blocking collectives complete while every
//! rank computes, with no MPI call after the start (issue 20 part 3)?
//! `bench/c/nbc_progress.c` does the same, call for call.
//!
//! `nbc-overlap` cannot tell: its compute is a small multiple of T0 (5–45
//! µs), and the start and the barrier's exit skew count as exposed. Here
//! the compute is fixed and long (`--factors` are compute times in µs,
//! default 200, 1000 and 5000; wall-clock time, [`Work::run_for_us`], so
//! that a calibration on a loaded host does not shorten it). For each operation (`ibarrier`, `ibcast`
//! from rank 0, `iallreduce`, a sum over `size / 8` doubles) and each
//! repetition, every rank runs `warm + iters` iterations of
//!
//! ```text
//! barrier; t0; start; ts; compute c µs (calibrated busy loop, no MPI
//! call); t1; ONE completion check; wait; t2
//! ```
//!
//! The check is [`Request::peek`](mpi_on_portals::request::Request::peek),
//! which makes no transport pass of its own: what it finds complete, the
//! progress thread (or nothing, in polling mode) completed. The C peers
//! have only `MPI_Test`, which does progress the operation itself — that
//! favours them (field `check`).
//!
//! Records: bench `nbc-progress`, `value` = % of the iterations whose check
//! found the collective complete (the minimum over the ranks; median over
//! the repetitions), fields `op`, `ranks`, `compute_us` (asked),
//! `compute_meas_us`, `start_us`, `wait_us` (t2 − t1: the check and the
//! residual wait after the compute, µs per iteration, maximum over the
//! ranks), `nbc_us` (T0: barrier-to-wait time of the collective alone,
//! median over the repetitions) and `check`.

use std::time::Instant;

use mpi_on_portals::request::Request;
use mpi_on_portals::traits::*;
use mpi_on_portals::{SimpleCommunicator, SystemOperation};

use crate::error::{BenchError, Result};
use crate::nbc_overlap::{start_and, Buffers, NbcOp};
use crate::params::{Bench, Params};
use crate::record::Record;
use crate::stats::median;
use crate::work::Work;

/// The operations measured: the ones with triggered-operation chains.
pub const OPS: [NbcOp; 3] = [NbcOp::Ibarrier, NbcOp::Ibcast, NbcOp::Iallreduce];

/// One iteration after the start: whether the check found it complete,
/// and the instants after the start, the compute and the wait.
struct Marks {
    ts: Instant,
    t1: Instant,
    done: bool,
    t2: Instant,
}

fn compute_check_wait(req: Request<'_>, c_us: f64, work: &Work) -> Result<Marks> {
    let ts = Instant::now();
    work.run_for_us(c_us);
    let t1 = Instant::now();
    let done = req.peek()?;
    req.wait()?;
    Ok(Marks {
        ts,
        t1,
        done,
        t2: Instant::now(),
    })
}

fn once(
    world: &SimpleCommunicator,
    op: NbcOp,
    b: &mut Buffers,
    n: usize,
    c_us: f64,
    work: &Work,
) -> Result<Marks> {
    if !OPS.contains(&op) {
        return Err(BenchError::Invalid(format!(
            "nbc-progress does not run {}",
            op.name()
        )));
    }
    start_and(world, op, b, n, |req| compute_check_wait(req, c_us, work))
}

/// One repetition's figures over the ranks.
struct Point {
    /// % of iterations complete at the check, minimum over the ranks.
    done_pct: f64,
    /// µs per iteration, maxima over the ranks.
    start: f64,
    compute: f64,
    wait: f64,
    total: f64,
}

#[allow(clippy::too_many_arguments)]
fn rep(
    world: &SimpleCommunicator,
    op: NbcOp,
    b: &mut Buffers,
    n: usize,
    warm: usize,
    iters: usize,
    c_us: f64,
    work: &Work,
) -> Result<Point> {
    let (mut sum, mut done) = ([0.0f64; 4], 0usize);
    for i in 0..warm + iters {
        world.barrier()?;
        let t0 = Instant::now();
        let m = once(world, op, b, n, c_us, work)?;
        if i >= warm {
            sum[0] += (m.ts - t0).as_secs_f64();
            sum[1] += (m.t1 - m.ts).as_secs_f64();
            sum[2] += (m.t2 - m.t1).as_secs_f64();
            sum[3] += (m.t2 - t0).as_secs_f64();
            done += usize::from(m.done);
        }
    }
    let per = 1e6 / iters as f64;
    let mine = sum.map(|s| s * per);
    let mut max = [0.0f64; 4];
    world.all_reduce_into(&mine[..], &mut max[..], SystemOperation::max())?;
    let pct = [100.0 * done as f64 / iters as f64];
    let mut min = [0.0f64; 1];
    world.all_reduce_into(&pct[..], &mut min[..], SystemOperation::min())?;
    Ok(Point {
        done_pct: min[0],
        start: max[0],
        compute: max[1],
        wait: max[2],
        total: max[3],
    })
}

/// Run `nbc-progress` as this rank of `world`; rank 0 passes every record
/// to `out`.
pub fn run(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    world.barrier()?;
    let work = Work::calibrate();
    let max = p.max_size();
    let mut b = Buffers::new(max, world.size() as usize, world.rank() as usize);
    for op in OPS {
        let sizes: &[usize] = if op == NbcOp::Ibarrier {
            &[0]
        } else {
            &p.sizes
        };
        for &n in sizes {
            let mut t = Vec::new();
            for _ in 0..p.reps {
                t.push(rep(world, op, &mut b, n, p.warmup, p.iters, 0.0, &work)?.total);
            }
            let t_nbc = median(&mut t);
            for &c_us in &p.factors {
                let (mut v, mut st, mut cu, mut w) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..p.reps {
                    let pt = rep(world, op, &mut b, n, p.warmup, p.iters, c_us, &work)?;
                    v.push(pt.done_pct);
                    st.push(pt.start);
                    cu.push(pt.compute);
                    w.push(pt.wait);
                }
                out(
                    Record::of_values(Bench::NbcProgress, label, n, p.iters, &mut v)?
                        .with("op", op.name())
                        .with("ranks", p.ranks)
                        .with("compute_us", c_us)
                        .with("compute_meas_us", median(&mut cu))
                        .with("start_us", median(&mut st))
                        .with("wait_us", median(&mut w))
                        .with("nbc_us", t_nbc)
                        .with("check", "peek"),
                )?;
            }
            if op == NbcOp::Iallreduce {
                let want = p.ranks as f64;
                if let Some(x) = b.recv[..n / 8].iter().find(|&&x| x != want) {
                    return Err(BenchError::Invalid(format!(
                        "iallreduce of {n} B summed to {x}, expected {want}"
                    )));
                }
            }
        }
    }
    Ok(())
}
