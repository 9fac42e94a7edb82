//! Event queues: bounded rings of [`Event`]s (`ptl_handle_eq_t`).

use std::collections::VecDeque;

use crate::error::{PtlError, Result};
use crate::event::Event;
use crate::types::ProcessId;

/// A bounded event ring. Storage is allocated once, at creation. When the
/// ring is full new events are counted and dropped (the ones already queued
/// are kept), and the next read reports [`PtlError::EqDropped`].
pub(crate) struct EventQueue {
    ring: VecDeque<Event>,
    capacity: usize,
    next_sequence: u64,
    dropped: u64,
    /// Transfers matched on descriptors reporting here whose completion event
    /// is not posted yet. `md_update`'s emptiness test counts them, so that a
    /// message which matched before the update cannot be missed.
    pub(crate) in_flight: u32,
    /// Flow-controlled (see [`crate::Engine::eq_set_flow_control`]): an
    /// incoming request that would post here without a free slot is held
    /// back in its transport instead of overflowing the queue.
    pub(crate) flow_control: bool,
    /// A request was held back since the queue last had room.
    pub(crate) held: bool,
    /// An *admitted* request was held back for lack of real ring room
    /// (kept slots do not count against it): it may go in as soon as the
    /// ring drains, whatever the kept slots.
    pub(crate) held_admitted: bool,
    /// Slots of events the reader took with [`crate::Engine::eq_get_kept`]
    /// and has not given back yet: they count against the room of
    /// requests from initiators that are not admitted.
    pub(crate) kept: usize,
    /// Initiators whose requests ignore the kept slots (they still need
    /// real ring room), each with a reference count. Small and changed
    /// only by the reader (see [`crate::Engine::eq_admit`]), so a linear
    /// scan on the receive path costs less than a map.
    pub(crate) admitted: Vec<(ProcessId, u32)>,
    /// Flow-controlled only: events of the process's own operations (sent,
    /// ack, reply, unlink) that found the ring full, in order, moved into
    /// it as it drains. Bounded by the operations the process started
    /// itself (incoming requests are held back in the transport instead).
    backlog: VecDeque<Event>,
}

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        EventQueue {
            ring: VecDeque::with_capacity(capacity),
            capacity,
            next_sequence: 0,
            dropped: 0,
            in_flight: 0,
            flow_control: false,
            held: false,
            held_admitted: false,
            kept: 0,
            admitted: Vec::new(),
            backlog: VecDeque::new(),
        }
    }

    /// Append an event, stamping its sequence number. Returns false if it
    /// was dropped because the ring is full.
    pub(crate) fn push(&mut self, mut ev: Event) -> bool {
        ev.sequence = self.next_sequence;
        self.next_sequence += 1;
        if self.flow_control && (self.ring.len() >= self.capacity || !self.backlog.is_empty()) {
            self.backlog.push_back(ev);
            return true;
        }
        if self.ring.len() >= self.capacity {
            self.dropped += 1;
            return false;
        }
        self.ring.push_back(ev);
        true
    }

    /// Take the oldest event. An overflow is reported (once) before the
    /// surviving events are handed out.
    pub(crate) fn pop(&mut self) -> Result<Option<Event>> {
        if self.dropped > 0 {
            let dropped = std::mem::take(&mut self.dropped);
            return Err(PtlError::EqDropped { dropped });
        }
        let ev = self.ring.pop_front();
        if let Some(b) = self.backlog.pop_front() {
            self.ring.push_back(b);
        }
        Ok(ev)
    }

    /// The oldest event, left in place; `None` if there is none, or if an
    /// overflow must be reported first.
    pub(crate) fn peek(&self) -> Option<Event> {
        if self.dropped > 0 {
            return None;
        }
        self.ring.front().copied()
    }

    /// True if there is something for a reader: an event or an overflow.
    pub(crate) fn has_news(&self) -> bool {
        !self.ring.is_empty() || self.dropped > 0
    }

    /// The `md_update` test: no queued event, no unreported overflow, and no
    /// transfer that will post one.
    pub(crate) fn is_quiescent(&self) -> bool {
        !self.has_news() && self.in_flight == 0
    }

    /// Slots neither taken nor promised: every transfer in flight may
    /// still post its end event and an unlink.
    pub(crate) fn free(&self) -> usize {
        self.capacity
            .saturating_sub(self.ring.len())
            .saturating_sub(self.backlog.len())
            .saturating_sub(2 * self.in_flight as usize)
    }

    /// Room for a request from an initiator that is not admitted: the free
    /// slots less the ones the reader keeps.
    pub(crate) fn free_unadmitted(&self) -> usize {
        self.free().saturating_sub(self.kept)
    }

    /// True if requests from `who` ignore the kept slots.
    #[inline]
    pub(crate) fn admits(&self, who: ProcessId) -> bool {
        self.admitted.iter().any(|(a, _)| a.accepts(who))
    }

    /// A held-back request may be offered again: the queue has drained to
    /// half its capacity (hysteresis, so that a reader taking one event at
    /// a time does not wake the transport for each) — counting kept slots
    /// as taken for the requests held because of them, and only the ring
    /// for admitted requests held for lack of ring room.
    pub(crate) fn resume_due(&self) -> bool {
        let half = self.capacity.div_ceil(2).max(2);
        (self.held && self.free_unadmitted() >= half) || (self.held_admitted && self.free() >= half)
    }

    /// Add one admission of `who`; true if something was held back (the
    /// intake should resume: the newly admitted may go in now).
    pub(crate) fn admit(&mut self, who: ProcessId) -> bool {
        match self.admitted.iter_mut().find(|(a, _)| *a == who) {
            Some((_, n)) => *n += 1,
            None => self.admitted.push((who, 1)),
        }
        self.clear_held()
    }

    /// Take back one admission of `who`; false if it had none.
    pub(crate) fn unadmit(&mut self, who: ProcessId) -> bool {
        let Some(i) = self.admitted.iter().position(|(a, _)| *a == who) else {
            return false;
        };
        self.admitted[i].1 -= 1;
        if self.admitted[i].1 == 0 {
            self.admitted.swap_remove(i);
        }
        true
    }

    /// Forget what was held back: the transport is about to offer it all
    /// again (and whatever is deferred again marks the queue anew).
    pub(crate) fn clear_held(&mut self) -> bool {
        let was = self.held || self.held_admitted;
        self.held = false;
        self.held_admitted = false;
        was
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}
