//! Issue 22: a rank whose application has nothing under way
//! (`portals::NiCore::set_app_quiet`, which the MPI layer keeps) is left
//! alone by its progress thread for `nal_sys::gate::QUIET_HANDBACKS`
//! hand-back delays after its last wait instead of one: a message that
//! arrives while it computes waits for its next call, or for the longer
//! delay, instead of having the progress thread take the sockets over. A
//! rank with a queue of its own waiting to be written is not quiet to its
//! transport, whatever the application says.
//!
//! On a crowded host (more ranks than cores) a progress thread that finds
//! its application waiting in the library naps the longer delay too.
//!
//! The hand-back here is long enough that scheduling noise cannot blur one
//! delay (50 ms) into sixteen (800 ms).

use std::time::{Duration, Instant};

use nal_sys::gate::QUIET_HANDBACKS;
use nal_tcp::TcpConfig;
use nal_udp::UdpConfig;
use portals::*;
use portals_tests::conformance::{
    attach, bind_md, id, job_with, Backend, Node, ProgressMode, Transport, PT,
};

const HANDBACK: Duration = Duration::from_millis(50);
/// The hand-back a quiet rank gets.
const QUIET: Duration = Duration::from_millis(50 * QUIET_HANDBACKS as u64);
/// Longest a rank computes before the test gives up.
const COMPUTE: Duration = Duration::from_secs(10);

/// Rank 0 (`rx`), told it is `quiet`, waits for a go from rank 1, then
/// computes (looks at its event queue without driving the transport)
/// while rank 1 puts 8 bytes into an entry it posted before. Returns how
/// long after the wait's end the put reached rank 0's queue, and the job.
fn arrival_while_computing<C: Transport>(
    rx: C,
    tx: C,
    quiet: bool,
    what: &str,
) -> (Duration, Vec<Node<C>>) {
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    a.ni.core().set_app_quiet(quiet);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    let go_md = attach(&a.ni, id(1), 1, 0, &desc, 8);
    let msg_md = attach(&a.ni, id(1), 2, 0, &desc, 8);
    let beq = b.ni.eq_alloc(8).unwrap();
    let go = bind_md(&b.ni, beq, vec![1; 8]);
    let msg = bind_md(&b.ni, beq, vec![2; 8]);
    // Rank 1 puts the message only once rank 0's wait has ended: sent
    // after a fixed pause instead, a rank 0 kept off the CPUs under a
    // loaded full suite read both puts in its wait, and the message
    // seemed to arrive microseconds after it.
    let (gone, computing) = std::sync::mpsc::channel::<()>();
    let left = std::thread::scope(|sc| {
        sc.spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            b.ni.put(go, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
                .unwrap();
            computing
                .recv_timeout(COMPUTE)
                .expect("rank 0 left its wait");
            // While rank 0 computes.
            std::thread::sleep(Duration::from_millis(20));
            b.ni.put(msg, AckReq::NoAck, &Remote::new(id(0), PT, 2), 0)
                .unwrap();
        });
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        let left = Instant::now();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md), "{what}");
        gone.send(()).expect("rank 1 waits for the end of the wait");
        loop {
            if let Some(ev) = a.ni.eq_get(aeq).unwrap() {
                assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, msg_md), "{what}");
                break left.elapsed();
            }
            assert!(left.elapsed() < COMPUTE, "{what}: the message never came");
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    (left, nodes)
}

/// Over one transport's configurations: a rank that is not quiet has its
/// progress thread take the message about one delay after its wait; a
/// quiet one only after sixteen, and not never. Returns both jobs (not
/// quiet, quiet) for the transport's counters.
fn quiet_waits_for_the_longer_handback<C: Transport>(
    rx: C,
    tx: C,
    what: &str,
) -> (Vec<Node<C>>, Vec<Node<C>>) {
    let (busy, plain) = arrival_while_computing(rx.clone(), tx.clone(), false, what);
    assert!(
        busy < QUIET / 2,
        "{what}: not quiet, the message waited {busy:?}"
    );
    let (after, quiet) = arrival_while_computing(rx, tx, true, what);
    assert!(
        after >= QUIET / 2,
        "{what}: quiet, the progress thread took the message after {after:?}"
    );
    (plain, quiet)
}

#[test]
fn a_quiet_tcp_rank_is_taken_over_only_after_the_longer_handback() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let tx = TcpConfig::variant(backend, ProgressMode::Thread);
        for early_takeover in [false, true] {
            let rx = TcpConfig {
                handback: HANDBACK,
                early_takeover,
                ..tx.clone()
            };
            let what = format!("tcp {backend:?}, early take-over {early_takeover}");
            let (plain, quiet) = quiet_waits_for_the_longer_handback(rx, tx.clone(), &what);
            let (p, q) = (plain[0].nal.stats(), quiet[0].nal.stats());
            assert_eq!(p.quiet_looks, 0, "{what}: {p:?}");
            assert!(q.quiet_looks > 0, "{what}: {q:?}");
            assert_eq!(
                q.watches, 0,
                "{what}: a quiet rank's sockets are not watched: {q:?}"
            );
        }
    }
}

#[test]
fn a_quiet_udp_rank_is_taken_over_only_after_the_longer_handback() {
    for backend in [Backend::Epoll, Backend::IoUring] {
        let tx = UdpConfig::variant(backend, ProgressMode::Thread);
        let rx = UdpConfig {
            handback: HANDBACK,
            ..tx.clone()
        };
        quiet_waits_for_the_longer_handback(rx, tx, &format!("udp {backend:?}"));
    }
}

/// Rank 0, quiet, sleeps into its progress thread's longer hand-back,
/// then puts 32 MiB to rank 1, more than the sockets' buffers hold, and
/// computes: the rest of the put waits in its queue, which only its
/// progress thread can write while it computes. The put completes (its
/// send event) within about one delay, not sixteen: with the write budget
/// (the queue waits for the next pass) and without it (the socket was
/// full).
#[test]
fn a_quiet_tcp_rank_with_a_blocked_write_is_taken_over_after_one_handback() {
    for write_budget in [TcpConfig::default().write_budget, 0] {
        blocked_write_is_carried(write_budget);
    }
}

fn blocked_write_is_carried(write_budget: usize) {
    const BIG: usize = 32 << 20;
    let tx = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    let rx = TcpConfig {
        handback: HANDBACK,
        early_takeover: false,
        write_budget,
        ..tx.clone()
    };
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    a.ni.core().set_app_quiet(true);
    let beq = b.ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(beq);
    let go_md = attach(&b.ni, id(0), 1, 0, &desc, 8);
    let big_md = attach(&b.ni, id(0), 2, 0, &desc, BIG);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let go = bind_md(&a.ni, aeq, vec![1; 8]);
    let big = bind_md(&a.ni, aeq, vec![3; BIG]);
    // One message first, so that the connection is up and rank 0 has
    // waited (its send event) before the big put.
    a.ni.put(go, AckReq::NoAck, &Remote::new(id(1), PT, 1), 0)
        .unwrap();
    let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
    assert_eq!((ev.kind, ev.md_handle), (EventKind::Sent, go), "{ev:?}");
    let ev = b.ni.eq_wait(beq, Some(Duration::from_secs(20))).unwrap();
    assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, go_md), "{ev:?}");
    // Quiet for a while first: the progress thread looks once the plain
    // delay is over and goes to sleep for the rest of the longer one, from
    // which the blocked write must wake it.
    std::thread::sleep(3 * HANDBACK);
    std::thread::scope(|sc| {
        // Rank 1 waits for the big put in the library all along, reading
        // whatever arrives.
        sc.spawn(|| {
            let ev = b.ni.eq_wait(beq, Some(Duration::from_secs(30))).unwrap();
            assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, big_md), "{ev:?}");
        });
        a.ni.put(big, AckReq::NoAck, &Remote::new(id(1), PT, 2), 0)
            .unwrap();
        let left = Instant::now();
        let sent = loop {
            if let Some(ev) = a.ni.eq_get(aeq).unwrap() {
                assert_eq!((ev.kind, ev.md_handle), (EventKind::Sent, big), "{ev:?}");
                break left.elapsed();
            }
            assert!(left.elapsed() < COMPUTE, "the put never left");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(
            sent < QUIET / 2,
            "write budget {write_budget}: a blocked write waited {sent:?} for the quiet hand-back"
        );
    });
}

/// Puts rank 1 makes, one every [`GAP`], while rank 0 waits for each.
const WAITS: usize = 10;
/// Longer than the hand-back delay, so that an uncrowded rank's progress
/// thread looks at least once per wait.
const GAP: Duration = Duration::from_millis(60);

/// Rank 0 waits in the library for each of [`WAITS`] puts that rank 1
/// makes [`GAP`] apart (a rank of a crowded host waiting for descheduled
/// neighbours). Returns how many times rank 0's progress thread woke over
/// those waits, as `wakes` reads its transport's counter.
fn wakeups_over_waits<C: Transport>(rx: C, tx: C, wakes: impl Fn(&Node<C>) -> u64) -> u64 {
    let nodes = job_with(&[rx, tx]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let aeq = a.ni.eq_alloc(4 * WAITS).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(aeq);
    // Room for every put: each lands after the one before.
    let md = attach(&a.ni, id(1), 1, 0, &desc, 8 * (WAITS + 1));
    let beq = b.ni.eq_alloc(4 * WAITS).unwrap();
    let msg = bind_md(&b.ni, beq, vec![1; 8]);
    let put = || {
        b.ni.put(msg, AckReq::NoAck, &Remote::new(id(0), PT, 1), 0)
            .unwrap()
    };
    let wait = || {
        let ev = a.ni.eq_wait(aeq, Some(Duration::from_secs(20))).unwrap();
        assert_eq!((ev.kind, ev.md_handle), (EventKind::Put, md), "{ev:?}");
    };
    // The connection up and rank 0's progress thread settled in its
    // hand-back first.
    put();
    wait();
    let before = wakes(a);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for _ in 0..WAITS {
                std::thread::sleep(GAP);
                put();
            }
        });
        for _ in 0..WAITS {
            wait();
        }
    });
    wakes(a) - before
}

/// On a crowded host (more ranks than cores; `TcpConfig::crowded`,
/// `UdpConfig::crowded`) a progress thread that finds its application
/// waiting in the library naps the longer hand-back instead of one delay:
/// the waiter drives the sockets itself, and each look would be a turn on
/// a core another rank needs. Uncrowded, the same waits have the progress
/// thread look about once per delay.
#[test]
fn a_crowded_rank_waiting_in_the_library_is_not_looked_at_every_handback() {
    let tx = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    let tcp = |crowded| {
        let rx = TcpConfig {
            handback: HANDBACK,
            early_takeover: false,
            crowded,
            ..tx.clone()
        };
        wakeups_over_waits(rx, tx.clone(), |n| n.nal.stats().progress_wakeups)
    };
    let utx = UdpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    let udp = |crowded| {
        let rx = UdpConfig {
            handback: HANDBACK,
            crowded,
            ..utx.clone()
        };
        wakeups_over_waits(rx, utx.clone(), |n| n.nal.stats().progress_looks)
    };
    for (what, looks) in [("tcp", &tcp as &dyn Fn(bool) -> u64), ("udp", &udp)] {
        let (plain, crowded) = (looks(false), looks(true));
        // 10 waits of 60 ms: about one look per 50 ms delay uncrowded; one
        // or two in all crowded (the first look naps 800 ms).
        assert!(
            plain >= WAITS as u64 / 2,
            "{what}: uncrowded, the progress thread woke only {plain} times"
        );
        assert!(
            crowded <= 3,
            "{what}: crowded, the progress thread woke {crowded} times (uncrowded {plain})"
        );
    }
}
