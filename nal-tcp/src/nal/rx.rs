//! The receive side: reading a connection (straight into a matched
//! descriptor where the payload is large), and the message state machine
//! that feeds headers to the engine.

use super::*;

impl Inner {
    /// Read the connection that last delivered bytes, without asking the
    /// poller; whether that read anything. Its readiness edge, if any,
    /// stays queued in the poller and costs one empty read later.
    pub(super) fn read_hot(&self) -> bool {
        let token = self.hot.load(Ordering::Relaxed);
        if token == 0 {
            return false;
        }
        let got = match self.conn(token) {
            Some(c) if c.state() == ConnState::Established => self.service_rx(&c),
            _ => false,
        };
        if got {
            bump(&self.stats.hot_reads, 1);
        }
        got
    }

    /// Read and process what `conn` has; whether anything was read (by this
    /// call: `false` if another thread holds the receive side).
    pub(super) fn service_rx(&self, conn: &Arc<Conn>) -> bool {
        let mut got = false;
        loop {
            conn.rx_again.store(true, Ordering::SeqCst);
            let mut rx = match conn.rx.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return got, // the holder will look again
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            conn.rx_again.store(false, Ordering::SeqCst);
            got |= self.read_conn(conn, &mut rx);
            drop(rx);
            if !conn.rx_again.load(Ordering::SeqCst) {
                return got;
            }
        }
    }

    /// Read and process until the socket is drained, the budget is spent,
    /// or the connection ends; whether any bytes were read.
    pub(super) fn read_conn(&self, conn: &Arc<Conn>, rx: &mut Rx) -> bool {
        let mut got = false;
        if conn.state() == ConnState::Closed {
            self.reap(conn, rx);
            return got;
        }
        let held = conn.held.load(Ordering::SeqCst);
        if held != NOT_HELD {
            if held == self.core.intake_epoch() {
                // Still no room: leave the bytes in the socket, and stay on
                // the list the next resume services (a pass may have taken
                // it off for an older epoch).
                self.hold(conn.token);
                return got;
            }
            conn.held.store(NOT_HELD, Ordering::SeqCst);
        }
        let mut budget = self.cfg.read_budget;
        // A read that returned less than it asked for emptied the socket:
        // what arrives later raises a new readiness edge, so a second read
        // that would only say EAGAIN is skipped (one system call less per
        // message on the latency path).
        let mut drained = false;
        loop {
            if !self.process_buffered(conn, rx) {
                return got;
            }
            if conn.held.load(Ordering::SeqCst) != NOT_HELD {
                // The engine could not take the next message: read no
                // further (the kernel's buffers fill, and TCP holds the
                // sender back) until the intake resumes.
                return got;
            }
            if drained {
                self.await_rest(conn, rx);
                return got;
            }
            if budget == 0 {
                lock(&self.dirty).push(conn.token);
                return got;
            }
            // Direct read into the descriptor for large payload remainders.
            let Rx { phase, buf, .. } = &mut *rx;
            let (r, want) = match phase {
                Phase::Payload { region, filled, .. }
                    if buf.len() == 0 && region.len() - *filled >= self.cfg.direct_read_min =>
                {
                    if region.is_contiguous() {
                        // SAFETY: the region is lent to this connection until
                        // its token completes, and only the holder of `rx`
                        // writes it.
                        let dst = unsafe { region.as_mut_slice() };
                        let rest = dst.len() - *filled;
                        // The next header, if it is there, comes in the same
                        // call, into the (empty) buffer: reads stop at its
                        // end (see `Rx::header_first`), and a read of its own
                        // cost a stream of large messages a system call each.
                        let space = buf.space();
                        let hdr = HEADER_LEN.min(space.len());
                        let mut iov = [
                            IoSliceMut::new(&mut dst[*filled..]),
                            IoSliceMut::new(&mut space[..hdr]),
                        ];
                        let r = (&conn.sock).read_vectored(&mut iov);
                        if let Ok(n) = r {
                            *filled += n.min(rest);
                            buf.end += n.saturating_sub(rest);
                        }
                        (r, rest + hdr)
                    } else {
                        // An iovec descriptor's segments: one scattered
                        // read (`recvmsg`) straight into as many of them as
                        // one call takes.
                        let mut iov: [IoSliceMut<'_>; MAX_IOV] =
                            std::array::from_fn(|_| IoSliceMut::new(&mut []));
                        // SAFETY: as above; the slices are the only access
                        // to those bytes while they live.
                        let (n, want) = unsafe { region.io_slices_mut(*filled, &mut iov) };
                        let r = (&conn.sock).read_vectored(&mut iov[..n]);
                        if let Ok(n) = r {
                            *filled += n;
                        }
                        (r, want)
                    }
                }
                _ => {
                    let limit = read_limit(rx);
                    let space = rx.buf.space();
                    let want = limit.map_or(space.len(), |n| n.min(space.len()));
                    let r = (&conn.sock).read(&mut space[..want]);
                    if let Ok(n) = r {
                        rx.buf.end += n;
                    }
                    (r, want)
                }
            };
            match r {
                Ok(0) => {
                    self.broken(conn, rx, "closed by peer");
                    return got;
                }
                Ok(n) => {
                    tracing::trace!(token = conn.token, read = n, "read");
                    got = true;
                    self.hot.store(conn.token, Ordering::Relaxed);
                    bump(&self.stats.bytes_received, n as u64);
                    conn.heard.store(self.now_ns(), Ordering::Relaxed);
                    budget = budget.saturating_sub(n);
                    // Not after the peer's last byte: its end of file came
                    // with the edge this read answers, and no other edge
                    // will announce it.
                    drained = n < want && !conn.peer_done.load(Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Drained; anything still buffered was handled above.
                    self.await_rest(conn, rx);
                    return got;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken(conn, rx, &e.to_string());
                    return got;
                }
            }
        }
    }

    /// Put a held connection on the list the next resume services (once).
    fn hold(&self, token: u64) {
        let mut held = lock(&self.held);
        if !held.contains(&token) {
            held.push(token);
        }
    }

    /// The connection failed while reading.
    pub(super) fn broken(&self, conn: &Arc<Conn>, rx: &mut Rx, why: &str) {
        tracing::debug!(token = conn.token, peer = ?conn.peer(), why, "connection ended");
        if let Some(pid) = conn.peer() {
            if let Some(peer) = self.peer(pid) {
                let mut tx = lock(&peer.tx);
                self.lose(conn, &peer, &mut tx);
            }
        }
        self.close(conn);
        self.reap(conn, rx);
    }

    /// Tear down the receive side of a closed connection: abort its open
    /// deposit, unregister and forget it.
    pub(super) fn reap(&self, conn: &Arc<Conn>, rx: &mut Rx) {
        if conn.reaped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Phase::Payload { token: Some(t), .. } =
            std::mem::replace(&mut rx.phase, Phase::Header)
        {
            self.core
                .with_engine(|e| e.recv_abort(t, FailType::Incomplete));
        }
        for p in self.pollers() {
            p.deregister(conn.sock.as_raw_fd(), conn.token);
        }
        let slot = (conn.token >> 32) as usize;
        let mut conns = lock(&self.conns);
        if conns.get(slot).is_some_and(|c| c.token == conn.token) {
            conns.remove(slot);
        }
    }

    /// Consume what is buffered. Returns false if the connection ended.
    pub(super) fn process_buffered(&self, conn: &Arc<Conn>, rx: &mut Rx) -> bool {
        loop {
            match &mut rx.phase {
                Phase::Handshake => {
                    if rx.buf.len() < handshake::LEN {
                        return true;
                    }
                    let mut b = [0u8; handshake::LEN];
                    b.copy_from_slice(&rx.buf.bytes()[..handshake::LEN]);
                    rx.buf.consume(handshake::LEN);
                    if !self.on_handshake(conn, &b) {
                        self.close(conn);
                        self.reap(conn, rx);
                        return false;
                    }
                    rx.peer = conn.peer();
                    rx.phase = Phase::Header;
                }
                Phase::Header => {
                    let b = rx.buf.bytes();
                    if b.len() >= 4 && b[..4] == handshake::MAGIC {
                        // A control message of the transport itself.
                        if b.len() < handshake::LEN {
                            return true;
                        }
                        let mut m = [0u8; handshake::LEN];
                        m.copy_from_slice(&b[..handshake::LEN]);
                        rx.buf.consume(handshake::LEN);
                        if !self.on_control(conn, rx.peer, &m) {
                            tracing::warn!(peer = ?conn.peer(), "bad control message; closing the connection");
                            bump(&self.stats.malformed_frames, 1);
                            self.core.with_engine(|e| e.note_bad_header());
                            self.broken(conn, rx, "bad control message");
                            return false;
                        }
                        continue;
                    }
                    if b.len() < HEADER_LEN {
                        return true;
                    }
                    let h = match Header::decode(rx.buf.bytes()) {
                        Ok(h) => h,
                        Err(e) => {
                            tracing::warn!(peer = ?conn.peer(), error = %e, "malformed frame; closing the connection");
                            bump(&self.stats.malformed_frames, 1);
                            self.core.with_engine(|e| e.note_bad_header());
                            self.broken(conn, rx, "malformed frame");
                            return false;
                        }
                    };
                    rx.header_first = h.payload_len() >= self.cfg.direct_read_min as u64;
                    // Read before the header is offered (see
                    // `NiCore::intake_epoch`).
                    let epoch = self.core.intake_epoch();
                    if !self.on_header(rx, &h) {
                        conn.held.store(epoch, Ordering::SeqCst);
                        self.hold(conn.token);
                        return true;
                    }
                }
                Phase::Payload {
                    region,
                    filled,
                    discard,
                    ..
                } => {
                    let want = region.len() - *filled;
                    if want > 0 {
                        let n = want.min(rx.buf.len());
                        if n == 0 {
                            return true;
                        }
                        // SAFETY: lent region, sole writer (we hold `rx`);
                        // the buffer is ours, not descriptor memory.
                        unsafe { region.write_at(*filled, &rx.buf.bytes()[..n]) };
                        bump(&self.stats.payload_bytes_staged, n as u64);
                        *filled += n;
                        rx.buf.consume(n);
                        if n < want {
                            return true;
                        }
                    }
                    if *discard > 0 {
                        let n = (*discard).min(rx.buf.len() as u64);
                        *discard -= n;
                        rx.buf.consume(n as usize);
                        if *discard > 0 {
                            return true;
                        }
                    }
                    let Phase::Payload { token, respond, .. } =
                        std::mem::replace(&mut rx.phase, Phase::Header)
                    else {
                        unreachable!("matched above");
                    };
                    self.reset_lowat(conn, rx);
                    if let Some(t) = token {
                        let a = self.core.with_engine(|e| self.stage(e.recv_complete(t)));
                        self.send_answer(a);
                    } else if let Some(m) = respond {
                        // No event at this end: nothing the application
                        // sends can have been caused by this message.
                        self.answer(m);
                    }
                }
            }
        }
    }

    /// Let a write to `peer` in progress on another thread complete its
    /// messages' send tokens before an acknowledgment from that peer goes
    /// to the engine.
    ///
    /// The put it acknowledges was written whole by a flush, which holds the
    /// peer's send lock from the `sendmsg` to its token's completion; the
    /// acknowledgment can come back inside that window (the writer
    /// preempted after its system call). The engine then holds it until the
    /// send completes (a put's `Sent` comes before its `Ack`), while a
    /// message the peer sent after it, read next, posts its event at once:
    /// the initiator would see the target's reply before the
    /// acknowledgment of the put that caused it.
    fn await_send_completion(&self, peer: ProcessId) {
        if let Some(p) = self.peer(peer) {
            drop(lock(&p.tx));
        }
    }

    /// A header arrived (still at the front of the buffer): let the engine
    /// match it, and consume it unless the engine held it back (false).
    /// When the whole payload is already buffered, match, copy and complete
    /// under one engine lock.
    pub(super) fn on_header(&self, rx: &mut Rx, h: &Header) -> bool {
        tracing::trace!(src = %h.src, op = ?h.op, len = h.payload_len(), buffered = rx.buf.len(), "header");
        if rx.peer != Some(h.src) {
            // A header must come from the process that proved itself in the
            // handshake; anything else is counted and skipped.
            self.core.with_engine(|e| e.note_bad_header());
            rx.buf.consume(HEADER_LEN);
            rx.phase = Phase::Payload {
                region: Region::empty(),
                filled: 0,
                discard: h.payload_len(),
                token: None,
                respond: None,
            };
            return true;
        }
        if h.op == Op::Ack {
            self.await_send_completion(h.src);
        }
        let plen = h.payload_len();
        if plen <= (rx.buf.len() - HEADER_LEN) as u64 {
            let data = &rx.buf.bytes()[HEADER_LEN..HEADER_LEN + plen as usize];
            // Answers are staged under the engine lock (see `Inner::stage`).
            let out = self.core.with_engine(|e| match e.recv_header(h) {
                RecvAction::Deposit { region, token, .. } => {
                    // SAFETY: lent region, sole writer; `data` is our own
                    // buffer, distinct from descriptor memory.
                    unsafe { region.write_at(0, &data[..region.len()]) };
                    bump(&self.stats.payload_bytes_staged, region.len() as u64);
                    Some(self.stage(e.recv_complete(token)))
                }
                RecvAction::Discard(_) => Some(Answer::Nothing),
                RecvAction::Respond { response, .. } => Some(self.stage(Some(response))),
                RecvAction::Defer => None,
            });
            let Some(a) = out else {
                return false;
            };
            rx.buf.consume(HEADER_LEN + plen as usize);
            self.send_answer(a);
            return true;
        }
        let action = self.core.with_engine(|e| e.recv_header(h));
        if matches!(action, RecvAction::Defer) {
            return false;
        }
        rx.buf.consume(HEADER_LEN);
        rx.phase = match action {
            RecvAction::Deposit {
                region,
                discard,
                token,
            } => Phase::Payload {
                region,
                filled: 0,
                discard,
                token: Some(token),
                respond: None,
            },
            RecvAction::Discard(n) => Phase::Payload {
                region: Region::empty(),
                filled: 0,
                discard: n,
                token: None,
                respond: None,
            },
            RecvAction::Respond { discard, response } => Phase::Payload {
                region: Region::empty(),
                filled: 0,
                discard,
                token: None,
                respond: Some(response),
            },
            RecvAction::Defer => return false,
        };
        true
    }

    /// A control message on an established connection; false if it is
    /// malformed or not from the connection's peer.
    pub(super) fn on_control(
        &self,
        conn: &Arc<Conn>,
        from: Option<ProcessId>,
        b: &[u8; handshake::LEN],
    ) -> bool {
        let Ok(h) = Handshake::decode(b) else {
            return false;
        };
        if h.job_key != self.job_key || Some(h.src) != from || h.dst != self.me {
            return false;
        }
        match h.kind {
            Kind::Ping => {
                if let Some(peer) = self.peer(h.src) {
                    let mut tx = lock(&peer.tx);
                    if let Some(c) = tx.conn.clone().filter(|c| Arc::ptr_eq(c, conn)) {
                        self.send_control(&peer, &mut tx, &c, Kind::Pong);
                    }
                }
                true
            }
            // Arriving was the point (`heard` is already up to date).
            Kind::Pong => true,
            Kind::Hello | Kind::Accept | Kind::Duplicate => false,
        }
    }
}

/// How much a read into the connection's buffer may take: all its room,
/// except while the message being read is large (`Rx::header_first`),
/// when it stops at the end of the next header, so that the payload
/// behind it, if large too, is read straight into its descriptor. `None`
/// for no limit (never zero: a read of nothing would look like the end of
/// the stream).
fn read_limit(rx: &Rx) -> Option<usize> {
    if !rx.header_first {
        return None;
    }
    let to_header_end = match &rx.phase {
        Phase::Header => HEADER_LEN as u64,
        Phase::Payload {
            region,
            filled,
            discard,
            ..
        } => ((region.len() - filled) as u64)
            .saturating_add(*discard)
            .saturating_add(HEADER_LEN as u64),
        Phase::Handshake => return None,
    };
    let n = to_header_end.saturating_sub(rx.buf.len() as u64);
    usize::try_from(n).ok().filter(|&n| n > 0)
}
