//! Unit tests of every Portals option, with exact bytes and events, through
//! the loopback NAL (and the bare engine where a transfer must be held open).

use std::time::Duration;

use portals::loopback::LoopbackNetwork;
use portals::wire::{Header, Op};
use portals::*;

const KEY: u64 = 0x5eed;
const PT: PortalIndex = PortalIndex(7);

struct Pair {
    _net: LoopbackNetwork,
    target: NetworkInterface,
    init: NetworkInterface,
    teq: EqHandle,
    ieq: EqHandle,
}

fn pair() -> Pair {
    let net = LoopbackNetwork::new();
    let target = net.ni(NiConfig::new(ProcessId::new(1, 10), KEY)).unwrap();
    let init = net.ni(NiConfig::new(ProcessId::new(2, 20), KEY)).unwrap();
    let teq = target.eq_alloc(64).unwrap();
    let ieq = init.eq_alloc(64).unwrap();
    Pair {
        _net: net,
        target,
        init,
        teq,
        ieq,
    }
}

impl Pair {
    /// Attach an ME (tail of PT) with an MD over `len` zero bytes.
    fn post(
        &self,
        bits: u64,
        ignore: u64,
        desc: MdDesc,
        len: usize,
        unlink: Unlink,
    ) -> (MeHandle, MdHandle) {
        let me = self
            .target
            .me_attach(PT, ProcessId::ANY, bits, ignore, unlink, Position::After)
            .unwrap();
        let md = self
            .target
            .md_attach(me, &desc.eq(self.teq), vec![0; len], unlink)
            .unwrap();
        (me, md)
    }

    fn source(&self, data: &[u8]) -> MdHandle {
        self.init
            .md_bind(
                &MdDesc::default().eq(self.ieq),
                data.to_vec(),
                Unlink::Retain,
            )
            .unwrap()
    }

    fn put(&self, data: &[u8], bits: u64, ack: AckReq, offset: u64, hdr: u64) -> MdHandle {
        let md = self.source(data);
        self.init
            .put(
                md,
                ack,
                &Remote::new(self.target.id(), PT, bits).with_offset(offset),
                hdr,
            )
            .unwrap();
        md
    }

    fn tev(&self) -> Option<Event> {
        self.target.eq_get(self.teq).unwrap()
    }

    fn iev(&self) -> Option<Event> {
        self.init.eq_get(self.ieq).unwrap()
    }

    fn read(&self, md: MdHandle, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.target.md_read(md, 0, &mut v).unwrap();
        v
    }
}

fn put_desc() -> MdDesc {
    MdDesc::new(MdOptions::OP_PUT)
}

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
fn full_event_queue_reports_drops_and_keeps_the_oldest() {
    let p = pair();
    let small = p.target.eq_alloc(2).unwrap();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    p.target
        .md_attach(me, &put_desc().eq(small), vec![0; 64], Unlink::Retain)
        .unwrap();
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
    let mut t = Engine::new(ProcessId::new(1, 1), KEY, NiLimits::default()).unwrap();
    let ueq = t.eq_alloc(8).unwrap();
    let me = t
        .me_attach(
            PT,
            ProcessId::ANY,
            0,
            u64::MAX,
            Unlink::Retain,
            Position::After,
        )
        .unwrap();
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

fn request(op: Op, bits: u64, len: u64) -> Header {
    Header {
        op,
        ack_req: false,
        fail: FailType::Ok,
        job_key: KEY,
        src: ProcessId::new(9, 9),
        dst: ProcessId::new(1, 1),
        pt_index: PT,
        ac_index: 0,
        match_bits: bits,
        offset: 0,
        hdr_data: 0,
        rlength: len,
        mlength: 0,
        cookie: 1,
    }
}

#[test]
fn md_in_use_while_a_transfer_holds_its_memory() {
    let mut t = Engine::new(ProcessId::new(1, 1), KEY, NiLimits::default()).unwrap();
    let me = t
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    let md = t
        .md_attach(me, &put_desc(), vec![0; 8], Unlink::Retain)
        .unwrap();
    let RecvAction::Deposit {
        region,
        discard,
        token,
    } = t.recv_header(&request(Op::Put, 1, 6))
    else {
        panic!("expected a deposit");
    };
    assert_eq!((region.len(), discard), (6, 0));
    assert_eq!(t.md_unlink(md), Err(PtlError::MdInUse));
    assert_eq!(t.me_unlink(me), Err(PtlError::MdInUse));
    let mut buf = [0u8; 2];
    assert_eq!(t.md_read(md, 4, &mut buf), Err(PtlError::MdInUse));
    assert_eq!(t.md_read(md, 6, &mut buf), Ok(()), "outside the transfer");
    // SAFETY: the token is open and nothing else touches the region.
    unsafe { region.as_mut_slice() }.copy_from_slice(b"abcdef");
    t.recv_complete(token);
    let buf = t.md_unlink(md).unwrap().unwrap();
    assert_eq!(&buf, b"abcdef\0\0");
}

#[test]
fn aborted_deposit_reports_failure_and_sends_no_ack() {
    let mut t = Engine::new(ProcessId::new(1, 1), KEY, NiLimits::default()).unwrap();
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
    let mut t = Engine::new(ProcessId::new(1, 1), KEY, NiLimits::default()).unwrap();
    let me = t
        .me_attach(
            PT,
            ProcessId::ANY,
            0,
            u64::MAX,
            Unlink::Retain,
            Position::After,
        )
        .unwrap();
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
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Unlink, Position::After)
        .unwrap();
    p.target
        .md_attach(
            me,
            &put_desc().threshold(Threshold::Count(1)).eq(other),
            vec![0; 8],
            Unlink::Unlink,
        )
        .unwrap();
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
