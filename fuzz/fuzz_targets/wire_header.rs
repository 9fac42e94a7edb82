#![no_main]
//! Arbitrary bytes into the Portals header decoder.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| portals::fuzzing::wire_header(data));
