//! The engine's memory descriptors: attaching them to a match entry or
//! binding them free-standing, unlinking, updating under the event-queue
//! test (`PtlMDUpdate`), reading and writing their memory while no transfer
//! holds it, and retiring one whose threshold ran out. The descriptor
//! itself is `crate::md`.

use super::{check_range, Awaiting, Engine, EvInfo};
use crate::error::{PtlError, Result};
use crate::event::EventKind;
use crate::handle::{EqHandle, MdHandle, MdKey, MeHandle, MeKey};
use crate::md::{Access, MdDesc, MdState, Memory, MemoryDescriptor};
use crate::types::{FailType, PortalIndex, Unlink};

/// What `md_unlink` and `me_unlink` answer for a descriptor owning a list
/// of segments, which only `md_unlink_iovec` can give back.
pub(super) const OWNED_IOVEC: PtlError = PtlError::InvalidArgument(
    "the descriptor owns a list of segments: take them back with md_unlink_iovec",
);

/// How many emptied lists of lent ranges the engine keeps for reuse.
const SPARE_IOS: usize = 64;
/// The longest list kept (ranges a descriptor lends at once: a few).
const SPARE_IO_RANGES: usize = 16;

impl Engine {
    fn new_md(&mut self, desc: &MdDesc, mem: Memory, unlink: Unlink) -> Result<MdKey> {
        let eq = match desc.eq {
            Some(h) => Some(self.eq_key(h)?),
            None => None,
        };
        let ct = match desc.ct {
            Some(h) => Some(self.ct_key(h)?),
            None => None,
        };
        if self.mds.len() >= self.limits.max_mds {
            return Err(PtlError::NoSpace {
                what: "memory descriptors",
                limit: self.limits.max_mds,
            });
        }
        let k = self
            .mds
            .insert(MemoryDescriptor::new(mem, *desc, eq, ct, unlink));
        if let Some(io) = self.spare_io.pop() {
            self.mds[k].io = io;
        }
        Ok(k)
    }

    /// Keep removed descriptor `d`'s list of lent ranges for a new one: a
    /// layer that binds a descriptor per message (the MPI library) would
    /// otherwise allocate one at every first transfer.
    pub(super) fn recycle_io(&mut self, d: &mut MemoryDescriptor) {
        let mut io = std::mem::take(&mut d.io);
        if io.capacity() > 0 && io.capacity() <= SPARE_IO_RANGES && self.spare_io.len() < SPARE_IOS
        {
            io.clear();
            self.spare_io.push(io);
        }
    }

    /// Attach a descriptor over `mem` to a match entry (`PtlMDAttach`).
    pub(crate) fn md_attach_mem(
        &mut self,
        me: MeHandle,
        desc: &MdDesc,
        mem: Memory,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        let mek = self.me_key(me)?;
        if self.mes[mek].md.is_some() {
            return Err(PtlError::MeInUse);
        }
        let k = self.new_md(desc, mem, unlink)?;
        self.mds[k].me = Some(mek);
        self.mes[mek].md = Some(k);
        Ok(self.md_handle(k))
    }

    /// Attach a descriptor over caller memory to a match entry, for a layer
    /// that does several engine calls under one lock (see
    /// [`crate::NiCore::with_engine`]); otherwise as
    /// [`crate::NetworkInterface::md_attach_raw`].
    ///
    /// # Safety
    /// As for [`crate::NetworkInterface::md_attach_raw`].
    pub unsafe fn md_attach_raw(
        &mut self,
        me: MeHandle,
        desc: &MdDesc,
        ptr: *mut u8,
        len: usize,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        crate::ni::check_raw(ptr, len)?;
        self.md_attach_mem(me, desc, Memory::Raw { ptr, len }, unlink)
    }

    /// Bind a descriptor over caller memory, for a layer that does several
    /// engine calls under one lock or holds only the core (an unlink hook);
    /// otherwise as [`crate::NetworkInterface::md_bind_raw`].
    ///
    /// # Safety
    /// As for [`crate::NetworkInterface::md_bind_raw`].
    pub unsafe fn md_bind_raw(
        &mut self,
        desc: &MdDesc,
        ptr: *mut u8,
        len: usize,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        crate::ni::check_raw(ptr, len)?;
        self.md_bind_mem(desc, Memory::Raw { ptr, len }, unlink)
    }

    /// Create a free-floating descriptor over `mem` for initiating
    /// operations (`PtlMDBind`).
    pub(crate) fn md_bind_mem(
        &mut self,
        desc: &MdDesc,
        mem: Memory,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        let k = self.new_md(desc, mem, unlink)?;
        Ok(self.md_handle(k))
    }

    /// Attach a descriptor owning `buf` to a match entry (`PtlMDAttach`).
    /// The buffer comes back from [`Engine::md_unlink`].
    pub fn md_attach(
        &mut self,
        me: MeHandle,
        desc: &MdDesc,
        buf: Vec<u8>,
        unlink: Unlink,
    ) -> Result<MdHandle> {
        self.md_attach_mem(me, desc, Memory::Owned(buf), unlink)
    }

    /// Bind a descriptor owning `buf`, not attached to any match entry
    /// (`PtlMDBind`).
    pub fn md_bind(&mut self, desc: &MdDesc, buf: Vec<u8>, unlink: Unlink) -> Result<MdHandle> {
        self.md_bind_mem(desc, Memory::Owned(buf), unlink)
    }

    /// Unlink a descriptor (`PtlMDUnlink`) and give back its memory if the
    /// engine owned it. Also accepts a descriptor that already unlinked
    /// itself (its handle stays good for this one call, so that the memory
    /// can be taken back). The match entry it was attached to stays in the
    /// list, without a descriptor, unless it was created with
    /// `Unlink::Unlink`. Operations still waiting for an acknowledgment or
    /// reply to this descriptor are forgotten, and its triggered operations
    /// fail (`engine/triggered.rs`). Fails with `MdInUse` while a transfer
    /// reads or writes the memory.
    ///
    /// A descriptor that owns a list of segments
    /// ([`Engine::md_bind_iovec`]) is refused with `InvalidArgument` and
    /// left as it is: its segments come back from
    /// [`Engine::md_unlink_iovec`].
    pub fn md_unlink(&mut self, md: MdHandle) -> Result<Option<Vec<u8>>> {
        let k = self.md_key(md)?;
        if self.mds[k].mem.is_owned_iovec() {
            return Err(OWNED_IOVEC);
        }
        Ok(self.remove_md(k)?.into_owned())
    }

    /// Unlink `k` (nothing may be lent) and return its memory.
    pub(super) fn remove_md(&mut self, k: MdKey) -> Result<Memory> {
        if !self.mds[k].io.is_empty() {
            return Err(PtlError::MdInUse);
        }
        self.cancel_awaiting(k);
        self.cancel_md_triggers(k);
        let mut d = self.mds.remove(k).expect("checked key");
        self.recycle_io(&mut d);
        if let Some(mek) = d.me {
            self.detach_from_me(mek);
        }
        self.run_triggers();
        Ok(d.mem)
    }

    /// True while a transfer reads or writes the descriptor's memory: a put
    /// or a get's reply still leaving, a deposit still arriving. Such a
    /// descriptor is waiting for the transport, not for the peer's
    /// application: its events will come (or fail) without anyone's help.
    pub fn md_busy(&self, md: MdHandle) -> Result<bool> {
        let k = self.md_key(md)?;
        Ok(!self.mds[k].io.is_empty())
    }

    /// Replace a descriptor's description (threshold, options, max size, user
    /// value, event queue) and return the previous state (`PtlMDUpdate`).
    ///
    /// With `test_eq`, the update happens only if that queue has no events
    /// and no transfer in progress that will post one — atomically with
    /// respect to incoming messages; otherwise `MdNoUpdate` and nothing
    /// changes. The memory and the local offset are kept. With `new` = `None`
    /// this only reads the state.
    pub fn md_update(
        &mut self,
        md: MdHandle,
        new: Option<&MdDesc>,
        test_eq: Option<EqHandle>,
    ) -> Result<crate::event::MdSnapshot> {
        let k = self.live_md_key(md)?;
        let eq_h = self.mds[k].eq.map(|e| self.eq_handle(e));
        let old = self.mds[k].snapshot(eq_h);
        let Some(new) = new else {
            return Ok(old);
        };
        let new_eq = match new.eq {
            Some(h) => Some(self.eq_key(h)?),
            None => None,
        };
        let new_ct = match new.ct {
            Some(h) => Some(self.ct_key(h)?),
            None => None,
        };
        if let Some(t) = test_eq {
            let tk = self.eq_key(t)?;
            if !self.eqs[tk].is_quiescent() {
                return Err(PtlError::MdNoUpdate);
            }
        }
        let d = &mut self.mds[k];
        if d.state != MdState::Live {
            return Err(PtlError::MdInactive);
        }
        if d.eq != new_eq {
            // Move the in-flight accounting with the descriptor's transfers.
            let moving = self.xfers.values().filter(|x| x.md == k).count() as u32;
            if moving > 0 {
                return Err(PtlError::MdInUse);
            }
        }
        let d = &mut self.mds[k];
        d.desc = *new;
        d.eq = new_eq;
        d.ct = new_ct;
        d.check_high_water_mark();
        Ok(old)
    }

    /// Copy bytes out of a descriptor's memory (live, or unlinked and not yet
    /// taken back). Fails with `MdInUse` if the range overlaps a transfer in
    /// progress.
    pub fn md_read(&mut self, md: MdHandle, offset: u64, dst: &mut [u8]) -> Result<()> {
        let k = self.md_key(md)?;
        let d = &mut self.mds[k];
        let end = check_range(offset, dst.len() as u64, d.length)?;
        if d.io_conflicts(offset, end, Access::Read) {
            return Err(PtlError::MdInUse);
        }
        let src = d.mem.region(offset, dst.len() as u64);
        // SAFETY: offset..end is inside the descriptor's live memory
        // (checked above; across segments for an iovec), no transfer writes
        // it (no overlapping lent region), and `dst` is a distinct
        // Rust-borrowed buffer.
        unsafe { src.read_at(0, dst) };
        Ok(())
    }

    /// Copy bytes into a live descriptor's memory. Fails with `MdInUse` if
    /// the range overlaps a transfer in progress.
    pub fn md_write(&mut self, md: MdHandle, offset: u64, src: &[u8]) -> Result<()> {
        let k = self.live_md_key(md)?;
        let d = &mut self.mds[k];
        let end = check_range(offset, src.len() as u64, d.length)?;
        if d.io_conflicts(offset, end, Access::Write) {
            return Err(PtlError::MdInUse);
        }
        let dst = d.mem.region(offset, src.len() as u64);
        // SAFETY: offset..end is inside the descriptor's memory, no
        // transfer reads or writes it, and `src` is a distinct borrow.
        unsafe { dst.write_at(0, src) };
        Ok(())
    }

    fn detach_from_me(&mut self, mek: MeKey) {
        if let Some(me) = self.mes.get_mut(mek) {
            me.md = None;
            if me.unlink == Unlink::Unlink {
                self.unlink_me_from_list(mek);
            }
        }
    }

    /// Forget initiated operations that only wait for an ack/reply on `k`.
    pub(super) fn cancel_awaiting(&mut self, k: MdKey) {
        if self.mds[k].awaiting == 0 {
            return;
        }
        self.ops
            .retain(|_, op| !(op.md == k && op.awaiting != Awaiting::Nothing && !op.send_pending));
        self.mds[k].awaiting = 0;
    }

    /// Unlink `k` if it is consumed and nothing uses its memory.
    pub(super) fn settle(&mut self, k: MdKey) {
        // A transfer on `k` may have ended: atomics waiting for its bytes
        // can go (`engine/atomics.rs`).
        self.retry_atomics(k);
        let Some(d) = self.mds.get_mut(k) else {
            return;
        };
        if !d.wants_unlink() {
            return;
        }
        if !d.io.is_empty() {
            d.state = MdState::Unlinking;
            return;
        }
        let info = EvInfo {
            initiator: self.id,
            pt_index: d
                .me
                .and_then(|m| self.mes.get(m))
                .map(|m| m.pt_index)
                .unwrap_or(PortalIndex(0)),
            match_bits: 0,
            rlength: 0,
            mlength: 0,
            offset: d.local_offset,
            hdr_data: 0,
            fail: FailType::Ok,
        };
        if d.eq.is_some_and(|q| self.unlink_watch.contains(&q)) {
            self.watched_unlinked = true;
        }
        self.post(k, EventKind::Unlink, &info);
        self.cancel_awaiting(k);
        self.cancel_md_triggers(k);
        let d = &mut self.mds[k];
        let mek = d.me.take();
        if d.mem.is_owned() {
            d.state = MdState::Parked;
        } else {
            if let Some(mut d) = self.mds.remove(k) {
                self.recycle_io(&mut d);
            }
        }
        if let Some(mek) = mek {
            self.detach_from_me(mek);
        }
    }
}
