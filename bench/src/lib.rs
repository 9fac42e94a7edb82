//! Benchmarks (in progress).
//!
//! - [`raw`]: raw-socket physical-limit benchmarks (TCP/UDP ping-pong, TCP
//!   streaming) between two processes on loopback.
//! - [`record`]: the JSON-lines result format shared with the C peer
//!   benchmarks in `bench/c/`.

pub mod raw;
pub mod record;
