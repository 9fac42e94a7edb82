//! Triggered operations (Portals 4): a put, a get, or a counter increment
//! or set, recorded against a counting event and a threshold, that the
//! engine issues by itself once the counter's `success + failure` reaches
//! the threshold — on whichever thread's engine call moved the counter (a
//! transport's progress thread delivering a message, an application thread
//! driving progress or calling [`Engine::ct_inc`]). A chain of them
//! therefore runs while the application computes.
//!
//! # How their messages leave
//! The engine is sans-I/O: a triggered put or get produces the same
//! [`Outbound`] a normal one does, but nobody called for it, so it waits in
//! the engine's outbound queue ([`Engine::take_triggered`]). The transport
//! drains that queue at the end of every progress pass, and the interface
//! after every call of its own that can move a counter
//! ([`crate::NiCore::send_triggered`]); a transport is in the middle of a
//! pass, holding its own locks, when a message it delivers fires a
//! trigger, so the message cannot be handed to it there.
//!
//! # The state used
//! As in Portals 4, the descriptor's state at the trigger counts, not at
//! the call: the operation is checked at the call only for what cannot
//! change (its handles are valid, the region lies inside the descriptor,
//! the target is a concrete process). If the threshold is already reached
//! at the call, the operation is issued at once, and an error issuing it
//! is returned to the caller.
//!
//! # Failure and cancellation
//! * A triggered put or get that cannot be issued when its threshold is
//!   reached (its descriptor is inactive, or the region is in use by a
//!   transfer), or whose descriptor is unlinked first (by the user or by
//!   itself), *fails*: it is dropped, and the descriptor's counter (if it
//!   names one) counts a failure for each completion event the operation
//!   would have counted had it been issued and failed — `Sent` (and `Ack`
//!   if one was requested) for a put, `Reply` for a get, each as the
//!   descriptor's `CT_*` options say. So a thread waiting on that counter
//!   for the operation's completion is not left waiting. No event queue
//!   entry is posted. The descriptor's memory is never touched: nothing is
//!   lent before the operation is issued, and the descriptor is named by a
//!   generation-checked key.
//! * Freeing the trigger counter ([`Engine::ct_free`]) or
//!   [`Engine::ct_cancel_triggered`] cancels its operations silently, as
//!   `PtlCTCancelTriggered` says: nothing the application sees changes.
//! * A triggered increment or set of a counter that is freed first is
//!   dropped with it.
//!
//! Triggered atomics ([`Engine::triggered_atomic`],
//! [`Engine::triggered_fetch_atomic`], [`Engine::triggered_swap`]) follow
//! the same rules; the operation, type, length and operand are checked at
//! the call, as they cannot change. A failed atomic counts as a put
//! (`Sent`, `Ack` if asked), a failed fetching one as a get-put (`Sent` on
//! its put descriptor, `Reply` on its get descriptor).

use std::collections::VecDeque;

use super::counters::{check_increment, CtEvent};
use super::{check_range, Engine, OpKind, Outbound};
use crate::atomic::AtomicSpec;
use crate::error::{PtlError, Result};
use crate::event::EventKind;
use crate::handle::{CtHandle, CtKey, MdHandle, MdKey};
use crate::types::{AckReq, FailType, Remote};

/// When a triggered operation is issued: once `success + failure` of
/// counting event `ct` is at least `threshold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// The counting event that triggers the operation.
    pub ct: CtHandle,
    /// The value of its `success + failure` that releases the operation.
    pub threshold: u64,
}

impl Trigger {
    /// Issue once `ct` reaches `threshold`.
    pub const fn new(ct: CtHandle, threshold: u64) -> Self {
        Trigger { ct, threshold }
    }
}

/// A recorded operation, waiting in its trigger counter.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Triggered {
    Put {
        md: MdKey,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: Remote,
        hdr_data: u64,
    },
    Get {
        md: MdKey,
        local_offset: u64,
        length: u64,
        remote: Remote,
    },
    Atomic {
        md: MdKey,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: Remote,
        hdr_data: u64,
        spec: AtomicSpec,
    },
    /// A fetching atomic, or a swap if `swap` (with `operand`'s first
    /// `spec.datatype.size()` bytes if the operation takes one).
    Fetch {
        get_md: MdKey,
        get_offset: u64,
        put_md: MdKey,
        put_offset: u64,
        length: u64,
        remote: Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        swap: bool,
        operand: Option<[u8; 16]>,
    },
    CtInc {
        ct: CtKey,
        by: CtEvent,
    },
    CtSet {
        ct: CtKey,
        to: CtEvent,
    },
}

impl Triggered {
    /// The descriptors the operation uses.
    fn mds(&self) -> [Option<MdKey>; 2] {
        match self {
            Triggered::Put { md, .. }
            | Triggered::Get { md, .. }
            | Triggered::Atomic { md, .. } => [Some(*md), None],
            Triggered::Fetch { get_md, put_md, .. } => [Some(*get_md), Some(*put_md)],
            Triggered::CtInc { .. } | Triggered::CtSet { .. } => [None, None],
        }
    }

    /// The counter a triggered increment or set changes.
    pub(super) fn target_ct(&self) -> Option<CtKey> {
        match self {
            Triggered::CtInc { ct, .. } | Triggered::CtSet { ct, .. } => Some(*ct),
            _ => None,
        }
    }
}

/// The engine's bookkeeping of triggered operations (the operations
/// themselves wait in their trigger counters).
#[derive(Default)]
pub(super) struct TriggerState {
    /// Counters that moved and have operations waiting: looked at before
    /// the engine call returns ([`Engine::run_triggers`]).
    pub(super) dirty: Vec<CtKey>,
    /// Operations recorded and not yet issued or cancelled.
    pending: usize,
    /// Recording order, to release equal thresholds in that order.
    seq: u64,
    /// Messages of issued triggered operations, for the transport.
    out: VecDeque<Outbound>,
}

impl Engine {
    /// Record a put of `length` bytes of `md` at `local_offset` to `remote`
    /// (`PtlTriggeredPut`), issued once `trigger` is reached; see the
    /// module docs for the state used, failures and cancellation.
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_put(
        &mut self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
        trigger: Trigger,
    ) -> Result<()> {
        let md = self.triggered_md(md, local_offset, length, remote)?;
        self.record(
            trigger,
            Triggered::Put {
                md,
                local_offset,
                length,
                ack,
                remote: *remote,
                hdr_data,
            },
        )
    }

    /// Record a get of `length` bytes from `remote` into `md` at
    /// `local_offset` (`PtlTriggeredGet`), issued once `trigger` is
    /// reached.
    pub fn triggered_get(
        &mut self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        remote: &Remote,
        trigger: Trigger,
    ) -> Result<()> {
        let md = self.triggered_md(md, local_offset, length, remote)?;
        self.record(
            trigger,
            Triggered::Get {
                md,
                local_offset,
                length,
                remote: *remote,
            },
        )
    }

    /// Record an atomic operation (`PtlTriggeredAtomic`; see
    /// [`Engine::atomic`]), issued once `trigger` is reached.
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_atomic(
        &mut self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        trigger: Trigger,
    ) -> Result<()> {
        self.atomic_rules(spec, length, false, None)?;
        let md = self.triggered_md(md, local_offset, length, remote)?;
        self.record(
            trigger,
            Triggered::Atomic {
                md,
                local_offset,
                length,
                ack,
                remote: *remote,
                hdr_data,
                spec,
            },
        )
    }

    /// Record a fetching atomic operation (`PtlTriggeredFetchAtomic`; see
    /// [`Engine::fetch_atomic`]), issued once `trigger` is reached.
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_fetch_atomic(
        &mut self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        trigger: Trigger,
    ) -> Result<()> {
        self.record_fetch(
            (get_md, local_get_offset),
            (put_md, local_put_offset),
            length,
            remote,
            hdr_data,
            spec,
            None,
            trigger,
        )
    }

    /// Record a swap (`PtlTriggeredSwap`; see [`Engine::swap`]), issued
    /// once `trigger` is reached.
    #[allow(clippy::too_many_arguments)]
    pub fn triggered_swap(
        &mut self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        operand: Option<&[u8]>,
        spec: AtomicSpec,
        trigger: Trigger,
    ) -> Result<()> {
        self.record_fetch(
            (get_md, local_get_offset),
            (put_md, local_put_offset),
            length,
            remote,
            hdr_data,
            spec,
            Some(operand),
            trigger,
        )
    }

    /// `swap`: `Some(operand)` for a swap, `None` for a fetching atomic.
    #[allow(clippy::too_many_arguments)]
    fn record_fetch(
        &mut self,
        (get_md, get_offset): (MdHandle, u64),
        (put_md, put_offset): (MdHandle, u64),
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        swap: Option<Option<&[u8]>>,
        trigger: Trigger,
    ) -> Result<()> {
        let operand = swap.flatten();
        self.atomic_rules(spec, length, swap.is_some(), operand)?;
        let get_md = self.triggered_md(get_md, get_offset, length, remote)?;
        let put_md = self.triggered_md(put_md, put_offset, length, remote)?;
        let operand = operand.map(|o| {
            let mut a = [0u8; 16];
            a[..o.len()].copy_from_slice(o);
            a
        });
        self.record(
            trigger,
            Triggered::Fetch {
                get_md,
                get_offset,
                put_md,
                put_offset,
                length,
                remote: *remote,
                hdr_data,
                spec,
                swap: swap.is_some(),
                operand,
            },
        )
    }

    fn issue_atomic(&mut self, op: &Triggered) -> Result<Outbound> {
        match *op {
            Triggered::Atomic {
                md,
                local_offset,
                length,
                ack,
                remote,
                hdr_data,
                spec,
            } => {
                let md = self.md_handle(md);
                self.atomic(md, local_offset, length, ack, &remote, hdr_data, spec)
            }
            Triggered::Fetch {
                get_md,
                get_offset,
                put_md,
                put_offset,
                length,
                remote,
                hdr_data,
                spec,
                swap,
                operand,
            } => {
                let (g, p) = (self.md_handle(get_md), self.md_handle(put_md));
                let n = spec.datatype.size();
                let operand = operand.as_ref().map(|o| &o[..n]);
                if swap {
                    self.swap(
                        g, get_offset, p, put_offset, length, &remote, hdr_data, operand, spec,
                    )
                } else {
                    self.fetch_atomic(
                        g, get_offset, p, put_offset, length, &remote, hdr_data, spec,
                    )
                }
            }
            _ => Err(PtlError::InvalidArgument("not an atomic operation")),
        }
    }

    /// Record an increment of `ct` by `by` (`PtlTriggeredCTInc`), done once
    /// `trigger` is reached. `by` moves one count only, as for
    /// [`Engine::ct_inc`].
    pub fn triggered_ct_inc(&mut self, ct: CtHandle, by: CtEvent, trigger: Trigger) -> Result<()> {
        let ct = self.ct_key(ct)?;
        check_increment(by)?;
        self.record(trigger, Triggered::CtInc { ct, by })
    }

    /// Record setting `ct` to `to` (`PtlTriggeredCTSet`), done once
    /// `trigger` is reached.
    pub fn triggered_ct_set(&mut self, ct: CtHandle, to: CtEvent, trigger: Trigger) -> Result<()> {
        let ct = self.ct_key(ct)?;
        self.record(trigger, Triggered::CtSet { ct, to })
    }

    /// Triggered operations recorded and not yet issued or cancelled
    /// (bounded by [`crate::NiLimits::max_triggered`]).
    pub fn triggered_pending(&self) -> usize {
        self.trig.pending
    }

    /// The next message of an issued triggered operation, for the
    /// transport to send like any [`Outbound`] (complete its token with
    /// [`Engine::send_complete`]). Transports normally drain the queue
    /// through [`crate::NiCore::send_triggered`].
    pub fn take_triggered(&mut self) -> Option<Outbound> {
        self.trig.out.pop_front()
    }

    /// Queue a message nobody called for (an issued triggered operation,
    /// the response of an atomic that waited) for the transport.
    pub(super) fn queue_outbound(&mut self, out: Outbound) {
        self.trig.out.push_back(out);
    }

    /// Hand `out` (a message of an operation just initiated here) to the
    /// transport's next pass instead of sending it now: for code that must
    /// not send, such as an unlink hook (see
    /// [`crate::NiCore::set_unlink_hook`]). It leaves with the issued
    /// triggered operations ([`Engine::take_triggered`]), in order with
    /// them; [`crate::NiCore::with_engine`] wakes the transport for it.
    pub fn defer_outbound(&mut self, out: Outbound) {
        self.queue_outbound(out);
    }

    /// True while issued triggered operations wait for the transport.
    pub fn has_triggered(&self) -> bool {
        !self.trig.out.is_empty()
    }

    fn triggered_md(
        &self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        remote: &Remote,
    ) -> Result<MdKey> {
        if !remote.target.is_concrete() {
            return Err(PtlError::InvalidProcess(remote.target));
        }
        let k = self.live_md_key(md)?;
        check_range(local_offset, length, self.mds[k].length)?;
        Ok(k)
    }

    fn record(&mut self, trigger: Trigger, op: Triggered) -> Result<()> {
        let ck = self.ct_key(trigger.ct)?;
        if self.cts[ck].value.total() >= trigger.threshold {
            let r = self.issue(op, true);
            self.run_triggers();
            return r;
        }
        if self.trig.pending >= self.limits.max_triggered {
            return Err(PtlError::NoSpace {
                what: "pending triggered operations",
                limit: self.limits.max_triggered,
            });
        }
        self.trig.seq += 1;
        for md in op.mds().into_iter().flatten() {
            self.mds[md].triggered += 1;
        }
        self.trig.pending += 1;
        if let Some(t) = op.target_ct().and_then(|t| self.cts.get_mut(t)) {
            t.aimed += 1;
        }
        self.cts[ck]
            .pending
            .insert((trigger.threshold, self.trig.seq), op);
        Ok(())
    }

    /// Issue the operations whose counters reached their thresholds, until
    /// none is left: an issued increment may release more. Every engine
    /// call that can move a counter ends with this.
    pub(super) fn run_triggers(&mut self) {
        let mut i = 0;
        while let Some(&ck) = self.trig.dirty.get(i) {
            i += 1;
            while let Some(op) = self.next_released(ck) {
                // An error is counted on the descriptor's counter.
                let _ = self.issue(op, false);
            }
            if let Some(c) = self.cts.get_mut(ck) {
                c.dirty = false;
            }
        }
        self.trig.dirty.clear();
    }

    /// Take the first operation waiting in counter `ck` that its value
    /// releases.
    fn next_released(&mut self, ck: CtKey) -> Option<Triggered> {
        let c = self.cts.get_mut(ck)?;
        let total = c.value.total();
        let next = c.pending.first_entry()?;
        if next.key().0 > total {
            return None;
        }
        let op = next.remove();
        self.drop_triggered(&op);
        Some(op)
    }

    /// Carry out `op`. A put or get that cannot be issued fails (counted,
    /// see the module docs) unless `at_call`: then the caller gets the
    /// error instead.
    fn issue(&mut self, op: Triggered, at_call: bool) -> Result<()> {
        let (kind, md, region, remote, ack, hdr_data) = match op {
            Triggered::CtInc { ct, by } => {
                self.ct_add(ct, by);
                return Ok(());
            }
            Triggered::CtSet { ct, to } => {
                if let Some(c) = self.cts.get_mut(ct) {
                    c.value = to;
                    self.ct_changed(ct);
                }
                return Ok(());
            }
            Triggered::Put {
                md,
                local_offset,
                length,
                ack,
                remote,
                hdr_data,
            } => (
                OpKind::Put,
                md,
                (local_offset, length),
                remote,
                ack,
                hdr_data,
            ),
            Triggered::Get {
                md,
                local_offset,
                length,
                remote,
            } => (
                OpKind::Get,
                md,
                (local_offset, length),
                remote,
                AckReq::NoAck,
                0,
            ),
            Triggered::Atomic { .. } | Triggered::Fetch { .. } => {
                return match self.issue_atomic(&op) {
                    Ok(out) => {
                        self.trig.out.push_back(out);
                        Ok(())
                    }
                    Err(e) => {
                        if !at_call {
                            self.count_failed(&op);
                        }
                        Err(e)
                    }
                };
            }
        };
        let h = self.md_handle(md);
        match self.initiate(kind, h, Some(region), &remote, ack, hdr_data) {
            Ok(out) => {
                self.trig.out.push_back(out);
                Ok(())
            }
            Err(e) => {
                if !at_call {
                    self.count_failed(&op);
                }
                Err(e)
            }
        }
    }

    /// Count on `op`'s descriptor the failures of the events it would have
    /// counted had it been issued and failed.
    fn count_failed(&mut self, op: &Triggered) {
        // Dropped: the operation never left this process.
        let fail = FailType::Dropped;
        match *op {
            Triggered::Put { md, ack, .. } => {
                self.count(md, EventKind::Sent, 0, fail, false);
                if ack == AckReq::Ack {
                    self.count(md, EventKind::Ack, 0, fail, false);
                }
            }
            Triggered::Get { md, .. } => self.count(md, EventKind::Reply, 0, fail, false),
            Triggered::Atomic { md, ack, .. } => {
                self.count(md, EventKind::Sent, 0, fail, false);
                if ack == AckReq::Ack {
                    self.count(md, EventKind::Ack, 0, fail, false);
                }
            }
            Triggered::Fetch { get_md, put_md, .. } => {
                self.count(put_md, EventKind::Sent, 0, fail, false);
                self.count(get_md, EventKind::Reply, 0, fail, false);
            }
            Triggered::CtInc { .. } | Triggered::CtSet { .. } => {}
        }
    }

    /// Forget a cancelled operation (nothing is counted).
    pub(super) fn drop_triggered(&mut self, op: &Triggered) {
        self.forget_pending(op);
    }

    /// `op` left its trigger counter (issued or cancelled): it no longer
    /// holds its descriptor or counts as aimed at its target counter.
    fn forget_pending(&mut self, op: &Triggered) {
        self.trig.pending -= 1;
        for md in op.mds().into_iter().flatten() {
            if let Some(d) = self.mds.get_mut(md) {
                d.triggered = d.triggered.saturating_sub(1);
            }
        }
        if let Some(t) = op.target_ct().and_then(|t| self.cts.get_mut(t)) {
            t.aimed = t.aimed.saturating_sub(1);
        }
    }

    /// Descriptor `k` is being unlinked: its triggered operations fail (see
    /// the module docs). Called while `k` still exists, so that its
    /// counter and options are known; the caller runs the triggers the
    /// failures release.
    pub(super) fn cancel_md_triggers(&mut self, k: MdKey) {
        if self.mds.get(k).is_none_or(|d| d.triggered == 0) {
            return;
        }
        let mut failed = Vec::new();
        for c in self.cts.values_mut() {
            c.pending.retain(|_, op| {
                let keep = !op.mds().contains(&Some(k));
                if !keep {
                    failed.push(*op);
                }
                keep
            });
        }
        for op in &failed {
            self.drop_triggered(op);
            self.count_failed(op);
        }
    }
}
