//! Errors are fatal: rsmpi's calls return values, and MPI's default error
//! handler ends the job on any error.

use std::fmt::Display;

/// The exit status of a job ended by an MPI error (MPI leaves it to the
/// implementation; 1, as Open MPI and MPICH use for `MPI_ERRORS_ARE_FATAL`
/// on most errors).
pub const ERROR_EXIT_STATUS: i32 = 1;

/// The value of `r`, or the end of the job naming `call` and the error.
pub(crate) fn check<T>(r: mpi_on_portals::Result<T>, call: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fatal(call, &e),
    }
}

/// End the job: `call` failed with `error`.
#[cold]
pub(crate) fn fatal(call: &str, error: &dyn Display) -> ! {
    mpi_on_portals::abort_job(ERROR_EXIT_STATUS, &format!("MPI error in {call}: {error}"))
}
