//! The sans-I/O Portals engine.
//!
//! [`Engine`] holds every object of one network interface (portal table,
//! match entries, memory descriptors, event queues, access control, the
//! initiator's pending operations and the target's transfers in progress)
//! and implements the Portals semantics as a deterministic state machine:
//!
//! * the API side creates and destroys objects and *initiates* operations,
//!   which returns an [`Outbound`] message for the transport to send;
//! * the transport side feeds decoded [`Header`]s in with
//!   [`Engine::recv_header`], which answers with a [`RecvAction`]: where the
//!   payload goes (a region of descriptor memory, so a NAL can read from the
//!   socket straight into it), what to discard, and what to send back;
//! * the transport reports completions ([`Engine::recv_complete`],
//!   [`Engine::send_complete`], [`Engine::recv_abort`],
//!   [`Engine::peer_failed`]), and the engine posts events, sends
//!   acknowledgments and unlinks what was consumed.
//!
//! No sockets, no threads, no clocks. [`crate::NetworkInterface`] wraps an
//! engine in a mutex and connects it to a [`crate::Nal`].
//!
//! The object operations live beside this file, one kind each:
//! `engine/entries.rs` (match entries), `engine/index.rs` (finding the
//! first match), `engine/descriptors.rs` (memory descriptors),
//! `engine/queues.rs` (event queues and flow control),
//! `engine/receive.rs` (incoming headers: matching, deposits, acks and
//! replies arriving), `engine/atomics.rs` (atomic operations),
//! `engine/counters.rs` (counting events), `engine/triggered.rs`
//! (operations a counter issues), `engine/initiate.rs` (initiating puts,
//! gets and get-puts) and `engine/completions.rs` (the completions the
//! transport reports); this file keeps the engine's state, handles and
//! event posting.
//!
//! # Memory lent to the transport
//! A region handed out in a [`RecvAction::Deposit`] or in an [`Outbound`]
//! payload stays valid until its token is completed: the descriptor it
//! belongs to refuses to unlink (`MdInUse`) while regions are lent, and
//! regions lent for writing never overlap other lent regions unless the
//! user's own remote offsets make them overlap.

use slotmap::SlotMap;

mod atomics;
mod completions;
mod counters;
mod descriptors;
mod entries;
pub(crate) mod index;
mod initiate;
mod iovec;
mod queues;
mod receive;
mod region;
mod triggered;

pub use counters::CtEvent;
pub use region::{Pieces, Region};
pub use triggered::Trigger;

use crate::acl::{AcEntry, AccessControl};
use crate::eq::EventQueue;
use crate::error::{PtlError, Result};
use crate::event::{Event, EventKind};
use crate::handle::{
    fresh_tag, op_cookie, CtKey, EqHandle, EqKey, MdHandle, MdKey, MeHandle, MeKey, OpKey, XferKey,
};
use crate::md::{Access, MdOptions, MdState, MemoryDescriptor};
use crate::me::{MatchEntry, MatchList};
use crate::types::{AckReq, FailType, PortalIndex, ProcessId, Remote};
use crate::wire::{Header, Op};

/// The largest [`NiLimits::max_atomic_size`] an interface accepts (1 MiB):
/// each atomic in progress at a target holds a buffer of that size.
pub const MAX_ATOMIC_SIZE: u64 = 1 << 20;

/// Limits of a network interface (`ptl_ni_limits_t`). The defaults suit an
/// MPI process; raise them for storage servers with many posted buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NiLimits {
    /// Maximum number of match entries.
    pub max_mes: usize,
    /// Maximum number of memory descriptors.
    pub max_mds: usize,
    /// Maximum number of event queues.
    pub max_eqs: usize,
    /// Number of portal table entries (at least 64).
    pub pt_entries: u32,
    /// Number of access-control entries (at least 1).
    pub ac_entries: u32,
    /// Largest event queue that may be allocated.
    pub max_eq_capacity: usize,
    /// Maximum number of counting events.
    pub max_cts: usize,
    /// Maximum number of triggered operations recorded and not yet issued
    /// (past it, recording one fails with `NoSpace`).
    pub max_triggered: usize,
    /// Most segments one iovec descriptor may have
    /// ([`Engine::md_bind_iovec`]); a longer list is refused with
    /// [`crate::error::IovecError::TooManySegments`].
    pub max_iovecs: usize,
    /// Largest atomic operation, in bytes of source elements
    /// (`max_atomic_size`; at least 16, one element of every type, and at
    /// most [`MAX_ATOMIC_SIZE`]). Larger
    /// requests fail at the initiator with [`PtlError::Atomic`], and a
    /// target refuses them whole (see `engine/atomics.rs`). Each atomic in
    /// progress at a target holds a buffer of this size plus 16 bytes.
    pub max_atomic_size: u64,
}

impl Default for NiLimits {
    fn default() -> Self {
        NiLimits {
            max_mes: 1 << 20,
            max_mds: 1 << 20,
            max_eqs: 1 << 10,
            pt_entries: 64,
            ac_entries: 16,
            max_eq_capacity: 1 << 24,
            max_cts: 1 << 16,
            max_triggered: 1 << 16,
            max_iovecs: 1 << 16,
            max_atomic_size: 512,
        }
    }
}

/// Counters of a network interface (the 3.3 status registers, expanded).
/// Every message the engine throws away is counted in exactly one
/// `dropped_*` counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NiStatus {
    /// Requests that matched no entry of their portal's match list.
    pub dropped_no_match: u64,
    /// Requests that matched at least one entry, but every matching entry's
    /// descriptor rejected them: inactive (threshold used up, unlinking, or
    /// exhausted by its high-water mark — which a descriptor whose
    /// `max_size` exceeds its length is from the start), wrong operation, or
    /// longer than the space left without `TRUNCATE`. A message longer than
    /// `max_size` is *not* rejected for that alone: the high-water mark only
    /// decides when the descriptor stops accepting (seed 001 §5).
    pub dropped_rejected: u64,
    /// Messages with a malformed or foreign header: undecodable, wrong job
    /// key, addressed to another process, a portal index outside the table,
    /// or a response that contradicts its request.
    pub dropped_bad_header: u64,
    /// Requests refused by the access-control table.
    pub dropped_access_denied: u64,
    /// Acknowledgments and replies for operations that no longer wait for
    /// one (their descriptor was unlinked, or a duplicate).
    pub dropped_stale_response: u64,
    /// Atomic requests refused before matching: an operation the type does
    /// not support, a length that is not whole elements or exceeds
    /// [`NiLimits::max_atomic_size`], an operand where none belongs.
    pub dropped_atomic_invalid: u64,
    /// Requests accepted by a memory descriptor.
    pub accepted: u64,
    /// Messages initiated (puts, gets, get-puts).
    pub initiated: u64,
    /// Events lost to full event queues.
    pub eq_overflows: u64,
    /// Times an incoming request was held back (answered with
    /// [`RecvAction::Defer`]) because the flow-controlled event queue it
    /// would post to had no free slot. Not a drop: the transport offers the
    /// message again later.
    pub held_back: u64,
}

/// The payload of an outbound message.
#[derive(Debug)]
pub enum Payload {
    /// No payload.
    None,
    /// Bytes of a memory descriptor, lent until the send token completes.
    Region(Region),
    /// Bytes owned by the message (the old contents returned by a get-put).
    Owned(Vec<u8>),
}

impl Payload {
    /// Number of payload bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Region(r) => r.len(),
            Payload::Owned(v) => v.len(),
        }
    }

    /// True if there are no payload bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, PartialEq, Eq)]
enum TokenKind {
    Op(OpKey),
    Xfer(XferKey),
}

/// Completion token for an outbound message. The transport must hand it back
/// exactly once, to [`Engine::send_complete`], when the payload has left the
/// lent memory (or the send failed). Not `Clone`: it cannot be completed
/// twice.
#[derive(Debug, PartialEq, Eq)]
pub struct SendToken(TokenKind);

/// Completion token for an incoming payload being deposited. The transport
/// must hand it back exactly once, to [`Engine::recv_complete`] or
/// [`Engine::recv_abort`].
#[derive(Debug, PartialEq, Eq)]
pub struct RecvToken(TokenKind);

/// A message the transport must send.
#[derive(Debug)]
pub struct Outbound {
    /// The header to send first.
    pub header: Header,
    /// The payload that follows it (`header.payload_len()` bytes).
    pub payload: Payload,
    /// If present, complete with [`Engine::send_complete`] once the payload
    /// memory is no longer needed.
    pub token: Option<SendToken>,
}

/// What the transport does with an incoming message after its header.
#[derive(Debug)]
pub enum RecvAction {
    /// Copy the first `region.len()` payload bytes into `region`, discard the
    /// next `discard` bytes, then call [`Engine::recv_complete`] with the
    /// token (which may return a response to send).
    Deposit {
        /// Where the payload goes.
        region: Region,
        /// Payload bytes to skip after the region is full.
        discard: u64,
        /// Completion token.
        token: RecvToken,
    },
    /// Discard this many payload bytes; nothing else to do.
    Discard(u64),
    /// Discard this many payload bytes, then send the response (a reply to a
    /// get, or a negative acknowledgment).
    Respond {
        /// Payload bytes to skip.
        discard: u64,
        /// The message to send back.
        response: Outbound,
    },
    /// Not now: the request matched a descriptor whose event queue is
    /// flow-controlled ([`Engine::eq_set_flow_control`]) and has no free
    /// slot. Nothing changed in the engine. The transport must keep the
    /// message (and every later one from the same peer, to keep their
    /// order) where it is — a shared-memory ring cell unconsumed, a socket
    /// unread, a datagram unprocessed — and offer the header again once
    /// [`crate::NiCore::intake_epoch`] has moved past the value it read
    /// before this call. The sender is then held back by the transport's
    /// own flow control. Only [`Engine::recv_header`] answers this;
    /// [`Engine::recv_header_unheld`] never does.
    Defer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Put,
    Get,
    GetPut,
    Atomic,
    FetchAtomic,
}

impl OpKind {
    /// Sends from its own descriptor and may be acknowledged, as a put.
    const fn is_put_like(self) -> bool {
        matches!(self, OpKind::Put | OpKind::Atomic)
    }

    /// The completion event at the target.
    const fn target_event(self) -> EventKind {
        match self {
            OpKind::Put => EventKind::Put,
            OpKind::Get | OpKind::GetPut => EventKind::Get,
            OpKind::Atomic => EventKind::Atomic,
            OpKind::FetchAtomic => EventKind::FetchAtomic,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    Ack,
    Reply,
}

/// An operation this process initiated.
struct InitOp {
    kind: OpKind,
    /// The descriptor events go to, and that receives the reply of a get.
    md: MdKey,
    /// Get-put only: the descriptor the new data is sent from.
    put_md: Option<MdKey>,
    target: ProcessId,
    pt_index: PortalIndex,
    match_bits: u64,
    hdr_data: u64,
    /// Region of `md` that is sent (put) or receives the reply (get).
    local_offset: u64,
    length: u64,
    /// Get-put only: region of `put_md` that is sent.
    put_offset: u64,
    send_pending: bool,
    awaiting: Awaiting,
    reply_in_progress: Option<u64>,
    /// An acknowledgment that arrived before the transport reported the send
    /// complete (another thread read it first): posted right after `Sent`,
    /// so that for one operation `Sent` always precedes `Ack`.
    early_ack: Option<(u64, u64, FailType)>,
}

/// A request being served at this process (the target).
struct Xfer {
    kind: OpKind,
    md: MdKey,
    initiator: ProcessId,
    pt_index: PortalIndex,
    match_bits: u64,
    hdr_data: u64,
    rlength: u64,
    mlength: u64,
    offset: u64,
    cookie: u64,
    ack: bool,
    /// The acknowledgment may be held back ([`crate::AckReq::Lazy`]).
    ack_lazy: bool,
    /// Get-put only: the new bytes, staged so the swap happens atomically at
    /// completion.
    staging: Vec<u8>,
    /// Atomics only: the operation and its buffer (`engine/atomics.rs`).
    atomic: Option<atomics::AtomicXfer>,
}

/// Fields of an event other than those taken from the descriptor.
struct EvInfo {
    initiator: ProcessId,
    pt_index: PortalIndex,
    match_bits: u64,
    rlength: u64,
    mlength: u64,
    offset: u64,
    hdr_data: u64,
    fail: FailType,
}

/// The Portals engine of one network interface. See the module docs.
pub struct Engine {
    tag: u32,
    id: ProcessId,
    job_key: u64,
    limits: NiLimits,
    portals: Vec<MatchList>,
    /// Per portal: the index that finds the first match (`index`).
    index: Vec<index::PortalIndex>,
    mes: SlotMap<MeKey, MatchEntry>,
    mds: SlotMap<MdKey, MemoryDescriptor>,
    /// Emptied lists of lent ranges of removed descriptors, for new ones
    /// (`engine/descriptors.rs`).
    spare_io: Vec<Vec<crate::md::IoRange>>,
    eqs: SlotMap<EqKey, EventQueue>,
    ops: SlotMap<OpKey, InitOp>,
    xfers: SlotMap<XferKey, Xfer>,
    cts: SlotMap<CtKey, counters::Counter>,
    trig: triggered::TriggerState,
    atoms: atomics::AtomicState,
    acl: AccessControl,
    status: NiStatus,
    /// Set whenever an event is queued; cleared by [`Engine::take_posted`].
    posted: bool,
    /// Peers the transport gave up on, in the order it did, each once.
    failed_peers: Vec<ProcessId>,
    /// Descriptors posting to these queues report their automatic unlinks
    /// through [`Engine::take_watched_unlink`].
    unlink_watch: Vec<EqKey>,
    /// A watched descriptor unlinked itself since the last take.
    watched_unlinked: bool,
    /// A flow-controlled queue that held a request back has room again
    /// since the last [`Engine::take_intake_resumed`].
    intake_resumed: bool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("id", &self.id)
            .field("mes", &self.mes.len())
            .field("mds", &self.mds.len())
            .field("eqs", &self.eqs.len())
            .field("ops", &self.ops.len())
            .field("xfers", &self.xfers.len())
            .field("status", &self.status)
            .finish()
    }
}

impl Engine {
    /// A new engine for process `id` of the job identified by `job_key`.
    pub fn new(id: ProcessId, job_key: u64, limits: NiLimits) -> Result<Engine> {
        if !id.is_concrete() {
            return Err(PtlError::InvalidProcess(id));
        }
        if limits.pt_entries < 64 {
            return Err(PtlError::InvalidArgument(
                "the portal table must have at least 64 entries",
            ));
        }
        if !(16..=MAX_ATOMIC_SIZE).contains(&limits.max_atomic_size) {
            return Err(PtlError::InvalidArgument(
                "max_atomic_size must hold one element of every type (16 bytes) and at most 1 MiB",
            ));
        }
        if limits.ac_entries == 0 {
            return Err(PtlError::InvalidArgument(
                "the access-control table needs at least one entry",
            ));
        }
        Ok(Engine {
            tag: fresh_tag(),
            id,
            job_key,
            limits,
            portals: vec![MatchList::default(); limits.pt_entries as usize],
            index: (0..limits.pt_entries)
                .map(|_| index::PortalIndex::default())
                .collect(),
            mes: SlotMap::with_key(),
            mds: SlotMap::with_key(),
            spare_io: Vec::new(),
            eqs: SlotMap::with_key(),
            ops: SlotMap::with_key(),
            xfers: SlotMap::with_key(),
            cts: SlotMap::with_key(),
            trig: triggered::TriggerState::default(),
            atoms: atomics::AtomicState::default(),
            acl: AccessControl::new(limits.ac_entries as usize),
            status: NiStatus::default(),
            posted: false,
            failed_peers: Vec::new(),
            unlink_watch: Vec::new(),
            watched_unlinked: false,
            intake_resumed: false,
        })
    }

    /// This process's id.
    pub fn id(&self) -> ProcessId {
        self.id
    }

    /// The tag that the handles of this engine carry.
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }

    /// The job key every header must carry.
    pub fn job_key(&self) -> u64 {
        self.job_key
    }

    /// The limits in force.
    pub fn limits(&self) -> NiLimits {
        self.limits
    }

    /// The counters.
    pub fn status(&self) -> NiStatus {
        self.status
    }

    /// Count a message whose header a transport could not decode.
    pub fn note_bad_header(&mut self) {
        self.status.dropped_bad_header += 1;
    }

    /// True if an event was queued since the last call (used to wake
    /// sleepers only when there is news).
    pub fn take_posted(&mut self) -> bool {
        std::mem::take(&mut self.posted)
    }

    /// Watch the descriptors that post their events to `eq` (`None`: stop
    /// watching): when one of them unlinks itself (threshold used up or
    /// high-water mark crossed), [`Engine::take_watched_unlink`] says so
    /// once. [`crate::NiCore::set_unlink_hook`] builds on it to let a
    /// library re-supply buffers from whichever thread made progress.
    pub fn watch_unlinks(&mut self, eq: Option<EqHandle>) -> Result<()> {
        self.unlink_watch = match eq {
            Some(h) => vec![self.eq_key(h)?],
            None => Vec::new(),
        };
        Ok(())
    }

    /// Watch the descriptors of one more queue, `eq`, as
    /// [`Engine::watch_unlinks`] does (one flag for all of them).
    pub fn add_unlink_watch(&mut self, eq: EqHandle) -> Result<()> {
        let k = self.eq_key(eq)?;
        if !self.unlink_watch.contains(&k) {
            self.unlink_watch.push(k);
        }
        Ok(())
    }

    /// True if a watched descriptor unlinked itself since the last call
    /// (see [`Engine::watch_unlinks`]).
    pub fn take_watched_unlink(&mut self) -> bool {
        std::mem::take(&mut self.watched_unlinked)
    }

    /// The peers the transport gave up on ([`Engine::peer_failed`]), in the
    /// order it did, each listed once. The list only grows: a transport may
    /// still reach such a peer later (a new connection), but a layer that
    /// needs every message delivered (MPI) must treat it as dead.
    pub fn failed_peers(&self) -> &[ProcessId] {
        &self.failed_peers
    }

    /// Number of operations and transfers in progress (for diagnostics and
    /// tests: zero when the interface is idle).
    pub fn in_progress(&self) -> (usize, usize) {
        (self.ops.len(), self.xfers.len())
    }

    // ----- handle resolution -------------------------------------------

    /// The key behind a handle, if the handle is from this engine and its
    /// object still exists.
    fn resolve<K: slotmap::Key, V>(
        &self,
        map: &SlotMap<K, V>,
        ni: u32,
        key: K,
        kind: &'static str,
    ) -> Result<K> {
        if ni == self.tag && map.contains_key(key) {
            Ok(key)
        } else {
            Err(PtlError::InvalidHandle { kind })
        }
    }

    fn me_key(&self, h: MeHandle) -> Result<MeKey> {
        self.resolve(&self.mes, h.ni, h.key, MeHandle::KIND)
    }

    fn md_key(&self, h: MdHandle) -> Result<MdKey> {
        self.resolve(&self.mds, h.ni, h.key, MdHandle::KIND)
    }

    /// Resolve a descriptor that must still be linked (not parked).
    fn live_md_key(&self, h: MdHandle) -> Result<MdKey> {
        let k = self.md_key(h)?;
        match self.mds[k].state {
            MdState::Parked => Err(PtlError::InvalidHandle {
                kind: "memory descriptor (already unlinked; only md_unlink and md_read work)",
            }),
            _ => Ok(k),
        }
    }

    fn eq_key(&self, h: EqHandle) -> Result<EqKey> {
        self.resolve(&self.eqs, h.ni, h.key, EqHandle::KIND)
    }

    fn md_handle(&self, key: MdKey) -> MdHandle {
        MdHandle { ni: self.tag, key }
    }

    fn eq_handle(&self, key: EqKey) -> EqHandle {
        EqHandle { ni: self.tag, key }
    }

    fn check_pt(&self, pt: PortalIndex) -> Result<usize> {
        if (pt.0 as usize) < self.portals.len() {
            Ok(pt.0 as usize)
        } else {
            Err(PtlError::InvalidPortalIndex {
                index: pt,
                size: self.portals.len() as u32,
            })
        }
    }

    // ----- access control ---------------------------------------------

    /// Set access-control entry `index` (`PtlACEntry`); `None` clears it so
    /// that it admits nobody.
    pub fn ac_entry(&mut self, index: u32, entry: Option<AcEntry>) -> Result<()> {
        if !self.acl.set(index as usize, entry) {
            return Err(PtlError::InvalidAcIndex {
                index,
                size: self.acl.len() as u32,
            });
        }
        Ok(())
    }

    /// Read access-control entry `index`.
    pub fn ac_get(&self, index: u32) -> Result<Option<AcEntry>> {
        if index as usize >= self.acl.len() {
            return Err(PtlError::InvalidAcIndex {
                index,
                size: self.acl.len() as u32,
            });
        }
        Ok(self.acl.get(index as usize))
    }

    // ----- events ------------------------------------------------------

    /// Post an event of `kind` on descriptor `k`: to its event queue, then
    /// to its counting event (`engine/counters.rs`).
    fn post(&mut self, k: MdKey, kind: EventKind, info: &EvInfo) {
        self.post_event(k, kind, info);
        let truncated = info.mlength < info.rlength;
        self.count(k, kind, info.mlength, info.fail, truncated);
    }

    fn post_event(&mut self, k: MdKey, kind: EventKind, info: &EvInfo) {
        let tag = self.tag;
        let Some(d) = self.mds.get_mut(k) else {
            return;
        };
        let Some(eqk) = d.eq else {
            return;
        };
        let opts = d.desc.options;
        let wanted = match kind {
            EventKind::PutStart
            | EventKind::GetStart
            | EventKind::ReplyStart
            | EventKind::SendStart => opts.contains(MdOptions::EVENT_START),
            EventKind::Unlink => true,
            EventKind::Sent => {
                !opts.intersects(MdOptions::EVENT_END_DISABLE | MdOptions::EVENT_SEND_DISABLE)
            }
            _ => !opts.contains(MdOptions::EVENT_END_DISABLE),
        };
        if !wanted {
            return;
        }
        let Some(eq) = self.eqs.get_mut(eqk) else {
            return;
        };
        let md = d.snapshot(Some(EqHandle { ni: tag, key: eqk }));
        let ev = Event {
            kind,
            initiator: info.initiator,
            pt_index: info.pt_index,
            match_bits: info.match_bits,
            rlength: info.rlength,
            mlength: info.mlength,
            offset: info.offset,
            md_handle: MdHandle { ni: tag, key: k },
            md,
            hdr_data: info.hdr_data,
            sequence: 0,
            fail: info.fail,
        };
        if !eq.push(ev) {
            self.status.eq_overflows += 1;
        }
        self.posted = true;
    }
}

fn xfer_info(x: &Xfer, fail: FailType) -> EvInfo {
    EvInfo {
        initiator: x.initiator,
        pt_index: x.pt_index,
        match_bits: x.match_bits,
        rlength: x.rlength,
        mlength: x.mlength,
        offset: x.offset,
        hdr_data: x.hdr_data,
        fail,
    }
}

/// `offset + length` if the range lies within `md_length`.
fn check_range(offset: u64, length: u64, md_length: u64) -> Result<u64> {
    match offset.checked_add(length) {
        Some(end) if end <= md_length => Ok(end),
        _ => Err(PtlError::OutOfRange {
            offset,
            length,
            md_length,
        }),
    }
}
