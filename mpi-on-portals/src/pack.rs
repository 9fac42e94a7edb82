//! `MPI_Pack` and `MPI_Unpack`: a buffer's packed form. Every datatype
//! here is plain old data laid out contiguously, so the packed form is the
//! buffer's bytes, and unpacking any bytes of the right length gives valid
//! values.

use crate::datatype::{Buffer, BufferMut};
use crate::error::{MpiError, Result};

/// Append-free packing: copy `inbuf`'s bytes into `outbuf` at `position`;
/// the position after them.
pub(crate) fn pack_into<B: Buffer + ?Sized>(
    inbuf: &B,
    outbuf: &mut [u8],
    position: usize,
) -> Result<usize> {
    let bytes = inbuf.as_bytes();
    let end = position
        .checked_add(bytes.len())
        .filter(|&e| e <= outbuf.len())
        .ok_or(MpiError::InvalidBuffer(
            "pack_into: the packed data does not fit the output buffer",
        ))?;
    portals_copy::copy(&mut outbuf[position..end], bytes);
    Ok(end)
}

/// Fill `outbuf` from `inbuf` at `position`; the position after the bytes
/// used.
pub(crate) fn unpack_into<B: BufferMut + ?Sized>(
    inbuf: &[u8],
    outbuf: &mut B,
    position: usize,
) -> Result<usize> {
    let out = outbuf.as_bytes_mut();
    let end = position
        .checked_add(out.len())
        .filter(|&e| e <= inbuf.len())
        .ok_or(MpiError::InvalidBuffer(
            "unpack_into: the packed data is shorter than the output buffer",
        ))?;
    portals_copy::copy(out, &inbuf[position..end]);
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_then_unpack_round_trips_and_checks_lengths() {
        let mut packed = vec![0u8; 12];
        let p = pack_into(&[3i32, 2][..], &mut packed, 0).unwrap();
        let p = pack_into(&1i32, &mut packed, p).unwrap();
        assert_eq!(p, 12);
        assert!(pack_into(&1i32, &mut packed, 10).is_err());
        let mut back = [0i32; 3];
        assert_eq!(unpack_into(&packed, &mut back[..], 0).unwrap(), 12);
        assert_eq!(back, [3, 2, 1]);
        assert!(unpack_into(&packed, &mut back[..], 4).is_err());
        assert!(pack_into(&1i32, &mut packed, usize::MAX).is_err());
    }
}
