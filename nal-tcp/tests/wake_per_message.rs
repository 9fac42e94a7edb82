//! Issue 22: a progress thread wakes once per large message, not once per
//! arriving segment (`TcpConfig::wake_per_message`). The sender is a raw
//! TCP peer that writes a 1 MB put in small pieces with pauses between, as
//! a slow network or a busy sender delivers it, while the receiving rank
//! makes no call that drives the transport: only its progress thread can
//! take the message, and the transport's own counters say how often it
//! woke to do so.

mod common;
use common::*;

use std::io::Write;
use std::time::{Duration, Instant};

use nal_tcp::{Backend, ProgressMode, TcpConfig, TcpStats};
use portals::*;
use portals_tests::conformance::{attach, catch_all, id, job, pattern, put_header};

const MSG: usize = 1 << 20;
/// Written at a time by the raw sender, with a pause after each.
const PIECE: usize = 16 << 10;
const PAUSE: Duration = Duration::from_micros(300);

/// Send one 1 MB put in pieces to a rank that never drives its transport;
/// return its counters' growth over the message and whether the message
/// was delivered intact.
fn trickle_one_message(cfg: &TcpConfig) -> (TcpStats, TcpStats) {
    let nodes = job(1, cfg);
    let a = &nodes[0];
    let eq = a.ni.eq_alloc(8).unwrap();
    let md = catch_all(&a.ni, eq, MSG);
    let b = id(1);
    let mut s = raw_handshake(a, b);
    let mut frame = put_header(a.key, b, id(0), MSG as u64).to_vec();
    frame.extend_from_slice(&pattern(MSG, 7));
    // Let the progress thread settle after the handshake.
    std::thread::sleep(Duration::from_millis(20));
    let before = a.nal.stats();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for piece in frame.chunks(PIECE) {
                s.write_all(piece).unwrap();
                std::thread::sleep(PAUSE);
            }
        });
        // The rank computes: it only looks at its event queue (which does
        // not drive the transport) between pieces of work.
        let t0 = Instant::now();
        let ev = loop {
            if let Some(ev) = a.ni.eq_get(eq).unwrap() {
                break ev;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{cfg:?}: the progress thread never completed the message: {:?}",
                a.nal.stats()
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!((ev.kind, ev.fail), (EventKind::Put, FailType::Ok), "{ev:?}");
        assert_eq!(ev.mlength, MSG as u64);
    });
    let after = a.nal.stats();
    let mut got = vec![0u8; MSG];
    a.ni.md_read(md, 0, &mut got).unwrap();
    assert!(got == pattern(MSG, 7), "{cfg:?}: payload corrupted");
    (before, after)
}

#[test]
fn a_rank_that_computes_gets_a_trickled_1mb_message_with_few_progress_wakeups() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let cfg = TcpConfig {
            backend,
            progress: ProgressMode::Thread,
            ..TcpConfig::default()
        };
        let (before, after) = trickle_one_message(&cfg);
        let wakeups = after.progress_wakeups - before.progress_wakeups;
        let pieces = MSG.div_ceil(PIECE) as u64;
        eprintln!("{backend:?}: {wakeups} progress wake-ups, {pieces} pieces");
        // Per segment this would be about one wake-up per piece (64); the
        // mark lets the header's read, the last piece and the kernel's own
        // flow-control wake-ups (a receive window closing before the mark
        // is met) through.
        assert!(
            wakeups <= pieces / 4,
            "{backend:?}: {wakeups} progress wake-ups for {pieces} pieces: {after:?}"
        );
        assert!(after.lowat_marks > before.lowat_marks, "{after:?}");
    }
}

/// The low-water mark is the rest of *this* payload: the next message is
/// seen at its first byte, however small (a mark left at the old size
/// would keep the socket unreadable for a 1-byte message).
#[test]
fn a_small_message_after_a_large_one_is_taken_at_once() {
    let cfg = TcpConfig::default();
    let nodes = job(1, &cfg);
    let a = &nodes[0];
    let eq = a.ni.eq_alloc(8).unwrap();
    // Each message lands at offset 0 (the second must not find the
    // descriptor full).
    let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq);
    attach(&a.ni, ProcessId::ANY, 0, u64::MAX, &desc, MSG);
    let b = id(1);
    let mut s = raw_handshake(a, b);
    let mut frame = put_header(a.key, b, id(0), MSG as u64).to_vec();
    frame.extend_from_slice(&pattern(MSG, 1));
    for piece in frame.chunks(PIECE) {
        s.write_all(piece).unwrap();
        std::thread::sleep(PAUSE);
    }
    let ev = a.ni.eq_wait(eq, Some(Duration::from_secs(20))).unwrap();
    assert_eq!(ev.mlength, MSG as u64);
    let mut small = put_header(a.key, b, id(0), 1).to_vec();
    small.push(9);
    s.write_all(&small).unwrap();
    // Only the progress thread reads now; a mark left over would hold the
    // message until the peer timeout.
    let t0 = Instant::now();
    let ev = loop {
        if let Some(ev) = a.ni.eq_get(eq).unwrap() {
            break ev;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the small message was never taken: {:?}",
            a.nal.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(ev.mlength, 1);
    let s = a.nal.stats();
    assert!(s.lowat_marks >= 2, "set and put back: {s:?}");
}
