//! # portals-runtime
//!
//! How processes become a job: `ptlrun` starts them with an environment
//! ([`mod@env`]) naming their rank, the job key and a rendezvous server
//! ([`kvs`]); each process calls [`join`] to bind its transport, publish its
//! address, wait for every rank, and bring up its
//! [`portals::NetworkInterface`] with every peer's address.
//!
//! ```no_run
//! let job = portals_runtime::join()?;
//! println!("rank {} of {}", job.rank(), job.size());
//! let ni = job.ni(); // a portals::NetworkInterface connected to the job
//! # Ok::<(), portals_runtime::RuntimeError>(())
//! ```
//!
//! Processes started by a PMI launcher instead — MPICH's `mpiexec.hydra`,
//! Slurm's `srun --mpi=pmi2` — join through its [`pmi`] server: the same
//! [`join`] call finds the `PMI_*` variables and exchanges addresses through
//! the launcher's key-value space (see [`join_pmi`]). Processes started by a
//! PMIx launcher — Open MPI's `mpirun`, Slurm's `srun --mpi=pmix`, PRRTE,
//! Flux — join through its [`pmix`] server the same way (see
//! [`join_pmix`]). A process that one of these launchers started as one of
//! several tasks but cannot join (`srun` without a PMI plug-in) stops with
//! [`RuntimeError::ForeignLaunch`] instead of running alone
//! ([`launcher`]); only a process started by no launcher at all forms a
//! job of one.

#![warn(missing_docs)]

pub mod cli;
pub mod env;
mod error;
pub mod host;
mod job;
pub mod kvs;
pub mod launch;
pub mod launcher;
pub mod mux;
pub mod pmi;
pub mod pmix;
mod transport;

pub use env::{JobEnv, JobOptions, NalKind};
pub use error::RuntimeError;
pub use job::{
    join, join_pmi, join_pmix, join_with, join_with_pmi, join_with_pmix, pmi_job_key, process_id,
    rank_of, singleton, Job,
};
pub use transport::Transport;

/// Install a `tracing` subscriber that prints to stderr, filtered by the
/// `PTL_LOG` environment variable (e.g. `PTL_LOG=nal_tcp=debug`). Does
/// nothing if one is installed already.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PTL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
