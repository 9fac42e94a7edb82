//! A 1-D Jacobi relaxation with non-blocking halo exchange. Each rank owns a
//! slice of the rod; every step it posts wildcard receives (any source,
//! tag = direction), sends its edges, computes the interior while the halos
//! arrive, then finishes the edges. The result is checked against the same
//! computation done serially.
//!
//! `ptlrun -n 4 target/release/examples/halo [cells-per-rank] [steps]`

use mpi_on_portals::request::{scope, wait_all};
use mpi_on_portals::traits::*;

const LEFT: i32 = 1; // a message travelling leftwards
const RIGHT: i32 = 2; // a message travelling rightwards

fn step(old: &[f64], new: &mut [f64], left: f64, right: f64) {
    let n = old.len();
    for i in 0..n {
        let l = if i == 0 { left } else { old[i - 1] };
        let r = if i + 1 == n { right } else { old[i + 1] };
        new[i] = 0.5 * old[i] + 0.25 * (l + r);
    }
}

fn initial(global: usize) -> f64 {
    ((global * 7919) % 1000) as f64 / 1000.0
}

fn main() -> mpi_on_portals::Result<()> {
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let steps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);

    let mut u: Vec<f64> = (0..n).map(|i| initial(rank * n + i)).collect();
    let mut v = vec![0.0; n];
    for _ in 0..steps {
        // Fixed boundary values of 0 at both ends of the rod.
        let (mut from_left, mut from_right) = (0.0f64, 0.0f64);
        scope(|sc| -> mpi_on_portals::Result<()> {
            let mut reqs = Vec::new();
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
        step(&u, &mut v, from_left, from_right);
        std::mem::swap(&mut u, &mut v);
    }

    // Gather to rank 0 and compare with the serial computation.
    if rank == 0 {
        let mut all = u.clone();
        for r in 1..size {
            let mut part = vec![0.0f64; n];
            world
                .process_at_rank(r as i32)
                .receive_into(&mut part[..])?;
            all.extend_from_slice(&part);
        }
        let mut s: Vec<f64> = (0..n * size).map(initial).collect();
        let mut t = vec![0.0; n * size];
        for _ in 0..steps {
            step(&s, &mut t, 0.0, 0.0);
            std::mem::swap(&mut s, &mut t);
        }
        let err = all
            .iter()
            .zip(&s)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        println!(
            "halo: {size} ranks x {n} cells, {steps} steps, max difference from serial {err:e}"
        );
        if err > 1e-12 {
            eprintln!("halo: WRONG RESULT");
            std::process::exit(1);
        }
        println!("halo: OK");
    } else {
        world.process_at_rank(0).send(&u[..])?;
    }
    Ok(())
}
