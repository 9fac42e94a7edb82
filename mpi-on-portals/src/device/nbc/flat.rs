//! Flat non-blocking collectives: gather, scatter, all-gather, all-to-all
//! (and their varcount forms), reduce, scan, exclusive scan and
//! reduce-scatter-block, each one instance of one scheme — every block
//! goes straight from its sender to its receiver as a triggered put (data)
//! or a triggered atomic (reductions), with no intermediate rank.
//!
//! **Posted notices.** A receiver posts its per-instance entries at the
//! call, then tells *every* member so with a zero-byte notice to their
//! persistent `flat_ready` entry (one per communicator, counting on one
//! counter for all flat instances). Each instance has the same number of
//! notifying members R_i on every member (its receivers: known to all
//! from the kind and the root), so every member expects the same
//! cumulative count E_k = R_1 + … + R_k after instance k. A sender's
//! transfers of instance k wait for `flat_ready` ≥ E_k, and a receiver's
//! notices of instance k wait for `flat_ready` ≥ E_(k−1) at the receiver.
//!
//! Why `flat_ready` ≥ E_k at a member means every receiver of instances
//! up to k has posted (so no transfer is dropped): let m be the first
//! instance some receiver of which has not yet sent its notices, and let
//! x be the first notice set of an instance i > m to be sent, by a
//! receiver r. Then r's counter had reached E_(i−1) ≥ E_m, counting only
//! notices sent before x — of instances below m (at most E_(m−1)) and of
//! m (at most R_m − 1, one is missing): fewer than E_m, a contradiction.
//! So while any notice of m is unsent, no notice of a later instance is,
//! and a member counts at most E_k − 1 until every notice of instances up
//! to k was sent, each after its sender's entries were posted. Instance
//! numbers in the match bits keep the data of k+1 out of k's entries.
//!
//! Notifying everyone (R_i · n zero-byte puts per instance, not only the
//! senders of each receiver) is what makes the counts the same
//! everywhere; with only the senders notified, a member that sends
//! nothing in instance m could count a later instance's notice in place
//! of a missing one of m.
//!
//! **Reductions** land on one entry per instance over the accumulating
//! buffer (the root's receive buffer, each member's for scan and
//! reduce-scatter, a temporary for exclusive scan), matching any source:
//! the engine applies each sender's triggered atomic (in chunks of at most
//! `max_atomic_size` bytes, at their remote offsets) in arrival order.
//! Chosen over a tree with arithmetic at intermediate ranks: there is no
//! arithmetic to schedule anywhere (the engine's atomics do it, as for the
//! all-reduce), no intermediate buffers, and the critical path is one hop;
//! the cost is R·(n−1) atomics at a root instead of log n, fine for the
//! communicator sizes this runs at. Exclusive scan: member r (below n−1)
//! scans into a temporary (its own value plus the atomics of every lower
//! member), and forwards it as a put into member r+1's receive buffer
//! once all arrived.
//!
//! **Completion.** All counted on the instance's counter C: each put
//! received (`CT_COMM` on its entry), each transfer sent (`CT_SEND` on the
//! send descriptor), each atomic received (the accumulating entry), and
//! for exclusive scan one increment once the forward was sent (counted on
//! the temporary's own counter A, which also says when the atomics are
//! in). Done at the sum, when nothing of the chain reads or writes the
//! user's buffers. A block longer than the room its receiver posted is
//! cut to fit and counted as a failure (`CT_TRUNCATED_FAILS`), so the
//! counts still reach the sum and the receiver's request fails with
//! `MpiError::CollectiveTruncated`.

use std::any::Any;

use portals::{
    AckReq, AtomicSpec, CtEvent, CtHandle, MdDesc, MdOptions, Position, ProcessId, Remote, Trigger,
    Unlink,
};

use super::{nbc_bits, Device, NBC_PT};
use crate::device::{ptl, ReqId, State};
use crate::error::{MpiError, Result};

/// Sub-kinds of [`K_FLAT`] in the top four bits of the tag field (the low
/// 28 hold the instance number).
const SUB_READY: u32 = 1 << 28;
const SUB_DATA: u32 = 2 << 28;
const SUB_ACC: u32 = 3 << 28;
const INSTANCE_MASK: u64 = (1 << 28) - 1;

/// Match-bit kind of every flat entry (the protocol field; 1–7 are the
/// tree collectives').
const K_FLAT: u64 = 0;

/// One instance of a flat collective at this process, as the collective
/// layer planned it. Pointers, not borrows: [`Device::iflat`]'s caller
/// guarantees them.
pub(crate) struct FlatPlan {
    /// How many members notify in this instance: the same on every member.
    pub(crate) notifiers: u32,
    /// This process is one of them (it receives).
    pub(crate) notify: bool,
    /// Per source member: where its put lands (`(source, at, len)`).
    pub(crate) recv: Vec<(u32, *mut u8, usize)>,
    /// Reductions: the accumulating region here and how many members
    /// send to it.
    pub(crate) acc: Option<(*mut u8, usize, u32)>,
    /// The region every transfer of this process reads from.
    pub(crate) src: (*const u8, usize),
    /// Transfers: `(destination, offset in src, len)`.
    pub(crate) sends: Vec<(u32, usize, usize)>,
    /// Reductions: the transfers are this atomic into the destination's
    /// accumulating entry; otherwise puts into its entry for this source.
    pub(crate) spec: Option<AtomicSpec>,
    /// Exclusive scan: once every atomic arrived, put the accumulating
    /// region into this member's entry for this process.
    pub(crate) forward: Option<u32>,
    /// Memory the request keeps until it completes (exclusive scan's
    /// temporary).
    pub(crate) owned: Option<Box<dyn Any + Send>>,
}

/// How many atomics of at most `chunk` bytes carry `len` bytes.
fn chunks(len: usize, chunk: usize) -> usize {
    len.div_ceil(chunk.max(1))
}

impl Device {
    /// The largest atomic length that is a whole number of `elem`-byte
    /// elements.
    fn atomic_chunk(&self, elem: usize) -> usize {
        let max = self.ni().limits().max_atomic_size as usize;
        (max / elem.max(1)).max(1) * elem.max(1)
    }

    /// Start one instance of a flat collective on communicator `ctx`
    /// (module docs).
    ///
    /// # Safety
    /// Every region of `plan` must stay valid until the request completes;
    /// the receiving ones (`recv`, `acc`) must not be read or written by
    /// anyone else until then, nor `src` written.
    pub(crate) unsafe fn iflat(&self, ctx: u16, plan: FlatPlan) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        self.drain(&mut st);
        let id = self.nbc_req(&mut st, ctx)?;
        let c = st.nbc.get_mut(&ctx).expect("nbc_req checked it");
        c.flats += 1;
        let before = c.flat_expected;
        c.flat_expected += u64::from(plan.notifiers);
        let (k, all_posted, ready) = (c.flats, c.flat_expected, c.flat_ready);
        let ranks = c.ranks.clone();
        let me = c.me;
        let inst = (k & INSTANCE_MASK) as u32;
        let data_bits = |src: u32| nbc_bits(K_FLAT, ctx, src, SUB_DATA | inst);
        let acc_bits = nbc_bits(K_FLAT, ctx, 0, SUB_ACC | inst);
        let chunk = plan
            .spec
            .map_or(usize::MAX, |s| self.atomic_chunk(s.datatype.size()));
        st.reqs[id.idx as usize].owned = plan.owned;
        let r = (|| -> Result<()> {
            let ni = self.ni();
            let pid = |rank: u32| portals_runtime::process_id(ranks[rank as usize]);
            let cnt = ni.ct_alloc().map_err(ptl)?;
            st.reqs[id.idx as usize].cts.push(cnt);
            let mut expect = 0u64;
            let post = |st: &mut State,
                        src: ProcessId,
                        bits: u64,
                        (at, len): (*mut u8, usize),
                        opts: MdOptions,
                        ct: CtHandle| {
                let entry = ni
                    .me_attach(NBC_PT, src, bits, 0, Unlink::Retain, Position::After)
                    .map_err(ptl)?;
                st.reqs[id.idx as usize].nbc_mes.push(entry);
                // SAFETY: by this function's contract; the request unlinks
                // the entry before it completes.
                let md = unsafe {
                    ni.md_attach_raw(entry, &MdDesc::new(opts).ct(ct), at, len, Unlink::Retain)
                }
                .map_err(ptl)?;
                st.reqs[id.idx as usize].nbc_mds.push(md);
                Ok::<_, MpiError>(md)
            };
            // Remote offsets: puts land at the block's start, the atomics'
            // chunks at theirs.
            // A block longer than its posted room is cut to fit, but
            // counts as a failure, so the request reports it
            // (`Device::on_nbc_done`) instead of losing the rest silently.
            let recv_opts = MdOptions::OP_PUT
                | MdOptions::MANAGE_REMOTE
                | MdOptions::TRUNCATE
                | MdOptions::CT_COMM
                | MdOptions::CT_TRUNCATED_FAILS;
            for &(src, at, len) in &plan.recv {
                post(&mut st, pid(src), data_bits(src), (at, len), recv_opts, cnt)?;
                expect += 1;
            }
            let mut forward = None;
            if let Some((at, len, senders)) = plan.acc {
                let atomics = (senders as usize * chunks(len, chunk)) as u64;
                match plan.forward {
                    Some(to) => {
                        let acc_ct = ni.ct_alloc().map_err(ptl)?;
                        st.reqs[id.idx as usize].cts.push(acc_ct);
                        let md = post(
                            &mut st,
                            ProcessId::ANY,
                            acc_bits,
                            (at, len),
                            recv_opts | MdOptions::CT_SEND,
                            acc_ct,
                        )?;
                        forward = Some((to, md, len, acc_ct, atomics));
                    }
                    None => {
                        post(&mut st, ProcessId::ANY, acc_bits, (at, len), recv_opts, cnt)?;
                        expect += atomics;
                    }
                }
            }
            if plan.notify {
                for rank in 0..ranks.len() as u32 {
                    ni.triggered_put(
                        self.nbc_md,
                        0,
                        0,
                        AckReq::NoAck,
                        &Remote::new(pid(rank), NBC_PT, ready_bits(ctx)),
                        0,
                        Trigger::new(ready, before),
                    )
                    .map_err(ptl)?;
                }
            }
            let go = Trigger::new(ready, all_posted);
            if !plan.sends.is_empty() {
                // SAFETY: by this function's contract (only read: no
                // operation on this descriptor writes); the request
                // unlinks it before it completes.
                let md = unsafe {
                    ni.md_bind_raw(
                        &MdDesc::new(MdOptions::CT_SEND).ct(cnt),
                        plan.src.0.cast_mut(),
                        plan.src.1,
                        Unlink::Retain,
                    )
                }
                .map_err(ptl)?;
                st.reqs[id.idx as usize].nbc_mds.push(md);
                for &(dst, off, len) in &plan.sends {
                    match plan.spec {
                        None => {
                            let to = Remote::new(pid(dst), NBC_PT, data_bits(me));
                            ni.triggered_put(md, off as u64, len as u64, AckReq::NoAck, &to, 0, go)
                                .map_err(ptl)?;
                            expect += 1;
                        }
                        Some(spec) => {
                            for at in (0..len).step_by(chunk) {
                                let part = chunk.min(len - at);
                                let to =
                                    Remote::new(pid(dst), NBC_PT, acc_bits).with_offset(at as u64);
                                ni.triggered_atomic(
                                    md,
                                    (off + at) as u64,
                                    part as u64,
                                    AckReq::NoAck,
                                    &to,
                                    0,
                                    spec,
                                    go,
                                )
                                .map_err(ptl)?;
                                expect += 1;
                            }
                        }
                    }
                }
            }
            if let Some((to, md, len, acc_ct, atomics)) = forward {
                // The forward needs both the atomics here and `to`'s entry
                // posted: a gate counter joins the two.
                let gate = ni.ct_alloc().map_err(ptl)?;
                st.reqs[id.idx as usize].cts.push(gate);
                let one = CtEvent::success(1);
                ni.triggered_ct_inc(gate, one, Trigger::new(acc_ct, atomics))
                    .map_err(ptl)?;
                ni.triggered_ct_inc(gate, one, go).map_err(ptl)?;
                ni.triggered_put(
                    md,
                    0,
                    len as u64,
                    AckReq::NoAck,
                    &Remote::new(pid(to), NBC_PT, data_bits(me)),
                    0,
                    Trigger::new(gate, 2),
                )
                .map_err(ptl)?;
                // Its Sent on the temporary's counter: one more on C.
                ni.triggered_ct_inc(cnt, one, Trigger::new(acc_ct, atomics + 1))
                    .map_err(ptl)?;
                expect += 1;
            }
            self.done_when(id, Trigger::new(cnt, expect))
        })();
        match r {
            Ok(()) => Ok(id),
            Err(e) => self.fail_started(&mut st, id, e),
        }
    }
}

/// The persistent entry's match bits (see [`super::NbcComm`]).
pub(super) fn ready_bits(ctx: u16) -> u64 {
    nbc_bits(K_FLAT, ctx, 0, SUB_READY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A message in flight in the model: a notice of `k` to `to`, or a
    /// transfer of instance `k` to `to`.
    #[derive(Clone, Copy, Debug)]
    enum Msg {
        Notice { to: usize },
        Transfer { k: usize, to: usize },
    }

    /// The posted-notice protocol (module docs) with `n` members and random
    /// instances (receiver and sender sets), calls and deliveries in random
    /// order. `everyone`: receivers notify every member (the scheme);
    /// otherwise only that instance's senders, each member expecting the
    /// notices aimed at it. Returns whether a transfer reached a member
    /// that had not posted its instance (it would be dropped); panics if
    /// the protocol stalls.
    fn model(seed: u64, n: usize, instances: usize, everyone: bool) -> bool {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut recv = Vec::new();
        let mut send = Vec::new();
        for _ in 0..instances {
            let r: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
            let s: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
            recv.push(r);
            send.push(s);
        }
        // Notices member m expects in instance k, and cumulated.
        let aimed = |k: usize, m: usize| -> u64 {
            let rs = recv[k].iter().filter(|&&x| x).count() as u64;
            if everyone || send[k][m] {
                rs
            } else {
                0
            }
        };
        let cum: Vec<Vec<u64>> = (0..n)
            .map(|m| {
                let mut e = vec![0u64];
                for k in 0..instances {
                    let last = e[k];
                    e.push(last + aimed(k, m));
                }
                e
            })
            .collect();
        let mut called = vec![0usize; n];
        let mut count = vec![0u64; n];
        // Triggered operations: (threshold, message batch).
        let mut waiting: Vec<Vec<(u64, Vec<Msg>)>> = vec![Vec::new(); n];
        let mut flight: Vec<Msg> = Vec::new();
        let mut dropped = false;
        let fire = |m: usize,
                    count: &[u64],
                    waiting: &mut [Vec<(u64, Vec<Msg>)>],
                    flight: &mut Vec<Msg>| {
            let (due, keep): (Vec<_>, Vec<_>) =
                waiting[m].drain(..).partition(|(t, _)| *t <= count[m]);
            waiting[m] = keep;
            for (_, msgs) in due {
                flight.extend(msgs);
            }
        };
        loop {
            let callers: Vec<usize> = (0..n).filter(|&m| called[m] < instances).collect();
            if callers.is_empty() && flight.is_empty() {
                break;
            }
            if !callers.is_empty() && (flight.is_empty() || rng.gen_bool(0.3)) {
                let m = callers[rng.gen_range(0..callers.len())];
                let k = called[m];
                called[m] += 1;
                if recv[k][m] {
                    let to: Vec<Msg> = (0..n)
                        .filter(|&t| everyone || send[k][t])
                        .map(|to| Msg::Notice { to })
                        .collect();
                    waiting[m].push((cum[m][k], to));
                }
                if send[k][m] {
                    let to: Vec<Msg> = (0..n)
                        .filter(|&t| t != m && recv[k][t])
                        .map(|to| Msg::Transfer { k, to })
                        .collect();
                    waiting[m].push((cum[m][k + 1], to));
                }
                fire(m, &count, &mut waiting, &mut flight);
            } else {
                let i = rng.gen_range(0..flight.len());
                match flight.swap_remove(i) {
                    Msg::Notice { to } => {
                        count[to] += 1;
                        fire(to, &count, &mut waiting, &mut flight);
                    }
                    Msg::Transfer { k, to } => dropped |= called[to] <= k,
                }
            }
        }
        assert!(
            waiting.iter().all(Vec::is_empty),
            "seed {seed}: the protocol stalled"
        );
        dropped
    }

    #[test]
    fn notifying_every_member_never_lets_a_transfer_reach_an_unposted_instance() {
        for seed in 0..3000 {
            let n = 1 + seed as usize % 5;
            assert!(!model(seed, n, 6, true), "seed {seed}, {n} members");
        }
    }

    #[test]
    fn notifying_only_the_senders_can_let_a_transfer_reach_an_unposted_instance() {
        assert!((0..3000).any(|seed| model(seed, 3, 6, false)));
    }

    #[test]
    fn chunks_cover_the_length_with_whole_pieces() {
        assert_eq!(chunks(0, 512), 0);
        assert_eq!(chunks(1, 512), 1);
        assert_eq!(chunks(512, 512), 1);
        assert_eq!(chunks(513, 512), 2);
        assert_eq!(chunks(2000, 504), 4);
    }
}
