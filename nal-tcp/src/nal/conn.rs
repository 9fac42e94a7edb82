//! A connection: its socket, its state, and its receive side's buffer and
//! place in the byte stream.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Non-blocking connect in progress (initiator).
    Connecting,
    /// Connected, handshake not finished.
    Handshaking,
    /// Carrying Portals traffic.
    Established,
    /// Closed; waiting for the receive side to be cleaned up.
    Closed,
}

pub(super) struct Conn {
    pub(super) token: u64,
    pub(super) sock: Socket,
    /// This process initiated the connection.
    pub(super) initiated: bool,
    pub(super) state: Mutex<ConnState>,
    /// The peer, known from the start for initiators and after the Hello for
    /// acceptors.
    pub(super) peer: Mutex<Option<ProcessId>>,
    pub(super) deadline: Mutex<Option<Instant>>,
    pub(super) rx: Mutex<Rx>,
    /// Set by a thread that found `rx` busy, so the holder reads again.
    pub(super) rx_again: AtomicBool,
    /// The header at the front of `rx`'s buffer was held back by the
    /// engine (a flow-controlled event queue was full): the interface's
    /// intake epoch read before it was offered, or [`NOT_HELD`]. The socket
    /// is not read until the epoch moves, so TCP's own flow control holds
    /// the sender back.
    pub(super) held: AtomicU64,
    /// The receive side has been torn down (tokens aborted, deregistered).
    pub(super) reaped: AtomicBool,
    /// When bytes last arrived (nanoseconds since `Inner::epoch`).
    pub(super) heard: AtomicU64,
    /// When a liveness probe was last sent (same clock; 0: never).
    pub(super) probed: AtomicU64,
    /// The peer said in the handshake that it answers probes promptly.
    pub(super) answers_probes: AtomicBool,
    /// The token is on `Inner::flush_later`.
    pub(super) flush_deferred: AtomicBool,
    /// The poller said the peer sent its last byte: the receive side reads
    /// until end of file instead of trusting a short read (see
    /// `nal_sys::Ready::peer_done`).
    pub(super) peer_done: AtomicBool,
}

impl Conn {
    pub(super) fn state(&self) -> ConnState {
        *lock(&self.state)
    }

    pub(super) fn peer(&self) -> Option<ProcessId> {
        *lock(&self.peer)
    }
}

/// Where the receive side of a connection is in the byte stream.
// One per connection, replaced in place per message: boxing the payload
// variant (large since a `Region` can describe an iovec descriptor's
// segments) would cost an allocation per message to save a few hundred
// bytes per connection.
#[allow(clippy::large_enum_variant)]
pub(super) enum Phase {
    /// Reading a handshake message.
    Handshake,
    /// Reading a Portals header.
    Header,
    /// Reading a payload: first into `region` (from `filled`), then
    /// discarding `discard` bytes, then completing `token` or sending
    /// `respond`.
    Payload {
        region: Region,
        filled: usize,
        discard: u64,
        token: Option<RecvToken>,
        respond: Option<Outbound>,
    },
}

pub(super) struct Rx {
    pub(super) phase: Phase,
    /// The peer proven by the handshake; every header must come from it.
    pub(super) peer: Option<ProcessId>,
    pub(super) buf: RxBuf,
    /// The socket's receive low-water mark as last set (see `lowat.rs`).
    pub(super) lowat: usize,
    /// The last header announced a payload large enough to be read
    /// straight into its descriptor: reads into the buffer stop at the end
    /// of the next header. A full-buffer read there would copy the start
    /// of the next large payload (up to 64 KiB) through the buffer, an
    /// extra copy a stream of large messages paid per message, to save one
    /// system call that matters only for small messages.
    pub(super) header_first: bool,
}

/// Bytes read from the socket but not consumed yet.
pub(super) struct RxBuf {
    pub(super) data: Box<[u8]>,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl Rx {
    pub(super) fn new() -> Rx {
        Rx {
            phase: Phase::Handshake,
            peer: None,
            buf: RxBuf {
                data: vec![0u8; RX_BUF].into_boxed_slice(),
                start: 0,
                end: 0,
            },
            lowat: 1,
            header_first: false,
        }
    }
}

impl RxBuf {
    pub(super) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Move the unconsumed bytes to the front and return the free tail.
    pub(super) fn space(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.data[self.end..]
    }
}
