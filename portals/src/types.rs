//! Plain value types of the Portals vocabulary: process ids, portal and
//! access-control indices, thresholds, list positions.

use std::fmt;

/// A node id (`ptl_nid_t`). [`NID_ANY`] is the wildcard used in match entries
/// and access-control entries; it is never the id of a real node.
pub type Nid = u32;
/// A process id within a node (`ptl_pid_t`). [`PID_ANY`] is its wildcard.
pub type Pid = u32;

/// Wildcard node id: matches any initiator node.
pub const NID_ANY: Nid = u32::MAX;
/// Wildcard process id: matches any initiator process.
pub const PID_ANY: Pid = u32::MAX;

/// The address of a process on the network (`ptl_process_id_t`): node id and
/// process id. As a match criterion either field may be a wildcard
/// ([`NID_ANY`], [`PID_ANY`]); as the identity of a real process neither may.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId {
    /// Node id.
    pub nid: Nid,
    /// Process id on that node.
    pub pid: Pid,
}

impl ProcessId {
    /// Matches any initiator: both fields wildcarded.
    pub const ANY: ProcessId = ProcessId {
        nid: NID_ANY,
        pid: PID_ANY,
    };

    /// A process id from its two parts.
    pub const fn new(nid: Nid, pid: Pid) -> Self {
        ProcessId { nid, pid }
    }

    /// True if neither field is a wildcard, i.e. this can name a real process.
    pub const fn is_concrete(&self) -> bool {
        self.nid != NID_ANY && self.pid != PID_ANY
    }

    /// True if `self`, used as a match criterion, accepts the initiator `id`.
    #[inline]
    pub const fn accepts(&self, id: ProcessId) -> bool {
        (self.nid == NID_ANY || self.nid == id.nid) && (self.pid == PID_ANY || self.pid == id.pid)
    }
}

impl fmt::Debug for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.nid {
            NID_ANY => f.write_str("*")?,
            n => write!(f, "{n}")?,
        }
        f.write_str(":")?;
        match self.pid {
            PID_ANY => f.write_str("*"),
            p => write!(f, "{p}"),
        }
    }
}

/// An index into a network interface's portal table (`ptl_pt_index_t`).
/// Portal indices work like port numbers: each selects an independent match
/// list, normally one per upper-layer protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortalIndex(pub u32);

impl PortalIndex {
    /// In an access-control entry: any portal index.
    pub const ANY: PortalIndex = PortalIndex(u32::MAX);
}

/// An index into the access-control table (`ptl_ac_index_t`). An initiator
/// names the entry that should authorise its operation; entry 0 admits every
/// process of the job on every portal index unless changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AcIndex(pub u32);

/// How many more operations a memory descriptor will take part in before it
/// becomes inactive (`threshold`, with `PTL_MD_THRESH_INF`).
///
/// Every operation that produces an event on the MD counts once: an incoming
/// put, get or get-put, an initiated put (and the put side of a get-put),
/// and an arriving acknowledgment or reply. Sending a get request counts
/// nothing: its reply does. A descriptor whose threshold is `Count(0)` is inactive: incoming
/// messages pass over it and it cannot initiate operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Threshold {
    /// Never becomes inactive by count.
    Infinite,
    /// Becomes inactive after this many more operations.
    Count(u32),
}

impl Threshold {
    /// True if at least one more operation is allowed.
    #[inline]
    pub const fn is_active(&self) -> bool {
        !matches!(self, Threshold::Count(0))
    }

    /// Count one operation against the threshold.
    #[inline]
    pub(crate) fn consume(&mut self) {
        if let Threshold::Count(n) = self {
            *n = n.saturating_sub(1);
        }
    }
}

/// Where a new match entry goes relative to an existing position
/// (`PTL_INS_BEFORE` / `PTL_INS_AFTER`). With `me_attach` the position is
/// relative to the whole list: `Before` attaches at the head, `After` at the
/// tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// At the head of the list, or just before the base entry.
    Before,
    /// At the tail of the list, or just after the base entry.
    After,
}

/// What to do with an object when its memory descriptor is consumed
/// (`PTL_UNLINK` / `PTL_RETAIN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unlink {
    /// Unlink automatically once consumed (threshold reached or high-water
    /// mark exceeded).
    Unlink,
    /// Stay linked, inactive, until unlinked explicitly.
    Retain,
}

/// Whether an initiator asks the target for an acknowledgment of a put
/// (`PTL_ACK_REQ` / `PTL_NOACK_REQ`). The target sends one only if the
/// matched memory descriptor does not disable acknowledgments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AckReq {
    /// Request an acknowledgment.
    Ack,
    /// Do not request an acknowledgment.
    NoAck,
    /// Request an acknowledgment that the target's transport may hold back
    /// to share a write with its next message to the initiator (an
    /// extension of Portals 3.3). For an initiator that only reclaims
    /// memory on the acknowledgment and waits for nothing else: the engine
    /// treats it exactly as [`AckReq::Ack`], but the acknowledgment may
    /// leave later — with the target's next message to the initiator, on a
    /// progress pass a few tens of microseconds on, before the target's
    /// transport sleeps, or, without a progress thread, as late as the
    /// target's next call into the library.
    Lazy,
}

impl AckReq {
    /// Whether an acknowledgment is requested at all.
    pub fn requested(self) -> bool {
        self != AckReq::NoAck
    }
}

/// Why an operation failed, carried in events (`ni_fail_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FailType {
    /// The operation succeeded.
    Ok = 0,
    /// The target dropped the request: no matching entry accepted it, or
    /// access control refused it. The initiator learns this through a
    /// negative acknowledgment or reply.
    Dropped = 1,
    /// The transport could not deliver the message or its response: the peer
    /// disconnected, became unreachable or was declared dead.
    Unreachable = 2,
    /// The data transfer started but did not complete (the peer died while
    /// the payload was being received); the bytes already deposited are
    /// undefined.
    Incomplete = 3,
}

impl FailType {
    pub(crate) fn from_u8(v: u8) -> Option<FailType> {
        Some(match v {
            0 => FailType::Ok,
            1 => FailType::Dropped,
            2 => FailType::Unreachable,
            3 => FailType::Incomplete,
            _ => return None,
        })
    }

    /// True for [`FailType::Ok`].
    pub const fn is_ok(&self) -> bool {
        matches!(self, FailType::Ok)
    }
}

/// The destination of an initiated operation: which process, which portal
/// index and match bits, which access-control entry, which offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The target process.
    pub target: ProcessId,
    /// The portal index whose match list is searched.
    pub pt_index: PortalIndex,
    /// The access-control entry that should authorise the operation.
    pub ac_index: AcIndex,
    /// Match bits compared with each match entry.
    pub match_bits: u64,
    /// Offset into the target memory descriptor, used when that descriptor
    /// manages its offset remotely ([`crate::MdOptions::MANAGE_REMOTE`]).
    pub remote_offset: u64,
}

impl Remote {
    /// A destination with access-control entry 0 and remote offset 0.
    pub const fn new(target: ProcessId, pt_index: PortalIndex, match_bits: u64) -> Self {
        Remote {
            target,
            pt_index,
            ac_index: AcIndex(0),
            match_bits,
            remote_offset: 0,
        }
    }

    /// The same destination with another remote offset.
    pub const fn with_offset(mut self, remote_offset: u64) -> Self {
        self.remote_offset = remote_offset;
        self
    }

    /// The same destination with another access-control entry.
    pub const fn with_ac_index(mut self, ac_index: AcIndex) -> Self {
        self.ac_index = ac_index;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_process_ids_accept_by_field() {
        let p = ProcessId::new(3, 7);
        assert!(ProcessId::ANY.accepts(p));
        assert!(ProcessId::new(3, PID_ANY).accepts(p));
        assert!(!ProcessId::new(4, PID_ANY).accepts(p));
        assert!(ProcessId::new(NID_ANY, 7).accepts(p));
        assert!(!ProcessId::new(NID_ANY, 8).accepts(p));
        assert!(p.accepts(p));
        assert_eq!(format!("{}", ProcessId::new(NID_ANY, 2)), "*:2");
    }

    #[test]
    fn threshold_counts_down_and_stops_at_zero() {
        let mut t = Threshold::Count(1);
        assert!(t.is_active());
        t.consume();
        assert_eq!(t, Threshold::Count(0));
        assert!(!t.is_active());
        t.consume();
        assert_eq!(t, Threshold::Count(0));
        let mut inf = Threshold::Infinite;
        inf.consume();
        assert!(inf.is_active());
    }
}
