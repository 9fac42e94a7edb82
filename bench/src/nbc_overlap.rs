//! `nbc-overlap`: how much of a non-blocking collective's time the ranks
//! can spend computing (`bench/c/nbc_overlap.c`, call for call).
//!
//! For each operation (`ibarrier`, then `ibcast` from rank 0,
//! `iallreduce`, a sum over `size / 8` doubles, `iallgather` of `size`
//! bytes from every rank and `ialltoall` of `size` bytes per pair, at
//! every size) and each
//! repetition, every rank runs `warm + iters` iterations of
//!
//! ```text
//! barrier; t0; start the collective; ts; compute c µs (calibrated busy
//! loop, no MPI call); t1; wait; t2
//! ```
//!
//! and averages start = ts − t0, wait = t2 − t1, exposed = start + wait,
//! total = t2 − t0 and compute = t1 − ts over the last `iters`; a
//! repetition's figures are the maxima of these averages over the ranks
//! (the slowest rank decides, as in the blocking collectives' benchmark). The baseline (c = 0) gives T0, the
//! median total over the repetitions; then c = factor × T0 on every rank,
//! and overlap % = 100 · (1 − exposed / T0), clamped to [0, 100]:
//! the point-to-point `overlap` benchmark's formula, with the start's time
//! counted as not overlapped (that benchmark's receive is posted in no
//! time, but a collective's start may do the work itself: the all-reduce
//! above the triggered size runs the blocking algorithm there, and its
//! wait is then empty). A library that progresses the collective only
//! inside MPI calls waits after the compute about as long as without it
//! (little overlap); one whose collective runs on its own finishes it
//! during the compute.
//!
//! Records: bench `nbc-overlap`, `value` = overlap %, fields `op`,
//! `ranks`, `compute_factor` (0 for the baseline, whose value is 0),
//! `start_us`, `compute_us`, `wait_us`, `total_us` (µs per iteration) and
//! `nbc_us` (T0).

use std::time::Instant;

use mpi_on_portals::request;
use mpi_on_portals::traits::*;
use mpi_on_portals::{SimpleCommunicator, SystemOperation};

use crate::error::{BenchError, Result};
use crate::params::{scale_iters, Bench, Params};
use crate::record::Record;
use crate::stats::{median, Summary};
use crate::work::Work;

/// The non-blocking collectives measured, in the order of the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NbcOp {
    /// `MPI_Ibarrier` (size 0).
    Ibarrier,
    /// `MPI_Ibcast` of `size` bytes from rank 0.
    Ibcast,
    /// `MPI_Iallreduce`, sum over `size / 8` doubles.
    Iallreduce,
    /// `MPI_Iallgather` of `size` bytes from every rank.
    Iallgather,
    /// `MPI_Ialltoall` of `size` bytes from every rank to every rank.
    Ialltoall,
}

impl NbcOp {
    /// Every operation, in the order a run measures them.
    pub const ALL: [NbcOp; 5] = [
        NbcOp::Ibarrier,
        NbcOp::Ibcast,
        NbcOp::Iallreduce,
        NbcOp::Iallgather,
        NbcOp::Ialltoall,
    ];

    /// The `op` field of the records.
    pub fn name(self) -> &'static str {
        match self {
            NbcOp::Ibarrier => "ibarrier",
            NbcOp::Ibcast => "ibcast",
            NbcOp::Iallreduce => "iallreduce",
            NbcOp::Iallgather => "iallgather",
            NbcOp::Ialltoall => "ialltoall",
        }
    }

    /// The operation of an `op` field.
    pub fn from_name(s: &str) -> Option<NbcOp> {
        NbcOp::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// One repetition's averages, µs per iteration (maxima over the ranks).
#[derive(Debug, Clone, Copy, Default)]
struct Point {
    start: f64,
    /// start + wait, the time not overlapped (its own maximum: the ranks
    /// with the longest start and the longest wait may differ).
    exposed: f64,
    wait: f64,
    total: f64,
    compute: f64,
}

/// The instants of one iteration after `t0`: started, computed, waited.
type Marks = (Instant, Instant, Instant);

/// The buffers of one run: the broadcast's bytes, the all-reduce's
/// doubles, the all-gather's and all-to-all's blocks (`ranks × size`;
/// this rank's own bytes are its rank + 1, block d of `spread` — refilled
/// for each size — is d + 1).
pub(crate) struct Buffers {
    bytes: Vec<u8>,
    send: Vec<f64>,
    pub(crate) recv: Vec<f64>,
    mine: Vec<u8>,
    spread: Vec<u8>,
    many: Vec<u8>,
}

impl Buffers {
    /// Room for every operation at up to `max` bytes on `ranks` ranks;
    /// this rank (`me`) contributes `me + 1` to the all-gather.
    pub(crate) fn new(max: usize, ranks: usize, me: usize) -> Self {
        Buffers {
            bytes: vec![0x5au8; max],
            send: vec![1.0f64; max / 8],
            recv: vec![0.0f64; max / 8],
            mine: vec![(me + 1) as u8; max],
            spread: vec![0u8; ranks * max],
            many: vec![0u8; ranks * max],
        }
    }
}

/// Compute `c_us` while `req` runs, then wait for it; the instants after
/// the start, the compute and the wait.
fn compute_then_wait(req: request::Request<'_>, c_us: f64, work: &Work) -> Result<Marks> {
    let ts = Instant::now();
    work.run_us(c_us);
    let t1 = Instant::now();
    req.wait()?;
    Ok((ts, t1, Instant::now()))
}

/// Start `op` on `n` bytes and hand its request to `then` (which
/// computes, checks, waits: what the benchmark measures), inside the
/// operation's scope.
pub(crate) fn start_and<M>(
    world: &SimpleCommunicator,
    op: NbcOp,
    b: &mut Buffers,
    n: usize,
    then: impl FnOnce(request::Request<'_>) -> Result<M>,
) -> Result<M> {
    match op {
        NbcOp::Ibarrier => then(world.immediate_barrier()?),
        NbcOp::Ibcast => request::scope(|s| {
            then(
                world
                    .process_at_rank(0)
                    .immediate_broadcast_into(s, &mut b.bytes[..n])?,
            )
        }),
        NbcOp::Iallreduce => request::scope(|s| {
            let k = n / 8;
            then(world.immediate_all_reduce_into(
                s,
                &b.send[..k],
                &mut b.recv[..k],
                SystemOperation::sum(),
            )?)
        }),
        NbcOp::Iallgather => request::scope(|s| {
            let m = world.size() as usize * n;
            then(world.immediate_all_gather_into(s, &b.mine[..n], &mut b.many[..m])?)
        }),
        NbcOp::Ialltoall => request::scope(|s| {
            let m = world.size() as usize * n;
            then(world.immediate_all_to_all_into(s, &b.spread[..m], &mut b.many[..m])?)
        }),
    }
}

/// Start `op` on `n` bytes, compute `c_us`, wait; the instants after the
/// start, the compute and the wait.
fn once(
    world: &SimpleCommunicator,
    op: NbcOp,
    b: &mut Buffers,
    n: usize,
    c_us: f64,
    work: &Work,
) -> Result<Marks> {
    start_and(world, op, b, n, |req| compute_then_wait(req, c_us, work))
}

/// After an all-gather, block r holds r + 1 (rank r's bytes); after an
/// all-to-all, every block holds this rank + 1 (block `me` of everyone's
/// `spread`).
fn check_blocks(b: &Buffers, op: NbcOp, n: usize, ranks: usize, me: usize) -> Result<()> {
    let bad = (0..ranks).find(|&r| {
        let want = match op {
            NbcOp::Iallgather => r + 1,
            _ => me + 1,
        } as u8;
        b.many[r * n..(r + 1) * n].iter().any(|&x| x != want)
    });
    match bad {
        Some(r) => Err(BenchError::Invalid(format!(
            "{} of {n} B: block {r} wrong",
            op.name()
        ))),
        None => Ok(()),
    }
}

/// One repetition: `warm + iters` iterations, each after a barrier so the
/// ranks start together; this rank's averages, then their maxima over the
/// ranks (every rank gets them).
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
    let mut sum = [0.0f64; 5];
    for i in 0..warm + iters {
        world.barrier()?;
        let t0 = Instant::now();
        let (ts, t1, t2) = once(world, op, b, n, c_us, work)?;
        if i >= warm {
            sum[0] += (ts - t0).as_secs_f64();
            sum[1] += (t2 - t1).as_secs_f64();
            sum[2] += (t2 - t0).as_secs_f64();
            sum[3] += (t1 - ts).as_secs_f64();
            sum[4] += (ts - t0 + (t2 - t1)).as_secs_f64();
        }
    }
    let per = 1e6 / iters as f64;
    let mine = sum.map(|s| s * per);
    let mut max = [0.0f64; 5];
    world.all_reduce_into(&mine[..], &mut max[..], SystemOperation::max())?;
    Ok(Point {
        start: max[0],
        wait: max[1],
        total: max[2],
        compute: max[3],
        exposed: max[4],
    })
}

/// Every rank's all-reduce result must be the number of ranks (each sends
/// ones): a wrong sum would make the timing meaningless.
fn check_sum(b: &Buffers, n: usize, ranks: usize) -> Result<()> {
    let want = ranks as f64;
    match b.recv[..n / 8].iter().find(|&&x| x != want) {
        Some(x) => Err(BenchError::Invalid(format!(
            "iallreduce of {n} B summed to {x}, expected {want}"
        ))),
        None => Ok(()),
    }
}

/// Run `nbc-overlap` as this rank of `world`; rank 0 passes every record
/// to `out`.
pub fn run(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let ranks = p.ranks;
    // Every rank computes: every rank calibrates, all at once (on an
    // oversubscribed machine the loop rate is then the shared one the
    // compute phases see).
    world.barrier()?;
    let work = Work::calibrate();
    let max = p.max_size();
    let (me, world_n) = (world.rank() as usize, world.size() as usize);
    let mut b = Buffers::new(max, world_n, me);
    for op in NbcOp::ALL {
        let sizes: &[usize] = if op == NbcOp::Ibarrier {
            &[0]
        } else {
            &p.sizes
        };
        for &n in sizes {
            b.many.fill(0);
            for (i, x) in b.spread[..world_n * n].iter_mut().enumerate() {
                *x = (i / n.max(1) + 1) as u8;
            }
            let iters = scale_iters(p.iters, n, 8192, 10);
            let warm = scale_iters(p.warmup, n, 8192, 2);
            let (mut t, mut w, mut st) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..p.reps {
                let pt = rep(world, op, &mut b, n, warm, iters, 0.0, &work)?;
                t.push(pt.total);
                w.push(pt.wait);
                st.push(pt.start);
            }
            let t_nbc = median(&mut t);
            let point = |r: Record| {
                r.with("op", op.name())
                    .with("ranks", ranks)
                    .with("nbc_us", t_nbc)
            };
            out(point(
                Record::new(
                    Bench::NbcOverlap.name(),
                    label,
                    n as u64,
                    iters as u64,
                    Bench::NbcOverlap.unit(),
                    Summary::zero(p.reps),
                )
                .with("compute_factor", 0.0)
                .with("start_us", median(&mut st))
                .with("compute_us", 0.0)
                .with("wait_us", median(&mut w))
                .with("total_us", t_nbc),
            ))?;
            for &f in &p.factors {
                let c_us = f * t_nbc;
                let (mut ov, mut st, mut w, mut t, mut cu) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..p.reps {
                    let pt = rep(world, op, &mut b, n, warm, iters, c_us, &work)?;
                    let x = if t_nbc > 0.0 {
                        100.0 * (1.0 - pt.exposed / t_nbc)
                    } else {
                        0.0
                    };
                    ov.push(x.clamp(0.0, 100.0));
                    st.push(pt.start);
                    w.push(pt.wait);
                    t.push(pt.total);
                    cu.push(pt.compute);
                }
                out(point(
                    Record::of_values(Bench::NbcOverlap, label, n, iters, &mut ov)?
                        .with("compute_factor", f)
                        .with("start_us", median(&mut st))
                        .with("compute_us", median(&mut cu))
                        .with("wait_us", median(&mut w))
                        .with("total_us", median(&mut t)),
                ))?;
            }
            match op {
                NbcOp::Iallreduce => check_sum(&b, n, ranks)?,
                NbcOp::Iallgather | NbcOp::Ialltoall => check_blocks(&b, op, n, world_n, me)?,
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_round_trip() {
        for op in NbcOp::ALL {
            assert_eq!(NbcOp::from_name(op.name()), Some(op));
        }
        assert_eq!(NbcOp::from_name("ireduce"), None);
    }
}
