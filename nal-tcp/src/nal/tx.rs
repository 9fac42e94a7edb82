//! The send side: per-peer queues written to the connection with
//! gathered `sendmsg`, deferred when a connection is full.

use portals::nal::{LAZY_ACK_BATCH, LAZY_ACK_HOLD};

use super::*;

/// What became of the engine's answer to an incoming message.
pub(super) enum Answer {
    Nothing,
    /// Staged on this peer.
    Staged(Arc<Peer>),
    /// To be sent as it is (no peer to stage it on).
    Unstaged(Outbound),
}

impl Inner {
    pub(super) fn send(&self, msg: Outbound) {
        let dst = msg.header.dst;
        tracing::trace!(%dst, op = ?msg.header.op, len = msg.payload.len(), "send");
        if dst == self.me {
            portals::loopback::deliver_local(&self.core, msg);
            return;
        }
        let Some(peer) = self.peer(dst) else {
            tracing::warn!(peer = %dst, "send to a process with no known address");
            self.fail_msg(msg.token);
            self.core.with_engine(|e| e.peer_failed(dst));
            return;
        };
        let mut tx = lock(&peer.tx);
        // Nothing ahead of this message but acknowledgments held back (or
        // nothing at all): write now, and they leave with it.
        let idle = std::mem::take(&mut tx.lazy_only) || tx.queue.is_empty();
        self.queue_staged(&peer, &mut tx);
        tx.queue.push_back(OutMsg::portals(msg));
        tracing::trace!(%dst, queued = tx.queue.len(), conn = tx.conn.is_some(), pending = tx.pending.is_some(), "queued");
        self.write_or_connect(&peer, &mut tx, idle);
    }

    /// Queue the answers staged for `peer` (see [`Inner::stage`]): they
    /// go ahead of whatever is queued next. Returns how many, whether all
    /// were acknowledgments, and whether all were lazy ones.
    fn queue_staged(&self, peer: &Peer, tx: &mut Tx) -> (usize, bool, bool) {
        if !peer.has_staged.load(Ordering::Acquire) {
            return (0, true, true);
        }
        // Traded for the spare (empty, with capacity) under the staging
        // lock, and drained after it: the engine-lock holder staging the
        // next answer waits for no header encoding, and neither vector
        // allocates once warm.
        let mut staged = std::mem::take(&mut tx.staged_spare);
        {
            let mut g = lock(&peer.staged);
            peer.has_staged.store(false, Ordering::Relaxed);
            std::mem::swap(&mut *g, &mut staged);
        }
        let n = staged.len();
        let (mut acks, mut lazy) = (true, true);
        for m in staged.drain(..) {
            let ack = m.header.op == Op::Ack;
            acks &= ack;
            lazy &= ack && m.header.ack_lazy;
            tx.queue.push_back(OutMsg::portals(m));
        }
        tx.staged_spare = staged;
        (n, acks, lazy)
    }

    /// After messages were queued: write them at once if the queue was
    /// `idle` before (otherwise a write is already pending: the socket was
    /// full, or the connection is not up yet); connect if unconnected.
    fn write_or_connect(&self, peer: &Peer, tx: &mut Tx, idle: bool) {
        match tx.conn.clone() {
            Some(conn) if idle => {
                let before = tx.queue.len();
                // Acknowledgments riding with the last message queued.
                let carried = tx
                    .queue
                    .iter()
                    .take(before.saturating_sub(1))
                    .filter(|m| m.ack)
                    .count();
                self.flush(peer, tx, &conn);
                if tx.queue.len() < before {
                    bump(&self.stats.optimistic_sends, 1);
                    if tx.queue.is_empty() {
                        bump(&self.stats.acks_coalesced, carried as u64);
                    }
                }
            }
            Some(_) => {}
            None => {
                // Written once the connection is up, by a pass.
                self.mark_blocked(tx, true);
                if tx.pending.is_none() {
                    self.start_connect(peer, tx);
                }
            }
        }
    }

    /// Record whether `tx`'s queue waits for a later pass (see
    /// [`Tx::blocked`]), keeping `Inner::tx_blocked`.
    /// The first such queue ends a quiet application's longer hand-back at
    /// once (`ProgressGate::unquiet`): the progress thread may be asleep in
    /// it, and only it writes the rest while the application computes.
    pub(super) fn mark_blocked(&self, tx: &mut Tx, blocked: bool) {
        if tx.blocked != blocked {
            tx.blocked = blocked;
            if blocked {
                if self.tx_blocked.fetch_add(1, Ordering::SeqCst) == 0 {
                    self.gate.unquiet();
                }
            } else {
                self.tx_blocked.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Whether some queue waits for a later pass to be written (see
    /// [`Tx::blocked`]).
    pub(super) fn tx_waiting(&self) -> bool {
        self.tx_blocked.load(Ordering::SeqCst) > 0
    }

    /// Stage the answer the engine produced under its lock, if any (an
    /// acknowledgment, a get's reply), on its peer, from inside that lock;
    /// [`Inner::send_answer`] it after the lock.
    ///
    /// The event of the message it answers becomes visible to the
    /// application when the engine lock is released, and the application
    /// may react at once with a message of its own to the same peer (in a
    /// round trip, the reply). Queued after the lock, the answer could be
    /// overtaken by that reply: the initiator would see the reply's event
    /// before its acknowledgment, and a program waiting for the
    /// acknowledgment first would skip the reply. Staged here, the reply's
    /// [`Inner::send`] queues it first.
    pub(super) fn stage(&self, out: Option<Outbound>) -> Answer {
        let Some(msg) = out else {
            return Answer::Nothing;
        };
        let dst = msg.header.dst;
        match self.peer(dst) {
            Some(peer) if dst != self.me => {
                let mut staged = lock(&peer.staged);
                staged.push(msg);
                peer.has_staged.store(true, Ordering::Release);
                drop(staged);
                Answer::Staged(peer)
            }
            _ => Answer::Unstaged(msg),
        }
    }

    /// Send what [`Inner::stage`] staged, or could not stage.
    pub(super) fn send_answer(&self, a: Answer) {
        match a {
            Answer::Nothing => {}
            Answer::Staged(peer) => self.release_staged(&peer),
            Answer::Unstaged(m) => self.send(m),
        }
    }

    /// Queue what was staged for `peer` while the engine lock was held,
    /// unless a send already took it, and write it: an acknowledgment is
    /// held back to share a write with the next message to the same peer
    /// — in a round trip, the reply the application is about to send (one
    /// `sendmsg` and one segment instead of two: the extra write cost a
    /// TCP 8-byte ping-pong 5.7 → 12.8 µs once every short MPI send asked
    /// for one) — or goes out on the next progress pass, whoever makes it:
    /// the waiting thread's next call, or the progress thread once the
    /// application has left the library. Only with a progress thread: in
    /// polling mode the next pass may never come (the call that read the
    /// message may be the application's last), so the acknowledgment goes
    /// out at once, as does any other answer — except a lazy
    /// acknowledgment ([`portals::AckReq::Lazy`]), whose initiator waits for
    /// nothing but memory: it is held in either mode, and a pass that does
    /// not sleep leaves it for [`LAZY_ACK_HOLD`] (see
    /// [`Inner::flush_deferred`]), so that a round trip's reply takes it
    /// along even when the receiver's calls make passes before replying.
    pub(super) fn release_staged(&self, peer: &Peer) {
        let mut tx = lock(&peer.tx);
        let was_empty = tx.queue.is_empty();
        let lazy = tx.lazy_only;
        let (n, only_acks, only_lazy) = self.queue_staged(peer, &mut tx);
        if n == 0 {
            return;
        }
        match tx.conn.clone() {
            Some(conn) if only_acks && (only_lazy || self.cfg.progress == ProgressMode::Thread) => {
                if was_empty {
                    tx.lazy_only = true;
                    tx.hold_until_ns = if only_lazy {
                        self.now_ns()
                            .saturating_add(LAZY_ACK_HOLD.as_nanos() as u64)
                    } else {
                        0
                    };
                } else if !only_lazy {
                    tx.hold_until_ns = 0;
                }
                if !only_lazy {
                    // Its initiator waits for it: the next pass must come
                    // within the plain hand-back, quiet application or not.
                    self.mark_blocked(&mut tx, true);
                }
                // No wake-up: the pass that follows this one picks it up.
                if !conn.flush_deferred.swap(true, Ordering::SeqCst) {
                    lock(&self.flush_later).push(conn.token);
                }
            }
            _ => {
                tx.lazy_only = false;
                self.write_or_connect(peer, &mut tx, was_empty || lazy);
            }
        }
    }

    /// Send what the engine answered an incoming message with, outside
    /// its lock (when no event came with it).
    pub(super) fn answer(&self, msg: Outbound) {
        let a = self.stage(Some(msg));
        self.send_answer(a);
    }

    pub(super) fn fail_msg(&self, token: Option<SendToken>) {
        if let Some(t) = token {
            self.core
                .with_engine(|e| e.send_complete(t, FailType::Unreachable));
        }
    }

    /// Write as much of the peer's queue as the socket takes, up to the
    /// write budget (the rest is left for the next progress pass). Completes
    /// the tokens of messages written whole.
    pub(super) fn flush(&self, peer: &Peer, tx: &mut Tx, conn: &Arc<Conn>) {
        let mut budget = match self.cfg.write_budget {
            0 => usize::MAX,
            n => n,
        };
        loop {
            if tx.queue.is_empty() {
                self.mark_blocked(tx, false);
                return;
            }
            if budget == 0 {
                bump(&self.stats.writes_deferred, 1);
                self.mark_blocked(tx, true);
                self.defer_flush(conn);
                return;
            }
            // Offer at most the budget: a socket drained by a fast reader
            // takes a whole multi-megabyte message in one call.
            let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
            let mut n = 0;
            let mut offer = budget;
            for m in tx.queue.iter() {
                if n == MAX_IOV || offer == 0 {
                    break;
                }
                let (k, bytes) = m.gather(&mut iov[n..], offer);
                n += k;
                offer -= bytes;
                if bytes < m.total() - m.written {
                    // Not whole (the budget, or a payload of many segments
                    // filling the vector): nothing after it this time.
                    break;
                }
            }
            let r = conn
                .sock
                .send_vectored_with_flags(&iov[..n], libc::MSG_NOSIGNAL);
            match r {
                Ok(mut w) => {
                    tracing::trace!(peer = %peer.id, wrote = w, queued = tx.queue.len(), "flush");
                    bump(&self.stats.bytes_sent, w as u64);
                    budget = budget.saturating_sub(w);
                    while w > 0 {
                        let Some(front) = tx.queue.front_mut() else {
                            break;
                        };
                        let left = front.total() - front.written;
                        if w >= left {
                            w -= left;
                            if let Some(done) = tx.queue.pop_front() {
                                if let Some(t) = done.token {
                                    self.core.with_engine(|e| e.send_complete(t, FailType::Ok));
                                }
                            }
                        } else {
                            front.written += w;
                            w = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tracing::trace!(peer = %peer.id, queued = tx.queue.len(), "send would block");
                    self.mark_blocked(tx, true);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(peer = %peer.id, error = %e, "send failed");
                    self.lose(conn, peer, tx);
                    return;
                }
            }
        }
    }

    /// Have the next progress pass go on writing `conn`'s queue, and wake
    /// whoever drives progress in case it sleeps.
    pub(super) fn defer_flush(&self, conn: &Conn) {
        if conn.flush_deferred.swap(true, Ordering::SeqCst) {
            return;
        }
        lock(&self.flush_later).push(conn.token);
        for p in self.pollers() {
            p.wake();
        }
    }

    /// Go on writing a connection left at its write budget or holding
    /// acknowledgments back. With `hold_at` (the time of a pass that will
    /// not sleep), lazy acknowledgments younger than their hold and fewer
    /// than [`LAZY_ACK_BATCH`] stay queued: returns false, and the caller
    /// keeps the connection on its list.
    pub(super) fn flush_deferred(&self, conn: &Arc<Conn>, hold_at: Option<u64>) -> bool {
        if conn.state() != ConnState::Established {
            conn.flush_deferred.store(false, Ordering::SeqCst);
            return true;
        }
        let Some(peer) = conn.peer().and_then(|p| self.peer(p)) else {
            conn.flush_deferred.store(false, Ordering::SeqCst);
            return true;
        };
        let mut tx = lock(&peer.tx);
        let hold = hold_at.is_some_and(|now| {
            tx.lazy_only && now < tx.hold_until_ns && tx.queue.len() < LAZY_ACK_BATCH
        });
        if hold {
            return false;
        }
        conn.flush_deferred.store(false, Ordering::SeqCst);
        if tx.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            tx.lazy_only = false;
            self.flush(&peer, &mut tx, conn);
        }
        true
    }

    /// Queue a control message (probe, answer) to `peer` on `conn`, after
    /// whatever is queued already.
    pub(super) fn send_control(&self, peer: &Peer, tx: &mut Tx, conn: &Arc<Conn>, kind: Kind) {
        let h = Handshake {
            kind,
            flags: self.flags(),
            job_key: self.job_key,
            src: self.me,
            dst: peer.id,
        };
        tx.queue.push_back(OutMsg::control(&h));
        if tx.queue.len() == 1 {
            self.flush(peer, tx, conn);
        }
    }
}
