//! The connection handshake: the initiator says who it is and proves the job
//! key; the acceptor accepts, or rejects a duplicate connection.
//!
//! Layout (32 bytes, little-endian): magic `"PTLH"`, version (u16), kind
//! (u8), flags (u8), job key (u64), source nid/pid (2 × u32), destination
//! nid/pid (2 × u32).
//!
//! The same 32-byte message doubles as the transport's own control frame
//! once a connection carries Portals traffic: a liveness probe
//! ([`Kind::Ping`]) and its answer ([`Kind::Pong`]). Portals headers start
//! with `"PTL3"`, so the magic tells the two apart.
//!
//! Flags (bit 0, [`FLAG_ANSWERS_PROBES`]): the sender has a progress thread,
//! so it answers a probe promptly whatever its application does; a peer
//! that does not set it (polling mode, or an older build that sends 0) is
//! never declared dead for staying silent.
//!
//! The job key travels in clear, as it does in every Portals header; the
//! handshake keeps processes of other jobs (and stray connections) from ever
//! reaching the engine, it is not a defence against an eavesdropper.

use portals::ProcessId;

/// Encoded size of a handshake message.
pub(crate) const LEN: usize = 32;
/// The first bytes of every handshake or control message.
pub(crate) const MAGIC: [u8; 4] = *b"PTLH";
const VERSION: u16 = 1;
// A control message travels in the head of an outgoing frame, which has
// room for a Portals header.
const _: () = assert!(LEN <= portals::wire::HEADER_LEN);

/// Handshake flag: the sender answers liveness probes promptly.
pub(crate) const FLAG_ANSWERS_PROBES: u8 = 1;

/// What a handshake message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Initiator → acceptor: "I am `src`, you are `dst`, here is the key".
    Hello = 1,
    /// Acceptor → initiator: this connection is the one for the pair.
    Accept = 2,
    /// Acceptor → initiator: a connection for this pair already exists or is
    /// being set up by the side that wins ties; use that one.
    Duplicate = 3,
    /// Either side, on an established connection: "are you there?". The
    /// receiver answers with a `Pong`.
    Ping = 4,
    /// The answer to a `Ping`.
    Pong = 5,
}

/// A handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handshake {
    pub(crate) kind: Kind,
    /// `FLAG_*` bits; unknown bits are ignored.
    pub(crate) flags: u8,
    pub(crate) job_key: u64,
    pub(crate) src: ProcessId,
    pub(crate) dst: ProcessId,
}

/// Why a handshake message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HandshakeError {
    #[error("not a portals-rs handshake (bad magic)")]
    Magic,
    #[error("unsupported handshake version {0}")]
    Version(u16),
    #[error("unknown handshake kind {0}")]
    Kind(u8),
}

impl Handshake {
    pub(crate) fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6] = self.kind as u8;
        b[7] = self.flags;
        b[8..16].copy_from_slice(&self.job_key.to_le_bytes());
        b[16..20].copy_from_slice(&self.src.nid.to_le_bytes());
        b[20..24].copy_from_slice(&self.src.pid.to_le_bytes());
        b[24..28].copy_from_slice(&self.dst.nid.to_le_bytes());
        b[28..32].copy_from_slice(&self.dst.pid.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8; LEN]) -> Result<Handshake, HandshakeError> {
        if b[0..4] != MAGIC {
            return Err(HandshakeError::Magic);
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(HandshakeError::Version(version));
        }
        let kind = match b[6] {
            1 => Kind::Hello,
            2 => Kind::Accept,
            3 => Kind::Duplicate,
            4 => Kind::Ping,
            5 => Kind::Pong,
            k => return Err(HandshakeError::Kind(k)),
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut key = [0u8; 8];
        key.copy_from_slice(&b[8..16]);
        Ok(Handshake {
            kind,
            flags: b[7],
            job_key: u64::from_le_bytes(key),
            src: ProcessId::new(u32_at(16), u32_at(20)),
            dst: ProcessId::new(u32_at(24), u32_at(28)),
        })
    }
}

/// Which of two simultaneous connections between `a` and `b` survives: the
/// one initiated by the smaller process id. Both sides evaluate this the same
/// way, so exactly one connection remains.
pub(crate) fn initiator_wins(initiator: ProcessId, other: ProcessId) -> bool {
    initiator < other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let h = Handshake {
            kind: Kind::Hello,
            flags: FLAG_ANSWERS_PROBES,
            job_key: 0xfeed_beef,
            src: ProcessId::new(1, 2),
            dst: ProcessId::new(3, 4),
        };
        let b = h.encode();
        assert_eq!(Handshake::decode(&b), Ok(h));
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Handshake::decode(&bad), Err(HandshakeError::Magic));
        let mut bad = b;
        bad[4] = 9;
        assert_eq!(Handshake::decode(&bad), Err(HandshakeError::Version(9)));
        let mut bad = b;
        bad[6] = 0;
        assert_eq!(Handshake::decode(&bad), Err(HandshakeError::Kind(0)));
        for kind in [Kind::Accept, Kind::Duplicate, Kind::Ping, Kind::Pong] {
            let h = Handshake {
                kind,
                flags: 0,
                ..h
            };
            assert_eq!(Handshake::decode(&h.encode()), Ok(h));
        }
    }

    #[test]
    fn control_frames_never_look_like_portals_headers() {
        assert_ne!(MAGIC, portals::wire::MAGIC);
    }

    #[test]
    fn exactly_one_side_wins_a_tie() {
        let a = ProcessId::new(0, 1);
        let b = ProcessId::new(0, 2);
        assert!(initiator_wins(a, b));
        assert!(!initiator_wins(b, a));
    }
}
