//! Properties of typemaps: packing then unpacking an indexed layout moves
//! exactly the values the layout covers and leaves every other byte alone;
//! unpacking into `bool`s succeeds exactly when every byte is 0 or 1, and
//! writes nothing otherwise; a layout's segments, where it has them, are
//! its packed form in the same order, never more than asked for, and
//! never shorter on average than `MIN_SEGMENT_BYTES`.

use mpi_on_portals::segments::Iovec;
use mpi_on_portals::typemap::{Kind, Typemap, MIN_SEGMENT_BYTES};
use proptest::prelude::*;

proptest! {
    #[test]
    fn indexed_pack_unpack_moves_exactly_the_covered_values(
        blocks in prop::collection::vec((0usize..4, 0usize..3), 0..6),
        count in 0usize..3,
    ) {
        // Blocks (gap before, length), laid out left to right: never overlap.
        let (mut lens, mut displs, mut at) = (Vec::new(), Vec::new(), 0);
        for &(gap, len) in &blocks {
            at += gap;
            displs.push(at);
            lens.push(len);
            at += len;
        }
        let t = Typemap::indexed(&lens, &displs, &Typemap::predefined(Kind::plain::<u32>()))
            .unwrap();
        let elems = t.span(count).unwrap() / 4;
        let src: Vec<u32> = (1..=elems as u32).collect();
        let mut packed = Vec::new();
        // SAFETY: `src` holds span(count) bytes.
        unsafe { t.pack(count, src.as_ptr().cast(), &mut packed) };
        prop_assert_eq!(packed.len(), t.size() * count);
        let mut dst = vec![0u32; elems];
        // SAFETY: `dst` holds span(count) bytes.
        let used = unsafe { t.unpack(count, &packed, dst.as_mut_ptr().cast()) }.unwrap();
        prop_assert_eq!(used, packed.len());
        let stride = (t.extent() / 4).max(1);
        for (i, (&d, &s)) in dst.iter().zip(&src).enumerate() {
            let within = i % stride;
            let covered = i / stride < count
                && displs.iter().zip(&lens).any(|(&o, &l)| within >= o && within < o + l);
            prop_assert_eq!(d, if covered { s } else { 0 }, "element {}", i);
        }
    }

    #[test]
    fn bools_unpack_only_from_zeros_and_ones(bytes in prop::collection::vec(0u8..4, 0..16)) {
        let t = Typemap::contiguous(bytes.len(), &Typemap::predefined(Kind::Bool)).unwrap();
        let mut dst = vec![false; bytes.len()];
        // SAFETY: `dst` holds span(1) = len bytes.
        let r = unsafe { t.unpack(1, &bytes, dst.as_mut_ptr().cast()) };
        if bytes.iter().all(|&b| b <= 1) {
            prop_assert_eq!(r, Ok(bytes.len()));
            prop_assert!(dst.iter().zip(&bytes).all(|(&d, &b)| d == (b == 1)));
        } else {
            prop_assert!(r.is_err());
            prop_assert!(dst.iter().all(|&d| !d));
        }
    }

    #[test]
    fn segments_gather_to_the_packed_form(
        blocks in prop::collection::vec((0usize..40, 0usize..40), 1..6),
        count in 0usize..4,
        max in 1usize..12,
    ) {
        // Blocks (gap before, length) of u32, left to right, listed in
        // reverse: wire order is not address order.
        let (mut lens, mut displs, mut at) = (Vec::new(), Vec::new(), 0);
        for &(gap, len) in &blocks {
            at += gap;
            displs.push(at);
            lens.push(len);
            at += len;
        }
        lens.reverse();
        displs.reverse();
        let t = Typemap::indexed(&lens, &displs, &Typemap::predefined(Kind::plain::<u32>()))
            .unwrap();
        let mut src: Vec<u8> = (0..t.span(count).unwrap()).map(|i| (i * 7 + 3) as u8).collect();
        let mut packed = Vec::new();
        // SAFETY: `src` holds span(count) bytes.
        unsafe { t.pack(count, src.as_ptr().cast(), &mut packed) };
        let mut list: Vec<Iovec> = Vec::new();
        if t.segments(count, src.as_mut_ptr(), max, &mut list) {
            prop_assert!(list.len() <= max);
            prop_assert!(list.iter().all(|s| s.len > 0));
            if !list.is_empty() {
                prop_assert!(packed.len() / list.len() >= MIN_SEGMENT_BYTES);
            }
            let mut gathered = Vec::new();
            // SAFETY: the segments lie within `src`.
            unsafe { Typemap::gather(&list, &mut gathered) };
            prop_assert_eq!(&gathered, &packed);
            // Scattering the packed form back into zeros restores the
            // covered bytes exactly.
            let base = src.as_ptr() as usize;
            let mut dst = vec![0u8; src.len()];
            let moved: Vec<Iovec> = list
                .iter()
                .map(|s| Iovec::new(dst.as_mut_ptr().wrapping_add(s.base as usize - base), s.len))
                .collect();
            // SAFETY: the moved segments lie within `dst`.
            unsafe { Typemap::scatter(&moved, &packed) };
            let mut back = Vec::new();
            // SAFETY: `dst` holds span(count) bytes.
            unsafe { t.pack(count, dst.as_ptr(), &mut back) };
            prop_assert_eq!(back, packed);
        }
    }
}
