//! Event queues: bounded rings of [`Event`]s (`ptl_handle_eq_t`).

use std::collections::VecDeque;

use crate::error::{PtlError, Result};
use crate::event::Event;

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
}

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        EventQueue {
            ring: VecDeque::with_capacity(capacity),
            capacity,
            next_sequence: 0,
            dropped: 0,
            in_flight: 0,
        }
    }

    /// Append an event, stamping its sequence number. Returns false if it
    /// was dropped because the ring is full.
    pub(crate) fn push(&mut self, mut ev: Event) -> bool {
        ev.sequence = self.next_sequence;
        self.next_sequence += 1;
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
        Ok(self.ring.pop_front())
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

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}
