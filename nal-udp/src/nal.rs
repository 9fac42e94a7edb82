//! The socket driver: one receiving UDP socket per network interface (plus
//! one connected sending socket per peer), the protocol endpoint behind a
//! lock, and the progress model of `nal-tcp` (a progress
//! thread that sleeps in the kernel, application threads that drive the
//! socket themselves while they wait, optimistic sends).

use portals::nal::{LAZY_ACK_BATCH, LAZY_ACK_HOLD};
use rustc_hash::FxHashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nal_sys::batch::{RecvBatch, SendBatch, Target};
use nal_sys::gate::ProgressGate;
use nal_sys::{Poller, ProgressMode, Ready};
use portals::{FailType, Nal, NiCore, Outbound, ProcessId, PtlError, SendToken};
use slab::Slab;
use socket2::{Domain, Protocol, Socket, Type};

use crate::addr::{Directory, PeerAddr};
use crate::config::{fit_windows, UdpConfig};
use crate::deliver::{out_payload, peer_id, process_id, Deposits, EngineSink};
use crate::fault::{Fate, FaultInjector};
use crate::proto::{Endpoint, Event, PeerId, SendError};

/// Poller token of the socket.
const SOCKET: u64 = 0;
/// Longest the progress thread sleeps without looking at the clock (it is
/// woken earlier by traffic, by new timers and at shutdown).
const PT_SLEEP: Duration = Duration::from_millis(50);
/// Protocol token of messages whose completion nobody waits for.
const NO_TOKEN: u64 = u64::MAX;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counters of a UDP NAL: the protocol's, plus the driver's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// The reliability protocol's counters.
    pub protocol: crate::proto::Stats,
    /// Sends that left in the calling thread, without waiting for progress.
    pub optimistic_sends: u64,
    /// Sends that took lazy acknowledgments held back for them along, in
    /// the same `sendmmsg` (see [`portals::AckReq::Lazy`]).
    pub lazy_acks_carried: u64,
    /// Datagrams the kernel refused to send (lost; the protocol resends).
    pub send_errors: u64,
    /// `recvmmsg` failures other than "nothing to read".
    pub recv_errors: u64,
    /// Times the socket's send buffer was full.
    pub send_blocked: u64,
    /// Peers declared dead because their port was unreachable.
    pub icmp_deaths: u64,
    /// Times a protocol timer due before the progress thread's next look
    /// woke it in its poller. While application threads wait in the
    /// library the progress thread is parked and they drive the timers, so
    /// a ping-pong should cost (almost) none.
    pub progress_thread_wakes: u64,
    /// Datagrams dropped by fault injection.
    pub injected_drops: u64,
    /// Datagrams duplicated by fault injection.
    pub injected_duplicates: u64,
    /// Datagrams reordered by fault injection.
    pub injected_reorders: u64,
    /// Receive buffer the kernel granted (bytes, as it reports them).
    pub recv_buffer: usize,
    /// Receive window in force (datagrams per peer).
    pub recv_window: u32,
}

/// A bound UDP socket whose address can be published before the transport
/// starts (as [`nal_tcp::TcpEndpoint`]'s listener).
///
/// [`nal_tcp::TcpEndpoint`]: https://docs.rs/nal-tcp
#[derive(Debug)]
pub struct UdpEndpoint {
    sock: Socket,
    local: SocketAddr,
    /// Holds the source port the per-peer sockets share (with
    /// [`UdpConfig::connected_sends`]); nothing reads it.
    source: Option<Socket>,
    source_addr: SocketAddr,
    cfg: UdpConfig,
    granted: (usize, usize),
}

impl UdpEndpoint {
    /// Open and bind the socket.
    pub fn bind(cfg: UdpConfig) -> io::Result<UdpEndpoint> {
        cfg.protocol
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let sock = Socket::new(
            Domain::for_address(cfg.bind),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        sock.set_nonblocking(true)?;
        let granted =
            nal_sys::request_socket_buffers(sock.as_raw_fd(), cfg.recv_buffer, cfg.send_buffer)?;
        sock.bind(&cfg.bind.into())?;
        if cfg.icmp_peer_death {
            nal_sys::batch::enable_error_queue(sock.as_raw_fd(), cfg.bind.is_ipv6())?;
        }
        let local = socket_addr(&sock)?;
        let source = if cfg.connected_sends {
            Some(source_port_socket(SocketAddr::new(local.ip(), 0))?)
        } else {
            None
        };
        let source_addr = match &source {
            Some(s) => socket_addr(s)?,
            None => local,
        };
        Ok(UdpEndpoint {
            sock,
            local,
            source,
            source_addr,
            cfg,
            granted,
        })
    }

    /// The address peers send to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What peers must know of this endpoint: where it receives and where
    /// its datagrams come from (the same address without
    /// [`UdpConfig::connected_sends`]). Its text form is what a job
    /// publishes.
    pub fn addr(&self) -> PeerAddr {
        PeerAddr {
            recv: self.local,
            source: self.source_addr,
        }
    }

    /// Start serving `core` (use inside [`portals::NetworkInterface::init`]).
    /// `peers` maps the other processes of the job to their addresses (each
    /// peer's [`addr`](Self::addr); a bare `SocketAddr` is a peer that sends
    /// from where it receives); more can be added later with
    /// [`UdpNal::add_peer`].
    pub fn start<A: Into<PeerAddr>>(
        self,
        core: Arc<NiCore>,
        peers: impl IntoIterator<Item = (ProcessId, A)>,
    ) -> Result<Arc<UdpNal>, PtlError> {
        let peers = peers.into_iter().map(|(id, a)| (id, a.into())).collect();
        UdpNal::start(self, core, peers).map_err(|e| PtlError::Nal(e.to_string()))
    }
}

/// A non-blocking UDP socket for addresses of `like`'s family.
fn udp_socket(like: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(like), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A socket on the source port `at` (port 0: a fresh one), shared with
/// `SO_REUSEPORT` by the anchor and every per-peer socket. None of them
/// reads: nobody sends to the source port, so each gets the smallest
/// receive buffer the kernel allows. Another process of the same user may
/// draw the same port (see [`Directory`]); sending from it is unaffected.
fn source_port_socket(at: SocketAddr) -> io::Result<Socket> {
    let s = udp_socket(at)?;
    s.set_reuse_port(true)?;
    s.set_recv_buffer_size(1)?;
    s.bind(&at.into())?;
    Ok(s)
}

/// The IP address a socket is bound to.
fn socket_addr(s: &Socket) -> io::Result<SocketAddr> {
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("socket has no IP address"))
}

/// Everything the protocol and the socket need, behind one lock.
struct State {
    ep: Endpoint,
    // Fx, not SipHash: looked up for every datagram sent, and only known
    // peers are ever inserted.
    /// Where each peer's datagrams go, and through which socket.
    addrs: FxHashMap<PeerId, Target>,
    /// Who sends from where, and who receives where.
    peers: Directory,
    /// The connected per-peer sockets the targets in `addrs` send through;
    /// they live as long as the state (a target never outlives its socket).
    links: Vec<Socket>,
    /// Engine tokens of sends in the protocol, by protocol token.
    tokens: Slab<SendToken>,
    deposits: Deposits,
    responses: Vec<Outbound>,
    /// Lazy acknowledgments ([`portals::AckReq::Lazy`]) held back to leave
    /// in the same `sendmmsg` as the next message (see [`Inner::settle`]).
    lazy_acks: Vec<Outbound>,
    /// When the oldest of `lazy_acks` was held back.
    lazy_since: Option<Instant>,
    rx: RecvBatch,
    tx: SendBatch,
    fault: Option<FaultInjector>,
    /// A datagram fault injection holds back, sent after the next one.
    held: Option<(Vec<u8>, Target)>,
    /// The last pass stopped receiving before the socket was empty.
    rx_more: bool,
    /// The last receive pass found the socket empty.
    rx_idle: bool,
    /// The socket's send buffer was full; wait for writability.
    tx_blocked: bool,
    /// The interface's intake epoch when the last pass began: a message
    /// the engine held back is offered again once it moves.
    intake_seen: u64,
}

impl State {
    /// The endpoint, a sink into the engine, and what receiving reads,
    /// borrowed apart so that the endpoint can call the sink.
    fn split<'a>(
        &'a mut self,
        core: &'a NiCore,
    ) -> (
        &'a mut Endpoint,
        EngineSink<'a>,
        &'a RecvBatch,
        &'a Directory,
    ) {
        let sink = EngineSink {
            core,
            deposits: &mut self.deposits,
            responses: &mut self.responses,
            held: false,
        };
        (&mut self.ep, sink, &self.rx, &self.peers)
    }
}

struct Counters {
    optimistic_sends: AtomicU64,
    lazy_acks_carried: AtomicU64,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
    send_blocked: AtomicU64,
    icmp_deaths: AtomicU64,
    progress_thread_wakes: AtomicU64,
}

struct Inner {
    core: Arc<NiCore>,
    cfg: UdpConfig,
    me: ProcessId,
    sock: Socket,
    /// The source port of the per-peer sockets, held open.
    source: Option<Socket>,
    state: Mutex<State>,
    /// Polled by application threads waiting in the library.
    app: Arc<Poller>,
    /// Polled by the progress thread (thread mode only).
    pt: Option<Poller>,
    /// When the progress thread will next look at the clock, in nanoseconds
    /// since `epoch`, while it sleeps in its poller; 0 while it does not (it
    /// is working, and reads the timers before it sleeps again, or it is
    /// parked at the gate, where application threads drive the timers and
    /// waking its poller would only cost a system call per nudge).
    pt_deadline: AtomicU64,
    /// Progress thread vs. waiting application threads; stop flag.
    gate: ProgressGate,
    epoch: Instant,
    counters: Counters,
    recv_buffer: usize,
    recv_window: u32,
}

/// A running UDP NAL. Created by [`UdpEndpoint::start`]; owned by the
/// network interface (as its `Arc<dyn Nal>`), and optionally by the caller
/// for [`UdpNal::stats`] and [`UdpNal::add_peer`].
pub struct UdpNal {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for UdpNal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpNal")
            .field("me", &self.inner.me)
            .field("progress", &self.inner.cfg.progress)
            .field("backend", &self.inner.cfg.backend)
            .finish()
    }
}

impl UdpNal {
    fn start(
        ep: UdpEndpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, PeerAddr)>,
    ) -> io::Result<Arc<UdpNal>> {
        let UdpEndpoint {
            sock,
            source,
            cfg,
            granted,
            ..
        } = ep;
        let me = core.id();
        let handback = cfg.handback;
        let mut proto = cfg.protocol.clone();
        if cfg.size_windows {
            let senders = peers.iter().filter(|(p, _)| *p != me).count();
            fit_windows(&mut proto, granted.0, senders);
        }
        let recv_window = proto.recv_window;
        let max_datagram = proto.max_datagram;
        let endpoint = Endpoint::new(proto, core.job_key(), peer_id(me))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let app = Arc::new(Poller::new(nal_sys::Backend::Epoll)?);
        let pt = match cfg.progress {
            ProgressMode::Thread => Some(Poller::new(cfg.backend)?),
            ProgressMode::Poll => None,
        };
        app.register(sock.as_raw_fd(), SOCKET, true)?;
        if let Some(pt) = &pt {
            pt.register(sock.as_raw_fd(), SOCKET, true)?;
        }
        let waker = app.clone();
        core.set_waker(Box::new(move || waker.wake()));
        let fault = cfg
            .fault
            .map(|f| FaultInjector::new(f, peer_id(me).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        let state = State {
            ep: endpoint,
            addrs: FxHashMap::default(),
            peers: Directory::default(),
            links: Vec::new(),
            tokens: Slab::new(),
            deposits: Deposits::default(),
            responses: Vec::new(),
            lazy_acks: Vec::new(),
            lazy_since: None,
            // One byte more than the largest datagram, so that an oversized
            // one is seen as such and dropped, not truncated into shape.
            rx: RecvBatch::new(cfg.batch, max_datagram + 1),
            tx: SendBatch::new(cfg.batch, max_datagram),
            fault,
            held: None,
            rx_more: false,
            rx_idle: false,
            tx_blocked: false,
            intake_seen: 0,
        };
        let inner = Arc::new(Inner {
            me,
            core,
            cfg,
            sock,
            source,
            state: Mutex::new(state),
            app,
            pt,
            pt_deadline: AtomicU64::new(0),
            gate: ProgressGate::new(handback),
            epoch: Instant::now(),
            counters: Counters {
                optimistic_sends: AtomicU64::new(0),
                lazy_acks_carried: AtomicU64::new(0),
                send_errors: AtomicU64::new(0),
                recv_errors: AtomicU64::new(0),
                send_blocked: AtomicU64::new(0),
                icmp_deaths: AtomicU64::new(0),
                progress_thread_wakes: AtomicU64::new(0),
            },
            recv_buffer: granted.0,
            recv_window,
        });
        {
            let mut st = lock(&inner.state);
            for (id, addr) in peers {
                inner.add_peer(&mut st, id, addr);
            }
        }
        let thread = if inner.pt.is_some() {
            let i = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name(format!("ptl-udp-{}", inner.me))
                    .spawn(move || i.progress_thread())?,
            )
        } else {
            None
        };
        Ok(Arc::new(UdpNal {
            inner,
            thread: Mutex::new(thread),
        }))
    }

    /// Tell the NAL where a process receives and sends from (its
    /// [`UdpEndpoint::addr`]; a bare `SocketAddr` for a process that sends
    /// from where it receives). Adding a known process again changes
    /// nothing.
    pub fn add_peer(&self, id: ProcessId, addr: impl Into<PeerAddr>) {
        let i = &self.inner;
        i.add_peer(&mut lock(&i.state), id, addr.into());
    }

    /// The counters.
    pub fn stats(&self) -> UdpStats {
        let (protocol, fault) = {
            let st = lock(&self.inner.state);
            let f = st
                .fault
                .as_ref()
                .map(|f| (f.dropped, f.duplicated, f.reordered))
                .unwrap_or_default();
            (st.ep.stats(), f)
        };
        let c = &self.inner.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UdpStats {
            protocol,
            optimistic_sends: g(&c.optimistic_sends),
            lazy_acks_carried: g(&c.lazy_acks_carried),
            send_errors: g(&c.send_errors),
            recv_errors: g(&c.recv_errors),
            send_blocked: g(&c.send_blocked),
            icmp_deaths: g(&c.icmp_deaths),
            progress_thread_wakes: g(&c.progress_thread_wakes),
            injected_drops: fault.0,
            injected_duplicates: fault.1,
            injected_reorders: fault.2,
            recv_buffer: self.inner.recv_buffer,
            recv_window: self.inner.recv_window,
        }
    }
}

impl Nal for UdpNal {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn send(&self, msg: Outbound) {
        let i = &self.inner;
        if msg.header.dst == i.me {
            // Self-sends never touch the network (nor the state lock).
            portals::loopback::deliver_local(&i.core, msg);
            return;
        }
        let mut st = lock(&i.state);
        let now = Instant::now();
        // Held acknowledgments go first: in their peers' order ahead of
        // this message (an answer is not overtaken by the reply it
        // caused), and in the same `sendmmsg`.
        if !st.lazy_acks.is_empty() {
            i.counters.lazy_acks_carried.fetch_add(1, Ordering::Relaxed);
            i.release_lazy_acks(&mut st, now);
        }
        i.submit(&mut st, msg, now);
        i.settle(&mut st, now);
        if st.tx.is_empty() && !st.tx_blocked {
            i.counters.optimistic_sends.fetch_add(1, Ordering::Relaxed);
        }
        i.nudge_progress_thread(&st);
    }

    fn progress(&self, timeout: Option<Duration>) -> portals::Result<()> {
        let i = &self.inner;
        if i.gate.is_stopped() {
            return Err(PtlError::Shutdown);
        }
        i.progress_once(&i.app, timeout)
            .map_err(|e| PtlError::Nal(e.to_string()))
    }

    fn wake(&self) {
        self.inner.app.wake();
    }

    fn waiter_enter(&self) {
        // Only a progress thread reads the gate: without one, a wait skips
        // its clock reads and shared counters (two clock reads per wait).
        if self.inner.pt.is_some() {
            self.inner.gate.enter();
        }
    }

    fn waiter_leave(&self) {
        if self.inner.pt.is_some() {
            self.inner.gate.leave();
        }
    }

    fn progresses_alone(&self) -> bool {
        self.inner.pt.is_some()
    }

    fn shutdown(&self) {
        let i = &self.inner;
        {
            let mut st = lock(&i.state);
            let now = Instant::now();
            i.release_lazy_acks(&mut st, now);
            i.settle(&mut st, now);
        }
        i.linger();
        // What a lossy run cost, for whoever asks (`PTL_LOG=nal_udp=debug`).
        tracing::debug!(me = %i.me, stats = ?self.stats(), "closing");
        i.gate.stop();
        if let Some(pt) = &i.pt {
            pt.wake();
        }
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        // Pending sends and deposits are abandoned without touching their
        // memory: the interface is going away with it. Dropping the
        // endpoint's borrowed payloads reads nothing.
        let mut st = lock(&i.state);
        st.tokens.clear();
        st.deposits.clear();
        st.responses.clear();
        st.lazy_acks.clear();
        st.held = None;
    }
}

impl Inner {
    fn add_peer(&self, st: &mut State, id: ProcessId, addr: PeerAddr) {
        let p = peer_id(id);
        st.ep.add_peer(p);
        if st.addrs.contains_key(&p) {
            return;
        }
        // Datagrams to this process itself never reach a socket.
        let link = match &self.source {
            Some(source) if id != self.me => match self.link(source, addr.recv) {
                Ok(s) => Some(s),
                Err(e) => {
                    // Still reachable, only slower: through the receiving
                    // socket, from the receive address (which peers know).
                    tracing::warn!(peer = %id, error = %e, "no connected socket; sending unconnected");
                    None
                }
            },
            _ => None,
        };
        let target = match link {
            Some(s) => {
                let t = Target::connected(addr.recv, s.as_raw_fd());
                st.links.push(s);
                t
            }
            None => Target::from(addr.recv),
        };
        st.addrs.insert(p, target);
        st.peers.insert(p, addr);
    }

    /// A socket bound to the shared source port and connected to `to`,
    /// watched for writability by both pollers (it never receives: nobody
    /// sends to the source port).
    fn link(&self, source: &Socket, to: SocketAddr) -> io::Result<Socket> {
        let s = source_port_socket(socket_addr(source)?)?;
        nal_sys::request_socket_buffers(s.as_raw_fd(), 0, self.cfg.send_buffer)?;
        if self.cfg.icmp_peer_death {
            nal_sys::batch::enable_error_queue(s.as_raw_fd(), to.is_ipv6())?;
        }
        s.connect(&to.into())?;
        self.app.register(s.as_raw_fd(), SOCKET, true)?;
        if let Some(pt) = &self.pt {
            if let Err(e) = pt.register(s.as_raw_fd(), SOCKET, true) {
                self.app.deregister(s.as_raw_fd(), SOCKET);
                return Err(e);
            }
        }
        Ok(s)
    }

    // ----- sending -------------------------------------------------------------

    /// Hand one Portals message to the protocol.
    fn submit(&self, st: &mut State, msg: Outbound, now: Instant) {
        let dst = msg.header.dst;
        tracing::trace!(%dst, op = ?msg.header.op, len = msg.payload.len(), "send");
        if dst == self.me {
            portals::loopback::deliver_local(&self.core, msg);
            return;
        }
        let peer = peer_id(dst);
        if !st.addrs.contains_key(&peer) {
            tracing::warn!(peer = %dst, "send to a process with no known address");
            self.fail(msg.token);
            self.core.with_engine(|e| e.peer_failed(dst));
            return;
        }
        let header = msg.header.encode();
        let token = match msg.token {
            Some(t) => st.tokens.insert(t) as u64,
            None => NO_TOKEN,
        };
        let r = st
            .ep
            .send(now, peer, &header, out_payload(msg.payload), token);
        if let Err(e) = r {
            tracing::debug!(peer = %dst, error = %e, "send refused");
            let t = (token != NO_TOKEN)
                .then(|| st.tokens.try_remove(token as usize))
                .flatten();
            self.fail(t);
            if matches!(e, SendError::PeerDead(_)) {
                self.core.with_engine(|e| e.peer_failed(dst));
            }
        }
    }

    fn fail(&self, token: Option<SendToken>) {
        if let Some(t) = token {
            self.core
                .with_engine(|e| e.send_complete(t, FailType::Unreachable));
        }
    }

    /// Send the engine's responses, report the protocol's events to the
    /// engine, and put every datagram the protocol has on the wire. `now` is
    /// the time of the pass that calls it: one clock read per pass, not per
    /// step (each costs about 25 ns here, several times per message).
    ///
    /// A lazy acknowledgment is held back instead: a datagram of its own
    /// put a second `sendmmsg` on a round trip's path, as in TCP (see
    /// `nal-tcp`'s `release_staged`). It leaves with the next message
    /// [`Nal::send`] gets, or from a pass once [`LAZY_ACK_HOLD`] has passed
    /// or [`LAZY_ACK_BATCH`] wait, or before a pass sleeps, or at shutdown.
    fn settle(&self, st: &mut State, now: Instant) {
        loop {
            for msg in std::mem::take(&mut st.responses) {
                if msg.header.op == portals::wire::Op::Ack && msg.header.ack_lazy {
                    st.lazy_since.get_or_insert(now);
                    st.lazy_acks.push(msg);
                    continue;
                }
                self.submit(st, msg, now);
            }
            self.events(st);
            self.transmit(st, now);
            self.events(st);
            if st.responses.is_empty() {
                return;
            }
        }
    }

    /// Submit the held lazy acknowledgments (the caller settles).
    fn release_lazy_acks(&self, st: &mut State, now: Instant) {
        if st.lazy_acks.is_empty() {
            return;
        }
        st.lazy_since = None;
        for msg in std::mem::take(&mut st.lazy_acks) {
            self.submit(st, msg, now);
        }
    }

    /// At the end of a pass: send the held lazy acknowledgments if the
    /// pass will sleep (`sleeping`), or once they are old or many enough.
    fn settle_lazy_acks(&self, st: &mut State, sleeping: bool) {
        let Some(since) = st.lazy_since else { return };
        let now = Instant::now();
        if sleeping
            || st.lazy_acks.len() >= LAZY_ACK_BATCH
            || now.saturating_duration_since(since) >= LAZY_ACK_HOLD
        {
            self.release_lazy_acks(st, now);
            self.settle(st, now);
        }
    }

    fn events(&self, st: &mut State) {
        while let Some(ev) = st.ep.poll_event() {
            match ev {
                Event::SendComplete { token, ok, .. } => {
                    if token == NO_TOKEN {
                        continue;
                    }
                    if let Some(t) = st.tokens.try_remove(token as usize) {
                        let fail = if ok {
                            FailType::Ok
                        } else {
                            FailType::Unreachable
                        };
                        self.core.with_engine(|e| e.send_complete(t, fail));
                    }
                }
                Event::PeerDead { peer } => {
                    let p = process_id(peer);
                    tracing::warn!(peer = %p, "peer declared dead");
                    self.core.with_engine(|e| e.peer_failed(p));
                }
            }
        }
    }

    /// Move datagrams from the protocol to the socket until either has
    /// nothing left.
    fn transmit(&self, st: &mut State, now: Instant) {
        let fd = self.sock.as_raw_fd();
        loop {
            if !st.tx.is_empty() {
                let f = st.tx.flush(fd);
                if f.icmp {
                    self.read_icmp(st);
                }
                if f.failed > 0 {
                    self.counters
                        .send_errors
                        .fetch_add(f.failed as u64, Ordering::Relaxed);
                }
                if f.blocked {
                    if !st.tx_blocked {
                        self.counters.send_blocked.fetch_add(1, Ordering::Relaxed);
                    }
                    st.tx_blocked = true;
                    return;
                }
            }
            st.tx_blocked = false;
            let produced = self.fill(st, now);
            if produced == 0 && st.tx.is_empty() {
                // Nothing follows a held datagram: send it now rather than
                // turn a reordering into a loss.
                match st.held.take() {
                    Some((d, a)) => {
                        st.tx.push(&d, a);
                    }
                    None => return,
                }
            }
        }
    }

    /// Fill the send batch from the protocol; returns datagrams produced.
    fn fill(&self, st: &mut State, now: Instant) -> usize {
        let State {
            ep,
            addrs,
            tx,
            fault,
            held,
            ..
        } = st;
        let mut produced = 0;
        while let Some(slot) = tx.slot() {
            let Some((peer, n)) = ep.poll_transmit(now, slot) else {
                break;
            };
            produced += 1;
            let Some(&target) = addrs.get(&peer) else {
                continue;
            };
            let fate = fault.as_mut().map_or(Fate::Send, FaultInjector::decide);
            match fate {
                Fate::Send => tx.commit(n, target),
                Fate::Drop => continue,
                Fate::Duplicate => {
                    tx.commit(n, target);
                    let last = tx.queued_len().saturating_sub(1);
                    if let Some(copy) = tx.queued(last).map(|(d, _)| d.to_vec()) {
                        tx.push(&copy, target);
                    }
                }
                Fate::Hold => {
                    let bytes = slot_copy(tx, n);
                    if let Some((d, a)) = held.replace((bytes, target)) {
                        tx.push(&d, a);
                    }
                    continue;
                }
            }
            if let Some((d, a)) = held.take() {
                if !tx.push(&d, a) {
                    *held = Some((d, a));
                }
            }
        }
        produced
    }

    // ----- receiving ------------------------------------------------------------

    /// One progress pass: read datagrams, run expired timers, send. Returns
    /// whether anything happened.
    fn drive(&self, st: &mut State) -> bool {
        let fd = self.sock.as_raw_fd();
        let mut work = false;
        // Something happened since the last settle (a timeout, an ICMP
        // error): settle before leaving.
        let mut unsettled = false;
        // The pass's clock, read when first needed.
        let mut clock: Option<Instant> = None;
        st.rx_more = false;
        // After a pass that found the socket empty, the next datagram is
        // most likely the one answer a thread waits for: ask for one.
        let probe = st.rx_idle;
        let mut got_any = false;
        // Read before any header is offered in this pass (see
        // `NiCore::intake_epoch`).
        let epoch = self.core.intake_epoch();
        if std::mem::replace(&mut st.intake_seen, epoch) != epoch {
            // The engine has room again: offer the streams it held back.
            let (ep, mut sink, _, _) = st.split(&self.core);
            ep.resume(&mut sink);
            work = true;
            unsettled = true;
        }
        for pass in 0..self.cfg.recv_batches_per_pass.max(1) {
            let want = if pass == 0 && probe {
                1
            } else {
                self.cfg.batch
            };
            let n = match st.rx.recv_up_to(fd, want) {
                Ok(n) => n,
                Err(e) if nal_sys::batch::is_icmp_error(&e) => {
                    // Reported for an earlier datagram; the receive itself
                    // did not happen. Learn which peer is gone, read again.
                    self.read_icmp(st);
                    work = true;
                    unsettled = true;
                    continue;
                }
                Err(e) => {
                    self.counters.recv_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "recvmmsg failed");
                    0
                }
            };
            if n == 0 {
                break;
            }
            work = true;
            got_any = true;
            let now = *clock.get_or_insert_with(Instant::now);
            {
                let (ep, mut sink, rx, peers) = st.split(&self.core);
                for k in 0..n {
                    let Some((data, from, _)) = rx.get(k) else {
                        break;
                    };
                    // A datagram from an unknown address is offered as from
                    // an unknown peer, so that the protocol counts it.
                    ep.handle_datagram(now, peers.sender(from, data), data, &mut sink);
                }
            }
            self.settle(st, now);
            unsettled = false;
            if n < want {
                break;
            }
            if want < self.cfg.batch {
                // The probe found something: let the caller look at it
                // first; more may be waiting, so do not sleep on it.
                st.rx_more = true;
                break;
            }
            if pass + 1 == self.cfg.recv_batches_per_pass.max(1) {
                st.rx_more = true;
            }
        }
        st.rx_idle = !got_any;
        if let Some(due) = st.ep.poll_timeout() {
            let now = *clock.get_or_insert_with(Instant::now);
            if due <= now {
                let (ep, mut sink, _, _) = st.split(&self.core);
                ep.handle_timeout(now, &mut sink);
                work = true;
                unsettled = true;
            }
        }
        // An idle pass (the common one while a thread waits) has nothing to
        // settle unless datagrams are still waiting for the socket.
        if unsettled
            || !st.tx.is_empty()
            || st.tx_blocked
            || st.held.is_some()
            || !st.responses.is_empty()
        {
            let now = *clock.get_or_insert_with(Instant::now);
            self.settle(st, now);
        }
        work
    }

    /// Read the ICMP errors queued on the socket. "Port unreachable" for a
    /// peer's address means no process receives there any more: the peer
    /// is declared dead at once, as a TCP reset would tell, instead of after
    /// the retransmission bound.
    fn read_icmp(&self, st: &mut State) {
        // The error comes back on the socket that sent: the receiving one,
        // or a peer's connected one (which reports the peer's receive
        // address, as the receiving one does).
        let mut errs = Vec::new();
        for fd in
            std::iter::once(self.sock.as_raw_fd()).chain(st.links.iter().map(|s| s.as_raw_fd()))
        {
            if let Err(e) = nal_sys::batch::read_error_queue(fd, &mut errs) {
                tracing::debug!(error = %e, "reading a socket's error queue failed");
            }
        }
        for (addr, errno) in errs {
            if errno != libc::ECONNREFUSED {
                continue;
            }
            let Some(peer) = st.peers.at(&addr) else {
                continue;
            };
            let (ep, mut sink, _, _) = st.split(&self.core);
            if ep.declare_dead(peer, &mut sink) {
                self.counters.icmp_deaths.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %process_id(peer), %addr, "port unreachable: peer declared dead");
            }
        }
        self.events(st);
    }

    /// If the protocol now has a timer earlier than the progress thread's
    /// wake-up, wake it so that it re-arms (only matters while it sleeps).
    fn nudge_progress_thread(&self, st: &State) {
        let Some(pt) = &self.pt else { return };
        let Some(d) = st.ep.poll_timeout() else {
            return;
        };
        let at = d.saturating_duration_since(self.epoch).as_nanos() as u64;
        let sleeping_until = self.pt_deadline.load(Ordering::SeqCst);
        // One wake per sleep: whoever moves the deadline to 0 wakes it.
        if at < sleeping_until
            && self
                .pt_deadline
                .compare_exchange(sleeping_until, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.counters
                .progress_thread_wakes
                .fetch_add(1, Ordering::Relaxed);
            pt.wake();
        }
    }

    /// How long to sleep at most: `cap`, or less if a protocol timer is due
    /// sooner. Zero means "do not sleep".
    fn nap(st: &State, cap: Duration) -> Duration {
        if st.rx_more || !st.responses.is_empty() {
            return Duration::ZERO;
        }
        match st.ep.poll_timeout() {
            Some(d) => d.saturating_duration_since(Instant::now()).min(cap),
            None => cap,
        }
    }

    /// One progress pass, framed by sending the messages of triggered
    /// operations: before it, those another thread's engine call released
    /// (so that a blocking pass does not sleep on them); after it, those
    /// the pass's own deliveries released, once the state lock is free
    /// (sending takes it).
    fn progress_once(&self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        self.core.send_triggered();
        let r = self.pass(poller, timeout);
        self.core.send_triggered();
        r
    }

    fn pass(&self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        let Some(cap) = timeout else {
            // Non-blocking: if another thread is driving the socket right
            // now, it is doing the work this call would do.
            let mut st = match self.state.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return Ok(()),
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            self.drive(&mut st);
            self.settle_lazy_acks(&mut st, false);
            self.nudge_progress_thread(&st);
            return Ok(());
        };
        let wait = {
            let mut st = lock(&self.state);
            // Only a thread about to sleep in the library counts as waiting:
            // spinning passes stay free of clock reads, and a computing
            // application (or an idle progress thread) probes nobody.
            st.ep.note_waiting(Instant::now());
            if self.drive(&mut st) {
                self.settle_lazy_acks(&mut st, false);
                self.nudge_progress_thread(&st);
                return Ok(());
            }
            self.settle_lazy_acks(&mut st, true);
            Self::nap(&st, cap)
        };
        if !wait.is_zero() {
            let mut events: Vec<Ready> = Vec::new();
            poller.poll(&mut events, Some(wait))?;
        }
        let mut st = lock(&self.state);
        if !wait.is_zero() {
            // It waited until now, however late it woke. Said before the
            // timers run, and as a sleep rather than a fresh note: a sleep
            // to the liveness watch's deadline that overshoots it (epoll
            // rounds up to whole milliseconds) would otherwise end the
            // waiting episode, restart the silence clock, and a waiter
            // sleeping from deadline to deadline would never detect a dead
            // peer.
            st.ep.note_slept(Instant::now());
        }
        self.drive(&mut st);
        self.settle_lazy_acks(&mut st, false);
        self.nudge_progress_thread(&st);
        Ok(())
    }

    /// Before the socket closes, keep driving it until every message sent
    /// has been acknowledged, for at most [`UdpConfig::linger`]: an eager
    /// send is reported complete when its payload is copied, so the process
    /// may be about to exit with datagrams still to retransmit (TCP's
    /// kernel does this after `close`; here nobody would).
    fn linger(&self) {
        let until = Instant::now() + self.cfg.linger;
        loop {
            let left = lock(&self.state).ep.unfinished_sends();
            if left == 0 {
                break;
            }
            if Instant::now() >= until {
                tracing::warn!(unfinished = left, "closing with unacknowledged sends");
                break;
            }
            if let Err(e) = self.progress_once(&self.app, Some(Duration::from_millis(1))) {
                tracing::debug!(error = %e, "progress while lingering failed");
                break;
            }
        }
    }

    // ----- the progress thread --------------------------------------------------

    fn progress_thread(self: Arc<Self>) {
        // Preempt a computing application promptly when woken (see
        // `nal_sys::sched`).
        if let Err(e) = nal_sys::sched::progress_thread_slice() {
            tracing::debug!(error = %e, "progress thread keeps the default time slice");
        }
        let Some(pt) = &self.pt else { return };
        let mut events: Vec<Ready> = Vec::new();
        while !self.gate.is_stopped() {
            if self.gate.stand_aside() {
                self.gate.park();
                continue;
            }
            // Messages of triggered operations the last drive released
            // (sending takes the state lock, so not inside it).
            self.core.send_triggered();
            let wait = {
                let mut st = lock(&self.state);
                if self.drive(&mut st) || self.core.triggered_pending() {
                    self.settle_lazy_acks(&mut st, false);
                    continue;
                }
                self.settle_lazy_acks(&mut st, true);
                let wait = Self::nap(&st, PT_SLEEP);
                let at = (Instant::now() + wait).saturating_duration_since(self.epoch);
                self.pt_deadline
                    .store(at.as_nanos() as u64, Ordering::SeqCst);
                wait
            };
            if !wait.is_zero() {
                if let Err(e) = pt.poll(&mut events, Some(wait)) {
                    tracing::error!(error = %e, "progress thread poll failed");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            self.pt_deadline.store(0, Ordering::SeqCst);
        }
    }
}

/// A copy of the first `n` bytes of the batch's free slot (the datagram the
/// protocol just wrote there, not committed).
fn slot_copy(tx: &mut SendBatch, n: usize) -> Vec<u8> {
    tx.slot()
        .map(|s| s[..n.min(s.len())].to_vec())
        .unwrap_or_default()
}
