//! Initialization and the `Universe` (`MPI_Init` … `MPI_Finalize`).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::comm::SimpleCommunicator;
use crate::device::{Device, MpiConfig};
use crate::error::{MpiError, Result};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The device of the live `Universe`, for [`abort_job`]: an error found
/// where no communicator is at hand (a request's wait) must still end the
/// whole job through the launcher. Weak, so it never keeps MPI alive.
static LIVE: Mutex<Weak<Device>> = Mutex::new(Weak::new());

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
/// interface is shut down. If a rank died, the closing barrier is skipped
/// (and the launcher is told that this rank saw a peer fail, so that it
/// blames that peer if this rank fails too).
///
/// An error is fatal for the whole job, as MPI's default error handler
/// makes it, wherever waiting could otherwise hang the others:
///
/// * dropped while its thread panics (a panic unwinding through `main`),
///   it aborts the job with status 101 — Rust's status for a panic —
///   instead of finalizing;
/// * a rank that finalizes tells the others (a departure notice, once its
///   own requests are done): what they still wait for from it — a receive
///   or probe naming it, one from any source when every other member has
///   left, a send waiting for its receive — fails with
///   [`MpiError::PeerFinalized`](crate::MpiError::PeerFinalized) instead
///   of waiting forever. So a rank that returned an error from `main`
///   while the others wait for its messages ends the job instead of
///   hanging it in the closing barrier;
/// * with `PTL_FINALIZE_TIMEOUT` set (seconds), finalize as a whole waits
///   at most that long, then aborts the job with status 1, naming the ranks
///   that never reached the closing barrier (under `ptlrun`; PMI and PMIx
///   do not say). A closing barrier that fails aborts the job the same way.
///   Unset, the barrier waits for every rank however late, as every MPI
///   does: a rank may legitimately reach finalize long after the others
///   (rank 0 writing the results), and a limit would kill such a job at
///   its very end.
///
/// [`Communicator::abort`](crate::Communicator::abort) aborts it at any
/// time.
pub struct Universe {
    dev: Arc<Device>,
    finalize_timeout: Option<Duration>,
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
/// If the `PTL_LOG` environment variable is set, the library's `tracing`
/// output is printed to stderr under that filter (as for `ptlrun`; e.g.
/// `PTL_LOG=nal_udp=debug`).
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
    // `PTL_LOG` names what to log, as for the launcher and the tools. Only
    // when it is set: a program that installs its own `tracing` subscriber
    // keeps it.
    if std::env::var_os("PTL_LOG").is_some() {
        portals_runtime::init_logging();
    }
    let finalize_timeout = finalize_timeout_from_env()?;
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
        Ok(dev) => {
            let dev = Arc::new(dev);
            *LIVE.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&dev);
            Ok(Universe {
                dev,
                finalize_timeout,
            })
        }
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

/// End the whole job with exit status `errorcode`, printing `why` (what
/// MPI's default error handler, `MPI_ERRORS_ARE_FATAL`, does): through the
/// launcher as [`Communicator::abort`](crate::Communicator::abort) when MPI
/// is initialized, otherwise by printing `why` and exiting this process.
/// For layers that turn this crate's errors into aborts (the rsmpi face).
pub fn abort_job(errorcode: i32, why: &str) -> ! {
    let dev = LIVE.lock().unwrap_or_else(|p| p.into_inner()).upgrade();
    match dev {
        Some(dev) => dev.job().abort(errorcode, why),
        None => {
            eprintln!("mpi: aborting with status {errorcode}: {why}");
            std::process::exit(if errorcode & 0xff == 0 { 1 } else { errorcode })
        }
    }
}

/// The status a job is aborted with when a rank panics with MPI
/// initialized: what Rust exits with after a panic.
pub const PANIC_EXIT_STATUS: i32 = 101;

/// How long the closing barrier waits when `PTL_FINALIZE_TIMEOUT` is not
/// set: for good, in effect, as every MPI does — a rank may legitimately
/// reach finalize long after the others (rank 0 writing the results), and
/// ranks that wait for a finalized one fail instead (departure notices).
const UNBOUNDED_BARRIER: Duration = Duration::from_secs(30 * 24 * 3600);

/// `PTL_FINALIZE_TIMEOUT`: whole seconds, at least 1; unset, no limit.
fn finalize_timeout_from_env() -> Result<Option<Duration>> {
    let var = portals_runtime::env::FINALIZE_TIMEOUT;
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(Duration::from_secs(n))),
            _ => Err(MpiError::Init(format!(
                "{var}={v:?}: expected a positive number of seconds"
            ))),
        },
        Err(e) => Err(MpiError::Init(format!("{var}: {e}"))),
    }
}

/// How much longer than the watchdog the closing barrier may wait.
const BARRIER_SLACK: Duration = Duration::from_secs(5);

/// Where finalize is, for the message of a finalize that does not end.
const SENDING: u8 = 0;
const IN_BARRIER: u8 = 1;

/// Aborts the job if finalize has not ended by its deadline.
struct Watchdog {
    done: Arc<(Mutex<bool>, Condvar)>,
    stage: Arc<AtomicU8>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(dev: Arc<Device>, timeout: Duration) -> Watchdog {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let stage = Arc::new(AtomicU8::new(SENDING));
        let (d, st) = (done.clone(), stage.clone());
        let thread = std::thread::Builder::new()
            .name("mpi-finalize-watchdog".into())
            .spawn(move || {
                let deadline = Instant::now() + timeout;
                let (m, c) = &*d;
                let mut finished = m.lock().unwrap_or_else(|p| p.into_inner());
                while !*finished {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        drop(finished);
                        let why = overdue(&dev, timeout, st.load(Ordering::SeqCst));
                        dev.job().abort(1, &why);
                    }
                    finished = c
                        .wait_timeout(finished, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "finalize runs without its time limit"))
            .ok();
        Watchdog {
            done,
            stage,
            thread,
        }
    }

    fn stop(mut self) {
        let (m, c) = &*self.done;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
        c.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why finalize did not end in time, naming the ranks that never reached
/// the closing barrier where the coordinator can say.
fn overdue(dev: &Device, timeout: Duration, stage: u8) -> String {
    let var = portals_runtime::env::FINALIZE_TIMEOUT;
    let job = dev.job();
    if stage == SENDING {
        return format!(
            "finalize did not end within {timeout:?} ({var}): sends that no receive \
             matched never completed"
        );
    }
    match job.absent_from_barrier() {
        Some(absent) => {
            let absent: Vec<String> = absent
                .into_iter()
                .filter(|&r| r != job.rank())
                .map(|r| r.to_string())
                .collect();
            if absent.is_empty() {
                format!(
                    "finalize did not end within {timeout:?} ({var}): the closing barrier \
                     did not complete"
                )
            } else {
                format!(
                    "finalize did not end within {timeout:?} ({var}): ranks {} never reached it",
                    absent.join(",")
                )
            }
        }
        None => format!(
            "finalize did not end within {timeout:?} ({var}): not every rank reached it \
             (the launcher does not say which)"
        ),
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        let job = self.dev.job();
        // A panic unwinding through MPI: the other ranks may be waiting
        // for this one anywhere, and a finalize would wait for them.
        if std::thread::panicking() {
            job.abort(PANIC_EXIT_STATUS, "the rank panicked with MPI initialized");
        }
        let watchdog = self
            .finalize_timeout
            .map(|t| Watchdog::start(self.dev.clone(), t));
        // The closing barrier must not give up before the watchdog, which
        // names the missing ranks (past the bootstrap timeout, say, when
        // PTL_FINALIZE_TIMEOUT is the longer), nor at all without one.
        let barrier_limit = self
            .finalize_timeout
            .map_or(UNBOUNDED_BARRIER, |t| t + BARRIER_SLACK);
        if let Err(e) = job.set_coordinator_timeout(barrier_limit) {
            tracing::warn!(error = %e, "the closing barrier keeps its default time limit");
        }
        // Finalize. First the sends nobody waits for (buffered, owned,
        // acknowledgments): a peer may be waiting to fetch their data.
        self.dev.complete_detached();
        // Then tell the others this rank is leaving: whatever they still
        // wait for from it fails instead of hanging them (and this rank in
        // the barrier with them).
        self.dev.depart();
        if let Some(w) = &watchdog {
            w.stage.store(IN_BARRIER, Ordering::SeqCst);
        }
        // Then nobody leaves before everybody is done with it — unless a
        // rank died: it will never join, and its survivors must not hang.
        if self.dev.peers_failed() {
            tracing::warn!("finalize without the closing barrier: some rank failed");
            job.report_peer_failure();
        } else if let Err(e) = self.dev.final_barrier() {
            if self.dev.peers_failed() {
                job.report_peer_failure();
            }
            if let Some(w) = watchdog {
                w.stop();
            }
            job.abort(1, &e.to_string());
        }
        // Then let a PMI launcher know this process is done with it.
        if let Err(e) = job.finalize() {
            tracing::warn!(error = %e, "PMI finalize failed");
        }
        if let Some(w) = watchdog {
            w.stop();
        }
        INITIALIZED.store(false, Ordering::SeqCst);
    }
}
