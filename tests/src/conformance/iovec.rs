//! The conformance behaviour of scatter/gather descriptors
//! (`PTL_MD_IOVEC`): every transport reads and writes an iovec
//! descriptor's segments in place, whatever the boundaries.

use portals::*;

use super::{bind_md, expect, id, job, pattern, Transport, PT};

/// Segment lengths, odd and mixed (1 byte to 64 KiB + 1, page-sized and
/// not), summing to `total`; `seed` rotates the mix so that two splits'
/// boundaries do not line up.
pub fn odd_split(total: usize, seed: usize) -> Vec<usize> {
    const MIX: [usize; 13] = [
        1, 2, 3, 7, 13, 100, 517, 1000, 4093, 4096, 4099, 65_537, 9000,
    ];
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

/// `data` cut into segments of the given lengths.
pub fn cut(data: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
    let mut at = 0;
    lens.iter()
        .map(|&n| {
            at += n;
            data[at - n..at].to_vec()
        })
        .collect()
}

/// Scatter/gather descriptors (`PTL_MD_IOVEC`) on both sides of a
/// transport: acknowledged puts and gets whose ranges start, end and cross
/// segment boundaries at odd places, between descriptors split
/// differently (and contiguous ones), up to a 3 MB message over a thousand
/// segments and a 1 MB one over tens of thousands; every byte lands where
/// the flat (concatenated) view says, checked through gets, `md_read` and
/// the segments handed back by `md_unlink_iovec`.
pub fn iovec_descriptors_scatter_and_gather_byte_exact<C: Transport>(cfg: &C) {
    const TOTAL: usize = (3 << 20) + 4097;
    let nodes = job(2, cfg);
    let (a, b) = (&nodes[0], &nodes[1]);
    let beq = b.ni.eq_alloc(256).unwrap();
    let desc =
        MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(beq);
    let me =
        b.ni.me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
            .unwrap();
    let target_split = odd_split(TOTAL, 0);
    let tmd =
        b.ni.md_attach_iovec(
            me,
            &desc,
            cut(&vec![0; TOTAL], &target_split),
            Unlink::Retain,
        )
        .unwrap();
    let mut flat = vec![0u8; TOTAL];

    let aeq = a.ni.eq_alloc(64).unwrap();
    let gathered = pattern(TOTAL, 1);
    let src_iov =
        a.ni.md_bind_iovec(
            &MdDesc::default().eq(aeq),
            cut(&gathered, &odd_split(TOTAL, 5)),
            Unlink::Retain,
        )
        .unwrap();
    let plain = pattern(TOTAL, 2);
    let src_plain = bind_md(&a.ni, aeq, plain.clone());
    // Tens of thousands of tiny segments (1 to 61 bytes).
    let many_lens: Vec<usize> = (0..30_000).map(|i| 1 + (i * 7) % 61).collect();
    let many_len: usize = many_lens.iter().sum();
    let many = pattern(many_len, 3);
    let src_many =
        a.ni.md_bind_iovec(
            &MdDesc::default().eq(aeq),
            cut(&many, &many_lens),
            Unlink::Retain,
        )
        .unwrap();
    // (source, its bytes, local offset, length, remote offset)
    let puts: [(MdHandle, &[u8], usize, usize, usize); 8] = [
        (src_iov, &gathered, 0, 1, 0),
        (src_iov, &gathered, 1, 4100, 3),
        (src_iov, &gathered, 5, 70_001, 4091),
        (src_iov, &gathered, 4093, 2, 4094),
        (src_plain, &plain, 17, 1_000_003, 65_000),
        (src_iov, &gathered, 0, TOTAL, 0),
        (src_many, &many, 0, many_len, 12_345),
        (src_plain, &plain, 99, 333_333, TOTAL - 333_333),
    ];
    // (local length of the destination, local offset, length, remote
    // offset); destinations split in yet another way, or contiguous.
    let gets: [(bool, usize, usize, usize); 5] = [
        (true, 0, TOTAL, 0),
        (true, 3, 5000, 4090),
        (false, 1, 777_777, 12_000),
        (true, 65_530, 1_000_000, 0),
        (false, 0, 1, TOTAL - 1),
    ];
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..puts.len() {
                expect(&b.ni, beq, EventKind::Put);
            }
            for _ in 0..gets.len() {
                expect(&b.ni, beq, EventKind::Get);
            }
        });
        for (k, &(src, bytes, off, len, roff)) in puts.iter().enumerate() {
            a.ni.put_region(
                src,
                off as u64,
                len as u64,
                AckReq::Ack,
                &Remote::new(id(1), PT, 1).with_offset(roff as u64),
                0,
            )
            .unwrap();
            let sent = expect(&a.ni, aeq, EventKind::Sent);
            assert_eq!(sent.fail, FailType::Ok, "{cfg:?} put {k}");
            let ack = expect(&a.ni, aeq, EventKind::Ack);
            assert_eq!(
                (ack.mlength, ack.fail),
                (len as u64, FailType::Ok),
                "{cfg:?} put {k}"
            );
            flat[roff..roff + len].copy_from_slice(&bytes[off..off + len]);
        }
        for (k, &(scattered, off, len, roff)) in gets.iter().enumerate() {
            let dlen = off + len + 3;
            let back = if scattered {
                a.ni.md_bind_iovec(
                    &MdDesc::default().eq(aeq),
                    cut(&vec![0xee; dlen], &odd_split(dlen, 9)),
                    Unlink::Retain,
                )
                .unwrap()
            } else {
                bind_md(&a.ni, aeq, vec![0xee; dlen])
            };
            a.ni.get_region(
                back,
                off as u64,
                len as u64,
                &Remote::new(id(1), PT, 1).with_offset(roff as u64),
            )
            .unwrap();
            let reply = expect(&a.ni, aeq, EventKind::Reply);
            assert_eq!(
                (reply.mlength, reply.fail),
                (len as u64, FailType::Ok),
                "{cfg:?} get {k}"
            );
            let got = a.ni.md_unlink_iovec(back).unwrap().unwrap().concat();
            assert!(
                got[..off]
                    .iter()
                    .chain(&got[off + len..])
                    .all(|&x| x == 0xee),
                "{cfg:?} get {k}: bytes outside the range changed"
            );
            assert!(
                got[off..off + len] == flat[roff..roff + len],
                "{cfg:?} get {k}: {len} bytes came back different"
            );
        }
    });
    let mut whole = vec![0u8; TOTAL];
    b.ni.md_read(tmd, 0, &mut whole).unwrap();
    assert!(
        whole == flat,
        "{cfg:?}: the target's logical buffer differs"
    );
    let segs = b.ni.md_unlink_iovec(tmd).unwrap().unwrap();
    assert_eq!(segs.iter().map(Vec::len).collect::<Vec<_>>(), target_split);
    assert!(segs.concat() == flat, "{cfg:?}: the segments differ");
    for md in [src_iov, src_many] {
        a.ni.md_unlink_iovec(md).unwrap();
    }
    assert_eq!(b.ni.status().dropped_bad_header, 0, "{cfg:?}");
    cfg.assert_faults_repaired(&[&*a.nal]);
}
