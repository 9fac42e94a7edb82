//! Who drives a transport right now: the progress thread, or application
//! threads waiting inside the library.
//!
//! A thread that waits in the library polls the sockets itself (no
//! sleep→wake hand-off on the critical path of a round trip); while it does,
//! and for a short *hand-back* delay after the last one leaves, the progress
//! thread stands aside, parked. An application that calls the library in a
//! tight loop therefore keeps the sockets; one that goes off to compute
//! hands them back within the delay. Both transports share this logic.
//!
//! A parked progress thread has to wake up to find out whether the
//! application went away: nothing else tells it. Those wake-ups are not
//! free. On a bound rank the progress thread shares the application's core,
//! so each one is a timer interrupt and two context switches taken out of
//! the application's time (measured here: with a wake-up every 200 µs, an
//! 8-byte ping-pong was about 1.3 µs per hop slower than with none, and a
//! sender streaming 1 MB puts lost about a fifth of its bandwidth). So the
//! progress thread backs off, doubling its nap up to [`MAX_BACKOFF`]
//! hand-back delays, while a look finds
//!
//! - a waiter inside after several waits began since it last looked (a
//!   communication loop);
//! - no waiter, but a great many waits since it last looked and the last
//!   one left moments ago (the same loop, looked at while it sends between
//!   two waits); or
//! - a waiter inside the same wait as last time: one long wait (a sender
//!   waiting for a window of large messages to drain). The leave that ends
//!   such a wait wakes the progress thread, so progress resumes one delay
//!   after it as usual; that costs the leaving thread a system call only
//!   here.
//!
//! - (plain gates) an application whose waits and gaps between waits all
//!   lasted less than half a delay for a whole back-off, looked at in a
//!   short wait or gap after at least two such waits: a loop of short
//!   steps, which cannot be taken over before its next wait anyway.
//!
//! It returns to single delays as soon as it finds the application away
//! long enough to take over, between waits otherwise, or inside after only
//! a few waits. The price of the first two rules: when an application
//! leaves a tight loop of short waits to compute right after a look found
//! it in that loop, progress may resume up to `MAX_BACKOFF` delays later
//! instead of one (a wake at every leave would cost a system call per wait
//! in that loop).
//!
//! An application that has nothing under way (the layer above says so:
//! [`ProgressGate::set_quiet`]) has no transfer for a progress thread to
//! move while it computes; taking over then only moves the reads of the
//! next messages from the application's next wait to a thread that
//! preempts it or its neighbour, and every look costs what it costs above.
//! So while it is quiet, the hand-back delay is [`QUIET_HANDBACKS`] times
//! longer: a latency-bound loop whose steps are longer than the plain
//! delay (a slow or crowded host) is neither looked at nor taken over
//! between its waits, while a long computation still gets its sockets
//! served within a bounded time.
//!
//! A look that finds an application thread inside a wait finds nothing to
//! do: the waiter drives the sockets itself. Until the wait ends, only the
//! time after it matters, so the nap is one delay, to resume progress one
//! delay after the leave, or the longer one where that resumption can
//! wait: while the application is quiet, and on a crowded host
//! ([`ProgressGate::crowded`]: more ranks than cores), where every look
//! takes its turn on a core from some rank. There, 8 ranks on 2 cores
//! waiting in their `halo` exchanges had their progress threads look
//! every 0.3–0.6 ms, most looks inside a wait, each a wake-up on a core
//! another rank needed, and thread mode ran 1.6–2.1× polling mode over
//! TCP and UDP; with the longer nap, 0.74–1.19× (docs/PERFORMANCE.md,
//! stop 49). The remaining looks, one per 3.2 ms inside waits, still cost
//! thread mode 5–22 % of `cg`'s, `halo`'s and the collective loop's time
//! on 4 and 8 ranks, so on a crowded host the nap inside a wait is at
//! least [`CROWDED_NAP`] (50 ms; stop 51).
//! The price there: a rank that leaves a wait with work under way that is
//! not a bulk post or a collective's start ([`ProgressGate::post_end`]
//! still wakes the thread) may see it moved up to [`CROWDED_NAP`] after
//! the leave instead of one delay, where polling mode moves it at the next
//! call.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long after a bulk post, with no wait or other post begun since,
/// the progress thread takes over (see [`ProgressGate::post_end`]): a
/// loop that posts a window of transfers and then waits for them (a
/// bandwidth loop, a halo exchange) is left to itself; an application
/// that went off to compute is not. Short, because the timer that ends
/// it sleeps up to the kernel's timer slack (50 µs) longer. Measured on
/// the overlap benchmark (64 KB–1 MB, compute 1× the transfer, three
/// rounds): 5 µs kept TCP at 94.5–99.8 % and UDP at 87–99.7 %; 20 µs let
/// UDP fall to 54–66 % in some rounds (docs/PERFORMANCE.md, stop 43).
/// Not 0: the progress thread looks again a grace after the last post
/// while its application posts the next, and would spin there.
pub const BULK_GRACE: Duration = Duration::from_micros(5);

/// The longest nap of a backed-off progress thread, in hand-back delays.
pub const MAX_BACKOFF: u32 = 16;

/// How many hand-back delays the progress thread stands aside for after the
/// last wait of a quiet application ([`ProgressGate::set_quiet`]): as long
/// as its longest back-off, so that a quiet application is looked at no
/// more often than a backed-off loop. Measured on the application kernels
/// (`ptl-bench apps`, docs/PERFORMANCE.md, stop 48): with the plain 200 µs
/// delay, on a host where a cg iteration took 290 µs instead of 110, thread
/// mode ran cg, halo and the collective loop 0.78–2.68× polling mode over
/// TCP and 1.06–1.75× over UDP; with 16 delays for every step, 0.58–1.26×.
pub const QUIET_HANDBACKS: u32 = MAX_BACKOFF;

/// The shortest nap of a progress thread that finds its application
/// waiting in the library on a crowded host ([`ProgressGate::crowded`]),
/// and the longest doze of shared memory's progress thread there
/// (`nal_shm::ShmConfig::crowded`): as long as the transports' longest
/// sleep while they drive progress, so that such a thread wakes no more
/// often than its housekeeping needs. With [`QUIET_HANDBACKS`] delays
/// instead (3.2 ms), 8 ranks of `cg` on 2 cores had each progress thread
/// switched in once per 3.7–5.8 ms, and thread mode ran `cg`, `halo` and
/// the collective loop on 4 and 8 ranks 0.93–1.32× polling mode; with
/// this nap, 0.90–1.07× (medians of 6 interleaved rounds,
/// docs/PERFORMANCE.md, stop 51).
pub const CROWDED_NAP: Duration = Duration::from_millis(50);

/// Waits begun between two looks of the progress thread that make the
/// application count as busy in the library. One or two are an application
/// that waits once per compute step; more are a communication loop.
const BUSY_WAITS: u64 = 4;

/// Waits begun between two looks that, with the last one left within an
/// eighth of the hand-back delay, make an application found *between*
/// waits count as busy: a ping-pong spends a fifth of its time sending
/// between waits, so a look lands there often, and resetting the back-off
/// each time kept the progress thread looking every few hundred
/// microseconds. A compute step with a barrier and a receive makes a
/// handful of waits, not this many, and is rarely looked at moments after
/// its last wait.
const LOOP_WAITS: u64 = 16;

/// Waits begun within half a hand-back delay of the previous one's end,
/// none later, between two looks, that make a plain gate's application
/// count as busy: a loop of short steps, which the progress thread could
/// not take over anyway (see [`ProgressGate::nap`]). Two, so that a single
/// wait after a compute step of unknown length does not count.
const SHORT_STEPS: u64 = 2;

/// The hand-over between application waiters and a progress thread, plus
/// the progress thread's stop flag.
#[derive(Debug)]
pub struct ProgressGate {
    handback: Duration,
    waiters: AtomicUsize,
    /// Waits begun so far.
    entered: AtomicU64,
    /// Nanoseconds since `epoch` at which the last waiter left (0: never).
    last_leave: AtomicU64,
    epoch: Instant,
    shutdown: AtomicBool,
    /// Progress-thread side: its next nap when it finds the application
    /// busy (ns), and `entered` when it last looked.
    nap_ns: AtomicU64,
    seen_entered: AtomicU64,
    /// The progress thread backed off because of one long wait: the leave
    /// that ends it must wake the progress thread.
    wake_on_leave: AtomicBool,
    /// Also wake on the leave of a short wait (see [`ProgressGate::with_wake_on_leave`]).
    eager_leave: bool,
    /// Gaps between waits at least this long (ns) are compute steps (see
    /// [`ProgressGate::waking_after_compute`]); 0: not counted.
    compute_gap_ns: u64,
    /// Waits that began after a compute step, and their count when the
    /// progress thread last looked.
    after_compute: AtomicU64,
    seen_after_compute: AtomicU64,
    /// Plain gates: waits since the progress thread's last look that began
    /// less than half a hand-back delay after the previous one ended; when
    /// (gate clock, ns; 0: never) a wait or a gap between waits last lasted
    /// longer than that; and when the last wait began (see
    /// [`ProgressGate::nap`]).
    short_gaps: AtomicU64,
    last_long_step: AtomicU64,
    last_enter: AtomicU64,
    /// When (gate clock, ns; 0: none) an application thread last posted a
    /// bulk transfer outside any wait (see
    /// [`ProgressGate::post_end`]); cleared by the next wait.
    bulk_at: AtomicU64,
    /// How long after a bulk post without a wait the progress thread
    /// takes over (ns).
    bulk_grace_ns: u64,
    /// Application threads inside a bulk post (see
    /// [`ProgressGate::post_begin`]).
    posting: AtomicUsize,
    /// The progress thread sleeps in [`park`](ProgressGate::park) or
    /// [`park_for`](ProgressGate::park_for) (set under the park lock
    /// before it sleeps; cleared when it wakes, where a poster that still
    /// sees it set only notifies in vain).
    sleeping: AtomicBool,
    /// The application has nothing under way (see
    /// [`set_quiet`](ProgressGate::set_quiet)).
    quiet: AtomicBool,
    /// This host runs more ranks than it has cores (see
    /// [`crowded`](ProgressGate::crowded)).
    crowded: bool,
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
            entered: AtomicU64::new(0),
            last_leave: AtomicU64::new(0),
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            nap_ns: AtomicU64::new(duration_ns(handback)),
            seen_entered: AtomicU64::new(0),
            wake_on_leave: AtomicBool::new(false),
            eager_leave: false,
            compute_gap_ns: 0,
            after_compute: AtomicU64::new(0),
            seen_after_compute: AtomicU64::new(0),
            short_gaps: AtomicU64::new(0),
            last_long_step: AtomicU64::new(0),
            last_enter: AtomicU64::new(0),
            bulk_at: AtomicU64::new(0),
            posting: AtomicUsize::new(0),
            bulk_grace_ns: duration_ns(BULK_GRACE),
            sleeping: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            crowded: false,
            park: Mutex::new(()),
            parked: Condvar::new(),
        }
    }

    /// A gate whose parked progress thread is also woken by the end of a
    /// wait that it found under way outside a communication loop (not
    /// only of one long wait): for a transport whose data move only when
    /// one of our threads copies them (shared memory), where sleeping out
    /// the hand-back delay after such a wait misses a whole compute step.
    /// Costs one notification per look of the progress thread, never one
    /// per wait of a loop (those back off as before).
    pub fn with_wake_on_leave(handback: Duration) -> Self {
        ProgressGate {
            eager_leave: true,
            ..ProgressGate::new(handback)
        }
    }

    /// This gate (an eager one: [`with_wake_on_leave`](Self::with_wake_on_leave))
    /// also tells a loop that computes between its waits from a tight
    /// communication loop: a wait that begins at least `gap` after the
    /// last one ended follows a compute step, and a look that finds the
    /// application inside a wait with such a wait since the previous look
    /// arms the wake at its leave instead of backing off. A loop of short
    /// iterations (a barrier, a receive, a compute step of 100 µs) makes
    /// as many waits between two looks as a ping-pong, and backing off
    /// there left whole compute steps without progress (issue 22: overlap
    /// at 256–512 KB over TCP). Costs a clock read per wait, and one
    /// notification per wait of such a loop.
    pub fn waking_after_compute(mut self, gap: Duration) -> Self {
        self.compute_gap_ns = duration_ns(gap).max(1);
        self
    }

    /// This gate's progress thread shares its cores with more ranks than
    /// there are cores (the runtime knows from the ranks' host identities
    /// and core counts): a look that finds an application thread inside a
    /// wait naps [`QUIET_HANDBACKS`] delays, as for a quiet application,
    /// and at least [`CROWDED_NAP`], instead of one (see the module
    /// documentation).
    pub fn crowded(mut self, crowded: bool) -> Self {
        self.crowded = crowded;
        self
    }

    /// An application thread starts waiting in the library (calls nest).
    pub fn enter(&self) {
        // A wait after a bulk post: the hand-back rule decides again.
        if self.bulk_at.load(Ordering::Relaxed) != 0 {
            self.bulk_at.store(0, Ordering::Relaxed);
        }
        if self.compute_gap_ns != 0 {
            let left = self.last_leave.load(Ordering::Relaxed);
            if left != 0 && self.now_ns().saturating_sub(left) >= self.compute_gap_ns {
                self.after_compute.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let left = self.last_leave.load(Ordering::Relaxed);
            let now = self.now_ns().max(1);
            self.last_enter.store(now, Ordering::Relaxed);
            if left != 0 {
                if now.saturating_sub(left) < duration_ns(self.handback) / 2 {
                    self.short_gaps.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.last_long_step.store(now, Ordering::Relaxed);
                }
            }
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.entered.fetch_add(1, Ordering::Relaxed);
    }

    /// The matching end of [`enter`](Self::enter). The last waiter out
    /// wakes a progress thread that backed off because of this one long
    /// wait (see the module documentation).
    pub fn leave(&self) {
        let now = self.now_ns();
        // 0 means "never": a leave in the very first nanosecond counts as 1.
        self.last_leave.store(now.max(1), Ordering::Relaxed);
        if self.compute_gap_ns == 0 {
            let entered = self.last_enter.load(Ordering::Relaxed);
            if now.saturating_sub(entered) >= duration_ns(self.handback) / 2 {
                self.last_long_step.store(now.max(1), Ordering::Relaxed);
            }
        }
        // SeqCst on both sides (here and in `nap`): either this load sees
        // the flag, or the progress thread sees no waiter and does not nap
        // long.
        if self.waiters.fetch_sub(1, Ordering::SeqCst) == 1
            && self.wake_on_leave.load(Ordering::SeqCst)
            && self.wake_on_leave.swap(false, Ordering::SeqCst)
        {
            // The progress thread holds this lock from arming the flag until
            // it sleeps, so the notification cannot come too early.
            let _g = self.park.lock().unwrap_or_else(|p| p.into_inner());
            self.parked.notify_all();
        }
    }

    /// Run `f` as a wait that ends when it returns: [`enter`](Self::enter),
    /// then [`leave`](Self::leave) however `f` ends. For the non-blocking
    /// pass an application thread makes in a test for completion, which
    /// keeps the progress thread parked for the hand-back delay after it,
    /// as a wait does.
    pub fn as_wait<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Leave<'a>(&'a ProgressGate);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.leave();
            }
        }
        self.enter();
        let _leave = Leave(self);
        f()
    }

    /// Whether the progress thread should leave the sockets alone now. Only
    /// the progress thread asks: a "no" means it takes over, which ends any
    /// back-off.
    pub fn stand_aside(&self) -> bool {
        if self.waiters.load(Ordering::SeqCst) > 0 || self.posting.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let left = self.last_leave.load(Ordering::Relaxed);
        let now = self.now_ns();
        let bulk = self.bulk_at.load(Ordering::SeqCst);
        let bulk_due = bulk != 0 && now.saturating_sub(bulk) >= self.bulk_grace_ns;
        if left != 0 && now.saturating_sub(left) < self.handback_now() && !bulk_due {
            return true;
        }
        self.nap_ns
            .store(duration_ns(self.handback), Ordering::Relaxed);
        false
    }

    /// Park the progress thread for the rest of the hand-back delay since
    /// the last waiter left (a whole delay while one waits), or, while the
    /// application is busy in the library, for a nap that doubles at each
    /// look up to [`MAX_BACKOFF`] delays (see the module documentation); or
    /// until [`stop`](Self::stop).
    pub fn park(&self) {
        let g = self.park.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_stopped() {
            return;
        }
        self.sleeping.store(true, Ordering::SeqCst);
        let t = self.nap().min(self.until_bulk_due());
        let _ = self
            .parked
            .wait_timeout(g, t)
            .unwrap_or_else(|p| p.into_inner());
        self.sleeping.store(false, Ordering::SeqCst);
        self.wake_on_leave.store(false, Ordering::SeqCst);
    }

    /// How long until a pending bulk post makes the progress thread take
    /// over (`Duration::MAX`: none pending). Read after `sleeping` is set,
    /// both SeqCst, as [`post_end`](Self::post_end) writes
    /// them in the other order: either the poster sees the thread asleep
    /// and notifies it (under the park lock, so not before it waits), or
    /// the thread sees the post and sleeps no longer than its grace.
    fn until_bulk_due(&self) -> Duration {
        match self.bulk_at.load(Ordering::SeqCst) {
            0 => Duration::MAX,
            // A post under way after an earlier one: nothing to take over
            // before it ends, and its end notifies nobody (a post is
            // pending), so look again a grace later rather than at once.
            _ if self.posting.load(Ordering::SeqCst) > 0 => {
                Duration::from_nanos(self.bulk_grace_ns)
            }
            at => Duration::from_nanos(
                at.saturating_add(self.bulk_grace_ns)
                    .saturating_sub(self.now_ns()),
            ),
        }
    }

    /// An application thread starts posting a transfer whose data move
    /// after its call returns (a large non-blocking send or receive).
    /// While it posts, the progress thread stands aside as for a wait (a
    /// post that writes a megabyte into a socket takes longer than
    /// [`BULK_GRACE`]); see [`post_end`](Self::post_end).
    pub fn post_begin(&self) {
        self.posting.fetch_add(1, Ordering::SeqCst);
    }

    /// The matching end of [`post_begin`](Self::post_begin). Outside any
    /// wait, the application is most likely off to compute, and the
    /// transfer would otherwise move only after the hand-back delay (200
    /// µs; a 256 KB message moves in 25–50 µs on a loopback), as far as the
    /// kernel's buffers take it. So unless a wait or another post begins
    /// within [`BULK_GRACE`], the progress thread takes over:
    /// [`stand_aside`](Self::stand_aside) says no from then until the next
    /// wait begins. A sleeping progress thread is woken for it (one
    /// system call, for the first post of a burst only). A wait that
    /// follows takes the transport back as any wait does, and the
    /// hand-back delay after it rules again.
    pub fn post_end(&self) {
        let waiting = self.waiters.load(Ordering::SeqCst) > 0;
        // A post already pending: the progress thread already sleeps no
        // longer than its grace, and looks again then.
        let pending = if waiting || self.is_stopped() {
            u64::MAX
        } else {
            self.bulk_at.swap(self.now_ns().max(1), Ordering::SeqCst)
        };
        self.posting.fetch_sub(1, Ordering::SeqCst);
        if pending == 0 && self.sleeping.load(Ordering::SeqCst) {
            let _g = self.park.lock().unwrap_or_else(|p| p.into_inner());
            self.parked.notify_all();
        }
    }

    /// Park for `t` at most (an entering waiter does not end it; a stop
    /// does). For a progress thread with a finer schedule of its own while
    /// the application is away (shared memory: see `nal-shm`).
    pub fn park_for(&self, t: Duration) {
        let g = self.park.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_stopped() {
            return;
        }
        self.sleeping.store(true, Ordering::SeqCst);
        let t = t.min(self.until_bulk_due());
        let _ = self
            .parked
            .wait_timeout(g, t)
            .unwrap_or_else(|p| p.into_inner());
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// How long the progress thread parks now, counting this as a look:
    /// the rest of the hand-back delay since the last waiter left (a whole
    /// delay while one waits), or, while the application is busy in the
    /// library, a nap that doubles at each look up to [`MAX_BACKOFF`]
    /// delays. Parking for the rest of the delay rather than a whole one
    /// resumes progress exactly one delay after the application went off to
    /// compute, not up to two. Called with the park lock held (or in tests,
    /// by the only thread).
    fn nap(&self) -> Duration {
        let entered = self.entered.load(Ordering::Relaxed);
        let seen = self.seen_entered.swap(entered, Ordering::Relaxed);
        let handback = duration_ns(self.handback);
        let began = entered.wrapping_sub(seen);
        // Busy means found *inside* a wait, after a run of them or in the
        // same one as last time; or found between two waits of a loop: a
        // great many waits since the last look, the last one left moments
        // ago. Any other look that finds the application gone is most
        // likely one that went off to compute between waits (the overlap
        // pattern: a few waits per step, then compute): backing off there
        // delayed its progress.
        let inside = self.waiters.load(Ordering::SeqCst) > 0;
        let computed = {
            let n = self.after_compute.load(Ordering::Relaxed);
            n != self.seen_after_compute.swap(n, Ordering::Relaxed)
        };
        // A plain gate's application whose waits and gaps between waits all
        // lasted less than half a delay, for as long as a whole back-off
        // (MAX_BACKOFF delays), and whose current wait or gap is no longer,
        // is a loop of short steps: it cannot be taken over before its next
        // wait (that needs a whole delay away). A cg solve (a few waits and
        // 30–60 µs of compute per 110 µs iteration on 2 ranks) made every
        // look find it so, and each look, a timer wake-up and two context
        // switches on its core, cost thread mode 11–17 % of cg's time
        // against polling mode. The memory of the last
        // long step keeps an application that computes or waits long every
        // few milliseconds (the overlap pattern: a barrier's short waits,
        // compute, a long wait for the transfer's rest) on single delays, as
        // before: backing off there made the progress thread sleep into the
        // next compute step (UDP, 4 MB, compute 1× the transfer: overlap 68
        // → 55 % without the waits counted).
        let short_steps = {
            let short = self.short_gaps.swap(0, Ordering::Relaxed);
            !self.eager_leave && short >= SHORT_STEPS && self.recent_steps_short()
        };
        let busy = short_steps
            || if inside {
                // A loop that computed since the last look is not a tight one.
                began == 0 || (began >= BUSY_WAITS && !computed)
            } else {
                began >= LOOP_WAITS && self.since_leave() < handback / 8
            };
        // An eager gate also has the leave of a short wait wake it.
        let short_wait = !busy && inside && self.eager_leave;
        if !busy && !short_wait {
            return self.single_delay();
        }
        if began == 0 || !busy {
            // One long wait (or, for an eager gate, a short one found under
            // way): its leave wakes us. Arm that, then make sure the wait
            // did not end before it was armed.
            self.wake_on_leave.store(true, Ordering::SeqCst);
            if self.waiters.load(Ordering::SeqCst) == 0 {
                self.wake_on_leave.store(false, Ordering::SeqCst);
                return self.single_delay();
            }
        }
        if !busy {
            // An eager gate, a short wait found under way: its leave wakes
            // us (armed above), no back-off.
            return self.single_delay();
        }
        // MAX_BACKOFF ≥ 1, so the cap is never below the hand-back.
        let cap = handback.saturating_mul(u64::from(MAX_BACKOFF));
        let nap = self
            .nap_ns
            .load(Ordering::Relaxed)
            .saturating_mul(2)
            .clamp(handback, cap);
        self.nap_ns.store(nap, Ordering::Relaxed);
        self.aside_for().max(Duration::from_nanos(nap))
    }

    /// The gate's clock: nanoseconds since it was made.
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Nanoseconds since the last waiter left (`u64::MAX`: none ever did).
    pub fn since_leave(&self) -> u64 {
        match self.last_leave.load(Ordering::Relaxed) {
            0 => u64::MAX,
            left => self.now_ns().saturating_sub(left),
        }
    }

    /// End any back-off: nap for the rest of the hand-back delay.
    fn single_delay(&self) -> Duration {
        self.nap_ns
            .store(duration_ns(self.handback), Ordering::Relaxed);
        self.aside_for()
    }

    /// Whether the application has made only short steps for a while: no
    /// wait and no gap between waits of half a hand-back delay or more
    /// within a whole back-off (`MAX_BACKOFF` delays), and the current one
    /// shorter too. Such an application cannot be taken over before its
    /// next wait (a take-over needs a whole delay away), so a timed look
    /// at it is wasted. Counted only by gates that do not tell compute
    /// steps apart ([`waking_after_compute`](Self::waking_after_compute));
    /// false for those, and before the first wait.
    pub fn recent_steps_short(&self) -> bool {
        let entered = self.last_enter.load(Ordering::Relaxed);
        if self.compute_gap_ns != 0 || entered == 0 {
            return false;
        }
        let handback = duration_ns(self.handback);
        let now = self.now_ns();
        let long_at = self.last_long_step.load(Ordering::Relaxed);
        let memory = handback.saturating_mul(u64::from(MAX_BACKOFF));
        let current = if self.waiters.load(Ordering::SeqCst) > 0 {
            now.saturating_sub(entered)
        } else {
            self.since_leave()
        };
        (long_at == 0 || now.saturating_sub(long_at) >= memory) && current < handback / 2
    }

    /// Waits begun so far (every [`enter`](Self::enter) counts): a
    /// progress thread with a schedule of its own tells from two looks
    /// whether the application kept waiting in between.
    pub fn waits_begun(&self) -> u64 {
        self.entered.load(Ordering::Relaxed)
    }

    /// Whether an application thread waits in the library right now.
    pub fn app_waiting(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
    }

    /// How much longer the progress thread stands aside if no thread enters
    /// meanwhile: counted from the last leave, in [`QUIET_HANDBACKS`]
    /// delays while the application is quiet, one delay otherwise; while a
    /// thread waits, a whole such delay, or on a
    /// [`crowded`](Self::crowded) host [`QUIET_HANDBACKS`] delays and at
    /// least [`CROWDED_NAP`].
    pub fn aside_for(&self) -> Duration {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            if self.crowded {
                return self
                    .handback
                    .saturating_mul(QUIET_HANDBACKS)
                    .max(CROWDED_NAP);
            }
            return Duration::from_nanos(self.handback_now());
        }
        let left = self.last_leave.load(Ordering::Relaxed);
        if left == 0 {
            return Duration::ZERO;
        }
        let now = self.now_ns();
        let until = left.saturating_add(self.handback_now());
        Duration::from_nanos(until.saturating_sub(now))
    }

    /// Whether the application has nothing under way that a progress
    /// thread could move while it computes: no transfer posted and not yet
    /// complete, nothing queued in the transport. Set by the progress
    /// thread before each look, from what the layers above and the
    /// transport say; while it holds, the hand-back delay after the last
    /// wait is [`QUIET_HANDBACKS`] times longer (see the module
    /// documentation). A hint: a stale value only moves the take-over
    /// between one delay and the longer one.
    pub fn set_quiet(&self, quiet: bool) {
        // Read first: the flag sits beside counters every wait writes, and a
        // store per look that changes nothing would only move the line.
        // SeqCst against `unquiet`.
        if self.quiet.load(Ordering::SeqCst) != quiet {
            self.quiet.store(quiet, Ordering::SeqCst);
        }
    }

    /// What [`set_quiet`](Self::set_quiet) said last.
    pub fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::SeqCst)
    }

    /// The transport has work of its own that a quiet application's longer
    /// hand-back must not delay (a queue that waits for a pass): end the
    /// longer delay now, and wake the progress thread if it sleeps in it.
    /// Costs a notification only when the application was quiet and the
    /// thread sleeps. The caller makes its work visible (`SeqCst`) before
    /// this, and the progress thread looks at that work again after
    /// setting the flag: either it sees the work, or this sees the flag.
    pub fn unquiet(&self) {
        if self.quiet.swap(false, Ordering::SeqCst) && self.sleeping.load(Ordering::SeqCst) {
            // Under the park lock: not before the thread waits.
            let _g = self.park.lock().unwrap_or_else(|p| p.into_inner());
            self.parked.notify_all();
        }
    }

    /// The hand-back delay that applies now (ns): [`QUIET_HANDBACKS`]
    /// delays while the application is quiet, one otherwise.
    fn handback_now(&self) -> u64 {
        let h = duration_ns(self.handback);
        if self.quiet.load(Ordering::Relaxed) {
            h.saturating_mul(u64::from(QUIET_HANDBACKS))
        } else {
            h
        }
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

/// A duration in whole nanoseconds, saturating (the gate's clock is u64 ns).
fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
