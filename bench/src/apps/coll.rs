//! `app-coll`: a collective-heavy loop. Iteration `i` on rank `r` of `P`:
//!
//! ```text
//! x[j] = r + j + i (j < m = size/8); compute: 4 relaxation sweeps over z
//! all_reduce(r + i, sum)          8 B    must be P·i + P(P−1)/2
//! all_reduce(x, sum)              size B x'[j] must be P·(j + i) + P(P−1)/2
//! broadcast(y) from root i mod P  size B y[j] = root·m + j + i everywhere
//! barrier
//! ```
//!
//! All values are whole numbers far below 2^53, so every sum is exact in
//! any order: every rank checks each iteration's results as it goes (a
//! comparison per element, no extra communication) and the check after the
//! repetitions fails the run, naming the first wrong one, if any was.

use mpi_on_portals::traits::*;
use mpi_on_portals::{SimpleCommunicator, SystemOperation};

use super::{max_over_ranks, wrong, Answer, Kernel};
use crate::error::Result;
use crate::params::Bench;

/// Relaxation sweeps of the short compute per iteration.
pub const SWEEPS: usize = 4;

/// This rank's buffers.
pub struct Coll {
    m: usize,
    iters: usize,
    rank: usize,
    size: usize,
    x: Vec<f64>,
    sum: Vec<f64>,
    y: Vec<f64>,
    z: Vec<f64>,
    zt: Vec<f64>,
    /// The first wrong result of the last solve, if any.
    bad: Option<String>,
}

impl Coll {
    /// `bytes` per all-reduce and broadcast (a multiple of 8, at least 8),
    /// `iters` iterations, as rank `rank` of `size`.
    pub fn new(bytes: usize, iters: usize, rank: usize, size: usize) -> Coll {
        let m = (bytes / 8).max(1);
        Coll {
            m,
            iters,
            rank,
            size,
            x: vec![0.0; m],
            sum: vec![0.0; m],
            y: vec![0.0; m],
            z: vec![0.0; m],
            zt: vec![0.0; m],
            bad: None,
        }
    }

    /// The short compute: `SWEEPS` relaxation sweeps over z (zero ends).
    fn compute(&mut self) {
        for _ in 0..SWEEPS {
            let n = self.m;
            for j in 0..n {
                let l = if j == 0 { 0.0 } else { self.z[j - 1] };
                let r = if j + 1 == n { 0.0 } else { self.z[j + 1] };
                self.zt[j] = 0.5 * self.z[j] + 0.25 * (l + r);
            }
            std::mem::swap(&mut self.z, &mut self.zt);
        }
        std::hint::black_box(&self.z);
    }

    /// One iteration; the first wrong result, if any.
    fn iteration(&mut self, world: &SimpleCommunicator, i: usize) -> Result<Option<String>> {
        let (p, r, m) = (self.size as f64, self.rank as f64, self.m);
        let fi = i as f64;
        for (j, x) in self.x.iter_mut().enumerate() {
            *x = r + j as f64 + fi;
        }
        self.compute();
        let base = p * (p - 1.0) / 2.0;
        let mut s = 0.0f64;
        world.all_reduce_into(&(r + fi), &mut s, SystemOperation::sum())?;
        let mut bad = (s != p * fi + base).then(|| format!("8-byte all_reduce gave {s}"));
        world.all_reduce_into(&self.x[..], &mut self.sum[..], SystemOperation::sum())?;
        if let Some(j) = (0..m).find(|&j| self.sum[j] != p * (j as f64 + fi) + base) {
            bad = bad.or(Some(format!("all_reduce element {j} = {}", self.sum[j])));
        }
        let root = i % self.size;
        if root == self.rank {
            for (j, y) in self.y.iter_mut().enumerate() {
                *y = (root * m + j + i) as f64;
            }
        }
        world
            .process_at_rank(root as i32)
            .broadcast_into(&mut self.y[..])?;
        if let Some(j) = (0..m).find(|&j| self.y[j] != (root * m + j + i) as f64) {
            bad = bad.or(Some(format!(
                "broadcast from {root} element {j} = {}",
                self.y[j]
            )));
        }
        world.barrier()?;
        Ok(bad.map(|b| format!("iteration {i}: {b}")))
    }
}

impl Kernel for Coll {
    fn solve(&mut self, world: &SimpleCommunicator) -> Result<()> {
        self.z.fill(1.0);
        self.bad = None;
        for i in 0..self.iters {
            let bad = self.iteration(world, i)?;
            if self.bad.is_none() {
                self.bad = bad;
            }
        }
        Ok(())
    }

    fn check(&mut self, world: &SimpleCommunicator) -> Result<Answer> {
        let wrong_ranks = max_over_ranks(world, f64::from(u8::from(self.bad.is_some())))?;
        if let Some(b) = &self.bad {
            return Err(wrong(Bench::AppColl, format!("rank {}: {b}", self.rank)));
        }
        if wrong_ranks > 0.0 {
            return Err(wrong(Bench::AppColl, "on another rank".into()));
        }
        Ok(vec![("sweeps", SWEEPS.into())])
    }
}
