//! The receive path: an incoming header (a put, get, get-put or atomic at
//! the target; an acknowledgment or reply at the initiator) is checked,
//! matched against the portal's list through the index, and answered with
//! the [`RecvAction`] the transport carries out.

use super::{
    xfer_info, Awaiting, Engine, OpKey, OpKind, Outbound, Payload, RecvAction, RecvToken, Region,
    SendToken, TokenKind, Xfer,
};
use crate::event::EventKind;
use crate::handle::{cookie_op, MdKey};
use crate::md::{Acceptance, Access, MdOptions, MdState};
use crate::types::FailType;
use crate::wire::{Header, Op};

const REQUIRED_PUT: MdOptions = MdOptions::OP_PUT;
const REQUIRED_GET: MdOptions = MdOptions::OP_GET;
const REQUIRED_GETPUT: MdOptions = MdOptions::OP_PUT.union(MdOptions::OP_GET);

impl Engine {
    /// Process an incoming header (`PtlPut`/`PtlGet` arriving at the target,
    /// or an ack/reply arriving at the initiator) and say what to do with the
    /// payload that follows it.
    pub fn recv_header(&mut self, h: &Header) -> RecvAction {
        let action = self.recv_header_with(h, true);
        self.run_triggers();
        action
    }

    /// [`Engine::recv_header`] for a transport that cannot hold a message
    /// back (in-process delivery inside the sender's call, such as
    /// [`crate::loopback`] and self-sends): never [`RecvAction::Defer`]; a
    /// flow-controlled queue without room then overflows as an ordinary
    /// one does.
    pub fn recv_header_unheld(&mut self, h: &Header) -> RecvAction {
        let action = self.recv_header_with(h, false);
        self.run_triggers();
        action
    }

    fn recv_header_with(&mut self, h: &Header, hold: bool) -> RecvAction {
        let payload = h.payload_len();
        if h.job_key != self.job_key || h.dst != self.id || !h.src.is_concrete() {
            self.status.dropped_bad_header += 1;
            return RecvAction::Discard(payload);
        }
        match h.op {
            Op::Ack => self.recv_ack(h, hold),
            Op::Reply => self.recv_reply(h, hold),
            Op::Put => self.recv_request(h, OpKind::Put, REQUIRED_PUT, hold),
            Op::Get => self.recv_request(h, OpKind::Get, REQUIRED_GET, hold),
            Op::GetPut => self.recv_request(h, OpKind::GetPut, REQUIRED_GETPUT, hold),
            Op::Atomic => self.recv_request(h, OpKind::Atomic, REQUIRED_PUT, hold),
            // As Portals 4: a fetching atomic reads and writes the target.
            Op::FetchAtomic => self.recv_request(h, OpKind::FetchAtomic, REQUIRED_GETPUT, hold),
        }
    }

    fn pending_response(&mut self, h: &Header, want: Awaiting) -> Option<OpKey> {
        let opk = cookie_op(h.cookie);
        match self.ops.get(opk) {
            Some(op)
                if op.target == h.src
                    && op.awaiting == want
                    && op.reply_in_progress.is_none()
                    && op.early_ack.is_none() =>
            {
                Some(opk)
            }
            _ => {
                self.status.dropped_stale_response += 1;
                None
            }
        }
    }

    fn recv_ack(&mut self, h: &Header, hold: bool) -> RecvAction {
        let Some(opk) = self.pending_response(h, Awaiting::Ack) else {
            return RecvAction::Discard(0);
        };
        if hold && self.must_hold(self.ops[opk].md, h.src) {
            self.status.held_back += 1;
            return RecvAction::Defer;
        }
        if h.mlength > self.ops[opk].length {
            self.status.dropped_bad_header += 1;
            return RecvAction::Discard(0);
        }
        if self.ops[opk].send_pending {
            self.ops[opk].early_ack = Some((h.mlength, h.offset, h.fail));
            return RecvAction::Discard(0);
        }
        self.post_ack(opk, h.mlength, h.offset, h.fail);
        RecvAction::Discard(0)
    }

    pub(super) fn post_ack(&mut self, opk: OpKey, mlength: u64, offset: u64, fail: FailType) {
        let md = self.ops[opk].md;
        if let Some(d) = self.mds.get_mut(md) {
            d.consume();
        }
        let mut info = self.op_info(opk, mlength, fail);
        info.offset = offset;
        self.post(md, EventKind::Ack, &info);
        self.finish_awaiting(opk);
    }

    fn recv_reply(&mut self, h: &Header, hold: bool) -> RecvAction {
        let payload = h.payload_len();
        let Some(opk) = self.pending_response(h, Awaiting::Reply) else {
            return RecvAction::Discard(payload);
        };
        if hold && self.must_hold(self.ops[opk].md, h.src) {
            self.status.held_back += 1;
            return RecvAction::Defer;
        }
        let op = &self.ops[opk];
        let (md, off, len) = (op.md, op.local_offset, op.length);
        if h.mlength > len {
            // The target claims to have moved more than was asked for.
            self.status.dropped_bad_header += 1;
            let info = self.op_info(opk, 0, FailType::Incomplete);
            self.post(md, EventKind::Reply, &info);
            self.finish_awaiting(opk);
            return RecvAction::Discard(payload);
        }
        if h.fail != FailType::Ok {
            if let Some(d) = self.mds.get_mut(md) {
                d.consume();
            }
            let info = self.op_info(opk, 0, h.fail);
            self.post(md, EventKind::Reply, &info);
            self.finish_awaiting(opk);
            return RecvAction::Discard(payload);
        }
        self.ops[opk].reply_in_progress = Some(h.mlength);
        let info = self.op_info(opk, h.mlength, FailType::Ok);
        self.post(md, EventKind::ReplyStart, &info);
        let Some(d) = self.mds.get_mut(md) else {
            // Cannot happen: a descriptor with lent regions is never removed.
            return RecvAction::Discard(payload);
        };
        // Lent (for the whole requested length) when the get was initiated.
        RecvAction::Deposit {
            region: d.mem.region(off, h.mlength),
            discard: payload - h.mlength,
            token: RecvToken(TokenKind::Op(opk)),
        }
    }

    fn nack(&self, h: &Header, payload: u64) -> RecvAction {
        let answer = match h.op {
            Op::Put | Op::Atomic if h.ack_req => Op::Ack,
            Op::Get | Op::GetPut | Op::FetchAtomic => Op::Reply,
            _ => return RecvAction::Discard(payload),
        };
        RecvAction::Respond {
            discard: payload,
            response: Outbound {
                header: Header {
                    op: answer,
                    ack_req: false,
                    ack_lazy: false,
                    fail: FailType::Dropped,
                    job_key: self.job_key,
                    src: self.id,
                    dst: h.src,
                    pt_index: h.pt_index,
                    ac_index: 0,
                    match_bits: h.match_bits,
                    offset: h.offset,
                    hdr_data: 0,
                    rlength: h.rlength,
                    mlength: 0,
                    cookie: h.cookie,
                    atomic: None,
                },
                payload: Payload::None,
                token: None,
            },
        }
    }

    /// The first entry of portal `pt`'s match list, in list order, that
    /// matches and whose descriptor accepts: the earliest accepting entry
    /// of the message's bucket in each class of the index, or of the
    /// unindexed entries before it (see `index`). `Err(true)` if some entry
    /// matched but every matching descriptor rejected.
    #[inline]
    fn search(
        &self,
        pt: usize,
        h: &Header,
        required: MdOptions,
    ) -> std::result::Result<(MdKey, Acceptance), bool> {
        let idx = &self.index[pt];
        // An atomic is applied whole: a descriptor that would truncate it
        // rejects it.
        let whole = h.op.is_atomic();
        let takes = |acc: &Acceptance| !whole || acc.mlength == h.rlength;
        let mut best: Option<(u64, MdKey, Acceptance)> = None;
        let mut matched = false;
        let earlier = |best: &Option<(u64, MdKey, Acceptance)>, label: u64| {
            best.as_ref().is_none_or(|b| label < b.0)
        };
        for class in &idx.classes {
            let Some(bucket) = class.buckets.get(&class.key(h.src, h.match_bits)) else {
                continue;
            };
            matched = true;
            let mut cur = Some(bucket.head);
            while let Some(k) = cur {
                let me = &self.mes[k];
                if !earlier(&best, me.label) {
                    break;
                }
                cur = me.sub_next;
                let Some(mdk) = me.md else { continue };
                if let Some(acc) = self.mds[mdk].accept(required, h.rlength, h.offset) {
                    if takes(&acc) {
                        best = Some((me.label, mdk, acc));
                        break;
                    }
                }
            }
        }
        let mut cur = idx.unindexed.map(|l| l.head);
        while let Some(k) = cur {
            let me = &self.mes[k];
            if !earlier(&best, me.label) {
                break;
            }
            cur = me.sub_next;
            if !me.matches(h.src, h.match_bits) {
                continue;
            }
            matched = true;
            let Some(mdk) = me.md else { continue };
            if let Some(acc) = self.mds[mdk].accept(required, h.rlength, h.offset) {
                if takes(&acc) {
                    best = Some((me.label, mdk, acc));
                    break;
                }
            }
        }
        best.map(|(_, mdk, acc)| (mdk, acc)).ok_or(matched)
    }

    fn recv_request(
        &mut self,
        h: &Header,
        kind: OpKind,
        required: MdOptions,
        hold: bool,
    ) -> RecvAction {
        let payload = h.payload_len();
        let pt = h.pt_index.0 as usize;
        if pt >= self.portals.len() {
            self.status.dropped_bad_header += 1;
            return self.nack(h, payload);
        }
        if !self.acl.admits(h.ac_index, h.src, h.pt_index) {
            self.status.dropped_access_denied += 1;
            return self.nack(h, payload);
        }
        if h.op.is_atomic() && !self.atomic_request_valid(h) {
            self.status.dropped_atomic_invalid += 1;
            return self.nack(h, payload);
        }
        let (mdk, acc) = match self.search(pt, h, required) {
            Ok(found) => found,
            Err(matched) => {
                if matched {
                    self.status.dropped_rejected += 1;
                } else {
                    self.status.dropped_no_match += 1;
                }
                return self.nack(h, payload);
            }
        };
        if hold && self.must_hold(mdk, h.src) {
            self.status.held_back += 1;
            return RecvAction::Defer;
        }
        self.status.accepted += 1;
        let d = &mut self.mds[mdk];
        d.consume();
        d.advance(acc.mlength);
        // Puts are written by the transport; gets are read by it; a get-put
        // and an atomic are applied under the engine lock, but their range
        // stays lent so the descriptor cannot go away first.
        let access = match kind {
            OpKind::Put => Access::Write,
            OpKind::Atomic | OpKind::FetchAtomic => Access::Atomic,
            OpKind::Get | OpKind::GetPut => Access::Read,
        };
        let region = d.lend(acc.offset, acc.mlength, access);
        let ack =
            kind.is_put_like() && h.ack_req && !d.desc.options.contains(MdOptions::ACK_DISABLE);
        if d.wants_unlink() {
            d.state = MdState::Unlinking;
        }
        let staging = if kind == OpKind::GetPut {
            vec![0u8; acc.mlength as usize]
        } else {
            Vec::new()
        };
        let x = Xfer {
            kind,
            md: mdk,
            initiator: h.src,
            pt_index: h.pt_index,
            match_bits: h.match_bits,
            hdr_data: h.hdr_data,
            rlength: h.rlength,
            mlength: acc.mlength,
            offset: acc.offset,
            cookie: h.cookie,
            ack,
            ack_lazy: ack && h.ack_lazy,
            staging,
            atomic: h
                .atomic
                .map(|spec| self.atoms.take(spec, self.limits.max_atomic_size)),
        };
        let info = xfer_info(&x, FailType::Ok);
        self.post(
            mdk,
            if kind.is_put_like() {
                EventKind::PutStart
            } else {
                EventKind::GetStart
            },
            &info,
        );
        self.eq_in_flight(mdk, 1);
        let xk = self.xfers.insert(x);
        match kind {
            OpKind::Put => RecvAction::Deposit {
                region,
                discard: payload - acc.mlength,
                token: RecvToken(TokenKind::Xfer(xk)),
            },
            OpKind::Atomic | OpKind::FetchAtomic => RecvAction::Deposit {
                region: self.xfers[xk]
                    .atomic
                    .as_mut()
                    .map_or_else(Region::empty, |a| a.region(payload)),
                discard: 0,
                token: RecvToken(TokenKind::Xfer(xk)),
            },
            OpKind::GetPut => {
                let x = &mut self.xfers[xk];
                RecvAction::Deposit {
                    region: Region::contiguous(x.staging.as_mut_ptr(), x.staging.len()),
                    discard: payload - acc.mlength,
                    token: RecvToken(TokenKind::Xfer(xk)),
                }
            }
            OpKind::Get => {
                let x = &self.xfers[xk];
                RecvAction::Respond {
                    discard: 0,
                    response: Outbound {
                        header: self.response_header(x, Op::Reply, FailType::Ok),
                        payload: Payload::Region(region),
                        token: Some(SendToken(TokenKind::Xfer(xk))),
                    },
                }
            }
        }
    }
}
