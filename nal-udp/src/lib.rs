//! # nal-udp
//!
//! The UDP network abstraction layer for [`portals`]. Its core is
//! [`proto`], a sans-I/O reliability protocol: per-peer sequencing with
//! cumulative and selective acks, RTT-estimated retransmission, window flow
//! control, and Open-MX-style size classes where large messages are pulled
//! by the receiver once it knows how much it wants.
//!
//! The socket driver ([`UdpEndpoint`], [`UdpNal`]) runs that core over one
//! non-blocking receiving UDP socket per network interface:
//!
//! * **Receive.** Datagrams are read in batches (`recvmmsg`); the first
//!   fragment of each message is matched by the engine, and every fragment
//!   is copied from the receive batch straight into the matched memory
//!   descriptor at its offset (one copy, no reassembly buffer). A large
//!   message is pulled only up to the length the descriptor accepts.
//! * **Send.** Eager payloads are copied into the protocol at `send` (the
//!   initiator's memory is free at once); large ones are read from the
//!   descriptor while the receiver pulls them. Datagrams leave in batches
//!   (`sendmmsg`), written by the calling thread when it can (optimistic
//!   send), through one connected socket per peer so that the kernel skips
//!   its per-datagram route lookup ([`UdpConfig::connected_sends`]; peers
//!   therefore know each other by a [`PeerAddr`]).
//! * **Progress** follows `nal-tcp`: a progress thread sleeps in epoll or
//!   io_uring and runs the protocol's timers; a thread waiting inside the
//!   library drives the socket itself and the progress thread stands aside.
//!   [`ProgressMode::Poll`] has no thread.
//! * **Flow control fits the socket.** The receive window and pull depth
//!   are lowered to what the granted `SO_RCVBUF` holds for every peer at
//!   once ([`UdpConfig::size_windows`]), so a burst from all peers does not
//!   overflow the kernel buffer.
//! * **Failures.** A peer silent through the protocol's retransmission bound
//!   is declared dead: its pending operations complete with
//!   [`portals::FailType::Unreachable`], deposits in progress abort, and
//!   the engine learns of it ([`portals::Engine::peer_failed`]). While a
//!   thread sleeps in the library, silent peers are probed, so that a rank
//!   that only waits on a dead peer learns within
//!   [`proto::Config::peer_timeout`] (`PTL_UDP_PEER_TIMEOUT`).

//! * **Fault injection** ([`FaultConfig`]) drops, duplicates and reorders
//!   outgoing datagrams with a seed, for tests of the whole stack.

#![warn(missing_docs)]

mod addr;
mod config;
mod deliver;
pub mod fault;
#[doc(hidden)]
pub mod fuzzing;
mod nal;
pub mod proto;

pub use addr::{BadPeerAddr, PeerAddr};
pub use config::{
    datagram_truesize, fit_windows, parse_copy_above, parse_peer_timeout, peer_timeout_from_env,
    CopyAboveError, PeerTimeoutError, UdpConfig, PEER_TIMEOUT_ENV,
};
pub use fault::{FaultConfig, FaultParseError};
pub use nal::{UdpEndpoint, UdpNal, UdpStats};
pub use nal_sys::{Backend, ProgressMode};

pub use proto::{
    Config, ConfigError, EagerCompletion, Endpoint, Event, MsgId, OutPayload, PayloadSource,
    PeerId, SendError, Sink, Stats, HEADER_LEN,
};
