//! Communicators and the processes in them.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{MpiError, Result};

/// A rank in a communicator (`int` in MPI, `i32` in rsmpi).
pub type Rank = i32;
/// A message tag.
pub type Tag = i32;

/// Wildcard tag for receives and probes (`MPI_ANY_TAG`).
pub const ANY_TAG: Tag = -1;

/// The data every communicator carries: its context id and the world ranks
/// of its members. Public only so that the traits can name it; it cannot be
/// constructed or inspected outside this crate.
pub struct CommData {
    pub(crate) dev: Arc<Device>,
    /// Context id of point-to-point traffic.
    pub(crate) ctx: u16,
    /// World rank of each member, by communicator rank.
    pub(crate) ranks: Vec<u32>,
    /// This process's rank in the communicator.
    pub(crate) me: u32,
}

impl std::fmt::Debug for CommData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommData")
            .field("ctx", &self.ctx)
            .field("size", &self.ranks.len())
            .field("me", &self.me)
            .finish()
    }
}

impl CommData {
    pub(crate) fn world_rank(&self, r: Rank) -> Result<u32> {
        usize::try_from(r)
            .ok()
            .and_then(|i| self.ranks.get(i).copied())
            .ok_or(MpiError::InvalidRank {
                rank: r,
                size: self.ranks.len() as Rank,
            })
    }
}

/// What every communicator offers (rsmpi's `Communicator`).
pub trait Communicator {
    #[doc(hidden)]
    fn data(&self) -> &CommData;

    /// Number of processes (`MPI_Comm_size`).
    fn size(&self) -> Rank {
        self.data().ranks.len() as Rank
    }

    /// This process's rank (`MPI_Comm_rank`).
    fn rank(&self) -> Rank {
        self.data().me as Rank
    }

    /// The process at rank `r`, to send to or receive from. Sending to or
    /// receiving from a rank outside the communicator fails with
    /// [`MpiError::InvalidRank`].
    fn process_at_rank(&self, r: Rank) -> Process<'_> {
        Process {
            comm: self.data(),
            rank: r,
        }
    }

    /// Any process, for receives and probes (`MPI_ANY_SOURCE`).
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess { comm: self.data() }
    }

    /// This process.
    fn this_process(&self) -> Process<'_> {
        self.process_at_rank(self.rank())
    }
}

/// A communicator (rsmpi's `SimpleCommunicator`). Cheap to clone.
#[derive(Clone)]
pub struct SimpleCommunicator {
    pub(crate) inner: Arc<CommData>,
}

impl std::fmt::Debug for SimpleCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimpleCommunicator")
            .field("rank", &self.inner.me)
            .field("size", &self.inner.ranks.len())
            .field("context", &self.inner.ctx)
            .finish()
    }
}

impl SimpleCommunicator {
    pub(crate) fn world(dev: Arc<Device>) -> Self {
        let size = dev.job().size();
        let me = dev.job().rank();
        SimpleCommunicator {
            inner: Arc::new(CommData {
                dev,
                ctx: 0,
                ranks: (0..size).collect(),
                me,
            }),
        }
    }
}

impl Communicator for SimpleCommunicator {
    fn data(&self) -> &CommData {
        &self.inner
    }
}

/// A process of a communicator (rsmpi's `Process`): the destination of
/// sends and the source of receives.
#[derive(Clone, Copy)]
pub struct Process<'a> {
    pub(crate) comm: &'a CommData,
    pub(crate) rank: Rank,
}

impl std::fmt::Debug for Process<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Process({})", self.rank)
    }
}

impl Process<'_> {
    /// Its rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
}

/// Any process of a communicator (rsmpi's `AnyProcess`).
#[derive(Clone, Copy)]
pub struct AnyProcess<'a> {
    pub(crate) comm: &'a CommData,
}

impl std::fmt::Debug for AnyProcess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnyProcess")
    }
}
