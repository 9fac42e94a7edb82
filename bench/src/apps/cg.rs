//! `app-cg`: conjugate gradient on −Δu = f over an N×N grid (5-point
//! stencil, zero boundary, A = −Δ·h²), rows split across the ranks as in
//! `mpi-on-portals/examples/cg.rs`. The right-hand side is A u* for a known
//! u*, so the answer is checked two ways: the relative residual
//! ‖f − A u‖/‖f‖ < 1e-8 and max |u − u*| < 1e-6. A solve is u = 0, then
//! iterations until ‖r‖² ≤ 1e-20 ‖f‖² or the cap (`iters`); reaching the
//! cap unconverged fails the check.

use mpi_on_portals::request::{scope, wait_all};
use mpi_on_portals::traits::*;
use mpi_on_portals::SimpleCommunicator;

use super::{max_over_ranks, wrong, Answer, Kernel};
use crate::error::Result;
use crate::params::Bench;

/// Tag of a row travelling down, to the rank below.
const DOWNWARD: i32 = 1;
/// Tag of a row travelling up, to the rank above.
const UPWARD: i32 = 2;

/// This rank's rows, each vector with one halo row above and below.
pub struct Cg {
    n: usize,
    rows: usize,
    max_iter: usize,
    ustar: Vec<f64>,
    b: Vec<f64>,
    u: Vec<f64>,
    r: Vec<f64>,
    p: Vec<f64>,
    ap: Vec<f64>,
    bb: f64,
    iterations: usize,
}

/// The exact solution u*(x, y) at global row `gi`, column `j`.
fn exact(n: usize, gi: usize, j: usize) -> f64 {
    let h = 1.0 / (n + 1) as f64;
    let (x, y) = ((gi + 1) as f64 * h, (j + 1) as f64 * h);
    (std::f64::consts::PI * x).sin() * (2.0 * std::f64::consts::PI * y).sin()
        + x * y * (1.0 - x) * (1.0 - y)
}

impl Cg {
    /// Set up an `n`×`n` problem (at least one row per rank) with an
    /// iteration cap of `max_iter`, as rank `rank` of `size`.
    pub fn new(n: usize, max_iter: usize, rank: usize, size: usize) -> Cg {
        let n = n.max(size);
        let (base, extra) = (n / size, n % size);
        let rows = base + usize::from(rank < extra);
        let first = rank * base + rank.min(extra);
        let len = (rows + 2) * n;
        let mut c = Cg {
            n,
            rows,
            max_iter,
            ustar: vec![0.0; len],
            b: vec![0.0; len],
            u: vec![0.0; len],
            r: vec![0.0; len],
            p: vec![0.0; len],
            ap: vec![0.0; len],
            bb: 0.0,
            iterations: 0,
        };
        // b = A u*, from u* itself (halos included), so that u* solves the
        // discrete system exactly.
        for i in 0..rows + 2 {
            let gi = (first + i).wrapping_sub(1);
            if gi < n {
                for j in 0..n {
                    c.ustar[i * n + j] = exact(n, gi, j);
                }
            }
        }
        apply(n, rows, &c.ustar, &mut c.b);
        c
    }

    /// The owned rows' index range (halos excluded).
    fn inner(&self) -> std::ops::Range<usize> {
        self.n..(self.rows + 1) * self.n
    }

    /// Σ a·b over every rank's owned rows.
    fn dot(&self, world: &SimpleCommunicator, a: &[f64], b: &[f64]) -> Result<f64> {
        let local: f64 = self.inner().map(|k| a[k] * b[k]).sum();
        let mut global = 0.0;
        world.all_reduce_into(&local, &mut global, mpi_on_portals::SystemOperation::sum())?;
        Ok(global)
    }
}

/// y = A v on the `rows` owned rows (v's halos must be current).
fn apply(n: usize, rows: usize, v: &[f64], y: &mut [f64]) {
    for i in 1..=rows {
        for j in 0..n {
            let k = i * n + j;
            let l = if j > 0 { v[k - 1] } else { 0.0 };
            let r = if j + 1 < n { v[k + 1] } else { 0.0 };
            y[k] = 4.0 * v[k] - l - r - v[k - n] - v[k + n];
        }
    }
}

/// Fill the halo rows of `v` from the neighbours: receive from and send to
/// the rank above and the rank below, non-blocking, then wait for all.
fn exchange(world: &SimpleCommunicator, n: usize, rows: usize, v: &mut [f64]) -> Result<()> {
    let (rank, size) = (world.rank(), world.size());
    let (top, rest) = v.split_at_mut(n);
    let (inner, bottom) = rest.split_at_mut(rows * n);
    scope(|sc| -> Result<()> {
        let mut reqs = Vec::with_capacity(4);
        if rank > 0 {
            let up = world.process_at_rank(rank - 1);
            reqs.push(up.immediate_receive_into_with_tag(sc, &mut top[..], DOWNWARD)?);
            reqs.push(up.immediate_send_with_tag(sc, &inner[..n], UPWARD)?);
        }
        if rank + 1 < size {
            let down = world.process_at_rank(rank + 1);
            reqs.push(down.immediate_receive_into_with_tag(sc, &mut bottom[..], UPWARD)?);
            reqs.push(down.immediate_send_with_tag(sc, &inner[(rows - 1) * n..], DOWNWARD)?);
        }
        wait_all(reqs)?;
        Ok(())
    })
}

impl Kernel for Cg {
    fn solve(&mut self, world: &SimpleCommunicator) -> Result<()> {
        let (n, rows) = (self.n, self.rows);
        self.u.fill(0.0);
        self.r.copy_from_slice(&self.b);
        self.p.copy_from_slice(&self.b);
        let mut rr = self.dot(world, &self.r, &self.r)?;
        self.bb = rr;
        let mut it = 0;
        while it < self.max_iter && rr > 1e-20 * self.bb {
            exchange(world, n, rows, &mut self.p)?;
            apply(n, rows, &self.p, &mut self.ap);
            let alpha = rr / self.dot(world, &self.p, &self.ap)?;
            for k in self.inner() {
                self.u[k] += alpha * self.p[k];
                self.r[k] -= alpha * self.ap[k];
            }
            let rr_new = self.dot(world, &self.r, &self.r)?;
            let beta = rr_new / rr;
            for k in self.inner() {
                self.p[k] = self.r[k] + beta * self.p[k];
            }
            rr = rr_new;
            it += 1;
        }
        self.iterations = it;
        Ok(())
    }

    fn check(&mut self, world: &SimpleCommunicator) -> Result<Answer> {
        let (n, rows) = (self.n, self.rows);
        exchange(world, n, rows, &mut self.u)?;
        // The true residual f − A u, into `r` (the solve starts it afresh).
        apply(n, rows, &self.u, &mut self.ap);
        for k in self.inner() {
            self.r[k] = self.b[k] - self.ap[k];
        }
        let residual = self.dot(world, &self.r, &self.r)?.sqrt() / self.bb.sqrt();
        let local = self
            .inner()
            .map(|k| (self.u[k] - self.ustar[k]).abs())
            .fold(0.0, f64::max);
        let error = max_over_ranks(world, local)?;
        if !(residual < 1e-8 && error < 1e-6) {
            return Err(wrong(
                Bench::AppCg,
                format!(
                    "{n}x{n} after {} iterations: relative residual {residual:.2e}, \
                     max error {error:.2e} (want < 1e-8, < 1e-6)",
                    self.iterations
                ),
            ));
        }
        Ok(vec![
            ("iterations", self.iterations.into()),
            ("residual", residual.into()),
            ("error", error.into()),
        ])
    }
}
