//! Distributed conjugate gradient: solve the 2-D Poisson equation
//! −Δu = f on an N×N grid (5-point stencil, zero boundary) with the rows
//! split across ranks. Each iteration exchanges halo rows with the
//! neighbours (non-blocking point-to-point) and computes two dot products
//! with `all_reduce`.
//!
//! The right-hand side is built from a known solution u*, so the result is
//! checked two ways: the residual ‖f − A u‖ is small, and u is close to u*.
//!
//! `ptlrun -n 4 target/release/examples/cg [N] [max-iterations]`

use mpi_on_portals::request::{scope, wait_all};
use mpi_on_portals::traits::*;
use mpi_on_portals::{SimpleCommunicator, SystemOperation};

/// The rows of the grid this rank owns, with one halo row above and below.
struct Slab {
    n: usize,
    first: usize,
    rows: usize,
}

impl Slab {
    fn new(n: usize, rank: usize, size: usize) -> Slab {
        let base = n / size;
        let extra = n % size;
        let rows = base + usize::from(rank < extra);
        let first = rank * base + rank.min(extra);
        Slab { n, first, rows }
    }

    /// Index of (local row `i` in 0..rows+2 with halos, column `j`).
    fn at(&self, i: usize, j: usize) -> usize {
        i * self.n + j
    }

    fn len(&self) -> usize {
        (self.rows + 2) * self.n
    }
}

/// The exact solution u*(x, y).
fn exact(n: usize, gi: usize, j: usize) -> f64 {
    let h = 1.0 / (n + 1) as f64;
    let (x, y) = ((gi + 1) as f64 * h, (j + 1) as f64 * h);
    (std::f64::consts::PI * x).sin() * (2.0 * std::f64::consts::PI * y).sin()
        + x * y * (1.0 - x) * (1.0 - y)
}

/// Fill the halo rows of `v` from the neighbours.
fn exchange(world: &SimpleCommunicator, s: &Slab, v: &mut [f64]) -> mpi_on_portals::Result<()> {
    let (rank, size) = (world.rank(), world.size());
    let n = s.n;
    let (top, rest) = v.split_at_mut(n);
    let (inner, bottom) = rest.split_at_mut(s.rows * n);
    scope(|sc| -> mpi_on_portals::Result<()> {
        let mut reqs = Vec::new();
        if rank > 0 {
            let up = world.process_at_rank(rank - 1);
            reqs.push(up.immediate_receive_into_with_tag(sc, &mut top[..], 1)?);
            reqs.push(up.immediate_send_with_tag(sc, &inner[..n], 2)?);
        }
        if rank + 1 < size {
            let down = world.process_at_rank(rank + 1);
            reqs.push(down.immediate_receive_into_with_tag(sc, &mut bottom[..], 2)?);
            reqs.push(down.immediate_send_with_tag(sc, &inner[(s.rows - 1) * n..], 1)?);
        }
        wait_all(reqs).map(|_| ())
    })
}

/// y = A v on the owned rows (v's halos must be current). A = −Δ·h².
fn apply(s: &Slab, v: &[f64], y: &mut [f64]) {
    let n = s.n;
    for i in 1..=s.rows {
        for j in 0..n {
            let c = v[s.at(i, j)];
            let l = if j > 0 { v[s.at(i, j - 1)] } else { 0.0 };
            let r = if j + 1 < n { v[s.at(i, j + 1)] } else { 0.0 };
            let u = v[s.at(i - 1, j)];
            let d = v[s.at(i + 1, j)];
            y[s.at(i, j)] = 4.0 * c - l - r - u - d;
        }
    }
}

fn dot(world: &SimpleCommunicator, s: &Slab, a: &[f64], b: &[f64]) -> mpi_on_portals::Result<f64> {
    let local: f64 = (s.n..(s.rows + 1) * s.n).map(|k| a[k] * b[k]).sum();
    let mut global = 0.0;
    world.all_reduce_into(&local, &mut global, SystemOperation::sum())?;
    Ok(global)
}

fn main() -> mpi_on_portals::Result<()> {
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
        .max(size);
    let max_iter: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let s = Slab::new(n, rank, size);
    let start = std::time::Instant::now();

    // b = A u*, computed from u* itself (halos included) so that u* solves
    // the discrete system exactly.
    let mut ustar = vec![0.0; s.len()];
    for i in 0..s.rows + 2 {
        let gi = (s.first + i).wrapping_sub(1);
        if gi < n {
            for j in 0..n {
                ustar[s.at(i, j)] = exact(n, gi, j);
            }
        }
    }
    let mut b = vec![0.0; s.len()];
    apply(&s, &ustar, &mut b);

    // Conjugate gradient from u = 0.
    let mut u = vec![0.0; s.len()];
    let mut r = b.clone();
    let mut p = r.clone();
    let mut ap = vec![0.0; s.len()];
    let mut rr = dot(&world, &s, &r, &r)?;
    let bb = rr;
    let mut iters = 0;
    while iters < max_iter && rr > 1e-20 * bb {
        exchange(&world, &s, &mut p)?;
        apply(&s, &p, &mut ap);
        let alpha = rr / dot(&world, &s, &p, &ap)?;
        for k in s.n..(s.rows + 1) * s.n {
            u[k] += alpha * p[k];
            r[k] -= alpha * ap[k];
        }
        let rr_new = dot(&world, &s, &r, &r)?;
        let beta = rr_new / rr;
        for k in s.n..(s.rows + 1) * s.n {
            p[k] = r[k] + beta * p[k];
        }
        rr = rr_new;
        iters += 1;
    }

    // Check: the true residual and the error against u*.
    exchange(&world, &s, &mut u)?;
    let mut au = vec![0.0; s.len()];
    apply(&s, &u, &mut au);
    let res: Vec<f64> = (0..s.len()).map(|k| b[k] - au[k]).collect();
    let res_norm = dot(&world, &s, &res, &res)?.sqrt() / bb.sqrt();
    let local_err = (s.n..(s.rows + 1) * s.n)
        .map(|k| (u[k] - ustar[k]).abs())
        .fold(0.0, f64::max);
    let mut err = 0.0;
    world.all_reduce_into(&local_err, &mut err, SystemOperation::max())?;
    let elapsed = start.elapsed();
    if rank == 0 {
        println!(
            "cg: {n}x{n} Poisson on {size} ranks: {iters} iterations, relative residual {res_norm:.2e}, \
             max error vs exact solution {err:.2e} ({:.1} ms)",
            elapsed.as_secs_f64() * 1e3
        );
        if !(res_norm < 1e-8 && err < 1e-6) {
            eprintln!("cg: DID NOT CONVERGE");
            std::process::exit(1);
        }
        println!("cg: OK");
    }
    Ok(())
}
