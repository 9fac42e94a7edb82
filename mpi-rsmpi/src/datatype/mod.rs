//! Datatypes and buffers (rsmpi's `mpi::datatype`): the predefined
//! types (numbers and `bool`), user-defined datatypes (contiguous, vector,
//! indexed, structured) over checked typemaps
//! ([`mpi_on_portals::typemap`]), and buffers described by them.

#[doc(hidden)]
pub mod __derive;
mod buffer;
mod user;
mod views;

use crate::fatal::check;
use crate::Count;

pub(crate) use buffer::{
    receiving, receiving_in_place, receiving_value, receiving_values, sending, sending_in_place,
    wire_size, Landing, Outgoing, Staging,
};
pub use buffer::{
    Buffer, BufferMut, Collection, Described, DescribedMut, Equivalence, Pointer, PointerMut,
};
pub use user::{
    Datatype, DatatypeRef, Layout, SystemDatatype, UncommittedDatatype, UncommittedDatatypeRef,
    UncommittedUserDatatype, UserDatatype,
};
pub use views::{DynBuffer, DynBufferMut, MutView, View};

/// Counts and displacements in elements, from rsmpi's `Count`s.
fn elements(v: &[Count], what: &str) -> Vec<usize> {
    v.iter()
        .map(|&c| match usize::try_from(c) {
            Ok(n) => n,
            Err(_) => crate::fatal::fatal(what, &format!("negative count or displacement {c}")),
        })
        .collect()
}

/// A buffer cut into per-rank blocks to send (rsmpi's `Partition`).
#[derive(Debug)]
pub struct Partition<'a, T>(pub(crate) mpi_on_portals::Partition<'a, T>);

impl<'a, T> Partition<'a, T> {
    /// Block r is `counts[r]` elements at `displs[r]`.
    pub fn new<C: AsRef<[Count]>, D: AsRef<[Count]>>(buf: &'a [T], counts: C, displs: D) -> Self {
        const CALL: &str = "Partition::new";
        let (c, d) = (
            elements(counts.as_ref(), CALL),
            elements(displs.as_ref(), CALL),
        );
        Partition(check(mpi_on_portals::Partition::new(buf, c, d), CALL))
    }
}

/// A buffer cut into per-rank blocks to receive into (rsmpi's
/// `PartitionMut`).
#[derive(Debug)]
pub struct PartitionMut<'a, T>(pub(crate) mpi_on_portals::PartitionMut<'a, T>);

impl<'a, T> PartitionMut<'a, T> {
    /// Block r is `counts[r]` elements at `displs[r]`.
    pub fn new<C: AsRef<[Count]>, D: AsRef<[Count]>>(
        buf: &'a mut [T],
        counts: C,
        displs: D,
    ) -> Self {
        const CALL: &str = "PartitionMut::new";
        let (c, d) = (
            elements(counts.as_ref(), CALL),
            elements(displs.as_ref(), CALL),
        );
        PartitionMut(check(mpi_on_portals::PartitionMut::new(buf, c, d), CALL))
    }
}
