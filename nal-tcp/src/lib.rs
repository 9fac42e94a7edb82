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
//!   its connection.

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
    /// How long connecting plus handshaking may take.
    pub connect_timeout: Duration,
    /// `TCP_USER_TIMEOUT`: how long sent data may stay unacknowledged before
    /// the connection (and the peer) is declared failed.
    pub user_timeout: Option<Duration>,
    /// How long the progress thread keeps standing aside after the last
    /// application thread left a wait. Applications that call the library
    /// in a tight loop keep the sockets; one that goes off to compute hands
    /// them back to the progress thread within this delay.
    pub handback: Duration,
    /// Bytes read from one connection before moving on to others.
    pub read_budget: usize,
    /// A payload remainder at least this large is read from the socket
    /// straight into the memory descriptor instead of through the
    /// connection's buffer.
    pub direct_read_min: usize,
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
            user_timeout: Some(Duration::from_secs(30)),
            handback: Duration::from_micros(200),
            read_budget: 1 << 20,
            direct_read_min: 16 << 10,
        }
    }
}
