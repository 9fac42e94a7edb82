//! A service thread's own operations towards one client — a reply, a bulk
//! chunk — and the wait for their completion, bounded in time and cut
//! short by the client's failure or the service stopping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use portals::{
    AckReq, EqHandle, Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, NetworkInterface,
    ProcessId, PtlError, Remote, Unlink,
};

use crate::error::BulkError;

const SLICE: Duration = Duration::from_millis(100);

/// What a service thread needs to move data to or from a client.
pub(crate) struct Link<'r> {
    pub(crate) ni: &'r NetworkInterface,
    /// The thread's queue for its own operations' events.
    pub(crate) eq: EqHandle,
    pub(crate) peer: ProcessId,
    pub(crate) timeout: Duration,
    pub(crate) stop: &'r AtomicBool,
}

impl Link<'_> {
    fn peer_failed(&self) -> bool {
        self.ni.failed_peer_count() > 0 && self.ni.failed_peers().contains(&self.peer)
    }

    /// Wait for the `kind` event of `md`; other events of the queue are
    /// stale (an abandoned earlier operation) and skipped.
    fn wait(&self, md: MdHandle, kind: EventKind) -> Result<Event, BulkError> {
        self.wait_for(|h| h == md, kind)
    }

    /// Wait for the `kind` event of a descriptor `ours` accepts; events of
    /// others are stale and skipped.
    pub(crate) fn wait_for(
        &self,
        ours: impl Fn(MdHandle) -> bool,
        kind: EventKind,
    ) -> Result<Event, BulkError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(BulkError::Timeout);
            }
            match self.ni.eq_wait(self.eq, Some((deadline - now).min(SLICE))) {
                Ok(ev) if ours(ev.md_handle) => match ev.fail {
                    FailType::Ok if ev.kind == kind => return Ok(ev),
                    FailType::Ok => {}
                    FailType::Dropped => return Err(BulkError::Gone),
                    FailType::Unreachable | FailType::Incomplete => {
                        return Err(BulkError::PeerFailed(self.peer))
                    }
                },
                Ok(_) | Err(PtlError::EqDropped { .. }) => {}
                Err(PtlError::Timeout) => {
                    if self.peer_failed() {
                        return Err(BulkError::PeerFailed(self.peer));
                    }
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(BulkError::Stopping);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Unlink `md` and take its buffer back, retrying while a transfer that
    /// failed half-way still holds it (bounded by the timeout).
    pub(crate) fn reclaim(&self, md: MdHandle) -> Result<Vec<u8>, BulkError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.ni.md_unlink(md) {
                Ok(v) => return Ok(v.unwrap_or_default()),
                Err(PtlError::MdInUse) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub(crate) fn bind(&self, buf: Vec<u8>) -> Result<MdHandle, BulkError> {
        let desc = MdDesc::new(MdOptions::empty()).eq(self.eq);
        Ok(self.ni.md_bind(&desc, buf, Unlink::Retain)?)
    }

    /// Put `buf` at `remote` and wait until it is in place (acknowledged)
    /// or, with `ack` off, until it has left. `buf` comes back with its
    /// contents in every case where the descriptor could be unlinked.
    pub(crate) fn put(
        &self,
        buf: &mut Vec<u8>,
        remote: &Remote,
        hdr_data: u64,
        ack: bool,
    ) -> Result<(), BulkError> {
        let len = buf.len() as u64;
        let md = self.bind(std::mem::take(buf))?;
        let r = match self.ni.put(
            md,
            if ack { AckReq::Ack } else { AckReq::NoAck },
            remote,
            hdr_data,
        ) {
            Ok(()) => self
                .wait(md, if ack { EventKind::Ack } else { EventKind::Sent })
                .and_then(|ev| {
                    if ack && ev.mlength < len {
                        Err(BulkError::Gone)
                    } else {
                        Ok(())
                    }
                }),
            Err(e) => Err(e.into()),
        };
        *buf = self.reclaim(md)?;
        r
    }

    /// Get `buf.len()` bytes from `remote` into `buf`.
    pub(crate) fn get(&self, buf: &mut Vec<u8>, remote: &Remote) -> Result<(), BulkError> {
        let len = buf.len() as u64;
        let md = self.bind(std::mem::take(buf))?;
        let r = match self.ni.get(md, remote) {
            Ok(()) => self.wait(md, EventKind::Reply).and_then(|ev| {
                if ev.mlength < len {
                    Err(BulkError::Gone)
                } else {
                    Ok(())
                }
            }),
            Err(e) => Err(e.into()),
        };
        *buf = self.reclaim(md)?;
        r
    }
}
