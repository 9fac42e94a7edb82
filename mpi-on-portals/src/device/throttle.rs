//! Pausing senders that a collective wait let past the envelope cap.
//!
//! A process at its envelope cap ([`crate::MpiConfig::envelopes`]) holds
//! its senders back in their transports, except those it waits for: they
//! are admitted, because the awaited message is behind theirs in the same
//! ordered stream. When the wait is for a *collective* message, send
//! windows (`window.rs`) bound what is in front of it to one window per
//! sender — but each message admitted is acknowledged at once, the sender
//! sends the next window, and so on until the awaited message comes, which
//! may be long (its sender may itself wait for a third rank). So once a
//! sender's point-to-point envelopes pass the cap, this process tells it to
//! pause (a zero-byte put on its flow portal); the sender then keeps its
//! acknowledged point-to-point puts to us queued (collective ones still
//! go). This process resumes it once its envelopes are down to half the
//! cap, or as soon as it waits for a point-to-point message of that sender
//! (a posted receive naming it or any source, a probe): that message may be
//! behind the queued ones, and the wait admits them all, as before.
//!
//! A sender that some point-to-point wait of ours needs at the moment it
//! passes the cap is not paused, for the same reason. What this bounds:
//! the envelopes a collective wait lets in, to the cap plus, per sender,
//! its window and what it sends before the pause reaches it. What it
//! costs: a program that waits for its own standard sends (beyond the
//! eager-copy budget, [`crate::MpiConfig::eager_copy`]) to complete before
//! a collective call that their receiver makes before receiving them
//! relies on buffering, which MPI calls unsafe; it ran before (the
//! receiver took everything) and now waits for the receiver's receives.

use portals::{EventKind, FailType, ProcessId};

use super::{Device, Kind, State, FLOW_PT};

/// Match bits of a pause request.
pub(super) const FLOW_PAUSE: u64 = 1;
/// Match bits of a resume.
pub(super) const FLOW_RESUME: u64 = 2;

impl Device {
    /// At the end of a drain: pause the senders whose point-to-point
    /// envelopes passed the cap (unless a point-to-point wait of ours needs
    /// them), and resume every paused sender once the envelopes are down to
    /// half the cap.
    pub(super) fn throttle(&self, st: &mut State) {
        for p in st.saved.take_over_cap() {
            if st.paused.contains(&p) || self.awaits_p2p(st, p) {
                continue;
            }
            let Some(rank) = self.job.rank_of(p) else {
                continue;
            };
            if st.dead.contains(&rank) || st.departed.contains(&rank) {
                continue;
            }
            self.control(st, p, FLOW_PT, FLOW_PAUSE, false);
            st.paused.push(p);
            st.stats.pauses_sent += 1;
        }
        if !st.paused.is_empty() && st.saved.len() <= self.cfg.envelopes / 2 {
            for p in std::mem::take(&mut st.paused) {
                self.control(st, p, FLOW_PT, FLOW_RESUME, false);
            }
        }
    }

    /// A point-to-point wait (a posted receive, a probe) for `who` (a
    /// process, or any) begins: a sender we paused that it may need sends
    /// again.
    pub(super) fn resume_for(&self, st: &mut State, who: ProcessId) {
        if st.paused.is_empty() {
            return;
        }
        let mut i = 0;
        while i < st.paused.len() {
            let p = st.paused[i];
            if who.accepts(p) {
                st.paused.swap_remove(i);
                self.control(st, p, FLOW_PT, FLOW_RESUME, false);
            } else {
                i += 1;
            }
        }
    }

    /// True if a point-to-point receive or probe of ours waits for a
    /// message `p` may send (naming it, or any source).
    fn awaits_p2p(&self, st: &State, p: ProcessId) -> bool {
        if st.probe_admits.iter().any(|a| a.accepts(p)) {
            return true;
        }
        let rank = self.job.rank_of(p).unwrap_or(u32::MAX - 1);
        st.reqs.iter().any(|(_, r)| {
            r.kind == Kind::Recv
                && !r.coll
                && r.result.is_none()
                && (r.peer == rank || r.peer == u32::MAX)
        })
    }

    /// A pause or resume from a receiver (an event on the flow portal).
    pub(super) fn on_flow(
        &self,
        st: &mut State,
        kind: EventKind,
        fail: FailType,
        from: ProcessId,
        bits: u64,
    ) {
        if kind != EventKind::Put || fail != FailType::Ok {
            return;
        }
        let Some(rank) = self.job.rank_of(from) else {
            return;
        };
        match bits {
            FLOW_PAUSE => {
                st.windows.pause(rank);
                st.stats.pauses_received += 1;
            }
            FLOW_RESUME => st.windows.resume(rank),
            _ => tracing::debug!(bits, "unknown flow message ignored"),
        }
    }
}
