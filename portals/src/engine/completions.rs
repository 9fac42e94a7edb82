//! The completions the transport reports: a send handed to the network
//! or failed, a deposit in place or aborted, a peer given up on. Each posts
//! its events, answers what is due and unlinks what was consumed.

use super::*;

impl Engine {
    /// The transport is done with an outbound message's payload: it was
    /// handed to the network (`fail` = `Ok`) or could not be sent.
    pub fn send_complete(&mut self, token: SendToken, fail: FailType) {
        match token.0 {
            TokenKind::Op(opk) => self.op_sent(opk, fail),
            TokenKind::Xfer(xk) => self.xfer_done(xk, fail),
        }
        self.run_triggers();
    }

    fn op_sent(&mut self, opk: OpKey, fail: FailType) {
        let Some(op) = self.ops.get_mut(opk) else {
            return;
        };
        op.send_pending = false;
        let (kind, md, put_md, off, len, put_off) = (
            op.kind,
            op.md,
            op.put_md,
            op.local_offset,
            op.length,
            op.put_offset,
        );
        match kind {
            OpKind::Put | OpKind::Atomic => {
                if let Some(d) = self.mds.get_mut(md) {
                    d.give_back(off, len);
                }
                let info = self.op_info(opk, len, fail);
                self.post(md, EventKind::Sent, &info);
                if let Some((mlength, offset, ack_fail)) = self.ops[opk].early_ack.take() {
                    self.post_ack(opk, mlength, offset, ack_fail);
                    return;
                }
            }
            OpKind::GetPut | OpKind::FetchAtomic => {
                if let Some(p) = put_md {
                    if let Some(d) = self.mds.get_mut(p) {
                        d.give_back(put_off, len);
                    }
                    let mut info = self.op_info(opk, len, fail);
                    info.offset = put_off;
                    self.post(p, EventKind::Sent, &info);
                    self.settle(p);
                }
            }
            OpKind::Get => {}
        }
        let op = &self.ops[opk];
        if fail != FailType::Ok
            && op.awaiting != Awaiting::Nothing
            && op.reply_in_progress.is_none()
        {
            // The request never left whole, so no response will come: the
            // awaited event completes too, with the same failure.
            let kind = if op.awaiting == Awaiting::Reply {
                EventKind::Reply
            } else {
                EventKind::Ack
            };
            let info = self.op_info(opk, 0, fail);
            self.post(md, kind, &info);
            self.finish_awaiting(opk);
            return;
        }
        if self.ops[opk].awaiting == Awaiting::Nothing {
            self.ops.remove(opk);
        }
        self.settle(md);
    }

    /// A transfer at this target ends: its reply was sent (or failed to
    /// be), or its deposit was aborted. The region goes back and the
    /// target's event posts with `fail`.
    fn xfer_done(&mut self, xk: XferKey, fail: FailType) {
        let Some(x) = self.xfers.remove(xk) else {
            return;
        };
        if let Some(d) = self.mds.get_mut(x.md) {
            d.give_back(x.offset, x.mlength);
        }
        self.eq_in_flight(x.md, -1);
        let info = xfer_info(&x, fail);
        self.post(x.md, x.kind.target_event(), &info);
        if let Some(a) = x.atomic {
            self.atoms.recycle(a);
        }
        self.settle(x.md);
    }

    /// The payload of a `Deposit` is in place. Returns the acknowledgment or
    /// reply to send, if one is due.
    pub fn recv_complete(&mut self, token: RecvToken) -> Option<Outbound> {
        let response = match token.0 {
            TokenKind::Xfer(xk) => self.deposit_done(xk),
            TokenKind::Op(opk) => {
                self.reply_done(opk, FailType::Ok);
                None
            }
        };
        self.run_triggers();
        response
    }

    /// The payload of a `Deposit` will never arrive complete (the peer died
    /// mid-message). Posts the event with `fail` and sends nothing.
    pub fn recv_abort(&mut self, token: RecvToken, fail: FailType) {
        match token.0 {
            TokenKind::Xfer(xk) => self.xfer_done(xk, fail),
            TokenKind::Op(opk) => self.reply_done(opk, fail),
        }
        self.run_triggers();
    }

    fn reply_done(&mut self, opk: OpKey, fail: FailType) {
        let Some(op) = self.ops.get(opk) else {
            return;
        };
        let (md, mlength) = (op.md, op.reply_in_progress.unwrap_or(0));
        if let Some(d) = self.mds.get_mut(md) {
            d.consume();
        }
        let info = self.op_info(opk, mlength, fail);
        self.post(md, EventKind::Reply, &info);
        self.finish_awaiting(opk);
    }

    fn deposit_done(&mut self, xk: XferKey) -> Option<Outbound> {
        if self.xfers.get(xk)?.atomic.is_some() {
            return self.atomic_arrived(xk);
        }
        let mut x = self.xfers.remove(xk)?;
        let d = self.mds.get_mut(x.md)?;
        d.give_back(x.offset, x.mlength);
        let mut response = None;
        match x.kind {
            OpKind::GetPut => {
                // The swap itself: under the engine's lock, so no other
                // operation sees a half-swapped region.
                let target = d.mem.region(x.offset, x.mlength);
                let mut old = vec![0u8; target.len()];
                // SAFETY: offset..offset+mlength was checked against the
                // descriptor when the request was accepted, the range was
                // reserved until now (only this call uses it), and
                // `old`/`staging` are separate allocations of that length.
                unsafe {
                    target.read_at(0, &mut old);
                    target.write_at(0, &x.staging);
                }
                x.staging = Vec::new();
                response = Some(Outbound {
                    header: self.response_header(&x, Op::Reply, FailType::Ok),
                    payload: Payload::Owned(old),
                    token: None,
                });
            }
            OpKind::Put if x.ack => {
                response = Some(Outbound {
                    header: self.response_header(&x, Op::Ack, FailType::Ok),
                    payload: Payload::None,
                    token: None,
                });
            }
            _ => {}
        }
        self.eq_in_flight(x.md, -1);
        let info = xfer_info(&x, FailType::Ok);
        self.post(x.md, x.kind.target_event(), &info);
        self.settle(x.md);
        response
    }

    pub(super) fn response_header(&self, x: &Xfer, op: Op, fail: FailType) -> Header {
        Header {
            op,
            ack_req: false,
            // Only a successful acknowledgment may wait: a failure is news
            // the initiator acts on.
            ack_lazy: op == Op::Ack && fail == FailType::Ok && x.ack_lazy,
            fail,
            job_key: self.job_key,
            src: self.id,
            dst: x.initiator,
            pt_index: x.pt_index,
            ac_index: 0,
            match_bits: x.match_bits,
            offset: x.offset,
            hdr_data: 0,
            rlength: x.rlength,
            mlength: x.mlength,
            cookie: x.cookie,
            atomic: None,
        }
    }

    /// The transport gave up on `peer` (disconnected, unreachable, dead).
    /// Every operation waiting for an acknowledgment or reply from it
    /// completes with a failure event. Sends still queued must be completed
    /// by the transport with [`Engine::send_complete`], and deposits in
    /// progress with [`Engine::recv_abort`].
    ///
    /// An operation whose request has not been completed by the transport
    /// yet is left alone: its request may be behind the failure (issued by
    /// another thread while the transport was reporting it) and may still
    /// reach a peer that came back, and if it does not, its failed send
    /// completes the awaited event too, after the `Sent` event as always.
    ///
    /// The peer is also added to [`Engine::failed_peers`], so that a layer
    /// waiting passively for the peer (a posted receive, a send waiting for
    /// the peer to fetch its data) can learn of the failure too.
    pub fn peer_failed(&mut self, peer: ProcessId) {
        if !self.failed_peers.contains(&peer) {
            self.failed_peers.push(peer);
            // Wake sleepers so they can look at the list.
            self.posted = true;
        }
        let victims: Vec<OpKey> = self
            .ops
            .iter()
            .filter(|(_, op)| {
                // An ack that already arrived (held until the send completes)
                // is not lost with the peer.
                op.target == peer
                    && op.awaiting != Awaiting::Nothing
                    && !op.send_pending
                    && op.reply_in_progress.is_none()
                    && op.early_ack.is_none()
            })
            .map(|(k, _)| k)
            .collect();
        for opk in victims {
            let op = &self.ops[opk];
            let kind = if op.awaiting == Awaiting::Ack {
                EventKind::Ack
            } else {
                EventKind::Reply
            };
            let md = op.md;
            let info = self.op_info(opk, 0, FailType::Unreachable);
            self.post(md, kind, &info);
            self.finish_awaiting(opk);
        }
        self.run_triggers();
    }
}
