//! Issue 22: `ShmConfig::early_takeover`. With it, a rank that leaves a
//! wait and goes off to compute gets a large transfer carried by its
//! progress thread at once (it dozes on the doorbell); without it, the
//! progress thread sleeps the hand-back delay out, so the transfer waits.
//! The hand-back here is far longer than the test may take, so the two
//! behaviours cannot be confused. A dozing progress thread is woken by
//! work (a single-copy read), never by a small message, and not while the
//! application waits in the library.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nal_shm::{ProgressMode, ShmConfig};
use portals::*;
use portals_tests::conformance::{attach, bind_md, id, job_with, pattern, Node, PT};

const BIG: usize = 1 << 20;
const HANDBACK: Duration = Duration::from_secs(30);

/// Two ranks in thread mode: rank 0 (`a`, the one under test) with a
/// hand-back far longer than the test and the take-over as asked, rank 1
/// (`b`) with defaults. Rank 0 has a go entry (match bits 1) on `aeq`;
/// rank 1 a go message.
struct Scene {
    nodes: Vec<Node<ShmConfig>>,
    aeq: EqHandle,
    go_md: MdHandle,
    beq: EqHandle,
    go: MdHandle,
}

impl Scene {
    fn new(early_takeover: bool, tweak: impl FnOnce(&mut ShmConfig)) -> Scene {
        let mut rx = ShmConfig {
            progress: ProgressMode::Thread,
            handback: HANDBACK,
            early_takeover,
            ..ShmConfig::default()
        };
        tweak(&mut rx);
        let tx = ShmConfig {
            progress: ProgressMode::Thread,
            ..ShmConfig::default()
        };
        let nodes = job_with(&[rx, tx]);
        let aeq = nodes[0].ni.eq_alloc(256).unwrap();
        let go_md = attach(&nodes[0].ni, id(1), 1, 0, &Self::put_desc(aeq), 8);
        let beq = nodes[1].ni.eq_alloc(8).unwrap();
        let go = bind_md(&nodes[1].ni, beq, vec![1; 8]);
        Scene {
            nodes,
            aeq,
            go_md,
            beq,
            go,
        }
    }

    fn put_desc(eq: EqHandle) -> MdDesc {
        MdDesc::new(MdOptions::OP_PUT).eq(eq)
    }

    fn a(&self) -> &Node<ShmConfig> {
        &self.nodes[0]
    }

    fn b(&self) -> &Node<ShmConfig> {
        &self.nodes[1]
    }

    /// Rank 1: the go after 150 ms, then, 50 ms later (rank 0 has left its
    /// wait for the go by then), `then`.
    fn go_then<R>(&self, then: impl FnOnce() -> R) -> R {
        self.go_then_after(Duration::from_millis(50), then)
    }

    /// [`Scene::go_then`] with `then` `after` the go.
    fn go_then_after<R>(&self, after: Duration, then: impl FnOnce() -> R) -> R {
        std::thread::sleep(Duration::from_millis(150));
        self.b()
            .ni
            .put(self.go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
            .unwrap();
        std::thread::sleep(after);
        then()
    }

    /// Rank 1 puts all of `md` to rank 0's entry `bits`.
    fn put(&self, md: MdHandle, bits: u64) {
        self.b()
            .ni
            .put(md, AckReq::NoAck, &Remote::new(id(0), PT, bits), 0)
            .unwrap();
    }

    /// Rank 1 puts `fire` to rank 0's entry 3 (it counts towards the
    /// trigger of a put back to rank 1's `echo_md`), waits for that echo,
    /// and checks that rank 0 was still `computing` when it came.
    fn fire_for_echo(&self, fire: MdHandle, echo_md: MdHandle, computing: &AtomicBool) {
        self.put(fire, 3);
        self.await_echo(echo_md, computing);
    }

    /// Rank 1 waits for the echo of [`Scene::fire_for_echo`].
    fn await_echo(&self, echo_md: MdHandle, computing: &AtomicBool) {
        loop {
            let ev = self
                .b()
                .ni
                .eq_wait(self.beq, Some(Duration::from_secs(20)))
                .unwrap();
            if ev.kind == EventKind::Put {
                assert_eq!(ev.md_handle, echo_md);
                break;
            }
        }
        assert!(
            computing.load(Ordering::SeqCst),
            "the triggered put waited for rank 0's next call"
        );
    }

    /// Rank 0 waits for the go.
    fn wait_go(&self) {
        let ev = self.wait();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, self.go_md));
    }

    /// Rank 0 waits in the library for its next event.
    fn wait(&self) -> Event {
        self.a()
            .ni
            .eq_wait(self.aeq, Some(Duration::from_secs(20)))
            .unwrap()
    }

    /// Rank 0 reads back entry `md` and checks it holds `pattern(len, seed)`.
    fn check(&self, md: MdHandle, len: usize, seed: u8) {
        let mut got = vec![0u8; len];
        self.a().ni.md_read(md, 0, &mut got).unwrap();
        assert!(got == pattern(len, seed), "payload corrupted");
    }
}

/// Rank 0 waits for a go message, then "computes" (looks at its event
/// queue without waiting in the library) for up to `compute` while rank 1
/// puts 1 MiB (single-copy) to it; returns whether the put completed.
fn completes_while_computing(early_takeover: bool, compute: Duration) -> bool {
    let sc = Scene::new(early_takeover, |_| {});
    let big_md = attach(&sc.a().ni, id(1), 2, 0, &Scene::put_desc(sc.aeq), BIG);
    let big = bind_md(&sc.b().ni, sc.beq, pattern(BIG, 5));
    let done = std::thread::scope(|s| {
        s.spawn(|| sc.go_then(|| sc.put(big, 2)));
        sc.wait_go();
        let t0 = Instant::now();
        loop {
            if let Some(ev) = sc.a().ni.eq_get(sc.aeq).unwrap() {
                assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
                break true;
            }
            if t0.elapsed() > compute {
                // Back in the library: the wait moves it.
                let ev = sc.wait();
                assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    sc.check(big_md, BIG, 5);
    done
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

/// Rank 0 leaves its wait and computes (takes events without waiting)
/// while rank 1 puts `SMALL` inline messages to it, then 1 MiB. The small
/// ones make neither a wake-up system call at the sender nor a wake of
/// rank 0's dozing progress thread; the large one does both and completes
/// while rank 0 computes.
#[test]
fn a_dozing_progress_thread_sleeps_through_small_messages_and_wakes_for_a_transfer() {
    const SMALL: usize = 50;
    let sc = Scene::new(true, |_| {});
    let small_desc = Scene::put_desc(sc.aeq).threshold(Threshold::Infinite);
    let small_md = attach(&sc.a().ni, id(1), 3, 0, &small_desc, 8 * SMALL);
    let big_md = attach(&sc.a().ni, id(1), 2, 0, &Scene::put_desc(sc.aeq), BIG);
    let small = bind_md(&sc.b().ni, sc.beq, vec![7; 8]);
    let big = bind_md(&sc.b().ni, sc.beq, pattern(BIG, 9));
    let (wakes_small, sent_small) = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            sc.go_then(|| {
                let (a, b) = (sc.a().nal.stats(), sc.b().nal.stats());
                for _ in 0..SMALL {
                    sc.put(small, 3);
                    std::thread::sleep(Duration::from_millis(2));
                }
                let got = (
                    sc.a().nal.stats().progress_thread_wakes - a.progress_thread_wakes,
                    sc.b().nal.stats().futex_wakes_sent - b.futex_wakes_sent,
                );
                sc.put(big, 2);
                got
            })
        });
        sc.wait_go();
        // Compute: take events without waiting in the library.
        let t0 = Instant::now();
        let mut smalls = 0;
        loop {
            match sc.a().ni.eq_get(sc.aeq).unwrap() {
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
        sender.join().unwrap()
    });
    sc.check(big_md, BIG, 9);
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
    // One step for the whole payload: the progress thread holds it.
    let sc = Scene::new(true, |c| c.cma_chunk = HUGE);
    let huge_md = attach(&sc.a().ni, id(1), 2, 0, &Scene::put_desc(sc.aeq), HUGE);
    let huge = bind_md(&sc.b().ni, sc.beq, pattern(HUGE, 3));
    std::thread::scope(|s| {
        s.spawn(|| sc.go_then(|| sc.put(huge, 2)));
        sc.wait_go();
        // Away from the library until the dozing progress thread is woken
        // by the transfer and starts reading it (in one step, holding the
        // peer's receive side until the whole payload is in).
        let t0 = Instant::now();
        while sc.a().nal.stats().single_copy_started == 0 {
            assert!(t0.elapsed() < Duration::from_secs(20), "never started");
            std::thread::sleep(Duration::from_micros(100));
        }
        let ev = sc.wait();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, huge_md));
    });
    let s = sc.a().nal.stats();
    assert_eq!(s.single_copy_received, 1);
    assert!(
        s.waiter_yields > 0,
        "the waiter never yielded to the copying progress thread"
    );
    sc.check(huge_md, HUGE, 3);
}

/// Rank 0 leaves a wait and at once waits again, for 1 MiB: the transfer
/// arrives while the application waits in the library, so it does not
/// wake the dozing progress thread: the waiter takes it itself.
#[test]
fn a_transfer_the_application_waits_for_leaves_the_dozing_progress_thread_asleep() {
    let sc = Scene::new(true, |_| {});
    let big_md = attach(&sc.a().ni, id(1), 2, 0, &Scene::put_desc(sc.aeq), BIG);
    let big = bind_md(&sc.b().ni, sc.beq, pattern(BIG, 7));
    std::thread::scope(|s| {
        s.spawn(|| sc.go_then(|| sc.put(big, 2)));
        sc.wait_go();
        let before = sc.a().nal.stats();
        let ev = sc.wait();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md));
        let after = sc.a().nal.stats();
        assert_eq!(after.single_copy_received, 1);
        assert_eq!(
            after.progress_thread_wakes, before.progress_thread_wakes,
            "the transfer woke the dozing progress thread beside a waiter"
        );
    });
    sc.check(big_md, BIG, 7);
}

/// A triggered operation armed on a counter, the application off computing
/// (no library calls), a small message that fires it: the progress thread,
/// which dozes through small messages otherwise, takes this one at once,
/// and the triggered put reaches rank 1 while rank 0 still computes.
#[test]
fn with_a_triggered_operation_armed_a_small_message_wakes_the_progress_thread() {
    use std::sync::atomic::Ordering::SeqCst;
    let sc = Scene::new(true, |_| {});
    let (a, b) = (sc.a(), sc.b());
    let ct = a.ni.ct_alloc().unwrap();
    // The trigger: a put to match bits 3 counts on `ct`.
    let count = MdDesc::new(MdOptions::OP_PUT | MdOptions::CT_COMM).ct(ct);
    attach(&a.ni, id(1), 3, 0, &count, 8);
    let echo = bind_md(&a.ni, sc.aeq, vec![9; 8]);
    let to_b = Remote::new(id(1), PT, 4);
    a.ni.triggered_put(echo, 0, 8, AckReq::NoAck, &to_b, 0, Trigger::new(ct, 1))
        .unwrap();
    let echo_md = attach(&b.ni, id(0), 4, 0, &Scene::put_desc(sc.beq), 8);
    let fire = bind_md(&b.ni, sc.beq, vec![2; 8]);
    let (computing, echoed) = (AtomicBool::new(true), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            // Midway through the progress thread's timed sleeps (50 ms from
            // the go's leave): at a timed look it would find the message
            // without being woken for it (seen once in CI with 50 ms).
            sc.go_then_after(Duration::from_millis(25), || {
                let wakes = a.nal.stats().progress_thread_wakes;
                sc.fire_for_echo(fire, echo_md, &computing);
                // Woken by the message, not found at its next timed look.
                assert!(
                    a.nal.stats().progress_thread_wakes > wakes,
                    "the small message did not wake the progress thread"
                );
                echoed.store(true, SeqCst);
            })
        });
        sc.wait_go();
        // Compute, without a library call, until rank 1 has the echo (or
        // long past any reasonable wait).
        let t0 = Instant::now();
        while !echoed.load(SeqCst) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        computing.store(false, SeqCst);
    });
}

/// Rank 0 runs a loop whose steps fit in the hand-back delay but are not
/// short (two waits, then 6 ms of computing, the delay being 10 ms): the
/// dozing progress thread's looks find it computing after two waits
/// since the last look, and back off instead of dozing only for the rest
/// of each delay. Its dozes are counted by the transport
/// (`futex_waits`): about one per step (40) without the back-off, a
/// handful with it (the nap doubles to the longest, 50 ms here).
#[test]
fn a_loop_of_steps_within_the_handback_backs_the_dozer_off() {
    const STEPS: usize = 40;
    let sc = Scene::new(true, |c| c.handback = Duration::from_millis(10));
    let wait_briefly = || {
        let r = sc.a().ni.eq_wait(sc.aeq, Some(Duration::from_micros(50)));
        assert!(matches!(r, Err(PtlError::Timeout)), "{r:?}");
    };
    // One step first, so that the loop is under way when counting starts.
    wait_briefly();
    wait_briefly();
    std::thread::sleep(Duration::from_millis(6));
    let before = sc.a().nal.stats().futex_waits;
    for _ in 0..STEPS {
        wait_briefly();
        std::thread::sleep(Duration::from_micros(100));
        wait_briefly();
        std::thread::sleep(Duration::from_millis(6));
    }
    let dozes = sc.a().nal.stats().futex_waits - before;
    assert!(
        dozes <= (STEPS / 3) as u64,
        "{dozes} dozes in {STEPS} steps of a loop"
    );
}

/// Rank 0 leaves a wait and at once starts a "non-blocking collective": it
/// arms a triggered put inside a post (`Nal::bulk_post_end`, which MPI
/// calls at every collective start), then computes. The dozer had gone to
/// doze long (up to 50 ms) before anything was armed, and a small message
/// does not wake a dozer; but the post flagged the inbox, so the small
/// message from rank 1 that fires the put wakes it, and the put goes out
/// while rank 0 still computes. Four such starts (each a fresh post 20 ms
/// after the last one fired): with the message waking the dozer, each is
/// a wake of the doorbell (`progress_thread_wakes`; one may land just as
/// the dozer looks on its own, and be taken without one). Without the
/// post's flag, only a start that the dozer's own timed look happens to
/// follow is (about one in six here).
///
/// With `fire_first`, rank 1's message is in rank 0's ring before the
/// post begins (a peer that started first), so it woke nobody: the post's
/// end finds it and wakes the dozer. A start whose message the dozer
/// already took on a timed look (the counter reached the trigger before
/// the post) shows nothing either way and is not counted.
fn collectives_started_after_a_wait(crowded: bool, fire_first: bool) {
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::mpsc;
    const STARTS: u64 = 4;
    let sc = Scene::new(true, |c| c.crowded = crowded);
    let (a, b) = (sc.a(), sc.b());
    let ct = a.ni.ct_alloc().unwrap();
    let count = MdDesc::new(MdOptions::OP_PUT | MdOptions::CT_COMM).ct(ct);
    // Room for every start's 8 bytes: descriptors manage their offsets.
    attach(&a.ni, id(1), 3, 0, &count, 8 * STARTS as usize);
    let echo = bind_md(&a.ni, sc.aeq, vec![9; 8]);
    let echo_md = attach(
        &b.ni,
        id(0),
        4,
        0,
        &Scene::put_desc(sc.beq),
        8 * STARTS as usize,
    );
    let fire = bind_md(&b.ni, sc.beq, vec![2; 8]);
    let (go_fire, fire_now) = mpsc::channel::<()>();
    let (fired_tx, fired) = mpsc::channel::<()>();
    let (echoed_tx, echoed) = mpsc::channel::<()>();
    let computing = AtomicBool::new(true);
    let (rung, counted) = std::thread::scope(|s| {
        let (sc1, computing1) = (&sc, &computing);
        s.spawn(move || {
            let (sc, computing) = (sc1, computing1);
            sc.go_then_after(Duration::ZERO, || {
                for _ in 0..STARTS {
                    fire_now
                        .recv_timeout(Duration::from_secs(20))
                        .expect("rank 0 asks for the message");
                    sc.put(fire, 3);
                    fired_tx.send(()).expect("rank 0 computes");
                    sc.await_echo(echo_md, computing);
                    echoed_tx.send(()).expect("rank 0 computes");
                }
            })
        });
        sc.wait_go();
        // Rank 1 puts the message that fires the put; returns once it is
        // in rank 0's ring.
        let fire_message = || {
            go_fire.send(()).expect("rank 1 waits to fire");
            fired
                .recv_timeout(Duration::from_secs(20))
                .expect("rank 1 fired");
        };
        let (mut rung, mut counted) = (0, 0);
        for k in 1..=STARTS {
            // The collective's start, at once after the wait, or a while
            // after the last one's echo (so that the dozer, woken for that
            // one, dozes again first and finds nothing armed), then compute
            // until rank 1 has the echo.
            if k > 1 {
                std::thread::sleep(Duration::from_millis(20));
            }
            if fire_first {
                fire_message();
            }
            let taken = a.ni.ct_get(ct).unwrap().success >= k;
            let before = a.nal.stats().progress_thread_wakes;
            a.ni.nal().bulk_post_begin();
            let to_b = Remote::new(id(1), PT, 4);
            a.ni.triggered_put(echo, 0, 8, AckReq::NoAck, &to_b, 0, Trigger::new(ct, k))
                .unwrap();
            a.ni.nal().bulk_post_end();
            if !fire_first {
                fire_message();
            }
            echoed
                .recv_timeout(Duration::from_secs(20))
                .expect("rank 1 got the echo");
            if !taken {
                counted += 1;
                rung += u64::from(a.nal.stats().progress_thread_wakes > before);
            }
        }
        computing.store(false, SeqCst);
        (rung, counted)
    });
    assert!(
        counted >= 2 && rung + 1 >= counted,
        "the dozing progress thread was woken for only {rung} of {counted} collectives"
    );
}

#[test]
fn a_collective_started_after_a_wait_is_fired_by_the_next_message_while_the_rank_computes() {
    collectives_started_after_a_wait(false, false);
}

#[test]
fn on_a_crowded_host_too_a_collective_started_after_a_wait_is_fired_by_the_next_message() {
    collectives_started_after_a_wait(true, false);
}

#[test]
fn a_message_that_came_before_a_collectives_start_has_the_start_wake_the_dozer() {
    collectives_started_after_a_wait(false, true);
}
