//! The send side: per-peer queues written to the connection with
//! gathered `sendmsg`, deferred when a connection is full.

use super::*;

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
        // Held-back acknowledgments leave with this message.
        let lazy = std::mem::take(&mut tx.lazy_only);
        tx.queue.push_back(OutMsg::portals(msg));
        tracing::trace!(%dst, queued = tx.queue.len(), conn = tx.conn.is_some(), pending = tx.pending.is_some(), "queued");
        match tx.conn.clone() {
            Some(conn) if tx.queue.len() == 1 || lazy => {
                let before = tx.queue.len();
                self.flush(&peer, &mut tx, &conn);
                if tx.queue.len() < before {
                    bump(&self.stats.optimistic_sends, 1);
                    if lazy && tx.queue.is_empty() {
                        bump(&self.stats.acks_coalesced, before as u64 - 1);
                    }
                }
            }
            Some(_) => {}
            None => {
                if tx.pending.is_none() {
                    self.start_connect(&peer, &mut tx);
                }
            }
        }
    }

    /// Send what the engine answered an incoming message with. An
    /// acknowledgment is held back to share a write with the next message
    /// to the same peer — in a round trip, the reply the application is
    /// about to send (one `sendmsg` and one segment instead of two: the
    /// extra write cost a TCP 8-byte ping-pong 5.7 → 12.8 µs once every
    /// short MPI send asked for one) — or goes out on the next progress
    /// pass, whoever makes it: the waiting thread's next call, or the
    /// progress thread once the application has left the library. Only
    /// with a progress thread: in polling mode the next pass may never
    /// come (the call that read the message may be the application's
    /// last), so the acknowledgment goes out at once.
    pub(super) fn answer(&self, msg: Outbound) {
        if msg.header.op != Op::Ack
            || msg.header.dst == self.me
            || self.cfg.progress == ProgressMode::Poll
        {
            return self.send(msg);
        }
        let Some(peer) = self.peer(msg.header.dst) else {
            return self.send(msg);
        };
        let mut tx = lock(&peer.tx);
        let Some(conn) = tx.conn.clone() else {
            drop(tx);
            return self.send(msg);
        };
        if tx.queue.is_empty() {
            tx.lazy_only = true;
        }
        tx.queue.push_back(OutMsg::portals(msg));
        // No wake-up: the pass that follows this one picks it up.
        if !conn.flush_deferred.swap(true, Ordering::SeqCst) {
            lock(&self.flush_later).push(conn.token);
        }
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
                return;
            }
            if budget == 0 {
                bump(&self.stats.writes_deferred, 1);
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

    /// Go on writing a connection left at its write budget.
    pub(super) fn flush_deferred(&self, conn: &Arc<Conn>) {
        conn.flush_deferred.store(false, Ordering::SeqCst);
        if conn.state() != ConnState::Established {
            return;
        }
        let Some(peer) = conn.peer().and_then(|p| self.peer(p)) else {
            return;
        };
        let mut tx = lock(&peer.tx);
        if tx.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            self.flush(&peer, &mut tx, conn);
        }
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
