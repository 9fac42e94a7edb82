//! Which element types and operations one-sided accumulates take: a sealed
//! trait mapping the fixed-width integers and floats to the engine's atomic
//! [`Datatype`], and [`RmaOp`], MPI's predefined operations as the engine's
//! [`AtomicOp`].
//!
//! Only types with an engine atomic type implement [`AtomicElement`], so an
//! accumulate on any other [`Equivalence`](crate::Equivalence) type (a
//! struct, `u128`, an array) does not compile. An operation the type does
//! not support (a bitwise or logical one on `f32`/`f64`) is refused at run
//! time with [`MpiError::RmaUnsupported`](crate::MpiError::RmaUnsupported)
//! before anything is sent.

use portals::{AtomicOp, AtomicSpec, Datatype};

use crate::collective::{BitwiseOperation, LogicalOperation, SystemOperation};
use crate::error::{MpiError, Result};

mod sealed {
    pub trait Sealed {}
}

/// An element type the engine applies atomics to: `i8`..`i64`,
/// `u8`..`u64`, `usize`, `isize`, `f32`, `f64`. Sealed.
pub trait AtomicElement: crate::Equivalence + sealed::Sealed {
    /// The engine's type for it.
    const DATATYPE: Datatype;
}

macro_rules! elements {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl AtomicElement for $t {
            const DATATYPE: Datatype = Datatype::$d;
        }
    )*};
}

elements!(
    i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
    i64 => I64, u64 => U64, f32 => F32, f64 => F64
);
// `usize`/`isize` as the fixed-width type of the pointer width (windows
// are between processes of one build, so every rank agrees on it).
#[cfg(target_pointer_width = "64")]
elements!(usize => U64, isize => I64);
#[cfg(target_pointer_width = "32")]
elements!(usize => U32, isize => I32);

/// The operation of an accumulate (`MPI_Op` as one-sided operations take
/// it): the predefined reductions, `MPI_REPLACE` and `MPI_NO_OP`. Built
/// from [`SystemOperation`], [`LogicalOperation`] and [`BitwiseOperation`]
/// with `into()`, or named directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaOp {
    /// An operation the engine applies element-wise.
    Apply(AtomicOp),
    /// `MPI_REPLACE`: the target takes the origin's value.
    Replace,
    /// `MPI_NO_OP`: the target is left alone (a fetch only).
    NoOp,
}

impl From<SystemOperation> for RmaOp {
    fn from(op: SystemOperation) -> Self {
        RmaOp::Apply(op.portals_op())
    }
}

impl From<LogicalOperation> for RmaOp {
    fn from(op: LogicalOperation) -> Self {
        RmaOp::Apply(op.portals_op())
    }
}

impl From<BitwiseOperation> for RmaOp {
    fn from(op: BitwiseOperation) -> Self {
        RmaOp::Apply(op.portals_op())
    }
}

impl RmaOp {
    /// The engine operation on `T`, or `None` for [`RmaOp::NoOp`];
    /// `RmaUnsupported` where the engine has no such atomic on `T`.
    pub(crate) fn spec<T: AtomicElement>(self) -> Result<Option<AtomicSpec>> {
        let op = match self {
            RmaOp::Apply(op) => op,
            RmaOp::Replace => AtomicOp::Swap,
            RmaOp::NoOp => return Ok(None),
        };
        if op.needs_operand() {
            return Err(MpiError::RmaUnsupported(format!(
                "{op:?} is a conditional swap, not an accumulate operation (use compare_and_swap)"
            )));
        }
        if !portals::atomic::supported(op, T::DATATYPE) {
            return Err(MpiError::RmaUnsupported(format!(
                "{op:?} is not defined on {:?}",
                T::DATATYPE
            )));
        }
        Ok(Some(AtomicSpec {
            op,
            datatype: T::DATATYPE,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitwise_operations_on_floats_are_refused_and_sums_map() {
        let bor: RmaOp = SystemOperation::bitwise_or().into();
        assert!(matches!(
            bor.spec::<f64>(),
            Err(MpiError::RmaUnsupported(_))
        ));
        assert_eq!(
            bor.spec::<u16>().ok().flatten(),
            Some(AtomicSpec {
                op: AtomicOp::Bor,
                datatype: Datatype::U16
            })
        );
        let sum: RmaOp = SystemOperation::sum().into();
        assert_eq!(
            sum.spec::<f32>().ok().flatten().map(|s| s.op),
            Some(AtomicOp::Sum)
        );
        assert_eq!(
            RmaOp::Replace.spec::<i8>().ok().flatten().map(|s| s.op),
            Some(AtomicOp::Swap)
        );
        assert_eq!(RmaOp::NoOp.spec::<i64>().ok(), Some(None));
        assert!(RmaOp::Apply(AtomicOp::Cswap).spec::<i64>().is_err());
        assert_eq!(
            sum.spec::<usize>()
                .ok()
                .flatten()
                .map(|s| s.datatype.size()),
            Some(std::mem::size_of::<usize>())
        );
    }
}
