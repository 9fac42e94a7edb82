//! The saved envelopes: unexpected messages drained from the unexpected
//! queue and not received yet, oldest first — and the one place that keeps
//! the queue's count of them right.
//!
//! **Bounded by flow control.** Every event the device takes from the
//! unexpected queue keeps its slot ([`portals::Engine::eq_get_kept`]), so a
//! saved envelope goes on counting against the queue's capacity
//! ([`crate::MpiConfig::envelopes`]) until a receive takes it (or it is
//! dropped); a sender whose message would exceed the capacity is held back
//! in its transport. An event that does not become an envelope gives its
//! slot back at once. The slots given back are counted here and returned to
//! the engine in one call ([`super::Shared::flush_kept`]) before the state
//! is unlocked, so that both drains — the device's and the unlink hook's —
//! and every path that removes an envelope (a receive, a freed
//! communicator) do the bookkeeping the same way without an engine call
//! each.

use std::collections::VecDeque;

use portals::ProcessId;

use super::pool::Unexpected;

/// See the module docs.
pub(super) struct SavedEnvelopes {
    q: VecDeque<Unexpected>,
    /// The cap ([`crate::MpiConfig::envelopes`]).
    cap: usize,
    /// Senders of point-to-point envelopes saved beyond the cap since the
    /// last [`SavedEnvelopes::take_over_cap`] (see `throttle.rs`).
    over_cap: Vec<ProcessId>,
    /// Kept slots to give back to the engine.
    release: usize,
    /// The most envelopes saved at once (reported as
    /// [`crate::MpiStats::saved_peak`]).
    peak: usize,
}

impl SavedEnvelopes {
    /// No envelopes yet; `cap` is the cap the queue enforces.
    pub(super) fn new(cap: usize) -> Self {
        SavedEnvelopes {
            q: VecDeque::new(),
            cap,
            over_cap: Vec::new(),
            release: 0,
            peak: 0,
        }
    }

    /// Save the envelope of an event taken with its slot kept.
    pub(super) fn push_back(&mut self, u: Unexpected) {
        // Only an admitted sender gets past the cap; a collective message
        // (odd context) is what an admission waits for, not what to pause.
        if self.q.len() >= self.cap
            && crate::bits::decode(u.bits).ctx & 1 == 0
            && !self.over_cap.contains(&u.initiator)
        {
            self.over_cap.push(u.initiator);
        }
        self.q.push_back(u);
        self.peak = self.peak.max(self.q.len());
    }

    /// An event taken with its slot kept did not become an envelope.
    pub(super) fn discard_event(&mut self) {
        self.release += 1;
    }

    /// Take the envelope at `pos` (a receive matched it).
    pub(super) fn remove(&mut self, pos: usize) -> Option<Unexpected> {
        let u = self.q.remove(pos)?;
        self.release += 1;
        Some(u)
    }

    /// Take every envelope `drop` selects, oldest first.
    pub(super) fn take_if(&mut self, mut drop: impl FnMut(&Unexpected) -> bool) -> Vec<Unexpected> {
        let mut taken = Vec::new();
        self.q.retain(|u| {
            if drop(u) {
                taken.push(*u);
                false
            } else {
                true
            }
        });
        self.release += taken.len();
        taken
    }

    pub(super) fn iter(&self) -> std::collections::vec_deque::Iter<'_, Unexpected> {
        self.q.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.q.len()
    }

    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Senders of point-to-point envelopes saved beyond the cap since the
    /// last call.
    pub(super) fn take_over_cap(&mut self) -> Vec<ProcessId> {
        std::mem::take(&mut self.over_cap)
    }

    /// The slots to give back since the last call.
    pub(super) fn take_released(&mut self) -> usize {
        std::mem::take(&mut self.release)
    }
}
