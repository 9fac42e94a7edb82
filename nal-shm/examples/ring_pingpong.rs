//! The floor under the shared-memory transport's small-message latency:
//! a ping-pong of records with 96-byte bodies (an 88-byte Portals header
//! and 8 bytes of payload, as an 8-byte put; 104 bytes with the record's
//! own header) through two of this crate's rings, between two
//! threads pinned to two CPUs, with nothing else on the path: no engine, no
//! matching, no events. What the transport adds above this is software.
//!
//! `cargo run --release -p nal-shm --example ring_pingpong [CPU_A CPU_B]`
//! (default CPUs 0 and 1). Prints the median half round trip of 11
//! repetitions of 200 000 round trips each.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use nal_shm::ring::{Consumer, Kind, Producer, RingPtrs};

/// Body bytes of one record: an 88-byte Portals header and 8 bytes.
const BODY: usize = 96;
/// Bytes of each ring's data area (the transport's default).
const CAP: usize = 256 << 10;
const ROUND_TRIPS: usize = 200_000;
const REPS: usize = 11;

/// One ring's memory: its two counters on cache lines of their own, and
/// its data area, as in a segment.
struct RingMem {
    tail: CacheLine,
    head: CacheLine,
    data: Vec<u64>,
}

#[repr(align(64))]
struct CacheLine(AtomicU64);

impl RingMem {
    fn new() -> Arc<RingMem> {
        Arc::new(RingMem {
            tail: CacheLine(AtomicU64::new(0)),
            head: CacheLine(AtomicU64::new(0)),
            data: vec![0u64; CAP / 8],
        })
    }

    fn ptrs(&self) -> RingPtrs {
        RingPtrs {
            tail: &self.tail.0,
            head: &self.head.0,
            data: self.data.as_ptr() as *mut u8,
            cap: CAP as u64,
        }
    }
}

/// Pin the calling thread to `cpu`; a refusal is reported and the run
/// goes on unpinned.
fn pin(cpu: usize) {
    // SAFETY: `set` is a plain bit set the libc macros initialise; the
    // call reads `size_of_val(&set)` bytes of it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set)
    };
    if r != 0 {
        eprintln!(
            "ring_pingpong: CPU {cpu}: {}; unpinned",
            std::io::Error::last_os_error()
        );
    }
}

/// Push one record, waiting for room.
fn send(p: &mut Producer, seq: u64) {
    loop {
        match p.push(Kind::Msg, BODY, |b| {
            b[..8].copy_from_slice(&seq.to_le_bytes())
        }) {
            Ok(true) => return,
            Ok(false) => std::hint::spin_loop(),
            Err(e) => panic!("ring: {e}"),
        }
    }
}

/// Wait for one record, read its first word, release it.
fn recv(c: &mut Consumer) -> u64 {
    loop {
        match c.peek() {
            Ok(Some(rec)) => {
                let b = c.body(&rec);
                let v = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                c.consume(rec);
                return v;
            }
            Ok(None) => std::hint::spin_loop(),
            Err(e) => panic!("ring: {e}"),
        }
    }
}

fn main() {
    let cpus: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (cpu_a, cpu_b) = match cpus[..] {
        [a, b, ..] => (a, b),
        _ => (0, 1),
    };
    let (ab, ba) = (RingMem::new(), RingMem::new());
    // SAFETY: each ring has exactly one producer and one consumer, both
    // ends' memory is kept alive by the Arcs the threads hold, and the
    // counters start at 0 as `new` requires.
    let (mut a_tx, mut b_rx) = unsafe { (Producer::new(ab.ptrs()), Consumer::new(ab.ptrs())) };
    // SAFETY: as above, for the other ring.
    let (mut b_tx, mut a_rx) = unsafe { (Producer::new(ba.ptrs()), Consumer::new(ba.ptrs())) };
    let echo = {
        let (ab, ba) = (ab.clone(), ba.clone());
        std::thread::spawn(move || {
            pin(cpu_b);
            let _keep = (ab, ba);
            loop {
                let v = recv(&mut b_rx);
                if v == u64::MAX {
                    break;
                }
                send(&mut b_tx, v);
            }
        })
    };
    pin(cpu_a);
    let mut halves = Vec::with_capacity(REPS);
    let mut seq = 0u64;
    for rep in 0..=REPS {
        let t = Instant::now();
        for _ in 0..ROUND_TRIPS {
            send(&mut a_tx, seq);
            let back = recv(&mut a_rx);
            assert_eq!(back, seq, "echo out of order");
            seq += 1;
        }
        // The first repetition warms the caches and the CPUs up.
        if rep > 0 {
            halves.push(t.elapsed().as_secs_f64() / ROUND_TRIPS as f64 / 2.0);
        }
    }
    send(&mut a_tx, u64::MAX);
    echo.join().expect("echo thread");
    halves.sort_by(f64::total_cmp);
    let ns = |s: f64| s * 1e9;
    println!(
        "ring ping-pong, {BODY}-byte record bodies, CPUs {cpu_a} and {cpu_b}: half round trip median {:.1} ns (min {:.1}, max {:.1}, {REPS} repetitions of {ROUND_TRIPS})",
        ns(halves[REPS / 2]),
        ns(halves[0]),
        ns(halves[REPS - 1])
    );
}
