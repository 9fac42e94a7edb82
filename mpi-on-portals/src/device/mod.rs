//! The MPI device: point-to-point protocols on Portals, as seed 001 builds
//! them.
//!
//! **Portal table.** Three entries (§3.1): the *receive* portal, where every
//! message is put; the *read* portal, where a long send exposes its buffer
//! for the receiver to get when the message arrived unexpected; the *ack*
//! portal, where a synchronous send waits for the receiver's explicit
//! acknowledgment.
//!
//! Portals 3 (departure notices) and 4 (pause requests) are extensions
//! below; portal 5 holds each communicator's persistent entries of the
//! non-blocking collectives and this process's done entry (`nbc.rs`).
//!
//! **Receive portal match list** (§3.4, §5, Figs. 8–9):
//! posted receives | *mark* | short-unexpected ×3 (high-water-mark buffers)
//! | long-unexpected (zero bytes, truncating, acknowledging) | overflow.
//!
//! * A receive is posted as an *inactive* descriptor in front of the mark,
//!   then the saved unexpected messages are searched, then the descriptor is
//!   activated with `md_update` only if the unexpected event queue is still
//!   empty — otherwise the new arrivals are examined first. This closes the
//!   race between posting and arrival.
//! * Short unexpected messages land one after another in 2 MB buffers whose
//!   high-water mark is the eager limit; a full buffer unlinks itself, is
//!   drained as its messages are received, and is re-attached at the end of
//!   the short-unexpected entries.
//! * **No short message is lost; memory stays bounded.** A standard or
//!   synchronous short send keeps its buffer on the read portal (header
//!   data: unique bits with [`HDR_READ`], plus [`HDR_SYNC`] for a
//!   synchronous one) until it knows the receiver holds the bytes. Posted
//!   receives and unexpected buffers acknowledge the length: a standard send
//!   is then done. When every buffer is full and the pool is at its cap
//!   (`PTL_MPI_UNEXPECTED_MAX` × `PTL_MPI_UNEXPECTED_BUFFER`), the final
//!   *overflow* entry takes the message as zero bytes and acknowledges zero,
//!   exactly like the long-unexpected entry: the envelope is saved in order
//!   and the receiver gets the data from the sender's read portal when a
//!   receive matches it. Flow control is the senders' buffers staying lent,
//!   never a drop. A synchronous short send completes on the receiver's
//!   explicit acknowledgment, sent once the data is here in every case (an
//!   engine acknowledgment could not tell a posted receive from a buffer;
//!   its put asks one only for the send window, below).
//!   Ready sends stay plain eager puts. Within [`MpiConfig::eager_copy`]
//!   bytes, a short standard send exposes a library copy (an internal
//!   request, like a buffered send) and completes at once, so the
//!   acknowledgment's round trip stays off the caller's path.
//! * **Envelopes are capped** ([`MpiConfig::envelopes`]): the unexpected
//!   queue keeps a slot per saved envelope (`saved.rs`), so senders beyond
//!   the cap wait in their transports; whoever this process waits for — a
//!   posted receive's source, a send's target, a pull's source, a probe's
//!   source — is admitted past the cap, so the messages in front of the
//!   awaited one get in and no wait deadlocks (docs/ARCHITECTURE.md).
//! * **Send windows and pauses** ([`MpiConfig::send_window`]): at most a
//!   window of unacknowledged point-to-point puts per target are in its
//!   stream, the rest wait here in order (`window.rs`); collective messages
//!   overtake them. A receiver whose collective wait lets a sender past its
//!   cap asks it to pause until it has room or waits for that sender's
//!   point-to-point messages (`throttle.rs`). So a collective wait behind a
//!   flood admits a window, not the flood.
//! * Long messages are put eagerly with an acknowledgment requested. Expected,
//!   the acknowledgment carries the length and the send is done; unexpected,
//!   the long-unexpected entry accepts zero bytes and the receiver later gets
//!   the data from the sender's read portal. To a target where a long
//!   message met no posted receive, the next long sends are *announced*
//!   instead (`announce.rs`): a put of no data whose header data carries the
//!   length, always followed by the receiver's get — from a posted receive
//!   at once, from the saved envelope when a receive matches it — so the
//!   data crosses once.
//! * Synchronous sends complete on the target's acknowledgment (expected) or
//!   on the receiver's explicit zero-length put to the ack portal
//!   (unexpected). The explicit acknowledgment lands on a zero-byte
//!   descriptor of its own, not on the send buffer (docs/ARCHITECTURE.md).
//!
//! Extensions, each documented where it lives: the unexpected-buffer pool
//! grows (up to a cap) while fewer than two buffers are *active* (not past
//! their high-water mark — a buffer stops matching long before its unlink
//! is seen), and is replenished by an unlink hook on whichever thread
//! filled a buffer, so also while the application computes; the final
//! *overflow* entry turns short messages beyond the cap into pulls (above);
//! a message received into a zero-length buffer releases a sender waiting
//! for a get with a zero-length get.
//!
//! **Soundness.** A request is complete only when its result is known *and*
//! it holds nothing in the engine: every wait returns only then, also on
//! errors (a library-wide error aborts the waited-for request — unlinks its
//! entry and descriptors, retrying while a transfer uses them — before it is
//! reported). So a caller never gets back a buffer the engine can still
//! write or read.
//!
//! **Failures.** Peers the transport gave up on are dead: every request
//! with one of them fails with [`MpiError::PeerFailed`], including the
//! passive ones the engine cannot fail (a posted receive, a send waiting for
//! the peer's get or acknowledgment), and so does every receive or probe
//! from any source on a communicator with a dead member (ULFM's
//! `MPI_ERR_PROC_FAILED_PENDING`), once no saved message matches it.

// Keys are context ids and ranks this process chose or was given by its
// launcher: Fx hashing (a multiply) instead of SipHash, which cost about
// 120 instructions per lookup, five lookups per short collective.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use portals::{
    AckReq, EqHandle, Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, MeHandle,
    NetworkInterface, NiCore, PortalIndex, Position, ProcessId, PtlError, Remote, Threshold,
    Unlink,
};
use portals_runtime::Job;
use slab::Slab;

mod announce;
mod completion;
mod config;
mod events;
mod failure;
mod intake;
mod mem;
mod nbc;
mod pool;
mod probe;
mod pull;
mod recv;
mod saved;
mod send;
mod slots;
mod state;
mod throttle;
mod window;

use state::*;
pub(crate) use state::{Mode, OnDone, ReqId};

use announce::Announcing;
use completion::released;
pub use config::{MpiConfig, MpiStats};
use failure::{dead_member, dead_peer, gone, gone_any};
pub(crate) use mem::Mem;
pub(crate) use nbc::FlatPlan;
use pool::{Pool, Unexpected};
use saved::SavedEnvelopes;
pub(crate) use slots::SlotOp;
use window::SendWindows;

use crate::bits::{self, PROTO_LONG, PROTO_SHORT};
use crate::error::{MpiError, Result};
use crate::status::Status;

/// Bytes from which a pending non-blocking send or receive asks for the
/// progress thread at once ([`Device::bulk_post`]): overlap is asked of
/// transfers of 64 KB and more (issue 22), and below that a message sits
/// whole in the sockets' buffers while the application computes.
pub(crate) const BULK_POSTED: usize = 64 << 10;

/// The receive portal: every message is put here.
pub(crate) const RECV_PT: PortalIndex = PortalIndex(0);
/// The read portal: long sends expose their buffers here.
pub(crate) const READ_PT: PortalIndex = PortalIndex(1);
/// The ack portal: synchronous sends wait for explicit acknowledgments here.
pub(crate) const ACK_PT: PortalIndex = PortalIndex(2);
/// The departure portal: a finalizing process puts zero bytes here on every
/// other process, so that what they wait for from it fails instead of
/// hanging (see `failure`).
pub(crate) const DEPART_PT: PortalIndex = PortalIndex(3);
/// The flow portal: a receiver at its envelope cap asks a sender to pause
/// or resume its point-to-point sends here (see `throttle.rs`).
pub(crate) const FLOW_PT: PortalIndex = PortalIndex(4);

/// `user_ptr` of the long-unexpected descriptor.
const LONG_UNEXPECTED: u64 = u64::MAX;
/// `user_ptr` of the overflow descriptor.
const OVERFLOW: u64 = u64::MAX - 1;
/// `user_ptr` of the departure descriptor (events on the unexpected queue,
/// after every message the departed process sent before).
const DEPARTED: u64 = u64::MAX - 2;
/// `user_ptr` of the flow descriptor (pause and resume requests, on the
/// request queue).
const FLOW: u64 = u64::MAX - 3;

/// Header-data flag of a short message: the send is synchronous, its
/// sender waits for an explicit acknowledgment on its ack portal (match
/// bits: the whole header data).
pub(crate) const HDR_SYNC: u64 = 1 << 63;
/// Header-data flag of a short message: the sender exposes the data on its
/// read portal (match bits: the whole header data) until it knows the
/// receiver holds it, so a receiver that had no room for it gets it later.
pub(crate) const HDR_READ: u64 = 1 << 62;
/// The unique part of header data (below the flags, including those of
/// announced long sends: `announce.rs`).
const HDR_UNIQUE: u64 = (1 << 60) - 1;

/// How long one blocking wait sleeps before re-checking its request. Another
/// thread may have consumed the event that completed it.
const WAIT_SLICE: Duration = Duration::from_millis(1);

/// How many emptied eager copies are kept for reuse.
const SPARE_COPIES: usize = 64;
/// The largest eager copy kept for reuse: with [`SPARE_COPIES`], what the
/// spares may hold (256 KiB) stays small beside the unexpected buffers.
const SPARE_COPY_BYTES: usize = 4096;

/// Words of the context-id bitmap (13 bits of context: 8192 ids).
pub(crate) const CTX_WORDS: usize = (crate::bits::MAX_CONTEXT as usize + 1) / 64;

/// What the device shares with the unlink hook it installs in the network
/// interface (which may run on the transport's progress thread): the state
/// and what the unexpected-buffer pool needs.
struct Shared {
    st: Mutex<State>,
    /// The hook found the state locked: whoever holds it services the
    /// unexpected queue when it unlocks.
    service: AtomicBool,
    /// The unexpected-message buffers. A lock of their own, taken after the
    /// state's (never before) and held only around engine calls, so that
    /// the unlink hook can add room even while an application thread holds
    /// the state: that thread may be preempted by the very progress thread
    /// that keeps depositing (both run on one core when ranks are bound),
    /// and a hook that could only defer would let every buffer fill up.
    pool: Mutex<Pool>,
    cfg: MpiConfig,
    unexp_eq: EqHandle,
    /// Events of posted receives longer than the eager limit (the ones an
    /// announced message can fill), watched by the unlink hook so that an
    /// announcement's pull starts while the application computes
    /// (`pull.rs`).
    pull_eq: EqHandle,
    /// The request queue, where a pull's reply reports.
    req_eq: EqHandle,
    long_me: MeHandle,
}

/// An RMA window's count in [`State::exposures`], from
/// [`Device::exposure`] until dropped.
pub(crate) struct Exposure {
    dev: Arc<Device>,
}

impl Drop for Exposure {
    fn drop(&mut self) {
        let mut st = self.dev.lock();
        st.exposures = st.exposures.saturating_sub(1);
    }
}

/// The locked state. Unlocking looks at [`Shared::service`], so that work
/// an unlink hook could not do while the lock was held is done now.
struct StateGuard<'a> {
    sh: &'a Shared,
    core: &'a NiCore,
    g: ManuallyDrop<MutexGuard<'a, State>>,
}

impl Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.g
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.g
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        // Slots of envelopes taken while locked go back to the engine
        // before anyone can wait on the state again.
        self.sh.flush_kept(self.core, &mut self.g);
        // Every change of what is under way happens under this lock, so the
        // interface hears of it when the lock is let go: before the
        // application can leave the library with it.
        let quiet = self.g.quiet();
        if quiet != self.g.quiet_told {
            self.g.quiet_told = quiet;
            self.core.set_app_quiet(quiet);
        }
        // SAFETY: `g` is dropped exactly once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.g) };
        self.sh.after_unlock(self.core);
    }
}

/// Attach, at the end of `pt`'s list, an entry for anyone with match and
/// ignore bits `bits` and a zero-byte, truncating, acknowledging
/// descriptor whose events go to `eq` with `user_ptr`: a message that lands
/// here is an envelope or a notice, its data (if any) stays with its
/// sender.
fn attach_sink(
    ni: &NetworkInterface,
    pt: PortalIndex,
    bits: (u64, u64),
    eq: EqHandle,
    user_ptr: u64,
) -> Result<MeHandle> {
    let me = ni
        .me_attach(
            pt,
            ProcessId::ANY,
            bits.0,
            bits.1,
            Unlink::Retain,
            Position::After,
        )
        .map_err(ptl)?;
    ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
            .eq(eq)
            .user_ptr(user_ptr),
        Vec::new(),
        Unlink::Retain,
    )
    .map_err(ptl)?;
    Ok(me)
}

fn ptl(e: PtlError) -> MpiError {
    MpiError::Portals(e)
}

impl Shared {
    fn lock<'a>(&'a self, core: &'a NiCore) -> StateGuard<'a> {
        StateGuard {
            sh: self,
            core,
            g: ManuallyDrop::new(self.st.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Give the engine back the unexpected-queue slots of envelopes (and
    /// events) the state let go of (see `saved.rs`); which may let held
    /// senders in again.
    fn flush_kept(&self, core: &NiCore, st: &mut State) {
        let n = st.saved.take_released();
        if n > 0 {
            if let Err(e) = core.with_engine(|e| e.eq_release_kept(self.unexp_eq, n)) {
                st.fatal.get_or_insert(ptl(e));
            }
        }
    }

    fn after_unlock(&self, core: &NiCore) {
        // Pairs with the fence in `service_unexpected`: either the hook's
        // try_lock saw the lock free, or this load sees its flag.
        fence(Ordering::SeqCst);
        if self.service.load(Ordering::SeqCst) {
            self.service_unexpected(core);
        }
    }
}

/// The MPI device of one process.
pub(crate) struct Device {
    // Declared first so it is dropped first: the interface (and its progress
    // thread) must be gone before the memory it writes into.
    job: Job,
    pub(crate) cfg: MpiConfig,
    sh: Arc<Shared>,
    req_eq: EqHandle,
    /// See [`Shared::pull_eq`].
    pull_eq: EqHandle,
    unexp_eq: EqHandle,
    mark: MeHandle,
    /// The zero-byte source of the non-blocking collectives' notices.
    nbc_md: MdHandle,
    /// Short collectives on slots run through one member
    /// ([`slots::SlotOp::flat`]): the same at every rank.
    flat_collectives: bool,
    /// A blocking send from an eager copy skipped its transport pass, and
    /// no pass has been made since: the next such send makes one
    /// ([`Device::send_blocking`]). Cleared by every pass of the device.
    pass_owed: AtomicBool,
    /// [`State::acked_copies`] may be non-empty: read without the state
    /// lock by [`Device::block`], which releases them before it waits.
    copies_acked: AtomicBool,
}

impl Device {
    pub(crate) fn new(job: Job, cfg: MpiConfig) -> Result<Device> {
        let cfg = cfg.checked()?;
        let ni = job.ni();
        let req_eq = ni.eq_alloc(cfg.eq_events).map_err(ptl)?;
        let pull_eq = ni.eq_alloc(cfg.eq_events).map_err(ptl)?;
        let unexp_eq = ni.eq_alloc(cfg.envelopes).map_err(ptl)?;
        // Flow control: a message that would overflow a queue waits in the
        // transport (its sender held back) until a drain makes room, so a
        // flood of envelopes never turns into `EventQueueOverflow`.
        for eq in [req_eq, pull_eq, unexp_eq] {
            ni.eq_set_flow_control(eq, true).map_err(ptl)?;
        }
        // The mark has no descriptor: it matches nothing and separates the
        // posted receives from the unexpected buffers.
        let mark = ni
            .me_attach(
                RECV_PT,
                ProcessId::ANY,
                0,
                0,
                Unlink::Retain,
                Position::After,
            )
            .map_err(ptl)?;
        let long_me = attach_sink(
            ni,
            RECV_PT,
            (bits::encode(PROTO_LONG, 0, 0, 0), !bits::PROTO_MASK),
            unexp_eq,
            LONG_UNEXPECTED,
        )?;
        // Overflow: short messages no buffer could take (the pool at its
        // cap). Zero bytes, truncating and acknowledging, like the
        // long-unexpected entry: the envelope is kept, the sender learns
        // from the zero-length acknowledgment that the data was not taken,
        // and the receiver gets it from the sender's read portal when the
        // receive is posted. Flow control, not loss: memory here stays
        // bounded by the pool's cap.
        attach_sink(
            ni,
            RECV_PT,
            (bits::encode(PROTO_SHORT, 0, 0, 0), !bits::PROTO_MASK),
            unexp_eq,
            OVERFLOW,
        )?;
        // Departure notices: zero bytes from anyone, on the unexpected
        // queue so that they follow the sender's earlier messages.
        attach_sink(ni, DEPART_PT, (0, u64::MAX), unexp_eq, DEPARTED)?;
        // Pause and resume requests (`throttle.rs`), on the request queue
        // (match bits: which).
        attach_sink(ni, FLOW_PT, (0, u64::MAX), req_eq, FLOW)?;
        // Non-blocking collectives' done notices, on the request queue.
        let (_, nbc_md) = nbc::attach_done(ni, req_eq)?;
        let sh = Arc::new(Shared {
            st: Mutex::new(State {
                reqs: Slab::new(),
                next_gen: 1,
                saved: SavedEnvelopes::new(cfg.envelopes),
                paused: Vec::new(),
                windows: SendWindows::new(cfg.send_window, job.size()),
                announce: Announcing::new(cfg.long_announce, job.size()),
                probe_admits: Vec::new(),
                next_bits: 1,
                fatal: None,
                bsend_attached: 0,
                bsend_used: 0,
                copy_used: 0,
                copies_waiting: 0,
                exposures: 0,
                quiet_told: false,
                spare_copies: Vec::with_capacity(SPARE_COPIES),
                stats: MpiStats::default(),
                free_ctx: {
                    let mut f = [u64::MAX; CTX_WORDS];
                    f[0] &= !0b11; // the world's pair
                    f
                },
                releasing: Vec::new(),
                acked_copies: Vec::new(),
                dead: HashSet::default(),
                departed: HashSet::default(),
                departures_new: Vec::new(),
                failures_seen: 0,
                quiet_epoch: None,
                members: HashMap::default(),
                nbc: HashMap::default(),
                segments: HashMap::default(),
            }),
            service: AtomicBool::new(false),
            pool: Mutex::new(Pool::default()),
            cfg: cfg.clone(),
            unexp_eq,
            pull_eq,
            req_eq,
            long_me,
        });
        {
            let mut pool = sh.pool();
            for _ in 0..cfg.unexpected_buffers {
                sh.add_buffer(ni.core(), &mut pool)?;
            }
        }
        // Full buffers are replaced as soon as they unlink, whoever makes
        // progress (seed 001 recycles them at the next MPI call; with a
        // progress thread that call may be far away).
        let hook = sh.clone();
        ni.core()
            .set_unlink_hook(unexp_eq, Box::new(move |core| hook.on_unlink_hook(core)))
            .map_err(ptl)?;
        // And an announcement used up a long posted receive: pull it now.
        ni.core()
            .with_engine(|e| e.add_unlink_watch(pull_eq))
            .map_err(ptl)?;
        let flat_collectives = job.options().coll_flat.unwrap_or(job.oversubscribed());
        let dev = Device {
            job,
            cfg,
            sh,
            req_eq,
            pull_eq,
            unexp_eq,
            mark,
            nbc_md,
            flat_collectives,
            pass_owed: AtomicBool::new(false),
            copies_acked: AtomicBool::new(false),
        };
        // The world's non-blocking-collective entries, before anyone can
        // use them.
        let size = dev.job.size();
        let ranks: Vec<u32> = (0..size).collect();
        dev.nbc_create(0, &ranks, dev.job.rank())?;
        // No message may reach a process before its entries exist.
        dev.job
            .barrier()
            .map_err(|e| MpiError::Init(e.to_string()))?;
        Ok(dev)
    }

    fn ni(&self) -> &NetworkInterface {
        self.job.ni()
    }

    /// Start a non-blocking send or receive of `len` bytes that the
    /// caller hands back to the application (`MPI_Isend`, `MPI_Irecv` and
    /// kin; not one a blocking call waits for at once) by running `post`.
    /// From [`BULK_POSTED`] bytes the transport hears of it
    /// (`portals::Nal::bulk_post_begin`): a progress thread standing aside
    /// for the hand-back delay takes over soon after, unless a wait
    /// follows, so that the transfer moves while the application
    /// computes. Smaller messages travel whole inside the kernel's
    /// buffers anyway.
    pub(crate) fn bulk_post<R>(&self, len: usize, post: impl FnOnce() -> R) -> R {
        if len < BULK_POSTED {
            return post();
        }
        struct End<'a>(&'a dyn portals::Nal);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                self.0.bulk_post_end();
            }
        }
        let nal = self.ni().nal();
        nal.bulk_post_begin();
        let _end = End(&**nal);
        post()
    }

    /// Start a non-blocking collective by running `post`. Its steps are
    /// triggered operations that only a pass over the transport fires, so
    /// whatever its size the transport hears of it as of a bulk post
    /// ([`Device::bulk_post`]): a progress thread standing aside, for a
    /// quiet application's longer hand-back too (`State::quiet`), takes
    /// over soon after unless a wait follows. Without it, a collective
    /// started after a quiet stretch waited for that longer delay.
    pub(crate) fn collective_post<R>(&self, post: impl FnOnce() -> R) -> R {
        self.bulk_post(usize::MAX, post)
    }

    fn core(&self) -> &NiCore {
        self.job.ni().core()
    }

    /// Count an RMA window of this process while the returned guard lives:
    /// others access its memory whenever they like, through this process's
    /// transport, so the application is never quiet meanwhile (see
    /// [`State::quiet`]).
    pub(crate) fn exposure(self: &Arc<Self>) -> Exposure {
        self.lock().exposures += 1;
        Exposure { dev: self.clone() }
    }

    /// Most segments one message's memory may have (the engine's
    /// [`portals::NiLimits::max_iovecs`]).
    pub(crate) fn max_iovecs(&self) -> usize {
        self.ni().limits().max_iovecs
    }

    pub(crate) fn job(&self) -> &Job {
        &self.job
    }

    fn lock(&self) -> StateGuard<'_> {
        self.sh.lock(self.core())
    }

    /// Drive the transport once, without blocking, if it needs calls to make
    /// progress (polling mode); free otherwise. Called without the state
    /// lock, so that an unlink hook run by this progress can take it.
    fn poll(&self) {
        self.pass_owed.store(false, Ordering::Relaxed);
        if let Err(e) = self.ni().poll() {
            self.lock().fatal.get_or_insert(ptl(e));
        }
    }

    /// [`Device::poll`] for the application's tests and probes: with a
    /// progress thread that shares the application's core, the test drives
    /// the transport itself and keeps the progress thread parked
    /// (`portals::NetworkInterface::poll_test`).
    fn poll_test(&self) {
        self.pass_owed.store(false, Ordering::Relaxed);
        if let Err(e) = self.ni().poll_test() {
            self.lock().fatal.get_or_insert(ptl(e));
        }
    }

    /// A request that was just created failed with `e` while being started.
    /// If it holds nothing in the engine any more, forget it and return the
    /// error; otherwise it is returned (its result is the error) and the
    /// caller's wait reports the error once the engine has let go.
    fn fail_started(&self, st: &mut State, id: ReqId, e: MpiError) -> Result<ReqId> {
        self.abort(st, id, e.clone());
        match Self::take_result(st, id) {
            Some(_) => Err(e),
            None => Ok(id),
        }
    }

    fn new_req(&self, st: &mut State, kind: Kind, peer: u32) -> ReqId {
        let gen = st.next_gen;
        st.next_gen = st.next_gen.wrapping_add(1).max(1);
        let idx = st.reqs.insert(Req {
            gen,
            kind,
            detached: false,
            md: None,
            me: None,
            ack_md: None,
            read_me: None,
            empty: false,
            ack_after: None,
            any_ctx: None,
            sent: false,
            acked: None,
            got: false,
            status: None,
            result: None,
            owned: None,
            bsend_len: 0,
            copy_len: 0,
            copy: Vec::new(),
            peer,
            admits: None,
            windowed: false,
            coll: false,
            cts: Vec::new(),
            nbc_mes: Vec::new(),
            nbc_mds: Vec::new(),
            nbc_ctx: None,
            on_done: None,
            announced: false,
        }) as u32;
        ReqId { idx, gen }
    }

    fn check(&self, st: &State) -> Result<()> {
        match &st.fatal {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// This process's free context ids.
    pub(crate) fn free_contexts(&self) -> [u64; CTX_WORDS] {
        self.lock().free_ctx
    }

    /// The lowest pair free in `all` (the AND of every member's map): mark it
    /// used here and return its first id.
    pub(crate) fn take_context_pair(&self, all: &[u64; CTX_WORDS]) -> Result<u16> {
        let mut st = self.lock();
        for id in (0..=crate::bits::MAX_CONTEXT as usize).step_by(2) {
            let (w, b) = (id / 64, id % 64);
            if all[w] >> b & 0b11 == 0b11 {
                st.free_ctx[w] &= !(0b11 << b);
                return Ok(id as u16);
            }
        }
        Err(MpiError::NoContext(format!(
            "all {} context ids are in use by some member; free communicators first",
            crate::bits::MAX_CONTEXT as usize + 1
        )))
    }

    /// Give a context pair back. Unexpected messages still saved for it are
    /// dropped first — a communicator that reuses the ids must not receive
    /// them — and their senders released: a synchronous sender gets its
    /// acknowledgment, a long sender a zero-length get, so neither waits
    /// forever for a receive that cannot come any more.
    pub(crate) fn release_context_pair(&self, id: u16) {
        let id = id as usize & !1;
        if id == 0 || id > crate::bits::MAX_CONTEXT as usize {
            return;
        }
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        let stale = st
            .saved
            .take_if(|u| bits::decode(u.bits).ctx as usize & !1 == id);
        for u in stale {
            tracing::debug!(
                context = id,
                bytes = u.rlength,
                "dropping an unreceived message of a freed communicator"
            );
            if let Some(i) = u.buf {
                if let Err(e) = self.sh.release(self.core(), &mut st, i) {
                    st.fatal.get_or_insert(e);
                }
            }
            let proto = bits::decode(u.bits).proto;
            if proto == PROTO_SHORT && u.hdr_data & HDR_SYNC != 0 {
                self.control(&mut st, u.initiator, ACK_PT, u.hdr_data, false);
            } else if u.buf.is_none() && u.rlength > 0 && waits_for_get(proto, u.hdr_data) {
                self.control(&mut st, u.initiator, READ_PT, u.hdr_data, true);
            }
        }
        st.members.remove(&(id as u16));
        st.members.remove(&(id as u16 + 1));
        // With instances of non-blocking collectives still running, the
        // pair stays taken until the last one finishes.
        if self.nbc_release(&mut st, id as u16) {
            st.free_ctx[id / 64] |= 0b11 << (id % 64);
        }
    }

    /// The protocol counters.
    /// See [`crate::Universe::with_state_locked`].
    #[cfg(feature = "testing")]
    pub(crate) fn with_state_locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let _st = self.lock();
        f()
    }

    pub(crate) fn stats(&self) -> MpiStats {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        let mut stats = st.stats;
        stats.buffers_grown += self.sh.pool().grown_early;
        stats.saved_peak = st.saved.peak() as u64;
        stats.window_waits = st.windows.waited;
        stats.eager_copy_bytes = st.copy_used as u64;
        stats
    }

    /// Finalize's second half: the job-wide barrier, while driving progress
    /// if the transport needs calls for it (polling mode), so that a peer
    /// still finishing its own requests with us is served.
    pub(crate) fn final_barrier(&self) -> Result<()> {
        // What the protocols did, for whoever tunes them
        // (`PTL_LOG=mpi_on_portals=debug`).
        tracing::debug!(stats = ?self.lock().stats, "MPI protocol counters at finalize");
        let barrier = || {
            self.job
                .barrier()
                .map_err(|e| MpiError::Init(format!("finalize barrier: {e}")))
        };
        if self.ni().nal().progresses_alone() {
            return barrier();
        }
        std::thread::scope(|s| {
            let helper = std::thread::Builder::new()
                .name("mpi-finalize".into())
                .spawn_scoped(s, barrier);
            match helper {
                Ok(h) => {
                    while !h.is_finished() {
                        self.poll();
                        {
                            let mut st = self.lock();
                            self.drain(&mut st);
                        }
                        self.block();
                    }
                    h.join()
                        .unwrap_or_else(|_| Err(MpiError::Init("finalize barrier panicked".into())))
                }
                // No thread: a plain barrier (nothing moves meanwhile).
                Err(_) => barrier(),
            }
        })
    }
}

/// True if the sender of a message with protocol `proto` and header data
/// `hdr` waits for a get when its message was taken as zero bytes: a long
/// sender, and a standard short sender whose data is on its read portal (a
/// synchronous one waits for its explicit acknowledgment instead).
fn waits_for_get(proto: u64, hdr: u64) -> bool {
    match proto {
        PROTO_LONG => hdr != 0,
        PROTO_SHORT => hdr & HDR_READ != 0 && hdr & HDR_SYNC == 0,
        _ => false,
    }
}

fn finish_status(s: Status) -> Result<Status> {
    if s.is_truncated() {
        Err(MpiError::Truncated(s))
    } else {
        Ok(s)
    }
}
