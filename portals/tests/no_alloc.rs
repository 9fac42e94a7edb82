//! The receive path (match, deposit, event, ack) must not allocate per
//! message once warmed up. A counting global allocator checks it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use portals::wire::{Header, Op};
use portals::*;

struct Counting;

thread_local! {
    /// Counting is on for this thread only: the test harness's own threads
    /// (and the other tests, running beside) allocate whenever they like.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// Allocations of this thread while armed.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    if ARMED.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    }
}

/// This thread's count since the last call.
fn take_allocs() -> usize {
    ALLOCS.with(|c| c.replace(0))
}

// SAFETY: defers to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn put_match_deposit_event_ack_cycle_does_not_allocate() {
    let pt = PortalIndex(3);
    let me_id = ProcessId::new(1, 1);
    let mut e = Engine::new(me_id, 9, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(16).unwrap();
    // 100 non-matching entries in front, of both kinds the match index
    // keeps: keyed in hash buckets (any initiator) and in its ordered
    // unindexed list (an id wildcarded in one field), which the search
    // walks up to the entry the buckets found.
    for i in 0..100 {
        let id = if i % 2 == 0 {
            ProcessId::ANY
        } else {
            ProcessId::new(2, PID_ANY)
        };
        let me = e
            .me_attach(pt, id, 1000 + i, 0, Unlink::Retain, Position::After)
            .unwrap();
        e.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    }
    let me = e
        .me_attach(pt, ProcessId::ANY, 7, 0, Unlink::Retain, Position::After)
        .unwrap();
    e.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq),
        vec![0; 64],
        Unlink::Retain,
    )
    .unwrap();
    let h = Header {
        op: Op::Put,
        ack_req: true,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: 9,
        src: ProcessId::new(2, 2),
        dst: me_id,
        pt_index: pt,
        ac_index: 0,
        match_bits: 7,
        offset: 0,
        hdr_data: 0,
        rlength: 8,
        mlength: 0,
        cookie: 5,
        atomic: None,
    };
    let cycle = |e: &mut Engine| {
        let RecvAction::Deposit { region, token, .. } = e.recv_header(&h) else {
            panic!("expected a deposit");
        };
        // SAFETY: token open; sole user.
        unsafe { region.as_mut_slice() }.copy_from_slice(&[1; 8]);
        let ack = e.recv_complete(token).expect("ack requested");
        assert_eq!(ack.header.op, Op::Ack);
        assert!(e.eq_get(eq).unwrap().is_some());
    };
    for _ in 0..100 {
        cycle(&mut e);
    }
    // The counter itself works.
    ARMED.with(|a| a.set(true));
    drop(std::hint::black_box(Box::new(1u64)));
    assert_eq!(take_allocs(), 1);
    for _ in 0..10_000 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(false));
    assert_eq!(take_allocs(), 0);
}

#[test]
fn fetching_atomic_cycle_does_not_allocate() {
    // Atomic payloads land in pooled buffers; once the pool holds one, the
    // match, apply, reply and event of a fetching sum allocate nothing.
    let pt = PortalIndex(2);
    let me_id = ProcessId::new(1, 1);
    let mut e = Engine::new(me_id, 9, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(16).unwrap();
    let me = e
        .me_attach(pt, ProcessId::ANY, 7, 0, Unlink::Retain, Position::After)
        .unwrap();
    e.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(eq),
        vec![0; 64],
        Unlink::Retain,
    )
    .unwrap();
    let h = Header {
        op: Op::FetchAtomic,
        ack_req: false,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: 9,
        src: ProcessId::new(2, 2),
        dst: me_id,
        pt_index: pt,
        ac_index: 0,
        match_bits: 7,
        offset: 8,
        hdr_data: 0,
        rlength: 8,
        mlength: 0,
        cookie: 5,
        atomic: Some(AtomicSpec {
            op: AtomicOp::Sum,
            datatype: Datatype::U64,
        }),
    };
    let mut expect = 0u64;
    let mut cycle = |e: &mut Engine| {
        let RecvAction::Deposit { region, token, .. } = e.recv_header(&h) else {
            panic!("expected a deposit");
        };
        // SAFETY: token open; sole user.
        unsafe { region.as_mut_slice() }.copy_from_slice(&1u64.to_le_bytes());
        let reply = e.recv_complete(token).expect("a reply");
        let Payload::Region(r) = &reply.payload else {
            panic!("the old value is lent from the pooled buffer");
        };
        // SAFETY: the reply's token is open.
        assert_eq!(unsafe { r.as_slice() }, &expect.to_le_bytes());
        expect += 1;
        e.send_complete(reply.token.expect("token"), FailType::Ok);
        assert_eq!(
            e.eq_get(eq).unwrap().map(|ev| ev.kind),
            Some(EventKind::FetchAtomic)
        );
    };
    for _ in 0..100 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(true));
    for _ in 0..10_000 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(false));
    assert_eq!(take_allocs(), 0);
}

/// The same cycle into an iovec descriptor, the deposit crossing three
/// segment boundaries and the get's reply gathered from four segments:
/// describing and walking a scattered region allocates nothing either.
#[test]
fn scattered_deposit_and_reply_do_not_allocate() {
    let pt = PortalIndex(3);
    let me_id = ProcessId::new(1, 1);
    let mut e = Engine::new(me_id, 9, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(16).unwrap();
    let me = e
        .me_attach(pt, ProcessId::ANY, 7, 0, Unlink::Retain, Position::After)
        .unwrap();
    e.md_attach_iovec(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(eq),
        vec![vec![0; 3], vec![0; 2], vec![0; 5], vec![0; 7]],
        Unlink::Retain,
    )
    .unwrap();
    let request = |op: Op| Header {
        op,
        ack_req: op == Op::Put,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: 9,
        src: ProcessId::new(2, 2),
        dst: me_id,
        pt_index: pt,
        ac_index: 0,
        match_bits: 7,
        offset: 1,
        hdr_data: 0,
        rlength: 12,
        mlength: 0,
        cookie: 5,
        atomic: None,
    };
    let (put, get) = (request(Op::Put), request(Op::Get));
    let payload = [1u8; 12];
    let cycle = |e: &mut Engine| {
        let RecvAction::Deposit { region, token, .. } = e.recv_header(&put) else {
            panic!("expected a deposit");
        };
        // SAFETY: token open; sole user.
        unsafe { region.write_at(0, &payload) };
        let ack = e.recv_complete(token).expect("ack requested");
        assert_eq!(ack.header.op, Op::Ack);
        let RecvAction::Respond { response, .. } = e.recv_header(&get) else {
            panic!("expected a reply");
        };
        let Payload::Region(r) = &response.payload else {
            panic!("a reply sends descriptor memory");
        };
        let mut back = [0u8; 12];
        // SAFETY: the send token is open.
        unsafe { r.read_at(0, &mut back) };
        assert_eq!(back, payload);
        e.send_complete(response.token.expect("token"), FailType::Ok);
        assert!(e.eq_get(eq).unwrap().is_some());
        assert!(e.eq_get(eq).unwrap().is_some());
    };
    for _ in 0..100 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(true));
    for _ in 0..10_000 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(false));
    assert_eq!(take_allocs(), 0);
}

#[test]
fn entries_and_descriptors_made_per_message_do_not_allocate() {
    // The MPI library's pattern: every message gets a fresh entry of
    // unique match bits (a receive, a send's read-portal exposure) and a
    // fresh descriptor over the caller's buffer, used once and unlinked.
    // Once warm, neither the match index (its buckets churn) nor the
    // descriptor's list of lent ranges may allocate per message.
    let (recv_pt, read_pt) = (PortalIndex(0), PortalIndex(1));
    let me_id = ProcessId::new(1, 1);
    let peer = ProcessId::new(2, 2);
    let mut e = Engine::new(me_id, 9, NiLimits::default()).unwrap();
    let eq = e.eq_alloc(16).unwrap();
    let mut rbuf = [0u8; 8];
    let mut sbuf = [7u8; 8];
    let mut bits = 0u64;
    let mut cycle = |e: &mut Engine| {
        bits += 1;
        // Target side: a receive for this message only, used up by it.
        let me = e
            .me_attach(recv_pt, peer, bits, 0, Unlink::Unlink, Position::After)
            .unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT)
            .threshold(Threshold::Count(1))
            .eq(eq);
        // SAFETY: `rbuf` outlives the descriptor, which unlinks itself in
        // this cycle; nothing else touches it meanwhile.
        unsafe { e.md_attach_raw(me, &desc, rbuf.as_mut_ptr(), 8, Unlink::Unlink) }.unwrap();
        let h = Header {
            op: Op::Put,
            ack_req: true,
            ack_lazy: false,
            fail: FailType::Ok,
            job_key: 9,
            src: peer,
            dst: me_id,
            pt_index: recv_pt,
            ac_index: 0,
            match_bits: bits,
            offset: 0,
            hdr_data: 0,
            rlength: 8,
            mlength: 0,
            cookie: 5,
            atomic: None,
        };
        let RecvAction::Deposit { region, token, .. } = e.recv_header(&h) else {
            panic!("expected a deposit");
        };
        // SAFETY: token open; sole user.
        unsafe { region.as_mut_slice() }.copy_from_slice(&[1; 8]);
        assert!(e.recv_complete(token).is_some(), "ack requested");
        let kinds = [e.eq_get(eq).unwrap(), e.eq_get(eq).unwrap()].map(|ev| ev.map(|ev| ev.kind));
        assert_eq!(kinds, [Some(EventKind::Put), Some(EventKind::Unlink)]);
        // Initiator side: the data exposed on the read portal under its
        // own unique bits, put, then unlinked with its entry.
        let me = e
            .me_attach(read_pt, peer, bits, 0, Unlink::Unlink, Position::After)
            .unwrap();
        let desc = MdDesc::new(MdOptions::OP_GET)
            .threshold(Threshold::Count(3))
            .eq(eq);
        // SAFETY: `sbuf` outlives the descriptor, unlinked below.
        let md =
            unsafe { e.md_attach_raw(me, &desc, sbuf.as_mut_ptr(), 8, Unlink::Unlink) }.unwrap();
        let remote = Remote::new(peer, recv_pt, bits);
        let out = e.put(md, AckReq::NoAck, &remote, bits).unwrap();
        e.send_complete(out.token.expect("token"), FailType::Ok);
        assert_eq!(
            e.eq_get(eq).unwrap().map(|ev| ev.kind),
            Some(EventKind::Sent)
        );
        e.me_unlink(me).unwrap();
    };
    for _ in 0..100 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(true));
    for _ in 0..10_000 {
        cycle(&mut e);
    }
    ARMED.with(|a| a.set(false));
    let n = take_allocs();
    assert_eq!(n, 0, "allocations in 10 000 cycles");
}
