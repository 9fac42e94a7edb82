//! Scatter/gather memory (`PTL_MD_IOVEC`): a descriptor whose memory is a
//! list of segments, addressed as one logical buffer — their concatenation
//! in list order. Offsets, lengths, truncation, the threshold and the
//! high-water mark all apply to that logical buffer; only the bytes' homes
//! differ.
//!
//! The list is checked once, when the descriptor is created
//! ([`crate::Engine::md_bind_iovec`], [`crate::NetworkInterface::md_bind_iovec_raw`]): at most
//! [`crate::NiLimits::max_iovecs`] segments, none empty, none (raw) null or
//! longer than `isize::MAX`, and a total that fits `u64` and `usize`.
//! Anything else is an [`IovecError`], before any segment is touched.
//! Zero-length segments are refused rather than skipped (our choice; the
//! 3.3 `ptl_md_iovec_t` is just a base and a length): a caller that builds
//! one has most likely miscounted, and refusing keeps every table entry a
//! real byte range, so that finding the segment of an offset is one binary
//! search and a transport never builds an empty `iovec`. An empty list is
//! fine: a descriptor of length zero.

use crate::engine::Region;
use crate::error::IovecError;

/// One segment of caller memory, for the raw iovec calls
/// ([`crate::NetworkInterface::md_bind_iovec_raw`]); Portals 3.3's
/// `ptl_md_iovec_t`. Laid out like the C `struct iovec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iovec {
    /// Address of the segment's first byte.
    pub base: *mut u8,
    /// Length of the segment in bytes (not zero).
    pub len: usize,
}

impl Iovec {
    /// A segment of `len` bytes at `base`.
    pub fn new(base: *mut u8, len: usize) -> Iovec {
        Iovec { base, len }
    }

    fn of_vec(v: &mut Vec<u8>) -> Iovec {
        Iovec::new(v.as_mut_ptr(), v.len())
    }

    /// The segment covering `buf`.
    pub fn from_slice(buf: &mut [u8]) -> Iovec {
        Iovec {
            base: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }
}

/// One entry of a descriptor's segment table: where the segment is, and
/// where it ends in the logical buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
    /// Logical offset one past the segment's last byte.
    pub(crate) end: u64,
}

/// The memory of an iovec descriptor. The table's heap buffer never moves
/// or changes while the descriptor exists, so regions lent to a transport
/// may point into it (see [`Region`]).
pub(crate) struct Segments {
    table: Vec<Seg>,
    /// The buffers behind `table` when the engine owns them (safe API);
    /// `None` for caller memory (raw API).
    owned: Option<Vec<Vec<u8>>>,
    len: u64,
}

/// Check a list's shape and return its total length.
fn check<I>(count: usize, limit: usize, segs: I) -> Result<u64, IovecError>
where
    I: Iterator<Item = Iovec>,
{
    if count > limit {
        return Err(IovecError::TooManySegments { count, limit });
    }
    let mut total = 0u64;
    for (index, s) in segs.enumerate() {
        if s.len == 0 {
            return Err(IovecError::EmptySegment { index });
        }
        if s.base.is_null() {
            return Err(IovecError::NullSegment { index });
        }
        if s.len > isize::MAX as usize {
            return Err(IovecError::SegmentTooLong { index });
        }
        total = total
            .checked_add(s.len as u64)
            .filter(|&t| t <= usize::MAX as u64)
            .ok_or(IovecError::LengthOverflow { index })?;
    }
    Ok(total)
}

impl Segments {
    /// Segments the engine owns (and hands back on unlink).
    pub(crate) fn owned(mut bufs: Vec<Vec<u8>>, limit: usize) -> Result<Segments, IovecError> {
        // `as_mut_ptr` does not create a reference to the bytes, so the
        // pointers stay good while the vectors are moved around whole.
        let count = bufs.len();
        let len = check(count, limit, bufs.iter_mut().map(Iovec::of_vec))?;
        let table = build(bufs.iter_mut().map(Iovec::of_vec));
        Ok(Segments {
            table,
            owned: Some(bufs),
            len,
        })
    }

    /// Segments of caller memory. Only the list is read here; the memory
    /// itself is not touched.
    pub(crate) fn raw(list: &[Iovec], limit: usize) -> Result<Segments, IovecError> {
        let len = check(list.len(), limit, list.iter().copied())?;
        Ok(Segments {
            table: build(list.iter().copied()),
            owned: None,
            len,
        })
    }

    /// Total length: the length of the logical buffer.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Address of the first segment (0 for an empty list).
    pub(crate) fn first_addr(&self) -> usize {
        self.table.first().map_or(0, |s| s.base as usize)
    }

    pub(crate) fn is_owned(&self) -> bool {
        self.owned.is_some()
    }

    pub(crate) fn into_owned(self) -> Option<Vec<Vec<u8>>> {
        self.owned
    }

    /// The `len` bytes at logical offset `start` (the caller checked that
    /// they lie inside). A range inside one segment is a contiguous region.
    pub(crate) fn region(&self, start: u64, len: usize) -> Region {
        if len == 0 {
            return Region::empty();
        }
        let i = self.table.partition_point(|s| s.end <= start);
        let s = self.table[i];
        let off = (start - (s.end - s.len as u64)) as usize;
        let head = s.len - off;
        let ptr = s.base.wrapping_add(off);
        if head >= len {
            Region::contiguous(ptr, len)
        } else {
            Region::scattered(ptr, len, head, &self.table[i..], start)
        }
    }
}

fn build(list: impl Iterator<Item = Iovec>) -> Vec<Seg> {
    let mut end = 0u64;
    list.map(|s| {
        end += s.len as u64;
        Seg {
            base: s.base,
            len: s.len,
            end,
        }
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_checked_in_order() {
        let mut a = [0u8; 4];
        let ok = Iovec::from_slice(&mut a);
        let dangling = std::ptr::NonNull::<u8>::dangling().as_ptr();
        assert_eq!(Segments::raw(&[ok, ok], 2).map(|s| s.len()), Ok(8));
        assert_eq!(
            Segments::raw(&[ok, ok, ok], 2).err(),
            Some(IovecError::TooManySegments { count: 3, limit: 2 })
        );
        assert_eq!(
            Segments::raw(&[ok, Iovec::new(dangling, 0)], 8).err(),
            Some(IovecError::EmptySegment { index: 1 })
        );
        assert_eq!(
            Segments::raw(&[Iovec::new(std::ptr::null_mut(), 3)], 8).err(),
            Some(IovecError::NullSegment { index: 0 })
        );
        assert_eq!(
            Segments::raw(&[ok, Iovec::new(dangling, usize::MAX)], 8).err(),
            Some(IovecError::SegmentTooLong { index: 1 })
        );
        let huge = Iovec::new(dangling, isize::MAX as usize);
        assert_eq!(
            Segments::raw(&[ok, huge, huge], 8).err(),
            Some(IovecError::LengthOverflow { index: 2 })
        );
        assert_eq!(Segments::raw(&[], 8).map(|s| s.len()), Ok(0));
    }

    #[test]
    fn regions_map_logical_offsets_to_segments() {
        let s = Segments::owned(vec![vec![0; 3], vec![1; 5], vec![2; 2]], 8).unwrap();
        assert_eq!(s.len(), 10);
        // Inside one segment: contiguous.
        assert!(s.region(3, 5).is_contiguous());
        assert!(s.region(4, 2).is_contiguous());
        // Across boundaries.
        let r = s.region(2, 7);
        assert!(!r.is_contiguous());
        // SAFETY: the segments are alive and nobody else uses them.
        let lens: Vec<usize> = unsafe { r.pieces() }.map(|(_, n)| n).collect();
        assert_eq!(lens, [1, 5, 1]);
        let mut out = [9u8; 7];
        // SAFETY: as above.
        unsafe { r.read_at(0, &mut out) };
        assert_eq!(out, [0, 1, 1, 1, 1, 1, 2]);
        // SAFETY: as above.
        let lens: Vec<usize> = unsafe { r.pieces_from(3) }.map(|(_, n)| n).collect();
        assert_eq!(lens, [3, 1]);
        // SAFETY: as above.
        unsafe { r.write_at(5, &[7, 8]) };
        // SAFETY: as above.
        unsafe { r.read_at(0, &mut out) };
        assert_eq!(out, [0, 1, 1, 1, 1, 7, 8]);
        assert_eq!(s.region(0, 0).len(), 0);
    }
}
