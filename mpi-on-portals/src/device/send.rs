//! Sending: the short (eager, data kept on the read portal until the
//! receiver holds it), synchronous, ready and long protocols (seed 001
//! §3.2–3.3), and buffered sends.

use std::sync::atomic::Ordering;

use portals::{AckReq, MdDesc, MdHandle, MdOptions, Outbound, Position, Remote, Threshold, Unlink};

use super::announce::{self, HDR_EXPECTED};
use super::mem::Mem;
use super::window::{Admit, QueuedPut};
use super::{
    gone, ptl, Device, Kind, Mode, ReqId, State, WindowPut, ACK_PT, HDR_READ, HDR_SYNC, HDR_UNIQUE,
    READ_PT, RECV_PT,
};
use crate::bits::{self, PROTO_LONG, PROTO_SHORT};
use crate::error::{MpiError, Result};
use crate::status::Status;

/// How a send started: see [`Device::start_send`].
enum Started {
    /// The caller's request, to wait for.
    Request(ReqId),
    /// A short standard send of this many bytes went from an eager copy
    /// under an internal request: complete for its caller already.
    Copied(usize),
}

impl WindowPut {
    /// The put, in an engine call: the whole descriptor, or none of it for
    /// an announcement.
    fn issue(&self, e: &mut portals::Engine) -> portals::Result<Outbound> {
        if self.announce {
            e.put_region(self.md, 0, 0, self.ack, &self.remote, self.hdr_data)
        } else {
            e.put(self.md, self.ack, &self.remote, self.hdr_data)
        }
    }
}

impl Device {
    /// Start a send of `len` bytes at `data` from `src_rank` (in the
    /// communicator with context `ctx`) to world rank `dst`.
    ///
    /// An error is returned only if nothing of the send reached the engine;
    /// a send that fails later reports its error through the request.
    ///
    /// # Safety
    /// `data..data+len` must stay valid and unmodified until the request
    /// completes (or, with `owned`, is the owned vector's buffer).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn isend(
        &self,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        data: *const u8,
        len: usize,
        mode: Mode,
        owned: Option<Box<dyn std::any::Any + Send>>,
        detached: bool,
    ) -> Result<ReqId> {
        let mem = Mem::Flat(data.cast_mut(), len);
        // SAFETY: forwarded from our caller.
        unsafe { self.isend_mem(ctx, src_rank, dst, tag, mem, mode, owned, detached) }
    }

    /// [`Device::isend`] of any memory: one region, or the segments of a
    /// non-contiguous datatype, gathered by the transport.
    ///
    /// # Safety
    /// As for [`Device::isend`], for every segment of `mem`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn isend_mem(
        &self,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        mem: Mem<'_>,
        mode: Mode,
        owned: Option<Box<dyn std::any::Any + Send>>,
        detached: bool,
    ) -> Result<ReqId> {
        let mut st = self.lock();
        // SAFETY: forwarded from our caller.
        match unsafe {
            self.start_send(&mut st, ctx, src_rank, dst, tag, mem, mode, owned, detached)
        }? {
            Started::Request(id) => Ok(id),
            Started::Copied(len) => {
                // The caller still wants a request: one complete already.
                let id = self.new_req(&mut st, Kind::SendShort, dst);
                if let Some(rq) = st.reqs.get_mut(id.idx as usize) {
                    rq.result = Some(Ok(Status::new(-1, -1, len, len)));
                }
                Ok(id)
            }
        }
    }

    /// A blocking standard, synchronous or ready send (`MPI_Send` and
    /// kin): [`Device::isend`] and a wait, except that a short message sent
    /// from an eager copy returns at once (after a transport pass at every
    /// second such send in a row), with no request for the caller to make,
    /// drain and take apart.
    ///
    /// # Safety
    /// `data..data+len` must be readable for the duration of the call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn send_blocking(
        &self,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        data: *const u8,
        len: usize,
        mode: Mode,
    ) -> Result<()> {
        let mem = Mem::Flat(data.cast_mut(), len);
        let started = {
            let mut st = self.lock();
            // SAFETY: forwarded from our caller; the wait below keeps the
            // memory in use only until the request completes.
            unsafe { self.start_send(&mut st, ctx, src_rank, dst, tag, mem, mode, None, false) }?
        };
        match started {
            Started::Request(id) => self.wait(id).map(|_| ()),
            Started::Copied(_) => {
                // In polling mode a loop of blocking sends must still
                // serve a peer's get of an earlier message (its events
                // wait for the next call's drain, as after a non-blocking
                // send), so the wait's transport pass is kept, but only
                // at every second send in a row: a send followed by a
                // receive or a wait (a round trip, a halo exchange) leaves
                // the pass to that wait, which makes one before it looks.
                // A pass here cost a polling TCP rank an `epoll_wait` and
                // a `recvfrom` on the round trip's path, where nothing can
                // have arrived yet.
                if self.pass_owed.swap(true, Ordering::Relaxed) {
                    self.poll();
                }
                Ok(())
            }
        }
    }

    /// The body of a send, under the state lock: `Copied` when a short
    /// standard send went from an eager copy (its request is internal and
    /// nobody needs to wait), else the request to wait for.
    ///
    /// # Safety
    /// As for [`Device::isend_mem`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn start_send(
        &self,
        st: &mut State,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        mem: Mem<'_>,
        mode: Mode,
        owned: Option<Box<dyn std::any::Any + Send>>,
        detached: bool,
    ) -> Result<Started> {
        let len = mem.len();
        self.check(st)?;
        // Take the events of earlier sends: a loop of sends that never
        // waits must not overflow the request event queue.
        self.drain(st);
        if let Some(e) = gone(st, dst) {
            return Err(e);
        }
        let ni = self.ni();
        let target = portals_runtime::process_id(dst);
        let long = len > self.cfg.eager_limit;
        let kind = match (mode, long) {
            (Mode::Ready, _) => Kind::SendReady,
            (Mode::Standard, false) => Kind::SendShort,
            (Mode::Synchronous, false) => Kind::SendSync,
            (_, true) => Kind::SendLong,
        };
        // A short standard send of the caller's buffer completes only on
        // the receiver's acknowledgment; within the budget, send a copy
        // instead (an internal request nobody waits for) and hand the
        // caller a request that is complete already.
        let (mut detached, mut mem, mut copy_len) = (detached, mem, 0);
        let mut copy = Vec::new();
        let mut copied = None;
        if st.copy_used + len > self.cfg.eager_copy {
            // Copies held only for a later finish must not cost this one.
            self.release_copies(st);
        }
        if kind == Kind::SendShort
            && owned.is_none()
            && !detached
            && len > 0
            && st.copy_used + len <= self.cfg.eager_copy
        {
            // A recycled buffer: no allocation per message once warm.
            let mut buf = st.spare_copies.pop().unwrap_or_default();
            buf.clear();
            // SAFETY: by this function's contract, the memory is readable.
            unsafe { mem.gather_into(&mut buf) };
            mem = Mem::Flat(buf.as_mut_ptr(), len);
            copy = buf;
            detached = true;
            copy_len = len;
            st.copy_used += len;
            copied = Some(len);
        }
        let id = self.new_req(st, kind, dst);
        // The request owns the memory from now on, so that it lives as long
        // as anything in the engine may read it.
        if let Some(rq) = st.reqs.get_mut(id.idx as usize) {
            rq.owned = owned;
            // Moving the vector keeps its heap buffer where it is.
            rq.copy = copy;
            rq.detached = detached;
            rq.empty = len == 0;
            rq.copy_len = copy_len;
            if copy_len > 0 {
                st.copies_waiting += 1;
            }
        }
        let up = id.user_ptr();
        let proto = if long { PROTO_LONG } else { PROTO_SHORT };
        let remote = Remote::new(target, RECV_PT, bits::encode(proto, ctx, src_rank, tag));
        let r = (|| -> Result<()> {
            match kind {
                Kind::SendReady => {
                    // SAFETY: by this function's contract; the descriptor
                    // only reads (it accepts no incoming operation).
                    let md = unsafe {
                        mem.bind(
                            ni,
                            &MdDesc::default()
                                .threshold(Threshold::Count(1))
                                .eq(self.req_eq)
                                .user_ptr(up),
                            Unlink::Unlink,
                        )
                    }
                    .map_err(ptl)?;
                    st.reqs[id.idx as usize].md = Some(md);
                    self.start_put(st, id, dst, ctx, md, AckReq::NoAck, &remote, 0)
                }
                Kind::SendShort | Kind::SendLong => {
                    // The data stays on the read portal until the receiver's
                    // acknowledgment says it took the bytes (a posted
                    // receive, or for a short message an unexpected buffer);
                    // a zero-byte acknowledgment (unexpected long message, or
                    // no buffer room) keeps it there for the receiver's get
                    // (§3.3). Threshold 3: the put, its acknowledgment, the
                    // get. OP_GET only: the buffer is never written. A short
                    // message says so in its header data (`HDR_READ`): its
                    // receiver tells it from one sent with no exposure.
                    //
                    // A long send to a target whose receives run behind
                    // announces itself instead: a put of none of its bytes,
                    // whose header data carries the length; the receiver
                    // always gets the data (`announce.rs`). Its entry ignores
                    // the bit by which the receiver's get says whether a
                    // posted receive matched.
                    let announce = kind == Kind::SendLong
                        && st.announce.wants(dst, len)
                        && ni.nal().truncated_payload_moves(target);
                    let flag = if kind == Kind::SendShort { HDR_READ } else { 0 };
                    let unique = Self::unique_bits(st);
                    let (read_bits, ignore) = if announce {
                        st.stats.long_announced += 1;
                        st.reqs[id.idx as usize].announced = true;
                        (announce::header(len, unique), HDR_EXPECTED)
                    } else {
                        (unique | flag, 0)
                    };
                    // No `Sent` event: the acknowledgment, which the send
                    // waits for anyway, comes only after the send completed
                    // (and carries its failure if it failed), so the request
                    // counts as sent from the start (one event less per
                    // message to post and to drain).
                    let desc = MdDesc::new(MdOptions::OP_GET | MdOptions::EVENT_SEND_DISABLE)
                        .threshold(Threshold::Count(3))
                        .eq(self.req_eq)
                        .user_ptr(up);
                    st.reqs[id.idx as usize].sent = true;
                    // Its acknowledgment or get comes in the target's
                    // ordered stream to us, maybe behind messages held at
                    // our envelope cap: the entry admits the target while
                    // it is linked. Entry, admission, descriptor and put
                    // in one engine call: every short message pays each
                    // call's engine lock.
                    let unexp_eq = self.unexp_eq;
                    // A library copy's acknowledgment only frees the copy
                    // and a window slot (the caller's request is complete):
                    // the target's transport may hold it back for its next
                    // message to us, which in a round trip is the reply
                    // (TCP: one `sendmsg` per message instead of two).
                    // An announcement's acknowledgment only frees its window
                    // slot too (the send waits for the get): lazy as well, so
                    // it can ride on the get.
                    let ack = if copied.is_some() || announce {
                        AckReq::Lazy
                    } else {
                        AckReq::Ack
                    };
                    let st_: &mut State = st;
                    let out = self.core().with_engine(|e| -> Result<Option<Outbound>> {
                        let me = e
                            .me_attach(
                                READ_PT,
                                target,
                                read_bits,
                                ignore,
                                Unlink::Unlink,
                                Position::After,
                            )
                            .map_err(ptl)?;
                        st_.reqs[id.idx as usize].me = Some(me);
                        e.me_admit(me, unexp_eq).map_err(ptl)?;
                        // SAFETY: by this function's contract.
                        let md =
                            unsafe { mem.attach(e, me, &desc, Unlink::Unlink) }.map_err(ptl)?;
                        st_.reqs[id.idx as usize].md = Some(md);
                        let put = WindowPut {
                            md,
                            ack,
                            remote,
                            hdr_data: read_bits,
                            announce,
                        };
                        if !Self::window_admits(st_, id, dst, ctx, put) {
                            return Ok(None);
                        }
                        put.issue(e).map(Some).map_err(ptl)
                    })?;
                    if let Some(out) = out {
                        ni.nal().send(out);
                        // A self-send may have released triggered operations.
                        self.core().send_triggered();
                    }
                    Ok(())
                }
                Kind::SendSync => {
                    // The explicit acknowledgment lands on a zero-byte
                    // descriptor of its own: the send buffer never accepts
                    // incoming data (see docs/ARCHITECTURE.md). The data
                    // sits on the read portal (same bits) for a receiver
                    // that had no buffer room when it arrived. Only the
                    // receiver's explicit acknowledgment, sent once it holds
                    // the data, completes the send; the put's own
                    // acknowledgment (on deposit) only frees the send
                    // window (`window.rs`), which must not wait for a match.
                    let ack_bits = Self::unique_bits(st) | HDR_SYNC | HDR_READ;
                    // As above: the acknowledgment may queue behind
                    // messages held at our envelope cap.
                    let me = self
                        .attach_admitting(ACK_PT, target, ack_bits)
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].me = Some(me);
                    let ack_md = ni
                        .md_attach(
                            me,
                            &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
                                .threshold(Threshold::Count(1))
                                .eq(self.req_eq)
                                .user_ptr(up),
                            Vec::new(),
                            Unlink::Unlink,
                        )
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].ack_md = Some(ack_md);
                    let read_me = ni
                        .me_attach(
                            READ_PT,
                            target,
                            ack_bits,
                            0,
                            Unlink::Unlink,
                            Position::After,
                        )
                        .map_err(ptl)?;
                    st.reqs[id.idx as usize].read_me = Some(read_me);
                    // SAFETY: by this function's contract. Retained: the put and a get may both
                    // use it; the request unlinks it when done.
                    let md = unsafe {
                        mem.attach_ni(
                            ni,
                            read_me,
                            &MdDesc::new(MdOptions::OP_GET).eq(self.req_eq).user_ptr(up),
                            Unlink::Retain,
                        )
                    }
                    .map_err(ptl)?;
                    st.reqs[id.idx as usize].md = Some(md);
                    self.start_put(st, id, dst, ctx, md, AckReq::Ack, &remote, ack_bits)
                }
                _ => Err(MpiError::InvalidBuffer("not a send")),
            }
        })();
        if let Err(e) = r {
            return self.fail_started(st, id, e).map(Started::Request);
        }
        // The put has left (or waits in the window): now finish the
        // acknowledged library copies, off the message's path.
        self.release_copies(st);
        if detached
            && st
                .reqs
                .get(id.idx as usize)
                .is_some_and(|r| r.result.is_some())
        {
            self.finish(st, id);
        }
        Ok(copied.map_or(Started::Request(id), Started::Copied))
    }

    /// Put send `id`'s message to world rank `dst` now, or queue it behind
    /// earlier ones when `dst`'s window is full (see `window.rs`).
    #[allow(clippy::too_many_arguments)]
    fn start_put(
        &self,
        st: &mut State,
        id: ReqId,
        dst: u32,
        ctx: u16,
        md: MdHandle,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
    ) -> Result<()> {
        let put = WindowPut {
            md,
            ack,
            remote: *remote,
            hdr_data,
            announce: false,
        };
        if !Self::window_admits(st, id, dst, ctx, put) {
            return Ok(());
        }
        self.ni().put(md, ack, remote, hdr_data).map_err(ptl)
    }

    /// True if send `id`'s put may go to world rank `dst` now; false if it
    /// was queued behind earlier ones because `dst`'s window is full (see
    /// `window.rs`). Collective traffic (the odd context of a pair) never
    /// waits: it may overtake point-to-point messages, and must, for a
    /// receiver at its envelope cap to reach it.
    fn window_admits(st: &mut State, id: ReqId, dst: u32, ctx: u16, put: WindowPut) -> bool {
        let counts = put.ack.requested();
        if ctx & 1 == 0 {
            let q = QueuedPut { id, counts, put };
            if st.windows.admit(dst, q) == Admit::Queued {
                return false;
            }
            if counts {
                if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                    r.windowed = true;
                }
            }
        }
        true
    }

    /// Send the queued puts of the targets whose window gained room, in
    /// order, as far as their windows allow (every drain does this). A put
    /// that fails fails its request.
    pub(super) fn pump_windows(&self, st: &mut State) {
        for dst in st.windows.take_ready() {
            loop {
                let reqs = &st.reqs;
                let next = st.windows.next(dst, |id| {
                    reqs.get(id.idx as usize)
                        .is_some_and(|r| r.gen == id.gen && r.result.is_none())
                });
                let Some(q) = next else { break };
                if q.counts {
                    if let Some(r) = st.reqs.get_mut(q.id.idx as usize) {
                        r.windowed = true;
                    }
                }
                let p = q.put;
                match self.core().with_engine(|e| p.issue(e)) {
                    Ok(out) => {
                        self.ni().nal().send(out);
                        // A self-send may have released triggered operations.
                        self.core().send_triggered();
                    }
                    Err(e) => {
                        if let Some(r) = st.reqs.get_mut(q.id.idx as usize) {
                            r.result.get_or_insert(Err(ptl(e)));
                        }
                        self.finish(st, q.id);
                    }
                }
            }
        }
    }

    /// Attach `bytes` of buffer space for buffered sends.
    pub(crate) fn buffer_attach(&self, bytes: usize) {
        self.lock().bsend_attached = bytes;
    }

    /// Detach the buffered-send space, waiting until it is unused.
    pub(crate) fn buffer_detach(&self) -> Result<usize> {
        loop {
            self.poll();
            {
                let mut st = self.lock();
                self.drain(&mut st);
                if st.bsend_used == 0 {
                    return Ok(std::mem::take(&mut st.bsend_attached));
                }
                // Buffered sends own their copies: giving up is safe.
                self.check(&st)?;
            }
            self.block();
        }
    }

    /// A buffered send: copy, send, return at once.
    pub(crate) fn bsend(
        &self,
        ctx: u16,
        src_rank: u32,
        dst: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<()> {
        self.poll();
        {
            let mut st = self.lock();
            self.drain(&mut st);
            let free = st.bsend_attached.saturating_sub(st.bsend_used);
            if data.len() > free {
                return Err(MpiError::BufferSpace {
                    need: data.len(),
                    free,
                });
            }
            st.bsend_used += data.len();
        }
        let mut copy = Vec::new();
        portals_copy::extend_from_slice(&mut copy, data);
        let (ptr, len) = (copy.as_ptr(), copy.len());
        // SAFETY: the vector moves into the request, which keeps its heap
        // buffer (which does not move) until the send completes.
        let r = unsafe {
            self.isend(
                ctx,
                src_rank,
                dst,
                tag,
                ptr,
                len,
                Mode::Standard,
                Some(Box::new(copy)),
                true,
            )
        };
        let mut st = self.lock();
        match r {
            Ok(id) => {
                if let Some(rq) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) {
                    rq.bsend_len = len;
                } else {
                    // Already complete and freed.
                    st.bsend_used = st.bsend_used.saturating_sub(len);
                }
                Ok(())
            }
            Err(e) => {
                st.bsend_used = st.bsend_used.saturating_sub(len);
                Err(e)
            }
        }
    }

    /// Attach a send's own entry (read or ack portal, at the tail, unlinked
    /// when used up) that admits `target` past the envelope cap while it
    /// is linked — one engine call, so admission costs a send no extra
    /// lock.
    fn attach_admitting(
        &self,
        pt: portals::PortalIndex,
        target: portals::ProcessId,
        bits: u64,
    ) -> std::result::Result<portals::MeHandle, portals::PtlError> {
        let unexp_eq = self.unexp_eq;
        self.core().with_engine(|e| {
            let me = e.me_attach(pt, target, bits, 0, Unlink::Unlink, Position::After)?;
            e.me_admit(me, unexp_eq)?;
            Ok(me)
        })
    }

    /// Match bits for a send's own read- or ack-portal entries: unique
    /// among this process's live sends, below the header-data flags.
    pub(super) fn unique_bits(st: &mut State) -> u64 {
        let b = st.next_bits;
        st.next_bits = (st.next_bits.wrapping_add(1) & HDR_UNIQUE).max(1);
        b
    }
}
