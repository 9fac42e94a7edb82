//! `app-halo`: the 1-D Jacobi relaxation of
//! `mpi-on-portals/examples/halo.rs`. Each rank owns `cells` cells of a rod
//! with fixed zero ends; every step it posts wildcard receives (any
//! source, tag = direction), sends its edge cells, waits for all, then
//! relaxes: new = old/2 + (left + right)/4. The check gathers the rod on
//! rank 0 and compares it with the same steps done serially there: the
//! largest difference must be ≤ 1e-12.

use mpi_on_portals::request::{scope, wait_all};
use mpi_on_portals::traits::*;
use mpi_on_portals::SimpleCommunicator;

use super::{wrong, Answer, Kernel};
use crate::error::Result;
use crate::params::Bench;

/// Tag of a value travelling leftwards.
const LEFT: i32 = 1;
/// Tag of a value travelling rightwards.
const RIGHT: i32 = 2;
/// Tag of the gathered rod.
const GATHER: i32 = 3;

/// This rank's part of the rod.
pub struct Halo {
    cells: usize,
    steps: usize,
    rank: usize,
    size: usize,
    u: Vec<f64>,
    v: Vec<f64>,
}

/// The initial value of global cell `g`.
fn initial(g: usize) -> f64 {
    ((g * 7919) % 1000) as f64 / 1000.0
}

/// One relaxation step of `old` into `new`, with the neighbours' edge
/// values `left` and `right`.
fn step(old: &[f64], new: &mut [f64], left: f64, right: f64) {
    let n = old.len();
    for i in 0..n {
        let l = if i == 0 { left } else { old[i - 1] };
        let r = if i + 1 == n { right } else { old[i + 1] };
        new[i] = 0.5 * old[i] + 0.25 * (l + r);
    }
}

impl Halo {
    /// `cells` cells per rank (at least one), `steps` steps, as rank
    /// `rank` of `size`.
    pub fn new(cells: usize, steps: usize, rank: usize, size: usize) -> Halo {
        let cells = cells.max(1);
        Halo {
            cells,
            steps,
            rank,
            size,
            u: vec![0.0; cells],
            v: vec![0.0; cells],
        }
    }
}

impl Kernel for Halo {
    fn solve(&mut self, world: &SimpleCommunicator) -> Result<()> {
        let (rank, size, n) = (self.rank, self.size, self.cells);
        for (i, x) in self.u.iter_mut().enumerate() {
            *x = initial(rank * n + i);
        }
        for _ in 0..self.steps {
            let (mut from_left, mut from_right) = (0.0f64, 0.0f64);
            let u = &self.u;
            scope(|sc| -> Result<()> {
                let mut reqs = Vec::with_capacity(4);
                if rank > 0 {
                    reqs.push(world.any_process().immediate_receive_into_with_tag(
                        sc,
                        &mut from_left,
                        RIGHT,
                    )?);
                }
                if rank + 1 < size {
                    reqs.push(world.any_process().immediate_receive_into_with_tag(
                        sc,
                        &mut from_right,
                        LEFT,
                    )?);
                }
                if rank > 0 {
                    reqs.push(
                        world
                            .process_at_rank(rank as i32 - 1)
                            .immediate_send_with_tag(sc, &u[0], LEFT)?,
                    );
                }
                if rank + 1 < size {
                    reqs.push(
                        world
                            .process_at_rank(rank as i32 + 1)
                            .immediate_send_with_tag(sc, &u[n - 1], RIGHT)?,
                    );
                }
                wait_all(reqs)?;
                Ok(())
            })?;
            step(&self.u, &mut self.v, from_left, from_right);
            std::mem::swap(&mut self.u, &mut self.v);
        }
        Ok(())
    }

    fn check(&mut self, world: &SimpleCommunicator) -> Result<Answer> {
        let (n, size) = (self.cells, self.size);
        if self.rank != 0 {
            world
                .process_at_rank(0)
                .send_with_tag(&self.u[..], GATHER)?;
            // Rank 0 alone knows the verdict: it fails the job if wrong.
            return Ok(Vec::new());
        }
        let mut all = self.u.clone();
        let mut part = vec![0.0f64; n];
        for r in 1..size {
            world
                .process_at_rank(r as i32)
                .receive_into_with_tag(&mut part[..], GATHER)?;
            all.extend_from_slice(&part);
        }
        let mut s: Vec<f64> = (0..n * size).map(initial).collect();
        let mut t = vec![0.0; n * size];
        for _ in 0..self.steps {
            step(&s, &mut t, 0.0, 0.0);
            std::mem::swap(&mut s, &mut t);
        }
        let diff = all
            .iter()
            .zip(&s)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        if diff > 1e-12 {
            return Err(wrong(
                Bench::AppHalo,
                format!("max difference from the serial computation {diff:e} (want <= 1e-12)"),
            ));
        }
        Ok(vec![("max_diff", diff.into())])
    }
}
