//! The socket driver: one receiving UDP socket per network interface (plus
//! one connected sending socket per peer), the protocol endpoint behind a
//! lock, and the progress model of `nal-tcp` (a progress
//! thread that sleeps in the kernel, application threads that drive the
//! socket themselves while they wait, optimistic sends). Sending is in
//! [`tx`], passes and the progress thread in [`progress`].

mod progress;
mod tx;

use rustc_hash::FxHashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nal_sys::batch::{RecvBatch, SendBatch, Target};
use nal_sys::gate::ProgressGate;
use nal_sys::{Poller, ProgressMode};
use portals::{Nal, NiCore, Outbound, ProcessId, PtlError, SendToken};
use slab::Slab;
use socket2::{Domain, Protocol, Socket, Type};

use crate::addr::{Directory, PeerAddr};
use crate::config::{fit_windows, UdpConfig};
use crate::deliver::{peer_id, Deposits, EngineSink};
use crate::fault::FaultInjector;
use crate::proto::{Endpoint, PeerId};

/// Poller token of the socket.
const SOCKET: u64 = 0;
/// Longest the progress thread sleeps without looking at the clock (it is
/// woken earlier by traffic, by new timers and at shutdown).
const PT_SLEEP: Duration = Duration::from_millis(50);
/// Longest a sleeper waits before it retries datagrams a full send buffer
/// refused on a peer's connected socket: those sockets are not watched for
/// write space (see [`Inner::link`]). The kernel drains a send buffer at
/// the link's rate, so a blocked flush is retried a few times per buffer.
const TX_BLOCKED_RETRY: Duration = Duration::from_micros(50);
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
    /// Passes of the progress thread's loop: each follows a sleep (a park
    /// while application threads drive the socket, or a poll) or work left
    /// over from the pass before. On a rank whose progress thread shares a
    /// core with the application, each is a turn taken from it.
    pub progress_looks: u64,
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

    /// Set [`UdpConfig::crowded`] (the runtime decides it per host).
    pub fn set_crowded(&mut self, crowded: bool) {
        self.cfg.crowded = crowded;
    }

    /// Set [`UdpConfig::progress_nice`] (the runtime decides it per host).
    pub fn set_progress_nice(&mut self, steps: u32) {
        self.cfg.progress_nice = steps;
    }

    /// Set [`UdpConfig::progress_cpus`].
    pub fn set_progress_cpus(&mut self, cpus: nal_sys::affinity::ProgressCpus) {
        self.cfg.progress_cpus = cpus;
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
    /// A socket's send buffer was full: the receiving socket's write space
    /// wakes a sleeper, a connected socket's does not, so sleeps are cut
    /// to [`TX_BLOCKED_RETRY`] until a flush goes through.
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
    progress_looks: AtomicU64,
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
        let crowded = cfg.crowded;
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
            gate: ProgressGate::new(handback).crowded(crowded),
            epoch: Instant::now(),
            counters: Counters {
                optimistic_sends: AtomicU64::new(0),
                lazy_acks_carried: AtomicU64::new(0),
                send_errors: AtomicU64::new(0),
                recv_errors: AtomicU64::new(0),
                send_blocked: AtomicU64::new(0),
                icmp_deaths: AtomicU64::new(0),
                progress_thread_wakes: AtomicU64::new(0),
                progress_looks: AtomicU64::new(0),
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

    /// The configuration in force.
    pub fn config(&self) -> &UdpConfig {
        &self.inner.cfg
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
            progress_looks: g(&c.progress_looks),
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

    fn bulk_post_begin(&self) {
        if self.inner.pt.is_some() {
            self.inner.gate.post_begin();
        }
    }

    fn bulk_post_end(&self) {
        if self.inner.pt.is_some() {
            self.inner.gate.post_end();
        }
    }

    fn progresses_alone(&self) -> bool {
        self.inner.pt.is_some()
    }

    fn test_pass(&self) -> portals::Result<()> {
        // A wait that ends at once: the gate keeps the progress thread
        // parked for the hand-back delay after it, so an application that
        // tests more often than that reads its sockets itself, instead of
        // a progress thread on its core preempting its computation at every
        // arrival (two context switches) to do what the next test does.
        if self.inner.pt.is_none() {
            return self.progress(None);
        }
        self.inner.gate.as_wait(|| self.progress(None))
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
        // What a lossy run cost, for whoever asks (`PTL_LOG=nal_udp=debug`,
        // and `PTL_LOG_FILE` where a tool keeps the rank's stderr).
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
    /// registered with both pollers for its errors (ICMP) only: it never
    /// receives (nobody sends to the source port), and watching it for
    /// write space would wake a sleeping thread for every datagram sent
    /// through it. The send releases the datagram's buffer space at once on
    /// the loopback, and each release is a write-space edge: the progress
    /// thread of a rank receiving 100 KB messages in COMB (post-work-wait,
    /// 1 ms) woke for the datagrams it sent itself: 7.35–7.51 context
    /// switches per message against 5.09–5.35 without. A flush that finds the
    /// buffer full is retried after [`TX_BLOCKED_RETRY`] instead.
    fn link(&self, source: &Socket, to: SocketAddr) -> io::Result<Socket> {
        let s = source_port_socket(socket_addr(source)?)?;
        nal_sys::request_socket_buffers(s.as_raw_fd(), 0, self.cfg.send_buffer)?;
        if self.cfg.icmp_peer_death {
            nal_sys::batch::enable_error_queue(s.as_raw_fd(), to.is_ipv6())?;
        }
        s.connect(&to.into())?;
        self.app.register(s.as_raw_fd(), SOCKET, false)?;
        if let Some(pt) = &self.pt {
            if let Err(e) = pt.register(s.as_raw_fd(), SOCKET, false) {
                self.app.deregister(s.as_raw_fd(), SOCKET);
                return Err(e);
            }
        }
        Ok(s)
    }
}
