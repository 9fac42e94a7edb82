//! Ping-pong between ranks 0 and 1: half round-trip latency and bandwidth
//! for a few sizes (or the sizes given as arguments, in bytes).
//! `ptlrun -n 2 target/release/examples/pingpong [sizes...]`
//! (The full benchmark, against Open MPI and MPICH, is `ptl-bench`.)

use mpi_on_portals::traits::*;
use std::time::Instant;

fn main() -> mpi_on_portals::Result<()> {
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    if world.size() < 2 {
        eprintln!("pingpong needs two ranks");
        std::process::exit(2);
    }
    let rank = world.rank();
    if rank > 1 {
        return Ok(());
    }
    let peer = world.process_at_rank(1 - rank);
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![0, 8, 1024, 65536, 1 << 20, 4 << 20];
    }
    for &size in &sizes {
        let iters = if size >= 1 << 20 { 50 } else { 2000 };
        let mut buf = vec![0u8; size];
        let mut run = |n: usize| -> mpi_on_portals::Result<f64> {
            let t = Instant::now();
            for _ in 0..n {
                if rank == 0 {
                    peer.send(&buf[..])?;
                    peer.receive_into(&mut buf[..])?;
                } else {
                    peer.receive_into(&mut buf[..])?;
                    peer.send(&buf[..])?;
                }
            }
            Ok(t.elapsed().as_secs_f64() / n as f64 / 2.0)
        };
        run(iters / 10 + 1)?;
        let half = run(iters)?;
        if rank == 0 {
            println!(
                "{size:>8} B  {:>9.2} µs  {:>9.1} MB/s",
                half * 1e6,
                size as f64 / half / 1e6
            );
        }
    }
    Ok(())
}
