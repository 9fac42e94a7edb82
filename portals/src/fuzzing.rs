//! Harnesses shared by the cargo-fuzz targets in `fuzz/` and by the
//! proptest stand-ins that run them in CI on the stable toolchain. Each takes
//! arbitrary bytes and panics only if an invariant breaks.

use crate::atomic::{AtomicOp, AtomicSpec, Datatype};
use crate::engine::{CtEvent, Engine, NiLimits, Payload, RecvAction, Trigger};
use crate::error::{IovecError, PtlError};
use crate::md::{Iovec, MdDesc, MdOptions};
use crate::types::{AckReq, FailType, PortalIndex, Position, ProcessId, Remote, Threshold, Unlink};
use crate::wire::{Header, HEADER_LEN};

const KEY: u64 = 0xf022;
const ME: ProcessId = ProcessId::new(1, 1);
const PEER: ProcessId = ProcessId::new(2, 2);

/// Decode arbitrary bytes as a header; whatever decodes must re-encode to
/// the same header, and carry an atomic spec exactly if it is an atomic
/// request.
pub fn wire_header(data: &[u8]) {
    if let Ok(h) = Header::decode(data) {
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert!(h.payload_len() <= crate::wire::MAX_PAYLOAD);
        assert_eq!(h.atomic.is_some(), h.op.is_atomic());
    }
}

/// Feed arbitrary headers into an engine with a fixed set of match entries
/// covering every descriptor option, completing or aborting each transfer as
/// the input says. Checks that every lent region lies inside its
/// descriptor, every response is a well-formed header, and that nothing is
/// left in progress at the end. Every descriptor counts its events on a
/// counting event, and triggered puts and increments wait on it, so the
/// headers also drive counting and triggering: the counter never goes
/// back, and the triggered puts are sent and completed like the others.
/// Atomic requests among the headers are applied to the descriptors (or
/// refused); the harness also initiates atomics, fetching atomics and
/// compare-and-swaps whose replies the headers may answer.
pub fn engine_headers(data: &[u8]) {
    let limits = NiLimits {
        max_mes: 64,
        max_mds: 64,
        ..NiLimits::default()
    };
    let Ok(mut e) = Engine::new(ME, KEY, limits) else {
        return;
    };
    let Ok(eq) = e.eq_alloc(8) else { return };
    let Ok(ct) = e.ct_alloc() else { return };
    let Ok(chained) = e.ct_alloc() else { return };
    let setups: [(u64, u64, MdOptions, Threshold, u64, usize); 6] = [
        (1, 0, MdOptions::OP_PUT, Threshold::Count(3), 0, 32),
        (
            2,
            0xff,
            MdOptions::OP_PUT | MdOptions::TRUNCATE,
            Threshold::Infinite,
            0,
            16,
        ),
        (
            3,
            0,
            MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE | MdOptions::OP_GET,
            Threshold::Infinite,
            0,
            64,
        ),
        (
            4,
            0,
            MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::EVENT_START,
            Threshold::Count(2),
            0,
            8,
        ),
        (
            0,
            u64::MAX,
            MdOptions::OP_PUT | MdOptions::ACK_DISABLE,
            Threshold::Infinite,
            8,
            40,
        ),
        (
            5,
            0,
            MdOptions::OP_PUT | MdOptions::TRUNCATE,
            Threshold::Infinite,
            0,
            0,
        ),
    ];
    // Some descriptors are iovec descriptors, split into segments as the
    // input's byte sum says (the headers are read from the input as they
    // are, so the split must not take bytes of its own).
    let seed = data
        .iter()
        .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(b.into()));
    for (pt, (bits, ignore, opts, thr, max, len)) in setups.into_iter().enumerate() {
        let unlink = if pt % 2 == 0 {
            Unlink::Unlink
        } else {
            Unlink::Retain
        };
        let Ok(me) = e.me_attach(
            PortalIndex(pt as u32 % 3),
            ProcessId::ANY,
            bits,
            ignore,
            unlink,
            Position::After,
        ) else {
            return;
        };
        let counting = if pt % 3 == 0 {
            MdOptions::CT_ALL | MdOptions::CT_BYTES
        } else {
            MdOptions::CT_ALL
        };
        let mut desc = MdDesc::new(opts | counting).threshold(thr).eq(eq).ct(ct);
        if max > 0 {
            desc = desc.max_size(max);
        }
        let attached = if seed >> pt & 1 == 1 {
            e.md_attach_iovec(me, &desc, split(len, seed >> 8), unlink)
        } else {
            e.md_attach(me, &desc, vec![0; len], unlink)
        };
        if attached.is_err() {
            return;
        }
    }
    let src_desc = MdDesc::new(MdOptions::CT_ALL).eq(eq).ct(ct);
    let src = if seed & 0x80 != 0 {
        e.md_bind_iovec(&src_desc, split(24, seed >> 16), Unlink::Retain)
    } else {
        e.md_bind(&src_desc, vec![7; 24], Unlink::Retain)
    };
    let Ok(src) = src else {
        return;
    };
    for (i, threshold) in [1u64, 2, 4, 64].into_iter().enumerate() {
        let remote = Remote::new(PEER, PortalIndex(0), i as u64);
        let trigger = Trigger::new(ct, threshold);
        let put = e.triggered_put(src, 0, 8, AckReq::Ack, &remote, 0, trigger);
        let inc = e.triggered_ct_inc(chained, CtEvent::success(1), trigger);
        let sum = AtomicSpec {
            op: AtomicOp::Sum,
            datatype: Datatype::U32,
        };
        let atomic = e.triggered_atomic(src, 0, 8, AckReq::Ack, &remote, 0, sum, trigger);
        if put.is_err() || inc.is_err() || atomic.is_err() {
            return;
        }
    }
    let mut cookies = Vec::new();
    let mut counted = 0;
    for chunk in data.chunks(HEADER_LEN + 1) {
        let Some((&ctl, bytes)) = chunk.split_first() else {
            continue;
        };
        // Sometimes initiate an operation so that responses can find it.
        if ctl & 0x10 != 0 {
            let remote = Remote::new(PEER, PortalIndex(0), ctl as u64);
            let spec = |op, datatype| AtomicSpec { op, datatype };
            let len = (ctl & 3) as u64 + 1;
            let out = match (ctl >> 5) & 3 {
                0 => e.put(src, AckReq::Ack, &remote, 0),
                1 => e.get_region(src, 0, (ctl & 7) as u64, &remote),
                2 => e.fetch_atomic(
                    src,
                    12,
                    src,
                    0,
                    len,
                    &remote,
                    0,
                    spec(AtomicOp::Sum, Datatype::U8),
                ),
                _ => e.swap(
                    src,
                    12,
                    src,
                    0,
                    2,
                    &remote,
                    0,
                    Some(&[ctl, 0]),
                    spec(AtomicOp::Cswap, Datatype::I16),
                ),
            };
            if let Ok(out) = out {
                cookies.push(out.header.cookie);
                assert_eq!(out.payload.len() as u64, out.header.payload_len());
                if let Some(t) = out.token {
                    let fail = if ctl & 0x80 != 0 {
                        FailType::Unreachable
                    } else {
                        FailType::Ok
                    };
                    e.send_complete(t, fail);
                }
            }
        }
        let mut h = match Header::decode(bytes) {
            Ok(h) => h,
            Err(_) => {
                e.note_bad_header();
                continue;
            }
        };
        // Steer most headers past the identity checks so matching runs.
        if ctl & 1 == 0 {
            h.job_key = KEY;
            h.dst = ME;
            h.pt_index = PortalIndex(h.pt_index.0 % 4);
            h.ac_index %= 2;
        }
        if ctl & 2 != 0 {
            if let Some(c) = cookies.last() {
                h.cookie = *c;
                h.src = PEER;
            }
        }
        match e.recv_header(&h) {
            RecvAction::Deposit {
                region,
                discard,
                token,
            } => {
                assert!(discard <= h.payload_len());
                assert_eq!(region.len() as u64 + discard, h.payload_len());
                // SAFETY: the token is open and this harness is the only
                // user of the region.
                let mut covered = 0;
                for (p, n) in unsafe { region.pieces() } {
                    assert!(n > 0);
                    // SAFETY: as above; a piece is lent memory of n bytes.
                    unsafe { std::ptr::write_bytes(p, ctl, n) };
                    covered += n;
                }
                assert_eq!(covered, region.len());
                if ctl & 4 != 0 {
                    e.recv_abort(token, FailType::Incomplete);
                } else if let Some(resp) = e.recv_complete(token) {
                    assert_eq!(Header::decode(&resp.header.encode()), Ok(resp.header));
                    assert_eq!(resp.payload.len() as u64, resp.header.payload_len());
                }
            }
            RecvAction::Respond { discard, response } => {
                assert_eq!(discard, h.payload_len());
                assert_eq!(
                    Header::decode(&response.header.encode()),
                    Ok(response.header)
                );
                if let Payload::Region(r) = &response.payload {
                    // SAFETY: the send token is open; reading the lent
                    // region is what a transport does.
                    let mut all = vec![0u8; r.len()];
                    unsafe { r.read_at(0, &mut all) };
                    let _ = all.iter().fold(0u8, |a, b| a ^ b);
                }
                if let Some(t) = response.token {
                    e.send_complete(t, FailType::Ok);
                }
            }
            RecvAction::Discard(n) => assert!(n <= h.payload_len()),
            // Nothing changed in the engine; a transport offers it again.
            RecvAction::Defer => {}
        }
        if ctl & 8 != 0 {
            loop {
                let peeked = e.eq_peek(eq);
                let got = e.eq_get(eq);
                if let (Ok(Some(p)), Ok(Some(g))) = (&peeked, &got) {
                    assert_eq!(p, g, "a peek shows the event the next get takes");
                }
                if matches!(got, Ok(None)) || e.eq_ready(eq) != Ok(true) {
                    break;
                }
            }
        }
        if ctl == 0xff {
            e.peer_failed(PEER);
        }
        // Send what the counter released, as a transport would.
        while let Some(out) = e.take_triggered() {
            assert_eq!(Header::decode(&out.header.encode()), Ok(out.header));
            cookies.push(out.header.cookie);
            if let Some(t) = out.token {
                let fail = if ctl & 0x80 != 0 {
                    FailType::Unreachable
                } else {
                    FailType::Ok
                };
                e.send_complete(t, fail);
            }
        }
        let now = e.ct_get(ct).map(|v| v.total()).unwrap_or(0);
        assert!(now >= counted, "a counter never goes back without ct_set");
        counted = now;
    }
    e.peer_failed(PEER);
    while let Some(out) = e.take_triggered() {
        if let Some(t) = out.token {
            e.send_complete(t, FailType::Unreachable);
        }
    }
    e.peer_failed(PEER);
    let (ops, xfers) = e.in_progress();
    assert_eq!(xfers, 0, "every transfer was completed or aborted");
    assert_eq!(ops, 0, "every operation was answered or failed");
}

/// `len` bytes of zeros as segments of 1 to 5 bytes, sizes chosen by
/// `seed` (no segments for 0 bytes).
fn split(len: usize, seed: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let (mut left, mut s) = (len, seed);
    while left > 0 {
        let n = (1 + (s % 5) as usize).min(left);
        out.push(vec![0; n]);
        left -= n;
        s = s.rotate_right(3) ^ 0x9e37;
    }
    out
}

/// Drive the iovec entry points with arbitrary input: segment lists the
/// engine must accept or refuse with the right [`IovecError`] (too many,
/// empty, null, too long, overflowing — raw lists are only checked, never
/// used), and reads, writes and puts of arbitrary ranges of an accepted
/// descriptor, compared with a flat copy of its logical buffer.
pub fn iovec_descriptors(data: &[u8]) {
    const LIMIT: usize = 16;
    let limits = NiLimits {
        max_iovecs: LIMIT,
        ..NiLimits::default()
    };
    let Ok(mut e) = Engine::new(ME, KEY, limits) else {
        return;
    };
    let mut bytes = data.iter().copied();
    let mut next = move || bytes.next();
    // (handle, flat shadow of the logical buffer)
    let mut mds: Vec<(crate::MdHandle, Vec<u8>)> = Vec::new();
    let mut round = 0u8;
    while let Some(op) = next() {
        round = round.wrapping_add(1);
        match op % 6 {
            0 => {
                // An owned list.
                let count = usize::from(next().unwrap_or(0) % 24);
                let lens: Vec<usize> = (0..count)
                    .map(|_| usize::from(next().unwrap_or(1) % 9))
                    .collect();
                let segs: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (0..n).map(|j| (i * 16 + j) as u8 ^ round).collect())
                    .collect();
                let flat = segs.concat();
                let want = if count > LIMIT {
                    Err(IovecError::TooManySegments {
                        count,
                        limit: LIMIT,
                    })
                } else if let Some(index) = lens.iter().position(|&n| n == 0) {
                    Err(IovecError::EmptySegment { index })
                } else {
                    Ok(())
                };
                match e.md_bind_iovec(&MdDesc::new(MdOptions::empty()), segs, Unlink::Retain) {
                    Ok(h) => {
                        assert_eq!(want, Ok(()));
                        mds.push((h, flat));
                    }
                    Err(PtlError::Iovec(got)) => assert_eq!(Err(got), want),
                    Err(other) => panic!("unexpected error {other}"),
                }
            }
            1 => {
                // A raw list, checked and dropped, never used.
                let count = usize::from(next().unwrap_or(0) % 20);
                let dangling = std::ptr::NonNull::<u8>::dangling().as_ptr();
                let list: Vec<Iovec> = (0..count)
                    .map(|_| {
                        let b = next().unwrap_or(0);
                        let len = match b % 5 {
                            0 => 0,
                            1 => usize::MAX - usize::from(b),
                            2 => isize::MAX as usize - usize::from(b),
                            _ => usize::from(b),
                        };
                        let base = if b == 0xfe {
                            std::ptr::null_mut()
                        } else {
                            dangling
                        };
                        Iovec::new(base, len)
                    })
                    .collect();
                let mut want = Ok(());
                let mut total = 0u64;
                if count > LIMIT {
                    want = Err(IovecError::TooManySegments {
                        count,
                        limit: LIMIT,
                    });
                } else {
                    for (index, s) in list.iter().enumerate() {
                        let t = total
                            .checked_add(s.len as u64)
                            .filter(|&t| t <= usize::MAX as u64);
                        let err = if s.len == 0 {
                            Some(IovecError::EmptySegment { index })
                        } else if s.base.is_null() {
                            Some(IovecError::NullSegment { index })
                        } else if s.len > isize::MAX as usize {
                            Some(IovecError::SegmentTooLong { index })
                        } else if t.is_none() {
                            Some(IovecError::LengthOverflow { index })
                        } else {
                            None
                        };
                        if let Some(err) = err {
                            want = Err(err);
                            break;
                        }
                        total = t.unwrap_or(0);
                    }
                }
                match e.raw_iovec(&list) {
                    Ok(mem) => {
                        assert_eq!(want, Ok(()));
                        assert_eq!(mem.len(), total);
                    }
                    Err(PtlError::Iovec(got)) => assert_eq!(Err(got), want),
                    Err(other) => panic!("unexpected error {other}"),
                }
            }
            k @ 2..=5 => {
                if mds.is_empty() {
                    continue;
                }
                let i = usize::from(next().unwrap_or(0)) % mds.len();
                let off = u64::from(next().unwrap_or(0) % 80);
                let len = u64::from(next().unwrap_or(0) % 80);
                let (h, flat) = &mut mds[i];
                let fits = off + len <= flat.len() as u64;
                let (o, n) = (off as usize, len as usize);
                let r = match k {
                    2 => {
                        let mut buf = vec![0u8; n];
                        let r = e.md_read(*h, off, &mut buf);
                        if r.is_ok() {
                            assert_eq!(&buf[..], &flat[o..o + n]);
                        }
                        r
                    }
                    3 => {
                        let src: Vec<u8> = (0..n).map(|j| (j as u8).wrapping_mul(round)).collect();
                        let r = e.md_write(*h, off, &src);
                        if r.is_ok() {
                            flat[o..o + n].copy_from_slice(&src);
                        }
                        r
                    }
                    4 => {
                        let remote = Remote::new(PEER, PortalIndex(0), 0);
                        e.put_region(*h, off, len, AckReq::NoAck, &remote, 0)
                            .map(|out| {
                                let Payload::Region(r) = &out.payload else {
                                    panic!("a put sends descriptor memory");
                                };
                                let mut got = vec![0u8; r.len()];
                                // SAFETY: the send token is open.
                                unsafe { r.read_at(0, &mut got) };
                                assert_eq!(&got[..], &flat[o..o + n]);
                                if let Some(t) = out.token {
                                    e.send_complete(t, FailType::Ok);
                                }
                            })
                    }
                    _ => {
                        // Unlink and take the segments back: their
                        // concatenation is the logical buffer.
                        let (h, flat) = mds.swap_remove(i);
                        let segs = e.md_unlink_iovec(h).expect("idle descriptor");
                        assert_eq!(segs.map(|s| s.concat()), Some(flat));
                        continue;
                    }
                };
                if fits {
                    assert_eq!(r, Ok(()));
                } else {
                    assert!(matches!(r, Err(PtlError::OutOfRange { .. })), "{r:?}");
                }
            }
            _ => unreachable!(),
        }
    }
    assert_eq!(e.in_progress(), (0, 0));
}
