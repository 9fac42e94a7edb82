//! # mpi-on-portals
//!
//! MPI on the Portals API, following Brightwell, Riesen and Maccabe, *Design,
//! Implementation, and Performance of MPI on Portals 3.0* (seed 001) to the
//! letter: match bits `protocol | context | source | tag`, three portal
//! entries (receive, read, ack), posted receives in front of a *mark*,
//! unexpected short messages in high-water-mark buffers, eager long messages
//! with a get fallback, synchronous sends through the ack portal. All data
//! moves through the Portals engine, so with the progress thread it moves
//! while the application computes.
//!
//! The API has the shape of [rsmpi](https://docs.rs/mpi), so porting is a
//! matter of renaming the crate (and adding `?`: calls return `Result`
//! instead of aborting):
//!
//! ```no_run
//! use mpi_on_portals::traits::*;
//!
//! let universe = mpi_on_portals::initialize()?;
//! let world = universe.world();
//! let (rank, size) = (world.rank(), world.size());
//! let next = (rank + 1) % size;
//! let prev = (rank + size - 1) % size;
//! if rank == 0 {
//!     world.process_at_rank(next).send(&rank)?;
//!     let (v, _) = world.process_at_rank(prev).receive::<i32>()?;
//!     println!("token came back: {v}");
//! } else {
//!     let (v, _) = world.process_at_rank(prev).receive::<i32>()?;
//!     world.process_at_rank(next).send(&v)?;
//! }
//! # Ok::<(), mpi_on_portals::MpiError>(())
//! ```
//!
//! Run with `ptlrun -n 4 target/release/examples/<program>`.

#![warn(missing_docs)]

mod bits;
mod cartesian;
pub mod collective;
mod comm;
mod datatype;
mod device;
pub mod environment;
mod error;
pub mod ffi;
mod future;
mod group;
mod message;
mod p2p;
mod pack;
pub mod raw;
pub mod request;
mod request_collection;
pub mod segments;
mod sendrecv;
mod status;
pub mod typemap;
mod universe;
pub mod window;

pub use bits::{MAX_CONTEXT, MAX_RANK};
pub use cartesian::{CartesianCommunicator, CartesianLayout};
pub use collective::{
    CommunicatorCollectives, ImmediateCollectives, ImmediateRoot, Partition, PartitionMut, Root,
    SystemOperation, UserOperation,
};
pub use comm::{
    AnyProcess, Color, Communicator, CommunicatorRelation, Process, Rank, SimpleCommunicator, Tag,
    ANY_TAG,
};
pub use datatype::{Buffer, BufferMut, Equivalence};
pub use device::{MpiConfig, MpiStats};
pub use error::{MpiError, Result};
pub use future::ReceiveFuture;
pub use group::{Group, GroupRelation};
pub use message::Message;
pub use p2p::{Destination, Source};
pub use status::Status;
pub use universe::{
    abort_job, initialize, initialize_with_config, initialize_with_threading, Threading, Universe,
    PANIC_EXIT_STATUS,
};
pub use window::{
    AtomicElement, CommunicatorWindows, LockAllGuard, LockGuard, LockType, RmaOp, RmaRequest,
    SharedRegion, Window,
};

/// The traits to bring into scope, as with `use mpi::traits::*`.
pub mod traits {
    pub use crate::collective::{CommunicatorCollectives, Root};
    pub use crate::collective::{ImmediateCollectives, ImmediateRoot};
    pub use crate::comm::Communicator;
    pub use crate::datatype::{Buffer, BufferMut, Equivalence};
    pub use crate::p2p::{Destination, Source};
    pub use crate::window::CommunicatorWindows;
}

/// rsmpi-style module paths.
pub mod topology {
    pub use crate::cartesian::{CartesianCommunicator, CartesianLayout};
    pub use crate::comm::{AnyProcess, Communicator, Process, Rank, SimpleCommunicator};
    pub use crate::universe::Universe;
}

/// rsmpi-style module paths.
pub mod point_to_point {
    pub use crate::future::ReceiveFuture;
    pub use crate::message::Message;
    pub use crate::p2p::{Destination, Source};
    pub use crate::sendrecv::{
        send_receive, send_receive_into, send_receive_into_with_tags, send_receive_replace_into,
        send_receive_replace_into_with_tags,
    };
    pub use crate::status::Status;
}
