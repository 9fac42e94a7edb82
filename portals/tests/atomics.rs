//! Atomic operations (Portals 4) through the interface and the engine:
//! what reaches the target's memory, what comes back, which events are
//! posted, and what is refused — with a typed error at the initiator, a
//! negative response at the target, and the target's memory untouched.

mod common;

use common::*;
use portals::atomic::AtomicError;
use portals::wire::{Header, Op};
use portals::*;

fn spec(op: AtomicOp, datatype: Datatype) -> AtomicSpec {
    AtomicSpec { op, datatype }
}

/// A retained target entry on `bits` over `init` with `opts` (plus the
/// target queue); remote offsets managed by the initiator.
fn target_md(p: &Pair, bits: u64, opts: MdOptions, init: Vec<u8>) -> MdHandle {
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, bits, 0, Unlink::Retain, Position::After)
        .unwrap();
    p.target
        .md_attach(
            me,
            &MdDesc::new(opts | MdOptions::MANAGE_REMOTE).eq(p.teq),
            init,
            Unlink::Retain,
        )
        .unwrap()
}

fn fetch_opts() -> MdOptions {
    MdOptions::OP_PUT | MdOptions::OP_GET
}

fn read_init(p: &Pair, md: MdHandle, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    p.init.md_read(md, 0, &mut v).unwrap();
    v
}

fn u64s(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn fetch_atomic_sum_adds_and_returns_the_old_values_with_their_events() {
    let p = pair();
    let init: Vec<u8> = [5u64, 100].iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = target_md(&p, 1, fetch_opts(), init);
    let put = p.source(&[2u64.to_le_bytes(), 3u64.to_le_bytes()].concat());
    let get = p.source(&[0; 16]);
    p.init
        .fetch_atomic(
            get,
            0,
            put,
            0,
            16,
            &Remote::new(p.target.id(), PT, 1),
            7,
            spec(AtomicOp::Sum, Datatype::U64),
        )
        .unwrap();
    assert_eq!(u64s(&p.read(t, 16)), [7, 103]);
    assert_eq!(u64s(&read_init(&p, get, 16)), [5, 100]);
    let ev = p.tev().unwrap();
    assert_eq!(
        (ev.kind, ev.mlength, ev.hdr_data),
        (EventKind::FetchAtomic, 16, 7)
    );
    assert!(p.tev().is_none());
    let kinds: Vec<_> = std::iter::from_fn(|| p.iev())
        .map(|e| (e.kind, e.md_handle, e.mlength, e.fail))
        .collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Sent, put, 16, FailType::Ok),
            (EventKind::Reply, get, 16, FailType::Ok)
        ]
    );
    assert_eq!(p.target.status().accepted, 1);
}

#[test]
fn atomic_min_at_an_unaligned_offset_is_applied_and_acknowledged() {
    let p = pair();
    let mut init = vec![0xeeu8; 3];
    init.extend([10i32, -4, 7].iter().flat_map(|v| v.to_le_bytes()));
    init.push(0xee);
    let t = target_md(&p, 2, MdOptions::OP_PUT, init);
    let src: Vec<u8> = [3i32, -1, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    let md = p.source(&src);
    p.init
        .atomic(
            md,
            0,
            12,
            AckReq::Ack,
            &Remote::new(p.target.id(), PT, 2).with_offset(3),
            0,
            spec(AtomicOp::Min, Datatype::I32),
        )
        .unwrap();
    let got = p.read(t, 16);
    let vals: Vec<i32> = got[3..15]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, [3, -4, 7]);
    assert_eq!((got[..3].to_vec(), got[15]), (vec![0xee; 3], 0xee));
    let ev = p.tev().unwrap();
    assert_eq!((ev.kind, ev.offset, ev.mlength), (EventKind::Atomic, 3, 12));
    let kinds: Vec<_> = std::iter::from_fn(|| p.iev()).map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Sent, EventKind::Ack]);
}

#[test]
fn compare_and_swap_swaps_only_when_the_operand_compares() {
    let p = pair();
    let t = target_md(&p, 3, fetch_opts(), 41u64.to_le_bytes().to_vec());
    let put = p.source(&99u64.to_le_bytes());
    let get = p.source(&[0; 8]);
    let remote = Remote::new(p.target.id(), PT, 3);
    let cas = |expect: u64, op: AtomicOp| {
        p.init
            .swap(
                get,
                0,
                put,
                0,
                8,
                &remote,
                0,
                Some(&expect.to_le_bytes()),
                spec(op, Datatype::U64),
            )
            .unwrap();
        u64::from_le_bytes(read_init(&p, get, 8).try_into().unwrap())
    };
    // Not equal: the target keeps 41, and 41 comes back.
    assert_eq!(cas(40, AtomicOp::Cswap), 41);
    assert_eq!(u64s(&p.read(t, 8)), [41]);
    // Equal: swapped.
    assert_eq!(cas(41, AtomicOp::Cswap), 41);
    assert_eq!(u64s(&p.read(t, 8)), [99]);
    // 100 > 99: swap-if-greater swaps (in a fresh value via a plain swap).
    p.init.md_write(put, 0, &5u64.to_le_bytes()).unwrap();
    assert_eq!(cas(100, AtomicOp::CswapGt), 99);
    assert_eq!(u64s(&p.read(t, 8)), [5]);
    assert_eq!(cas(5, AtomicOp::CswapGt), 5);
    assert_eq!(u64s(&p.read(t, 8)), [5]);
}

#[test]
fn masked_swap_takes_only_the_masked_bits() {
    let p = pair();
    let t = target_md(&p, 4, fetch_opts(), 0xff00_ff00u32.to_le_bytes().to_vec());
    let put = p.source(&0x1234_5678u32.to_le_bytes());
    let get = p.source(&[0; 4]);
    p.init
        .swap(
            get,
            0,
            put,
            0,
            4,
            &Remote::new(p.target.id(), PT, 4),
            0,
            Some(&0x0000_ffffu32.to_le_bytes()),
            spec(AtomicOp::Mswap, Datatype::U32),
        )
        .unwrap();
    assert_eq!(p.read(t, 4), 0xff00_5678u32.to_le_bytes());
    assert_eq!(read_init(&p, get, 4), 0xff00_ff00u32.to_le_bytes());
}

#[test]
fn plain_swap_and_float_sum_cross_the_network() {
    let p = pair();
    let t = target_md(&p, 5, fetch_opts(), 1.5f64.to_le_bytes().to_vec());
    let remote = Remote::new(p.target.id(), PT, 5);
    let put = p.source(&2.25f64.to_le_bytes());
    let get = p.source(&[0; 8]);
    p.init
        .fetch_atomic(
            get,
            0,
            put,
            0,
            8,
            &remote,
            0,
            spec(AtomicOp::Sum, Datatype::F64),
        )
        .unwrap();
    assert_eq!(p.read(t, 8), 3.75f64.to_le_bytes());
    p.init
        .swap(
            get,
            0,
            put,
            0,
            8,
            &remote,
            0,
            None,
            spec(AtomicOp::Swap, Datatype::F64),
        )
        .unwrap();
    assert_eq!(p.read(t, 8), 2.25f64.to_le_bytes());
    assert_eq!(read_init(&p, get, 8), 3.75f64.to_le_bytes());
}

#[test]
fn the_initiator_refuses_bad_atomics_with_typed_errors_and_sends_nothing() {
    let p = pair();
    let t = target_md(&p, 6, fetch_opts(), vec![7; 64]);
    let remote = Remote::new(p.target.id(), PT, 6);
    let put = p.source(&[1; 1024]);
    let get = p.source(&[0; 1024]);
    let fetch = |len: u64, s: AtomicSpec| p.init.fetch_atomic(get, 0, put, 0, len, &remote, 0, s);
    let is_atomic_err = |r: Result<()>, want: fn(&AtomicError) -> bool| match r {
        Err(PtlError::Atomic(e)) => assert!(want(&e), "{e:?}"),
        other => panic!("expected an atomic error, got {other:?}"),
    };
    is_atomic_err(fetch(8, spec(AtomicOp::Bxor, Datatype::F64)), |e| {
        matches!(e, AtomicError::Unsupported { .. })
    });
    is_atomic_err(fetch(6, spec(AtomicOp::Sum, Datatype::U32)), |e| {
        matches!(e, AtomicError::BadLength { length: 6, .. })
    });
    let max = p.init.limits().max_atomic_size;
    is_atomic_err(fetch(max + 8, spec(AtomicOp::Sum, Datatype::U64)), |e| {
        matches!(e, AtomicError::TooLarge { .. })
    });
    is_atomic_err(fetch(8, spec(AtomicOp::Cswap, Datatype::U64)), |e| {
        matches!(e, AtomicError::Operand { .. })
    });
    let swap = |operand: Option<&[u8]>, s: AtomicSpec| {
        p.init.swap(get, 0, put, 0, 8, &remote, 0, operand, s)
    };
    is_atomic_err(swap(None, spec(AtomicOp::Cswap, Datatype::U64)), |e| {
        matches!(e, AtomicError::Operand { .. })
    });
    is_atomic_err(
        swap(Some(&[0; 4]), spec(AtomicOp::Cswap, Datatype::U64)),
        |e| matches!(e, AtomicError::Operand { .. }),
    );
    is_atomic_err(swap(None, spec(AtomicOp::Sum, Datatype::U64)), |e| {
        matches!(e, AtomicError::Operand { .. })
    });
    is_atomic_err(
        p.init.atomic(
            put,
            0,
            4,
            AckReq::Ack,
            &remote,
            0,
            spec(AtomicOp::Mswap, Datatype::U32),
        ),
        |e| matches!(e, AtomicError::Operand { .. }),
    );
    // Overlapping source and result in one descriptor.
    assert!(matches!(
        p.init.fetch_atomic(
            get,
            0,
            get,
            4,
            8,
            &remote,
            0,
            spec(AtomicOp::Sum, Datatype::U64)
        ),
        Err(PtlError::InvalidArgument(_))
    ));
    // Nothing left, nothing arrived, nothing is lent.
    assert_eq!(p.init.status().initiated, 0);
    assert_eq!(p.target.status(), NiStatus::default());
    assert!(p.iev().is_none() && p.tev().is_none());
    assert!(!p.init.md_busy(put).unwrap() && !p.init.md_busy(get).unwrap());
    assert_eq!(p.read(t, 64), vec![7; 64]);
}

/// An atomic request as a peer could send it to a bare target.
fn atomic_request(op: Op, s: AtomicSpec, len: u64) -> Header {
    Header {
        atomic: Some(s),
        ..request(op, 0, len)
    }
}

/// A bare target with one fetch-capable descriptor of `len` bytes of 7s.
fn bare_with_md(len: usize, opts: MdOptions) -> (Engine, MdHandle) {
    let mut t = bare_target();
    let me = catch_all(&mut t);
    let md = t
        .md_attach(me, &MdDesc::new(opts), vec![7; len], Unlink::Retain)
        .unwrap();
    (t, md)
}

fn is_nack(a: &RecvAction, answer: Op, discard: u64) -> bool {
    matches!(a, RecvAction::Respond { discard: d, response }
        if *d == discard && response.header.op == answer
            && response.header.fail == FailType::Dropped)
}

#[test]
fn the_target_nacks_what_a_peer_should_not_send_and_applies_nothing() {
    let (mut t, md) = bare_with_md(64, MdOptions::OP_PUT | MdOptions::OP_GET);
    let max = t.limits().max_atomic_size;
    let bad = [
        // Bitwise on a float.
        atomic_request(Op::FetchAtomic, spec(AtomicOp::Bor, Datatype::F32), 8),
        // Not whole elements.
        atomic_request(Op::FetchAtomic, spec(AtomicOp::Sum, Datatype::I64), 12),
        // Larger than this target's limit.
        atomic_request(Op::FetchAtomic, spec(AtomicOp::Sum, Datatype::U8), max + 1),
        // A compare-and-swap on two elements.
        atomic_request(Op::FetchAtomic, spec(AtomicOp::Cswap, Datatype::U32), 8),
        // An operand on an atomic that answers nothing.
        Header {
            ack_req: true,
            ack_lazy: false,
            ..atomic_request(Op::Atomic, spec(AtomicOp::Cswap, Datatype::U32), 4)
        },
        // No spec at all (a header built by hand).
        Header {
            atomic: None,
            ..atomic_request(Op::FetchAtomic, spec(AtomicOp::Sum, Datatype::U32), 4)
        },
    ];
    for (i, h) in bad.iter().enumerate() {
        let answer = if h.op == Op::Atomic {
            Op::Ack
        } else {
            Op::Reply
        };
        let a = t.recv_header(h);
        assert!(is_nack(&a, answer, h.payload_len()), "case {i}: {a:?}");
    }
    assert_eq!(t.status().dropped_atomic_invalid, bad.len() as u64);
    assert_eq!(t.status().accepted, 0);
    let mut now = [0u8; 64];
    t.md_read(md, 0, &mut now).unwrap();
    assert_eq!(now, [7; 64]);
    assert_eq!(t.in_progress(), (0, 0));
}

#[test]
fn an_atomic_is_never_truncated() {
    let (mut t, md) = bare_with_md(
        8,
        MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::TRUNCATE,
    );
    let h = atomic_request(Op::FetchAtomic, spec(AtomicOp::Sum, Datatype::U32), 12);
    assert!(is_nack(&t.recv_header(&h), Op::Reply, 12));
    assert_eq!(t.status().dropped_rejected, 1);
    let mut now = [0u8; 8];
    t.md_read(md, 0, &mut now).unwrap();
    assert_eq!(now, [7; 8]);
}

/// Deposit `bytes` into the region of a `Deposit` and return its token.
fn deposit(a: RecvAction, bytes: &[u8]) -> RecvToken {
    let RecvAction::Deposit {
        region,
        discard,
        token,
    } = a
    else {
        panic!("expected a deposit, got {a:?}");
    };
    assert_eq!((region.len(), discard), (bytes.len(), 0));
    // SAFETY: the token is open and this is the region's only user.
    unsafe { region.as_mut_slice() }.copy_from_slice(bytes);
    token
}

#[test]
fn an_atomic_waits_for_a_put_depositing_into_its_bytes_then_applies_whole() {
    let (mut t, md) = bare_with_md(
        16,
        MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE,
    );
    // A put into bytes 0..8 starts arriving and is not complete.
    let put = t.recv_header(&request(Op::Put, 0, 8));
    // A fetching sum on bytes 4..12 arrives whole meanwhile.
    let mut h = atomic_request(Op::FetchAtomic, spec(AtomicOp::Sum, Datatype::U32), 8);
    h.offset = 4;
    let atok = deposit(
        t.recv_header(&h),
        &[[1u32.to_le_bytes(), 2u32.to_le_bytes()].concat()].concat(),
    );
    assert!(
        t.recv_complete(atok).is_none(),
        "applied under a put in flight"
    );
    assert_eq!(t.atomics_waiting(), 1);
    let mut now = [0u8; 16];
    t.md_read(md, 0, &mut now).unwrap_err(); // the bytes are lent
                                             // The put completes: the atomic goes right after it, on its result.
    let ptok = deposit(put, &[0u8; 8]);
    assert!(t.recv_complete(ptok).is_none());
    assert_eq!(t.atomics_waiting(), 0);
    let reply = t.take_triggered().expect("the waiting atomic's reply");
    assert_eq!((reply.header.op, reply.header.mlength), (Op::Reply, 8));
    let Payload::Region(r) = &reply.payload else {
        panic!("the old values are lent from the atomic's buffer");
    };
    // SAFETY: the reply's token is still open.
    let old = unsafe { r.as_slice() }.to_vec();
    // Bytes 4..8 came from the put (zeros), 8..12 were 7s.
    assert_eq!(old, [[0u8; 4], [7u8; 4]].concat());
    t.send_complete(reply.token.expect("token"), FailType::Ok);
    t.md_read(md, 0, &mut now).unwrap();
    let mut want = [0u8; 16];
    want[4..8].copy_from_slice(&1u32.to_le_bytes());
    want[8..12].copy_from_slice(&(0x0707_0707u32 + 2).to_le_bytes());
    want[12..].copy_from_slice(&[7; 4]);
    assert_eq!(now, want);
    assert_eq!(t.in_progress(), (0, 0));
}

#[test]
fn atomics_are_counted_on_ct_comm_and_a_triggered_fetch_atomic_fires_at_its_threshold() {
    let p = pair();
    let ct = p.target.ct_alloc().unwrap();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 8, 0, Unlink::Retain, Position::After)
        .unwrap();
    let t = p
        .target
        .md_attach(
            me,
            &MdDesc::new(fetch_opts() | MdOptions::MANAGE_REMOTE | MdOptions::CT_COMM).ct(ct),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    let remote = Remote::new(p.target.id(), PT, 8);
    let one = p.source(&1u64.to_le_bytes());
    let get = p.source(&[0; 8]);
    let ict = p.init.ct_alloc().unwrap();
    let sum = spec(AtomicOp::Sum, Datatype::U64);
    // Recorded behind the initiator's counter: nothing leaves yet.
    p.init
        .triggered_fetch_atomic(get, 0, one, 0, 8, &remote, 0, sum, Trigger::new(ict, 2))
        .unwrap();
    p.init
        .triggered_atomic(
            one,
            0,
            8,
            AckReq::NoAck,
            &remote,
            0,
            sum,
            Trigger::new(ict, 1),
        )
        .unwrap();
    p.init
        .triggered_swap(
            get,
            0,
            one,
            0,
            8,
            &remote,
            0,
            Some(&2u64.to_le_bytes()),
            spec(AtomicOp::Cswap, Datatype::U64),
            Trigger::new(ict, 3),
        )
        .unwrap();
    assert_eq!(p.init.status().initiated, 0);
    assert_eq!(u64s(&p.read(t, 8)), [0]);
    p.init.ct_inc(ict, CtEvent::success(1)).unwrap();
    assert_eq!(u64s(&p.read(t, 8)), [1], "the atomic went at 1");
    p.init.ct_inc(ict, CtEvent::success(1)).unwrap();
    assert_eq!(u64s(&p.read(t, 8)), [2], "the fetching atomic went at 2");
    assert_eq!(u64s(&read_init(&p, get, 8)), [1]);
    p.init.ct_inc(ict, CtEvent::success(1)).unwrap();
    // The swap compared 2 with the target's 2 and stored 1.
    assert_eq!(u64s(&p.read(t, 8)), [1]);
    assert_eq!(u64s(&read_init(&p, get, 8)), [2]);
    assert_eq!(p.target.ct_get(ct).unwrap(), CtEvent::success(3));
}

#[test]
fn a_triggered_atomic_checks_what_cannot_change_at_the_call() {
    let p = pair();
    let md = p.source(&[0; 8]);
    let ct = p.init.ct_alloc().unwrap();
    let r = p.init.triggered_atomic(
        md,
        0,
        8,
        AckReq::NoAck,
        &Remote::new(p.target.id(), PT, 1),
        0,
        spec(AtomicOp::Band, Datatype::F64),
        Trigger::new(ct, 5),
    );
    assert!(matches!(
        r,
        Err(PtlError::Atomic(AtomicError::Unsupported { .. }))
    ));
    assert_eq!(p.init.core().with_engine(|e| e.triggered_pending()), 0);
}

#[test]
fn loopback_concurrent_fetching_sums_lose_no_update() {
    const N: u32 = 4;
    const EACH: usize = 300;
    let net = loopback::LoopbackNetwork::new();
    let nis: Vec<NetworkInterface> = (0..N)
        .map(|i| net.ni(NiConfig::new(ProcessId::new(1, i), KEY)).unwrap())
        .collect();
    let me = nis[0]
        .me_attach(PT, ProcessId::ANY, 7, 0, Unlink::Retain, Position::After)
        .unwrap();
    let counter = nis[0]
        .md_attach(
            me,
            &MdDesc::new(fetch_opts() | MdOptions::MANAGE_REMOTE),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    let sum = spec(AtomicOp::Sum, Datatype::U64);
    let start = std::sync::Barrier::new(N as usize);
    let mut all: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = nis
            .iter()
            .map(|ni| {
                let start = &start;
                s.spawn(move || {
                    let eq = ni.eq_alloc(4 * EACH).unwrap();
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
                    let to = Remote::new(ProcessId::new(1, 0), PT, 7);
                    start.wait();
                    for i in 0..EACH {
                        ni.fetch_atomic(olds, i as u64 * 8, one, 0, 8, &to, 0, sum)
                            .unwrap();
                    }
                    let mut replies = 0;
                    while replies < EACH {
                        let ev = ni
                            .eq_wait(eq, Some(std::time::Duration::from_secs(60)))
                            .unwrap();
                        assert_eq!(ev.fail, FailType::Ok);
                        replies += usize::from(ev.kind == EventKind::Reply);
                    }
                    let mut got = vec![0u8; EACH * 8];
                    ni.md_read(olds, 0, &mut got).unwrap();
                    u64s(&got)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut now = [0u8; 8];
    nis[0].md_read(counter, 0, &mut now).unwrap();
    assert_eq!(
        u64::from_le_bytes(now),
        N as u64 * EACH as u64,
        "lost updates"
    );
    all.sort_unstable();
    let want: Vec<u64> = (0..N as u64 * EACH as u64).collect();
    assert!(
        all == want,
        "the old values fetched are not each value once"
    );
}

#[test]
fn max_atomic_size_is_bounded_both_ways() {
    let with = |max_atomic_size| {
        Engine::new(
            ProcessId::new(1, 1),
            KEY,
            NiLimits {
                max_atomic_size,
                ..NiLimits::default()
            },
        )
        .map(|_| ())
    };
    assert!(matches!(with(15), Err(PtlError::InvalidArgument(_))));
    assert!(matches!(
        with(engine::MAX_ATOMIC_SIZE + 1),
        Err(PtlError::InvalidArgument(_))
    ));
    assert_eq!(with(16), Ok(()));
    assert_eq!(with(engine::MAX_ATOMIC_SIZE), Ok(()));
}

/// A fetching sum into an iovec descriptor whose target elements straddle
/// segment boundaries (segments of 3, 5, 4 and 20 bytes under two u64s at
/// offset 2): applied whole across the segments, old values returned, and
/// the bytes around untouched — the same as on a contiguous descriptor.
#[test]
fn a_fetching_atomic_applies_across_the_segments_of_an_iovec_descriptor() {
    let p = pair();
    let flat: Vec<u8> = (0u8..32).collect();
    let segs = vec![
        flat[..3].to_vec(),
        flat[3..8].to_vec(),
        flat[8..12].to_vec(),
        flat[12..].to_vec(),
    ];
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 9, 0, Unlink::Retain, Position::After)
        .unwrap();
    let t = p
        .target
        .md_attach_iovec(
            me,
            &MdDesc::new(fetch_opts() | MdOptions::MANAGE_REMOTE).eq(p.teq),
            segs,
            Unlink::Retain,
        )
        .unwrap();
    let put = p.source(&[1u64.to_le_bytes(), 2u64.to_le_bytes()].concat());
    let get = p.source(&[0; 16]);
    p.init
        .fetch_atomic(
            get,
            0,
            put,
            0,
            16,
            &Remote::new(p.target.id(), PT, 9).with_offset(2),
            0,
            spec(AtomicOp::Sum, Datatype::U64),
        )
        .unwrap();
    let old = u64s(&flat[2..18]);
    assert_eq!(u64s(&read_init(&p, get, 16)), old);
    let mut want = flat.clone();
    want[2..10].copy_from_slice(&old[0].wrapping_add(1).to_le_bytes());
    want[10..18].copy_from_slice(&old[1].wrapping_add(2).to_le_bytes());
    assert_eq!(p.read(t, 32), want);
}
