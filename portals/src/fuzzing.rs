//! Harnesses shared by the cargo-fuzz targets in `fuzz/` and by the
//! proptest stand-ins that run them in CI on the stable toolchain. Each takes
//! arbitrary bytes and panics only if an invariant breaks.

use crate::atomic::{AtomicOp, AtomicSpec, Datatype};
use crate::engine::{CtEvent, Engine, NiLimits, Payload, RecvAction, Trigger};
use crate::md::{MdDesc, MdOptions};
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
        if e.md_attach(me, &desc, vec![0; len], unlink).is_err() {
            return;
        }
    }
    let Ok(src) = e.md_bind(
        &MdDesc::new(MdOptions::CT_ALL).eq(eq).ct(ct),
        vec![7; 24],
        Unlink::Retain,
    ) else {
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
                if !region.is_empty() {
                    // SAFETY: the token is open and this harness is the
                    // only user of the region.
                    unsafe { region.as_mut_slice() }.fill(ctl);
                }
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
                    let _ = unsafe { r.as_slice() }.iter().fold(0u8, |a, b| a ^ b);
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
            while let Ok(Some(_)) | Err(_) = e.eq_get(eq) {
                if e.eq_ready(eq) != Ok(true) {
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
