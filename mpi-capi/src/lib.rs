//! # mpi-capi
//!
//! `libmpich.so.12`: MPI's C functions with MPICH's ABI (the one MPICH,
//! Intel MPI and Cray MPICH share: `int` handles with MPICH's values,
//! MPICH's `MPI_Status`, its sentinels and error classes) over
//! [`mpi_on_portals`]. A program built with `mpicc.mpich` runs on
//! portals-rs unmodified:
//!
//! ```sh
//! target/release/ptlcc -o prog prog.c && ptlrun -n 4 ./prog
//! LD_LIBRARY_PATH=target/release/mpich-abi ptlrun -n 4 ./mpicc-built-prog
//! ```
//!
//! Every `MPI_X` calls `PMPI_X` (the profiling interface's name), which
//! runs its body under [`error::guard`]: no panic crosses into C, every
//! pointer and handle is checked, and a failure goes to the error handler
//! (`MPI_ERRORS_ARE_FATAL` by default). Every other function of MPICH's
//! `mpi.h` is exported too (generated from `functions.txt` by `build.rs`)
//! and fails with `MPI_ERR_UNSUPPORTED_OPERATION`. See the README.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
// The request loops hand indices back to C (`MPI_Waitany`'s index).
#![allow(clippy::needless_range_loop)]

/// Define `MPI_X` and `PMPI_X`: the body (a block returning
/// [`error::Res`]) runs in `PMPI_X` under [`error::guard`].
macro_rules! entry {
    ($(#[$m:meta])* fn $name:ident | $pname:ident ( $($a:ident : $t:ty),* $(,)? ) $body:block) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> ::std::ffi::c_int {
            $crate::error::guard(stringify!($name), move || -> $crate::error::Res { $body })
        }
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> ::std::ffi::c_int {
            // SAFETY: the same contract, forwarded.
            unsafe { $pname($($a),*) }
        }
    };
}

/// An `mpi.h` function this library does not implement.
macro_rules! stub {
    ($name:ident, $pname:ident) => {
        #[no_mangle]
        pub extern "C" fn $pname() -> ::std::ffi::c_int {
            $crate::error::unsupported(stringify!($name))
        }
        #[no_mangle]
        pub extern "C" fn $name() -> ::std::ffi::c_int {
            $pname()
        }
    };
}

pub mod coll;
pub mod comm;
pub mod consts;
pub mod datatype;
pub mod env;
pub mod errhandler;
pub mod error;
pub mod mprobe;
pub mod nbc;
pub mod p2p;
mod ptr;
pub mod request;
pub mod rma;
pub mod state;

/// The functions of `mpi.h` not implemented here.
pub mod stubs {
    include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
}
