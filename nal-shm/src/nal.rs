//! The shared-memory NAL proper: endpoint, peers, the interface's shared
//! state, the `Nal` implementation, shutdown. Sending is in `tx.rs`,
//! receiving in `rx.rs`, passes, sleeping and the progress thread in
//! `progress.rs`, giving peers up in `failure.rs`.
//!
//! Lock order (never taken the other way round): a peer's `rx` → any
//! peer's `tx` → the engine (inside `NiCore::with_engine`). The failure
//! list is a leaf. A peer found broken while locks are held is only
//! *noted* (`note_failure`); the failure is carried out (`reap_failures`)
//! by the same thread once it holds no lock.

use std::ffi::CString;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use portals::{Nal, NiCore, Outbound, ProcessId, PtlError};

use crate::addr::{random_nonce, ShmAddr};
use crate::doorbell::{self, Urgency};
use crate::failure::Failure;
use crate::liveness::Watch;
use crate::progress::dozes;
use crate::ring::Consumer;
use crate::rx::{Phase, Rx};
use crate::segment::{self, Segment, CMA_OK};
use crate::tx::Tx;
use crate::{ShmConfig, ShmError, ShmStats};

/// The name of the progress thread, before the process id.
pub(crate) const PROGRESS_THREAD_PREFIX: &str = "ptl-shm-";

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

// ----- endpoint ------------------------------------------------------------

/// A shared-memory endpoint that is not serving an interface yet. Bind
/// first, publish [`ShmEndpoint::addr`] to the other local processes, then
/// [`ShmEndpoint::start`].
#[derive(Debug)]
pub struct ShmEndpoint {
    cfg: ShmConfig,
    addr: ShmAddr,
}

impl ShmEndpoint {
    /// Check the configuration and draw this endpoint's address. Nothing
    /// is created yet: the inbox's name depends on the job key, which
    /// [`start`](Self::start) learns.
    pub fn bind(cfg: ShmConfig) -> std::io::Result<ShmEndpoint> {
        let bad = |m: &'static str| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
        let rb = cfg.ring_bytes as u64;
        if !(segment::MIN_RING..=segment::MAX_RING).contains(&rb) || rb % 64 != 0 {
            return Err(bad(
                "ring_bytes must be a multiple of 64 between 4 KiB and 1 GiB",
            ));
        }
        if cfg.cma_chunk == 0 {
            return Err(bad("cma_chunk must not be 0"));
        }
        if cfg.liveness_interval.is_zero() {
            return Err(bad("liveness_interval must not be 0"));
        }
        let addr = ShmAddr {
            pid: std::process::id(),
            nonce: random_nonce()?,
        };
        Ok(ShmEndpoint { cfg, addr })
    }

    /// Set [`ShmConfig::early_takeover`] before starting: a launcher knows
    /// how many ranks share the host only after the address exchange.
    pub fn set_early_takeover(&mut self, on: bool) {
        self.cfg.early_takeover = on;
    }

    /// Set [`ShmConfig::crowded`] before starting (the runtime decides it
    /// per host).
    pub fn set_crowded(&mut self, crowded: bool) {
        self.cfg.crowded = crowded;
    }

    /// Set [`ShmConfig::progress_nice`] (the runtime decides it per host).
    pub fn set_progress_nice(&mut self, steps: u32) {
        self.cfg.progress_nice = steps;
    }

    /// Set [`ShmConfig::progress_cpus`].
    pub fn set_progress_cpus(&mut self, cpus: nal_sys::affinity::ProgressCpus) {
        self.cfg.progress_cpus = cpus;
    }

    /// What the other processes need to reach this endpoint.
    pub fn addr(&self) -> ShmAddr {
        self.addr
    }

    /// Start serving `core` (use inside [`portals::NetworkInterface::init`]).
    /// `peers` lists the job's processes on this host with their addresses
    /// (this one may be among them). Creates this process's inbox; peers'
    /// inboxes are mapped as they appear, within
    /// [`ShmConfig::connect_timeout`], so processes may start in any order.
    pub fn start(
        self,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, ShmAddr)>,
    ) -> Result<Arc<ShmNal>, PtlError> {
        ShmNal::start(self, core, peers).map_err(|e| PtlError::Nal(e.to_string()))
    }
}

// ----- peers and the shared state ------------------------------------------

/// Another local process of the job.
pub(crate) struct Peer {
    pub(crate) id: ProcessId,
    pub(crate) addr: ShmAddr,
    /// Its inbox's name.
    pub(crate) name: CString,
    /// Index of its ring in our inbox.
    pub(crate) ring_in: usize,
    pub(crate) failed: AtomicBool,
    /// Its inbox, mapped here once it appeared.
    pub(crate) outbox: OnceLock<Segment>,
    /// Its process (None: it is this process).
    pub(crate) watch: Option<Watch>,
    /// We decided whether single-copy works from it.
    pub(crate) probed: AtomicBool,
    /// Its send queue is not empty (a lock-free hint for progress passes).
    pub(crate) has_queue: AtomicBool,
    pub(crate) next_attach_ns: AtomicU64,
    /// The record at the head of its ring was held back by the engine (a
    /// flow-controlled event queue was full): the interface's intake epoch
    /// read before it was offered, or [`NOT_HELD`]. Its ring is not read
    /// again until the epoch moves.
    pub(crate) held: AtomicU64,
    pub(crate) tx: Mutex<Tx>,
    pub(crate) rx: Mutex<Rx>,
}

/// [`Peer::held`] when nothing is held back.
pub(crate) const NOT_HELD: u64 = u64::MAX;

impl Peer {
    /// Its ring waits for the engine's intake to resume (see
    /// [`Peer::held`]).
    pub(crate) fn is_held(&self, core: &portals::NiCore) -> bool {
        let h = self.held.load(Ordering::SeqCst);
        h != NOT_HELD && h == core.intake_epoch()
    }
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) messages_sent: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) messages_received: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) inline_sent: AtomicU64,
    pub(crate) single_copy_sent: AtomicU64,
    pub(crate) pipelined_sent: AtomicU64,
    pub(crate) single_copy_received: AtomicU64,
    pub(crate) single_copy_bytes: AtomicU64,
    pub(crate) single_copy_bounced: AtomicU64,
    pub(crate) ring_full: AtomicU64,
    pub(crate) optimistic_sends: AtomicU64,
    pub(crate) progress_thread_wakes: AtomicU64,
    pub(crate) progress_dozes: AtomicU64,
    pub(crate) waiter_yields: AtomicU64,
    pub(crate) single_copy_started: AtomicU64,
    pub(crate) futex_wakes_sent: AtomicU64,
    pub(crate) futex_waits: AtomicU64,
    pub(crate) peers_failed: AtomicU64,
    pub(crate) corrupt_ring_errors: AtomicU64,
    pub(crate) cma_unavailable: AtomicU64,
}

pub(crate) struct Inner {
    pub(crate) core: Arc<NiCore>,
    pub(crate) cfg: ShmConfig,
    pub(crate) me: ProcessId,
    pub(crate) job_key: u64,
    /// Sorted by id (see [`Inner::peer`]); peer i reads ring i of our
    /// inbox. Declared before `inbox`, so dropped before the mapping its
    /// consumers point into.
    pub(crate) peers: Vec<Peer>,
    /// Our inbox: one ring per peer, in `peers` order.
    pub(crate) inbox: Segment,
    pub(crate) inbox_linked: AtomicBool,
    /// The inbox's doorbell socket, for a thread that waits for this
    /// transport and others at once (`Nal::wait_fd`); `None` if it could
    /// not be bound (then this transport cannot be composed).
    bell: Option<doorbell::Bell>,
    pub(crate) gate: nal_sys::gate::ProgressGate,
    pub(crate) stopped: AtomicBool,
    /// A sticky [`Nal::wake`] not consumed by a blocking call yet.
    pub(crate) wake_pending: AtomicBool,
    /// The word peers read to find out whether single-copy works.
    pub(crate) probe_word: Box<u64>,
    /// [`coarse_ns`] at start-up.
    epoch_ns: u64,
    pub(crate) next_housekeeping: AtomicU64,
    /// Passes made (wrapping; see [`Inner::pass`]).
    pub(crate) passes: AtomicU32,
    pub(crate) next_liveness: AtomicU64,
    /// Peers not attached or not probed yet: start-up is unfinished.
    pub(crate) unresolved: AtomicUsize,
    /// Receive sides in the middle of a single-copy read.
    pub(crate) cma_active: AtomicUsize,
    /// Single-copy payloads of ours announced to peers and not done yet:
    /// their receivers are reading our memory (or about to).
    pub(crate) lent: AtomicUsize,
    pub(crate) failing: Mutex<Vec<(usize, Failure)>>,
    pub(crate) has_failing: AtomicBool,
    /// Largest record body written, and smallest piece a message is split
    /// into (unless less is left).
    pub(crate) max_body: usize,
    pub(crate) min_chunk: usize,
    pub(crate) stats: Stats,
}

/// A running shared-memory NAL. Created by [`ShmEndpoint::start`]; owned by
/// the network interface (as its `Arc<dyn Nal>`) and optionally by the
/// caller, for [`ShmNal::stats`].
pub struct ShmNal {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for ShmNal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmNal")
            .field("me", &self.inner.me)
            .field("peers", &self.inner.peers.len())
            .field("progress", &self.inner.cfg.progress)
            .finish()
    }
}

impl ShmNal {
    fn start(
        ep: ShmEndpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, ShmAddr)>,
    ) -> Result<Arc<ShmNal>, ShmError> {
        let me = core.id();
        let job_key = core.job_key();
        let mut others: Vec<(ProcessId, ShmAddr)> = Vec::new();
        for (id, addr) in peers {
            if id == me {
                if addr != ep.addr {
                    return Err(ShmError::Peers(format!(
                        "{me} is listed with another address"
                    )));
                }
                continue;
            }
            if others.iter().any(|(i, a)| *i == id || *a == addr) {
                return Err(ShmError::Peers(format!("{id} or {addr} is listed twice")));
            }
            others.push((id, addr));
        }
        others.sort_by_key(|(id, _)| *id);
        let senders: Vec<(ProcessId, u32)> = others.iter().map(|(i, a)| (*i, a.pid)).collect();
        let name = segment::inbox_name(job_key, ep.addr.pid, ep.addr.nonce);
        let rb = ep.cfg.ring_bytes as u64;
        let inbox =
            Segment::create(name, job_key, rb, &senders).map_err(|source| ShmError::Io {
                what: "creating the inbox",
                source,
            })?;
        let mut list = Vec::new();
        let mut gone = Vec::new();
        for (i, (id, addr)) in others.into_iter().enumerate() {
            let watch = if addr.pid == ep.addr.pid {
                None
            } else {
                let w = Watch::new(addr.pid);
                if w.is_none() {
                    gone.push(i);
                }
                w
            };
            // SAFETY: ring i of our inbox, which outlives the peer list
            // (both live in `Inner`, the list is dropped first); we are its
            // only consumer.
            let ring = unsafe { Consumer::new(inbox.ring(i)) };
            list.push(Peer {
                id,
                addr,
                name: segment::inbox_name(job_key, addr.pid, addr.nonce),
                ring_in: i,
                failed: AtomicBool::new(false),
                outbox: OnceLock::new(),
                watch,
                probed: AtomicBool::new(false),
                has_queue: AtomicBool::new(false),
                next_attach_ns: AtomicU64::new(0),
                held: AtomicU64::new(NOT_HELD),
                tx: Mutex::new(Tx::new()),
                rx: Mutex::new(Rx {
                    ring,
                    phase: Phase::Idle,
                    bounce: Vec::new(),
                }),
            });
        }
        let max_body = (ep.cfg.ring_bytes / 4).max(1024);
        let n = list.len();
        let inner = Arc::new(Inner {
            core: core.clone(),
            me,
            job_key,
            peers: list,
            bell: match doorbell::Bell::bind(&inbox) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::debug!(error = %e, "no doorbell socket: cannot be composed with other transports");
                    None
                }
            },
            inbox,
            inbox_linked: AtomicBool::new(true),
            // With the take-over the progress thread dozes on the doorbell
            // instead of parking on the gate, so no leave needs to wake it
            // (see `doorbell`); without, the end of a wait found under way
            // wakes it, to resume one hand-back delay later.
            gate: if dozes(&ep.cfg) {
                nal_sys::gate::ProgressGate::new(ep.cfg.handback)
            } else {
                nal_sys::gate::ProgressGate::with_wake_on_leave(ep.cfg.handback)
            },
            stopped: AtomicBool::new(false),
            wake_pending: AtomicBool::new(false),
            probe_word: Box::new(u64::from(std::process::id()) << 32 | 0x5052_4f42),
            epoch_ns: coarse_ns(),
            next_housekeeping: AtomicU64::new(0),
            passes: AtomicU32::new(0),
            next_liveness: AtomicU64::new(0),
            unresolved: AtomicUsize::new(2 * n),
            cma_active: AtomicUsize::new(0),
            lent: AtomicUsize::new(0),
            failing: Mutex::new(Vec::new()),
            has_failing: AtomicBool::new(false),
            max_body,
            min_chunk: (max_body / 2).min(4096),
            stats: Stats::default(),
            cfg: ep.cfg,
        });
        if n == 0 {
            inner.unlink_inbox();
        }
        for i in gone {
            inner.note_failure(&inner.peers[i], Failure::Dead);
        }
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        core.set_waker(Box::new(move || {
            if let Some(i) = weak.upgrade() {
                i.wake();
            }
        }));
        // A first look for the peers' inboxes; the rest come as they appear.
        inner.housekeeping(inner.now_ns());
        inner.reap_failures();
        let thread = match inner.cfg.progress {
            nal_sys::ProgressMode::Thread => {
                let i = inner.clone();
                let t = std::thread::Builder::new()
                    .name(format!("{PROGRESS_THREAD_PREFIX}{me}"))
                    .spawn(move || i.progress_thread())
                    .map_err(|source| ShmError::Io {
                        what: "starting the progress thread",
                        source,
                    })?;
                Some(t)
            }
            nal_sys::ProgressMode::Poll => None,
        };
        Ok(Arc::new(ShmNal {
            inner,
            thread: Mutex::new(thread),
        }))
    }

    /// The name of this process's inbox (`/ptl-shm.<pid>.<nonce>.<job>`,
    /// a file in `/dev/shm` until every peer has mapped it), for tools and
    /// tests that check nothing of a job is left behind.
    pub fn inbox_name(&self) -> &std::ffi::CStr {
        &self.inner.inbox.name
    }

    /// The counters.
    pub fn stats(&self) -> ShmStats {
        let s = &self.inner.stats;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ShmStats {
            messages_sent: g(&s.messages_sent),
            bytes_sent: g(&s.bytes_sent),
            messages_received: g(&s.messages_received),
            bytes_received: g(&s.bytes_received),
            inline_sent: g(&s.inline_sent),
            single_copy_sent: g(&s.single_copy_sent),
            pipelined_sent: g(&s.pipelined_sent),
            single_copy_received: g(&s.single_copy_received),
            single_copy_bytes: g(&s.single_copy_bytes),
            single_copy_bounced: g(&s.single_copy_bounced),
            ring_full: g(&s.ring_full),
            optimistic_sends: g(&s.optimistic_sends),
            progress_thread_wakes: g(&s.progress_thread_wakes),
            progress_dozes: g(&s.progress_dozes),
            waiter_yields: g(&s.waiter_yields),
            single_copy_started: g(&s.single_copy_started),
            futex_wakes_sent: g(&s.futex_wakes_sent),
            futex_waits: g(&s.futex_waits),
            peers_failed: g(&s.peers_failed),
            corrupt_ring_errors: g(&s.corrupt_ring_errors),
            cma_unavailable: g(&s.cma_unavailable),
        }
    }

    /// The configuration the transport runs with.
    pub fn config(&self) -> &ShmConfig {
        &self.inner.cfg
    }

    /// Whether at least one peer agreed to read large payloads from this
    /// process single-copy (false until the start-up probes are decided,
    /// and always with [`ShmConfig::cma`] off on either side).
    pub fn cma_in_use(&self) -> bool {
        self.inner.peers.iter().any(|p| {
            p.outbox.get().is_some_and(|s| {
                lock(&p.tx)
                    .ring
                    .as_ref()
                    .is_some_and(|(_, i)| s.ctl(*i).cma.load(Ordering::Acquire) == CMA_OK)
            })
        })
    }

    /// How many peers' inboxes are mapped.
    pub fn attached(&self) -> usize {
        self.inner
            .peers
            .iter()
            .filter(|p| p.outbox.get().is_some())
            .count()
    }

    /// Tests only: overwrite ring indices as a broken peer would — `tail`
    /// of our ring in `peer`'s inbox, `head` of its ring in ours.
    #[doc(hidden)]
    pub fn scribble_for_tests(&self, peer: ProcessId, tail: Option<u64>, head: Option<u64>) {
        let Some(p) = self.inner.peer(peer) else {
            return;
        };
        if let (Some(t), Some(seg)) = (tail, p.outbox.get()) {
            if let Some((_, i)) = &lock(&p.tx).ring {
                seg.ctl(*i).tail.store(t, Ordering::Release);
                doorbell::ring(seg, Urgency::Work);
            }
        }
        if let Some(h) = head {
            self.inner
                .inbox
                .ctl(p.ring_in)
                .head
                .store(h, Ordering::Release);
        }
    }
}

impl Nal for ShmNal {
    fn name(&self) -> &'static str {
        "shm"
    }

    /// A payload `to` reads single-copy moves only as far as it is
    /// deposited; through the ring (no single copy agreed yet, or refused)
    /// it moves whole.
    fn truncated_payload_moves(&self, to: ProcessId) -> bool {
        let Some(p) = self.inner.peer(to) else {
            return true;
        };
        !p.outbox.get().is_some_and(|s| {
            lock(&p.tx)
                .ring
                .as_ref()
                .is_some_and(|(_, i)| s.ctl(*i).cma.load(Ordering::Acquire) == CMA_OK)
        })
    }

    fn send(&self, msg: Outbound) {
        self.inner.send_inner(msg);
        self.inner.reap_failures();
    }

    fn progress(&self, timeout: Option<Duration>) -> portals::Result<()> {
        if self.inner.stopped.load(Ordering::Acquire) {
            return Err(PtlError::Shutdown);
        }
        match timeout {
            None => {
                // Found nothing to do while a single-copy read is under
                // way: another thread of ours holds it. On a rank bound to
                // one core that is the progress thread, on this core, and
                // spinning here only takes its time (1 MB bandwidth in
                // thread mode halved while a waiter spun beside the
                // progress thread's copy); give it the core.
                if !self.inner.pass() && self.inner.cma_active.load(Ordering::Relaxed) > 0 {
                    bump(&self.inner.stats.waiter_yields, 1);
                    std::thread::yield_now();
                }
            }
            Some(t) => self.inner.progress_blocking(t, false),
        }
        Ok(())
    }

    fn wake(&self) {
        self.inner.wake();
    }

    fn waiter_enter(&self) {
        // Only a progress thread reads the gate: without one, a wait skips
        // its clock reads and shared counters (two clock reads per wait).
        if self.progresses_alone() {
            self.inner.gate.enter();
        }
        if self.inner.dozing() {
            self.inner
                .inbox
                .header()
                .app_inside
                .fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waiter_leave(&self) {
        if self.progresses_alone() {
            self.inner.gate.leave();
        }
        if self.inner.dozing() {
            self.inner.app_left();
        }
    }

    fn progresses_alone(&self) -> bool {
        self.inner.cfg.progress == nal_sys::ProgressMode::Thread
    }

    /// Large transfers need no hint here (a single-copy read wakes a
    /// dozer). But a non-blocking collective started after a wait arms
    /// triggered operations that only a pass fires, and small messages do
    /// not wake a dozer: the leave that would have told it came before
    /// they were armed, and it dozed on for up to its longest doze (the
    /// back-off's 3.2 ms, or 50 ms on a crowded host) while the
    /// application computed. So the end of a post that left operations
    /// armed flags the inbox (`dozer_armed`): from then on every message
    /// wakes the dozer (see `doorbell`), until it finds none armed at a
    /// doze. A message that came before the flag (a peer that started
    /// first: on 2 ranks, in whole runs of `iallreduce` its only message)
    /// woke nobody, so if the rings hold one the dozer is woken here
    /// (SeqCst: the flag before the look, against the producer's
    /// publish-then-load). Taking it with a pass of our own instead made
    /// `iallreduce` and `ibcast` waited for at once about twice as long
    /// (their next message then wakes the peer's dozer while that
    /// application is still between calls; docs/PERFORMANCE.md, stop 52).
    fn bulk_post_end(&self) {
        let i = &self.inner;
        if i.dozing() && i.mark_armed() {
            fence(Ordering::SeqCst);
            if i.work_pending() && doorbell::wake_dozers(&i.inbox) {
                bump(&i.stats.futex_wakes_sent, 1);
            }
        }
    }

    fn test_pass(&self) -> portals::Result<()> {
        // Nothing, unlike the socket transports: the progress thread dozes
        // through the hand-back delay and is woken only for work (a
        // single-copy read), never for small messages, so a test driving
        // the rings saves no wake-ups. Measured with it (COMB, 100 KB
        // messages, 2 bound ranks): availability 68.7 → 61.0 % at 100 µs
        // of work between tests and 93.8 → 91.8 % at 1 ms.
        Ok(())
    }

    fn fence_responses(&self) {
        // A thread reading a peer's ring holds its `rx` from taking a
        // record to queueing the response (`rx.rs`): once we have held each
        // one, every response to a record taken before is in its `tx`
        // queue, ahead of whatever the caller sends next.
        for p in &self.inner.peers {
            drop(lock(&p.rx));
        }
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.bell.as_ref().map(|b| b.fd())
    }

    fn arm_wait(&self) -> Option<Duration> {
        let i = &self.inner;
        let h = i.inbox.header();
        h.fd_sleepers.fetch_add(1, Ordering::SeqCst);
        // SeqCst: the announcement before the checks (see `doorbell`).
        fence(Ordering::SeqCst);
        if i.wake_pending.swap(false, Ordering::SeqCst) || i.work_pending() {
            return None;
        }
        // Housekeeping (liveness, attaching late peers) needs passes.
        let due = i.next_housekeeping.load(Ordering::Relaxed);
        let until = Duration::from_nanos(due.saturating_sub(i.now_ns()));
        Some(until.max(Duration::from_micros(100)))
    }

    fn disarm_wait(&self) {
        let i = &self.inner;
        i.inbox.header().fd_sleepers.fetch_sub(1, Ordering::SeqCst);
        if let Some(b) = &i.bell {
            b.drain();
        }
        // Its sleep may have run until housekeeping was due; passes look
        // at the clock only now and then.
        i.housekeeping(i.now_ns());
    }

    fn peer_moving_our_data(&self) -> bool {
        self.inner.lent.load(Ordering::Relaxed) > 0
    }

    fn shutdown(&self) {
        let i = &self.inner;
        tracing::debug!(me = %i.me, stats = ?self.stats(), "closing");
        i.stopped.store(true, Ordering::SeqCst);
        i.gate.stop();
        let h = i.inbox.header();
        h.doorbell.fetch_add(1, Ordering::SeqCst);
        doorbell::wake_all(&h.doorbell);
        h.doze_bell.fetch_add(1, Ordering::SeqCst);
        doorbell::wake_all(&h.doze_bell);
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        i.close();
    }
}

impl Inner {
    pub(crate) fn peer(&self, id: ProcessId) -> Option<&Peer> {
        // `peers` is sorted by id: every send looks its destination up, and
        // a binary search over a host's ranks costs a few comparisons where
        // the SipHash of a map lookup cost about 130 instructions.
        self.peers
            .binary_search_by(|p| p.id.cmp(&id))
            .ok()
            .map(|i| &self.peers[i])
    }

    pub(crate) fn now_ns(&self) -> u64 {
        // The coarse clock: its resolution (a scheduler tick, 1–4 ms) is
        // plenty for timers of 1 ms and more, and it costs a load where
        // the precise one costs a vDSO call; passes run it every time (a
        // quarter of a spinning waiter's time went to the precise clock).
        coarse_ns().saturating_sub(self.epoch_ns)
    }

    fn wake(&self) {
        self.wake_pending.store(true, Ordering::SeqCst);
        // A dozer only for work a pass must do now: messages the engine
        // held back (its intake resumed), triggered operations to send.
        // The interface calls this for every change of admission too (an
        // MPI short send admits its target), and waking a dozer for those
        // put a context switch on a bound rank's core at every send.
        // Looked at only when a dozer is there to wake.
        let work = || {
            self.core.triggered_pending()
                || self
                    .peers
                    .iter()
                    .any(|p| p.held.load(Ordering::SeqCst) != NOT_HELD)
        };
        if doorbell::wake_own(&self.inbox, work) {
            bump(&self.stats.futex_wakes_sent, 1);
        }
    }

    pub(crate) fn unlink_inbox(&self) {
        if self.inbox_linked.swap(false, Ordering::SeqCst) {
            segment::unlink(&self.inbox.name);
        }
    }

    /// The interface is going away: tell peers, abandon what is in flight
    /// without touching its memory, drop the inbox's name.
    fn close(&self) {
        self.inbox.header().closed.store(1, Ordering::SeqCst);
        for p in &self.peers {
            self.abort_rx(p, true);
            drop(lock(&p.tx).take_all(&self.lent));
            if let Some(s) = p.outbox.get() {
                doorbell::ring(s, Urgency::Work);
            }
        }
        self.unlink_inbox();
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds.
fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; the clock id is a constant Linux knows.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
