//! Peer failure: what the transport gave up on becomes `PeerFailed` on every
//! request that waits for the dead — named peers, and receives and probes
//! from any source on a communicator with a dead member (ULFM's
//! `MPI_ERR_PROC_FAILED_PENDING`).

use std::sync::Arc;

use super::{Device, ReqId, State};
use crate::error::MpiError;

impl Device {
    /// The transport gave up on some peers: they are dead to MPI. Fail every
    /// request that involves one of them and waits for it — a posted receive
    /// from it, a send waiting for its acknowledgment or its get — instead of
    /// waiting forever. (Operations waiting for an acknowledgment or reply
    /// the engine fails itself.) A receive from any source fails too if its
    /// communicator has a dead member (ULFM's
    /// `MPI_ERR_PROC_FAILED_PENDING`): the message it waits for may have
    /// been the dead one's, and waiting on could hang forever.
    pub(super) fn on_peer_failures(&self, st: &mut State) {
        let failed = self.ni().failed_peers();
        for p in failed.get(st.failures_seen..).unwrap_or(&[]) {
            if let Some(r) = self.job.rank_of(*p) {
                tracing::warn!(rank = r, "the transport gave up on a peer");
                st.dead.insert(r);
            }
        }
        st.failures_seen = failed.len();
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
