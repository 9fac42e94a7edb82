//! Non-blocking collectives as chains of triggered operations (issue 20
//! part 3): started by one call, then run by whichever thread drives
//! progress — the transport's progress thread while every application
//! thread computes — with no MPI call needed before the wait.
//!
//! **Persistent entries.** A put that arrives before its target posted a
//! matching entry is dropped, and a peer may start a collective long before
//! this process does. So every communicator gets, when its context pair is
//! set up and before any member can use it, entries on [`NBC_PT`] that stay
//! until the pair is released, each counting on its own counting event:
//! the barrier's fan-in and fan-out, and one *ready* entry per member that
//! can be this process's child in a broadcast tree, and one counting
//! the all-reduce's ready notices from this process's parent. Only a
//! broadcast's data and an all-reduce's atomics and result land on
//! per-instance entries, and their senders wait for the receiver's ready
//! notice before the first put.
//!
//! **Cumulative thresholds.** Instances of a collective are numbered per
//! communicator (MPI runs them in the same order everywhere), and the
//! triggers on persistent counters say "the k-th time", never "once more".
//! Why early arrivals of instance k+1 cannot satisfy instance k's
//! thresholds is argued at each use (and in docs/ARCHITECTURE.md).
//!
//! **Completion.** The last operation of an instance's chain is a triggered
//! zero-byte put to this process's *done* entry, whose descriptor posts to
//! the request queue; its header data is the request's id. So the ordinary
//! wait machinery (sleeping on the request queue) sees it, and the request
//! is complete only after its counters show that nothing of the chain
//! still reads or writes the user's buffer.

mod flat;

use std::sync::Arc;

use portals::{
    AckReq, AtomicSpec, CtEvent, CtHandle, MdDesc, MdHandle, MdOptions, MeHandle, NetworkInterface,
    PortalIndex, Position, ProcessId, Remote, Trigger, Unlink,
};

use super::{ptl, slots, Device, Kind, ReqId, State};
use crate::bits;
use crate::error::{MpiError, Result};
use crate::status::Status;

/// The portal of the non-blocking collectives' entries.
pub(crate) const NBC_PT: PortalIndex = PortalIndex(5);

/// Match-bit kinds (in the protocol field; the context field names the
/// communicator).
const K_BARRIER_IN: u64 = 1;
const K_BARRIER_OUT: u64 = 2;
/// Source field: the child's communicator rank.
const K_READY: u64 = 3;
/// Tag field: the broadcast's instance number (low 32 bits).
const K_DATA: u64 = 4;
const K_DONE: u64 = 5;
/// Ready notices from this process's parent in the all-reduce tree.
const K_UP_READY: u64 = 6;
/// Tag field: the all-reduce's instance number (low 32 bits).
const K_ACC: u64 = 7;

/// `user_ptr` of the done entry's descriptor (events on the request queue;
/// header data: the request's id).
pub(super) const NBC_DONE: u64 = u64::MAX - 4;

pub(crate) use flat::FlatPlan;

/// A communicator's persistent entries and counters, and its instance
/// numbers.
pub(super) struct NbcComm {
    /// World ranks of the members, by communicator rank.
    pub(super) ranks: Arc<[u32]>,
    pub(super) me: u32,
    entries: Vec<MeHandle>,
    cts: Vec<CtHandle>,
    bar_in: CtHandle,
    bar_out: CtHandle,
    /// Ready counters of the members at offset 2^i (mod n) above this
    /// process, the only ones that can be its children in a binomial tree,
    /// and how many ready notices each has been expected to send so far.
    ready: Vec<(CtHandle, u64)>,
    /// Ready notices from the parent in the all-reduce tree (rooted at 0):
    /// one per instance.
    up_ready: CtHandle,
    /// Posted notices of the flat collectives (`flat.rs`), from any
    /// member.
    flat_ready: CtHandle,
    barriers: u64,
    bcasts: u64,
    reduces: u64,
    /// Flat instances started, and the notices they make every member
    /// expect, cumulated (`flat.rs`).
    flats: u64,
    flat_expected: u64,
    /// Instances started and not finished: the pair's release waits for them.
    pending: usize,
    /// The short blocking collectives' slots (`slots.rs`), if the
    /// communicator's size suits them.
    pub(super) slots: Option<super::slots::Slots>,
    /// The communicator was freed while instances were pending.
    closing: bool,
}

/// A communicator's barrier fan-in and fan-out counters, its ready
/// counters, its all-reduce ready counter, its flat collectives' one, and
/// its slots if it has them (see [`NbcComm`]).
type Counters = (
    CtHandle,
    CtHandle,
    Vec<(CtHandle, u64)>,
    CtHandle,
    CtHandle,
    Option<super::slots::Slots>,
);

/// The lowest set bit of virtual rank `v`, or for the root (0) the first
/// power of two at or above `n`: a node's children are at `v + m` for the
/// powers of two `m` below it (and `v + m < n`), its parent at
/// `v - lowbit`.
fn lowbit(v: u32, n: u32) -> u32 {
    if v == 0 {
        n.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    }
}

/// The offsets `m` of the children of virtual rank `v` in a binomial tree
/// of `n`.
fn child_offsets(v: u32, n: u32) -> impl Iterator<Item = u32> {
    let lb = lowbit(v, n);
    (0..32)
        .map(|i| 1u32 << i)
        .take_while(move |&m| m < lb && v.checked_add(m).is_some_and(|c| c < n))
}

pub(super) fn nbc_bits(kind: u64, ctx: u16, src: u32, tag: u32) -> u64 {
    bits::encode(kind, ctx, src, tag)
}

/// A persistent, zero-byte entry counting the puts that reach it on `ct`.
fn counting_sink(ni: &NetworkInterface, bits: u64, ct: CtHandle) -> Result<MeHandle> {
    let me = ni
        .me_attach(
            NBC_PT,
            ProcessId::ANY,
            bits,
            0,
            Unlink::Retain,
            Position::After,
        )
        .map_err(ptl)?;
    if let Err(e) = ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE | MdOptions::CT_COMM).ct(ct),
        Vec::new(),
        Unlink::Retain,
    ) {
        let _ = ni.me_unlink(me);
        return Err(ptl(e));
    }
    Ok(me)
}

impl NbcComm {
    fn teardown(&self, ni: &NetworkInterface) {
        if let Some(s) = &self.slots {
            s.teardown(ni);
        }
        for &me in &self.entries {
            if let Err(e) = ni.me_unlink(me) {
                tracing::warn!(error = %e, "could not unlink a collective entry");
            }
        }
        for &ct in &self.cts {
            if let Err(e) = ni.ct_free(ct) {
                tracing::warn!(error = %e, "could not free a collective counter");
            }
        }
    }
}

/// Attach this process's done entry (see the module docs): only this
/// process puts there.
pub(super) fn attach_done(
    ni: &NetworkInterface,
    req_eq: portals::EqHandle,
) -> Result<(MeHandle, MdHandle)> {
    let me = ni
        .me_attach(
            NBC_PT,
            ni.id(),
            nbc_bits(K_DONE, 0, 0, 0),
            0,
            Unlink::Retain,
            Position::After,
        )
        .map_err(ptl)?;
    ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
            .eq(req_eq)
            .user_ptr(NBC_DONE),
        Vec::new(),
        Unlink::Retain,
    )
    .map_err(ptl)?;
    // The source of every zero-byte notice: no events, no counter.
    let zero = ni
        .md_bind(&MdDesc::default(), Vec::new(), Unlink::Retain)
        .map_err(ptl)?;
    Ok((me, zero))
}

impl Device {
    /// Create the persistent entries of the communicator with context pair
    /// `ctx`, members `ranks` (world ranks) and this process at `me`. Must
    /// run on every member before any member can start a non-blocking
    /// collective on it (the callers synchronise after it).
    pub(crate) fn nbc_create(&self, ctx: u16, ranks: &[u32], me: u32) -> Result<()> {
        let ni = self.ni();
        let n = ranks.len() as u32;
        let mut entries = Vec::new();
        let mut cts = Vec::new();
        let made = (|| -> Result<Counters> {
            let mut counted = |bits: u64| -> Result<CtHandle> {
                let ct = ni.ct_alloc().map_err(ptl)?;
                cts.push(ct);
                entries.push(counting_sink(ni, bits, ct)?);
                Ok(ct)
            };
            let bar_in = counted(nbc_bits(K_BARRIER_IN, ctx, 0, 0))?;
            let bar_out = counted(nbc_bits(K_BARRIER_OUT, ctx, 0, 0))?;
            let mut ready = Vec::new();
            let mut m = 1u32;
            while m < n {
                let child = (me + m) % n;
                ready.push((counted(nbc_bits(K_READY, ctx, child, 0))?, 0));
                m <<= 1;
            }
            let up_ready = counted(nbc_bits(K_UP_READY, ctx, 0, 0))?;
            let flat_ready = counted(flat::ready_bits(ctx))?;
            let slots = match slots::create(ni, self.req_eq, ctx, ranks.len())? {
                Some((entry, s)) => {
                    entries.push(entry);
                    Some(s)
                }
                None => None,
            };
            Ok((bar_in, bar_out, ready, up_ready, flat_ready, slots))
        })();
        let mut comm = |(bar_in, bar_out, ready, up_ready, flat_ready, slots)| NbcComm {
            ranks: ranks.into(),
            me,
            entries: std::mem::take(&mut entries),
            cts: std::mem::take(&mut cts),
            bar_in,
            bar_out,
            ready,
            up_ready,
            flat_ready,
            barriers: 0,
            bcasts: 0,
            reduces: 0,
            flats: 0,
            flat_expected: 0,
            pending: 0,
            closing: false,
            slots,
        };
        match made {
            Ok(parts) => {
                let c = comm(parts);
                self.lock().nbc.insert(ctx, c);
                Ok(())
            }
            Err(e) => {
                for me in entries {
                    let _ = ni.me_unlink(me);
                }
                for ct in cts {
                    let _ = ni.ct_free(ct);
                }
                Err(e)
            }
        }
    }

    /// The communicator with pair `ctx` is freed: remove its entries, or
    /// once its pending instances finish. True if the pair may be reused
    /// now.
    pub(super) fn nbc_release(&self, st: &mut State, ctx: u16) -> bool {
        match st.nbc.get_mut(&ctx) {
            Some(c) if c.pending > 0 => {
                c.closing = true;
                false
            }
            Some(_) => {
                if let Some(c) = st.nbc.remove(&ctx) {
                    c.teardown(self.ni());
                }
                true
            }
            None => true,
        }
    }

    /// An instance on `ctx` finished (completed or aborted).
    pub(super) fn nbc_instance_done(&self, st: &mut State, ctx: u16) {
        let Some(c) = st.nbc.get_mut(&ctx) else {
            return;
        };
        c.pending = c.pending.saturating_sub(1);
        if c.pending == 0 && c.closing {
            if let Some(c) = st.nbc.remove(&ctx) {
                c.teardown(self.ni());
            }
            let id = ctx as usize & !1;
            st.free_ctx[id / 64] |= 0b11 << (id % 64);
        }
    }

    /// The done notice of request `p` (its id) arrived: the chain is over.
    pub(super) fn on_nbc_done(&self, st: &mut State, p: u64) {
        let id = ReqId::from_user_ptr(p);
        let Some(r) = st.reqs.get_mut(id.idx as usize).filter(|r| r.gen == id.gen) else {
            return;
        };
        if r.result.is_some() {
            return;
        }
        // A transfer of the chain that failed counted a failure, which
        // counts towards the thresholds too: report it instead of success.
        // With every member alive, the failure is a block that arrived
        // longer than the room posted for it (`CT_TRUNCATED_FAILS` on the
        // flat collectives' entries): the members' counts disagree.
        let failed = r
            .cts
            .first()
            .and_then(|&ct| self.ni().ct_get(ct).ok())
            .is_some_and(|v| v.failure > 0);
        let member_failed = || {
            let failed = self.ni().failed_peers();
            r.nbc_ctx
                .and_then(|ctx| st.members.get(&ctx))
                .is_some_and(|m| {
                    m.iter()
                        .any(|&rank| failed.contains(&portals_runtime::process_id(rank)))
                })
        };
        r.result = Some(if !failed {
            Ok(Status::new(-1, -1, 0, 0))
        } else if member_failed() {
            Err(MpiError::PeerFailed {
                rank: -1,
                why: "a transfer of a non-blocking collective failed".into(),
            })
        } else {
            Err(MpiError::CollectiveTruncated)
        });
        self.finish(st, id);
    }

    /// A new request for an instance on `ctx`; counted as pending there.
    fn nbc_req(&self, st: &mut State, ctx: u16) -> Result<ReqId> {
        let c = st
            .nbc
            .get_mut(&ctx)
            .ok_or(MpiError::InvalidBuffer("the communicator was freed"))?;
        c.pending += 1;
        let members = c.ranks.clone();
        let id = self.new_req(st, Kind::Nbc, u32::MAX);
        // Like a receive from any source: the death of any member (or the
        // departure of all the others) fails it, instead of a chain that
        // waits forever for a message the dead one will never send
        // (`failure.rs`).
        st.members.entry(ctx).or_insert(members);
        let r = &mut st.reqs[id.idx as usize];
        r.nbc_ctx = Some(ctx);
        r.any_ctx = Some(ctx);
        Ok(id)
    }

    /// Put zero bytes to this process's done entry, with request `id` as
    /// header data, once `trigger` is reached.
    fn done_when(&self, id: ReqId, trigger: Trigger) -> Result<()> {
        self.ni()
            .triggered_put(
                self.nbc_md,
                0,
                0,
                AckReq::NoAck,
                &Remote::new(self.ni().id(), NBC_PT, nbc_bits(K_DONE, 0, 0, 0)),
                id.user_ptr(),
                trigger,
            )
            .map_err(ptl)
    }

    /// Start a barrier on communicator `ctx` (`MPI_Ibarrier`): a binomial
    /// tree rooted at rank 0, fan-in on the members' `bar_in` counters,
    /// fan-out on their `bar_out` counters, all triggered.
    ///
    /// Instance k (1, 2, ...) at a node with `ch` children: a leaf puts to
    /// its parent when `bar_out` ≥ k−1 (its previous instance is done), an
    /// inner node when `bar_in` ≥ k·ch; the root fans out when
    /// `bar_in` ≥ k·ch, the others forward when `bar_out` ≥ k; done when
    /// `bar_out` ≥ k (root: `bar_in` ≥ k·ch). Why a child's fan-in of k+1
    /// cannot count for k: a child sends it only after its own `bar_out`
    /// reached k (a leaf by its trigger; an inner node because its
    /// children's fan-ins of k+1 needed the same, by induction), i.e.
    /// after this node fanned out k, which it does only after its own
    /// `bar_in` reached k·ch. So until then each child has sent at most k
    /// fan-ins, `bar_in` ≤ k·ch, and reaching k·ch means every child's k-th
    /// fan-in arrived.
    pub(crate) fn ibarrier(&self, ctx: u16) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        self.drain(&mut st);
        let id = self.nbc_req(&mut st, ctx)?;
        let c = st.nbc.get_mut(&ctx).expect("nbc_req checked it");
        c.barriers += 1;
        let (k, n, me) = (c.barriers, c.ranks.len() as u32, c.me);
        let (bar_in, bar_out) = (c.bar_in, c.bar_out);
        let ranks = c.ranks.clone();
        let ch = child_offsets(me, n).count() as u64;
        let r = (|| -> Result<()> {
            let ni = self.ni();
            let to = |rank: u32, kind: u64| {
                Remote::new(
                    portals_runtime::process_id(ranks[rank as usize]),
                    NBC_PT,
                    nbc_bits(kind, ctx, 0, 0),
                )
            };
            let put = |remote: Remote, trigger: Trigger| {
                ni.triggered_put(self.nbc_md, 0, 0, AckReq::NoAck, &remote, 0, trigger)
                    .map_err(ptl)
            };
            let all_in = Trigger::new(bar_in, k * ch);
            let fan_out = if me == 0 {
                all_in
            } else {
                let parent = me - lowbit(me, n);
                let up = if ch == 0 {
                    Trigger::new(bar_out, k - 1)
                } else {
                    all_in
                };
                put(to(parent, K_BARRIER_IN), up)?;
                Trigger::new(bar_out, k)
            };
            for m in child_offsets(me, n) {
                put(to(me + m, K_BARRIER_OUT), fan_out)?;
            }
            self.done_when(id, fan_out)
        })();
        match r {
            Ok(()) => Ok(id),
            Err(e) => self.fail_started(&mut st, id, e),
        }
    }

    /// Start a broadcast of `len` bytes at `buf` from communicator rank
    /// `root` on communicator `ctx` (`MPI_Ibcast`): a binomial tree rooted
    /// at `root`, store and forward, any size.
    ///
    /// A non-root posts its receive entry for instance k (match bits: k),
    /// then puts a *ready* notice to its parent, counted on the parent's
    /// ready counter for this child. The parent's data put to a child waits
    /// for both its own data (its descriptor's counter ≥ 1; the root has it)
    /// and that child's r-th ready notice, r being how many instances up
    /// to k had this child below this parent (both sides know it: every
    /// member sees the same sequence of roots): two triggered increments of
    /// a per-child gate counter, the put triggered on the gate at 2. The
    /// child sends its notices in instance order after posting each entry,
    /// so r notices arrived ⇒ the entry of the r-th such instance, k, is
    /// posted, however notices of later instances overtake. Data of
    /// instance k+1 cannot land in k's buffer: the match bits differ.
    ///
    /// Done when the descriptor's counter reaches 1 + children (the data
    /// arrived and every forward was sent) — the root: children — so
    /// nothing of the chain uses the buffer any more.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid, and not be used by anyone else,
    /// until the request completes.
    pub(crate) unsafe fn ibcast(
        &self,
        ctx: u16,
        root: u32,
        buf: *mut u8,
        len: usize,
    ) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        self.drain(&mut st);
        let id = self.nbc_req(&mut st, ctx)?;
        let c = st.nbc.get_mut(&ctx).expect("nbc_req checked it");
        c.bcasts += 1;
        let (k, n, me) = (c.bcasts, c.ranks.len() as u32, c.me);
        let v = (me + n - root) % n;
        let ranks = c.ranks.clone();
        // This instance's ready thresholds, one per child (offset m: index
        // log2 m), counted before anything can fail so that every member
        // keeps the same sequence.
        let mut gates: Vec<(u32, CtHandle, u64)> = Vec::new();
        for m in child_offsets(v, n) {
            let slot = &mut c.ready[m.trailing_zeros() as usize];
            slot.1 += 1;
            gates.push(((me + m) % n, slot.0, slot.1));
        }
        let ch = gates.len() as u64;
        let tag = k as u32;
        let r = (|| -> Result<()> {
            let ni = self.ni();
            let pid = |rank: u32| portals_runtime::process_id(ranks[rank as usize]);
            let data = ni.ct_alloc().map_err(ptl)?;
            st.reqs[id.idx as usize].cts.push(data);
            let md = if v == 0 {
                // SAFETY: by this function's contract; the request unlinks
                // the descriptor before it completes.
                let md = unsafe {
                    ni.md_bind_raw(
                        &MdDesc::new(MdOptions::CT_SEND).ct(data),
                        buf,
                        len,
                        Unlink::Retain,
                    )
                }
                .map_err(ptl)?;
                st.reqs[id.idx as usize].md = Some(md);
                md
            } else {
                let parent = (me + n - lowbit(v, n)) % n;
                let entry = ni
                    .me_attach(
                        NBC_PT,
                        pid(parent),
                        nbc_bits(K_DATA, ctx, 0, tag),
                        0,
                        Unlink::Retain,
                        Position::After,
                    )
                    .map_err(ptl)?;
                st.reqs[id.idx as usize].me = Some(entry);
                // Infinite threshold: the forwards are sent from it after
                // the one put it receives.
                // SAFETY: by this function's contract; the request unlinks
                // the entry before it completes.
                let md = unsafe {
                    ni.md_attach_raw(
                        entry,
                        &MdDesc::new(
                            MdOptions::OP_PUT
                                | MdOptions::TRUNCATE
                                | MdOptions::CT_COMM
                                | MdOptions::CT_SEND,
                        )
                        .ct(data),
                        buf,
                        len,
                        Unlink::Retain,
                    )
                }
                .map_err(ptl)?;
                st.reqs[id.idx as usize].md = Some(md);
                ni.put(
                    self.nbc_md,
                    AckReq::NoAck,
                    &Remote::new(pid(parent), NBC_PT, nbc_bits(K_READY, ctx, me, 0)),
                    0,
                )
                .map_err(ptl)?;
                md
            };
            for &(child, ready, r) in &gates {
                let trigger = if v == 0 {
                    Trigger::new(ready, r)
                } else {
                    let gate = ni.ct_alloc().map_err(ptl)?;
                    st.reqs[id.idx as usize].cts.push(gate);
                    let one = CtEvent::success(1);
                    ni.triggered_ct_inc(gate, one, Trigger::new(data, 1))
                        .map_err(ptl)?;
                    ni.triggered_ct_inc(gate, one, Trigger::new(ready, r))
                        .map_err(ptl)?;
                    Trigger::new(gate, 2)
                };
                ni.triggered_put(
                    md,
                    0,
                    len as u64,
                    AckReq::NoAck,
                    &Remote::new(pid(child), NBC_PT, nbc_bits(K_DATA, ctx, 0, tag)),
                    0,
                    trigger,
                )
                .map_err(ptl)?;
            }
            let need = if v == 0 { ch } else { ch + 1 };
            self.done_when(id, Trigger::new(data, need))
        })();
        match r {
            Ok(()) => Ok(id),
            Err(e) => self.fail_started(&mut st, id, e),
        }
    }
}

impl Device {
    /// Whether an all-reduce of `len` bytes fits one atomic operation of
    /// this interface.
    pub(crate) fn atomic_fits(&self, len: usize) -> bool {
        len > 0 && len as u64 <= self.ni().limits().max_atomic_size
    }

    /// A request that is already complete (successfully): what a
    /// non-blocking collective that ran to its end in its start returns.
    pub(crate) fn completed_req(&self) -> ReqId {
        let mut st = self.lock();
        let id = self.new_req(&mut st, Kind::Nbc, u32::MAX);
        st.reqs[id.idx as usize].result = Some(Ok(Status::new(-1, -1, 0, 0)));
        self.finish(&mut st, id);
        id
    }

    /// Start an all-reduce (`MPI_Iallreduce`) of the `len` bytes at `buf`,
    /// which hold this process's contribution, with the atomic operation
    /// `spec`, on communicator `ctx`: up a binomial tree rooted at rank 0
    /// with triggered atomics, then the result down the same tree with
    /// triggered puts, all landing on one per-instance entry over `buf`
    /// (match bits: the instance number k) that counts on one counter `c`.
    ///
    /// A node with `ch` children posts the entry, then tells each child
    /// *ready* (their persistent `up_ready` counter). The children's
    /// atomics land on it (`c` = ch); a non-root sends its own atomic to
    /// its parent when `c` ≥ ch and its `up_ready` ≥ k (r notices arrived
    /// ⇒ the parent has posted its entry of instance k, as for the
    /// broadcast's ready notices; a leaf needs only the latter). Its Sent
    /// and the parent's result (a put to the same entry, which the node
    /// posted before its atomic could reach the parent) bring `c` to
    /// ch + 2, and it forwards the result to its children; the root does
    /// at `c` = ch. Each forward's Sent counts too: done at `c` = 2·ch + 2
    /// (root: 2·ch), when nothing of the chain reads or writes `buf` any
    /// more. Nothing else can reach `c` early: the result comes after this
    /// node's atomic, which comes after its children's.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid, and not be used by anyone else,
    /// until the request completes.
    pub(crate) unsafe fn iallreduce(
        &self,
        ctx: u16,
        buf: *mut u8,
        len: usize,
        spec: AtomicSpec,
    ) -> Result<ReqId> {
        let mut st = self.lock();
        self.check(&st)?;
        self.drain(&mut st);
        let id = self.nbc_req(&mut st, ctx)?;
        let c = st.nbc.get_mut(&ctx).expect("nbc_req checked it");
        c.reduces += 1;
        let (k, n, me, up_ready) = (c.reduces, c.ranks.len() as u32, c.me, c.up_ready);
        let ranks = c.ranks.clone();
        let ch = child_offsets(me, n).count() as u64;
        let bits = nbc_bits(K_ACC, ctx, 0, k as u32);
        let r = (|| -> Result<()> {
            let ni = self.ni();
            let pid = |rank: u32| portals_runtime::process_id(ranks[rank as usize]);
            let cnt = ni.ct_alloc().map_err(ptl)?;
            st.reqs[id.idx as usize].cts.push(cnt);
            let entry = ni
                .me_attach(
                    NBC_PT,
                    ProcessId::ANY,
                    bits,
                    0,
                    Unlink::Retain,
                    Position::After,
                )
                .map_err(ptl)?;
            st.reqs[id.idx as usize].me = Some(entry);
            // SAFETY: by this function's contract; the request unlinks the
            // entry before it completes.
            let md = unsafe {
                ni.md_attach_raw(
                    entry,
                    // Remote offsets: every atomic and the result land
                    // at 0, not one after the other.
                    &MdDesc::new(
                        MdOptions::OP_PUT
                            | MdOptions::MANAGE_REMOTE
                            | MdOptions::CT_COMM
                            | MdOptions::CT_SEND,
                    )
                    .ct(cnt),
                    buf,
                    len,
                    Unlink::Retain,
                )
            }
            .map_err(ptl)?;
            st.reqs[id.idx as usize].md = Some(md);
            for m in child_offsets(me, n) {
                ni.put(
                    self.nbc_md,
                    AckReq::NoAck,
                    &Remote::new(pid(me + m), NBC_PT, nbc_bits(K_UP_READY, ctx, 0, 0)),
                    0,
                )
                .map_err(ptl)?;
            }
            let down = if me == 0 {
                ch
            } else {
                let parent = me - lowbit(me, n);
                let go = if ch == 0 {
                    Trigger::new(up_ready, k)
                } else {
                    let gate = ni.ct_alloc().map_err(ptl)?;
                    st.reqs[id.idx as usize].cts.push(gate);
                    let one = CtEvent::success(1);
                    ni.triggered_ct_inc(gate, one, Trigger::new(cnt, ch))
                        .map_err(ptl)?;
                    ni.triggered_ct_inc(gate, one, Trigger::new(up_ready, k))
                        .map_err(ptl)?;
                    Trigger::new(gate, 2)
                };
                ni.triggered_atomic(
                    md,
                    0,
                    len as u64,
                    AckReq::NoAck,
                    &Remote::new(pid(parent), NBC_PT, bits),
                    0,
                    spec,
                    go,
                )
                .map_err(ptl)?;
                ch + 2
            };
            for m in child_offsets(me, n) {
                ni.triggered_put(
                    md,
                    0,
                    len as u64,
                    AckReq::NoAck,
                    &Remote::new(pid(me + m), NBC_PT, bits),
                    0,
                    Trigger::new(cnt, down),
                )
                .map_err(ptl)?;
            }
            self.done_when(id, Trigger::new(cnt, down + ch))
        })();
        match r {
            Ok(()) => Ok(id),
            Err(e) => self.fail_started(&mut st, id, e),
        }
    }
}

/// Free a finished instance's counters (after its descriptor is unlinked:
/// nothing waits on them any more). True when all are gone.
pub(super) fn free_cts(ni: &NetworkInterface, cts: &mut Vec<CtHandle>) -> bool {
    cts.retain(|&ct| match ni.ct_free(ct) {
        Ok(()) | Err(portals::PtlError::InvalidHandle { .. }) => false,
        Err(e) => {
            tracing::trace!(error = %e, "collective counter still in use");
            true
        }
    });
    cts.is_empty()
}

/// Communicators' persistent state, by context pair.
pub(super) type NbcComms = rustc_hash::FxHashMap<u16, NbcComm>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_links_every_node_to_one_parent_and_back() {
        for n in 1..40u32 {
            let mut parents = vec![None; n as usize];
            for v in 0..n {
                for m in child_offsets(v, n) {
                    assert!(parents[(v + m) as usize].replace(v).is_none());
                }
            }
            for v in 1..n {
                assert_eq!(parents[v as usize], Some(v - lowbit(v, n)), "n {n} v {v}");
            }
            assert_eq!(parents[0], None);
        }
    }
}
