//! MPI programs that fail on purpose, for the tests of how a job ends when
//! one rank fails (`tests/tests/launcher_faults.rs`). `fault_check
//! <scenario>`, on 4 ranks:
//!
//! * `blame-exit`, `blame-signal`: rank 2 cuts its connections (the others
//!   see it fail at once), waits 300 ms, then exits with status 3 or is
//!   killed by SIGKILL; every other rank waits for a message from rank 2
//!   and returns the resulting `PeerFailed` error from `main`, so the
//!   survivors exit before the rank that caused their failure;
//! * `abort`: rank 1 calls `abort(3)`;
//! * `panic`: rank 1 panics;
//! * `error`: rank 1 returns an error from `main` (a send to a rank that
//!   does not exist);
//!
//! while, in these three, rank 0 waits in a receive from rank 1 (in
//! `error`, like the others, in a probe for any message: a receive naming
//! rank 1 would fail once it finalized) and the others in a probe for any
//! message, none of which ever comes;
//!
//! * `stranded`: rank 0 returns an error from `main` at once; rank 1
//!   probes for a message from any source, rank 2 waits in a receive from
//!   rank 0, rank 3 finishes: the waits of ranks 1 and 2 must fail with
//!   `PeerFinalized` once the ranks they wait for have left;
//! * `late <seconds>`: no failure: rank 1 reaches finalize that much later
//!   than the others, which wait for it in the closing barrier.

use std::time::Duration;

use mpi_on_portals::traits::*;
use mpi_on_portals::MpiError;

/// Shut down every socket of this process, so that its peers see it fail
/// while it still runs.
fn cut_connections() {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for fd in fds.flatten() {
        let Some(fd) = fd.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: fstat writes into the zeroed stat we own; shutdown only
        // changes the state of a socket (the descriptor stays open and
        // owned by whoever owns it); on a descriptor that is not a socket
        // or is closed meanwhile both just fail.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}

fn main() -> Result<(), MpiError> {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    let pause = || std::thread::sleep(Duration::from_millis(300));
    if scenario.starts_with("blame") {
        // Talk to every peer first: then every pair has its connection,
        // and every rank sees rank 2 cut its own.
        let me = world.rank();
        for r in (0..world.size()).filter(|&r| r != me) {
            world.process_at_rank(r).send(&(me as u64))?;
        }
        for r in (0..world.size()).filter(|&r| r != me) {
            world.process_at_rank(r).receive::<u64>()?;
        }
    }
    match (scenario.as_str(), world.rank()) {
        ("blame-exit" | "blame-signal", 2) => {
            cut_connections();
            pause();
            if scenario == "blame-signal" {
                // SAFETY: raise has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            std::process::exit(3)
        }
        ("blame-exit" | "blame-signal", _) => {
            world.process_at_rank(2).receive::<u64>()?;
        }
        ("abort", 1) => {
            pause();
            world.abort(3)
        }
        ("panic", 1) => {
            pause();
            panic!("rank 1 panics on purpose");
        }
        ("error", 1) => {
            pause();
            world.process_at_rank(world.size() + 5).send(&1u64)?;
        }
        ("abort" | "panic", 0) => {
            world.process_at_rank(1).receive::<u64>()?;
        }
        ("abort" | "panic" | "error", _) => {
            world.any_process().probe()?;
        }
        ("stranded", 0) => {
            return Err(MpiError::Init("rank 0 gives up on purpose".into()));
        }
        ("stranded", 1) => {
            world.any_process().probe()?;
        }
        ("stranded", 2) => {
            world.process_at_rank(0).receive::<u64>()?;
        }
        ("stranded", _) => {}
        ("late", 1) => {
            let secs = std::env::args()
                .nth(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            std::thread::sleep(Duration::from_secs(secs));
        }
        ("late", _) => {}
        (other, _) => {
            return Err(MpiError::Init(format!("unknown scenario {other:?}")));
        }
    }
    Ok(())
}
