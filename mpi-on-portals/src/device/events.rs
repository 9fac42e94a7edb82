//! Engine events to requests: draining the event queues, advancing each
//! request by its events (the protocol steps of sends and receives), and
//! finishing a request once the engine holds nothing of it.

use super::announce::{self, HDR_EXPECTED};
use super::*;

/// Acknowledged sends from a library copy held for a later finish
/// ([`State::acked_copies`]) at most: a thread that only tests and never
/// sends or waits finishes them in batches of this many.
const ACKED_COPIES_HELD: usize = 64;

impl Device {
    /// Take every queued event and act on it, unexpected messages first so
    /// that a receive posted by a request event sees them; then learn of
    /// failed peers, and retry releasing what a transfer held. Never fails:
    /// an error that concerns one request becomes its result, one that
    /// concerns the library is kept in `fatal` (and reported by every wait
    /// once the waited-for request has let go of its buffer).
    pub(super) fn drain(&self, st: &mut State) {
        self.take_all_events(st);
        if !st.departures_new.is_empty() {
            for p in std::mem::take(&mut st.departures_new) {
                if let Some(r) = self.job.rank_of(p) {
                    st.departed.insert(r);
                }
            }
        }
        if !st.releasing.is_empty() {
            let mut ids = std::mem::take(&mut st.releasing);
            for id in ids.drain(..) {
                self.finish(st, id);
            }
            // Keep the buffer: every receive passes through here.
            ids.append(&mut st.releasing);
            st.releasing = ids;
        }
        if st.windows.has_ready() {
            self.pump_windows(st);
        }
        self.throttle(st);
        self.sh.flush_kept(self.core(), st);
    }

    pub(super) fn on_request(&self, st: &mut State, ev: &Event) {
        if ev.md.user_ptr == FLOW {
            self.on_flow(st, ev.kind, ev.fail, ev.initiator, ev.match_bits);
            return;
        }
        if ev.md.user_ptr == slots::SLOTS {
            Self::on_slot(st, ev);
            return;
        }
        if ev.md.user_ptr == nbc::NBC_DONE {
            if ev.kind == EventKind::Put {
                self.on_nbc_done(st, ev.hdr_data);
            }
            return;
        }
        let id = ReqId::from_user_ptr(ev.md.user_ptr);
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return; // a late event of a finished request
        };
        if ev.kind == EventKind::Ack && r.windowed {
            // Deposited at the target (whatever the outcome): the window
            // has room again.
            r.windowed = false;
            let dst = r.peer;
            st.windows.release(dst);
        }
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return;
        };
        if ev.kind == EventKind::Unlink {
            if r.md == Some(ev.md_handle) {
                r.md = None;
                if matches!(r.kind, Kind::Recv | Kind::SendShort | Kind::SendLong) {
                    // Their descriptor is attached to `me`, which unlinks
                    // with it (both `Unlink::Unlink`), in the engine call
                    // that posted this: nothing is left to unlink.
                    r.me = None;
                }
            }
            if r.ack_md == Some(ev.md_handle) {
                r.ack_md = None;
            }
            if r.result.is_some() {
                self.finish(st, id);
            }
            return;
        }
        if r.result.is_some() {
            // Decided already (failed, aborted): later events change nothing.
            return;
        }
        if let Err(e) = self.on_request_event(st, id, ev) {
            if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                r.result.get_or_insert(Err(e));
            }
        }
        let Some(r) = st.reqs.get(id.idx as usize) else {
            return;
        };
        if r.result.is_none() {
            return;
        }
        if r.kind != Kind::Recv {
            if r.detached && r.copy_len > 0 && matches!(r.result, Some(Ok(_))) {
                self.defer_copy(st, id);
                return;
            }
            self.finish(st, id);
            return;
        }
        // A receive's descriptor unlink event is next in the queue (the
        // deposit used it up): finish at the end of this drain, after that
        // event said there is nothing left to unlink, instead of now with
        // an engine call that finds nothing.
        if !st.releasing.contains(&id) {
            st.releasing.push(id);
        }
    }

    /// Advance request `id` (live, no result yet) by event `ev`.
    pub(super) fn on_request_event(&self, st: &mut State, id: ReqId, ev: &Event) -> Result<()> {
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return Ok(());
        };
        if ev.fail != FailType::Ok {
            let why = format!("{:?} on {:?}", ev.fail, ev.kind);
            let rank = if r.peer == u32::MAX {
                self.job.rank_of(ev.initiator).unwrap_or(u32::MAX)
            } else {
                r.peer
            };
            r.result = Some(Err(MpiError::PeerFailed {
                rank: rank as i32,
                why,
            }));
            return Ok(());
        }
        match (r.kind, ev.kind) {
            (Kind::SendReady | Kind::Control, EventKind::Sent)
            | (Kind::Control, EventKind::Reply) => {
                r.result = Some(Ok(Status::new(
                    -1,
                    -1,
                    ev.mlength as usize,
                    ev.mlength as usize,
                )));
            }
            (Kind::SendShort | Kind::SendSync | Kind::SendLong, EventKind::Sent) => r.sent = true,
            (Kind::SendSync, EventKind::Put) => r.acked = Some(0),
            (Kind::SendShort | Kind::SendLong, EventKind::Ack) => {
                r.acked = Some(ev.mlength);
                if r.kind == Kind::SendLong && ev.mlength == 0 && !r.empty && !r.announced {
                    // Put whole and taken as nothing: the target's receives
                    // run behind ours, so announce the next ones.
                    let dst = r.peer;
                    st.announce.unexpected(dst);
                }
            }
            (Kind::SendShort | Kind::SendLong, EventKind::Get) => {
                r.got = true;
                if r.announced {
                    let dst = r.peer;
                    if ev.match_bits & HDR_EXPECTED != 0 {
                        st.announce.expected(dst);
                    } else {
                        st.announce.unexpected(dst);
                    }
                }
            }
            (Kind::Recv, EventKind::Put) => {
                st.stats.expected += 1;
                let f = bits::decode(ev.match_bits);
                if f.proto == PROTO_SHORT && ev.hdr_data & HDR_SYNC != 0 {
                    // A synchronous sender waits for this whether its
                    // message was expected or not: its put is not
                    // acknowledged, so an acknowledgment from an
                    // unexpected buffer cannot be mistaken for a match.
                    self.control(st, ev.initiator, ACK_PT, ev.hdr_data, false);
                }
                let Some(r) = st.reqs.get_mut(id.idx as usize) else {
                    return Ok(());
                };
                let st_ = Status::new(
                    f.src as i32,
                    f.tag as i32,
                    ev.mlength as usize,
                    ev.rlength as usize,
                );
                r.status = Some(st_);
                if f.proto == PROTO_LONG {
                    if let Some(total) = announce::announced_len(ev.hdr_data) {
                        return self.pull_announced(st, id, ev, total);
                    }
                }
                if ev.mlength == 0 && ev.rlength > 0 && waits_for_get(f.proto, ev.hdr_data) {
                    // A message truncated to nothing acknowledges zero
                    // bytes, which its sender reads as "not taken": release
                    // it with the get it is waiting for.
                    let initiator = ev.initiator;
                    let hdr = ev.hdr_data;
                    r.kind = Kind::RecvGet;
                    let ni = self.ni();
                    let md = ni
                        .md_bind(
                            &MdDesc::default()
                                .threshold(Threshold::Count(1))
                                .eq(self.req_eq)
                                .user_ptr(id.user_ptr()),
                            Vec::new(),
                            Unlink::Unlink,
                        )
                        .map_err(ptl)?;
                    r.md = Some(md);
                    self.admit_for_reply(st, id, initiator)?;
                    ni.get(md, &Remote::new(initiator, READ_PT, hdr))
                        .map_err(ptl)?;
                    return Ok(());
                }
                r.result = Some(finish_status(st_));
            }
            (Kind::RecvGet, EventKind::Reply) => {
                let s = r.status.unwrap_or(Status::new(-1, -1, 0, 0));
                r.result = Some(finish_status(s));
                if let Some((to, bits)) = r.ack_after.take() {
                    // A synchronous short message pulled after all: its
                    // sender completes once we hold the data.
                    self.control(st, to, ACK_PT, bits, false);
                }
            }
            _ => {}
        }
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return Ok(());
        };
        if r.result.is_none() {
            let done = match r.kind {
                Kind::SendSync => r.sent && r.acked.is_some(),
                Kind::SendShort | Kind::SendLong => {
                    r.sent && matches!(r.acked, Some(n) if n > 0 || r.got || r.empty)
                }
                _ => false,
            };
            if done {
                r.result = Some(Ok(Status::new(-1, -1, 0, 0)));
            }
        }
        Ok(())
    }

    /// Posted receive `id` matched the announcement `ev` of a long message
    /// of `total` bytes: get it now (`pull.rs`).
    fn pull_announced(&self, st: &mut State, id: ReqId, ev: &Event, total: u64) -> Result<()> {
        let r = self.sh.pull_announced(self.core(), st, id, ev, total);
        self.core().send_triggered();
        r
    }

    /// Request `id` gets data from `who` (a pull): admit `who` past the
    /// envelope cap until the request has its result. The reply comes in
    /// `who`'s ordered stream to us, and may be behind messages of `who`
    /// held back at the cap — which nothing else would let in when the
    /// receive was matched from a saved envelope (no entry waits then).
    pub(super) fn admit_for_reply(&self, st: &mut State, id: ReqId, who: ProcessId) -> Result<()> {
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return Ok(());
        };
        if r.admits.is_none() {
            self.ni().eq_admit(self.unexp_eq, who).map_err(ptl)?;
            r.admits = Some(who);
        }
        Ok(())
    }

    /// Request `id` has its result: unlink what it still holds in the engine
    /// so that the user's buffer is free before anyone can see it complete.
    /// What a transfer still uses is retried at the next drain (the request
    /// stays incomplete meanwhile). A detached request is forgotten once
    /// released.
    pub(super) fn finish(&self, st: &mut State, id: ReqId) {
        let ni = self.ni();
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return;
        };
        if r.windowed {
            // Ended without its acknowledgment (failed, aborted): it no
            // longer holds its target's window.
            r.windowed = false;
            let dst = r.peer;
            st.windows.release(dst);
        }
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return;
        };
        // The result is known: nothing more is awaited from the peer.
        if let Some(who) = r.admits.take() {
            if let Err(e) = ni.eq_unadmit(self.unexp_eq, who) {
                tracing::warn!(error = %e, "could not end a pull's admission");
            }
        }
        // Unlinking the entry also unlinks a descriptor attached to it; the
        // explicit descriptor unlinks then find nothing, which is fine. All
        // in one engine call: every message ends here, and each call takes
        // the engine lock the transport contends for.
        if r.me.is_some() || r.read_me.is_some() || r.md.is_some() || r.ack_md.is_some() {
            self.core().with_engine(|e| {
                for slot in [&mut r.me, &mut r.read_me] {
                    if let Some(me) = *slot {
                        match e.me_unlink(me) {
                            Ok(_) | Err(PtlError::InvalidHandle { .. }) => *slot = None,
                            Err(e) => tracing::trace!(error = %e, "request entry still in use"),
                        }
                    }
                }
                for slot in [&mut r.md, &mut r.ack_md] {
                    if let Some(md) = *slot {
                        match e.md_unlink(md) {
                            Ok(_) | Err(PtlError::InvalidHandle { .. }) => *slot = None,
                            Err(e) => {
                                tracing::trace!(error = %e, "request descriptor still in use")
                            }
                        }
                    }
                }
            });
            // An unlink may have failed triggered operations, releasing
            // others.
            self.core().send_triggered();
        }
        r.nbc_mes.retain(|&me| match ni.me_unlink(me) {
            Ok(_) | Err(PtlError::InvalidHandle { .. }) => false,
            Err(e) => {
                tracing::trace!(error = %e, "collective entry still in use");
                true
            }
        });
        r.nbc_mds.retain(|&md| match ni.md_unlink(md) {
            Ok(_) | Err(PtlError::InvalidHandle { .. }) => false,
            Err(e) => {
                tracing::trace!(error = %e, "collective descriptor still in use");
                true
            }
        });
        if r.me.is_none() && r.md.is_none() && r.nbc_mes.is_empty() && r.nbc_mds.is_empty() {
            nbc::free_cts(ni, &mut r.cts);
        }
        if released(r) {
            if let Some(ctx) = r.nbc_ctx.take() {
                self.nbc_instance_done(st, ctx);
            }
        }
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return;
        };
        if !released(r) {
            if !st.releasing.contains(&id) {
                st.releasing.push(id);
            }
            return;
        }
        if let Some(then) = r.on_done.take() {
            if let Some(res) = r.result.as_mut() {
                then(res);
            }
        }
        if r.detached {
            if let Err(e) = r.result.as_ref().unwrap_or(&Ok(Status::cancelled())) {
                tracing::warn!(error = %e, "a request nobody waits for failed");
            }
            let r = st.remove_req(id.idx as usize);
            if !st.segments.is_empty() {
                st.segments.remove(&id.user_ptr());
            }
            st.bsend_used = st.bsend_used.saturating_sub(r.bsend_len);
            st.copy_used = st.copy_used.saturating_sub(r.copy_len);
            let cap = r.copy.capacity();
            if cap > 0 && cap <= SPARE_COPY_BYTES && st.spare_copies.len() < SPARE_COPIES {
                st.spare_copies.push(r.copy);
            }
        }
    }

    /// Send `id` from a library copy was acknowledged: finish it later
    /// ([`State::acked_copies`]), or now with the others once
    /// [`ACKED_COPIES_HELD`] wait.
    fn defer_copy(&self, st: &mut State, id: ReqId) {
        st.acked_copies.push(id);
        if st.acked_copies.len() >= ACKED_COPIES_HELD {
            self.release_copies(st);
        } else {
            self.copies_acked.store(true, Ordering::Relaxed);
        }
    }

    /// Finish the acknowledged sends from a library copy
    /// ([`State::acked_copies`]): after a send's put has left, and before a
    /// wait sleeps or polls again.
    pub(super) fn release_copies(&self, st: &mut State) {
        // Every send comes here: with nothing held (the hint is then clear
        // already: both change under the state lock), touch nothing shared.
        if st.acked_copies.is_empty() {
            return;
        }
        self.copies_acked.store(false, Ordering::Relaxed);
        let mut ids = std::mem::take(&mut st.acked_copies);
        for id in ids.drain(..) {
            self.finish(st, id);
        }
        // Keep the buffer: every round trip passes through here.
        ids.append(&mut st.acked_copies);
        st.acked_copies = ids;
    }

    /// Give request `id` the result `e` unless it has one, and release it.
    pub(super) fn abort(&self, st: &mut State, id: ReqId, e: MpiError) {
        if let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) {
            r.result.get_or_insert(Err(e));
            self.finish(st, id);
        }
    }
}
