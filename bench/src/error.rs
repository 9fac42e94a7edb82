//! The error type of every benchmark operation.

use std::io;

/// What went wrong while benchmarking.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A system call, file or pipe failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The MPI library failed inside a rank.
    #[error("MPI: {0}")]
    Mpi(#[from] mpi_on_portals::MpiError),
    /// The Portals API failed inside a rank.
    #[error("Portals: {0}")]
    Portals(#[from] portals::PtlError),
    /// Joining or launching a job failed.
    #[error("runtime: {0}")]
    Runtime(#[from] portals_runtime::RuntimeError),
    /// A benchmark job or peer program ran but failed.
    #[error("{what} failed: {why}")]
    Run {
        /// Which run (implementation and benchmark).
        what: String,
        /// Exit status, reason and the tail of its error output.
        why: String,
    },
    /// Bad parameters or arguments.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A results file or output line could not be read.
    #[error("{what}: {why}")]
    Parse {
        /// What was being read.
        what: String,
        /// Why it did not parse.
        why: String,
    },
    /// Drawing a plot failed.
    #[error("plot {file}: {why}")]
    Plot {
        /// The SVG file.
        file: String,
        /// The drawing error.
        why: String,
    },
}

impl BenchError {
    /// Wrap an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> BenchError {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of benchmark operations.
pub type Result<T> = std::result::Result<T, BenchError>;
