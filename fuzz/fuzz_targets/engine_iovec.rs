#![no_main]
//! Arbitrary scatter/gather lists and ranges into the iovec entry points.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| portals::fuzzing::iovec_descriptors(data));
