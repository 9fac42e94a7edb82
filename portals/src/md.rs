//! Memory descriptors: a region of memory plus the rules for how incoming
//! and outgoing operations may use it (`ptl_md_t`).

use crate::engine::Region;
use crate::event::MdSnapshot;
use crate::handle::{CtHandle, CtKey, EqHandle, EqKey, MeKey};
use crate::types::{Threshold, Unlink};

pub mod iovec;

pub use iovec::Iovec;
use iovec::Segments;

bitflags::bitflags! {
    /// Options of a memory descriptor (`PTL_MD_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct MdOptions: u32 {
        /// Respond to put operations (`PTL_MD_OP_PUT`).
        const OP_PUT = 1 << 0;
        /// Respond to get operations (`PTL_MD_OP_GET`).
        const OP_GET = 1 << 1;
        /// Use the offset carried by each request instead of the locally
        /// managed one, and do not advance the local offset
        /// (`PTL_MD_MANAGE_REMOTE`).
        const MANAGE_REMOTE = 1 << 2;
        /// Accept a request longer than the remaining space and move only
        /// what fits; without it such a request is rejected and passed on to
        /// the next match entry (`PTL_MD_TRUNCATE`).
        const TRUNCATE = 1 << 3;
        /// Never send acknowledgments, even if requested
        /// (`PTL_MD_ACK_DISABLE`).
        const ACK_DISABLE = 1 << 4;
        /// Enable the high-water mark: once `local_offset + max_size >
        /// length` the descriptor is exhausted (inactive), so with messages
        /// of at most `max_size` bytes each accepted message fits whole
        /// (`PTL_MD_MAX_SIZE`; seed 001 §5). A longer message is not refused
        /// for its size alone: the usual fit/truncate rule decides. The rule
        /// holds from creation on: a descriptor whose `max_size` exceeds its
        /// length never accepts anything (Portals 3.3).
        const MAX_SIZE = 1 << 5;
        /// Also generate the `*Start` events (in Portals 3.3 these are on by
        /// default; here they are opt-in).
        const EVENT_START = 1 << 6;
        /// Do not generate completion events (`PTL_MD_EVENT_END_DISABLE`).
        /// `Unlink` events are still generated.
        const EVENT_END_DISABLE = 1 << 7;
        /// Count the requests this descriptor serves as a target — its
        /// `Put`, `Get`, `Atomic` and `FetchAtomic` events — on its counting event
        /// (`PTL_LE_EVENT_CT_COMM`).
        const CT_COMM = 1 << 8;
        /// Count the `Sent` events of puts (and get-puts and atomics) sent from this
        /// descriptor on its counting event (`PTL_MD_EVENT_CT_SEND`).
        const CT_SEND = 1 << 9;
        /// Count the `Ack` events of puts sent from this descriptor on its
        /// counting event (`PTL_MD_EVENT_CT_ACK`).
        const CT_ACK = 1 << 10;
        /// Count the `Reply` events of gets into this descriptor on its
        /// counting event (`PTL_MD_EVENT_CT_REPLY`).
        const CT_REPLY = 1 << 11;
        /// A counted event that succeeded adds its `mlength` (bytes moved)
        /// to the success count instead of one; a failed one still adds
        /// one to the failure count (`PTL_MD_EVENT_CT_BYTES`,
        /// `PTL_LE_EVENT_CT_BYTES`).
        const CT_BYTES = 1 << 12;
        /// A request this descriptor served only in part because it was
        /// longer than the room left ([`MdOptions::TRUNCATE`]: `mlength <
        /// rlength`) counts as a *failure* on the counting event, not a
        /// success. A portals-rs extension (Portals 4 counts a truncated
        /// deposit as a success): a layer that posts a buffer of exactly
        /// the length it expects and counts arrivals, with no event queue
        /// to read `rlength` from, learns this way that a sender sent more
        /// than it was given room for, instead of losing the rest silently.
        const CT_TRUNCATED_FAILS = 1 << 13;
        /// Do not generate `Sent` events (`PTL_MD_EVENT_SEND_DISABLE`,
        /// Portals 4). For a put that asks for an acknowledgment the `Ack`
        /// says everything the `Sent` would have: the engine posts it only
        /// after the send completed (and gave the source bytes back), and
        /// a send that fails posts the awaited `Ack` with the failure. A
        /// layer that waits for the acknowledgment anyway (MPI's short and
        /// long sends) saves an event per message this way. Counting
        /// ([`MdOptions::CT_SEND`]) is not affected.
        const EVENT_SEND_DISABLE = 1 << 14;
        /// Every counting option except [`MdOptions::CT_BYTES`]: count all
        /// the completion events of this descriptor, one per event.
        const CT_ALL = Self::CT_COMM.bits() | Self::CT_SEND.bits()
            | Self::CT_ACK.bits() | Self::CT_REPLY.bits();
    }
}

/// The description of a memory descriptor apart from its memory: what
/// `md_attach`/`md_bind` take and `md_update` replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdDesc {
    /// Operations left before the descriptor becomes inactive.
    pub threshold: Threshold,
    /// High-water-mark size, used with [`MdOptions::MAX_SIZE`].
    pub max_size: u64,
    /// Options.
    pub options: MdOptions,
    /// A value of the user's choosing, reported in every event.
    pub user_ptr: u64,
    /// Where events about this descriptor go; `None` for no events.
    pub eq: Option<EqHandle>,
    /// The counting event that counts this descriptor's completion events
    /// (Portals 4's `ct_handle`), beside or instead of `eq`. Which events
    /// count is chosen by the `CT_*` options (none by default, as in
    /// Portals 4); counting does not depend on `eq` or on
    /// [`MdOptions::EVENT_END_DISABLE`]. Start and `Unlink` events are
    /// never counted.
    pub ct: Option<CtHandle>,
}

impl Default for MdDesc {
    fn default() -> Self {
        MdDesc {
            threshold: Threshold::Infinite,
            max_size: 0,
            options: MdOptions::empty(),
            user_ptr: 0,
            eq: None,
            ct: None,
        }
    }
}

impl MdDesc {
    /// A descriptor description with the given options, infinite threshold,
    /// no event queue.
    pub fn new(options: MdOptions) -> Self {
        MdDesc {
            options,
            ..MdDesc::default()
        }
    }

    /// Set the threshold.
    pub fn threshold(mut self, threshold: Threshold) -> Self {
        self.threshold = threshold;
        self
    }

    /// Set the event queue.
    pub fn eq(mut self, eq: EqHandle) -> Self {
        self.eq = Some(eq);
        self
    }

    /// Set the counting event (choose what it counts with the `CT_*`
    /// options).
    pub fn ct(mut self, ct: CtHandle) -> Self {
        self.ct = Some(ct);
        self
    }

    /// Enable the high-water mark with this `max_size`.
    pub fn max_size(mut self, max_size: u64) -> Self {
        self.max_size = max_size;
        self.options |= MdOptions::MAX_SIZE;
        self
    }

    /// Set the user value.
    pub fn user_ptr(mut self, user_ptr: u64) -> Self {
        self.user_ptr = user_ptr;
        self
    }
}

/// The memory behind a descriptor.
pub(crate) enum Memory {
    /// Owned by the engine while attached and handed back on unlink.
    Owned(Vec<u8>),
    /// Caller memory attached through the `unsafe` raw API.
    Raw { ptr: *mut u8, len: usize },
    /// A list of segments (`PTL_MD_IOVEC`), owned or caller memory.
    Iovec(Segments),
}

// SAFETY: `Memory` is a buffer (owned, or raw memory whose owner promised at
// attach time that it stays valid and unaliased until unlink). The engine
// hands out disjoint regions of it to at most one writer at a time under its
// own synchronisation, so moving it between threads is sound.
unsafe impl Send for Memory {}

impl Memory {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Memory::Owned(v) => v.len() as u64,
            Memory::Raw { len, .. } => *len as u64,
            Memory::Iovec(s) => s.len(),
        }
    }

    /// The `len` bytes at logical offset `start`, which the caller checked
    /// lie inside. Obtaining a region does not create a reference to the
    /// bytes, so it is fine while other regions are being written through
    /// earlier copies.
    pub(crate) fn region(&mut self, start: u64, len: u64) -> Region {
        match self {
            Memory::Owned(v) => {
                Region::contiguous(v.as_mut_ptr().wrapping_add(start as usize), len as usize)
            }
            Memory::Raw { ptr, .. } => {
                Region::contiguous(ptr.wrapping_add(start as usize), len as usize)
            }
            Memory::Iovec(s) => s.region(start, len as usize),
        }
    }

    /// Address of the first byte (of the first segment, for an iovec).
    fn start_addr(&mut self) -> usize {
        match self {
            Memory::Owned(v) => v.as_mut_ptr() as usize,
            Memory::Raw { ptr, .. } => *ptr as usize,
            Memory::Iovec(s) => s.first_addr(),
        }
    }

    /// True if the engine owns the memory (and keeps it for the user after
    /// an automatic unlink).
    pub(crate) fn is_owned(&self) -> bool {
        match self {
            Memory::Owned(_) => true,
            Memory::Raw { .. } => false,
            Memory::Iovec(s) => s.is_owned(),
        }
    }

    /// True for memory that only `md_unlink_iovec` can give back.
    pub(crate) fn is_owned_iovec(&self) -> bool {
        matches!(self, Memory::Iovec(s) if s.is_owned())
    }

    /// The owned memory as one buffer. `None` for caller memory; must not
    /// be called for owned segments (see `is_owned_iovec`).
    pub(crate) fn into_owned(self) -> Option<Vec<u8>> {
        match self {
            Memory::Owned(v) => Some(v),
            Memory::Raw { .. } => None,
            Memory::Iovec(s) => {
                debug_assert!(!s.is_owned(), "owned segments leave through into_segments");
                None
            }
        }
    }

    /// The owned memory as a list of buffers (one for an ordinary
    /// descriptor). `None` for caller memory.
    pub(crate) fn into_segments(self) -> Option<Vec<Vec<u8>>> {
        match self {
            Memory::Owned(v) => Some(vec![v]),
            Memory::Raw { .. } => None,
            Memory::Iovec(s) => s.into_owned(),
        }
    }
}

/// Lifecycle of a descriptor slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MdState {
    /// Linked and usable (subject to threshold and high-water mark).
    Live,
    /// Consumed with `Unlink::Unlink`; will be unlinked when its transfers in
    /// progress finish. Never matches again.
    Unlinking,
    /// Unlinked automatically; only its owned memory remains, waiting for
    /// `md_reclaim`.
    Parked,
}

/// A byte range of the descriptor that a transfer in progress reads or
/// writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IoRange {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The transport writes this range (a deposit or a reply landing);
    /// otherwise it only reads it (a send).
    pub(crate) write: bool,
    /// An atomic operation waits to be applied to this range by the engine
    /// (under its lock); the transport does not touch it.
    pub(crate) atomic: bool,
}

impl IoRange {
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }
}

/// How a lent range is used by the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// Kept for an atomic operation the engine applies itself: other
    /// transfers treat it as read (nothing may land on it), and atomics do
    /// not wait for each other's (`engine/atomics.rs`).
    Atomic,
}

pub(crate) struct MemoryDescriptor {
    pub(crate) mem: Memory,
    pub(crate) length: u64,
    pub(crate) desc: MdDesc,
    pub(crate) eq: Option<EqKey>,
    /// The counting event, resolved when the description was set; a
    /// counter freed since resolves to nothing and counts nothing.
    pub(crate) ct: Option<CtKey>,
    pub(crate) local_offset: u64,
    pub(crate) me: Option<MeKey>,
    pub(crate) unlink: Unlink,
    pub(crate) state: MdState,
    /// The high-water mark was crossed.
    pub(crate) exhausted: bool,
    /// Regions lent to the NAL. Capacity is kept, so steady-state traffic
    /// does not allocate.
    pub(crate) io: Vec<IoRange>,
    /// Initiated operations still waiting for an acknowledgment or reply.
    pub(crate) awaiting: u32,
    /// Triggered operations recorded against this descriptor and not yet
    /// issued: unlinking it cancels them (`engine/triggered.rs`).
    pub(crate) triggered: u32,
}

/// What a descriptor decided about an incoming request.
pub(crate) struct Acceptance {
    pub(crate) offset: u64,
    pub(crate) mlength: u64,
}

impl MemoryDescriptor {
    pub(crate) fn new(
        mem: Memory,
        desc: MdDesc,
        eq: Option<EqKey>,
        ct: Option<CtKey>,
        unlink: Unlink,
    ) -> Self {
        let length = mem.len();
        let mut d = MemoryDescriptor {
            mem,
            length,
            desc,
            eq,
            ct,
            local_offset: 0,
            me: None,
            unlink,
            state: MdState::Live,
            exhausted: false,
            io: Vec::new(),
            awaiting: 0,
            triggered: 0,
        };
        d.check_high_water_mark();
        d
    }

    /// Apply the high-water mark to the current offset and description: the
    /// descriptor is exhausted once `local_offset + max_size > length`. The
    /// same rule at creation (Portals 3.3: a descriptor whose `max_size`
    /// exceeds its length is inactive from the start), after each deposit,
    /// and after `md_update`.
    pub(crate) fn check_high_water_mark(&mut self) {
        self.exhausted = self.desc.options.contains(MdOptions::MAX_SIZE)
            && self.local_offset.saturating_add(self.desc.max_size) > self.length;
    }

    /// Usable for new operations: linked, threshold left, high-water mark
    /// not crossed.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.state == MdState::Live && self.desc.threshold.is_active() && !self.exhausted
    }

    /// Decide whether an incoming request of `rlength` bytes is accepted and
    /// where it goes. `required` are the operation options it needs.
    #[inline]
    pub(crate) fn accept(
        &self,
        required: MdOptions,
        rlength: u64,
        remote_offset: u64,
    ) -> Option<Acceptance> {
        if !self.is_active() || !self.desc.options.contains(required) {
            return None;
        }
        let opts = self.desc.options;
        let offset = if opts.contains(MdOptions::MANAGE_REMOTE) {
            remote_offset
        } else {
            self.local_offset
        };
        let avail = self.length.checked_sub(offset)?;
        let mlength = if rlength <= avail {
            rlength
        } else if opts.contains(MdOptions::TRUNCATE) {
            avail
        } else {
            return None;
        };
        Some(Acceptance { offset, mlength })
    }

    /// Count one operation against the threshold.
    pub(crate) fn consume(&mut self) {
        self.desc.threshold.consume();
    }

    /// Advance the local offset past an accepted incoming transfer and apply
    /// the high-water mark.
    pub(crate) fn advance(&mut self, mlength: u64) {
        if !self.desc.options.contains(MdOptions::MANAGE_REMOTE) {
            self.local_offset += mlength;
        }
        if !self.exhausted {
            self.check_high_water_mark();
        }
    }

    /// True if the descriptor is consumed and should unlink itself.
    pub(crate) fn wants_unlink(&self) -> bool {
        self.unlink == Unlink::Unlink
            && self.state != MdState::Parked
            && (!self.desc.threshold.is_active() || self.exhausted)
    }

    /// Lend `start..start + len` (checked by the caller to lie inside) to
    /// the transport until `give_back`.
    pub(crate) fn lend(&mut self, start: u64, len: u64, access: Access) -> Region {
        self.io.push(IoRange {
            start,
            end: start + len,
            write: access == Access::Write,
            atomic: access == Access::Atomic,
        });
        self.mem.region(start, len)
    }

    pub(crate) fn give_back(&mut self, start: u64, len: u64) {
        let end = start + len;
        if let Some(i) = self
            .io
            .iter()
            .position(|x| x.start == start && x.end == end)
        {
            self.io.swap_remove(i);
        }
    }

    /// True if `start..end` overlaps a lent range that the transport writes,
    /// or (with `Access::Write`) any lent range.
    pub(crate) fn io_conflicts(&self, start: u64, end: u64, access: Access) -> bool {
        self.io
            .iter()
            .any(|r| r.overlaps(start, end) && (r.write || access == Access::Write))
    }

    /// True if the transport reads or writes bytes of `start..end` (lent
    /// ranges other than those kept for atomics): an atomic operation on
    /// them must wait.
    pub(crate) fn transport_overlaps(&self, start: u64, end: u64) -> bool {
        self.io.iter().any(|r| !r.atomic && r.overlaps(start, end))
    }

    pub(crate) fn snapshot(&mut self, eq: Option<EqHandle>) -> MdSnapshot {
        MdSnapshot {
            start: self.mem.start_addr(),
            length: self.length,
            threshold: self.desc.threshold,
            max_size: self.desc.max_size,
            options: self.desc.options,
            user_ptr: self.desc.user_ptr,
            eq,
            local_offset: self.local_offset,
        }
    }
}
