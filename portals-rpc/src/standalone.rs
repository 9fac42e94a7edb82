//! Standalone mode: a long-lived server that clients dial as they come and
//! go, outside any `ptlrun` job (`--listen` / `--connect`), over TCP.
//!
//! This needs no change to the transport: `nal-tcp` already admits a
//! connection from a process it was not told about, once its handshake
//! proves the job key and names a concrete process id other than the
//! server's own (its `on_hello` adds the peer then), and it answers on
//! that connection. So:
//!
//! * [`listen`] brings up a network interface whose id is [`SERVER_ID`] on
//!   a fixed address, knowing no peer;
//! * [`dial`] brings up a client's interface, on an ephemeral port, that
//!   knows only the server. The client's id must be unique among the
//!   server's clients: it is drawn at random (nid) beside the OS process id
//!   (pid). Two live clients with the same id would take each other's
//!   connection over; with 2³¹ random nids per OS pid that is left to
//!   chance.
//!
//! The job key is the shared secret: a client with another key is refused
//! in the handshake and never reaches the server's engine (its calls fail
//! with [`crate::RpcError::PeerFailed`]). As everywhere in portals-rs the
//! key travels in clear; it keeps strangers out, not eavesdroppers.
//!
//! A departed client costs the server a few words for good: its entry in
//! the transport's peer table and in the engine's list of failed peers
//! (neither has a way to forget a peer yet). Its reply cache is freed.

use std::net::SocketAddr;
use std::sync::Arc;

pub use nal_tcp::ProgressMode;
use nal_tcp::{TcpConfig, TcpEndpoint};
use portals::{Nal, NetworkInterface, NiConfig, ProcessId, PtlError};
use rand::Rng;

/// The process id of a standalone server.
pub const SERVER_ID: ProcessId = ProcessId::new(0, 0);

/// Nids of standalone clients are drawn above this, clear of the ranks of
/// a `ptlrun` job (whose ids are `(rank, 0)`).
const CLIENT_NID_BASE: u32 = 1 << 31;

/// How an interface waits and moves data: a client's ([`dial_with`]) or a
/// server's ([`listen_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DialOptions {
    /// A progress thread, or progress only while a caller waits
    /// ([`ProgressMode::Poll`]: a client that only ever waits for its
    /// calls loses nothing, and many clients on few cores save a thread
    /// each).
    pub progress: ProgressMode,
    /// A waiting caller yields the core between its polls
    /// ([`NiConfig::wait_yield`]): for more waiting threads than cores.
    pub wait_yield: bool,
}

fn bring_up(
    id: ProcessId,
    job_key: u64,
    cfg: TcpConfig,
    peers: Vec<(ProcessId, SocketAddr)>,
    wait_yield: bool,
) -> Result<(NetworkInterface, SocketAddr), PtlError> {
    let ep = TcpEndpoint::bind(cfg).map_err(|e| PtlError::Nal(e.to_string()))?;
    let addr = ep.local_addr();
    let ni_cfg = NiConfig {
        wait_yield,
        ..NiConfig::new(id, job_key)
    };
    let ni = NetworkInterface::init(ni_cfg, |core| {
        ep.start(core, peers).map(|n| n as Arc<dyn Nal>)
    })?;
    Ok((ni, addr))
}

/// A server's interface listening on `bind` (port 0 picks one; the address
/// is returned) with id [`SERVER_ID`], admitting clients with `job_key`.
pub fn listen(bind: SocketAddr, job_key: u64) -> Result<(NetworkInterface, SocketAddr), PtlError> {
    listen_with(bind, job_key, DialOptions::default())
}

/// [`listen`] with a choice of how the interface waits and moves data.
/// With [`ProgressMode::Poll`] the service threads waiting for requests
/// move the data (and accept new clients), with no progress thread to hand
/// requests over. For the object store on 2 cores that moved bulk
/// transfers no faster, small gets slower and small puts faster than the
/// default (docs/PERFORMANCE.md, stop 42).
pub fn listen_with(
    bind: SocketAddr,
    job_key: u64,
    opts: DialOptions,
) -> Result<(NetworkInterface, SocketAddr), PtlError> {
    let cfg = TcpConfig {
        bind,
        progress: opts.progress,
        ..TcpConfig::default()
    };
    bring_up(SERVER_ID, job_key, cfg, Vec::new(), opts.wait_yield)
}

/// A client's interface that can reach the server at `server` (whose id is
/// [`SERVER_ID`]), presenting `job_key`. Connects on the first call.
pub fn dial(server: SocketAddr, job_key: u64) -> Result<NetworkInterface, PtlError> {
    dial_with(server, job_key, DialOptions::default())
}

/// [`dial`] with a choice of how the interface waits and moves data.
pub fn dial_with(
    server: SocketAddr,
    job_key: u64,
    opts: DialOptions,
) -> Result<NetworkInterface, PtlError> {
    let nid = rand::thread_rng().gen_range(CLIENT_NID_BASE..u32::MAX);
    let id = ProcessId::new(nid, std::process::id());
    // The client listens too (the transport is symmetric); only on the
    // loopback when the server is there.
    let local = match server {
        SocketAddr::V4(a) if a.ip().is_loopback() => SocketAddr::from(([127, 0, 0, 1], 0)),
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(a) if a.ip().is_loopback() => {
            SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], 0))
        }
        SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    };
    let cfg = TcpConfig {
        bind: local,
        progress: opts.progress,
        ..TcpConfig::default()
    };
    Ok(bring_up(id, job_key, cfg, vec![(SERVER_ID, server)], opts.wait_yield)?.0)
}
