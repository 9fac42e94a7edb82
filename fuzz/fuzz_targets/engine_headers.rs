#![no_main]
//! Arbitrary headers into an engine with a fixed set of match entries.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| portals::fuzzing::engine_headers(data));
