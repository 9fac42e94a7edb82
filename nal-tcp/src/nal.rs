//! The TCP NAL proper: endpoint, peers, connections, the receive state
//! machine, the send queues and the progress loop.
//!
//! Lock order (never taken the other way round): a connection's `rx` →
//! a peer's `tx` → the engine (inside `NiCore::with_engine`). The connection
//! table and the peer table are leaf locks held only for lookups.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use portals::wire::{Header, HEADER_LEN};
use portals::{
    FailType, Nal, NiCore, Outbound, Payload, ProcessId, PtlError, RecvAction, RecvToken, Region,
    SendToken,
};
use slab::Slab;
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::handshake::{self, Handshake, Kind};
use crate::{ConnectMode, Keepalive, ProgressMode, TcpConfig};
use nal_sys::gate::ProgressGate;
use nal_sys::{Poller, Ready};

const LISTENER: u64 = 0;
/// Size of each connection's receive buffer.
const RX_BUF: usize = 64 << 10;
/// How many messages one `sendmsg` may gather.
const MAX_IOV: usize = 64;
/// Longest sleep of the progress thread in the kernel; it bounds how late
/// housekeeping (timeouts, reconnects) may run.
const PT_SLEEP: Duration = Duration::from_millis(50);
/// How often connection deadlines and reconnects are checked.
const HOUSEKEEPING: Duration = Duration::from_millis(10);
/// Delay before connecting again after the peer refused our connection as a
/// duplicate and its own has not arrived.
const DUPLICATE_RETRY: Duration = Duration::from_millis(200);
/// Housekeeping that comes this long after the previous run assumes nobody
/// was reading the sockets meanwhile (polling mode without library calls,
/// or this process was stopped): a peer's silence over that time proves
/// nothing, so its liveness clock restarts.
const DEAF_GAP: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counters of a TCP NAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Connections accepted from peers (handshake completed).
    pub connections_accepted: u64,
    /// Connections this process initiated (handshake completed).
    pub connections_initiated: u64,
    /// Connections closed during the handshake: wrong job key, wrong
    /// destination, malformed or unexpected handshake message.
    pub handshakes_rejected: u64,
    /// Connections refused as duplicates of a simultaneous connect.
    pub duplicates_resolved: u64,
    /// Established connections that failed or were closed by the peer.
    pub connections_lost: u64,
    /// Connection attempts that failed (refused, timed out).
    pub connects_failed: u64,
    /// Connections closed because a frame header did not decode.
    pub malformed_frames: u64,
    /// Liveness probes sent to silent peers (see
    /// [`TcpConfig::peer_timeout`](crate::TcpConfig::peer_timeout)).
    pub probes_sent: u64,
    /// Connections closed because the peer stayed silent past
    /// [`TcpConfig::peer_timeout`](crate::TcpConfig::peer_timeout).
    pub peers_timed_out: u64,
    /// Times a connection's writer stopped at
    /// [`TcpConfig::write_budget`](crate::TcpConfig::write_budget) with data
    /// left, to let other connections go first.
    pub writes_deferred: u64,
    /// Messages written whole by the thread that sent them (optimistic).
    pub optimistic_sends: u64,
    /// Non-blocking progress passes that found bytes by reading the
    /// connection that last delivered some, without asking the poller first
    /// (the latency path of a waiting thread in a round trip).
    pub hot_reads: u64,
    /// Bytes written to sockets.
    pub bytes_sent: u64,
    /// Bytes read from sockets.
    pub bytes_received: u64,
}

#[derive(Default)]
struct Stats {
    connections_accepted: AtomicU64,
    connections_initiated: AtomicU64,
    handshakes_rejected: AtomicU64,
    duplicates_resolved: AtomicU64,
    connections_lost: AtomicU64,
    connects_failed: AtomicU64,
    malformed_frames: AtomicU64,
    probes_sent: AtomicU64,
    peers_timed_out: AtomicU64,
    writes_deferred: AtomicU64,
    optimistic_sends: AtomicU64,
    hot_reads: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

// ----- endpoint ------------------------------------------------------------

/// A bound, listening TCP endpoint that is not serving an interface yet.
/// Bind first, publish [`TcpEndpoint::local_addr`] to the other processes,
/// then [`TcpEndpoint::start`].
#[derive(Debug)]
pub struct TcpEndpoint {
    listener: Socket,
    local: SocketAddr,
    cfg: TcpConfig,
}

impl TcpEndpoint {
    /// Open the listening socket.
    pub fn bind(cfg: TcpConfig) -> io::Result<TcpEndpoint> {
        let listener = Socket::new(
            Domain::for_address(cfg.bind),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        listener.set_reuse_address(true)?;
        listener.bind(&cfg.bind.into())?;
        listener.listen(1024)?;
        listener.set_nonblocking(true)?;
        let local = listener
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("listener has no IP address"))?;
        Ok(TcpEndpoint {
            listener,
            local,
            cfg,
        })
    }

    /// The address peers connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Start serving `core` (use inside [`portals::NetworkInterface::init`]).
    /// `peers` maps the other processes of the job to their addresses; more
    /// can be added later with [`TcpNal::add_peer`].
    pub fn start(
        self,
        core: Arc<NiCore>,
        peers: impl IntoIterator<Item = (ProcessId, SocketAddr)>,
    ) -> Result<Arc<TcpNal>, PtlError> {
        TcpNal::start(self, core, peers).map_err(|e| PtlError::Nal(e.to_string()))
    }
}

// ----- connections -----------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    /// Non-blocking connect in progress (initiator).
    Connecting,
    /// Connected, handshake not finished.
    Handshaking,
    /// Carrying Portals traffic.
    Established,
    /// Closed; waiting for the receive side to be cleaned up.
    Closed,
}

struct Conn {
    token: u64,
    sock: Socket,
    /// This process initiated the connection.
    initiated: bool,
    state: Mutex<ConnState>,
    /// The peer, known from the start for initiators and after the Hello for
    /// acceptors.
    peer: Mutex<Option<ProcessId>>,
    deadline: Mutex<Option<Instant>>,
    rx: Mutex<Rx>,
    /// Set by a thread that found `rx` busy, so the holder reads again.
    rx_again: AtomicBool,
    /// The receive side has been torn down (tokens aborted, deregistered).
    reaped: AtomicBool,
    /// When bytes last arrived (nanoseconds since `Inner::epoch`).
    heard: AtomicU64,
    /// When a liveness probe was last sent (same clock; 0: never).
    probed: AtomicU64,
    /// The peer said in the handshake that it answers probes promptly.
    answers_probes: AtomicBool,
    /// The token is on `Inner::flush_later`.
    flush_deferred: AtomicBool,
}

impl Conn {
    fn state(&self) -> ConnState {
        *lock(&self.state)
    }

    fn peer(&self) -> Option<ProcessId> {
        *lock(&self.peer)
    }
}

/// Where the receive side of a connection is in the byte stream.
enum Phase {
    /// Reading a handshake message.
    Handshake,
    /// Reading a Portals header.
    Header,
    /// Reading a payload: first into `region` (from `filled`), then
    /// discarding `discard` bytes, then completing `token` or sending
    /// `respond`.
    Payload {
        region: Region,
        filled: usize,
        discard: u64,
        token: Option<RecvToken>,
        respond: Option<Outbound>,
    },
}

struct Rx {
    phase: Phase,
    /// The peer proven by the handshake; every header must come from it.
    peer: Option<ProcessId>,
    buf: RxBuf,
}

/// Bytes read from the socket but not consumed yet.
struct RxBuf {
    data: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Rx {
    fn new() -> Rx {
        Rx {
            phase: Phase::Handshake,
            peer: None,
            buf: RxBuf {
                data: vec![0u8; RX_BUF].into_boxed_slice(),
                start: 0,
                end: 0,
            },
        }
    }
}

impl RxBuf {
    fn len(&self) -> usize {
        self.end - self.start
    }

    fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Move the unconsumed bytes to the front and return the free tail.
    fn space(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.data[self.end..]
    }
}

// ----- peers -------------------------------------------------------------------

struct OutMsg {
    /// The frame's head: a Portals header, or a control message in the
    /// first `handshake::LEN` bytes.
    hdr: [u8; HEADER_LEN],
    /// How much of `hdr` is sent.
    head_len: usize,
    payload: Payload,
    token: Option<SendToken>,
    /// Bytes of head + payload already written. A message with `written >
    /// 0` is bound to the connection it started on: its rest must never go
    /// out on another one (the peer would read payload bytes as a header).
    written: usize,
}

impl OutMsg {
    fn portals(msg: Outbound) -> OutMsg {
        OutMsg {
            hdr: msg.header.encode(),
            head_len: HEADER_LEN,
            payload: msg.payload,
            token: msg.token,
            written: 0,
        }
    }

    fn control(h: &Handshake) -> OutMsg {
        let mut hdr = [0u8; HEADER_LEN];
        hdr[..handshake::LEN].copy_from_slice(&h.encode());
        OutMsg {
            hdr,
            head_len: handshake::LEN,
            payload: Payload::None,
            token: None,
            written: 0,
        }
    }

    fn total(&self) -> usize {
        self.head_len + self.payload.len()
    }

    /// The unwritten part as up to two slices.
    fn remaining(&self) -> (&[u8], &[u8]) {
        let body: &[u8] = match &self.payload {
            Payload::None => &[],
            // SAFETY: the message's send token is still open (it completes
            // only after the last byte is written), so the engine keeps the
            // region alive and unwritten while we read it.
            Payload::Region(r) => unsafe { r.as_slice() },
            Payload::Owned(v) => v,
        };
        if self.written < self.head_len {
            (&self.hdr[self.written..self.head_len], body)
        } else {
            (&[], &body[self.written - self.head_len..])
        }
    }
}

struct Tx {
    /// The connection carrying traffic to this peer.
    conn: Option<Arc<Conn>>,
    /// A connection this process is setting up to this peer.
    pending: Option<Arc<Conn>>,
    queue: VecDeque<OutMsg>,
    /// Connect again at this time if still unconnected with data queued.
    retry_at: Option<Instant>,
}

struct Peer {
    id: ProcessId,
    addr: Mutex<Option<SocketAddr>>,
    tx: Mutex<Tx>,
}

// ----- the NAL -------------------------------------------------------------------

struct Inner {
    core: Arc<NiCore>,
    cfg: TcpConfig,
    me: ProcessId,
    job_key: u64,
    listener: Socket,
    /// Polled by application threads waiting in the library.
    app: Arc<Poller>,
    /// Polled by the progress thread (thread mode only).
    pt: Option<Poller>,
    peers: RwLock<HashMap<ProcessId, Arc<Peer>>>,
    conns: Mutex<Slab<Arc<Conn>>>,
    next_gen: AtomicU64,
    /// Connections that need a look without a new readiness edge (read
    /// budget exhausted, closed by the send side).
    dirty: Mutex<Vec<u64>>,
    /// Connections whose writer stopped at the write budget with data
    /// queued: the socket is still writable, so no edge will come.
    flush_later: Mutex<Vec<u64>>,
    /// Progress thread vs. waiting application threads; stop flag.
    gate: ProgressGate,
    epoch: Instant,
    next_housekeeping: AtomicU64,
    /// The connection that last delivered bytes (0: none yet). A waiting
    /// thread reads it directly before asking the poller: in a round trip
    /// the answer comes back on the connection the request went out on,
    /// and one `recv` that finds it beats an `epoll_wait` followed by one.
    hot: AtomicU64,
    stats: Stats,
}

/// A running TCP NAL. Created by [`TcpEndpoint::start`]; owned by the
/// network interface (as its `Arc<dyn Nal>`), and optionally also by the
/// caller for [`TcpNal::stats`] and [`TcpNal::add_peer`].
pub struct TcpNal {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for TcpNal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpNal")
            .field("me", &self.inner.me)
            .field("progress", &self.inner.cfg.progress)
            .field("backend", &self.inner.cfg.backend)
            .finish()
    }
}

thread_local! {
    static EVENTS: RefCell<Vec<Ready>> = const { RefCell::new(Vec::new()) };
    static SPIN: Cell<Spin> = const { Cell::new(Spin { owner: 0, last_look_ns: 0, skipped: 0 }) };
}

/// A thread spinning in non-blocking passes reads the hot connection on
/// every pass but asks the poller about the other sockets (one more system
/// call) only on every this-many-th.
const SPINS_PER_POLL: u32 = 4;
/// Passes closer together than this (since the last look) are a spin; a
/// pass after a longer gap, such as one call between two pieces of
/// compute, always looks.
const SPIN_GAP_NS: u64 = 10_000;

/// A thread's recent non-blocking passes.
///
/// Kept per thread but meant per interface: a thread that drives several
/// interfaces in turn (the conformance jobs run three in one thread; a
/// process may open more than one) must not count one interface's passes
/// against another's, whose clock also starts at another instant.
#[derive(Clone, Copy, Debug)]
struct Spin {
    /// The interface the passes were of (its `Inner`'s address; 0: none).
    owner: usize,
    /// When it last asked the poller (the interface's clock, ns).
    last_look_ns: u64,
    /// Passes since then that did not.
    skipped: u32,
}

/// Whether a non-blocking pass of interface `owner` at `now_ns` (its clock)
/// asks the poller about the other sockets. A pass of another interface
/// than the thread's last one always looks.
fn look_this_pass(spin: &Cell<Spin>, owner: usize, now_ns: u64) -> bool {
    let s = spin.get();
    let spinning = s.owner == owner && now_ns.saturating_sub(s.last_look_ns) < SPIN_GAP_NS;
    if spinning && s.skipped + 1 < SPINS_PER_POLL {
        spin.set(Spin {
            skipped: s.skipped + 1,
            ..s
        });
        return false;
    }
    spin.set(Spin {
        owner,
        last_look_ns: now_ns,
        skipped: 0,
    });
    true
}

impl TcpNal {
    fn start(
        ep: TcpEndpoint,
        core: Arc<NiCore>,
        peers: impl IntoIterator<Item = (ProcessId, SocketAddr)>,
    ) -> io::Result<Arc<TcpNal>> {
        let cfg = ep.cfg.clone();
        let gate = ProgressGate::new(cfg.handback);
        // Application threads always wait in epoll (see `Backend`).
        let app = Arc::new(Poller::new(nal_sys::Backend::Epoll)?);
        let pt = match cfg.progress {
            ProgressMode::Thread => Some(Poller::new(cfg.backend)?),
            ProgressMode::Poll => None,
        };
        app.register(ep.listener.as_raw_fd(), LISTENER, false)?;
        if let Some(pt) = &pt {
            pt.register(ep.listener.as_raw_fd(), LISTENER, false)?;
        }
        let waker = app.clone();
        core.set_waker(Box::new(move || waker.wake()));
        let inner = Arc::new(Inner {
            me: core.id(),
            job_key: core.job_key(),
            core,
            cfg,
            listener: ep.listener,
            app,
            pt,
            peers: RwLock::new(HashMap::new()),
            conns: Mutex::new(Slab::new()),
            next_gen: AtomicU64::new(1),
            dirty: Mutex::new(Vec::new()),
            flush_later: Mutex::new(Vec::new()),
            gate,
            epoch: Instant::now(),
            next_housekeeping: AtomicU64::new(0),
            hot: AtomicU64::new(0),
            stats: Stats::default(),
        });
        for (id, addr) in peers {
            inner.add_peer(id, Some(addr));
        }
        let thread = if inner.pt.is_some() {
            let i = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name(format!("ptl-tcp-{}", inner.me))
                    .spawn(move || i.progress_thread())?,
            )
        } else {
            None
        };
        if inner.cfg.connect == ConnectMode::Eager {
            for p in inner.all_peers().into_iter().filter(|p| p.id > inner.me) {
                let mut tx = lock(&p.tx);
                if tx.conn.is_none() && tx.pending.is_none() {
                    inner.start_connect(&p, &mut tx);
                }
            }
        }
        Ok(Arc::new(TcpNal {
            inner,
            thread: Mutex::new(thread),
        }))
    }

    /// Tell the NAL where a process listens.
    pub fn add_peer(&self, id: ProcessId, addr: SocketAddr) {
        self.inner.add_peer(id, Some(addr));
    }

    /// The counters.
    pub fn stats(&self) -> TcpStats {
        let s = &self.inner.stats;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TcpStats {
            connections_accepted: g(&s.connections_accepted),
            connections_initiated: g(&s.connections_initiated),
            handshakes_rejected: g(&s.handshakes_rejected),
            duplicates_resolved: g(&s.duplicates_resolved),
            connections_lost: g(&s.connections_lost),
            connects_failed: g(&s.connects_failed),
            malformed_frames: g(&s.malformed_frames),
            probes_sent: g(&s.probes_sent),
            peers_timed_out: g(&s.peers_timed_out),
            writes_deferred: g(&s.writes_deferred),
            optimistic_sends: g(&s.optimistic_sends),
            hot_reads: g(&s.hot_reads),
            bytes_sent: g(&s.bytes_sent),
            bytes_received: g(&s.bytes_received),
        }
    }

    /// The configuration the transport runs with.
    pub fn config(&self) -> &TcpConfig {
        &self.inner.cfg
    }

    /// The number of connections currently established.
    pub fn established(&self) -> usize {
        lock(&self.inner.conns)
            .iter()
            .filter(|(_, c)| c.state() == ConnState::Established)
            .count()
    }
}

impl Nal for TcpNal {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn send(&self, msg: Outbound) {
        self.inner.send(msg);
    }

    fn progress(&self, timeout: Option<Duration>) -> portals::Result<()> {
        if self.inner.gate.is_stopped() {
            return Err(PtlError::Shutdown);
        }
        self.inner
            .progress_once(&self.inner.app, timeout)
            .map_err(|e| PtlError::Nal(e.to_string()))
    }

    fn wake(&self) {
        self.inner.app.wake();
    }

    fn waiter_enter(&self) {
        self.inner.gate.enter();
    }

    fn waiter_leave(&self) {
        self.inner.gate.leave();
    }

    fn progresses_alone(&self) -> bool {
        self.inner.pt.is_some()
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.app.wait_fd()
    }

    fn arm_wait(&self) -> Option<Duration> {
        // Work left for the next pass has no readiness edge to announce it
        // (see `progress_once`). (Wake-ups are the composing transport's:
        // it installs the interface's waker before this one starts.) The
        // housekeeping timers are coarse; the interface's own bound on a
        // nap keeps them running, as it does for `progress`.
        (lock(&self.inner.dirty).is_empty() && lock(&self.inner.flush_later).is_empty())
            .then_some(Duration::MAX)
    }

    fn shutdown(&self) {
        self.inner.gate.stop();
        if let Some(pt) = &self.inner.pt {
            pt.wake();
        }
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        self.inner.close_all();
    }
}

impl Inner {
    fn add_peer(&self, id: ProcessId, addr: Option<SocketAddr>) -> Arc<Peer> {
        let mut peers = self.peers.write().unwrap_or_else(|p| p.into_inner());
        let p = peers
            .entry(id)
            .or_insert_with(|| {
                Arc::new(Peer {
                    id,
                    addr: Mutex::new(None),
                    tx: Mutex::new(Tx {
                        conn: None,
                        pending: None,
                        queue: VecDeque::new(),
                        retry_at: None,
                    }),
                })
            })
            .clone();
        if addr.is_some() {
            *lock(&p.addr) = addr;
        }
        p
    }

    fn peer(&self, id: ProcessId) -> Option<Arc<Peer>> {
        self.peers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// Every known peer (a snapshot; the table lock is not held after).
    fn all_peers(&self) -> Vec<Arc<Peer>> {
        self.peers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn conn(&self, token: u64) -> Option<Arc<Conn>> {
        let slot = (token >> 32) as usize;
        let conns = lock(&self.conns);
        conns.get(slot).filter(|c| c.token == token).cloned()
    }

    fn pollers(&self) -> impl Iterator<Item = &Poller> {
        std::iter::once(&*self.app).chain(self.pt.iter())
    }

    /// Put a socket under management: register it with every poller.
    fn add_conn(
        &self,
        sock: Socket,
        initiated: bool,
        state: ConnState,
        peer: Option<ProcessId>,
    ) -> io::Result<Arc<Conn>> {
        let mut conns = lock(&self.conns);
        let entry = conns.vacant_entry();
        let gen = self.next_gen.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
        let token = ((entry.key() as u64) << 32) | gen.max(1);
        let conn = Arc::new(Conn {
            token,
            sock,
            initiated,
            state: Mutex::new(state),
            peer: Mutex::new(peer),
            deadline: Mutex::new(Some(Instant::now() + self.cfg.connect_timeout)),
            rx: Mutex::new(Rx::new()),
            rx_again: AtomicBool::new(false),
            reaped: AtomicBool::new(false),
            heard: AtomicU64::new(self.now_ns()),
            probed: AtomicU64::new(0),
            answers_probes: AtomicBool::new(false),
            flush_deferred: AtomicBool::new(false),
        });
        entry.insert(conn.clone());
        drop(conns);
        for p in self.pollers() {
            p.register(conn.sock.as_raw_fd(), token, true)?;
        }
        Ok(conn)
    }

    fn tune(&self, s: &Socket) -> io::Result<()> {
        tune(&self.cfg, s)
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The handshake flags this process sends.
    fn flags(&self) -> u8 {
        match self.cfg.progress {
            ProgressMode::Thread => handshake::FLAG_ANSWERS_PROBES,
            ProgressMode::Poll => 0,
        }
    }

    // ----- sending ---------------------------------------------------------

    fn send(&self, msg: Outbound) {
        let dst = msg.header.dst;
        tracing::trace!(%dst, op = ?msg.header.op, len = msg.payload.len(), "send");
        if dst == self.me {
            portals::loopback::deliver_local(&self.core, msg);
            return;
        }
        let Some(peer) = self.peer(dst) else {
            tracing::warn!(peer = %dst, "send to a process with no known address");
            self.fail_msg(msg.token);
            self.core.with_engine(|e| e.peer_failed(dst));
            return;
        };
        let mut tx = lock(&peer.tx);
        tx.queue.push_back(OutMsg::portals(msg));
        tracing::trace!(%dst, queued = tx.queue.len(), conn = tx.conn.is_some(), pending = tx.pending.is_some(), "queued");
        match tx.conn.clone() {
            Some(conn) if tx.queue.len() == 1 => {
                let before = tx.queue.len();
                self.flush(&peer, &mut tx, &conn);
                if tx.queue.len() < before {
                    bump(&self.stats.optimistic_sends, 1);
                }
            }
            Some(_) => {}
            None => {
                if tx.pending.is_none() {
                    self.start_connect(&peer, &mut tx);
                }
            }
        }
    }

    fn fail_msg(&self, token: Option<SendToken>) {
        if let Some(t) = token {
            self.core
                .with_engine(|e| e.send_complete(t, FailType::Unreachable));
        }
    }

    /// Write as much of the peer's queue as the socket takes, up to the
    /// write budget (the rest is left for the next progress pass). Completes
    /// the tokens of messages written whole.
    fn flush(&self, peer: &Peer, tx: &mut Tx, conn: &Arc<Conn>) {
        let mut budget = match self.cfg.write_budget {
            0 => usize::MAX,
            n => n,
        };
        loop {
            if tx.queue.is_empty() {
                return;
            }
            if budget == 0 {
                bump(&self.stats.writes_deferred, 1);
                self.defer_flush(conn);
                return;
            }
            // Offer at most the budget: a socket drained by a fast reader
            // takes a whole multi-megabyte message in one call.
            let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
            let mut n = 0;
            let mut offer = budget;
            'gather: for m in tx.queue.iter() {
                if n + 2 > MAX_IOV {
                    break;
                }
                let (a, b) = m.remaining();
                for part in [a, b] {
                    if offer == 0 {
                        break 'gather;
                    }
                    if !part.is_empty() {
                        let part = &part[..part.len().min(offer)];
                        offer -= part.len();
                        iov[n] = IoSlice::new(part);
                        n += 1;
                    }
                }
            }
            let r = conn
                .sock
                .send_vectored_with_flags(&iov[..n], libc::MSG_NOSIGNAL);
            match r {
                Ok(mut w) => {
                    tracing::trace!(peer = %peer.id, wrote = w, queued = tx.queue.len(), "flush");
                    bump(&self.stats.bytes_sent, w as u64);
                    budget = budget.saturating_sub(w);
                    while w > 0 {
                        let Some(front) = tx.queue.front_mut() else {
                            break;
                        };
                        let left = front.total() - front.written;
                        if w >= left {
                            w -= left;
                            if let Some(done) = tx.queue.pop_front() {
                                if let Some(t) = done.token {
                                    self.core.with_engine(|e| e.send_complete(t, FailType::Ok));
                                }
                            }
                        } else {
                            front.written += w;
                            w = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tracing::trace!(peer = %peer.id, queued = tx.queue.len(), "send would block");
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(peer = %peer.id, error = %e, "send failed");
                    self.lose(conn, peer, tx);
                    return;
                }
            }
        }
    }

    /// Have the next progress pass go on writing `conn`'s queue, and wake
    /// whoever drives progress in case it sleeps.
    fn defer_flush(&self, conn: &Conn) {
        if conn.flush_deferred.swap(true, Ordering::SeqCst) {
            return;
        }
        lock(&self.flush_later).push(conn.token);
        for p in self.pollers() {
            p.wake();
        }
    }

    /// Go on writing a connection left at its write budget.
    fn flush_deferred(&self, conn: &Arc<Conn>) {
        conn.flush_deferred.store(false, Ordering::SeqCst);
        if conn.state() != ConnState::Established {
            return;
        }
        let Some(peer) = conn.peer().and_then(|p| self.peer(p)) else {
            return;
        };
        let mut tx = lock(&peer.tx);
        if tx.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            self.flush(&peer, &mut tx, conn);
        }
    }

    /// Queue a control message (probe, answer) to `peer` on `conn`, after
    /// whatever is queued already.
    fn send_control(&self, peer: &Peer, tx: &mut Tx, conn: &Arc<Conn>, kind: Kind) {
        let h = Handshake {
            kind,
            flags: self.flags(),
            job_key: self.job_key,
            src: self.me,
            dst: peer.id,
        };
        tx.queue.push_back(OutMsg::control(&h));
        if tx.queue.len() == 1 {
            self.flush(peer, tx, conn);
        }
    }

    fn start_connect(&self, peer: &Peer, tx: &mut Tx) {
        let Some(addr) = *lock(&peer.addr) else {
            tracing::warn!(peer = %peer.id, "no address to connect to");
            self.fail_queue(peer.id, tx);
            return;
        };
        let r = (|| -> io::Result<Arc<Conn>> {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            self.tune(&s)?;
            match s.connect(&addr.into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(e),
            }
            self.add_conn(s, true, ConnState::Connecting, Some(peer.id))
        })();
        match r {
            Ok(conn) => {
                tx.pending = Some(conn);
                tx.retry_at = None;
            }
            Err(e) => {
                tracing::warn!(peer = %peer.id, %addr, error = %e, "connect failed");
                bump(&self.stats.connects_failed, 1);
                self.fail_queue(peer.id, tx);
            }
        }
    }

    /// Fail everything queued for `peer`, and every operation waiting for
    /// it to answer.
    fn fail_queue(&self, peer: ProcessId, tx: &mut Tx) {
        let q = std::mem::take(&mut tx.queue);
        for m in q {
            self.fail_msg(m.token);
        }
        self.core.with_engine(|e| e.peer_failed(peer));
    }

    /// An established or pending connection to `peer` broke.
    fn lose(&self, conn: &Arc<Conn>, peer: &Peer, tx: &mut Tx) {
        let was_established = self.close(conn) == ConnState::Established;
        let current = tx.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        let pending = tx.pending.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        if current {
            tx.conn = None;
        }
        if pending {
            tx.pending = None;
        }
        if current || pending {
            if was_established {
                bump(&self.stats.connections_lost, 1);
            } else {
                bump(&self.stats.connects_failed, 1);
            }
            self.fail_queue(peer.id, tx);
        }
    }

    /// Mark a connection closed and shut its socket; the receive side is torn
    /// down by the next thread that looks at it. Returns the state it was in.
    fn close(&self, conn: &Arc<Conn>) -> ConnState {
        let prev = {
            let mut st = lock(&conn.state);
            std::mem::replace(&mut *st, ConnState::Closed)
        };
        if prev != ConnState::Closed {
            let _ = conn.sock.shutdown(std::net::Shutdown::Both);
            lock(&self.dirty).push(conn.token);
        }
        prev
    }

    // ----- progress ---------------------------------------------------------

    fn progress_thread(self: Arc<Self>) {
        let Some(pt) = &self.pt else { return };
        while !self.gate.is_stopped() {
            if self.gate.stand_aside() {
                self.gate.park();
                continue;
            }
            if let Err(e) = self.progress_once(pt, Some(PT_SLEEP)) {
                tracing::error!(error = %e, "progress thread poll failed");
                std::thread::sleep(PT_SLEEP);
            }
        }
    }

    fn progress_once(&self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        // One clock read per pass, for the housekeeping and the spin.
        let now_ns = self.now_ns();
        self.housekeeping(now_ns);
        if timeout.is_none() && self.read_hot() {
            // Something arrived: let the caller look at it before the other
            // sockets get their turn on the next pass.
            return Ok(());
        }
        let dirty = std::mem::take(&mut *lock(&self.dirty));
        for t in dirty {
            if let Some(c) = self.conn(t) {
                self.service_rx(&c);
            }
        }
        let later = std::mem::take(&mut *lock(&self.flush_later));
        for t in later {
            if let Some(c) = self.conn(t) {
                self.flush_deferred(&c);
            }
        }
        // Work left over for the next pass comes with no readiness edge:
        // look at the sockets, but do not sleep.
        let timeout = if lock(&self.dirty).is_empty() && lock(&self.flush_later).is_empty() {
            timeout
        } else {
            None
        };
        // A waiter spinning here has just read the hot connection; the
        // epoll look for the others costs as much again, and skipping it
        // on most spins shortens the spin (edges wait in epoll meanwhile).
        if timeout.is_none()
            && self.hot.load(Ordering::Relaxed) != 0
            && !SPIN.with(|sp| look_this_pass(sp, self as *const Self as usize, now_ns))
        {
            return Ok(());
        }
        EVENTS.with(|ev| -> io::Result<()> {
            let mut events = ev.borrow_mut();
            if !poller.poll(&mut events, timeout)? {
                return Ok(());
            }
            for r in events.iter() {
                self.dispatch(*r);
            }
            Ok(())
        })
    }

    fn dispatch(&self, r: Ready) {
        tracing::trace!(
            token = r.token,
            r = r.readable,
            w = r.writable,
            c = r.closed,
            "ready"
        );
        if r.token == LISTENER {
            self.accept_all();
            return;
        }
        let Some(conn) = self.conn(r.token) else {
            return; // stale: the connection is gone
        };
        if r.writable {
            self.on_writable(&conn);
        }
        if r.readable || r.closed {
            self.service_rx(&conn);
        }
    }

    fn on_writable(&self, conn: &Arc<Conn>) {
        let Some(pid) = conn.peer() else { return };
        let Some(peer) = self.peer(pid) else { return };
        match conn.state() {
            ConnState::Connecting => {
                let mut tx = lock(&peer.tx);
                if conn.state() != ConnState::Connecting {
                    return;
                }
                match conn.sock.take_error() {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => {
                        tracing::debug!(peer = %pid, error = %e, "connect failed");
                        self.lose(conn, &peer, &mut tx);
                        return;
                    }
                }
                let hello = Handshake {
                    kind: Kind::Hello,
                    flags: self.flags(),
                    job_key: self.job_key,
                    src: self.me,
                    dst: pid,
                };
                *lock(&conn.state) = ConnState::Handshaking;
                if !self.write_small(conn, &hello.encode()) {
                    self.lose(conn, &peer, &mut tx);
                }
            }
            ConnState::Established => {
                let mut tx = lock(&peer.tx);
                if let Some(c) = tx.conn.clone() {
                    if Arc::ptr_eq(&c, conn) {
                        self.flush(&peer, &mut tx, &c);
                    }
                }
            }
            _ => {}
        }
    }

    /// Write a handshake message, which always fits an empty socket buffer.
    fn write_small(&self, conn: &Conn, b: &[u8]) -> bool {
        matches!(conn.sock.send_with_flags(b, libc::MSG_NOSIGNAL), Ok(n) if n == b.len())
    }

    fn accept_all(&self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if let Err(e) = self.tune(&s).and_then(|_| {
                        self.add_conn(s, false, ConnState::Handshaking, None)
                            .map(|_| ())
                    }) {
                        tracing::warn!(error = %e, "could not take an incoming connection");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: try again on the next edge.
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    /// Read the connection that last delivered bytes, without asking the
    /// poller; whether that read anything. Its readiness edge, if any,
    /// stays queued in the poller and costs one empty read later.
    fn read_hot(&self) -> bool {
        let token = self.hot.load(Ordering::Relaxed);
        if token == 0 {
            return false;
        }
        let got = match self.conn(token) {
            Some(c) if c.state() == ConnState::Established => self.service_rx(&c),
            _ => false,
        };
        if got {
            bump(&self.stats.hot_reads, 1);
        }
        got
    }

    /// Read and process what `conn` has; whether anything was read (by this
    /// call: `false` if another thread holds the receive side).
    fn service_rx(&self, conn: &Arc<Conn>) -> bool {
        let mut got = false;
        loop {
            conn.rx_again.store(true, Ordering::SeqCst);
            let mut rx = match conn.rx.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return got, // the holder will look again
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            conn.rx_again.store(false, Ordering::SeqCst);
            got |= self.read_conn(conn, &mut rx);
            drop(rx);
            if !conn.rx_again.load(Ordering::SeqCst) {
                return got;
            }
        }
    }

    /// Read and process until the socket is drained, the budget is spent,
    /// or the connection ends; whether any bytes were read.
    fn read_conn(&self, conn: &Arc<Conn>, rx: &mut Rx) -> bool {
        let mut got = false;
        if conn.state() == ConnState::Closed {
            self.reap(conn, rx);
            return got;
        }
        let mut budget = self.cfg.read_budget;
        // A read that returned less than it asked for emptied the socket:
        // what arrives later raises a new readiness edge, so a second read
        // that would only say EAGAIN is skipped (one system call less per
        // message on the latency path).
        let mut drained = false;
        loop {
            if !self.process_buffered(conn, rx) {
                return got;
            }
            if drained {
                return got;
            }
            if budget == 0 {
                lock(&self.dirty).push(conn.token);
                return got;
            }
            // Direct read into the descriptor for large payload remainders.
            let direct = match &mut rx.phase {
                Phase::Payload { region, filled, .. }
                    if rx.buf.len() == 0 && region.len() - *filled >= self.cfg.direct_read_min =>
                {
                    // SAFETY: the region is lent to this connection until its
                    // token completes, and only the holder of `rx` writes it.
                    let dst = unsafe { region.as_mut_slice() };
                    let want = dst.len() - *filled;
                    Some(((&conn.sock).read(&mut dst[*filled..]), filled, want))
                }
                _ => None,
            };
            let (r, want) = match direct {
                Some((r, filled, want)) => {
                    if let Ok(n) = r {
                        *filled += n;
                    }
                    (r, want)
                }
                None => {
                    let space = rx.buf.space();
                    let want = space.len();
                    let r = (&conn.sock).read(space);
                    if let Ok(n) = r {
                        rx.buf.end += n;
                    }
                    (r, want)
                }
            };
            match r {
                Ok(0) => {
                    self.broken(conn, rx, "closed by peer");
                    return got;
                }
                Ok(n) => {
                    tracing::trace!(token = conn.token, read = n, "read");
                    got = true;
                    self.hot.store(conn.token, Ordering::Relaxed);
                    bump(&self.stats.bytes_received, n as u64);
                    conn.heard.store(self.now_ns(), Ordering::Relaxed);
                    budget = budget.saturating_sub(n);
                    drained = n < want;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Drained; anything still buffered was handled above.
                    return got;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken(conn, rx, &e.to_string());
                    return got;
                }
            }
        }
    }

    /// The connection failed while reading.
    fn broken(&self, conn: &Arc<Conn>, rx: &mut Rx, why: &str) {
        tracing::debug!(token = conn.token, peer = ?conn.peer(), why, "connection ended");
        if let Some(pid) = conn.peer() {
            if let Some(peer) = self.peer(pid) {
                let mut tx = lock(&peer.tx);
                self.lose(conn, &peer, &mut tx);
            }
        }
        self.close(conn);
        self.reap(conn, rx);
    }

    /// Tear down the receive side of a closed connection: abort its open
    /// deposit, unregister and forget it.
    fn reap(&self, conn: &Arc<Conn>, rx: &mut Rx) {
        if conn.reaped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Phase::Payload { token: Some(t), .. } =
            std::mem::replace(&mut rx.phase, Phase::Header)
        {
            self.core
                .with_engine(|e| e.recv_abort(t, FailType::Incomplete));
        }
        for p in self.pollers() {
            p.deregister(conn.sock.as_raw_fd(), conn.token);
        }
        let slot = (conn.token >> 32) as usize;
        let mut conns = lock(&self.conns);
        if conns.get(slot).is_some_and(|c| c.token == conn.token) {
            conns.remove(slot);
        }
    }

    /// Consume what is buffered. Returns false if the connection ended.
    fn process_buffered(&self, conn: &Arc<Conn>, rx: &mut Rx) -> bool {
        loop {
            match &mut rx.phase {
                Phase::Handshake => {
                    if rx.buf.len() < handshake::LEN {
                        return true;
                    }
                    let mut b = [0u8; handshake::LEN];
                    b.copy_from_slice(&rx.buf.bytes()[..handshake::LEN]);
                    rx.buf.consume(handshake::LEN);
                    if !self.on_handshake(conn, &b) {
                        self.close(conn);
                        self.reap(conn, rx);
                        return false;
                    }
                    rx.peer = conn.peer();
                    rx.phase = Phase::Header;
                }
                Phase::Header => {
                    let b = rx.buf.bytes();
                    if b.len() >= 4 && b[..4] == handshake::MAGIC {
                        // A control message of the transport itself.
                        if b.len() < handshake::LEN {
                            return true;
                        }
                        let mut m = [0u8; handshake::LEN];
                        m.copy_from_slice(&b[..handshake::LEN]);
                        rx.buf.consume(handshake::LEN);
                        if !self.on_control(conn, rx.peer, &m) {
                            tracing::warn!(peer = ?conn.peer(), "bad control message; closing the connection");
                            bump(&self.stats.malformed_frames, 1);
                            self.core.with_engine(|e| e.note_bad_header());
                            self.broken(conn, rx, "bad control message");
                            return false;
                        }
                        continue;
                    }
                    if b.len() < HEADER_LEN {
                        return true;
                    }
                    let h = match Header::decode(rx.buf.bytes()) {
                        Ok(h) => h,
                        Err(e) => {
                            tracing::warn!(peer = ?conn.peer(), error = %e, "malformed frame; closing the connection");
                            bump(&self.stats.malformed_frames, 1);
                            self.core.with_engine(|e| e.note_bad_header());
                            self.broken(conn, rx, "malformed frame");
                            return false;
                        }
                    };
                    rx.buf.consume(HEADER_LEN);
                    self.on_header(rx, &h);
                }
                Phase::Payload {
                    region,
                    filled,
                    discard,
                    ..
                } => {
                    let want = region.len() - *filled;
                    if want > 0 {
                        let n = want.min(rx.buf.len());
                        if n == 0 {
                            return true;
                        }
                        // SAFETY: lent region, sole writer (we hold `rx`).
                        let dst = unsafe { region.as_mut_slice() };
                        dst[*filled..*filled + n].copy_from_slice(&rx.buf.bytes()[..n]);
                        *filled += n;
                        rx.buf.consume(n);
                        if n < want {
                            return true;
                        }
                    }
                    if *discard > 0 {
                        let n = (*discard).min(rx.buf.len() as u64);
                        *discard -= n;
                        rx.buf.consume(n as usize);
                        if *discard > 0 {
                            return true;
                        }
                    }
                    let Phase::Payload { token, respond, .. } =
                        std::mem::replace(&mut rx.phase, Phase::Header)
                    else {
                        unreachable!("matched above");
                    };
                    let mut out = respond;
                    if let Some(t) = token {
                        out = self.core.with_engine(|e| e.recv_complete(t));
                    }
                    if let Some(m) = out {
                        self.send(m);
                    }
                }
            }
        }
    }

    /// A header arrived: let the engine match it. When the whole payload is
    /// already buffered, match, copy and complete under one engine lock.
    fn on_header(&self, rx: &mut Rx, h: &Header) {
        tracing::trace!(src = %h.src, op = ?h.op, len = h.payload_len(), buffered = rx.buf.len(), "header");
        if rx.peer != Some(h.src) {
            // A header must come from the process that proved itself in the
            // handshake; anything else is counted and skipped.
            self.core.with_engine(|e| e.note_bad_header());
            rx.phase = Phase::Payload {
                region: Region::empty(),
                filled: 0,
                discard: h.payload_len(),
                token: None,
                respond: None,
            };
            return;
        }
        let plen = h.payload_len();
        if plen <= rx.buf.len() as u64 {
            let data = &rx.buf.bytes()[..plen as usize];
            let out = self.core.with_engine(|e| match e.recv_header(h) {
                RecvAction::Deposit { region, token, .. } => {
                    if !region.is_empty() {
                        // SAFETY: lent region, sole writer; `data` is our own
                        // buffer, distinct from descriptor memory.
                        unsafe { region.as_mut_slice() }.copy_from_slice(&data[..region.len()]);
                    }
                    e.recv_complete(token)
                }
                RecvAction::Discard(_) => None,
                RecvAction::Respond { response, .. } => Some(response),
            });
            rx.buf.consume(plen as usize);
            if let Some(m) = out {
                self.send(m);
            }
            return;
        }
        rx.phase = match self.core.with_engine(|e| e.recv_header(h)) {
            RecvAction::Deposit {
                region,
                discard,
                token,
            } => Phase::Payload {
                region,
                filled: 0,
                discard,
                token: Some(token),
                respond: None,
            },
            RecvAction::Discard(n) => Phase::Payload {
                region: Region::empty(),
                filled: 0,
                discard: n,
                token: None,
                respond: None,
            },
            RecvAction::Respond { discard, response } => Phase::Payload {
                region: Region::empty(),
                filled: 0,
                discard,
                token: None,
                respond: Some(response),
            },
        };
    }

    /// A control message on an established connection; false if it is
    /// malformed or not from the connection's peer.
    fn on_control(
        &self,
        conn: &Arc<Conn>,
        from: Option<ProcessId>,
        b: &[u8; handshake::LEN],
    ) -> bool {
        let Ok(h) = Handshake::decode(b) else {
            return false;
        };
        if h.job_key != self.job_key || Some(h.src) != from || h.dst != self.me {
            return false;
        }
        match h.kind {
            Kind::Ping => {
                if let Some(peer) = self.peer(h.src) {
                    let mut tx = lock(&peer.tx);
                    if let Some(c) = tx.conn.clone().filter(|c| Arc::ptr_eq(c, conn)) {
                        self.send_control(&peer, &mut tx, &c, Kind::Pong);
                    }
                }
                true
            }
            // Arriving was the point (`heard` is already up to date).
            Kind::Pong => true,
            Kind::Hello | Kind::Accept | Kind::Duplicate => false,
        }
    }

    /// Handle a handshake message; false closes the connection.
    fn on_handshake(&self, conn: &Arc<Conn>, b: &[u8; handshake::LEN]) -> bool {
        let reject = |why: &str| {
            bump(&self.stats.handshakes_rejected, 1);
            tracing::warn!(token = conn.token, why, "handshake rejected");
            false
        };
        let h = match Handshake::decode(b) {
            Ok(h) => h,
            Err(e) => return reject(&e.to_string()),
        };
        if h.job_key != self.job_key {
            return reject("wrong job key");
        }
        if h.dst != self.me || !h.src.is_concrete() || h.src == self.me {
            return reject("wrong process id");
        }
        conn.answers_probes.store(
            h.flags & handshake::FLAG_ANSWERS_PROBES != 0,
            Ordering::Relaxed,
        );
        match (conn.initiated, h.kind) {
            (false, Kind::Hello) => self.on_hello(conn, h.src),
            (true, Kind::Accept | Kind::Duplicate) => {
                if conn.peer() != Some(h.src) {
                    return reject("answer from the wrong process");
                }
                self.on_answer(conn, h.src, h.kind == Kind::Accept)
            }
            _ => reject("unexpected handshake message"),
        }
    }

    /// Acceptor side: decide whether this connection carries the pair's
    /// traffic.
    fn on_hello(&self, conn: &Arc<Conn>, from: ProcessId) -> bool {
        let peer = self.add_peer(from, None);
        let mut tx = lock(&peer.tx);
        *lock(&conn.peer) = Some(from);
        let incoming_wins = handshake::initiator_wins(from, self.me);
        let ours_alive = |c: &Option<Arc<Conn>>| {
            c.as_ref()
                .is_some_and(|c| c.initiated && c.state() != ConnState::Closed)
        };
        let duplicate = !incoming_wins && (ours_alive(&tx.conn) || ours_alive(&tx.pending));
        let answer = Handshake {
            kind: if duplicate {
                Kind::Duplicate
            } else {
                Kind::Accept
            },
            flags: self.flags(),
            job_key: self.job_key,
            src: self.me,
            dst: from,
        };
        if duplicate {
            bump(&self.stats.duplicates_resolved, 1);
            self.write_small(conn, &answer.encode());
            return false;
        }
        if !self.write_small(conn, &answer.encode()) {
            return false;
        }
        // This connection wins: drop any other one to this peer. Data never
        // flows on a pending connection, so closing it loses nothing.
        if let Some(old) = tx.pending.take() {
            self.close(&old);
        }
        if let Some(old) = tx.conn.clone() {
            // The peer connected again, so it gave the old connection up.
            self.supersede(&old, &peer, &mut tx);
        }
        *lock(&conn.state) = ConnState::Established;
        *lock(&conn.deadline) = None;
        tx.conn = Some(conn.clone());
        tx.retry_at = None;
        bump(&self.stats.connections_accepted, 1);
        self.flush(&peer, &mut tx, conn);
        true
    }

    /// A new connection replaces `old`, the established one to `peer`.
    ///
    /// The peer only connects again after giving the old connection up, so
    /// this is that connection's loss, handled as if its end had been seen
    /// first (which of the two events a poll reports first must not change
    /// the outcome): queued sends fail, and so do operations awaiting an
    /// answer, whose request or answer may have died with it. In particular
    /// a message partly written to the old connection is never continued on
    /// the new one, where the peer would read its payload as a header; the
    /// peer aborted its partial deposit when the old connection ended.
    fn supersede(&self, old: &Arc<Conn>, peer: &Peer, tx: &mut Tx) {
        tracing::debug!(peer = %peer.id, token = old.token, queued = tx.queue.len(), "connection replaced");
        self.lose(old, peer, tx);
    }

    /// Initiator side: the acceptor's answer.
    fn on_answer(&self, conn: &Arc<Conn>, from: ProcessId, accepted: bool) -> bool {
        let Some(peer) = self.peer(from) else {
            return false;
        };
        let mut tx = lock(&peer.tx);
        let is_pending = tx.pending.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        if !is_pending {
            return false;
        }
        tx.pending = None;
        if !accepted {
            // The peer's own connection wins; wait for it, and connect again
            // if it does not come.
            bump(&self.stats.duplicates_resolved, 1);
            if tx.conn.is_none() {
                tx.retry_at = Some(Instant::now() + DUPLICATE_RETRY);
            }
            return false;
        }
        if let Some(old) = tx.conn.clone() {
            self.supersede(&old, &peer, &mut tx);
        }
        *lock(&conn.state) = ConnState::Established;
        *lock(&conn.deadline) = None;
        tx.conn = Some(conn.clone());
        bump(&self.stats.connections_initiated, 1);
        self.flush(&peer, &mut tx, conn);
        true
    }

    /// Connection deadlines, reconnects and peer liveness, at most every
    /// `HOUSEKEEPING`; `now_ns` is the pass's clock.
    fn housekeeping(&self, now_ns: u64) {
        let due = self.next_housekeeping.load(Ordering::Relaxed);
        if now_ns < due
            || self
                .next_housekeeping
                .compare_exchange(
                    due,
                    now_ns + HOUSEKEEPING.as_nanos() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let now = Instant::now();
        let expired: Vec<Arc<Conn>> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| lock(&c.deadline).is_some_and(|d| d <= now))
            .map(|(_, c)| c.clone())
            .collect();
        for c in expired {
            tracing::debug!(token = c.token, peer = ?c.peer(), "connection set-up timed out");
            match c.peer().and_then(|p| self.peer(p)) {
                Some(peer) => {
                    let mut tx = lock(&peer.tx);
                    self.lose(&c, &peer, &mut tx);
                }
                None => {
                    self.close(&c);
                }
            }
        }
        for p in self.all_peers() {
            let mut tx = lock(&p.tx);
            if tx.retry_at.is_some_and(|t| t <= now) && tx.conn.is_none() && tx.pending.is_none() {
                tx.retry_at = None;
                if !tx.queue.is_empty() {
                    self.start_connect(&p, &mut tx);
                }
            }
        }
        // `due` is when the previous run scheduled this one (0: first run).
        let deaf = due != 0
            && now_ns.saturating_sub(due) + HOUSEKEEPING.as_nanos() as u64
                > DEAF_GAP.as_nanos() as u64;
        self.check_liveness(now_ns, deaf);
    }

    /// Probe peers that have been silent for half the peer timeout, and
    /// declare failed those silent for all of it. Only peers that answer
    /// probes (they have a progress thread) are judged. After a `deaf`
    /// stretch (nobody read the sockets) every clock restarts instead.
    fn check_liveness(&self, now_ns: u64, deaf: bool) {
        let Some(limit) = self.cfg.peer_timeout else {
            return;
        };
        let limit = (limit.as_nanos() as u64).max(1);
        let watched: Vec<Arc<Conn>> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| {
                c.answers_probes.load(Ordering::Relaxed) && c.state() == ConnState::Established
            })
            .map(|(_, c)| c.clone())
            .collect();
        for c in watched {
            if deaf {
                c.heard.fetch_max(now_ns, Ordering::Relaxed);
                continue;
            }
            let heard = c.heard.load(Ordering::Relaxed);
            let silent = now_ns.saturating_sub(heard);
            let timed_out = silent >= limit;
            let probe =
                !timed_out && silent >= limit / 2 && c.probed.load(Ordering::Relaxed) <= heard;
            if !timed_out && !probe {
                continue;
            }
            let Some(peer) = c.peer().and_then(|p| self.peer(p)) else {
                continue;
            };
            let mut tx = lock(&peer.tx);
            if !tx.conn.as_ref().is_some_and(|x| Arc::ptr_eq(x, &c)) {
                continue;
            }
            if timed_out {
                tracing::warn!(
                    peer = %peer.id,
                    silent_ms = silent / 1_000_000,
                    "peer silent past the peer timeout; declaring it failed"
                );
                bump(&self.stats.peers_timed_out, 1);
                self.lose(&c, &peer, &mut tx);
            } else {
                tracing::debug!(peer = %peer.id, silent_ms = silent / 1_000_000, "probing a silent peer");
                c.probed.store(now_ns, Ordering::Relaxed);
                bump(&self.stats.probes_sent, 1);
                self.send_control(&peer, &mut tx, &c, Kind::Ping);
            }
        }
    }

    fn close_all(&self) {
        let conns: Vec<Arc<Conn>> = lock(&self.conns).iter().map(|(_, c)| c.clone()).collect();
        for c in conns {
            self.close(&c);
            for p in self.pollers() {
                p.deregister(c.sock.as_raw_fd(), c.token);
            }
        }
        // Pending sends are abandoned: the interface is going away with the
        // memory their tokens refer to.
        for p in self.all_peers() {
            let mut tx = lock(&p.tx);
            tx.queue.clear();
            tx.conn = None;
            tx.pending = None;
        }
        lock(&self.conns).clear();
        let _ = SockRef::from(&self.listener).shutdown(std::net::Shutdown::Both);
    }
}

/// Socket options every connection gets.
fn tune(cfg: &TcpConfig, s: &Socket) -> io::Result<()> {
    s.set_nonblocking(true)?;
    s.set_nodelay(cfg.nodelay)?;
    if let Some(n) = cfg.send_buffer {
        s.set_send_buffer_size(n)?;
    }
    if let Some(n) = cfg.recv_buffer {
        s.set_recv_buffer_size(n)?;
    }
    if let Some(t) = cfg.user_timeout {
        s.set_tcp_user_timeout(Some(t))?;
    }
    match cfg.keepalive {
        Some(Keepalive {
            idle,
            interval,
            count,
        }) => {
            let ka = socket2::TcpKeepalive::new()
                .with_time(idle)
                .with_interval(interval)
                .with_retries(count);
            s.set_tcp_keepalive(&ka)?;
        }
        None => s.set_keepalive(false)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(every_ns: u64, n: u64) -> Vec<bool> {
        let spin = Cell::new(Spin {
            owner: 0,
            last_look_ns: 0,
            skipped: 0,
        });
        (1..=n)
            .map(|i| look_this_pass(&spin, 1, 1_000_000 + i * every_ns))
            .collect()
    }

    /// One thread driving three interfaces in turn, each spinning fast by
    /// its own clock (whose epochs differ): every pass of every interface
    /// looks, none is starved of its other sockets. (Counting them as one
    /// spin left an interface that always came right after another without
    /// a look for good: a connection it was setting up never completed.)
    #[test]
    fn passes_of_interfaces_driven_in_turn_each_look() {
        let spin = Cell::new(Spin {
            owner: 0,
            last_look_ns: 0,
            skipped: 0,
        });
        let epochs = [5_000_000u64, 1_000, 300_000];
        for i in 0..20u64 {
            for (k, e) in epochs.iter().enumerate() {
                let owner = 100 + k;
                assert!(
                    look_this_pass(&spin, owner, e + i * 300),
                    "pass {i} of interface {k} skipped the poller"
                );
            }
        }
        // Back to one interface spinning: skipping resumes.
        let looks: Vec<bool> = (0..8u64)
            .map(|i| look_this_pass(&spin, 7, 10_000_000 + i * 300))
            .collect();
        assert_eq!(looks.iter().filter(|l| **l).count(), 2, "{looks:?}");
    }

    #[test]
    fn a_spinning_waiter_looks_at_the_other_sockets_once_every_few_passes() {
        // A spin: passes 400 ns apart.
        let looks = passes(400, 4 * u64::from(SPINS_PER_POLL));
        assert_eq!(looks.iter().filter(|l| **l).count(), 4, "{looks:?}");
        for w in looks.windows(SPINS_PER_POLL as usize) {
            assert_eq!(w.iter().filter(|l| **l).count(), 1, "{looks:?}");
        }
    }

    #[test]
    fn a_pass_after_a_gap_always_looks_at_the_other_sockets() {
        // One call between pieces of compute: every one looks.
        assert!(passes(SPIN_GAP_NS, 20).iter().all(|l| *l));
        assert!(passes(1_000_000, 20).iter().all(|l| *l));
        // Passes a little closer than the gap: never more than the gap
        // between two looks.
        let every = SPIN_GAP_NS / 2;
        let mut since = 0;
        for l in passes(every, 20) {
            since = if l { 0 } else { since + every };
            assert!(since < SPIN_GAP_NS);
        }
    }

    #[test]
    fn connections_get_the_configured_keepalive_and_buffers() {
        let cfg = TcpConfig {
            send_buffer: Some(256 << 10),
            recv_buffer: Some(128 << 10),
            keepalive: Some(Keepalive {
                idle: Duration::from_secs(7),
                interval: Duration::from_secs(3),
                count: 4,
            }),
            user_timeout: Some(Duration::from_secs(9)),
            ..TcpConfig::default()
        };
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        tune(&cfg, &s).unwrap();
        assert!(s.keepalive().unwrap());
        assert_eq!(s.keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(s.keepalive_interval().unwrap(), Duration::from_secs(3));
        assert_eq!(s.keepalive_retries().unwrap(), 4);
        assert_eq!(s.tcp_user_timeout().unwrap(), Some(Duration::from_secs(9)));
        // Linux doubles the request (the other half pays for bookkeeping)
        // and caps it at net.core.[rw]mem_max.
        let (snd, rcv) = (s.send_buffer_size().unwrap(), s.recv_buffer_size().unwrap());
        assert!(snd >= (256 << 10).min(wmem_max()), "SO_SNDBUF {snd}");
        assert!(rcv >= (128 << 10).min(rmem_max()), "SO_RCVBUF {rcv}");
        assert!(s.nodelay().unwrap());

        let off = TcpConfig {
            keepalive: None,
            ..TcpConfig::default()
        };
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        tune(&off, &s).unwrap();
        assert!(!s.keepalive().unwrap());
    }

    fn sysctl(path: &str) -> usize {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    fn wmem_max() -> usize {
        sysctl("/proc/sys/net/core/wmem_max")
    }

    fn rmem_max() -> usize {
        sysctl("/proc/sys/net/core/rmem_max")
    }

    #[test]
    fn a_control_message_in_the_queue_is_written_whole_and_alone() {
        let h = Handshake {
            kind: Kind::Ping,
            flags: 0,
            job_key: 1,
            src: ProcessId::new(0, 1),
            dst: ProcessId::new(0, 2),
        };
        let mut m = OutMsg::control(&h);
        assert_eq!(m.total(), handshake::LEN);
        let (a, b) = m.remaining();
        assert_eq!(a, &h.encode()[..]);
        assert!(b.is_empty());
        m.written = 10;
        assert_eq!(m.remaining().0, &h.encode()[10..]);
    }
}
