//! Who drives a transport right now: the progress thread, or application
//! threads waiting inside the library.
//!
//! A thread that waits in the library polls the sockets itself (no
//! sleep→wake hand-off on the critical path of a round trip); while it does,
//! and for a short *hand-back* delay after the last one leaves, the progress
//! thread stands aside, parked. An application that calls the library in a
//! tight loop therefore keeps the sockets; one that goes off to compute
//! hands them back within the delay. Both transports share this logic.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The hand-over between application waiters and a progress thread, plus
/// the progress thread's stop flag.
#[derive(Debug)]
pub struct ProgressGate {
    handback: Duration,
    waiters: AtomicUsize,
    /// Nanoseconds since `epoch` at which the last waiter left (0: never).
    last_leave: AtomicU64,
    epoch: Instant,
    shutdown: AtomicBool,
    park: Mutex<()>,
    parked: Condvar,
}

impl ProgressGate {
    /// A gate whose progress thread resumes `handback` after the last
    /// waiter left.
    pub fn new(handback: Duration) -> Self {
        ProgressGate {
            handback,
            waiters: AtomicUsize::new(0),
            last_leave: AtomicU64::new(0),
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            park: Mutex::new(()),
            parked: Condvar::new(),
        }
    }

    /// An application thread starts waiting in the library (calls nest).
    pub fn enter(&self) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
    }

    /// The matching end of [`enter`](Self::enter).
    pub fn leave(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        // 0 means "never": a leave in the very first nanosecond counts as 1.
        self.last_leave.store(now.max(1), Ordering::Relaxed);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether the progress thread should leave the sockets alone now.
    pub fn stand_aside(&self) -> bool {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let left = self.last_leave.load(Ordering::Relaxed);
        let now = self.epoch.elapsed().as_nanos() as u64;
        left != 0 && now.saturating_sub(left) < self.handback.as_nanos() as u64
    }

    /// Park the progress thread until the hand-back delay since the last
    /// waiter left has passed (a whole delay while a thread still waits; it
    /// then looks again), or until [`stop`](Self::stop). Parking for the
    /// rest of the delay rather than a whole one resumes progress exactly one
    /// delay after the application went off to compute, not up to two.
    pub fn park(&self) {
        let g = self.park.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_stopped() {
            return;
        }
        let _ = self
            .parked
            .wait_timeout(g, self.aside_for())
            .unwrap_or_else(|p| p.into_inner());
    }

    /// How much longer the progress thread stands aside if no thread enters
    /// meanwhile (a whole delay while one waits).
    fn aside_for(&self) -> Duration {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            return self.handback;
        }
        let left = self.last_leave.load(Ordering::Relaxed);
        if left == 0 {
            return Duration::ZERO;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let until = left.saturating_add(self.handback.as_nanos() as u64);
        Duration::from_nanos(until.saturating_sub(now))
    }

    /// Tell the progress thread to stop, and unpark it.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let _g = self.park.lock().unwrap_or_else(|p| p.into_inner());
        self.parked.notify_all();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_thread_stands_aside_while_waiters_wait_and_for_the_handback() {
        let g = ProgressGate::new(Duration::from_millis(50));
        assert!(!g.stand_aside(), "nobody ever waited");
        g.enter();
        g.enter();
        assert!(g.stand_aside());
        g.leave();
        assert!(g.stand_aside(), "one waiter is still inside");
        g.leave();
        assert!(g.stand_aside(), "within the hand-back delay");
        std::thread::sleep(Duration::from_millis(80));
        assert!(!g.stand_aside(), "handed back");
    }

    #[test]
    fn the_progress_thread_parks_only_for_the_rest_of_the_handback() {
        let g = ProgressGate::new(Duration::from_secs(1));
        assert_eq!(g.aside_for(), Duration::ZERO, "nobody ever waited");
        g.enter();
        assert_eq!(g.aside_for(), Duration::from_secs(1), "a waiter is inside");
        g.leave();
        std::thread::sleep(Duration::from_millis(600));
        let rest = g.aside_for();
        assert!(rest <= Duration::from_millis(400), "{rest:?}");
        let t0 = Instant::now();
        g.park();
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "parked a whole delay"
        );
    }

    #[test]
    fn stop_unparks_at_once() {
        let g = std::sync::Arc::new(ProgressGate::new(Duration::from_secs(60)));
        let g2 = g.clone();
        let t = std::thread::spawn(move || {
            let t0 = Instant::now();
            while !g2.is_stopped() {
                g2.park();
            }
            t0.elapsed()
        });
        std::thread::sleep(Duration::from_millis(20));
        g.stop();
        let took = t.join().unwrap();
        assert!(took < Duration::from_secs(30), "{took:?}");
        assert!(g.is_stopped());
    }
}
