//! The atomic behaviours of the conformance suite (Portals 4 atomics over
//! every transport).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use portals::*;

use super::{attach, each_process, id, job, progress_until, Transport, PT, WAIT};

/// Fetching sums in flight per process before it waits for replies.
const WINDOW: usize = 16;

/// Four processes each add 1 to one `u64` counter at process 0 with
/// `EACH` fetching sums (process 0 included, through its own transport's
/// self-send), all at once, each keeping up to 16 in flight. No
/// update is lost and none is applied twice: the counter ends at
/// `4 * EACH`, and the old values fetched are exactly `0 .. 4 * EACH`, each
/// once.
pub fn concurrent_fetching_sums_lose_no_update<C: Transport>(cfg: &C) {
    const N: usize = 4;
    const EACH: usize = 200;
    let nodes = job(N, cfg);
    let sum = AtomicSpec {
        op: AtomicOp::Sum,
        datatype: Datatype::U64,
    };
    let counter = attach(
        &nodes[0].ni,
        ProcessId::ANY,
        7,
        0,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE),
        8,
    );
    let fetched = Mutex::new(Vec::new());
    each_process(&nodes, |_me, node, start| {
        let ni = &node.ni;
        let eq = ni.eq_alloc(4 * WINDOW + 16).unwrap();
        let one = ni
            .md_bind(
                &MdDesc::default().eq(eq),
                1u64.to_le_bytes().to_vec(),
                Unlink::Retain,
            )
            .unwrap();
        let olds = ni
            .md_bind(&MdDesc::default().eq(eq), vec![0; EACH * 8], Unlink::Retain)
            .unwrap();
        let to = Remote::new(id(0), PT, 7);
        start.wait();
        let (mut issued, mut replies) = (0, 0);
        while replies < EACH {
            while issued < EACH && issued - replies < WINDOW {
                ni.fetch_atomic(olds, issued as u64 * 8, one, 0, 8, &to, 0, sum)
                    .unwrap();
                issued += 1;
            }
            let ev = ni.eq_wait(eq, WAIT).expect("an event of a fetching sum");
            assert_eq!(ev.fail, FailType::Ok, "{cfg:?}: {ev:?}");
            match ev.kind {
                EventKind::Reply => {
                    assert_eq!(ev.mlength, 8);
                    replies += 1;
                }
                EventKind::Sent => {}
                k => panic!("{cfg:?}: unexpected {k:?}"),
            }
        }
        let mut got = vec![0u8; EACH * 8];
        ni.md_read(olds, 0, &mut got).unwrap();
        let mut all = fetched.lock().unwrap();
        all.extend(
            got.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
        );
        eq
    });
    let mut now = [0u8; 8];
    nodes[0].ni.md_read(counter, 0, &mut now).unwrap();
    assert_eq!(
        u64::from_le_bytes(now),
        (N * EACH) as u64,
        "{cfg:?}: lost updates"
    );
    let mut all = fetched.into_inner().unwrap();
    all.sort_unstable();
    let want: Vec<u64> = (0..(N * EACH) as u64).collect();
    assert!(
        all == want,
        "{cfg:?}: the old values fetched are not 0..{}, each once",
        N * EACH
    );
    // A target's reply may still be completing after its initiator read it.
    let nis: Vec<&NetworkInterface> = nodes.iter().map(|n| &n.ni).collect();
    progress_until(&nis, WAIT.unwrap(), "every transfer ends", || {
        nis.iter()
            .all(|ni| ni.core().with_engine(|e| e.in_progress()) == (0, 0))
    });
}

/// A triggered atomic and a triggered compare-and-swap fire from the
/// progress thread when a put arrives, while the application sleeps:
/// process 1 records, on its receive counter, a sum of 5 into process 0's
/// counter and then a compare-and-swap of 5 for 9 (threshold 1 both, in
/// that order); process 0 puts to process 1. Process 0's counter ends at
/// 9, and the swap's reply brought back the 5.
pub fn triggered_atomics_fire_while_the_application_sleeps<C: Transport>(cfg: &C) {
    let nodes = job(2, cfg);
    let (a, b) = (&nodes[0].ni, &nodes[1].ni);
    let counter = attach(
        a,
        ProcessId::ANY,
        8,
        0,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE),
        8,
    );
    let rc = b.ct_alloc().unwrap();
    attach(
        b,
        ProcessId::ANY,
        1,
        0,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::CT_COMM).ct(rc),
        8,
    );
    let five = b
        .md_bind(
            &MdDesc::default(),
            5u64.to_le_bytes().to_vec(),
            Unlink::Retain,
        )
        .unwrap();
    let nine = b
        .md_bind(
            &MdDesc::default(),
            9u64.to_le_bytes().to_vec(),
            Unlink::Retain,
        )
        .unwrap();
    let replied = b.ct_alloc().unwrap();
    let old = b
        .md_bind(
            &MdDesc::new(MdOptions::CT_REPLY).ct(replied),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    let to = Remote::new(id(0), PT, 8);
    let u64_op = |op| AtomicSpec {
        op,
        datatype: Datatype::U64,
    };
    b.triggered_atomic(
        five,
        0,
        8,
        AckReq::NoAck,
        &to,
        0,
        u64_op(AtomicOp::Sum),
        Trigger::new(rc, 1),
    )
    .unwrap();
    b.triggered_swap(
        old,
        0,
        nine,
        0,
        8,
        &to,
        0,
        Some(&5u64.to_le_bytes()),
        u64_op(AtomicOp::Cswap),
        Trigger::new(rc, 1),
    )
    .unwrap();
    let go = a
        .md_bind(&MdDesc::default(), b"go!go!go".to_vec(), Unlink::Retain)
        .unwrap();
    a.put(go, AckReq::NoAck, &Remote::new(id(1), PT, 1), 0)
        .unwrap();
    // Only counters are read from here on: they drive nothing.
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.ct_get(replied).unwrap().total() == 0 {
        assert!(
            Instant::now() < deadline,
            "{cfg:?}: the swap never came back"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(b.ct_get(replied).unwrap(), CtEvent::new(1, 0));
    let mut got = [0u8; 8];
    b.md_read(old, 0, &mut got).unwrap();
    assert_eq!(u64::from_le_bytes(got), 5, "{cfg:?}: the swap saw the sum");
    a.md_read(counter, 0, &mut got).unwrap();
    assert_eq!(u64::from_le_bytes(got), 9, "{cfg:?}");
}
