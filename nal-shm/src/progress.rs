//! Progress: a pass over the rings, sleeping on the doorbell when a pass
//! finds nothing, and the progress thread, which dozes through the
//! hand-back delay while its application computes (see `doorbell` for the
//! wake-up protocol these rely on).

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::doorbell::{self, Woke};
use crate::nal::{bump, lock, Inner};
use crate::ShmConfig;

/// Longest sleep of the progress thread; liveness checks run at least this
/// often while it drives progress.
const PT_SLEEP: Duration = Duration::from_millis(50);

/// An application gone from the library for less than this is between
/// two waits of a communication loop, not computing.
const LOOP_GAP: Duration = Duration::from_micros(20);

/// Waits begun between two looks of a dozing progress thread that make the
/// application a communication loop, whose dozes back off (see
/// `Inner::progress_thread`). One is an application that waits once per
/// compute step, and its next look should come at the hand-back's end.
const LOOP_WAITS: u64 = 2;

/// Whether a transport so configured has a progress thread that dozes
/// through the hand-back delay (see `Inner::doze`).
pub(crate) fn dozes(cfg: &ShmConfig) -> bool {
    cfg.early_takeover && cfg.progress == nal_sys::ProgressMode::Thread
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A pass looks at the clock for housekeeping once in this many.
const HOUSEKEEPING_EVERY: u32 = 16;

impl Inner {
    /// One non-blocking pass over every peer; true if anything moved.
    pub(crate) fn pass(&self) -> bool {
        // Triggered operations released by another thread's engine call.
        if self.core.triggered_pending() {
            self.core.send_triggered();
        }
        // Timers of a millisecond and more: a look at the clock every
        // `HOUSEKEEPING_EVERY` passes is plenty for a spinning waiter, and
        // a thread that slept looks after waking (`progress_blocking`).
        // Racy on purpose: a count lost between threads only shifts a look.
        let n = self.passes.load(Ordering::Relaxed);
        self.passes.store(n.wrapping_add(1), Ordering::Relaxed);
        if n % HOUSEKEEPING_EVERY == 0 {
            self.housekeeping(self.now_ns());
        }
        let mut worked = false;
        for p in &self.peers {
            if p.failed.load(Ordering::Relaxed) {
                continue;
            }
            if p.has_queue.load(Ordering::Relaxed) {
                let mut tx = lock(&p.tx);
                worked |= self.flush(p, &mut tx) > 0;
            }
            worked |= self.service(p);
        }
        self.reap_failures();
        // Those this pass's deliveries released, now that no lock is held.
        if self.core.triggered_pending() {
            worked = true;
            self.core.send_triggered();
        }
        worked
    }

    /// A pass; if it found nothing, sleep on our doorbell up to `t` (less
    /// while housekeeping is due), then pass again.
    pub(crate) fn progress_blocking(&self, t: Duration, progress_thread: bool) {
        if self.pass() {
            return;
        }
        let h = self.inbox.header();
        h.sleepers.fetch_add(1, Ordering::SeqCst);
        // SeqCst: the announcement above before every check below (see
        // `doorbell`).
        fence(Ordering::SeqCst);
        let seen = h.doorbell.load(Ordering::SeqCst);
        if !self.wake_pending.swap(false, Ordering::SeqCst) && !self.work_pending() {
            let due = self.next_housekeeping.load(Ordering::Relaxed);
            let until = Duration::from_nanos(due.saturating_sub(self.now_ns()));
            let nap = t.min(until.max(Duration::from_micros(100)));
            bump(&self.stats.futex_waits, 1);
            let woke = doorbell::wait(&h.doorbell, seen, nap);
            if progress_thread && woke == Woke::Rung {
                bump(&self.stats.progress_thread_wakes, 1);
            }
        }
        h.sleepers.fetch_sub(1, Ordering::SeqCst);
        self.housekeeping(self.now_ns());
        self.pass();
    }

    /// Whether the progress thread dozes on the doorbell through the
    /// hand-back delay (`ShmConfig::early_takeover`, thread mode), so that
    /// waiters publish themselves in the inbox header.
    pub(crate) fn dozing(&self) -> bool {
        dozes(&self.cfg)
    }

    /// The end of an application thread's wait: the last one out clears
    /// `app_inside`, then wakes the dozing progress thread if a producer
    /// left work unrung for it because a waiter was inside (see
    /// `doorbell`) and the rings still hold some (the waiter may have
    /// taken it). Work in the rings alone is not enough: the leaving
    /// thread is most often between two waits of a loop and takes it
    /// itself (handing every such leave over cost a context switch per
    /// message in a ping-pong). While triggered operations are armed, any
    /// message is work (`dozer_armed`, see `doorbell`), and so are
    /// triggered operations issued and not sent yet.
    pub(crate) fn app_left(&self) {
        let h = self.inbox.header();
        // SeqCst: the clearing before the look, against the producer's
        // flag-then-load.
        if h.app_inside.fetch_sub(1, Ordering::SeqCst) == 1
            && ((h.work_unrung.swap(0, Ordering::SeqCst) != 0 && self.work_pending())
                || self.core.triggered_pending())
            && doorbell::wake_dozers(&self.inbox)
        {
            bump(&self.stats.futex_wakes_sent, 1);
        }
    }

    /// Set the inbox's `dozer_armed` to whether triggered operations are
    /// armed, and return that. Under the engine lock, where operations are
    /// armed and fire: set and cleared by two threads (a post's end, the
    /// dozer), the flag always ends as the engine last was, never cleared
    /// after a post armed more.
    pub(crate) fn mark_armed(&self) -> bool {
        let flag = &self.inbox.header().dozer_armed;
        self.core.with_engine(|e| {
            let armed = e.triggered_pending() > 0;
            flag.store(u32::from(armed), Ordering::SeqCst);
            armed
        })
    }

    /// Whether a pass would find work, looked at without locks: records in
    /// a ring, a single-copy read under way, a failure to carry out, or a
    /// queue whose ring had space freed since it filled up.
    pub(crate) fn work_pending(&self) -> bool {
        if self.has_failing.load(Ordering::SeqCst)
            || self.cma_active.load(Ordering::SeqCst) > 0
            || self.core.triggered_pending()
        {
            return true;
        }
        self.peers.iter().any(|p| {
            if p.failed.load(Ordering::Relaxed) {
                return false;
            }
            if self.inbox.ring(p.ring_in).pending() && !p.is_held(&self.core) {
                return true;
            }
            p.has_queue.load(Ordering::SeqCst)
                && p.outbox.get().is_some_and(|s| {
                    lock(&p.tx).ring.as_ref().is_some_and(|(_, i)| {
                        s.ctl(*i).producer_waiting.load(Ordering::SeqCst) == 0
                    })
                })
        })
    }

    pub(crate) fn progress_thread(self: Arc<Self>) {
        // Preempt a computing application promptly when woken, and stay
        // eligible to after a copy (see `nal_sys::sched`).
        nal_sys::sched::progress_thread_sched(self.cfg.progress_nice, &self.cfg.progress_cpus);
        let nap = PT_SLEEP.min(self.cfg.liveness_interval);
        // The longest doze beside a waiter or a loop. On a crowded host
        // (more ranks than cores) the crowded nap, as the socket
        // transports' gate naps inside a wait there: there is no spare core
        // to overlap on, and each timed look took a turn some rank needed
        // (8 ranks of cg on 2 cores: each progress thread switched in once
        // per 4–6 ms, thread mode 1.1–1.2× polling mode;
        // docs/PERFORMANCE.md, stop 51). Work still wakes it at once.
        let longest = if self.cfg.crowded {
            nal_sys::gate::CROWDED_NAP.min(nap)
        } else {
            self.cfg.handback.saturating_mul(nal_sys::gate::MAX_BACKOFF)
        };
        // Waits begun when the dozer last looked, and its back-off.
        let mut seen_waits = self.gate.waits_begun();
        let mut backoff = self.cfg.handback;
        while !self.gate.is_stopped() {
            if self.gate.stand_aside() {
                if self.cfg.early_takeover {
                    // Only work a small message does not bring wakes a
                    // dozer, and none while the application waits (see
                    // `doorbell`): dozing through a loop of small messages
                    // or a long wait costs nothing but timed looks, and a
                    // single-copy read that arrives once the application
                    // went off to compute starts at once. Beside a
                    // waiter, or between two waits of a loop, look only as
                    // seldom as the gate's longest back-off: each timed
                    // look is a context switch on a bound rank's shared
                    // core (a ping-pong is between waits a third of the
                    // time), and the waiter drives the rings meanwhile.
                    // Likewise while the application makes only short
                    // steps (cg: 30–60 µs of compute between waits): it
                    // cannot be taken over before its next wait, and a
                    // look that lands in a compute step preempted it for
                    // nothing (thread mode 1.09–1.15× polling mode's cg
                    // time). Work still wakes a dozer at once.
                    //
                    // And a look that finds the application computing
                    // after it began several waits since the last look is
                    // a loop whose steps fit in the hand-back delay (cg on
                    // 2 ranks: waits every 30–150 µs): dozing only for the
                    // rest of the delay woke the progress thread every
                    // 100–200 µs, each time on the application's core,
                    // about 1 100 timed wake-ups in 7 cg and 7 halo solves
                    // (cg in thread mode 1.05–1.07× polling mode's time).
                    // Such looks back off, doubling up to the longest nap,
                    // as the socket transports' gate does; one that finds
                    // at most one wait since the last goes back to the
                    // rest of the delay. The price: an application that
                    // leaves such a loop to compute may see its progress
                    // thread take over small messages up to the longest
                    // nap after the loop instead of one delay (work, a
                    // single-copy read, still wakes it at once).
                    let waits = self.gate.waits_begun();
                    let looping = waits.wrapping_sub(seen_waits) >= LOOP_WAITS;
                    seen_waits = waits;
                    let t = if self.gate.app_waiting()
                        || self.gate.since_leave() < duration_ns(LOOP_GAP)
                        || self.gate.recent_steps_short()
                    {
                        longest
                    } else if looping {
                        backoff = backoff.saturating_mul(2).min(longest);
                        backoff
                    } else {
                        backoff = self.cfg.handback;
                        self.gate.aside_for()
                    };
                    self.doze(t.min(nap));
                } else {
                    self.gate.park();
                }
                continue;
            }
            self.progress_blocking(nap, true);
        }
    }

    /// The rest of the hand-back delay, with no application thread waiting
    /// in the library: sleep on the doorbell rather than the gate, as a
    /// *dozer*, and move what needs moving at once.
    ///
    /// Over sockets the kernel moves data while nobody looks; here nothing
    /// moves unless a thread of ours copies it, so sleeping out the
    /// hand-back left a transfer posted before a compute step of less than
    /// the hand-back delay (200 µs) untouched until the next wait: no
    /// overlap at all for 256 KB (`ptl-bench overlap`). A dozer is woken
    /// only by work (a single-copy read, a pipelined payload, a request to
    /// answer: `doorbell::Urgency`), never by a small message: an earlier
    /// doze that every arrival woke put the wake-up system call on a
    /// ping-pong's critical path (8 B latency 0.5 → 1.0 µs) and, on a rank
    /// bound to one core, preempted the computation for messages the next
    /// call takes anyway. Small messages found here are taken, since the
    /// thread is awake.
    fn doze(&self, t: Duration) {
        let h = self.inbox.header();
        // A dozer, not a sleeper: small messages do not wake it (see
        // `doorbell`); they wait for the application or the delay's end.
        // Except while triggered operations are armed (non-blocking
        // collectives; `dozer_armed`): any small message may be the one
        // that fires the next step, which nobody else would send while the
        // application computes. Beside a waiter nothing wakes it (the
        // waiter drives the chain), and the last waiter's leave wakes it
        // for what producers left unrung meanwhile (see `app_left`).
        self.mark_armed();
        h.dozers.fetch_add(1, Ordering::SeqCst);
        // SeqCst: the announcement before the check (see `doorbell`).
        fence(Ordering::SeqCst);
        let seen = h.doze_bell.load(Ordering::SeqCst);
        // Work in the rings keeps a dozer awake only while nobody else
        // takes it: a waiter inside drives the rings itself (and the last
        // one out hands what is left to us; see `app_left`). Re-checking
        // it beside a waiter made this a busy loop on the waiter's core.
        let busy = !self.gate.app_waiting()
            && (self.wake_pending.load(Ordering::SeqCst) || self.work_pending());
        if !busy && !t.is_zero() {
            bump(&self.stats.futex_waits, 1);
            bump(&self.stats.progress_dozes, 1);
            if doorbell::wait(&h.doze_bell, seen, t) == Woke::Rung {
                bump(&self.stats.progress_thread_wakes, 1);
            }
        }
        h.dozers.fetch_sub(1, Ordering::SeqCst);
        if !self.gate.app_waiting() {
            // Whatever a producer left unrung, this pass takes.
            h.work_unrung.store(0, Ordering::SeqCst);
        }
        if !self.gate.app_waiting()
            && !self.gate.is_stopped()
            && (self.wake_pending.swap(false, Ordering::SeqCst) || self.work_pending())
        {
            self.pass();
        }
    }
}
