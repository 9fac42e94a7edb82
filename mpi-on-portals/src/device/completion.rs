//! Request completion: test, wait, cancel, detach. A request is complete only
//! when its result is known *and* it holds nothing in the engine (see the
//! module docs' soundness rule).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use portals::PtlError;

use super::{ptl, Device, Kind, OnDone, Req, ReqId, State, WAIT_SLICE};
use crate::error::{MpiError, Result};
use crate::status::Status;

impl Device {
    /// Sleep until some event arrives (or a short slice passes). Drives the
    /// transport meanwhile in polling mode.
    pub(super) fn block(&self) {
        // Nothing more urgent now: finish the acknowledged library copies.
        if self.copies_acked.load(Ordering::Relaxed) {
            let mut st = self.lock();
            self.release_copies(&mut st);
        }
        // Only wait for news here; events are taken under the device lock so
        // that several threads never reorder them.
        match self.ni().eq_block(
            &[self.req_eq, self.pull_eq, self.unexp_eq],
            Some(WAIT_SLICE),
        ) {
            Ok(_) | Err(PtlError::Timeout) => {}
            Err(e) => {
                self.lock().fatal.get_or_insert(ptl(e));
                std::thread::sleep(WAIT_SLICE);
            }
        }
    }

    /// The result of `id` if it is complete (and then forget it). After a
    /// fatal error, the request is aborted: its engine objects are unlinked
    /// (this may take several calls while a transfer finishes) and it
    /// completes with the error.
    pub(super) fn settled(&self, st: &mut State, id: ReqId) -> Option<Completed> {
        if let Some(c) = Self::take_result(st, id) {
            return Some(c);
        }
        let e = st.fatal.clone()?;
        self.abort(st, id, e);
        Self::take_result(st, id)
    }

    /// The result of `id` if it is complete (and then forget it).
    pub(crate) fn test(&self, id: ReqId) -> Result<Option<Result<Status>>> {
        Ok(self.test_owned(id)?.map(|(r, _)| r))
    }

    /// Like [`Device::test`], also handing back the request's owned memory.
    pub(crate) fn test_owned(&self, id: ReqId) -> Result<Option<Completed>> {
        self.poll_test();
        let mut st = self.lock();
        self.drain(&mut st);
        Ok(self.settled(&mut st, id))
    }

    /// True if `id` is complete (or gone), without consuming it.
    pub(crate) fn is_complete(&self, id: ReqId) -> bool {
        self.poll_test();
        self.is_complete_seen(id)
    }

    /// [`Device::is_complete`] without driving the transport: only the
    /// events already queued are taken, so this tells whether something
    /// else (a progress thread) completed `id`.
    pub(crate) fn is_complete_seen(&self, id: ReqId) -> bool {
        let mut st = self.lock();
        self.drain(&mut st);
        if let Some(e) = st.fatal.clone() {
            self.abort(&mut st, id, e);
        }
        st.reqs
            .get(id.idx as usize)
            .filter(|r| r.gen == id.gen)
            .is_none_or(complete)
    }

    pub(super) fn take_result(st: &mut State, id: ReqId) -> Option<Completed> {
        let Some(r) = st.reqs.get(id.idx as usize).filter(|r| r.gen == id.gen) else {
            // Completed and forgotten already (its scope settled it).
            return Some((Err(MpiError::StaleRequest), None));
        };
        if !complete(r) {
            return None;
        }
        let mut r = st.remove_req(id.idx as usize);
        if !st.segments.is_empty() {
            st.segments.remove(&id.user_ptr());
        }
        // Normally run by `finish` already; a completion that came another
        // way must not skip it.
        if let (Some(then), Some(res)) = (r.on_done.take(), r.result.as_mut()) {
            then(res);
        }
        r.result.map(|res| (res, r.owned))
    }

    /// Wait for `id`.
    pub(crate) fn wait(&self, id: ReqId) -> Result<Status> {
        self.wait_owned(id).map(|(s, _)| s)
    }

    /// Wait for `id`; its status and owned memory. Returns only once the
    /// request holds nothing in the engine: after success, after its own
    /// failure, and after a fatal error of the library alike.
    pub(crate) fn wait_owned(
        &self,
        id: ReqId,
    ) -> Result<(Status, Option<Box<dyn std::any::Any + Send>>)> {
        // One pass over the transport before the first look; after that the
        // block's own passes found whatever woke it, and another pass
        // before taking it costs a polling TCP rank a `recvfrom` and an
        // `epoll_wait` on the round trip's path (8 B half round trip 7.5 →
        // 6.1 µs).
        self.poll();
        loop {
            {
                let mut st = self.lock();
                self.drain(&mut st);
                if let Some((r, owned)) = self.settled(&mut st, id) {
                    return r.map(|s| (s, owned));
                }
                // Before sleeping: a rank it needs may have finalized.
                self.fail_if_stranded(&mut st, id);
                if let Some((r, owned)) = self.settled(&mut st, id) {
                    return r.map(|s| (s, owned));
                }
            }
            self.block();
        }
    }

    /// Wait until one of `ids` completes; its index and result.
    pub(crate) fn wait_any(&self, ids: &[ReqId]) -> Result<(usize, Result<Status>)> {
        if ids.is_empty() {
            return Err(MpiError::InvalidBuffer(
                "wait_any needs at least one request",
            ));
        }
        // As in `wait_owned`: the block's passes stand in for later polls.
        self.poll();
        loop {
            {
                let mut st = self.lock();
                self.drain(&mut st);
                for (i, id) in ids.iter().enumerate() {
                    if let Some((r, _)) = Self::take_result(&mut st, *id) {
                        return Ok((i, r));
                    }
                }
                if let Some(e) = st.fatal.clone() {
                    for id in ids {
                        self.abort(&mut st, *id, e.clone());
                    }
                    for (i, id) in ids.iter().enumerate() {
                        if let Some((r, _)) = Self::take_result(&mut st, *id) {
                            return Ok((i, r));
                        }
                    }
                }
                // Sleeping is hopeless only if every one of them waits for
                // a rank that finalized.
                if ids.iter().all(|id| self.stranded(&st, *id).is_some()) {
                    for id in ids {
                        self.fail_if_stranded(&mut st, *id);
                    }
                    continue;
                }
            }
            self.block();
        }
    }

    /// Cancel a pending receive. True if it was cancelled (false: it
    /// completed, or is completing, normally).
    pub(crate) fn cancel(&self, id: ReqId) -> Result<bool> {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return Ok(false);
        };
        if r.result.is_some() || r.kind != Kind::Recv {
            return Ok(false);
        }
        let Some(me) = r.me else { return Ok(false) };
        match self.ni().me_unlink(me) {
            Ok(_) => {
                r.me = None;
                r.md = None;
                r.result = Some(Ok(Status::cancelled()));
                Ok(true)
            }
            // A message is being deposited: it will complete.
            Err(PtlError::MdInUse) => Ok(false),
            Err(PtlError::InvalidHandle { .. }) => Ok(false),
            Err(e) => Err(ptl(e)),
        }
    }

    /// Forget a request whose owner went away: it finishes on its own (the
    /// memory it uses must stay valid, so for borrowed buffers the caller
    /// completes it first).
    pub(crate) fn detach(&self, id: ReqId) {
        let mut st = self.lock();
        if let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) {
            if complete(r) {
                let mut r = st.remove_req(id.idx as usize);
                if !st.segments.is_empty() {
                    st.segments.remove(&id.user_ptr());
                }
                if let (Some(then), Some(res)) = (r.on_done.take(), r.result.as_mut()) {
                    then(res);
                }
            } else {
                r.detached = true;
            }
        }
    }

    /// Run `then` when request `id` completes (after any step it has
    /// already), or now if it has: for memory a started operation must
    /// keep (a packed send buffer, a stage) and the unpacking of a stage.
    /// Nobody has seen `id` complete yet (its handle is the caller's), so
    /// running it now is as good as at completion.
    pub(crate) fn adopt(&self, id: ReqId, then: OnDone) {
        let mut st = self.lock();
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return;
        };
        if complete(r) {
            if let Some(res) = r.result.as_mut() {
                then(res);
            }
            return;
        }
        r.on_done = Some(match r.on_done.take() {
            None => then,
            Some(first) => Box::new(move |res: &mut Result<Status>| {
                first(res);
                then(res);
            }),
        });
    }

    /// True if `id` is not complete yet.
    pub(crate) fn pending(&self, id: ReqId) -> bool {
        let st = self.lock();
        st.reqs
            .get(id.idx as usize)
            .is_some_and(|r| r.gen == id.gen && !complete(r))
    }

    /// Finalize's first half: complete the requests nobody waits for
    /// (buffered and owned sends, acknowledgments) while driving progress,
    /// so that a peer waiting for them (a get of our data, an explicit
    /// acknowledgment) is served before this process leaves. A request whose
    /// peer died fails; after a fatal error nothing more can complete.
    pub(crate) fn complete_detached(&self) {
        let mut next_note = Instant::now() + Duration::from_secs(10);
        loop {
            self.poll();
            {
                let mut st = self.lock();
                self.drain(&mut st);
                // One a finalized rank would have to take can never end.
                let stranded: Vec<ReqId> = st
                    .reqs
                    .iter()
                    .filter(|(_, r)| r.detached)
                    .map(|(i, r)| ReqId {
                        idx: i as u32,
                        gen: r.gen,
                    })
                    .collect();
                for id in stranded {
                    self.fail_if_stranded(&mut st, id);
                }
                let left = st.reqs.iter().filter(|(_, r)| r.detached).count();
                if left == 0 || st.fatal.is_some() {
                    return;
                }
                if Instant::now() >= next_note {
                    tracing::warn!(
                        requests = left,
                        "finalize is waiting for sends no receive has matched yet"
                    );
                    next_note = Instant::now() + Duration::from_secs(10);
                }
            }
            self.block();
        }
    }
}

/// A request's engine objects are all unlinked.
pub(super) fn released(r: &Req) -> bool {
    r.me.is_none()
        && r.md.is_none()
        && r.ack_md.is_none()
        && r.read_me.is_none()
        && r.cts.is_empty()
        && r.nbc_mes.is_empty()
        && r.nbc_mds.is_empty()
}

/// A request is complete: it has its result and holds nothing in the engine,
/// so the buffer it was given may be used (or freed) again.
pub(super) fn complete(r: &Req) -> bool {
    r.result.is_some() && released(r)
}

/// A finished request: its result and the memory it owned.
pub(super) type Completed = (Result<Status>, Option<Box<dyn std::any::Any + Send>>);
