//! [`Region`]: descriptor memory lent to the transport, as one range or —
//! for an iovec descriptor whose range crosses segment boundaries — a short
//! walk over the descriptor's segment table. Either way the region is a
//! handful of words built without allocating; a transport reads or writes
//! it in place, piece by piece ([`Region::pieces`]), with vectored system
//! calls ([`Region::io_slices`], [`Region::io_slices_mut`]) or with the
//! offset-mapping copies ([`Region::write_at`], [`Region::read_at`]).

use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;

use crate::md::iovec::Seg;

/// A region of descriptor memory lent to the transport: `len()` bytes of
/// the descriptor's logical buffer, which for an iovec descriptor may span
/// several segments ([`Region::is_contiguous`] is then false).
///
/// Created only by the engine; valid until the token it came with is
/// completed (see the module docs of [`crate::engine`]).
pub struct Region {
    /// The first byte.
    ptr: *mut u8,
    /// Total length.
    len: usize,
    /// Bytes of the first piece (`len` for a contiguous region).
    head: usize,
    /// The descriptor's segment table from the first piece's segment on;
    /// null for a contiguous region.
    segs: *const Seg,
    /// Entries of `segs`.
    nsegs: usize,
    /// Logical offset of the first byte in the descriptor.
    start: u64,
}

// SAFETY: a `Region` names memory (and, when scattered, a segment table)
// that the engine keeps alive and reserved for the token holder until
// completion; which thread performs the transfer does not matter.
unsafe impl Send for Region {}

impl Region {
    /// An empty region (for transports that need a placeholder).
    pub fn empty() -> Region {
        Region::contiguous(std::ptr::NonNull::dangling().as_ptr(), 0)
    }

    pub(crate) fn contiguous(ptr: *mut u8, len: usize) -> Region {
        Region {
            ptr,
            len,
            head: len,
            segs: std::ptr::null(),
            nsegs: 0,
            start: 0,
        }
    }

    /// `len` bytes from `ptr`, of which the first `head` lie in `segs[0]`
    /// and the rest in the segments after it.
    pub(crate) fn scattered(
        ptr: *mut u8,
        len: usize,
        head: usize,
        segs: &[Seg],
        start: u64,
    ) -> Region {
        debug_assert!(head < len && segs.len() > 1);
        Region {
            ptr,
            len,
            head,
            segs: segs.as_ptr(),
            nsegs: segs.len(),
            start,
        }
    }

    /// Address of the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if the region is one range of memory (`as_ptr()..as_ptr() +
    /// len()`): always for ordinary descriptors, and for a range of an iovec
    /// descriptor that lies inside one segment.
    pub fn is_contiguous(&self) -> bool {
        self.segs.is_null()
    }

    /// The region as a byte slice, for sending.
    ///
    /// # Panics
    /// If the region is not contiguous (use [`Region::pieces`] or
    /// [`Region::io_slices`]).
    ///
    /// # Safety
    /// The token that came with the region must not have been completed yet,
    /// and nothing may write the region while the slice lives (true for
    /// regions lent for sending: the engine reserves them).
    pub unsafe fn as_slice(&self) -> &[u8] {
        assert!(
            self.is_contiguous(),
            "Region::as_slice on a scattered region"
        );
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the engine guarantees ptr..ptr+len is one live allocation
        // reserved for this transfer; the caller guarantees the token is
        // still open and nobody writes concurrently.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The region as a mutable byte slice, for receiving into.
    ///
    /// # Panics
    /// If the region is not contiguous (use [`Region::write_at`] or
    /// [`Region::io_slices_mut`]).
    ///
    /// # Safety
    /// The token that came with the region must not have been completed yet,
    /// and no other slice of the region may be alive (one writer at a time).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        assert!(
            self.is_contiguous(),
            "Region::as_mut_slice on a scattered region"
        );
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as for `as_slice`, plus the caller is the region's only
        // user, so the mutable borrow is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The region's pieces in order, as (address, length) pairs: one for a
    /// contiguous region, else one per segment touched. No piece is empty.
    ///
    /// # Safety
    /// The token that came with the region must not have been completed yet
    /// (a scattered region reads the descriptor's segment table).
    pub unsafe fn pieces(&self) -> Pieces<'_> {
        // SAFETY: forwarded.
        unsafe { self.pieces_from(0) }
    }

    /// The pieces of the region from byte `offset` on (none if `offset >=
    /// len()`); finding the first is a binary search over the segments.
    ///
    /// # Safety
    /// As for [`Region::pieces`].
    pub unsafe fn pieces_from(&self, offset: usize) -> Pieces<'_> {
        let mut p = Pieces {
            first: (self.ptr, 0),
            segs: &[],
            next: 0,
            left: 0,
            _region: PhantomData,
        };
        if offset >= self.len {
            return p;
        }
        if self.segs.is_null() {
            p.first = (self.ptr.wrapping_add(offset), self.len - offset);
            return p;
        }
        // SAFETY: the table lives as long as the descriptor, which cannot
        // go away while the region's token is open (caller's contract); it
        // is never written after creation.
        let segs = unsafe { std::slice::from_raw_parts(self.segs, self.nsegs) };
        p.segs = segs;
        if offset < self.head {
            p.first = (self.ptr.wrapping_add(offset), self.head - offset);
            p.next = 1;
            p.left = self.len - self.head;
        } else {
            let at = self.start + offset as u64;
            let j = segs.partition_point(|s| s.end <= at);
            let s = segs[j];
            let off = (at - (s.end - s.len as u64)) as usize;
            let n = (s.len - off).min(self.len - offset);
            p.first = (s.base.wrapping_add(off), n);
            p.next = j + 1;
            p.left = self.len - offset - n;
        }
        p
    }

    /// Copy `src` into the region at `offset`, across segments.
    ///
    /// # Panics
    /// If `offset + src.len()` exceeds the region.
    ///
    /// # Safety
    /// The token must be open, the caller must be the region's only writer
    /// and reader, and `src` must not be memory of the region.
    pub unsafe fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(
            offset.checked_add(src.len()).is_some_and(|e| e <= self.len),
            "Region::write_at outside the region"
        );
        let mut done = 0;
        // SAFETY: forwarded.
        for (p, n) in unsafe { self.pieces_from(offset) } {
            if done == src.len() {
                break;
            }
            let k = n.min(src.len() - done);
            // SAFETY: the piece is lent memory the caller alone uses; `src`
            // is a distinct borrow with at least `k` bytes left.
            unsafe { portals_copy::copy_nonoverlapping(src.as_ptr().add(done), p, k) };
            done += k;
        }
    }

    /// Copy `dst.len()` bytes of the region from `offset` into `dst`,
    /// across segments.
    ///
    /// # Panics
    /// If `offset + dst.len()` exceeds the region.
    ///
    /// # Safety
    /// The token must be open, nothing may write the region meanwhile, and
    /// `dst` must not be memory of the region.
    pub unsafe fn read_at(&self, offset: usize, dst: &mut [u8]) {
        assert!(
            offset.checked_add(dst.len()).is_some_and(|e| e <= self.len),
            "Region::read_at outside the region"
        );
        let mut done = 0;
        // SAFETY: forwarded.
        for (p, n) in unsafe { self.pieces_from(offset) } {
            if done == dst.len() {
                break;
            }
            let k = n.min(dst.len() - done);
            // SAFETY: as in `write_at`, the other way round.
            unsafe { portals_copy::copy_nonoverlapping(p, dst.as_mut_ptr().add(done), k) };
            done += k;
        }
    }

    /// Fill `out` with the region's pieces from `offset` on, at most `max`
    /// bytes in all, for a gathered write (`writev`, `sendmsg`). Returns
    /// (slices filled, bytes they cover); fewer bytes than asked when `out`
    /// is full.
    ///
    /// # Safety
    /// As for [`Region::as_slice`], without the panic.
    pub unsafe fn io_slices<'a>(
        &'a self,
        offset: usize,
        max: usize,
        out: &mut [IoSlice<'a>],
    ) -> (usize, usize) {
        let (mut n, mut bytes) = (0, 0);
        // SAFETY: forwarded.
        for (p, len) in unsafe { self.pieces_from(offset) } {
            if n == out.len() || bytes == max {
                break;
            }
            let k = len.min(max - bytes);
            // SAFETY: lent memory nobody writes while the token is open.
            out[n] = IoSlice::new(unsafe { std::slice::from_raw_parts(p, k) });
            n += 1;
            bytes += k;
        }
        (n, bytes)
    }

    /// Fill `out` with the region's pieces from `offset` on, for a
    /// scattered read (`readv`). Returns (slices filled, bytes they cover).
    ///
    /// # Safety
    /// As for [`Region::as_mut_slice`], without the panic; the slices are
    /// the only access to those bytes while they live.
    pub unsafe fn io_slices_mut<'a>(
        &'a self,
        offset: usize,
        out: &mut [IoSliceMut<'a>],
    ) -> (usize, usize) {
        let (mut n, mut bytes) = (0, 0);
        // SAFETY: forwarded.
        for (p, len) in unsafe { self.pieces_from(offset) } {
            if n == out.len() {
                break;
            }
            // SAFETY: lent memory this caller alone writes; pieces never
            // overlap each other.
            out[n] = IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(p, len) });
            n += 1;
            bytes += len;
        }
        (n, bytes)
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_contiguous() {
            write!(f, "Region({:p}, {})", self.ptr, self.len)
        } else {
            write!(f, "Region({:p}, {}, scattered)", self.ptr, self.len)
        }
    }
}

/// The pieces of a [`Region`], in order: (address, length) pairs, none
/// empty. See [`Region::pieces`].
pub struct Pieces<'a> {
    /// The next piece (length 0: none).
    first: (*mut u8, usize),
    segs: &'a [Seg],
    /// The table entry after `first`'s.
    next: usize,
    /// Bytes after `first`.
    left: usize,
    _region: PhantomData<&'a Region>,
}

impl Iterator for Pieces<'_> {
    type Item = (*mut u8, usize);

    fn next(&mut self) -> Option<(*mut u8, usize)> {
        if self.first.1 > 0 {
            let f = self.first;
            self.first.1 = 0;
            return Some(f);
        }
        if self.left == 0 {
            return None;
        }
        let s = self.segs[self.next];
        self.next += 1;
        let n = s.len.min(self.left);
        self.left -= n;
        Some((s.base, n))
    }
}
