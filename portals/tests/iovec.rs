//! Scatter/gather descriptors (`PTL_MD_IOVEC`): the list checks and their
//! typed errors, taking segments back, and puts, gets and swaps across
//! segment boundaries through the bare engine and the loopback NAL. (The
//! same over TCP, UDP and shared memory is the conformance suite's
//! `iovec_descriptors_scatter_and_gather_byte_exact`; random sequences
//! against the flat reference model are in `model.rs`.)

use portals::wire::Op;
use portals::*;

mod common;
use common::*;

/// `data` cut into segments of the given lengths.
fn cut(data: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
    let mut at = 0;
    lens.iter()
        .map(|&n| {
            at += n;
            data[at - n..at].to_vec()
        })
        .collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// Odd segment lengths (1 byte to a page and a bit) summing to `total`.
fn odd_split(total: usize, seed: usize) -> Vec<usize> {
    const MIX: [usize; 9] = [1, 3, 4099, 7, 250, 4096, 2, 1000, 13];
    let mut out = Vec::new();
    let (mut left, mut i) = (total, seed);
    while left > 0 {
        let n = MIX[i % MIX.len()].min(left);
        out.push(n);
        left -= n;
        i += 1;
    }
    out
}

fn engine_with(limits: NiLimits) -> Engine {
    Engine::new(ProcessId::new(1, 1), KEY, limits).unwrap()
}

// ----- refused lists ------------------------------------------------------------

#[test]
fn a_zero_length_segment_is_refused_with_its_index() {
    let mut e = bare_target();
    let r = e.md_bind_iovec(
        &MdDesc::default(),
        vec![vec![1; 3], vec![2; 4], Vec::new(), vec![3]],
        Unlink::Retain,
    );
    assert_eq!(
        r,
        Err(PtlError::Iovec(IovecError::EmptySegment { index: 2 }))
    );
    let me = catch_all(&mut e);
    let r = e.md_attach_iovec(me, &MdDesc::default(), vec![Vec::new()], Unlink::Retain);
    assert_eq!(
        r,
        Err(PtlError::Iovec(IovecError::EmptySegment { index: 0 }))
    );
    // Nothing was attached: the entry still takes a descriptor.
    assert!(e
        .md_attach_iovec(me, &MdDesc::default(), vec![vec![0; 2]], Unlink::Retain)
        .is_ok());
}

#[test]
fn an_empty_list_is_a_descriptor_of_length_zero() {
    let mut e = bare_target();
    let md = e
        .md_bind_iovec(&MdDesc::default(), Vec::new(), Unlink::Retain)
        .unwrap();
    assert_eq!(e.md_update(md, None, None).unwrap().length, 0);
    assert_eq!(
        e.md_read(md, 0, &mut [0u8; 1]),
        Err(PtlError::OutOfRange {
            offset: 0,
            length: 1,
            md_length: 0
        })
    );
    assert_eq!(e.md_unlink_iovec(md), Ok(Some(Vec::new())));
}

#[test]
fn a_million_segments_exceed_the_default_limit_and_work_under_a_raised_one() {
    const MILLION: usize = 1_000_000;
    let limits = NiLimits::default();
    assert_eq!(limits.max_iovecs, 65_536);
    let mut e = engine_with(limits);
    let segs: Vec<Vec<u8>> = (0..MILLION).map(|i| vec![i as u8]).collect();
    assert_eq!(
        e.md_bind_iovec(&MdDesc::default(), segs, Unlink::Retain),
        Err(PtlError::Iovec(IovecError::TooManySegments {
            count: MILLION,
            limit: 65_536
        }))
    );
    // Exactly at the limit is fine.
    let segs: Vec<Vec<u8>> = (0..65_536).map(|_| vec![0]).collect();
    let md = e
        .md_bind_iovec(&MdDesc::default(), segs, Unlink::Retain)
        .unwrap();
    e.md_unlink_iovec(md).unwrap();

    // Raised: a million one-byte segments make one 1 MB logical buffer that
    // sends, receives and comes back whole.
    let mut e = engine_with(NiLimits {
        max_iovecs: MILLION,
        ..NiLimits::default()
    });
    let data = pattern(MILLION, 5);
    let segs: Vec<Vec<u8>> = data.iter().map(|&b| vec![b]).collect();
    let md = e
        .md_bind_iovec(&MdDesc::default(), segs, Unlink::Retain)
        .unwrap();
    let out = e
        .put_region(
            md,
            1,
            (MILLION - 2) as u64,
            AckReq::NoAck,
            &Remote::new(ProcessId::new(2, 2), PT, 0),
            0,
        )
        .unwrap();
    let Payload::Region(r) = &out.payload else {
        panic!("a put sends descriptor memory")
    };
    assert!(!r.is_contiguous());
    // SAFETY: the send token is open.
    assert_eq!(unsafe { r.pieces() }.count(), MILLION - 2);
    let mut sent = vec![0u8; r.len()];
    // SAFETY: as above.
    unsafe { r.read_at(0, &mut sent) };
    assert!(sent == data[1..MILLION - 1]);
    e.send_complete(out.token.unwrap(), FailType::Ok);
    let mut tail = [0u8; 10];
    e.md_read(md, (MILLION - 10) as u64, &mut tail).unwrap();
    assert_eq!(tail[..], data[MILLION - 10..]);
    let back = e.md_unlink_iovec(md).unwrap().unwrap();
    assert_eq!(back.len(), MILLION);
    assert!(back.concat() == data);
}

#[test]
fn raw_lists_are_checked_before_they_are_used() {
    let net = portals::loopback::LoopbackNetwork::new();
    let ni = net.ni(NiConfig::new(ProcessId::new(0, 1), KEY)).unwrap();
    let dangling = std::ptr::NonNull::<u8>::dangling().as_ptr();
    let huge = Iovec::new(dangling, isize::MAX as usize);
    let cases: [(Vec<Iovec>, IovecError); 4] = [
        // Lengths whose sum overflows u64 (each alone is a legal length).
        (
            vec![huge, huge, Iovec::new(dangling, 2)],
            IovecError::LengthOverflow { index: 2 },
        ),
        (
            vec![Iovec::new(dangling, usize::MAX)],
            IovecError::SegmentTooLong { index: 0 },
        ),
        (
            vec![Iovec::new(dangling, 1), Iovec::new(std::ptr::null_mut(), 8)],
            IovecError::NullSegment { index: 1 },
        ),
        (
            vec![Iovec::new(dangling, 0)],
            IovecError::EmptySegment { index: 0 },
        ),
    ];
    for (list, want) in cases {
        // SAFETY: every list is refused before any segment is touched (the
        // documented order of the checks), so the dangling bases are never
        // dereferenced.
        let r = unsafe { ni.md_bind_iovec_raw(&MdDesc::default(), &list, Unlink::Retain) };
        assert_eq!(r, Err(PtlError::Iovec(want)));
    }
    let too_many = vec![Iovec::new(dangling, 1); 65_537];
    // SAFETY: refused for its count, before anything else.
    let r = unsafe { ni.md_bind_iovec_raw(&MdDesc::default(), &too_many, Unlink::Retain) };
    assert_eq!(
        r,
        Err(PtlError::Iovec(IovecError::TooManySegments {
            count: 65_537,
            limit: 65_536
        }))
    );
    assert!(PtlError::Iovec(IovecError::LengthOverflow { index: 2 })
        .to_string()
        .contains("overflow u64"));
}

// ----- taking segments back ---------------------------------------------------

#[test]
fn owned_segments_come_back_only_through_md_unlink_iovec() {
    let mut e = bare_target();
    let me = catch_all(&mut e);
    let segs = vec![b"ab".to_vec(), b"cde".to_vec(), b"f".to_vec()];
    let md = e
        .md_attach_iovec(
            me,
            &MdDesc::new(MdOptions::OP_PUT),
            segs.clone(),
            Unlink::Retain,
        )
        .unwrap();
    // The one-buffer calls refuse, and change nothing.
    assert!(matches!(e.md_unlink(md), Err(PtlError::InvalidArgument(_))));
    assert!(matches!(e.me_unlink(me), Err(PtlError::InvalidArgument(_))));
    assert_eq!(e.match_list(PT).unwrap(), vec![me]);
    let mut all = [0u8; 6];
    e.md_read(md, 0, &mut all).unwrap();
    assert_eq!(&all, b"abcdef");
    assert_eq!(e.md_unlink_iovec(md), Ok(Some(segs)));
    assert!(matches!(
        e.md_unlink_iovec(md),
        Err(PtlError::InvalidHandle { .. })
    ));
    // The entry is free again, and unlinks as usual.
    assert_eq!(e.me_unlink(me), Ok(None));

    // md_unlink_iovec takes an ordinary descriptor's buffer back as a list
    // of one.
    let plain = e
        .md_bind(&MdDesc::default(), b"xyz".to_vec(), Unlink::Retain)
        .unwrap();
    assert_eq!(e.md_unlink_iovec(plain), Ok(Some(vec![b"xyz".to_vec()])));
}

#[test]
fn a_descriptor_that_unlinked_itself_keeps_its_segments_for_the_user() {
    let mut e = bare_target();
    let eq = e.eq_alloc(8).unwrap();
    let me = catch_all(&mut e);
    let md = e
        .md_attach_iovec(
            me,
            &MdDesc::new(MdOptions::OP_PUT)
                .threshold(Threshold::Count(1))
                .eq(eq),
            vec![vec![0; 2], vec![0; 3]],
            Unlink::Unlink,
        )
        .unwrap();
    let RecvAction::Deposit { region, token, .. } = e.recv_header(&request(Op::Put, 0, 4)) else {
        panic!("accepted")
    };
    assert!(!region.is_contiguous());
    // SAFETY: the token is open; this test is the region's only user.
    unsafe { region.write_at(0, b"wxyz") };
    e.recv_complete(token);
    let kinds: Vec<_> = std::iter::from_fn(|| e.eq_get(eq).unwrap())
        .map(|ev| ev.kind)
        .collect();
    assert_eq!(kinds, [EventKind::Put, EventKind::Unlink]);
    assert_eq!(
        e.md_unlink_iovec(md),
        Ok(Some(vec![b"wx".to_vec(), b"yz\0".to_vec()]))
    );
}

// ----- the engine's transfers ------------------------------------------------

#[test]
fn offsets_truncation_and_the_high_water_mark_apply_to_the_concatenation() {
    let mut e = bare_target();
    let eq = e.eq_alloc(16).unwrap();
    let me = catch_all(&mut e);
    // 10 bytes in segments of 3, 1, 4, 2; locally managed, truncating, with
    // a high-water mark of 4: accepts at offsets 0 and 4, then at 8 with
    // only 2 bytes left the mark is crossed.
    let md = e
        .md_attach_iovec(
            me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
                .max_size(4)
                .eq(eq),
            cut(&[0; 10], &[3, 1, 4, 2]),
            Unlink::Retain,
        )
        .unwrap();
    let mut put = |len: u64, fill: u8| -> Option<(u64, usize)> {
        match e.recv_header(&request(Op::Put, 0, len)) {
            RecvAction::Deposit { region, token, .. } => {
                let n = region.len();
                // SAFETY: token open; sole user.
                let pieces = unsafe { region.pieces() }.count();
                // SAFETY: as above.
                unsafe { region.write_at(0, &vec![fill; n]) };
                e.recv_complete(token);
                Some((n as u64, pieces))
            }
            _ => None,
        }
    };
    assert_eq!(put(4, 1), Some((4, 2))); // 0..4: segments 0 and 1
    assert_eq!(put(5, 2), Some((5, 2))); // 4..9: segments 2 and 3
    assert_eq!(put(1, 3), None, "high-water mark crossed");
    let mut all = [0u8; 10];
    e.md_read(md, 0, &mut all).unwrap();
    assert_eq!(all, [1, 1, 1, 1, 2, 2, 2, 2, 2, 0]);
    let offsets: Vec<(u64, u64)> = std::iter::from_fn(|| e.eq_get(eq).unwrap())
        .map(|ev| (ev.offset, ev.mlength))
        .collect();
    assert_eq!(offsets, [(0, 4), (4, 5)]);
}

#[test]
fn a_range_inside_one_segment_is_a_contiguous_region() {
    let mut e = bare_target();
    let md = e
        .md_bind_iovec(
            &MdDesc::default(),
            cut(&pattern(12, 0), &[4, 8]),
            Unlink::Retain,
        )
        .unwrap();
    let remote = Remote::new(ProcessId::new(2, 2), PT, 0);
    for (off, len, contiguous) in [
        (0, 4, true),
        (4, 8, true),
        (5, 3, true),
        (3, 2, false),
        (0, 12, false),
    ] {
        let out = e
            .put_region(md, off, len, AckReq::NoAck, &remote, 0)
            .unwrap();
        let Payload::Region(r) = &out.payload else {
            panic!("region")
        };
        assert_eq!(
            (r.len() as u64, r.is_contiguous()),
            (len, contiguous),
            "{off}+{len}"
        );
        if contiguous {
            // SAFETY: the token is open.
            assert_eq!(
                unsafe { r.as_slice() },
                &pattern(12, 0)[off as usize..(off + len) as usize]
            );
        }
        e.send_complete(out.token.unwrap(), FailType::Ok);
    }
    // The snapshot's start is the first segment's address.
    let snap = e.md_update(md, None, None).unwrap();
    assert_ne!(snap.start, 0);
    assert_eq!(snap.length, 12);
}

#[test]
fn get_put_swaps_across_segments_on_both_sides() {
    let p = pair();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 9, 0, Unlink::Retain, Position::After)
        .unwrap();
    let old = pattern(4103, 1);
    let tmd = p
        .target
        .md_attach_iovec(
            me,
            &MdDesc::new(MdOptions::OP_GET | MdOptions::OP_PUT).eq(p.teq),
            cut(&old, &odd_split(4103, 0)),
            Unlink::Retain,
        )
        .unwrap();
    let getmd = p
        .init
        .md_bind_iovec(
            &MdDesc::default().eq(p.ieq),
            cut(&[0; 4103], &odd_split(4103, 4)),
            Unlink::Retain,
        )
        .unwrap();
    let new = pattern(4103, 2);
    let putmd = p
        .init
        .md_bind_iovec(
            &MdDesc::default().eq(p.ieq),
            cut(&new, &odd_split(4103, 7)),
            Unlink::Retain,
        )
        .unwrap();
    p.init
        .get_put(getmd, putmd, &Remote::new(p.target.id(), PT, 9), 0)
        .unwrap();
    assert!(p.read(tmd, 4103) == new);
    let back = p.init.md_unlink_iovec(getmd).unwrap().unwrap();
    assert!(back.concat() == old);
    assert_eq!(p.tev().unwrap().kind, EventKind::Get);
}

// ----- through the loopback NAL -------------------------------------------------

#[test]
fn loopback_puts_and_gets_cross_segment_boundaries_byte_exact() {
    const TOTAL: usize = (1 << 20) + 4097;
    let p = pair();
    let me = p
        .target
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    let tsplit = odd_split(TOTAL, 0);
    let tmd = p
        .target
        .md_attach_iovec(
            me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE)
                .eq(p.teq),
            cut(&vec![0; TOTAL], &tsplit),
            Unlink::Retain,
        )
        .unwrap();
    let mut flat = vec![0u8; TOTAL];
    let gathered = pattern(TOTAL, 3);
    let src = p
        .init
        .md_bind_iovec(
            &MdDesc::default().eq(p.ieq),
            cut(&gathered, &odd_split(TOTAL, 5)),
            Unlink::Retain,
        )
        .unwrap();
    let plain = pattern(TOTAL, 4);
    let src_plain = p.source(&plain);
    let to = |off: usize| Remote::new(p.target.id(), PT, 1).with_offset(off as u64);
    for (md, bytes, off, len, roff) in [
        (src, &gathered, 0, 1, 0),
        (src, &gathered, 1, 4100, 2),
        (src, &gathered, 3, 99_999, 4098),
        (src_plain, &plain, 11, 500_001, 77),
        (src, &gathered, 0, TOTAL, 0),
        (src_plain, &plain, 0, 4099, TOTAL - 4099),
    ] {
        p.init
            .put_region(md, off as u64, len as u64, AckReq::Ack, &to(roff), 0)
            .unwrap();
        flat[roff..roff + len].copy_from_slice(&bytes[off..off + len]);
        let mut kinds = Vec::new();
        while let Some(ev) = p.iev() {
            assert_eq!(ev.fail, FailType::Ok);
            kinds.push((ev.kind, ev.mlength));
        }
        assert_eq!(
            kinds,
            [(EventKind::Sent, len as u64), (EventKind::Ack, len as u64)]
        );
    }
    assert!(p.read(tmd, TOTAL) == flat);
    for (scattered, off, len, roff) in [
        (true, 0, TOTAL, 0),
        (true, 5, 9000, 4090),
        (false, 0, 300_000, 1),
    ] {
        let dlen = off + len + 2;
        let back = if scattered {
            p.init
                .md_bind_iovec(
                    &MdDesc::default().eq(p.ieq),
                    cut(&vec![0xee; dlen], &odd_split(dlen, 2)),
                    Unlink::Retain,
                )
                .unwrap()
        } else {
            p.source(&vec![0xee; dlen])
        };
        p.init
            .get_region(back, off as u64, len as u64, &to(roff))
            .unwrap();
        let reply = p.iev().unwrap();
        assert_eq!((reply.kind, reply.mlength), (EventKind::Reply, len as u64));
        let got = p.init.md_unlink_iovec(back).unwrap().unwrap().concat();
        assert!(got[off..off + len] == flat[roff..roff + len]);
        assert!(got[..off]
            .iter()
            .chain(&got[off + len..])
            .all(|&b| b == 0xee));
    }
    // A process putting to itself, iovec to iovec.
    let me2 = p
        .init
        .me_attach(PT, ProcessId::ANY, 2, 0, Unlink::Retain, Position::After)
        .unwrap();
    let self_md = p
        .init
        .md_attach_iovec(
            me2,
            &MdDesc::new(MdOptions::OP_PUT),
            cut(&[0; 5000], &odd_split(5000, 1)),
            Unlink::Retain,
        )
        .unwrap();
    p.init
        .put_region(
            src,
            7,
            5000,
            AckReq::NoAck,
            &Remote::new(p.init.id(), PT, 2),
            0,
        )
        .unwrap();
    let mut got = vec![0u8; 5000];
    p.init.md_read(self_md, 0, &mut got).unwrap();
    assert!(got == gathered[7..5007]);
    let segs = p.target.md_unlink_iovec(tmd).unwrap().unwrap();
    assert_eq!(segs.iter().map(Vec::len).collect::<Vec<_>>(), tsplit);
    assert!(segs.concat() == flat);
}
