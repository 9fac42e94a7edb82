//! Failures and bad input: aborted deposits, foreign and malformed
//! headers, stale handles, missing and failed peers, bad configuration
//! (loopback NAL and the bare engine).

use portals::loopback::LoopbackNetwork;
use portals::wire::Op;
use portals::*;

mod common;
use common::*;

#[test]
fn aborted_deposit_reports_failure_and_sends_no_ack() {
    let mut t = bare_target();
    let eq = t.eq_alloc(4).unwrap();
    let me = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    t.md_attach(me, &put_desc().eq(eq), vec![0; 8], Unlink::Retain)
        .unwrap();
    let mut h = request(Op::Put, 1, 4);
    h.ack_req = true;
    let RecvAction::Deposit { token, .. } = t.recv_header(&h) else {
        panic!("expected a deposit");
    };
    t.recv_abort(token, FailType::Incomplete);
    let ev = t.eq_get(eq).unwrap().unwrap();
    assert_eq!((ev.kind, ev.fail), (EventKind::Put, FailType::Incomplete));
    assert_eq!(t.in_progress(), (0, 0));
}

#[test]
fn foreign_and_bad_headers_are_counted_not_matched() {
    let mut t = bare_target();
    let me = catch_all(&mut t);
    t.md_attach(me, &put_desc(), vec![0; 8], Unlink::Retain)
        .unwrap();
    let mut wrong_key = request(Op::Put, 1, 4);
    wrong_key.job_key = KEY + 1;
    assert!(matches!(t.recv_header(&wrong_key), RecvAction::Discard(4)));
    let mut wrong_dst = request(Op::Put, 1, 4);
    wrong_dst.dst = ProcessId::new(1, 2);
    assert!(matches!(t.recv_header(&wrong_dst), RecvAction::Discard(4)));
    let mut bad_pt = request(Op::Put, 1, 4);
    bad_pt.pt_index = PortalIndex(10_000);
    assert!(matches!(t.recv_header(&bad_pt), RecvAction::Discard(4)));
    // An ack for an operation that does not exist.
    let mut stray = request(Op::Ack, 1, 0);
    stray.cookie = 12345;
    assert!(matches!(t.recv_header(&stray), RecvAction::Discard(0)));
    let s = t.status();
    assert_eq!(s.dropped_bad_header, 3);
    assert_eq!(s.dropped_stale_response, 1);
    assert_eq!(s.accepted, 0);
}

#[test]
fn stale_and_foreign_handles_are_errors() {
    let p = pair();
    let (me, md) = p.post(1, 0, put_desc(), 8, Unlink::Retain);
    assert!(p.target.md_unlink(md).unwrap().is_some());
    for r in [
        p.target.md_update(md, None, None).map(|_| ()),
        p.target.md_write(md, 0, b"x"),
        p.target.md_unlink(md).map(|_| ()),
    ] {
        assert!(matches!(r, Err(PtlError::InvalidHandle { .. })), "{r:?}");
    }
    // The ME survives its MD (it was created with Retain) and can take a new one.
    let md2 = p
        .target
        .md_attach(me, &put_desc(), vec![0; 4], Unlink::Retain)
        .unwrap();
    assert_eq!(
        p.target
            .md_attach(me, &put_desc(), vec![0; 4], Unlink::Retain),
        Err(PtlError::MeInUse)
    );
    assert!(p.target.md_unlink(md2).is_ok());
    // Handles of one interface mean nothing to another, even when the slot
    // index and generation coincide.
    let q = pair();
    let mine = q
        .target
        .md_bind(&MdDesc::default(), vec![0; 4], Unlink::Retain)
        .unwrap();
    let theirs = q
        .init
        .md_bind(&MdDesc::default(), vec![0; 4], Unlink::Retain)
        .unwrap();
    assert_eq!(mine.as_u64(), theirs.as_u64());
    assert!(matches!(
        q.target.md_unlink(theirs),
        Err(PtlError::InvalidHandle { .. })
    ));
    assert!(matches!(
        q.target.eq_get(q.ieq),
        Err(PtlError::InvalidHandle { .. })
    ));
    assert!(q.target.md_unlink(mine).is_ok());
}

#[test]
fn put_to_a_missing_process_fails_the_send() {
    let p = pair();
    let src = p.source(b"lost");
    p.init
        .put(
            src,
            AckReq::Ack,
            &Remote::new(ProcessId::new(5, 5), PT, 1),
            0,
        )
        .unwrap();
    let ev = p.iev().unwrap();
    assert_eq!((ev.kind, ev.fail), (EventKind::Sent, FailType::Unreachable));
    let ev = p.iev().unwrap();
    assert_eq!(
        (ev.kind, ev.fail, ev.mlength),
        (EventKind::Ack, FailType::Unreachable, 0),
        "the awaited ack completes with the failure"
    );
    assert!(p.iev().is_none());
    assert_eq!(p.init.core().with_engine(|e| e.in_progress()), (0, 0));
}

#[test]
fn a_peer_failure_leaves_operations_whose_request_is_still_queued_to_their_send() {
    let init = ProcessId::new(0, 1);
    let peer = ProcessId::new(1, 1);
    let mut e = Engine::new(init, KEY, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(8).unwrap();
    let desc = MdDesc::default().eq(eq);
    let to_peer = Remote::new(peer, PT, 1);
    let sent = e.md_bind(&desc, b"early".to_vec(), Unlink::Retain).unwrap();
    let queued = e.md_bind(&desc, b"later".to_vec(), Unlink::Retain).unwrap();
    // One request left whole; the other is still in the transport's hands
    // (issued while the transport was reporting the failure).
    let a = e.put(sent, AckReq::Ack, &to_peer, 0).unwrap();
    e.send_complete(a.token.unwrap(), FailType::Ok);
    let b = e.put(queued, AckReq::Ack, &to_peer, 0).unwrap();
    assert_eq!(e.eq_get(eq).unwrap().unwrap().kind, EventKind::Sent);
    e.peer_failed(peer);
    let ev = e.eq_get(eq).unwrap().unwrap();
    assert_eq!(
        (ev.kind, ev.fail, ev.md_handle),
        (EventKind::Ack, FailType::Unreachable, sent),
        "the request that left waits in vain: its ack fails"
    );
    assert!(
        e.eq_get(eq).unwrap().is_none(),
        "the queued one is untouched"
    );
    // Its send fails in turn: Sent, then the awaited Ack, in that order.
    e.send_complete(b.token.unwrap(), FailType::Unreachable);
    let kinds: Vec<(EventKind, FailType)> = std::iter::from_fn(|| e.eq_get(eq).unwrap())
        .map(|ev| {
            assert_eq!(ev.md_handle, queued);
            (ev.kind, ev.fail)
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Sent, FailType::Unreachable),
            (EventKind::Ack, FailType::Unreachable)
        ]
    );
    assert_eq!(e.in_progress(), (0, 0));
    // Had it reached a peer that came back instead, its ack would count.
    let c = e.put(queued, AckReq::Ack, &to_peer, 0).unwrap();
    e.peer_failed(peer);
    e.send_complete(c.token.unwrap(), FailType::Ok);
    assert_eq!(e.eq_get(eq).unwrap().unwrap().kind, EventKind::Sent);
    let mut ack = c.header;
    ack.op = Op::Ack;
    ack.src = peer;
    ack.dst = init;
    ack.mlength = 5;
    assert!(matches!(e.recv_header(&ack), RecvAction::Discard(0)));
    let ev = e.eq_get(eq).unwrap().unwrap();
    assert_eq!(
        (ev.kind, ev.fail, ev.mlength),
        (EventKind::Ack, FailType::Ok, 5)
    );
}

#[test]
fn failed_peers_are_listed_once_in_order() {
    let p = pair();
    assert!(p.init.failed_peers().is_empty());
    let (a, b) = (ProcessId::new(5, 5), ProcessId::new(6, 6));
    for dst in [a, b, a] {
        let src = p.source(b"x");
        p.init
            .put(src, AckReq::NoAck, &Remote::new(dst, PT, 1), 0)
            .unwrap();
    }
    assert_eq!(p.init.failed_peers(), vec![a, b]);
    assert_eq!(p.init.failed_peer_count(), 2);
    assert!(p.target.failed_peers().is_empty());
}

#[test]
fn ni_rejects_bad_configuration() {
    let net = LoopbackNetwork::new();
    assert!(matches!(
        net.ni(NiConfig::new(ProcessId::new(NID_ANY, 1), KEY)),
        Err(PtlError::InvalidProcess(_))
    ));
    let mut cfg = NiConfig::new(ProcessId::new(1, 1), KEY);
    cfg.limits.pt_entries = 8;
    assert!(matches!(net.ni(cfg), Err(PtlError::InvalidArgument(_))));
    let _a = net.ni(NiConfig::new(ProcessId::new(1, 1), KEY)).unwrap();
    assert!(matches!(
        net.ni(NiConfig::new(ProcessId::new(1, 1), KEY)),
        Err(PtlError::InvalidArgument(_))
    ));
    let mut cfg = NiConfig::new(ProcessId::new(1, 2), KEY);
    cfg.limits.max_mes = 1;
    let ni = net.ni(cfg).unwrap();
    ni.me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
        .unwrap();
    assert!(matches!(
        ni.me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After),
        Err(PtlError::NoSpace { .. })
    ));
    assert!(matches!(
        ni.me_attach(
            PortalIndex(64),
            ProcessId::ANY,
            0,
            0,
            Unlink::Retain,
            Position::After
        ),
        Err(PtlError::InvalidPortalIndex { .. })
    ));
    assert!(matches!(ni.eq_alloc(0), Err(PtlError::InvalidArgument(_))));
}

#[test]
fn initiating_needs_an_active_md_a_concrete_target_and_a_valid_region() {
    let p = pair();
    let md = p
        .init
        .md_bind(
            &MdDesc::default().threshold(Threshold::Count(0)),
            vec![0; 4],
            Unlink::Retain,
        )
        .unwrap();
    let r = Remote::new(p.target.id(), PT, 1);
    assert_eq!(
        p.init.put(md, AckReq::NoAck, &r, 0),
        Err(PtlError::MdInactive)
    );
    let md = p.source(b"abcd");
    assert!(matches!(
        p.init.put_region(md, 2, 3, AckReq::NoAck, &r, 0),
        Err(PtlError::OutOfRange { .. })
    ));
    assert_eq!(
        p.init
            .put(md, AckReq::NoAck, &Remote::new(ProcessId::ANY, PT, 1), 0),
        Err(PtlError::InvalidProcess(ProcessId::ANY))
    );
}
