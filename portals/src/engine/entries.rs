//! The engine's match entries: creating them on a portal's match list
//! (attach at either end, insert beside another), unlinking them, and
//! reading a list back. Matching an incoming header against the list is the
//! receive path's (`Engine::recv_header`); the list itself is `crate::me`.

use std::collections::VecDeque;

use super::index::{self, Slot, SubList};
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
            label: 0,
            slot: Slot::None,
            sub_prev: None,
            sub_next: None,
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
        // Labelled before it is linked, so that relabelling around the gap
        // sees only the entries already there.
        self.mes[k].label = self.label_between(prev, next);
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
        self.index_me(pt, k);
    }

    /// A label for an entry about to be linked between the adjacent
    /// entries `prev` and `next` (`None`: that end of the list), making
    /// room first if their gap is used up.
    fn label_between(&mut self, prev: Option<MeKey>, next: Option<MeKey>) -> u64 {
        let label_of = |e: &Self, n: Option<MeKey>| n.map(|n| e.mes[n].label);
        if let Some(l) = index::label_between(label_of(self, prev), label_of(self, next)) {
            return l;
        }
        self.make_room(prev, next);
        index::label_between(label_of(self, prev), label_of(self, next))
            .expect("make_room leaves a gap of at least 2")
    }

    /// Relabel the smallest window of entries around the gap between
    /// `prev` and `next` (adjacent in the list) whose label range gives each of them a gap at least
    /// as large as the window, spreading them evenly with one free slot at
    /// that gap. Windows double, so the cost is amortised over the
    /// insertions that used the gap up.
    fn make_room(&mut self, prev: Option<MeKey>, next: Option<MeKey>) {
        let mut window: VecDeque<MeKey> = prev.into_iter().chain(next).collect();
        let mut hole = usize::from(prev.is_some());
        loop {
            let before = window.front().and_then(|&f| self.mes[f].prev);
            let after = window.back().and_then(|&b| self.mes[b].next);
            let lower = before.map_or(0, |b| self.mes[b].label);
            let upper = after.map_or(u64::MAX, |a| self.mes[a].label);
            let n = window.len() as u64;
            let whole_list = before.is_none() && after.is_none();
            let min_gap = if whole_list { 2 } else { n.max(2) };
            if let Some((first, gap)) = index::spread(lower, upper, n, min_gap) {
                for (i, &e) in window.iter().enumerate() {
                    let slot = i as u64 + u64::from(i >= hole);
                    self.mes[e].label = first + gap * slot;
                }
                return;
            }
            // Grow the window by its size on each side.
            let (mut b, mut a) = (before, after);
            for _ in 0..window.len() {
                if let Some(e) = b {
                    window.push_front(e);
                    hole += 1;
                    b = self.mes[e].prev;
                }
                if let Some(e) = a {
                    window.push_back(e);
                    a = self.mes[e].next;
                }
            }
        }
    }

    /// Put `k` (labelled) into its sub-list of the index, in label order.
    fn index_me(&mut self, pt: usize, k: MeKey) {
        let (match_id, ignore_bits, match_bits, label) = {
            let e = &self.mes[k];
            (e.match_id, e.ignore_bits, e.match_bits, e.label)
        };
        let slot = self.index[pt].slot_for(match_id, ignore_bits);
        self.mes[k].slot = slot;
        let list = match slot {
            Slot::Indexed {
                ignore_bits,
                any_id,
            } => {
                let ci = self.index[pt]
                    .class(ignore_bits, any_id)
                    .expect("slot_for made the class");
                let class = &mut self.index[pt].classes[ci];
                class.len += 1;
                let key = class.key(match_id, match_bits);
                class.buckets.get(&key).copied()
            }
            _ => self.index[pt].unindexed,
        };
        // The entry goes after the last one labelled below it: usually the
        // tail (entries are mostly appended to their sub-list).
        let (head, tail) = match list {
            None => (k, k),
            Some(SubList { head, tail }) => {
                let mut after = Some(tail);
                while let Some(a) = after.filter(|&a| self.mes[a].label > label) {
                    after = self.mes[a].sub_prev;
                }
                let before = match after {
                    Some(a) => self.mes[a].sub_next,
                    None => Some(head),
                };
                self.mes[k].sub_prev = after;
                self.mes[k].sub_next = before;
                if let Some(a) = after {
                    self.mes[a].sub_next = Some(k);
                }
                if let Some(b) = before {
                    self.mes[b].sub_prev = Some(k);
                }
                (
                    if after.is_none() { k } else { head },
                    if before.is_none() { k } else { tail },
                )
            }
        };
        self.set_sub_list(pt, k, Some(SubList { head, tail }));
    }

    /// Replace the head and tail of the sub-list `k` belongs to (`None`:
    /// it became empty).
    fn set_sub_list(&mut self, pt: usize, k: MeKey, list: Option<SubList>) {
        let e = &self.mes[k];
        match e.slot {
            Slot::Indexed {
                ignore_bits,
                any_id,
            } => {
                let Some(ci) = self.index[pt].class(ignore_bits, any_id) else {
                    return;
                };
                let class = &mut self.index[pt].classes[ci];
                let key = class.key(e.match_id, e.match_bits);
                match list {
                    Some(l) => {
                        class.buckets.insert(key, l);
                    }
                    None => {
                        class.buckets.remove(&key);
                    }
                }
            }
            Slot::Unindexed => self.index[pt].unindexed = list,
            Slot::None => {}
        }
    }

    /// Take `k` out of its sub-list of the index.
    fn unindex_me(&mut self, pt: usize, k: MeKey) {
        let (sub_prev, sub_next, slot) = {
            let e = &self.mes[k];
            (e.sub_prev, e.sub_next, e.slot)
        };
        if let Some(p) = sub_prev {
            self.mes[p].sub_next = sub_next;
        }
        if let Some(n) = sub_next {
            self.mes[n].sub_prev = sub_prev;
        }
        let list = match (sub_prev, sub_next) {
            (None, None) => None,
            _ => {
                let current = match slot {
                    Slot::Indexed {
                        ignore_bits,
                        any_id,
                    } => self.index[pt].class(ignore_bits, any_id).and_then(|ci| {
                        let c = &self.index[pt].classes[ci];
                        let e = &self.mes[k];
                        c.buckets.get(&c.key(e.match_id, e.match_bits)).copied()
                    }),
                    _ => self.index[pt].unindexed,
                };
                current.map(|l| SubList {
                    head: if sub_prev.is_none() {
                        sub_next.unwrap_or(l.head)
                    } else {
                        l.head
                    },
                    tail: if sub_next.is_none() {
                        sub_prev.unwrap_or(l.tail)
                    } else {
                        l.tail
                    },
                })
            }
        };
        self.set_sub_list(pt, k, list);
        if let Slot::Indexed {
            ignore_bits,
            any_id,
        } = slot
        {
            let idx = &mut self.index[pt];
            if let Some(ci) = idx.class(ignore_bits, any_id) {
                idx.classes[ci].len -= 1;
                if idx.classes[ci].len == 0 {
                    // Free the class for another mask, keeping its (empty)
                    // table for the next class: a portal whose only entry
                    // comes and goes per message would otherwise allocate
                    // a table per message.
                    let c = idx.classes.swap_remove(ci);
                    idx.keep_table(c.buckets);
                }
            }
        }
    }

    pub(super) fn unlink_me_from_list(&mut self, k: MeKey) -> MatchEntry {
        let pt = self.mes[k].pt_index.0 as usize;
        self.unindex_me(pt, k);
        let me = self.mes.remove(k).expect("caller checked the key");
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
    /// it. Fails with `MdInUse` while a transfer uses that memory, and with
    /// `InvalidArgument` (changing nothing) while the descriptor owns a list
    /// of segments: unlink it first with [`Engine::md_unlink_iovec`].
    pub fn me_unlink(&mut self, me: MeHandle) -> Result<Option<Vec<u8>>> {
        let k = self.me_key(me)?;
        let mem = match self.mes[k].md {
            Some(mdk) => {
                if !self.mds[mdk].io.is_empty() {
                    return Err(PtlError::MdInUse);
                }
                if self.mds[mdk].mem.is_owned_iovec() {
                    return Err(super::descriptors::OWNED_IOVEC);
                }
                self.cancel_awaiting(mdk);
                self.cancel_md_triggers(mdk);
                let mut md = self.mds.remove(mdk).expect("linked descriptor exists");
                self.recycle_io(&mut md);
                md.mem.into_owned()
            }
            None => None,
        };
        self.unlink_me_from_list(k);
        self.run_triggers();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::NiLimits;

    fn labels(e: &Engine, pt: PortalIndex) -> Vec<u64> {
        let mut out = Vec::new();
        let mut cur = e.portals[pt.0 as usize].head;
        while let Some(k) = cur {
            out.push(e.mes[k].label);
            cur = e.mes[k].next;
        }
        out
    }

    fn attach(e: &mut Engine, pt: PortalIndex, pos: Position) -> MeHandle {
        e.me_attach(pt, ProcessId::ANY, 0, u64::MAX, Unlink::Retain, pos)
            .unwrap()
    }

    /// Room made at either end of the label space, where one side of the
    /// gap is the end of the list: the labels stay strictly increasing and
    /// the new entry lands where it was put.
    #[test]
    fn room_is_made_at_both_ends_of_the_label_space() {
        let pt = PortalIndex(0);
        let mut e = Engine::new(ProcessId::new(1, 1), 1, NiLimits::default()).unwrap();
        let a = attach(&mut e, pt, Position::After);
        let b = attach(&mut e, pt, Position::After);
        let c = attach(&mut e, pt, Position::After);
        // Squeeze the list against both ends of the label space.
        e.mes[a.key].label = 1;
        e.mes[b.key].label = 2;
        e.mes[c.key].label = u64::MAX - 1;
        let head = attach(&mut e, pt, Position::Before);
        let tail = attach(&mut e, pt, Position::After);
        let l = labels(&e, pt);
        assert!(l.windows(2).all(|w| w[0] < w[1]), "{l:?}");
        let order: Vec<MeKey> = e.match_list(pt).unwrap().iter().map(|h| h.key).collect();
        assert_eq!(order, vec![head.key, a.key, b.key, c.key, tail.key]);
        // Between a and b (labels were adjacent) too.
        let mid = e
            .me_insert(
                a,
                ProcessId::ANY,
                0,
                u64::MAX,
                Unlink::Retain,
                Position::After,
            )
            .unwrap();
        let l = labels(&e, pt);
        assert!(l.windows(2).all(|w| w[0] < w[1]), "{l:?}");
        assert_eq!(e.match_list(pt).unwrap()[2], mid);
    }
}
