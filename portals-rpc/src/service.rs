//! The service: a ring of high-water-mark request buffers on the request
//! portal (seed 001 §5), service threads that take requests in arrival
//! order, run the handler and reply, and the reply cache.
//!
//! Requests are copied out of their buffer when a thread takes them, under
//! the service's lock and in event order; so when a buffer's `Unlink`
//! event is taken every request in it has been, and the buffer is posted
//! again at once. Requests not taken yet stay in their buffers: when every
//! buffer is full, the engine refuses further requests (a negative
//! acknowledgment), clients back off, and the service's memory stays the
//! ring, one request per thread and the reply cache.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use portals::{
    EqHandle, Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, MeHandle, NetworkInterface,
    Position, ProcessId, PtlError, Remote, Unlink,
};

use crate::bits::{self, Kind};
use crate::bulk::Bulk;
use crate::cache::{Arrival, Lookup, ReplyCache};
use crate::config::ServiceConfig;
use crate::error::{HandlerError, ServiceError};
use crate::idle::Idle;
use crate::transfer::Link;
use crate::wire::{
    BulkKind, RequestHeader, ServiceInfo, Status, FLAG_CONNECT, HDR_MAYBE_RESENT, REQUEST_HEADER,
};

/// One request, as a handler sees it.
#[derive(Debug)]
pub struct Request<'r> {
    client: ProcessId,
    xid: u64,
    opcode: u32,
    body: &'r [u8],
    bulk: Option<Bulk<'r>>,
}

impl<'r> Request<'r> {
    /// The client that sent it.
    pub fn client(&self) -> ProcessId {
        self.client
    }

    /// Its transfer id.
    pub fn xid(&self) -> u64 {
        self.xid
    }

    /// The operation.
    pub fn opcode(&self) -> u32 {
        self.opcode
    }

    /// The body, whole (borrowed from the request, not from this handle,
    /// so a handler may hold it while it moves bulk data).
    pub fn body(&self) -> &'r [u8] {
        self.body
    }

    /// The client's bulk buffer, if the request has one.
    pub fn bulk(&mut self) -> Option<&mut Bulk<'r>> {
        self.bulk.as_mut()
    }
}

/// What a service runs for each request: plain blocking code, called from
/// several service threads at once. Its `Ok` is the reply's payload; its
/// `Err` reaches the client as [`crate::RpcError::Remote`].
pub trait Handler: Sync {
    /// Handle one request.
    fn handle(&self, req: &mut Request<'_>) -> Result<Vec<u8>, HandlerError>;
}

impl<F> Handler for F
where
    F: Fn(&mut Request<'_>) -> Result<Vec<u8>, HandlerError> + Sync,
{
    fn handle(&self, req: &mut Request<'_>) -> Result<Vec<u8>, HandlerError> {
        self(req)
    }
}

/// Stops a running service (cheap to clone, usable from a handler).
#[derive(Clone, Debug, Default)]
pub struct Stopper(Arc<AtomicBool>);

impl Stopper {
    /// Ask the service to stop: its threads finish the request in hand
    /// and [`Service::serve`] returns.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether it was asked to stop.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Counters of a service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// Requests the handler ran.
    pub executed: u64,
    /// Resends answered from the reply cache.
    pub replayed: u64,
    /// Resends that found their first copy executing: not executed again,
    /// answered with an early reply.
    pub duplicates: u64,
    /// Resends refused because their reply had been evicted.
    pub lost: u64,
    /// Request buffers posted again after draining.
    pub reposted: u64,
    /// Malformed requests refused.
    pub malformed: u64,
    /// Replies that could not be delivered (client gone or failed).
    pub undelivered: u64,
    /// Clients whose state was freed because the transport gave up on
    /// them: a client that departed (finalized) counts here as well as one
    /// that failed, since either way its cached replies can never be
    /// asked for again.
    pub clients_failed: u64,
}

#[derive(Default)]
struct Counters {
    executed: AtomicU64,
    replayed: AtomicU64,
    duplicates: AtomicU64,
    lost: AtomicU64,
    reposted: AtomicU64,
    malformed: AtomicU64,
    undelivered: AtomicU64,
    clients_failed: AtomicU64,
}

struct Slot {
    me: Option<MeHandle>,
    md: Option<MdHandle>,
}

struct State {
    ring: Vec<Slot>,
    cache: ReplyCache,
    failed_seen: usize,
}

/// What a thread took from the queue.
enum Work {
    Execute {
        client: ProcessId,
        xid: u64,
        header: RequestHeader,
        msg: Vec<u8>,
    },
    Reply {
        client: ProcessId,
        xid: u64,
        status: Status,
        data: Vec<u8>,
    },
    /// A resend of an executing request: tell the client it executes.
    Early { client: ProcessId, xid: u64 },
}

/// A service on one network interface (see the module docs). Create it,
/// then [`Service::serve`] runs its threads until stopped; dropping it
/// unlinks the request buffers.
pub struct Service<'a> {
    ni: &'a NetworkInterface,
    cfg: ServiceConfig,
    eq: EqHandle,
    st: Mutex<State>,
    idle: Idle,
    stop: Stopper,
    n: Counters,
}

impl std::fmt::Debug for Service<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").field("cfg", &self.cfg).finish()
    }
}

/// Longest sleep of an idle service thread between looks at failed peers
/// and the stop flag.
const IDLE: Duration = Duration::from_millis(50);

impl<'a> Service<'a> {
    /// Post the request buffers; requests are accepted (and queue in the
    /// buffers) from now on.
    pub fn new(ni: &'a NetworkInterface, cfg: ServiceConfig) -> Result<Self, ServiceError> {
        if cfg.threads == 0 {
            return Err(ServiceError::Config("at least one service thread"));
        }
        if cfg.buffers < 2 {
            return Err(ServiceError::Config("at least two request buffers"));
        }
        if cfg.max_request < REQUEST_HEADER {
            return Err(ServiceError::Config("max_request below the request header"));
        }
        if cfg.buffer_size < cfg.max_request {
            return Err(ServiceError::Config("buffer_size below max_request"));
        }
        if cfg.bulk_chunk == 0 {
            return Err(ServiceError::Config("bulk_chunk of zero"));
        }
        // Every request of a full ring, and each buffer's unlink, must fit
        // in the queue: nothing is refused for want of an event slot.
        let per_buffer = (cfg.buffer_size - cfg.max_request) / REQUEST_HEADER + 2;
        let eq = ni.eq_alloc(cfg.buffers * per_buffer + 16)?;
        let cache = ReplyCache::new(cfg.reply_cache_per_client, cfg.reply_cache_clients);
        let svc = Service {
            ni,
            eq,
            st: Mutex::new(State {
                ring: (0..cfg.buffers)
                    .map(|_| Slot { me: None, md: None })
                    .collect(),
                cache,
                failed_seen: 0,
            }),
            cfg,
            idle: Idle::default(),
            stop: Stopper::default(),
            n: Counters::default(),
        };
        {
            let mut st = svc.state();
            for i in 0..svc.cfg.buffers {
                svc.post(&mut st, i, vec![0; svc.cfg.buffer_size])?;
            }
        }
        Ok(svc)
    }

    /// The handle that stops [`Service::serve`].
    pub fn stopper(&self) -> Stopper {
        self.stop.clone()
    }

    /// What clients learn at connect time.
    pub fn info(&self) -> ServiceInfo {
        ServiceInfo {
            max_request: self.cfg.max_request as u64,
            bulk_chunk: self.cfg.bulk_chunk as u64,
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> ServiceStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServiceStats {
            executed: g(&self.n.executed),
            replayed: g(&self.n.replayed),
            duplicates: g(&self.n.duplicates),
            lost: g(&self.n.lost),
            reposted: g(&self.n.reposted),
            malformed: g(&self.n.malformed),
            undelivered: g(&self.n.undelivered),
            clients_failed: g(&self.n.clients_failed),
        }
    }

    /// Replies kept in the reply cache for `client`.
    pub fn cached_replies(&self, client: ProcessId) -> usize {
        self.state().cache.kept(client)
    }

    /// Run the service threads with `handler` until the stopper is used.
    pub fn serve<H: Handler>(&self, handler: &H) -> Result<ServiceStats, ServiceError> {
        let results: Vec<Result<(), ServiceError>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..self.cfg.threads)
                .map(|_| s.spawn(|| self.worker(handler)))
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or(Err(ServiceError::Config("a service thread panicked")))
                })
                .collect()
        });
        for r in results {
            r?;
        }
        Ok(self.stats())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Link ring slot `i` with `buf` at the end of the request portal.
    fn post(&self, st: &mut State, i: usize, buf: Vec<u8>) -> Result<(), ServiceError> {
        let (mb, ignore) = bits::any_xid(Kind::Request);
        let me = self.ni.me_attach(
            self.cfg.portals.request,
            ProcessId::ANY,
            mb,
            ignore,
            Unlink::Unlink,
            Position::After,
        )?;
        let desc = MdDesc::new(MdOptions::OP_PUT)
            .max_size(self.cfg.max_request as u64)
            .eq(self.eq)
            .user_ptr(i as u64);
        let md = match self.ni.md_attach(me, &desc, buf, Unlink::Unlink) {
            Ok(md) => md,
            Err(e) => {
                let _ = self.ni.me_unlink(me);
                return Err(e.into());
            }
        };
        if let Some(s) = st.ring.get_mut(i) {
            *s = Slot {
                me: Some(me),
                md: Some(md),
            };
        }
        Ok(())
    }

    fn worker<H: Handler>(&self, handler: &H) -> Result<(), ServiceError> {
        let out = self.ni.eq_alloc(64)?;
        let r = self.work(handler, out);
        let _ = self.ni.eq_free(out);
        r
    }

    fn work<H: Handler>(&self, handler: &H, out: EqHandle) -> Result<(), ServiceError> {
        // This thread's bulk chunk buffers, kept across requests.
        let mut pool = Vec::new();
        // This thread just finished a request (see `Idle::wait`).
        let mut hot = false;
        while !self.stop.is_stopped() {
            let work = {
                let mut st = self.state();
                self.forget_failed(&mut st);
                self.take(&mut st)?
            };
            if work.is_some() {
                self.idle.took_work();
                hot = true;
            }
            match work {
                None => self.idle.wait(std::mem::take(&mut hot), IDLE, || {
                    match self.ni.eq_block(&[self.eq], Some(IDLE)) {
                        Ok(_) | Err(PtlError::Timeout) => Ok(()),
                        Err(e) => Err(ServiceError::from(e)),
                    }
                })?,
                Some(Work::Reply {
                    client,
                    xid,
                    status,
                    data,
                }) => self.reply(out, client, xid, status, data),
                Some(Work::Early { client, xid }) => self.early_reply(out, client, xid),
                Some(Work::Execute {
                    client,
                    xid,
                    header,
                    msg,
                }) => {
                    let (status, data) =
                        self.execute(handler, out, &mut pool, client, xid, &header, &msg);
                    self.state()
                        .cache
                        .complete(client, xid, status, data.clone());
                    self.reply(out, client, xid, status, data);
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // the thread's own resources, then the request
    fn execute<H: Handler>(
        &self,
        handler: &H,
        out: EqHandle,
        pool: &mut Vec<Vec<u8>>,
        client: ProcessId,
        xid: u64,
        header: &RequestHeader,
        msg: &[u8],
    ) -> (Status, Vec<u8>) {
        self.n.executed.fetch_add(1, Ordering::Relaxed);
        let link = |eq| Link {
            ni: self.ni,
            eq,
            peer: client,
            timeout: self.cfg.transfer_timeout,
            stop: &self.stop.0,
        };
        let bulk = (header.bulk != BulkKind::None).then(|| Bulk {
            link: link(out),
            portals: self.cfg.portals,
            xid,
            kind: header.bulk,
            len: header.bulk_len,
            chunk: self.cfg.bulk_chunk,
            pool,
        });
        let mut req = Request {
            client,
            xid,
            opcode: header.opcode,
            body: msg.get(REQUEST_HEADER..).unwrap_or_default(),
            bulk,
        };
        match handler.handle(&mut req) {
            Ok(r) if r.len() as u64 > header.reply_max => (Status::ReplyTooLarge, Vec::new()),
            Ok(r) => (Status::Ok, r),
            Err(e) => (Status::HandlerFailed, e.0.into_bytes()),
        }
    }

    /// Send a reply; a client that is gone or failed does not get it (it
    /// resends, or it is dead).
    fn reply(&self, out: EqHandle, client: ProcessId, xid: u64, status: Status, mut data: Vec<u8>) {
        let Some(mb) = bits::encode(Kind::Reply, xid) else {
            return;
        };
        let link = Link {
            ni: self.ni,
            eq: out,
            peer: client,
            timeout: self.cfg.transfer_timeout,
            stop: &self.stop.0,
        };
        let remote = Remote::new(client, self.cfg.portals.reply, mb);
        if let Err(e) = link.put(&mut data, &remote, status as u64, false) {
            tracing::debug!(%client, xid, error = %e, "reply not delivered");
            self.n.undelivered.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An early reply: an empty put to the client's early entry for `xid`.
    fn early_reply(&self, out: EqHandle, client: ProcessId, xid: u64) {
        let Some(mb) = bits::encode(Kind::Early, xid) else {
            return;
        };
        let link = Link {
            ni: self.ni,
            eq: out,
            peer: client,
            timeout: self.cfg.transfer_timeout,
            stop: &self.stop.0,
        };
        let remote = Remote::new(client, self.cfg.portals.reply, mb);
        if let Err(e) = link.put(&mut Vec::new(), &remote, 0, false) {
            tracing::debug!(%client, xid, error = %e, "early reply not delivered");
        }
    }

    /// Free the reply cache of clients the transport gave up on.
    fn forget_failed(&self, st: &mut State) {
        let n = self.ni.failed_peer_count();
        if n == st.failed_seen {
            return;
        }
        for p in self.ni.failed_peers().into_iter().skip(st.failed_seen) {
            tracing::info!(client = %p, "client failed: its state is freed");
            st.cache.forget(p);
            self.n.clients_failed.fetch_add(1, Ordering::Relaxed);
        }
        st.failed_seen = n;
    }

    /// Take events in order until one gives a thread work.
    fn take(&self, st: &mut State) -> Result<Option<Work>, ServiceError> {
        loop {
            let ev = match self.ni.eq_get(self.eq) {
                Ok(Some(ev)) => ev,
                Ok(None) => return Ok(None),
                Err(PtlError::EqDropped { dropped }) => {
                    // Sized so this cannot happen; if it does, the clients
                    // of the lost requests resend them.
                    tracing::error!(dropped, "request events dropped");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match ev.kind {
                EventKind::Put if ev.fail == FailType::Ok => {
                    if let Some(w) = self.on_request(st, &ev)? {
                        return Ok(Some(w));
                    }
                }
                EventKind::Unlink => self.repost(st, &ev)?,
                // A request whose client died while sending it.
                _ => {}
            }
        }
    }

    /// A buffer drained (every request in it was taken before its unlink
    /// event): post it again.
    fn repost(&self, st: &mut State, ev: &Event) -> Result<(), ServiceError> {
        let i = ev.md.user_ptr as usize;
        if st.ring.get(i).and_then(|s| s.md) != Some(ev.md_handle) {
            return Ok(());
        }
        let buf = self
            .ni
            .md_unlink(ev.md_handle)?
            .unwrap_or_else(|| vec![0; self.cfg.buffer_size]);
        st.ring[i] = Slot { me: None, md: None };
        self.post(st, i, buf)?;
        self.n.reposted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn on_request(&self, st: &mut State, ev: &Event) -> Result<Option<Work>, ServiceError> {
        let client = ev.initiator;
        let Some((Kind::Request, xid)) = bits::decode(ev.match_bits) else {
            self.n.malformed.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        let bad = |n: &AtomicU64| {
            n.fetch_add(1, Ordering::Relaxed);
            Ok(Some(Work::Reply {
                client,
                xid,
                status: Status::BadRequest,
                data: Vec::new(),
            }))
        };
        if ev.mlength > self.cfg.max_request as u64 {
            return bad(&self.n.malformed);
        }
        let mut msg = vec![0; ev.mlength as usize];
        self.ni.md_read(ev.md_handle, ev.offset, &mut msg)?;
        let Ok(header) = RequestHeader::decode(&msg) else {
            return bad(&self.n.malformed);
        };
        if header.flags & FLAG_CONNECT != 0 {
            return Ok(Some(Work::Reply {
                client,
                xid,
                status: Status::Ok,
                data: self.info().encode(),
            }));
        }
        let arrival = if ev.hdr_data & HDR_MAYBE_RESENT != 0 {
            Arrival::MaybeResent
        } else {
            Arrival::First
        };
        Ok(match st.cache.begin(client, xid, arrival) {
            Lookup::Execute => Some(Work::Execute {
                client,
                xid,
                header,
                msg,
            }),
            Lookup::Executing => {
                self.n.duplicates.fetch_add(1, Ordering::Relaxed);
                Some(Work::Early { client, xid })
            }
            Lookup::Replay(status, data) => {
                self.n.replayed.fetch_add(1, Ordering::Relaxed);
                Some(Work::Reply {
                    client,
                    xid,
                    status,
                    data,
                })
            }
            Lookup::Lost => {
                self.n.lost.fetch_add(1, Ordering::Relaxed);
                Some(Work::Reply {
                    client,
                    xid,
                    status: Status::ReplyLost,
                    data: Vec::new(),
                })
            }
        })
    }
}

impl Drop for Service<'_> {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        for s in &mut st.ring {
            if let Some(me) = s.me.take() {
                if self.ni.me_unlink(me).is_err() {
                    if let Some(md) = s.md.take() {
                        let _ = self.ni.md_unlink(md);
                    }
                }
            }
        }
        let _ = self.ni.eq_free(self.eq);
    }
}
