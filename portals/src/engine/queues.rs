//! The engine's event queues: allocating, reading and freeing them, the
//! reservations of transfers in flight, and flow control — holding a
//! message back in its transport instead of overflowing the queue it would
//! post to (see [`Engine::eq_set_flow_control`]). The queue itself is
//! `crate::eq`.

use super::{Engine, MdKey};
use crate::eq::EventQueue;
use crate::error::{PtlError, Result};
use crate::event::Event;
use crate::handle::EqHandle;
use crate::md::MdOptions;
use crate::types::ProcessId;

impl Engine {
    /// Allocate an event queue holding up to `capacity` events
    /// (`PtlEQAlloc`).
    pub fn eq_alloc(&mut self, capacity: usize) -> Result<EqHandle> {
        if capacity == 0 || capacity > self.limits.max_eq_capacity {
            return Err(PtlError::InvalidArgument(
                "event queue capacity must be between 1 and max_eq_capacity",
            ));
        }
        if self.eqs.len() >= self.limits.max_eqs {
            return Err(PtlError::NoSpace {
                what: "event queues",
                limit: self.limits.max_eqs,
            });
        }
        let key = self.eqs.insert(EventQueue::new(capacity));
        Ok(self.eq_handle(key))
    }

    /// Free an event queue (`PtlEQFree`). Descriptors that still name it
    /// stop producing events.
    pub fn eq_free(&mut self, eq: EqHandle) -> Result<()> {
        let k = self.eq_key(eq)?;
        if self
            .eqs
            .remove(k)
            .is_some_and(|q| q.held || q.held_admitted)
        {
            self.intake_resumed = true;
        }
        Ok(())
    }

    /// Take the oldest event, if any (`PtlEQGet`). After an overflow the
    /// next call returns [`PtlError::EqDropped`] once, then the kept events.
    pub fn eq_get(&mut self, eq: EqHandle) -> Result<Option<Event>> {
        let k = self.eq_key(eq)?;
        let q = &mut self.eqs[k];
        let r = q.pop();
        if q.resume_due() {
            q.clear_held();
            self.intake_resumed = true;
        }
        r
    }

    /// The oldest event of `eq`, left in the queue (a Portals extension):
    /// for a reader that takes only some kinds of event and leaves the rest,
    /// in order, to another (the MPI library's unlink hook). `None` when the
    /// queue is empty or an overflow is still to be reported by
    /// [`Engine::eq_get`].
    pub fn eq_peek(&self, eq: EqHandle) -> Result<Option<Event>> {
        let k = self.eq_key(eq)?;
        Ok(self.eqs[k].peek())
    }

    /// [`Engine::eq_get`], keeping the event's slot: it stays counted
    /// against the queue's room for requests from initiators that are not
    /// admitted ([`Engine::eq_admit`]) until [`Engine::eq_release_kept`]
    /// gives it back. A Portals extension for a reader that keeps something
    /// per event it took (the MPI library's saved envelopes): with flow
    /// control on, the queue's capacity then bounds what the reader holds,
    /// not only what waits in the ring. On an ordinary queue the count is
    /// kept but changes nothing.
    pub fn eq_get_kept(&mut self, eq: EqHandle) -> Result<Option<Event>> {
        let k = self.eq_key(eq)?;
        let q = &mut self.eqs[k];
        let r = q.pop();
        if let Ok(Some(_)) = r {
            q.kept += 1;
        }
        // The ring shrank: an admitted request held for ring room may go in.
        if q.resume_due() {
            q.clear_held();
            self.intake_resumed = true;
        }
        r
    }

    /// Give back `n` slots kept by [`Engine::eq_get_kept`]. Resumes the
    /// intake if the queue held a request back and now has room for half
    /// its capacity. Giving back more than is kept is an error (and gives
    /// back nothing).
    pub fn eq_release_kept(&mut self, eq: EqHandle, n: usize) -> Result<()> {
        let k = self.eq_key(eq)?;
        let q = &mut self.eqs[k];
        if n > q.kept {
            return Err(PtlError::InvalidArgument(
                "released more event-queue slots than were kept",
            ));
        }
        q.kept -= n;
        if q.resume_due() {
            q.clear_held();
            self.intake_resumed = true;
        }
        Ok(())
    }

    /// Slots of `eq` kept by its reader ([`Engine::eq_get_kept`]).
    pub fn eq_kept(&self, eq: EqHandle) -> Result<usize> {
        let k = self.eq_key(eq)?;
        Ok(self.eqs[k].kept)
    }

    /// Admit the requests of `who` to `eq`: they ignore the slots the
    /// reader keeps ([`Engine::eq_get_kept`]), though they still need real
    /// room in the ring (so a flow-controlled queue never overflows).
    /// `who` may hold wildcards: [`ProcessId::ANY`] admits every
    /// initiator. Admissions are counted: each needs its own
    /// [`Engine::eq_unadmit`] with the same `who`.
    ///
    /// Why: a reader that keeps slots up to the capacity holds every
    /// sender back, and a held message stops everything behind it from
    /// the same sender (see [`Engine::eq_set_flow_control`]). A reader
    /// that waits for a message from `who` admits it, so the messages in
    /// front of the awaited one get in and the awaited one is reached,
    /// while other senders stay held back. Adding an admission resumes the
    /// intake if something was held back, so the transports offer it again.
    pub fn eq_admit(&mut self, eq: EqHandle, who: ProcessId) -> Result<()> {
        let k = self.eq_key(eq)?;
        if self.eqs[k].admit(who) {
            self.intake_resumed = true;
        }
        Ok(())
    }

    /// Take back one admission of `who` ([`Engine::eq_admit`]). An error
    /// if `who` is not admitted. Nothing held back can go in because of
    /// this, so the intake is not resumed.
    pub fn eq_unadmit(&mut self, eq: EqHandle, who: ProcessId) -> Result<()> {
        let k = self.eq_key(eq)?;
        if !self.eqs[k].unadmit(who) {
            return Err(PtlError::InvalidArgument(
                "this initiator is not admitted to the event queue",
            ));
        }
        Ok(())
    }

    /// True if `eq_get` would return something (an event or an overflow).
    pub fn eq_ready(&self, eq: EqHandle) -> Result<bool> {
        let k = self.eq_key(eq)?;
        Ok(self.eqs[k].has_news())
    }

    /// Number of queued events and capacity of an event queue.
    pub fn eq_count(&self, eq: EqHandle) -> Result<(usize, usize)> {
        let k = self.eq_key(eq)?;
        Ok((self.eqs[k].len(), self.eqs[k].capacity()))
    }

    pub(super) fn eq_in_flight(&mut self, k: MdKey, delta: i32) {
        if let Some(eq) = self
            .mds
            .get(k)
            .and_then(|d| d.eq)
            .and_then(|e| self.eqs.get_mut(e))
        {
            eq.in_flight = eq.in_flight.saturating_add_signed(delta);
            // A transfer that posts no end event frees its reservation
            // without a read: the intake may resume here too.
            if eq.resume_due() {
                eq.clear_held();
                self.intake_resumed = true;
            }
        }
    }

    /// True (once) if a flow-controlled event queue that held a request
    /// back has drained far enough to take requests again: the transport
    /// should offer its held messages again. [`crate::NiCore::with_engine`]
    /// turns it into a new [`crate::NiCore::intake_epoch`] and a wake of
    /// the transport.
    pub fn take_intake_resumed(&mut self) -> bool {
        std::mem::take(&mut self.intake_resumed)
    }

    /// Make `eq` flow-controlled, or an ordinary queue again (`on` false).
    ///
    /// An ordinary queue that fills keeps its oldest events and reports
    /// the loss ([`PtlError::EqDropped`]), as Portals 3 specifies. A
    /// flow-controlled one is never overflowed by incoming requests (puts,
    /// gets, get-puts matched on descriptors that post to it): a request
    /// that finds fewer than two free slots (its end event and a possible
    /// unlink; each transfer in flight to the queue reserves two as well)
    /// is answered [`RecvAction::Defer`](super::RecvAction::Defer) and stays in its transport, which
    /// holds the sender back, until the reader has drained the queue to
    /// half its capacity. Like Portals 4's `PTL_PT_FLOWCTRL`, but the
    /// message waits instead of being dropped for the initiator to retry.
    /// Acknowledgments and replies to the process's own operations are
    /// held back the same way. Events no transport can hold (a send's
    /// completion, an unlink) that find the queue full wait, in order,
    /// beyond its capacity and move in as it drains: their number is
    /// bounded by the operations the process started itself. So nothing
    /// is ever dropped from a flow-controlled queue, except through
    /// [`Engine::recv_header_unheld`]. Capacity must be at least 2.
    ///
    /// A reader may also keep the slots of events it took
    /// ([`Engine::eq_get_kept`]): requests from initiators it has not
    /// admitted ([`Engine::eq_admit`]) are then held back once queued,
    /// promised and kept slots reach the capacity, so the capacity bounds
    /// what the reader keeps too.
    ///
    /// The price is head-of-line blocking: a held message stops every later
    /// message from the same peer, whatever its target. A reader waiting for
    /// anything from a peer must therefore keep draining the flow-controlled
    /// queues that peer's messages may post to (the MPI device drains both
    /// of its queues in every wait).
    pub fn eq_set_flow_control(&mut self, eq: EqHandle, on: bool) -> Result<()> {
        let k = self.eq_key(eq)?;
        let q = &mut self.eqs[k];
        if on && q.capacity() < 2 {
            return Err(PtlError::InvalidArgument(
                "a flow-controlled event queue needs a capacity of at least 2",
            ));
        }
        q.flow_control = on;
        if !on && q.clear_held() {
            self.intake_resumed = true;
        }
        Ok(())
    }

    /// The queue `mdk` posts to is flow-controlled and lacks room for one
    /// more request from `src`: mark it, so that draining it resumes the
    /// intake. Slots the reader keeps count, unless `src` is admitted.
    pub(super) fn must_hold(&mut self, mdk: MdKey, src: ProcessId) -> bool {
        let Some(d) = self.mds.get(mdk) else {
            return false;
        };
        // The end event and a possible unlink, plus a start event if wanted.
        let need = 2 + usize::from(d.desc.options.contains(MdOptions::EVENT_START));
        let Some(q) = d.eq.and_then(|e| self.eqs.get_mut(e)) else {
            return false;
        };
        if !q.flow_control || q.free_unadmitted() >= need {
            return false;
        }
        if q.admits(src) {
            // Kept slots do not count for it: it waits only for ring room.
            if q.free() >= need {
                return false;
            }
            q.held_admitted = true;
        } else {
            q.held = true;
        }
        true
    }
}
