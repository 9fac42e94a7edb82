//! A distributed hash table on one-sided operations: every rank exposes a
//! table of slots in a window, any rank inserts into and looks up any
//! rank's table without the owner taking part.
//!
//! `ptlrun -n 4 target/release/examples/dht [keys-per-rank] [seed] [corrupt]`
//!
//! A key's hash picks its owner rank and a first slot; collisions probe the
//! next slots (open addressing, linear probing). A slot is two `u64`s, key
//! and value; key 0 marks a free slot. Inserting claims a slot with
//! `compare_and_swap(0 → key)` (a slot already holding the key is
//! reused), then writes the value with `put`. Every rank inserts its own
//! random keys (seeded, distinct), then after a barrier looks up its own
//! keys, every other rank's (it regenerates them from the seed) and keys
//! never inserted, and checks each value. Rank 0 also checks that the
//! tables together hold exactly the keys inserted. Any mismatch ends the
//! program with a non-zero status; success prints `dht: OK` on rank 0.
//! With `corrupt`, rank 0 overwrites the value of its first key after the
//! inserts, so every rank's lookup of it must fail (the check checked).

use mpi_on_portals::traits::*;
use mpi_on_portals::{SystemOperation, Window};

/// Slots per rank: the table is kept at most half full.
fn slots_per_rank(keys_per_rank: usize) -> usize {
    (2 * keys_per_rank).next_power_of_two().max(16)
}

/// SplitMix64's finaliser: a bijection on u64, so distinct inputs give
/// distinct keys.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `i`-th key of `rank` (never 0: 0 marks a free slot).
fn key_of(seed: u64, rank: usize, i: usize) -> u64 {
    let k = mix(seed ^ ((rank as u64) << 32 | i as u64));
    if k == 0 {
        1 << 63 | rank as u64
    } else {
        k
    }
}

/// The value stored under a key: any rank can check it.
fn value_of(key: u64) -> u64 {
    mix(key ^ 0x5555_5555_5555_5555)
}

/// The table over a window of `2 * slots` u64s on each of `ranks` ranks.
struct Table<'w> {
    win: &'w Window<'static, u64>,
    ranks: usize,
    slots: usize,
}

#[derive(Debug)]
enum Error {
    Mpi(mpi_on_portals::MpiError),
    Full(u64),
    Wrong(String),
}

impl From<mpi_on_portals::MpiError> for Error {
    fn from(e: mpi_on_portals::MpiError) -> Self {
        Error::Mpi(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Mpi(e) => write!(f, "MPI: {e}"),
            Error::Full(k) => write!(f, "no free slot for key {k:#x}"),
            Error::Wrong(s) => f.write_str(s),
        }
    }
}

impl Table<'_> {
    /// Owner rank and first slot of `key`.
    fn home(&self, key: u64) -> (i32, usize) {
        let h = mix(key);
        let owner = (h % self.ranks as u64) as i32;
        let slot = ((h / self.ranks as u64) % self.slots as u64) as usize;
        (owner, slot)
    }

    /// Insert or overwrite; within a `lock_all` epoch.
    fn insert(&self, key: u64, value: u64) -> Result<(), Error> {
        let (owner, first) = self.home(key);
        for probe in 0..self.slots {
            let slot = (first + probe) % self.slots;
            let old = self.win.compare_and_swap(owner, 2 * slot, &0, &key)?;
            if old == 0 || old == key {
                self.win.put(owner, 2 * slot + 1, &[value])?;
                return Ok(());
            }
        }
        Err(Error::Full(key))
    }

    /// The value under `key`, if any; within a `lock_all` epoch, after
    /// every insert has completed.
    fn lookup(&self, key: u64) -> Result<Option<u64>, Error> {
        let (owner, first) = self.home(key);
        let mut pair = [0u64; 2];
        for probe in 0..self.slots {
            let slot = (first + probe) % self.slots;
            self.win.get(owner, 2 * slot, &mut pair)?;
            match pair[0] {
                0 => return Ok(None),
                k if k == key => return Ok(Some(pair[1])),
                _ => {}
            }
        }
        Ok(None)
    }
}

fn run() -> Result<(), Error> {
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let mut args = std::env::args().skip(1);
    let per_rank: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(17);
    let corrupt = args.next().as_deref() == Some("corrupt");
    let slots = slots_per_rank(per_rank);
    let win = world.allocate_window::<u64>(2 * slots)?;
    let table = Table {
        win: &win,
        ranks: size,
        slots,
    };
    let start = std::time::Instant::now();

    let epoch = win.lock_all()?;
    for i in 0..per_rank {
        let k = key_of(seed, rank, i);
        table.insert(k, value_of(k))?;
    }
    win.flush_all()?;
    epoch.unlock()?;
    world.barrier()?;
    if corrupt {
        if rank == 0 {
            let epoch = win.lock_all()?;
            let k = key_of(seed, 0, 0);
            table.insert(k, value_of(k) ^ 1)?;
            epoch.unlock()?;
        }
        world.barrier()?;
    }

    let mut bad = Vec::new();
    let epoch = win.lock_all()?;
    // Own keys first, then every other rank's, then absent ones.
    for r in (0..size).map(|d| (rank + d) % size) {
        for i in 0..per_rank {
            let k = key_of(seed, r, i);
            match table.lookup(k)? {
                Some(v) if v == value_of(k) => {}
                got => bad.push(format!("key {k:#x} of rank {r}: {got:?}")),
            }
        }
    }
    for i in 0..per_rank / 10 + 1 {
        let k = key_of(seed ^ 0xdead_beef, rank, i);
        if let Some(v) = table.lookup(k)? {
            bad.push(format!("absent key {k:#x} found with {v:#x}"));
        }
    }
    epoch.unlock()?;
    let elapsed = start.elapsed();

    // Together the tables hold exactly the keys inserted.
    let held = win.local()?.chunks(2).filter(|slot| slot[0] != 0).count() as u64;
    let mut total = 0u64;
    world.all_reduce_into(&held, &mut total, SystemOperation::sum())?;
    let mut bad_total = 0u64;
    world.all_reduce_into(&(bad.len() as u64), &mut bad_total, SystemOperation::sum())?;
    for b in bad.iter().take(5) {
        eprintln!("dht: rank {rank}: {b}");
    }
    if rank == 0 {
        println!(
            "dht on {size} ranks: {per_rank} keys each, {slots} slots per rank, \
             {total} slots held, {} lookups, {bad_total} wrong, {:.1} ms",
            size * (size * per_rank + per_rank / 10 + 1),
            elapsed.as_secs_f64() * 1e3
        );
    }
    let expected = (size * per_rank) as u64;
    if bad_total != 0 || total != expected {
        return Err(Error::Wrong(format!(
            "{bad_total} wrong lookups; {total} slots held, expected {expected}"
        )));
    }
    win.free()?;
    if rank == 0 {
        println!("dht: OK");
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dht: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
