//! Issue 22: a rank that leaves the library to compute gets its transfers
//! carried by its progress thread before the hand-back delay ends, not
//! only after it:
//! - after a bulk post (`portals::Nal::bulk_post_begin`, which MPI's
//!   non-blocking sends and receives of 64 KiB and more call), over TCP
//!   and UDP;
//! - over TCP, with `TcpConfig::early_takeover`, by the watch on the
//!   sockets once the rank is away.
//!
//! The hand-back here is far longer than the test may take, so only these
//! mechanisms can complete the message while the rank computes; without
//! them the rank would see it only after half a minute.

use std::time::{Duration, Instant};

use nal_tcp::TcpConfig;
use nal_udp::UdpConfig;
use portals::*;
use portals_tests::conformance::{
    attach, bind_md, id, job_with, pattern, Backend, Node, ProgressMode, Transport, PT,
};

const BIG: usize = 4 << 20;
const HANDBACK: Duration = Duration::from_secs(30);
/// How long the rank computes at most before the test gives up: well
/// inside the hand-back.
const COMPUTE: Duration = Duration::from_secs(10);

/// Rank 0 (`rx`, the long hand-back) waits for a go from rank 1, posts a
/// 4 MiB entry (saying so if `post`), and computes while rank 1 puts into
/// it. The job is returned for the transport's counters.
fn carried_while_computing<C: Transport>(rx: C, tx: C, what: &str, post: bool) -> Vec<Node<C>> {
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
    let beq = b.ni.eq_alloc(8).unwrap();
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let big = bind_md(&b.ni, beq, pattern(BIG, 7));
    // The rank waits for the go, so that its progress thread stands aside
    // for the hand-back after the wait.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md), "{what}");
    });
    if post {
        a.ni.nal().bulk_post_begin();
    }
    let big_md = attach(&a.ni, id(1), 2, 0, &desc, BIG);
    if post {
        a.ni.nal().bulk_post_end();
    }
    b.ni.put(big, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
        .unwrap();
    // Computing: looking at the event queue does not drive the transport.
    let t0 = Instant::now();
    let ev = loop {
        if let Some(ev) = a.ni.eq_get(aeq).unwrap() {
            break ev;
        }
        assert!(
            t0.elapsed() < COMPUTE,
            "{what}: the message waited for the hand-back"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        (ev.kind, ev.md_handle),
        (EventKind::Put, big_md),
        "{what}: {ev:?}"
    );
    assert_eq!(ev.mlength, BIG as u64, "{what}");
    let mut got = vec![0u8; BIG];
    a.ni.md_read(big_md, 0, &mut got).unwrap();
    assert!(got == pattern(BIG, 7), "{what}: payload corrupted");
    nodes
}

#[test]
fn a_bulk_post_has_the_tcp_progress_thread_carry_the_transfer_before_the_handback_ends() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let tx = TcpConfig::variant(backend, ProgressMode::Thread);
        let rx = TcpConfig {
            handback: HANDBACK,
            early_takeover: false,
            ..tx.clone()
        };
        let nodes = carried_while_computing(rx, tx, &format!("tcp {backend:?}"), true);
        let s = nodes[0].nal.stats();
        assert_eq!((s.bulk_posts, s.watches), (1, 0), "{s:?}");
    }
}

#[test]
fn a_bulk_post_has_the_udp_progress_thread_carry_the_transfer_before_the_handback_ends() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let tx = UdpConfig::variant(backend, ProgressMode::Thread);
        let rx = UdpConfig {
            handback: HANDBACK,
            ..tx.clone()
        };
        carried_while_computing(rx, tx, &format!("udp {backend:?}"), true);
    }
}

#[test]
fn a_message_arriving_while_the_rank_computes_is_taken_by_tcps_watch_before_the_handback_ends() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let tx = TcpConfig::variant(backend, ProgressMode::Thread);
        let rx = TcpConfig {
            handback: HANDBACK,
            early_takeover: true,
            ..tx.clone()
        };
        let nodes = carried_while_computing(rx, tx, &format!("tcp watch {backend:?}"), false);
        let s = nodes[0].nal.stats();
        assert!(s.watches > 0 && s.bulk_posts == 0, "{s:?}");
    }
}
