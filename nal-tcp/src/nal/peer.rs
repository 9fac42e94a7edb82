//! A peer: its address, the connection carrying traffic to it, and the
//! queue of frames waiting to be written.

use super::*;

pub(super) struct OutMsg {
    /// The frame's head: a Portals header, or a control message in the
    /// first `handshake::LEN` bytes.
    pub(super) hdr: [u8; HEADER_LEN],
    /// How much of `hdr` is sent.
    pub(super) head_len: usize,
    pub(super) payload: Payload,
    pub(super) token: Option<SendToken>,
    /// Bytes of head + payload already written. A message with `written >
    /// 0` is bound to the connection it started on: its rest must never go
    /// out on another one (the peer would read payload bytes as a header).
    pub(super) written: usize,
    /// An acknowledgment (counted when it leaves with another message).
    pub(super) ack: bool,
}

impl OutMsg {
    pub(super) fn portals(msg: Outbound) -> OutMsg {
        OutMsg {
            hdr: msg.header.encode(),
            head_len: HEADER_LEN,
            ack: msg.header.op == Op::Ack,
            payload: msg.payload,
            token: msg.token,
            written: 0,
        }
    }

    pub(super) fn control(h: &Handshake) -> OutMsg {
        let mut hdr = [0u8; HEADER_LEN];
        hdr[..handshake::LEN].copy_from_slice(&h.encode());
        OutMsg {
            hdr,
            head_len: handshake::LEN,
            payload: Payload::None,
            token: None,
            written: 0,
            ack: false,
        }
    }

    pub(super) fn total(&self) -> usize {
        self.head_len + self.payload.len()
    }

    /// Add the unwritten part, at most `max` bytes, to `iov` (head first,
    /// then the payload: one slice, or one per segment of an iovec
    /// descriptor). Returns (slices added, bytes they cover); fewer bytes
    /// than asked only when `iov` is full.
    pub(super) fn gather<'a>(&'a self, iov: &mut [IoSlice<'a>], max: usize) -> (usize, usize) {
        let (mut n, mut bytes) = (0, 0);
        if self.written < self.head_len && !iov.is_empty() && max > 0 {
            let head = &self.hdr[self.written..self.head_len];
            let head = &head[..head.len().min(max)];
            iov[0] = IoSlice::new(head);
            (n, bytes) = (1, head.len());
        }
        let from = self.written.saturating_sub(self.head_len);
        let (iov, max) = (&mut iov[n..], max - bytes);
        let (k, b) = match &self.payload {
            Payload::None => (0, 0),
            // SAFETY: the message's send token is still open (it completes
            // only after the last byte is written), so the engine keeps the
            // region alive and unwritten while we read it.
            Payload::Region(r) => unsafe { r.io_slices(from, max, iov) },
            Payload::Owned(v) => {
                let part = &v[from.min(v.len())..];
                let part = &part[..part.len().min(max)];
                if part.is_empty() || iov.is_empty() {
                    (0, 0)
                } else {
                    iov[0] = IoSlice::new(part);
                    (1, part.len())
                }
            }
        };
        (n + k, bytes + b)
    }
}

pub(super) struct Tx {
    /// The connection carrying traffic to this peer.
    pub(super) conn: Option<Arc<Conn>>,
    /// A connection this process is setting up to this peer.
    pub(super) pending: Option<Arc<Conn>>,
    pub(super) queue: VecDeque<OutMsg>,
    /// Connect again at this time if still unconnected with data queued.
    pub(super) retry_at: Option<Instant>,
    /// Everything queued is acknowledgments held back to go out with the
    /// next message (see `Inner::answer`).
    pub(super) lazy_only: bool,
    /// While `lazy_only`: a pass that does not sleep leaves them queued
    /// until this time of the transport's clock (0: the next pass sends
    /// them). Set only when all of them are lazy acknowledgments.
    pub(super) hold_until_ns: u64,
    /// The queue waits for a later pass to be written: the socket was full,
    /// the write budget ran out, the connection is not up yet, or (thread
    /// mode) an acknowledgment other than a lazy one was left for the next
    /// pass. Counted in `Inner::tx_blocked`; see `Inner::mark_blocked`.
    pub(super) blocked: bool,
    /// An empty vector traded for `Peer::staged`'s at each take, so that
    /// neither side allocates once warm and the staging lock is held only
    /// for the trade (see `Inner::queue_staged`).
    pub(super) staged_spare: Vec<Outbound>,
}

pub(super) struct Peer {
    pub(super) id: ProcessId,
    pub(super) addr: Mutex<Option<SocketAddr>>,
    pub(super) tx: Mutex<Tx>,
    /// Answers to this peer staged under the engine lock, ahead of
    /// anything sent after it (see `Inner::stage`). A leaf lock, taken
    /// under `tx` or the engine lock.
    pub(super) staged: Mutex<Vec<Outbound>>,
    /// `staged` may be non-empty: a send looks at it only then. Set under
    /// the engine lock, so a send that follows the event of the message it
    /// answers sees it set.
    pub(super) has_staged: AtomicBool,
}
