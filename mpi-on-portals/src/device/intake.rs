//! Taking events from the engine: one engine call per step of a drain.
//!
//! Every MPI call drains, and most drains find nothing; each engine call
//! takes the engine lock that the transport's progress (the progress
//! thread, or this thread's own polling) contends for. So one step takes
//! the failed-peer count, the next unexpected event and the next request
//! event under a single lock, in the order separate calls took them.

use portals::{Engine, EqHandle, Event, PtlError};

use super::{ptl, Device, State};
use crate::error::MpiError;

impl Device {
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
