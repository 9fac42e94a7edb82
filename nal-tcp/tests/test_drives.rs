//! Issue 22: a rank that tests for completion reads its sockets itself
//! (`NiConfig::test_drives`, `Nal::test_pass`), and the hand-over gate
//! counts the test as a wait, so the progress thread, which shares the
//! rank's core when the rank is bound, stays parked through the hand-back
//! delay instead of waking for each arriving message to do what the next
//! test does anyway (two context switches each, taken out of the rank's
//! computation: COMB in docs/PERFORMANCE.md).
//!
//! A hand-back delay of minutes makes the gate's verdict visible: after one
//! test the progress thread parks for the whole delay, so a message sent
//! then reaches the rank only through its tests, with no progress wake-up
//! on the transport's counters; without `test_drives` the gate never hears
//! of the rank, and the progress thread takes the message.

mod common;
use common::*;

use std::io::Write;
use std::time::{Duration, Instant};

use nal_tcp::{ProgressMode, TcpConfig, TcpStats};
use portals::*;
use portals_tests::conformance::{catch_all, id, job_tuned, pattern, put_header};

const MSG: usize = 64 << 10;

/// One test, time for the progress thread to settle, then a put from a raw
/// peer that the rank takes by testing; the counters before the put and
/// after its event.
fn one_message_by_tests(drives: bool) -> (TcpStats, TcpStats) {
    // As on a bound rank or a crowded host, where the runtime turns
    // `test_drives` on and the early take-over off (with a spare core the
    // progress thread watches the sockets through the hand-back delay).
    let cfg = TcpConfig {
        progress: ProgressMode::Thread,
        early_takeover: false,
        handback: Duration::from_secs(600),
        ..TcpConfig::default()
    };
    let nodes = job_tuned(&[cfg], &|c| c.test_drives = drives);
    let a = &nodes[0];
    assert_eq!(a.ni.test_drives(), drives);
    let eq = a.ni.eq_alloc(8).unwrap();
    let md = catch_all(&a.ni, eq, MSG);
    let b = id(1);
    let mut s = raw_handshake(a, b);
    a.ni.poll_test().unwrap();
    // The progress thread finishes the sleep it was in (50 ms at most) and,
    // with `test_drives`, parks for the rest of the delay.
    std::thread::sleep(Duration::from_millis(300));
    let before = a.nal.stats();
    let mut frame = put_header(a.key, b, id(0), MSG as u64).to_vec();
    frame.extend_from_slice(&pattern(MSG, 5));
    s.write_all(&frame).unwrap();
    let t0 = Instant::now();
    let ev = loop {
        a.ni.poll_test().unwrap();
        if let Some(ev) = a.ni.eq_get(eq).unwrap() {
            break ev;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "drives {drives}: the message never came: {:?}",
            a.nal.stats()
        );
        std::thread::sleep(Duration::from_micros(50));
    };
    let after = a.nal.stats();
    assert_eq!(
        (ev.kind, ev.fail, ev.mlength),
        (EventKind::Put, FailType::Ok, MSG as u64)
    );
    let mut got = vec![0u8; MSG];
    a.ni.md_read(md, 0, &mut got).unwrap();
    assert!(got == pattern(MSG, 5), "drives {drives}: payload corrupted");
    (before, after)
}

#[test]
fn a_rank_that_tests_takes_a_message_itself_with_its_progress_thread_parked() {
    let (before, after) = one_message_by_tests(true);
    assert_eq!(
        after.progress_wakeups, before.progress_wakeups,
        "the progress thread woke for the message: {after:?}"
    );
}

/// Without `test_drives` a test only looks at what the progress thread
/// delivered: the gate never hears of the rank, and the progress thread
/// takes the message (the case the test above tells apart).
#[test]
fn without_test_drives_the_progress_thread_takes_the_message() {
    let (before, after) = one_message_by_tests(false);
    assert!(
        after.progress_wakeups > before.progress_wakeups,
        "the progress thread never woke: {after:?}"
    );
}
