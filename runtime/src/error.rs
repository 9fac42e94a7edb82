//! Errors of joining and launching jobs.

use portals::PtlError;

/// What can go wrong when a process joins a job or `ptlrun` launches one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A `PTL_*` environment variable is missing or malformed.
    #[error("environment variable {var}: {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The rendezvous server is unreachable, refused us, or a fence failed
    /// (timeout with the missing ranks, job key mismatch, a rank died).
    #[error("rendezvous with {server} failed: {why}")]
    Rendezvous {
        /// host:port of the server.
        server: String,
        /// What happened.
        why: String,
    },
    /// The rendezvous server could not be reached for the whole bootstrap
    /// timeout (`PTL_BOOTSTRAP` wrong, `ptlrun` gone, a firewall).
    #[error(
        "rendezvous server {server} ({}) unreachable for {waited:?} ({} sets the wait): {cause}",
        crate::env::BOOTSTRAP,
        crate::env::BOOTSTRAP_TIMEOUT
    )]
    RendezvousUnreachable {
        /// host:port of the server.
        server: String,
        /// How long this process tried.
        waited: std::time::Duration,
        /// Why the last attempt failed (connection refused, timed out…).
        cause: std::io::ErrorKind,
        /// The last attempt's error, in words.
        detail: String,
    },
    /// A value that cannot be published (contains whitespace, empty).
    #[error("cannot publish {0}: keys and values must be non-empty and contain no whitespace")]
    InvalidValue(String),
    /// A peer published an address that does not parse.
    #[error("rank {rank} published an unusable address {addr:?}")]
    BadAddress {
        /// Whose address.
        rank: u32,
        /// What it published.
        addr: String,
    },
    /// The transport could not be set up.
    #[error("transport: {0}")]
    Io(#[from] std::io::Error),
    /// The Portals layer refused something.
    #[error("portals: {0}")]
    Portals(#[from] PtlError),
    /// Talking to a PMI launcher (hydra, Slurm) failed.
    #[error("PMI: {0}")]
    Pmi(#[from] crate::pmi::PmiError),
    /// The processes of a job started by a PMI launcher could not form the
    /// job: a rank published no or a different job key, or not every rank
    /// reached the start-up fence in time.
    #[error("joining the job through PMI (key-value space {kvs}) failed: {why}")]
    PmiJoin {
        /// The job's key-value space, as the launcher named it.
        kvs: String,
        /// What happened.
        why: String,
    },
    /// Talking to a PMIx launcher (Open MPI's `mpirun`, `srun --mpi=pmix`)
    /// failed.
    #[error("PMIx: {0}")]
    Pmix(#[from] crate::pmix::PmixError),
    /// The processes of a job started by a PMIx launcher could not form
    /// the job (as [`RuntimeError::PmiJoin`], for PMIx).
    #[error("joining the job through PMIx (namespace {namespace}) failed: {why}")]
    PmixJoin {
        /// The job's namespace.
        namespace: String,
        /// What happened.
        why: String,
    },
    /// This process was started as one of several tasks by a launcher we
    /// cannot join through (no PMI, no PMIx): running it as a job of one
    /// would be silently wrong. See [`crate::launcher`].
    #[error(
        "started by {launcher} with {tasks} tasks but no PMI: {fix}; \
         PTL_SINGLETON=1 runs each task as a job of its own instead"
    )]
    ForeignLaunch {
        /// Who started the process.
        launcher: &'static str,
        /// How many tasks it started.
        tasks: u32,
        /// What to do about it.
        fix: &'static str,
    },
    /// `PTL_NAL=shm` in a job whose ranks run on more than one host.
    #[error(
        "PTL_NAL=shm needs every rank on one host, but rank {rank} runs on {host} \
         and this rank on {mine} (use PTL_NAL=auto or tcp)"
    )]
    NotOneHost {
        /// A rank elsewhere.
        rank: u32,
        /// Its host identity.
        host: String,
        /// This rank's host identity.
        mine: String,
    },
    /// `ptlrun` could not start or supervise the job.
    #[error("launch: {0}")]
    Launch(String),
}
