//! The engine's match entries: creating them on a portal's match list
//! (attach at either end, insert beside another), unlinking them, and
//! reading a list back. Matching an incoming header against the list is the
//! receive path's (`Engine::recv_header`); the list itself is `crate::me`.

use super::Engine;
use crate::error::{PtlError, Result};
use crate::handle::{EqHandle, MeHandle, MeKey};
use crate::me::MatchEntry;
use crate::types::{PortalIndex, Position, ProcessId, Unlink};

impl Engine {
    fn new_me(
        &mut self,
        pt: PortalIndex,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
    ) -> Result<MeKey> {
        if self.mes.len() >= self.limits.max_mes {
            return Err(PtlError::NoSpace {
                what: "match entries",
                limit: self.limits.max_mes,
            });
        }
        Ok(self.mes.insert(MatchEntry {
            pt_index: pt,
            match_id,
            match_bits,
            ignore_bits,
            unlink,
            md: None,
            prev: None,
            next: None,
            admits: None,
        }))
    }

    /// Link `k` into its portal's list next to `base` (or at an end).
    fn link_me(&mut self, k: MeKey, base: Option<MeKey>, pos: Position) {
        let pt = self.mes[k].pt_index.0 as usize;
        let (prev, next) = match (base, pos) {
            (None, Position::Before) => (None, self.portals[pt].head),
            (None, Position::After) => (self.portals[pt].tail, None),
            (Some(b), Position::Before) => (self.mes[b].prev, Some(b)),
            (Some(b), Position::After) => (Some(b), self.mes[b].next),
        };
        self.mes[k].prev = prev;
        self.mes[k].next = next;
        match prev {
            Some(p) => self.mes[p].next = Some(k),
            None => self.portals[pt].head = Some(k),
        }
        match next {
            Some(n) => self.mes[n].prev = Some(k),
            None => self.portals[pt].tail = Some(k),
        }
        self.portals[pt].len += 1;
    }

    pub(super) fn unlink_me_from_list(&mut self, k: MeKey) -> MatchEntry {
        let me = self.mes.remove(k).expect("caller checked the key");
        let pt = me.pt_index.0 as usize;
        match me.prev {
            Some(p) => self.mes[p].next = me.next,
            None => self.portals[pt].head = me.next,
        }
        match me.next {
            Some(n) => self.mes[n].prev = me.prev,
            None => self.portals[pt].tail = me.prev,
        }
        self.portals[pt].len -= 1;
        // The entry no longer waits: its admission ends with it.
        if let Some(q) = me.admits.and_then(|e| self.eqs.get_mut(e)) {
            q.unadmit(me.match_id);
        }
        me
    }

    /// While `me` stays linked, admit the initiators it accepts (its match
    /// id, wildcards included) to `eq`, as [`Engine::eq_admit`] does; the
    /// admission ends by itself when the entry is unlinked — used up by the
    /// message it waited for, or unlinked by the caller. A Portals
    /// extension for a reader that keeps event slots: an entry waiting for
    /// a message from a sender lets the messages in front of it in (see
    /// [`Engine::eq_admit`]), and the sender is held back again as soon as
    /// the awaited message matched, not when the reader next runs. One
    /// admission per entry.
    pub fn me_admit(&mut self, me: MeHandle, eq: EqHandle) -> Result<()> {
        let k = self.me_key(me)?;
        let ek = self.eq_key(eq)?;
        if self.mes[k].admits.is_some() {
            return Err(PtlError::InvalidArgument(
                "the match entry admits its initiators already",
            ));
        }
        self.mes[k].admits = Some(ek);
        let who = self.mes[k].match_id;
        if self.eqs[ek].admit(who) {
            self.intake_resumed = true;
        }
        Ok(())
    }

    /// Create a match entry and attach it at the head (`Before`) or tail
    /// (`After`) of portal `pt`'s match list (`PtlMEAttach`).
    pub fn me_attach(
        &mut self,
        pt: PortalIndex,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
        pos: Position,
    ) -> Result<MeHandle> {
        self.check_pt(pt)?;
        let k = self.new_me(pt, match_id, match_bits, ignore_bits, unlink)?;
        self.link_me(k, None, pos);
        Ok(MeHandle {
            ni: self.tag,
            key: k,
        })
    }

    /// Create a match entry on the first portal index whose match list is
    /// empty (`PtlMEAttachAny`).
    pub fn me_attach_any(
        &mut self,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
    ) -> Result<(PortalIndex, MeHandle)> {
        let pt = self
            .portals
            .iter()
            .position(|l| l.len == 0)
            .ok_or(PtlError::NoSpace {
                what: "free portal indices",
                limit: self.portals.len(),
            })?;
        let pt = PortalIndex(pt as u32);
        let me = self.me_attach(
            pt,
            match_id,
            match_bits,
            ignore_bits,
            unlink,
            Position::After,
        )?;
        Ok((pt, me))
    }

    /// Create a match entry and insert it just before or after `base`
    /// (`PtlMEInsert`).
    pub fn me_insert(
        &mut self,
        base: MeHandle,
        match_id: ProcessId,
        match_bits: u64,
        ignore_bits: u64,
        unlink: Unlink,
        pos: Position,
    ) -> Result<MeHandle> {
        let b = self.me_key(base)?;
        let pt = self.mes[b].pt_index;
        let k = self.new_me(pt, match_id, match_bits, ignore_bits, unlink)?;
        self.link_me(k, Some(b), pos);
        Ok(MeHandle {
            ni: self.tag,
            key: k,
        })
    }

    /// Unlink a match entry and the descriptor attached to it
    /// (`PtlMEUnlink`). Returns the descriptor's memory if the engine owned
    /// it. Fails with `MdInUse` while a transfer uses that memory.
    pub fn me_unlink(&mut self, me: MeHandle) -> Result<Option<Vec<u8>>> {
        let k = self.me_key(me)?;
        let mem = match self.mes[k].md {
            Some(mdk) => {
                if !self.mds[mdk].io.is_empty() {
                    return Err(PtlError::MdInUse);
                }
                self.cancel_awaiting(mdk);
                let md = self.mds.remove(mdk).expect("linked descriptor exists");
                md.mem.into_owned()
            }
            None => None,
        };
        self.unlink_me_from_list(k);
        Ok(mem)
    }

    /// The portal index and match criteria of a match entry.
    pub fn me_info(&self, me: MeHandle) -> Result<(PortalIndex, ProcessId, u64, u64)> {
        let k = self.me_key(me)?;
        let e = &self.mes[k];
        Ok((e.pt_index, e.match_id, e.match_bits, e.ignore_bits))
    }

    /// The match entries of portal `pt`, head first.
    pub fn match_list(&self, pt: PortalIndex) -> Result<Vec<MeHandle>> {
        let i = self.check_pt(pt)?;
        let mut out = Vec::with_capacity(self.portals[i].len);
        let mut cur = self.portals[i].head;
        while let Some(k) = cur {
            out.push(MeHandle {
                ni: self.tag,
                key: k,
            });
            cur = self.mes[k].next;
        }
        Ok(out)
    }
}
