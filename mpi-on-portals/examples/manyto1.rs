//! Many-to-one flood to a late receiver (issue 23, item 6): every rank but 0
//! starts `PTL_FLOOD_COUNT` sends (default 2000) of `PTL_FLOOD_LEN` bytes
//! (default 60000) to rank 0, then all meet in a barrier, and only then does
//! rank 0 receive them, round robin over the senders, checking each one's
//! tag (its index) and bytes. Far more than the unexpected pool's cap
//! (`PTL_MPI_UNEXPECTED_MAX` × `PTL_MPI_UNEXPECTED_BUFFER`) arrives before any
//! receive is posted; nothing may be lost and rank 0's memory must stay
//! bounded. Prints rank 0's peak RSS (`VmHWM`), the time and the protocol
//! counters.
//!
//! `ptlrun -n 9 target/release/examples/manyto1` with
//! `PTL_FLOOD_COUNT=100000` is the soak of the issue (8 senders × 100 000 ×
//! 60 KB); the multi-process tests run 3 senders × 2000.

use std::time::Instant;

use mpi_on_portals::request::{scope, wait_all};
use mpi_on_portals::traits::*;
use mpi_on_portals::MpiError;

/// Distinct payloads each sender cycles through: enough to catch a message
/// delivered in another's place, few enough that a sender need not hold
/// `PTL_FLOOD_COUNT` buffers.
const WINDOW: usize = 61;

fn env(name: &str, default: usize) -> Result<usize, MpiError> {
    match std::env::var(name) {
        Ok(s) => s
            .parse()
            .map_err(|_| MpiError::Init(format!("{name}={s:?} is not a number"))),
        Err(_) => Ok(default),
    }
}

/// Sender `r`'s message `i`: bytes from a generator seeded by `r` and
/// `i % WINDOW`.
fn message(len: usize, r: i32, i: usize) -> Vec<u8> {
    let mut x = (r as u64 * 1000 + (i % WINDOW) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Peak resident memory of this process in bytes (`VmHWM`).
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn main() -> Result<(), MpiError> {
    let count = env("PTL_FLOOD_COUNT", 2000)?;
    let len = env("PTL_FLOOD_LEN", 60_000)?;
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    if n < 2 {
        eprintln!("manyto1 needs at least two ranks");
        std::process::exit(2);
    }
    let t = Instant::now();
    if me != 0 {
        let window: Vec<Vec<u8>> = (0..WINDOW.min(count.max(1)))
            .map(|i| message(len, me, i))
            .collect();
        let root = world.process_at_rank(0);
        scope(|sc| -> Result<(), MpiError> {
            let mut reqs = Vec::with_capacity(count);
            for i in 0..count {
                let m = &window[i % window.len()];
                reqs.push(root.immediate_send_with_tag(sc, &m[..], i as i32)?);
            }
            world.barrier()?;
            wait_all(reqs)?;
            Ok(())
        })?;
        world.barrier()?;
        return Ok(());
    }
    world.barrier()?;
    let arrived = t.elapsed().as_secs_f64();
    let mut buf = vec![0u8; len];
    let mut bad = 0usize;
    for i in 0..count {
        for r in 1..n {
            let s = world.process_at_rank(r).receive_into(&mut buf[..])?;
            if s.tag() != i as i32 || s.count_bytes() != len || buf != message(len, r, i) {
                bad += 1;
                if bad <= 5 {
                    eprintln!("message {i} of rank {r}: out of order or wrong ({s:?})");
                }
            }
        }
    }
    let total = t.elapsed().as_secs_f64();
    world.barrier()?;
    let cfg = universe.config();
    let cap = (cfg.unexpected_max * cfg.unexpected_buffer) as u64;
    let peak = peak_rss().unwrap_or(0);
    let bytes = (count * len) as f64 * (n - 1) as f64;
    println!(
        "{} senders x {count} x {len} B = {:.1} MB: sends and barrier {arrived:.1} s, all received \
         {total:.1} s ({:.0} MB/s); {bad} bad; receiver peak RSS {} MiB, pool cap {} MiB",
        n - 1,
        bytes / 1e6,
        bytes / total / 1e6,
        peak >> 20,
        cap >> 20
    );
    println!("{:?}", universe.stats());
    if bad > 0 {
        std::process::exit(1);
    }
    Ok(())
}
