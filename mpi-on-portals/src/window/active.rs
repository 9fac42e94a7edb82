//! Active-target synchronisation: `MPI_Win_fence` and general active
//! target (`MPI_Win_post`, `MPI_Win_start`, `MPI_Win_complete`,
//! `MPI_Win_wait`).
//!
//! A fence completes this process's operations at their targets (a flush
//! of every rank), then joins a barrier on the window's communicator: once
//! everyone is past it, every operation into this process's window is
//! done. From the first fence on, every rank is an access target until the
//! window is freed (the epoch between two fences).
//!
//! PSCW uses zero-byte point-to-point messages on the window's own
//! communicator (its context is the window's, so they never meet the
//! application's): `post` sends a *post* notice to each origin of its
//! group, `start` receives one from each target of its group, `complete`
//! flushes each target and then sends it a *complete* notice, and `wait`
//! receives one from each origin of the posted group. A notice is sent
//! only after the flush, so a target past `wait` has every origin's data.

use crate::comm::Communicator;
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};
use crate::group::Group;
use crate::p2p::{Destination, Source};

use super::Window;

const TAG_POST: i32 = 1;
const TAG_COMPLETE: i32 = 2;

impl<T: Equivalence> Window<'_, T> {
    /// `MPI_Win_fence`. Collective over the window's ranks.
    pub fn fence(&self) -> Result<()> {
        let flushed = self.flush_all();
        // Everyone joins the barrier, also after a failed flush, so that
        // no rank is left waiting.
        let synced = crate::collective::CommunicatorCollectives::barrier(&self.core.comm);
        flushed?;
        synced?;
        self.core.lock().epochs.fence = true;
        Ok(())
    }

    /// The window ranks of the members of `group`; `InvalidRank` for a
    /// process outside the window.
    fn window_ranks(&self, group: &Group) -> Result<Vec<u32>> {
        let ranks = &self.core.comm.inner.ranks;
        group
            .world
            .iter()
            .map(|w| {
                ranks
                    .iter()
                    .position(|r| r == w)
                    .map(|i| i as u32)
                    .ok_or(MpiError::InvalidRank {
                        rank: *w as i32,
                        size: ranks.len() as i32,
                    })
            })
            .collect()
    }

    /// Expose this window to the origins in `group` (`MPI_Win_post`).
    pub fn post(&self, group: &Group) -> Result<()> {
        let origins = self.window_ranks(group)?;
        {
            let mut st = self.core.lock();
            if st.epochs.post.is_some() {
                return Err(MpiError::RmaEpoch(
                    "post while an exposure epoch is open (wait first)".into(),
                ));
            }
            st.epochs.post = Some(origins.clone());
        }
        for &o in &origins {
            self.core
                .comm
                .process_at_rank(o as i32)
                .send_with_tag(&[0u8; 0][..], TAG_POST)?;
        }
        Ok(())
    }

    /// Start an access epoch to the targets in `group` (`MPI_Win_start`):
    /// returns once each of them posted.
    pub fn start(&self, group: &Group) -> Result<()> {
        let targets = self.window_ranks(group)?;
        {
            let st = self.core.lock();
            if st.epochs.start.is_some() {
                return Err(MpiError::RmaEpoch(
                    "start while an access epoch of start is open (complete first)".into(),
                ));
            }
        }
        for &t in &targets {
            let mut none = [0u8; 0];
            self.core
                .comm
                .process_at_rank(t as i32)
                .receive_into_with_tag(&mut none[..], TAG_POST)?;
        }
        self.core.lock().epochs.start = Some(targets);
        Ok(())
    }

    /// End the access epoch of [`Window::start`] (`MPI_Win_complete`):
    /// every operation to its targets completes there, then each is told.
    pub fn complete(&self) -> Result<()> {
        let Some(targets) = self.core.lock().epochs.start.take() else {
            return Err(MpiError::RmaEpoch("complete without start".into()));
        };
        let mut first = Ok(());
        for &t in &targets {
            let r = self.core.flush(t);
            if first.is_ok() {
                first = r;
            }
        }
        for &t in &targets {
            let r = self
                .core
                .comm
                .process_at_rank(t as i32)
                .send_with_tag(&[0u8; 0][..], TAG_COMPLETE);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// End the exposure epoch of [`Window::post`] (`MPI_Win_wait`):
    /// returns once every origin of its group completed.
    pub fn wait(&self) -> Result<()> {
        let Some(origins) = self.core.lock().epochs.post.take() else {
            return Err(MpiError::RmaEpoch("wait without post".into()));
        };
        for &o in &origins {
            let mut none = [0u8; 0];
            self.core
                .comm
                .process_at_rank(o as i32)
                .receive_into_with_tag(&mut none[..], TAG_COMPLETE)?;
        }
        Ok(())
    }
}
