//! Event queues and waiting: what is posted, when, in which order, what a
//! full queue keeps, and how waiting threads are woken (loopback NAL).

use std::time::Duration;

use portals::loopback::LoopbackNetwork;
use portals::wire::{Header, Op};
use portals::*;

mod common;
use common::*;

#[test]
fn full_event_queue_reports_drops_and_keeps_the_oldest() {
    let p = pair();
    let small = p.target.eq_alloc(2).unwrap();
    p.post_to(small, 1, 0, put_desc(), 64, Unlink::Retain);
    for _ in 0..5 {
        p.put(b"x", 1, AckReq::NoAck, 0, 0);
    }
    assert_eq!(
        p.target.eq_get(small),
        Err(PtlError::EqDropped { dropped: 3 })
    );
    let a = p.target.eq_get(small).unwrap().unwrap();
    let b = p.target.eq_get(small).unwrap().unwrap();
    assert_eq!((a.sequence, a.offset, b.sequence, b.offset), (0, 0, 1, 1));
    assert_eq!(p.target.eq_get(small), Ok(None));
    assert_eq!(p.target.status().eq_overflows, 3);
    // The next event's sequence number shows the gap.
    p.put(b"x", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.target.eq_get(small).unwrap().unwrap().sequence, 5);
}

#[test]
fn start_events_are_opt_in_and_end_events_can_be_disabled() {
    let p = pair();
    p.post(
        1,
        0,
        MdDesc::new(MdOptions::OP_PUT | MdOptions::EVENT_START),
        8,
        Unlink::Retain,
    );
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().unwrap().kind, EventKind::PutStart);
    assert_eq!(p.tev().unwrap().kind, EventKind::Put);

    let p = pair();
    p.post(
        1,
        0,
        MdDesc::new(MdOptions::OP_PUT | MdOptions::EVENT_END_DISABLE),
        8,
        Unlink::Retain,
    );
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    assert!(p.tev().is_none());
}

#[test]
fn send_events_can_be_disabled_and_the_ack_still_says_it_all() {
    let p = pair();
    p.post(1, 0, put_desc(), 8, Unlink::Retain);
    let ct = p.init.ct_alloc().unwrap();
    let quiet = MdDesc::new(MdOptions::EVENT_SEND_DISABLE | MdOptions::CT_SEND)
        .eq(p.ieq)
        .ct(ct);
    let md = p
        .init
        .md_bind(&quiet, b"abc".to_vec(), Unlink::Retain)
        .unwrap();
    p.init
        .put(md, AckReq::Ack, &Remote::new(p.target.id(), PT, 1), 0)
        .unwrap();
    let ack = p.iev().expect("the acknowledgment");
    assert_eq!(
        (ack.kind, ack.fail, ack.mlength),
        (EventKind::Ack, FailType::Ok, 3)
    );
    assert!(p.iev().is_none(), "no Sent event, before or after the Ack");
    assert_eq!(
        p.init.ct_get(ct).unwrap().success,
        1,
        "the send is still counted"
    );
    assert_eq!(p.tev().unwrap().kind, EventKind::Put);

    // A send that fails: no Sent, and the awaited Ack carries the failure.
    let init = ProcessId::new(2, 2);
    let mut e = Engine::new(init, KEY, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(8).unwrap();
    let md = e
        .md_bind(
            &MdDesc::new(MdOptions::EVENT_SEND_DISABLE).eq(eq),
            b"lost".to_vec(),
            Unlink::Retain,
        )
        .unwrap();
    let out = e
        .put(
            md,
            AckReq::Ack,
            &Remote::new(ProcessId::new(1, 1), PT, 1),
            0,
        )
        .unwrap();
    e.send_complete(out.token.unwrap(), FailType::Unreachable);
    let ev = e.eq_get(eq).unwrap().expect("the failed Ack");
    assert_eq!((ev.kind, ev.fail), (EventKind::Ack, FailType::Unreachable));
    assert!(e.eq_get(eq).unwrap().is_none());
}

#[test]
fn eq_wait_sleeps_until_another_thread_delivers() {
    let p = std::sync::Arc::new(pair());
    let (_, md) = p.post(1, 0, put_desc(), 8, Unlink::Retain);
    let q = p.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        q.put(b"late", 1, AckReq::NoAck, 0, 0);
    });
    let ev = p
        .target
        .eq_wait(p.teq, Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, md));
    sender.join().unwrap();
    assert_eq!(
        p.target.eq_wait(p.teq, Some(Duration::from_millis(20))),
        Err(PtlError::Timeout)
    );
}

#[test]
fn eq_poll_returns_the_queue_that_has_the_event() {
    let p = pair();
    let other = p.target.eq_alloc(4).unwrap();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 2, 0, Unlink::Retain, Position::After)
        .unwrap();
    p.target
        .md_attach(me, &put_desc().eq(other), vec![0; 8], Unlink::Retain)
        .unwrap();
    p.put(b"x", 2, AckReq::NoAck, 0, 0);
    let (ev, which) = p
        .target
        .eq_poll(&[p.teq, other], Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!((ev.kind, which), (EventKind::Put, 1));
}

#[test]
fn many_threads_waiting_on_different_queues_are_all_woken() {
    use std::sync::Arc;
    let p = Arc::new(pair());
    let n = 4u64;
    let mut waiters = Vec::new();
    for bits in 0..n {
        let eq = p.target.eq_alloc(4).unwrap();
        let me = p
            .target
            .me_attach(PT, ProcessId::ANY, bits, 0, Unlink::Retain, Position::After)
            .unwrap();
        p.target
            .md_attach(me, &put_desc().eq(eq), vec![0; 8], Unlink::Retain)
            .unwrap();
        let q = p.clone();
        waiters.push(std::thread::spawn(move || {
            q.target
                .eq_wait(eq, Some(Duration::from_secs(20)))
                .map(|e| e.match_bits)
        }));
    }
    std::thread::sleep(Duration::from_millis(50));
    for bits in (0..n).rev() {
        p.put(b"go", bits, AckReq::NoAck, 0, 0);
    }
    let got: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(got, (0..n).map(Ok).collect::<Vec<_>>());
}

#[test]
fn a_timeout_shorter_than_the_spin_window_ends_the_wait() {
    let net = LoopbackNetwork::new();
    let mut cfg = NiConfig::new(ProcessId::new(1, 10), KEY);
    cfg.wait_spin = Duration::from_secs(60);
    let ni = net.ni(cfg).unwrap();
    let eq = ni.eq_alloc(4).unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(
        ni.eq_wait(eq, Some(Duration::from_millis(10))),
        Err(PtlError::Timeout)
    );
    // The bound is loose (a loaded machine), but far below the window the
    // wait used to spin out whatever its timeout.
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "waited {took:?}");
}

#[test]
fn an_ack_read_before_the_send_completes_is_posted_after_sent() {
    // With threads, one thread can read the target's ack while the thread
    // that wrote the put has not reported the send complete yet.
    let mut e = Engine::new(ProcessId::new(2, 2), KEY, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(8).unwrap();
    let md = e
        .md_bind(&MdDesc::default().eq(eq), vec![1; 8], Unlink::Retain)
        .unwrap();
    let out = e
        .put(
            md,
            AckReq::Ack,
            &Remote::new(ProcessId::new(1, 1), PT, 3),
            0,
        )
        .unwrap();
    let ack = Header {
        op: Op::Ack,
        ack_req: false,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: KEY,
        src: ProcessId::new(1, 1),
        dst: ProcessId::new(2, 2),
        pt_index: PT,
        ac_index: 0,
        match_bits: 3,
        offset: 0,
        hdr_data: 0,
        rlength: 8,
        mlength: 8,
        cookie: out.header.cookie,
        atomic: None,
    };
    assert!(matches!(e.recv_header(&ack), RecvAction::Discard(0)));
    assert!(
        e.eq_get(eq).unwrap().is_none(),
        "nothing before the send completes"
    );
    // A duplicate of the same ack is stale.
    e.recv_header(&ack);
    assert_eq!(e.status().dropped_stale_response, 1);
    e.send_complete(out.token.unwrap(), FailType::Ok);
    assert_eq!(e.eq_get(eq).unwrap().unwrap().kind, EventKind::Sent);
    let a = e.eq_get(eq).unwrap().unwrap();
    assert_eq!((a.kind, a.mlength), (EventKind::Ack, 8));
    assert!(e.eq_get(eq).unwrap().is_none());
    assert_eq!(e.in_progress(), (0, 0));
}

#[test]
fn the_unlink_hook_runs_for_watched_descriptors_only() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let p = pair();
    let other = p.target.eq_alloc(8).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let (teq, target_id) = (p.teq, p.target.id());
    p.target
        .core()
        .set_unlink_hook(
            teq,
            Box::new(move |core| {
                // Runs without the engine lock: engine calls work.
                assert_eq!(core.with_engine(|e| e.id()), target_id);
                c.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
    assert!(matches!(
        p.target.core().set_unlink_hook(teq, Box::new(|_| {})),
        Err(PtlError::InvalidArgument(_))
    ));
    // An entry whose descriptor posts elsewhere: no call when it unlinks.
    p.post_to(
        other,
        1,
        0,
        put_desc().threshold(Threshold::Count(1)),
        8,
        Unlink::Unlink,
    );
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // A watched one: a put that does not use it up, then one that does.
    p.post(
        1,
        0,
        put_desc().threshold(Threshold::Count(2)),
        8,
        Unlink::Unlink,
    );
    p.put(b"b", 1, AckReq::NoAck, 0, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    p.put(b"c", 1, AckReq::NoAck, 0, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "once, on the unlink");
    let kinds: Vec<_> = std::iter::from_fn(|| p.tev()).map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![EventKind::Put, EventKind::Put, EventKind::Unlink]
    );
}

#[test]
fn a_second_watched_queue_runs_the_hook_and_a_peek_leaves_its_event() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let p = pair();
    let second = p.target.eq_alloc(8).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    p.target
        .core()
        .set_unlink_hook(
            p.teq,
            Box::new(move |_| {
                c.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
    p.target
        .core()
        .with_engine(|e| e.add_unlink_watch(second))
        .unwrap();
    p.post_to(
        second,
        1,
        0,
        put_desc().threshold(Threshold::Count(1)),
        8,
        Unlink::Unlink,
    );
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the second queue is watched"
    );
    let peeked = p.target.core().with_engine(|e| e.eq_peek(second)).unwrap();
    assert_eq!(peeked.map(|e| e.kind), Some(EventKind::Put));
    // Peeking again sees the same event: it is still there for a reader.
    let again = p.target.core().with_engine(|e| e.eq_peek(second)).unwrap();
    assert_eq!(again, peeked);
    assert_eq!(p.target.eq_get(second).unwrap(), peeked);
    assert_eq!(
        p.target.eq_get(second).unwrap().map(|e| e.kind),
        Some(EventKind::Unlink)
    );
    assert_eq!(p.target.core().with_engine(|e| e.eq_peek(second)), Ok(None));
}

#[test]
fn a_peek_after_an_overflow_leaves_the_report_to_the_reader() {
    let p = pair();
    let small = p.target.eq_alloc(1).unwrap();
    p.post_to(small, 1, 0, put_desc(), 64, Unlink::Retain);
    for _ in 0..3 {
        p.put(b"x", 1, AckReq::NoAck, 0, 0);
    }
    assert_eq!(p.target.core().with_engine(|e| e.eq_peek(small)), Ok(None));
    assert_eq!(
        p.target.eq_get(small),
        Err(PtlError::EqDropped { dropped: 2 })
    );
}

#[test]
fn a_deferred_message_waits_for_the_transport_in_order_with_triggered_ones() {
    let mut e = Engine::new(ProcessId::new(2, 2), KEY, NiLimits::default()).unwrap();
    let md = e
        .md_bind(&MdDesc::default(), vec![1; 8], Unlink::Retain)
        .unwrap();
    let into = e
        .md_bind(&MdDesc::default(), vec![0; 8], Unlink::Retain)
        .unwrap();
    let to = Remote::new(ProcessId::new(1, 1), PT, 3);
    let first = e.put(md, AckReq::NoAck, &to, 10).unwrap();
    let second = e.get(into, &to).unwrap();
    assert!(!e.has_triggered());
    e.defer_outbound(first);
    e.defer_outbound(second);
    assert!(e.has_triggered());
    let a = e.take_triggered().expect("the deferred put");
    let b = e.take_triggered().expect("the deferred get");
    assert_eq!((a.header.op, a.header.hdr_data), (Op::Put, 10));
    assert_eq!(b.header.op, Op::Get);
    assert!(e.take_triggered().is_none());
}
