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
        if self.eqs.remove(k).is_some_and(|q| q.held) {
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
            q.held = false;
            self.intake_resumed = true;
        }
        r
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
                eq.held = false;
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
        if !on && std::mem::take(&mut q.held) {
            self.intake_resumed = true;
        }
        Ok(())
    }

    /// The queue `mdk` posts to is flow-controlled and lacks room for one
    /// more request: mark it, so that draining it resumes the intake.
    pub(super) fn must_hold(&mut self, mdk: MdKey) -> bool {
        let Some(d) = self.mds.get(mdk) else {
            return false;
        };
        // The end event and a possible unlink, plus a start event if wanted.
        let need = 2 + usize::from(d.desc.options.contains(MdOptions::EVENT_START));
        let Some(q) = d.eq.and_then(|e| self.eqs.get_mut(e)) else {
            return false;
        };
        if !q.flow_control || q.free() >= need {
            return false;
        }
        q.held = true;
        true
    }
}
