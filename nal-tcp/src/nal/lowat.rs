//! Wake once per message: while a large payload is read straight into its
//! matched descriptor, the socket's receive low-water mark (`SO_RCVLOWAT`)
//! is the rest of that payload, so a thread sleeping in the poller (the
//! progress thread, or a waiter past its spin) is woken when the message is
//! there, not at every segment that brings a part of it. Each of those
//! wake-ups was a context switch on the application's own core (about five
//! per 100 KB message: issue 22).
//!
//! The kernel keeps this safe: a socket whose receive window has shrunk to
//! under one segment, that is short of memory, or that the peer closed is
//! readable whatever the mark (`tcp_epollin_ready`), so a sender held back
//! by flow control never waits for a reader waiting for the mark. Setting
//! the mark also signals readiness at once if it is met already, so a
//! segment that arrived between the last read and the setting raises its
//! edge. A non-blocking read returns what is there, whatever the mark (a
//! spinning waiter still sees every byte as it comes).
//!
//! The mark must never exceed the bytes still due for the message being
//! read (the next message may not come, and the socket would never turn
//! readable): it is lowered after every partial read and put back to one
//! byte when the payload is complete.

use super::*;

/// The kernel's default receive low-water mark.
const DEFAULT_LOWAT: usize = 1;

impl Inner {
    /// The socket ran dry: in the middle of a payload read straight into
    /// its descriptor, ask to be woken only when the rest of it (up to the
    /// read budget) has arrived. Anywhere else, and for a rest too small
    /// to be worth two system calls, wake at the first byte: a mark above
    /// the bytes still due would never be met.
    pub(super) fn await_rest(&self, conn: &Conn, rx: &mut Rx) {
        if !self.cfg.wake_per_message {
            return;
        }
        let rest = match &rx.phase {
            Phase::Payload { region, filled, .. } if rx.buf.len() == 0 => region.len() - *filled,
            _ => 0,
        };
        if rest < self.cfg.direct_read_min {
            self.reset_lowat(conn, rx);
        } else {
            self.set_lowat(conn, rx, rest.min(self.cfg.read_budget.max(DEFAULT_LOWAT)));
        }
    }

    /// The payload the mark was set for is complete (or the read moved on
    /// to a part it does not cover): back to waking at the first byte.
    pub(super) fn reset_lowat(&self, conn: &Conn, rx: &mut Rx) {
        if rx.lowat > DEFAULT_LOWAT {
            self.set_lowat(conn, rx, DEFAULT_LOWAT);
        }
    }

    fn set_lowat(&self, conn: &Conn, rx: &mut Rx, bytes: usize) {
        if rx.lowat == bytes {
            return;
        }
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: `v` lives across the call, and the length passed is its
        // size; the descriptor is owned by `conn.sock`, open while we hold
        // the connection.
        let r = unsafe {
            libc::setsockopt(
                conn.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            rx.lowat = bytes;
            bump(&self.stats.lowat_marks, 1);
        } else {
            // Keep the mark we believe the kernel has: a mark failing to
            // go down is tried again at the end of the payload, and one
            // failing to go up leaves the socket waking per segment.
            tracing::debug!(error = %io::Error::last_os_error(), "SO_RCVLOWAT not set");
        }
    }
}
