//! Giving a peer up. A peer found broken while locks are held is only
//! *noted* (`note_failure`); the failure is carried out (`reap_failures`:
//! its receive aborted, its sends failed, the engine told) by the same
//! thread once it holds no lock.

use std::sync::atomic::Ordering;

use crate::nal::{bump, lock, Inner, Peer};
use crate::segment;
use crate::ShmError;

/// Why a peer was given up.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Its process exited.
    Dead,
    /// It shut its interface down.
    Closed,
    /// Its inbox never appeared.
    Absent(ShmError),
    /// Its inbox was refused.
    Refused(ShmError),
    /// A system call on its behalf failed.
    Io(String),
    /// It broke the ring protocol.
    Corrupt(String),
    /// A single-copy read from it failed.
    CmaRead(String),
}

impl Inner {
    /// Give `p` up: no more traffic from now on; the rest (failing its
    /// operations) happens in [`reap_failures`](Self::reap_failures).
    pub(crate) fn note_failure(&self, p: &Peer, why: Failure) {
        if p.failed.swap(true, Ordering::SeqCst) || self.stopped.load(Ordering::SeqCst) {
            return;
        }
        bump(&self.stats.peers_failed, 1);
        match &why {
            Failure::Corrupt(what) => {
                bump(&self.stats.corrupt_ring_errors, 1);
                tracing::warn!(peer = %p.id, "peer broke the shared-memory protocol ({what}); declaring it failed");
            }
            Failure::Dead => tracing::warn!(peer = %p.id, "peer process died; declaring it failed"),
            Failure::Closed => tracing::debug!(peer = %p.id, "peer shut its interface down"),
            Failure::Absent(e) | Failure::Refused(e) => {
                tracing::warn!(peer = %p.id, error = %e, "declaring the peer failed")
            }
            Failure::Io(e) | Failure::CmaRead(e) => {
                tracing::warn!(peer = %p.id, error = %e, "declaring the peer failed")
            }
        }
        let i = p.ring_in;
        lock(&self.failing).push((i, why));
        self.has_failing.store(true, Ordering::SeqCst);
    }

    /// Carry out noted failures: abort the peer's receive in progress, fail
    /// its queued and outstanding sends, tell the engine. Call holding no
    /// lock.
    #[inline]
    pub(crate) fn reap_failures(&self) {
        if self.has_failing.load(Ordering::SeqCst) {
            self.reap_failures_now();
        }
    }

    #[cold]
    fn reap_failures_now(&self) {
        let list = {
            let mut f = lock(&self.failing);
            self.has_failing.store(false, Ordering::SeqCst);
            std::mem::take(&mut *f)
        };
        for (i, _why) in list {
            let p = &self.peers[i];
            self.abort_rx(p, false);
            let tokens = lock(&p.tx).take_all(&self.lent);
            p.has_queue.store(false, Ordering::SeqCst);
            for t in tokens {
                self.fail_token(t);
            }
            self.core.with_engine(|e| e.peer_failed(p.id));
            // A name its owner can no longer unlink (killed before every
            // peer attached) goes now.
            segment::unlink(&p.name);
        }
    }
}
