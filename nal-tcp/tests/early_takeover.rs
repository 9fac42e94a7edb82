//! Issue 22: a rank that leaves a wait and goes off to compute gets its
//! transfers carried by the progress thread at once, not only after the
//! hand-back delay (`TcpConfig::early_takeover`). The hand-back here is
//! far longer than the test may take, so only the early take-over can
//! complete the message while the rank computes.

use std::time::{Duration, Instant};

use nal_tcp::{Backend, ProgressMode, TcpConfig};
use portals::*;
use portals_tests::conformance::{attach, bind_md, id, job_with, pattern, PT};

const BIG: usize = 1 << 20;
const HANDBACK: Duration = Duration::from_secs(30);
/// How long the rank computes at most before the test gives up: well
/// inside the hand-back.
const COMPUTE: Duration = Duration::from_secs(10);

#[test]
fn a_message_arriving_while_the_rank_computes_is_taken_before_the_handback_ends() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let rx = TcpConfig {
            backend,
            progress: ProgressMode::Thread,
            handback: HANDBACK,
            ..TcpConfig::default()
        };
        let tx = TcpConfig {
            backend,
            progress: ProgressMode::Thread,
            ..TcpConfig::default()
        };
        let nodes = job_with(&[rx, tx]);
        let (a, b) = (&nodes[0], &nodes[1]);
        let aeq = a.ni.eq_alloc(8).unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
        let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
        let big_md = attach(&a.ni, id(1), 2, 0, &desc, BIG);
        let beq = b.ni.eq_alloc(8).unwrap();
        let go = bind_md(&b.ni, beq, vec![1; 8]);
        let big = bind_md(&b.ni, beq, pattern(BIG, 5));
        // The rank waits for the go, long enough for its progress thread
        // to find it waiting and stand aside; then it computes while the
        // large message arrives.
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(150));
                b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                    .unwrap();
                b.ni.put(big, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
                    .unwrap();
            });
            let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
            assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md));
        });
        // Computing: looking at the event queue does not drive the sockets.
        let t0 = Instant::now();
        let ev = loop {
            if let Some(ev) = a.ni.eq_get(aeq).unwrap() {
                break ev;
            }
            assert!(
                t0.elapsed() < COMPUTE,
                "{backend:?}: the message waited for the hand-back: {:?}",
                a.nal.stats()
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md), "{ev:?}");
        assert_eq!(ev.mlength, BIG as u64);
        let mut got = vec![0u8; BIG];
        a.ni.md_read(big_md, 0, &mut got).unwrap();
        assert!(got == pattern(BIG, 5), "{backend:?}: payload corrupted");
        assert!(a.nal.stats().watches > 0, "{:?}", a.nal.stats());
    }
}
