//! Short blocking collectives over persistent slots: every member of a
//! communicator has, from the moment the communicator exists, an *inbox*
//! with one slot per (instance parity, sender) on the non-blocking
//! collectives' portal, and an *outbox* of the same shape to put from. A
//! short all-reduce or a barrier then moves each of its messages as one
//! put into the receiver's slot: no receive to post, no matching against
//! the posted and unexpected lists, no acknowledgment, no envelope. It is
//! the Portals form of what Open MPI's and MPICH's shared-memory
//! collectives do with per-peer flags and buffers.
//!
//! **Why two instances' worth of slots suffice.** The algorithms that use
//! the slots (recursive doubling with the non-power-of-two fold, the
//! dissemination barrier) send at most one message from each member to
//! each other per instance, and every member's result depends on every
//! member's contribution. Instances are numbered per communicator in call
//! order, the same everywhere (MPI runs a communicator's collectives in
//! one order). A member sends its message of instance k+2 only after it
//! finished k+1, which needed this process's contribution to k+1, which
//! this process sends only after it finished k — and finishing k means it
//! copied out every slot of k. So a slot of parity k mod 2 is free again
//! before anyone can put instance k+2 into it.
//!
//! **Who may use them.** Only blocking calls made by the thread that runs
//! the communicator's collectives: an instance that overlapped the next
//! one in this process would break the argument above. A second call on
//! the same communicator while one runs is refused with an error, never
//! raced.
//!
//! **Outbox.** A slot of the outbox is rewritten two instances later; the
//! engine refuses to write memory a transfer still reads (`MdInUse`), and
//! the writer then drives progress until the earlier put has left.
//!
//! **Flow control.** The puts go to the request queue, which is
//! flow-controlled like every queue of the device, and overtake the send
//! windows as every collective message does. A sender held back at this
//! process's envelope cap (`saved.rs`) would hold its slot put behind its
//! point-to-point messages: a wait for a slot admits its sender past the
//! cap once the saved envelopes reach a quarter of the cap, as a wait for
//! a collective receive does.

use portals::{
    AckReq, EqHandle, Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, MeHandle,
    NetworkInterface, Position, ProcessId, PtlError, Remote, Threshold, Unlink,
};

use super::nbc::{nbc_bits, NbcComms, NBC_PT};
use super::{dead_peer, gone, ptl, Device, State};
use crate::bits;
use crate::error::{MpiError, Result, COLLECTIVE_WRONG_SIZE};

/// Match-bit kind of the slot entries on [`NBC_PT`] (the context field
/// names the communicator).
const K_SLOT: u64 = 8;

/// Bytes per slot: the longest message of a collective on slots.
pub(crate) const SLOT_BYTES: usize = 256;

/// Communicators larger than this keep to point-to-point collectives: the
/// slots cost 2·n·[`SLOT_BYTES`] bytes twice per member.
pub(crate) const SLOT_MAX_RANKS: usize = 128;

/// `user_ptr` of an inbox (events on the request queue; the context comes
/// from the match bits, the slot from the offset).
pub(super) const SLOTS: u64 = u64::MAX - 5;

/// One communicator's slots (its members are its `NbcComm`'s).
pub(super) struct Slots {
    inbox: MdHandle,
    outbox: MdHandle,
    /// Per inbox slot (2·n): the length that arrived there, if anything.
    arrived: Vec<Option<u16>>,
    /// Instances started on the slots.
    instances: u64,
    /// An instance runs.
    busy: bool,
}

impl Slots {
    fn slot(&self, parity: usize, peer: usize) -> usize {
        parity * (self.arrived.len() / 2) + peer
    }
}

/// An instance of a collective on the slots of communicator `ctx` (see
/// [`Device::slots_begin`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotOp {
    ctx: u16,
    parity: usize,
    flat: bool,
}

impl SlotOp {
    /// Whether the instance runs through one member: every member sends to
    /// rank 0, which combines and answers each (two steps, 2(n−1)
    /// messages), instead of ⌈log₂ n⌉ steps of n messages. Where ranks
    /// take turns on cores, each step costs every rank a turn, and the
    /// steps, not the messages, set the time: an 8-byte all-reduce on 8
    /// ranks and 2 cores took 13.0 µs so against 23.3 µs (medians of three
    /// rounds, shared memory, progress thread; PERFORMANCE.md, stop 40).
    /// Both forms keep the slots' rule of at most one message per ordered pair
    /// and instance, and every member's result depends on every member's
    /// contribution. The same at every member (see [`Device::slots_begin`]).
    pub(crate) fn flat(&self) -> bool {
        self.flat
    }
}

/// Create the slots of a communicator of `n` members, unless it is too
/// small or too large for them. The entry is returned for the
/// communicator's teardown; the outbox is unlinked by [`Slots::teardown`].
pub(super) fn create(
    ni: &NetworkInterface,
    req_eq: EqHandle,
    ctx: u16,
    n: usize,
) -> Result<Option<(MeHandle, Slots)>> {
    if !(2..=SLOT_MAX_RANKS).contains(&n) {
        return Ok(None);
    }
    let bytes = 2 * n * SLOT_BYTES;
    let entry = ni
        .me_attach(
            NBC_PT,
            ProcessId::ANY,
            nbc_bits(K_SLOT, ctx, 0, 0),
            0,
            Unlink::Retain,
            Position::After,
        )
        .map_err(ptl)?;
    let made = (|| -> Result<(MdHandle, MdHandle)> {
        let inbox = ni
            .md_attach(
                entry,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE)
                    .threshold(Threshold::Infinite)
                    .eq(req_eq)
                    .user_ptr(SLOTS),
                vec![0; bytes],
                Unlink::Retain,
            )
            .map_err(ptl)?;
        // No events: the engine itself says when a slot is free again.
        let outbox = ni
            .md_bind(
                &MdDesc::default().threshold(Threshold::Infinite),
                vec![0; bytes],
                Unlink::Retain,
            )
            .map_err(ptl)?;
        Ok((inbox, outbox))
    })();
    match made {
        Ok((inbox, outbox)) => Ok(Some((
            entry,
            Slots {
                inbox,
                outbox,
                arrived: vec![None; 2 * n],
                instances: 0,
                busy: false,
            },
        ))),
        Err(e) => {
            let _ = ni.me_unlink(entry);
            Err(e)
        }
    }
}

impl Slots {
    /// Unlink the outbox (the inbox goes with the communicator's entry).
    pub(super) fn teardown(&self, ni: &NetworkInterface) {
        if let Err(e) = ni.md_unlink(self.outbox) {
            tracing::warn!(error = %e, "could not unlink a collective outbox");
        }
    }
}

/// Refusal of a second collective on one communicator while one runs.
const CONCURRENT: MpiError = MpiError::InvalidBuffer(
    "two collectives at once on one communicator (MPI runs them one at a time, in one order)",
);

impl Device {
    /// Start an instance on the slots of the communicator with context
    /// pair `ctx`, for messages of `bytes` bytes; `None` if they cannot
    /// carry it (no slots, or longer messages), and the caller uses
    /// point-to-point messages. The answer depends only on the
    /// communicator and `bytes`, so every member decides alike; so does
    /// the instance's form ([`SlotOp::flat`]), which depends only on the
    /// job (`portals_runtime::Job::oversubscribed`, or `PTL_COLL_FLAT`).
    /// Pair it with [`Device::slots_end`].
    pub(crate) fn slots_begin(&self, ctx: u16, bytes: usize) -> Result<Option<SlotOp>> {
        if bytes > SLOT_BYTES {
            return Ok(None);
        }
        let mut st = self.lock();
        let Some(s) = st.nbc.get_mut(&ctx).and_then(|c| c.slots.as_mut()) else {
            return Ok(None);
        };
        if s.busy {
            return Err(CONCURRENT);
        }
        s.busy = true;
        let parity = (s.instances & 1) as usize;
        s.instances += 1;
        st.stats.slot_collectives += 1;
        let flat = self.flat_collectives;
        if flat {
            st.stats.flat_collectives += 1;
        }
        Ok(Some(SlotOp { ctx, parity, flat }))
    }

    /// Before a blocking slot collective returns, without a progress
    /// thread: wait until this process's puts of instance `op` have left
    /// it. A put that the transport queued (its ring or socket momentarily
    /// unavailable) would otherwise move only at this process's next
    /// library call, and a member still waiting for it could wait forever
    /// while this one computes (test `the_departure_notice_never_overtakes_an_acknowledgment`
    /// hung this way: rank 0 left a barrier, its put to rank 1 still
    /// queued, and polled a file). A put the transport took at once costs
    /// one engine look here.
    pub(crate) fn slots_flush(&self, op: SlotOp) -> Result<()> {
        if self.ni().nal().progresses_alone() {
            return Ok(());
        }
        let mut tries = 0u32;
        loop {
            let outbox = {
                let mut st = self.lock();
                self.check(&st)?;
                slots(&mut st.nbc, op.ctx)?.2.outbox
            };
            if !self
                .core()
                .with_engine(|e| e.md_busy(outbox))
                .map_err(ptl)?
            {
                return Ok(());
            }
            self.poll();
            tries += 1;
            if tries < 64 {
                std::thread::yield_now();
            } else {
                self.block();
            }
        }
    }

    /// The instance `op` is over (successfully or not).
    pub(crate) fn slots_end(&self, op: SlotOp) {
        let mut st = self.lock();
        if let Some(s) = st.nbc.get_mut(&op.ctx).and_then(|c| c.slots.as_mut()) {
            s.busy = false;
        }
    }

    /// Put `data` into communicator rank `dst`'s slot for this process in
    /// instance `op`. Returns once the put is on its way; waits only while
    /// the same outbox slot two instances ago is still being sent.
    pub(crate) fn slots_send(&self, op: SlotOp, dst: usize, data: &[u8]) -> Result<()> {
        // Progress only when the slot is still busy: the put itself needs
        // none, and the receive that follows drives it anyway.
        let mut tries = 0u32;
        loop {
            if tries > 0 {
                self.poll();
            }
            tries += 1;
            {
                let mut st = self.lock();
                self.check(&st)?;
                let (ranks, me, s) = slots(&mut st.nbc, op.ctx)?;
                let to = *ranks.get(dst).ok_or(OUTSIDE)?;
                let (out, inbox_slot) = (s.slot(op.parity, dst), s.slot(op.parity, me));
                let outbox = s.outbox;
                if let Some(e) = gone(&st, to) {
                    return Err(e);
                }
                let remote = Remote {
                    remote_offset: (inbox_slot * SLOT_BYTES) as u64,
                    ..Remote::new(
                        portals_runtime::process_id(to),
                        NBC_PT,
                        nbc_bits(K_SLOT, op.ctx, 0, 0),
                    )
                };
                let off = (out * SLOT_BYTES) as u64;
                let sent = self.core().with_engine(|e| {
                    e.md_write(outbox, off, data)?;
                    e.put_region(outbox, off, data.len() as u64, AckReq::NoAck, &remote, 0)
                });
                match sent {
                    Ok(out) => {
                        drop(st);
                        self.ni().nal().send(out);
                        return Ok(());
                    }
                    // The put of two instances ago still reads this slot.
                    Err(PtlError::MdInUse) => {}
                    Err(e) => return Err(ptl(e)),
                }
            }
            // Nothing posts an event when that put's bytes are gone (the
            // outbox has no queue), and it has nearly always reached its
            // target already, its writer only about to say so: yield a few
            // times before sleeping a wait slice.
            if tries < 64 {
                std::thread::yield_now();
            } else {
                self.block();
            }
        }
    }

    /// Wait for communicator rank `src`'s message of instance `op` and copy
    /// it into `buf`, which must be exactly as long.
    pub(crate) fn slots_recv(&self, op: SlotOp, src: usize, buf: &mut [u8]) -> Result<()> {
        let mut admitted: Option<ProcessId> = None;
        let got = loop {
            self.poll();
            {
                let mut st = self.lock();
                self.drain(&mut st);
                match self.slot_taken(&mut st, op, src, buf) {
                    Ok(false) => {}
                    done => break done,
                }
                if st.saved.len() >= self.cfg.envelopes / 4 && admitted.is_none() {
                    let (ranks, _, _) = slots(&mut st.nbc, op.ctx)?;
                    let who = portals_runtime::process_id(*ranks.get(src).ok_or(OUTSIDE)?);
                    self.ni().eq_admit(self.unexp_eq, who).map_err(ptl)?;
                    admitted = Some(who);
                }
            }
            self.block();
        };
        if let Some(who) = admitted {
            if let Err(e) = self.ni().eq_unadmit(self.unexp_eq, who) {
                tracing::warn!(error = %e, "could not end a slot wait's admission");
            }
        }
        got.map(|_| ())
    }

    /// Copy out `src`'s slot of `op` if its message arrived (true); an
    /// error if it never can (a member died or finalized, a fatal error).
    fn slot_taken(&self, st: &mut State, op: SlotOp, src: usize, buf: &mut [u8]) -> Result<bool> {
        let (ranks, _, s) = slots(&mut st.nbc, op.ctx)?;
        let from = *ranks.get(src).ok_or(OUTSIDE)?;
        let slot = s.slot(op.parity, src);
        if let Some(len) = s.arrived[slot].take() {
            if usize::from(len) != buf.len() {
                return Err(COLLECTIVE_WRONG_SIZE);
            }
            self.ni()
                .md_read(s.inbox, (slot * SLOT_BYTES) as u64, buf)
                .map_err(ptl)?;
            return Ok(true);
        }
        if !st.dead.is_empty() {
            // A dead member stops the instance everywhere: the others
            // would wait for it, directly or through someone who does.
            if let Some(&d) = ranks.iter().find(|r| st.dead.contains(r)) {
                return Err(dead_peer(d));
            }
        }
        if let Some(e) = gone(st, from) {
            return Err(e);
        }
        if let Some(e) = st.fatal.clone() {
            return Err(e);
        }
        Ok(false)
    }

    /// A put arrived in an inbox (an event on the request queue).
    pub(super) fn on_slot(st: &mut State, ev: &Event) {
        if ev.kind != EventKind::Put || ev.fail != FailType::Ok {
            return;
        }
        let ctx = bits::decode(ev.match_bits).ctx;
        let Ok((_, _, s)) = slots(&mut st.nbc, ctx) else {
            return;
        };
        let slot = ev.offset as usize / SLOT_BYTES;
        // The inbox takes nothing past its end, and a slot's put is at most
        // SLOT_BYTES: a length that says otherwise is a peer's bug, kept as
        // an impossible length (SLOT_BYTES + 1) so the wait reports a size
        // mismatch.
        if let Some(a) = s.arrived.get_mut(slot) {
            *a = Some(ev.mlength.min(SLOT_BYTES as u64 + 1) as u16);
        }
    }
}

/// Communicator `ctx`'s members (world ranks), this process's rank there,
/// and its slots. Only the communicators map is borrowed, so the caller can
/// read the rest of the state beside them.
fn slots(nbc: &mut NbcComms, ctx: u16) -> Result<(&[u32], usize, &mut Slots)> {
    let c = nbc
        .get_mut(&ctx)
        .ok_or(MpiError::InvalidBuffer("the communicator was freed"))?;
    let s = c
        .slots
        .as_mut()
        .ok_or(MpiError::InvalidBuffer("the communicator has no slots"))?;
    Ok((&c.ranks, c.me as usize, s))
}

/// A collective peer's rank past the communicator's size.
const OUTSIDE: MpiError = MpiError::InvalidBuffer("collective peer outside the communicator");
