//! The fuzz targets' contracts as property tests, so CI checks them on the
//! stable toolchain (cargo-fuzz needs nightly). Biased generators make most
//! inputs pass the cheap checks and reach the matching code.

use portals::fuzzing;
use portals::wire::HEADER_LEN;
use proptest::prelude::*;

/// Chunks of one control byte plus an encoded-looking header: a valid magic
/// and version most of the time, random everything else; atomic requests
/// carry a known operation and type most of the time.
fn header_stream() -> impl Strategy<Value = Vec<u8>> {
    let chunk = (
        any::<u8>(),
        1u8..=7,
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), HEADER_LEN - 6),
    )
        .prop_map(|(ctl, op, sane, rest)| {
            let mut c = vec![ctl];
            if sane {
                c.extend_from_slice(b"PTL3");
                c.push(1);
                c.push(op);
            } else {
                c.extend_from_slice(&rest[..6]);
            }
            c.extend_from_slice(&rest);
            // Keep lengths small so deposits stay inside the descriptors.
            if sane {
                c[1 + 64..1 + 72].copy_from_slice(&((rest[0] % 80) as u64).to_le_bytes());
                c[1 + 72..1 + 80].fill(0);
                if op >= 6 {
                    // An atomic spec, sometimes with an unknown code.
                    c[1 + 72] = rest[2] % 19;
                    c[1 + 73] = rest[3] % 13;
                }
                c[1 + 6] &= 1;
                c[1 + 7] = rest[1] % 4;
            }
            c
        });
    proptest::collection::vec(chunk, 0..64).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn wire_header_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzzing::wire_header(&bytes);
    }

    #[test]
    fn engine_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        fuzzing::engine_headers(&bytes);
    }

    #[test]
    fn engine_survives_header_streams(bytes in header_stream()) {
        fuzzing::engine_headers(&bytes);
    }

    #[test]
    fn iovec_entry_points_survive_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        fuzzing::iovec_descriptors(&bytes);
    }
}
