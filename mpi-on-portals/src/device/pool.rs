//! The unexpected-message pool and its flow control (seed 001 §5, Fig. 9,
//! extended): high-water-mark buffers behind the mark, the unlink hook that
//! replaces and grows them while the application computes, the saved
//! envelopes, and the overflow entry's pull path — a short message no
//! buffer can take is kept as an envelope and fetched from its sender, so
//! memory stays bounded by the cap and nothing is dropped.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{fence, Ordering};
use std::sync::{MutexGuard, TryLockError};

use portals::{
    Event, EventKind, FailType, MdDesc, MdHandle, MdOptions, NiCore, Position, ProcessId, PtlError,
    Unlink,
};

use super::announce::announced_len;
use super::{ptl, Shared, State, DEPARTED, LONG_UNEXPECTED, OVERFLOW};
use crate::bits::{self, PROTO_SHORT};
use crate::error::{MpiError, Result};

/// A message that arrived before its receive was posted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Unexpected {
    pub(super) bits: u64,
    pub(super) initiator: ProcessId,
    pub(super) hdr_data: u64,
    pub(super) rlength: u64,
    pub(super) mlength: u64,
    pub(super) offset: u64,
    /// Index of the buffer holding the data (short messages).
    pub(super) buf: Option<usize>,
}

/// One high-water-mark unexpected-message buffer. The memory belongs to the
/// library, not to the engine (raw attach), so it can be read after the
/// descriptor unlinked itself.
pub(super) struct UnexpectedBuffer {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    pub(super) md: Option<MdHandle>,
    /// Messages in it not received yet.
    pub(super) pending: usize,
}

impl Drop for UnexpectedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` come from `Box::into_raw` of a boxed slice of
        // exactly `len` bytes in `UnexpectedBuffer::new`, and are freed only
        // here, once. The pool holding the buffer outlives the network
        // interface: the device drops its job (the interface, whose transport
        // shutdown stops every transfer) before its share of the pool, and
        // the interface's unlink hook, which holds the other share, is
        // dropped with the interface's core.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

impl UnexpectedBuffer {
    pub(super) fn new(len: usize) -> Self {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let len = b.len();
        UnexpectedBuffer {
            ptr: Box::into_raw(b).cast(),
            len,
            md: None,
            pending: 0,
        }
    }
}

/// The unexpected-message buffers (see [`Shared::pool`]).
#[derive(Default)]
pub(super) struct Pool {
    pub(super) bufs: Vec<UnexpectedBuffer>,
    /// Buffers added by the unlink hook while the state was locked (counted
    /// into [`MpiStats::buffers_grown`]).
    pub(super) grown_early: u64,
}

// SAFETY: the pool's raw pointers are to memory it owns (see
// `UnexpectedBuffer`); all access is under its mutex.
unsafe impl Send for Pool {}

thread_local! {
    /// This thread holds a pool lock: an unlink hook it runs (from an engine
    /// call made under that lock) must not take it again.
    static IN_POOL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The locked pool; marks the thread as holding it.
pub(super) struct PoolGuard<'a>(MutexGuard<'a, Pool>);

impl<'a> PoolGuard<'a> {
    pub(super) fn new(g: MutexGuard<'a, Pool>) -> Self {
        IN_POOL.with(|c| c.set(true));
        PoolGuard(g)
    }
}

impl Deref for PoolGuard<'_> {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        &self.0
    }
}

impl DerefMut for PoolGuard<'_> {
    fn deref_mut(&mut self) -> &mut Pool {
        &mut self.0
    }
}

impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        IN_POOL.with(|c| c.set(false));
    }
}

impl Shared {
    /// The unlink hook: an unexpected-message buffer filled up and unlinked
    /// itself, on whichever thread deposited the last message (typically the
    /// progress thread while the application computes). Handle the
    /// unexpected queue now — save the arrivals, re-attach drained buffers,
    /// grow the pool — so that the next messages find room without waiting
    /// for an MPI call. Never blocks: if the state is locked, its holder
    /// does it on unlock.
    pub(super) fn on_unlink_hook(&self, core: &NiCore) {
        self.service.store(true, Ordering::SeqCst);
        if !self.service_unexpected(core) {
            self.make_room(core);
        }
    }

    /// The state is busy and its unlink events wait for its holder: make
    /// sure meanwhile that at least two buffers can take messages, growing
    /// the pool (up to its cap) if not. Which buffers are still linked is
    /// asked of the engine, as their unlink events are not handled yet.
    pub(super) fn make_room(&self, core: &NiCore) {
        if IN_POOL.with(|c| c.get()) {
            return;
        }
        let mut pool = self.pool();
        if self.active_buffers(core, &pool) < 2 && pool.bufs.len() < self.cfg.unexpected_max {
            tracing::debug!(
                buffers = pool.bufs.len() + 1,
                "growing the unexpected-message pool while the state is busy"
            );
            pool.grown_early += 1;
            if let Err(e) = self.add_buffer(core, &mut pool) {
                // The state's holder sees the same failure when it grows
                // the pool itself; nothing to report from here.
                tracing::warn!(error = %e, "could not grow the unexpected-message pool");
            }
        }
    }

    /// Buffers that can take another message now. A buffer whose
    /// high-water mark is crossed stops matching at once, but unlinks (and
    /// reports it) only once the payload that crossed it is in — with
    /// several senders, other messages arrive meanwhile — so "linked" would
    /// count it as room; the engine is asked for each buffer's offset.
    pub(super) fn active_buffers(&self, core: &NiCore, pool: &Pool) -> usize {
        pool.bufs
            .iter()
            .filter_map(|b| b.md)
            .filter(|&md| {
                core.with_engine(|e| e.md_update(md, None, None))
                    .is_ok_and(|m| m.local_offset.saturating_add(m.max_size) <= m.length)
            })
            .count()
    }

    pub(super) fn pool(&self) -> PoolGuard<'_> {
        PoolGuard::new(self.pool.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Handle the unexpected queue if the state is free; false if it was
    /// locked (its holder does it on unlock).
    pub(super) fn service_unexpected(&self, core: &NiCore) -> bool {
        loop {
            fence(Ordering::SeqCst);
            let mut g = match self.st.try_lock() {
                Ok(g) => g,
                // The holder sees `service` when it unlocks.
                Err(TryLockError::WouldBlock) => return false,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            self.service.store(false, Ordering::SeqCst);
            let took = self.drain_unexpected(core, &mut g);
            // Announcements that used up long posted receives: their pulls
            // start now (`pull.rs`).
            self.drain_pulls(core, &mut g);
            self.flush_kept(core, &mut g);
            drop(g);
            if took {
                // A prober sleeping on the queue finds it empty now: wake it
                // to look at the saved messages.
                core.wake_sleepers();
            }
            fence(Ordering::SeqCst);
            if !self.service.load(Ordering::SeqCst) {
                return true;
            }
        }
    }

    /// Handle every event of the unexpected queue (no sends, no progress:
    /// safe inside an unlink hook), keeping their slots as the device's
    /// drain does (see `saved.rs`). True if there was any.
    pub(super) fn drain_unexpected(&self, core: &NiCore, st: &mut State) -> bool {
        let mut took = false;
        loop {
            match core.with_engine(|e| e.eq_get_kept(self.unexp_eq)) {
                Ok(Some(ev)) => {
                    took = true;
                    if let Err(e) = self.on_unexpected(core, st, &ev) {
                        st.fatal.get_or_insert(e);
                    }
                }
                Ok(None) => return took,
                Err(PtlError::EqDropped { dropped }) => {
                    took = true;
                    st.fatal
                        .get_or_insert(MpiError::EventQueueOverflow(dropped));
                }
                Err(e) => {
                    st.fatal.get_or_insert(ptl(e));
                    return took;
                }
            }
        }
    }

    // ----- unexpected buffers -------------------------------------------

    /// Add a buffer to the pool and link it; the caller counts it as grown
    /// if it is beyond the initial set.
    pub(super) fn add_buffer(&self, core: &NiCore, pool: &mut Pool) -> Result<()> {
        pool.bufs
            .push(UnexpectedBuffer::new(self.cfg.unexpected_buffer));
        let i = pool.bufs.len() - 1;
        self.attach_buffer(core, pool, i)
    }

    /// Link buffer `i` at the end of the short-unexpected entries (just in
    /// front of the long-unexpected entry).
    pub(super) fn attach_buffer(&self, core: &NiCore, pool: &mut Pool, i: usize) -> Result<()> {
        let Some(b) = pool.bufs.get_mut(i) else {
            return Err(MpiError::InvalidBuffer("no such unexpected buffer"));
        };
        let me = core
            .with_engine(|e| {
                e.me_insert(
                    self.long_me,
                    ProcessId::ANY,
                    bits::encode(PROTO_SHORT, 0, 0, 0),
                    !bits::PROTO_MASK,
                    Unlink::Unlink,
                    Position::Before,
                )
            })
            .map_err(ptl)?;
        // Acknowledging: a standard sender keeps its data exposed until it
        // learns that the message is held here.
        let desc = MdDesc::new(MdOptions::OP_PUT)
            .max_size(self.cfg.eager_limit as u64)
            .eq(self.unexp_eq)
            .user_ptr(i as u64);
        // SAFETY: the buffer's memory lives as long as the state, which
        // outlives the interface (see `UnexpectedBuffer`'s drop); nobody else
        // writes it, and the library reads only regions whose Put event it
        // has seen.
        let md = match unsafe { core.md_attach_raw(me, &desc, b.ptr, b.len, Unlink::Unlink) } {
            Ok(md) => md,
            Err(e) => {
                let _ = core.with_engine(|en| en.me_unlink(me));
                return Err(ptl(e));
            }
        };
        b.md = Some(md);
        b.pending = 0;
        Ok(())
    }

    /// A message from buffer `i` has been received (copied out) or dropped.
    pub(super) fn release(&self, core: &NiCore, st: &mut State, i: usize) -> Result<()> {
        self.release_in(core, st, &mut self.pool(), i)
    }

    /// [`Self::release`] with the pool already locked.
    pub(super) fn release_in(
        &self,
        core: &NiCore,
        st: &mut State,
        pool: &mut Pool,
        i: usize,
    ) -> Result<()> {
        let Some(b) = pool.bufs.get_mut(i) else {
            return Ok(());
        };
        b.pending = b.pending.saturating_sub(1);
        if b.pending == 0 && b.md.is_none() {
            st.stats.buffers_recycled += 1;
            self.attach_buffer(core, pool, i)?;
        }
        Ok(())
    }

    /// Act on an event taken from the unexpected queue with its slot kept:
    /// a message is saved (its envelope keeps the slot); anything else gives
    /// the slot back.
    pub(super) fn on_unexpected(&self, core: &NiCore, st: &mut State, ev: &Event) -> Result<()> {
        match self.unexpected_event(core, st, ev) {
            Ok(Some(u)) => {
                st.saved.push_back(u);
                Ok(())
            }
            Ok(None) => {
                st.saved.discard_event();
                Ok(())
            }
            Err(e) => {
                st.saved.discard_event();
                Err(e)
            }
        }
    }

    /// [`Self::on_unexpected`]'s work; the envelope to save, if any.
    fn unexpected_event(
        &self,
        core: &NiCore,
        st: &mut State,
        ev: &Event,
    ) -> Result<Option<Unexpected>> {
        let tag = ev.md.user_ptr;
        if tag == DEPARTED {
            // Acted on by `drain`, after the events queued before it.
            if ev.kind == EventKind::Put && ev.fail == FailType::Ok {
                st.departures_new.push(ev.initiator);
            }
            return Ok(None);
        }
        match ev.kind {
            EventKind::Put if ev.fail == FailType::Ok => {
                let buf = if tag == LONG_UNEXPECTED || tag == OVERFLOW {
                    None
                } else {
                    let i = tag as usize;
                    if let Some(b) = self.pool().bufs.get_mut(i) {
                        b.pending += 1;
                    }
                    Some(i)
                };
                if tag == OVERFLOW && ev.rlength > 0 {
                    // No room: only the envelope is kept. The data stays
                    // with its sender (read portal) until received, so
                    // memory here is bounded by the pool's cap and nothing
                    // is lost.
                    st.stats.unexpected_pulled += 1;
                }
                // An announced long message carries its length in its
                // header data (`announce.rs`); its put carried none.
                let rlength = match announced_len(ev.hdr_data) {
                    Some(n) if tag == LONG_UNEXPECTED => n,
                    _ => ev.rlength,
                };
                return Ok(Some(Unexpected {
                    bits: ev.match_bits,
                    initiator: ev.initiator,
                    hdr_data: ev.hdr_data,
                    rlength,
                    mlength: ev.mlength,
                    offset: ev.offset,
                    buf,
                }));
            }
            // A message whose sender died half-way: it never happened.
            EventKind::Put => {}
            EventKind::Unlink => {
                let i = tag as usize;
                let mut pool = self.pool();
                if let Some(b) = pool.bufs.get_mut(i) {
                    b.md = None;
                    if b.pending == 0 {
                        st.stats.buffers_recycled += 1;
                        self.attach_buffer(core, &mut pool, i)?;
                    }
                }
                // Keep at least two buffers able to take messages, growing
                // the pool if the application falls behind.
                if self.active_buffers(core, &pool) < 2 && pool.bufs.len() < self.cfg.unexpected_max
                {
                    tracing::debug!(
                        buffers = pool.bufs.len() + 1,
                        "growing the unexpected-message pool"
                    );
                    st.stats.buffers_grown += 1;
                    self.add_buffer(core, &mut pool)?;
                }
            }
            _ => {}
        }
        Ok(None)
    }
}
