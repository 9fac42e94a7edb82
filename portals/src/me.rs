//! Match entries and the per-portal match lists (`ptl_handle_me_t`).

use crate::engine::index::Slot;
use crate::handle::{EqKey, MdKey, MeKey};
use crate::types::{PortalIndex, ProcessId, Unlink};

/// One entry of a portal's match list: the selection criteria and the
/// memory descriptor that receives what it selects. Entries form a doubly
/// linked list through their keys so that insertion before/after any entry
/// and unlinking are O(1) and matching does not allocate; each also sits in
/// one ordered sub-list of the match index (`crate::engine::index`), which
/// finds the first match without walking the whole list.
pub(crate) struct MatchEntry {
    pub(crate) pt_index: PortalIndex,
    pub(crate) match_id: ProcessId,
    pub(crate) match_bits: u64,
    pub(crate) ignore_bits: u64,
    pub(crate) unlink: Unlink,
    pub(crate) md: Option<MdKey>,
    pub(crate) prev: Option<MeKey>,
    pub(crate) next: Option<MeKey>,
    /// Increases along the list: the list order, comparable across
    /// sub-lists.
    pub(crate) label: u64,
    /// Which sub-list of the index holds it.
    pub(crate) slot: Slot,
    pub(crate) sub_prev: Option<MeKey>,
    pub(crate) sub_next: Option<MeKey>,
    /// While linked, the entry admits the initiators it accepts to this
    /// queue (see [`crate::Engine::me_admit`]).
    pub(crate) admits: Option<EqKey>,
}

impl MatchEntry {
    /// The Portals match rule: the initiator passes the (possibly wildcard)
    /// id, and every bit not ignored equals the entry's match bit.
    #[inline]
    pub(crate) fn matches(&self, initiator: ProcessId, match_bits: u64) -> bool {
        (match_bits ^ self.match_bits) & !self.ignore_bits == 0 && self.match_id.accepts(initiator)
    }
}

/// The head and tail of one portal index's match list.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MatchList {
    pub(crate) head: Option<MeKey>,
    pub(crate) tail: Option<MeKey>,
    pub(crate) len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{NID_ANY, PID_ANY};

    fn me(match_id: ProcessId, match_bits: u64, ignore_bits: u64) -> MatchEntry {
        MatchEntry {
            pt_index: PortalIndex(0),
            match_id,
            match_bits,
            ignore_bits,
            unlink: Unlink::Retain,
            md: None,
            prev: None,
            next: None,
            label: 0,
            slot: Slot::None,
            sub_prev: None,
            sub_next: None,
            admits: None,
        }
    }

    #[test]
    fn ignore_bits_wildcard_exactly_the_bits_they_cover() {
        let p = ProcessId::new(1, 1);
        let e = me(ProcessId::ANY, 0xff00, 0x00f0);
        assert!(e.matches(p, 0xff00));
        assert!(e.matches(p, 0xff10));
        assert!(e.matches(p, 0xfff0));
        assert!(!e.matches(p, 0xff01));
        assert!(!e.matches(p, 0xfe00));
    }

    #[test]
    fn initiator_must_pass_the_match_id() {
        let e = me(ProcessId::new(2, PID_ANY), 7, 0);
        assert!(e.matches(ProcessId::new(2, 9), 7));
        assert!(!e.matches(ProcessId::new(3, 9), 7));
        let e = me(ProcessId::new(NID_ANY, 4), 7, 0);
        assert!(e.matches(ProcessId::new(8, 4), 7));
        assert!(!e.matches(ProcessId::new(8, 5), 7));
    }
}
