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

/// Install a `tracing` subscriber filtered by the `PTL_LOG` environment
/// variable (e.g. `PTL_LOG=nal_tcp=debug`). It prints to stderr, or
/// appends to the file `PTL_LOG_FILE` names, with `%p` replaced by the
/// process id: the ranks of a job whose stderr a tool keeps (`ptl-bench`
/// does) can still be read, for example the transports' counters at close
/// (`PTL_LOG=nal_udp=debug PTL_LOG_FILE=/tmp/rank.%p.log`). A file that
/// cannot be opened is reported on stderr, which is used instead. Does
/// nothing if a subscriber is installed already.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PTL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter);
    if let Some(path) = std::env::var_os(LOG_FILE) {
        let path = log_file_path(&path.to_string_lossy(), std::process::id());
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(file) => {
                let _ = fmt
                    .with_ansi(false)
                    .with_writer(std::sync::Mutex::new(file))
                    .try_init();
                return;
            }
            Err(e) => eprintln!("{LOG_FILE}: cannot open {path}: {e}; logging to stderr"),
        }
    }
    let _ = fmt.with_writer(std::io::stderr).try_init();
}

/// The variable naming the log file (see [`init_logging`]).
pub const LOG_FILE: &str = "PTL_LOG_FILE";

/// `template` with every `%p` replaced by `pid`.
fn log_file_path(template: &str, pid: u32) -> String {
    template.replace("%p", &pid.to_string())
}

#[cfg(test)]
mod log_tests {
    #[test]
    fn the_log_file_names_the_process() {
        assert_eq!(super::log_file_path("/tmp/r.%p.log", 42), "/tmp/r.42.log");
        assert_eq!(super::log_file_path("/tmp/all.log", 42), "/tmp/all.log");
    }
}
