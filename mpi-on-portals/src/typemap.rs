//! Typemaps: the memory layout of a derived datatype (MPI 4.1 §5.1).
//!
//! A typemap is a sequence of runs (a byte offset, a predefined kind and a
//! count of consecutive values of that kind) plus an extent, the stride
//! between consecutive elements of a buffer of that datatype. The order of
//! the runs is the order of the values on the wire: `structured` may list
//! fields in any order, and a receiver with another layout of the same
//! type signature still gets the values in that order.
//!
//! A buffer whose typemap is dense (its runs, in order, cover the extent
//! without gaps) is sent as its bytes; any other is packed into a
//! contiguous buffer and unpacked on receipt. Unpacking validates the
//! received bytes first: a kind with invalid bit patterns (`bool`) is never
//! written with a byte that is not a value of it.

use std::sync::atomic::{AtomicU64, Ordering};

use portals::Iovec;

use crate::error::{MpiError, Result};

/// Packs and unpacks done so far by this process (see [`copies`]).
static COPIES: AtomicU64 = AtomicU64::new(0);

/// How many times this process has packed or unpacked a layout
/// ([`Typemap::pack`], [`Typemap::unpack`]): a test's proof that a layout
/// went to the transport as segments, with no copy.
pub fn copies() -> u64 {
    COPIES.load(Ordering::Relaxed)
}

/// Shortest mean run, in bytes, for which a layout goes to the transport
/// as segments rather than packed. Each segment costs a 16-byte entry in
/// the list handed over, a 24-byte entry in the descriptor's table, a
/// search to find it and one `iovec` of the transport's gather (shm's
/// `process_vm_readv` takes 1024 at a time, TCP's `writev` as many):
/// below about 64 bytes a run's bookkeeping costs more than copying it
/// twice, and the list would be as large as the data it describes.
pub const MIN_SEGMENT_BYTES: usize = 64;

/// A predefined datatype, as far as layout and validity go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A value of `size` bytes (1, 2, 4, 8 or 16) for which every bit
    /// pattern is valid: the integers, the floating-point types, and
    /// complex numbers as two of them.
    Plain {
        /// Bytes per value.
        size: u8,
        /// Alignment in bytes.
        align: u8,
    },
    /// A `bool`: one byte, 0 or 1.
    Bool,
}

impl Kind {
    /// The kind of a plain type `T` (every bit pattern valid).
    pub const fn plain<T>() -> Kind {
        Kind::Plain {
            size: std::mem::size_of::<T>() as u8,
            align: std::mem::align_of::<T>() as u8,
        }
    }

    /// Bytes per value.
    pub const fn size(self) -> usize {
        match self {
            Kind::Plain { size, .. } => size as usize,
            Kind::Bool => 1,
        }
    }

    fn align(self) -> usize {
        match self {
            Kind::Plain { align, .. } => align as usize,
            Kind::Bool => 1,
        }
    }

    /// Whether `bytes` (whole values of this kind) are valid values.
    fn valid(self, bytes: &[u8]) -> bool {
        match self {
            Kind::Plain { .. } => true,
            Kind::Bool => bytes.iter().all(|&b| b <= 1),
        }
    }
}

/// `count` consecutive values of `kind` at byte `offset` of an element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    offset: usize,
    kind: Kind,
    count: usize,
}

impl Run {
    fn len(&self) -> usize {
        self.count * self.kind.size()
    }
}

/// A checked datatype layout: runs in wire order and an extent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typemap {
    runs: Vec<Run>,
    extent: usize,
    align: usize,
    size: usize,
}

const OVERFLOW: MpiError = MpiError::InvalidDatatype("the layout's size overflows");

fn mul(a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or(OVERFLOW)
}

fn add(a: usize, b: usize) -> Result<usize> {
    a.checked_add(b)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or(OVERFLOW)
}

impl Typemap {
    /// One value of a predefined kind.
    pub fn predefined(kind: Kind) -> Typemap {
        Typemap {
            runs: vec![Run {
                offset: 0,
                kind,
                count: 1,
            }],
            extent: kind.size(),
            align: kind.align(),
            size: kind.size(),
        }
    }

    /// Bytes between consecutive elements of a buffer.
    pub fn extent(&self) -> usize {
        self.extent
    }

    /// Bytes of one element's values on the wire (its packed size).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether an element is its bytes: runs in order, from offset 0, with
    /// no gap and nothing past them up to the extent.
    pub fn is_dense(&self) -> bool {
        let mut at = 0;
        for r in &self.runs {
            if r.offset != at {
                return false;
            }
            at += r.len();
        }
        at == self.extent
    }

    /// Whether every bit pattern is a valid element, so that received
    /// bytes may be written in place without validation.
    pub fn any_bits_valid(&self) -> bool {
        self.runs
            .iter()
            .all(|r| matches!(r.kind, Kind::Plain { .. }))
    }

    /// `count` elements one after another (`MPI_Type_contiguous`).
    pub fn contiguous(count: usize, old: &Typemap) -> Result<Typemap> {
        Typemap::hindexed(&[count], &[0], old)
    }

    /// `count` blocks of `blocklen` elements, block i at `i * stride`
    /// elements (`MPI_Type_vector`).
    pub fn vector(count: usize, blocklen: usize, stride: usize, old: &Typemap) -> Result<Typemap> {
        let stride = mul(stride, old.extent)?;
        let displs = (0..count)
            .map(|i| mul(i, stride))
            .collect::<Result<Vec<_>>>()?;
        Typemap::hindexed(&vec![blocklen; count], &displs, old)
    }

    /// Blocks of `blocklens[i]` elements at `displs[i]` elements
    /// (`MPI_Type_indexed`).
    pub fn indexed(blocklens: &[usize], displs: &[usize], old: &Typemap) -> Result<Typemap> {
        let bytes = displs
            .iter()
            .map(|&d| mul(d, old.extent))
            .collect::<Result<Vec<_>>>()?;
        Typemap::hindexed(blocklens, &bytes, old)
    }

    /// Blocks of `blocklens[i]` elements at byte `displs[i]`
    /// (`MPI_Type_create_hindexed`).
    pub fn hindexed(blocklens: &[usize], displs: &[usize], old: &Typemap) -> Result<Typemap> {
        let types = vec![old; blocklens.len()];
        Typemap::build(blocklens, displs, &types, false)
    }

    /// Blocks of `blocklens[i]` elements of `types[i]` at byte `displs[i]`
    /// (`MPI_Type_create_struct`). The extent is rounded up to the largest
    /// alignment of the kinds, as C would pad the struct.
    pub fn structured(
        blocklens: &[usize],
        displs: &[usize],
        types: &[&Typemap],
    ) -> Result<Typemap> {
        Typemap::build(blocklens, displs, types, true)
    }

    /// This layout with another extent (`MPI_Type_create_resized` with
    /// lower bound 0): e.g. a Rust struct's size, padding included.
    pub fn resized(mut self, extent: usize) -> Result<Typemap> {
        if self.upper_bound() > extent {
            return Err(MpiError::InvalidDatatype(
                "the extent does not cover the layout's values",
            ));
        }
        self.extent = extent;
        Ok(self)
    }

    fn upper_bound(&self) -> usize {
        self.runs
            .iter()
            .map(|r| r.offset + r.len())
            .max()
            .unwrap_or(0)
    }

    fn build(
        blocklens: &[usize],
        displs: &[usize],
        types: &[&Typemap],
        pad: bool,
    ) -> Result<Typemap> {
        if blocklens.len() != displs.len() || blocklens.len() != types.len() {
            return Err(MpiError::InvalidDatatype(
                "block lengths, displacements and types differ in number",
            ));
        }
        let mut map = Typemap {
            runs: Vec::new(),
            extent: 0,
            align: 1,
            size: 0,
        };
        for ((&n, &d), old) in blocklens.iter().zip(displs).zip(types) {
            let end = add(d, mul(n, old.extent)?)?;
            map.align = map.align.max(old.align);
            if n == 0 {
                continue;
            }
            if let [r] = old.runs[..] {
                if old.is_dense() {
                    // A block of a one-run dense type is one longer run.
                    map.push(Run {
                        offset: d,
                        count: mul(n, r.count)?,
                        ..r
                    })?;
                    map.extent = map.extent.max(end);
                    continue;
                }
            }
            for i in 0..n {
                let base = add(d, mul(i, old.extent)?)?;
                for r in &old.runs {
                    map.push(Run {
                        offset: add(base, r.offset)?,
                        ..*r
                    })?;
                }
                if old.runs.is_empty() {
                    break;
                }
            }
            map.extent = map.extent.max(end);
        }
        if pad {
            map.extent = map
                .extent
                .checked_next_multiple_of(map.align)
                .ok_or(OVERFLOW)?;
        }
        map.check_overlap()?;
        Ok(map)
    }

    /// Append a run, merging it with the last one where it continues it.
    fn push(&mut self, run: Run) -> Result<()> {
        self.size = add(self.size, run.len())?;
        if let Some(last) = self.runs.last_mut() {
            if last.kind == run.kind && last.offset + last.len() == run.offset {
                last.count += run.count;
                return Ok(());
            }
        }
        self.runs.push(run);
        Ok(())
    }

    /// Overlapping runs would receive two values into one place.
    fn check_overlap(&self) -> Result<()> {
        let mut spans: Vec<(usize, usize)> = self
            .runs
            .iter()
            .map(|r| (r.offset, r.offset + r.len()))
            .collect();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[0].1 > w[1].0) {
            return Err(MpiError::InvalidDatatype("the layout's blocks overlap"));
        }
        Ok(())
    }

    /// Bytes of memory that `count` elements reach, from the first.
    pub fn span(&self, count: usize) -> Result<usize> {
        if count == 0 {
            return Ok(0);
        }
        add(mul(count - 1, self.extent)?, self.upper_bound())
    }

    /// The memory of `count` elements at `base` as segments, one per
    /// contiguous run in wire order (runs that continue one another
    /// merged), into `out` (cleared first): true if the layout is worth
    /// sending that way — at most `max` segments, of
    /// [`MIN_SEGMENT_BYTES`] on average — false (and `out` unspecified)
    /// if it should be packed. Dense memory is one segment. Only
    /// addresses are computed; nothing is read.
    pub fn segments(&self, count: usize, base: *mut u8, max: usize, out: &mut Vec<Iovec>) -> bool {
        out.clear();
        let total = self.size.saturating_mul(count);
        // Merging joins at most one pair of runs per element boundary, so
        // an element of k > 1 runs keeps k - 1 of them: a bound on the
        // mean run before anything is built.
        let k = self.runs.len();
        if k > 1 && self.size / (k - 1) < MIN_SEGMENT_BYTES {
            return false;
        }
        // One short run per element that cannot join the next one's.
        if k == 1 && self.size < MIN_SEGMENT_BYTES && !self.is_dense() && count > 1 {
            return false;
        }
        for i in 0..count {
            for r in &self.runs {
                if r.len() == 0 {
                    continue;
                }
                let at = base.wrapping_add(i * self.extent + r.offset);
                if let Some(last) = out.last_mut() {
                    if last.base.wrapping_add(last.len) == at {
                        last.len += r.len();
                        continue;
                    }
                }
                if out.len() == max {
                    return false;
                }
                out.push(Iovec::new(at, r.len()));
            }
        }
        out.is_empty() || total / out.len() >= MIN_SEGMENT_BYTES
    }

    /// Append the bytes of the segments `list` to `out`, in list order: a
    /// layout's values packed from its [`segments`](Self::segments).
    ///
    /// # Safety
    /// Every segment must be valid for reads and initialized.
    pub unsafe fn gather(list: &[Iovec], out: &mut Vec<u8>) {
        COPIES.fetch_add(1, Ordering::Relaxed);
        for s in list {
            // SAFETY: readable, per our caller.
            portals_copy::extend_from_slice(out, unsafe {
                std::slice::from_raw_parts(s.base, s.len)
            });
        }
    }

    /// Copy `packed` into the segments `list`, in list order, as far as
    /// it goes: the inverse of [`gather`](Self::gather), for layouts whose
    /// every bit pattern is valid.
    ///
    /// # Safety
    /// Every segment must be valid for writes and not overlap `packed`.
    pub unsafe fn scatter(list: &[Iovec], packed: &[u8]) {
        COPIES.fetch_add(1, Ordering::Relaxed);
        let mut at = 0;
        for s in list {
            let n = s.len.min(packed.len() - at);
            // SAFETY: writable, per our caller; within `packed`.
            unsafe { std::ptr::copy_nonoverlapping(packed.as_ptr().add(at), s.base, n) };
            at += n;
        }
    }

    /// Append the values of `count` elements at `src` to `out`, in wire
    /// order.
    ///
    /// # Safety
    /// `src` must be valid for reads of [`span(count)`](Self::span) bytes,
    /// and every byte the runs describe must be initialized.
    pub unsafe fn pack(&self, count: usize, src: *const u8, out: &mut Vec<u8>) {
        COPIES.fetch_add(1, Ordering::Relaxed);
        out.reserve(self.size.saturating_mul(count));
        for i in 0..count {
            for r in &self.runs {
                // SAFETY: offset and length are within span(count), which
                // our caller guarantees readable and initialized.
                let bytes = unsafe {
                    std::slice::from_raw_parts(src.add(i * self.extent + r.offset), r.len())
                };
                portals_copy::extend_from_slice(out, bytes);
            }
        }
    }

    /// Check that `packed` (a prefix of `count` elements' values in wire
    /// order) holds only valid values.
    pub fn validate(&self, count: usize, packed: &[u8]) -> Result<()> {
        if self.any_bits_valid() {
            return Ok(());
        }
        let mut at = 0;
        for _ in 0..count {
            for r in &self.runs {
                let end = (at + r.len()).min(packed.len());
                if !r.kind.valid(&packed[at..end]) {
                    return Err(MpiError::InvalidData("a bool that is neither 0 nor 1"));
                }
                at = end;
                if at == packed.len() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Write the values in `packed` (a prefix of `count` elements' values,
    /// wire order) into the elements at `dst`; the bytes used. Values are
    /// validated before anything is written.
    ///
    /// # Safety
    /// `dst` must be valid for writes of [`span(count)`](Self::span) bytes.
    pub unsafe fn unpack(&self, count: usize, packed: &[u8], dst: *mut u8) -> Result<usize> {
        COPIES.fetch_add(1, Ordering::Relaxed);
        self.validate(count, packed)?;
        let mut at = 0;
        for i in 0..count {
            for r in &self.runs {
                let n = r.len().min(packed.len() - at);
                // Whole values only: a partial value is not a value.
                let n = n - n % r.kind.size();
                // SAFETY: the destination is within span(count), writable
                // per our caller; the source is within `packed`; the values
                // were validated above.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        packed.as_ptr().add(at),
                        dst.add(i * self.extent + r.offset),
                        n,
                    );
                }
                at += n;
                if n < r.len() {
                    return Ok(at);
                }
            }
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i32_map() -> Typemap {
        Typemap::predefined(Kind::plain::<i32>())
    }

    #[test]
    fn vector_packs_the_blocks_and_skips_the_gaps() {
        let t = Typemap::vector(2, 2, 3, &i32_map()).unwrap();
        assert_eq!((t.extent(), t.size(), t.is_dense()), (20, 16, false));
        let src = [1i32, 2, 3, 4, 5, 6];
        let mut out = Vec::new();
        // SAFETY: span(1) = 20 bytes, within the 24 of `src`.
        unsafe { t.pack(1, src.as_ptr().cast(), &mut out) };
        let vals: Vec<i32> = out
            .chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(vals, [1, 2, 4, 5]);
        let mut dst = [-1i32; 6];
        // SAFETY: as above, for writes.
        let used = unsafe { t.unpack(1, &out, dst.as_mut_ptr().cast()) }.unwrap();
        assert_eq!((used, dst), (16, [1, 2, -1, 4, 5, -1]));
    }

    #[test]
    fn segments_are_the_runs_merged_and_short_runs_are_refused() {
        let u8s = Typemap::predefined(Kind::plain::<u8>());
        let mut buf = [0u8; 4096];
        let base = buf.as_mut_ptr();
        let mut list = Vec::new();
        // Two elements of [256 used, 128 gap]: one segment per block.
        let v = Typemap::vector(2, 256, 384, &u8s).unwrap();
        assert!(v.segments(2, base, 16, &mut list));
        let offs: Vec<(usize, usize)> = list
            .iter()
            .map(|s| (s.base as usize - base as usize, s.len))
            .collect();
        // Element 1 starts at the extent (640): its first block follows
        // element 0's last directly, so the two merge.
        assert_eq!(offs, [(0, 256), (384, 512), (1024, 256)]);
        // More segments than allowed: refused.
        assert!(!v.segments(2, base, 2, &mut list));
        // 4-byte runs: refused before anything is built.
        let tiny = Typemap::vector(64, 1, 2, &i32_map()).unwrap();
        assert!(!tiny.segments(1, base, 1 << 16, &mut list));
        // Dense memory is one segment.
        let d = Typemap::contiguous(100, &i32_map()).unwrap();
        assert!(d.segments(3, base, 1, &mut list));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].len, 1200);
    }

    #[test]
    fn contiguous_of_a_predefined_type_is_dense() {
        let t = Typemap::contiguous(3, &i32_map()).unwrap();
        assert!(t.is_dense() && t.any_bits_valid());
        assert_eq!((t.extent(), t.span(2).unwrap()), (12, 24));
    }

    #[test]
    fn structured_keeps_wire_order_and_pads_the_extent() {
        let (b, f) = (
            Typemap::predefined(Kind::Bool),
            Typemap::predefined(Kind::plain::<f64>()),
        );
        let t = Typemap::structured(&[1, 1], &[8, 0], &[&b, &f]).unwrap();
        assert_eq!((t.extent(), t.size(), t.is_dense()), (16, 9, false));
        let rev = Typemap::structured(&[1, 1, 1], &[8, 4, 0], &[&i32_map(); 3]).unwrap();
        let src = [3i32, 2, 1];
        let mut out = Vec::new();
        // SAFETY: span(1) = 12 bytes, all of `src`.
        unsafe { rev.pack(1, src.as_ptr().cast(), &mut out) };
        assert_eq!(out[..4], 1i32.to_ne_bytes());
    }

    #[test]
    fn bad_layouts_are_typed_errors() {
        let i = i32_map();
        let overlap = Typemap::hindexed(&[2, 1], &[0, 4], &i);
        assert_eq!(
            overlap,
            Err(MpiError::InvalidDatatype("the layout's blocks overlap"))
        );
        assert_eq!(Typemap::contiguous(usize::MAX / 2, &i), Err(OVERFLOW));
        assert_eq!(Typemap::vector(3, 1, usize::MAX / 4, &i), Err(OVERFLOW));
        assert!(matches!(
            Typemap::structured(&[1], &[0, 4], &[&i]),
            Err(MpiError::InvalidDatatype(_))
        ));
        assert!(Typemap::contiguous(2, &i).unwrap().resized(4).is_err());
    }

    #[test]
    fn unpack_rejects_a_bool_that_is_not_0_or_1_and_writes_nothing() {
        let t = Typemap::contiguous(3, &Typemap::predefined(Kind::Bool)).unwrap();
        let mut dst = [false; 3];
        // SAFETY: span(1) = 3 bytes, all of `dst`.
        let bad = unsafe { t.unpack(1, &[1, 2, 1], dst.as_mut_ptr().cast()) };
        assert!(matches!(bad, Err(MpiError::InvalidData(_))));
        assert_eq!(dst, [false; 3]);
        // SAFETY: as above.
        let ok = unsafe { t.unpack(1, &[1, 0, 1], dst.as_mut_ptr().cast()) };
        assert_eq!((ok, dst), (Ok(3), [true, false, true]));
    }

    #[test]
    fn unpack_of_a_short_message_fills_whole_values_only() {
        let t = Typemap::contiguous(2, &i32_map()).unwrap();
        let mut dst = [-1i32; 2];
        // SAFETY: span(1) = 8 bytes, all of `dst`.
        let used = unsafe { t.unpack(1, &7i32.to_ne_bytes()[..3], dst.as_mut_ptr().cast()) };
        assert_eq!((used, dst), (Ok(0), [-1, -1]));
    }
}
