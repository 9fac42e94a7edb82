//! The copy against the standard library's at sizes and relative
//! alignments where glibc's `rep movsb` is fast and where it is slow
//! (`cargo bench -p portals-copy`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn copies(c: &mut Criterion) {
    let src = vec![0x5au8; (1 << 20) + 8192];
    let mut dst = vec![0u8; (1 << 20) + 8192];
    // Offsets from page-aligned starts inside each vector.
    let s0 = src.as_ptr().align_offset(4096);
    let d0 = dst.as_ptr().align_offset(4096);
    let mut g = c.benchmark_group("copy");
    for n in [1024usize, 8192, 61_440, 262_144] {
        g.throughput(Throughput::Bytes(n as u64));
        for diff in [0usize, 16, 48] {
            let s = &src[s0..s0 + n];
            let at = d0 + diff;
            g.bench_with_input(
                BenchmarkId::new(format!("std/diff{diff}"), n),
                &n,
                |b, _| {
                    b.iter(|| {
                        dst[at..at + n].copy_from_slice(std::hint::black_box(s));
                        std::hint::black_box(&mut dst);
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("portals/diff{diff}"), n),
                &n,
                |b, _| {
                    b.iter(|| {
                        portals_copy::copy(&mut dst[at..at + n], std::hint::black_box(s));
                        std::hint::black_box(&mut dst);
                    })
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, copies);
criterion_main!(benches);
