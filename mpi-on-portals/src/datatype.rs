//! Datatypes: any plain-old-data type is an MPI datatype here.
//!
//! rsmpi derives `Equivalence` for types with an MPI datatype; in this
//! library every [`bytemuck::Pod`] type qualifies, so numbers, arrays of
//! numbers and `#[derive(Pod, Zeroable)] #[repr(C)]` structs can be sent as
//! they are. Buffers are slices, vectors and arrays of them, and single
//! values of the primitive types.

use bytemuck::Pod;

/// A type whose values can be sent as their bytes.
pub trait Equivalence: Pod + Send + Sync {}

impl<T: Pod + Send + Sync> Equivalence for T {}

/// Something that can be sent: a value, a slice, a vector or an array of
/// [`Equivalence`] elements.
pub trait Buffer {
    /// The bytes to send.
    fn as_bytes(&self) -> &[u8];
}

/// Something that can be received into.
pub trait BufferMut {
    /// The bytes to receive into.
    fn as_bytes_mut(&mut self) -> &mut [u8];
}

macro_rules! scalar_buffers {
    ($($t:ty),*) => {$(
        impl Buffer for $t {
            fn as_bytes(&self) -> &[u8] {
                bytemuck::bytes_of(self)
            }
        }
        impl BufferMut for $t {
            fn as_bytes_mut(&mut self) -> &mut [u8] {
                bytemuck::bytes_of_mut(self)
            }
        }
    )*};
}

// Single values of the primitive types; other `Pod` values go as
// `std::slice::from_ref(&value)`.
scalar_buffers!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

impl<T: Equivalence, const N: usize> Buffer for [T; N] {
    fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

impl<T: Equivalence, const N: usize> BufferMut for [T; N] {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
}

impl<T: Equivalence> Buffer for [T] {
    fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

impl<T: Equivalence> BufferMut for [T] {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
}

impl<T: Equivalence> Buffer for Vec<T> {
    fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

impl<T: Equivalence> BufferMut for Vec<T> {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
}
