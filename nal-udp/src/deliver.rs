//! The bridge between the protocol core and the Portals engine: a
//! [`Sink`] that matches each incoming message's header in the engine and
//! writes its payload fragments straight into the lent region of the
//! matched memory descriptor, plus the conversions of outgoing messages.

use rustc_hash::FxHashMap;

use portals::wire::Header;
use portals::{FailType, NiCore, Outbound, Payload, ProcessId, RecvAction, RecvToken, Region};

use crate::proto::{MsgId, OutPayload, PayloadSource, PeerId, Sink, HEADER_LEN};

/// The protocol peer id of a Portals process: `nid << 32 | pid`.
pub fn peer_id(p: ProcessId) -> PeerId {
    (u64::from(p.nid) << 32) | u64::from(p.pid)
}

/// The Portals process of a protocol peer id.
pub fn process_id(p: PeerId) -> ProcessId {
    ProcessId::new((p >> 32) as u32, p as u32)
}

/// A message being deposited: where its bytes go, and the engine's token.
#[derive(Debug)]
pub struct Deposit {
    region: Region,
    token: RecvToken,
}

/// Messages being deposited, by protocol message id.
pub type Deposits = FxHashMap<MsgId, Deposit>;

/// The [`Sink`] handed to the endpoint for one call. Responses the engine
/// asks for (acknowledgments, replies) are collected in `responses` and sent
/// by the driver once the endpoint call returns, in order.
pub struct EngineSink<'a> {
    /// The engine.
    pub core: &'a NiCore,
    /// Messages in progress.
    pub deposits: &'a mut Deposits,
    /// Responses to send.
    pub responses: &'a mut Vec<Outbound>,
    /// The engine held the last message back ([`RecvAction::Defer`]); see
    /// [`Sink::take_held`].
    pub held: bool,
}

impl Sink for EngineSink<'_> {
    fn on_message(
        &mut self,
        peer: PeerId,
        msg: MsgId,
        header: &[u8; HEADER_LEN],
        total_len: u64,
    ) -> u64 {
        let h = match Header::decode(header) {
            Ok(h) if h.src == process_id(peer) && h.payload_len() == total_len => h,
            // Undecodable, or claiming another sender or another length
            // than the datagram stream carries: counted, and nothing is
            // deposited.
            _ => {
                self.core.with_engine(|e| e.note_bad_header());
                return 0;
            }
        };
        match self.core.with_engine(|e| e.recv_header(&h)) {
            RecvAction::Deposit { region, token, .. } => {
                let want = region.len() as u64;
                self.deposits.insert(msg, Deposit { region, token });
                want
            }
            RecvAction::Discard(_) => 0,
            RecvAction::Respond { response, .. } => {
                self.responses.push(response);
                0
            }
            RecvAction::Defer => {
                self.held = true;
                0
            }
        }
    }

    fn take_held(&mut self) -> bool {
        std::mem::take(&mut self.held)
    }

    fn on_data(&mut self, msg: MsgId, offset: u64, data: &[u8]) {
        let Some(d) = self.deposits.get(&msg) else {
            return;
        };
        let fits = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data.len()).map(|end| (o, end)))
            .filter(|&(_, end)| end <= d.region.len());
        let Some((start, _)) = fits else {
            // The core only hands over bytes below the length we asked
            // for, which is the region's length; anything else is a bug
            // upstream, and writing it would corrupt memory.
            debug_assert!(false, "fragment outside the deposit region");
            return;
        };
        // SAFETY: the region is lent by the engine until its token is
        // completed, which happens only in `on_complete`/`on_abort` below;
        // the range was checked to lie inside it; `data` is the driver's
        // receive buffer, which never aliases descriptor memory; and only
        // this thread (holding the driver's state lock) writes the region.
        // `write_at` maps the logical offset to the segments of an iovec
        // descriptor (a fragment may straddle two).
        unsafe { d.region.write_at(start, data) };
    }

    fn on_complete(&mut self, msg: MsgId) {
        if let Some(d) = self.deposits.remove(&msg) {
            if let Some(resp) = self.core.with_engine(|e| e.recv_complete(d.token)) {
                self.responses.push(resp);
            }
        }
    }

    fn on_abort(&mut self, msg: MsgId) {
        if let Some(d) = self.deposits.remove(&msg) {
            self.core
                .with_engine(|e| e.recv_abort(d.token, FailType::Incomplete));
        }
    }
}

/// A lent region read by the protocol while the receiver pulls it.
struct RegionSource(Region);

impl PayloadSource for RegionSource {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, offset: u64, dst: &mut [u8]) {
        let Some(start) = usize::try_from(offset).ok() else {
            return;
        };
        if start
            .checked_add(dst.len())
            .is_none_or(|end| end > self.0.len())
        {
            debug_assert!(false, "read outside the payload");
            return;
        }
        // SAFETY: the engine lends the region until the send token is
        // completed, and the endpoint reads a borrowed payload only before
        // it reports the send complete (after which the driver completes the
        // token); the range is inside the region; regions lent for sending
        // are never written while lent; `dst` is the protocol's datagram
        // buffer. Segments of an iovec descriptor are gathered in place.
        unsafe { self.0.read_at(start, dst) };
    }
}

/// The protocol payload of an outbound Portals message.
pub fn out_payload(p: Payload) -> OutPayload {
    match p {
        Payload::None => OutPayload::Inline(Vec::new()),
        Payload::Owned(v) => OutPayload::Inline(v),
        Payload::Region(r) => OutPayload::Borrowed(Box::new(RegionSource(r))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ids_pack_process_ids_both_ways() {
        for p in [
            ProcessId::new(0, 0),
            ProcessId::new(7, 0),
            ProcessId::new(3, 9),
            ProcessId::new(u32::MAX - 1, u32::MAX - 1),
        ] {
            assert_eq!(process_id(peer_id(p)), p);
        }
        assert_ne!(peer_id(ProcessId::new(1, 0)), peer_id(ProcessId::new(0, 1)));
    }
}
