//! Start-up and liveness, run from progress passes: mapping peers' inboxes
//! as they appear (within the connect timeout), deciding per pair whether
//! single-copy reads work, checking that peers are alive, and dropping our
//! inbox's name once it is no longer needed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::cma;
use crate::failure::Failure;
use crate::nal::{bump, lock, Inner, Peer};
use crate::ring::Producer;
use crate::segment::{self, Expect, OpenError, Segment, SegmentError, CMA_OFF, CMA_OK};
use crate::ShmError;

/// Housekeeping period while start-up is unfinished (peers to attach,
/// single-copy probes to decide).
const STARTUP_TICK: Duration = Duration::from_millis(1);

impl Inner {
    /// Attach peers' inboxes, decide single-copy probes, check liveness;
    /// at most every [`STARTUP_TICK`] while start-up is unfinished, else at
    /// the liveness interval. `now_ns` is the pass's clock.
    pub(crate) fn housekeeping(&self, now_ns: u64) {
        let due = self.next_housekeeping.load(Ordering::Relaxed);
        let tick = if self.unresolved.load(Ordering::Relaxed) > 0 {
            STARTUP_TICK
        } else {
            self.cfg.liveness_interval
        };
        if now_ns < due
            || self
                .next_housekeeping
                .compare_exchange(
                    due,
                    now_ns + tick.as_nanos() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let mut unresolved = 0;
        let mut attached = 0;
        for p in &self.peers {
            if p.failed.load(Ordering::Relaxed) {
                continue;
            }
            if p.outbox.get().is_none() {
                self.try_attach(p, now_ns);
            }
            if p.outbox.get().is_none() {
                unresolved += 1;
            } else {
                attached += 1;
            }
            if !p.probed.load(Ordering::Relaxed) && !self.decide_cma(p) {
                unresolved += 1;
            }
        }
        self.unresolved.store(unresolved, Ordering::Relaxed);
        let live_due = self.next_liveness.load(Ordering::Relaxed);
        if now_ns >= live_due {
            self.next_liveness.store(
                now_ns + self.cfg.liveness_interval.as_nanos() as u64,
                Ordering::Relaxed,
            );
            self.check_liveness();
        }
        // Every peer has mapped our inbox (the last one unlinks the name),
        // or had its chance: the name is not needed any more.
        let peers_in = self.inbox.header().attached.load(Ordering::Acquire) as usize;
        if (peers_in >= self.peers.len() && attached == self.peers.len())
            || now_ns > self.cfg.connect_timeout.as_nanos() as u64
        {
            self.unlink_inbox();
        }
    }

    /// Map `p`'s inbox if it is there (and acceptable), publish our probe
    /// in our ring's control block, and count ourselves in.
    fn try_attach(&self, p: &Peer, now_ns: u64) {
        if now_ns < p.next_attach_ns.load(Ordering::Relaxed) {
            return;
        }
        p.next_attach_ns
            .store(now_ns + STARTUP_TICK.as_nanos() as u64, Ordering::Relaxed);
        // Under the send lock: one attach per peer, and queued sends go out
        // as soon as the ring is there.
        let mut tx = lock(&p.tx);
        if p.outbox.get().is_some() || p.failed.load(Ordering::Relaxed) {
            return;
        }
        let want = Expect {
            job_key: self.job_key,
            creator_pid: p.addr.pid,
        };
        let refused = |reason: SegmentError| {
            Failure::Refused(ShmError::Refused {
                peer: p.id,
                addr: p.addr,
                reason,
            })
        };
        let seg = match Segment::open(&p.name, &want) {
            Ok(s) => s,
            Err(OpenError::NotYet) => {
                if now_ns > self.cfg.connect_timeout.as_nanos() as u64 {
                    drop(tx);
                    let e = ShmError::PeerAbsent {
                        peer: p.id,
                        addr: p.addr,
                        waited: self.cfg.connect_timeout,
                    };
                    self.note_failure(p, Failure::Absent(e));
                }
                return;
            }
            Err(OpenError::Refused(r)) => {
                drop(tx);
                self.note_failure(p, refused(r));
                return;
            }
            Err(OpenError::Io(e)) => {
                drop(tx);
                self.note_failure(p, Failure::Io(format!("opening its inbox: {e}")));
                return;
            }
        };
        let ring = match seg.find_ring(self.me) {
            Ok(r) => r,
            Err(r) => {
                drop(tx);
                self.note_failure(p, refused(r));
                return;
            }
        };
        let c = seg.ctl(ring);
        let addr = if self.cfg.cma {
            &*self.probe_word as *const u64 as u64
        } else {
            0
        };
        c.probe_addr.store(addr, Ordering::Relaxed);
        c.probe_val.store(*self.probe_word, Ordering::Relaxed);
        // Release: the probe's fields before the flag that publishes them.
        c.probe_set.store(1, Ordering::Release);
        let n = seg.header().attached.fetch_add(1, Ordering::AcqRel) + 1;
        if n as usize >= seg.rings() {
            // The last of its peers to map it: the name is no longer needed.
            segment::unlink(&p.name);
        }
        // SAFETY: ring `ring` of `seg`, which is stored in `p.outbox` right
        // below and lives as long as the peer; we are its only producer.
        let prod = unsafe { Producer::new(seg.ring(ring)) };
        tx.ring = Some((prod, ring));
        if p.outbox.set(seg).is_err() {
            return;
        }
        tracing::debug!(peer = %p.id, "attached the peer's inbox");
        self.flush(p, &mut tx);
    }

    /// Decide whether single-copy works from `p`, once it published its
    /// probe word; true when decided.
    fn decide_cma(&self, p: &Peer) -> bool {
        let c = self.inbox.ctl(p.ring_in);
        if c.probe_set.load(Ordering::Acquire) == 0 {
            return false;
        }
        let (addr, val) = (
            c.probe_addr.load(Ordering::Relaxed),
            c.probe_val.load(Ordering::Relaxed),
        );
        let verdict = if !self.cfg.cma || addr == 0 {
            CMA_OFF
        } else {
            match cma::probe(p.addr.pid, addr, val) {
                Ok(true) => CMA_OK,
                Ok(false) => {
                    tracing::debug!(peer = %p.id, "single-copy probe read a wrong value; copying through the ring");
                    CMA_OFF
                }
                Err(e) => {
                    tracing::debug!(peer = %p.id, error = %e, "single-copy reads unavailable; copying through the ring");
                    CMA_OFF
                }
            }
        };
        if verdict == CMA_OFF && self.cfg.cma && addr != 0 {
            bump(&self.stats.cma_unavailable, 1);
        }
        c.cma.store(verdict, Ordering::Release);
        p.probed.store(true, Ordering::Relaxed);
        true
    }

    fn check_liveness(&self) {
        for p in &self.peers {
            if p.failed.load(Ordering::Relaxed) {
                continue;
            }
            if p.watch.as_ref().is_some_and(|w| !w.alive()) {
                self.note_failure(p, Failure::Dead);
            } else if p
                .outbox
                .get()
                .is_some_and(|s| s.header().closed.load(Ordering::Acquire) != 0)
            {
                self.note_failure(p, Failure::Closed);
            }
        }
    }
}
