//! The fuzz target `shm_ring` as a property test, so that its contract (a
//! consumer given garbage by a hostile producer refuses it, never reads
//! outside the ring) is enforced on toolchains without cargo-fuzz.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_consumer_survives_a_hostile_producer(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        nal_shm::fuzzing::hostile_ring(&bytes);
    }

    /// Plausible rounds: tails near the consumer's head, record headers
    /// with small lengths and known kinds, so the fuzzer gets past the
    /// first checks.
    #[test]
    fn a_consumer_survives_plausible_garbage(
        rounds in proptest::collection::vec((0u64..8192, 0u32..600, 1u32..6, proptest::collection::vec(any::<u8>(), 0..64)), 1..40)
    ) {
        let mut input = Vec::new();
        for (tail, len, kind, tail_bytes) in rounds {
            let tail = tail & !7;
            let mut chunk = Vec::new();
            chunk.extend_from_slice(&len.to_le_bytes());
            chunk.extend_from_slice(&kind.to_le_bytes());
            chunk.extend_from_slice(&tail_bytes);
            input.extend_from_slice(&tail.to_le_bytes());
            input.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
            input.extend_from_slice(&chunk);
        }
        nal_shm::fuzzing::hostile_ring(&input);
    }
}
