//! The progress thread's loop: when it stands aside for application
//! threads that wait in the library, and when it takes the sockets back.
//!
//! A plain hand-back sleeps out the whole delay after the last wait, on the
//! gate. A receive posted just before a compute step shorter than the delay
//! (200 µs: 256–512 KB at loopback speed, twice the transfer time) then
//! moved only as far as the kernel's buffers took it, and the rest waited
//! for the next wait: 48 % and 61 % overlap at 256 and 512 KB (issue 22).
//! With [`TcpConfig::early_takeover`](crate::TcpConfig::early_takeover),
//! once no thread has waited for [`WATCH_AFTER`] the progress thread sleeps
//! in its own poller for the rest of the delay, so the first segment that
//! arrives while the application computes wakes it, and it carries the
//! transfer from there. The end of a wait it found under way (outside a
//! tight communication loop, which backs off as before) wakes it to start
//! that watch; a loop with a compute step of at least [`WATCH_AFTER`]
//! between its waits is not a tight one, however many waits it makes
//! between two looks (`ProgressGate::waking_after_compute`). A ping-pong
//! never pays for it: its messages arrive while a thread waits, when the
//! progress thread stays parked. The same rule serves `nal-shm`, where it
//! was measured first. Independently, a large non-blocking transfer posted
//! outside any wait ends the delay early for this thread and UDP's
//! (`portals::Nal::bulk_post_begin`, `nal_sys::gate::ProgressGate::post_end`).
//! And while the layer above says that the application has nothing under
//! way (`portals::NiCore::set_app_quiet`) and no queue of ours waits for a
//! pass (`Tx::blocked`), the delay is `nal_sys::gate::QUIET_HANDBACKS`
//! times longer and the sockets are not watched: there is nothing to
//! carry, and a take-over would only preempt the application or its
//! neighbour to read the next messages before the application does.

use super::*;

/// How long the application must have been away from the library (no
/// thread waiting in it) before the progress thread watches the sockets
/// during the hand-back delay: longer than the gap between two waits of a
/// communication loop, shorter than a compute step worth overlapping.
pub(super) const WATCH_AFTER: Duration = Duration::from_micros(20);

impl Inner {
    pub(super) fn progress_thread(self: Arc<Self>) {
        // Preempt a computing application promptly when woken, and stay
        // eligible to after a copy (see `nal_sys::sched`).
        nal_sys::sched::progress_thread_sched(self.cfg.progress_nice, &self.cfg.progress_cpus);
        let Some(pt) = &self.pt else { return };
        while !self.gate.is_stopped() {
            bump(&self.stats.progress_wakeups, 1);
            let mut sleep = Some(PT_SLEEP);
            // A quiet application is left alone longer, unless something of
            // ours waits to be written.
            let mut quiet = self.core.app_quiet() && !self.tx_waiting();
            self.gate.set_quiet(quiet);
            // Again after the flag (see `ProgressGate::unquiet`): a write
            // that blocked meanwhile either cleared it or is seen here.
            if quiet && self.tx_waiting() {
                quiet = false;
                self.gate.set_quiet(false);
            }
            if quiet {
                bump(&self.stats.quiet_looks, 1);
            }
            if self.gate.stand_aside() {
                let gone = Duration::from_nanos(self.gate.since_leave());
                // Nothing to watch for while the application is quiet: an
                // arrival would only be read before its next wait.
                if !self.cfg.early_takeover || self.gate.app_waiting() || self.gate.is_quiet() {
                    self.gate.park();
                    continue;
                }
                if gone < WATCH_AFTER {
                    // Between two waits of a loop, most likely: back in a
                    // moment. Look again when it has been gone long enough
                    // to be computing.
                    self.gate.park_for(WATCH_AFTER - gone);
                    continue;
                }
                // Computing: watch the sockets for the rest of the delay.
                bump(&self.stats.watches, 1);
                sleep = Some(self.gate.aside_for());
            }
            if let Err(e) = self.progress_once(pt, sleep) {
                tracing::error!(error = %e, "progress thread poll failed");
                std::thread::sleep(PT_SLEEP);
            }
        }
    }
}
