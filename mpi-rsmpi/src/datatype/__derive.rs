//! What `#[derive(Equivalence)]` (crate `mpi-derive`) expands to calls:
//! not for use by hand.
//!
//! A derived datatype is built on its first use and kept for the rest of
//! the process. As in rsmpi, that first use panics (a programming error,
//! not bad data) before MPI is initialized, after it is finalized, or on
//! a thread other than the one that initialized it unless the thread level
//! is [`Threading::Multiple`](crate::Threading::Multiple).

use std::sync::OnceLock;

use super::user::{DatatypeRef, Layout, UncommittedDatatype, UncommittedUserDatatype};
use crate::environment::state;
use crate::fatal::check;
use crate::{Count, Threading};

/// The datatype in `cell`, built by `build` on first use.
pub fn cached(
    cell: &'static OnceLock<Typemap>,
    type_name: &str,
    build: impl FnOnce() -> Typemap,
) -> DatatypeRef<'static> {
    if let Some(map) = cell.get() {
        return DatatypeRef(Layout::Map(map));
    }
    check_state(type_name);
    DatatypeRef(Layout::Map(cell.get_or_init(build)))
}

/// Build without caching (a generic type's datatype depends on its
/// parameters).
pub fn uncached(type_name: &str, build: impl FnOnce() -> Typemap) -> super::user::UserDatatype {
    check_state(type_name);
    super::user::UserDatatype::from(build())
}

fn check_state(type_name: &str) {
    let (stage, level, main) = state::get();
    match stage {
        state::NEVER => panic!(
            "the datatype of #[derive(Equivalence)] type `{type_name}` was used before MPI was initialized"
        ),
        state::FINALIZED => panic!(
            "the datatype of #[derive(Equivalence)] type `{type_name}` was first used after MPI was finalized"
        ),
        _ => {}
    }
    if level != Threading::Multiple && main != Some(std::thread::current().id()) {
        panic!(
            "the datatype of #[derive(Equivalence)] type `{type_name}` was first used on a thread \
             other than the one that initialized MPI, which needs Threading::Multiple"
        );
    }
}

/// A field's datatype, owned.
pub fn owned<D: UncommittedDatatype>(d: &D) -> UncommittedUserDatatype {
    UncommittedUserDatatype::from(d.layout().to_typemap())
}

/// `n` elements of `d` (an array field).
pub fn array<D: UncommittedDatatype>(n: usize, d: &D) -> UncommittedUserDatatype {
    const CALL: &str = "#[derive(Equivalence)]";
    let n = Count::try_from(n).unwrap_or_else(|_| crate::fatal::fatal(CALL, &"array too long"));
    UncommittedUserDatatype::contiguous(n, d)
}

/// The fields at byte `offsets` with datatypes `types`, the whole
/// `size` bytes long (the struct's or tuple's size, padding included).
pub fn fields(offsets: &[usize], types: &[UncommittedUserDatatype], size: usize) -> Typemap {
    const CALL: &str = "#[derive(Equivalence)]";
    let maps: Vec<Typemap> = types.iter().map(|t| t.layout().to_typemap()).collect();
    let refs: Vec<&Typemap> = maps.iter().collect();
    let map = check(
        Typemap::structured(&vec![1; offsets.len()], offsets, &refs),
        CALL,
    );
    // The struct's own size, not C's padding rule, is the stride.
    check(map.resized(size), CALL)
}

/// [`fields`] as an uncommitted datatype (a tuple field).
pub fn tuple(
    offsets: &[usize],
    types: &[UncommittedUserDatatype],
    size: usize,
) -> UncommittedUserDatatype {
    UncommittedUserDatatype::from(fields(offsets, types, size))
}

pub use mpi_on_portals::typemap::Typemap;
