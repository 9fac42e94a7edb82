//! Reduction operations (`MPI_Op`).
//!
//! The predefined operations are typed: sums and extrema exist for every
//! number, logical and bitwise operations only for integers, so a bitwise
//! AND of floats does not compile (MPI reports it at run time).
//! [`UserOperation`] wraps a closure, commutative or only associative.

use std::marker::PhantomData;

use portals::atomic::{AtomicOp, AtomicSpec, Datatype};

/// A reduction operation on elements of type `T`.
pub trait Operation<T>: Sync {
    /// True if `a op b == b op a`. Non-commutative operations are applied
    /// strictly in rank order.
    fn is_commutative(&self) -> bool;

    /// `inout[i] = input[i] op inout[i]`, element by element, where `input`
    /// holds the contribution of the lower ranks.
    fn apply(&self, input: &[T], inout: &mut [T]);

    /// The Portals atomic operation that computes the same thing on `T`,
    /// if there is one: what lets a non-blocking all-reduce run as a chain
    /// of triggered atomics. None (the default) for user-defined
    /// operations.
    #[doc(hidden)]
    fn atomic(&self) -> Option<AtomicSpec> {
        None
    }
}

impl<T, O: Operation<T> + ?Sized> Operation<T> for &O {
    fn is_commutative(&self) -> bool {
        (**self).is_commutative()
    }
    fn apply(&self, input: &[T], inout: &mut [T]) {
        (**self).apply(input, inout)
    }
    fn atomic(&self) -> Option<AtomicSpec> {
        (**self).atomic()
    }
}

/// Numbers: what sums, products and extrema apply to.
pub trait Numeric: Copy + PartialOrd + Send + Sync + 'static {
    /// `a + b`, wrapping for integers (as C does for unsigned types; MPI
    /// leaves signed overflow undefined).
    fn add(a: Self, b: Self) -> Self;
    /// `a * b`, wrapping for integers.
    fn mul(a: Self, b: Self) -> Self;

    /// The Portals atomic datatype of this type, if it has one.
    #[doc(hidden)]
    fn atomic_datatype() -> Option<Datatype> {
        None
    }
}

/// Integers: what logical and bitwise operations apply to.
pub trait Integer: Numeric + Eq {
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Bitwise and.
    fn and(a: Self, b: Self) -> Self;
    /// Bitwise or.
    fn or(a: Self, b: Self) -> Self;
    /// Bitwise exclusive or.
    fn xor(a: Self, b: Self) -> Self;
}

macro_rules! ints {
    ($($t:ty => $d:expr),*) => {$(
        impl Numeric for $t {
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn atomic_datatype() -> Option<Datatype> { $d }
        }
        impl Integer for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn and(a: Self, b: Self) -> Self { a & b }
            fn or(a: Self, b: Self) -> Self { a | b }
            fn xor(a: Self, b: Self) -> Self { a ^ b }
        }
    )*};
}
/// `usize`/`isize` as the fixed-width type of this target's pointer width.
const USIZE: Option<Datatype> = match usize::BITS {
    64 => Some(Datatype::U64),
    32 => Some(Datatype::U32),
    _ => None,
};
const ISIZE: Option<Datatype> = match usize::BITS {
    64 => Some(Datatype::I64),
    32 => Some(Datatype::I32),
    _ => None,
};

ints!(
    u8 => Some(Datatype::U8), i8 => Some(Datatype::I8),
    u16 => Some(Datatype::U16), i16 => Some(Datatype::I16),
    u32 => Some(Datatype::U32), i32 => Some(Datatype::I32),
    u64 => Some(Datatype::U64), i64 => Some(Datatype::I64),
    u128 => None, i128 => None,
    usize => USIZE, isize => ISIZE
);

impl Numeric for f32 {
    fn add(a: Self, b: Self) -> Self {
        a + b
    }
    fn mul(a: Self, b: Self) -> Self {
        a * b
    }
    fn atomic_datatype() -> Option<Datatype> {
        Some(Datatype::F32)
    }
}

impl Numeric for f64 {
    fn add(a: Self, b: Self) -> Self {
        a + b
    }
    fn mul(a: Self, b: Self) -> Self {
        a * b
    }
    fn atomic_datatype() -> Option<Datatype> {
        Some(Datatype::F64)
    }
}

/// `op` on `T`, if the engine has that atomic.
fn spec<T: Numeric>(op: AtomicOp) -> Option<AtomicSpec> {
    let datatype = T::atomic_datatype()?;
    portals::atomic::supported(op, datatype).then_some(AtomicSpec { op, datatype })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arith {
    Sum,
    Product,
    Max,
    Min,
}

/// The predefined arithmetic operations (`MPI_SUM`, `MPI_PROD`, `MPI_MAX`,
/// `MPI_MIN`); the constructors of the logical and bitwise ones live here
/// too, as in rsmpi.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemOperation(Arith);

impl SystemOperation {
    /// `MPI_SUM`.
    pub fn sum() -> Self {
        SystemOperation(Arith::Sum)
    }
    /// `MPI_PROD`.
    pub fn product() -> Self {
        SystemOperation(Arith::Product)
    }
    /// `MPI_MAX`.
    pub fn max() -> Self {
        SystemOperation(Arith::Max)
    }
    /// `MPI_MIN`.
    pub fn min() -> Self {
        SystemOperation(Arith::Min)
    }
    /// `MPI_LAND`: non-zero is true; the result is 0 or 1.
    pub fn logical_and() -> LogicalOperation {
        LogicalOperation(Bits::And)
    }
    /// `MPI_LOR`.
    pub fn logical_or() -> LogicalOperation {
        LogicalOperation(Bits::Or)
    }
    /// `MPI_LXOR`.
    pub fn logical_xor() -> LogicalOperation {
        LogicalOperation(Bits::Xor)
    }
    /// `MPI_BAND`.
    pub fn bitwise_and() -> BitwiseOperation {
        BitwiseOperation(Bits::And)
    }
    /// `MPI_BOR`.
    pub fn bitwise_or() -> BitwiseOperation {
        BitwiseOperation(Bits::Or)
    }
    /// `MPI_BXOR`.
    pub fn bitwise_xor() -> BitwiseOperation {
        BitwiseOperation(Bits::Xor)
    }
}

impl<T: Numeric> Operation<T> for SystemOperation {
    fn is_commutative(&self) -> bool {
        true
    }

    fn apply(&self, input: &[T], inout: &mut [T]) {
        let f: fn(T, T) -> T = match self.0 {
            Arith::Sum => T::add,
            Arith::Product => T::mul,
            Arith::Max => |a, b| if b > a { b } else { a },
            Arith::Min => |a, b| if b < a { b } else { a },
        };
        for (o, &i) in inout.iter_mut().zip(input) {
            *o = f(i, *o);
        }
    }

    fn atomic(&self) -> Option<AtomicSpec> {
        spec::<T>(match self.0 {
            Arith::Sum => AtomicOp::Sum,
            Arith::Product => AtomicOp::Prod,
            Arith::Max => AtomicOp::Max,
            Arith::Min => AtomicOp::Min,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bits {
    And,
    Or,
    Xor,
}

/// Logical and/or/xor of integers (non-zero is true).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogicalOperation(Bits);

impl<T: Integer> Operation<T> for LogicalOperation {
    fn is_commutative(&self) -> bool {
        true
    }

    fn apply(&self, input: &[T], inout: &mut [T]) {
        for (o, &i) in inout.iter_mut().zip(input) {
            let (a, b) = (i != T::ZERO, *o != T::ZERO);
            let r = match self.0 {
                Bits::And => a && b,
                Bits::Or => a || b,
                Bits::Xor => a != b,
            };
            *o = if r { T::ONE } else { T::ZERO };
        }
    }

    fn atomic(&self) -> Option<AtomicSpec> {
        spec::<T>(match self.0 {
            Bits::And => AtomicOp::Land,
            Bits::Or => AtomicOp::Lor,
            Bits::Xor => AtomicOp::Lxor,
        })
    }
}

/// Bitwise and/or/xor of integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitwiseOperation(Bits);

impl<T: Integer> Operation<T> for BitwiseOperation {
    fn is_commutative(&self) -> bool {
        true
    }

    fn apply(&self, input: &[T], inout: &mut [T]) {
        let f: fn(T, T) -> T = match self.0 {
            Bits::And => T::and,
            Bits::Or => T::or,
            Bits::Xor => T::xor,
        };
        for (o, &i) in inout.iter_mut().zip(input) {
            *o = f(i, *o);
        }
    }

    fn atomic(&self) -> Option<AtomicSpec> {
        spec::<T>(match self.0 {
            Bits::And => AtomicOp::Band,
            Bits::Or => AtomicOp::Bor,
            Bits::Xor => AtomicOp::Bxor,
        })
    }
}

/// A user-defined operation (`MPI_Op_create`): a closure computing
/// `inout = input op inout` element-wise, where `input` comes from lower
/// ranks.
pub struct UserOperation<T, F> {
    f: F,
    commutative: bool,
    _t: PhantomData<fn(&[T])>,
}

impl<T, F: Fn(&[T], &mut [T]) + Sync> UserOperation<T, F> {
    /// An operation that is associative and commutative; the library may
    /// combine contributions in any order.
    pub fn commutative(f: F) -> Self {
        UserOperation {
            f,
            commutative: true,
            _t: PhantomData,
        }
    }

    /// An operation that is only associative: contributions are combined in
    /// rank order.
    pub fn associative(f: F) -> Self {
        UserOperation {
            f,
            commutative: false,
            _t: PhantomData,
        }
    }
}

impl<T, F> std::fmt::Debug for UserOperation<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserOperation(commutative: {})", self.commutative)
    }
}

impl<T, F: Fn(&[T], &mut [T]) + Sync> Operation<T> for UserOperation<T, F> {
    fn is_commutative(&self) -> bool {
        self.commutative
    }

    fn apply(&self, input: &[T], inout: &mut [T]) {
        (self.f)(input, inout)
    }
}

/// The Portals operation of a predefined operation, whatever the element
/// type (one-sided accumulates check the type separately).
impl SystemOperation {
    pub(crate) fn portals_op(&self) -> AtomicOp {
        match self.0 {
            Arith::Sum => AtomicOp::Sum,
            Arith::Product => AtomicOp::Prod,
            Arith::Max => AtomicOp::Max,
            Arith::Min => AtomicOp::Min,
        }
    }
}

impl LogicalOperation {
    pub(crate) fn portals_op(&self) -> AtomicOp {
        match self.0 {
            Bits::And => AtomicOp::Land,
            Bits::Or => AtomicOp::Lor,
            Bits::Xor => AtomicOp::Lxor,
        }
    }
}

impl BitwiseOperation {
    pub(crate) fn portals_op(&self) -> AtomicOp {
        match self.0 {
            Bits::And => AtomicOp::Band,
            Bits::Or => AtomicOp::Bor,
            Bits::Xor => AtomicOp::Bxor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_operations_combine_element_wise() {
        let mut v = [1i32, 5, -3];
        Operation::<i32>::apply(&SystemOperation::sum(), &[10, 20, 30], &mut v);
        assert_eq!(v, [11, 25, 27]);
        Operation::<i32>::apply(&SystemOperation::max(), &[12, 0, 100], &mut v);
        assert_eq!(v, [12, 25, 100]);
        Operation::<i32>::apply(&SystemOperation::min(), &[0, 0, 200], &mut v);
        assert_eq!(v, [0, 0, 100]);
        let mut f = [1.5f64, 2.0];
        Operation::<f64>::apply(&SystemOperation::product(), &[2.0, 0.5], &mut f);
        assert_eq!(f, [3.0, 1.0]);
        let mut b = [0b1100u8, 0, 7];
        Operation::<u8>::apply(&SystemOperation::bitwise_xor(), &[0b1010, 0, 7], &mut b);
        assert_eq!(b, [0b0110, 0, 0]);
        let mut l = [3u16, 0, 0];
        Operation::<u16>::apply(&SystemOperation::logical_or(), &[0, 9, 0], &mut l);
        assert_eq!(l, [1, 1, 0]);
    }

    #[test]
    fn predefined_operations_map_to_atomics_where_the_engine_has_them() {
        let spec = |op, datatype| Some(AtomicSpec { op, datatype });
        let sum = SystemOperation::sum();
        assert_eq!(
            Operation::<u64>::atomic(&sum),
            spec(AtomicOp::Sum, Datatype::U64)
        );
        assert_eq!(
            Operation::<f64>::atomic(&SystemOperation::max()),
            spec(AtomicOp::Max, Datatype::F64)
        );
        assert_eq!(
            Operation::<i32>::atomic(&SystemOperation::bitwise_and()),
            spec(AtomicOp::Band, Datatype::I32)
        );
        assert_eq!(
            Operation::<u8>::atomic(&SystemOperation::logical_xor()),
            spec(AtomicOp::Lxor, Datatype::U8)
        );
        assert_eq!(Operation::<usize>::atomic(&&sum).map(|s| s.datatype), USIZE);
        // No 128-bit atomics, and a closure is opaque.
        assert_eq!(Operation::<u128>::atomic(&sum), None);
        let user = UserOperation::commutative(|_: &[u64], _: &mut [u64]| {});
        assert_eq!(Operation::<u64>::atomic(&user), None);
    }

    #[test]
    fn user_operations_keep_the_operand_order() {
        // Matrix-like non-commutative op: string concatenation on bytes.
        let op = UserOperation::associative(|a: &[u32], b: &mut [u32]| {
            for (x, y) in b.iter_mut().zip(a) {
                *x += y * 10;
            }
        });
        assert!(!Operation::<u32>::is_commutative(&op));
        let mut v = [2u32];
        op.apply(&[1], &mut v);
        assert_eq!(v, [12], "input (lower ranks) goes on the left");
    }
}
