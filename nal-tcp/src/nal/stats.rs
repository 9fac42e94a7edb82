//! The transport's counters: the atomics the transport bumps, and the
//! snapshot ([`TcpStats`]) it hands out.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a TCP NAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Connections accepted from peers (handshake completed).
    pub connections_accepted: u64,
    /// Connections this process initiated (handshake completed).
    pub connections_initiated: u64,
    /// Connections closed during the handshake: wrong job key, wrong
    /// destination, malformed or unexpected handshake message.
    pub handshakes_rejected: u64,
    /// Accepted connections closed before their handshake because more
    /// than [`TcpConfig::max_pending_handshakes`](crate::TcpConfig::max_pending_handshakes)
    /// were waiting (the oldest go first).
    pub handshakes_evicted: u64,
    /// Accepted connections closed because no handshake came within
    /// [`TcpConfig::handshake_timeout`](crate::TcpConfig::handshake_timeout).
    pub handshakes_timed_out: u64,
    /// Connections refused as duplicates of a simultaneous connect.
    pub duplicates_resolved: u64,
    /// Established connections that failed or were closed by the peer.
    pub connections_lost: u64,
    /// Connection attempts that failed (refused, timed out).
    pub connects_failed: u64,
    /// Connections closed because a frame header did not decode.
    pub malformed_frames: u64,
    /// Liveness probes sent to silent peers (see
    /// [`TcpConfig::peer_timeout`](crate::TcpConfig::peer_timeout)).
    pub probes_sent: u64,
    /// Connections closed because the peer stayed silent past
    /// [`TcpConfig::peer_timeout`](crate::TcpConfig::peer_timeout).
    pub peers_timed_out: u64,
    /// Times a connection's writer stopped at
    /// [`TcpConfig::write_budget`](crate::TcpConfig::write_budget) with data
    /// left, to let other connections go first.
    pub writes_deferred: u64,
    /// Messages written whole by the thread that sent them (optimistic).
    pub optimistic_sends: u64,
    /// Acknowledgments held back that left in the same write as the next
    /// message to their peer (in a round trip: with the reply).
    pub acks_coalesced: u64,
    /// Non-blocking progress passes that found bytes by reading the
    /// connection that last delivered some, without asking the poller first
    /// (the latency path of a waiting thread in a round trip).
    pub hot_reads: u64,
    /// Progress passes of the progress thread. Each one follows a sleep in
    /// the kernel (a poll, or a park while an application thread drives
    /// the sockets) unless work was left over from the pass before: on a
    /// rank whose progress thread shares the application's core, each is a
    /// context switch taken out of the application's time.
    pub progress_wakeups: u64,
    /// Times a socket's receive low-water mark was changed to wake a
    /// sleeping thread once per large message instead of once per segment
    /// (see [`TcpConfig::wake_per_message`](crate::TcpConfig::wake_per_message)):
    /// about two per message that did not arrive whole in one read.
    pub lowat_marks: u64,
    /// Times the progress thread, standing aside in the hand-back delay,
    /// found the application away from the library and watched the
    /// sockets instead of sleeping the delay out (see
    /// [`TcpConfig::early_takeover`](crate::TcpConfig::early_takeover)).
    pub watches: u64,
    /// Times the progress thread looked and found the application quiet
    /// (`portals::NiCore::set_app_quiet`) with nothing of ours queued, so
    /// that the longer hand-back applied
    /// (`nal_sys::gate::QUIET_HANDBACKS`).
    pub quiet_looks: u64,
    /// Bulk transfers posted (see `portals::Nal::bulk_post_begin`); those
    /// outside a wait may have the progress thread take over before the
    /// hand-back delay ends.
    pub bulk_posts: u64,
    /// Payload bytes copied into descriptors from the connection's buffer,
    /// read there with their header or with other messages, instead of
    /// straight from the socket into the descriptor. While a large payload
    /// is read, reads into the buffer stop at the next header, so a stream
    /// of large messages stages only the last bytes of a payload that came
    /// in under `direct_read_min` (and the first message's start).
    pub payload_bytes_staged: u64,
    /// Bytes written to sockets.
    pub bytes_sent: u64,
    /// Bytes read from sockets.
    pub bytes_received: u64,
}

#[derive(Default)]
pub(super) struct Stats {
    pub(super) connections_accepted: AtomicU64,
    pub(super) connections_initiated: AtomicU64,
    pub(super) handshakes_rejected: AtomicU64,
    pub(super) handshakes_evicted: AtomicU64,
    pub(super) handshakes_timed_out: AtomicU64,
    pub(super) duplicates_resolved: AtomicU64,
    pub(super) connections_lost: AtomicU64,
    pub(super) connects_failed: AtomicU64,
    pub(super) malformed_frames: AtomicU64,
    pub(super) probes_sent: AtomicU64,
    pub(super) peers_timed_out: AtomicU64,
    pub(super) writes_deferred: AtomicU64,
    pub(super) optimistic_sends: AtomicU64,
    pub(super) acks_coalesced: AtomicU64,
    pub(super) hot_reads: AtomicU64,
    pub(super) progress_wakeups: AtomicU64,
    pub(super) lowat_marks: AtomicU64,
    pub(super) watches: AtomicU64,
    pub(super) quiet_looks: AtomicU64,
    pub(super) bulk_posts: AtomicU64,
    pub(super) payload_bytes_staged: AtomicU64,
    pub(super) bytes_sent: AtomicU64,
    pub(super) bytes_received: AtomicU64,
}

pub(super) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    /// The counters now.
    pub(super) fn snapshot(&self) -> TcpStats {
        let s = self;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TcpStats {
            connections_accepted: g(&s.connections_accepted),
            connections_initiated: g(&s.connections_initiated),
            handshakes_rejected: g(&s.handshakes_rejected),
            handshakes_evicted: g(&s.handshakes_evicted),
            handshakes_timed_out: g(&s.handshakes_timed_out),
            duplicates_resolved: g(&s.duplicates_resolved),
            connections_lost: g(&s.connections_lost),
            connects_failed: g(&s.connects_failed),
            malformed_frames: g(&s.malformed_frames),
            probes_sent: g(&s.probes_sent),
            peers_timed_out: g(&s.peers_timed_out),
            writes_deferred: g(&s.writes_deferred),
            optimistic_sends: g(&s.optimistic_sends),
            acks_coalesced: g(&s.acks_coalesced),
            hot_reads: g(&s.hot_reads),
            progress_wakeups: g(&s.progress_wakeups),
            lowat_marks: g(&s.lowat_marks),
            watches: g(&s.watches),
            quiet_looks: g(&s.quiet_looks),
            bulk_posts: g(&s.bulk_posts),
            payload_bytes_staged: g(&s.payload_bytes_staged),
            bytes_sent: g(&s.bytes_sent),
            bytes_received: g(&s.bytes_received),
        }
    }
}
