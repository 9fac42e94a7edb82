//! Configuration of the UDP transport: the socket, who drives it, and the
//! protocol tunables.

use std::net::SocketAddr;
use std::time::Duration;

use nal_sys::{Backend, ProgressMode};

use crate::fault::FaultConfig;
use crate::proto;

/// Configuration of a UDP NAL.
#[derive(Clone, Debug)]
pub struct UdpConfig {
    /// Address to bind; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Progress thread or polling.
    pub progress: ProgressMode,
    /// What the progress thread waits in (epoll or io_uring).
    pub backend: Backend,
    /// The reliability protocol's tunables. With
    /// [`size_windows`](Self::size_windows) the driver lowers the receive
    /// window and pull depth to what the socket buffer holds.
    ///
    /// Its [`peer_timeout`](proto::Config::peer_timeout) bounds how long a
    /// rank waiting on a dead peer takes to learn it when no launcher
    /// watches the job (ranks started by hand or under another launcher):
    /// while a thread sleeps in the library, peers silent for a sixteenth
    /// of it are probed, and one silent for all of it is declared dead, so
    /// that operations towards it fail (`PeerFailed` in MPI). A peer whose
    /// process is gone usually answers the first probe with ICMP "port
    /// unreachable" and is declared dead at once
    /// ([`icmp_peer_death`](Self::icmp_peer_death)). The default, 10 s,
    /// is what jobs started by the runtime take from the
    /// `PTL_UDP_PEER_TIMEOUT` environment variable (milliseconds, `0` turns
    /// the watch off; see [`parse_peer_timeout`]). With [`ProgressMode::Poll`] a
    /// rank answers probes only inside library calls: keep the timeout
    /// above its longest computation between them. The default also
    /// shortens the protocol's ack delay, tail probe slack and
    /// retransmission floor for loopback and LAN round trips, which is
    /// what a lost datagram costs a blocking exchange.
    pub protocol: proto::Config,
    /// `SO_RCVBUF` to ask for (past `net.core.rmem_max` when the process may).
    /// Every datagram in flight towards this process waits here until the
    /// progress thread reads it; a datagram that finds it full is lost and
    /// costs a retransmission.
    pub recv_buffer: usize,
    /// `SO_SNDBUF` to ask for.
    pub send_buffer: usize,
    /// Fit the protocol's flow-control windows to the receive buffer the
    /// kernel granted, shared among the peers known at start, so that a
    /// full window of every peer never overflows it.
    pub size_windows: bool,
    /// Datagrams moved per `recvmmsg`/`sendmmsg` call.
    pub batch: usize,
    /// Batches received per progress pass before timers and sends get a
    /// turn.
    pub recv_batches_per_pass: usize,
    /// How long the progress thread keeps standing aside after the last
    /// application thread left a wait (as in `nal-tcp`).
    pub handback: Duration,
    /// Declare a peer dead as soon as the network answers a datagram to it
    /// with ICMP "port unreachable" (the process is gone, its port closed),
    /// rather than after the retransmission bound. Turn off where ICMP can
    /// be forged by someone outside the job, or arrives for transient
    /// reasons.
    pub icmp_peer_death: bool,
    /// How long closing the transport waits at most for the peers to
    /// acknowledge what was sent (see [`crate::UdpNal`]'s shutdown).
    pub linger: Duration,
    /// Send to each peer through its own socket, connected to the peer and
    /// bound to one source port shared by all of them (`SO_REUSEPORT`),
    /// instead of through the receiving socket: a connected socket reuses
    /// the route the kernel cached at `connect`, where an unconnected one
    /// looks it up for every datagram (0.4–0.5 µs of an 8-byte hop on this
    /// machine's loopback). Peers must then know this process's
    /// [`PeerAddr`](crate::PeerAddr) ([`UdpEndpoint::addr`](crate::UdpEndpoint::addr)),
    /// not only where it receives.
    pub connected_sends: bool,
    /// Inject faults into outgoing datagrams (tests; `PTL_UDP_FAULT`).
    pub fault: Option<FaultConfig>,
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
}

/// Environment variable overriding the default
/// [`peer_timeout`](proto::Config::peer_timeout), in milliseconds (`0`:
/// no liveness watch).
pub const PEER_TIMEOUT_ENV: &str = "PTL_UDP_PEER_TIMEOUT";

/// A `PTL_UDP_PEER_TIMEOUT` value that is not a number of milliseconds the
/// protocol accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{PEER_TIMEOUT_ENV}={value:?}: expected milliseconds, 0 (off) or at least 16")]
pub struct PeerTimeoutError {
    value: String,
}

/// Parse a `PTL_UDP_PEER_TIMEOUT` value: milliseconds, `0` for none.
pub fn parse_peer_timeout(value: &str) -> Result<Option<Duration>, PeerTimeoutError> {
    let err = || PeerTimeoutError {
        value: value.to_string(),
    };
    match value.trim().parse::<u64>().map_err(|_| err())? {
        0 => Ok(None),
        ms if ms >= 16 => Ok(Some(Duration::from_millis(ms))),
        _ => Err(err()),
    }
}

/// A `PTL_UDP_COPY_ABOVE` / `--udp-copy-above` value that is neither `off`
/// nor a percentage in (0, 100].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: expected a loss percentage in (0, 100] (e.g. 2 or 0.5) or off")]
pub struct CopyAboveError {
    value: String,
}

/// Parse a redundant-copy threshold ([`proto::Config::copy_above_loss_ppm`]):
/// a loss percentage such as `2` or `0.5`, or `off` (never copy).
pub fn parse_copy_above(value: &str) -> Result<Option<u32>, CopyAboveError> {
    let v = value.trim();
    if v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let pct: f64 = v.parse().map_err(|_| CopyAboveError {
        value: value.to_string(),
    })?;
    if !(pct > 0.0 && pct <= 100.0) {
        return Err(CopyAboveError {
            value: value.to_string(),
        });
    }
    // At least 1 ppm: a tiny positive percentage must not round to "off".
    Ok(Some(((pct * 10_000.0).round() as u32).max(1)))
}

/// The peer timeout `PTL_UDP_PEER_TIMEOUT` asks for: `Ok(None)` when it is
/// unset, `Ok(Some(None))` for `0` (no watch).
pub fn peer_timeout_from_env() -> Result<Option<Option<Duration>>, PeerTimeoutError> {
    match std::env::var(PEER_TIMEOUT_ENV) {
        Ok(v) => parse_peer_timeout(&v).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(PeerTimeoutError {
            value: v.to_string_lossy().into_owned(),
        }),
    }
}

impl Default for UdpConfig {
    fn default() -> Self {
        let protocol = proto::Config {
            // The driver never refuses a send for queue length: a Portals
            // send that cannot be queued could only fail.
            max_queued_sends: 1 << 24,
            // Loss recovery tuned for loopback and LAN round trips of tens
            // of microseconds (issue 23): a blocking exchange that loses its
            // only datagram waits for the tail loss probe, twice the path's
            // round trip plus the ack delay plus the slack, so these set
            // what each loss costs (about 150 µs here instead of the
            // protocol's conservative 650 µs; the retransmission timer, for
            // a probe that is lost too, 1 ms instead of 2). A peer
            // descheduled for longer costs a spurious probe or
            // retransmission: one datagram, never a death.
            ack_delay: Duration::from_micros(50),
            tail_probe_slack: Some(Duration::from_micros(50)),
            rto_min: Duration::from_millis(1),
            ..proto::Config::default()
        };
        UdpConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            progress: ProgressMode::Thread,
            backend: Backend::Epoll,
            protocol,
            recv_buffer: 16 << 20,
            send_buffer: 4 << 20,
            size_windows: true,
            batch: 32,
            recv_batches_per_pass: 8,
            handback: Duration::from_micros(200),
            icmp_peer_death: true,
            linger: Duration::from_secs(5),
            connected_sends: true,
            fault: None,
            progress_nice: nal_sys::sched::DEFAULT_NICE_STEPS,
            progress_cpus: nal_sys::affinity::ProgressCpus::Launcher,
            crowded: false,
        }
    }
}

/// Kernel memory one received datagram of `len` bytes occupies in a socket
/// receive buffer (its `truesize`): the payload allocation rounded up to a
/// power of two, plus about a kilobyte of socket-buffer bookkeeping.
/// Measured on Linux loopback: 65 000-byte datagrams cost 66 052 bytes each,
/// 8 972-byte ones 16 644, 1 472-byte ones 2 304.
pub fn datagram_truesize(len: usize) -> usize {
    (len + 320).next_power_of_two() + 1024
}

/// Lower `cfg`'s receive window and pull depth so that `senders` peers, each
/// with a full window plus its pull blocks in flight, fit in `rcvbuf` bytes
/// of socket buffer (as the kernel reports it). Values are only ever
/// lowered, never below what keeps the protocol moving (4 datagrams of
/// window, one pull block of 4 fragments).
pub fn fit_windows(cfg: &mut proto::Config, rcvbuf: usize, senders: usize) {
    let per_datagram = datagram_truesize(cfg.max_datagram);
    let capacity = rcvbuf / per_datagram;
    let budget = (capacity / senders.max(1)) as u32;
    let pull = cfg.pull_blocks_in_flight * cfg.pull_block_frags;
    if cfg.recv_window + pull <= budget {
        return;
    }
    // A third of the budget for pulls, the rest for the sequenced window.
    let pull_budget = (budget / 3).max(4);
    if cfg.pull_block_frags > pull_budget {
        cfg.pull_block_frags = pull_budget.clamp(4, 64);
    }
    cfg.pull_blocks_in_flight =
        (pull_budget / cfg.pull_block_frags).clamp(1, cfg.pull_blocks_in_flight);
    let used = cfg.pull_blocks_in_flight * cfg.pull_block_frags;
    cfg.recv_window = budget.saturating_sub(used).clamp(4, cfg.recv_window);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_timeout_values() {
        assert_eq!(parse_peer_timeout("0"), Ok(None));
        assert_eq!(
            parse_peer_timeout(" 2500 "),
            Ok(Some(Duration::from_millis(2500)))
        );
        for bad in ["", "10", "-5", "1s", "x"] {
            assert!(parse_peer_timeout(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn truesize_matches_what_the_kernel_charged() {
        // Figures measured on loopback (see the function's docs), with the
        // estimate never below them and never more than 50 % above.
        for (len, measured) in [(65_000, 66_052), (8_972, 16_644), (1_472, 2_304)] {
            let est = datagram_truesize(len);
            assert!(
                est >= measured && est <= measured * 3 / 2,
                "{len}: {est} vs {measured}"
            );
        }
    }

    #[test]
    fn windows_fit_the_buffer_and_only_shrink() {
        let base = proto::Config::default();
        let mut big = base.clone();
        fit_windows(&mut big, 1 << 30, 3);
        assert_eq!(big, base, "a huge buffer changes nothing");

        for (rcvbuf, senders) in [(8 << 20, 1), (8 << 20, 3), (212_992, 1), (1 << 20, 7)] {
            let mut c = base.clone();
            fit_windows(&mut c, rcvbuf, senders);
            c.validate().unwrap();
            let inflight = (c.recv_window + c.pull_blocks_in_flight * c.pull_block_frags) as usize;
            let fits = inflight * senders * datagram_truesize(c.max_datagram) <= rcvbuf;
            let floor = c.recv_window == 4 && c.pull_blocks_in_flight == 1;
            assert!(fits || floor, "{rcvbuf}/{senders}: {c:?}");
            assert!(c.recv_window <= base.recv_window);
            assert!(c.pull_blocks_in_flight <= base.pull_blocks_in_flight);
            assert!(c.pull_block_frags <= base.pull_block_frags);
        }
    }
}
