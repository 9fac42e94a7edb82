//! Checked access to what C passes by pointer.

use std::ffi::c_int;

use crate::consts::*;
use crate::error::{fail, Fail};

/// Write `v` through `p` (an output argument); `MPI_ERR_ARG` if null.
pub fn out<T>(p: *mut T, v: T, what: &str) -> Result<(), Fail> {
    if p.is_null() {
        return fail(MPI_ERR_ARG, format!("{what} is NULL"));
    }
    // SAFETY: non-null, and MPI requires an output argument to point to a
    // writable object of its type.
    unsafe { p.write(v) };
    Ok(())
}

/// Read `*p` (an input argument); `MPI_ERR_ARG` if null.
pub fn read<T: Copy>(p: *const T, what: &str) -> Result<T, Fail> {
    if p.is_null() {
        return fail(MPI_ERR_ARG, format!("{what} is NULL"));
    }
    // SAFETY: non-null, and MPI requires it to point to a readable object.
    Ok(unsafe { p.read() })
}

/// The class of a null array argument: `MPI_ERR_BUFFER` for a message
/// buffer (the arguments `mpi.h` names `buf`, `sendbuf`, `buffer`,
/// `origin_addr`, ...), as MPICH reports it, `MPI_ERR_ARG` for the others
/// (counts, ranks, displacements).
fn null_class(what: &str) -> c_int {
    if what.ends_with("buf") || what.ends_with("buffer") || what.ends_with("_addr") {
        MPI_ERR_BUFFER
    } else {
        MPI_ERR_ARG
    }
}

/// `n` elements at `p`; an error if `p` is null while `n > 0`
/// ([`null_class`]).
pub fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return fail(null_class(what), format!("{what} is NULL"));
    }
    // SAFETY: MPI requires `p` to point to `n` readable elements for the
    // duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `n` writable elements at `p`.
pub fn slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T], Fail> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return fail(null_class(what), format!("{what} is NULL"));
    }
    // SAFETY: MPI requires `p` to point to `n` writable elements, not
    // aliased by another argument, for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// A count argument as `usize`; `MPI_ERR_COUNT` if negative.
pub fn count(n: c_int) -> Result<usize, Fail> {
    usize::try_from(n).map_err(|_| Fail::new(MPI_ERR_COUNT, format!("negative count {n}")))
}

/// True for `MPI_STATUS_IGNORE` / `MPI_STATUSES_IGNORE` (and NULL).
pub fn ignored(s: *const MpiStatus) -> bool {
    s.is_null() || s as usize == STATUS_IGNORE_ADDR
}

/// True for `MPI_IN_PLACE`.
pub fn in_place<T>(p: *const T) -> bool {
    p as usize == IN_PLACE_ADDR
}

/// Copy a Rust string into a C buffer of `cap` bytes, NUL-terminated;
/// its length (without the NUL) through `len`.
pub fn c_string(
    dst: *mut std::ffi::c_char,
    cap: usize,
    s: &str,
    len: *mut c_int,
) -> Result<(), Fail> {
    let buf = slice_mut(dst.cast::<u8>(), cap, "the string argument")?;
    let n = s.len().min(cap.saturating_sub(1));
    buf[..n].copy_from_slice(&s.as_bytes()[..n]);
    if let Some(b) = buf.get_mut(n) {
        *b = 0;
    }
    out(len, n as c_int, "resultlen")
}
