//! The gate's rules, checked from the test thread (and a second one for
//! the wake-ups), with delays long enough that scheduling noise cannot blur
//! them.

use super::*;

#[test]
fn a_pass_run_as_a_wait_counts_as_one_and_leaves_even_when_it_panics() {
    let g = ProgressGate::new(Duration::from_secs(60));
    assert!(!g.stand_aside(), "nobody ever waited");
    assert!(g.as_wait(|| g.app_waiting()), "inside while it runs");
    assert!(!g.app_waiting());
    assert!(g.stand_aside(), "within the hand-back delay after it");
    assert!(g.since_leave() < Duration::from_secs(60).as_nanos() as u64);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        g.as_wait(|| panic!("a pass that panics"))
    }));
    assert!(r.is_err());
    assert!(!g.app_waiting(), "the panicking pass left the gate too");
}

#[test]
fn the_progress_thread_stands_aside_while_waiters_wait_and_for_the_handback() {
    let g = ProgressGate::new(Duration::from_millis(50));
    assert!(!g.stand_aside(), "nobody ever waited");
    g.enter();
    g.enter();
    assert!(g.stand_aside());
    g.leave();
    assert!(g.stand_aside(), "one waiter is still inside");
    g.leave();
    assert!(g.stand_aside(), "within the hand-back delay");
    std::thread::sleep(Duration::from_millis(80));
    assert!(!g.stand_aside(), "handed back");
}

#[test]
fn the_progress_thread_parks_only_for_the_rest_of_the_handback() {
    let g = ProgressGate::new(Duration::from_secs(1));
    assert_eq!(g.aside_for(), Duration::ZERO, "nobody ever waited");
    g.enter();
    assert_eq!(g.aside_for(), Duration::from_secs(1), "a waiter is inside");
    g.leave();
    std::thread::sleep(Duration::from_millis(600));
    let rest = g.aside_for();
    assert!(rest <= Duration::from_millis(400), "{rest:?}");
    let t0 = Instant::now();
    g.park();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "parked a whole delay"
    );
}

/// `n` short waits, as a communication loop makes them.
fn short_waits(g: &ProgressGate, n: u64) {
    for _ in 0..n {
        g.enter();
        g.leave();
    }
}

#[test]
fn a_tight_loop_of_waits_doubles_the_nap_up_to_the_cap() {
    let h = Duration::from_secs(1);
    let g = ProgressGate::new(h);
    g.enter(); // a waiter is inside at every look
    let mut naps = Vec::new();
    for _ in 0..8 {
        short_waits(&g, BUSY_WAITS);
        naps.push(g.nap());
    }
    let want: Vec<Duration> = [2, 4, 8, 16, 16, 16, 16, 16]
        .iter()
        .map(|&k| h * k)
        .collect();
    assert_eq!(naps, want);
    assert_eq!(MAX_BACKOFF, 16, "the expectation above spells out the cap");
}

/// `n` short waits, each after a compute step of `step`.
fn spaced_waits(g: &ProgressGate, n: u64, step: Duration) {
    for _ in 0..n {
        std::thread::sleep(step);
        g.enter();
        g.leave();
    }
}

#[test]
fn a_few_waits_keep_the_nap_at_one_delay() {
    // Compute steps of a whole delay between the waits: not a loop of
    // short steps (see the next test), so only the count decides.
    let h = Duration::from_millis(20);
    let g = ProgressGate::new(h);
    g.enter();
    spaced_waits(&g, BUSY_WAITS, h);
    assert_eq!(g.nap(), 2 * h, "busy");
    spaced_waits(&g, BUSY_WAITS - 1, h);
    assert_eq!(g.nap(), h, "fewer waits than a loop makes");
    spaced_waits(&g, BUSY_WAITS, h);
    assert_eq!(g.nap(), 2 * h, "back-off starts over from one delay");
    spaced_waits(&g, 1, h);
    assert_eq!(g.nap(), h, "one wait per look");
}

#[test]
fn a_plain_gate_backs_off_from_a_loop_of_short_steps() {
    // Long enough that a preempted test thread does not turn its quick
    // steps into long ones.
    let h = Duration::from_millis(100);
    // Two waits per look with no time between them (cg's steps are
    // far shorter than half a delay), looked at inside a wait or just
    // after one: too few waits for the count, but short steps only.
    let g = ProgressGate::new(h);
    // (The first wait ever follows no step.)
    short_waits(&g, SHORT_STEPS + 1);
    assert_eq!(g.nap(), 2 * h, "between two short steps");
    g.enter();
    short_waits(&g, SHORT_STEPS);
    assert_eq!(g.nap(), 4 * h, "inside a short wait");
    g.leave();
    // One wait per look is not enough to tell.
    short_waits(&g, 1);
    assert!(g.nap() <= h);
    // A long compute step, or a long wait, within the memory of a
    // whole back-off: single delays again (the overlap pattern).
    let g = ProgressGate::new(h);
    short_waits(&g, 1);
    spaced_waits(&g, 1, h);
    // (Fewer waits than the count of a loop looked at between waits.)
    short_waits(&g, SHORT_STEPS + 1);
    assert!(g.nap() <= h, "a long compute step moments ago");
    let g = ProgressGate::new(h);
    g.enter();
    std::thread::sleep(h);
    g.leave();
    short_waits(&g, SHORT_STEPS + 1);
    assert!(g.nap() <= h, "a long wait moments ago");
    // Inside a wait that has lasted half a delay: no back-off either.
    let g = ProgressGate::new(h);
    short_waits(&g, SHORT_STEPS);
    g.enter();
    std::thread::sleep(h / 2);
    assert_eq!(g.nap(), h, "the current wait is a long one");
    g.leave();
    // What a progress thread with its own schedule asks (shared
    // memory): the same history, for any gate that does not tell
    // compute steps apart.
    let g = ProgressGate::with_wake_on_leave(h);
    assert!(!g.recent_steps_short(), "no wait yet");
    short_waits(&g, SHORT_STEPS + 1);
    assert!(g.recent_steps_short());
    std::thread::sleep(h / 2);
    assert!(!g.recent_steps_short(), "away for half a delay now");
    short_waits(&g, 1);
    assert!(!g.recent_steps_short(), "a long step moments ago");
    let tcp = ProgressGate::with_wake_on_leave(h).waking_after_compute(h / 8);
    short_waits(&tcp, SHORT_STEPS + 1);
    assert!(!tcp.recent_steps_short(), "not counted there");
    // An eager gate keeps its own rules: two short waits found under
    // way arm the wake at the leave instead.
    let g = ProgressGate::with_wake_on_leave(h);
    short_waits(&g, SHORT_STEPS);
    g.enter();
    assert_eq!(g.nap(), h);
    assert!(g.wake_on_leave.load(Ordering::SeqCst));
}

#[test]
fn one_long_wait_doubles_the_nap_and_its_leave_cuts_it_short() {
    let h = Duration::from_secs(1);
    let g = ProgressGate::new(h);
    g.enter();
    assert_eq!(g.nap(), h, "first look: the wait may have just begun");
    assert_eq!(g.nap(), 2 * h, "the same wait still goes on");
    assert_eq!(g.nap(), 4 * h);
    assert!(g.wake_on_leave.load(Ordering::SeqCst), "armed");
    let g = std::sync::Arc::new(g);
    let pt = {
        let g = g.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            g.park(); // an 8-delay nap, unless the leave ends it
            t0.elapsed()
        })
    };
    // Leave only once the progress thread has armed the flag again
    // (it re-arms it in its nap, under the park lock).
    let t0 = Instant::now();
    while g.nap_ns.load(Ordering::Relaxed) < duration_ns(8 * h) {
        assert!(t0.elapsed() < 5 * h, "the progress thread never looked");
        std::thread::sleep(Duration::from_millis(1));
    }
    g.leave();
    let parked = pt.join().expect("progress thread");
    assert!(parked < 4 * h, "slept {parked:?} after the leave");
    assert!(!g.wake_on_leave.load(Ordering::SeqCst), "disarmed");
    let nap = g.nap();
    assert!(nap <= h, "{nap:?}: between waits, the rest of one delay");
}

/// The overlap pattern: a short wait or two per step, then compute.
/// A plain gate sleeps out its delay after such a wait; an eager one
/// (shared memory) is woken by the wait's leave, without backing off.
#[test]
fn an_eager_gate_is_woken_by_the_leave_of_a_short_wait() {
    let h = Duration::from_secs(1);
    let plain = ProgressGate::new(h);
    plain.enter();
    plain.nap(); // the look that starts counting
    plain.leave();
    plain.enter();
    assert_eq!(plain.nap(), h, "a whole delay while one waits");
    assert!(
        !plain.wake_on_leave.load(Ordering::SeqCst),
        "plain: not armed"
    );
    plain.leave();

    let g = std::sync::Arc::new(ProgressGate::with_wake_on_leave(h));
    g.enter();
    g.nap();
    g.leave();
    g.enter();
    let pt = {
        let g = g.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            g.park(); // a whole delay, unless the leave ends it
            t0.elapsed()
        })
    };
    let t0 = Instant::now();
    while !g.wake_on_leave.load(Ordering::SeqCst) {
        assert!(
            t0.elapsed() < 5 * h,
            "the progress thread never armed the wake"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        g.nap_ns.load(Ordering::Relaxed),
        duration_ns(h),
        "no back-off for a short wait"
    );
    g.leave();
    let parked = pt.join().expect("progress thread");
    assert!(parked < h / 2, "slept {parked:?} after the leave");
}

/// A loop of a few waits and a compute step, looked at inside a wait:
/// a plain eager gate takes it for a tight loop and backs off; one that
/// counts compute steps arms the wake at the wait's end instead. A
/// tight loop (no gap as long as the compute gap) still backs off.
#[test]
fn a_loop_that_computes_between_waits_gets_the_wake_not_a_back_off() {
    let h = Duration::from_secs(1);
    let step = Duration::from_millis(20);
    let loop_with_compute = |g: &ProgressGate| {
        for _ in 0..BUSY_WAITS {
            short_waits(g, 1);
            std::thread::sleep(step); // compute
        }
        g.enter();
    };
    let plain = ProgressGate::with_wake_on_leave(h);
    plain.nap();
    loop_with_compute(&plain);
    assert_eq!(plain.nap(), 2 * h, "plain: taken for a tight loop");
    assert!(!plain.wake_on_leave.load(Ordering::SeqCst));

    let g = ProgressGate::with_wake_on_leave(h).waking_after_compute(step / 2);
    g.nap();
    loop_with_compute(&g);
    assert_eq!(g.nap(), h, "no back-off");
    assert!(g.wake_on_leave.load(Ordering::SeqCst), "armed");
    g.leave();
    assert!(!g.wake_on_leave.load(Ordering::SeqCst), "the leave took it");

    // Gaps shorter than the compute gap (an hour here): a tight loop.
    let tight = ProgressGate::with_wake_on_leave(h).waking_after_compute(3600 * h);
    tight.enter();
    tight.nap();
    short_waits(&tight, BUSY_WAITS);
    assert_eq!(tight.nap(), 2 * h, "a tight loop still backs off");
}

#[test]
fn only_a_look_inside_arms_the_wake_and_only_the_last_waiter_out_takes_it() {
    let h = Duration::from_secs(1);
    let g = ProgressGate::new(h);
    g.enter();
    g.nap();
    g.leave();
    // The look comes after the leave: nobody inside, no back-off.
    assert!(g.nap() <= h);
    assert!(!g.wake_on_leave.load(Ordering::SeqCst));
    // Nested waits: only the last one out wakes.
    g.enter();
    g.enter();
    g.nap();
    g.nap();
    g.leave();
    assert!(
        g.wake_on_leave.load(Ordering::SeqCst),
        "one waiter still inside"
    );
    g.leave();
    assert!(
        !g.wake_on_leave.load(Ordering::SeqCst),
        "the last one out took it"
    );
}

#[test]
fn a_look_during_compute_does_not_back_off_however_many_waits_there_were() {
    let h = Duration::from_millis(80);
    let g = ProgressGate::new(h);
    // A few waits per compute step (a barrier, then the awaited
    // receive), looked at while the application computes.
    for _ in 0..3 {
        short_waits(&g, 10 * LOOP_WAITS);
        std::thread::sleep(h);
    }
    short_waits(&g, 10 * LOOP_WAITS);
    std::thread::sleep(h / 4);
    let nap = g.nap();
    assert!(nap <= h, "{nap:?}: the rest of one delay, not a back-off");
    short_waits(&g, LOOP_WAITS - 1);
    let nap = g.nap();
    assert!(nap <= h, "{nap:?}: too few waits for a loop");
}

#[test]
fn a_look_between_the_waits_of_a_loop_backs_off() {
    let h = Duration::from_secs(1);
    let g = ProgressGate::new(h);
    // A ping-pong, looked at while it sends between two waits.
    short_waits(&g, LOOP_WAITS);
    assert_eq!(g.nap(), 2 * h);
    short_waits(&g, LOOP_WAITS);
    assert_eq!(g.nap(), 4 * h);
    assert!(!g.wake_on_leave.load(Ordering::SeqCst), "no wait to end");
}

#[test]
fn taking_over_ends_the_back_off() {
    let h = Duration::from_millis(20);
    let g = ProgressGate::new(h);
    g.enter();
    for _ in 0..3 {
        short_waits(&g, BUSY_WAITS);
        g.nap();
    }
    g.leave();
    std::thread::sleep(h * 2);
    assert!(!g.stand_aside(), "the application went away: take over");
    g.enter();
    short_waits(&g, BUSY_WAITS);
    assert_eq!(g.nap(), 2 * h, "the next busy spell starts from one delay");
}

#[test]
fn an_application_that_waits_once_per_compute_step_gets_the_rest_of_one_delay() {
    let h = Duration::from_secs(1);
    let g = ProgressGate::new(h);
    short_waits(&g, 1);
    let nap = g.nap();
    assert!(nap <= h && nap > h / 2, "{nap:?}");
    let g = ProgressGate::new(Duration::from_millis(10));
    short_waits(&g, 10 * BUSY_WAITS);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        g.nap(),
        Duration::ZERO,
        "delay over: no nap, however busy before"
    );
}

#[test]
fn a_bulk_post_outside_a_wait_wakes_the_parked_thread_and_ends_the_hand_back() {
    // A hand-back delay of a minute: only the post can end the park.
    let g = std::sync::Arc::new(ProgressGate::new(Duration::from_secs(60)));
    g.enter();
    g.leave();
    assert!(g.stand_aside(), "within the hand-back delay");
    for round in 0..50 {
        let g2 = g.clone();
        let t = std::thread::spawn(move || {
            let t0 = Instant::now();
            while g2.stand_aside() && t0.elapsed() < Duration::from_secs(30) {
                g2.park();
            }
            t0.elapsed()
        });
        // Now before the thread parks, now while it sleeps.
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_millis(2));
        }
        g.post_begin();
        g.post_end();
        let took = t.join().unwrap();
        assert!(took < Duration::from_secs(10), "round {round}: {took:?}");
        // Taken over until the next wait begins; after it, the delay
        // rules again.
        assert!(!g.stand_aside(), "round {round}");
        g.enter();
        g.leave();
        assert!(g.stand_aside(), "round {round}");
    }
}

#[test]
fn a_progress_thread_does_not_spin_while_its_application_posts_again() {
    // A grace long enough to tell a timed look from an immediate one.
    let grace = Duration::from_millis(20);
    let mut g = ProgressGate::new(Duration::from_secs(60));
    g.bulk_grace_ns = duration_ns(grace);
    g.enter();
    g.leave();
    g.post_begin();
    g.post_end();
    std::thread::sleep(grace * 2);
    // The first post is due; a second one is under way.
    g.post_begin();
    assert!(g.stand_aside(), "posting");
    let t0 = Instant::now();
    g.park();
    assert!(
        t0.elapsed() >= grace / 2,
        "parked {:?}: a thread that looks again at once spins",
        t0.elapsed()
    );
    g.post_end();
    std::thread::sleep(grace * 2);
    assert!(!g.stand_aside(), "taken over after the second post");
}

#[test]
fn a_bulk_post_inside_a_wait_or_followed_by_one_changes_nothing() {
    let g = ProgressGate::new(Duration::from_secs(60));
    let post = || {
        g.post_begin();
        g.post_end();
    };
    g.enter();
    post();
    g.leave();
    assert!(g.stand_aside(), "posted inside a wait");
    post();
    g.enter();
    g.leave();
    assert!(g.stand_aside(), "a wait came after the post");
    g.post_begin();
    std::thread::sleep(BULK_GRACE * 10);
    assert!(g.stand_aside(), "still posting");
    g.post_end();
    assert!(g.stand_aside(), "within the grace after the post");
    std::thread::sleep(BULK_GRACE * 10);
    assert!(!g.stand_aside(), "the post alone hands the transport over");
}

#[test]
fn a_quiet_application_keeps_its_sockets_for_the_longer_handback() {
    let h = Duration::from_millis(40);
    let quiet = h * QUIET_HANDBACKS;
    let g = ProgressGate::new(h);
    assert!(!g.is_quiet(), "not quiet until told");
    g.enter();
    g.leave();
    std::thread::sleep(2 * h);
    assert!(!g.stand_aside(), "one delay after the wait: taken over");
    let g = ProgressGate::new(h);
    g.set_quiet(true);
    g.enter();
    g.leave();
    std::thread::sleep(2 * h);
    let rest = g.aside_for();
    assert!(
        g.stand_aside(),
        "quiet, two delays after the wait: still aside"
    );
    assert!(
        rest > h && rest <= quiet - 2 * h,
        "{rest:?}: the rest of the quiet delay"
    );
    // A look sleeps the rest of the quiet delay, not of one.
    assert!(g.nap() > h, "a quiet look naps past one delay");
    // Something under way again: the plain delay rules at once.
    g.set_quiet(false);
    assert!(!g.stand_aside(), "no longer quiet: taken over");
    // And a quiet application is taken over after the longer delay.
    let g = ProgressGate::new(Duration::from_millis(5));
    g.set_quiet(true);
    g.enter();
    g.leave();
    std::thread::sleep(Duration::from_millis(5) * QUIET_HANDBACKS * 2);
    assert!(!g.stand_aside(), "quiet for sixteen delays: taken over");
}

#[test]
fn a_look_inside_a_wait_naps_the_longer_delay_when_quiet_or_crowded() {
    let h = Duration::from_secs(1);
    let long = h * QUIET_HANDBACKS;
    let plain = ProgressGate::new(h);
    plain.enter();
    assert_eq!(plain.aside_for(), h, "a waiter inside: one delay");
    assert_eq!(plain.nap(), h, "a first look inside a wait naps one delay");
    plain.set_quiet(true);
    assert_eq!(plain.aside_for(), long, "quiet, a waiter inside");
    plain.leave();
    let crowded = ProgressGate::new(h).crowded(true);
    crowded.enter();
    assert_eq!(crowded.aside_for(), long, "crowded, a waiter inside");
    assert_eq!(crowded.nap(), long, "a first look inside a wait naps long");
    crowded.leave();
    // Once the wait is over, the delay after it is the plain one:
    // crowding only spares looks at a thread that drives the sockets.
    let rest = crowded.aside_for();
    assert!(rest <= h && rest > h / 2, "{rest:?} after the leave");
}

#[test]
fn a_look_inside_a_wait_on_a_crowded_host_naps_at_least_the_crowded_nap() {
    // The default delay: sixteen of them are far shorter than the nap.
    let h = Duration::from_micros(200);
    assert!(h * QUIET_HANDBACKS < CROWDED_NAP);
    let crowded = ProgressGate::new(h).crowded(true);
    crowded.enter();
    assert_eq!(crowded.aside_for(), CROWDED_NAP, "crowded, a waiter inside");
    assert_eq!(crowded.nap(), CROWDED_NAP, "a first look inside a wait");
    assert_eq!(crowded.nap(), CROWDED_NAP, "a look inside the same wait");
    crowded.leave();
    let rest = crowded.aside_for();
    assert!(rest <= h, "{rest:?} after the leave: the plain delay");
    // Uncrowded, the same waiter is looked at after one delay.
    let plain = ProgressGate::new(h);
    plain.enter();
    assert_eq!(plain.aside_for(), h);
    plain.leave();
}

#[test]
fn unquiet_wakes_a_thread_asleep_in_the_longer_handback() {
    let h = Duration::from_millis(50);
    let g = std::sync::Arc::new(ProgressGate::new(h));
    g.set_quiet(true);
    g.enter();
    g.leave();
    let pt = {
        let g = g.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            g.park(); // the rest of sixteen delays, unless woken
            t0.elapsed()
        })
    };
    let t0 = Instant::now();
    while !g.sleeping.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < 10 * h, "the thread never parked");
        std::thread::sleep(Duration::from_millis(1));
    }
    g.unquiet();
    let parked = pt.join().expect("progress thread");
    assert!(parked < 8 * h, "slept {parked:?} after unquiet");
    assert!(!g.is_quiet());
    // Not quiet: nothing to wake, no notification.
    g.unquiet();
    assert!(!g.is_quiet());
}

#[test]
fn stop_unparks_at_once() {
    let g = std::sync::Arc::new(ProgressGate::new(Duration::from_secs(60)));
    let g2 = g.clone();
    let t = std::thread::spawn(move || {
        let t0 = Instant::now();
        while !g2.is_stopped() {
            g2.park();
        }
        t0.elapsed()
    });
    std::thread::sleep(Duration::from_millis(20));
    g.stop();
    let took = t.join().unwrap();
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(g.is_stopped());
}
