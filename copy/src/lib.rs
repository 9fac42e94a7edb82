//! # portals-copy
//!
//! The copy that moves payload bytes everywhere in portals-rs: into and out
//! of memory descriptors, into transport buffers and rings. It is
//! `memcpy`, except in the one case where glibc's `memcpy` is measured to
//! run more than ten times slower than it should.
//!
//! **Why.** For copies between about 2 KiB and 512 KiB glibc (2.36) on
//! x86-64 uses `rep movsb` (its `rep_movsb_threshold` and
//! `rep_movsb_stop_threshold`). On the AMD EPYC (Zen 3) machines this
//! project runs on, `rep movsb` moves 1.6–3 GB/s instead of 40–50 GB/s
//! when the destination lies 1 to 31 bytes past the source modulo a page,
//! that is when `(dst - src) mod 4096` is in `1..=31` (`docs/PERFORMANCE.md`,
//! "The state after stop 47", has the scans). Which case a transfer gets
//! depends on where the allocator placed two buffers and on header
//! lengths, so a benchmark ran 20 µs or 60 µs per 60 KB message from one
//! run to the next. The kernel's copies to user space use the same
//! instruction, so the transports also place their receive buffers on
//! page boundaries (`nal_sys::batch::RecvBatch`).
//!
//! **What.** [`copy`] / [`copy_nonoverlapping`] take that case (length of
//! at least [`LOOP_MIN`] bytes, a distance in the [`short_distance`] band) to
//! a loop of 32-byte AVX2 loads and aligned stores when the CPU has AVX2,
//! and leave everything else to the standard library's copy (that is,
//! glibc's `memcpy`, which is fast there). On other CPUs the loop is as
//! fast as glibc's own vector loop, so taking the band there costs
//! nothing. Without AVX2, or under Miri, it is always the standard copy.
//! No well-kept crate offers a copy that avoids `rep movsb` (the `memcpy`
//! of `compiler_builtins` uses it too), hence this one.

#![warn(missing_docs)]

/// Copies shorter than this always go to the standard copy: glibc does
/// not use `rep movsb` below its threshold (2 112 bytes on the machines
/// measured), and its small-copy paths are hard to beat.
pub const LOOP_MIN: usize = 2048;

/// Copy `src` into `dst`, which must have the same length (like
/// [`slice::copy_from_slice`], it panics otherwise).
#[inline]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy: destination and source lengths differ"
    );
    // SAFETY: both slices are valid for their (equal) length, and a `&mut`
    // slice cannot overlap a `&` slice.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// Append `src` to `out`, as [`Vec::extend_from_slice`].
#[inline]
pub fn extend_from_slice(out: &mut Vec<u8>, src: &[u8]) {
    out.reserve(src.len());
    let len = out.len();
    // SAFETY: `reserve` made room for `src.len()` more bytes past `len`;
    // `src` cannot overlap `out`'s spare capacity (it is borrowed while
    // `out` is borrowed mutably); once copied, those bytes are initialized.
    unsafe {
        copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr().add(len), src.len());
        out.set_len(len + src.len());
    }
}

/// Copy `n` bytes from `src` to `dst`, as [`core::ptr::copy_nonoverlapping`].
///
/// # Safety
/// As for [`core::ptr::copy_nonoverlapping`]: `src` valid for reads and
/// `dst` for writes of `n` bytes, and the two ranges do not overlap.
#[inline]
pub unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, n: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if n >= LOOP_MIN && short_distance(src, dst) && avx2::available() {
        // SAFETY: the caller's contract, and AVX2 is available.
        unsafe { avx2::copy(src, dst, n) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, n) }
}

/// Whether the destination lies 1 to 31 bytes past the source modulo a
/// page: where `rep movsb` was measured slow, in user space and in the
/// kernel alike (from 32 bytes on it is fast again). Exactly that band,
/// because a caller that works around the kernel's copy (nal-shm's bounce
/// buffer) pays a copy of its own for it.
#[inline]
pub fn short_distance(src: *const u8, dst: *mut u8) -> bool {
    let d = (dst as usize).wrapping_sub(src as usize) % 4096;
    (1..32).contains(&d)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx2 {
    use core::arch::x86_64::{
        __m256i, _mm256_loadu_si256, _mm256_store_si256, _mm256_storeu_si256,
    };

    /// Whether the CPU (and the OS) support AVX2; the standard library
    /// probes once and caches the answer.
    #[inline]
    pub(crate) fn available() -> bool {
        std::is_x86_feature_detected!("avx2")
    }

    /// Copy `n >= 32` bytes with unaligned 32-byte loads and aligned
    /// 32-byte stores, 128 bytes per iteration.
    ///
    /// # Safety
    /// As `core::ptr::copy_nonoverlapping`, `n >= 32`, and AVX2 available.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
        debug_assert!(n >= 32);
        // SAFETY (whole function): every load reads 32 bytes at an offset
        // `o` with `o + 32 <= n` from `src`, and every store writes 32
        // bytes at such an offset of `dst`; the caller guarantees both
        // ranges for `n` bytes. Stores through `_mm256_store_si256` are at
        // 32-byte aligned addresses (see `head`).
        unsafe {
            let ld = |o: usize| _mm256_loadu_si256(src.add(o) as *const __m256i);
            // The first 32 bytes unaligned; then from the first 32-byte
            // aligned destination address on, aligned stores. The last 32
            // bytes unaligned again, overlapping what came before (the
            // same bytes, written twice).
            let first = ld(0);
            let last = ld(n - 32);
            let head = 32 - (dst as usize & 31);
            let mut o = head;
            while o + 128 <= n {
                let (a, b, c, d) = (ld(o), ld(o + 32), ld(o + 64), ld(o + 96));
                _mm256_store_si256(dst.add(o) as *mut __m256i, a);
                _mm256_store_si256(dst.add(o + 32) as *mut __m256i, b);
                _mm256_store_si256(dst.add(o + 64) as *mut __m256i, c);
                _mm256_store_si256(dst.add(o + 96) as *mut __m256i, d);
                o += 128;
            }
            while o + 32 <= n {
                let a = ld(o);
                _mm256_store_si256(dst.add(o) as *mut __m256i, a);
                o += 32;
            }
            _mm256_storeu_si256(dst as *mut __m256i, first);
            _mm256_storeu_si256(dst.add(n - 32) as *mut __m256i, last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Fill `b` with a pattern that differs from byte to byte and with
    /// `seed`.
    fn fill_pattern(b: &mut [u8], seed: u8) {
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        let mut v = vec![0; n];
        fill_pattern(&mut v, seed);
        v
    }

    /// A vector of `n` bytes plus room to start anywhere in a page.
    fn paged(n: usize, fill: u8) -> (Vec<u8>, usize) {
        let v = vec![fill; n + 8192];
        let at = v.as_ptr().align_offset(4096);
        (v, at)
    }

    /// Every length around the thresholds, sources at a few offsets and
    /// destinations at every offset 0..64 from page boundaries (distances
    /// -63..=63 modulo a page, so both the vector loop and the standard
    /// copy): exactly the
    /// source's bytes land, and nothing around them changes.
    #[test]
    fn every_alignment_and_length_near_the_thresholds_copies_exactly() {
        let lens = [
            0, 1, 31, 32, 33, 127, 128, 129, 2047, 2048, 2049, 2111, 2112, 4096, 4097, 65_549,
        ];
        let (mut src_all, s0) = paged(70_000, 0);
        fill_pattern(&mut src_all, 7);
        let (mut dst_all, d0) = paged(70_200, 0);
        for &n in &lens {
            for so in [0, 1, 13, 32, 63] {
                for doff in 0..64 {
                    dst_all.fill(0xEE);
                    let src = &src_all[s0 + so..s0 + so + n];
                    let at = d0 + 64 + doff;
                    copy(&mut dst_all[at..at + n], src);
                    assert_eq!(&dst_all[at..at + n], src, "n {n} src {so} dst {doff}");
                    assert!(
                        dst_all[..at].iter().all(|&b| b == 0xEE),
                        "wrote before, n {n}"
                    );
                    assert!(
                        dst_all[at + n..].iter().all(|&b| b == 0xEE),
                        "wrote after, n {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_band_is_a_destination_1_to_31_bytes_past_the_source_modulo_a_page() {
        let base = 1 << 20;
        let at = |o: usize| (base + o) as *mut u8;
        assert!(!short_distance(at(0), at(0)));
        assert!(!short_distance(at(0), at(4096)));
        assert!(short_distance(at(0), at(1)));
        assert!(short_distance(at(0), at(31)));
        assert!(!short_distance(at(0), at(32)));
        assert!(!short_distance(at(0), at(63)));
        assert!(!short_distance(at(0), at(64)));
        assert!(!short_distance(at(0), at(64 + 16)));
        assert!(short_distance(at(0), at(3 * 4096 + 16)));
        // Behind the source: 4096 - 16 past it.
        assert!(!short_distance(at(16), at(0)));
        assert!(short_distance(at(4000), at(4096 + 4010)));
    }

    #[test]
    fn extending_appends_exactly_the_bytes() {
        let (mut src, s0) = paged(70_000, 0);
        fill_pattern(&mut src, 1);
        let mut out = vec![9u8; 16];
        extend_from_slice(&mut out, &src[s0 + 3..s0 + 3 + 65_000]);
        extend_from_slice(&mut out, &[]);
        extend_from_slice(&mut out, &src[s0..s0 + 5]);
        assert_eq!(out.len(), 16 + 65_000 + 5);
        assert_eq!(out[..16], [9u8; 16]);
        assert!(out[16..16 + 65_000] == src[s0 + 3..s0 + 3 + 65_000]);
        assert!(out[16 + 65_000..] == src[s0..s0 + 5]);
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn a_length_mismatch_panics_like_copy_from_slice() {
        let mut d = [0u8; 3];
        copy(&mut d, &[1, 2]);
    }

    /// The vector loop itself at every length from 32 on, and every
    /// destination alignment (the public path gives it only 2 KiB and up).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn the_vector_loop_copies_every_short_length_exactly() {
        if !avx2::available() {
            return;
        }
        let src = pattern(600, 3);
        let mut dst = vec![0u8; 700];
        for n in 32..=300 {
            for doff in 0..40 {
                dst.fill(0xEE);
                // SAFETY: both ranges lie inside their vectors, which are
                // distinct; n >= 32; AVX2 is available.
                unsafe { avx2::copy(src[5..].as_ptr(), dst[doff..].as_mut_ptr(), n) };
                assert_eq!(&dst[doff..doff + n], &src[5..5 + n], "n {n} dst {doff}");
                assert!(dst[..doff].iter().all(|&b| b == 0xEE));
                assert!(dst[doff + n..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    proptest! {
        #[test]
        fn any_copy_equals_copy_from_slice(
            n in 0usize..20_000,
            so in 0usize..4096,
            // Destinations around the source's page offset, where the
            // vector loop takes over, more often than by chance.
            delta in 0usize..160,
            seed in any::<u8>(),
        ) {
            let (mut src, s0) = paged(n + so, 0);
            fill_pattern(&mut src, seed);
            let doff = (so + 4096 + delta - 80) % 4096;
            let (mut a, d0) = paged(n + doff, 0);
            let mut b = a.clone();
            let (s, d) = (s0 + so, d0 + doff);
            copy(&mut a[d..d + n], &src[s..s + n]);
            b[d..d + n].copy_from_slice(&src[s..s + n]);
            prop_assert_eq!(a, b);
        }
    }
}
