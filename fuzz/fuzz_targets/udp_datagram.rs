#![no_main]
//! Arbitrary bytes into the UDP transport's datagram decoder; whatever
//! decodes must re-encode to the same datagram.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nal_udp::fuzzing::datagram(data));
