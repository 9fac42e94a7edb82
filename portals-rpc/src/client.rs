//! The client: requests with a unique xid, a reply entry posted before
//! each send, the caller's bulk buffer exposed in place, resends after a
//! timeout and back-off when the service is full.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use portals::{
    AckReq, EqHandle, Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, MeHandle,
    NetworkInterface, Position, ProcessId, PtlError, Remote, Threshold, Unlink,
};
use rand::Rng;

use crate::bits::{self, Kind, XID_MASK};
use crate::config::ClientConfig;
use crate::error::RpcError;
use crate::wire::{
    BulkKind, RequestHeader, ServiceInfo, Status, FLAG_CONNECT, HDR_MAYBE_RESENT, REQUEST_HEADER,
};

/// Longest sleep of a waiting call between checks for the server's failure.
const SLICE: Duration = Duration::from_millis(100);

/// The caller's bulk buffer of one call, used in place (zero copies).
#[derive(Debug)]
pub enum BulkArg<'b> {
    /// No bulk data.
    None,
    /// The server writes the data here (a read from the server's view of
    /// the client: `BulkKind::Read`).
    Read(&'b mut [u8]),
    /// The server reads the data from here (`BulkKind::Write`).
    Write(&'b [u8]),
}

/// A client of one service, on one network interface. Calls may be made
/// from any number of threads at once (`&self`); each has its own xid,
/// event queue and reply entry.
///
/// A call's event queue and reply buffer come from the client's free list
/// and go back to it when the call ends, so a steady caller allocates
/// neither (an event queue and a `max_reply`-byte zeroed buffer per call
/// cost more than the call's own work for small requests). The free list
/// holds at most as many as were ever in use at once. The match entries
/// stay per call: their match bits are the call's xid, so a late reply to
/// an earlier call finds no entry instead of a reused one.
#[derive(Debug)]
pub struct Client<'a> {
    ni: &'a NetworkInterface,
    server: ProcessId,
    cfg: ClientConfig,
    max_request: u64,
    next_xid: AtomicU64,
    free: Mutex<Vec<CallSlot>>,
}

/// What a call borrows from its client's free list.
#[derive(Debug)]
struct CallSlot {
    eq: EqHandle,
    /// The reply buffer, `max_reply` bytes long.
    reply: Vec<u8>,
}

impl<'a> Client<'a> {
    /// Connect to the service at `server`: ask it for its limits
    /// ([`ServiceInfo`]), resending and backing off as any call does (so
    /// a service that is still starting is waited for, within the retry
    /// policy).
    pub fn connect(
        ni: &'a NetworkInterface,
        server: ProcessId,
        cfg: ClientConfig,
    ) -> Result<Self, RpcError> {
        let mut c = Client::with_max_request(ni, server, cfg, REQUEST_HEADER as u64);
        let info = c.info()?;
        c.max_request = info.max_request;
        Ok(c)
    }

    /// A client that takes the service's maximum request size from its
    /// caller instead of asking (both sides configured alike).
    pub fn with_max_request(
        ni: &'a NetworkInterface,
        server: ProcessId,
        cfg: ClientConfig,
        max_request: u64,
    ) -> Self {
        // Xids start at the clock in µs: a client restarted under the same
        // process id continues above its predecessor's xids, which the
        // server's reply cache may still hold.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as u64)
            & XID_MASK;
        Client {
            ni,
            server,
            cfg,
            max_request,
            next_xid: AtomicU64::new(start),
            free: Mutex::new(Vec::new()),
        }
    }

    /// An event queue and reply buffer for a call: a free one, or new.
    fn take_slot(&self) -> Result<CallSlot, RpcError> {
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match reused {
            Some(s) => Ok(s),
            None => Ok(CallSlot {
                eq: self.ni.eq_alloc(256)?,
                reply: vec![0; self.cfg.max_reply],
            }),
        }
    }

    /// Give a call's slot back. Events still queued belong to the ended
    /// call (its handles are gone); they are dropped here, and any that
    /// arrive later are told apart by their descriptor handle.
    fn put_slot(&self, mut slot: CallSlot) {
        while let Ok(Some(_)) = self.ni.eq_get(slot.eq) {}
        if slot.reply.len() != self.cfg.max_reply {
            slot.reply.resize(self.cfg.max_reply, 0);
        }
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(slot);
    }

    /// The server.
    pub fn server(&self) -> ProcessId {
        self.server
    }

    /// The largest request (header included) the service takes; a larger
    /// one fails with [`RpcError::RequestTooLarge`] before it is sent.
    pub fn max_request(&self) -> u64 {
        self.max_request
    }

    /// Event queues and reply buffers kept for the next calls: at most as
    /// many as calls were ever in progress at once.
    pub fn pooled_calls(&self) -> usize {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The largest body a request may carry.
    pub fn max_body(&self) -> u64 {
        self.max_request.saturating_sub(REQUEST_HEADER as u64)
    }

    /// Ask the service for its limits.
    pub fn info(&self) -> Result<ServiceInfo, RpcError> {
        let r = self.exec(FLAG_CONNECT, 0, &[], BulkArg::None)?;
        ServiceInfo::decode(&r).map_err(|_| RpcError::Protocol("short service info"))
    }

    /// Call `opcode` with `body`; the handler's reply.
    pub fn call(&self, opcode: u32, body: &[u8]) -> Result<Vec<u8>, RpcError> {
        self.exec(0, opcode, body, BulkArg::None)
    }

    /// Call `opcode` with `body`, letting the handler write up to
    /// `into.len()` bytes into `into` (server-driven bulk read: it puts
    /// into the buffer in place).
    pub fn call_read(
        &self,
        opcode: u32,
        body: &[u8],
        into: &mut [u8],
    ) -> Result<Vec<u8>, RpcError> {
        self.exec(0, opcode, body, BulkArg::Read(into))
    }

    /// Call `opcode` with `body`, letting the handler read `from` (bulk
    /// write: it gets from the buffer in place).
    pub fn call_write(&self, opcode: u32, body: &[u8], from: &[u8]) -> Result<Vec<u8>, RpcError> {
        self.exec(0, opcode, body, BulkArg::Write(from))
    }

    /// Call with any bulk argument.
    pub fn call_bulk(
        &self,
        opcode: u32,
        body: &[u8],
        bulk: BulkArg<'_>,
    ) -> Result<Vec<u8>, RpcError> {
        self.exec(0, opcode, body, bulk)
    }

    fn exec(
        &self,
        flags: u8,
        opcode: u32,
        body: &[u8],
        bulk: BulkArg<'_>,
    ) -> Result<Vec<u8>, RpcError> {
        let size = (REQUEST_HEADER + body.len()) as u64;
        if size > self.max_request {
            return Err(RpcError::RequestTooLarge {
                size,
                max: self.max_request,
            });
        }
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed) & XID_MASK;
        let (kind, bulk_len) = match &bulk {
            BulkArg::None => (BulkKind::None, 0),
            BulkArg::Read(b) => (BulkKind::Read, b.len() as u64),
            BulkArg::Write(b) => (BulkKind::Write, b.len() as u64),
        };
        let header = RequestHeader {
            opcode,
            flags,
            bulk: kind,
            bulk_len,
            reply_max: self.cfg.max_reply as u64,
        };
        let mut msg = Vec::with_capacity(size as usize);
        msg.extend_from_slice(&header.encode());
        msg.extend_from_slice(body);
        let mut call = Call::new(self, xid)?;
        call.post(msg, bulk)?;
        call.run()
    }
}

/// The Portals objects of one call, released on drop (the bulk entry
/// before anything else, since it lends the caller's memory).
struct Call<'c, 'a, 'b> {
    client: &'c Client<'a>,
    xid: u64,
    eq: EqHandle,
    /// The pooled reply buffer while no descriptor holds it.
    reply_buf: Option<Vec<u8>>,
    req_md: Option<MdHandle>,
    reply_me: Option<MeHandle>,
    reply_md: Option<MdHandle>,
    early_me: Option<MeHandle>,
    early_md: Option<MdHandle>,
    bulk_me: Option<MeHandle>,
    /// Whether a send of this request may have reached the service; until
    /// then (every send refused) the service treats a send as the first.
    maybe_reached: bool,
    _bulk: std::marker::PhantomData<&'b mut [u8]>,
}

impl<'c, 'a, 'b> Call<'c, 'a, 'b> {
    fn new(client: &'c Client<'a>, xid: u64) -> Result<Self, RpcError> {
        let slot = client.take_slot()?;
        Ok(Call {
            client,
            xid,
            eq: slot.eq,
            reply_buf: Some(slot.reply),
            req_md: None,
            reply_me: None,
            reply_md: None,
            early_me: None,
            early_md: None,
            bulk_me: None,
            maybe_reached: false,
            _bulk: std::marker::PhantomData,
        })
    }

    fn bits(&self, kind: Kind) -> Result<u64, RpcError> {
        bits::encode(kind, self.xid).ok_or(RpcError::Protocol("xid out of range"))
    }

    /// Post the reply entry and the bulk buffer, bind the request.
    fn post(&mut self, msg: Vec<u8>, bulk: BulkArg<'b>) -> Result<(), RpcError> {
        let c = self.client;
        let ni = c.ni;
        let server = c.server;
        let p = c.cfg.portals;
        let me = ni.me_attach(
            p.reply,
            server,
            self.bits(Kind::Reply)?,
            0,
            Unlink::Unlink,
            Position::After,
        )?;
        self.reply_me = Some(me);
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
            .threshold(Threshold::Count(1))
            .eq(self.eq);
        let buf = match self.reply_buf.take() {
            Some(b) => b,
            None => vec![0; c.cfg.max_reply],
        };
        self.reply_md = Some(ni.md_attach(me, &desc, buf, Unlink::Unlink)?);
        // Early replies: empty puts, as many as the server sends.
        let me = ni.me_attach(
            p.reply,
            server,
            self.bits(Kind::Early)?,
            0,
            Unlink::Retain,
            Position::After,
        )?;
        self.early_me = Some(me);
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE | MdOptions::MANAGE_REMOTE)
            .eq(self.eq);
        self.early_md = Some(ni.md_attach(me, &desc, Vec::new(), Unlink::Retain)?);
        let (ptr, len, op) = match bulk {
            BulkArg::None => (std::ptr::null_mut(), 0, None),
            BulkArg::Read(b) => (b.as_mut_ptr(), b.len(), Some(MdOptions::OP_PUT)),
            // The engine only reads a descriptor that answers gets alone.
            BulkArg::Write(b) => (b.as_ptr().cast_mut(), b.len(), Some(MdOptions::OP_GET)),
        };
        if let Some(op) = op {
            let me = ni.me_attach(
                p.bulk,
                server,
                self.bits(Kind::Bulk)?,
                0,
                Unlink::Retain,
                Position::After,
            )?;
            self.bulk_me = Some(me);
            // The server addresses the buffer by offset; no events: the
            // reply says when the server is done with it.
            let desc = MdDesc::new(op | MdOptions::MANAGE_REMOTE);
            // SAFETY: `ptr..ptr+len` is the caller's buffer, borrowed
            // (mutably for a read; for a write shared, but answering gets
            // only, the engine never writes it) for 'b, which outlives this
            // call; `Drop` unlinks the entry, retrying until no transfer
            // uses the memory, before the borrow ends.
            unsafe { ni.md_attach_raw(me, &desc, ptr, len, Unlink::Retain)? };
        }
        let desc = MdDesc::new(MdOptions::empty()).eq(self.eq);
        self.req_md = Some(ni.md_bind(&desc, msg, Unlink::Retain)?);
        Ok(())
    }

    fn send(&self) -> Result<(), RpcError> {
        let c = self.client;
        let md = self.req_md.ok_or(RpcError::Protocol("request not bound"))?;
        let remote = Remote::new(c.server, c.cfg.portals.request, self.bits(Kind::Request)?);
        let hdr = if self.maybe_reached {
            HDR_MAYBE_RESENT
        } else {
            0
        };
        c.ni.put(md, AckReq::Ack, &remote, hdr)?;
        Ok(())
    }

    fn server_failed(&self) -> bool {
        let ni = self.client.ni;
        ni.failed_peer_count() > 0 && ni.failed_peers().contains(&self.client.server)
    }

    /// Send, then wait for the reply, resending and backing off.
    fn run(&mut self) -> Result<Vec<u8>, RpcError> {
        let c = self.client;
        let policy = c.cfg.retry;
        let server = c.server;
        let mut sends = 1u32;
        let mut refusals = 0u32;
        self.send()?;
        let mut deadline = Instant::now() + policy.timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                if self.server_failed() {
                    return Err(RpcError::PeerFailed(server));
                }
                if sends > policy.resends {
                    return Err(RpcError::Timeout {
                        server,
                        attempts: sends,
                    });
                }
                tracing::debug!(xid = self.xid, sends, "no reply: resending");
                // The last send's acknowledgment may still be on its way.
                self.maybe_reached = true;
                sends += 1;
                self.send()?;
                deadline = Instant::now() + policy.timeout;
                continue;
            }
            let ev = match c.ni.eq_wait(self.eq, Some((deadline - now).min(SLICE))) {
                Ok(ev) => ev,
                Err(PtlError::Timeout) => {
                    if self.server_failed() {
                        return Err(RpcError::PeerFailed(server));
                    }
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if Some(ev.md_handle) == self.early_md {
                if ev.kind == EventKind::Put && ev.fail == FailType::Ok {
                    // The server is executing the request: it is alive and
                    // has it, so the resends start over.
                    tracing::debug!(xid = self.xid, "early reply");
                    sends = 1;
                }
                continue;
            }
            if Some(ev.md_handle) == self.reply_md {
                if let Some(r) = self.on_reply(&ev)? {
                    return r;
                }
                continue;
            }
            if Some(ev.md_handle) != self.req_md {
                // An event of an earlier call that used this queue.
                continue;
            }
            match (ev.kind, ev.fail) {
                (EventKind::Ack, FailType::Dropped) => {
                    // The service's request buffers are full (or it is not
                    // serving yet): nothing was queued; back off and resend.
                    refusals += 1;
                    if refusals > policy.refusals {
                        return Err(RpcError::Busy { server, refusals });
                    }
                    let unit: f64 = rand::thread_rng().gen();
                    std::thread::sleep(policy.jittered(refusals - 1, unit));
                    self.send()?;
                    deadline = Instant::now() + policy.timeout;
                }
                (EventKind::Ack, FailType::Ok) => {
                    refusals = 0;
                    self.maybe_reached = true;
                }
                (
                    EventKind::Ack | EventKind::Sent,
                    FailType::Unreachable | FailType::Incomplete,
                ) => {
                    return Err(RpcError::PeerFailed(server));
                }
                _ => {}
            }
        }
    }

    /// An event of the reply descriptor: the reply, a failure, or nothing
    /// yet.
    fn on_reply(&mut self, ev: &Event) -> Result<Option<Result<Vec<u8>, RpcError>>, RpcError> {
        let c = self.client;
        if ev.kind != EventKind::Put {
            return Ok(None);
        }
        if ev.fail != FailType::Ok {
            return Err(RpcError::PeerFailed(c.server));
        }
        let md = self
            .reply_md
            .take()
            .ok_or(RpcError::Protocol("no reply descriptor"))?;
        self.reply_me = None;
        let buf = c.ni.md_unlink(md)?.unwrap_or_default();
        // Copy the reply out (it is small next to the buffer) and keep the
        // buffer for the next call.
        let data = buf
            .get(..ev.mlength as usize)
            .ok_or(RpcError::Protocol("reply longer than its buffer"))?
            .to_vec();
        self.reply_buf = Some(buf);
        if ev.mlength < ev.rlength {
            return Ok(Some(Err(RpcError::ReplyTooLarge(c.cfg.max_reply as u64))));
        }
        Ok(Some(match Status::from_u64(ev.hdr_data) {
            Some(Status::Ok) => Ok(data),
            Some(Status::HandlerFailed) => Err(RpcError::Remote(
                String::from_utf8_lossy(&data).into_owned(),
            )),
            Some(Status::ReplyTooLarge) => Err(RpcError::ReplyTooLarge(c.cfg.max_reply as u64)),
            Some(Status::BadRequest) => Err(RpcError::BadRequest),
            Some(Status::ReplyLost) => Err(RpcError::ReplyLost),
            None => Err(RpcError::Protocol("unknown reply status")),
        }))
    }
}

impl Drop for Client<'_> {
    fn drop(&mut self) {
        let free = std::mem::take(self.free.get_mut().unwrap_or_else(|p| p.into_inner()));
        for slot in free {
            let _ = self.ni.eq_free(slot.eq);
        }
    }
}

/// Retry an unlink while a transfer still uses the memory; any other
/// outcome ends it (the object is gone).
fn unlink_retrying<T>(mut f: impl FnMut() -> Result<T, PtlError>) {
    loop {
        match f() {
            Err(PtlError::MdInUse) => std::thread::sleep(Duration::from_millis(1)),
            _ => return,
        }
    }
}

impl Drop for Call<'_, '_, '_> {
    fn drop(&mut self) {
        let ni = self.client.ni;
        // First the caller's memory: it may not be returned while lent. A
        // transfer in progress ends, one way or the other, when the
        // transport delivers it or gives up on the server.
        if let Some(me) = self.bulk_me.take() {
            unlink_retrying(|| ni.me_unlink(me));
        }
        if let Some(me) = self.reply_me.take() {
            unlink_retrying(|| ni.me_unlink(me));
        }
        if let Some(me) = self.early_me.take() {
            unlink_retrying(|| ni.me_unlink(me));
        }
        self.early_md = None;
        if let Some(md) = self.reply_md.take() {
            // Unlinked itself on a reply we did not take: reclaim it.
            if let Ok(Some(b)) = ni.md_unlink(md) {
                self.reply_buf = Some(b);
            }
        }
        if let Some(md) = self.req_md.take() {
            unlink_retrying(|| ni.md_unlink(md));
        }
        let reply = self.reply_buf.take().unwrap_or_default();
        self.client.put_slot(CallSlot { eq: self.eq, reply });
    }
}
