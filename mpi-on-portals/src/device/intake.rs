//! Taking events from the engine: one engine call per step of a drain.
//!
//! Every MPI call drains, and most drains find nothing; each engine call
//! takes the engine lock that the transport's progress (the progress
//! thread, or this thread's own polling) contends for. So one step takes
//! the failed-peer count, the next unexpected event and the next request
//! event under a single lock, in the order separate calls took them. And
//! a drain looks only once the interface's epoch moved since the last one
//! that found every queue empty: the engine moves it, under its lock, in
//! every call that queues an event or learns of a failed peer
//! (`portals::NiCore::epoch`). A drain that finds nothing new costs one
//! shared load instead of the lock and a look at three queues: in an 8 B
//! ping-pong a round trip's drains went from about 4 200 to 3 400
//! instructions (callgrind, docs/PERFORMANCE.md, stop 54).

use portals::{Engine, EqHandle, Event, PtlError};

use super::{ptl, Device, State};
use crate::error::MpiError;

impl Device {
    /// Take and act on every queued event, unexpected messages first in
    /// each step so that a receive posted by a request event sees them;
    /// then learn of failed peers. Skipped while the epoch reads as it did
    /// before the last look that found every queue empty: nothing was
    /// queued since.
    pub(super) fn take_all_events(&self, st: &mut State) {
        let core = self.core();
        let mut epoch = core.epoch();
        if st.quiet_epoch == Some(epoch) {
            return;
        }
        let (mut unexpected, mut request, mut pull) = (None, None, None);
        // The failure count read in the last step, which found every queue
        // empty: whatever the transport delivered before giving up on a
        // peer was queued by then, and handled first.
        let failures = loop {
            let failed = self.take_events(st, &mut unexpected, &mut request, &mut pull);
            if unexpected.is_none() && request.is_none() && pull.is_none() {
                break failed;
            }
            if let Some(ev) = &unexpected {
                if let Err(e) = self.sh.on_unexpected(core, st, ev) {
                    st.fatal.get_or_insert(e);
                }
            }
            for ev in [&request, &pull].into_iter().flatten() {
                self.on_request(st, ev);
            }
            unexpected = None;
            request = None;
            pull = None;
            // Read before the next step's look: what that look misses
            // moves it again.
            epoch = core.epoch();
        };
        // After a fatal error every drain looks (a failing queue is not
        // empty, it refuses).
        st.quiet_epoch = st.fatal.is_none().then_some(epoch);
        if failures > st.failures_seen {
            self.on_peer_failures(st);
        }
    }

    /// Take the next unexpected event (its slot kept: see `saved.rs`) into
    /// `unexpected`, the next request event into `request` and the next
    /// event of the pull queue (`pull.rs`) into `pull` (each left
    /// as it is when its queue is empty), and return how many peers the
    /// transport gave up on, read first. An overflow is fatal (and reported
    /// once, so the kept events follow). Out-parameters, and a queue is
    /// popped only when it has news: most drains find nothing, and moving
    /// empty events around was most of their cost.
    pub(super) fn take_events(
        &self,
        st: &mut State,
        unexpected: &mut Option<Event>,
        request: &mut Option<Event>,
        pull: &mut Option<Event>,
    ) -> usize {
        let (unexp_eq, req_eq, pull_eq) = (self.unexp_eq, self.req_eq, self.pull_eq);
        let fatal = &mut st.fatal;
        self.core().with_engine(|e| {
            let failed = e.failed_peers().len();
            take(e, unexp_eq, true, fatal, unexpected);
            take(e, req_eq, false, fatal, request);
            take(e, pull_eq, false, fatal, pull);
            failed
        })
    }
}

/// Put the next event of `eq` into `out`, if it has one; with `kept`, its
/// slot stays taken.
fn take(
    e: &mut Engine,
    eq: EqHandle,
    kept: bool,
    fatal: &mut Option<MpiError>,
    out: &mut Option<Event>,
) {
    // An invalid handle says so below.
    if !e.eq_ready(eq).unwrap_or(true) {
        return;
    }
    loop {
        let got = if kept {
            e.eq_get_kept(eq)
        } else {
            e.eq_get(eq)
        };
        match got {
            Ok(ev) => {
                *out = ev;
                return;
            }
            Err(PtlError::EqDropped { dropped }) => {
                fatal.get_or_insert(MpiError::EventQueueOverflow(dropped));
            }
            Err(err) => {
                fatal.get_or_insert(ptl(err));
                return;
            }
        }
    }
}
