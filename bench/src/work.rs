//! Calibrated busy work that makes no library call, as in `bench/c/common.c`:
//! a loop of volatile increments, calibrated once to loop iterations per
//! microsecond. The overlap and COMB benchmarks compute with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The loop's memory cell. Relaxed load + store (not a read-modify-write)
/// is what the C program's `volatile unsigned long` increment compiles to.
static SINK: AtomicU64 = AtomicU64::new(0);

fn spin(n: u64) {
    for _ in 0..n {
        SINK.store(
            SINK.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }
}

/// A calibrated busy loop.
#[derive(Debug, Clone, Copy)]
pub struct Work {
    loops_per_us: f64,
}

impl Work {
    /// Calibrate: grow the loop until one run takes at least 20 ms, then keep
    /// the fastest of 5 runs (interference only ever slows a run down).
    pub fn calibrate() -> Work {
        let mut n: u64 = 1 << 16;
        loop {
            let t = Instant::now();
            spin(n);
            if t.elapsed().as_secs_f64() >= 0.02 || n >= 1 << 40 {
                break;
            }
            n *= 2;
        }
        let mut best: f64 = 0.0;
        for _ in 0..5 {
            let t = Instant::now();
            spin(n);
            let dt = t.elapsed().as_secs_f64().max(1e-9);
            best = best.max(n as f64 / (dt * 1e6));
        }
        Work {
            loops_per_us: best.max(1.0),
        }
    }

    /// Loop iterations per microsecond.
    pub fn loops_per_us(&self) -> f64 {
        self.loops_per_us
    }

    /// Spin for `us` microseconds' worth of loop iterations.
    pub fn run_us(&self, us: f64) {
        if us > 0.0 {
            spin((us * self.loops_per_us) as u64);
        }
    }

    /// Spin until `us` microseconds of wall-clock time have passed, reading
    /// the clock every ~5 µs of loop: a compute phase of a known length
    /// even when calibration ran on a loaded host (where [`Work::run_us`]
    /// can be several times too short or too long). Reading the clock is
    /// no library call (the vDSO).
    pub fn run_for_us(&self, us: f64) {
        let t = Instant::now();
        let chunk = (5.0 * self.loops_per_us).max(1.0) as u64;
        while t.elapsed().as_secs_f64() * 1e6 < us {
            spin(chunk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_work_takes_about_the_asked_time() {
        let w = Work::calibrate();
        assert!(w.loops_per_us() > 1.0);
        // Interference can only make it slower; never much faster.
        let t = Instant::now();
        w.run_us(20_000.0);
        let took = t.elapsed().as_secs_f64() * 1e6;
        assert!(took > 15_000.0, "20 ms of work took {took} us");
    }

    #[test]
    fn timed_work_lasts_at_least_the_asked_time() {
        let w = Work::calibrate();
        let t = Instant::now();
        w.run_for_us(3_000.0);
        assert!(t.elapsed().as_secs_f64() >= 0.003);
    }
}
