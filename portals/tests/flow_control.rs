//! Flow-controlled event queues (`Engine::eq_set_flow_control`): a request
//! that would overflow the queue is answered `Defer` and changes nothing;
//! draining to half the capacity resumes the intake; ordinary queues still
//! overflow as Portals 3 says; in-process delivery is never held.

mod common;

use portals::wire::Op;
use portals::*;

use common::*;

/// An engine with a queue of `cap` events behind a retained, truncating
/// entry that takes every put to `PT` (zero bytes kept).
fn engine(cap: usize, flow: bool) -> (Engine, EqHandle) {
    let mut t = bare_target();
    let eq = t.eq_alloc(cap).unwrap();
    t.eq_set_flow_control(eq, flow).unwrap();
    let me = catch_all(&mut t);
    t.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE).eq(eq),
        Vec::new(),
        Unlink::Retain,
    )
    .unwrap();
    (t, eq)
}

/// Offer a put of `len` bytes with `bits`; true if it was taken.
fn offer(t: &mut Engine, bits: u64, len: u64) -> bool {
    match t.recv_header(&request(Op::Put, bits, len)) {
        RecvAction::Deposit { token, .. } => {
            let _ = t.recv_complete(token);
            true
        }
        RecvAction::Defer => false,
        RecvAction::Discard(_) | RecvAction::Respond { .. } => panic!("the entry takes every put"),
    }
}

#[test]
fn a_full_flow_controlled_queue_defers_requests_until_drained_to_half() {
    let (mut t, eq) = engine(8, true);
    // Two slots stay free for the next request's end event and unlink.
    let mut taken = 0;
    while offer(&mut t, taken, 100) {
        taken += 1;
        assert!(taken <= 8, "the queue never pushed back");
    }
    assert_eq!(taken, 7);
    let before = t.status();
    assert_eq!(before.held_back, 1);
    assert_eq!(before.eq_overflows, 0);
    // Deferring changed nothing: offered again, still no room.
    assert!(!offer(&mut t, 99, 100));
    assert!(!t.take_intake_resumed());
    // Taking one event is not enough (hysteresis: half the capacity).
    assert_eq!(t.eq_get(eq).unwrap().unwrap().match_bits, 0);
    assert!(!t.take_intake_resumed());
    for i in 1..4 {
        assert_eq!(t.eq_get(eq).unwrap().unwrap().match_bits, i);
    }
    assert!(t.take_intake_resumed(), "half empty: the intake resumes");
    assert!(!t.take_intake_resumed(), "said once");
    // The held message goes in now, after the earlier ones, nothing lost.
    assert!(offer(&mut t, 7, 100));
    let rest: Vec<u64> = std::iter::from_fn(|| t.eq_get(eq).unwrap())
        .map(|e| e.match_bits)
        .collect();
    assert_eq!(rest, vec![4, 5, 6, 7]);
    assert_eq!(t.status().eq_overflows, 0);
}

#[test]
fn transfers_in_flight_reserve_their_slots() {
    let (mut t, eq) = engine(4, true);
    // Two deposits under way promise four events: no room for a third.
    let mut tokens = Vec::new();
    for bits in [1, 2] {
        let RecvAction::Deposit { token, .. } = t.recv_header(&request(Op::Put, bits, 8)) else {
            panic!("deposit {bits}");
        };
        tokens.push(token);
    }
    assert!(matches!(
        t.recv_header(&request(Op::Put, 3, 8)),
        RecvAction::Defer
    ));
    for token in tokens {
        let _ = t.recv_complete(token);
    }
    assert_eq!(t.eq_get(eq).unwrap().unwrap().match_bits, 1);
    assert!(t.take_intake_resumed());
    assert!(offer(&mut t, 3, 8));
}

#[test]
fn an_ordinary_queue_still_overflows_and_unheld_delivery_is_never_deferred() {
    let (mut t, eq) = engine(2, false);
    for i in 0..4 {
        assert!(offer(&mut t, i, 1));
    }
    assert_eq!(t.status().eq_overflows, 2);
    assert!(matches!(
        t.eq_get(eq),
        Err(PtlError::EqDropped { dropped: 2 })
    ));

    let (mut t, eq) = engine(2, true);
    for i in 0..3 {
        match t.recv_header_unheld(&request(Op::Put, i, 1)) {
            RecvAction::Deposit { token, .. } => {
                let _ = t.recv_complete(token);
            }
            _ => panic!("unheld delivery must be taken"),
        }
    }
    assert_eq!(t.status().held_back, 0);
    // The queue keeps what it cannot hold beyond its capacity, in order.
    let got: Vec<u64> = std::iter::from_fn(|| t.eq_get(eq).unwrap())
        .map(|e| e.match_bits)
        .collect();
    assert_eq!(got, vec![0, 1, 2]);
}

#[test]
fn flow_control_needs_room_for_two_events_and_can_be_turned_off() {
    let mut t = bare_target();
    let tiny = t.eq_alloc(1).unwrap();
    assert!(t.eq_set_flow_control(tiny, true).is_err());
    let (mut t, eq) = engine(2, true);
    assert!(offer(&mut t, 0, 1));
    assert!(!offer(&mut t, 1, 1));
    t.eq_set_flow_control(eq, false).unwrap();
    assert!(t.take_intake_resumed(), "turning it off releases the held");
    assert!(offer(&mut t, 1, 1));
}

/// [`offer`] from initiator `src`.
fn offer_from(t: &mut Engine, src: ProcessId, bits: u64) -> bool {
    let mut h = request(Op::Put, bits, 8);
    h.src = src;
    match t.recv_header(&h) {
        RecvAction::Deposit { token, .. } => {
            let _ = t.recv_complete(token);
            true
        }
        RecvAction::Defer => false,
        RecvAction::Discard(_) | RecvAction::Respond { .. } => panic!("the entry takes every put"),
    }
}

const P: ProcessId = ProcessId::new(9, 9);
const Q: ProcessId = ProcessId::new(8, 8);

/// Offer puts from `src` until one is deferred; how many went in.
fn fill_from(t: &mut Engine, src: ProcessId, first: u64) -> u64 {
    let mut n = 0;
    while offer_from(t, src, first + n) {
        n += 1;
        assert!(n < 1000, "the queue never pushed back");
    }
    n
}

#[test]
fn kept_slots_hold_requests_back_until_released() {
    let (mut t, eq) = engine(8, true);
    assert_eq!(fill_from(&mut t, P, 0), 7);
    // The reader takes every event but keeps their slots (its saved
    // envelopes): the ring is empty, yet the queue has no more room.
    for i in 0..7 {
        assert_eq!(t.eq_get_kept(eq).unwrap().unwrap().match_bits, i);
    }
    assert_eq!(t.eq_kept(eq).unwrap(), 7);
    assert_eq!(t.eq_count(eq).unwrap().0, 0);
    assert!(!t.take_intake_resumed(), "kept slots are no room");
    assert!(!offer_from(&mut t, P, 7));
    // Releasing a few is not enough (half the capacity, as for a drain).
    t.eq_release_kept(eq, 2).unwrap();
    assert!(!t.take_intake_resumed());
    t.eq_release_kept(eq, 1).unwrap();
    assert!(
        t.take_intake_resumed(),
        "half free again: the intake resumes"
    );
    assert!(!t.take_intake_resumed(), "said once");
    assert!(offer_from(&mut t, P, 7));
    // More is released than kept: refused, nothing changes.
    assert!(t.eq_release_kept(eq, 5).is_err());
    assert_eq!(t.eq_kept(eq).unwrap(), 4);
    // Plain reads keep nothing.
    assert_eq!(t.eq_get(eq).unwrap().unwrap().match_bits, 7);
    assert_eq!(t.eq_kept(eq).unwrap(), 4);
    assert_eq!(t.status().eq_overflows, 0);
}

#[test]
fn an_admitted_initiator_passes_kept_slots_but_never_ring_room() {
    let (mut t, eq) = engine(8, true);
    assert_eq!(fill_from(&mut t, Q, 0), 7);
    for _ in 0..7 {
        t.eq_get_kept(eq).unwrap().unwrap();
    }
    assert!(!offer_from(&mut t, P, 100));
    assert!(!t.take_intake_resumed());
    // Admitting P resumes the intake (its held message is offered again).
    t.eq_admit(eq, P).unwrap();
    assert!(t.take_intake_resumed(), "an admission resumes the intake");
    // P gets in up to the ring's own room; Q stays held back.
    assert_eq!(fill_from(&mut t, P, 100), 7);
    assert!(!offer_from(&mut t, Q, 7));
    assert_eq!(t.status().eq_overflows, 0);
    // The ring drains (into kept slots): P may go on, Q may not.
    for _ in 0..2 {
        t.eq_get_kept(eq).unwrap().unwrap();
    }
    assert!(!t.take_intake_resumed(), "hysteresis for the ring too");
    t.eq_get_kept(eq).unwrap().unwrap();
    assert!(
        t.take_intake_resumed(),
        "P was held for ring room, now free"
    );
    assert!(offer_from(&mut t, P, 107));
    assert!(!offer_from(&mut t, Q, 7));
    assert_eq!(t.eq_kept(eq).unwrap(), 10);
    assert_eq!(t.status().eq_overflows, 0);
}

#[test]
fn any_initiator_admission_and_counted_unadmission() {
    let (mut t, eq) = engine(4, true);
    assert_eq!(fill_from(&mut t, Q, 0), 3);
    for _ in 0..3 {
        t.eq_get_kept(eq).unwrap().unwrap();
    }
    assert!(!offer_from(&mut t, P, 10));
    t.eq_admit(eq, ProcessId::ANY).unwrap();
    assert!(t.take_intake_resumed());
    assert!(offer_from(&mut t, P, 10));
    assert!(offer_from(&mut t, Q, 11));
    t.eq_get_kept(eq).unwrap().unwrap();
    t.eq_get_kept(eq).unwrap().unwrap();
    // Two admissions of P, one taken back: P still admitted.
    t.eq_unadmit(eq, ProcessId::ANY).unwrap();
    assert!(
        t.eq_unadmit(eq, ProcessId::ANY).is_err(),
        "not admitted any more"
    );
    assert!(!offer_from(&mut t, Q, 12));
    t.eq_admit(eq, P).unwrap();
    t.eq_admit(eq, P).unwrap();
    assert!(t.take_intake_resumed());
    t.eq_unadmit(eq, P).unwrap();
    assert!(
        !t.take_intake_resumed(),
        "taking an admission back frees nothing"
    );
    assert!(offer_from(&mut t, P, 12));
    assert!(!offer_from(&mut t, Q, 13));
    t.eq_get_kept(eq).unwrap().unwrap();
    t.eq_unadmit(eq, P).unwrap();
    assert!(!offer_from(&mut t, P, 13), "the last admission is gone");
    assert!(t.eq_unadmit(eq, P).is_err());
    // Everything given back: both go in again.
    let kept = t.eq_kept(eq).unwrap();
    t.eq_release_kept(eq, kept).unwrap();
    assert!(t.take_intake_resumed());
    assert!(offer_from(&mut t, P, 13));
    assert!(offer_from(&mut t, Q, 14));
    assert_eq!(t.status().eq_overflows, 0);
}

#[test]
fn an_entry_admits_its_initiator_while_linked() {
    let (mut t, eq) = engine(4, true);
    assert_eq!(fill_from(&mut t, Q, 0), 3);
    for _ in 0..3 {
        t.eq_get_kept(eq).unwrap().unwrap();
    }
    assert!(!offer_from(&mut t, P, 10));
    // A receive from P, posted in front of the catch-all, on another queue:
    // it waits for bits 99 only.
    let other = t.eq_alloc(8).unwrap();
    let first = t.match_list(PT).unwrap()[0];
    let me = t
        .me_insert(first, P, 99, 0, Unlink::Unlink, Position::Before)
        .unwrap();
    t.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
            .threshold(Threshold::Count(1))
            .eq(other),
        Vec::new(),
        Unlink::Unlink,
    )
    .unwrap();
    t.me_admit(me, eq).unwrap();
    assert!(t.me_admit(me, eq).is_err(), "one admission per entry");
    assert!(t.take_intake_resumed());
    // P's messages in front of the awaited one get in; Q's do not.
    assert!(offer_from(&mut t, P, 10));
    assert!(!offer_from(&mut t, Q, 11));
    // The awaited message uses the entry up: the admission ends with it.
    assert!(offer_from(&mut t, P, 99));
    assert_eq!(t.eq_get(other).unwrap().unwrap().match_bits, 99);
    assert!(t.eq_unadmit(eq, P).is_err(), "gone with the entry");
    t.eq_get_kept(eq).unwrap().unwrap();
    assert!(!offer_from(&mut t, P, 11));
}
