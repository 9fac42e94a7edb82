//! The TCP NAL proper: endpoint, peers, connections and the progress loop.
//! The connections' life ([`lifecycle`]: set-up, handshake, liveness,
//! loss), the receive state machine ([`rx`]), the send queues ([`tx`]) and
//! the spinning waiter's poller rule ([`spin`]) are modules of their own.
//!
//! Lock order (never taken the other way round): a connection's `rx` →
//! a peer's `tx` → the engine (inside `NiCore::with_engine`). The connection
//! table and the peer table are leaf locks held only for lookups.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use portals::wire::{Header, Op, HEADER_LEN};
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

mod admission;
mod lifecycle;
mod lowat;
mod pt;
mod rx;
mod spin;
mod tx;

const LISTENER: u64 = 0;
/// Size of each connection's receive buffer.
const RX_BUF: usize = 64 << 10;
/// [`Conn::held`] when nothing is held back.
const NOT_HELD: u64 = u64::MAX;
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
    /// Accepted connections closed before their handshake because more
    /// than [`TcpConfig::max_pending_handshakes`](crate::TcpConfig::max_pending_handshakes)
    /// were waiting (the oldest go first).
    pub handshakes_evicted: u64,
    /// Accepted connections closed because no handshake came within
    /// [`TcpConfig::handshake_timeout`](crate::TcpConfig::handshake_timeout).
    pub handshakes_timed_out: u64,
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
    /// Acknowledgments held back that left in the same write as the next
    /// message to their peer (in a round trip: with the reply).
    pub acks_coalesced: u64,
    /// Non-blocking progress passes that found bytes by reading the
    /// connection that last delivered some, without asking the poller first
    /// (the latency path of a waiting thread in a round trip).
    pub hot_reads: u64,
    /// Progress passes of the progress thread. Each one follows a sleep in
    /// the kernel (a poll, or a park while an application thread drives
    /// the sockets) unless work was left over from the pass before: on a
    /// rank whose progress thread shares the application's core, each is a
    /// context switch taken out of the application's time.
    pub progress_wakeups: u64,
    /// Times a socket's receive low-water mark was changed to wake a
    /// sleeping thread once per large message instead of once per segment
    /// (see [`TcpConfig::wake_per_message`](crate::TcpConfig::wake_per_message)):
    /// about two per message that did not arrive whole in one read.
    pub lowat_marks: u64,
    /// Times the progress thread, standing aside in the hand-back delay,
    /// found the application away from the library and watched the
    /// sockets instead of sleeping the delay out (see
    /// [`TcpConfig::early_takeover`](crate::TcpConfig::early_takeover)).
    pub watches: u64,
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
    handshakes_evicted: AtomicU64,
    handshakes_timed_out: AtomicU64,
    duplicates_resolved: AtomicU64,
    connections_lost: AtomicU64,
    connects_failed: AtomicU64,
    malformed_frames: AtomicU64,
    probes_sent: AtomicU64,
    peers_timed_out: AtomicU64,
    writes_deferred: AtomicU64,
    optimistic_sends: AtomicU64,
    acks_coalesced: AtomicU64,
    hot_reads: AtomicU64,
    progress_wakeups: AtomicU64,
    lowat_marks: AtomicU64,
    watches: AtomicU64,
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

    /// Set [`TcpConfig::early_takeover`] before starting: a launcher knows
    /// only after the ranks exchanged their hosts whether this one is
    /// oversubscribed.
    pub fn set_early_takeover(&mut self, on: bool) {
        self.cfg.early_takeover = on;
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
    /// The header at the front of `rx`'s buffer was held back by the
    /// engine (a flow-controlled event queue was full): the interface's
    /// intake epoch read before it was offered, or [`NOT_HELD`]. The socket
    /// is not read until the epoch moves, so TCP's own flow control holds
    /// the sender back.
    held: AtomicU64,
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
    /// The poller said the peer sent its last byte: the receive side reads
    /// until end of file instead of trusting a short read (see
    /// `nal_sys::Ready::peer_done`).
    peer_done: AtomicBool,
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
// One per connection, replaced in place per message: boxing the payload
// variant (large since a `Region` can describe an iovec descriptor's
// segments) would cost an allocation per message to save a few hundred
// bytes per connection.
#[allow(clippy::large_enum_variant)]
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
    /// The socket's receive low-water mark as last set (see `lowat.rs`).
    lowat: usize,
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
            lowat: 1,
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

    /// Add the unwritten part, at most `max` bytes, to `iov` (head first,
    /// then the payload: one slice, or one per segment of an iovec
    /// descriptor). Returns (slices added, bytes they cover); fewer bytes
    /// than asked only when `iov` is full.
    fn gather<'a>(&'a self, iov: &mut [IoSlice<'a>], max: usize) -> (usize, usize) {
        let (mut n, mut bytes) = (0, 0);
        if self.written < self.head_len && !iov.is_empty() && max > 0 {
            let head = &self.hdr[self.written..self.head_len];
            let head = &head[..head.len().min(max)];
            iov[0] = IoSlice::new(head);
            (n, bytes) = (1, head.len());
        }
        let from = self.written.saturating_sub(self.head_len);
        let (iov, max) = (&mut iov[n..], max - bytes);
        let (k, b) = match &self.payload {
            Payload::None => (0, 0),
            // SAFETY: the message's send token is still open (it completes
            // only after the last byte is written), so the engine keeps the
            // region alive and unwritten while we read it.
            Payload::Region(r) => unsafe { r.io_slices(from, max, iov) },
            Payload::Owned(v) => {
                let part = &v[from.min(v.len())..];
                let part = &part[..part.len().min(max)];
                if part.is_empty() || iov.is_empty() {
                    (0, 0)
                } else {
                    iov[0] = IoSlice::new(part);
                    (1, part.len())
                }
            }
        };
        (n + k, bytes + b)
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
    /// Everything queued is acknowledgments held back to go out with the
    /// next message (see `Inner::answer`).
    lazy_only: bool,
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
    /// Connections held back by the engine (see [`Conn::held`]), serviced
    /// again once the intake epoch moves past `intake_seen`.
    held: Mutex<Vec<u64>>,
    intake_seen: AtomicU64,
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
    /// Accepted connections waiting for their Hello, oldest first (some
    /// may have finished since: pruned when the cap is reached).
    pending_handshakes: Mutex<VecDeque<u64>>,
    /// Limits the warnings about refused connections.
    refusals_logged: admission::Throttle,
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
}

impl TcpNal {
    fn start(
        ep: TcpEndpoint,
        core: Arc<NiCore>,
        peers: impl IntoIterator<Item = (ProcessId, SocketAddr)>,
    ) -> io::Result<Arc<TcpNal>> {
        let cfg = ep.cfg.clone();
        // An early take-over needs the leave of a wait found under way to
        // wake the parked progress thread (see `pt.rs`).
        let gate = if cfg.early_takeover {
            ProgressGate::with_wake_on_leave(cfg.handback).waking_after_compute(pt::WATCH_AFTER)
        } else {
            ProgressGate::new(cfg.handback)
        };
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
            held: Mutex::new(Vec::new()),
            intake_seen: AtomicU64::new(0),
            flush_later: Mutex::new(Vec::new()),
            gate,
            epoch: Instant::now(),
            next_housekeeping: AtomicU64::new(0),
            hot: AtomicU64::new(0),
            pending_handshakes: Mutex::new(VecDeque::new()),
            refusals_logged: admission::Throttle::default(),
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
            handshakes_evicted: g(&s.handshakes_evicted),
            handshakes_timed_out: g(&s.handshakes_timed_out),
            duplicates_resolved: g(&s.duplicates_resolved),
            connections_lost: g(&s.connections_lost),
            connects_failed: g(&s.connects_failed),
            malformed_frames: g(&s.malformed_frames),
            probes_sent: g(&s.probes_sent),
            peers_timed_out: g(&s.peers_timed_out),
            writes_deferred: g(&s.writes_deferred),
            optimistic_sends: g(&s.optimistic_sends),
            acks_coalesced: g(&s.acks_coalesced),
            hot_reads: g(&s.hot_reads),
            progress_wakeups: g(&s.progress_wakeups),
            lowat_marks: g(&s.lowat_marks),
            watches: g(&s.watches),
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

    fn fence_responses(&self) {
        // A thread reading a connection holds its `rx` from taking a
        // message to queueing the answer (`rx.rs`): once we have held each
        // one, every answer to a message taken before is in its peer's
        // `tx` queue, ahead of whatever the caller sends next.
        let conns: Vec<Arc<Conn>> = lock(&self.inner.conns)
            .iter()
            .map(|(_, c)| c.clone())
            .collect();
        for c in conns {
            drop(lock(&c.rx));
        }
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
        (lock(&self.inner.dirty).is_empty()
            && lock(&self.inner.flush_later).is_empty()
            && !self.inner.resume_due()
            && !self.inner.core.triggered_pending())
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
                        lazy_only: false,
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
            // An initiator's set-up includes the connect; an acceptor's is
            // only the wait for the Hello.
            deadline: Mutex::new(Some(
                Instant::now()
                    + if initiated {
                        self.cfg.connect_timeout
                    } else {
                        self.cfg.handshake_timeout
                    },
            )),
            rx: Mutex::new(Rx::new()),
            rx_again: AtomicBool::new(false),
            held: AtomicU64::new(NOT_HELD),
            reaped: AtomicBool::new(false),
            heard: AtomicU64::new(self.now_ns()),
            probed: AtomicU64::new(0),
            answers_probes: AtomicBool::new(false),
            flush_deferred: AtomicBool::new(false),
            peer_done: AtomicBool::new(false),
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

    /// One progress pass, framed by sending the messages of triggered
    /// operations: before it, those another thread's engine call released
    /// (so that a blocking pass does not sleep on them); after it, those
    /// the pass's own deliveries released, now that no lock is held.
    fn progress_once(&self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        self.core.send_triggered();
        let r = self.pass(poller, timeout);
        self.core.send_triggered();
        r
    }

    fn pass(&self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        // One clock read per pass, for the housekeeping and the spin.
        let now_ns = self.now_ns();
        self.housekeeping(now_ns);
        if timeout.is_none() && self.read_hot() {
            // Something arrived: let the caller look at it before the other
            // sockets get their turn on the next pass.
            return Ok(());
        }
        self.resume_held();
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
            && !spin::look_this_pass(self as *const Self as usize, now_ns)
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

    /// The engine's intake resumed since the held connections were set
    /// aside.
    fn resume_due(&self) -> bool {
        self.core.intake_epoch() != self.intake_seen.load(Ordering::SeqCst)
            && !lock(&self.held).is_empty()
    }

    /// Read the held connections again if the intake resumed (their bytes
    /// raise no new readiness edge).
    fn resume_held(&self) {
        let epoch = self.core.intake_epoch();
        if self.intake_seen.swap(epoch, Ordering::SeqCst) == epoch {
            return;
        }
        let held = std::mem::take(&mut *lock(&self.held));
        if !held.is_empty() {
            lock(&self.dirty).extend(held);
        }
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
        if r.peer_done {
            conn.peer_done.store(true, Ordering::Relaxed);
        }
        if r.readable || r.closed {
            self.service_rx(&conn);
        }
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
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(m.gather(&mut iov, usize::MAX), (1, handshake::LEN));
        assert_eq!(&*iov[0], &h.encode()[..]);
        m.written = 10;
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(m.gather(&mut iov, usize::MAX), (1, handshake::LEN - 10));
        assert_eq!(&*iov[0], &h.encode()[10..]);
    }
}
