//! Pulling an announced long message into the posted receive it matched,
//! from whichever thread made the progress that delivered the announcement.
//!
//! **Why.** An announced long message (`announce.rs`) that meets a posted
//! receive deposits nothing: the receiver must get the data. If only the
//! next MPI call started that get, a receive posted before a computation
//! would see its data move only after it — the overlap the progress thread
//! exists for would be lost (measured: 1 MB over TCP at compute 1×, 92 %
//! with puts, 60 % with announcements pulled at the next call).
//!
//! **How.** Posted receives longer than the eager limit (the only ones an
//! announcement can fill), from a source that may announce (one whose
//! transport moves truncated payloads, or any source), report to a queue
//! of their own, the *pull queue*, whose descriptors' self-unlinks the unlink hook watches — and an
//! announcement uses its receive's descriptor up. The hook, on the thread
//! that deposited it (the progress thread while the application computes),
//! looks at the head of the pull queue if the state is free: an
//! announcement starts its get at once, handed to the transport's next pass
//! ([`portals::Engine::defer_outbound`]: a hook must not send), and so does
//! each one behind it; any other event (a message deposited whole, a
//! truncation that needs a reply) stops it, and stays in the queue, in
//! order, for the next drain, which wakes and finds it as before
//! ([`portals::Engine::eq_peek`] leaves it there). If the state is locked,
//! its holder is in the library and drains the queue itself.

use portals::{EventKind, FailType, MdDesc, NiCore, Remote, Threshold, Unlink};

use super::announce::{announced_len, HDR_EXPECTED};
use super::{ptl, Kind, Mem, ReqId, Shared, State, READ_PT};
use crate::bits::{self, PROTO_LONG};
use crate::error::Result;
use crate::status::Status;

impl Shared {
    /// Take the announcements at the head of the pull queue and start
    /// their pulls (no sends, no progress: safe in an unlink hook), with the
    /// unlink events that change nothing between them; stop at the first
    /// other event, which the next drain takes in order.
    pub(super) fn drain_pulls(&self, core: &NiCore, st: &mut State) {
        loop {
            let head = match core.with_engine(|e| e.eq_peek(self.pull_eq)) {
                Ok(Some(ev)) => ev,
                // Empty, an overflow to report, or no queue: the drain's.
                Ok(None) | Err(_) => return,
            };
            match Self::pullable(st, &head) {
                Head::Pull(id, total) => {
                    self.take_head(core, st);
                    st.stats.expected += 1;
                    if let Err(e) = self.pull_announced(core, st, id, &head, total) {
                        // Finished when its descriptor's unlink event is
                        // drained.
                        if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                            r.result.get_or_insert(Err(e));
                        }
                    }
                }
                Head::Nothing => self.take_head(core, st),
                Head::Leave => return,
            }
        }
    }

    /// Drop the head of the pull queue, which [`Shared::drain_pulls`] just
    /// looked at.
    fn take_head(&self, core: &NiCore, st: &mut State) {
        if let Err(e) = core.with_engine(|e| e.eq_get(self.pull_eq)) {
            st.fatal.get_or_insert(ptl(e));
        }
    }

    /// What the hook may do with `ev`, the head of the pull queue.
    fn pullable(st: &State, ev: &portals::Event) -> Head {
        let id = ReqId::from_user_ptr(ev.md.user_ptr);
        let Some(r) = st.reqs.get(id.idx as usize).filter(|r| r.gen == id.gen) else {
            // A late event of a finished request: the drain ignores it too.
            return Head::Nothing;
        };
        match ev.kind {
            EventKind::Put
                if ev.fail == FailType::Ok
                    && r.kind == Kind::Recv
                    && r.result.is_none()
                    && bits::decode(ev.match_bits).proto == PROTO_LONG =>
            {
                match announced_len(ev.hdr_data) {
                    Some(total) => Head::Pull(id, total),
                    None => Head::Leave,
                }
            }
            // The used-up descriptor of a receive whose pull is under way:
            // the request holds another one now, and waits for its reply.
            EventKind::Unlink
                if r.result.is_none()
                    && r.md != Some(ev.md_handle)
                    && r.ack_md != Some(ev.md_handle) =>
            {
                Head::Nothing
            }
            _ => Head::Leave,
        }
    }

    /// Posted receive `id` matched the announcement `ev` of a long message
    /// of `total` bytes: get the data into its memory (as much as fits),
    /// telling the sender in the get's match bits that the receive was
    /// posted (`announce.rs`). The get leaves with the transport's next pass
    /// (or the caller's [`NiCore::send_triggered`]).
    pub(super) fn pull_announced(
        &self,
        core: &NiCore,
        st: &mut State,
        id: ReqId,
        ev: &portals::Event,
        total: u64,
    ) -> Result<()> {
        st.stats.announced_expected += 1;
        let f = bits::decode(ev.match_bits);
        // A non-contiguous receive's segments are kept beside the request
        // (`post_recv`); a flat receive's memory is the used-up descriptor's
        // own region, as the event records it (our engine's copy of the
        // pointer `post_recv` lent it).
        let kept = st.segments.remove(&id.user_ptr());
        let mem = match &kept {
            Some(list) => Mem::iov(list),
            None => Mem::Flat(
                std::ptr::with_exposed_provenance_mut(ev.md.start),
                ev.md.length as usize,
            ),
        };
        let n = total.min(mem.len() as u64);
        let Some(r) = st.reqs.get_mut(id.idx as usize) else {
            return Ok(());
        };
        r.status = Some(Status::new(
            f.src as i32,
            f.tag as i32,
            n as usize,
            total as usize,
        ));
        r.kind = Kind::RecvGet;
        let desc = MdDesc::default()
            .threshold(Threshold::Count(1))
            .eq(self.req_eq)
            .user_ptr(id.user_ptr());
        let from = Remote::new(ev.initiator, READ_PT, ev.hdr_data | HDR_EXPECTED);
        // SAFETY: the receive's memory, valid and untouched until the
        // request completes by `irecv`'s contract; the announcement moved no
        // byte into it, and its descriptor is used up.
        let md = core
            .with_engine(|e| unsafe { mem.bind_engine(e, &desc, Unlink::Unlink) })
            .map_err(ptl)?;
        r.md = Some(md);
        // The reply comes in the sender's ordered stream, maybe behind
        // messages held at the envelope cap: admit the sender until the
        // request has its result (see `Device::admit_for_reply`).
        let admit = r.admits.is_none().then_some(ev.initiator);
        let unexp_eq = self.unexp_eq;
        core.with_engine(|e| -> portals::Result<()> {
            if let Some(who) = admit {
                e.eq_admit(unexp_eq, who)?;
                r.admits = Some(who);
            }
            let out = e.get_region(md, 0, n, &from)?;
            e.defer_outbound(out);
            Ok(())
        })
        .map_err(ptl)?;
        Ok(())
    }
}

/// What the unlink hook may do with the head of the pull queue.
enum Head {
    /// An announcement that used up receive `.0`: pull `.1` bytes.
    Pull(ReqId, u64),
    /// An event that changes nothing: drop it.
    Nothing,
    /// Anything else: leave it, and what follows, to the drain.
    Leave,
}
