//! # nal-tcp
//!
//! The TCP network abstraction layer for [`portals`]: one TCP connection per
//! pair of processes, Portals headers framed on the stream, payloads read
//! from the socket straight into the matched memory descriptor, and progress
//! that does not depend on the application calling the library.
//!
//! * [`TcpEndpoint::bind`] opens the listening socket (so its address can be
//!   published during bootstrap); [`TcpEndpoint::start`] turns it into a
//!   [`TcpNal`] serving one [`portals::NetworkInterface`].
//! * **Progress.** In [`ProgressMode::Thread`] a progress thread blocks in
//!   the kernel (epoll or io_uring, [`Backend`]) and performs matching,
//!   deposits, acknowledgments, replies and gets while the application
//!   computes. A thread that *waits* inside the library (an event-queue wait)
//!   drives the sockets itself — polling for a bounded spin window, then
//!   sleeping in the kernel — and the progress thread stands aside while it
//!   does, so a round trip never pays a sleep→wake hand-off between threads.
//!   [`ProgressMode::Poll`] has no thread: progress happens only inside
//!   library calls, for comparison.
//! * **Optimistic send.** The calling thread writes a message directly when
//!   the connection has nothing queued; otherwise it is queued and written on
//!   writability by whichever thread drives progress. Reads and writes are
//!   budgeted per connection so one large transfer cannot starve others.
//! * **Connections** are set up lazily on first send, or eagerly at start
//!   ([`ConnectMode`]). A handshake proves the job key and exchanges process
//!   ids; simultaneous connects resolve to the connection initiated by the
//!   smaller process id. A wrong key or malformed handshake closes the
//!   connection and is counted ([`TcpStats`]); such a peer never reaches the
//!   engine.
//! * **Failures.** When a connection breaks, queued sends complete with
//!   [`portals::FailType::Unreachable`], deposits in progress abort, and
//!   operations waiting for an acknowledgment or reply from that peer fail.
//!   The next send to the peer connects again. A malformed frame closes only
//!   its connection. A new connection from a peer that still has one
//!   replaces it the same way: the peer gave the old one up, so what was in
//!   flight on it fails; a message is never continued on another
//!   connection. A peer with a progress thread that stays silent for
//!   [`TcpConfig::peer_timeout`] (stopped, hung) is declared failed too;
//!   kernel keepalive ([`TcpConfig::keepalive`]) and `TCP_USER_TIMEOUT`
//!   cover dead hosts and unacknowledged data.

#![warn(missing_docs)]

mod handshake;
mod nal;

use std::net::SocketAddr;
use std::time::Duration;

pub use nal::{TcpEndpoint, TcpNal, TcpStats};
pub use nal_sys::{Backend, ProgressMode};

/// When connections are established.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ConnectMode {
    /// On the first send to a peer.
    #[default]
    Lazy,
    /// At start, to every known peer with a larger process id (so no two
    /// processes ever connect to each other simultaneously).
    Eager,
}

/// Configuration of a TCP NAL.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Progress thread or polling.
    pub progress: ProgressMode,
    /// epoll or io_uring.
    pub backend: Backend,
    /// Lazy or eager connection set-up.
    pub connect: ConnectMode,
    /// Disable Nagle's algorithm (`TCP_NODELAY`). On by default: Portals
    /// messages are latency-sensitive and already batched by the NAL.
    pub nodelay: bool,
    /// `SO_SNDBUF`, if set.
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF`, if set.
    pub recv_buffer: Option<usize>,
    /// How long connecting plus handshaking may take, for connections this
    /// process opens.
    pub connect_timeout: Duration,
    /// How long an accepted connection may stay open without a complete
    /// handshake before it is closed. A peer sends its Hello right after
    /// connecting; a connection that says nothing only holds a descriptor.
    pub handshake_timeout: Duration,
    /// Accepted connections that may wait for their handshake at once;
    /// beyond this the oldest waiting one is closed. Bounds the descriptors
    /// a flood of idle connections can take. The oldest, not the newest:
    /// a real peer finishes its handshake within one round trip, so only a
    /// flood faster than that can crowd it out, while refusing newcomers
    /// would let a few hundred idle connections lock every peer out for a
    /// whole [`handshake_timeout`](Self::handshake_timeout).
    pub max_pending_handshakes: usize,
    /// `TCP_USER_TIMEOUT`: how long sent data may stay unacknowledged before
    /// the connection (and the peer) is declared failed.
    pub user_timeout: Option<Duration>,
    /// How long the progress thread keeps standing aside after the last
    /// application thread left a wait. Applications that call the library
    /// in a tight loop keep the sockets; one that goes off to compute hands
    /// them back to the progress thread within this delay.
    pub handback: Duration,
    /// While the progress thread stands aside in the hand-back delay and
    /// no application thread has waited in the library for a moment (it
    /// computes), the progress thread sleeps in its poller instead of on
    /// the gate, and takes what arrives at once instead of after the delay;
    /// the end of a wait it found under way wakes it to start that watch.
    /// On by default here; the runtime turns it on only where each rank's
    /// progress thread has a core to itself (`PTL_TCP_TAKEOVER=auto`: twice
    /// as many cores as ranks on the host, ranks not bound to one CPU).
    /// Elsewhere each arrival during a compute step preempts the
    /// application: on 2 cores the `cg`, `halo` and `coll` kernels ran
    /// 27–52 % slower with it on 2 bound ranks, 40–50 % on 4.
    pub early_takeover: bool,
    /// Progress thread only: how many nice steps it runs below (favoured
    /// over) the application, so that after moving a payload it may still
    /// preempt the computation for the next one (see `nal_sys::sched`;
    /// [`nal_sys::sched::DEFAULT_NICE_STEPS`] by default, 0 for none). The
    /// runtime asks for none on a host that runs more ranks than it has
    /// cores (`PTL_PROGRESS_NICE=auto`), where favoured progress threads
    /// take the cores other ranks compute on.
    pub progress_nice: u32,
    /// Progress thread only: the CPUs it may run on (see
    /// [`nal_sys::affinity::ProgressCpus`]; by default the launcher's, so
    /// that a rank bound to one core does not move its arrivals on the
    /// core it computes on). `PTL_PROGRESS_CPUS` sets it under the runtime.
    pub progress_cpus: nal_sys::affinity::ProgressCpus,
    /// Progress thread only: this host runs more ranks of the job than it
    /// has cores, so a look of the progress thread that finds an
    /// application thread waiting in the library naps
    /// [`nal_sys::gate::QUIET_HANDBACKS`] hand-back delays instead of one
    /// (see `nal_sys::gate::ProgressGate::crowded`). Off by default here;
    /// the runtime sets it from the ranks' host identities and core
    /// counts, as for `PTL_WAIT_YIELD=auto`.
    pub crowded: bool,
    /// Bytes read from one connection before moving on to others.
    pub read_budget: usize,
    /// A payload remainder at least this large is read from the socket
    /// straight into the memory descriptor instead of through the
    /// connection's buffer. Shorter payloads (and the part of a payload that
    /// arrived in the same read as its header) are copied once from that
    /// buffer: one `read` then serves several small messages, which costs
    /// less than the copy (see `docs/ARCHITECTURE.md`, nal-tcp).
    pub direct_read_min: usize,
    /// While a payload of at least [`direct_read_min`](Self::direct_read_min)
    /// is read straight into its descriptor and the socket runs dry, set
    /// the socket's receive low-water mark (`SO_RCVLOWAT`) to the rest of
    /// the payload (at most [`read_budget`](Self::read_budget)), so that a
    /// sleeping progress thread wakes once per message instead of once per
    /// arriving segment; put back to one byte when the payload is in. On by
    /// default; off (`PTL_TCP_RCVLOWAT=0` where the runtime builds the
    /// configuration) to measure what it saves.
    pub wake_per_message: bool,
    /// Bytes written to one connection before the writing thread moves on
    /// to other connections and events; the rest of the queue is written on
    /// the next pass. Keeps one large transfer to a fast reader from
    /// starving the other peers (their acknowledgments, replies, incoming
    /// requests). 0 means no limit.
    pub write_budget: usize,
    /// Kernel keepalive (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`,
    /// `TCP_KEEPCNT`): finds a dead host or a broken path on an idle
    /// connection. `None` turns keepalive off. The kernel answers probes for
    /// a process that is stopped, so this does not detect a hung or stopped
    /// peer; [`peer_timeout`](Self::peer_timeout) does.
    pub keepalive: Option<Keepalive>,
    /// Declare a peer failed when it has sent nothing for this long, not
    /// even the answer to a liveness probe (sent after half this time of
    /// silence). Operations in flight to it then fail instead of waiting
    /// forever; the next send connects again. Applies only to peers that
    /// run a progress thread (they say so in the handshake): a peer in
    /// [`ProgressMode::Poll`] legitimately stays silent while it computes.
    /// `None` never declares a peer dead for silence (a debugger stopping a
    /// process for long is the usual reason to turn it off).
    pub peer_timeout: Option<Duration>,
}

/// TCP keepalive timing (see [`TcpConfig::keepalive`]). With the defaults a
/// peer host that vanished is noticed after about `idle + count × interval`
/// = 30 s of silence, the same as [`TcpConfig::user_timeout`] for
/// unacknowledged data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe (`TCP_KEEPIDLE`); default 15 s.
    pub idle: Duration,
    /// Time between probes (`TCP_KEEPINTVL`); default 5 s.
    pub interval: Duration,
    /// Unanswered probes before the connection fails (`TCP_KEEPCNT`);
    /// default 3.
    pub count: u32,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive {
            idle: Duration::from_secs(15),
            interval: Duration::from_secs(5),
            count: 3,
        }
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            progress: ProgressMode::Thread,
            backend: Backend::Epoll,
            connect: ConnectMode::Lazy,
            nodelay: true,
            send_buffer: None,
            recv_buffer: None,
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            max_pending_handshakes: 256,
            user_timeout: Some(Duration::from_secs(30)),
            handback: Duration::from_micros(200),
            early_takeover: true,
            progress_nice: nal_sys::sched::DEFAULT_NICE_STEPS,
            progress_cpus: nal_sys::affinity::ProgressCpus::Launcher,
            crowded: false,
            read_budget: 1 << 20,
            direct_read_min: 16 << 10,
            wake_per_message: true,
            write_budget: 1 << 20,
            keepalive: Some(Keepalive::default()),
            peer_timeout: Some(Duration::from_secs(30)),
        }
    }
}
