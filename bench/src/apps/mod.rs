//! `apps`: three application kernels timed whole, on any number of ranks,
//! beside the same kernels in C (`bench/c/apps.c`, call for call):
//!
//! - [`cg`] (`app-cg`): conjugate gradient on the 2-D Poisson equation,
//!   rows split across the ranks; halo rows by non-blocking point-to-point,
//!   two 8-byte all-reduces per iteration. Size = grid side N, iters = the
//!   iteration cap (the solve runs to a relative residual of 1e-10).
//! - [`halo`] (`app-halo`): 1-D Jacobi relaxation, one double each way per
//!   step through wildcard receives. Size = cells per rank, iters = steps.
//! - [`coll`] (`app-coll`): a collective-heavy loop: per iteration a short
//!   compute, an 8-byte and a size-byte all-reduce, a size-byte broadcast
//!   from a rotating root, a barrier. Size = bytes, iters = iterations.
//!
//! Each repetition is a barrier, then one whole solve timed on every rank;
//! its time is the maximum over the ranks (the slowest rank decides when
//! an application ends). `warmup` untimed solves come first. After the
//! last repetition the kernel checks its answer; a wrong one fails the run
//! (a fast wrong answer is no result). Records: `value` = median ms per
//! solve, fields `ranks`, `check` = "ok" and the kernel's own figures
//! (`iterations`, `residual`, `error` for cg; `max_diff` for halo).
//! [`table`] turns a run's medians into the thread/poll and project/peer
//! tables of `ptl-bench apps`.
//!
//! The kernels live here rather than as options of the examples
//! `mpi-on-portals/examples/cg.rs` and `halo.rs` (whose algorithms they
//! share): a benchmark rank is `ptl-bench rank`, started by the harness
//! with the NAL, progress mode, CPU binding and timeout of every other
//! benchmark and interleaved with the C peers, so the kernels are
//! functions it calls; the examples stay what the README runs, printing
//! and checking what they always did.

pub mod cg;
pub mod coll;
pub mod halo;
pub mod table;

use std::time::Instant;

use mpi_on_portals::traits::*;
use mpi_on_portals::{SimpleCommunicator, SystemOperation};

use crate::error::{BenchError, Result};
use crate::params::{Bench, Params};
use crate::record::Record;

/// A kernel's verified answer: the figures its record carries.
pub type Answer = Vec<(&'static str, serde_json::Value)>;

/// One application kernel at one problem size, set up on this rank.
pub trait Kernel {
    /// One whole solve from the kernel's initial state (every call does the
    /// same work).
    fn solve(&mut self, world: &SimpleCommunicator) -> Result<()>;
    /// Check the last solve's answer (a collective call: every rank makes
    /// it); the figures for the record, or [`BenchError::Invalid`] saying
    /// what is wrong.
    fn check(&mut self, world: &SimpleCommunicator) -> Result<Answer>;
}

/// The largest of every rank's `x`.
pub(crate) fn max_over_ranks(world: &SimpleCommunicator, x: f64) -> Result<f64> {
    let mut m = 0.0f64;
    world.all_reduce_into(&x, &mut m, SystemOperation::max())?;
    Ok(m)
}

/// A wrong answer, as the error that fails the run.
pub(crate) fn wrong(bench: Bench, what: String) -> BenchError {
    BenchError::Invalid(format!("{bench}: WRONG ANSWER: {what}"))
}

/// Run application benchmark `p` as this rank of `world`; rank 0 passes
/// every record to `out`.
pub fn run(
    world: &SimpleCommunicator,
    label: &str,
    p: &Params,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    for &n in &p.sizes {
        let mut k: Box<dyn Kernel> = match p.bench {
            Bench::AppCg => Box::new(cg::Cg::new(n, p.iters, rank, size)),
            Bench::AppHalo => Box::new(halo::Halo::new(n, p.iters, rank, size)),
            Bench::AppColl => Box::new(coll::Coll::new(n, p.iters, rank, size)),
            b => {
                return Err(BenchError::Invalid(format!(
                    "{b} is not an application kernel"
                )))
            }
        };
        for _ in 0..p.warmup {
            world.barrier()?;
            k.solve(world)?;
        }
        let mut ms = Vec::with_capacity(p.reps);
        for _ in 0..p.reps {
            world.barrier()?;
            let t0 = Instant::now();
            k.solve(world)?;
            ms.push(max_over_ranks(world, t0.elapsed().as_secs_f64() * 1e3)?);
        }
        let answer = k.check(world)?;
        let mut r = Record::of_values(p.bench, label, n, p.iters, &mut ms)?
            .with("ranks", size)
            .with("check", "ok");
        for (key, v) in answer {
            r = r.with(key, v);
        }
        out(r)?;
    }
    Ok(())
}
