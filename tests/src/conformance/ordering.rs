//! Ordering between a transport's responses and what the process sends
//! afterwards ([`Nal::fence_responses`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portals::*;

use super::{bind_md, catch_all, expect, id, job, Node, Transport, PT, WAIT};

/// How long the thread that took the put is held between posting its
/// event and queueing the acknowledgment: time for the other thread's
/// send to get ahead of it, were it not fenced.
const HOLD: Duration = Duration::from_millis(200);

/// Process 1 puts to process 0 asking for an acknowledgment. Process 0's
/// progress thread takes the put and is then held (its descriptor's unlink
/// hook runs after the event is posted, before the transport queues the
/// acknowledgment). Meanwhile process 0's application thread sees the put
/// taken, calls [`Nal::fence_responses`] and puts a message back to
/// process 1: the acknowledgment arrives first. (MPI's departure notice
/// relies on it: a peer still waiting for the acknowledgment of its last
/// barrier message must not hear first that this process is gone.) Needs
/// progress threads.
pub fn a_response_stays_ahead_of_a_send_after_fence_responses<C: Transport>(cfg: &C) {
    let nodes = job(2, cfg);
    let (a, b) = (&nodes[0], &nodes[1]);

    let a_eq = a.ni.eq_alloc(16).unwrap();
    let entry =
        a.ni.me_attach(PT, id(1), 0, 0, Unlink::Unlink, Position::After)
            .unwrap();
    let once = MdDesc::new(MdOptions::OP_PUT)
        .threshold(Threshold::Count(1))
        .eq(a_eq);
    a.ni.md_attach(entry, &once, vec![0; 8], Unlink::Unlink)
        .unwrap();
    let taken = Arc::new(AtomicBool::new(false));
    let flag = taken.clone();
    a.ni.core()
        .set_unlink_hook(
            a_eq,
            Box::new(move |_| {
                flag.store(true, Ordering::SeqCst);
                std::thread::sleep(HOLD);
            }),
        )
        .unwrap();
    let back =
        a.ni.md_bind(&MdDesc::default(), vec![9; 8], Unlink::Retain)
            .unwrap();

    let b_eq = b.ni.eq_alloc(16).unwrap();
    catch_all(&b.ni, b_eq, 8);
    let src =
        b.ni.md_bind(&MdDesc::default().eq(b_eq), vec![1; 8], Unlink::Retain)
            .unwrap();
    b.ni.put(src, AckReq::Ack, &Remote::new(id(0), PT, 0), 0)
        .unwrap();

    // Wait without entering the library, so that the progress thread, not
    // this one, takes the put.
    let t0 = Instant::now();
    while !taken.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < WAIT.unwrap(), "the put never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    a.ni.nal().fence_responses();
    a.ni.put(back, AckReq::NoAck, &Remote::new(id(1), PT, 0), 0)
        .unwrap();

    let first = loop {
        let ev =
            b.ni.eq_wait(b_eq, WAIT)
                .expect("an event before the timeout");
        if matches!(ev.kind, EventKind::Ack | EventKind::Put) {
            break ev.kind;
        }
    };
    assert_eq!(
        first,
        EventKind::Ack,
        "the message sent after fence_responses overtook the acknowledgment"
    );
    expect(&b.ni, b_eq, EventKind::Put);
    expect(&a.ni, a_eq, EventKind::Put);
}

/// Process 0 puts to process 1 asking for an acknowledgment; process 1's
/// application, on seeing the put, puts a reply back at once. Process 0
/// sees the acknowledgment before the reply, every round: the target
/// queues its answer ahead of anything its application sends after the
/// event, and the initiator lets a write still completing its send finish
/// before it takes an acknowledgment in (docs/ARCHITECTURE.md). TCP
/// promises this; shared memory and UDP do not. Needs progress threads
/// (the race is between the thread that reads and the one that waits).
pub fn an_acknowledgment_comes_before_the_reply_its_put_caused<C: Transport>(cfg: &C) {
    acknowledged_ping_pong(&job(2, cfg), 200);
    acknowledged_ping_pong_with(&job(2, cfg), 200, AckReq::Lazy, true);
}

/// A lazy acknowledgment ([`AckReq::Lazy`]) may wait in the target's
/// transport for a message back, but a target that sends nothing and only
/// waits (in polling mode its waits are the only progress it makes) still
/// sends it, within a bounded time: before its transport sleeps, at the
/// latest.
pub fn a_lazy_acknowledgment_reaches_an_initiator_whose_target_only_waits<C: Transport>(cfg: &C) {
    let nodes = job(2, cfg);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(16).unwrap();
    let beq = b.ni.eq_alloc(16).unwrap();
    let idle = b.ni.eq_alloc(1).unwrap();
    catch_all(&b.ni, beq, 64);
    let src = bind_md(&a.ni, aeq, b"lazy".to_vec());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            expect(&b.ni, beq, EventKind::Put);
            // Wait on a queue nothing reaches, in slices, until told.
            let until = Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::SeqCst) && Instant::now() < until {
                match b.ni.eq_wait(idle, Some(Duration::from_millis(20))) {
                    Err(PtlError::Timeout) => {}
                    other => panic!("{cfg:?}: the idle queue got {other:?}"),
                }
            }
        });
        for round in 0..3 {
            a.ni.put(src, AckReq::Lazy, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
            let ev = expect(&a.ni, aeq, EventKind::Ack);
            // Round 0's put is taken by the target's wait for it; the
            // later ones by its idle waits alone.
            assert_eq!(
                (ev.fail, ev.mlength),
                (FailType::Ok, 4),
                "{cfg:?}: round {round}"
            );
        }
        done.store(true, Ordering::SeqCst);
    });
}

/// `rounds` of: process 0 puts to process 1 asking for an acknowledgment,
/// and process 1's application puts a reply back as soon as it sees the
/// put; process 0 asserts that the acknowledgment comes first.
pub fn acknowledged_ping_pong<C: Transport>(nodes: &[Node<C>], rounds: usize) {
    acknowledged_ping_pong_with(nodes, rounds, AckReq::Ack, true);
}

/// [`acknowledged_ping_pong`], the puts asking for `ack`; the order of the
/// acknowledgment and the reply is asserted only if `ack_first`.
pub fn acknowledged_ping_pong_with<C: Transport>(
    nodes: &[Node<C>],
    rounds: usize,
    ack: AckReq,
    ack_first: bool,
) {
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(64).unwrap();
    let beq = b.ni.eq_alloc(64).unwrap();
    // Room for every round's 4 bytes (the entries fill up, they do not wrap).
    catch_all(&a.ni, aeq, 4 * rounds);
    catch_all(&b.ni, beq, 4 * rounds);
    let ping = bind_md(&a.ni, aeq, b"ping".to_vec());
    let pong = bind_md(&b.ni, beq, b"pong".to_vec());
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                expect(&b.ni, beq, EventKind::Put);
                b.ni.put(pong, AckReq::NoAck, &Remote::new(id(0), PT, 0), 0)
                    .unwrap();
            }
        });
        for round in 0..rounds {
            a.ni.put(ping, ack, &Remote::new(id(1), PT, 0), 0).unwrap();
            let mut got = Vec::new();
            while got.len() < 2 {
                let ev = a.ni.eq_wait(aeq, WAIT).unwrap();
                if ev.kind != EventKind::Sent {
                    got.push((ev.kind, ev.fail));
                }
            }
            if ack_first {
                assert_eq!(
                    got[0],
                    (EventKind::Ack, FailType::Ok),
                    "round {round}: the reply overtook the acknowledgment"
                );
            }
            got.sort_by_key(|(k, _)| *k != EventKind::Ack);
            assert_eq!(
                got,
                [
                    (EventKind::Ack, FailType::Ok),
                    (EventKind::Put, FailType::Ok)
                ],
                "round {round}"
            );
        }
    });
}
