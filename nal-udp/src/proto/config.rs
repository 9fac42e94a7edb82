//! Protocol configuration and the datagram layout it implies.

use std::time::Duration;

use super::wire::{COMMON_LEN, FRAG_FIXED, MAX_SACK_BITS, MSG_FIXED, PULL_DATA_FIXED};

/// Largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// Smallest `max_datagram` accepted: room for headers plus a useful payload.
pub const MIN_DATAGRAM: usize = 512;
/// Most continuation fragments one eager message may have. Bounds the
/// per-message reassembly bitmap a peer can make a receiver allocate.
pub const MAX_EAGER_FRAGS: u64 = 1 << 16;

/// When a `send` of a tiny, small or medium message reports
/// [`Event::SendComplete`](super::Event::SendComplete).
///
/// Eager payloads are always copied into the endpoint at `send`, so the
/// caller's memory is free as soon as `send` returns; the choice is only
/// about what the completion *means*. Large messages always complete when
/// the receiver's completion notice arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EagerCompletion {
    /// Report `ok: true` from inside `send`. Lowest latency for the caller; a
    /// message the peer never receives (because it died) is not reported as
    /// failed.
    #[default]
    OnSend,
    /// Report `ok: true` when the cumulative ack covers every fragment, i.e.
    /// the receiver has started the message and handed its bytes to its
    /// sink (unless it is holding back in-order processing for lack of pull
    /// capacity, which only a peer allowing more large messages in flight
    /// than it does can cause); `ok: false` if the peer is declared dead
    /// first. Costs up to an ack delay of latency per send.
    OnAck,
}

/// Tunables of the protocol. [`Config::default`] fits loopback; set
/// [`max_datagram`](Config::max_datagram) to `1472` or `8972` for
/// 1500- or 9000-byte Ethernet MTUs (IPv4).
///
/// Every endpoint of a job should use the same values: a peer sizes what it
/// sends by its own configuration, and a receiver drops datagrams larger than
/// its `max_datagram`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest datagram (UDP payload) put on the wire, headers included.
    pub max_datagram: usize,
    /// Messages with a payload up to this many bytes are sent eagerly (one
    /// `Msg` datagram, then `Frag`s); longer ones by rendezvous and
    /// receiver-driven pull. Default 128 KiB: a receiver that does not want
    /// an unexpected message wastes at most this much transfer, and an eager
    /// message of this size is 2–3 loopback datagrams or ~90 at MTU 1500.
    pub eager_max: u64,
    /// Sequenced datagrams this endpoint keeps in flight to one peer at most
    /// (the peer's advertised window may be smaller).
    pub send_window: u32,
    /// Sequenced datagrams this endpoint accepts from one peer beyond the
    /// last one processed in order; bounds out-of-order buffering to
    /// `recv_window · max_datagram` bytes per peer. At most 512.
    pub recv_window: u32,
    /// Longest an acknowledgment is held back waiting for a datagram to ride
    /// on. The peer's tail loss probe waits this long beyond the round trip
    /// before it suspects a loss, so it bounds what the loss of a one-way
    /// message costs. Default 500 µs; the UDP driver uses 100 µs (see
    /// `UdpConfig`), a few loopback round trips.
    pub ack_delay: Duration,
    /// Acknowledge at once after this many sequenced datagrams.
    pub ack_every: u32,
    /// Retransmission timeout before the first RTT sample.
    pub rto_initial: Duration,
    /// Floor of the retransmission timeout. A message with nothing sent
    /// after it (the common case of a blocking exchange) is recovered by
    /// the tail loss probe first; this timer takes over when the probes
    /// or their answers are lost too. It must ride out a descheduled peer
    /// and a path queued behind bulk data: an expiry that was not needed
    /// costs a datagram (and a back-off step). Default 2 ms, about 60
    /// loopback round trips; the UDP driver uses 1 ms (see `UdpConfig`).
    pub rto_min: Duration,
    /// Ceiling of the retransmission timeout, back-off included.
    pub rto_max: Duration,
    /// Doublings of a timer (retransmission, pull re-request, probe) in a
    /// row at most. Kept small because losses here are mostly random, not
    /// congestion: a retransmission succeeds only if it and its answer both
    /// get through (49 % of the time at 30 % loss), so with unbounded
    /// doubling the expected wait for one message, the sum of
    /// 0.51^k · 2^k, grows with every loss instead of converging, and a
    /// job at 30 % loss stalls for seconds per lost datagram. Silence
    /// still ends in death after [`peer_timeout`](Self::peer_timeout).
    pub max_backoff: u32,
    /// Retransmissions (or pull re-requests, or probes) in a row without
    /// any sign of progress; the next expiry declares the peer dead if it
    /// has also been silent (sent nothing at all) for
    /// [`peer_timeout`](Self::peer_timeout). With the defaults a peer that
    /// stops answering is given up on after 10 s of silence.
    pub max_retransmits: u32,
    /// A datagram is presumed lost once this many datagrams sent after it
    /// have been acknowledged (fast retransmit; also the pull re-request
    /// trigger).
    pub reorder_threshold: u32,
    /// Fragments per pull block (1..=64).
    pub pull_block_frags: u32,
    /// Pull blocks a receiver keeps requested from one peer at once.
    pub pull_blocks_in_flight: u32,
    /// Large messages in progress per peer: the sender does not start more
    /// rendezvous than this before completion notices come back, and the
    /// receiver holds back in-order processing beyond this many pulls.
    pub max_large_in_flight: u32,
    /// Messages queued or unacknowledged per peer before `send` refuses with
    /// [`SendError::QueueFull`](super::SendError::QueueFull).
    pub max_queued_sends: usize,
    /// Bytes of borrowed eager payloads copied into one peer's queue at
    /// most. A copy lets `send` complete at once
    /// ([`EagerCompletion::OnSend`]); beyond this, an eager payload is read
    /// from the caller's memory, like a large one, and its send completes
    /// when the peer acknowledges it. Without the bound a sender whose peer
    /// is slow to take its messages (a receiver holding them back) copied
    /// every queued send: 100 000 queued 60 KB sends, 6 GB.
    pub max_copied_bytes_per_peer: u64,
    /// When eager sends report completion.
    pub eager_completion: EagerCompletion,
    /// How long a peer may stay silent while the application waits before
    /// it is declared dead, even though nothing is outstanding towards it
    /// (a process blocked in a receive from a peer that died). While the
    /// driver reports waiting ([`Endpoint::note_waiting`](super::Endpoint::note_waiting)),
    /// a peer silent for a sixteenth of this is probed every sixteenth; a
    /// live peer answers from its progress engine, so only a dead or
    /// unreachable one (or one polling for progress that does not enter
    /// the library for this long) runs out the clock. `None` turns the
    /// watch off. The same silence is required before a retransmission,
    /// pull or keep-alive timer that ran out of tries declares the peer
    /// dead (with `None`, running out of tries is enough). At least 16 ms.
    /// Default 10 s.
    pub peer_timeout: Option<Duration>,
    /// Tail loss probe (module `tlp`): when a flight has gone unanswered
    /// for twice the path's round trip (the smallest RTT seen) plus the
    /// peer's [`ack_delay`](Self::ack_delay) plus this much since the
    /// latest new datagram or acknowledged progress, the sender resends its
    /// newest unacknowledged datagram asking for an immediate ack, up to 8
    /// times between acknowledgments that make progress. This is what
    /// recovers the loss of a blocking exchange's only datagram in a few
    /// round trips instead of the retransmission timer's floor. The slack
    /// absorbs the peer's scheduling jitter; a probe sent too early costs
    /// one datagram and one ack, and a probe neither backs off the timer
    /// nor counts towards declaring the peer dead. `None` turns probes off.
    /// Default 100 µs; the UDP driver uses 50 µs.
    pub tail_probe_slack: Option<Duration>,
    /// Send a redundant copy right after every sequenced datagram of at
    /// most [`copy_max_bytes`](Self::copy_max_bytes) while the peer reports
    /// that at least this share of our datagrams reach it only through a
    /// repair (module `redundancy`), in parts per million. `None` never
    /// copies. Default 20 000 (2 %).
    pub copy_above_loss_ppm: Option<u32>,
    /// Largest datagram (whole, with headers) that gets a redundant copy on
    /// a lossy path. Default 4096 bytes: a message that fits in one small
    /// datagram (a token, an engine acknowledgment, a halo row) is a flight
    /// of its own whose loss only a probe timeout reveals; in a larger
    /// message later datagrams' acknowledgments reveal a loss quickly, and
    /// copying them would double the bandwidth of a lossy path.
    pub copy_max_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_datagram: 65_000,
            eager_max: 128 * 1024,
            send_window: 128,
            recv_window: 128,
            ack_delay: Duration::from_micros(500),
            ack_every: 4,
            rto_initial: Duration::from_millis(50),
            rto_min: Duration::from_millis(2),
            rto_max: Duration::from_secs(2),
            max_backoff: 3,
            max_retransmits: 9,
            reorder_threshold: 3,
            pull_block_frags: 16,
            pull_blocks_in_flight: 4,
            max_large_in_flight: 8,
            max_queued_sends: 1 << 16,
            max_copied_bytes_per_peer: 16 << 20,
            eager_completion: EagerCompletion::OnSend,
            peer_timeout: Some(Duration::from_secs(10)),
            tail_probe_slack: Some(Duration::from_micros(100)),
            copy_above_loss_ppm: Some(20_000),
            copy_max_bytes: 4096,
        }
    }
}

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub &'static str);

impl Config {
    /// Check every value is in range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |ok: bool, what: &'static str| if ok { Ok(()) } else { Err(ConfigError(what)) };
        bad(
            (MIN_DATAGRAM..=MAX_UDP_PAYLOAD).contains(&self.max_datagram),
            "max_datagram must be in 512..=65507",
        )?;
        bad(
            (1..=MAX_SACK_BITS as u32).contains(&self.recv_window),
            "recv_window must be in 1..=512",
        )?;
        bad(
            (1..=4096).contains(&self.send_window),
            "send_window must be in 1..=4096",
        )?;
        bad(self.ack_every >= 1, "ack_every must be at least 1")?;
        bad(
            self.copy_above_loss_ppm
                .is_none_or(|l| (1..=1_000_000).contains(&l)),
            "copy_above_loss_ppm must be in 1..=1000000",
        )?;
        bad(!self.rto_min.is_zero(), "rto_min must be positive")?;
        bad(
            self.rto_min <= self.rto_initial && self.rto_initial <= self.rto_max,
            "need rto_min <= rto_initial <= rto_max",
        )?;
        bad(
            self.max_retransmits >= 1,
            "max_retransmits must be at least 1",
        )?;
        bad(
            self.reorder_threshold >= 1,
            "reorder_threshold must be at least 1",
        )?;
        bad(
            (1..=64).contains(&self.pull_block_frags),
            "pull_block_frags must be in 1..=64",
        )?;
        bad(
            self.pull_blocks_in_flight >= 1,
            "pull_blocks_in_flight must be at least 1",
        )?;
        bad(
            self.max_large_in_flight >= 1,
            "max_large_in_flight must be at least 1",
        )?;
        bad(
            self.max_queued_sends >= 1,
            "max_queued_sends must be at least 1",
        )?;
        bad(
            self.peer_timeout
                .is_none_or(|t| t >= Duration::from_millis(16)),
            "peer_timeout must be at least 16 ms",
        )?;
        let layout = Layout::new(self);
        bad(
            self.eager_max <= layout.msg_cap as u64 + MAX_EAGER_FRAGS * layout.frag_cap as u64,
            "eager_max needs more fragments than a receiver accepts",
        )?;
        Ok(())
    }

    /// Bytes one peer can have in flight towards this endpoint at most
    /// (sequenced window plus pull blocks); size the socket's receive buffer
    /// to this times the number of concurrently sending peers to avoid
    /// drops in the kernel.
    pub fn max_inflight_bytes_per_peer(&self) -> usize {
        let datagrams = self.recv_window as usize
            + (self.pull_blocks_in_flight as usize).saturating_mul(self.pull_block_frags as usize);
        datagrams.saturating_mul(self.max_datagram)
    }
}

/// Payload capacity of each frame kind under a configuration. Sizing always
/// budgets for the largest SACK this endpoint can send, so the datagram size
/// never depends on the current loss pattern.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Payload bytes in a `Msg`.
    pub(crate) msg_cap: usize,
    /// Payload bytes in a `Frag`.
    pub(crate) frag_cap: usize,
    /// Payload bytes in a `PullData`.
    pub(crate) pull_cap: usize,
}

impl Layout {
    pub(crate) fn new(c: &Config) -> Self {
        // The SACK covers at most `recv_window - 1` sequence numbers above
        // the cumulative ack.
        let sack_words = (c.recv_window as usize).saturating_sub(1).div_ceil(64);
        let hdr = COMMON_LEN + 8 * sack_words;
        let room = |fixed: usize| c.max_datagram.saturating_sub(hdr + fixed).max(1);
        Layout {
            msg_cap: room(MSG_FIXED),
            frag_cap: room(FRAG_FIXED),
            pull_cap: room(PULL_DATA_FIXED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_mtu_presets_validate() {
        Config::default().validate().unwrap();
        for mtu in [1472, 8972, 65_000, MAX_UDP_PAYLOAD] {
            let c = Config {
                max_datagram: mtu,
                ..Config::default()
            };
            c.validate().unwrap();
            let l = Layout::new(&c);
            // the largest SACK for a 128 window is 2 words
            assert_eq!(l.frag_cap, mtu - COMMON_LEN - 16 - FRAG_FIXED);
            assert!(l.msg_cap < l.frag_cap && l.frag_cap < l.pull_cap);
        }
    }

    #[test]
    fn rejects_out_of_range_values() {
        let base = Config::default();
        let cases = [
            Config {
                max_datagram: 100,
                ..base.clone()
            },
            Config {
                max_datagram: 70_000,
                ..base.clone()
            },
            Config {
                recv_window: 0,
                ..base.clone()
            },
            Config {
                recv_window: 513,
                ..base.clone()
            },
            Config {
                pull_block_frags: 65,
                ..base.clone()
            },
            Config {
                rto_min: Duration::ZERO,
                ..base.clone()
            },
            Config {
                rto_initial: Duration::from_secs(10),
                ..base.clone()
            },
            Config {
                eager_max: 1 << 40,
                ..base.clone()
            },
            Config {
                peer_timeout: Some(Duration::from_millis(15)),
                ..base.clone()
            },
        ];
        for c in cases {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
