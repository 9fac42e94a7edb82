//! Datatypes: MPICH's predefined ones (their handles encode their size)
//! and derived ones (`MPI_Type_contiguous`, `_vector`, `_indexed`,
//! `_create_struct`), kept as a list of byte blocks per element. Data of a
//! non-contiguous type is packed into a contiguous buffer to send and
//! unpacked after a receive (one copy each way).

use std::borrow::Cow;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use crate::consts::*;
use crate::error::{fail, Fail};
use crate::ptr;
use crate::state::{self, handle, slot};

/// The element types reductions and atomics know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

/// A derived datatype: per element, byte blocks at offsets from its start.
#[derive(Debug)]
pub struct Derived {
    pub size: usize,
    pub lb: isize,
    pub extent: usize,
    /// (offset, length) in bytes, in type-map order.
    pub blocks: Vec<(isize, usize)>,
    /// The element type if every block holds it (for reductions).
    pub elem: Option<Elem>,
    pub committed: bool,
}

/// What a datatype handle stands for.
#[derive(Clone, Debug)]
pub enum Ty {
    Basic {
        size: usize,
        extent: usize,
        elem: Option<Elem>,
    },
    Derived(Arc<Derived>),
}

fn builtin_elem(h: c_int) -> Option<Elem> {
    use Elem::*;
    Some(match h as u32 {
        0x4c000101 | 0x4c000118 | 0x4c000137 | 0x4c00012d => I8, // CHAR SIGNED_CHAR INT8 INTEGER1
        0x4c000102 | 0x4c00010d | 0x4c00013b | 0x4c00013f | 0x4c00011a | 0x4c000133 => U8,
        0x4c000203 | 0x4c000238 | 0x4c00022f => I16,
        0x4c000204 | 0x4c00023c => U16,
        0x4c000405 | 0x4c000439 | 0x4c00041b | 0x4c000430 | 0x4c00041d | 0x4c00040e => I32,
        0x4c000406 | 0x4c00043d => U32,
        0x4c000807 | 0x4c000809 | 0x4c00083a | 0x4c000831 | 0x4c000843 | 0x4c000844
        | 0x4c000845 => I64,
        0x4c000808 | 0x4c000819 | 0x4c00083e => U64,
        0x4c00040a | 0x4c00041c | 0x4c000427 => F32,
        0x4c00080b | 0x4c00081f | 0x4c000829 => F64,
        _ => return None,
    })
}

/// Bytes of `count` elements of a predefined type whose handle encodes
/// its size, without building a [`Ty`]: the hot path of sends and
/// receives. `None` for other types.
#[inline]
pub fn builtin_bytes(h: c_int, count: usize) -> Option<usize> {
    let u = h as u32;
    // count < 2^31 and sizes < 2^8: no overflow.
    (u & 0xff00_0000 == 0x4c00_0000).then(|| count * ((u >> 8) & 0xff) as usize)
}

/// The datatype behind `h`.
pub fn ty(h: c_int) -> Result<Ty, Fail> {
    let u = h as u32;
    if u & 0xff00_0000 == 0x4c00_0000 && h != MPI_DATATYPE_NULL {
        let size = ((u >> 8) & 0xff) as usize;
        return Ok(Ty::Basic {
            size,
            extent: size,
            elem: builtin_elem(h),
        });
    }
    // The pair types of MINLOC/MAXLOC: C structs {value; int}.
    let pair = match u {
        0x8c000000 => Some((8, 8)),   // FLOAT_INT
        0x8c000001 => Some((12, 16)), // DOUBLE_INT
        0x8c000002 => Some((12, 16)), // LONG_INT
        0x8c000003 => Some((6, 8)),   // SHORT_INT
        0x8c000004 => Some((20, 32)), // LONG_DOUBLE_INT
        _ => None,
    };
    if let Some((size, extent)) = pair {
        return Ok(Ty::Basic {
            size,
            extent,
            elem: None,
        });
    }
    let d = slot(h, KIND_TYPE).and_then(|i| {
        state::lock()
            .as_ref()
            .and_then(|st| st.types.get(i).cloned())
    });
    match d {
        Some(d) => Ok(Ty::Derived(d)),
        None => fail(MPI_ERR_TYPE, format!("invalid datatype {h:#x}")),
    }
}

/// A datatype usable for communication: committed if derived.
pub fn comm_ty(h: c_int) -> Result<Ty, Fail> {
    let t = ty(h)?;
    if let Ty::Derived(d) = &t {
        if !d.committed {
            return fail(MPI_ERR_TYPE, "the datatype is not committed");
        }
    }
    Ok(t)
}

impl Ty {
    pub fn size(&self) -> usize {
        match self {
            Ty::Basic { size, .. } => *size,
            Ty::Derived(d) => d.size,
        }
    }

    pub fn extent(&self) -> usize {
        match self {
            Ty::Basic { extent, .. } => *extent,
            Ty::Derived(d) => d.extent,
        }
    }

    pub fn lb(&self) -> isize {
        match self {
            Ty::Basic { .. } => 0,
            Ty::Derived(d) => d.lb,
        }
    }

    pub fn elem(&self) -> Option<Elem> {
        match self {
            Ty::Basic { elem, .. } => *elem,
            Ty::Derived(d) => d.elem,
        }
    }

    /// Its blocks within one element.
    pub fn blocks(&self) -> Vec<(isize, usize)> {
        match self {
            Ty::Basic { extent, .. } => vec![(0, *extent)],
            Ty::Derived(d) => d.blocks.clone(),
        }
    }

    /// True if `count` elements are one run of bytes from the buffer's
    /// start (sent and received in place).
    pub fn contiguous(&self) -> bool {
        match self {
            Ty::Basic { .. } => true,
            Ty::Derived(d) => d.lb == 0 && d.blocks.len() == 1 && d.blocks[0] == (0, d.extent),
        }
    }

    /// The bytes of `count` elements at `buf`, packed if not contiguous.
    pub fn send_bytes<'a>(&self, buf: *const c_void, count: usize) -> Result<Cow<'a, [u8]>, Fail> {
        let len = count
            .checked_mul(self.extent())
            .ok_or_else(|| Fail::new(MPI_ERR_COUNT, "count too large"))?;
        if self.contiguous() {
            return ptr::slice(buf.cast::<u8>(), len, "buf").map(Cow::Borrowed);
        }
        let Ty::Derived(d) = self else {
            return fail(MPI_ERR_INTERN, "non-contiguous basic type");
        };
        if buf.is_null() && count > 0 {
            return fail(MPI_ERR_BUFFER, "buf is NULL");
        }
        let mut out = Vec::with_capacity(count * d.size);
        for i in 0..count {
            for &(off, n) in &d.blocks {
                let at = (buf as isize) + (i * d.extent) as isize + off;
                // SAFETY: MPI requires the buffer to hold `count` elements
                // of the type; the blocks lie within them.
                out.extend_from_slice(unsafe { std::slice::from_raw_parts(at as *const u8, n) });
            }
        }
        Ok(Cow::Owned(out))
    }

    /// Scatter packed `data` into `count` elements at `buf` (what arrived;
    /// a partial last element is left partial).
    ///
    /// # Safety
    /// `buf` must hold `count` writable elements of the type.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) {
        let mut src = 0;
        let blocks = self.blocks();
        'outer: for i in 0..count {
            for &(off, n) in &blocks {
                if src >= data.len() {
                    break 'outer;
                }
                let k = n.min(data.len() - src);
                let at = (buf as isize) + (i * self.extent()) as isize + off;
                // SAFETY: forwarded from our caller.
                unsafe {
                    std::ptr::copy_nonoverlapping(data[src..].as_ptr(), at as *mut u8, k);
                }
                src += k;
            }
        }
    }
}

fn add(d: Derived, out: *mut c_int) -> Result<(), Fail> {
    let h = state::with(|st| {
        st.types
            .insert(Arc::new(d))
            .map(|i| handle(i, KIND_TYPE))
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many datatypes"))
    })?;
    ptr::out(out, h, "newtype")
}

/// A derived type from `(displacement in bytes, count, type)` pieces.
fn build(pieces: &[(isize, usize, Ty)]) -> Derived {
    let mut blocks: Vec<(isize, usize)> = Vec::new();
    let mut size = 0;
    let (mut lo, mut hi) = (isize::MAX, isize::MIN);
    let mut elem: Option<Option<Elem>> = None;
    for (disp, count, t) in pieces {
        let e = t.elem();
        elem = Some(match elem {
            None => e,
            Some(prev) if prev == e => e,
            Some(_) => None,
        });
        for i in 0..*count {
            let base = disp + (i * t.extent()) as isize;
            for (off, n) in t.blocks() {
                let at = base + off;
                match blocks.last_mut() {
                    Some(last) if last.0 + last.1 as isize == at => last.1 += n,
                    _ => blocks.push((at, n)),
                }
            }
            size += t.size();
        }
        if *count > 0 {
            lo = lo.min(disp + t.lb());
            hi = hi.max(disp + t.lb() + (count * t.extent()) as isize);
        }
    }
    if lo > hi {
        (lo, hi) = (0, 0);
    }
    blocks.retain(|b| b.1 > 0);
    Derived {
        size,
        lb: lo,
        extent: (hi - lo) as usize,
        blocks,
        elem: elem.flatten(),
        committed: false,
    }
}

entry! {
    fn MPI_Type_contiguous | PMPI_Type_contiguous(count: c_int, oldtype: c_int, newtype: *mut c_int) {
        let n = ptr::count(count)?;
        let t = ty(oldtype)?;
        add(build(&[(0, n, t)]), newtype)
    }
}

entry! {
    fn MPI_Type_vector | PMPI_Type_vector(
        count: c_int,
        blocklength: c_int,
        stride: c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) {
        let (n, bl) = (ptr::count(count)?, ptr::count(blocklength)?);
        let t = ty(oldtype)?;
        let ext = t.extent() as isize;
        let pieces: Vec<_> = (0..n)
            .map(|i| (i as isize * stride as isize * ext, bl, t.clone()))
            .collect();
        add(build(&pieces), newtype)
    }
}

entry! {
    fn MPI_Type_indexed | PMPI_Type_indexed(
        count: c_int,
        blocklengths: *const c_int,
        displacements: *const c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) {
        let n = ptr::count(count)?;
        let bl = ptr::slice(blocklengths, n, "array_of_blocklengths")?;
        let dp = ptr::slice(displacements, n, "array_of_displacements")?;
        let t = ty(oldtype)?;
        let ext = t.extent() as isize;
        let mut pieces = Vec::with_capacity(n);
        for i in 0..n {
            pieces.push((dp[i] as isize * ext, ptr::count(bl[i])?, t.clone()));
        }
        add(build(&pieces), newtype)
    }
}

entry! {
    fn MPI_Type_create_struct | PMPI_Type_create_struct(
        count: c_int,
        blocklengths: *const c_int,
        displacements: *const isize,
        types: *const c_int,
        newtype: *mut c_int,
    ) {
        let n = ptr::count(count)?;
        let bl = ptr::slice(blocklengths, n, "array_of_blocklengths")?;
        let dp = ptr::slice(displacements, n, "array_of_displacements")?;
        let ts = ptr::slice(types, n, "array_of_types")?;
        let mut pieces = Vec::with_capacity(n);
        for i in 0..n {
            pieces.push((dp[i], ptr::count(bl[i])?, ty(ts[i])?));
        }
        let mut d = build(&pieces);
        // C pads a struct to its largest member's alignment.
        let align = pieces.iter().map(|p| p.2.size().clamp(1, 8)).max().unwrap_or(1);
        d.extent = d.extent.div_ceil(align) * align;
        add(d, newtype)
    }
}

fn derived_slot(h: c_int) -> Result<usize, Fail> {
    slot(h, KIND_TYPE)
        .ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("{h:#x} is not a derived datatype")))
}

entry! {
    fn MPI_Type_commit | PMPI_Type_commit(datatype: *mut c_int) {
        let h = ptr::read(datatype, "datatype")?;
        if ty(h).is_ok() && slot(h, KIND_TYPE).is_none() {
            return Ok(()); // predefined types are committed
        }
        let i = derived_slot(h)?;
        state::with(|st| {
            let d = st
                .types
                .get_mut(i)
                .ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("invalid datatype {h:#x}")))?;
            if !d.committed {
                let mut c = Derived { blocks: d.blocks.clone(), ..**d };
                c.committed = true;
                *d = Arc::new(c);
            }
            Ok(())
        })
    }
}

entry! {
    /// Requests already using the type keep it until they complete.
    fn MPI_Type_free | PMPI_Type_free(datatype: *mut c_int) {
        let h = ptr::read(datatype, "datatype")?;
        let i = derived_slot(h)?;
        state::with(|st| {
            st.types
                .remove(i)
                .map(|_| ())
                .ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("invalid datatype {h:#x}")))
        })?;
        ptr::out(datatype, MPI_DATATYPE_NULL, "datatype")
    }
}

entry! {
    fn MPI_Type_size | PMPI_Type_size(datatype: c_int, size: *mut c_int) {
        let s = ty(datatype)?.size();
        ptr::out(size, c_int::try_from(s).unwrap_or(MPI_UNDEFINED), "size")
    }
}

entry! {
    fn MPI_Type_get_extent | PMPI_Type_get_extent(datatype: c_int, lb: *mut isize, extent: *mut isize) {
        let t = ty(datatype)?;
        ptr::out(lb, t.lb(), "lb")?;
        ptr::out(extent, t.extent() as isize, "extent")
    }
}

entry! {
    fn MPI_Type_get_true_extent | PMPI_Type_get_true_extent(datatype: c_int, lb: *mut isize, extent: *mut isize) {
        let t = ty(datatype)?;
        let blocks = t.blocks();
        let lo = blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let hi = blocks.iter().map(|b| b.0 + b.1 as isize).max().unwrap_or(0);
        ptr::out(lb, lo, "true_lb")?;
        ptr::out(extent, hi - lo, "true_extent")
    }
}

entry! {
    fn MPI_Type_create_hvector | PMPI_Type_create_hvector(
        count: c_int,
        blocklength: c_int,
        stride: isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) {
        let (n, bl) = (ptr::count(count)?, ptr::count(blocklength)?);
        let t = ty(oldtype)?;
        let pieces: Vec<_> = (0..n).map(|i| (i as isize * stride, bl, t.clone())).collect();
        add(build(&pieces), newtype)
    }
}

entry! {
    fn MPI_Type_create_hindexed | PMPI_Type_create_hindexed(
        count: c_int,
        blocklengths: *const c_int,
        displacements: *const isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) {
        let n = ptr::count(count)?;
        let bl = ptr::slice(blocklengths, n, "array_of_blocklengths")?;
        let dp = ptr::slice(displacements, n, "array_of_displacements")?;
        let t = ty(oldtype)?;
        let mut pieces = Vec::with_capacity(n);
        for i in 0..n {
            pieces.push((dp[i], ptr::count(bl[i])?, t.clone()));
        }
        add(build(&pieces), newtype)
    }
}

entry! {
    fn MPI_Type_create_indexed_block | PMPI_Type_create_indexed_block(
        count: c_int,
        blocklength: c_int,
        displacements: *const c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) {
        let n = ptr::count(count)?;
        let bl = ptr::count(blocklength)?;
        let dp = ptr::slice(displacements, n, "array_of_displacements")?;
        let t = ty(oldtype)?;
        let ext = t.extent() as isize;
        let pieces: Vec<_> = dp.iter().map(|&d| (d as isize * ext, bl, t.clone())).collect();
        add(build(&pieces), newtype)
    }
}

entry! {
    fn MPI_Type_create_resized | PMPI_Type_create_resized(oldtype: c_int, lb: isize, extent: isize, newtype: *mut c_int) {
        let t = ty(oldtype)?;
        let ext = usize::try_from(extent).map_err(|_| Fail::new(MPI_ERR_ARG, format!("negative extent {extent}")))?;
        let mut d = build(&[(0, 1, t)]);
        d.lb = lb;
        d.extent = ext;
        add(d, newtype)
    }
}

entry! {
    fn MPI_Type_dup | PMPI_Type_dup(oldtype: c_int, newtype: *mut c_int) {
        let t = ty(oldtype)?;
        let mut d = build(&[(0, 1, t.clone())]);
        d.lb = t.lb();
        d.extent = t.extent();
        d.committed = true;
        add(d, newtype)
    }
}

entry! {
    fn MPI_Get_address | PMPI_Get_address(location: *const c_void, address: *mut isize) {
        ptr::out(address, location as isize, "address")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> Ty {
        Ty::Basic {
            size: 4,
            extent: 4,
            elem: Some(Elem::I32),
        }
    }

    #[test]
    fn a_vector_is_strided_blocks_with_mpi_extent() {
        // MPI_Type_vector(3, 2, 4, MPI_INT): blocks of 8 bytes every 16.
        let pieces: Vec<_> = (0..3).map(|i| (i * 16, 2, int())).collect();
        let d = build(&pieces);
        assert_eq!(d.blocks, vec![(0, 8), (16, 8), (32, 8)]);
        assert_eq!((d.size, d.lb, d.extent), (24, 0, 40));
        assert_eq!(d.elem, Some(Elem::I32));
    }

    #[test]
    fn adjacent_blocks_merge_and_mixed_types_have_no_element() {
        let dbl = Ty::Basic {
            size: 8,
            extent: 8,
            elem: Some(Elem::F64),
        };
        let d = build(&[(0, 1, dbl), (8, 1, int())]);
        assert_eq!(d.blocks, vec![(0, 12)]);
        assert_eq!((d.size, d.extent), (12, 12));
        assert_eq!(d.elem, None);
        let contiguous = Ty::Derived(Arc::new(build(&[(0, 3, int())])));
        assert!(contiguous.contiguous());
    }

    #[test]
    fn pack_and_unpack_round_trip_a_strided_layout() {
        let d = Ty::Derived(Arc::new(build(&[(0, 1, int()), (8, 1, int())])));
        let src: [i32; 6] = [1, 2, 3, 4, 5, 6];
        // Two elements of extent 12: ints 0, 2, 3, 5.
        let packed = d.send_bytes(src.as_ptr().cast(), 2).expect("pack");
        let got: Vec<i32> = packed
            .chunks(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(got, vec![1, 3, 4, 6]);
        let mut dst = [0i32; 6];
        // SAFETY: `dst` holds two elements of the type (24 bytes).
        unsafe { d.unpack(&packed, dst.as_mut_ptr().cast(), 2) };
        assert_eq!(dst, [1, 0, 3, 4, 0, 6]);
    }

    #[test]
    fn predefined_handles_decode_their_size() {
        let t = ty(0x4c00080bu32 as c_int).expect("MPI_DOUBLE");
        assert_eq!((t.size(), t.elem()), (8, Some(Elem::F64)));
        let t = ty(0x8c000001u32 as c_int).expect("MPI_DOUBLE_INT");
        assert_eq!((t.size(), t.extent()), (12, 16));
        assert!(ty(MPI_DATATYPE_NULL).is_err());
    }
}
