//! The match index: finding the first matching entry of a long match list
//! without walking it.
//!
//! A portal's match list is an ordered list (`crate::me::MatchList`), and
//! Portals' rule is that the *first* entry in list order that matches a
//! message and whose descriptor accepts it wins. Walking the list costs
//! time in its length: 20 µs behind 10 000 posted receives. The index keeps
//! the order exact and makes the common lists cheap:
//!
//! * **Order labels.** Every entry carries a 64-bit label that increases
//!   along the list, so two entries found by different routes compare by
//!   label. New labels go into the gap between the neighbours (a fixed step
//!   away from the left one while the gap is wide, so that MPI's posts
//!   before its mark consume the gap linearly rather than by halving it);
//!   when a gap is used up, the smallest surrounding window of entries
//!   whose label range is wide enough for all of them is spread evenly
//!   (an order-maintenance list in the style of Dietz and Sleator: a
//!   window of `n` entries is relabelled only when its range holds at
//!   least `n` per entry, so relabelling is rare and local).
//! * **Classes and buckets.** An entry whose initiator id is either fully
//!   specific or fully wildcarded belongs to the *class* of its ignore
//!   bits and that id kind; within a class, every entry a message can match
//!   has the same key, `(match bits & !ignore bits, initiator or ANY)`, so
//!   the entries of a class that match a message are exactly one bucket of
//!   a hash map, kept in list order through links in the entries. A
//!   message is looked up in each class (a few: MPI uses three — posted
//!   receives from one source, from any source, and its unexpected
//!   buffers), and the earliest accepting entry of all buckets wins.
//! * **The rest** (an id wildcarded in one field only, or more than
//!   [`MAX_CLASSES`] different ignore masks on one portal) stays in an
//!   ordered list of unindexed entries that is walked as before, but only
//!   up to the label of the best indexed candidate.
//!
//! Nothing here allocates per message: a lookup hashes a key and follows
//! links. Attaching an entry may grow a bucket map (attach already
//! allocates the entry).

use rustc_hash::FxHashMap;

use crate::handle::MeKey;
use crate::types::ProcessId;

/// Most classes per portal; entries of further ignore masks are unindexed.
pub(crate) const MAX_CLASSES: usize = 8;

/// Sub-lists a class has room for when created (it grows past them).
const BUCKETS_AT_START: usize = 16;

/// The largest table of a freed class kept for the next one.
const SPARE_TABLE_MAX: usize = 1024;

/// Label distance between neighbours attached at an end of a list, and the
/// most a new entry takes of a wide gap.
pub(crate) const STEP: u64 = 1 << 32;

/// Where an entry is kept, besides the match list itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Not yet placed.
    #[default]
    None,
    /// In the bucket of its key in the class with this ignore mask and id
    /// kind.
    Indexed { ignore_bits: u64, any_id: bool },
    /// In the portal's list of unindexed entries.
    Unindexed,
}

/// Head and tail of an ordered sub-list linked through the entries'
/// `sub_prev`/`sub_next`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SubList {
    pub(crate) head: MeKey,
    pub(crate) tail: MeKey,
}

/// The entries of one ignore mask and id kind on one portal.
#[derive(Debug)]
pub(crate) struct Class {
    pub(crate) ignore_bits: u64,
    pub(crate) any_id: bool,
    pub(crate) buckets: FxHashMap<(u64, ProcessId), SubList>,
    pub(crate) len: usize,
}

impl Class {
    /// The key under which a message from `initiator` with `match_bits`
    /// finds this class's entries that match it.
    #[inline]
    pub(crate) fn key(&self, initiator: ProcessId, match_bits: u64) -> (u64, ProcessId) {
        let id = if self.any_id {
            ProcessId::ANY
        } else {
            initiator
        };
        (match_bits & !self.ignore_bits, id)
    }
}

/// One portal's index.
#[derive(Debug, Default)]
pub(crate) struct PortalIndex {
    pub(crate) classes: Vec<Class>,
    pub(crate) unindexed: Option<SubList>,
    /// The emptied table of the last class freed, for the next one.
    spare: Option<FxHashMap<(u64, ProcessId), SubList>>,
}

impl PortalIndex {
    /// Where an entry with these criteria belongs; creates its class if
    /// there is room for one.
    pub(crate) fn slot_for(&mut self, match_id: ProcessId, ignore_bits: u64) -> Slot {
        let any_id = if match_id == ProcessId::ANY {
            true
        } else if match_id.is_concrete() {
            false
        } else {
            return Slot::Unindexed;
        };
        if self.class(ignore_bits, any_id).is_none() {
            if self.classes.len() >= MAX_CLASSES {
                return Slot::Unindexed;
            }
            self.classes.push(Class {
                ignore_bits,
                any_id,
                // The last freed class's table if there is one. Made
                // with room to spare: a table at its capacity that churns
                // (entries of unique bits come and go, one per message)
                // is reallocated at every insert.
                buckets: self.spare.take().unwrap_or_else(|| {
                    FxHashMap::with_capacity_and_hasher(BUCKETS_AT_START, Default::default())
                }),
                len: 0,
            });
        }
        Slot::Indexed {
            ignore_bits,
            any_id,
        }
    }

    /// The class of an ignore mask and id kind.
    /// Keep the table of a freed class (empty) for the next class, unless
    /// it grew large.
    pub(crate) fn keep_table(&mut self, mut t: FxHashMap<(u64, ProcessId), SubList>) {
        if t.capacity() <= SPARE_TABLE_MAX {
            t.clear();
            self.spare = Some(t);
        }
    }

    pub(crate) fn class(&self, ignore_bits: u64, any_id: bool) -> Option<usize> {
        self.classes
            .iter()
            .position(|c| c.ignore_bits == ignore_bits && c.any_id == any_id)
    }
}

/// The label for a new entry between neighbours labelled `lower` and
/// `upper` (`None`: that end of the list), if the gap has room.
pub(crate) fn label_between(lower: Option<u64>, upper: Option<u64>) -> Option<u64> {
    match (lower, upper) {
        (None, None) => Some(1 << 63),
        (Some(l), None) => l.checked_add(STEP).or_else(|| mid(l, u64::MAX)),
        (None, Some(u)) => u.checked_sub(STEP).or_else(|| mid(0, u)),
        (Some(l), Some(u)) => {
            let gap = u.checked_sub(l)?;
            if gap < 2 {
                None
            } else {
                Some(l + (gap / 2).min(STEP))
            }
        }
    }
}

/// A label strictly between `l` and `u`, if there is one.
fn mid(l: u64, u: u64) -> Option<u64> {
    (u.checked_sub(l)? >= 2).then(|| l + (u - l) / 2)
}

/// Evenly spaced labels for `n` entries strictly inside `(lower, upper)`
/// with one free slot after the first `hole_after` of them, if every gap
/// would be at least `min_gap`. Returns the first label and the spacing.
pub(crate) fn spread(lower: u64, upper: u64, n: u64, min_gap: u64) -> Option<(u64, u64)> {
    // n entries and one hole make n + 1 slots, n + 2 gaps.
    let gap = (upper - lower) / (n + 2);
    (gap >= min_gap.max(2)).then_some((lower + gap, gap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_between_neighbours_keep_the_order_and_take_at_most_a_step() {
        let first = label_between(None, None).unwrap();
        let tail = label_between(Some(first), None).unwrap();
        assert_eq!(tail - first, STEP);
        let head = label_between(None, Some(first)).unwrap();
        assert_eq!(first - head, STEP);
        let between = label_between(Some(head), Some(first)).unwrap();
        assert!(head < between && between < first);
        assert_eq!(label_between(Some(5), Some(6)), None);
        assert_eq!(label_between(Some(5), Some(7)), Some(6));
        assert_eq!(label_between(Some(u64::MAX - 1), None), None);
        assert_eq!(label_between(None, Some(1)), None);
        assert_eq!(label_between(Some(u64::MAX - 4), None), Some(u64::MAX - 2));
    }

    #[test]
    fn a_spread_leaves_every_gap_at_least_the_minimum() {
        let (first, gap) = spread(0, 100, 3, 2).unwrap();
        assert_eq!((first, gap), (20, 20));
        assert_eq!(spread(0, 10, 3, 4), None);
        assert_eq!(spread(0, 4, 3, 1), None);
    }

    #[test]
    fn ids_wildcarded_in_one_field_and_masks_past_the_limit_are_unindexed() {
        let mut p = PortalIndex::default();
        assert_eq!(
            p.slot_for(ProcessId::new(1, crate::types::PID_ANY), 0),
            Slot::Unindexed
        );
        for i in 0..MAX_CLASSES as u64 {
            assert!(matches!(
                p.slot_for(ProcessId::new(1, 2), i),
                Slot::Indexed { .. }
            ));
        }
        assert_eq!(p.slot_for(ProcessId::new(1, 2), 99), Slot::Unindexed);
        // an existing class still takes entries
        assert_eq!(
            p.slot_for(ProcessId::new(3, 4), 0),
            Slot::Indexed {
                ignore_bits: 0,
                any_id: false
            }
        );
    }
}
