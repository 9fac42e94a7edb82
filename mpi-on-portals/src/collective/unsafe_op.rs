//! User operations given as C functions (`MPI_Op_create` with an
//! `MPI_User_function`; rsmpi's `UnsafeUserOperation`).

use std::ffi::{c_int, c_void};

use super::Operation;
use crate::ffi::MPI_Datatype;

/// An `MPI_User_function`: `inoutvec[i] = invec[i] op inoutvec[i]` for
/// `*len` elements. The datatype argument is always null here (datatypes
/// are Rust types, not handles).
pub type UserFunction = unsafe extern "C" fn(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    datatype: *mut MPI_Datatype,
);

/// A reduction operation given as a C function.
#[derive(Clone, Copy, Debug)]
pub struct UnsafeUserOperation {
    f: UserFunction,
    commutative: bool,
}

impl UnsafeUserOperation {
    /// A commutative operation.
    ///
    /// # Safety
    /// `f` must read `*len` elements of the reduced type at `invec`, write
    /// at most `*len` at `inoutvec`, and not use the datatype argument
    /// (null).
    pub unsafe fn commutative(f: UserFunction) -> Self {
        UnsafeUserOperation {
            f,
            commutative: true,
        }
    }

    /// A non-commutative operation: contributions are combined in rank
    /// order.
    ///
    /// # Safety
    /// As for [`UnsafeUserOperation::commutative`].
    pub unsafe fn non_commutative(f: UserFunction) -> Self {
        UnsafeUserOperation {
            f,
            commutative: false,
        }
    }
}

impl<T> Operation<T> for UnsafeUserOperation {
    fn is_commutative(&self) -> bool {
        self.commutative
    }

    fn apply(&self, input: &[T], inout: &mut [T]) {
        let n = input.len().min(inout.len());
        // The reduction runs in chunks a C int can count.
        let chunk = usize::try_from(c_int::MAX).unwrap_or(usize::MAX);
        let mut done = 0;
        while done < n {
            let step = (n - done).min(chunk);
            let mut len = c_int::try_from(step).unwrap_or(c_int::MAX);
            // SAFETY: the constructor's contract: `f` reads `len` elements
            // of T at the first pointer and writes `len` at the second;
            // both slices hold at least `done + step` elements.
            unsafe {
                (self.f)(
                    input[done..].as_ptr() as *mut c_void,
                    inout[done..].as_mut_ptr() as *mut c_void,
                    &mut len,
                    std::ptr::null_mut(),
                );
            }
            done += step;
        }
    }
}
