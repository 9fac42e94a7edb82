//! Values that cross the endpoint's boundary: ids, outgoing payloads, the
//! receive sink, events, errors and counters.

use super::wire::HEADER_LEN;

/// A peer, as numbered by the driver. The socket driver uses the Portals
/// process id packed into 64 bits (`nid << 32 | pid`), so every process of a
/// job numbers its peers the same way without agreeing on a table. The
/// driver maps peer ids to socket addresses and back.
pub type PeerId = u64;

/// Identifies one incoming message: the sending peer and the message's index
/// in that peer's stream to this endpoint (0, 1, 2, … in send order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId {
    /// The sending peer.
    pub peer: PeerId,
    /// Index of the message in the peer's stream.
    pub index: u64,
}

/// Read access to a payload the caller keeps ownership of.
///
/// The endpoint reads large payloads through this while the receiver pulls
/// them, and never after the send's [`Event::SendComplete`]; eager payloads
/// are copied once, inside `send`, and the source is dropped right away.
pub trait PayloadSource: Send {
    /// Payload length in bytes; read once, at `send`.
    fn len(&self) -> u64;
    /// Whether the payload is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `dst.len()` bytes starting at `offset` into `dst`. The endpoint
    /// only asks for ranges inside `0..len()`.
    fn read_at(&self, offset: u64, dst: &mut [u8]);
}

/// A message payload handed to [`Endpoint::send`](super::Endpoint::send).
pub enum OutPayload {
    /// Bytes the endpoint owns from now on.
    Inline(Vec<u8>),
    /// Bytes the caller owns; see [`PayloadSource`].
    Borrowed(Box<dyn PayloadSource>),
}

impl OutPayload {
    /// An inline payload copied from a slice.
    pub fn copy_from(bytes: &[u8]) -> Self {
        OutPayload::Inline(bytes.to_vec())
    }

    /// Payload length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            OutPayload::Inline(v) => v.len() as u64,
            OutPayload::Borrowed(s) => s.len(),
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Vec<u8>> for OutPayload {
    fn from(v: Vec<u8>) -> Self {
        OutPayload::Inline(v)
    }
}

impl std::fmt::Debug for OutPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutPayload::Inline(v) => f.debug_tuple("Inline").field(&v.len()).finish(),
            OutPayload::Borrowed(s) => f.debug_tuple("Borrowed").field(&s.len()).finish(),
        }
    }
}

/// Where incoming messages go. Calls for one message come in the order
/// `on_message`, `on_data`…, then exactly one of `on_complete` or
/// `on_abort`; calls for different messages may interleave.
pub trait Sink {
    /// First fragment of a message, delivered exactly once per message and
    /// in per-peer send order. Returns how many leading payload bytes the
    /// receiver wants (values above `total_len` mean all of it); the rest is
    /// discarded, and for a large message never even transferred.
    fn on_message(
        &mut self,
        peer: PeerId,
        msg: MsgId,
        header: &[u8; HEADER_LEN],
        total_len: u64,
    ) -> u64;
    /// Payload bytes `[offset, offset + data.len())`, all below the wanted
    /// length; every wanted byte arrives exactly once, in no particular order.
    fn on_data(&mut self, msg: MsgId, offset: u64, data: &[u8]);
    /// Every wanted byte has been delivered (immediately after `on_message`
    /// when nothing is wanted).
    fn on_complete(&mut self, msg: MsgId);
    /// The peer was declared dead before every wanted byte arrived.
    fn on_abort(&mut self, msg: MsgId);
    /// Asked right after each [`Sink::on_message`]: true if the receiver
    /// could not take that message now (its return value is then ignored)
    /// and wants it offered again later. The core then stops processing
    /// this peer's stream in order, keeps its datagrams in the receive
    /// window (acknowledged, so the peer stays alive, but the advertised
    /// window shrinks until the sender stops), and offers the message
    /// again from [`Endpoint::resume`](super::Endpoint::resume). The
    /// default never holds.
    fn take_held(&mut self) -> bool {
        false
    }
}

/// Something the driver must hear about; see [`Endpoint::poll_event`](super::Endpoint::poll_event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A `send` finished: reported exactly once per accepted send. `ok: false`
    /// means the peer was declared dead first. After this the endpoint never
    /// reads the send's payload again.
    SendComplete {
        /// The destination.
        peer: PeerId,
        /// The caller's token.
        token: u64,
        /// Whether the message got through (see [`EagerCompletion`](super::EagerCompletion)
        /// for what `true` means for eager messages).
        ok: bool,
    },
    /// The peer stopped answering within the retransmission bound. Reported
    /// once, before the failed completions of its pending sends. Later sends
    /// to it fail with [`SendError::PeerDead`] and its datagrams are dropped.
    PeerDead {
        /// The dead peer.
        peer: PeerId,
    },
}

/// Why `send` refused a message. A refused send is not reported by
/// [`Event::SendComplete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The peer was never added.
    #[error("unknown peer {0}")]
    UnknownPeer(PeerId),
    /// The peer has been declared dead.
    #[error("peer {0} has been declared dead")]
    PeerDead(PeerId),
    /// The payload is longer than the protocol carries.
    #[error("payload of {0} bytes exceeds the maximum message length")]
    TooLarge(u64),
    /// Too many messages queued to this peer (see
    /// [`Config::max_queued_sends`](super::Config::max_queued_sends)).
    #[error("send queue to peer {0} is full")]
    QueueFull(PeerId),
}

/// Counters. Every datagram given to `handle_datagram` increments exactly
/// one of `datagrams_received` and the `*_drops` counters listed as
/// "datagram rejected" below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Bytes produced by `poll_transmit`.
    pub bytes_sent: u64,
    /// Datagrams accepted (decoded, right key, known live peer, valid ack).
    pub datagrams_received: u64,
    /// Sends accepted.
    pub messages_sent: u64,
    /// Incoming messages started (`Sink::on_message` calls).
    pub messages_started: u64,
    /// Datagrams that carried only an acknowledgment.
    pub acks_sent: u64,
    /// Sequenced datagrams sent again, for any reason.
    pub retransmits: u64,
    /// Losses inferred from acknowledgments of later datagrams.
    pub fast_retransmits: u64,
    /// Retransmission timer expiries.
    pub rto_expiries: u64,
    /// Retransmission timer expiries put off because pull data may be
    /// queued ahead of the datagram or its acknowledgment (not counted in
    /// `rto_expiries`).
    pub rto_deferrals: u64,
    /// Tail loss probes: the newest unacknowledged datagram sent again
    /// (also counted in `retransmits`) because a flight went unanswered for
    /// about two round trips.
    pub tail_probes: u64,
    /// Tail probes made to wait longer because the peer reported a
    /// retransmission it already had and had not acknowledged yet (module
    /// `tlp`).
    pub tail_probe_backoffs: u64,
    /// Retransmissions received that we already had and had not
    /// acknowledged yet: the sender gave up on our answer too early (we
    /// report their count, and it waits longer).
    pub late_dups: u64,
    /// Datagrams sent asking for an immediate ack (liveness probes).
    pub probes_sent: u64,
    /// Redundant copies of small sequenced datagrams sent because the peer
    /// reported loss (not counted in `retransmits`).
    pub redundant_copies: u64,
    /// Pull requests sent.
    pub pull_requests_sent: u64,
    /// Pull requests repeated for fragments that did not arrive.
    pub pull_rerequests: u64,
    /// Pull timer expiries.
    pub pull_timeouts: u64,
    /// Pull probes: answers stopped with fragments or a notice's
    /// acknowledgment still missing.
    pub pull_probes: u64,
    /// Pull data datagrams sent.
    pub pull_data_sent: u64,
    /// Sequenced datagrams received again and ignored.
    pub dup_drops: u64,
    /// Pull data fragments received again and ignored.
    pub dup_pull_data: u64,
    /// Pull requests or data for messages no longer in progress.
    pub stale_drops: u64,
    /// Sequenced datagrams beyond the advertised window.
    pub out_of_window_drops: u64,
    /// Frames that broke the protocol (wrong message index, offset, length…)
    /// and were ignored.
    pub protocol_violations: u64,
    /// Pull requests dropped because too many were queued.
    pub pull_jobs_dropped: u64,
    /// Datagram rejected: not this protocol (magic) or version.
    pub bad_magic_drops: u64,
    /// Datagram rejected: undecodable, too long, or acknowledging data
    /// never sent.
    pub malformed_drops: u64,
    /// Datagram rejected: wrong job key.
    pub bad_key_drops: u64,
    /// Datagram rejected: from a peer never added.
    pub unknown_peer_drops: u64,
    /// Datagram rejected: source or destination id does not match.
    pub misaddressed_drops: u64,
    /// Datagram rejected: from a peer declared dead.
    pub dead_peer_drops: u64,
    /// Out-of-order datagrams buffered right now, over all peers.
    pub buffered_datagrams: u64,
    /// Highest value `buffered_datagrams` has reached.
    pub max_buffered_datagrams: u64,
    /// Peers declared dead.
    pub peers_dead: u64,
    /// Peers declared dead by the liveness watch: silent for
    /// [`Config::peer_timeout`](super::Config::peer_timeout) while the
    /// application waited (also counted in `peers_dead`).
    pub watch_deaths: u64,
}

impl Stats {
    /// Sum of the "datagram rejected" counters.
    pub fn datagrams_rejected(&self) -> u64 {
        self.bad_magic_drops
            + self.malformed_drops
            + self.bad_key_drops
            + self.unknown_peer_drops
            + self.misaddressed_drops
            + self.dead_peer_drops
    }
}
