//! Peers that can no longer take part: what the transport gave up on
//! becomes `PeerFailed` on every request that waits for it — named peers,
//! and receives and probes from any source on a communicator with a dead
//! member (ULFM's `MPI_ERR_PROC_FAILED_PENDING`); a rank that finalized
//! becomes `PeerFinalized` on a blocking wait or probe that needs it (a
//! named peer, or any source once every other member left).
//!
//! **Departure notices.** Finalize, once this process's own requests are
//! done, puts zero bytes on every other process's departure portal. A rank
//! that finalized will never send or receive again, so a receive that
//! still names it (or a send still waiting for its receive) is the bug of
//! an erroneous program — typically one rank returned an error from `main`
//! while another waited for its message. Every MPI hangs there, and so did
//! this one: the survivor waited forever and the finalizing rank with it,
//! in the closing barrier. Failing the wait lets the survivor's error
//! surface and the job end. Only waits that would block fail: a request
//! left pending (to be tested or cancelled later) is the program's right. The notice rides the unexpected queue behind
//! the sender's earlier messages, so what it did send is received first,
//! and behind the acknowledgments of what it received
//! (`Nal::fence_responses`), so a send it took is never failed.
//! Cost: one zero-byte put per peer at finalize (over lazily connected TCP
//! that may open a connection a pair never needed; shared memory and UDP
//! have none to open).

use std::sync::Arc;

use portals::{AckReq, MdDesc, Remote, Unlink};

use super::{Device, Kind, Req, ReqId, State, DEPART_PT};
use crate::error::MpiError;

impl Device {
    /// The transport gave up on some peers: they are dead to MPI. Fail every
    /// request that waits for one of them (see [`Device::fail_unreachable`]).
    pub(super) fn on_peer_failures(&self, st: &mut State) {
        let failed = self.ni().failed_peers();
        for p in failed.get(st.failures_seen..).unwrap_or(&[]) {
            if let Some(r) = self.job.rank_of(*p) {
                tracing::warn!(rank = r, "the transport gave up on a peer");
                st.dead.insert(r);
            }
        }
        st.failures_seen = failed.len();
        self.fail_unreachable(st);
    }

    /// Fail every unfinished request that waits for a dead peer — a posted
    /// receive from it, a send waiting for its acknowledgment or its get —
    /// instead of waiting forever. (Operations waiting for an
    /// acknowledgment or reply the engine fails itself.) A receive from any
    /// source fails if its communicator has a dead member (ULFM's
    /// `MPI_ERR_PROC_FAILED_PENDING`: the message it waits for may have
    /// been the dead one's).
    pub(super) fn fail_unreachable(&self, st: &mut State) {
        let victims: Vec<(ReqId, u32)> = st
            .reqs
            .iter()
            .filter(|(_, r)| r.result.is_none())
            .filter_map(|(i, r)| {
                let dead = if st.dead.contains(&r.peer) {
                    Some(r.peer)
                } else {
                    r.any_ctx.and_then(|c| dead_member(st, c))
                };
                dead.map(|d| {
                    let id = ReqId {
                        idx: i as u32,
                        gen: r.gen,
                    };
                    (id, d)
                })
            })
            .collect();
        for (id, dead) in victims {
            if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                r.result = Some(Err(dead_peer(dead)));
            }
            self.finish(st, id);
        }
    }

    /// A blocking wait is about to sleep on request `id`: if it waits for a
    /// rank that finalized (a receive naming it, one from any source when
    /// every other member left, a send waiting for its receive), fail it
    /// with `PeerFinalized` — sleeping could only hang. Only blocking waits
    /// do this, unlike a death: a program may legally leave a receive from
    /// a finalized rank pending, and test or cancel it later.
    pub(super) fn fail_if_stranded(&self, st: &mut State, id: ReqId) {
        if let Some(e) = self.stranded(st, id) {
            if let Some(r) = st.reqs.get_mut(id.idx as usize) {
                r.result = Some(Err(e));
            }
            self.finish(st, id);
        }
    }

    /// Why unfinished request `id` can never complete because a rank it
    /// needs finalized (see [`Device::fail_if_stranded`]); `None` if it can.
    pub(super) fn stranded(&self, st: &State, id: ReqId) -> Option<MpiError> {
        let r = st
            .reqs
            .get(id.idx as usize)
            .filter(|r| r.gen == id.gen && r.result.is_none())?;
        // Cheapest first: nearly always nobody this request needs has left,
        // and a wait asks this before every sleep.
        let why = match r.any_ctx {
            Some(c) if r.peer == u32::MAX => gone_any(st, c, self.job.rank()),
            _ => gone(st, r.peer),
        }?;
        // A transfer in progress on the request's memory (the put still
        // leaving, the reply to the peer's get still being sent) is the
        // transport's work: its events come, or fail, without the peer's
        // MPI layer. Over UDP at 30 % loss, the acknowledgment or the get of
        // a 1 MiB send was done, and the peer departed, before the last
        // datagrams were acknowledged.
        if !waits_for_peer_mpi(r)
            || r.md
                .is_some_and(|md| self.ni().md_busy(md).unwrap_or(false))
        {
            return None;
        }
        Some(why)
    }

    /// A receive from any source in context `ctx` of the communicator whose
    /// members are `members` (world ranks) is about to wait: remember the
    /// members, so that the death of one fails the receive.
    pub(crate) fn watch_members(&self, ctx: u16, members: &[u32]) {
        let mut st = self.lock();
        st.members.entry(ctx).or_insert_with(|| Arc::from(members));
    }

    /// True if the transport gave up on some peer (a job with a dead rank
    /// cannot hold a barrier).
    pub(crate) fn peers_failed(&self) -> bool {
        let mut st = self.lock();
        self.drain(&mut st);
        !st.dead.is_empty()
    }

    /// Tell every other live rank that this process left MPI (finalize,
    /// once its own requests are done): see the module docs. Best effort:
    /// a notice that cannot be sent only leaves that peer as it was.
    pub(crate) fn depart(&self) {
        let ni = self.ni();
        let md = match ni.md_bind(&MdDesc::default(), Vec::new(), Unlink::Retain) {
            Ok(md) => md,
            Err(e) => {
                tracing::warn!(error = %e, "no departure notices: the peers are not told");
                return;
            }
        };
        // The transport queues the acknowledgment of a message it took
        // after posting the message's event: a peer's last barrier message
        // may be received here, and this rank gone past the barrier, while
        // its acknowledgment is not yet queued. The peer's send still waits
        // for it, and a notice ahead of it would fail that send with
        // `PeerFinalized` (a free-then-finalize over shared memory, one run
        // in four under load). Fenced, every acknowledgment goes first.
        ni.nal().fence_responses();
        let (me, size) = (self.job.rank(), self.job.size());
        let dead = self.lock().dead.clone();
        for r in (0..size).filter(|r| *r != me && !dead.contains(r)) {
            let to = Remote::new(self.job.id(r), DEPART_PT, 0);
            if let Err(e) = ni.put(md, AckReq::NoAck, &to, 0) {
                tracing::debug!(rank = r, error = %e, "departure notice not sent");
            }
        }
    }
}

/// Why world rank `w` can never again take part in an operation: it died,
/// or it finalized.
pub(super) fn gone(st: &State, w: u32) -> Option<MpiError> {
    if st.dead.contains(&w) {
        Some(dead_peer(w))
    } else if st.departed.contains(&w) {
        Some(MpiError::PeerFinalized { rank: w as i32 })
    } else {
        None
    }
}

/// Why a receive from any source in context `ctx` (a communicator some
/// receive from any source used) can never be matched, seen from world rank
/// `me`: a member died, or every other member finalized. (A communicator of
/// this process alone never fails: another of its threads may send.)
pub(super) fn gone_any(st: &State, ctx: u16, me: u32) -> Option<MpiError> {
    if let Some(d) = dead_member(st, ctx) {
        return Some(dead_peer(d));
    }
    let members = st.members.get(&ctx)?;
    let mut others = members.iter().copied().filter(|r| *r != me).peekable();
    others.peek()?;
    let mut first = None;
    for r in others {
        if !st.departed.contains(&r) {
            return None;
        }
        first = Some(first.map_or(r, |f: u32| f.min(r)));
    }
    first.map(|r| MpiError::PeerFinalized { rank: r as i32 })
}

/// A dead member of context `ctx` (a communicator some receive from any
/// source used), if any: the lowest.
pub(super) fn dead_member(st: &State, ctx: u16) -> Option<u32> {
    let members = st.members.get(&ctx)?;
    members
        .iter()
        .copied()
        .filter(|r| st.dead.contains(r))
        .min()
}

/// The error of an operation with a peer the transport gave up on.
pub(super) fn dead_peer(rank: u32) -> MpiError {
    MpiError::PeerFailed {
        rank: rank as i32,
        why: "the transport gave up on it (connection lost or refused)".into(),
    }
}

/// True if unfinished request `r` still waits for something only the
/// peer's MPI layer does: match a receive, post the receive a send waits
/// for, pull a long message, send a synchronous acknowledgment. Once the
/// peer's part is done, what is left — the local completion of a send whose
/// acknowledgment is here, the reply to a get already sent — is the work of
/// the peer's transport, which keeps running through its closing barrier
/// (it cannot leave before this rank gets there). Failing such a request
/// would turn a lossy transport's late local completion into a spurious
/// `PeerFinalized`.
fn waits_for_peer_mpi(r: &Req) -> bool {
    match r.kind {
        Kind::SendShort | Kind::SendLong => {
            !matches!(r.acked, Some(n) if n > 0 || r.got || r.empty)
        }
        Kind::SendSync => r.acked.is_none(),
        Kind::Recv | Kind::Nbc => true,
        Kind::SendReady | Kind::RecvGet | Kind::Control => false,
    }
}
