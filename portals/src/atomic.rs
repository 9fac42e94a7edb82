//! Portals 4 atomic operations: the operations ([`AtomicOp`]), the element
//! types they work on ([`Datatype`]), the check of an operation before it
//! is sent or applied ([`check`]) and the pure function that applies one to
//! target bytes ([`apply`]).
//!
//! Everything here works on little-endian byte slices (the wire order) and
//! is alignment-free: elements are read with `from_le_bytes` from byte
//! copies, so a target offset need not be a multiple of the element size.
//! Nothing allocates and nothing panics on any input: [`apply`] refuses
//! what [`check`] refuses.
//!
//! Which operations take which types (anything else is
//! [`AtomicError::Unsupported`]):
//!
//! | operation | integers | `F32`/`F64` | complex |
//! |-----------|:-:|:-:|:-:|
//! | `Sum`, `Prod` | yes | yes | yes |
//! | `Min`, `Max` | yes | yes | no |
//! | `Lor`, `Land`, `Lxor`, `Bor`, `Band`, `Bxor`, `Mswap` | yes | no | no |
//! | `Swap`, `Cswap`, `CswapNe` | yes | yes | yes |
//! | `CswapLe`, `CswapLt`, `CswapGe`, `CswapGt` | yes | yes | no |

/// An atomic operation (`ptl_op_t`). For every element `t` of the target,
/// `s` of the source (the initiator's put descriptor) and, for the
/// conditional and masked swaps, the one-element operand `o`, the target
/// becomes:
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AtomicOp {
    /// `min(t, s)`.
    Min = 0,
    /// `max(t, s)`.
    Max = 1,
    /// `t + s` (integers wrap).
    Sum = 2,
    /// `t * s` (integers wrap).
    Prod = 3,
    /// Logical or: `1` if `t != 0 || s != 0`, else `0`.
    Lor = 4,
    /// Logical and: `1` if `t != 0 && s != 0`, else `0`.
    Land = 5,
    /// Bitwise or.
    Bor = 6,
    /// Bitwise and.
    Band = 7,
    /// Logical exclusive or: `1` if exactly one of `t`, `s` is non-zero.
    Lxor = 8,
    /// Bitwise exclusive or.
    Bxor = 9,
    /// `s` (replace; `PTL_SWAP`, MPI's `MPI_REPLACE`).
    Swap = 10,
    /// `s` if `o == t` (compare and swap).
    Cswap = 11,
    /// `s` if `o != t`.
    CswapNe = 12,
    /// `s` if `o <= t`.
    CswapLe = 13,
    /// `s` if `o < t`.
    CswapLt = 14,
    /// `s` if `o >= t`.
    CswapGe = 15,
    /// `s` if `o > t`.
    CswapGt = 16,
    /// `(t & !o) | (s & o)`: the bits the mask `o` selects come from `s`.
    Mswap = 17,
}

impl AtomicOp {
    /// Every operation, in code order.
    pub const ALL: [AtomicOp; 18] = [
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Sum,
        AtomicOp::Prod,
        AtomicOp::Lor,
        AtomicOp::Land,
        AtomicOp::Bor,
        AtomicOp::Band,
        AtomicOp::Lxor,
        AtomicOp::Bxor,
        AtomicOp::Swap,
        AtomicOp::Cswap,
        AtomicOp::CswapNe,
        AtomicOp::CswapLe,
        AtomicOp::CswapLt,
        AtomicOp::CswapGe,
        AtomicOp::CswapGt,
        AtomicOp::Mswap,
    ];

    /// The operation with wire code `v`.
    pub fn from_u8(v: u8) -> Option<AtomicOp> {
        Self::ALL.get(v as usize).copied()
    }

    /// True for the operations that need an operand (the comparison value
    /// of the conditional swaps, the mask of `Mswap`). They work on exactly
    /// one element and only through a swap (`PtlSwap`).
    pub const fn needs_operand(&self) -> bool {
        matches!(
            self,
            AtomicOp::Cswap
                | AtomicOp::CswapNe
                | AtomicOp::CswapLe
                | AtomicOp::CswapLt
                | AtomicOp::CswapGe
                | AtomicOp::CswapGt
                | AtomicOp::Mswap
        )
    }
}

/// The element type of an atomic operation (`ptl_datatype_t`). On the wire
/// and in memory every element is little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Datatype {
    /// `i8`.
    I8 = 0,
    /// `u8`.
    U8 = 1,
    /// `i16`.
    I16 = 2,
    /// `u16`.
    U16 = 3,
    /// `i32`.
    I32 = 4,
    /// `u32`.
    U32 = 5,
    /// `i64`.
    I64 = 6,
    /// `u64`.
    U64 = 7,
    /// `f32` (IEEE 754 binary32).
    F32 = 8,
    /// `f64` (IEEE 754 binary64).
    F64 = 9,
    /// A complex number: two `f32`, real part first.
    ComplexF32 = 10,
    /// A complex number: two `f64`, real part first.
    ComplexF64 = 11,
}

impl Datatype {
    /// Every type, in code order.
    pub const ALL: [Datatype; 12] = [
        Datatype::I8,
        Datatype::U8,
        Datatype::I16,
        Datatype::U16,
        Datatype::I32,
        Datatype::U32,
        Datatype::I64,
        Datatype::U64,
        Datatype::F32,
        Datatype::F64,
        Datatype::ComplexF32,
        Datatype::ComplexF64,
    ];

    /// The type with wire code `v`.
    pub fn from_u8(v: u8) -> Option<Datatype> {
        Self::ALL.get(v as usize).copied()
    }

    /// Bytes per element.
    pub const fn size(&self) -> usize {
        match self {
            Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 | Datatype::ComplexF32 => 8,
            Datatype::ComplexF64 => 16,
        }
    }

    const fn is_integer(&self) -> bool {
        (*self as u8) <= Datatype::U64 as u8
    }

    const fn is_complex(&self) -> bool {
        matches!(self, Datatype::ComplexF32 | Datatype::ComplexF64)
    }
}

/// An atomic operation on elements of a type: what an atomic request does
/// to each element of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicSpec {
    /// The operation.
    pub op: AtomicOp,
    /// The element type.
    pub datatype: Datatype,
}

impl AtomicSpec {
    /// Bytes of operand in front of the source elements: one element for
    /// the operations that take an operand, none otherwise.
    pub const fn operand_len(&self) -> u64 {
        if self.op.needs_operand() {
            self.datatype.size() as u64
        } else {
            0
        }
    }
}

/// Whether `op` is defined on `datatype` (the table in the module docs).
pub const fn supported(op: AtomicOp, datatype: Datatype) -> bool {
    use AtomicOp::*;
    match op {
        Sum | Prod | Swap | Cswap | CswapNe => true,
        Min | Max | CswapLe | CswapLt | CswapGe | CswapGt => !datatype.is_complex(),
        Lor | Land | Lxor | Bor | Band | Bxor | Mswap => datatype.is_integer(),
    }
}

/// Why an atomic operation cannot be carried out. Nothing was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AtomicError {
    /// The operation is not defined on the type (bitwise or logical
    /// operations on floating point, ordering of complex numbers).
    #[error("atomic {op:?} is not defined on {datatype:?}")]
    Unsupported {
        /// The operation.
        op: AtomicOp,
        /// The type.
        datatype: Datatype,
    },
    /// The length is zero or not a multiple of the element size, or (for
    /// an operation with an operand) not exactly one element.
    #[error("atomic length {length} does not fit {datatype:?} ({elements})")]
    BadLength {
        /// The length asked for.
        length: u64,
        /// The type.
        datatype: Datatype,
        /// What the length must be.
        elements: &'static str,
    },
    /// The length exceeds the interface's `max_atomic_size`.
    #[error("atomic length {length} exceeds the limit of {max} bytes")]
    TooLarge {
        /// The length asked for.
        length: u64,
        /// The limit ([`crate::NiLimits::max_atomic_size`]).
        max: u64,
    },
    /// An operation with an operand came without one, or one without an
    /// operand came with one, or the operand is not one element long.
    #[error("atomic {op:?} operand: {why}")]
    Operand {
        /// The operation.
        op: AtomicOp,
        /// What is wrong.
        why: &'static str,
    },
}

/// Check an atomic operation of `length` bytes against the type table and
/// the size limit `max`. Called by the initiator before anything is lent
/// and by the target before anything is matched.
pub fn check(op: AtomicOp, datatype: Datatype, length: u64, max: u64) -> Result<(), AtomicError> {
    if !supported(op, datatype) {
        return Err(AtomicError::Unsupported { op, datatype });
    }
    let size = datatype.size() as u64;
    if op.needs_operand() {
        if length != size {
            return Err(AtomicError::BadLength {
                length,
                datatype,
                elements: "exactly one element for a conditional or masked swap",
            });
        }
    } else if length == 0 || length % size != 0 {
        return Err(AtomicError::BadLength {
            length,
            datatype,
            elements: "a positive multiple of the element size",
        });
    }
    if length > max {
        return Err(AtomicError::TooLarge { length, max });
    }
    Ok(())
}

/// Apply `op` on `datatype` elements: for each element, `target` receives
/// the result and `source` receives the target's old value (what a fetch
/// returns). `operand` is the one-element comparison value or mask of the
/// operations that need one ([`AtomicOp::needs_operand`]).
///
/// Refuses (and changes nothing) what [`check`] refuses without a limit,
/// slices of different lengths, and a missing, extra or wrongly sized
/// operand.
pub fn apply(
    op: AtomicOp,
    datatype: Datatype,
    target: &mut [u8],
    source: &mut [u8],
    operand: Option<&[u8]>,
) -> Result<(), AtomicError> {
    check(op, datatype, target.len() as u64, u64::MAX)?;
    if source.len() != target.len() {
        return Err(AtomicError::BadLength {
            length: source.len() as u64,
            datatype,
            elements: "the target's length",
        });
    }
    let operand = match (op.needs_operand(), operand) {
        (true, Some(o)) if o.len() == datatype.size() => o,
        (true, Some(_)) => {
            return Err(AtomicError::Operand {
                op,
                why: "not one element long",
            })
        }
        (true, None) => return Err(AtomicError::Operand { op, why: "missing" }),
        (false, Some(_)) => {
            return Err(AtomicError::Operand {
                op,
                why: "not taken by this operation",
            })
        }
        (false, None) => &[][..],
    };
    match datatype {
        Datatype::I8 => each_int::<i8, 1>(op, target, source, operand),
        Datatype::U8 => each_int::<u8, 1>(op, target, source, operand),
        Datatype::I16 => each_int::<i16, 2>(op, target, source, operand),
        Datatype::U16 => each_int::<u16, 2>(op, target, source, operand),
        Datatype::I32 => each_int::<i32, 4>(op, target, source, operand),
        Datatype::U32 => each_int::<u32, 4>(op, target, source, operand),
        Datatype::I64 => each_int::<i64, 8>(op, target, source, operand),
        Datatype::U64 => each_int::<u64, 8>(op, target, source, operand),
        Datatype::F32 => each_float::<f32, 4>(op, target, source, operand),
        Datatype::F64 => each_float::<f64, 8>(op, target, source, operand),
        Datatype::ComplexF32 => each_complex::<f32, 4, 8>(op, target, source, operand),
        Datatype::ComplexF64 => each_complex::<f64, 8, 16>(op, target, source, operand),
    }
    Ok(())
}

/// An element type: conversion from and to little-endian bytes.
trait Elem<const N: usize>: Copy + PartialOrd {
    fn from_le(b: [u8; N]) -> Self;
    fn to_le(self) -> [u8; N];
}

/// The integer operations.
trait Int<const N: usize>: Elem<N> {
    const ZERO: Self;
    const ONE: Self;
    fn wsum(self, o: Self) -> Self;
    fn wprod(self, o: Self) -> Self;
    fn bor(self, o: Self) -> Self;
    fn band(self, o: Self) -> Self;
    fn bxor(self, o: Self) -> Self;
    fn bnot(self) -> Self;
}

/// The floating-point operations.
trait Float<const N: usize>: Elem<N> + std::ops::Add<Output = Self> {
    fn mul(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
}

macro_rules! elem {
    ($t:ty, $n:literal) => {
        impl Elem<$n> for $t {
            fn from_le(b: [u8; $n]) -> Self {
                <$t>::from_le_bytes(b)
            }
            fn to_le(self) -> [u8; $n] {
                self.to_le_bytes()
            }
        }
    };
}

macro_rules! int {
    ($($t:ty, $n:literal);*) => {$(
        elem!($t, $n);
        impl Int<$n> for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn wsum(self, o: Self) -> Self { self.wrapping_add(o) }
            fn wprod(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn bor(self, o: Self) -> Self { self | o }
            fn band(self, o: Self) -> Self { self & o }
            fn bxor(self, o: Self) -> Self { self ^ o }
            fn bnot(self) -> Self { !self }
        }
    )*};
}

int!(i8, 1; u8, 1; i16, 2; u16, 2; i32, 4; u32, 4; i64, 8; u64, 8);

macro_rules! float {
    ($($t:ty, $n:literal);*) => {$(
        elem!($t, $n);
        impl Float<$n> for $t {
            fn mul(self, o: Self) -> Self { self * o }
            fn sub(self, o: Self) -> Self { self - o }
        }
    )*};
}

float!(f32, 4; f64, 8);

fn read<T: Elem<N>, const N: usize>(b: &[u8]) -> T {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    T::from_le(a)
}

/// The comparison of a conditional swap: operand `o` against target `t`.
fn swap_if<T: PartialOrd>(op: AtomicOp, o: T, t: T) -> bool {
    match op {
        AtomicOp::Cswap => o == t,
        AtomicOp::CswapNe => o != t,
        AtomicOp::CswapLe => o <= t,
        AtomicOp::CswapLt => o < t,
        AtomicOp::CswapGe => o >= t,
        AtomicOp::CswapGt => o > t,
        _ => true,
    }
}

/// Run `f(t, s)` over each element pair; the target gets its result, the
/// source the old target.
fn each<T: Elem<N>, const N: usize>(target: &mut [u8], source: &mut [u8], f: impl Fn(T, T) -> T) {
    for (t, s) in target.chunks_exact_mut(N).zip(source.chunks_exact_mut(N)) {
        let old = read::<T, N>(t);
        let new = f(old, read::<T, N>(s));
        t.copy_from_slice(&new.to_le());
        s.copy_from_slice(&old.to_le());
    }
}

fn truth<T: Int<N>, const N: usize>(b: bool) -> T {
    if b {
        T::ONE
    } else {
        T::ZERO
    }
}

fn each_int<T: Int<N>, const N: usize>(
    op: AtomicOp,
    target: &mut [u8],
    source: &mut [u8],
    operand: &[u8],
) {
    use AtomicOp::*;
    let nz = |v: T| v != T::ZERO;
    match op {
        Min => each::<T, N>(target, source, |t, s| if s < t { s } else { t }),
        Max => each::<T, N>(target, source, |t, s| if s > t { s } else { t }),
        Sum => each::<T, N>(target, source, T::wsum),
        Prod => each::<T, N>(target, source, T::wprod),
        Lor => each::<T, N>(target, source, |t, s| truth(nz(t) || nz(s))),
        Land => each::<T, N>(target, source, |t, s| truth(nz(t) && nz(s))),
        Lxor => each::<T, N>(target, source, |t, s| truth(nz(t) != nz(s))),
        Bor => each::<T, N>(target, source, T::bor),
        Band => each::<T, N>(target, source, T::band),
        Bxor => each::<T, N>(target, source, T::bxor),
        Swap => each::<T, N>(target, source, |_, s| s),
        Mswap => {
            let m = read::<T, N>(operand);
            each::<T, N>(target, source, |t, s| t.band(m.bnot()).bor(s.band(m)))
        }
        Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt => {
            let o = read::<T, N>(operand);
            each::<T, N>(target, source, |t, s| if swap_if(op, o, t) { s } else { t })
        }
    }
}

fn each_float<T: Float<N>, const N: usize>(
    op: AtomicOp,
    target: &mut [u8],
    source: &mut [u8],
    operand: &[u8],
) {
    use AtomicOp::*;
    match op {
        // A NaN source never replaces the target (the comparison is false),
        // a NaN target is kept: the same rule as the integers' `s < t`.
        Min => each::<T, N>(target, source, |t, s| if s < t { s } else { t }),
        Max => each::<T, N>(target, source, |t, s| if s > t { s } else { t }),
        Sum => each::<T, N>(target, source, |t, s| t + s),
        Prod => each::<T, N>(target, source, T::mul),
        Swap => each::<T, N>(target, source, |_, s| s),
        Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt => {
            let o = read::<T, N>(operand);
            each::<T, N>(target, source, |t, s| if swap_if(op, o, t) { s } else { t })
        }
        // Refused by `check` before we get here.
        Lor | Land | Lxor | Bor | Band | Bxor | Mswap => {}
    }
}

/// Complex elements of `2 * H` bytes: real part, then imaginary part.
fn each_complex<T: Float<H>, const H: usize, const N: usize>(
    op: AtomicOp,
    target: &mut [u8],
    source: &mut [u8],
    operand: &[u8],
) {
    let pair = |b: &[u8]| (read::<T, H>(b), read::<T, H>(&b[H..]));
    let cond = |t: (T, T)| match op {
        AtomicOp::Cswap => pair(operand) == t,
        AtomicOp::CswapNe => pair(operand) != t,
        _ => true,
    };
    for (t, s) in target.chunks_exact_mut(N).zip(source.chunks_exact_mut(N)) {
        let (tr, ti) = pair(t);
        let (sr, si) = pair(s);
        let (nr, ni) = match op {
            AtomicOp::Sum => (tr + sr, ti + si),
            AtomicOp::Prod => (tr.mul(sr).sub(ti.mul(si)), tr.mul(si) + ti.mul(sr)),
            AtomicOp::Swap | AtomicOp::Cswap | AtomicOp::CswapNe => {
                if cond((tr, ti)) {
                    (sr, si)
                } else {
                    (tr, ti)
                }
            }
            // Refused by `check` before we get here.
            _ => (tr, ti),
        };
        s[..N].copy_from_slice(&t[..N]);
        t[..H].copy_from_slice(&nr.to_le());
        t[H..N].copy_from_slice(&ni.to_le());
    }
}

#[cfg(test)]
mod tests;
