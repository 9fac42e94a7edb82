//! Issue 22: while a large payload is read, reads into the connection's
//! buffer stop at the end of the next header, so a stream of large
//! messages goes from the socket straight into the descriptors. A read of the whole connection buffer at each header
//! copied the start of every large payload (up to 64 KiB of it) through the
//! buffer first; `TcpStats::payload_bytes_staged` counts such copies.

mod common;
use common::*;

use std::io::Write;
use std::time::Duration;

use nal_tcp::TcpConfig;
use portals::*;
use portals_tests::conformance::{catch_all, id, job, pattern, put_header};

const MSG: usize = 256 << 10;
const COUNT: usize = 6;

#[test]
fn a_stream_of_large_puts_is_read_into_its_descriptors_not_through_the_buffer() {
    let cfg = TcpConfig::default();
    let nodes = job(1, &cfg);
    let a = &nodes[0];
    let eq = a.ni.eq_alloc(2 * COUNT).unwrap();
    // Locally managed offsets: message i lands at i * MSG.
    let md = catch_all(&a.ni, eq, COUNT * MSG);
    let b = id(1);
    let mut s = raw_handshake(a, b);
    let frame = |i: usize| {
        let mut f = put_header(a.key, b, id(0), MSG as u64).to_vec();
        f.extend_from_slice(&pattern(MSG, i as u8));
        f
    };
    let take = |what: &str| {
        let ev =
            a.ni.eq_wait(eq, Some(Duration::from_secs(20)))
                .unwrap_or_else(|e| panic!("{what}: {e:?}: {:?}", a.nal.stats()));
        assert_eq!((ev.kind, ev.fail), (EventKind::Put, FailType::Ok), "{ev:?}");
        assert_eq!(ev.mlength, MSG as u64, "{what}");
    };
    // The first message's header comes with a full-buffer read (nothing
    // says yet that large payloads follow).
    s.write_all(&frame(0)).unwrap();
    take("first message");
    let before = a.nal.stats();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            // Each header in the same write as its payload: whatever read
            // takes the header finds payload bytes behind it.
            for i in 1..COUNT {
                s.write_all(&frame(i)).unwrap();
            }
        });
        for i in 1..COUNT {
            take(&format!("message {i}"));
        }
    });
    let after = a.nal.stats();
    // A payload's last bytes, once fewer than `direct_read_min` are due,
    // still come through the buffer (with the next header); the start of
    // each payload, which a full-buffer read at the header took (about
    // 64 KiB a message), no longer does.
    let staged = after.payload_bytes_staged - before.payload_bytes_staged;
    assert!(
        staged < ((COUNT - 1) * cfg.direct_read_min) as u64,
        "{staged} payload bytes of {} messages copied through the connection's buffer: {after:?}",
        COUNT - 1
    );
    assert!(
        after.bytes_received - before.bytes_received >= ((COUNT - 1) * MSG) as u64,
        "{after:?}"
    );
    let mut got = vec![0u8; COUNT * MSG];
    a.ni.md_read(md, 0, &mut got).unwrap();
    for (i, part) in got.chunks(MSG).enumerate() {
        assert!(part == pattern(MSG, i as u8), "message {i} corrupted");
    }
}

/// Small messages still share reads: after a small payload the next read
/// takes what the buffer holds, so a burst of small puts is copied from
/// the buffer, and every one arrives.
#[test]
fn small_puts_after_a_large_one_arrive_and_share_the_buffer() {
    const SMALL: usize = 100;
    let cfg = TcpConfig::default();
    let nodes = job(1, &cfg);
    let a = &nodes[0];
    let eq = a.ni.eq_alloc(64).unwrap();
    let md = catch_all(&a.ni, eq, MSG + 32 * SMALL);
    let b = id(1);
    let mut s = raw_handshake(a, b);
    let mut burst = put_header(a.key, b, id(0), MSG as u64).to_vec();
    burst.extend_from_slice(&pattern(MSG, 1));
    for i in 0..32u8 {
        burst.extend_from_slice(&put_header(a.key, b, id(0), SMALL as u64));
        burst.extend_from_slice(&[i; SMALL]);
    }
    s.write_all(&burst).unwrap();
    for i in 0..33 {
        let ev =
            a.ni.eq_wait(eq, Some(Duration::from_secs(20)))
                .unwrap_or_else(|e| panic!("message {i}: {e:?}: {:?}", a.nal.stats()));
        assert_eq!((ev.kind, ev.fail), (EventKind::Put, FailType::Ok), "{ev:?}");
    }
    let mut got = vec![0u8; MSG + 32 * SMALL];
    a.ni.md_read(md, 0, &mut got).unwrap();
    assert!(got[..MSG] == pattern(MSG, 1));
    for (i, part) in got[MSG..].chunks(SMALL).enumerate() {
        assert!(part.iter().all(|&x| x == i as u8), "small put {i}");
    }
    let st = a.nal.stats();
    assert!(
        st.payload_bytes_staged >= (32 * SMALL) as u64,
        "small payloads come through the buffer: {st:?}"
    );
}
