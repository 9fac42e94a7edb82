//! Unit tests of every Portals option, with exact bytes and events, through
//! the loopback NAL (and the bare engine where a transfer must be held open).

use portals::wire::Op;
use portals::*;

mod common;
use common::*;

#[test]
fn put_deposits_exact_bytes_and_reports_every_event_field() {
    let p = pair();
    let (_, md) = p.post(0xabc, 0, put_desc().user_ptr(77), 16, Unlink::Retain);
    let src = p.put(b"portals!", 0xabc, AckReq::Ack, 0, 0x1234);

    assert_eq!(p.read(md, 16), b"portals!\0\0\0\0\0\0\0\0");
    let ev = p.tev().expect("put event");
    assert_eq!(ev.kind, EventKind::Put);
    assert_eq!(ev.initiator, p.init.id());
    assert_eq!(ev.pt_index, PT);
    assert_eq!(ev.match_bits, 0xabc);
    assert_eq!(ev.rlength, 8);
    assert_eq!(ev.mlength, 8);
    assert_eq!(ev.offset, 0);
    assert_eq!(ev.hdr_data, 0x1234);
    assert_eq!(ev.md_handle, md);
    assert_eq!(ev.md.user_ptr, 77);
    assert_eq!(ev.md.local_offset, 8);
    assert_eq!(ev.md.length, 16);
    assert_eq!(ev.sequence, 0);
    assert_eq!(ev.fail, FailType::Ok);
    assert!(p.tev().is_none());

    let sent = p.iev().expect("sent");
    assert_eq!(sent.kind, EventKind::Sent);
    assert_eq!(sent.md_handle, src);
    assert_eq!(sent.initiator, p.target.id());
    assert_eq!(sent.mlength, 8);
    let ack = p.iev().expect("ack");
    assert_eq!(ack.kind, EventKind::Ack);
    assert_eq!(ack.mlength, 8);
    assert_eq!(ack.rlength, 8);
    assert_eq!(ack.offset, 0);
    assert_eq!(ack.match_bits, 0xabc);
    assert_eq!(ack.sequence, 1);
    assert!(p.iev().is_none());
    assert_eq!(p.init.core().with_engine(|e| e.in_progress()), (0, 0));
    assert_eq!(p.target.core().with_engine(|e| e.in_progress()), (0, 0));
}

#[test]
fn no_ack_unless_requested_and_enabled() {
    let p = pair();
    p.post(1, 0, put_desc(), 64, Unlink::Retain);
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.iev().unwrap().kind, EventKind::Sent);
    assert!(p.iev().is_none(), "no ack was requested");

    let p = pair();
    p.post(
        1,
        0,
        MdDesc::new(MdOptions::OP_PUT | MdOptions::ACK_DISABLE),
        64,
        Unlink::Retain,
    );
    p.put(b"a", 1, AckReq::Ack, 0, 0);
    assert_eq!(p.iev().unwrap().kind, EventKind::Sent);
    assert!(p.iev().is_none(), "the target disabled acks");
    assert_eq!(p.tev().unwrap().kind, EventKind::Put);
}

#[test]
fn local_offset_packs_consecutive_puts() {
    let p = pair();
    let (_, md) = p.post(1, 0, put_desc(), 8, Unlink::Retain);
    p.put(b"abc", 1, AckReq::NoAck, 99, 0);
    p.put(b"de", 1, AckReq::NoAck, 99, 0);
    assert_eq!(p.read(md, 8), b"abcde\0\0\0");
    assert_eq!(p.tev().unwrap().offset, 0);
    let second = p.tev().unwrap();
    assert_eq!(second.offset, 3);
    assert_eq!(second.md.local_offset, 5);
}

#[test]
fn remote_offset_is_used_when_managed_remotely() {
    let p = pair();
    let (_, md) = p.post(
        1,
        0,
        MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE),
        8,
        Unlink::Retain,
    );
    p.put(b"xy", 1, AckReq::NoAck, 5, 0);
    p.put(b"z", 1, AckReq::NoAck, 1, 0);
    assert_eq!(p.read(md, 8), b"\0z\0\0\0xy\0");
    let ev = p.tev().unwrap();
    assert_eq!(ev.offset, 5);
    assert_eq!(
        ev.md.local_offset, 0,
        "remote management leaves the local offset alone"
    );
}

#[test]
fn too_long_is_rejected_and_passed_on_unless_truncating() {
    let p = pair();
    let (_, small) = p.post(1, 0, put_desc(), 4, Unlink::Retain);
    let (_, big) = p.post(1, 0, put_desc(), 16, Unlink::Retain);
    p.put(b"0123456789", 1, AckReq::Ack, 0, 0);
    assert_eq!(p.read(small, 4), b"\0\0\0\0");
    assert_eq!(&p.read(big, 10), b"0123456789");
    assert_eq!(p.tev().unwrap().md_handle, big);

    let p = pair();
    let (_, md) = p.post(
        1,
        0,
        MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE),
        4,
        Unlink::Retain,
    );
    p.put(b"0123456789", 1, AckReq::Ack, 0, 0);
    assert_eq!(p.read(md, 4), b"0123");
    let ev = p.tev().unwrap();
    assert_eq!((ev.rlength, ev.mlength), (10, 4));
    p.iev(); // sent
    let ack = p.iev().unwrap();
    assert_eq!(
        (ack.kind, ack.rlength, ack.mlength),
        (EventKind::Ack, 10, 4)
    );
}

#[test]
fn rejected_everywhere_is_dropped_counted_and_nacked() {
    let p = pair();
    p.post(1, 0, put_desc(), 2, Unlink::Retain);
    p.put(b"too long", 1, AckReq::Ack, 0, 0);
    assert!(p.tev().is_none());
    assert_eq!(p.target.status().dropped_rejected, 1);
    assert_eq!(p.target.status().dropped_no_match, 0);
    assert_eq!(p.iev().unwrap().kind, EventKind::Sent);
    let nack = p.iev().unwrap();
    assert_eq!(nack.kind, EventKind::Ack);
    assert_eq!(nack.fail, FailType::Dropped);
    assert_eq!(nack.mlength, 0);
}

#[test]
fn unmatched_is_dropped_and_counted() {
    let p = pair();
    p.post(1, 0, put_desc(), 8, Unlink::Retain);
    p.put(b"x", 2, AckReq::NoAck, 0, 0);
    assert!(p.tev().is_none());
    assert_eq!(p.target.status().dropped_no_match, 1);
    assert_eq!(p.target.status().accepted, 0);
}

#[test]
fn zero_length_acceptance_acks_zero_bytes() {
    // The MPI long-message protocol: a zero-length truncating MD swallows the
    // put and the initiator learns that zero bytes were taken.
    let p = pair();
    p.post(
        1,
        0,
        MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE),
        0,
        Unlink::Retain,
    );
    p.put(&[7u8; 1000], 1, AckReq::Ack, 0, 0);
    let put = p.tev().unwrap();
    assert_eq!((put.rlength, put.mlength), (1000, 0));
    p.iev();
    let ack = p.iev().unwrap();
    assert_eq!(
        (ack.kind, ack.mlength, ack.fail),
        (EventKind::Ack, 0, FailType::Ok)
    );
}

#[test]
fn ignore_bits_and_initiator_wildcards_select_entries() {
    let p = pair();
    let me_pid = p
        .target
        .me_attach(
            PT,
            ProcessId::new(NID_ANY, 99),
            0,
            u64::MAX,
            Unlink::Retain,
            Position::After,
        )
        .unwrap();
    let md_pid = p
        .target
        .md_attach(me_pid, &put_desc().eq(p.teq), vec![0; 8], Unlink::Retain)
        .unwrap();
    let (_, md_bits) = p.post(0xf0, 0x0f, put_desc(), 8, Unlink::Retain);
    p.put(b"a", 0xf7, AckReq::NoAck, 0, 0);
    assert_eq!(
        p.tev().unwrap().md_handle,
        md_bits,
        "pid 99 entry must not match pid 20"
    );
    p.put(b"b", 0xe0, AckReq::NoAck, 0, 0);
    assert!(p.tev().is_none(), "bit 4 is not ignored");
    let _ = md_pid;
}

#[test]
fn match_list_order_head_tail_before_after() {
    let p = pair();
    let t = &p.target;
    let mid = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    let tail = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    let head = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::Before)
        .unwrap();
    let before_mid = t
        .me_insert(mid, ProcessId::ANY, 1, 0, Unlink::Retain, Position::Before)
        .unwrap();
    let after_mid = t
        .me_insert(mid, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    assert_eq!(
        t.match_list(PT).unwrap(),
        vec![head, before_mid, mid, after_mid, tail]
    );
    // The first matching entry with an accepting MD wins; entries without an
    // MD pass the message on.
    let md_after = t
        .md_attach(after_mid, &put_desc().eq(p.teq), vec![0; 4], Unlink::Retain)
        .unwrap();
    let md_tail = t
        .md_attach(tail, &put_desc().eq(p.teq), vec![0; 4], Unlink::Retain)
        .unwrap();
    p.put(b"x", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().unwrap().md_handle, md_after);
    t.me_unlink(after_mid).unwrap();
    p.put(b"y", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().unwrap().md_handle, md_tail);
    assert_eq!(t.match_list(PT).unwrap(), vec![head, before_mid, mid, tail]);
}

#[test]
fn threshold_counts_operations_then_unlinks_md_and_me() {
    let p = pair();
    let (me, md) = p.post(
        1,
        0,
        put_desc().threshold(Threshold::Count(2)),
        64,
        Unlink::Unlink,
    );
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().unwrap().md.threshold, Threshold::Count(1));
    p.put(b"b", 1, AckReq::NoAck, 0, 0);
    let second = p.tev().unwrap();
    assert_eq!(second.kind, EventKind::Put);
    assert_eq!(second.md.threshold, Threshold::Count(0));
    let unlink = p.tev().unwrap();
    assert_eq!(unlink.kind, EventKind::Unlink);
    assert_eq!(unlink.md_handle, md);
    assert!(t_list_is_empty(&p));
    assert!(matches!(
        p.target.me_unlink(me),
        Err(PtlError::InvalidHandle { .. })
    ));
    // The owned buffer is kept for one md_unlink.
    let buf = p.target.md_unlink(md).unwrap().unwrap();
    assert_eq!(&buf[..2], b"ab");
    assert!(matches!(
        p.target.md_unlink(md),
        Err(PtlError::InvalidHandle { .. })
    ));
    p.put(b"c", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.target.status().dropped_no_match, 1);
}

fn t_list_is_empty(p: &Pair) -> bool {
    p.target.match_list(PT).unwrap().is_empty()
}

#[test]
fn retained_md_goes_inactive_and_passes_messages_on() {
    let p = pair();
    let (_, md) = p.post(
        1,
        0,
        put_desc().threshold(Threshold::Count(1)),
        8,
        Unlink::Retain,
    );
    let (_, md2) = p.post(1, 0, put_desc(), 8, Unlink::Retain);
    p.put(b"a", 1, AckReq::NoAck, 0, 0);
    p.put(b"b", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().unwrap().md_handle, md);
    assert_eq!(p.tev().unwrap().md_handle, md2);
    assert!(p.tev().is_none(), "no unlink event for a retained MD");
    assert_eq!(p.target.match_list(PT).unwrap().len(), 2);
}

#[test]
fn high_water_mark_exhausts_and_messages_overflow_to_the_next_md() {
    // Seed 001 §5: deposit one after another until offset + max_size would
    // exceed the length, then unlink. The mark limits the offset, not the
    // message: a longer message that fits is taken.
    let p = pair();
    let (_, a) = p.post(1, 0, put_desc().max_size(4), 10, Unlink::Unlink);
    let (_, b) = p.post(1, 0, put_desc().max_size(4), 10, Unlink::Unlink);
    p.put(b"1111", 1, AckReq::NoAck, 0, 0); // a: offset 4, 4+4 <= 10
    p.put(b"222", 1, AckReq::NoAck, 0, 0); // a: offset 7, 7+4 > 10 -> exhausted
    p.put(b"33", 1, AckReq::NoAck, 0, 0); // -> b
    p.put(b"55555", 1, AckReq::NoAck, 0, 0); // longer than max_size, fits b
    p.put(b"666666", 1, AckReq::NoAck, 0, 0); // fits nowhere
    let kinds: Vec<_> = std::iter::from_fn(|| p.tev())
        .map(|e| (e.kind, e.md_handle, e.offset))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Put, a, 0),
            (EventKind::Put, a, 4),
            (EventKind::Unlink, a, 7),
            (EventKind::Put, b, 0),
            (EventKind::Put, b, 2),
            (EventKind::Unlink, b, 7),
        ]
    );
    assert_eq!(p.target.status().dropped_no_match, 1);
    let buf = p.target.md_unlink(a).unwrap().unwrap();
    assert_eq!(&buf[..7], b"1111222");
}

#[test]
fn high_water_mark_beyond_the_length_is_inactive_from_attach() {
    // Portals 3.3: max_size > length means offset 0 + max_size > length, so
    // the descriptor is exhausted before it accepts anything; md_update
    // applies the same rule (both must agree).
    let p = pair();
    let (_, small) = p.post(1, 0, put_desc().max_size(16), 8, Unlink::Retain);
    let (_, fits) = p.post(1, 0, put_desc().max_size(1), 8, Unlink::Retain);
    p.put(b"abc", 1, AckReq::NoAck, 0, 0);
    let ev = p.tev().expect("put event");
    assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, fits));
    assert_eq!(p.target.status().dropped_rejected, 0);
    let snap = p.target.md_update(small, None, None).unwrap();
    assert_eq!(snap.local_offset, 0, "the oversized-mark MD took nothing");
    // Re-describing it with a mark that fits makes it active.
    p.target
        .md_update(small, Some(&put_desc().max_size(4).eq(p.teq)), None)
        .unwrap();
    p.put(b"xy", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().expect("put event").md_handle, small);
    // And back: a mark beyond the length deactivates it again.
    p.target
        .md_update(small, Some(&put_desc().max_size(9).eq(p.teq)), None)
        .unwrap();
    p.put(b"z", 1, AckReq::NoAck, 0, 0);
    assert_eq!(p.tev().expect("put event").md_handle, fits);
}

#[test]
fn get_reads_target_memory_into_the_initiator() {
    let p = pair();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 5, 0, Unlink::Retain, Position::After)
        .unwrap();
    let tmd = p
        .target
        .md_attach(
            me,
            &MdDesc::new(MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(p.teq),
            b"0123456789".to_vec(),
            Unlink::Retain,
        )
        .unwrap();
    let dst = p
        .init
        .md_bind(&MdDesc::default().eq(p.ieq), vec![0; 8], Unlink::Retain)
        .unwrap();
    p.init
        .get_region(dst, 2, 4, &Remote::new(p.target.id(), PT, 5).with_offset(3))
        .unwrap();
    let mut got = vec![0; 8];
    p.init.md_read(dst, 0, &mut got).unwrap();
    assert_eq!(got, b"\0\x003456\0\0");
    let g = p.tev().unwrap();
    assert_eq!(
        (g.kind, g.offset, g.mlength, g.md_handle),
        (EventKind::Get, 3, 4, tmd)
    );
    let r = p.iev().unwrap();
    assert_eq!(
        (r.kind, r.mlength, r.offset, r.fail),
        (EventKind::Reply, 4, 2, FailType::Ok)
    );
    assert!(p.iev().is_none(), "gets produce no Sent event");
}

#[test]
fn get_needs_op_get_and_a_refused_get_replies_with_failure() {
    let p = pair();
    p.post(5, 0, put_desc(), 8, Unlink::Retain);
    let dst = p
        .init
        .md_bind(&MdDesc::default().eq(p.ieq), vec![0; 4], Unlink::Retain)
        .unwrap();
    p.init.get(dst, &Remote::new(p.target.id(), PT, 5)).unwrap();
    let r = p.iev().unwrap();
    assert_eq!(
        (r.kind, r.fail, r.mlength),
        (EventKind::Reply, FailType::Dropped, 0)
    );
    assert_eq!(p.target.status().dropped_rejected, 1);
    // The reply region was released: the MD can be unlinked.
    assert!(p.init.md_unlink(dst).is_ok());
}

#[test]
fn get_put_swaps_atomically() {
    let p = pair();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 9, 0, Unlink::Retain, Position::After)
        .unwrap();
    let tmd = p
        .target
        .md_attach(
            me,
            &MdDesc::new(MdOptions::OP_GET | MdOptions::OP_PUT).eq(p.teq),
            b"old!".to_vec(),
            Unlink::Retain,
        )
        .unwrap();
    let getmd = p
        .init
        .md_bind(&MdDesc::default().eq(p.ieq), vec![0; 4], Unlink::Retain)
        .unwrap();
    let putmd = p
        .init
        .md_bind(
            &MdDesc::default().eq(p.ieq),
            b"new!".to_vec(),
            Unlink::Retain,
        )
        .unwrap();
    p.init
        .get_put(getmd, putmd, &Remote::new(p.target.id(), PT, 9), 0)
        .unwrap();
    assert_eq!(p.read(tmd, 4), b"new!");
    let mut old = [0u8; 4];
    p.init.md_read(getmd, 0, &mut old).unwrap();
    assert_eq!(&old, b"old!");
    let kinds: Vec<_> = std::iter::from_fn(|| p.iev())
        .map(|e| (e.kind, e.md_handle))
        .collect();
    assert_eq!(
        kinds,
        vec![(EventKind::Sent, putmd), (EventKind::Reply, getmd)]
    );
    assert_eq!(p.tev().unwrap().kind, EventKind::Get);
}

#[test]
fn md_update_only_when_the_test_queue_is_empty() {
    // The MPI posted-receive race: an inactive MD is activated only if no
    // unexpected message arrived meanwhile.
    let p = pair();
    let unexpected_eq = p.target.eq_alloc(8).unwrap();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Unlink, Position::After)
        .unwrap();
    let recv = p
        .target
        .md_attach(
            me,
            &put_desc().threshold(Threshold::Count(0)).eq(p.teq),
            vec![0; 8],
            Unlink::Unlink,
        )
        .unwrap();
    let ume = p
        .target
        .me_attach(
            PT,
            ProcessId::ANY,
            0,
            u64::MAX,
            Unlink::Retain,
            Position::After,
        )
        .unwrap();
    p.target
        .md_attach(
            ume,
            &put_desc().eq(unexpected_eq),
            vec![0; 64],
            Unlink::Retain,
        )
        .unwrap();

    // Inactive: the message falls through to the unexpected buffer.
    p.put(b"early", 1, AckReq::NoAck, 0, 0);
    let active = put_desc().threshold(Threshold::Count(1)).eq(p.teq);
    assert_eq!(
        p.target.md_update(recv, Some(&active), Some(unexpected_eq)),
        Err(PtlError::MdNoUpdate)
    );
    let old = p.target.md_update(recv, None, None).unwrap();
    assert_eq!(old.threshold, Threshold::Count(0));
    assert_eq!(p.target.eq_get(unexpected_eq).unwrap().unwrap().mlength, 5);
    let prev = p
        .target
        .md_update(recv, Some(&active), Some(unexpected_eq))
        .unwrap();
    assert_eq!(prev.threshold, Threshold::Count(0));
    p.put(b"late", 1, AckReq::NoAck, 0, 0);
    let ev = p.tev().unwrap();
    assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, recv));
    assert_eq!(p.tev().unwrap().kind, EventKind::Unlink);
}

#[test]
fn md_update_counts_transfers_in_progress_as_not_empty() {
    let mut t = bare_target();
    let ueq = t.eq_alloc(8).unwrap();
    let me = catch_all(&mut t);
    t.md_attach(me, &put_desc().eq(ueq), vec![0; 64], Unlink::Retain)
        .unwrap();
    let rme = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::Before)
        .unwrap();
    let recv = t
        .md_attach(
            rme,
            &put_desc().threshold(Threshold::Count(0)),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    let h = request(Op::Put, 1, 4);
    let RecvAction::Deposit { token, .. } = t.recv_header(&h) else {
        panic!("expected a deposit");
    };
    let active = put_desc().threshold(Threshold::Count(1));
    assert_eq!(
        t.md_update(recv, Some(&active), Some(ueq)),
        Err(PtlError::MdNoUpdate),
        "a matched-but-incomplete transfer must count"
    );
    assert!(t.recv_complete(token).is_none());
    assert!(t.eq_get(ueq).unwrap().is_some());
    assert!(t.md_update(recv, Some(&active), Some(ueq)).is_ok());
}

#[test]
fn md_in_use_while_a_transfer_holds_its_memory() {
    let mut t = bare_target();
    let me = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    let md = t
        .md_attach(me, &put_desc(), vec![0; 8], Unlink::Retain)
        .unwrap();
    assert_eq!(t.md_busy(md), Ok(false));
    let RecvAction::Deposit {
        region,
        discard,
        token,
    } = t.recv_header(&request(Op::Put, 1, 6))
    else {
        panic!("expected a deposit");
    };
    assert_eq!((region.len(), discard), (6, 0));
    assert_eq!(t.md_busy(md), Ok(true));
    assert_eq!(t.md_unlink(md), Err(PtlError::MdInUse));
    assert_eq!(t.me_unlink(me), Err(PtlError::MdInUse));
    let mut buf = [0u8; 2];
    assert_eq!(t.md_read(md, 4, &mut buf), Err(PtlError::MdInUse));
    assert_eq!(t.md_read(md, 6, &mut buf), Ok(()), "outside the transfer");
    // SAFETY: the token is open and nothing else touches the region.
    unsafe { region.as_mut_slice() }.copy_from_slice(b"abcdef");
    t.recv_complete(token);
    assert_eq!(t.md_busy(md), Ok(false), "the deposit is done");
    let buf = t.md_unlink(md).unwrap().unwrap();
    assert_eq!(&buf, b"abcdef\0\0");
}

#[test]
fn access_control_entries_restrict_initiators_and_portals() {
    let p = pair();
    p.post(1, 0, put_desc(), 64, Unlink::Retain);
    // Entry 1 admits only pid 20 on another portal.
    p.target
        .ac_entry(
            1,
            Some(AcEntry {
                match_id: ProcessId::new(NID_ANY, 20),
                pt_index: PortalIndex(3),
            }),
        )
        .unwrap();
    let src = p.source(b"hi");
    let via = |ac: u32| Remote::new(p.target.id(), PT, 1).with_ac_index(AcIndex(ac));
    p.init.put(src, AckReq::NoAck, &via(1), 0).unwrap();
    assert_eq!(p.target.status().dropped_access_denied, 1);
    p.target
        .ac_entry(
            1,
            Some(AcEntry {
                match_id: ProcessId::new(NID_ANY, 20),
                pt_index: PT,
            }),
        )
        .unwrap();
    p.init.put(src, AckReq::NoAck, &via(1), 0).unwrap();
    assert_eq!(p.tev().unwrap().kind, EventKind::Put);
    // Empty entries admit nobody; entry 0 can be closed too.
    p.init.put(src, AckReq::NoAck, &via(2), 0).unwrap();
    p.target.ac_entry(0, None).unwrap();
    p.init.put(src, AckReq::NoAck, &via(0), 0).unwrap();
    assert_eq!(p.target.status().dropped_access_denied, 3);
    assert!(matches!(
        p.target.ac_entry(999, None),
        Err(PtlError::InvalidAcIndex { .. })
    ));
}

#[test]
fn a_get_counts_against_the_threshold_once_when_its_reply_arrives() {
    // Portals 3.3: sending a get request produces no event, so only the
    // reply counts.
    let p = pair();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 5, 0, Unlink::Retain, Position::After)
        .unwrap();
    p.target
        .md_attach(
            me,
            &MdDesc::new(MdOptions::OP_GET).eq(p.teq),
            vec![9; 4],
            Unlink::Retain,
        )
        .unwrap();
    let dst = p
        .init
        .md_bind(
            &MdDesc::default().threshold(Threshold::Count(2)).eq(p.ieq),
            vec![0; 4],
            Unlink::Unlink,
        )
        .unwrap();
    p.init.get(dst, &Remote::new(p.target.id(), PT, 5)).unwrap();
    let r = p.iev().unwrap();
    assert_eq!(
        (r.kind, r.md.threshold),
        (EventKind::Reply, Threshold::Count(1))
    );
    p.init.get(dst, &Remote::new(p.target.id(), PT, 5)).unwrap();
    let r = p.iev().unwrap();
    assert_eq!(
        (r.kind, r.md.threshold),
        (EventKind::Reply, Threshold::Count(0))
    );
    assert_eq!(p.iev().unwrap().kind, EventKind::Unlink);
}

/// `AckReq::Lazy` is an acknowledgment like any other for both engines; only
/// the acknowledgment's header says it may wait in the target's transport.
/// A failure (here, no match) is never lazy: the initiator acts on it.
#[test]
fn a_lazy_acknowledgment_is_an_ordinary_one_marked_for_the_transport() {
    let p = pair();
    p.post(1, 0, put_desc(), 64, Unlink::Retain);
    p.put(b"a", 1, AckReq::Lazy, 0, 0);
    assert_eq!(p.iev().unwrap().kind, EventKind::Sent);
    let ack = p.iev().unwrap();
    assert_eq!(
        (ack.kind, ack.fail, ack.mlength),
        (EventKind::Ack, FailType::Ok, 1)
    );

    let mut t = bare_target();
    let eq = t.eq_alloc(8).unwrap();
    let me = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    t.md_attach(me, &put_desc().eq(eq), vec![0; 64], Unlink::Retain)
        .unwrap();
    for (ack_req, lazy) in [(true, true), (true, false), (false, false)] {
        let mut h = request(Op::Put, 1, 4);
        h.ack_req = ack_req;
        h.ack_lazy = lazy;
        let RecvAction::Deposit { token, .. } = t.recv_header(&h) else {
            panic!("expected a deposit");
        };
        let answer = t.recv_complete(token);
        assert_eq!(answer.is_some(), ack_req);
        if let Some(a) = answer {
            assert_eq!(a.header.op, Op::Ack);
            assert_eq!(a.header.ack_lazy, lazy, "lazy {lazy}");
        }
    }
    let mut h = request(Op::Put, 2, 4);
    h.ack_req = true;
    h.ack_lazy = true;
    let RecvAction::Respond { response, .. } = t.recv_header(&h) else {
        panic!("expected a negative acknowledgment");
    };
    assert_eq!(
        (
            response.header.op,
            response.header.fail,
            response.header.ack_lazy
        ),
        (Op::Ack, FailType::Dropped, false)
    );
}
