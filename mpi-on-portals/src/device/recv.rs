//! Receiving (seed 001 §3.4): search the saved envelopes, post an inactive
//! entry before the mark and activate it only if nothing arrived meanwhile,
//! and take an unexpected message — copy it out of its buffer, or get it
//! from the sender's read portal (a long message, or a short one that found
//! no buffer room).

use std::time::Duration;

use portals::{
    AckReq, MdDesc, MdOptions, PortalIndex, Position, ProcessId, PtlError, Remote, Threshold,
    Unlink,
};

use super::mem::Mem;
use super::{
    dead_member, dead_peer, finish_status, ptl, Device, Kind, OnDone, ReqId, State, Unexpected,
    ACK_PT, HDR_READ, HDR_SYNC, READ_PT,
};
use crate::bits::{self, PROTO_LONG, PROTO_SHORT};
use crate::error::{MpiError, Result};
use crate::status::Status;

impl Device {
    /// Post a receive into `buf..buf+len` for context `ctx` from
    /// communicator rank `src` (world rank `src_world`), or any source.
    ///
    /// An error is returned only if nothing of the receive is left in the
    /// engine; a receive that fails later reports its error through the
    /// request.
    ///
    /// # Safety
    /// The buffer must stay valid and otherwise untouched until the request
    /// completes or is cancelled.
    pub(crate) unsafe fn irecv(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
        buf: *mut u8,
        len: usize,
    ) -> Result<ReqId> {
        // SAFETY: forwarded from our caller.
        unsafe { self.irecv_mem(ctx, src, tag, Mem::Flat(buf, len), None) }
    }

    /// [`Device::irecv`] into any memory: one region, or the segments of
    /// a non-contiguous datatype, scattered into by the transport. `then`
    /// runs once the request is complete and holds nothing in the engine,
    /// before anyone can see it complete (see [`OnDone`]).
    ///
    /// # Safety
    /// As for [`Device::irecv`], for every segment of `mem`.
    pub(crate) unsafe fn irecv_mem(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
        mem: Mem<'_>,
        then: Option<OnDone>,
    ) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        self.drain(&mut st);
        let recv = bits::receive(ctx, src.map(|s| s.0), tag);
        // A probe's admission of this source ends: the receive waits for
        // it from now on (and admits it itself if it has to wait).
        self.end_probe_admission(&mut st, source_id(src));
        let id = self.new_req(&mut st, Kind::Recv, src.map_or(u32::MAX, |s| s.1));
        st.reqs[id.idx as usize].coll = ctx & 1 == 1;
        st.reqs[id.idx as usize].on_done = then;
        // 1. Messages already here, oldest first.
        if let Some(pos) = st.saved.iter().position(|u| bits::accepts(recv, u.bits)) {
            if let Some(u) = st.saved.remove(pos) {
                // SAFETY: forwarded from our caller.
                if let Err(e) = unsafe { self.take_unexpected(&mut st, id, u, mem) } {
                    return self.fail_started(&mut st, id, e);
                }
                return Ok(id);
            }
        }
        // A specific source that died sends nothing more; a receive from
        // any source fails once a member died (see `fail_unreachable`). A
        // finalized source fails only a wait that would block on it
        // (`fail_if_stranded`): posting and then cancelling is legal.
        let dead = match src {
            Some((_, w)) => st.dead.contains(&w).then_some(w),
            None => {
                st.reqs[id.idx as usize].any_ctx = Some(ctx);
                dead_member(&st, ctx)
            }
        };
        if let Some(w) = dead {
            return self.fail_started(&mut st, id, dead_peer(w));
        }
        // SAFETY: forwarded from our caller.
        match unsafe { self.post_recv(&mut st, id, recv, src, mem) } {
            Ok(()) => Ok(id),
            Err(e) => self.fail_started(&mut st, id, e),
        }
    }

    /// Steps 2 and 3 of posting a receive (§3.4): an inactive entry in front
    /// of the mark, activated only if nothing arrived meanwhile.
    ///
    /// # Safety
    /// As for [`Device::irecv`].
    pub(super) unsafe fn post_recv(
        &self,
        st: &mut State,
        id: ReqId,
        recv: (u64, u64),
        src: Option<(u32, u32)>,
        mem: Mem<'_>,
    ) -> Result<()> {
        let ni = self.ni();
        let match_id = source_id(src);
        let up = id.user_ptr();
        // An announced long message may match it: its get needs the segment
        // list again after the announcement used the descriptor up (a flat
        // region is in the announcement's event, `pull.rs`).
        if let Mem::Iov(list, _) = mem {
            st.segments.insert(up, list.to_vec());
        }
        // A receive an announced long message can fill reports to the pull
        // queue, whose hook pulls the data while the application computes
        // (`pull.rs`). Not where no announcement is to be expected: every
        // completion of a pull-queue receive runs the hook, which a
        // shared-memory job reading payloads single-copy would pay for
        // nothing (its peers never announce, `announce.rs`). A peer that
        // announces anyway is pulled at the next call.
        let announced_here = self.cfg.long_announce > 0
            && mem.len() > self.cfg.eager_limit
            && (match_id == ProcessId::ANY || ni.nal().truncated_payload_moves(match_id));
        let eq = if announced_here {
            self.pull_eq
        } else {
            self.req_eq
        };
        let inactive = MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
            .threshold(Threshold::Count(0))
            .eq(eq)
            .user_ptr(up);
        // ...activated only if nothing arrived meanwhile.
        let active = MdDesc {
            threshold: Threshold::Count(1),
            ..inactive
        };
        // Once active, the entry admits its source (any, for any source)
        // past the envelope cap while it is linked: the engine ends the
        // admission when the awaited message uses the entry up, or when a
        // cancel or failure unlinks it. Why: senders held back at the cap
        // hold back everything behind the held message too; the messages
        // of this source that do not match the receive are exactly the
        // ones in front of the awaited one in its ordered stream, so they
        // must get in for the receive to complete, while other senders
        // stay held back. Not before it is active: while this loop empties
        // the queue, an admitted source would keep filling it past the cap
        // (even the awaited message would land there). In the update's own
        // engine call: no extra lock per receive. The first try shares its
        // engine call with the entry's insertion and the inactive
        // descriptor's attach: the protocol needs their order, not
        // separate calls.
        let unexp_eq = self.unexp_eq;
        let mark = self.mark;
        let st_: &mut State = st;
        let first = self.core().with_engine(|e| -> Result<_> {
            let me = e
                .me_insert(
                    mark,
                    match_id,
                    recv.0,
                    recv.1,
                    Unlink::Unlink,
                    Position::Before,
                )
                .map_err(ptl)?;
            st_.reqs[id.idx as usize].me = Some(me);
            // SAFETY: by this function's contract; the request unlinks the
            // descriptor before it completes.
            let md = unsafe { mem.attach(e, me, &inactive, Unlink::Unlink) }.map_err(ptl)?;
            st_.reqs[id.idx as usize].md = Some(md);
            let activated = e
                .md_update(md, Some(&active), Some(unexp_eq))
                .and_then(|_| e.me_admit(me, unexp_eq));
            Ok((me, md, activated))
        })?;
        let st = st_;
        let (me, md, mut activated) = first;
        loop {
            match activated {
                Ok(()) => {
                    if bits::decode(recv.0).ctx & 1 == 0 {
                        // It may wait behind messages its source keeps
                        // queued while paused (`throttle.rs`).
                        self.resume_for(st, match_id);
                    }
                    return Ok(());
                }
                Err(PtlError::MdNoUpdate) => {}
                Err(e) => return Err(ptl(e)),
            }
            // Look at what arrived (waiting for a deposit in progress).
            let before = st.saved.len();
            match self.wait_unexpected() {
                Ok(ev) => self.sh.on_unexpected(self.core(), st, &ev)?,
                Err(PtlError::EqDropped { dropped }) => {
                    let e = MpiError::EventQueueOverflow(dropped);
                    st.fatal.get_or_insert(e.clone());
                    return Err(e);
                }
                Err(e) => return Err(ptl(e)),
            }
            if let Some(pos) = st
                .saved
                .iter()
                .skip(before)
                .position(|u| bits::accepts(recv, u.bits))
            {
                // The descriptor is inactive, so nothing uses it: this
                // unlink succeeds.
                ni.me_unlink(me).map_err(ptl)?;
                let r = &mut st.reqs[id.idx as usize];
                r.me = None;
                r.md = None;
                if let Some(u) = st.saved.remove(before + pos) {
                    // SAFETY: forwarded from our caller.
                    unsafe { self.take_unexpected(st, id, u, mem)? };
                }
                return Ok(());
            }
            activated = self.core().with_engine(|e| {
                e.md_update(md, Some(&active), Some(unexp_eq))?;
                e.me_admit(me, unexp_eq)
            });
        }
    }

    /// Wait for the next event of the unexpected queue and take it, keeping
    /// its slot (see `saved.rs`). Called with the state locked, so nobody
    /// else takes it first.
    fn wait_unexpected(&self) -> std::result::Result<portals::Event, PtlError> {
        let ni = self.ni();
        loop {
            ni.eq_block(&[self.unexp_eq], Some(Duration::from_secs(60)))?;
            if let Some(ev) = ni.eq_get_kept(self.unexp_eq)? {
                return Ok(ev);
            }
        }
    }

    /// Receive an unexpected message into `buf` for request `id`.
    ///
    /// # Safety
    /// As for [`Device::irecv`].
    pub(super) unsafe fn take_unexpected(
        &self,
        st: &mut State,
        id: ReqId,
        u: Unexpected,
        mem: Mem<'_>,
    ) -> Result<()> {
        let len = mem.len();
        let f = bits::decode(u.bits);
        let ni = self.ni();
        let n = (u.rlength as usize).min(len);
        let status = Status::new(f.src as i32, f.tag as i32, n, u.rlength as usize);
        st.reqs[id.idx as usize].peer = self.job.rank_of(u.initiator).unwrap_or(u32::MAX);
        match (f.proto, u.buf) {
            (PROTO_SHORT, Some(i)) => {
                let n = n.min(u.mlength as usize);
                // One pool lock for the copy and the release.
                let mut pool = self.sh.pool();
                if n > 0 {
                    let Some((ptr, blen)) = pool.bufs.get(i).map(|b| (b.ptr, b.len)) else {
                        return Err(MpiError::InvalidBuffer("no such unexpected buffer"));
                    };
                    let end = u.offset as usize + n;
                    if end > blen {
                        return Err(MpiError::InvalidBuffer(
                            "unexpected message outside its buffer",
                        ));
                    }
                    // SAFETY: the region was deposited completely (its Put
                    // event was seen) and nothing writes it again before the
                    // buffer is recycled, which needs this message released;
                    // `buf` is valid for `len >= n` bytes by our contract, and
                    // the two allocations are distinct.
                    unsafe {
                        mem.scatter_from(std::slice::from_raw_parts(ptr.add(u.offset as usize), n))
                    };
                }
                self.sh.release_in(self.core(), st, &mut pool, i)?;
                drop(pool);
                st.stats.unexpected_short += 1;
                if u.hdr_data & HDR_SYNC != 0 {
                    st.stats.sync_acks += 1;
                    // Synchronous send, received late: acknowledge
                    // explicitly (Fig. 5).
                    self.control(st, u.initiator, ACK_PT, u.hdr_data, false);
                }
                let r = &mut st.reqs[id.idx as usize];
                r.status = Some(status);
                r.result = Some(finish_status(status));
                Ok(())
            }
            (PROTO_SHORT, None) if u.rlength == 0 => {
                // Zero bytes found no buffer room: nothing to fetch.
                if u.hdr_data & HDR_SYNC != 0 {
                    st.stats.sync_acks += 1;
                    self.control(st, u.initiator, ACK_PT, u.hdr_data, false);
                }
                let r = &mut st.reqs[id.idx as usize];
                r.status = Some(status);
                r.result = Some(finish_status(status));
                Ok(())
            }
            (PROTO_SHORT, None) | (PROTO_LONG, _)
                if u.hdr_data & HDR_READ != 0 || (f.proto == PROTO_LONG && u.hdr_data != 0) =>
            {
                // Fig. 7: get the data from the sender's read portal — a
                // long message, or a short one that found no buffer room.
                if f.proto == PROTO_LONG {
                    st.stats.unexpected_long += 1;
                } else if u.hdr_data & HDR_SYNC != 0 {
                    st.stats.sync_acks += 1;
                }
                let r = &mut st.reqs[id.idx as usize];
                r.kind = Kind::RecvGet;
                r.status = Some(status);
                if f.proto == PROTO_SHORT && u.hdr_data & HDR_SYNC != 0 {
                    r.ack_after = Some((u.initiator, u.hdr_data));
                }
                self.admit_for_reply(st, id, u.initiator)?;
                // SAFETY: by our contract. Threshold 1: the reply (a get
                // request itself counts nothing).
                let md = unsafe {
                    mem.bind(
                        ni,
                        &MdDesc::default()
                            .threshold(Threshold::Count(1))
                            .eq(self.req_eq)
                            .user_ptr(id.user_ptr()),
                        Unlink::Unlink,
                    )
                }
                .map_err(ptl)?;
                st.reqs[id.idx as usize].md = Some(md);
                ni.get_region(
                    md,
                    0,
                    n as u64,
                    &Remote::new(u.initiator, READ_PT, u.hdr_data),
                )
                .map_err(ptl)?;
                Ok(())
            }
            _ => {
                let e = MpiError::ReadySendUnmatched {
                    sender: f.src as i32,
                    tag: f.tag as i32,
                };
                st.reqs[id.idx as usize].result = Some(Err(e));
                Ok(())
            }
        }
    }

    /// A library message nobody waits for: a zero-length put to `pt` of
    /// `to` (an explicit synchronous-send acknowledgment), or with `get` a
    /// zero-length get from it (releasing a long send whose data will never
    /// be fetched). A failure is logged: the message it answers is already
    /// handled.
    pub(super) fn control(
        &self,
        st: &mut State,
        to: ProcessId,
        pt: PortalIndex,
        bits: u64,
        get: bool,
    ) {
        let peer = self.job.rank_of(to).unwrap_or(u32::MAX);
        let cid = self.new_req(st, Kind::Control, peer);
        if let Some(r) = st.reqs.get_mut(cid.idx as usize) {
            r.detached = true;
        }
        let ni = self.ni();
        let r = (|| -> Result<()> {
            let md = ni
                .md_bind(
                    &MdDesc::default()
                        .threshold(Threshold::Count(1))
                        .eq(self.req_eq)
                        .user_ptr(cid.user_ptr()),
                    Vec::new(),
                    Unlink::Unlink,
                )
                .map_err(ptl)?;
            st.reqs[cid.idx as usize].md = Some(md);
            let remote = Remote::new(to, pt, bits);
            if get {
                self.admit_for_reply(st, cid, to)?;
                ni.get(md, &remote).map_err(ptl)
            } else {
                ni.put(md, AckReq::NoAck, &remote, 0).map_err(ptl)
            }
        })();
        if let Err(e) = r {
            self.abort(st, cid, e);
        }
    }
}

/// The Portals id of a receive's source: world rank `src.1`, or any.
pub(super) fn source_id(src: Option<(u32, u32)>) -> ProcessId {
    src.map_or(ProcessId::ANY, |s| portals_runtime::process_id(s.1))
}
