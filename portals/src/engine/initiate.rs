//! Initiating operations: a put, get or get-put from a descriptor is
//! checked, recorded as pending and turned into the [`Outbound`] message
//! the transport sends; what the initiator waits for (an acknowledgment, a
//! reply) is kept with it until it comes or the peer fails.

use super::*;

impl Engine {
    pub(super) fn initiate(
        &mut self,
        kind: OpKind,
        md: MdHandle,
        region: Option<(u64, u64)>,
        remote: &Remote,
        ack: AckReq,
        hdr_data: u64,
    ) -> Result<Outbound> {
        if !remote.target.is_concrete() {
            return Err(PtlError::InvalidProcess(remote.target));
        }
        let k = self.live_md_key(md)?;
        let d = &mut self.mds[k];
        if !d.is_active() {
            return Err(PtlError::MdInactive);
        }
        let (local_offset, length) = region.unwrap_or((0, d.length));
        check_range(local_offset, length, d.length)?;
        // A reply must not land on memory another transfer uses, and a send
        // must not read memory a reply may be writing.
        let access = if kind.is_put_like() {
            Access::Read
        } else {
            Access::Write
        };
        if d.io_conflicts(local_offset, local_offset + length, access) {
            return Err(PtlError::MdInUse);
        }
        // A put counts as an operation when it is initiated; a get only
        // when its reply arrives (sending a request produces no event).
        if kind.is_put_like() {
            d.consume();
        }
        let region = d.lend(local_offset, length, access);
        let awaiting = match (kind.is_put_like(), ack) {
            (true, AckReq::Ack | AckReq::Lazy) => Awaiting::Ack,
            (true, AckReq::NoAck) => Awaiting::Nothing,
            (false, _) => Awaiting::Reply,
        };
        if awaiting != Awaiting::Nothing {
            d.awaiting += 1;
        }
        if d.wants_unlink() {
            d.state = MdState::Unlinking;
        }
        let opk = self.ops.insert(InitOp {
            kind,
            md: k,
            put_md: None,
            target: remote.target,
            pt_index: remote.pt_index,
            match_bits: remote.match_bits,
            hdr_data,
            local_offset,
            length,
            put_offset: 0,
            send_pending: true,
            awaiting,
            reply_in_progress: None,
            early_ack: None,
        });
        self.status.initiated += 1;
        let header = Header {
            op: match kind {
                OpKind::Put => Op::Put,
                OpKind::Get => Op::Get,
                OpKind::GetPut => Op::GetPut,
                OpKind::Atomic => Op::Atomic,
                OpKind::FetchAtomic => Op::FetchAtomic,
            },
            ack_req: kind.is_put_like() && ack.requested(),
            ack_lazy: kind.is_put_like() && ack == AckReq::Lazy,
            fail: FailType::Ok,
            job_key: self.job_key,
            src: self.id,
            dst: remote.target,
            pt_index: remote.pt_index,
            ac_index: remote.ac_index.0,
            match_bits: remote.match_bits,
            offset: remote.remote_offset,
            hdr_data,
            rlength: length,
            mlength: 0,
            cookie: op_cookie(opk),
            atomic: None,
        };
        let payload = match kind {
            OpKind::Put | OpKind::Atomic => {
                let info = self.op_info(opk, 0, FailType::Ok);
                self.post(k, EventKind::SendStart, &info);
                Payload::Region(region)
            }
            _ => Payload::None,
        };
        Ok(Outbound {
            header,
            payload,
            token: Some(SendToken(TokenKind::Op(opk))),
        })
    }

    /// Put the whole of descriptor `md` to `remote` (`PtlPut`).
    pub fn put(
        &mut self,
        md: MdHandle,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
    ) -> Result<Outbound> {
        self.initiate(OpKind::Put, md, None, remote, ack, hdr_data)
    }

    /// Put `length` bytes of `md` starting at `local_offset`
    /// (`PtlPutRegion`).
    pub fn put_region(
        &mut self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
    ) -> Result<Outbound> {
        self.initiate(
            OpKind::Put,
            md,
            Some((local_offset, length)),
            remote,
            ack,
            hdr_data,
        )
    }

    /// Get `md`'s length in bytes from `remote` into `md` (`PtlGet`).
    pub fn get(&mut self, md: MdHandle, remote: &Remote) -> Result<Outbound> {
        self.initiate(OpKind::Get, md, None, remote, AckReq::NoAck, 0)
    }

    /// Get `length` bytes from `remote` into `md` at `local_offset`
    /// (`PtlGetRegion`).
    pub fn get_region(
        &mut self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        remote: &Remote,
    ) -> Result<Outbound> {
        self.initiate(
            OpKind::Get,
            md,
            Some((local_offset, length)),
            remote,
            AckReq::NoAck,
            0,
        )
    }

    /// Atomically swap (`PtlGetPut`): the target stores the contents of
    /// `put_md` and replies with the bytes they replace, which land in
    /// `get_md`. Both descriptors must have the same length. The target
    /// descriptor needs both `OP_PUT` and `OP_GET`; it posts a `Get` event.
    /// The initiator sees `Sent` on `put_md` and `Reply` on `get_md`.
    pub fn get_put(
        &mut self,
        get_md: MdHandle,
        put_md: MdHandle,
        remote: &Remote,
        hdr_data: u64,
    ) -> Result<Outbound> {
        let pk = self.live_md_key(put_md)?;
        let gk = self.live_md_key(get_md)?;
        if pk == gk {
            return Err(PtlError::InvalidArgument(
                "get_put needs two different descriptors",
            ));
        }
        let len = self.mds[gk].length;
        if self.mds[pk].length != len {
            return Err(PtlError::InvalidArgument(
                "get_put descriptors must have the same length",
            ));
        }
        if !self.mds[pk].is_active() {
            return Err(PtlError::MdInactive);
        }
        if self.mds[pk].io_conflicts(0, len, Access::Read) {
            return Err(PtlError::MdInUse);
        }
        let mut out = self.initiate(
            OpKind::GetPut,
            get_md,
            None,
            remote,
            AckReq::NoAck,
            hdr_data,
        )?;
        let p = &mut self.mds[pk];
        p.consume();
        let region = p.lend(0, len, Access::Read);
        if p.wants_unlink() {
            p.state = MdState::Unlinking;
        }
        if let Some(SendToken(TokenKind::Op(opk))) = &out.token {
            let op = &mut self.ops[*opk];
            op.put_md = Some(pk);
            op.put_offset = 0;
        }
        out.payload = Payload::Region(region);
        Ok(out)
    }

    pub(super) fn op_info(&self, opk: OpKey, mlength: u64, fail: FailType) -> EvInfo {
        let op = &self.ops[opk];
        EvInfo {
            initiator: op.target,
            pt_index: op.pt_index,
            match_bits: op.match_bits,
            rlength: op.length,
            mlength,
            offset: op.local_offset,
            hdr_data: op.hdr_data,
            fail,
        }
    }

    /// Release the reply region of a get and stop waiting for its reply.
    pub(super) fn finish_awaiting(&mut self, opk: OpKey) {
        let op = &mut self.ops[opk];
        let (md, awaiting, off, len) = (op.md, op.awaiting, op.local_offset, op.length);
        op.awaiting = Awaiting::Nothing;
        op.reply_in_progress = None;
        if let Some(d) = self.mds.get_mut(md) {
            if awaiting != Awaiting::Nothing {
                d.awaiting = d.awaiting.saturating_sub(1);
            }
            if awaiting == Awaiting::Reply {
                d.give_back(off, len);
            }
        }
        if !self.ops[opk].send_pending {
            self.ops.remove(opk);
        }
        self.settle(md);
    }
}
