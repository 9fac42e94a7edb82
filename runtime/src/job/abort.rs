//! Ending a whole job from one rank, telling the launcher what a rank's
//! failure means, and bounding how long a rank waits for the others.
//!
//! [`Job::abort`] is `MPI_Abort`: the launcher is asked to end every rank
//! with the given status — `ptlrun` does so when it sees this rank exit
//! with it; a PMI launcher (hydra, `srun --mpi=pmi2`) gets a PMI abort, a
//! PMIx launcher (`mpirun`, `srun --mpi=pmix`) a `PMIx_Abort`. The process
//! then exits with the status, whatever the launcher did.

use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Coordinator, Job, ABORT_OUTPUT_GRACE};
use crate::error::RuntimeError;
use crate::kvs::KvsClient;

/// How long an abort waits for the launcher connection that another
/// thread may hold (a barrier under way) before it exits without telling
/// the launcher: a rank that exits with a failure status still ends the
/// job under every launcher, only with a vaguer message.
const CONNECTION_WAIT: Duration = Duration::from_secs(2);

/// How long asking the rendezvous server something on a new connection
/// may take.
const SIDE_REQUEST: Duration = Duration::from_secs(2);

/// Take `m` if nobody releases it within [`CONNECTION_WAIT`]; `None` if it
/// stays held.
fn lock_soon<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    let deadline = Instant::now() + CONNECTION_WAIT;
    loop {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

impl Job {
    /// End the whole job with exit status `code` (`MPI_Abort`): print
    /// `why` on stderr, ask the launcher to end every rank, and exit with
    /// `code` (the launcher reports it as the job's status: `ptlrun` and
    /// PMI-1 hydra as it is; hydra over PMI-2 as 255). Never returns.
    ///
    /// Under `ptlrun` the exit itself is the request: `ptlrun` blames the
    /// first rank that fails on its own, terminates the others and exits
    /// with its status; a `code` whose low 8 bits are 0 (which the system
    /// would report as success) becomes 1 there. Under a PMI or PMIx launcher the abort goes through
    /// its connection; if another thread holds that connection for more
    /// than 2 s (a barrier under way), the process exits without it, which
    /// ends the job too.
    pub fn abort(&self, code: i32, why: &str) -> ! {
        let (rank, size) = (self.rank, self.size);
        // Under ptlrun the exit status is the only request, and an exit
        // status of 0 (as the OS truncates it) is no failure: the others
        // would run on.
        let code = match self.coordinator {
            Coordinator::Rendezvous { .. } if code & 0xff == 0 => 1,
            _ => code,
        };
        let _ = std::io::stdout().flush();
        eprintln!(
            "portals-runtime: rank {rank} of {size} aborts the job with status {code}: {why}"
        );
        let msg = format!("rank {rank} aborted the job with status {code}: {why}");
        if matches!(self.coordinator, Coordinator::Pmi(_) | Coordinator::Pmix(_)) {
            // The launcher tears the job down on the abort and drops the
            // output it has not forwarded yet: let it forward why.
            std::thread::sleep(ABORT_OUTPUT_GRACE);
        }
        match &self.coordinator {
            Coordinator::Alone | Coordinator::Rendezvous { .. } => {}
            Coordinator::Pmi(p) => {
                if let Some(mut g) = lock_soon(p) {
                    if let Some(c) = g.as_mut() {
                        if let Err(e) = c.abort(code, &msg) {
                            eprintln!("portals-runtime: PMI abort failed: {e}");
                        }
                    }
                }
            }
            Coordinator::Pmix(p) => {
                if let Some(mut g) = lock_soon(p) {
                    if let Some(c) = g.as_mut() {
                        if let Err(e) = c.abort(code, &msg) {
                            eprintln!("portals-runtime: PMIx abort failed: {e}");
                        }
                    }
                }
            }
        }
        let _ = std::io::stderr().flush();
        std::process::exit(code)
    }

    /// Tell the launcher that this rank saw a peer fail, so that if this
    /// rank fails too, the launcher reports the peer's failure as the
    /// cause rather than this one (`ptlrun`; other launchers are not
    /// told). Best effort: a launcher that cannot be told is not an error.
    pub fn report_peer_failure(&self) {
        if let Coordinator::Rendezvous { client, .. } = &self.coordinator {
            if let Some(mut c) = lock_soon(client) {
                if let Err(e) = c.saw_peer_fail() {
                    tracing::debug!(error = %e, "cannot tell the rendezvous a peer failed");
                }
            }
        }
    }

    /// Make every later [`barrier`](Job::barrier) — and every later request
    /// to the launcher — wait at most `timeout` instead of the bootstrap
    /// timeout (`PTL_BOOTSTRAP_TIMEOUT`, which bounds a fence of `ptlrun`'s
    /// rendezvous, a PMI reply and a PMIx call by default). MPI's finalize
    /// sets it to its own limit.
    pub fn set_coordinator_timeout(&self, timeout: Duration) -> Result<(), RuntimeError> {
        match &self.coordinator {
            Coordinator::Alone => Ok(()),
            Coordinator::Rendezvous { client, .. } => client
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .set_fence_timeout(timeout),
            Coordinator::Pmi(p) => {
                if let Some(c) = p.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    c.set_timeout(timeout);
                }
                Ok(())
            }
            Coordinator::Pmix(p) => {
                if let Some(c) = p.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    c.set_timeout(timeout);
                }
                Ok(())
            }
        }
    }

    /// The ranks that are not (yet) waiting in the barrier under way, if
    /// the coordinator can say: `ptlrun`'s rendezvous can, PMI and PMIx
    /// cannot (`None`), and in a job of one nobody is missing.
    pub fn absent_from_barrier(&self) -> Option<Vec<u32>> {
        match &self.coordinator {
            Coordinator::Alone => Some(Vec::new()),
            Coordinator::Rendezvous { server, key, .. } => KvsClient::connect(server, SIDE_REQUEST)
                .and_then(|mut c| c.absent_from_fence(*key))
                .ok(),
            Coordinator::Pmi(_) | Coordinator::Pmix(_) => None,
        }
    }
}
