#![no_main]
//! A shared-memory ring's consumer against a hostile producer: arbitrary
//! counters and bytes (see `nal_shm::fuzzing::hostile_ring`).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nal_shm::fuzzing::hostile_ring(data));
