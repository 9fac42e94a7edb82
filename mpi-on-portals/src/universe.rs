//! Initialization and the `Universe` (`MPI_Init` … `MPI_Finalize`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::comm::SimpleCommunicator;
use crate::device::{Device, MpiConfig};
use crate::error::{MpiError, Result};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Thread support levels (`MPI_THREAD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Threading {
    /// One thread.
    Single,
    /// Several threads; only the main one calls MPI.
    Funneled,
    /// Several threads call MPI, one at a time.
    Serialized,
    /// Any thread calls MPI at any time. Always provided here: the device
    /// serialises its state (waits release it) and the Portals engine is
    /// thread-safe; tested with several threads per rank, each on its own
    /// duplicated communicator.
    Multiple,
}

/// The MPI environment. Dropping it finalizes: the sends nobody waits for
/// any more (buffered sends, dropped owned requests) are completed, then
/// every rank waits for the others (so nobody tears down while messages to
/// it are in flight) — driving the transport meanwhile in polling mode, so a
/// peer still fetching data from this rank is served — then the network
/// interface is shut down. If a rank died, the closing barrier is skipped.
pub struct Universe {
    dev: Arc<Device>,
}

impl std::fmt::Debug for Universe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Universe")
            .field("rank", &self.dev.job().rank())
            .field("size", &self.dev.job().size())
            .finish()
    }
}

/// Initialize MPI (`MPI_Init`): join the job this process was started in
/// (by `ptlrun`, or by a PMI launcher such as `mpiexec.hydra`; a process
/// started alone is a job of one; see [`portals_runtime::join`]), set up the
/// Portals structures of the MPI protocols, and wait for every rank.
///
/// Fails if MPI is already initialized in this process.
pub fn initialize() -> Result<Universe> {
    initialize_with_threading(Threading::Single).map(|(u, _)| u)
}

/// Initialize with a requested thread level; returns the provided level
/// (always [`Threading::Multiple`]).
pub fn initialize_with_threading(_requested: Threading) -> Result<(Universe, Threading)> {
    initialize_with_config(MpiConfig::from_env()?).map(|u| (u, Threading::Multiple))
}

/// Initialize with explicit tunables instead of the `PTL_MPI_*` environment.
pub fn initialize_with_config(cfg: MpiConfig) -> Result<Universe> {
    // Before joining the job: a rank that fails here leaves nobody waiting.
    let cfg = cfg.checked()?;
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return Err(MpiError::Init(
            "MPI is already initialized in this process".into(),
        ));
    }
    let made = portals_runtime::join()
        .map_err(|e| MpiError::Init(e.to_string()))
        .and_then(|job| {
            if job.size() > crate::bits::MAX_RANK + 1 {
                return Err(MpiError::Init(format!(
                    "{} ranks do not fit the 16-bit source field",
                    job.size()
                )));
            }
            Device::new(job, cfg)
        });
    match made {
        Ok(dev) => Ok(Universe { dev: Arc::new(dev) }),
        Err(e) => {
            INITIALIZED.store(false, Ordering::SeqCst);
            Err(e)
        }
    }
}

impl Universe {
    /// The communicator of all processes (`MPI_COMM_WORLD`).
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world(self.dev.clone())
    }

    /// Number of processes in the job.
    pub fn size(&self) -> i32 {
        self.dev.job().size() as i32
    }

    /// The tunables in force.
    pub fn config(&self) -> &MpiConfig {
        &self.dev.cfg
    }

    /// Attach `bytes` of space for [`crate::Destination::buffered_send`]
    /// (`MPI_Buffer_attach`).
    pub fn buffer_attach(&self, bytes: usize) {
        self.dev.buffer_attach(bytes);
    }

    /// Wait until every buffered send has left, and detach the space
    /// (`MPI_Buffer_detach`); returns its size.
    pub fn buffer_detach(&self) -> Result<usize> {
        self.dev.buffer_detach()
    }

    /// The Portals network interface underneath (for tools and tests).
    pub fn network_interface(&self) -> &portals::NetworkInterface {
        self.dev.job().ni()
    }

    /// Counters of the MPI protocols in this process.
    pub fn stats(&self) -> crate::device::MpiStats {
        self.dev.stats()
    }

    /// The job (rank, size, transport) underneath.
    pub fn job(&self) -> &portals_runtime::Job {
        self.dev.job()
    }

    /// Run `f` while holding the library's internal state lock, as a thread
    /// preempted inside an MPI call would: the progress thread keeps
    /// depositing meanwhile. For tests of that race only.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn with_state_locked<R>(&self, f: impl FnOnce() -> R) -> R {
        self.dev.with_state_locked(f)
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        // Finalize. First the sends nobody waits for (buffered, owned,
        // acknowledgments): a peer may be waiting to fetch their data.
        self.dev.complete_detached();
        // Then nobody leaves before everybody is done with it — unless a
        // rank died: it will never join, and its survivors must not hang.
        if self.dev.peers_failed() {
            tracing::warn!("finalize without the closing barrier: some rank failed");
        } else if let Err(e) = self.dev.final_barrier() {
            tracing::warn!(error = %e, "finalize barrier failed");
        }
        // Then let a PMI launcher know this process is done with it.
        if let Err(e) = self.dev.job().finalize() {
            tracing::warn!(error = %e, "PMI finalize failed");
        }
        INITIALIZED.store(false, Ordering::SeqCst);
    }
}
