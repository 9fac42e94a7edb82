//! Send windows: at most [`crate::MpiConfig::send_window`] point-to-point
//! messages to one target are in its stream and not yet acknowledged; the
//! rest wait here, in order, until acknowledgments make room.
//!
//! **Why.** A receiver bounds its saved envelopes by holding senders back
//! in their transports (`saved.rs`), but it must let a sender in whenever
//! it waits for that sender: the awaited message is somewhere in the
//! sender's ordered stream, behind whatever the sender put before it. When
//! the awaited message is a collective one (the barrier after a flood of
//! `isend`s — legal, and the pattern of issue 23's late receiver), every
//! point-to-point message the sender had started was in front of it, so the
//! receiver had to take them all: 8 senders × 20 000 × 60 KB saved 120 272
//! envelopes at a cap of 4 096. Collective traffic has its own context and
//! may overtake point-to-point traffic (MPI orders messages only within a
//! communicator and context), so the sender keeps point-to-point puts
//! beyond the window out of the stream, and collective messages — which
//! never wait here — reach the receiver behind at most a window of them.
//! So the receiver's envelopes stay within its cap plus one window per
//! sender it admits.
//!
//! **What counts.** A put in the window is one whose target will
//! acknowledge it the moment it is deposited — in a posted receive, an
//! unexpected buffer, or as a zero-byte envelope (standard, long, and
//! synchronous sends, whose put asks an acknowledgment for this alone).
//! Acknowledging on deposit, not on match, is what keeps the window from
//! deadlocking a legal program: a receive that waits for the last of
//! `window + 1` unmatched messages of one sender admits that sender, the
//! window's messages are deposited as envelopes and acknowledged, and the
//! rest follow. The acknowledgment of a library copy is lazy
//! (`AckReq::Lazy`): a TCP target holds it back for at most a batch or a
//! few tens of microseconds while its calls go on, and sends it before it
//! sleeps, so a waiting receiver still opens the window; one that left the
//! library sends it on its next call. Ready sends ask no acknowledgment: they never count, but
//! wait behind queued messages to the same target so as not to overtake
//! them.
//!
//! **Pauses.** A receiver that waits for a *collective* message of ours lets
//! us in past its envelope cap; every put it takes so is acknowledged, and
//! the room that makes here would let the next window in, and the next,
//! for as long as its wait lasts (until we send the awaited message, which
//! may be much later). So such a receiver tells us to pause once our
//! envelopes pass its cap, and to resume when it has room again or starts
//! waiting for a point-to-point message of ours (`throttle.rs`); while
//! paused, acknowledged puts to it wait here.
//!
//! **Who drives it.** Every drain pumps the targets whose window gained
//! room (`Device::pump_windows`), so queued sends go out from any MPI call
//! of this process; a send that is queued is complete for its caller only
//! if it was a library copy (short standard sends within the eager-copy
//! budget), as before.

use std::collections::VecDeque;

use super::ReqId;

/// A put that waits for room in its target's window: its request, whether
/// it asks an acknowledgment (counts in the window), and what the put
/// needs (`P`: the device's descriptor, destination and header data).
#[derive(Clone, Copy, Debug)]
pub(super) struct QueuedPut<P> {
    /// The send request (stale if it finished meanwhile: skipped).
    pub(super) id: ReqId,
    /// The put asks an acknowledgment.
    pub(super) counts: bool,
    pub(super) put: P,
}

struct Window<P> {
    in_flight: u32,
    /// The target asked us to stop (its envelopes passed its cap while it
    /// let us in): no acknowledged put leaves until it resumes us.
    paused: bool,
    queued: VecDeque<QueuedPut<P>>,
}

/// The windows of every target (world ranks), and the targets whose window
/// gained room while puts wait.
pub(super) struct SendWindows<P> {
    limit: u32,
    peers: Vec<Window<P>>,
    /// Targets to pump at the end of the drain.
    ready: Vec<u32>,
    /// Puts that had to wait (reported in [`crate::MpiStats`]).
    pub(super) waited: u64,
    /// Puts waiting in the queues now.
    queued: usize,
}

/// What to do with a put now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Put it now; it counts in the window if it asks an acknowledgment.
    Now,
    /// It was queued: [`SendWindows::next`] hands it out later.
    Queued,
}

impl<P: Copy> SendWindows<P> {
    /// Windows of `limit` puts (at least 1) for `ranks` targets.
    pub(super) fn new(limit: usize, ranks: u32) -> Self {
        SendWindows {
            limit: u32::try_from(limit).unwrap_or(u32::MAX).max(1),
            peers: (0..ranks)
                .map(|_| Window {
                    in_flight: 0,
                    paused: false,
                    queued: VecDeque::new(),
                })
                .collect(),
            ready: Vec::new(),
            waited: 0,
            queued: 0,
        }
    }

    /// Decide about a put to `dst`: now (then counted in flight if it asks
    /// an acknowledgment), or queued behind earlier ones. A target outside
    /// the job is not windowed (the put fails on its own).
    pub(super) fn admit(&mut self, dst: u32, q: QueuedPut<P>) -> Admit {
        let limit = self.limit;
        let Some(w) = self.peers.get_mut(dst as usize) else {
            return Admit::Now;
        };
        let counts = q.counts;
        if w.queued.is_empty() && (!counts || (!w.paused && w.in_flight < limit)) {
            if counts {
                w.in_flight += 1;
            }
            return Admit::Now;
        }
        w.queued.push_back(q);
        self.waited += 1;
        self.queued += 1;
        Admit::Queued
    }

    /// An acknowledged put to `dst` left the window (acknowledged, or its
    /// request ended without one).
    pub(super) fn release(&mut self, dst: u32) {
        if let Some(w) = self.peers.get_mut(dst as usize) {
            w.in_flight = w.in_flight.saturating_sub(1);
            if !w.queued.is_empty() && !self.ready.contains(&dst) {
                self.ready.push(dst);
            }
        }
    }

    /// Target `dst` asked us to stop sending (see `throttle.rs`).
    pub(super) fn pause(&mut self, dst: u32) {
        if let Some(w) = self.peers.get_mut(dst as usize) {
            w.paused = true;
        }
    }

    /// Target `dst` lets us send again.
    pub(super) fn resume(&mut self, dst: u32) {
        if let Some(w) = self.peers.get_mut(dst as usize) {
            w.paused = false;
            if !w.queued.is_empty() && !self.ready.contains(&dst) {
                self.ready.push(dst);
            }
        }
    }

    /// True if some target has room for puts that wait.
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The targets to pump (emptied).
    pub(super) fn take_ready(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.ready)
    }

    /// The next queued put to `dst` that fits its window, counted in
    /// flight if it asks an acknowledgment. `live` says whether its request
    /// still wants it sent; stale ones are dropped here.
    pub(super) fn next(
        &mut self,
        dst: u32,
        mut live: impl FnMut(ReqId) -> bool,
    ) -> Option<QueuedPut<P>> {
        let limit = self.limit;
        let w = self.peers.get_mut(dst as usize)?;
        loop {
            let q = *w.queued.front()?;
            if !live(q.id) {
                w.queued.pop_front();
                self.queued -= 1;
                continue;
            }
            let counts = q.counts;
            if counts && (w.paused || w.in_flight >= limit) {
                return None;
            }
            w.queued.pop_front();
            self.queued -= 1;
            if counts {
                w.in_flight += 1;
            }
            return Some(q);
        }
    }

    /// Puts waiting in the queues, all targets together.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Puts to `dst` in flight (tests).
    #[cfg(test)]
    fn in_flight(&self, dst: u32) -> u32 {
        self.peers.get(dst as usize).map_or(0, |w| w.in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACK: bool = true;
    const NO_ACK: bool = false;

    fn put(idx: u32, counts: bool) -> QueuedPut<()> {
        QueuedPut {
            id: ReqId { idx, gen: 1 },
            counts,
            put: (),
        }
    }

    #[test]
    fn puts_beyond_the_window_wait_and_leave_in_order_as_acknowledgments_come() {
        let mut w = SendWindows::new(2, 3);
        assert_eq!(w.admit(1, put(0, ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(1, ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(2, ACK)), Admit::Queued);
        assert_eq!(w.admit(1, put(3, ACK)), Admit::Queued);
        // Another target has its own window.
        assert_eq!(w.admit(2, put(9, ACK)), Admit::Now);
        assert_eq!(w.waited, 2);
        assert_eq!(w.queued(), 2);
        assert!(w.next(1, |_| true).is_none(), "the window is full");
        w.release(1);
        assert_eq!(w.take_ready(), vec![1]);
        assert_eq!(w.next(1, |_| true).map(|q| q.id.idx), Some(2));
        assert!(w.next(1, |_| true).is_none());
        w.release(1);
        w.release(1);
        assert_eq!(w.next(1, |_| true).map(|q| q.id.idx), Some(3));
        assert_eq!(w.in_flight(1), 1);
        assert_eq!(w.queued(), 0, "every queued put left");
    }

    #[test]
    fn a_ready_send_never_counts_but_never_overtakes_queued_puts() {
        let mut w = SendWindows::new(1, 2);
        assert_eq!(w.admit(1, put(0, NO_ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(1, ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(2, ACK)), Admit::Queued);
        assert_eq!(w.admit(1, put(3, NO_ACK)), Admit::Queued);
        w.release(1);
        assert_eq!(w.next(1, |_| true).map(|q| q.id.idx), Some(2));
        // The window is full again, but the ready send behind it waited
        // only for its turn, not for room.
        assert_eq!(w.next(1, |_| true).map(|q| q.id.idx), Some(3));
        assert_eq!(w.in_flight(1), 1);
    }

    #[test]
    fn stale_queued_puts_are_skipped_and_free_nothing() {
        let mut w = SendWindows::new(1, 2);
        assert_eq!(w.admit(1, put(0, ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(1, ACK)), Admit::Queued);
        assert_eq!(w.admit(1, put(2, ACK)), Admit::Queued);
        w.release(1);
        assert_eq!(w.queued(), 2);
        assert_eq!(w.next(1, |id| id.idx != 1).map(|q| q.id.idx), Some(2));
        assert_eq!(w.queued(), 0, "the stale put is no longer counted");
        assert!(w.next(1, |_| true).is_none());
        assert_eq!(w.in_flight(1), 1);
    }

    #[test]
    fn a_paused_target_gets_no_acknowledged_put_until_it_resumes_us() {
        let mut w = SendWindows::new(4, 2);
        assert_eq!(w.admit(1, put(0, ACK)), Admit::Now);
        w.pause(1);
        assert_eq!(w.admit(1, put(1, ACK)), Admit::Queued);
        w.release(1);
        assert!(
            w.next(1, |_| true).is_none(),
            "paused, though the window is empty"
        );
        w.resume(1);
        assert_eq!(w.take_ready(), vec![1]);
        assert_eq!(w.next(1, |_| true).map(|q| q.id.idx), Some(1));
        // A ready send with nothing queued goes even while paused: its
        // receive is posted by contract, it adds no envelope.
        w.pause(1);
        assert_eq!(w.admit(1, put(2, NO_ACK)), Admit::Now);
    }

    #[test]
    fn a_target_outside_the_job_is_not_windowed_and_a_zero_window_is_one() {
        let mut w = SendWindows::new(0, 2);
        assert_eq!(w.admit(7, put(0, ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(1, ACK)), Admit::Now);
        assert_eq!(w.admit(1, put(2, ACK)), Admit::Queued);
        w.release(7);
        assert!(!w.has_ready());
    }
}
