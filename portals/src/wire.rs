//! The Portals message header as it travels between NALs.
//!
//! Fixed size ([`HEADER_LEN`] bytes), little-endian, versioned. Every header
//! carries the job key so that a receiver can refuse traffic from outside the
//! job before it touches any match list. Decoding never panics: anything
//! malformed is a typed [`WireError`].
//!
//! Layout (byte offsets):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 4 | magic `"PTL3"` |
//! | 4   | 1 | version |
//! | 5   | 1 | operation ([`Op`]) |
//! | 6   | 1 | flags (bit 0: acknowledgment requested; bit 1: it may be held back, or in an ack: it was) |
//! | 7   | 1 | failure status of an ack/reply ([`FailType`]) |
//! | 8   | 8 | job key |
//! | 16  | 8 | source nid, pid |
//! | 24  | 8 | destination nid, pid |
//! | 32  | 4 | portal index |
//! | 36  | 4 | access-control index |
//! | 40  | 8 | match bits |
//! | 48  | 8 | offset (remote offset; in ack/reply the offset used) |
//! | 56  | 8 | header data |
//! | 64  | 8 | requested length |
//! | 72  | 8 | manipulated length (ack/reply); atomic requests: see below |
//! | 80  | 8 | initiator cookie, echoed in ack/reply |
//!
//! A request has manipulated nothing yet, so an atomic request
//! ([`Op::Atomic`], [`Op::FetchAtomic`]) uses bytes 72..80 for its
//! [`AtomicSpec`]: byte 72 the [`AtomicOp`] code, byte 73 the [`Datatype`]
//! code, bytes 74..80 zero. Its payload is the operand element first (only
//! for the operations that take one, [`AtomicOp::needs_operand`]), then
//! `rlength` bytes of source elements, all little-endian.

pub use crate::atomic::AtomicSpec;
use crate::atomic::{AtomicOp, Datatype};
use crate::types::{FailType, PortalIndex, ProcessId};

/// Size in bytes of an encoded header.
pub const HEADER_LEN: usize = 88;
/// The magic number at the start of every header: ASCII `"PTL3"`.
pub const MAGIC: [u8; 4] = *b"PTL3";
/// The wire format version this crate speaks.
pub const VERSION: u8 = 1;
/// Largest payload a header may announce. Anything larger is rejected as
/// malformed before a NAL tries to buffer or discard it.
pub const MAX_PAYLOAD: u64 = 1 << 40;

const FLAG_ACK_REQ: u8 = 1;
/// Where an atomic request keeps its [`AtomicSpec`] (the `mlength` slot).
const ATOMIC_AT: usize = 72;
/// With `FLAG_ACK_REQ` on a put or atomic, or on an ack: see
/// [`Header::ack_lazy`].
const FLAG_ACK_LAZY: u8 = 2;
const KNOWN_FLAGS: u8 = FLAG_ACK_REQ | FLAG_ACK_LAZY;

/// The operation a header carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Put request; followed by `rlength` payload bytes.
    Put = 1,
    /// Get request; no payload.
    Get = 2,
    /// Acknowledgment of a put; no payload.
    Ack = 3,
    /// Reply to a get or get-put; followed by `mlength` payload bytes.
    Reply = 4,
    /// Atomic swap request: followed by `rlength` bytes to store; the target
    /// replies with the bytes they replace.
    GetPut = 5,
    /// Atomic operation (`PtlAtomic`): the target applies
    /// [`Header::atomic`] with the payload as source; acknowledged like a
    /// put if asked.
    Atomic = 6,
    /// Fetching atomic operation or swap (`PtlFetchAtomic`, `PtlSwap`): as
    /// [`Op::Atomic`], and the target replies with the old values.
    FetchAtomic = 7,
}

impl Op {
    fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Put,
            2 => Op::Get,
            3 => Op::Ack,
            4 => Op::Reply,
            5 => Op::GetPut,
            6 => Op::Atomic,
            7 => Op::FetchAtomic,
            _ => return None,
        })
    }

    /// True for the operations a target answers (ack, reply): they are
    /// routed to the initiator's pending operation, not to a match list.
    pub const fn is_response(&self) -> bool {
        matches!(self, Op::Ack | Op::Reply)
    }

    /// True for the atomic requests, which carry an [`AtomicSpec`].
    pub const fn is_atomic(&self) -> bool {
        matches!(self, Op::Atomic | Op::FetchAtomic)
    }
}

/// A decoded Portals message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The operation.
    pub op: Op,
    /// Put only: the initiator asks for an acknowledgment.
    pub ack_req: bool,
    /// Put (with `ack_req`): the acknowledgment may be held back by the
    /// target's transport ([`crate::AckReq::Lazy`]). Ack: this is such an
    /// acknowledgment, which the transport may send with a later message.
    pub ack_lazy: bool,
    /// Ack/Reply only: whether the target performed the operation.
    pub fail: FailType,
    /// The job key; must equal the receiver's.
    pub job_key: u64,
    /// The sending process.
    pub src: ProcessId,
    /// The receiving process.
    pub dst: ProcessId,
    /// Portal index (request) or the index that was used (response).
    pub pt_index: PortalIndex,
    /// Access-control index named by the initiator.
    pub ac_index: u32,
    /// Match bits.
    pub match_bits: u64,
    /// Remote offset (request) or the offset the target used (response).
    pub offset: u64,
    /// 64 bits of out-of-band data delivered in the target's event.
    pub hdr_data: u64,
    /// Length the initiator asked to move.
    pub rlength: u64,
    /// Length the target moved (responses only; zero in requests).
    pub mlength: u64,
    /// Opaque initiator-side operation id, echoed in the response.
    pub cookie: u64,
    /// Atomic requests only (`Some` exactly for them): the operation and
    /// element type.
    pub atomic: Option<AtomicSpec>,
}

/// Why a header could not be decoded.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("header truncated: {0} of {HEADER_LEN} bytes")]
    Truncated(usize),
    /// The magic number is wrong: not a Portals header at all.
    #[error("bad magic number")]
    BadMagic,
    /// A version this implementation does not speak.
    #[error("unsupported wire version {0}")]
    BadVersion(u8),
    /// Unknown operation code.
    #[error("unknown operation code {0}")]
    BadOp(u8),
    /// Unknown flag bits, or a flag that makes no sense for the operation.
    #[error("bad flags {0:#04x}")]
    BadFlags(u8),
    /// Unknown failure code.
    #[error("unknown failure code {0}")]
    BadFail(u8),
    /// Lengths that are inconsistent with the operation or too large.
    #[error("inconsistent or oversized lengths")]
    BadLength,
    /// Unknown atomic operation code in an atomic request.
    #[error("unknown atomic operation code {0}")]
    BadAtomicOp(u8),
    /// Unknown datatype code in an atomic request.
    #[error("unknown atomic datatype code {0}")]
    BadDatatype(u8),
    /// Reserved bytes of an atomic request that are not zero.
    #[error("reserved atomic header bytes are not zero")]
    BadReserved,
}

impl Header {
    /// The number of payload bytes that follow this header on the wire.
    pub const fn payload_len(&self) -> u64 {
        match self.op {
            Op::Put | Op::GetPut => self.rlength,
            Op::Atomic | Op::FetchAtomic => match self.atomic {
                Some(a) => self.rlength + a.operand_len(),
                None => self.rlength,
            },
            Op::Reply => self.mlength,
            Op::Get | Op::Ack => 0,
        }
    }

    /// Encode into exactly [`HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.op as u8;
        b[6] = if self.ack_req { FLAG_ACK_REQ } else { 0 }
            | if self.ack_lazy { FLAG_ACK_LAZY } else { 0 };
        b[7] = self.fail as u8;
        put64(&mut b, 8, self.job_key);
        put32(&mut b, 16, self.src.nid);
        put32(&mut b, 20, self.src.pid);
        put32(&mut b, 24, self.dst.nid);
        put32(&mut b, 28, self.dst.pid);
        put32(&mut b, 32, self.pt_index.0);
        put32(&mut b, 36, self.ac_index);
        put64(&mut b, 40, self.match_bits);
        put64(&mut b, 48, self.offset);
        put64(&mut b, 56, self.hdr_data);
        put64(&mut b, 64, self.rlength);
        put64(&mut b, ATOMIC_AT, self.mlength);
        if let Some(a) = self.atomic {
            b[ATOMIC_AT] = a.op as u8;
            b[ATOMIC_AT + 1] = a.datatype as u8;
        }
        put64(&mut b, 80, self.cookie);
        b
    }

    /// Decode the first [`HEADER_LEN`] bytes of `buf`. Extra bytes are
    /// ignored (they are payload).
    pub fn decode(buf: &[u8]) -> Result<Header, WireError> {
        let b: &[u8; HEADER_LEN] = buf
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Truncated(buf.len()))?;
        if b[0..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if b[4] != VERSION {
            return Err(WireError::BadVersion(b[4]));
        }
        let op = Op::from_u8(b[5]).ok_or(WireError::BadOp(b[5]))?;
        let flags = b[6];
        let ack_allowed = matches!(op, Op::Put | Op::Atomic);
        let lazy_allowed = op == Op::Ack || (ack_allowed && flags & FLAG_ACK_REQ != 0);
        if flags & !KNOWN_FLAGS != 0
            || (flags & FLAG_ACK_REQ != 0 && !ack_allowed)
            || (flags & FLAG_ACK_LAZY != 0 && !lazy_allowed)
        {
            return Err(WireError::BadFlags(flags));
        }
        let fail = FailType::from_u8(b[7]).ok_or(WireError::BadFail(b[7]))?;
        if !op.is_response() && fail != FailType::Ok {
            return Err(WireError::BadFail(b[7]));
        }
        let (mlength, atomic) = if op.is_atomic() {
            let aop =
                AtomicOp::from_u8(b[ATOMIC_AT]).ok_or(WireError::BadAtomicOp(b[ATOMIC_AT]))?;
            let dt = Datatype::from_u8(b[ATOMIC_AT + 1])
                .ok_or(WireError::BadDatatype(b[ATOMIC_AT + 1]))?;
            if b[ATOMIC_AT + 2..ATOMIC_AT + 8].iter().any(|&x| x != 0) {
                return Err(WireError::BadReserved);
            }
            (
                0,
                Some(AtomicSpec {
                    op: aop,
                    datatype: dt,
                }),
            )
        } else {
            (get64(b, ATOMIC_AT), None)
        };
        let h = Header {
            op,
            ack_req: flags & FLAG_ACK_REQ != 0,
            ack_lazy: flags & FLAG_ACK_LAZY != 0,
            fail,
            job_key: get64(b, 8),
            src: ProcessId::new(get32(b, 16), get32(b, 20)),
            dst: ProcessId::new(get32(b, 24), get32(b, 28)),
            pt_index: PortalIndex(get32(b, 32)),
            ac_index: get32(b, 36),
            match_bits: get64(b, 40),
            offset: get64(b, 48),
            hdr_data: get64(b, 56),
            rlength: get64(b, 64),
            mlength,
            cookie: get64(b, 80),
            atomic,
        };
        // An atomic's operand rides on top of `rlength`: the total counts.
        let lengths_ok = h.rlength <= MAX_PAYLOAD
            && h.payload_len() <= MAX_PAYLOAD
            && match op {
                // A request has not manipulated anything yet.
                Op::Put | Op::Get | Op::GetPut | Op::Atomic | Op::FetchAtomic => h.mlength == 0,
                // A target never moves more than was asked for.
                Op::Ack | Op::Reply => h.mlength <= h.rlength,
            };
        if !lengths_ok {
            return Err(WireError::BadLength);
        }
        Ok(h)
    }
}

#[inline]
fn put32(b: &mut [u8; HEADER_LEN], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
fn put64(b: &mut [u8; HEADER_LEN], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[inline]
fn get32(b: &[u8; HEADER_LEN], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

#[inline]
fn get64(b: &[u8; HEADER_LEN], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A valid put header, for tests that need one.
    pub(crate) fn sample() -> Header {
        Header {
            op: Op::Put,
            ack_req: true,
            ack_lazy: false,
            fail: FailType::Ok,
            job_key: 0xdead_beef_0000_0001,
            src: ProcessId::new(1, 2),
            dst: ProcessId::new(3, 4),
            pt_index: PortalIndex(5),
            ac_index: 6,
            match_bits: 0x0123_4567_89ab_cdef,
            offset: 64,
            hdr_data: 99,
            rlength: 4096,
            mlength: 0,
            cookie: 77,
            atomic: None,
        }
    }

    #[test]
    fn encodes_little_endian_at_documented_offsets() {
        let b = sample().encode();
        assert_eq!(&b[0..4], b"PTL3");
        assert_eq!(b[4], VERSION);
        assert_eq!(b[5], Op::Put as u8);
        assert_eq!(b[6], 1);
        assert_eq!(&b[8..16], &0xdead_beef_0000_0001u64.to_le_bytes());
        assert_eq!(&b[16..20], &1u32.to_le_bytes());
        assert_eq!(&b[28..32], &4u32.to_le_bytes());
        assert_eq!(&b[40..48], &0x0123_4567_89ab_cdefu64.to_le_bytes());
        assert_eq!(&b[64..72], &4096u64.to_le_bytes());
        assert_eq!(&b[80..88], &77u64.to_le_bytes());
    }

    #[test]
    fn round_trips() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let ack = Header {
            op: Op::Ack,
            ack_req: false,
            ack_lazy: false,
            fail: FailType::Dropped,
            mlength: 0,
            ..h
        };
        assert_eq!(Header::decode(&ack.encode()), Ok(ack));
    }

    #[test]
    fn rejects_each_kind_of_malformed_header() {
        let good = sample().encode();
        assert_eq!(Header::decode(&good[..10]), Err(WireError::Truncated(10)));
        let mut b = good;
        b[0] = b'X';
        assert_eq!(Header::decode(&b), Err(WireError::BadMagic));
        let mut b = good;
        b[4] = 9;
        assert_eq!(Header::decode(&b), Err(WireError::BadVersion(9)));
        let mut b = good;
        b[5] = 0;
        assert_eq!(Header::decode(&b), Err(WireError::BadOp(0)));
        let mut b = good;
        b[6] = 0x80;
        assert_eq!(Header::decode(&b), Err(WireError::BadFlags(0x80)));
        let mut b = good;
        b[5] = Op::Get as u8; // ack requested on a get
        assert_eq!(Header::decode(&b), Err(WireError::BadFlags(1)));
        let mut b = good;
        b[7] = 1; // failure status on a request
        assert_eq!(Header::decode(&b), Err(WireError::BadFail(1)));
        let mut b = good;
        b[64..72].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        assert_eq!(Header::decode(&b), Err(WireError::BadLength));
        let mut reply = sample();
        reply.op = Op::Reply;
        reply.ack_req = false;
        reply.mlength = reply.rlength + 1;
        assert_eq!(Header::decode(&reply.encode()), Err(WireError::BadLength));
    }

    #[test]
    fn payload_len_follows_the_operation() {
        let h = sample();
        assert_eq!(h.payload_len(), 4096);
        assert_eq!(
            Header {
                op: Op::Get,
                ack_req: false,
                ack_lazy: false,
                ..h
            }
            .payload_len(),
            0
        );
        assert_eq!(
            Header {
                op: Op::Reply,
                ack_req: false,
                ack_lazy: false,
                mlength: 10,
                ..h
            }
            .payload_len(),
            10
        );
    }

    fn atomic_sample() -> Header {
        Header {
            op: Op::FetchAtomic,
            ack_req: false,
            ack_lazy: false,
            rlength: 8,
            atomic: Some(AtomicSpec {
                op: AtomicOp::CswapGt,
                datatype: Datatype::I32,
            }),
            ..sample()
        }
    }

    #[test]
    fn atomic_requests_carry_their_spec_in_the_mlength_slot() {
        let h = atomic_sample();
        let b = h.encode();
        assert_eq!(b[5], 7);
        assert_eq!(
            (b[72], b[73]),
            (AtomicOp::CswapGt as u8, Datatype::I32 as u8)
        );
        assert_eq!(&b[74..80], &[0; 6]);
        assert_eq!(Header::decode(&b), Ok(h));
        // The operand element travels in front of the source elements.
        assert_eq!(h.payload_len(), 8 + 4);
        let sum = Header {
            op: Op::Atomic,
            ack_req: true,
            ack_lazy: false,
            atomic: Some(AtomicSpec {
                op: AtomicOp::Sum,
                datatype: Datatype::F64,
            }),
            ..h
        };
        assert_eq!(Header::decode(&sum.encode()), Ok(sum));
        assert_eq!(sum.payload_len(), 8);
        // A non-atomic request has no spec, whatever its bytes 72..80.
        assert_eq!(
            Header::decode(&sample().encode()).map(|h| h.atomic),
            Ok(None)
        );
    }

    #[test]
    fn rejects_each_kind_of_malformed_atomic_header() {
        let good = atomic_sample().encode();
        let mut b = good;
        b[72] = 18;
        assert_eq!(Header::decode(&b), Err(WireError::BadAtomicOp(18)));
        let mut b = good;
        b[73] = 12;
        assert_eq!(Header::decode(&b), Err(WireError::BadDatatype(12)));
        for i in 74..80 {
            let mut b = good;
            b[i] = 1;
            assert_eq!(Header::decode(&b), Err(WireError::BadReserved));
        }
        let mut b = good;
        b[6] = 1; // a fetching atomic is answered by a reply, never an ack
        assert_eq!(Header::decode(&b), Err(WireError::BadFlags(1)));
        let mut b = good;
        b[7] = 1;
        assert_eq!(Header::decode(&b), Err(WireError::BadFail(1)));
        // The operand counts towards the payload limit.
        let mut big = atomic_sample();
        big.rlength = MAX_PAYLOAD;
        assert_eq!(Header::decode(&big.encode()), Err(WireError::BadLength));
    }

    #[test]
    fn a_lazy_acknowledgment_is_flagged_only_where_one_can_be() {
        let put = Header {
            op: Op::Put,
            ack_req: true,
            ack_lazy: true,
            ..sample()
        };
        let b = put.encode();
        assert_eq!(b[6], FLAG_ACK_REQ | FLAG_ACK_LAZY);
        assert_eq!(Header::decode(&b), Ok(put));
        let ack = Header {
            op: Op::Ack,
            ack_req: false,
            ack_lazy: true,
            ..sample()
        };
        assert_eq!(Header::decode(&ack.encode()), Ok(ack));
        // Lazy without an acknowledgment requested, and on operations
        // answered by a reply: malformed.
        let mut b = put.encode();
        b[6] = FLAG_ACK_LAZY;
        assert_eq!(Header::decode(&b), Err(WireError::BadFlags(FLAG_ACK_LAZY)));
        for op in [Op::Get, Op::Reply, Op::FetchAtomic] {
            let mut b = Header {
                op,
                ack_req: false,
                ack_lazy: false,
                atomic: (op == Op::FetchAtomic).then_some(AtomicSpec {
                    op: AtomicOp::Sum,
                    datatype: Datatype::U64,
                }),
                ..sample()
            }
            .encode();
            b[6] = FLAG_ACK_LAZY;
            assert_eq!(
                Header::decode(&b),
                Err(WireError::BadFlags(FLAG_ACK_LAZY)),
                "{op:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Header::decode(&bytes);
        }

        #[test]
        fn decode_of_encode_is_identity(
            op in 1u8..=7, ack in any::<bool>(), lazy in any::<bool>(), fail in 0u8..4,
            key in any::<u64>(),
            aop in 0u8..18, dt in 0u8..12,
            ids in any::<[u32; 4]>(), pt in any::<u32>(), ac in any::<u32>(),
            mb in any::<u64>(), off in any::<u64>(), hd in any::<u64>(),
            rl in 0..=MAX_PAYLOAD - 16, ml_frac in 0u64..=100, cookie in any::<u64>()
        ) {
            let op = Op::from_u8(op).unwrap();
            let h = Header {
                op,
                ack_req: ack && matches!(op, Op::Put | Op::Atomic),
                ack_lazy: lazy && ((ack && matches!(op, Op::Put | Op::Atomic)) || op == Op::Ack),
                fail: if op.is_response() { FailType::from_u8(fail).unwrap() } else { FailType::Ok },
                job_key: key,
                src: ProcessId::new(ids[0], ids[1]),
                dst: ProcessId::new(ids[2], ids[3]),
                pt_index: PortalIndex(pt),
                ac_index: ac,
                match_bits: mb,
                offset: off,
                hdr_data: hd,
                rlength: rl,
                mlength: if op.is_response() { rl / 100 * ml_frac } else { 0 },
                cookie,
                atomic: op.is_atomic().then(|| AtomicSpec {
                    op: AtomicOp::from_u8(aop).unwrap(),
                    datatype: Datatype::from_u8(dt).unwrap(),
                }),
            };
            prop_assert_eq!(Header::decode(&h.encode()), Ok(h));
        }
    }
}
