//! Counting events and triggered operations over the loopback transport:
//! what counts and how, failures, immediate and chained triggers,
//! cancellation on unlink and on free, the limit, overflow and the waits.

use std::time::Duration;

use portals::loopback::LoopbackNetwork;
use portals::*;

const PT: PortalIndex = PortalIndex(4);
const KEY: u64 = 77;

fn id(i: u32) -> ProcessId {
    ProcessId::new(0, i)
}

fn nis(n: u32) -> (LoopbackNetwork, Vec<NetworkInterface>) {
    let net = LoopbackNetwork::new();
    let v = (0..n)
        .map(|i| net.ni(NiConfig::new(id(i), KEY)).unwrap())
        .collect();
    (net, v)
}

/// A descriptor on `PT`, match bits `bits`, counting on `ct` as `opts` say.
fn target(ni: &NetworkInterface, bits: u64, opts: MdOptions, ct: CtHandle, len: usize) -> MdHandle {
    let me = ni
        .me_attach(PT, ProcessId::ANY, bits, 0, Unlink::Retain, Position::After)
        .unwrap();
    ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | opts).ct(ct),
        vec![0; len],
        Unlink::Retain,
    )
    .unwrap()
}

fn source(ni: &NetworkInterface, opts: MdOptions, ct: Option<CtHandle>, data: &[u8]) -> MdHandle {
    let mut d = MdDesc::new(opts);
    d.ct = ct;
    ni.md_bind(&d, data.to_vec(), Unlink::Retain).unwrap()
}

#[test]
fn a_counter_counts_the_events_its_options_select_operations_or_bytes() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let rc = b.ct_alloc().unwrap();
    target(b, 1, MdOptions::CT_COMM, rc, 64);
    let bytes = b.ct_alloc().unwrap();
    target(b, 2, MdOptions::CT_COMM | MdOptions::CT_BYTES, bytes, 64);
    let sc = a.ct_alloc().unwrap();
    let src = source(
        a,
        MdOptions::CT_SEND | MdOptions::CT_ACK,
        Some(sc),
        &[5; 10],
    );
    let none = a.ct_alloc().unwrap();
    // A counter named without options counts nothing.
    let quiet = source(a, MdOptions::empty(), Some(none), &[6; 3]);
    for _ in 0..3 {
        a.put(src, AckReq::Ack, &Remote::new(b.id(), PT, 1), 0)
            .unwrap();
    }
    a.put(src, AckReq::NoAck, &Remote::new(b.id(), PT, 2), 0)
        .unwrap();
    a.put(quiet, AckReq::Ack, &Remote::new(b.id(), PT, 2), 0)
        .unwrap();
    assert_eq!(b.ct_get(rc).unwrap(), CtEvent::new(3, 0), "one per put");
    assert_eq!(b.ct_get(bytes).unwrap(), CtEvent::new(13, 0), "bytes moved");
    assert_eq!(
        a.ct_get(sc).unwrap(),
        CtEvent::new(4 + 3, 0),
        "sends + acks"
    );
    assert_eq!(a.ct_get(none).unwrap(), CtEvent::default());
    // A get counts at the target (CT_COMM) and, with CT_REPLY, at the
    // initiator.
    let gc = a.ct_alloc().unwrap();
    let dst = source(a, MdOptions::CT_REPLY, Some(gc), &[0; 4]);
    a.get(dst, &Remote::new(b.id(), PT, 1)).unwrap();
    assert_eq!(a.ct_get(gc).unwrap(), CtEvent::new(1, 0));
    assert_eq!(b.ct_get(rc).unwrap(), CtEvent::new(4, 0));
}

#[test]
fn a_failed_operation_counts_one_failure_even_in_bytes_mode() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let sc = a.ct_alloc().unwrap();
    let src = source(
        a,
        MdOptions::CT_ALL | MdOptions::CT_BYTES,
        Some(sc),
        &[1; 100],
    );
    // Nothing listens on match bits 9: the put is nacked, the get answered
    // with a failed reply.
    a.put(src, AckReq::Ack, &Remote::new(b.id(), PT, 9), 0)
        .unwrap();
    assert_eq!(a.ct_get(sc).unwrap(), CtEvent::new(100, 1), "sent, nacked");
    a.get(src, &Remote::new(b.id(), PT, 9)).unwrap();
    assert_eq!(a.ct_get(sc).unwrap(), CtEvent::new(100, 2), "failed reply");
    // A peer that does not exist: the send fails.
    a.put(src, AckReq::NoAck, &Remote::new(id(9), PT, 9), 0)
        .unwrap();
    assert_eq!(a.ct_get(sc).unwrap(), CtEvent::new(100, 3));
    assert_eq!(a.ct_wait(sc, 103, Some(Duration::ZERO)).unwrap().failure, 3);
}

#[test]
fn a_truncated_deposit_counts_as_a_failure_only_with_ct_truncated_fails() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let trunc = MdOptions::TRUNCATE | MdOptions::MANAGE_REMOTE | MdOptions::CT_COMM;
    let plain = b.ct_alloc().unwrap();
    let plain_md = target(b, 1, trunc, plain, 4);
    let strict = b.ct_alloc().unwrap();
    let strict_md = target(b, 2, trunc | MdOptions::CT_TRUNCATED_FAILS, strict, 4);
    let src = source(a, MdOptions::empty(), None, &[7; 10]);
    for bits in [1, 2] {
        a.put(src, AckReq::NoAck, &Remote::new(b.id(), PT, bits), 0)
            .unwrap();
    }
    // Portals 4's rule: the cut deposit is a success...
    assert_eq!(b.ct_get(plain).unwrap(), CtEvent::new(1, 0));
    // ...unless the descriptor asks for the extension.
    assert_eq!(b.ct_get(strict).unwrap(), CtEvent::new(0, 1));
    // Either way only what fits was written.
    let mut got = [0u8; 4];
    for md in [plain_md, strict_md] {
        b.md_read(md, 0, &mut got).unwrap();
        assert_eq!(got, [7; 4]);
    }
    // A request that fits whole is a success with the extension too.
    let fits = source(a, MdOptions::empty(), None, &[8; 4]);
    a.put(fits, AckReq::NoAck, &Remote::new(b.id(), PT, 2), 0)
        .unwrap();
    assert_eq!(b.ct_get(strict).unwrap(), CtEvent::new(1, 1));
}

#[test]
fn a_ring_of_triggered_puts_and_a_get_runs_from_one_put() {
    let (_net, n) = nis(4);
    let mut rcs = Vec::new();
    let mut rmds = Vec::new();
    for ni in &n {
        let rc = ni.ct_alloc().unwrap();
        rmds.push(target(ni, 1, MdOptions::CT_COMM, rc, 8));
        rcs.push(rc);
    }
    // Process 1 exposes data for process 2's triggered get.
    let exposed = target(&n[1], 2, MdOptions::empty(), n[1].ct_alloc().unwrap(), 8);
    n[1].md_write(exposed, 0, b"exposed!").unwrap();
    // 1 forwards to 2 what it received.
    n[1].triggered_put(
        rmds[1],
        0,
        8,
        AckReq::NoAck,
        &Remote::new(id(2), PT, 1),
        0,
        Trigger::new(rcs[1], 1),
    )
    .unwrap();
    // 2 gets 1's exposed bytes into its receive descriptor once its put
    // arrived, then forwards them to 3 once the reply is in.
    let gc = n[2].ct_alloc().unwrap();
    let landing = source(&n[2], MdOptions::CT_REPLY, Some(gc), &[0; 8]);
    n[2].triggered_get(
        landing,
        0,
        8,
        &Remote::new(id(1), PT, 2),
        Trigger::new(rcs[2], 1),
    )
    .unwrap();
    n[2].triggered_put(
        landing,
        0,
        8,
        AckReq::NoAck,
        &Remote::new(id(3), PT, 1),
        0,
        Trigger::new(gc, 1),
    )
    .unwrap();
    n[3].triggered_put(
        rmds[3],
        0,
        8,
        AckReq::NoAck,
        &Remote::new(id(0), PT, 1),
        0,
        Trigger::new(rcs[3], 1),
    )
    .unwrap();
    let done = n[0].ct_alloc().unwrap();
    n[0].triggered_ct_inc(done, CtEvent::success(1), Trigger::new(rcs[0], 1))
        .unwrap();
    for ni in &n {
        assert_eq!(ni.ct_get(rcs[ni.id().pid as usize]).unwrap().total(), 0);
    }
    let start = source(&n[0], MdOptions::empty(), None, b"started!");
    n[0].put(start, AckReq::NoAck, &Remote::new(id(1), PT, 1), 0)
        .unwrap();
    assert_eq!(
        n[0].ct_wait(done, 1, Some(Duration::ZERO)).unwrap(),
        CtEvent::new(1, 0)
    );
    let mut got = [0u8; 8];
    n[0].md_read(rmds[0], 0, &mut got).unwrap();
    assert_eq!(
        &got, b"exposed!",
        "the triggered put sent the state at the trigger"
    );
    for ni in &n {
        assert_eq!(ni.core().with_engine(|e| e.triggered_pending()), 0);
    }
}

#[test]
fn a_trigger_already_reached_issues_at_once_and_errors_come_back() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let rc = b.ct_alloc().unwrap();
    target(b, 1, MdOptions::CT_COMM, rc, 8);
    let t = a.ct_alloc().unwrap();
    a.ct_set(t, CtEvent::new(2, 1)).unwrap();
    let src = source(a, MdOptions::empty(), None, &[1; 8]);
    a.triggered_put(
        src,
        0,
        8,
        AckReq::NoAck,
        &Remote::new(b.id(), PT, 1),
        0,
        Trigger::new(t, 3),
    )
    .unwrap();
    assert_eq!(
        b.ct_get(rc).unwrap(),
        CtEvent::new(1, 0),
        "failures count towards it"
    );
    // An inactive descriptor: the immediate issue fails, and says so.
    let spent = a
        .md_bind(
            &MdDesc::default().threshold(Threshold::Count(0)),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    assert_eq!(
        a.triggered_put(
            spent,
            0,
            8,
            AckReq::NoAck,
            &Remote::new(b.id(), PT, 1),
            0,
            Trigger::new(t, 1)
        ),
        Err(PtlError::MdInactive)
    );
    // Checked at the call whatever the counter: the region, the target.
    assert!(matches!(
        a.triggered_put(
            src,
            4,
            8,
            AckReq::NoAck,
            &Remote::new(b.id(), PT, 1),
            0,
            Trigger::new(t, 99)
        ),
        Err(PtlError::OutOfRange { .. })
    ));
    assert!(matches!(
        a.triggered_get(
            src,
            0,
            8,
            &Remote::new(ProcessId::ANY, PT, 1),
            Trigger::new(t, 99)
        ),
        Err(PtlError::InvalidProcess(_))
    ));
    assert_eq!(a.core().with_engine(|e| e.triggered_pending()), 0);
}

#[test]
fn unlinking_a_descriptor_fails_its_triggered_operations_on_its_counter() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let rc = b.ct_alloc().unwrap();
    target(b, 1, MdOptions::CT_COMM, rc, 8);
    let trig = a.ct_alloc().unwrap();
    let mc = a.ct_alloc().unwrap();
    let src = source(a, MdOptions::CT_SEND | MdOptions::CT_ACK, Some(mc), &[1; 8]);
    let remote = Remote::new(b.id(), PT, 1);
    a.triggered_put(src, 0, 8, AckReq::Ack, &remote, 0, Trigger::new(trig, 1))
        .unwrap();
    a.triggered_put(src, 0, 8, AckReq::NoAck, &remote, 0, Trigger::new(trig, 2))
        .unwrap();
    // A chain behind the failures: the descriptor's counter reaching 3
    // (two failures of the first put, one of the second) sets `after`.
    let after = a.ct_alloc().unwrap();
    a.triggered_ct_set(after, CtEvent::new(42, 0), Trigger::new(mc, 3))
        .unwrap();
    assert_eq!(a.core().with_engine(|e| e.triggered_pending()), 3);
    a.md_unlink(src).unwrap();
    assert_eq!(a.ct_get(mc).unwrap(), CtEvent::new(0, 3), "send+ack, send");
    assert_eq!(a.ct_get(after).unwrap(), CtEvent::new(42, 0));
    assert_eq!(a.core().with_engine(|e| e.triggered_pending()), 0);
    // The trigger firing later finds nothing to do.
    a.ct_inc(trig, CtEvent::success(5)).unwrap();
    assert_eq!(
        b.ct_get(rc).unwrap(),
        CtEvent::default(),
        "nothing was sent"
    );

    // A descriptor that unlinks itself (threshold used up) fails its
    // triggered operations as well.
    let once = a
        .md_bind(
            &MdDesc::new(MdOptions::CT_SEND)
                .threshold(Threshold::Count(1))
                .ct(mc),
            vec![2; 8],
            Unlink::Unlink,
        )
        .unwrap();
    let t2 = a.ct_alloc().unwrap();
    a.triggered_put(once, 0, 8, AckReq::NoAck, &remote, 0, Trigger::new(t2, 1))
        .unwrap();
    a.put(once, AckReq::NoAck, &remote, 0).unwrap();
    assert_eq!(
        a.ct_get(mc).unwrap(),
        CtEvent::new(1, 4),
        "sent, then failed"
    );
    a.ct_inc(t2, CtEvent::success(1)).unwrap();
    assert_eq!(
        b.ct_get(rc).unwrap(),
        CtEvent::new(1, 0),
        "only the plain put"
    );
}

#[test]
fn freeing_or_cancelling_a_counter_drops_its_operations_without_a_trace() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let rc = b.ct_alloc().unwrap();
    target(b, 1, MdOptions::CT_COMM, rc, 8);
    let mc = a.ct_alloc().unwrap();
    let src = source(a, MdOptions::CT_SEND, Some(mc), &[1; 8]);
    let remote = Remote::new(b.id(), PT, 1);
    let t = a.ct_alloc().unwrap();
    let other = a.ct_alloc().unwrap();
    a.triggered_put(src, 0, 8, AckReq::NoAck, &remote, 0, Trigger::new(t, 1))
        .unwrap();
    // An increment of `t` waiting on `other`: freeing `t` drops it too.
    a.triggered_ct_inc(t, CtEvent::success(1), Trigger::new(other, 1))
        .unwrap();
    a.ct_free(t).unwrap();
    assert_eq!(a.core().with_engine(|e| e.triggered_pending()), 0);
    assert_eq!(
        a.ct_get(t),
        Err(PtlError::InvalidHandle {
            kind: "counting event"
        })
    );
    a.ct_inc(other, CtEvent::success(1)).unwrap();
    assert_eq!(a.ct_get(mc).unwrap(), CtEvent::default(), "nothing counted");
    // Unlinking the descriptor afterwards counts nothing either.
    a.md_unlink(src).unwrap();
    assert_eq!(a.ct_get(mc).unwrap(), CtEvent::default());

    let src = source(a, MdOptions::CT_SEND, Some(mc), &[1; 8]);
    a.triggered_put(src, 0, 8, AckReq::NoAck, &remote, 0, Trigger::new(other, 5))
        .unwrap();
    a.ct_cancel_triggered(other).unwrap();
    a.ct_inc(other, CtEvent::success(10)).unwrap();
    assert_eq!(
        a.ct_get(other).unwrap(),
        CtEvent::new(11, 0),
        "the value stays"
    );
    assert_eq!(b.ct_get(rc).unwrap(), CtEvent::default());
    a.md_unlink(src).unwrap();
    assert_eq!(a.ct_get(mc).unwrap(), CtEvent::default());
}

#[test]
fn pending_triggered_operations_are_bounded_by_the_limit() {
    let net = LoopbackNetwork::new();
    let mut cfg = NiConfig::new(id(0), KEY);
    cfg.limits.max_triggered = 3;
    cfg.limits.max_cts = 2;
    let a = net.ni(cfg).unwrap();
    let t = a.ct_alloc().unwrap();
    let u = a.ct_alloc().unwrap();
    assert_eq!(
        a.ct_alloc(),
        Err(PtlError::NoSpace {
            what: "counting events",
            limit: 2
        })
    );
    for i in 0..3 {
        a.triggered_ct_inc(u, CtEvent::success(1), Trigger::new(t, 10 + i))
            .unwrap();
    }
    assert_eq!(
        a.triggered_ct_inc(u, CtEvent::success(1), Trigger::new(t, 20)),
        Err(PtlError::NoSpace {
            what: "pending triggered operations",
            limit: 3
        })
    );
    // One reached at the call takes no room.
    a.triggered_ct_inc(u, CtEvent::success(1), Trigger::new(t, 0))
        .unwrap();
    a.ct_set(t, CtEvent::new(11, 0)).unwrap();
    assert_eq!(a.ct_get(u).unwrap(), CtEvent::new(3, 0));
    a.triggered_ct_inc(u, CtEvent::success(1), Trigger::new(t, 30))
        .unwrap();
    assert_eq!(a.core().with_engine(|e| e.triggered_pending()), 2);
}

#[test]
fn counts_saturate_so_a_reached_threshold_stays_reached() {
    let (_net, n) = nis(1);
    let a = &n[0];
    let c = a.ct_alloc().unwrap();
    let d = a.ct_alloc().unwrap();
    a.triggered_ct_inc(d, CtEvent::failure(1), Trigger::new(c, u64::MAX))
        .unwrap();
    a.ct_inc(c, CtEvent::success(u64::MAX - 1)).unwrap();
    assert_eq!(a.ct_get(d).unwrap(), CtEvent::default());
    a.ct_inc(c, CtEvent::failure(7)).unwrap();
    assert_eq!(a.ct_get(c).unwrap(), CtEvent::new(u64::MAX - 1, 7));
    assert_eq!(a.ct_get(c).unwrap().total(), u64::MAX, "the sum saturates");
    assert_eq!(a.ct_get(d).unwrap(), CtEvent::new(0, 1));
    a.ct_inc(c, CtEvent::success(5)).unwrap();
    assert_eq!(a.ct_get(c).unwrap(), CtEvent::new(u64::MAX, 7), "no wrap");
    assert_eq!(
        a.ct_inc(c, CtEvent::new(1, 1)),
        Err(PtlError::InvalidArgument(
            "a counting-event increment moves either the success or the failure count, not both"
        ))
    );
}

#[test]
fn waits_time_out_poll_reports_the_first_counter_reached_and_a_free_wakes_a_waiter() {
    let (_net, n) = nis(1);
    let a = std::sync::Arc::new(n.into_iter().next().unwrap());
    let c = a.ct_alloc().unwrap();
    let d = a.ct_alloc().unwrap();
    assert_eq!(
        a.ct_wait(c, 1, Some(Duration::from_millis(20))),
        Err(PtlError::Timeout)
    );
    a.ct_inc(d, CtEvent::failure(2)).unwrap();
    assert_eq!(
        a.ct_poll(&[c, d], &[1, 2], Some(Duration::ZERO)).unwrap(),
        (CtEvent::new(0, 2), 1)
    );
    assert!(matches!(
        a.ct_poll(&[c], &[], None),
        Err(PtlError::InvalidArgument(_))
    ));
    // A thread asleep on `c` wakes when another thread increments it, and
    // one asleep on `d` when it is freed.
    let waiter = {
        let a = a.clone();
        std::thread::spawn(move || a.ct_wait(c, 3, Some(Duration::from_secs(60))))
    };
    let freed = {
        let a = a.clone();
        std::thread::spawn(move || a.ct_wait(d, 100, Some(Duration::from_secs(60))))
    };
    a.ct_inc(c, CtEvent::success(3)).unwrap();
    assert_eq!(waiter.join().unwrap(), Ok(CtEvent::new(3, 0)));
    // Free only once the thread waits (a wait on a freed counter fails at
    // once either way).
    a.ct_free(d).unwrap();
    assert_eq!(
        freed.join().unwrap(),
        Err(PtlError::InvalidHandle {
            kind: "counting event"
        })
    );
}

#[test]
fn a_triggered_put_whose_descriptor_went_inactive_fails_at_its_trigger() {
    let (_net, n) = nis(2);
    let (a, b) = (&n[0], &n[1]);
    let rc = b.ct_alloc().unwrap();
    target(b, 1, MdOptions::CT_COMM, rc, 8);
    let mc = a.ct_alloc().unwrap();
    // One operation left, and kept linked once it is used up.
    let src = a
        .md_bind(
            &MdDesc::new(MdOptions::CT_SEND | MdOptions::CT_ACK)
                .threshold(Threshold::Count(1))
                .ct(mc),
            vec![3; 8],
            Unlink::Retain,
        )
        .unwrap();
    let remote = Remote::new(b.id(), PT, 1);
    let t = a.ct_alloc().unwrap();
    a.triggered_put(src, 0, 8, AckReq::Ack, &remote, 0, Trigger::new(t, 1))
        .unwrap();
    a.put(src, AckReq::NoAck, &remote, 0).unwrap();
    assert_eq!(a.ct_get(mc).unwrap(), CtEvent::new(1, 0));
    a.ct_inc(t, CtEvent::success(1)).unwrap();
    assert_eq!(
        a.ct_get(mc).unwrap(),
        CtEvent::new(1, 2),
        "sent and ack failed"
    );
    assert_eq!(
        b.ct_get(rc).unwrap(),
        CtEvent::new(1, 0),
        "only the plain put"
    );
    assert_eq!(a.core().with_engine(|e| e.triggered_pending()), 0);
}

#[test]
fn freeing_a_counter_drops_the_increments_aimed_at_it_and_no_others() {
    let (_net, n) = nis(1);
    let a = &n[0];
    let pending = || a.core().with_engine(|e| e.triggered_pending());
    let t = a.ct_alloc().unwrap();
    let x = a.ct_alloc().unwrap();
    let y = a.ct_alloc().unwrap();
    // Issued before the free: nothing aimed at `x` is left waiting.
    a.triggered_ct_inc(x, CtEvent::success(1), Trigger::new(t, 1))
        .unwrap();
    a.ct_inc(t, CtEvent::success(1)).unwrap();
    assert_eq!(a.ct_get(x).unwrap(), CtEvent::new(1, 0));
    // Waiting: one aimed at `x`, one at `y`, and one set of `y` waiting in
    // `x` itself.
    a.triggered_ct_inc(x, CtEvent::success(1), Trigger::new(t, 5))
        .unwrap();
    a.triggered_ct_inc(y, CtEvent::success(1), Trigger::new(t, 5))
        .unwrap();
    a.triggered_ct_set(y, CtEvent::new(9, 0), Trigger::new(x, 7))
        .unwrap();
    assert_eq!(pending(), 3);
    a.ct_free(x).unwrap();
    assert_eq!(pending(), 1, "the increment of x and the set in x are gone");
    a.ct_inc(t, CtEvent::success(4)).unwrap();
    assert_eq!(a.ct_get(y).unwrap(), CtEvent::new(1, 0));
    assert_eq!(pending(), 0);
    // And freeing a counter nothing aims at leaves the others alone.
    a.triggered_ct_inc(y, CtEvent::success(1), Trigger::new(t, 6))
        .unwrap();
    let z = a.ct_alloc().unwrap();
    a.ct_free(z).unwrap();
    assert_eq!(pending(), 1);
    a.ct_inc(t, CtEvent::success(1)).unwrap();
    assert_eq!(a.ct_get(y).unwrap(), CtEvent::new(2, 0));
}
