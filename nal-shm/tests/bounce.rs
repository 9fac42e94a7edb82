//! A single-copy read whose destination lies a few bytes past its source
//! modulo a page, where the kernel's copy is an order of magnitude slow
//! on AMD Zen 3, goes through the receiver's bounce buffer; the bytes
//! arrive exactly either way, and a destination at a fast distance is
//! read straight.

use std::time::Duration;

use nal_shm::ShmConfig;
use portals::*;
use portals_tests::conformance::{id, job_with, pattern, PT};

const BIG: usize = (1 << 20) + 4096 + 123;

/// Put a payload from a page-aligned source into a destination
/// `dst_off` bytes past a page until one goes by single copy (the first
/// may go through the ring before the pair has probed single copy); the
/// receiver's counters then.
fn single_copy_into(dst_off: usize) -> nal_shm::ShmStats {
    let mut src_buf = vec![0u8; BIG + 8192];
    let s0 = src_buf.as_ptr().align_offset(4096);
    let sp = src_buf[s0..].as_mut_ptr();
    let mut dst_buf = vec![0u8; BIG + 8192];
    let d0 = dst_buf.as_ptr().align_offset(4096) + dst_off;
    let dp = dst_buf[d0..].as_mut_ptr();
    let nodes = job_with(&[ShmConfig::default(), ShmConfig::default()]);
    let (rx, tx) = (&nodes[0].ni, &nodes[1].ni);
    let eq0 = rx.eq_alloc(64).unwrap();
    let eq1 = tx.eq_alloc(64).unwrap();
    let me = rx
        .me_attach(PT, id(1), 2, 0, Unlink::Retain, Position::After)
        .unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq0);
    // SAFETY: both buffers outlive the interfaces (`nodes` is dropped
    // first) and are touched by nothing else until then.
    let src = unsafe {
        rx.md_attach_raw(me, &desc, dp, BIG, Unlink::Retain)
            .unwrap();
        tx.md_bind_raw(&MdDesc::default().eq(eq1), sp, BIG, Unlink::Retain)
            .unwrap()
    };
    let wait = |ni: &NetworkInterface, eq, kind| loop {
        let ev = ni.eq_wait(eq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
        if ev.kind == kind {
            return;
        }
    };
    let mut sent = Vec::new();
    for round in 0..10u8 {
        // A new payload each time, so that bytes an earlier put left
        // behind cannot pass for this one's.
        sent = pattern(BIG, round);
        // SAFETY: `sp` has BIG bytes; no transfer reads them now (the
        // last one was acknowledged).
        unsafe { std::ptr::copy_nonoverlapping(sent.as_ptr(), sp, BIG) };
        tx.put(src, AckReq::Ack, &Remote::new(id(0), PT, 2), 0)
            .unwrap();
        wait(rx, eq0, EventKind::Put);
        wait(tx, eq1, EventKind::Ack);
        if nodes[0].nal.stats().single_copy_received > 0 {
            break;
        }
    }
    let st = nodes[0].nal.stats();
    assert!(
        st.single_copy_received > 0,
        "never went by single copy: {st:?}"
    );
    drop(nodes);
    // SAFETY: `dp` has BIG bytes, written by nobody now.
    let got = unsafe { std::slice::from_raw_parts(dp, BIG) };
    assert!(
        *got == *sent,
        "the payload arrived changed (destination {dst_off} past a page)"
    );
    drop((src_buf, dst_buf));
    st
}

#[test]
fn a_destination_just_past_the_source_modulo_a_page_is_read_through_the_bounce_buffer() {
    for off in [8, 16, 31] {
        let st = single_copy_into(off);
        assert!(st.single_copy_bounced > 0, "offset {off}: {st:?}");
    }
}

#[test]
fn a_destination_at_a_fast_distance_is_read_straight() {
    for off in [0, 32, 63, 2048] {
        let st = single_copy_into(off);
        assert_eq!(st.single_copy_bounced, 0, "offset {off}: {st:?}");
    }
}
