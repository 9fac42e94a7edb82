//! A token and a 1 MiB array travel around a ring of ranks; every rank adds
//! to both, and rank 0 checks the result against the closed form.
//!
//! `ptlrun -n 4 target/release/examples/ring [laps]`
//!
//! The token is an 8-byte message (short protocol); the array is 1 MiB
//! (long protocol: eager put with the get fallback when the receive is not
//! posted yet). Odd ranks post their receive first and even ranks send
//! first, so both the expected and the unexpected paths are exercised.

use mpi_on_portals::traits::*;

const LEN: usize = 1 << 17; // u64s: 1 MiB

fn main() -> mpi_on_portals::Result<()> {
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let laps: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);

    let start = std::time::Instant::now();
    let mut token = 0u64;
    let mut array = vec![0u64; LEN];
    for _ in 0..laps {
        if rank == 0 {
            next.send(&token)?;
            token = prev.receive::<u64>()?.0;
        } else {
            let (t, _) = prev.receive::<u64>()?;
            next.send(&(t + rank as u64))?;
        }
    }
    // The array goes around once.
    if rank == 0 {
        next.send(&array[..])?;
        prev.receive_into(&mut array[..])?;
    } else {
        prev.receive_into(&mut array[..])?;
        for (i, x) in array.iter_mut().enumerate() {
            *x += rank as u64 * i as u64;
        }
        next.send(&array[..])?;
    }
    let elapsed = start.elapsed();

    if rank == 0 {
        let per_lap: u64 = (1..size as u64).sum();
        let want_token = laps * per_lap;
        let bad = array
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x != per_lap * i as u64)
            .count();
        println!(
            "ring of {size} ranks: {laps} laps, token {token} (expected {want_token}), \
             1 MiB array {} ({:.1} ms)",
            if bad == 0 {
                "intact".to_string()
            } else {
                format!("with {bad} wrong elements")
            },
            elapsed.as_secs_f64() * 1e3
        );
        if token != want_token || bad != 0 {
            eprintln!("ring: WRONG RESULT");
            std::process::exit(1);
        }
        println!("ring: OK");
    }
    Ok(())
}
