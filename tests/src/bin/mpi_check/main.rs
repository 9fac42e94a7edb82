//! MPI point-to-point checks for multi-process tests:
//! `ptlrun -n N mpi_check <scenario> [args]`. Prints `OK <scenario>` per
//! rank and exits 0 when every check passes.

use std::time::{Duration, Instant};

use mpi_on_portals::request::{scope, test_all, wait_all, wait_any};
use mpi_on_portals::traits::*;
use mpi_on_portals::{
    MpiConfig, MpiError, Process, Rank, SimpleCommunicator, Status, SystemOperation, Threading,
    Universe, ANY_TAG,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod announce;
mod copies;
mod envelopes;
mod failure;
mod nbc;
mod nbc_flat;
mod progress;
mod semantics;
mod unexpected;

use announce::*;
use copies::*;
use envelopes::*;
use failure::*;
use nbc::*;
use nbc_flat::*;
use progress::*;
use semantics::*;
use unexpected::*;

type R<T> = std::result::Result<T, String>;

fn e(x: MpiError) -> String {
    x.to_string()
}

/// Pseudo-random bytes from `seed`: all eight bytes of each xorshift64
/// state, not only the low one. Stepping once per byte, the patterns of the
/// order and flood scenarios (hundreds of MB) were most of their jobs' time
/// in unoptimised test builds; this is about seven times cheaper.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = vec![0u8; len];
    for c in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    v
}

/// Rank `me` of the pair (0, 1) that the two-rank scenarios run between,
/// and the other rank; `None` on the other ranks, which take part in the
/// job only.
fn pair(w: &SimpleCommunicator) -> Option<(Rank, Process<'_>)> {
    let me = w.rank();
    (me <= 1).then(|| (me, w.process_at_rank(1 - me)))
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> R<()> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Standard,
    Synchronous,
    Ready,
    Buffered,
}

const CTRL: i32 = 1_000_000;

/// This process's `field` of `/proc/self/status` (`VmRSS`, `VmHWM`), KiB.
fn status_kib(field: &str) -> R<u64> {
    let s = std::fs::read_to_string("/proc/self/status").map_err(|x| x.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/self/status"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).cloned().unwrap_or_default();
    let init = match scenario.as_str() {
        "threads" => {
            mpi_on_portals::initialize_with_threading(Threading::Multiple).and_then(|(u, level)| {
                if level == Threading::Multiple {
                    Ok(u)
                } else {
                    Err(MpiError::Init(format!("provided {level:?}")))
                }
            })
        }
        "overflow" => mpi_on_portals::initialize_with_config(overflow_config()),
        "sendloop" => mpi_on_portals::initialize_with_config(overflow_config()),
        "eqflood" => MpiConfig::from_env()
            .and_then(|c| mpi_on_portals::initialize_with_config(eqflood_config(c))),
        "capflood" | "capbarrier" | "caphol" | "caphol_any" | "capiprobe" => MpiConfig::from_env()
            .and_then(|c| mpi_on_portals::initialize_with_config(cap_config(c))),
        "announce" => MpiConfig::from_env().and_then(|c| {
            mpi_on_portals::initialize_with_config(MpiConfig {
                long_announce: RUN,
                ..c
            })
        }),
        _ => mpi_on_portals::initialize(),
    };
    let u = match init {
        Ok(u) => u,
        Err(x) => {
            eprintln!("initialize failed: {x}");
            std::process::exit(2);
        }
    };
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let r = match scenario.as_str() {
        "modes" => modes(&u),
        "announce" => announce(&u),
        "order" => order(&u, arg(2, 2000) as usize, arg(3, 1)),
        "flood" => flood(&u, arg(2, 10) as usize),
        "misc" => misc(&u),
        "reuse" => reuse(&u),
        "sendloop" => sendloop(&u),
        "copies" => copies(&u),
        "progress" => progress(&u, args.get(2).map(String::as_str) != Some("poll")),
        "quiet" => quiet(&u),
        "quietpeek" => quietpeek(&u),
        "ring" => ring(&u),
        "spin" => spin(&u),
        "requests" => requests(&u),
        "threads" => threads(&u),
        "death" => death(&u, args.get(2).map_or("", String::as_str)),
        "overflow" => overflow(&u),
        "manyto1" => manyto1(
            &u,
            arg(2, 2000) as usize,
            arg(3, 60_000) as usize,
            arg(4, 64),
        ),
        "sleepflood" => sleepflood(&u),
        "heldflood" => heldflood(&u),
        // Far more envelopes than the (small) event queues hold.
        "eqflood" => manyto1(&u, arg(2, 1000) as usize, 16_000, 64),
        "capflood" => capflood(&u, arg(2, 2000) as usize),
        "capbarrier" => capbarrier(&u, arg(2, 2000) as usize),
        "caphol" => caphol(&u, First::Recv),
        "caphol_any" => caphol(&u, First::AnySource),
        "capiprobe" => caphol(&u, First::Iprobe),
        "finalize" => finalize(&u),
        "lastlong" => lastlong(&u, args.get(2).map_or("", String::as_str)),
        "nbc" => nbc(&u, arg(2, 50) as usize),
        "nbcsleep" => nbcsleep(&u, Duration::from_millis(arg(2, 0))),
        "nbcflat" => nbcflat(&u, arg(2, 3) as usize),
        "nbcflatsleep" => nbcflatsleep(&u),
        "soak" => soak(&u, arg(2, 1800), arg(3, 1)),
        other => Err(format!("unknown scenario {other:?}")),
    };
    portals_tests::finish(&scenario, u.world().rank(), r);
}
