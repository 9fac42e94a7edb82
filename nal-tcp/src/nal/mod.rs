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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
mod conn;
mod endpoint;
mod lifecycle;
mod lowat;
mod peer;
mod pt;
mod rx;
mod spin;
mod stats;
mod tx;

use conn::{Conn, ConnState, Phase, Rx};
pub use endpoint::TcpEndpoint;
use peer::{OutMsg, Peer, Tx};
pub use stats::TcpStats;
use stats::{bump, Stats};
use tx::Answer;

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
    /// Peers whose queue waits for a later pass ([`Tx::blocked`]): while
    /// any does, the application is not quiet to the progress thread (see
    /// `pt.rs`).
    tx_blocked: AtomicUsize,
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
        }
        .crowded(cfg.crowded);
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
            tx_blocked: AtomicUsize::new(0),
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
        self.inner.stats.snapshot()
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
            bump(&self.inner.stats.bulk_posts, 1);
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
        tracing::debug!(me = %self.inner.me, stats = ?self.inner.stats.snapshot(), "closing");
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
                        hold_until_ns: 0,
                        blocked: false,
                        staged_spare: Vec::new(),
                    }),
                    staged: Mutex::new(Vec::new()),
                    has_staged: AtomicBool::new(false),
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
        // A pass about to sleep sends everything: nothing would send the
        // held acknowledgments before it wakes.
        let hold_at = timeout.is_none().then_some(now_ns);
        let mut held = Vec::new();
        for t in later {
            if let Some(c) = self.conn(t) {
                if !self.flush_deferred(&c, hold_at) {
                    held.push(t);
                }
            }
        }
        if !held.is_empty() {
            lock(&self.flush_later).extend(held);
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
