//! A connection's life: connecting, the handshake (and simultaneous
//! connects), liveness and timeouts, loss, and teardown.

use super::*;

impl Inner {
    pub(super) fn start_connect(&self, peer: &Peer, tx: &mut Tx) {
        let Some(addr) = *lock(&peer.addr) else {
            tracing::warn!(peer = %peer.id, "no address to connect to");
            self.fail_queue(peer.id, tx);
            return;
        };
        let r = (|| -> io::Result<Arc<Conn>> {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            self.tune(&s)?;
            match s.connect(&addr.into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(e),
            }
            self.add_conn(s, true, ConnState::Connecting, Some(peer.id))
        })();
        match r {
            Ok(conn) => {
                tx.pending = Some(conn);
                tx.retry_at = None;
            }
            Err(e) => {
                tracing::warn!(peer = %peer.id, %addr, error = %e, "connect failed");
                bump(&self.stats.connects_failed, 1);
                self.fail_queue(peer.id, tx);
            }
        }
    }

    /// Fail everything queued for `peer`, and every operation waiting for
    /// it to answer.
    pub(super) fn fail_queue(&self, peer: ProcessId, tx: &mut Tx) {
        let q = std::mem::take(&mut tx.queue);
        self.mark_blocked(tx, false);
        for m in q {
            self.fail_msg(m.token);
        }
        self.core.with_engine(|e| e.peer_failed(peer));
    }

    /// An established or pending connection to `peer` broke.
    pub(super) fn lose(&self, conn: &Arc<Conn>, peer: &Peer, tx: &mut Tx) {
        let was_established = self.close(conn) == ConnState::Established;
        let current = tx.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        let pending = tx.pending.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        if current {
            tx.conn = None;
        }
        if pending {
            tx.pending = None;
        }
        if current || pending {
            if was_established {
                bump(&self.stats.connections_lost, 1);
            } else {
                bump(&self.stats.connects_failed, 1);
            }
            self.fail_queue(peer.id, tx);
        }
    }

    /// Mark a connection closed and shut its socket; the receive side is torn
    /// down by the next thread that looks at it. Returns the state it was in.
    pub(super) fn close(&self, conn: &Arc<Conn>) -> ConnState {
        let prev = {
            let mut st = lock(&conn.state);
            std::mem::replace(&mut *st, ConnState::Closed)
        };
        if prev != ConnState::Closed {
            let _ = conn.sock.shutdown(std::net::Shutdown::Both);
            lock(&self.dirty).push(conn.token);
        }
        prev
    }

    // ----- progress ---------------------------------------------------------

    pub(super) fn on_writable(&self, conn: &Arc<Conn>) {
        let Some(pid) = conn.peer() else { return };
        let Some(peer) = self.peer(pid) else { return };
        match conn.state() {
            ConnState::Connecting => {
                let mut tx = lock(&peer.tx);
                if conn.state() != ConnState::Connecting {
                    return;
                }
                match conn.sock.take_error() {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => {
                        tracing::debug!(peer = %pid, error = %e, "connect failed");
                        self.lose(conn, &peer, &mut tx);
                        return;
                    }
                }
                let hello = Handshake {
                    kind: Kind::Hello,
                    flags: self.flags(),
                    job_key: self.job_key,
                    src: self.me,
                    dst: pid,
                };
                *lock(&conn.state) = ConnState::Handshaking;
                if !self.write_small(conn, &hello.encode()) {
                    self.lose(conn, &peer, &mut tx);
                }
            }
            ConnState::Established => {
                let mut tx = lock(&peer.tx);
                if let Some(c) = tx.conn.clone() {
                    if Arc::ptr_eq(&c, conn) {
                        self.flush(&peer, &mut tx, &c);
                    }
                }
            }
            _ => {}
        }
    }

    /// Write a handshake message, which always fits an empty socket buffer.
    pub(super) fn write_small(&self, conn: &Conn, b: &[u8]) -> bool {
        matches!(conn.sock.send_with_flags(b, libc::MSG_NOSIGNAL), Ok(n) if n == b.len())
    }

    pub(super) fn accept_all(&self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    match self
                        .tune(&s)
                        .and_then(|_| self.add_conn(s, false, ConnState::Handshaking, None))
                    {
                        Ok(conn) => self.admit(&conn),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not take an incoming connection")
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: try again on the next edge.
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    /// Handle a handshake message; false closes the connection.
    pub(super) fn on_handshake(&self, conn: &Arc<Conn>, b: &[u8; handshake::LEN]) -> bool {
        let reject = |why: &str| {
            bump(&self.stats.handshakes_rejected, 1);
            self.warn_refused(conn.token, why);
            false
        };
        let h = match Handshake::decode(b) {
            Ok(h) => h,
            Err(e) => return reject(&e.to_string()),
        };
        if h.job_key != self.job_key {
            return reject("wrong job key");
        }
        if h.dst != self.me || !h.src.is_concrete() || h.src == self.me {
            return reject("wrong process id");
        }
        conn.answers_probes.store(
            h.flags & handshake::FLAG_ANSWERS_PROBES != 0,
            Ordering::Relaxed,
        );
        match (conn.initiated, h.kind) {
            (false, Kind::Hello) => self.on_hello(conn, h.src),
            (true, Kind::Accept | Kind::Duplicate) => {
                if conn.peer() != Some(h.src) {
                    return reject("answer from the wrong process");
                }
                self.on_answer(conn, h.src, h.kind == Kind::Accept)
            }
            _ => reject("unexpected handshake message"),
        }
    }

    /// Acceptor side: decide whether this connection carries the pair's
    /// traffic.
    pub(super) fn on_hello(&self, conn: &Arc<Conn>, from: ProcessId) -> bool {
        let peer = self.add_peer(from, None);
        let mut tx = lock(&peer.tx);
        *lock(&conn.peer) = Some(from);
        let incoming_wins = handshake::initiator_wins(from, self.me);
        let ours_alive = |c: &Option<Arc<Conn>>| {
            c.as_ref()
                .is_some_and(|c| c.initiated && c.state() != ConnState::Closed)
        };
        let duplicate = !incoming_wins && (ours_alive(&tx.conn) || ours_alive(&tx.pending));
        let answer = Handshake {
            kind: if duplicate {
                Kind::Duplicate
            } else {
                Kind::Accept
            },
            flags: self.flags(),
            job_key: self.job_key,
            src: self.me,
            dst: from,
        };
        if duplicate {
            bump(&self.stats.duplicates_resolved, 1);
            self.write_small(conn, &answer.encode());
            return false;
        }
        if !self.write_small(conn, &answer.encode()) {
            return false;
        }
        // This connection wins: drop any other one to this peer. Data never
        // flows on a pending connection, so closing it loses nothing.
        if let Some(old) = tx.pending.take() {
            self.close(&old);
        }
        if let Some(old) = tx.conn.clone() {
            // The peer connected again, so it gave the old connection up.
            self.supersede(&old, &peer, &mut tx);
        }
        *lock(&conn.state) = ConnState::Established;
        *lock(&conn.deadline) = None;
        tx.conn = Some(conn.clone());
        tx.retry_at = None;
        bump(&self.stats.connections_accepted, 1);
        self.flush(&peer, &mut tx, conn);
        true
    }

    /// A new connection replaces `old`, the established one to `peer`.
    ///
    /// The peer only connects again after giving the old connection up, so
    /// this is that connection's loss, handled as if its end had been seen
    /// first (which of the two events a poll reports first must not change
    /// the outcome): queued sends fail, and so do operations awaiting an
    /// answer, whose request or answer may have died with it. In particular
    /// a message partly written to the old connection is never continued on
    /// the new one, where the peer would read its payload as a header; the
    /// peer aborted its partial deposit when the old connection ended.
    pub(super) fn supersede(&self, old: &Arc<Conn>, peer: &Peer, tx: &mut Tx) {
        tracing::debug!(peer = %peer.id, token = old.token, queued = tx.queue.len(), "connection replaced");
        self.lose(old, peer, tx);
    }

    /// Initiator side: the acceptor's answer.
    pub(super) fn on_answer(&self, conn: &Arc<Conn>, from: ProcessId, accepted: bool) -> bool {
        let Some(peer) = self.peer(from) else {
            return false;
        };
        let mut tx = lock(&peer.tx);
        let is_pending = tx.pending.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        if !is_pending {
            return false;
        }
        tx.pending = None;
        if !accepted {
            // The peer's own connection wins; wait for it, and connect again
            // if it does not come.
            bump(&self.stats.duplicates_resolved, 1);
            if tx.conn.is_none() {
                tx.retry_at = Some(Instant::now() + DUPLICATE_RETRY);
            }
            return false;
        }
        if let Some(old) = tx.conn.clone() {
            self.supersede(&old, &peer, &mut tx);
        }
        *lock(&conn.state) = ConnState::Established;
        *lock(&conn.deadline) = None;
        tx.conn = Some(conn.clone());
        bump(&self.stats.connections_initiated, 1);
        self.flush(&peer, &mut tx, conn);
        true
    }

    /// Connection deadlines, reconnects and peer liveness, at most every
    /// `HOUSEKEEPING`; `now_ns` is the pass's clock.
    pub(super) fn housekeeping(&self, now_ns: u64) {
        let due = self.next_housekeeping.load(Ordering::Relaxed);
        if now_ns < due
            || self
                .next_housekeeping
                .compare_exchange(
                    due,
                    now_ns + HOUSEKEEPING.as_nanos() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let now = Instant::now();
        let expired: Vec<Arc<Conn>> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| lock(&c.deadline).is_some_and(|d| d <= now))
            .map(|(_, c)| c.clone())
            .collect();
        for c in expired {
            tracing::debug!(token = c.token, peer = ?c.peer(), "connection set-up timed out");
            if !c.initiated && c.state() == ConnState::Handshaking {
                bump(&self.stats.handshakes_timed_out, 1);
                self.warn_refused(c.token, "no handshake before the deadline");
            }
            match c.peer().and_then(|p| self.peer(p)) {
                Some(peer) => {
                    let mut tx = lock(&peer.tx);
                    self.lose(&c, &peer, &mut tx);
                }
                None => {
                    self.close(&c);
                }
            }
        }
        for p in self.all_peers() {
            let mut tx = lock(&p.tx);
            if tx.retry_at.is_some_and(|t| t <= now) && tx.conn.is_none() && tx.pending.is_none() {
                tx.retry_at = None;
                if !tx.queue.is_empty() {
                    self.start_connect(&p, &mut tx);
                }
            }
        }
        // `due` is when the previous run scheduled this one (0: first run).
        let deaf = due != 0
            && now_ns.saturating_sub(due) + HOUSEKEEPING.as_nanos() as u64
                > DEAF_GAP.as_nanos() as u64;
        self.check_liveness(now_ns, deaf);
    }

    /// Probe peers that have been silent for half the peer timeout, and
    /// declare failed those silent for all of it. Only peers that answer
    /// probes (they have a progress thread) are judged. After a `deaf`
    /// stretch (nobody read the sockets) every clock restarts instead.
    pub(super) fn check_liveness(&self, now_ns: u64, deaf: bool) {
        let Some(limit) = self.cfg.peer_timeout else {
            return;
        };
        let limit = (limit.as_nanos() as u64).max(1);
        let watched: Vec<Arc<Conn>> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| {
                c.answers_probes.load(Ordering::Relaxed) && c.state() == ConnState::Established
            })
            .map(|(_, c)| c.clone())
            .collect();
        for c in watched {
            // A connection held back by the engine has bytes we do not
            // read yet: its peer is alive.
            if deaf || c.held.load(Ordering::Relaxed) != NOT_HELD {
                c.heard.fetch_max(now_ns, Ordering::Relaxed);
                continue;
            }
            let heard = c.heard.load(Ordering::Relaxed);
            let silent = now_ns.saturating_sub(heard);
            let timed_out = silent >= limit;
            let probe =
                !timed_out && silent >= limit / 2 && c.probed.load(Ordering::Relaxed) <= heard;
            if !timed_out && !probe {
                continue;
            }
            let Some(peer) = c.peer().and_then(|p| self.peer(p)) else {
                continue;
            };
            let mut tx = lock(&peer.tx);
            if !tx.conn.as_ref().is_some_and(|x| Arc::ptr_eq(x, &c)) {
                continue;
            }
            if timed_out {
                tracing::warn!(
                    peer = %peer.id,
                    silent_ms = silent / 1_000_000,
                    "peer silent past the peer timeout; declaring it failed"
                );
                bump(&self.stats.peers_timed_out, 1);
                self.lose(&c, &peer, &mut tx);
            } else {
                tracing::debug!(peer = %peer.id, silent_ms = silent / 1_000_000, "probing a silent peer");
                c.probed.store(now_ns, Ordering::Relaxed);
                bump(&self.stats.probes_sent, 1);
                self.send_control(&peer, &mut tx, &c, Kind::Ping);
            }
        }
    }

    pub(super) fn close_all(&self) {
        // Acknowledgments held back for a later message (see
        // `Inner::release_staged`) leave now, as far as the sockets take
        // them: their initiators may be waiting to reclaim memory.
        for p in self.all_peers() {
            let mut tx = lock(&p.tx);
            if let (true, Some(c)) = (tx.lazy_only, tx.conn.clone()) {
                self.flush(&p, &mut tx, &c);
            }
        }
        let conns: Vec<Arc<Conn>> = lock(&self.conns).iter().map(|(_, c)| c.clone()).collect();
        for c in conns {
            self.close(&c);
            for p in self.pollers() {
                p.deregister(c.sock.as_raw_fd(), c.token);
            }
        }
        // Pending sends are abandoned: the interface is going away with the
        // memory their tokens refer to.
        for p in self.all_peers() {
            let mut tx = lock(&p.tx);
            tx.queue.clear();
            self.mark_blocked(&mut tx, false);
            tx.conn = None;
            tx.pending = None;
        }
        lock(&self.conns).clear();
        let _ = SockRef::from(&self.listener).shutdown(std::net::Shutdown::Both);
    }
}
