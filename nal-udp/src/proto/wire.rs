//! The datagram codec.
//!
//! Every datagram starts with a fixed common header that carries the job key,
//! both peer ids and a complete acknowledgment (cumulative ack, advertised
//! window, selective-ack bitmap), so acks ride on every datagram for free.
//! A frame of one of seven kinds follows. All integers are little-endian.
//!
//! Common header ([`COMMON_LEN`] bytes, then the SACK bitmap):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 4 | magic `"PUDP"` |
//! | 4   | 1 | version ([`VERSION`]) |
//! | 5   | 1 | frame kind ([`Kind`]) |
//! | 6   | 1 | flags (bit 0: [`FLAG_ACK_REQ`], answer with an ack now; bit 1: [`FLAG_RETX`], a retransmission; bit 2: [`FLAG_COPY`], a redundant copy) |
//! | 7   | 1 | SACK length in 64-bit words (0..=[`MAX_SACK_WORDS`]) |
//! | 8   | 8 | job key |
//! | 16  | 8 | source peer id |
//! | 24  | 8 | destination peer id |
//! | 32  | 8 | cumulative ack: every sequence number below it was received |
//! | 40  | 4 | window: the sender of this datagram accepts sequence numbers in `[cum_ack, cum_ack + window)` |
//! | 44  | 4 | loss report: the share of sequenced datagrams from this datagram's receiver that this datagram's sender got only through a retransmission or a copy, in units of 1/65536 (at most 65536) |
//! | 48  | 8 | late duplicates: how many retransmissions from this datagram's receiver its sender got while it still owed the original's acknowledgment (a count that only grows) |
//! | 56  | 8·n | SACK: bit `i` (word `i / 64`, bit `i % 64`) set = sequence number `cum_ack + 1 + i` was received |
//!
//! Frame bodies (after the SACK):
//!
//! | kind | body |
//! |------|------|
//! | `Ack` | empty |
//! | `Msg` | seq u64, msg u64, total u64, frag_size u32, reserved u32, header\[88\], first payload chunk (offset 0) |
//! | `Frag` | seq u64, msg u64, offset u64, payload chunk |
//! | `Rndv` | seq u64, msg u64, total u64, frag_size u32, reserved u32, header\[88\] |
//! | `Done` | msg u64 |
//! | `Pull` | msg u64, limit u64, first_frag u64, frag_size u32, reserved u32, mask u64 |
//! | `PullData` | msg u64, offset u64, payload chunk |
//! | `DoneAck` | msg u64 |
//!
//! `Msg`, `Frag` and `Rndv` are *sequenced*: they occupy one number of the
//! per-peer sequence space and are retransmitted until acknowledged. The
//! rest are not: the pulling receiver recovers lost pulls, pull data and
//! completion notices (`Done`, answered by `DoneAck`) with its own timer.
//!
//! Decoding checks everything that can be checked without connection state
//! and never panics; the endpoint checks the rest (job key, peer ids, windows,
//! message ids, offsets).

use super::types::PeerId;
use bitvec::array::BitArray;
use bitvec::order::Lsb0;

/// Magic number at the start of every datagram: ASCII `"PUDP"`.
pub const MAGIC: [u8; 4] = *b"PUDP";
/// The protocol version this crate speaks (2: the retransmission and copy
/// flags and the loss report; 3: the late-duplicate count).
pub const VERSION: u8 = 3;
/// Size of the opaque upper-layer header carried by every message.
pub const HEADER_LEN: usize = 88;
/// Length of the common header, without the SACK bitmap.
pub const COMMON_LEN: usize = 56;
/// Largest SACK bitmap, in 64-bit words.
pub const MAX_SACK_WORDS: usize = 8;
/// Largest SACK bitmap, in bits (and so the largest receive window).
pub const MAX_SACK_BITS: usize = MAX_SACK_WORDS * 64;
/// Longest message the protocol accepts, in payload bytes.
pub const MAX_MESSAGE_LEN: u64 = portals::wire::MAX_PAYLOAD;
/// Largest window value a datagram may advertise.
pub const MAX_WINDOW: u32 = 1 << 20;
/// Flag: the receiver of this datagram should acknowledge at once (a probe).
pub const FLAG_ACK_REQ: u8 = 1;
/// Flag: this sequenced datagram is a retransmission.
pub const FLAG_RETX: u8 = 2;
/// Flag: this sequenced datagram is a redundant copy, sent right after its
/// original because the path loses datagrams.
pub const FLAG_COPY: u8 = 4;
/// The loss report that means every datagram was lost (see
/// [`HeaderFields::loss_report`]).
pub const LOSS_REPORT_ONE: u32 = 1 << 16;

/// Fixed body length of a `Msg` frame (before its payload chunk).
pub const MSG_FIXED: usize = 8 + 8 + 8 + 4 + 4 + HEADER_LEN;
/// Fixed body length of a `Frag` frame (before its payload chunk).
pub const FRAG_FIXED: usize = 8 + 8 + 8;
/// Body length of a `Rndv` frame.
pub const RNDV_FIXED: usize = MSG_FIXED;
/// Body length of a `Done` or `DoneAck` frame.
pub const DONE_FIXED: usize = 8;
/// Body length of a `Pull` frame.
pub const PULL_FIXED: usize = 8 + 8 + 8 + 4 + 4 + 8;
/// Fixed body length of a `PullData` frame (before its payload chunk).
pub const PULL_DATA_FIXED: usize = 8 + 8;

const KNOWN_FLAGS: u8 = FLAG_ACK_REQ | FLAG_RETX | FLAG_COPY;

// The transport exists to carry portals headers; keep the sizes in lock-step.
const _: () = assert!(HEADER_LEN == portals::wire::HEADER_LEN);

/// A selective-acknowledgment bitmap as carried on the wire.
pub type Sack = BitArray<[u64; MAX_SACK_WORDS], Lsb0>;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Acknowledgment only.
    Ack = 1,
    /// Start of an eager (tiny, small or medium) message.
    Msg = 2,
    /// Continuation fragment of a medium message.
    Frag = 3,
    /// Rendezvous: start of a large message, pulled by the receiver.
    Rndv = 4,
    /// The receiver has all the bytes it wanted of a large message.
    Done = 5,
    /// The receiver asks for fragments of a large message.
    Pull = 6,
    /// One fragment of a large message, answering a pull.
    PullData = 7,
    /// The sender of a large message heard its completion notice.
    DoneAck = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Ack,
            2 => Kind::Msg,
            3 => Kind::Frag,
            4 => Kind::Rndv,
            5 => Kind::Done,
            6 => Kind::Pull,
            7 => Kind::PullData,
            8 => Kind::DoneAck,
            _ => return None,
        })
    }
}

/// Why a datagram could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its fixed parts.
    #[error("datagram truncated")]
    Truncated,
    /// Not this protocol.
    #[error("bad magic")]
    BadMagic,
    /// This protocol, another version.
    #[error("unsupported version {0}")]
    BadVersion(u8),
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Unknown flag bits, non-zero reserved fields, or a SACK that is too long.
    #[error("reserved bits set")]
    Reserved,
    /// Bytes after a frame that has none.
    #[error("trailing bytes")]
    Trailing,
    /// A field outside its valid range.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
}

impl WireError {
    /// True if the datagram is not of this protocol or version at all (as
    /// opposed to a malformed datagram of this protocol).
    pub fn is_foreign(&self) -> bool {
        matches!(self, WireError::BadMagic | WireError::BadVersion(_))
    }
}

/// The acknowledgment carried by every datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckInfo {
    /// Every sequence number below this was received.
    pub cum_ack: u64,
    /// Sequence numbers in `[cum_ack, cum_ack + window)` will be accepted.
    pub window: u32,
    /// Bit `i` set: sequence number `cum_ack + 1 + i` was received.
    pub sack: Sack,
    /// The sender asks for an immediate acknowledgment.
    pub ack_requested: bool,
}

/// A decoded frame; payloads and headers borrow from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Acknowledgment only.
    Ack,
    /// Start of an eager message, with its first payload chunk.
    Msg {
        /// Sequence number.
        seq: u64,
        /// Message index in the sender's per-peer message stream.
        msg: u64,
        /// Total payload length.
        total: u64,
        /// Payload bytes in each continuation fragment (all but the last).
        frag_size: u32,
        /// The upper layer's header.
        header: &'a [u8; HEADER_LEN],
        /// Payload bytes `[0, data.len())`.
        data: &'a [u8],
    },
    /// Continuation fragment of a medium message.
    Frag {
        /// Sequence number.
        seq: u64,
        /// Message index.
        msg: u64,
        /// Payload offset of `data`.
        offset: u64,
        /// Payload bytes.
        data: &'a [u8],
    },
    /// Start of a large message; the receiver pulls the payload.
    Rndv {
        /// Sequence number.
        seq: u64,
        /// Message index.
        msg: u64,
        /// Total payload length.
        total: u64,
        /// Largest pull fragment the sender can put in one datagram.
        frag_size: u32,
        /// The upper layer's header.
        header: &'a [u8; HEADER_LEN],
    },
    /// Completion notice for a large message (receiver to sender).
    Done {
        /// Message index (in the sender's stream).
        msg: u64,
    },
    /// Request for fragments of a large message.
    Pull {
        /// Message index.
        msg: u64,
        /// The receiver wants payload bytes `[0, limit)`.
        limit: u64,
        /// Fragment index of bit 0 of `mask`.
        first_frag: u64,
        /// Fragment size: fragment `i` covers `[i·frag_size, min((i+1)·frag_size, limit))`.
        frag_size: u32,
        /// Requested fragments, relative to `first_frag`.
        mask: u64,
    },
    /// One fragment of a large message.
    PullData {
        /// Message index.
        msg: u64,
        /// Payload offset of `data`.
        offset: u64,
        /// Payload bytes.
        data: &'a [u8],
    },
    /// Acknowledges a completion notice (sender to receiver).
    DoneAck {
        /// Message index.
        msg: u64,
    },
}

impl Frame<'_> {
    /// The frame's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Ack => Kind::Ack,
            Frame::Msg { .. } => Kind::Msg,
            Frame::Frag { .. } => Kind::Frag,
            Frame::Rndv { .. } => Kind::Rndv,
            Frame::Done { .. } => Kind::Done,
            Frame::Pull { .. } => Kind::Pull,
            Frame::PullData { .. } => Kind::PullData,
            Frame::DoneAck { .. } => Kind::DoneAck,
        }
    }

    /// The sequence number of a sequenced frame.
    pub fn seq(&self) -> Option<u64> {
        match *self {
            Frame::Msg { seq, .. } | Frame::Frag { seq, .. } | Frame::Rndv { seq, .. } => Some(seq),
            _ => None,
        }
    }
}

/// How a sequenced datagram came to be sent (meaningless on the others).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transmission {
    /// Its first transmission.
    #[default]
    Original,
    /// Sent again after a loss was presumed (timer, probe, SACK).
    Retransmission,
    /// A redundant copy sent right after the original (or after a
    /// retransmission) on a path that loses datagrams.
    Copy,
}

/// A decoded datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Job key; must match the receiver's.
    pub job_key: u64,
    /// Sending peer's id.
    pub src: PeerId,
    /// Intended receiver's id.
    pub dst: PeerId,
    /// The piggy-backed acknowledgment.
    pub ack: AckInfo,
    /// Original, retransmission or copy.
    pub transmission: Transmission,
    /// The sender's loss report (see [`HeaderFields::loss_report`]).
    pub loss_report: u32,
    /// The sender's late-duplicate count (see [`HeaderFields::late_dups`]).
    pub late_dups: u64,
    /// The frame.
    pub frame: Frame<'a>,
}

/// Little-endian reader over a byte slice that never panics.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<&'a [u8; N], WireError> {
        self.take(N)?.try_into().map_err(|_| WireError::Truncated)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(*self.array::<4>()?))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(*self.array::<8>()?))
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    fn end(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing)
        }
    }
}

/// Where the sender's id sits in every datagram: after the magic, version,
/// kind, flags, SACK length and job key.
const SRC_AT: usize = 4 + 1 + 1 + 1 + 1 + 8;

/// The sender a datagram claims to come from, read without decoding it
/// (`None` if it is too short to say). A claim, not a proof: the driver
/// uses it only to pick which peer's addresses the datagram's source must
/// match, and [`decode`] and the endpoint check everything else.
pub fn claimed_source(buf: &[u8]) -> Option<PeerId> {
    let bytes = buf.get(SRC_AT..SRC_AT + 8)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Decode one datagram. Never panics; any inconsistency is an error.
pub fn decode(buf: &[u8]) -> Result<Datagram<'_>, WireError> {
    let mut r = Reader { buf };
    let magic = r.array::<4>()?;
    if *magic != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(WireError::BadVersion(version));
    }
    let kind_byte = r.u8()?;
    let kind = Kind::from_u8(kind_byte).ok_or(WireError::UnknownKind(kind_byte))?;
    let flags = r.u8()?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::Reserved);
    }
    let sack_words = usize::from(r.u8()?);
    if sack_words > MAX_SACK_WORDS {
        return Err(WireError::Reserved);
    }
    let job_key = r.u64()?;
    let src = r.u64()?;
    let dst = r.u64()?;
    let cum_ack = r.u64()?;
    let window = r.u32()?;
    if window > MAX_WINDOW {
        return Err(WireError::Invalid("window"));
    }
    let loss_report = r.u32()?;
    if loss_report > LOSS_REPORT_ONE {
        return Err(WireError::Invalid("loss report"));
    }
    let late_dups = r.u64()?;
    let transmission = match (flags & FLAG_RETX != 0, flags & FLAG_COPY != 0) {
        (false, false) => Transmission::Original,
        (true, false) => Transmission::Retransmission,
        (false, true) => Transmission::Copy,
        (true, true) => return Err(WireError::Invalid("retransmission and copy flags")),
    };
    let mut sack = Sack::ZERO;
    for word in sack.as_raw_mut_slice().iter_mut().take(sack_words) {
        *word = r.u64()?;
    }
    let ack = AckInfo {
        cum_ack,
        window,
        sack,
        ack_requested: flags & FLAG_ACK_REQ != 0,
    };
    let frame = match kind {
        Kind::Ack => {
            r.end()?;
            Frame::Ack
        }
        Kind::Msg | Kind::Rndv => {
            let seq = r.u64()?;
            let msg = r.u64()?;
            let total = r.u64()?;
            let frag_size = r.u32()?;
            if r.u32()? != 0 {
                return Err(WireError::Reserved);
            }
            let header = r.array::<HEADER_LEN>()?;
            if total > MAX_MESSAGE_LEN {
                return Err(WireError::Invalid("total length"));
            }
            if kind == Kind::Msg {
                let data = r.rest();
                let first = data.len() as u64;
                if first > total {
                    return Err(WireError::Invalid("first chunk longer than message"));
                }
                if first < total && frag_size == 0 {
                    return Err(WireError::Invalid("fragment size"));
                }
                Frame::Msg {
                    seq,
                    msg,
                    total,
                    frag_size,
                    header,
                    data,
                }
            } else {
                r.end()?;
                if frag_size == 0 {
                    return Err(WireError::Invalid("fragment size"));
                }
                Frame::Rndv {
                    seq,
                    msg,
                    total,
                    frag_size,
                    header,
                }
            }
        }
        Kind::Frag => {
            let seq = r.u64()?;
            let msg = r.u64()?;
            let offset = r.u64()?;
            let data = r.rest();
            check_chunk(offset, data)?;
            Frame::Frag {
                seq,
                msg,
                offset,
                data,
            }
        }
        Kind::Done | Kind::DoneAck => {
            let msg = r.u64()?;
            r.end()?;
            if kind == Kind::Done {
                Frame::Done { msg }
            } else {
                Frame::DoneAck { msg }
            }
        }
        Kind::Pull => {
            let msg = r.u64()?;
            let limit = r.u64()?;
            let first_frag = r.u64()?;
            let frag_size = r.u32()?;
            if r.u32()? != 0 {
                return Err(WireError::Reserved);
            }
            let mask = r.u64()?;
            r.end()?;
            if limit == 0 || limit > MAX_MESSAGE_LEN {
                return Err(WireError::Invalid("pull limit"));
            }
            if frag_size == 0 {
                return Err(WireError::Invalid("fragment size"));
            }
            if mask == 0 {
                return Err(WireError::Invalid("empty pull mask"));
            }
            Frame::Pull {
                msg,
                limit,
                first_frag,
                frag_size,
                mask,
            }
        }
        Kind::PullData => {
            let msg = r.u64()?;
            let offset = r.u64()?;
            let data = r.rest();
            check_chunk(offset, data)?;
            Frame::PullData { msg, offset, data }
        }
    };
    Ok(Datagram {
        job_key,
        src,
        dst,
        ack,
        transmission,
        loss_report,
        late_dups,
        frame,
    })
}

fn check_chunk(offset: u64, data: &[u8]) -> Result<(), WireError> {
    if data.is_empty() {
        return Err(WireError::Invalid("empty chunk"));
    }
    match offset.checked_add(data.len() as u64) {
        Some(end) if end <= MAX_MESSAGE_LEN => Ok(()),
        _ => Err(WireError::Invalid("chunk beyond maximum message length")),
    }
}

/// The fields of the common header a sender fills in.
#[derive(Clone, Copy, Debug)]
pub struct HeaderFields<'s> {
    /// Job key.
    pub job_key: u64,
    /// Sending peer's id.
    pub src: PeerId,
    /// Receiving peer's id.
    pub dst: PeerId,
    /// Cumulative ack.
    pub cum_ack: u64,
    /// Advertised window.
    pub window: u32,
    /// SACK bitmap; only the words up to the highest set bit are sent.
    pub sack: &'s Sack,
    /// Ask the receiver for an immediate ack.
    pub ack_requested: bool,
    /// Original, retransmission or copy (sequenced frames only; the
    /// others are sent as originals).
    pub transmission: Transmission,
    /// The share of the receiver's sequenced datagrams that the sender got
    /// only through a retransmission or a copy — the loss on the path from
    /// the receiver to the sender, as the sender measured it — in units of
    /// 1/65536, at most [`LOSS_REPORT_ONE`]. The receiver sends redundant
    /// copies when it is high.
    pub loss_report: u32,
    /// How many retransmissions from the receiver the sender got although
    /// it already had the original and had not acknowledged it yet: probes
    /// that only a late answer made necessary, not loss. The receiver waits
    /// longer before its next tail probe when it grows (module `tlp`).
    pub late_dups: u64,
}

/// Why a frame could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer cannot hold the datagram.
    #[error("output buffer too small")]
    BufferTooSmall,
}

/// Little-endian writer into a caller's buffer.
struct Writer<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        let end = self
            .pos
            .checked_add(bytes.len())
            .ok_or(EncodeError::BufferTooSmall)?;
        let dst = self
            .buf
            .get_mut(self.pos..end)
            .ok_or(EncodeError::BufferTooSmall)?;
        portals_copy::copy(dst, bytes);
        self.pos = end;
        Ok(())
    }

    fn u8(&mut self, v: u8) -> Result<(), EncodeError> {
        self.put(&[v])
    }

    fn u32(&mut self, v: u32) -> Result<(), EncodeError> {
        self.put(&v.to_le_bytes())
    }

    fn u64(&mut self, v: u64) -> Result<(), EncodeError> {
        self.put(&v.to_le_bytes())
    }

    /// Reserve `n` bytes for the caller to fill in place (no staging copy).
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], EncodeError> {
        let end = self.pos.checked_add(n).ok_or(EncodeError::BufferTooSmall)?;
        let start = self.pos;
        self.pos = end;
        self.buf
            .get_mut(start..end)
            .ok_or(EncodeError::BufferTooSmall)
    }
}

/// Number of SACK words needed to carry every set bit of `sack`.
pub fn sack_words(sack: &Sack) -> usize {
    sack.last_one().map_or(0, |bit| bit / 64 + 1)
}

/// Length of the common header for `sack`.
pub fn header_len(sack: &Sack) -> usize {
    COMMON_LEN + 8 * sack_words(sack)
}

fn write_common(w: &mut Writer<'_>, h: &HeaderFields<'_>, kind: Kind) -> Result<(), EncodeError> {
    let words = sack_words(h.sack);
    w.put(&MAGIC)?;
    w.u8(VERSION)?;
    w.u8(kind as u8)?;
    let tx = match h.transmission {
        Transmission::Original => 0,
        Transmission::Retransmission => FLAG_RETX,
        Transmission::Copy => FLAG_COPY,
    };
    w.u8(if h.ack_requested { FLAG_ACK_REQ } else { 0 } | tx)?;
    // `words <= MAX_SACK_WORDS` because the bitmap has that many words.
    w.u8(words as u8)?;
    w.u64(h.job_key)?;
    w.u64(h.src)?;
    w.u64(h.dst)?;
    w.u64(h.cum_ack)?;
    w.u32(h.window)?;
    w.u32(h.loss_report.min(LOSS_REPORT_ONE))?;
    w.u64(h.late_dups)?;
    for word in &h.sack.as_raw_slice()[..words] {
        w.u64(*word)?;
    }
    Ok(())
}

/// A frame to encode. Payload bytes are produced by a closure writing
/// straight into the output buffer, so the caller can read them from wherever
/// the message lives without a staging copy.
#[derive(Clone, Copy, Debug)]
pub enum FrameOut<'h> {
    /// Acknowledgment only.
    Ack,
    /// Start of an eager message; `len` payload bytes from offset 0 follow.
    Msg {
        /// Sequence number.
        seq: u64,
        /// Message index.
        msg: u64,
        /// Total payload length.
        total: u64,
        /// Continuation fragment size.
        frag_size: u32,
        /// Upper-layer header.
        header: &'h [u8; HEADER_LEN],
        /// Length of the first chunk.
        len: usize,
    },
    /// Continuation fragment; `len` payload bytes from `offset` follow.
    Frag {
        /// Sequence number.
        seq: u64,
        /// Message index.
        msg: u64,
        /// Payload offset.
        offset: u64,
        /// Chunk length.
        len: usize,
    },
    /// Rendezvous.
    Rndv {
        /// Sequence number.
        seq: u64,
        /// Message index.
        msg: u64,
        /// Total payload length.
        total: u64,
        /// Largest pull fragment the sender can send.
        frag_size: u32,
        /// Upper-layer header.
        header: &'h [u8; HEADER_LEN],
    },
    /// Completion notice.
    Done {
        /// Message index.
        msg: u64,
    },
    /// Acknowledgment of a completion notice.
    DoneAck {
        /// Message index.
        msg: u64,
    },
    /// Pull request.
    Pull {
        /// Message index.
        msg: u64,
        /// Wanted length.
        limit: u64,
        /// Fragment index of bit 0 of `mask`.
        first_frag: u64,
        /// Fragment size.
        frag_size: u32,
        /// Requested fragments.
        mask: u64,
    },
    /// Pull data; `len` payload bytes from `offset` follow.
    PullData {
        /// Message index.
        msg: u64,
        /// Payload offset.
        offset: u64,
        /// Chunk length.
        len: usize,
    },
}

/// Encode a datagram into `buf`; `fill` writes the payload chunk (if the frame
/// has one) into the slice it is given. Returns the datagram length.
pub fn encode(
    buf: &mut [u8],
    h: &HeaderFields<'_>,
    frame: &FrameOut<'_>,
    fill: impl FnOnce(&mut [u8]),
) -> Result<usize, EncodeError> {
    let mut w = Writer { buf, pos: 0 };
    let kind = match frame {
        FrameOut::Ack => Kind::Ack,
        FrameOut::Msg { .. } => Kind::Msg,
        FrameOut::Frag { .. } => Kind::Frag,
        FrameOut::Rndv { .. } => Kind::Rndv,
        FrameOut::Done { .. } => Kind::Done,
        FrameOut::Pull { .. } => Kind::Pull,
        FrameOut::PullData { .. } => Kind::PullData,
        FrameOut::DoneAck { .. } => Kind::DoneAck,
    };
    write_common(&mut w, h, kind)?;
    match *frame {
        FrameOut::Ack => {}
        FrameOut::Msg {
            seq,
            msg,
            total,
            frag_size,
            header,
            len,
        } => {
            w.u64(seq)?;
            w.u64(msg)?;
            w.u64(total)?;
            w.u32(frag_size)?;
            w.u32(0)?;
            w.put(header)?;
            fill(w.reserve(len)?);
        }
        FrameOut::Frag {
            seq,
            msg,
            offset,
            len,
        } => {
            w.u64(seq)?;
            w.u64(msg)?;
            w.u64(offset)?;
            fill(w.reserve(len)?);
        }
        FrameOut::Rndv {
            seq,
            msg,
            total,
            frag_size,
            header,
        } => {
            w.u64(seq)?;
            w.u64(msg)?;
            w.u64(total)?;
            w.u32(frag_size)?;
            w.u32(0)?;
            w.put(header)?;
        }
        FrameOut::Done { msg } | FrameOut::DoneAck { msg } => {
            w.u64(msg)?;
        }
        FrameOut::Pull {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        } => {
            w.u64(msg)?;
            w.u64(limit)?;
            w.u64(first_frag)?;
            w.u32(frag_size)?;
            w.u32(0)?;
            w.u64(mask)?;
        }
        FrameOut::PullData { msg, offset, len } => {
            w.u64(msg)?;
            w.u64(offset)?;
            fill(w.reserve(len)?);
        }
    }
    Ok(w.pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(sack: &Sack) -> HeaderFields<'_> {
        HeaderFields {
            job_key: 0xfeed,
            src: 3,
            dst: 7,
            cum_ack: 1000,
            window: 64,
            sack,
            ack_requested: true,
            transmission: Transmission::Retransmission,
            loss_report: 19_661,
            late_dups: 0x0123_4567_89ab_cdef,
        }
    }

    fn roundtrip(frame: FrameOut<'_>, payload: &[u8]) -> Vec<u8> {
        let mut sack = Sack::ZERO;
        sack.set(0, true);
        sack.set(130, true);
        let mut buf = vec![0u8; 4096];
        let n = encode(&mut buf, &fields(&sack), &frame, |dst| {
            dst.copy_from_slice(payload)
        })
        .unwrap();
        buf.truncate(n);
        let d = decode(&buf).unwrap();
        assert_eq!(d.job_key, 0xfeed);
        assert_eq!((d.src, d.dst), (3, 7));
        assert_eq!(d.ack.cum_ack, 1000);
        assert_eq!(d.ack.window, 64);
        assert!(d.ack.ack_requested);
        assert_eq!(d.transmission, Transmission::Retransmission);
        assert_eq!(d.loss_report, 19_661);
        assert_eq!(d.late_dups, 0x0123_4567_89ab_cdef);
        assert_eq!(d.ack.sack, sack);
        assert_eq!(n, COMMON_LEN + 3 * 8 + body_len(&d.frame));
        assert_eq!(claimed_source(&buf), Some(d.src));
        buf
    }

    #[test]
    fn a_datagram_too_short_to_name_its_sender_claims_none() {
        let mut sack = Sack::ZERO;
        sack.set(3, true);
        let mut buf = vec![0u8; 256];
        let n = encode(&mut buf, &fields(&sack), &FrameOut::Ack, |_| {}).unwrap();
        assert_eq!(claimed_source(&buf[..n]), Some(3));
        assert_eq!(claimed_source(&buf[..SRC_AT + 8]), Some(3));
        assert_eq!(claimed_source(&buf[..SRC_AT + 7]), None);
        assert_eq!(claimed_source(&[]), None);
    }

    fn body_len(f: &Frame<'_>) -> usize {
        match f {
            Frame::Ack => 0,
            Frame::Msg { data, .. } => MSG_FIXED + data.len(),
            Frame::Frag { data, .. } => FRAG_FIXED + data.len(),
            Frame::Rndv { .. } => RNDV_FIXED,
            Frame::Done { .. } | Frame::DoneAck { .. } => DONE_FIXED,
            Frame::Pull { .. } => PULL_FIXED,
            Frame::PullData { data, .. } => PULL_DATA_FIXED + data.len(),
        }
    }

    #[test]
    fn every_kind_roundtrips() {
        let header = [9u8; HEADER_LEN];
        let payload = [1u8, 2, 3, 4, 5];
        let buf = roundtrip(
            FrameOut::Msg {
                seq: 5,
                msg: 6,
                total: 100,
                frag_size: 1000,
                header: &header,
                len: 5,
            },
            &payload,
        );
        match decode(&buf).unwrap().frame {
            Frame::Msg {
                seq: 5,
                msg: 6,
                total: 100,
                frag_size: 1000,
                header: h,
                data,
            } => {
                assert_eq!(h, &header);
                assert_eq!(data, &payload);
            }
            other => panic!("{other:?}"),
        }
        let buf = roundtrip(
            FrameOut::Frag {
                seq: 9,
                msg: 6,
                offset: 77,
                len: 5,
            },
            &payload,
        );
        assert!(matches!(
            decode(&buf).unwrap().frame,
            Frame::Frag { seq: 9, msg: 6, offset: 77, data } if data == payload
        ));
        let buf = roundtrip(
            FrameOut::Rndv {
                seq: 1,
                msg: 2,
                total: 1 << 30,
                frag_size: 8000,
                header: &header,
            },
            &[],
        );
        assert!(matches!(
            decode(&buf).unwrap().frame,
            Frame::Rndv {
                seq: 1,
                msg: 2,
                total: 1073741824,
                frag_size: 8000,
                ..
            }
        ));
        let buf = roundtrip(FrameOut::Done { msg: 4 }, &[]);
        assert_eq!(decode(&buf).unwrap().frame, Frame::Done { msg: 4 });
        let buf = roundtrip(FrameOut::DoneAck { msg: 5 }, &[]);
        assert_eq!(decode(&buf).unwrap().frame, Frame::DoneAck { msg: 5 });
        let buf = roundtrip(
            FrameOut::Pull {
                msg: 4,
                limit: 99,
                first_frag: 16,
                frag_size: 10,
                mask: 0b1011,
            },
            &[],
        );
        assert_eq!(
            decode(&buf).unwrap().frame,
            Frame::Pull {
                msg: 4,
                limit: 99,
                first_frag: 16,
                frag_size: 10,
                mask: 0b1011
            }
        );
        let buf = roundtrip(
            FrameOut::PullData {
                msg: 4,
                offset: 160,
                len: 5,
            },
            &payload,
        );
        assert!(matches!(
            decode(&buf).unwrap().frame,
            Frame::PullData { msg: 4, offset: 160, data } if data == payload
        ));
        let buf = roundtrip(FrameOut::Ack, &[]);
        assert_eq!(decode(&buf).unwrap().frame, Frame::Ack);
    }

    #[test]
    fn empty_sack_is_not_sent() {
        let sack = Sack::ZERO;
        let mut buf = [0u8; 64];
        let n = encode(&mut buf, &fields(&sack), &FrameOut::Ack, |_| {}).unwrap();
        assert_eq!(n, COMMON_LEN);
        assert_eq!(buf[7], 0);
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert_eq!(decode(&[]), Err(WireError::Truncated));
        assert_eq!(decode(b"XXXXXXXXXXXX"), Err(WireError::BadMagic));
        let sack = Sack::ZERO;
        let mut buf = [0u8; 64];
        let n = encode(&mut buf, &fields(&sack), &FrameOut::Ack, |_| {}).unwrap();
        let good = buf[..n].to_vec();
        // every truncation of a valid datagram is rejected
        for cut in 0..n {
            assert!(decode(&good[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = good.clone();
        bad[4] = 1;
        assert_eq!(decode(&bad), Err(WireError::BadVersion(1)));
        let mut bad = good.clone();
        bad[5] = 0;
        assert_eq!(decode(&bad), Err(WireError::UnknownKind(0)));
        bad[5] = 9;
        assert_eq!(decode(&bad), Err(WireError::UnknownKind(9)));
        let mut bad = good.clone();
        bad[6] = 0x80;
        assert_eq!(decode(&bad), Err(WireError::Reserved));
        let mut bad = good.clone();
        bad[7] = 9;
        assert_eq!(decode(&bad), Err(WireError::Reserved));
        let mut bad = good.clone();
        bad[6] |= FLAG_RETX | FLAG_COPY;
        assert_eq!(
            decode(&bad),
            Err(WireError::Invalid("retransmission and copy flags"))
        );
        let mut bad = good.clone();
        bad[44..48].copy_from_slice(&(LOSS_REPORT_ONE + 1).to_le_bytes());
        assert_eq!(decode(&bad), Err(WireError::Invalid("loss report")));
        let mut bad = good.clone();
        bad.push(0);
        assert_eq!(decode(&bad), Err(WireError::Trailing));
        let mut bad = good;
        bad[40..44].copy_from_slice(&(MAX_WINDOW + 1).to_le_bytes());
        assert_eq!(decode(&bad), Err(WireError::Invalid("window")));
    }

    #[test]
    fn rejects_inconsistent_frames() {
        let sack = Sack::ZERO;
        let header = [0u8; HEADER_LEN];
        let mut buf = [0u8; 512];
        // first chunk longer than the message
        let n = encode(
            &mut buf,
            &fields(&sack),
            &FrameOut::Msg {
                seq: 0,
                msg: 0,
                total: 2,
                frag_size: 1,
                header: &header,
                len: 3,
            },
            |_| {},
        )
        .unwrap();
        assert!(decode(&buf[..n]).is_err());
        // chunk whose end overflows
        let n = encode(
            &mut buf,
            &fields(&sack),
            &FrameOut::Frag {
                seq: 0,
                msg: 0,
                offset: u64::MAX,
                len: 3,
            },
            |_| {},
        )
        .unwrap();
        assert!(decode(&buf[..n]).is_err());
        // empty pull mask
        let n = encode(
            &mut buf,
            &fields(&sack),
            &FrameOut::Pull {
                msg: 0,
                limit: 10,
                first_frag: 0,
                frag_size: 1,
                mask: 0,
            },
            |_| {},
        )
        .unwrap();
        assert!(decode(&buf[..n]).is_err());
        // message longer than the protocol allows
        let n = encode(
            &mut buf,
            &fields(&sack),
            &FrameOut::Rndv {
                seq: 0,
                msg: 0,
                total: MAX_MESSAGE_LEN + 1,
                frag_size: 1,
                header: &header,
            },
            |_| {},
        )
        .unwrap();
        assert!(decode(&buf[..n]).is_err());
    }

    #[test]
    fn encode_reports_small_buffer() {
        let sack = Sack::ZERO;
        let mut buf = [0u8; COMMON_LEN + 4];
        let r = encode(
            &mut buf,
            &fields(&sack),
            &FrameOut::Pull {
                msg: 1,
                limit: 1,
                first_frag: 0,
                frag_size: 1,
                mask: 1,
            },
            |_| {},
        );
        assert_eq!(r, Err(EncodeError::BufferTooSmall));
    }
}
