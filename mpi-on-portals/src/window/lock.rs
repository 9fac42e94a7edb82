//! Passive-target synchronisation (`MPI_Win_lock`, `MPI_Win_unlock`,
//! `MPI_Win_lock_all`, `MPI_Win_unlock_all`) with a lock word per window
//! and rank, taken with the engine's atomics so the target's CPU is never
//! needed.
//!
//! The word (8 bytes, on the window's lock entry, not in user memory) is
//! `WRITER` (bit 63) for an exclusive holder plus a count of shared
//! holders below it. Exclusive: compare-and-swap 0 → `WRITER`. Shared:
//! fetch-add 1; if `WRITER` was set, take it back (add −1) and retry.
//! Between tries the origin sleeps, doubling from 20 µs to 2 ms (the
//! machine is oversubscribed: spinning would steal the holder's core).
//! Release: exclusive adds `WRITER` (wrapping, so bit 63 clears and the
//! transient counts of waiting readers are kept), shared adds −1; both
//! after a flush of everything sent to the target under the lock, and
//! waited for, so the next holder sees the data.
//!
//! An unlock without a lock cannot be written: only a guard unlocks.

use std::time::Duration;

use portals::{AtomicOp, AtomicSpec, Datatype, MdOptions, Remote};

use super::ops::OneOp;
use super::{WinCore, Window, WIN_PT};
use crate::comm::Rank;
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

/// The exclusive holder's bit of a lock word.
const WRITER: u64 = 1 << 63;
const BACKOFF_MIN: Duration = Duration::from_micros(20);
const BACKOFF_MAX: Duration = Duration::from_millis(2);

/// The kind of a passive-target lock (`MPI_LOCK_EXCLUSIVE`,
/// `MPI_LOCK_SHARED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockType {
    /// One holder at a time.
    Exclusive,
    /// Any number of shared holders, no exclusive one.
    Shared,
}

impl WinCore {
    /// A fetching atomic on rank `t`'s lock word: `op` with `value`
    /// (compare-and-swap against `compare` if given); the old word.
    fn lock_word(&self, t: u32, value: u64, compare: Option<u64>) -> Result<u64> {
        let ni = self.ni();
        let mut op = OneOp::new(ni)?;
        let mut buf = vec![0u8; 16];
        buf[8..].copy_from_slice(&value.to_le_bytes());
        let md = op.bind(MdOptions::CT_REPLY, buf)?;
        let remote = Remote::new(self.ids[t as usize], WIN_PT, self.lock_bits);
        let r = match compare {
            Some(c) => ni.swap(
                md,
                0,
                md,
                8,
                8,
                &remote,
                0,
                Some(&c.to_le_bytes()),
                AtomicSpec {
                    op: AtomicOp::Cswap,
                    datatype: Datatype::U64,
                },
            ),
            None => ni.fetch_atomic(
                md,
                0,
                md,
                8,
                8,
                &remote,
                0,
                AtomicSpec {
                    op: AtomicOp::Sum,
                    datatype: Datatype::U64,
                },
            ),
        };
        r.map_err(MpiError::Portals)?;
        op.wait(1, t)?;
        let mut old = [0u8; 8];
        ni.md_read(md, 0, &mut old).map_err(MpiError::Portals)?;
        Ok(u64::from_le_bytes(old))
    }

    /// Take rank `t`'s lock, sleeping between tries.
    fn acquire(&self, t: u32, kind: LockType) -> Result<()> {
        let mut pause = BACKOFF_MIN;
        loop {
            let got = match kind {
                LockType::Exclusive => self.lock_word(t, WRITER, Some(0))? == 0,
                LockType::Shared => {
                    let old = self.lock_word(t, 1, None)?;
                    if old & WRITER != 0 {
                        self.lock_word(t, u64::MAX, None)?;
                        false
                    } else {
                        true
                    }
                }
            };
            if got {
                return Ok(());
            }
            // A try on this process's own window completes without
            // touching the transport: drive it here, or in polling mode
            // the holder's operations on this process would never be
            // served while it waits for that holder.
            let _ = self.ni().poll();
            std::thread::sleep(pause);
            pause = (pause * 2).min(BACKOFF_MAX);
        }
    }

    /// Complete everything sent to `t`, then give its lock back.
    fn release(&self, t: u32, kind: LockType) -> Result<()> {
        let flushed = self.flush(t);
        let add = match kind {
            LockType::Exclusive => WRITER,
            LockType::Shared => u64::MAX,
        };
        let released = self.lock_word(t, add, None).map(|_| ());
        flushed.and(released)
    }
}

/// A passive-target lock on one rank (`MPI_Win_lock`); [`LockGuard::unlock`]
/// or dropping it unlocks (`MPI_Win_unlock`: completes every operation to
/// the target there, then releases).
#[must_use = "dropping the guard unlocks at once"]
pub struct LockGuard<'w, 'm, T: Equivalence> {
    win: &'w Window<'m, T>,
    target: u32,
    kind: LockType,
    done: bool,
}

impl<T: Equivalence> std::fmt::Debug for LockGuard<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("target", &self.target)
            .field("kind", &self.kind)
            .finish()
    }
}

impl<T: Equivalence> LockGuard<'_, '_, T> {
    /// Unlock, reporting errors.
    pub fn unlock(mut self) -> Result<()> {
        self.done = true;
        self.win.unlock_one(self.target, self.kind)
    }
}

impl<T: Equivalence> Drop for LockGuard<'_, '_, T> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.win.unlock_one(self.target, self.kind) {
                tracing::error!(error = %e, target = self.target, "unlock on drop failed");
            }
        }
    }
}

/// Shared locks on every rank (`MPI_Win_lock_all`); unlocks like
/// [`LockGuard`].
#[must_use = "dropping the guard unlocks at once"]
pub struct LockAllGuard<'w, 'm, T: Equivalence> {
    win: &'w Window<'m, T>,
    done: bool,
}

impl<T: Equivalence> std::fmt::Debug for LockAllGuard<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockAllGuard")
    }
}

impl<T: Equivalence> LockAllGuard<'_, '_, T> {
    /// Unlock every rank (`MPI_Win_unlock_all`), reporting errors.
    pub fn unlock(mut self) -> Result<()> {
        self.done = true;
        self.win.unlock_all()
    }
}

impl<T: Equivalence> Drop for LockAllGuard<'_, '_, T> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.win.unlock_all() {
                tracing::error!(error = %e, "unlock_all on drop failed");
            }
        }
    }
}

impl<'m, T: Equivalence> Window<'m, T> {
    /// Lock rank `target`'s window (`MPI_Win_lock`): returns once the lock
    /// is held. `RmaEpoch` if this process already locks that rank or
    /// holds `lock_all`.
    pub fn lock(&self, target: Rank, kind: LockType) -> Result<LockGuard<'_, 'm, T>> {
        let t = self.core.rank(target)?;
        {
            let st = self.core.lock();
            if st.epochs.lock_all {
                return Err(MpiError::RmaEpoch(
                    "lock while this process holds lock_all".into(),
                ));
            }
            if st.epochs.locks.iter().any(|&(r, _)| r == t) {
                return Err(MpiError::RmaEpoch(format!(
                    "rank {target} is already locked by this process"
                )));
            }
        }
        self.core.acquire(t, kind)?;
        let mut st = self.core.lock();
        if st.epochs.locks.iter().any(|&(r, _)| r == t) || st.epochs.lock_all {
            // Another thread of this process got there meanwhile.
            drop(st);
            self.core.release(t, kind)?;
            return Err(MpiError::RmaEpoch(format!(
                "rank {target} was locked by another thread of this process"
            )));
        }
        st.epochs.locks.push((t, kind));
        Ok(LockGuard {
            win: self,
            target: t,
            kind,
            done: false,
        })
    }

    fn unlock_one(&self, t: u32, kind: LockType) -> Result<()> {
        let r = self.core.release(t, kind);
        let mut st = self.core.lock();
        st.epochs.locks.retain(|&(x, _)| x != t);
        r
    }

    /// Shared locks on every rank (`MPI_Win_lock_all`), taken in rank
    /// order. `RmaEpoch` while this process holds any lock.
    pub fn lock_all(&self) -> Result<LockAllGuard<'_, 'm, T>> {
        {
            let st = self.core.lock();
            if st.epochs.lock_all || !st.epochs.locks.is_empty() {
                return Err(MpiError::RmaEpoch(
                    "lock_all while this process holds a lock".into(),
                ));
            }
        }
        for t in 0..self.core.size() {
            if let Err(e) = self.core.acquire(t, LockType::Shared) {
                for u in 0..t {
                    let _ = self.core.release(u, LockType::Shared);
                }
                return Err(e);
            }
        }
        self.core.lock().epochs.lock_all = true;
        Ok(LockAllGuard {
            win: self,
            done: false,
        })
    }

    fn unlock_all(&self) -> Result<()> {
        let mut first = Ok(());
        for t in 0..self.core.size() {
            let r = self.core.release(t, LockType::Shared);
            if first.is_ok() {
                first = r;
            }
        }
        self.core.lock().epochs.lock_all = false;
        first
    }
}

impl<T: Equivalence> Window<'_, T> {
    /// [`Window::lock`] without a guard, for callers that cannot hold one
    /// (a C library: `MPI_Win_lock` and `MPI_Win_unlock` are separate
    /// calls); release it with [`Window::unlock_held`].
    pub fn lock_held(&self, target: Rank, kind: LockType) -> Result<()> {
        let mut g = self.lock(target, kind)?;
        g.done = true;
        Ok(())
    }

    /// Release a lock taken with [`Window::lock_held`] (`MPI_Win_unlock`);
    /// `RmaEpoch` if this process does not hold one on `target`.
    pub fn unlock_held(&self, target: Rank) -> Result<()> {
        let t = self.core.rank(target)?;
        let kind = self
            .core
            .lock()
            .epochs
            .locks
            .iter()
            .find(|&&(r, _)| r == t)
            .map(|&(_, k)| k);
        match kind {
            Some(k) => self.unlock_one(t, k),
            None => Err(MpiError::RmaEpoch(format!(
                "unlock of rank {target}, which this process does not lock"
            ))),
        }
    }

    /// [`Window::lock_all`] without a guard; release with
    /// [`Window::unlock_all_held`].
    pub fn lock_all_held(&self) -> Result<()> {
        let mut g = self.lock_all()?;
        g.done = true;
        Ok(())
    }

    /// Release [`Window::lock_all_held`] (`MPI_Win_unlock_all`); `RmaEpoch`
    /// without it.
    pub fn unlock_all_held(&self) -> Result<()> {
        if !self.core.lock().epochs.lock_all {
            return Err(MpiError::RmaEpoch("unlock_all without lock_all".into()));
        }
        self.unlock_all()
    }
}
