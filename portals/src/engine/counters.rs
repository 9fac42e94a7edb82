//! Counting events (Portals 4's `ptl_ct_event_t`): a pair of counts, of
//! successes and of failures, that a memory descriptor bumps instead of
//! (or beside) posting full events to an event queue.
//!
//! # What counts
//! A descriptor that names a counter ([`crate::MdDesc::ct`]) counts the
//! completion events its `CT_*` options select — the faithful subset of
//! Portals 4's `PTL_MD_EVENT_CT_*` / `PTL_LE_EVENT_CT_*` options that fits
//! a descriptor which serves both sides: [`MdOptions::CT_COMM`] (incoming
//! requests: `Put`, `Get`, `Atomic` and `FetchAtomic` events), [`MdOptions::CT_SEND`] (`Sent`),
//! [`MdOptions::CT_ACK`] (`Ack`), [`MdOptions::CT_REPLY`] (`Reply`). No
//! option, no counting (Portals 4 counts nothing by default either).
//! Operations are counted by default: a successful event adds one to
//! `success`; with [`MdOptions::CT_BYTES`] it adds its `mlength`. A failed
//! event (`fail` other than `Ok`: a negative acknowledgment or reply, an
//! unreachable peer, an incomplete deposit) always adds one to `failure`,
//! and so does a truncated incoming request on a descriptor with
//! [`MdOptions::CT_TRUNCATED_FAILS`] (an extension).
//! Counting is independent of the event queue: it happens whether or not
//! the descriptor has a queue, the queue is full, or
//! [`MdOptions::EVENT_END_DISABLE`] is set.
//!
//! # Ordering
//! The full event (if any) is queued first, then the counter moves, both
//! under the engine's lock, so a thread woken by either finds both.
//! Triggered operations whose threshold the move reached are issued at the
//! end of the engine call that moved it (`engine/triggered.rs`), after all
//! the events that call posts.
//!
//! # Thresholds and overflow
//! A threshold is compared with `success + failure`, as Portals 4 says for
//! `PtlCTWait`, `PtlCTPoll` and triggered operations (a failure must not
//! leave a waiter or a chain hanging). Both counts *saturate* at
//! `u64::MAX`, and so does their sum: Portals 4 leaves overflow undefined,
//! and wrapping would take a counter that reached a threshold back below
//! it. Only [`Engine::ct_set`] lowers a counter.

use std::collections::BTreeMap;

use super::triggered::Triggered;
use super::Engine;
use crate::error::{PtlError, Result};
use crate::event::EventKind;
use crate::handle::{CtHandle, CtKey, MdKey};
use crate::md::MdOptions;
use crate::types::FailType;

/// The value of a counting event (`ptl_ct_event_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtEvent {
    /// Successful events counted (or bytes, with [`MdOptions::CT_BYTES`]).
    pub success: u64,
    /// Failed events counted.
    pub failure: u64,
}

impl CtEvent {
    /// A value with both counts.
    pub const fn new(success: u64, failure: u64) -> Self {
        CtEvent { success, failure }
    }

    /// `n` successes, no failure (an increment for [`Engine::ct_inc`]).
    pub const fn success(n: u64) -> Self {
        CtEvent {
            success: n,
            failure: 0,
        }
    }

    /// `n` failures, no success.
    pub const fn failure(n: u64) -> Self {
        CtEvent {
            success: 0,
            failure: n,
        }
    }

    /// `success + failure`, saturating: what thresholds are compared with.
    pub const fn total(&self) -> u64 {
        self.success.saturating_add(self.failure)
    }

    /// Add `by`, each count saturating at `u64::MAX`.
    pub(crate) fn add(&mut self, by: CtEvent) {
        self.success = self.success.saturating_add(by.success);
        self.failure = self.failure.saturating_add(by.failure);
    }
}

/// A counting event and the triggered operations waiting for it.
#[derive(Default)]
pub(crate) struct Counter {
    pub(crate) value: CtEvent,
    /// Waiting operations by (threshold, order of recording): released in
    /// threshold order, and in recording order for equal thresholds
    /// (Portals 4's quality-of-implementation note).
    pub(crate) pending: BTreeMap<(u64, u64), Triggered>,
    /// On the engine's list of counters whose pending operations must be
    /// looked at.
    pub(crate) dirty: bool,
    /// Pending triggered increments and sets aimed at this counter (they
    /// wait in other counters): freeing it looks for them only if some
    /// exist, so that freeing one of many counters is not a scan of all.
    pub(crate) aimed: usize,
}

impl Engine {
    pub(super) fn ct_key(&self, h: CtHandle) -> Result<CtKey> {
        self.resolve(&self.cts, h.ni, h.key, CtHandle::KIND)
    }

    /// Allocate a counting event, both counts zero (`PtlCTAlloc`).
    pub fn ct_alloc(&mut self) -> Result<CtHandle> {
        if self.cts.len() >= self.limits.max_cts {
            return Err(PtlError::NoSpace {
                what: "counting events",
                limit: self.limits.max_cts,
            });
        }
        let key = self.cts.insert(Counter::default());
        Ok(CtHandle { ni: self.tag, key })
    }

    /// Free a counting event (`PtlCTFree`). The triggered operations
    /// waiting for it, and those that would have incremented or set it,
    /// are cancelled without a trace (as by [`Engine::ct_cancel_triggered`]).
    /// Descriptors that still name it count nothing from now on; a thread
    /// waiting on it wakes and gets `InvalidHandle`.
    pub fn ct_free(&mut self, ct: CtHandle) -> Result<()> {
        let k = self.ct_key(ct)?;
        let c = self.cts.remove(k).expect("checked key");
        for op in c.pending.into_values() {
            self.drop_triggered(&op);
        }
        if c.aimed == 0 {
            self.posted = true;
            return Ok(());
        }
        let mut gone = Vec::new();
        for c in self.cts.values_mut() {
            c.pending.retain(|_, op| {
                let keep = op.target_ct() != Some(k);
                if !keep {
                    gone.push(*op);
                }
                keep
            });
        }
        for op in &gone {
            self.drop_triggered(op);
        }
        self.posted = true;
        Ok(())
    }

    /// Cancel every triggered operation waiting for `ct`
    /// (`PtlCTCancelTriggered`): none of them is issued, and none changes
    /// anything the application sees. The counter keeps its value.
    pub fn ct_cancel_triggered(&mut self, ct: CtHandle) -> Result<()> {
        let k = self.ct_key(ct)?;
        let pending = std::mem::take(&mut self.cts[k].pending);
        for op in pending.into_values() {
            self.drop_triggered(&op);
        }
        Ok(())
    }

    /// The current value of a counting event (`PtlCTGet`).
    pub fn ct_get(&self, ct: CtHandle) -> Result<CtEvent> {
        Ok(self.cts[self.ct_key(ct)?].value)
    }

    /// `Some(value)` once `success + failure` of `ct` has reached
    /// `threshold` (the test of `PtlCTWait` and `PtlCTPoll`).
    pub fn ct_reached(&self, ct: CtHandle, threshold: u64) -> Result<Option<CtEvent>> {
        let v = self.ct_get(ct)?;
        Ok((v.total() >= threshold).then_some(v))
    }

    /// Set a counting event (`PtlCTSet`). Triggered operations whose
    /// threshold the new value reaches are issued.
    pub fn ct_set(&mut self, ct: CtHandle, value: CtEvent) -> Result<()> {
        let k = self.ct_key(ct)?;
        self.cts[k].value = value;
        self.ct_changed(k);
        self.run_triggers();
        Ok(())
    }

    /// Increment a counting event (`PtlCTInc`), saturating. As in Portals
    /// 4, one increment moves one count: `InvalidArgument` if both are
    /// non-zero. Triggered operations whose threshold is reached are
    /// issued.
    pub fn ct_inc(&mut self, ct: CtHandle, by: CtEvent) -> Result<()> {
        let k = self.ct_key(ct)?;
        check_increment(by)?;
        self.ct_add(k, by);
        self.run_triggers();
        Ok(())
    }

    /// Count one event of `kind` on descriptor `k`'s counter, if its
    /// options ask for it (see the module docs).
    #[inline]
    ///
    /// `truncated`: the event served less than was asked (`mlength <
    /// rlength`), which [`MdOptions::CT_TRUNCATED_FAILS`] counts as a
    /// failure.
    pub(super) fn count(
        &mut self,
        k: MdKey,
        kind: EventKind,
        mlength: u64,
        fail: FailType,
        truncated: bool,
    ) {
        let Some(d) = self.mds.get(k) else {
            return;
        };
        let Some(ck) = d.ct else {
            return;
        };
        let opts = d.desc.options;
        let wanted = match kind {
            EventKind::Put | EventKind::Get | EventKind::Atomic | EventKind::FetchAtomic => {
                MdOptions::CT_COMM
            }
            EventKind::Sent => MdOptions::CT_SEND,
            EventKind::Ack => MdOptions::CT_ACK,
            EventKind::Reply => MdOptions::CT_REPLY,
            _ => return,
        };
        if !opts.contains(wanted) {
            return;
        }
        let by = if !fail.is_ok()
            || (truncated
                && wanted == MdOptions::CT_COMM
                && opts.contains(MdOptions::CT_TRUNCATED_FAILS))
        {
            CtEvent::failure(1)
        } else if opts.contains(MdOptions::CT_BYTES) {
            CtEvent::success(mlength)
        } else {
            CtEvent::success(1)
        };
        self.ct_add(ck, by);
    }

    pub(super) fn ct_add(&mut self, k: CtKey, by: CtEvent) {
        let Some(c) = self.cts.get_mut(k) else {
            return;
        };
        c.value.add(by);
        self.ct_changed(k);
    }

    /// A counter moved: wake waiters, and have its pending operations
    /// looked at before the engine call returns.
    pub(super) fn ct_changed(&mut self, k: CtKey) {
        self.posted = true;
        let Some(c) = self.cts.get_mut(k) else {
            return;
        };
        if !c.dirty && !c.pending.is_empty() {
            c.dirty = true;
            self.trig.dirty.push(k);
        }
    }
}

pub(super) fn check_increment(by: CtEvent) -> Result<()> {
    if by.success != 0 && by.failure != 0 {
        return Err(PtlError::InvalidArgument(
            "a counting-event increment moves either the success or the failure count, not both",
        ));
    }
    Ok(())
}
