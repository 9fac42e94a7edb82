//! The network abstraction layer (NAL) contract: what a transport provides
//! to a [`crate::NetworkInterface`], and the shared core through which it
//! drives the engine.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use crate::engine::{Engine, Outbound};
use crate::error::Result;
use crate::types::ProcessId;

/// How long a transport's progress pass that will not sleep leaves lazy
/// acknowledgments ([`crate::AckReq::Lazy`]) held back for the next
/// message to their peer. A round trip's receiver answers within a few
/// microseconds of taking the message; without a progress thread its next
/// calls (the end of the wait, the start of the send) each make a pass, and
/// a pass that sent the acknowledgment alone put a second system call and
/// datagram or segment on the round trip (8 B MPI half round trip over
/// TCP, polling: 11 → 7.7 µs).
pub const LAZY_ACK_HOLD: Duration = Duration::from_micros(20);

/// A pass sends the lazy acknowledgments held for a peer once this many
/// wait, however young: a stream of sends in one direction gets them back
/// in batches, well within an MPI sender's window (256 by default).
pub const LAZY_ACK_BATCH: usize = 32;

/// A transport. Implementations: [`crate::loopback`] here, TCP and UDP in the
/// `nal-tcp` and `nal-udp` crates.
///
/// # Contract
/// * Every [`Outbound`] handed to [`Nal::send`] whose `token` is `Some` is
///   completed exactly once with [`crate::Engine::send_complete`] (through
///   [`NiCore::with_engine`]), after its payload memory is no longer read, or
///   with a failure if it cannot be sent.
/// * Messages to one peer are delivered in the order `send` was called.
/// * Incoming headers are fed to [`crate::Engine::recv_header`] in arrival
///   order per peer; every `RecvToken` is completed or aborted exactly once.
/// * When the transport gives up on a peer it calls
///   [`crate::Engine::peer_failed`].
/// * At the end of every progress pass, holding none of its own locks, it
///   calls [`NiCore::send_triggered`], which hands the messages of
///   triggered operations released meanwhile to the interface's
///   [`Nal::send`].
/// * [`Nal::wake`] is sticky: a wake that arrives before a blocking
///   [`Nal::progress`] call makes that call return promptly.
pub trait Nal: Send + Sync + 'static {
    /// Short name for diagnostics ("loopback", "tcp", "udp").
    fn name(&self) -> &'static str;

    /// Queue or transmit a message.
    fn send(&self, msg: Outbound);

    /// Make progress: move bytes, feed headers to the engine, complete
    /// tokens. With `timeout` = `None` it must not block; otherwise it may
    /// block up to `timeout` when there is nothing to do, returning early on
    /// activity or [`Nal::wake`].
    fn progress(&self, timeout: Option<Duration>) -> Result<()>;

    /// Interrupt a blocked [`Nal::progress`] (see the contract).
    fn wake(&self);

    /// A thread is about to wait inside the library and will drive progress
    /// itself; a progress thread may stand aside. Calls nest.
    fn waiter_enter(&self) {}

    /// The matching exit of [`Nal::waiter_enter`].
    fn waiter_leave(&self) {}

    /// An application thread starts posting a transfer whose data will
    /// move after its call returns (a large non-blocking send or receive);
    /// [`Nal::bulk_post_end`] follows. A progress thread that stands aside
    /// for the hand-back delay after the last wait may take over once the
    /// post is done and no wait follows, so that the transfer moves while
    /// the application computes. A hint; the default ignores it.
    fn bulk_post_begin(&self) {}

    /// The matching end of [`Nal::bulk_post_begin`].
    fn bulk_post_end(&self) {}

    /// Stop background threads and close the transport. Called once, when
    /// the network interface is dropped; pending sends are abandoned without
    /// touching their memory. When it returns, the transport no longer reads
    /// or writes any descriptor memory of this interface.
    fn shutdown(&self) {}

    /// True if the transport moves data without being called: it has a
    /// progress thread, or delivers synchronously inside `send`. False (the
    /// default, always correct) if it needs [`Nal::progress`] calls: then
    /// non-blocking library calls such as a test for completion must drive
    /// it ([`crate::NetworkInterface::poll`]).
    fn progresses_alone(&self) -> bool {
        false
    }

    /// For a transport composed with others in one interface (shared
    /// memory to the ranks of this host, TCP to the rest): a descriptor
    /// that a thread can wait on with `poll(2)` together with the other
    /// transports' — readable whenever [`Nal::progress`] without a timeout
    /// would find work, provided [`Nal::arm_wait`] returned true just
    /// before. `None` (the default): this transport cannot be waited on
    /// beside others.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// About to block on [`Nal::wait_fd`]: `None` if work is pending that
    /// no readiness of the descriptor will announce (then do not block;
    /// call [`Nal::progress`]), otherwise the longest the wait may last
    /// before the transport needs a pass for its own timers. A transport
    /// may tell its peers here that this process sleeps, so that they
    /// signal the descriptor. [`Nal::disarm_wait`] follows in every case.
    fn arm_wait(&self) -> Option<Duration> {
        Some(Duration::MAX)
    }

    /// The end of a wait begun with [`Nal::arm_wait`], whether or not the
    /// descriptor became readable.
    fn disarm_wait(&self) {}

    /// Return once the response (acknowledgment, reply) to every message
    /// the engine has taken so far is queued in the ordered stream to its
    /// initiator, so that nothing the caller sends afterwards can overtake
    /// it. A transport takes a message and posts its event under the engine
    /// lock but queues the response after releasing it; meanwhile another
    /// thread may see the event and send to the same peer. Normally
    /// harmless (the response is only late), but a message that tells the
    /// peer "nothing more comes from me" (an MPI departure notice) must not
    /// arrive before the acknowledgment the peer still waits for. The
    /// default does nothing: right for a transport that queues responses
    /// under the lock its sends take.
    fn fence_responses(&self) {}

    /// Whether a peer is moving a payload of this process right now, so
    /// that a completion will come within about the time of that copy
    /// without this process doing anything (shared memory: a receiver
    /// reading our memory with a single copy). A waiter then keeps polling
    /// past its spin window, up to `NiConfig::wait_spin_busy`, instead of
    /// sleeping: the completion would otherwise cost the peer a wake-up
    /// system call and this thread a trip through the scheduler, per
    /// message. The default, `false`, is always correct.
    fn peer_moving_our_data(&self) -> bool {
        false
    }

    /// Whether the payload of a put to `to` crosses to it even when the
    /// target truncates it to nothing: a stream or datagram transport sends
    /// what the header announced, and the target reads and drops the rest.
    /// A transport whose target fetches large payloads itself (shared
    /// memory's single copy) moves only what is deposited, and says
    /// `false`. The MPI library announces long messages instead of putting
    /// them only where this is true (`mpi-on-portals`, `device/announce.rs`).
    /// The default, `true`, is what a transport that writes whole messages
    /// does.
    fn truncated_payload_moves(&self, to: ProcessId) -> bool {
        let _ = to;
        true
    }

    /// An application thread tests for completion or probes while a
    /// progress thread runs (see `NetworkInterface::poll_test`): drive the
    /// transport once, as a wait that ends at once, where that is cheaper
    /// than having the progress thread do it. The default does nothing:
    /// the progress thread moves the data.
    fn test_pass(&self) -> Result<()> {
        Ok(())
    }
}

thread_local! {
    /// The interface (its core's address) whose sleepers this thread leads:
    /// it is inside that transport's blocking progress call (see
    /// [`NiCore::sleep`]); 0 if none.
    static LEADING: Cell<usize> = const { Cell::new(0) };
}

/// A function run by [`NiCore::with_engine`] after a watched descriptor
/// unlinked itself (see [`NiCore::set_unlink_hook`]).
pub type UnlinkHook = Box<dyn Fn(&NiCore) + Send + Sync>;

/// The part of a network interface shared with its transport: the engine
/// behind a mutex, plus the bookkeeping that lets an event wake sleeping
/// waiters without a system call when nobody sleeps.
///
/// Sleeping works with any number of waiting threads: one of them, the
/// *leader*, blocks inside the transport (so that in polling mode someone
/// still moves bytes); the others park on a condition variable keyed by a
/// wake epoch, which makes a lost wake-up impossible. When the leader leaves,
/// a parked thread takes over.
pub struct NiCore {
    id: ProcessId,
    job_key: u64,
    engine: Mutex<Engine>,
    sleepers: AtomicUsize,
    epoch: AtomicU64,
    leader: AtomicBool,
    /// Threads parked on `parked` (or about to be, under `park`): wakers
    /// skip the condition variable, whose notify is always a system call,
    /// when there are none.
    parkers: AtomicUsize,
    park: Mutex<()>,
    parked: Condvar,
    waker: OnceLock<Box<dyn Fn() + Send + Sync>>,
    unlink_hook: OnceLock<UnlinkHook>,
    /// See [`NiCore::intake_epoch`].
    intake_epoch: AtomicU64,
    /// The interface's transport, for [`NiCore::send_triggered`] (weak: the
    /// transport holds the core).
    transport: OnceLock<Weak<dyn Nal>>,
    /// The engine holds messages of issued triggered operations (set and
    /// cleared under the engine lock).
    triggered: AtomicBool,
    /// See [`NiCore::set_app_quiet`].
    app_quiet: AtomicBool,
}

impl std::fmt::Debug for NiCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NiCore")
            .field("id", &self.id)
            .field("sleepers", &self.sleepers.load(Ordering::Relaxed))
            .finish()
    }
}

impl NiCore {
    pub(crate) fn new(engine: Engine) -> Self {
        NiCore {
            id: engine.id(),
            job_key: engine.job_key(),
            engine: Mutex::new(engine),
            sleepers: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            leader: AtomicBool::new(false),
            parkers: AtomicUsize::new(0),
            park: Mutex::new(()),
            parked: Condvar::new(),
            waker: OnceLock::new(),
            unlink_hook: OnceLock::new(),
            intake_epoch: AtomicU64::new(0),
            transport: OnceLock::new(),
            triggered: AtomicBool::new(false),
            app_quiet: AtomicBool::new(false),
        }
    }

    /// The layer above says whether the application has nothing under way
    /// that needs the transport while it computes: every operation it
    /// started and will wait for is complete, it exposes no memory others
    /// may access at any time (an RMA window), and what is left in flight
    /// only waits for memory to be reclaimed (an acknowledgment of a
    /// message sent from a library copy). A transport's progress thread
    /// then leaves the sockets to the application's next call for longer
    /// after it leaves a wait (`nal_sys::gate::ProgressGate::set_quiet`),
    /// unless the transport itself has work queued. A hint, false until
    /// set: an interface used directly, without a layer that tracks its
    /// operations, keeps the plain hand-back.
    pub fn set_app_quiet(&self, quiet: bool) {
        self.app_quiet.store(quiet, Ordering::Relaxed);
    }

    /// What [`NiCore::set_app_quiet`] said last.
    pub fn app_quiet(&self) -> bool {
        self.app_quiet.load(Ordering::Relaxed)
    }

    /// The transport [`NiCore::send_triggered`] sends through: the
    /// interface's own (a composed transport routes by destination).
    pub(crate) fn set_transport(&self, nal: &Arc<dyn Nal>) {
        let _ = self.transport.set(Arc::downgrade(nal));
    }

    /// Send the messages of the triggered operations the engine issued
    /// (see `engine/triggered.rs`) through the interface's transport. One
    /// atomic load when there are none. Transports call it at the end of
    /// each progress pass, where they hold no lock of their own (a message
    /// delivered inside the pass may have released a trigger, and the
    /// transport cannot be handed a message while it holds its locks); the
    /// interface calls it after each of its calls that can release one.
    pub fn send_triggered(&self) {
        while self.triggered.load(Ordering::SeqCst) {
            let Some(nal) = self.transport.get().and_then(Weak::upgrade) else {
                return;
            };
            let batch: Vec<Outbound> = {
                let mut e = self.lock();
                self.triggered.store(false, Ordering::SeqCst);
                std::iter::from_fn(|| e.take_triggered()).collect()
            };
            for m in batch {
                nal.send(m);
            }
        }
    }

    /// True while messages of triggered operations wait to be sent: work
    /// for the next pass that no readiness of a descriptor announces.
    pub fn triggered_pending(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    /// This interface's process id.
    pub fn id(&self) -> ProcessId {
        self.id
    }

    /// The job key headers must carry.
    pub fn job_key(&self) -> u64 {
        self.job_key
    }

    /// Install the function that interrupts a blocked [`Nal::progress`]
    /// (normally the transport's own [`Nal::wake`]). Called once by the
    /// transport while it is built.
    pub fn set_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        let _ = self.waker.set(waker);
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock cannot leave the engine half-updated
        // in a way later calls rely on (every method restores its invariants
        // before it can panic, and none is expected to), so keep going.
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the engine. If `f` queued events and some thread sleeps
    /// waiting for events, wake it. If a watched descriptor unlinked itself,
    /// run the unlink hook (after the engine lock is released).
    #[inline]
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        let (r, posted, unlinked, resumed, triggered) = {
            let mut e = self.lock();
            let r = f(&mut e);
            // Under the engine lock, against `send_triggered`'s clear.
            let triggered = e.has_triggered() && !self.triggered.swap(true, Ordering::SeqCst);
            let resumed = e.take_intake_resumed();
            if resumed {
                // Under the engine lock: a transport that read the epoch
                // before a call answered `Defer` sees it move.
                self.intake_epoch.fetch_add(1, Ordering::SeqCst);
            }
            let posted = e.take_posted();
            if posted {
                // Under the engine lock, even with nobody asleep: whoever
                // finds this call's news under the lock afterwards finds
                // the epoch moved, so a reader that skips the lock while
                // the epoch stays put (a spinning waiter, the MPI
                // library's drain) never skips news it was shown.
                self.epoch.fetch_add(1, Ordering::SeqCst);
            }
            (r, posted, e.take_watched_unlink(), resumed, triggered)
        };
        if resumed || triggered {
            // Held messages wait in the transport for a pass, triggered
            // ones in the engine: make sure one comes (a progress thread
            // may be asleep).
            if let Some(w) = self.waker.get() {
                w();
            }
        }
        // SeqCst against `sleep_enter`: either this load sees the sleeper,
        // or the sleeper's read of the epoch sees the move above.
        if posted && self.sleepers.load(Ordering::SeqCst) > 0 {
            self.notify_sleepers();
        }
        if unlinked {
            if let Some(h) = self.unlink_hook.get() {
                h(self);
            }
        }
        r
    }

    /// Moves each time a flow-controlled event queue that held an incoming
    /// request back ([`crate::RecvAction::Defer`]) has room again. A
    /// transport reads it *before* offering a header; if the answer is
    /// `Defer`, it keeps the message and offers it again once this value
    /// differs from the one it read (the interface's waker is called when
    /// it moves).
    pub fn intake_epoch(&self) -> u64 {
        self.intake_epoch.load(Ordering::SeqCst)
    }

    /// Install `hook`, to run whenever a descriptor that posts its events to
    /// `eq` unlinks itself (threshold used up, high-water mark crossed), on
    /// the thread whose call caused it — the transport's progress thread, or
    /// an application thread driving progress — right after the engine lock
    /// is released. This lets a library replace consumed receive buffers
    /// while the application computes (seed 001's unexpected-message buffers
    /// are the use case) instead of at its next call.
    ///
    /// The hook runs while the transport may hold locks of its own: it must
    /// not block on anything an application thread can hold while calling
    /// into the interface (use `try_lock`), and must not send or drive
    /// progress; engine calls through [`NiCore::with_engine`] are fine, and
    /// a message it starts goes out with the transport's next pass through
    /// [`crate::Engine::defer_outbound`]. It
    /// is never run while the engine lock is held. One hook per interface;
    /// a second call fails with `InvalidArgument`.
    pub fn set_unlink_hook(&self, eq: crate::EqHandle, hook: UnlinkHook) -> Result<()> {
        self.unlink_hook
            .set(hook)
            .map_err(|_| crate::PtlError::InvalidArgument("an unlink hook is already set"))?;
        self.with_engine(|e| e.watch_unlinks(Some(eq)))
    }

    /// Attach a descriptor over caller memory to a match entry, for code
    /// that only holds the core (an unlink hook); see
    /// [`crate::NetworkInterface::md_attach_raw`].
    ///
    /// # Safety
    /// As for [`crate::NetworkInterface::md_attach_raw`].
    pub unsafe fn md_attach_raw(
        &self,
        me: crate::MeHandle,
        desc: &crate::MdDesc,
        ptr: *mut u8,
        len: usize,
        unlink: crate::Unlink,
    ) -> Result<crate::MdHandle> {
        crate::ni::check_raw(ptr, len)?;
        self.with_engine(|e| e.md_attach_mem(me, desc, crate::md::Memory::Raw { ptr, len }, unlink))
    }

    /// Wake every thread sleeping in a blocking wait of this interface.
    pub fn wake_sleepers(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.notify_sleepers();
    }

    /// Interrupt the leader's blocking transport call and the parked
    /// threads, after the epoch moved.
    fn notify_sleepers(&self) {
        // The leader posting from inside its own blocking progress call
        // looks at its queues when that call returns: interrupting the
        // transport would only cost it a wasted pass.
        if LEADING.with(Cell::get) != self.addr() {
            if let Some(w) = self.waker.get() {
                w();
            }
        }
        // SeqCst against `park_led`: either this load sees the parker, or
        // the parker sees the new epoch and does not wait.
        if self.parkers.load(Ordering::SeqCst) > 0 {
            let _g = self.park.lock().unwrap_or_else(|p| p.into_inner());
            self.parked.notify_all();
        }
    }

    /// The wake epoch. It moves at every wake-up and, under the engine
    /// lock, in every engine call that queued an event, changed a counting
    /// event or learned of a failed peer, whether or not anyone sleeps.
    ///
    /// So news needs no lock to be noticed: read the epoch, then look
    /// under the engine lock; while it still reads the same, nothing was
    /// queued that this look did not see. A blocking wait passes it to its
    /// sleep, so that a wake in between is not lost; a spinning waiter
    /// looks again only once it moved, so its spin costs a shared load
    /// instead of the lock the thread moving its data needs; the MPI
    /// library takes its event queues only once it moved.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub(crate) fn sleep_enter(&self) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn sleep_leave(&self) {
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sleep up to `nap` unless the epoch moved past `seen`. The first
    /// sleeper blocks in the transport (`block`), the others park.
    pub(crate) fn sleep(
        &self,
        seen: u64,
        nap: Duration,
        block: impl FnOnce(Duration) -> Result<()>,
    ) -> Result<()> {
        if self
            .leader
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let r = if self.epoch() == seen {
                let outer = LEADING.with(|l| l.replace(self.addr()));
                let r = block(nap);
                LEADING.with(|l| l.set(outer));
                r
            } else {
                Ok(())
            };
            self.leader.store(false, Ordering::SeqCst);
            // Hand the lead to a parked thread, if any (SeqCst against the
            // parker's check of `leader`).
            if self.parkers.load(Ordering::SeqCst) > 0 {
                let _g = self.park.lock().unwrap_or_else(|p| p.into_inner());
                self.parked.notify_one();
            }
            return r;
        }
        self.park_led(seen, nap);
        Ok(())
    }

    /// This core's identity for [`LEADING`].
    fn addr(&self) -> usize {
        self as *const NiCore as usize
    }

    /// Park while another thread leads, until the epoch moves past `seen`,
    /// the leader leaves, or `nap` passes.
    fn park_led(&self, seen: u64, nap: Duration) {
        let g = self.park.lock().unwrap_or_else(|p| p.into_inner());
        self.parkers.fetch_add(1, Ordering::SeqCst);
        // Announced first, checked second: a waker or a leaving leader
        // that missed the announcement changed what is checked here.
        let g = if self.epoch() == seen && self.leader.load(Ordering::SeqCst) {
            self.parked
                .wait_timeout(g, nap)
                .unwrap_or_else(|p| p.into_inner())
                .0
        } else {
            g
        };
        self.parkers.fetch_sub(1, Ordering::SeqCst);
        drop(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NiLimits;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Instant;

    fn core() -> Arc<NiCore> {
        let engine = Engine::new(ProcessId::new(1, 1), 7, NiLimits::default()).expect("engine");
        Arc::new(NiCore::new(engine))
    }

    /// Run `sleep` on another thread as the leader, blocking until told to
    /// return; hands back the channel that releases it.
    fn lead(c: &Arc<NiCore>) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (release, hold) = mpsc::channel::<()>();
        let (started, is_leading) = mpsc::channel::<()>();
        let c = c.clone();
        let t = std::thread::spawn(move || {
            let seen = c.epoch();
            c.sleep(seen, Duration::from_secs(20), |_| {
                let _ = started.send(());
                let _ = hold.recv_timeout(Duration::from_secs(20));
                Ok(())
            })
            .expect("lead");
        });
        is_leading
            .recv_timeout(Duration::from_secs(30))
            .expect("the leader never blocked");
        (release, t)
    }

    /// Start a thread that sleeps while another leads (so it parks), and
    /// return once it is parked; it reports how long it slept.
    fn park_behind(c: &Arc<NiCore>) -> std::thread::JoinHandle<Duration> {
        let parked = {
            let c = c.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let seen = c.epoch();
                c.sleep(seen, Duration::from_secs(20), |_| Ok(()))
                    .expect("park");
                t0.elapsed()
            })
        };
        let t0 = Instant::now();
        while c.parkers.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(30), "never parked");
            std::thread::sleep(Duration::from_millis(1));
        }
        parked
    }

    #[test]
    fn a_leaving_leader_hands_the_lead_to_a_parked_thread_at_once() {
        let c = core();
        let (release, leader) = lead(&c);
        let parked = park_behind(&c);
        release.send(()).expect("release");
        leader.join().expect("leader");
        let took = parked.join().expect("parked thread");
        assert!(
            took < Duration::from_secs(10),
            "parked {took:?}: not handed the lead"
        );
    }

    #[test]
    fn a_wake_reaches_a_parked_thread_and_skips_the_condvar_without_one() {
        let c = core();
        c.wake_sleepers(); // nobody parked: no lock, no notify, no hang
        let (release, leader) = lead(&c);
        let parked = park_behind(&c);
        c.wake_sleepers();
        let took = parked.join().expect("parked thread");
        assert!(
            took < Duration::from_secs(10),
            "parked {took:?}: the wake was lost"
        );
        release.send(()).expect("release");
        leader.join().expect("leader");
    }

    #[test]
    fn the_leader_does_not_interrupt_its_own_blocking_call() {
        let c = core();
        let wakes = Arc::new(AtomicUsize::new(0));
        let w = wakes.clone();
        c.set_waker(Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }));
        c.wake_sleepers();
        assert_eq!(wakes.load(Ordering::SeqCst), 1, "a wake from outside");
        let seen = c.epoch();
        c.sleep(seen, Duration::from_secs(1), |_| {
            c.wake_sleepers(); // posting from inside its own progress call
            Ok(())
        })
        .expect("sleep");
        assert_eq!(wakes.load(Ordering::SeqCst), 1, "the leader woke itself");
        c.wake_sleepers();
        assert_eq!(
            wakes.load(Ordering::SeqCst),
            2,
            "leading ended with the call"
        );
    }
}
