//! How long one cache line takes to go from one CPU to another: the floor
//! under every shared-memory round trip, measured beside each run.
//!
//! On the project's test host (a VM with 2 vCPUs) this is not a constant:
//! two threads pinned to the two CPUs passed a line in about 46–65 ns for
//! minutes, then in about 250 ns for minutes (the hypervisor placing the
//! vCPUs on near or far cores, presumably), and shared-memory results
//! moved with it: `openmpi-sm` 0.10 µs against 0.39–0.48 µs for an 8-byte
//! half round trip, the project's Portals level 0.38 against 0.85. A ratio
//! between two runs means something only if both saw the same placement,
//! so the runner measures this right after each run of a tight-loop
//! benchmark ([`crate::params::Bench::settles`]) and records it with the
//! run's points (`c2c_ns`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::cpu::{current_affinity, set_affinity, single_cpu};

/// Round trips per batch.
const ROUNDS: u64 = 20_000;
/// Batches; the median is reported.
const BATCHES: usize = 3;
/// A batch that takes longer than this (the other thread is not running:
/// an oversubscribed or throttled host) gives up.
const GIVE_UP: Duration = Duration::from_millis(500);

/// A word alone on its cache line (and the adjacent-line prefetcher's).
#[repr(align(128))]
struct Line(AtomicU64);

/// Nanoseconds for one cache line to go from CPU `a` to CPU `b` or back
/// (half a round trip of a two-thread ping-pong, median of a few
/// batches), or `None` if either CPU cannot be used or the other thread
/// does not keep up (half a second per batch). The calling thread runs on `a` for
/// the measurement and gets its affinity back afterwards.
pub fn core_to_core_ns(a: usize, b: usize) -> Option<f64> {
    if a == b {
        return None;
    }
    let saved = current_affinity().ok()?;
    set_affinity(&single_cpu(a)).ok()?;
    let ping = Line(AtomicU64::new(0));
    let pong = Line(AtomicU64::new(0));
    let total = ROUNDS * BATCHES as u64;
    let result = std::thread::scope(|s| {
        let answer = s.spawn(|| {
            if set_affinity(&single_cpu(b)).is_err() {
                pong.0.store(u64::MAX, Ordering::Release);
                return;
            }
            let t0 = Instant::now();
            for i in 1..=total {
                // Bounded: the pinger gives up (and says so with
                // u64::MAX) rather than leave this spinning.
                loop {
                    let v = ping.0.load(Ordering::Acquire);
                    if v == i {
                        break;
                    }
                    if v == u64::MAX || t0.elapsed() > GIVE_UP * BATCHES as u32 * 2 {
                        return;
                    }
                    std::hint::spin_loop();
                }
                pong.0.store(i, Ordering::Release);
            }
        });
        let mut batches = Vec::with_capacity(BATCHES);
        let mut i = 0u64;
        'outer: for _ in 0..BATCHES {
            let t0 = Instant::now();
            for _ in 0..ROUNDS {
                i += 1;
                ping.0.store(i, Ordering::Release);
                loop {
                    let v = pong.0.load(Ordering::Acquire);
                    if v == i {
                        break;
                    }
                    if v == u64::MAX || t0.elapsed() > GIVE_UP {
                        ping.0.store(u64::MAX, Ordering::Release);
                        break 'outer;
                    }
                    std::hint::spin_loop();
                }
            }
            batches.push(t0.elapsed().as_nanos() as f64 / (2 * ROUNDS) as f64);
        }
        let _ = answer.join();
        (batches.len() == BATCHES).then(|| crate::stats::median(&mut batches))
    });
    let _ = set_affinity(&saved);
    result
}

/// [`core_to_core_ns`] between the first two CPUs this process may use,
/// the ones a bound two-rank job runs on (and the host's two, here).
pub fn first_two_cpus_ns() -> Option<f64> {
    let cpus = crate::cpu::allowed_cpus().ok()?;
    match cpus.as_slice() {
        [a, b, ..] => core_to_core_ns(*a, *b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_between_two_cpus_takes_a_plausible_time_and_one_cpu_has_no_answer() {
        assert_eq!(core_to_core_ns(0, 0), None);
        let cpus = crate::cpu::allowed_cpus().expect("affinity");
        if cpus.len() < 2 {
            return;
        }
        let before = current_affinity().expect("affinity");
        // Two threads on two CPUs beside other tests: it may give up (None)
        // when the other CPU is busy; a number must be a plausible one.
        if let Some(ns) = core_to_core_ns(cpus[0], cpus[1]) {
            assert!(ns > 1.0 && ns < 100_000.0, "{ns} ns");
        }
        let after = current_affinity().expect("affinity");
        // SAFETY: plain comparisons of two initialised cpu_set_t values.
        assert!(
            unsafe { libc::CPU_EQUAL(&before, &after) },
            "affinity restored"
        );
    }
}
