//! What MPI says about its environment: version, host name, clock
//! (`MPI_Get_version`, `MPI_Get_library_version`,
//! `MPI_Get_processor_name`, `MPI_Wtime`, `MPI_Wtick`).

use std::time::{SystemTime, UNIX_EPOCH};

/// The MPI standard version whose interface this library follows, as
/// (major, minor): the point-to-point, collective, one-sided and
/// communicator calls of MPI 3.1 (not all of them; see the crate docs).
pub fn version() -> (i32, i32) {
    (3, 1)
}

/// The library's name and version (`MPI_Get_library_version`).
pub fn library_version() -> String {
    format!(
        "mpi-on-portals {} (MPI on the Portals API)",
        env!("CARGO_PKG_VERSION")
    )
}

/// The name of the host this process runs on (`MPI_Get_processor_name`):
/// the kernel's host name, `HOSTNAME` where that cannot be read, else
/// `"localhost"`.
pub fn processor_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Wall-clock time in seconds (`MPI_Wtime`). The origin is the Unix epoch,
/// so times taken on different ranks of one host compare (`MPI_WTIME_IS_GLOBAL`
/// only as far as the hosts' clocks agree).
pub fn time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The resolution of [`time`] in seconds (`MPI_Wtick`): the system clock
/// counts nanoseconds, but an `f64` of seconds since 1970 keeps only about
/// a quarter of a microsecond of them.
pub fn time_resolution() -> f64 {
    let now = time();
    // The gap between `now` and the next representable f64 above it.
    f64::from_bits(now.to_bits() + 1) - now
}
