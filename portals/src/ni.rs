//! The network interface: the Portals API a user calls (`PtlNIInit` and
//! everything that takes an interface handle).

use std::sync::Arc;
use std::time::{Duration, Instant};

mod atomics;

use crate::acl::AcEntry;
use crate::engine::{CtEvent, Engine, NiLimits, NiStatus, Trigger};
use crate::error::{PtlError, Result};
use crate::event::{Event, MdSnapshot};
use crate::handle::{CtHandle, EqHandle, MdHandle, MeHandle};
use crate::md::{Iovec, MdDesc};
use crate::nal::{Nal, NiCore};
use crate::types::{AckReq, PortalIndex, Position, ProcessId, Remote, Unlink};

/// Longest single sleep inside a blocking wait. Wake-ups are delivered
/// explicitly, so this only bounds the damage of a transport that loses one.
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// Spinning passes per clock read in a blocking wait.
const SPINS_PER_CLOCK: u32 = 8;

/// Spinning passes per look under the engine lock in a blocking wait when
/// nothing moved the wake epoch ([`NiCore::epoch`]): a backstop only.
const SPINS_PER_LOOK: u32 = 256;

/// How a network interface is set up.
#[derive(Clone, Copy, Debug)]
pub struct NiConfig {
    /// This process's id; both fields must be concrete.
    pub id: ProcessId,
    /// The job key: every message carries it, and messages with another key
    /// are dropped.
    pub job_key: u64,
    /// Object limits and table sizes.
    pub limits: NiLimits,
    /// How long a thread blocked in [`NetworkInterface::eq_wait`] drives the
    /// transport itself, polling, before it sleeps in the kernel. Polling
    /// avoids a sleep→wake hand-off (tens of µs) on the critical path of a
    /// round trip; the bound keeps an idle waiter from burning a core.
    pub wait_spin: Duration,
    /// Give the core away (`sched_yield`) between the polling passes of
    /// the spin window instead of spinning in place. For hosts with more
    /// runnable processes than cores: there a spinning waiter holds the
    /// core that the process it waits for needs (4 ranks on 2 cores: an
    /// 8-byte `all_reduce` took 100 µs spinning, 12–16 µs yielding), while
    /// with a core each, yielding only adds a system call per pass.
    pub wait_yield: bool,
    /// How long past [`wait_spin`](Self::wait_spin) a waiter keeps
    /// polling while the transport says a peer is moving this process's
    /// data ([`Nal::peer_moving_our_data`]: a shared-memory receiver
    /// copying a large payload out of our memory), so that the completion
    /// does not have to wake it. A 1 MiB single-copy read takes 90–200 µs,
    /// longer than the spin window: sleeping through each cost 10–20 % of
    /// 1 MiB shared-memory bandwidth (`ptl-bench bandwidth`). Zero turns
    /// this off.
    pub wait_spin_busy: Duration,
    /// With a progress thread: a test for completion or a probe
    /// ([`NetworkInterface::poll_test`]) makes the transport's
    /// [`Nal::test_pass`] (over sockets, one pass as a wait that ends at
    /// once), so that an application calling the library more often than
    /// the hand-back delay keeps the transport and the progress thread
    /// stays parked. For progress threads that share their application's
    /// core (a bound rank, or as many ranks as cores): there, woken at
    /// every arrival while the application computes between tests, the
    /// progress thread took two context switches and the application's
    /// time for what the next test would do (COMB, 100 KB messages over
    /// TCP, work between tests 100 µs: about 1.8 switches and 36 µs of the
    /// worker's time per message). False: a test only looks at what the
    /// progress thread delivered, for a progress thread with a core of its
    /// own, which moves the data in parallel. No effect in polling mode,
    /// where a test always drives the transport.
    pub test_drives: bool,
}

impl NiConfig {
    /// Defaults for process `id` in job `job_key`: default limits, 50 µs
    /// spin window, 2 ms more while a peer moves our data, tests that
    /// drive the transport.
    pub fn new(id: ProcessId, job_key: u64) -> Self {
        NiConfig {
            id,
            job_key,
            limits: NiLimits::default(),
            wait_spin: Duration::from_micros(50),
            wait_yield: false,
            wait_spin_busy: Duration::from_millis(2),
            test_drives: true,
        }
    }
}

/// A Portals network interface bound to one transport.
///
/// All methods take `&self` and may be called from any number of threads;
/// wrap the interface in an `Arc` to share it. Dropping it shuts the
/// transport down.
pub struct NetworkInterface {
    core: Arc<NiCore>,
    /// The engine's handle tag, to rebuild handles from their integers.
    tag: u32,
    nal: Arc<dyn Nal>,
    wait_spin: Duration,
    wait_yield: bool,
    wait_spin_busy: Duration,
    test_drives: bool,
}

impl std::fmt::Debug for NetworkInterface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkInterface")
            .field("id", &self.core.id())
            .field("nal", &self.nal.name())
            .finish()
    }
}

/// Leaves the "waiting in the library" state on every exit path.
struct WaiterGuard<'a>(&'a dyn Nal);

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.0.waiter_leave();
    }
}

impl NetworkInterface {
    /// Create an interface (`PtlNIInit`). `make_nal` builds the transport
    /// around the shared core (it keeps the `Arc<NiCore>` to feed incoming
    /// messages to the engine).
    pub fn init<F>(config: NiConfig, make_nal: F) -> Result<Self>
    where
        F: FnOnce(Arc<NiCore>) -> Result<Arc<dyn Nal>>,
    {
        let engine = Engine::new(config.id, config.job_key, config.limits)?;
        let tag = engine.tag();
        let core = Arc::new(NiCore::new(engine));
        let nal = make_nal(core.clone())?;
        core.set_transport(&nal);
        Ok(NetworkInterface {
            core,
            tag,
            nal,
            wait_spin: config.wait_spin,
            wait_yield: config.wait_yield,
            wait_spin_busy: config.wait_spin_busy,
            test_drives: config.test_drives,
        })
    }

    /// This process's id (`PtlGetId`).
    pub fn id(&self) -> ProcessId {
        self.core.id()
    }

    /// The match entry handle of this interface whose
    /// [`MeHandle::as_u64`] is `raw`: for bindings that keep handles as
    /// integers (the C API). Any value is safe: one that names no live
    /// match entry of this interface makes every call fail with
    /// [`PtlError::InvalidHandle`].
    pub fn me_handle_from_u64(&self, raw: u64) -> MeHandle {
        MeHandle::from_parts(self.tag, raw)
    }

    /// The memory descriptor handle whose [`MdHandle::as_u64`] is `raw`
    /// (see [`NetworkInterface::me_handle_from_u64`]).
    pub fn md_handle_from_u64(&self, raw: u64) -> MdHandle {
        MdHandle::from_parts(self.tag, raw)
    }

    /// The event queue handle whose [`EqHandle::as_u64`] is `raw` (see
    /// [`NetworkInterface::me_handle_from_u64`]).
    pub fn eq_handle_from_u64(&self, raw: u64) -> EqHandle {
        EqHandle::from_parts(self.tag, raw)
    }

    /// The job key.
    pub fn job_key(&self) -> u64 {
        self.core.job_key()
    }

    /// The limits in force.
    pub fn limits(&self) -> NiLimits {
        self.core.with_engine(|e| e.limits())
    }

    /// The counters (`PtlNIStatus`).
    pub fn status(&self) -> NiStatus {
        self.core.with_engine(|e| e.status())
    }

    /// Whether waiting threads yield the core between polls
    /// ([`NiConfig::wait_yield`]).
    pub fn wait_yields(&self) -> bool {
        self.wait_yield
    }

    /// The transport's name.
    pub fn nal_name(&self) -> &'static str {
        self.nal.name()
    }

    /// The shared core, for code that drives the engine directly.
    pub fn core(&self) -> &Arc<NiCore> {
        &self.core
    }

    /// The transport.
    pub fn nal(&self) -> &Arc<dyn Nal> {
        &self.nal
    }

    /// Make progress once without blocking. Needed only in polling mode,
    /// where no progress thread exists and nothing moves between calls.
    pub fn progress(&self) -> Result<()> {
        self.nal.progress(None)
    }

    /// Make progress once without blocking if the transport needs calls to
    /// make progress (polling mode); do nothing (cheaply) if it progresses
    /// alone ([`Nal::progresses_alone`]). For a layer's own loops and
    /// housekeeping; an application's test for completion or probe calls
    /// [`NetworkInterface::poll_test`] instead.
    pub fn poll(&self) -> Result<()> {
        if self.nal.progresses_alone() {
            return Ok(());
        }
        self.nal.progress(None)
    }

    /// Make progress once without blocking, for an application's test for
    /// completion or probe (`MPI_Test`, `MPI_Iprobe`): a layer calls this
    /// first, so that a loop of tests finishes in polling mode too. With a
    /// progress thread and [`NiConfig::test_drives`], the transport's
    /// [`Nal::test_pass`]: over sockets a wait that ends at once (this
    /// thread drives the transport once, and the hand-over gate keeps the
    /// progress thread parked for the hand-back delay after it, as after
    /// any wait); over shared memory nothing, its dozing progress thread
    /// being woken for work only. Without `test_drives`, nothing: the
    /// progress thread moves the data.
    pub fn poll_test(&self) -> Result<()> {
        if !self.nal.progresses_alone() {
            return self.nal.progress(None);
        }
        if !self.test_drives {
            return Ok(());
        }
        self.nal.test_pass()
    }

    /// Whether a test drives the transport with a progress thread running
    /// ([`NiConfig::test_drives`]).
    pub fn test_drives(&self) -> bool {
        self.test_drives
    }

    /// The peers the transport gave up on, in order, each once (see
    /// [`Engine::failed_peers`]).
    pub fn failed_peers(&self) -> Vec<ProcessId> {
        self.core.with_engine(|e| e.failed_peers().to_vec())
    }

    /// How many peers the transport gave up on: cheap to poll, so a layer
    /// can call [`NetworkInterface::failed_peers`] only when it changed.
    pub fn failed_peer_count(&self) -> usize {
        self.core.with_engine(|e| e.failed_peers().len())
    }

    // ----- event queues --------------------------------------------------

    /// Allocate an event queue of `capacity` events (`PtlEQAlloc`).
    pub fn eq_alloc(&self, capacity: usize) -> Result<EqHandle> {
        self.core.with_engine(|e| e.eq_alloc(capacity))
    }

    /// Make `eq` flow-controlled (or ordinary again): incoming requests
    /// that would overflow it are held back in the transport instead
    /// (see [`crate::Engine::eq_set_flow_control`]).
    pub fn eq_set_flow_control(&self, eq: EqHandle, on: bool) -> Result<()> {
        self.core.with_engine(|e| e.eq_set_flow_control(eq, on))
    }

    /// Take the oldest event and keep its slot counted against the room of
    /// initiators that are not admitted (see [`crate::Engine::eq_get_kept`]).
    pub fn eq_get_kept(&self, eq: EqHandle) -> Result<Option<Event>> {
        self.core.with_engine(|e| e.eq_get_kept(eq))
    }

    /// Give back `n` kept slots (see [`crate::Engine::eq_release_kept`]).
    pub fn eq_release_kept(&self, eq: EqHandle, n: usize) -> Result<()> {
        self.core.with_engine(|e| e.eq_release_kept(eq, n))
    }

    /// Slots of `eq` kept by its reader (see [`crate::Engine::eq_kept`]).
    pub fn eq_kept(&self, eq: EqHandle) -> Result<usize> {
        self.core.with_engine(|e| e.eq_kept(eq))
    }

    /// Let the requests of `who` (wildcards allowed) past the kept slots of
    /// `eq` (see [`crate::Engine::eq_admit`]).
    pub fn eq_admit(&self, eq: EqHandle, who: ProcessId) -> Result<()> {
        self.core.with_engine(|e| e.eq_admit(eq, who))
    }

    /// Take back one admission of `who` (see [`crate::Engine::eq_unadmit`]).
    pub fn eq_unadmit(&self, eq: EqHandle, who: ProcessId) -> Result<()> {
        self.core.with_engine(|e| e.eq_unadmit(eq, who))
    }

    /// Admit the initiators `me` accepts to `eq` while `me` stays linked
    /// (see [`crate::Engine::me_admit`]).
    pub fn me_admit(&self, me: MeHandle, eq: EqHandle) -> Result<()> {
        self.core.with_engine(|e| e.me_admit(me, eq))
    }

    /// Free an event queue (`PtlEQFree`).
    pub fn eq_free(&self, eq: EqHandle) -> Result<()> {
        self.core.with_engine(|e| e.eq_free(eq))
    }

    /// Take the oldest event without blocking (`PtlEQGet`): `Ok(None)` if the
    /// queue is empty, `Err(EqDropped)` once after an overflow.
    pub fn eq_get(&self, eq: EqHandle) -> Result<Option<Event>> {
        self.core.with_engine(|e| e.eq_get(eq))
    }

    /// Wait for an event (`PtlEQWait`); `timeout` = `None` waits forever.
    /// The waiting thread drives the transport itself for the configured
    /// spin window, then sleeps in the kernel until woken.
    pub fn eq_wait(&self, eq: EqHandle, timeout: Option<Duration>) -> Result<Event> {
        self.eq_poll(&[eq], timeout).map(|(ev, _)| ev)
    }

    /// Wait for an event on any of `eqs` (`PtlEQPoll`); returns the event and
    /// the index in `eqs` of its queue. Queues are checked in order, so an
    /// earlier queue has priority.
    pub fn eq_poll(&self, eqs: &[EqHandle], timeout: Option<Duration>) -> Result<(Event, usize)> {
        let take = |e: &mut Engine| -> Result<Option<(Event, usize)>> {
            for (i, &q) in eqs.iter().enumerate() {
                if let Some(ev) = e.eq_get(q)? {
                    return Ok(Some((ev, i)));
                }
            }
            Ok(None)
        };
        self.wait_until(timeout, take, eqs_ready(eqs)?)
    }

    /// Wait until one of `eqs` has an event (or an overflow to report),
    /// without taking it; returns the index of the first such queue. For
    /// layers that must take events under a lock of their own, in order.
    pub fn eq_block(&self, eqs: &[EqHandle], timeout: Option<Duration>) -> Result<usize> {
        let peek = |e: &mut Engine| -> Result<Option<usize>> {
            for (i, &q) in eqs.iter().enumerate() {
                if e.eq_ready(q)? {
                    return Ok(Some(i));
                }
            }
            Ok(None)
        };
        self.wait_until(timeout, peek, eqs_ready(eqs)?)
    }

    /// The waiting strategy shared by the blocking calls: check; drive the
    /// transport for the spin window; then sleep until woken by news that
    /// makes `ready` true, or the deadline.
    fn wait_until<T>(
        &self,
        timeout: Option<Duration>,
        check: impl Fn(&mut Engine) -> Result<Option<T>>,
        ready: impl Fn(&Engine) -> Result<bool>,
    ) -> Result<T> {
        // The wake epoch, read before each look: news that comes after it
        // moves it again.
        let mut news = self.core.epoch();
        if let Some(hit) = self.core.with_engine(&check)? {
            return Ok(hit);
        }
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        // A deadline inside the spin window ends the spin (and the wait)
        // there: a short timeout is honoured whatever the window.
        let window_from = |t: Instant| match deadline {
            Some(d) => d.min(t + self.wait_spin),
            None => t + self.wait_spin,
        };
        let mut spin_until = window_from(start);
        // Past the window, polling goes on while a peer moves our data
        // (its completion comes within about one copy's time), and for a
        // fresh window once the move is over: the transport's "done" and
        // the completion it releases (an acknowledgment, a reply) are
        // separate messages, and the second may trail the first.
        let busy_until = match deadline {
            Some(d) => d.min(spin_until + self.wait_spin_busy),
            None => spin_until + self.wait_spin_busy,
        };
        let mut moving = false;
        self.nal.waiter_enter();
        let _guard = WaiterGuard(&*self.nal);
        // Spinning reads the clock once every few passes: a pass over a
        // shared-memory transport costs about as much as the clock read
        // (it was a fifth of a spinning waiter's time), and overshooting
        // the spin window by a few passes is harmless.
        // `start` serves the first few passes: no second read right away.
        let mut spins: u32 = 1;
        let mut now = start;
        loop {
            if spins % SPINS_PER_CLOCK == 0 {
                now = Instant::now();
            }
            let mut poll = now < spin_until;
            if !poll && now < busy_until {
                if self.nal.peer_moving_our_data() {
                    (poll, moving) = (true, true);
                } else if moving {
                    moving = false;
                    spin_until = window_from(now);
                    poll = now < spin_until;
                }
            }
            if poll {
                spins = spins.wrapping_add(1);
                self.nal.progress(None)?;
                // Look under the engine lock only when something changed
                // (or, as a backstop, once in a while): at every pass, the
                // spin took the lock the thread moving our data needs as
                // often as it could (see `NiCore::epoch`).
                let now_news = self.core.epoch();
                if now_news != news || spins % SPINS_PER_LOOK == 0 {
                    news = now_news;
                    if let Some(hit) = self.core.with_engine(&check)? {
                        return Ok(hit);
                    }
                }
                if self.wait_yield {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            // Past the window (or a deadline): the clock is read afresh
            // for every sleep decision below.
            now = Instant::now();
            let nap = match deadline {
                Some(d) if now >= d => return Err(PtlError::Timeout),
                Some(d) => (d - now).min(MAX_SLEEP),
                None => MAX_SLEEP,
            };
            let seen = self.core.epoch();
            self.core.sleep_enter();
            let slept = match self.core.with_engine(|e| ready(e)) {
                Ok(false) => self.core.sleep(seen, nap, |t| self.nal.progress(Some(t))),
                Ok(true) => Ok(()),
                Err(e) => Err(e),
            };
            self.core.sleep_leave();
            slept?;
            news = self.core.epoch();
            if let Some(hit) = self.core.with_engine(&check)? {
                return Ok(hit);
            }
        }
    }

    // ----- counting events -----------------------------------------------

    /// Allocate a counting event, both counts zero (`PtlCTAlloc`). A
    /// descriptor counts on it when its description names it
    /// ([`MdDesc::ct`]) and its `CT_*` options select events (see
    /// [`crate::MdOptions::CT_COMM`] and its siblings).
    pub fn ct_alloc(&self) -> Result<CtHandle> {
        self.core.with_engine(|e| e.ct_alloc())
    }

    /// Free a counting event (`PtlCTFree`); its pending triggered
    /// operations are cancelled, threads waiting on it get
    /// `InvalidHandle` (see [`Engine::ct_free`]).
    pub fn ct_free(&self, ct: CtHandle) -> Result<()> {
        self.core.with_engine(|e| e.ct_free(ct))
    }

    /// Cancel the triggered operations waiting for `ct`
    /// (`PtlCTCancelTriggered`).
    pub fn ct_cancel_triggered(&self, ct: CtHandle) -> Result<()> {
        self.core.with_engine(|e| e.ct_cancel_triggered(ct))
    }

    /// The current value of a counting event (`PtlCTGet`).
    pub fn ct_get(&self, ct: CtHandle) -> Result<CtEvent> {
        self.core.with_engine(|e| e.ct_get(ct))
    }

    /// Set a counting event (`PtlCTSet`); triggered operations the new
    /// value reaches are issued.
    pub fn ct_set(&self, ct: CtHandle, value: CtEvent) -> Result<()> {
        let r = self.core.with_engine(|e| e.ct_set(ct, value));
        self.core.send_triggered();
        r
    }

    /// Increment a counting event (`PtlCTInc`), saturating; `by` moves
    /// either count, not both. Triggered operations it releases are issued.
    pub fn ct_inc(&self, ct: CtHandle, by: CtEvent) -> Result<()> {
        let r = self.core.with_engine(|e| e.ct_inc(ct, by));
        self.core.send_triggered();
        r
    }

    /// Wait until `success + failure` of `ct` reaches `threshold`
    /// (`PtlCTWait`) and return its value; `timeout` = `None` waits forever
    /// (`Err(Timeout)` past it). Waits like [`NetworkInterface::eq_wait`]:
    /// drives the transport for the spin window, then sleeps until the
    /// counter moves.
    pub fn ct_wait(
        &self,
        ct: CtHandle,
        threshold: u64,
        timeout: Option<Duration>,
    ) -> Result<CtEvent> {
        self.ct_poll(&[ct], &[threshold], timeout).map(|(v, _)| v)
    }

    /// Wait until one of `cts` reaches its threshold in `thresholds`
    /// (`PtlCTPoll`); returns its value and its index. Earlier counters are
    /// looked at first.
    pub fn ct_poll(
        &self,
        cts: &[CtHandle],
        thresholds: &[u64],
        timeout: Option<Duration>,
    ) -> Result<(CtEvent, usize)> {
        if cts.is_empty() || cts.len() != thresholds.len() {
            return Err(PtlError::InvalidArgument(
                "ct_poll needs one threshold per counting event, and at least one",
            ));
        }
        let check = |e: &mut Engine| -> Result<Option<(CtEvent, usize)>> {
            for (i, (&ct, &t)) in cts.iter().zip(thresholds).enumerate() {
                if let Some(v) = e.ct_reached(ct, t)? {
                    return Ok(Some((v, i)));
                }
            }
            Ok(None)
        };
        let ready = |e: &Engine| -> Result<bool> {
            for (&ct, &t) in cts.iter().zip(thresholds) {
                if e.ct_reached(ct, t)?.is_some() {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        self.wait_until(timeout, check, ready)
    }

    // ----- triggered operations -------------------------------------------

    /// Put `length` bytes of `md` at `local_offset` once `trigger` is
    /// reached (`PtlTriggeredPut`). Whichever thread moves the counter
    /// there — the transport's progress thread, an application thread —
    /// issues it; see [`Engine::triggered_put`] for the state used,
    /// failures and cancellation. Issued at once if the threshold is
    /// already reached.
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_put(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
        trigger: Trigger,
    ) -> Result<()> {
        let r = self.core.with_engine(|e| {
            e.triggered_put(md, local_offset, length, ack, remote, hdr_data, trigger)
        });
        self.core.send_triggered();
        r
    }

    /// Get `length` bytes into `md` at `local_offset` once `trigger` is
    /// reached (`PtlTriggeredGet`).
    pub fn triggered_get(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        remote: &Remote,
        trigger: Trigger,
    ) -> Result<()> {
        let r = self
            .core
            .with_engine(|e| e.triggered_get(md, local_offset, length, remote, trigger));
        self.core.send_triggered();
        r
    }

    /// Increment `ct` by `by` once `trigger` is reached
    /// (`PtlTriggeredCTInc`).
    pub fn triggered_ct_inc(&self, ct: CtHandle, by: CtEvent, trigger: Trigger) -> Result<()> {
        let r = self
            .core
            .with_engine(|e| e.triggered_ct_inc(ct, by, trigger));
        self.core.send_triggered();
        r
    }

    /// Set `ct` to `to` once `trigger` is reached (`PtlTriggeredCTSet`).
    pub fn triggered_ct_set(&self, ct: CtHandle, to: CtEvent, trigger: Trigger) -> Result<()> {
        let r = self
            .core
            .with_engine(|e| e.triggered_ct_set(ct, to, trigger));
        self.core.send_triggered();
        r
    }

    // ----- access control ------------------------------------------------

    /// Set access-control entry `index` (`PtlACEntry`); `None` clears it.
    pub fn ac_entry(&self, index: u32, entry: Option<AcEntry>) -> Result<()> {
        self.core.with_engine(|e| e.ac_entry(index, entry))
    }

    // ----- match entries -------------------------------------------------

    /// Create a match entry at the head (`Before`) or tail (`After`) of a
    /// portal's match list (`PtlMEAttach`).
    pub fn me_attach(
        &self,
        pt: PortalIndex,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
        pos: Position,
    ) -> Result<MeHandle> {
        self.core
            .with_engine(|e| e.me_attach(pt, match_id, match_bits, ignore_bits, unlink, pos))
    }

    /// Create a match entry on a portal index with an empty list
    /// (`PtlMEAttachAny`).
    pub fn me_attach_any(
        &self,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
    ) -> Result<(PortalIndex, MeHandle)> {
        self.core
            .with_engine(|e| e.me_attach_any(match_id, match_bits, ignore_bits, unlink))
    }

    /// Create a match entry before or after `base` (`PtlMEInsert`).
    pub fn me_insert(
        &self,
        base: MeHandle,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
        pos: Position,
    ) -> Result<MeHandle> {
        self.core
            .with_engine(|e| e.me_insert(base, match_id, match_bits, ignore_bits, unlink, pos))
    }

    /// Unlink a match entry and its descriptor (`PtlMEUnlink`), returning the
    /// descriptor's owned memory.
    pub fn me_unlink(&self, me: MeHandle) -> Result<Option<Vec<u8>>> {
        let r = self.core.with_engine(|e| e.me_unlink(me));
        self.core.send_triggered();
        r
    }

    /// The match entries of a portal, head first.
    pub fn match_list(&self, pt: PortalIndex) -> Result<Vec<MeHandle>> {
        self.core.with_engine(|e| e.match_list(pt))
    }

    // ----- memory descriptors --------------------------------------------

    /// Attach a descriptor that owns `buf` to a match entry
    /// (`PtlMDAttach`). Get the buffer back with
    /// [`NetworkInterface::md_unlink`].
    pub fn md_attach(
        &self,
        me: MeHandle,
        desc: &MdDesc,
        buf: Vec<u8>,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        self.core
            .with_engine(|e| e.md_attach(me, desc, buf, unlink))
    }

    /// Bind a descriptor that owns `buf`, for initiating operations
    /// (`PtlMDBind`).
    pub fn md_bind(&self, desc: &MdDesc, buf: Vec<u8>, unlink: Unlink) -> Result<MdHandle> {
        self.core.with_engine(|e| e.md_bind(desc, buf, unlink))
    }

    /// Attach a descriptor over caller memory, for zero-copy use.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and must not be
    /// read, written, moved or freed by anyone else, from this call until the
    /// descriptor is unlinked: by [`NetworkInterface::md_unlink`] or
    /// [`NetworkInterface::me_unlink`] returning `Ok`, by an `Unlink` event,
    /// or by dropping the interface. Regions of it may be read while attached
    /// only where no transfer is in progress, which the caller must know from
    /// the events it has seen.
    pub unsafe fn md_attach_raw(
        &self,
        me: MeHandle,
        desc: &MdDesc,
        ptr: *mut u8,
        len: usize,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        unsafe { self.core.md_attach_raw(me, desc, ptr, len, unlink) }
    }

    /// Bind a descriptor over caller memory, for zero-copy sends and gets.
    ///
    /// # Safety
    /// As for [`NetworkInterface::md_attach_raw`].
    pub unsafe fn md_bind_raw(
        &self,
        desc: &MdDesc,
        ptr: *mut u8,
        len: usize,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        self.core
            .with_engine(|e| unsafe { e.md_bind_raw(desc, ptr, len, unlink) })
    }

    /// Attach a descriptor owning the segments `segs` to a match entry
    /// (`PTL_MD_IOVEC`): one logical buffer, their concatenation; see
    /// [`Engine::md_attach_iovec`](crate::Engine::md_attach_iovec). Take the
    /// segments back with [`NetworkInterface::md_unlink_iovec`].
    pub fn md_attach_iovec(
        &self,
        me: MeHandle,
        desc: &MdDesc,
        segs: Vec<Vec<u8>>,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        self.core
            .with_engine(|e| e.md_attach_iovec(me, desc, segs, unlink))
    }

    /// Bind a descriptor owning the segments `segs` (`PTL_MD_IOVEC`).
    pub fn md_bind_iovec(
        &self,
        desc: &MdDesc,
        segs: Vec<Vec<u8>>,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        self.core
            .with_engine(|e| e.md_bind_iovec(desc, segs, unlink))
    }

    /// Attach a descriptor over a list of caller segments (`PTL_MD_IOVEC`,
    /// zero-copy: a storage layer's page list, a strided datatype). The
    /// list itself is copied; the engine keeps no reference to `list`.
    ///
    /// The list is checked before anything else
    /// ([`crate::error::IovecError`]: too many segments, an empty or null
    /// one, lengths overflowing): a refused list is never accessed, so the
    /// requirements below apply only to a list that is accepted.
    ///
    /// # Safety
    /// Every segment must meet the requirements of
    /// [`NetworkInterface::md_attach_raw`], and the segments must not
    /// overlap one another.
    pub unsafe fn md_attach_iovec_raw(
        &self,
        me: MeHandle,
        desc: &MdDesc,
        list: &[Iovec],
        unlink: Unlink,
    ) -> Result<MdHandle> {
        self.core.with_engine(|e| {
            let mem = e.raw_iovec(list)?;
            e.md_attach_mem(me, desc, mem, unlink)
        })
    }

    /// Bind a descriptor over a list of caller segments, for zero-copy
    /// gathered sends and scattered gets.
    ///
    /// # Safety
    /// As for [`NetworkInterface::md_attach_iovec_raw`].
    pub unsafe fn md_bind_iovec_raw(
        &self,
        desc: &MdDesc,
        list: &[Iovec],
        unlink: Unlink,
    ) -> Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        self.core
            .with_engine(|e| unsafe { e.md_bind_iovec_raw(desc, list, unlink) })
    }

    /// Unlink a descriptor and take back its owned memory as a list of
    /// buffers: an iovec descriptor's segments, or an ordinary
    /// descriptor's one buffer (see
    /// [`Engine::md_unlink_iovec`](crate::Engine::md_unlink_iovec)).
    pub fn md_unlink_iovec(&self, md: MdHandle) -> Result<Option<Vec<Vec<u8>>>> {
        self.core.with_engine(|e| e.md_unlink_iovec(md))
    }

    /// Unlink a descriptor (`PtlMDUnlink`) and take back its owned memory.
    /// Works once on a descriptor that unlinked itself, to take the memory
    /// back. `Err(MdInUse)` while a transfer uses the memory.
    pub fn md_unlink(&self, md: MdHandle) -> Result<Option<Vec<u8>>> {
        let r = self.core.with_engine(|e| e.md_unlink(md));
        // Its failed triggered operations may have released others.
        self.core.send_triggered();
        r
    }

    /// True while a transfer reads or writes the descriptor's memory (see
    /// [`Engine::md_busy`](crate::Engine::md_busy)).
    pub fn md_busy(&self, md: MdHandle) -> Result<bool> {
        self.core.with_engine(|e| e.md_busy(md))
    }

    /// Replace a descriptor's description iff `test_eq` is empty
    /// (`PtlMDUpdate`); returns the previous state.
    pub fn md_update(
        &self,
        md: MdHandle,
        new: Option<&MdDesc>,
        test_eq: Option<EqHandle>,
    ) -> Result<MdSnapshot> {
        self.core.with_engine(|e| e.md_update(md, new, test_eq))
    }

    /// Copy bytes out of a descriptor (no transfer may be using them).
    pub fn md_read(&self, md: MdHandle, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.core.with_engine(|e| e.md_read(md, offset, dst))
    }

    /// Copy bytes into a descriptor (no transfer may be using them).
    pub fn md_write(&self, md: MdHandle, offset: u64, src: &[u8]) -> Result<()> {
        self.core.with_engine(|e| e.md_write(md, offset, src))
    }

    // ----- data movement -------------------------------------------------

    /// Put all of `md` (`PtlPut`).
    pub fn put(&self, md: MdHandle, ack: AckReq, remote: &Remote, hdr_data: u64) -> Result<()> {
        let out = self
            .core
            .with_engine(|e| e.put(md, ack, remote, hdr_data))?;
        self.nal.send(out);
        // A self-send may have released triggered operations.
        self.core.send_triggered();
        Ok(())
    }

    /// Put part of `md` (`PtlPutRegion`).
    pub fn put_region(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
    ) -> Result<()> {
        let out = self
            .core
            .with_engine(|e| e.put_region(md, local_offset, length, ack, remote, hdr_data))?;
        self.nal.send(out);
        // A self-send may have released triggered operations.
        self.core.send_triggered();
        Ok(())
    }

    /// Get into all of `md` (`PtlGet`).
    pub fn get(&self, md: MdHandle, remote: &Remote) -> Result<()> {
        let out = self.core.with_engine(|e| e.get(md, remote))?;
        self.nal.send(out);
        // A self-send may have released triggered operations.
        self.core.send_triggered();
        Ok(())
    }

    /// Get into part of `md` (`PtlGetRegion`).
    pub fn get_region(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        remote: &Remote,
    ) -> Result<()> {
        let out = self
            .core
            .with_engine(|e| e.get_region(md, local_offset, length, remote))?;
        self.nal.send(out);
        // A self-send may have released triggered operations.
        self.core.send_triggered();
        Ok(())
    }

    /// Atomic swap (`PtlGetPut`); see [`Engine::get_put`].
    pub fn get_put(
        &self,
        get_md: MdHandle,
        put_md: MdHandle,
        remote: &Remote,
        hdr_data: u64,
    ) -> Result<()> {
        let out = self
            .core
            .with_engine(|e| e.get_put(get_md, put_md, remote, hdr_data))?;
        self.nal.send(out);
        // A self-send may have released triggered operations.
        self.core.send_triggered();
        Ok(())
    }
}

/// The sleeping test of the event-queue waits: some queue of `eqs` has an
/// event (or an overflow to report).
fn eqs_ready(eqs: &[EqHandle]) -> Result<impl Fn(&Engine) -> Result<bool> + '_> {
    if eqs.is_empty() {
        return Err(PtlError::InvalidArgument(
            "waiting needs at least one queue",
        ));
    }
    Ok(move |e: &Engine| -> Result<bool> {
        for &q in eqs {
            if e.eq_ready(q)? {
                return Ok(true);
            }
        }
        Ok(false)
    })
}

pub(crate) fn check_raw(ptr: *mut u8, len: usize) -> Result<()> {
    if ptr.is_null() && len > 0 {
        return Err(PtlError::InvalidArgument(
            "null pointer with a non-zero length",
        ));
    }
    if len > isize::MAX as usize {
        return Err(PtlError::InvalidArgument("region longer than isize::MAX"));
    }
    Ok(())
}

impl Drop for NetworkInterface {
    fn drop(&mut self) {
        self.nal.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outbound;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;

    /// A transport that counts the spinning waiter's passes and, at pass
    /// `news_at`, says there is news (as an engine call that posted an
    /// event would).
    struct CountingNal {
        core: Arc<NiCore>,
        passes: AtomicU32,
        news_at: u32,
    }

    impl Nal for CountingNal {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn send(&self, _msg: Outbound) {}
        fn progress(&self, timeout: Option<Duration>) -> Result<()> {
            match timeout {
                None => {
                    if self.passes.fetch_add(1, Ordering::SeqCst) + 1 == self.news_at {
                        self.core.wake_sleepers();
                    }
                }
                Some(t) => std::thread::sleep(t.min(Duration::from_millis(1))),
            }
            Ok(())
        }
        fn wake(&self) {}
    }

    /// An interface over a [`CountingNal`] whose waiters spin `spin`.
    fn interface(spin: Duration, news_at: u32) -> (NetworkInterface, Arc<CountingNal>) {
        let mut cfg = NiConfig::new(ProcessId::new(1, 1), 7);
        cfg.wait_spin = spin;
        cfg.wait_spin_busy = Duration::ZERO;
        let made: Arc<OnceLock<Arc<CountingNal>>> = Arc::new(OnceLock::new());
        let keep = made.clone();
        let ni = NetworkInterface::init(cfg, move |core| {
            let nal = Arc::new(CountingNal {
                core,
                passes: AtomicU32::new(0),
                news_at,
            });
            let _ = keep.set(nal.clone());
            Ok(nal as Arc<dyn Nal>)
        })
        .expect("interface");
        let nal = made.get().expect("transport built").clone();
        (ni, nal)
    }

    #[test]
    fn a_spinning_waiter_looks_under_the_engine_lock_only_at_news_or_as_a_backstop() {
        let (ni, nal) = interface(Duration::from_millis(20), 0);
        let looks = AtomicU32::new(0);
        let r = ni.wait_until(
            Some(Duration::from_millis(25)),
            |_| -> Result<Option<()>> {
                looks.fetch_add(1, Ordering::SeqCst);
                Ok(None)
            },
            |_| Ok(false),
        );
        assert!(matches!(r, Err(PtlError::Timeout)), "{r:?}");
        let (passes, looks) = (nal.passes.load(Ordering::SeqCst), looks.into_inner());
        assert!(
            passes >= 2 * SPINS_PER_LOOK,
            "the waiter spun only {passes} passes"
        );
        // The first look, one per backstop period, and those after sleeping.
        let most = 1 + passes / SPINS_PER_LOOK + 30;
        assert!(
            looks <= most,
            "{looks} looks under the engine lock in {passes} spinning passes"
        );
    }

    /// The first thread to find an engine call's news after that call
    /// releases the lock must find the epoch moved: a reader that skips
    /// the lock while the epoch reads the same (a spinning waiter, the MPI
    /// library's drain) would otherwise skip news a look already showed
    /// it, and go round again until the poster got the CPU back. The
    /// waker is that first thread here: the engine call below also queues
    /// a message for the transport, and the waker runs right after the
    /// lock is released.
    #[test]
    fn an_engine_call_that_posts_moves_the_epoch_before_it_releases_the_lock() {
        let (ni, _nal) = interface(Duration::ZERO, 0);
        let ct = ni.ct_alloc().expect("counting event");
        let core = ni.core().clone();
        let at_wake = Arc::new(std::sync::Mutex::new(Vec::new()));
        let weak = Arc::downgrade(&core);
        let log = at_wake.clone();
        core.set_waker(Box::new(move || {
            if let Some(c) = weak.upgrade() {
                let count = c.with_engine(|e| e.ct_get(ct)).map(|v| v.success);
                if let Ok(mut l) = log.lock() {
                    l.push((c.epoch(), count));
                }
            }
        }));
        let before = core.epoch();
        core.with_engine(|e| {
            e.ct_inc(
                ct,
                CtEvent {
                    success: 1,
                    failure: 0,
                },
            )?;
            e.defer_outbound(Outbound {
                header: crate::wire::tests::sample(),
                payload: crate::engine::Payload::None,
                token: None,
            });
            Ok::<(), PtlError>(())
        })
        .expect("engine call");
        let seen = at_wake.lock().map(|l| l.clone()).unwrap_or_default();
        let (epoch, count) = seen
            .into_iter()
            .next()
            .expect("the queued message woke the transport");
        assert_eq!(count, Ok(1), "the waker found the counter changed");
        assert_ne!(
            epoch, before,
            "the waker found the news under the lock, and the epoch not moved"
        );
    }

    #[test]
    fn news_makes_a_spinning_waiter_look_at_its_next_pass() {
        let news_at = 100;
        let (ni, nal) = interface(Duration::from_secs(5), news_at);
        let r = ni.wait_until(
            Some(Duration::from_secs(5)),
            |_| -> Result<Option<u32>> {
                let seen = nal.passes.load(Ordering::SeqCst);
                Ok((seen >= news_at).then_some(seen))
            },
            |_| Ok(false),
        );
        assert_eq!(r.expect("the news ends the wait"), news_at);
    }
}
