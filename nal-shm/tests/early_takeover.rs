//! Issue 22: `ShmConfig::early_takeover`. With it, a rank that leaves a
//! wait and goes off to compute gets a large transfer carried by its
//! progress thread at once (it sleeps on the doorbell); without it, the
//! progress thread sleeps the hand-back delay out, so the transfer waits.
//! The hand-back here is far longer than the test may take, so the two
//! behaviours cannot be confused. A dozing progress thread is woken by
//! work (a single-copy read), never by a small message.

use std::time::{Duration, Instant};

use nal_shm::{ProgressMode, ShmConfig};
use portals::*;
use portals_tests::conformance::{attach, bind_md, id, job_with, pattern, PT};

const BIG: usize = 1 << 20;
const HANDBACK: Duration = Duration::from_secs(30);

/// Rank 0 waits for a go message, then "computes" (looks at its event
/// queue without waiting in the library) for up to `compute` while rank 1
/// puts 1 MiB (single-copy) to it; returns whether the put completed.
fn completes_while_computing(early_takeover: bool, compute: Duration) -> bool {
    let rx = ShmConfig {
        progress: ProgressMode::Thread,
        handback: HANDBACK,
        early_takeover,
        ..ShmConfig::default()
    };
    let tx = ShmConfig {
        progress: ProgressMode::Thread,
        ..ShmConfig::default()
    };
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
    let big_md = attach(&a.ni, id(1), 2, 0, &desc, BIG);
    let beq = b.ni.eq_alloc(8).unwrap();
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let big = bind_md(&b.ni, beq, pattern(BIG, 5));
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
            // Well after the go: the rank has left its wait by then.
            std::thread::sleep(Duration::from_millis(50));
            b.ni.put(big, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
                .unwrap();
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md));
        let t0 = Instant::now();
        let done = loop {
            if let Some(ev) = a.ni.eq_get(aeq).unwrap() {
                assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
                break true;
            }
            if t0.elapsed() > compute {
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if !done {
            // Back in the library: the wait moves it.
            let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
            assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
        }
        let mut got = vec![0u8; BIG];
        a.ni.md_read(big_md, 0, &mut got).unwrap();
        assert!(got == pattern(BIG, 5), "payload corrupted");
        done
    })
}

#[test]
fn with_the_early_takeover_a_transfer_completes_while_the_rank_computes() {
    assert!(
        completes_while_computing(true, Duration::from_secs(10)),
        "the transfer waited for the hand-back"
    );
}

#[test]
fn without_it_the_transfer_waits_for_the_next_wait() {
    assert!(
        !completes_while_computing(false, Duration::from_secs(1)),
        "the progress thread took over during the hand-back"
    );
}

/// Rank 0 leaves its wait and computes (takes events without waiting) while
/// rank 1 puts `SMALL` inline messages to it, then 1 MiB. The small ones
/// make neither a wake-up system call at the sender nor a wake of rank 0's
/// dozing progress thread; the large one does both and completes while
/// rank 0 computes.
#[test]
fn a_dozing_progress_thread_sleeps_through_small_messages_and_wakes_for_a_transfer() {
    const SMALL: usize = 50;
    let rx = ShmConfig {
        progress: ProgressMode::Thread,
        handback: HANDBACK,
        early_takeover: true,
        ..ShmConfig::default()
    };
    let tx = ShmConfig {
        progress: ProgressMode::Thread,
        ..ShmConfig::default()
    };
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(4 * SMALL).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
    let small_desc = MdDesc::new(MdOptions::OP_PUT)
        .eq(aeq)
        .threshold(Threshold::Infinite);
    let small_md = attach(&a.ni, id(1), 3, 0, &small_desc, 8 * SMALL);
    let big_md = attach(&a.ni, id(1), 2, 0, &desc, BIG);
    let beq = b.ni.eq_alloc(8).unwrap();
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let small = bind_md(&b.ni, beq, vec![7; 8]);
    let big = bind_md(&b.ni, beq, pattern(BIG, 9));
    let (wakes_small, sent_small) = std::thread::scope(|sc| {
        let sender = sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
            // Well after the go: rank 0 has left its wait and dozes.
            std::thread::sleep(Duration::from_millis(50));
            let (w0, s0) = (
                a.nal.stats().progress_thread_wakes,
                b.nal.stats().futex_wakes_sent,
            );
            for _ in 0..SMALL {
                b.ni.put(small, AckReq::NoAck, &Remote::new(id(0), PT, 3), 0)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            let got = (
                a.nal.stats().progress_thread_wakes - w0,
                b.nal.stats().futex_wakes_sent - s0,
            );
            b.ni.put(big, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
                .unwrap();
            got
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md));
        // Compute: take events without waiting in the library.
        let t0 = Instant::now();
        let mut smalls = 0;
        loop {
            match a.ni.eq_get(aeq).unwrap() {
                Some(ev) if ev.md_handle == small_md => smalls += 1,
                Some(ev) => {
                    assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
                    break;
                }
                None => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(20),
                        "the transfer waited for the hand-back"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        // The small messages arrived before the transfer, in order.
        assert_eq!(smalls, SMALL, "small messages missing");
        let mut got = vec![0u8; BIG];
        a.ni.md_read(big_md, 0, &mut got).unwrap();
        assert!(got == pattern(BIG, 9), "payload corrupted");
        sender.join().unwrap()
    });
    assert_eq!(
        wakes_small, 0,
        "small messages woke the dozing progress thread"
    );
    assert_eq!(sent_small, 0, "small messages made wake-up system calls");
}

/// The progress thread reads a large payload in one single-copy step while
/// the application comes back to wait for it: the waiter, with nothing of
/// its own to do, gives the core away on every look instead of spinning
/// (on a rank bound to one core it would take the copying thread's time).
#[test]
fn a_waiter_yields_to_the_progress_threads_single_copy_read() {
    const HUGE: usize = 64 << 20;
    let rx = ShmConfig {
        progress: ProgressMode::Thread,
        handback: HANDBACK,
        early_takeover: true,
        // One step for the whole payload: the progress thread holds it.
        cma_chunk: HUGE,
        ..ShmConfig::default()
    };
    let tx = ShmConfig {
        progress: ProgressMode::Thread,
        ..ShmConfig::default()
    };
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
    let huge_md = attach(&a.ni, id(1), 2, 0, &desc, HUGE);
    let beq = b.ni.eq_alloc(8).unwrap();
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let huge = bind_md(&b.ni, beq, pattern(HUGE, 3));
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            b.ni.put(huge, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
                .unwrap();
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md));
        // Away from the library until the dozing progress thread is woken
        // by the transfer and starts reading it (in one step, holding the
        // peer's receive side until the whole payload is in).
        let t0 = Instant::now();
        while a.nal.stats().single_copy_started == 0 {
            assert!(t0.elapsed() < Duration::from_secs(20), "never started");
            std::thread::sleep(Duration::from_micros(100));
        }
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, huge_md));
    });
    let s = a.nal.stats();
    assert_eq!(s.single_copy_received, 1);
    assert!(
        s.waiter_yields > 0,
        "the waiter never yielded to the copying progress thread"
    );
    let mut got = vec![0u8; HUGE];
    a.ni.md_read(huge_md, 0, &mut got).unwrap();
    assert!(got == pattern(HUGE, 3), "payload corrupted");
}

/// Rank 0 leaves a wait and at once waits again, for 1 MiB: the transfer
/// arrives while the application waits in the library, so it does not
/// wake the dozing progress thread: the waiter takes it itself.
#[test]
fn a_transfer_the_application_waits_for_leaves_the_dozing_progress_thread_asleep() {
    let rx = ShmConfig {
        progress: ProgressMode::Thread,
        handback: HANDBACK,
        early_takeover: true,
        ..ShmConfig::default()
    };
    let tx = ShmConfig {
        progress: ProgressMode::Thread,
        ..ShmConfig::default()
    };
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
    let big_md = attach(&a.ni, id(1), 2, 0, &desc, BIG);
    let beq = b.ni.eq_alloc(8).unwrap();
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let big = bind_md(&b.ni, beq, pattern(BIG, 7));
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            b.ni.put(big, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
                .unwrap();
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md));
        let before = a.nal.stats();
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
        let after = a.nal.stats();
        assert_eq!(after.single_copy_received, 1);
        assert_eq!(
            after.progress_thread_wakes, before.progress_thread_wakes,
            "the transfer woke the dozing progress thread beside a waiter"
        );
    });
    let mut got = vec![0u8; BIG];
    a.ni.md_read(big_md, 0, &mut got).unwrap();
    assert!(got == pattern(BIG, 7), "payload corrupted");
}

/// A triggered operation armed on a counter, the application off computing
/// (no library calls), a small message that fires it: the progress thread,
/// which dozes through small messages otherwise, takes this one at once,
/// and the triggered put reaches rank 1 while rank 0 still computes.
#[test]
fn with_a_triggered_operation_armed_a_small_message_wakes_the_progress_thread() {
    let rx = ShmConfig {
        progress: ProgressMode::Thread,
        handback: HANDBACK,
        early_takeover: true,
        ..ShmConfig::default()
    };
    let tx = ShmConfig {
        progress: ProgressMode::Thread,
        ..ShmConfig::default()
    };
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let ct = a.ni.ct_alloc().unwrap();
    let go_md = attach(
        &a.ni,
        id(1),
        1,
        0,
        &MdDesc::new(MdOptions::OP_PUT).eq(aeq),
        8,
    );
    // The trigger: a put to match bits 3 counts on `ct`.
    attach(
        &a.ni,
        id(1),
        3,
        0,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::CT_COMM).ct(ct),
        8,
    );
    let echo = bind_md(&a.ni, aeq, vec![9; 8]);
    a.ni.triggered_put(
        echo,
        0,
        8,
        AckReq::NoAck,
        &Remote::new(id(1), PT, 4),
        0,
        Trigger::new(ct, 1),
    )
    .unwrap();
    let beq = b.ni.eq_alloc(8).unwrap();
    let echo_md = attach(
        &b.ni,
        id(0),
        4,
        0,
        &MdDesc::new(MdOptions::OP_PUT).eq(beq),
        8,
    );
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let fire = bind_md(&b.ni, beq, vec![2; 8]);
    let computing = std::sync::atomic::AtomicBool::new(true);
    let echoed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
            // Well after the go: rank 0 computes by then.
            std::thread::sleep(Duration::from_millis(50));
            let wakes = a.nal.stats().progress_thread_wakes;
            b.ni.put(fire, AckReq::NoAck, &Remote::new(id(0), PT, 3), 0)
                .unwrap();
            loop {
                let ev = b.ni.eq_wait(beq, Some(Duration::from_secs(20))).unwrap();
                if ev.kind == EventKind::Put {
                    assert_eq!(ev.md_handle, echo_md);
                    break;
                }
            }
            assert!(
                computing.load(std::sync::atomic::Ordering::SeqCst),
                "the triggered put waited for rank 0's next call"
            );
            // Woken by the message, not found at its next timed look.
            assert!(
                a.nal.stats().progress_thread_wakes > wakes,
                "the small message did not wake the progress thread"
            );
            echoed.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md));
        // Compute, without a library call, until rank 1 has the echo (or
        // long past any reasonable wait).
        let t0 = Instant::now();
        while !echoed.load(std::sync::atomic::Ordering::SeqCst)
            && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        computing.store(false, std::sync::atomic::Ordering::SeqCst);
    });
}
