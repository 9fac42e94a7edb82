//! Datatype values: predefined ([`SystemDatatype`]), user-defined
//! ([`UserDatatype`], [`UncommittedUserDatatype`]) and borrowed
//! ([`DatatypeRef`], [`UncommittedDatatypeRef`]), each a checked
//! [`Typemap`] or a predefined [`Kind`].
//!
//! Committing does nothing here (there is no datatype engine to hand the
//! layout to), so the uncommitted and committed forms differ only in type,
//! as rsmpi's do.

use std::sync::Arc;

use mpi_on_portals::typemap::{Kind, Typemap};

use crate::fatal::{check, fatal};
use crate::{Address, Count};

/// A datatype's layout, borrowed: a predefined kind or a typemap.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Layout<'a> {
    /// One value of a predefined kind.
    Kind(Kind),
    /// A user-defined layout.
    Map(&'a Typemap),
}

impl Layout<'_> {
    /// The layout as an owned typemap.
    pub(crate) fn to_typemap(self) -> Typemap {
        match self {
            Layout::Kind(k) => Typemap::predefined(k),
            Layout::Map(m) => m.clone(),
        }
    }
}

/// A datatype, committed or not (rsmpi's `UncommittedDatatype`): what the
/// constructors of user datatypes take as their old types.
pub trait UncommittedDatatype {
    /// Its layout.
    #[doc(hidden)]
    fn layout(&self) -> Layout<'_>;
}

/// A datatype buffers can be described with (rsmpi's `Datatype`).
pub trait Datatype: UncommittedDatatype {
    /// A new datatype with the same layout (`MPI_Type_dup`).
    fn dup(&self) -> UserDatatype {
        UserDatatype(Arc::new(self.layout().to_typemap()))
    }
}

impl<D: UncommittedDatatype + ?Sized> UncommittedDatatype for &D {
    fn layout(&self) -> Layout<'_> {
        (**self).layout()
    }
}

impl<D: Datatype + ?Sized> Datatype for &D {}

/// A predefined datatype (`MPI_INT`, `MPI_C_BOOL`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemDatatype(pub(crate) Kind);

impl UncommittedDatatype for SystemDatatype {
    fn layout(&self) -> Layout<'_> {
        Layout::Kind(self.0)
    }
}

impl Datatype for SystemDatatype {}

/// A borrowed committed datatype.
#[derive(Debug, Clone, Copy)]
pub struct DatatypeRef<'a>(pub(crate) Layout<'a>);

impl UncommittedDatatype for DatatypeRef<'_> {
    fn layout(&self) -> Layout<'_> {
        self.0
    }
}

impl Datatype for DatatypeRef<'_> {}

/// A borrowed datatype, committed or not.
#[derive(Debug, Clone, Copy)]
pub struct UncommittedDatatypeRef<'a>(Layout<'a>);

impl UncommittedDatatype for UncommittedDatatypeRef<'_> {
    fn layout(&self) -> Layout<'_> {
        self.0
    }
}

impl<'a> From<DatatypeRef<'a>> for UncommittedDatatypeRef<'a> {
    fn from(d: DatatypeRef<'a>) -> Self {
        UncommittedDatatypeRef(d.0)
    }
}

impl From<SystemDatatype> for DatatypeRef<'_> {
    fn from(d: SystemDatatype) -> Self {
        DatatypeRef(Layout::Kind(d.0))
    }
}

impl From<SystemDatatype> for UncommittedDatatypeRef<'_> {
    fn from(d: SystemDatatype) -> Self {
        UncommittedDatatypeRef(Layout::Kind(d.0))
    }
}

/// Counts from rsmpi's `Count`s; a negative one ends the job.
fn counts(v: &[Count], call: &str) -> Vec<usize> {
    v.iter().map(|&c| count(c, call)).collect()
}

fn count(c: Count, call: &str) -> usize {
    usize::try_from(c).unwrap_or_else(|_| fatal(call, &format!("negative count {c}")))
}

fn addresses(v: &[Address], call: &str) -> Vec<usize> {
    v.iter()
        .map(|&a| {
            usize::try_from(a).unwrap_or_else(|_| {
                fatal(
                    call,
                    &format!("negative displacement {a}: lower bounds below 0 are not supported"),
                )
            })
        })
        .collect()
}

fn maps<D: UncommittedDatatype>(types: &[D]) -> Vec<Typemap> {
    types.iter().map(|t| t.layout().to_typemap()).collect()
}

/// The constructors, shared by the committed and uncommitted forms.
macro_rules! constructors {
    ($ty:ident) => {
        impl $ty {
            /// `count` copies of `oldtype` one after another
            /// (`MPI_Type_contiguous`).
            pub fn contiguous<D: UncommittedDatatype>(count: Count, oldtype: &D) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::contiguous");
                let old = oldtype.layout().to_typemap();
                Self::from(check(
                    Typemap::contiguous(self::count(count, CALL), &old),
                    CALL,
                ))
            }

            /// `count` blocks of `blocklength` elements, `stride` elements
            /// apart (`MPI_Type_vector`).
            pub fn vector<D: UncommittedDatatype>(
                count: Count,
                blocklength: Count,
                stride: Count,
                oldtype: &D,
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::vector");
                let old = oldtype.layout().to_typemap();
                let (c, b, s) = (
                    self::count(count, CALL),
                    self::count(blocklength, CALL),
                    self::count(stride, CALL),
                );
                Self::from(check(Typemap::vector(c, b, s, &old), CALL))
            }

            /// `count` blocks of `blocklength` elements, `stride` bytes
            /// apart (`MPI_Type_create_hvector`).
            pub fn heterogeneous_vector<D: UncommittedDatatype>(
                count: Count,
                blocklength: Count,
                stride: Address,
                oldtype: &D,
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::heterogeneous_vector");
                let n = self::count(count, CALL);
                let stride = addresses(&[stride], CALL)[0];
                let displs: Vec<usize> = (0..n).map(|i| i.saturating_mul(stride)).collect();
                let b = vec![self::count(blocklength, CALL); n];
                let old = oldtype.layout().to_typemap();
                Self::from(check(Typemap::hindexed(&b, &displs, &old), CALL))
            }

            /// Blocks of `blocklengths[i]` elements at `displacements[i]`
            /// elements (`MPI_Type_indexed`).
            pub fn indexed<D: UncommittedDatatype>(
                blocklengths: &[Count],
                displacements: &[Count],
                oldtype: &D,
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::indexed");
                let old = oldtype.layout().to_typemap();
                let (b, d) = (counts(blocklengths, CALL), counts(displacements, CALL));
                Self::from(check(Typemap::indexed(&b, &d, &old), CALL))
            }

            /// Blocks of `blocklengths[i]` elements at byte
            /// `displacements[i]` (`MPI_Type_create_hindexed`).
            pub fn heterogeneous_indexed<D: UncommittedDatatype>(
                blocklengths: &[Count],
                displacements: &[Address],
                oldtype: &D,
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::heterogeneous_indexed");
                let old = oldtype.layout().to_typemap();
                let (b, d) = (counts(blocklengths, CALL), addresses(displacements, CALL));
                Self::from(check(Typemap::hindexed(&b, &d, &old), CALL))
            }

            /// Blocks of `blocklength` elements at `displacements[i]`
            /// elements (`MPI_Type_create_indexed_block`).
            pub fn indexed_block<D: UncommittedDatatype>(
                blocklength: Count,
                displacements: &[Count],
                oldtype: &D,
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::indexed_block");
                let old = oldtype.layout().to_typemap();
                let b = vec![self::count(blocklength, CALL); displacements.len()];
                let d = counts(displacements, CALL);
                Self::from(check(Typemap::indexed(&b, &d, &old), CALL))
            }

            /// Blocks of `blocklength` elements at byte `displacements[i]`
            /// (`MPI_Type_create_hindexed_block`).
            pub fn heterogeneous_indexed_block<D: UncommittedDatatype>(
                blocklength: Count,
                displacements: &[Address],
                oldtype: &D,
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::heterogeneous_indexed_block");
                let old = oldtype.layout().to_typemap();
                let b = vec![self::count(blocklength, CALL); displacements.len()];
                let d = addresses(displacements, CALL);
                Self::from(check(Typemap::hindexed(&b, &d, &old), CALL))
            }

            /// Blocks of `blocklengths[i]` elements of `types[i]` at byte
            /// `displacements[i]` (`MPI_Type_create_struct`). The values go
            /// on the wire in the order listed.
            pub fn structured<D: UncommittedDatatype>(
                blocklengths: &[Count],
                displacements: &[Address],
                types: &[D],
            ) -> Self {
                const CALL: &str = concat!(stringify!($ty), "::structured");
                let old = maps(types);
                let refs: Vec<&Typemap> = old.iter().collect();
                let (b, d) = (counts(blocklengths, CALL), addresses(displacements, CALL));
                Self::from(check(Typemap::structured(&b, &d, &refs), CALL))
            }
        }

        impl From<Typemap> for $ty {
            fn from(map: Typemap) -> Self {
                $ty(Arc::new(map))
            }
        }
    };
}

/// A committed user-defined datatype (`MPI_Type_commit`ted).
#[derive(Debug, Clone)]
pub struct UserDatatype(Arc<Typemap>);

constructors!(UserDatatype);

impl UserDatatype {
    /// Borrow it.
    pub fn as_ref(&self) -> DatatypeRef<'_> {
        DatatypeRef(Layout::Map(&self.0))
    }

    /// The checked layout.
    pub fn typemap(&self) -> &Typemap {
        &self.0
    }
}

impl UncommittedDatatype for UserDatatype {
    fn layout(&self) -> Layout<'_> {
        Layout::Map(&self.0)
    }
}

impl Datatype for UserDatatype {}

impl<'a> From<&'a UserDatatype> for DatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        d.as_ref()
    }
}

impl<'a> From<&'a UserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        UncommittedDatatypeRef(Layout::Map(&d.0))
    }
}

/// A user-defined datatype not yet committed: usable only as a part of
/// another datatype until [`commit`](Self::commit)ted.
#[derive(Debug, Clone)]
pub struct UncommittedUserDatatype(Arc<Typemap>);

constructors!(UncommittedUserDatatype);

impl UncommittedUserDatatype {
    /// Commit it (`MPI_Type_commit`).
    pub fn commit(self) -> UserDatatype {
        UserDatatype(self.0)
    }

    /// Borrow it.
    pub fn as_ref(&self) -> UncommittedDatatypeRef<'_> {
        UncommittedDatatypeRef(Layout::Map(&self.0))
    }
}

impl UncommittedDatatype for UncommittedUserDatatype {
    fn layout(&self) -> Layout<'_> {
        Layout::Map(&self.0)
    }
}

impl<'a> From<&'a UncommittedUserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(d: &'a UncommittedUserDatatype) -> Self {
        d.as_ref()
    }
}
