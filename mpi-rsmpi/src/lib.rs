//! # mpi-rsmpi: rsmpi's face on mpi-on-portals
//!
//! [rsmpi](https://docs.rs/mpi) programs build unchanged against this crate
//! with only their dependency line changed:
//!
//! ```toml
//! mpi = { package = "mpi-rsmpi", path = "…/portals-rs/mpi-rsmpi" }
//! ```
//!
//! The module paths and signatures are rsmpi's: calls return values, and
//! an error is fatal to the whole job, as under MPI's default error handler
//! (`MPI_ERRORS_ARE_FATAL`): the failing rank prints the call and the error
//! and the job is aborted through the launcher. Every call is a thin
//! wrapper over [`mpi_on_portals`], whose `Result` API is the one to use
//! where errors should be handled instead.
//!
//! User-defined datatypes ([`datatype`]) that are not contiguous travel
//! without a packing copy in point-to-point calls, blocking or not: the
//! layout goes to the transport as a list of segments (an iovec memory
//! descriptor) that it gathers from and scatters into. Layouts of tiny
//! runs are packed, and layouts holding `bool`s are received through a
//! stage that is validated before anything is written; in non-blocking
//! calls (and the non-blocking collectives, which take one region) such a
//! copy is owned by the request and unpacked as it completes. The
//! crate's README lists the details and the measurements.
//!
//! ```no_run
//! use mpi::traits::*;
//!
//! let universe = mpi::initialize().unwrap();
//! let world = universe.world();
//! let next = (world.rank() + 1) % world.size();
//! let prev = (world.rank() + world.size() - 1) % world.size();
//! let (msg, _status): (i32, _) = mpi::point_to_point::send_receive(
//!     &world.rank(),
//!     &world.process_at_rank(next),
//!     &world.process_at_rank(prev),
//! );
//! assert_eq!(msg, prev);
//! ```

#![warn(missing_docs)]

pub mod attribute;
pub mod collective;
pub mod datatype;
pub mod environment;
mod fatal;
pub mod point_to_point;
pub mod request;
pub mod topology;
mod transfer;

pub use environment::{initialize, initialize_with_threading, time, time_resolution, Threading};
pub use mpi_on_portals::{ffi, MpiError};

/// A rank in a communicator (`int` in MPI).
pub type Rank = i32;
/// A message tag.
pub type Tag = i32;
/// An element count (`int` in MPI).
pub type Count = i32;
/// A byte displacement (`MPI_Aint`).
pub type Address = isize;

/// The traits to bring into scope: `use mpi::traits::*`.
pub mod traits {
    pub use crate::attribute::{AnyCommunicator, CommAttribute};
    pub use crate::collective::{CommunicatorCollectives, Root};
    pub use crate::datatype::{
        Buffer, BufferMut, Collection, Datatype, Equivalence, Pointer, PointerMut,
        UncommittedDatatype,
    };
    pub use crate::point_to_point::{Destination, Source};
    pub use crate::topology::{AsCommunicator, Communicator, Group};
    pub use mpi_derive::Equivalence;
}
