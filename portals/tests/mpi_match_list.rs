//! Seed 001 §3.4 and §5 with two loopback interfaces: posted receives in
//! front of a *mark* entry, three identical high-water-mark unexpected
//! buffers behind it, filled one after the other, unlinking when exhausted,
//! drained and re-attached at the end of the list.

use portals::loopback::LoopbackNetwork;
use portals::*;

const RECV: PortalIndex = PortalIndex(0);
const BUF: usize = 64;
const EAGER_MAX: u64 = 16;

fn bits(tag: u32) -> u64 {
    tag as u64
}

#[test]
fn unexpected_buffers_fill_unlink_drain_and_reattach() {
    let net = LoopbackNetwork::new();
    let recv = net.ni(NiConfig::new(ProcessId::new(0, 0), 1)).unwrap();
    let send = net.ni(NiConfig::new(ProcessId::new(0, 1), 1)).unwrap();
    let ueq = recv.eq_alloc(1024).unwrap();
    let peq = recv.eq_alloc(64).unwrap();

    // The mark: matches nothing (no MD); everything before it is a posted
    // receive, everything after it an unexpected buffer.
    let mark = recv
        .me_attach(RECV, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
        .unwrap();
    let unexpected_desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::ACK_DISABLE)
        .max_size(EAGER_MAX)
        .eq(ueq);
    let attach_unexpected = |ni: &NetworkInterface| {
        let me = ni
            .me_attach(
                RECV,
                ProcessId::ANY,
                0,
                u64::MAX,
                Unlink::Unlink,
                Position::After,
            )
            .unwrap();
        ni.md_attach(me, &unexpected_desc, vec![0; BUF], Unlink::Unlink)
            .unwrap()
    };
    let mut buffers: Vec<MdHandle> = (0..3).map(|_| attach_unexpected(&recv)).collect();
    assert_eq!(recv.match_list(RECV).unwrap().len(), 4);

    // A posted receive for tag 1000 goes in front of the mark.
    let pme = recv
        .me_insert(
            mark,
            ProcessId::ANY,
            bits(1000),
            0,
            Unlink::Unlink,
            Position::Before,
        )
        .unwrap();
    let pmd = recv
        .md_attach(
            pme,
            &MdDesc::new(MdOptions::OP_PUT)
                .threshold(Threshold::Count(1))
                .eq(peq),
            vec![0; 32],
            Unlink::Unlink,
        )
        .unwrap();

    let src = |data: &[u8]| {
        send.md_bind(&MdDesc::default(), data.to_vec(), Unlink::Unlink)
            .unwrap()
    };
    let put = |tag: u32, data: &[u8]| {
        send.put(
            src(data),
            AckReq::NoAck,
            &Remote::new(recv.id(), RECV, bits(tag)),
            0,
        )
        .unwrap()
    };

    // Unexpected traffic: 12 messages of 12 bytes. A 64-byte buffer with a
    // 16-byte high-water mark takes 12, 24, 36, 48, 60 bytes: after the
    // fifth, 60 + 16 > 64 and it is exhausted. So the buffers take 5, 5, 2.
    let payload = |i: u32| -> Vec<u8> { (0..12).map(|j| (i * 16 + j) as u8).collect() };
    for i in 0..12 {
        put(i, &payload(i));
    }
    // The expected message lands in the posted receive, not in a buffer.
    put(1000, b"expected!");
    let ev = recv.eq_get(peq).unwrap().unwrap();
    assert_eq!(
        (ev.kind, ev.md_handle, ev.mlength),
        (EventKind::Put, pmd, 9)
    );
    assert_eq!(
        recv.md_unlink(pmd).unwrap().unwrap()[..9].to_vec(),
        b"expected!".to_vec()
    );

    // Drain the unexpected EQ as MPI would: copy out each message, note
    // buffers that unlinked, and re-attach them once emptied.
    let mut seen = Vec::new();
    let mut unlinked = Vec::new();
    while let Some(ev) = recv.eq_get(ueq).unwrap() {
        match ev.kind {
            EventKind::Put => {
                let mut data = vec![0; ev.mlength as usize];
                recv.md_read(ev.md_handle, ev.offset, &mut data).unwrap();
                assert_eq!(data, payload(ev.match_bits as u32));
                seen.push((
                    ev.match_bits as u32,
                    buffers.iter().position(|b| *b == ev.md_handle),
                ));
            }
            EventKind::Unlink => unlinked.push(ev.md_handle),
            other => panic!("unexpected event {other:?}"),
        }
    }
    let order: Vec<u32> = seen.iter().map(|s| s.0).collect();
    assert_eq!(order, (0..12).collect::<Vec<_>>(), "arrival order is kept");
    let which: Vec<Option<usize>> = seen.iter().map(|s| s.1).collect();
    assert_eq!(
        which,
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2].map(Some).to_vec(),
        "each buffer fills up to its high-water mark before the next is used"
    );
    assert_eq!(unlinked, vec![buffers[0], buffers[1]]);
    // Only the mark and the third buffer remain.
    assert_eq!(recv.match_list(RECV).unwrap().len(), 2);

    // Re-attach the drained buffers at the end, then show the recycled
    // buffers take traffic again after the third one fills.
    for b in &unlinked {
        let mem = recv.md_unlink(*b).unwrap().expect("owned buffer");
        assert_eq!(mem.len(), BUF);
    }
    buffers = vec![
        buffers[2],
        attach_unexpected(&recv),
        attach_unexpected(&recv),
    ];
    assert_eq!(recv.match_list(RECV).unwrap().len(), 4);
    for i in 12..18 {
        put(i, &payload(i));
    }
    let mut where_ = Vec::new();
    while let Some(ev) = recv.eq_get(ueq).unwrap() {
        if ev.kind == EventKind::Put {
            where_.push(buffers.iter().position(|b| *b == ev.md_handle));
        }
    }
    // Buffer 2 already holds 24 bytes: it takes three more (36, 48, 60 —
    // exhausted), then traffic moves on to the recycled buffers.
    assert_eq!(where_, [0, 0, 0, 1, 1, 1].map(Some).to_vec());
    assert_eq!(recv.status().dropped_no_match, 0);
    assert_eq!(recv.status().dropped_rejected, 0);
}
