//! What the transport tests that talk raw TCP to an interface share: the
//! handshake's bytes, written out here rather than taken from the crate so
//! that the tests check the wire format, not echo it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nal_tcp::TcpConfig;
use portals::ProcessId;

/// A process of a test job over TCP.
pub type Node = portals_tests::conformance::Node<TcpConfig>;

/// The Hello a process `src` of job `key` opens its connection to `dst` with.
pub fn hello(key: u64, src: ProcessId, dst: ProcessId) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..4].copy_from_slice(b"PTLH");
    b[4..6].copy_from_slice(&1u16.to_le_bytes());
    b[6] = 1;
    b[8..16].copy_from_slice(&key.to_le_bytes());
    b[16..20].copy_from_slice(&src.nid.to_le_bytes());
    b[20..24].copy_from_slice(&src.pid.to_le_bytes());
    b[24..28].copy_from_slice(&dst.nid.to_le_bytes());
    b[28..32].copy_from_slice(&dst.pid.to_le_bytes());
    b
}

/// A raw TCP client that passes `node`'s handshake as process `me` (and
/// says nothing of answering liveness probes, so it is never probed).
/// `node` must make progress meanwhile (its progress thread, or a thread
/// driving it in polling mode).
pub fn raw_handshake(node: &Node, me: ProcessId) -> TcpStream {
    let mut c = TcpStream::connect(node.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(&hello(node.key, me, node.ni.id())).unwrap();
    let mut acc = [0u8; 32];
    c.read_exact(&mut acc).unwrap();
    assert_eq!(acc[6], 2, "accepted");
    c
}
