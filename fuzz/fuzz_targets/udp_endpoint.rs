#![no_main]
//! Two UDP-transport endpoints exchanging real traffic over a wire the input
//! schedules, mutates and duplicates, plus garbage and crafted datagrams
//! from other peers; the sink contract and send completions are checked.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nal_udp::fuzzing::endpoint(data));
