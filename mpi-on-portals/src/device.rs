//! The MPI device: point-to-point protocols on Portals, as seed 001 builds
//! them.
//!
//! **Portal table.** Three entries (§3.1): the *receive* portal, where every
//! message is put; the *read* portal, where a long send exposes its buffer
//! for the receiver to get when the message arrived unexpected; the *ack*
//! portal, where a synchronous send waits for the receiver's explicit
//! acknowledgment.
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
//!   never a drop. A synchronous short send asks no engine acknowledgment
//!   (it could not tell a posted receive from a buffer) and completes on the
//!   receiver's explicit one, sent once the data is here in every case.
//!   Ready sends stay plain eager puts.
//! * Long messages are put eagerly with an acknowledgment requested. Expected,
//!   the acknowledgment carries the length and the send is done; unexpected,
//!   the long-unexpected entry accepts zero bytes and the receiver later gets
//!   the data from the sender's read portal.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use portals::{
    AckReq, EqHandle, Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, MeHandle,
    NetworkInterface, NiCore, PortalIndex, Position, ProcessId, PtlError, Remote, Threshold,
    Unlink,
};
use portals_runtime::Job;
use slab::Slab;

use crate::bits::{self, PROTO_LONG, PROTO_SHORT};
use crate::error::{MpiError, Result};
use crate::status::Status;

/// The receive portal: every message is put here.
pub(crate) const RECV_PT: PortalIndex = PortalIndex(0);
/// The read portal: long sends expose their buffers here.
pub(crate) const READ_PT: PortalIndex = PortalIndex(1);
/// The ack portal: synchronous sends wait for explicit acknowledgments here.
pub(crate) const ACK_PT: PortalIndex = PortalIndex(2);

/// `user_ptr` of the long-unexpected descriptor.
const LONG_UNEXPECTED: u64 = u64::MAX;
/// `user_ptr` of the overflow descriptor.
const OVERFLOW: u64 = u64::MAX - 1;

/// Header-data flag of a short message: the send is synchronous, its
/// sender waits for an explicit acknowledgment on its ack portal (match
/// bits: the whole header data).
pub(crate) const HDR_SYNC: u64 = 1 << 63;
/// Header-data flag of a short message: the sender exposes the data on its
/// read portal (match bits: the whole header data) until it knows the
/// receiver holds it, so a receiver that had no room for it gets it later.
pub(crate) const HDR_READ: u64 = 1 << 62;
/// The unique part of header data (below the flags).
const HDR_UNIQUE: u64 = HDR_READ - 1;

/// How long one blocking wait sleeps before re-checking its request. Another
/// thread may have consumed the event that completed it.
const WAIT_SLICE: Duration = Duration::from_millis(1);

/// Tunables of the MPI library. Read from the environment by
/// [`MpiConfig::from_env`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiConfig {
    /// Messages up to this many bytes use the short (eager, buffered when
    /// unexpected) protocol; longer ones the long protocol
    /// (`PTL_MPI_EAGER`).
    ///
    /// The default, 64 KiB, was chosen by measurement (2 ranks, TCP,
    /// progress thread, `mpi-on-portals/examples/pingpong` with `PTL_MPI_EAGER` varied,
    /// medians of 3 runs): the short protocol's half round trip beats the
    /// long one's at every size, by 17–20 % at 32–64 KiB (9.5 vs 11.7 µs,
    /// 15.2 vs 18.1 µs) and by ~10 % at 128–256 KiB. Above 64 KiB the long
    /// protocol is kept because it never buffers an unexpected message: the
    /// receiver pulls it straight into place, and each 2 MiB unexpected
    /// buffer still holds at least 31 short messages.
    pub eager_limit: usize,
    /// Size of each unexpected-message buffer (`PTL_MPI_UNEXPECTED_BUFFER`).
    pub unexpected_buffer: usize,
    /// Unexpected-message buffers created at start (`PTL_MPI_UNEXPECTED_BUFFERS`).
    pub unexpected_buffers: usize,
    /// The pool grows up to this many buffers when messages arrive faster
    /// than they are received (`PTL_MPI_UNEXPECTED_MAX`).
    pub unexpected_max: usize,
    /// Capacity of each event queue (`PTL_MPI_EQ_EVENTS`).
    pub eq_events: usize,
}

impl Default for MpiConfig {
    fn default() -> Self {
        MpiConfig {
            eager_limit: 64 << 10,
            unexpected_buffer: 2 << 20,
            unexpected_buffers: 3,
            unexpected_max: 32,
            eq_events: 1 << 16,
        }
    }
}

impl MpiConfig {
    /// Defaults, overridden by `PTL_MPI_*` environment variables.
    pub fn from_env() -> Result<MpiConfig> {
        let mut c = MpiConfig::default();
        let get = |name: &str, v: &mut usize| -> Result<()> {
            if let Ok(s) = std::env::var(name) {
                *v = s
                    .parse()
                    .map_err(|_| MpiError::Init(format!("{name}={s:?} is not a number")))?;
            }
            Ok(())
        };
        get("PTL_MPI_EAGER", &mut c.eager_limit)?;
        get("PTL_MPI_UNEXPECTED_BUFFER", &mut c.unexpected_buffer)?;
        get("PTL_MPI_UNEXPECTED_BUFFERS", &mut c.unexpected_buffers)?;
        get("PTL_MPI_UNEXPECTED_MAX", &mut c.unexpected_max)?;
        get("PTL_MPI_EQ_EVENTS", &mut c.eq_events)?;
        c.checked()
    }

    /// Check the tunables (also those given to
    /// [`crate::initialize_with_config`]): an unexpected-message buffer must
    /// hold two eager messages (its high-water mark is the eager limit: a
    /// smaller buffer would never accept anything); at least one buffer, and
    /// a cap no lower than the initial count.
    pub(crate) fn checked(mut self) -> Result<MpiConfig> {
        if self.unexpected_buffer < 2 * self.eager_limit.max(1) {
            return Err(MpiError::Init(
                "an unexpected-message buffer must hold at least two eager messages".into(),
            ));
        }
        if self.eq_events == 0 {
            return Err(MpiError::Init("event queues need room for events".into()));
        }
        self.unexpected_buffers = self.unexpected_buffers.max(1);
        self.unexpected_max = self.unexpected_max.max(self.unexpected_buffers);
        Ok(self)
    }
}

/// Counters of the MPI protocols in this process, for tests and tuning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiStats {
    /// Messages that found their receive posted (deposited in place).
    pub expected: u64,
    /// Short messages received from an unexpected-message buffer.
    pub unexpected_short: u64,
    /// Long messages that arrived unexpected and were fetched with a get.
    pub unexpected_long: u64,
    /// Explicit acknowledgments sent for synchronous sends received late.
    pub sync_acks: u64,
    /// Unexpected-message buffers drained and re-attached.
    pub buffers_recycled: u64,
    /// Unexpected-message buffers added beyond the initial ones.
    pub buffers_grown: u64,
    /// Short messages that found no room in the unexpected-message buffers
    /// (all full, the pool at its cap): accepted as zero bytes and fetched
    /// from the sender's read portal when received.
    pub unexpected_pulled: u64,
}

/// Send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Standard,
    Synchronous,
    Ready,
}

/// A request's identity: slab slot plus generation, so that a late event for
/// a recycled slot is recognised as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReqId {
    idx: u32,
    gen: u32,
}

impl ReqId {
    fn user_ptr(self) -> u64 {
        (self.gen as u64) << 32 | self.idx as u64
    }

    fn from_user_ptr(p: u64) -> ReqId {
        ReqId {
            idx: p as u32,
            gen: (p >> 32) as u32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Ready send (any size): done on Sent. Its receive is posted, so it
    /// never needs to be fetched again.
    SendReady,
    /// Short standard send: done on Sent + Ack(len > 0), or Sent + Ack(0) +
    /// Get (the receiver had no unexpected-buffer room and pulled it).
    SendShort,
    /// Short synchronous send: done on Sent + the receiver's explicit
    /// acknowledgment (sent once it holds the data, which it may first
    /// have pulled from the read portal).
    SendSync,
    /// Long send: done on Sent + Ack(len > 0), or Sent + Ack(0) + Get.
    SendLong,
    /// Posted receive: done on Put (long truncated to zero: after a release
    /// get).
    Recv,
    /// Receive of an unexpected long message, or of a short one that found
    /// no buffer room: done on the Reply of its get.
    RecvGet,
    /// Library-internal message nobody waits for (explicit sync ack).
    Control,
}

struct Req {
    gen: u32,
    kind: Kind,
    /// The user gave the request up (buffered sends, internal messages):
    /// free it on completion.
    detached: bool,
    /// Descriptor of the data (send buffer or receive buffer).
    md: Option<MdHandle>,
    /// Match entry owned by the request (read/ack portal for sends, posted
    /// receive for receives).
    me: Option<MeHandle>,
    /// Synchronous sends: the zero-byte descriptor on the ack portal.
    ack_md: Option<MdHandle>,
    /// Synchronous short sends: the read-portal entry exposing the data
    /// (`me` is the ack-portal entry).
    read_me: Option<MeHandle>,
    /// A send of zero bytes: an acknowledgment of zero bytes means it was
    /// delivered, not that it waits to be pulled.
    empty: bool,
    /// A receive that pulls a synchronous short message: the sender's
    /// process and ack bits, acknowledged once the data is here.
    ack_after: Option<(ProcessId, u64)>,
    /// Receives from any source: the context, whose members' failures fail
    /// the receive (ULFM's `MPI_ERR_PROC_FAILED_PENDING`).
    any_ctx: Option<u16>,
    sent: bool,
    acked: Option<u64>,
    got: bool,
    /// Receives: the status to report (filled when the envelope is known).
    status: Option<Status>,
    result: Option<Result<Status>>,
    /// Memory owned by the request (buffered and owned sends): the send reads
    /// from it, so it lives as long as the request.
    owned: Option<Box<dyn std::any::Any + Send>>,
    /// Bytes of attached buffered-send space the request uses.
    bsend_len: usize,
    /// Peer world rank, for error messages.
    peer: u32,
}

/// A message that arrived before its receive was posted.
#[derive(Clone, Copy, Debug)]
struct Unexpected {
    bits: u64,
    initiator: ProcessId,
    hdr_data: u64,
    rlength: u64,
    mlength: u64,
    offset: u64,
    /// Index of the buffer holding the data (short messages).
    buf: Option<usize>,
}

/// One high-water-mark unexpected-message buffer. The memory belongs to the
/// library, not to the engine (raw attach), so it can be read after the
/// descriptor unlinked itself.
struct UnexpectedBuffer {
    ptr: *mut u8,
    len: usize,
    md: Option<MdHandle>,
    /// Messages in it not received yet.
    pending: usize,
}

impl Drop for UnexpectedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` come from `Box::into_raw` of a boxed slice of
        // exactly `len` bytes in `UnexpectedBuffer::new`, and are freed only
        // here, once. The pool holding the buffer outlives the network
        // interface: the device drops its job (the interface, whose transport
        // shutdown stops every transfer) before its share of the pool, and
        // the interface's unlink hook, which holds the other share, is
        // dropped with the interface's core.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

impl UnexpectedBuffer {
    fn new(len: usize) -> Self {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let len = b.len();
        UnexpectedBuffer {
            ptr: Box::into_raw(b).cast(),
            len,
            md: None,
            pending: 0,
        }
    }
}

/// The unexpected-message buffers (see [`Shared::pool`]).
#[derive(Default)]
struct Pool {
    bufs: Vec<UnexpectedBuffer>,
    /// Buffers added by the unlink hook while the state was locked (counted
    /// into [`MpiStats::buffers_grown`]).
    grown_early: u64,
}

// SAFETY: the pool's raw pointers are to memory it owns (see
// `UnexpectedBuffer`); all access is under its mutex.
unsafe impl Send for Pool {}

thread_local! {
    /// This thread holds a pool lock: an unlink hook it runs (from an engine
    /// call made under that lock) must not take it again.
    static IN_POOL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The locked pool; marks the thread as holding it.
struct PoolGuard<'a>(MutexGuard<'a, Pool>);

impl<'a> PoolGuard<'a> {
    fn new(g: MutexGuard<'a, Pool>) -> Self {
        IN_POOL.with(|c| c.set(true));
        PoolGuard(g)
    }
}

impl Deref for PoolGuard<'_> {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        &self.0
    }
}

impl DerefMut for PoolGuard<'_> {
    fn deref_mut(&mut self) -> &mut Pool {
        &mut self.0
    }
}

impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        IN_POOL.with(|c| c.set(false));
    }
}

struct State {
    reqs: Slab<Req>,
    next_gen: u32,
    saved: VecDeque<Unexpected>,
    next_bits: u64,
    fatal: Option<MpiError>,
    bsend_attached: usize,
    bsend_used: usize,
    stats: MpiStats,
    /// Context ids this process does not use: bit i of word i/64. Ids go in
    /// pairs (point-to-point, collective); the world's pair is 0/1.
    free_ctx: [u64; CTX_WORDS],
    /// Requests with a result whose engine objects could not be unlinked yet
    /// (a transfer was still using them): retried at every drain.
    releasing: Vec<ReqId>,
    /// World ranks the transport gave up on.
    dead: HashSet<u32>,
    /// How many entries of the interface's failed-peer list were handled.
    failures_seen: usize,
    /// World ranks of the members of each context that a receive from any
    /// source used (a member's death fails such receives).
    members: HashMap<u16, Arc<[u32]>>,
}

/// Words of the context-id bitmap (13 bits of context: 8192 ids).
pub(crate) const CTX_WORDS: usize = (crate::bits::MAX_CONTEXT as usize + 1) / 64;

// SAFETY: `State` holds raw pointers only to memory that a live request's
// borrow keeps alive; all access is under the device mutex.
unsafe impl Send for State {}

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
    long_me: MeHandle,
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
        // SAFETY: `g` is dropped exactly once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.g) };
        self.sh.after_unlock(self.core);
    }
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

    fn after_unlock(&self, core: &NiCore) {
        // Pairs with the fence in `service_unexpected`: either the hook's
        // try_lock saw the lock free, or this load sees its flag.
        fence(Ordering::SeqCst);
        if self.service.load(Ordering::SeqCst) {
            self.service_unexpected(core);
        }
    }

    /// The unlink hook: an unexpected-message buffer filled up and unlinked
    /// itself, on whichever thread deposited the last message (typically the
    /// progress thread while the application computes). Handle the
    /// unexpected queue now — save the arrivals, re-attach drained buffers,
    /// grow the pool — so that the next messages find room without waiting
    /// for an MPI call. Never blocks: if the state is locked, its holder
    /// does it on unlock.
    fn on_unlink_hook(&self, core: &NiCore) {
        self.service.store(true, Ordering::SeqCst);
        if !self.service_unexpected(core) {
            self.make_room(core);
        }
    }

    /// The state is busy and its unlink events wait for its holder: make
    /// sure meanwhile that at least two buffers can take messages, growing
    /// the pool (up to its cap) if not. Which buffers are still linked is
    /// asked of the engine, as their unlink events are not handled yet.
    fn make_room(&self, core: &NiCore) {
        if IN_POOL.with(|c| c.get()) {
            return;
        }
        let mut pool = self.pool();
        if self.active_buffers(core, &pool) < 2 && pool.bufs.len() < self.cfg.unexpected_max {
            tracing::debug!(
                buffers = pool.bufs.len() + 1,
                "growing the unexpected-message pool while the state is busy"
            );
            pool.grown_early += 1;
            if let Err(e) = self.add_buffer(core, &mut pool) {
                // The state's holder sees the same failure when it grows
                // the pool itself; nothing to report from here.
                tracing::warn!(error = %e, "could not grow the unexpected-message pool");
            }
        }
    }

    /// Buffers that can take another message now. A buffer whose
    /// high-water mark is crossed stops matching at once, but unlinks (and
    /// reports it) only once the payload that crossed it is in — with
    /// several senders, other messages arrive meanwhile — so "linked" would
    /// count it as room; the engine is asked for each buffer's offset.
    fn active_buffers(&self, core: &NiCore, pool: &Pool) -> usize {
        pool.bufs
            .iter()
            .filter_map(|b| b.md)
            .filter(|&md| {
                core.with_engine(|e| e.md_update(md, None, None))
                    .is_ok_and(|m| m.local_offset.saturating_add(m.max_size) <= m.length)
            })
            .count()
    }

    fn pool(&self) -> PoolGuard<'_> {
        PoolGuard::new(self.pool.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Handle the unexpected queue if the state is free; false if it was
    /// locked (its holder does it on unlock).
    fn service_unexpected(&self, core: &NiCore) -> bool {
        loop {
            fence(Ordering::SeqCst);
            let mut g = match self.st.try_lock() {
                Ok(g) => g,
                // The holder sees `service` when it unlocks.
                Err(TryLockError::WouldBlock) => return false,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            self.service.store(false, Ordering::SeqCst);
            let took = self.drain_unexpected(core, &mut g);
            drop(g);
            if took {
                // A prober sleeping on the queue finds it empty now: wake it
                // to look at the saved messages.
                core.wake_sleepers();
            }
            fence(Ordering::SeqCst);
            if !self.service.load(Ordering::SeqCst) {
                return true;
            }
        }
    }

    /// Handle every event of the unexpected queue (no sends, no progress:
    /// safe inside an unlink hook). True if there was any.
    fn drain_unexpected(&self, core: &NiCore, st: &mut State) -> bool {
        let mut took = false;
        loop {
            match core.with_engine(|e| e.eq_get(self.unexp_eq)) {
                Ok(Some(ev)) => {
                    took = true;
                    if let Err(e) = self.on_unexpected(core, st, &ev) {
                        st.fatal.get_or_insert(e);
                    }
                }
                Ok(None) => return took,
                Err(PtlError::EqDropped { dropped }) => {
                    took = true;
                    st.fatal
                        .get_or_insert(MpiError::EventQueueOverflow(dropped));
                }
                Err(e) => {
                    st.fatal.get_or_insert(ptl(e));
                    return took;
                }
            }
        }
    }

    // ----- unexpected buffers -------------------------------------------

    /// Add a buffer to the pool and link it; the caller counts it as grown
    /// if it is beyond the initial set.
    fn add_buffer(&self, core: &NiCore, pool: &mut Pool) -> Result<()> {
        pool.bufs
            .push(UnexpectedBuffer::new(self.cfg.unexpected_buffer));
        let i = pool.bufs.len() - 1;
        self.attach_buffer(core, pool, i)
    }

    /// Link buffer `i` at the end of the short-unexpected entries (just in
    /// front of the long-unexpected entry).
    fn attach_buffer(&self, core: &NiCore, pool: &mut Pool, i: usize) -> Result<()> {
        let Some(b) = pool.bufs.get_mut(i) else {
            return Err(MpiError::InvalidBuffer("no such unexpected buffer"));
        };
        let me = core
            .with_engine(|e| {
                e.me_insert(
                    self.long_me,
                    ProcessId::ANY,
                    bits::encode(PROTO_SHORT, 0, 0, 0),
                    !bits::PROTO_MASK,
                    Unlink::Unlink,
                    Position::Before,
                )
            })
            .map_err(ptl)?;
        // Acknowledging: a standard sender keeps its data exposed until it
        // learns that the message is held here.
        let desc = MdDesc::new(MdOptions::OP_PUT)
            .max_size(self.cfg.eager_limit as u64)
            .eq(self.unexp_eq)
            .user_ptr(i as u64);
        // SAFETY: the buffer's memory lives as long as the state, which
        // outlives the interface (see `UnexpectedBuffer`'s drop); nobody else
        // writes it, and the library reads only regions whose Put event it
        // has seen.
        let md = match unsafe { core.md_attach_raw(me, &desc, b.ptr, b.len, Unlink::Unlink) } {
            Ok(md) => md,
            Err(e) => {
                let _ = core.with_engine(|en| en.me_unlink(me));
                return Err(ptl(e));
            }
        };
        b.md = Some(md);
        b.pending = 0;
        Ok(())
    }

    /// A message from buffer `i` has been received (copied out) or dropped.
    fn release(&self, core: &NiCore, st: &mut State, i: usize) -> Result<()> {
        self.release_in(core, st, &mut self.pool(), i)
    }

    /// [`Self::release`] with the pool already locked.
    fn release_in(&self, core: &NiCore, st: &mut State, pool: &mut Pool, i: usize) -> Result<()> {
        let Some(b) = pool.bufs.get_mut(i) else {
            return Ok(());
        };
        b.pending = b.pending.saturating_sub(1);
        if b.pending == 0 && b.md.is_none() {
            st.stats.buffers_recycled += 1;
            self.attach_buffer(core, pool, i)?;
        }
        Ok(())
    }

    fn on_unexpected(&self, core: &NiCore, st: &mut State, ev: &Event) -> Result<()> {
        let tag = ev.md.user_ptr;
        match ev.kind {
            EventKind::Put if ev.fail == FailType::Ok => {
                let buf = if tag == LONG_UNEXPECTED || tag == OVERFLOW {
                    None
                } else {
                    let i = tag as usize;
                    if let Some(b) = self.pool().bufs.get_mut(i) {
                        b.pending += 1;
                    }
                    Some(i)
                };
                if tag == OVERFLOW && ev.rlength > 0 {
                    // No room: only the envelope is kept. The data stays
                    // with its sender (read portal) until received, so
                    // memory here is bounded by the pool's cap and nothing
                    // is lost.
                    st.stats.unexpected_pulled += 1;
                }
                st.saved.push_back(Unexpected {
                    bits: ev.match_bits,
                    initiator: ev.initiator,
                    hdr_data: ev.hdr_data,
                    rlength: ev.rlength,
                    mlength: ev.mlength,
                    offset: ev.offset,
                    buf,
                });
            }
            // A message whose sender died half-way: it never happened.
            EventKind::Put => {}
            EventKind::Unlink => {
                let i = tag as usize;
                let mut pool = self.pool();
                if let Some(b) = pool.bufs.get_mut(i) {
                    b.md = None;
                    if b.pending == 0 {
                        st.stats.buffers_recycled += 1;
                        self.attach_buffer(core, &mut pool, i)?;
                    }
                }
                // Keep at least two buffers able to take messages, growing
                // the pool if the application falls behind.
                if self.active_buffers(core, &pool) < 2 && pool.bufs.len() < self.cfg.unexpected_max
                {
                    tracing::debug!(
                        buffers = pool.bufs.len() + 1,
                        "growing the unexpected-message pool"
                    );
                    st.stats.buffers_grown += 1;
                    self.add_buffer(core, &mut pool)?;
                }
            }
            _ => {}
        }
        Ok(())
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
    unexp_eq: EqHandle,
    mark: MeHandle,
}

/// A request's engine objects are all unlinked.
fn released(r: &Req) -> bool {
    r.me.is_none() && r.md.is_none() && r.ack_md.is_none() && r.read_me.is_none()
}

/// A request is complete: it has its result and holds nothing in the engine,
/// so the buffer it was given may be used (or freed) again.
fn complete(r: &Req) -> bool {
    r.result.is_some() && released(r)
}

impl Device {
    pub(crate) fn new(job: Job, cfg: MpiConfig) -> Result<Device> {
        let cfg = cfg.checked()?;
        let ni = job.ni();
        let req_eq = ni.eq_alloc(cfg.eq_events).map_err(ptl)?;
        let unexp_eq = ni.eq_alloc(cfg.eq_events).map_err(ptl)?;
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
        let long_me = ni
            .me_attach(
                RECV_PT,
                ProcessId::ANY,
                bits::encode(PROTO_LONG, 0, 0, 0),
                !bits::PROTO_MASK,
                Unlink::Retain,
                Position::After,
            )
            .map_err(ptl)?;
        ni.md_attach(
            long_me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
                .eq(unexp_eq)
                .user_ptr(LONG_UNEXPECTED),
            Vec::new(),
            Unlink::Retain,
        )
        .map_err(ptl)?;
        // Overflow: short messages no buffer could take (the pool at its
        // cap). Zero bytes, truncating and acknowledging, like the
        // long-unexpected entry: the envelope is kept, the sender learns
        // from the zero-length acknowledgment that the data was not taken,
        // and the receiver gets it from the sender's read portal when the
        // receive is posted. Flow control, not loss: memory here stays
        // bounded by the pool's cap.
        let over = ni
            .me_attach(
                RECV_PT,
                ProcessId::ANY,
                bits::encode(PROTO_SHORT, 0, 0, 0),
                !bits::PROTO_MASK,
                Unlink::Retain,
                Position::After,
            )
            .map_err(ptl)?;
        ni.md_attach(
            over,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
                .eq(unexp_eq)
                .user_ptr(OVERFLOW),
            Vec::new(),
            Unlink::Retain,
        )
        .map_err(ptl)?;
        let sh = Arc::new(Shared {
            st: Mutex::new(State {
                reqs: Slab::new(),
                next_gen: 1,
                saved: VecDeque::new(),
                next_bits: 1,
                fatal: None,
                bsend_attached: 0,
                bsend_used: 0,
                stats: MpiStats::default(),
                free_ctx: {
                    let mut f = [u64::MAX; CTX_WORDS];
                    f[0] &= !0b11; // the world's pair
                    f
                },
                releasing: Vec::new(),
                dead: HashSet::new(),
                failures_seen: 0,
                members: HashMap::new(),
            }),
            service: AtomicBool::new(false),
            pool: Mutex::new(Pool::default()),
            cfg: cfg.clone(),
            unexp_eq,
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
        let dev = Device {
            job,
            cfg,
            sh,
            req_eq,
            unexp_eq,
            mark,
        };
        // No message may reach a process before its entries exist.
        dev.job
            .barrier()
            .map_err(|e| MpiError::Init(e.to_string()))?;
        Ok(dev)
    }

    fn ni(&self) -> &NetworkInterface {
        self.job.ni()
    }

    fn core(&self) -> &NiCore {
        self.job.ni().core()
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
        if let Err(e) = self.ni().poll() {
            self.lock().fatal.get_or_insert(ptl(e));
        }
    }

    // ----- events ---------------------------------------------------------

    /// Take every queued event and act on it, unexpected messages first so
    /// that a receive posted by a request event sees them; then learn of
    /// failed peers, and retry releasing what a transfer held. Never fails:
    /// an error that concerns one request becomes its result, one that
    /// concerns the library is kept in `fatal` (and reported by every wait
    /// once the waited-for request has let go of its buffer).
    fn drain(&self, st: &mut State) {
        // Read before the events: whatever the transport delivered before
        // giving up on a peer is queued by then, and handled first.
        let failures = self.ni().failed_peer_count();
        loop {
            let unexpected = self.take_event(st, self.unexp_eq);
            if let Some(ev) = &unexpected {
                if let Err(e) = self.sh.on_unexpected(self.core(), st, ev) {
                    st.fatal.get_or_insert(e);
                }
            }
            let request = self.take_event(st, self.req_eq);
            if let Some(ev) = &request {
                self.on_request(st, ev);
            }
            if unexpected.is_none() && request.is_none() {
                break;
            }
        }
        if failures > st.failures_seen {
            self.on_peer_failures(st);
        }
        if !st.releasing.is_empty() {
            for id in std::mem::take(&mut st.releasing) {
                self.finish(st, id);
            }
        }
    }

    /// The next event of `eq`; an overflow is fatal (and reported once, so
    /// the kept events follow).
    fn take_event(&self, st: &mut State, eq: EqHandle) -> Option<Event> {
        loop {
            match self.ni().eq_get(eq) {
                Ok(ev) => return ev,
                Err(PtlError::EqDropped { dropped }) => {
                    st.fatal
                        .get_or_insert(MpiError::EventQueueOverflow(dropped));
                }
                Err(e) => {
                    st.fatal.get_or_insert(ptl(e));
                    return None;
                }
            }
        }
    }

    /// The transport gave up on some peers: they are dead to MPI. Fail every
    /// request that involves one of them and waits for it — a posted receive
    /// from it, a send waiting for its acknowledgment or its get — instead of
    /// waiting forever. (Operations waiting for an acknowledgment or reply
    /// the engine fails itself.) A receive from any source fails too if its
    /// communicator has a dead member (ULFM's
    /// `MPI_ERR_PROC_FAILED_PENDING`): the message it waits for may have
    /// been the dead one's, and waiting on could hang forever.
    fn on_peer_failures(&self, st: &mut State) {
        let failed = self.ni().failed_peers();
        for p in failed.get(st.failures_seen..).unwrap_or(&[]) {
            if let Some(r) = self.job.rank_of(*p) {
                tracing::warn!(rank = r, "the transport gave up on a peer");
                st.dead.insert(r);
            }
        }
        st.failures_seen = failed.len();
        let victims: Vec<(ReqId, u32)> = st
            .reqs
            .iter()
            .filter(|(_, r)| r.result.is_none())
            .filter_map(|(i, r)| {
                let dead = if st.dead.contains(&r.peer) {
                    Some(r.peer)
                } else {
                    r.any_ctx.and_then(|c| dead_member(st, c))
                };
                dead.map(|d| {
                    let id = ReqId {
                        idx: i as u32,
                        gen: r.gen,
                    };
                    (id, d)
                })
            })
            .collect();
        for (id, dead) in victims {
            if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                r.result = Some(Err(dead_peer(dead)));
            }
            self.finish(st, id);
        }
    }

    /// A receive from any source in context `ctx` of the communicator whose
    /// members are `members` (world ranks) is about to wait: remember the
    /// members, so that the death of one fails the receive.
    pub(crate) fn watch_members(&self, ctx: u16, members: &[u32]) {
        let mut st = self.lock();
        st.members.entry(ctx).or_insert_with(|| Arc::from(members));
    }

    fn on_request(&self, st: &mut State, ev: &Event) {
        let id = ReqId::from_user_ptr(ev.md.user_ptr);
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return; // a late event of a finished request
        };
        if ev.kind == EventKind::Unlink {
            if r.md == Some(ev.md_handle) {
                r.md = None;
            }
            if r.ack_md == Some(ev.md_handle) {
                r.ack_md = None;
            }
            if r.result.is_some() {
                self.finish(st, id);
            }
            return;
        }
        if r.result.is_some() {
            // Decided already (failed, aborted): later events change nothing.
            return;
        }
        if let Err(e) = self.on_request_event(st, id, ev) {
            if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                r.result.get_or_insert(Err(e));
            }
        }
        if st
            .reqs
            .get(id.idx as usize)
            .is_some_and(|r| r.result.is_some())
        {
            self.finish(st, id);
        }
    }

    /// Advance request `id` (live, no result yet) by event `ev`.
    fn on_request_event(&self, st: &mut State, id: ReqId, ev: &Event) -> Result<()> {
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return Ok(());
        };
        if ev.fail != FailType::Ok {
            let why = format!("{:?} on {:?}", ev.fail, ev.kind);
            let rank = if r.peer == u32::MAX {
                self.job.rank_of(ev.initiator).unwrap_or(u32::MAX)
            } else {
                r.peer
            };
            r.result = Some(Err(MpiError::PeerFailed {
                rank: rank as i32,
                why,
            }));
            return Ok(());
        }
        match (r.kind, ev.kind) {
            (Kind::SendReady | Kind::Control, EventKind::Sent)
            | (Kind::Control, EventKind::Reply) => {
                r.result = Some(Ok(Status::new(
                    -1,
                    -1,
                    ev.mlength as usize,
                    ev.mlength as usize,
                )));
            }
            (Kind::SendShort | Kind::SendSync | Kind::SendLong, EventKind::Sent) => r.sent = true,
            (Kind::SendSync, EventKind::Put) => r.acked = Some(0),
            (Kind::SendShort | Kind::SendLong, EventKind::Ack) => r.acked = Some(ev.mlength),
            (Kind::SendShort | Kind::SendLong, EventKind::Get) => r.got = true,
            (Kind::Recv, EventKind::Put) => {
                st.stats.expected += 1;
                let f = bits::decode(ev.match_bits);
                if f.proto == PROTO_SHORT && ev.hdr_data & HDR_SYNC != 0 {
                    // A synchronous sender waits for this whether its
                    // message was expected or not: its put is not
                    // acknowledged, so an acknowledgment from an
                    // unexpected buffer cannot be mistaken for a match.
                    self.control(st, ev.initiator, ACK_PT, ev.hdr_data, false);
                }
                let Some(r) = st.reqs.get_mut(id.idx as usize) else {
                    return Ok(());
                };
                let st_ = Status::new(
                    f.src as i32,
                    f.tag as i32,
                    ev.mlength as usize,
                    ev.rlength as usize,
                );
                r.status = Some(st_);
                if ev.mlength == 0 && ev.rlength > 0 && waits_for_get(f.proto, ev.hdr_data) {
                    // A message truncated to nothing acknowledges zero
                    // bytes, which its sender reads as "not taken": release
                    // it with the get it is waiting for.
                    let initiator = ev.initiator;
                    let hdr = ev.hdr_data;
                    r.kind = Kind::RecvGet;
                    let ni = self.ni();
                    let md = ni
                        .md_bind(
                            &MdDesc::default()
                                .threshold(Threshold::Count(1))
                                .eq(self.req_eq)
                                .user_ptr(id.user_ptr()),
                            Vec::new(),
                            Unlink::Unlink,
                        )
                        .map_err(ptl)?;
                    r.md = Some(md);
                    ni.get(md, &Remote::new(initiator, READ_PT, hdr))
                        .map_err(ptl)?;
                    return Ok(());
                }
                r.result = Some(finish_status(st_));
            }
            (Kind::RecvGet, EventKind::Reply) => {
                let s = r.status.unwrap_or(Status::new(-1, -1, 0, 0));
                r.result = Some(finish_status(s));
                if let Some((to, bits)) = r.ack_after.take() {
                    // A synchronous short message pulled after all: its
                    // sender completes once we hold the data.
                    self.control(st, to, ACK_PT, bits, false);
                }
            }
            _ => {}
        }
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return Ok(());
        };
        if r.result.is_none() {
            let done = match r.kind {
                Kind::SendSync => r.sent && r.acked.is_some(),
                Kind::SendShort | Kind::SendLong => {
                    r.sent && matches!(r.acked, Some(n) if n > 0 || r.got || r.empty)
                }
                _ => false,
            };
            if done {
                r.result = Some(Ok(Status::new(-1, -1, 0, 0)));
            }
        }
        Ok(())
    }

    /// Request `id` has its result: unlink what it still holds in the engine
    /// so that the user's buffer is free before anyone can see it complete.
    /// What a transfer still uses is retried at the next drain (the request
    /// stays incomplete meanwhile). A detached request is forgotten once
    /// released.
    fn finish(&self, st: &mut State, id: ReqId) {
        let ni = self.ni();
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return;
        };
        // Unlinking the entry also unlinks a descriptor attached to it; the
        // explicit descriptor unlinks then find nothing, which is fine.
        for slot in [&mut r.me, &mut r.read_me] {
            if let Some(me) = *slot {
                match ni.me_unlink(me) {
                    Ok(_) | Err(PtlError::InvalidHandle { .. }) => *slot = None,
                    Err(e) => tracing::trace!(error = %e, "request entry still in use"),
                }
            }
        }
        for slot in [&mut r.md, &mut r.ack_md] {
            if let Some(md) = *slot {
                match ni.md_unlink(md) {
                    Ok(_) | Err(PtlError::InvalidHandle { .. }) => *slot = None,
                    Err(e) => tracing::trace!(error = %e, "request descriptor still in use"),
                }
            }
        }
        if !released(r) {
            if !st.releasing.contains(&id) {
                st.releasing.push(id);
            }
            return;
        }
        if r.detached {
            if let Err(e) = r.result.as_ref().unwrap_or(&Ok(Status::cancelled())) {
                tracing::warn!(error = %e, "a request nobody waits for failed");
            }
            let r = st.reqs.remove(id.idx as usize);
            st.bsend_used = st.bsend_used.saturating_sub(r.bsend_len);
        }
    }

    /// Give request `id` the result `e` unless it has one, and release it.
    fn abort(&self, st: &mut State, id: ReqId, e: MpiError) {
        if let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) {
            r.result.get_or_insert(Err(e));
            self.finish(st, id);
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
            peer,
        }) as u32;
        ReqId { idx, gen }
    }

    /// Match bits for a send's own read- or ack-portal entries: unique
    /// among this process's live sends, below the header-data flags.
    fn unique_bits(st: &mut State) -> u64 {
        let b = st.next_bits;
        st.next_bits = (st.next_bits.wrapping_add(1) & HDR_UNIQUE).max(1);
        b
    }

    fn check(&self, st: &State) -> Result<()> {
        match &st.fatal {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    // ----- sending --------------------------------------------------------

    /// Start a send of `len` bytes at `data` from `src_rank` (in the
    /// communicator with context `ctx`) to world rank `dst`.
    ///
    /// An error is returned only if nothing of the send reached the engine;
    /// a send that fails later reports its error through the request.
    ///
    /// # Safety
    /// `data..data+len` must stay valid and unmodified until the request
    /// completes (or, with `owned`, is the owned vector's buffer).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn isend(
        &self,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        data: *const u8,
        len: usize,
        mode: Mode,
        owned: Option<Box<dyn std::any::Any + Send>>,
        detached: bool,
    ) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        // Take the events of earlier sends: a loop of sends that never
        // waits must not overflow the request event queue.
        self.drain(&mut st);
        if st.dead.contains(&dst) {
            return Err(dead_peer(dst));
        }
        let ni = self.ni();
        let target = portals_runtime::process_id(dst);
        let long = len > self.cfg.eager_limit;
        let kind = match (mode, long) {
            (Mode::Ready, _) => Kind::SendReady,
            (Mode::Standard, false) => Kind::SendShort,
            (Mode::Synchronous, false) => Kind::SendSync,
            (_, true) => Kind::SendLong,
        };
        let id = self.new_req(&mut st, kind, dst);
        // The request owns the memory from now on, so that it lives as long
        // as anything in the engine may read it.
        if let Some(rq) = st.reqs.get_mut(id.idx as usize) {
            rq.owned = owned;
            rq.detached = detached;
            rq.empty = len == 0;
        }
        let up = id.user_ptr();
        let proto = if long { PROTO_LONG } else { PROTO_SHORT };
        let remote = Remote::new(target, RECV_PT, bits::encode(proto, ctx, src_rank, tag));
        let data = data.cast_mut();
        let r = (|| -> Result<()> {
            match kind {
                Kind::SendReady => {
                    // SAFETY: by this function's contract; the descriptor
                    // only reads (it accepts no incoming operation).
                    let md = unsafe {
                        ni.md_bind_raw(
                            &MdDesc::default()
                                .threshold(Threshold::Count(1))
                                .eq(self.req_eq)
                                .user_ptr(up),
                            data,
                            len,
                            Unlink::Unlink,
                        )
                    }
                    .map_err(ptl)?;
                    st.reqs[id.idx as usize].md = Some(md);
                    ni.put(md, AckReq::NoAck, &remote, 0).map_err(ptl)
                }
                Kind::SendShort => {
                    // Eager, but the data stays on the read portal until the
                    // receiver's acknowledgment says it took the bytes (a
                    // posted receive or an unexpected buffer); a zero-byte
                    // acknowledgment (no buffer room) keeps it there for the
                    // receiver's get. Threshold 3: the put, its
                    // acknowledgment, the get. OP_GET only: the buffer is
                    // never written.
                    let read_bits = Self::unique_bits(&mut st) | HDR_READ;
                    let me = ni
                        .me_attach(
                            READ_PT,
                            target,
                            read_bits,
                            0,
                            Unlink::Unlink,
                            Position::After,
                        )
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].me = Some(me);
                    // SAFETY: by this function's contract.
                    let md = unsafe {
                        ni.md_attach_raw(
                            me,
                            &MdDesc::new(MdOptions::OP_GET)
                                .threshold(Threshold::Count(3))
                                .eq(self.req_eq)
                                .user_ptr(up),
                            data,
                            len,
                            Unlink::Unlink,
                        )
                    }
                    .map_err(ptl)?;
                    st.reqs[id.idx as usize].md = Some(md);
                    ni.put(md, AckReq::Ack, &remote, read_bits).map_err(ptl)
                }
                Kind::SendSync => {
                    // The explicit acknowledgment lands on a zero-byte
                    // descriptor of its own: the send buffer never accepts
                    // incoming data (see docs/ARCHITECTURE.md). The data
                    // sits on the read portal (same bits) for a receiver
                    // that had no buffer room when it arrived. The put asks
                    // no acknowledgment: only the receiver's explicit one,
                    // sent once it holds the data, completes the send.
                    let ack_bits = Self::unique_bits(&mut st) | HDR_SYNC | HDR_READ;
                    let me = ni
                        .me_attach(ACK_PT, target, ack_bits, 0, Unlink::Unlink, Position::After)
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].me = Some(me);
                    let ack_md = ni
                        .md_attach(
                            me,
                            &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
                                .threshold(Threshold::Count(1))
                                .eq(self.req_eq)
                                .user_ptr(up),
                            Vec::new(),
                            Unlink::Unlink,
                        )
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].ack_md = Some(ack_md);
                    let read_me = ni
                        .me_attach(
                            READ_PT,
                            target,
                            ack_bits,
                            0,
                            Unlink::Unlink,
                            Position::After,
                        )
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].read_me = Some(read_me);
                    // SAFETY: as above. Retained: the put and a get may both
                    // use it; the request unlinks it when done.
                    let md = unsafe {
                        ni.md_attach_raw(
                            read_me,
                            &MdDesc::new(MdOptions::OP_GET).eq(self.req_eq).user_ptr(up),
                            data,
                            len,
                            Unlink::Retain,
                        )
                    }
                    .map_err(ptl)?;
                    st.reqs[id.idx as usize].md = Some(md);
                    ni.put(md, AckReq::NoAck, &remote, ack_bits).map_err(ptl)
                }
                Kind::SendLong => {
                    let read_bits = Self::unique_bits(&mut st);
                    let me = ni
                        .me_attach(
                            READ_PT,
                            target,
                            read_bits,
                            0,
                            Unlink::Unlink,
                            Position::After,
                        )
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].me = Some(me);
                    // Threshold 3: the put, its acknowledgment, and the get
                    // of an unexpected receiver (§3.3). OP_GET only: the
                    // buffer is never written.
                    // SAFETY: as above.
                    let md = unsafe {
                        ni.md_attach_raw(
                            me,
                            &MdDesc::new(MdOptions::OP_GET)
                                .threshold(Threshold::Count(3))
                                .eq(self.req_eq)
                                .user_ptr(up),
                            data,
                            len,
                            Unlink::Unlink,
                        )
                    }
                    .map_err(ptl)?;
                    st.reqs[id.idx as usize].md = Some(md);
                    ni.put(md, AckReq::Ack, &remote, read_bits).map_err(ptl)
                }
                _ => Err(MpiError::InvalidBuffer("not a send")),
            }
        })();
        if let Err(e) = r {
            return self.fail_started(&mut st, id, e);
        }
        if detached
            && st
                .reqs
                .get(id.idx as usize)
                .is_some_and(|r| r.result.is_some())
        {
            self.finish(&mut st, id);
        }
        Ok(id)
    }

    /// Attach `bytes` of buffer space for buffered sends.
    pub(crate) fn buffer_attach(&self, bytes: usize) {
        self.lock().bsend_attached = bytes;
    }

    /// Detach the buffered-send space, waiting until it is unused.
    pub(crate) fn buffer_detach(&self) -> Result<usize> {
        loop {
            self.poll();
            {
                let mut st = self.lock();
                self.drain(&mut st);
                if st.bsend_used == 0 {
                    return Ok(std::mem::take(&mut st.bsend_attached));
                }
                // Buffered sends own their copies: giving up is safe.
                self.check(&st)?;
            }
            self.block();
        }
    }

    /// A buffered send: copy, send, return at once.
    pub(crate) fn bsend(
        &self,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<()> {
        self.poll();
        {
            let mut st = self.lock();
            self.drain(&mut st);
            let free = st.bsend_attached.saturating_sub(st.bsend_used);
            if data.len() > free {
                return Err(MpiError::BufferSpace {
                    need: data.len(),
                    free,
                });
            }
            st.bsend_used += data.len();
        }
        let copy = data.to_vec();
        let (ptr, len) = (copy.as_ptr(), copy.len());
        // SAFETY: the vector moves into the request, which keeps its heap
        // buffer (which does not move) until the send completes.
        let r = unsafe {
            self.isend(
                ctx,
                src_rank,
                dst,
                tag,
                ptr,
                len,
                Mode::Standard,
                Some(Box::new(copy)),
                true,
            )
        };
        let mut st = self.lock();
        match r {
            Ok(id) => {
                if let Some(rq) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) {
                    rq.bsend_len = len;
                } else {
                    // Already complete and freed.
                    st.bsend_used = st.bsend_used.saturating_sub(len);
                }
                Ok(())
            }
            Err(e) => {
                st.bsend_used = st.bsend_used.saturating_sub(len);
                Err(e)
            }
        }
    }

    // ----- receiving --------------------------------------------------------

    /// Post a receive into `buf..buf+len` for context `ctx` from
    /// communicator rank `src` (world rank `src_world`), or any source.
    ///
    /// An error is returned only if nothing of the receive is left in the
    /// engine; a receive that fails later reports its error through the
    /// request.
    ///
    /// # Safety
    /// The buffer must stay valid and otherwise untouched until the request
    /// completes or is cancelled.
    pub(crate) unsafe fn irecv(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
        buf: *mut u8,
        len: usize,
    ) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        self.drain(&mut st);
        let recv = bits::receive(ctx, src.map(|s| s.0), tag);
        let id = self.new_req(&mut st, Kind::Recv, src.map_or(u32::MAX, |s| s.1));
        // 1. Messages already here, oldest first.
        if let Some(pos) = st.saved.iter().position(|u| bits::accepts(recv, u.bits)) {
            if let Some(u) = st.saved.remove(pos) {
                // SAFETY: forwarded from our caller.
                if let Err(e) = unsafe { self.take_unexpected(&mut st, id, u, buf, len) } {
                    return self.fail_started(&mut st, id, e);
                }
                return Ok(id);
            }
        }
        // A specific source that died sends nothing more; a receive from
        // any source fails once a member died (see `on_peer_failures`).
        let dead = match src {
            Some((_, w)) => st.dead.contains(&w).then_some(w),
            None => {
                st.reqs[id.idx as usize].any_ctx = Some(ctx);
                dead_member(&st, ctx)
            }
        };
        if let Some(w) = dead {
            return self.fail_started(&mut st, id, dead_peer(w));
        }
        // SAFETY: forwarded from our caller.
        match unsafe { self.post_recv(&mut st, id, recv, src, buf, len) } {
            Ok(()) => Ok(id),
            Err(e) => self.fail_started(&mut st, id, e),
        }
    }

    /// Steps 2 and 3 of posting a receive (§3.4): an inactive entry in front
    /// of the mark, activated only if nothing arrived meanwhile.
    ///
    /// # Safety
    /// As for [`Device::irecv`].
    unsafe fn post_recv(
        &self,
        st: &mut State,
        id: ReqId,
        recv: (u64, u64),
        src: Option<(u32, u32)>,
        buf: *mut u8,
        len: usize,
    ) -> Result<()> {
        let ni = self.ni();
        let match_id = src.map_or(ProcessId::ANY, |s| portals_runtime::process_id(s.1));
        let me = ni
            .me_insert(
                self.mark,
                match_id,
                recv.0,
                recv.1,
                Unlink::Unlink,
                Position::Before,
            )
            .map_err(ptl)?;
        st.reqs[id.idx as usize].me = Some(me);
        let up = id.user_ptr();
        let inactive = MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
            .threshold(Threshold::Count(0))
            .eq(self.req_eq)
            .user_ptr(up);
        // SAFETY: by this function's contract; the request unlinks the
        // descriptor before it completes.
        let md =
            unsafe { ni.md_attach_raw(me, &inactive, buf, len, Unlink::Unlink) }.map_err(ptl)?;
        st.reqs[id.idx as usize].md = Some(md);
        // ...activated only if nothing arrived meanwhile.
        let active = MdDesc {
            threshold: Threshold::Count(1),
            ..inactive
        };
        loop {
            match ni.md_update(md, Some(&active), Some(self.unexp_eq)) {
                Ok(_) => return Ok(()),
                Err(PtlError::MdNoUpdate) => {}
                Err(e) => return Err(ptl(e)),
            }
            // Look at what arrived (waiting for a deposit in progress).
            let before = st.saved.len();
            match ni.eq_wait(self.unexp_eq, Some(Duration::from_secs(60))) {
                Ok(ev) => self.sh.on_unexpected(self.core(), st, &ev)?,
                Err(PtlError::EqDropped { dropped }) => {
                    let e = MpiError::EventQueueOverflow(dropped);
                    st.fatal.get_or_insert(e.clone());
                    return Err(e);
                }
                Err(e) => return Err(ptl(e)),
            }
            if let Some(pos) = st
                .saved
                .iter()
                .skip(before)
                .position(|u| bits::accepts(recv, u.bits))
            {
                // The descriptor is inactive, so nothing uses it: this
                // unlink succeeds.
                ni.me_unlink(me).map_err(ptl)?;
                let r = &mut st.reqs[id.idx as usize];
                r.me = None;
                r.md = None;
                if let Some(u) = st.saved.remove(before + pos) {
                    // SAFETY: forwarded from our caller.
                    unsafe { self.take_unexpected(st, id, u, buf, len)? };
                }
                return Ok(());
            }
        }
    }

    /// Receive an unexpected message into `buf` for request `id`.
    ///
    /// # Safety
    /// As for [`Device::irecv`].
    unsafe fn take_unexpected(
        &self,
        st: &mut State,
        id: ReqId,
        u: Unexpected,
        buf: *mut u8,
        len: usize,
    ) -> Result<()> {
        let f = bits::decode(u.bits);
        let ni = self.ni();
        let n = (u.rlength as usize).min(len);
        let status = Status::new(f.src as i32, f.tag as i32, n, u.rlength as usize);
        st.reqs[id.idx as usize].peer = self.job.rank_of(u.initiator).unwrap_or(u32::MAX);
        match (f.proto, u.buf) {
            (PROTO_SHORT, Some(i)) => {
                let n = n.min(u.mlength as usize);
                // One pool lock for the copy and the release.
                let mut pool = self.sh.pool();
                if n > 0 {
                    let Some((ptr, blen)) = pool.bufs.get(i).map(|b| (b.ptr, b.len)) else {
                        return Err(MpiError::InvalidBuffer("no such unexpected buffer"));
                    };
                    let end = u.offset as usize + n;
                    if end > blen {
                        return Err(MpiError::InvalidBuffer(
                            "unexpected message outside its buffer",
                        ));
                    }
                    // SAFETY: the region was deposited completely (its Put
                    // event was seen) and nothing writes it again before the
                    // buffer is recycled, which needs this message released;
                    // `buf` is valid for `len >= n` bytes by our contract, and
                    // the two allocations are distinct.
                    unsafe { std::ptr::copy_nonoverlapping(ptr.add(u.offset as usize), buf, n) };
                }
                self.sh.release_in(self.core(), st, &mut pool, i)?;
                drop(pool);
                st.stats.unexpected_short += 1;
                if u.hdr_data & HDR_SYNC != 0 {
                    st.stats.sync_acks += 1;
                    // Synchronous send, received late: acknowledge
                    // explicitly (Fig. 5).
                    self.control(st, u.initiator, ACK_PT, u.hdr_data, false);
                }
                let r = &mut st.reqs[id.idx as usize];
                r.status = Some(status);
                r.result = Some(finish_status(status));
                Ok(())
            }
            (PROTO_SHORT, None) if u.rlength == 0 => {
                // Zero bytes found no buffer room: nothing to fetch.
                if u.hdr_data & HDR_SYNC != 0 {
                    st.stats.sync_acks += 1;
                    self.control(st, u.initiator, ACK_PT, u.hdr_data, false);
                }
                let r = &mut st.reqs[id.idx as usize];
                r.status = Some(status);
                r.result = Some(finish_status(status));
                Ok(())
            }
            (PROTO_SHORT, None) | (PROTO_LONG, _)
                if u.hdr_data & HDR_READ != 0 || (f.proto == PROTO_LONG && u.hdr_data != 0) =>
            {
                // Fig. 7: get the data from the sender's read portal — a
                // long message, or a short one that found no buffer room.
                if f.proto == PROTO_LONG {
                    st.stats.unexpected_long += 1;
                } else if u.hdr_data & HDR_SYNC != 0 {
                    st.stats.sync_acks += 1;
                }
                let r = &mut st.reqs[id.idx as usize];
                r.kind = Kind::RecvGet;
                r.status = Some(status);
                if f.proto == PROTO_SHORT && u.hdr_data & HDR_SYNC != 0 {
                    r.ack_after = Some((u.initiator, u.hdr_data));
                }
                // SAFETY: by our contract. Threshold 1: the reply (a get
                // request itself counts nothing).
                let md = unsafe {
                    ni.md_bind_raw(
                        &MdDesc::default()
                            .threshold(Threshold::Count(1))
                            .eq(self.req_eq)
                            .user_ptr(id.user_ptr()),
                        buf,
                        len,
                        Unlink::Unlink,
                    )
                }
                .map_err(ptl)?;
                st.reqs[id.idx as usize].md = Some(md);
                ni.get_region(
                    md,
                    0,
                    n as u64,
                    &Remote::new(u.initiator, READ_PT, u.hdr_data),
                )
                .map_err(ptl)?;
                Ok(())
            }
            _ => {
                let e = MpiError::ReadySendUnmatched {
                    sender: f.src as i32,
                    tag: f.tag as i32,
                };
                st.reqs[id.idx as usize].result = Some(Err(e));
                Ok(())
            }
        }
    }

    /// A library message nobody waits for: a zero-length put to `pt` of
    /// `to` (an explicit synchronous-send acknowledgment), or with `get` a
    /// zero-length get from it (releasing a long send whose data will never
    /// be fetched). A failure is logged: the message it answers is already
    /// handled.
    fn control(&self, st: &mut State, to: ProcessId, pt: PortalIndex, bits: u64, get: bool) {
        let peer = self.job.rank_of(to).unwrap_or(u32::MAX);
        let cid = self.new_req(st, Kind::Control, peer);
        if let Some(r) = st.reqs.get_mut(cid.idx as usize) {
            r.detached = true;
        }
        let ni = self.ni();
        let r = (|| -> Result<()> {
            let md = ni
                .md_bind(
                    &MdDesc::default()
                        .threshold(Threshold::Count(1))
                        .eq(self.req_eq)
                        .user_ptr(cid.user_ptr()),
                    Vec::new(),
                    Unlink::Unlink,
                )
                .map_err(ptl)?;
            st.reqs[cid.idx as usize].md = Some(md);
            let remote = Remote::new(to, pt, bits);
            if get {
                ni.get(md, &remote).map_err(ptl)
            } else {
                ni.put(md, AckReq::NoAck, &remote, 0).map_err(ptl)
            }
        })();
        if let Err(e) = r {
            self.abort(st, cid, e);
        }
    }

    /// Look for a message matching the receive without receiving it.
    pub(crate) fn iprobe(
        &self,
        ctx: u16,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<Option<Status>> {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        self.check(&st)?;
        let recv = bits::receive(ctx, src, tag);
        Ok(st
            .saved
            .iter()
            .find(|u| bits::accepts(recv, u.bits))
            .map(|u| {
                let f = bits::decode(u.bits);
                Status::new(
                    f.src as i32,
                    f.tag as i32,
                    u.rlength as usize,
                    u.rlength as usize,
                )
            }))
    }

    /// Wait until a matching message is here.
    pub(crate) fn probe(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
    ) -> Result<Status> {
        loop {
            if let Some(s) = self.iprobe(ctx, src.map(|s| s.0), tag)? {
                return Ok(s);
            }
            let st = self.lock();
            let dead = match src {
                Some((_, w)) => st.dead.contains(&w).then_some(w),
                None => dead_member(&st, ctx),
            };
            drop(st);
            if let Some(w) = dead {
                return Err(dead_peer(w));
            }
            self.block();
        }
    }

    // ----- completion --------------------------------------------------------

    /// Sleep until some event arrives (or a short slice passes). Drives the
    /// transport meanwhile in polling mode.
    fn block(&self) {
        // Only wait for news here; events are taken under the device lock so
        // that several threads never reorder them.
        match self
            .ni()
            .eq_block(&[self.req_eq, self.unexp_eq], Some(WAIT_SLICE))
        {
            Ok(_) | Err(PtlError::Timeout) => {}
            Err(e) => {
                self.lock().fatal.get_or_insert(ptl(e));
                std::thread::sleep(WAIT_SLICE);
            }
        }
    }

    /// The result of `id` if it is complete (and then forget it). After a
    /// fatal error, the request is aborted: its engine objects are unlinked
    /// (this may take several calls while a transfer finishes) and it
    /// completes with the error.
    fn settled(&self, st: &mut State, id: ReqId) -> Option<Completed> {
        if let Some(c) = Self::take_result(st, id) {
            return Some(c);
        }
        let e = st.fatal.clone()?;
        self.abort(st, id, e);
        Self::take_result(st, id)
    }

    /// The result of `id` if it is complete (and then forget it).
    pub(crate) fn test(&self, id: ReqId) -> Result<Option<Result<Status>>> {
        Ok(self.test_owned(id)?.map(|(r, _)| r))
    }

    /// Like [`Device::test`], also handing back the request's owned memory.
    pub(crate) fn test_owned(&self, id: ReqId) -> Result<Option<Completed>> {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        Ok(self.settled(&mut st, id))
    }

    /// True if `id` is complete (or gone), without consuming it.
    pub(crate) fn is_complete(&self, id: ReqId) -> bool {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        if let Some(e) = st.fatal.clone() {
            self.abort(&mut st, id, e);
        }
        st.reqs
            .get(id.idx as usize)
            .filter(|r| r.gen == id.gen)
            .is_none_or(complete)
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
        let mut stale = Vec::new();
        st.saved.retain(|u| {
            let mine = bits::decode(u.bits).ctx as usize & !1 == id;
            if mine {
                stale.push(*u);
            }
            !mine
        });
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
        st.free_ctx[id / 64] |= 0b11 << (id % 64);
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
        stats
    }

    fn take_result(st: &mut State, id: ReqId) -> Option<Completed> {
        let Some(r) = st.reqs.get(id.idx as usize).filter(|r| r.gen == id.gen) else {
            // Completed and forgotten already (its scope settled it).
            return Some((Err(MpiError::StaleRequest), None));
        };
        if !complete(r) {
            return None;
        }
        let r = st.reqs.remove(id.idx as usize);
        r.result.map(|res| (res, r.owned))
    }

    /// Wait for `id`.
    pub(crate) fn wait(&self, id: ReqId) -> Result<Status> {
        self.wait_owned(id).map(|(s, _)| s)
    }

    /// Wait for `id`; its status and owned memory. Returns only once the
    /// request holds nothing in the engine: after success, after its own
    /// failure, and after a fatal error of the library alike.
    pub(crate) fn wait_owned(
        &self,
        id: ReqId,
    ) -> Result<(Status, Option<Box<dyn std::any::Any + Send>>)> {
        loop {
            if let Some((r, owned)) = self.test_owned(id)? {
                return r.map(|s| (s, owned));
            }
            self.block();
        }
    }

    /// Wait until one of `ids` completes; its index and result.
    pub(crate) fn wait_any(&self, ids: &[ReqId]) -> Result<(usize, Result<Status>)> {
        if ids.is_empty() {
            return Err(MpiError::InvalidBuffer(
                "wait_any needs at least one request",
            ));
        }
        loop {
            self.poll();
            {
                let mut st = self.lock();
                self.drain(&mut st);
                for (i, id) in ids.iter().enumerate() {
                    if let Some((r, _)) = Self::take_result(&mut st, *id) {
                        return Ok((i, r));
                    }
                }
                if let Some(e) = st.fatal.clone() {
                    for id in ids {
                        self.abort(&mut st, *id, e.clone());
                    }
                    for (i, id) in ids.iter().enumerate() {
                        if let Some((r, _)) = Self::take_result(&mut st, *id) {
                            return Ok((i, r));
                        }
                    }
                }
            }
            self.block();
        }
    }

    /// Cancel a pending receive. True if it was cancelled (false: it
    /// completed, or is completing, normally).
    pub(crate) fn cancel(&self, id: ReqId) -> Result<bool> {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return Ok(false);
        };
        if r.result.is_some() || r.kind != Kind::Recv {
            return Ok(false);
        }
        let Some(me) = r.me else { return Ok(false) };
        match self.ni().me_unlink(me) {
            Ok(_) => {
                r.me = None;
                r.md = None;
                r.result = Some(Ok(Status::cancelled()));
                Ok(true)
            }
            // A message is being deposited: it will complete.
            Err(PtlError::MdInUse) => Ok(false),
            Err(PtlError::InvalidHandle { .. }) => Ok(false),
            Err(e) => Err(ptl(e)),
        }
    }

    /// Forget a request whose owner went away: it finishes on its own (the
    /// memory it uses must stay valid, so for borrowed buffers the caller
    /// completes it first).
    pub(crate) fn detach(&self, id: ReqId) {
        let mut st = self.lock();
        if let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) {
            if complete(r) {
                st.reqs.remove(id.idx as usize);
            } else {
                r.detached = true;
            }
        }
    }

    /// True if `id` is not complete yet.
    pub(crate) fn pending(&self, id: ReqId) -> bool {
        let st = self.lock();
        st.reqs
            .get(id.idx as usize)
            .is_some_and(|r| r.gen == id.gen && !complete(r))
    }

    /// Finalize's first half: complete the requests nobody waits for
    /// (buffered and owned sends, acknowledgments) while driving progress,
    /// so that a peer waiting for them (a get of our data, an explicit
    /// acknowledgment) is served before this process leaves. A request whose
    /// peer died fails; after a fatal error nothing more can complete.
    pub(crate) fn complete_detached(&self) {
        let mut next_note = Instant::now() + Duration::from_secs(10);
        loop {
            self.poll();
            {
                let mut st = self.lock();
                self.drain(&mut st);
                let left = st.reqs.iter().filter(|(_, r)| r.detached).count();
                if left == 0 || st.fatal.is_some() {
                    return;
                }
                if Instant::now() >= next_note {
                    tracing::warn!(
                        requests = left,
                        "finalize is waiting for sends no receive has matched yet"
                    );
                    next_note = Instant::now() + Duration::from_secs(10);
                }
            }
            self.block();
        }
    }

    /// True if the transport gave up on some peer (a job with a dead rank
    /// cannot hold a barrier).
    pub(crate) fn peers_failed(&self) -> bool {
        let mut st = self.lock();
        self.drain(&mut st);
        !st.dead.is_empty()
    }

    /// Finalize's second half: the job-wide barrier, while driving progress
    /// if the transport needs calls for it (polling mode), so that a peer
    /// still finishing its own requests with us is served.
    pub(crate) fn final_barrier(&self) -> Result<()> {
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

/// A dead member of context `ctx` (a communicator some receive from any
/// source used), if any: the lowest.
fn dead_member(st: &State, ctx: u16) -> Option<u32> {
    let members = st.members.get(&ctx)?;
    members
        .iter()
        .copied()
        .filter(|r| st.dead.contains(r))
        .min()
}

/// The error of an operation with a peer the transport gave up on.
fn dead_peer(rank: u32) -> MpiError {
    MpiError::PeerFailed {
        rank: rank as i32,
        why: "the transport gave up on it (connection lost or refused)".into(),
    }
}

/// A finished request: its result and the memory it owned.
pub(crate) type Completed = (Result<Status>, Option<Box<dyn std::any::Any + Send>>);

fn finish_status(s: Status) -> Result<Status> {
    if s.is_truncated() {
        Err(MpiError::Truncated(s))
    } else {
        Ok(s)
    }
}
