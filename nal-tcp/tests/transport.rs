//! The TCP transport's own behaviour: handshake, connections, write
//! scheduling, liveness. Several interfaces in one process, connected over
//! 127.0.0.1 by real TCP sockets; every test runs for both back ends (epoll,
//! io_uring) and both progress modes (thread, poll); every wait is bounded.
//! What every transport must do (puts and gets of every size, storms,
//! progress, puts to self) is the conformance suite of `portals-tests`
//! (`tests/tests/conformance.rs`), which runs it for TCP too.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nal_tcp::{ConnectMode, ProgressMode, TcpConfig, TcpEndpoint};
use portals::*;
use portals_tests::conformance::{
    a_dead_peer_fails_pending_operations, acknowledged_ping_pong, acknowledged_ping_pong_with,
    attach, bind_md, catch_all, each_process, expect, id, job, job_tuned, job_with, pattern,
    ping_pong, progress_until, put_header, variants, Death, PT, WAIT,
};

/// A put frame: the wire header, then `data`.
fn put_frame(key: u64, src: ProcessId, dst: ProcessId, data: &[u8]) -> Vec<u8> {
    let mut v = put_header(key, src, dst, data.len() as u64).to_vec();
    v.extend_from_slice(data);
    v
}

/// True if the peer closed the stream within a few seconds.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_wrong_job_key_never_reaches_the_engine() {
    for cfg in variants::<TcpConfig>() {
        let nodes = job(1, &cfg);
        let t = &nodes[0];
        let eq = t.ni.eq_alloc(8).unwrap();
        catch_all(&t.ni, eq, 64);
        let intruder = ProcessId::new(0, 66);
        let mut s = TcpStream::connect(t.addr).unwrap();
        s.write_all(&hello(t.key ^ 1, intruder, id(0))).unwrap();
        // Even a frame carrying the right key must not get in.
        let _ = s.write_all(&put_frame(t.key, intruder, id(0), b"evil"));
        let polling = std::thread::scope(|sc| {
            let h = sc.spawn(|| t.ni.eq_wait(eq, Some(Duration::from_millis(500))));
            let closed = closed_by_peer(&mut s);
            (closed, h.join().unwrap())
        });
        assert!(polling.0, "{cfg:?}: the connection must be closed");
        assert_eq!(polling.1, Err(PtlError::Timeout), "no event may be posted");
        assert_eq!(t.nal.stats().handshakes_rejected, 1);
        assert_eq!(t.ni.status().accepted, 0);
        // A stranger that is not even speaking the protocol.
        let mut s = TcpStream::connect(t.addr).unwrap();
        let _ = s.write_all(&[0x47; 40]);
        std::thread::scope(|sc| {
            sc.spawn(|| t.ni.eq_wait(eq, Some(Duration::from_millis(300))));
            assert!(closed_by_peer(&mut s));
        });
        assert_eq!(t.nal.stats().handshakes_rejected, 2);
    }
}

#[test]
fn a_malformed_frame_closes_only_its_connection() {
    for cfg in variants::<TcpConfig>() {
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let beq = b.ni.eq_alloc(64).unwrap();
        catch_all(&b.ni, beq, 1024);
        // A raw client that passes the handshake, delivers one good frame,
        // then garbage.
        let raw = ProcessId::new(0, 9);
        let mut s = TcpStream::connect(b.addr).unwrap();
        s.write_all(&hello(b.key, raw, id(1))).unwrap();
        s.write_all(&put_frame(b.key, raw, id(1), b"good")).unwrap();
        let mut bad = put_frame(b.key, raw, id(1), b"");
        bad[0] = b'X';
        s.write_all(&bad).unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let ev = expect(&b.ni, beq, EventKind::Put);
                assert_eq!((ev.initiator, ev.mlength), (raw, 4));
                // The healthy peer still gets through afterwards.
                let ev = expect(&b.ni, beq, EventKind::Put);
                assert_eq!(ev.initiator, id(0));
            });
            // Skip the 32-byte Accept, then expect the close.
            let mut acc = [0u8; 32];
            s.read_exact(&mut acc).unwrap();
            assert_eq!(acc[6], 2, "accepted");
            assert!(closed_by_peer(&mut s));
            let aeq = a.ni.eq_alloc(8).unwrap();
            let src = bind_md(&a.ni, aeq, b"fine".to_vec());
            a.ni.put(src, AckReq::NoAck, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
            expect(&a.ni, aeq, EventKind::Sent);
        });
        assert_eq!(b.nal.stats().malformed_frames, 1, "{cfg:?}");
        assert_eq!(b.ni.status().dropped_bad_header, 1);
    }
}

/// Every process of `nodes` puts `rounds` acknowledged messages to each of
/// the others, all at once; every put, send and acknowledgment completes
/// without failure.
fn exchange(nodes: &[Node], rounds: usize) {
    let n = nodes.len();
    each_process(nodes, |me, node, start| {
        let ni = &node.ni;
        let eq = ni.eq_alloc(64).unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq);
        attach(ni, ProcessId::ANY, 0, 0, &desc, 64);
        let src = bind_md(ni, eq, vec![me as u8; 8]);
        start.wait();
        for _ in 0..rounds {
            for dst in (0..n).filter(|&d| d != me) {
                ni.put(src, AckReq::Ack, &Remote::new(id(dst), PT, 0), 0)
                    .unwrap();
            }
        }
        let each = rounds * (n - 1);
        let mut seen = (0, 0, 0);
        while seen != (each, each, each) {
            let ev = ni.eq_wait(eq, WAIT).expect("event");
            assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
            match ev.kind {
                EventKind::Put => seen.0 += 1,
                EventKind::Sent => seen.1 += 1,
                EventKind::Ack => seen.2 += 1,
                _ => {}
            }
        }
        eq
    });
}

#[test]
fn simultaneous_connects_leave_exactly_one_connection() {
    for cfg in variants::<TcpConfig>() {
        for _round in 0..10 {
            let nodes = job(2, &cfg);
            // Both connect at once (lazily, on their first puts).
            exchange(&nodes, 4);
            for n in &nodes {
                assert_eq!(n.nal.established(), 1, "{cfg:?}: one connection per pair");
            }
        }
    }
}

#[test]
fn a_dead_peer_fails_pending_operations_in_bounded_time() {
    for cfg in variants::<TcpConfig>() {
        // The target never makes progress, so the big put is certainly
        // still in flight when it dies.
        let within = Duration::from_secs(10);
        let dead = a_dead_peer_fails_pending_operations(&cfg, 64 << 20, Death::InFlight, within);
        // The send fails first, then the awaited acknowledgment.
        assert_eq!(
            dead.failed,
            vec![EventKind::Sent, EventKind::Ack],
            "{cfg:?}"
        );
        // The target never accepted (it never ran), so this counts as a
        // failed connection attempt.
        let a = &dead.a;
        let st = a.nal.stats();
        assert_eq!(st.connections_lost + st.connects_failed, 1, "{st:?}");
        // Talking to it again fails cleanly too (connection refused).
        let ev = dead.put_again(within);
        assert_eq!(ev.kind, EventKind::Sent, "{cfg:?} {:?}", a.nal.stats());
        let after = a.nal.stats();
        assert_eq!(after.connects_failed, st.connects_failed + 1, "{after:?}");
    }
}

/// Collect `ni`'s events on `eq` (driving its progress, which polling mode
/// needs) until `stop` is set.
fn collect_events(ni: &NetworkInterface, eq: EqHandle, stop: &AtomicBool) -> Vec<Event> {
    let mut v = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match ni.eq_wait(eq, Some(Duration::from_millis(20))) {
            Ok(ev) => v.push(ev),
            Err(PtlError::Timeout) => {}
            Err(e) => panic!("{e}"),
        }
    }
    v
}

#[test]
fn a_replaced_connection_never_continues_a_partly_written_message() {
    const BIG: usize = 16 << 20;
    for cfg in variants::<TcpConfig>() {
        // Small socket buffers: most of the big put stays queued.
        let cfg = TcpConfig {
            send_buffer: Some(64 << 10),
            ..cfg
        };
        let nodes = job(1, &cfg);
        let a = &nodes[0];
        // A raw peer that passes the handshake and never reads.
        let raw = id(1);
        let aeq = a.ni.eq_alloc(64).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let events = s.spawn(|| collect_events(&a.ni, aeq, &stop));
            // (`events` drives a's progress meanwhile.)
            let _c1 = raw_handshake(a, raw);
            let big = bind_md(&a.ni, aeq, pattern(BIG, 1));
            a.ni.put(big, AckReq::Ack, &Remote::new(raw, PT, 0), 0)
                .unwrap();
            // The put started on the first connection (written
            // optimistically by `put` itself) and cannot finish there.
            let sent = a.nal.stats().bytes_sent;
            assert!(
                sent > 0 && sent < BIG as u64,
                "{cfg:?}: {sent} bytes of the big put written"
            );
            // The peer comes back on a new connection (it gave the first
            // one up, as a peer whose connection broke does).
            let mut c2 = raw_handshake(a, raw);
            let small = bind_md(&a.ni, aeq, b"after".to_vec());
            a.ni.put(small, AckReq::NoAck, &Remote::new(raw, PT, 0), 0x77)
                .unwrap();
            // The new connection starts on a frame boundary: the first bytes
            // after the Accept are a whole header, not the rest of the big
            // payload.
            let mut head = [0u8; wire::HEADER_LEN];
            c2.read_exact(&mut head).unwrap();
            let h = wire::Header::decode(&head).unwrap_or_else(|e| {
                panic!("{cfg:?}: the new connection carried no header but {e}")
            });
            assert_eq!(
                (h.op, h.rlength, h.hdr_data),
                (wire::Op::Put, 5, 0x77),
                "{cfg:?}"
            );
            let mut body = [0u8; 5];
            c2.read_exact(&mut body).unwrap();
            assert_eq!(&body, b"after");
            // The big put failed visibly: its send and its awaited ack.
            let t0 = Instant::now();
            while a.nal.stats().connections_lost == 0 && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::SeqCst);
            let evs = events.join().unwrap();
            let of = |md: MdHandle, kind: EventKind| {
                evs.iter()
                    .find(|e| e.md_handle == md && e.kind == kind)
                    .map(|e| e.fail)
            };
            assert_eq!(
                of(big, EventKind::Sent),
                Some(FailType::Unreachable),
                "{cfg:?}: {evs:?}"
            );
            assert_eq!(
                of(big, EventKind::Ack),
                Some(FailType::Unreachable),
                "{cfg:?}: {evs:?}"
            );
            assert_eq!(of(small, EventKind::Sent), Some(FailType::Ok), "{evs:?}");
            // The new connection is the one in use (checked while it is
            // open: a progress thread notices its close at once).
            assert_eq!(a.nal.stats().connections_lost, 1);
            assert_eq!(a.nal.established(), 1, "{cfg:?}");
        });
    }
}

/// [`raw_handshake`], driving `node`'s progress meanwhile, which polling
/// mode needs.
fn raw_peer(node: &Node, me: ProcessId) -> TcpStream {
    let accepted = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            progress_until(&[&node.ni], Duration::from_secs(20), "handshake", || {
                accepted.load(Ordering::SeqCst)
            })
        });
        // (A failed handshake stops the progress loop before it fails.)
        let c = panic::catch_unwind(AssertUnwindSafe(|| raw_handshake(node, me)));
        accepted.store(true, Ordering::SeqCst);
        c.unwrap_or_else(|p| panic::resume_unwind(p))
    })
}

#[test]
fn a_large_stream_to_one_peer_does_not_starve_another() {
    const BIG: usize = 64 << 20;
    for cfg in variants::<TcpConfig>() {
        let nodes = job(1, &cfg);
        let a = &nodes[0];
        let (b, c) = (id(1), id(2));
        let aeq = a.ni.eq_alloc(64).unwrap();
        // a takes b's small puts into a descriptor that reports to the
        // same event queue as the stream, so the queue's order tells what
        // came first.
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(aeq);
        let inbox = attach(&a.ni, b, 0, 0, &desc, 8);
        let big = bind_md(&a.ni, aeq, pattern(BIG, 3));
        // b and c are raw peers: b's message is written exactly when the
        // test says, and c reads as fast as a core can, so the stream to it
        // seldom waits for socket space (a writer that stops only when the
        // socket is full would then write all 64 MB in one go).
        let mut bs = raw_peer(a, b);
        let cs = raw_peer(a, c);
        cs.set_nonblocking(true).unwrap();
        let order = std::thread::scope(|s| {
            s.spawn(|| {
                let mut cs = &cs;
                let mut buf = vec![0u8; 4 << 20];
                let mut left = wire::HEADER_LEN + BIG;
                let t0 = Instant::now();
                while left > 0 {
                    assert!(t0.elapsed() < Duration::from_secs(120), "c: stream stalled");
                    match cs.read(&mut buf) {
                        Ok(0) => panic!("a closed the connection to c"),
                        Ok(n) => left -= n.min(left),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::hint::spin_loop()
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => panic!("c: {e}"),
                    }
                }
            });
            // The stream starts (its first part written by `put` itself)...
            a.ni.put(big, AckReq::NoAck, &Remote::new(c, PT, 0), 0)
                .unwrap();
            // ... and b's small put is in a's socket right after: loopback
            // delivers it before `write` returns.
            bs.write_all(&put_frame(a.key, b, id(0), b"tick")).unwrap();
            let mut order = Vec::new();
            loop {
                let ev = a.ni.eq_wait(aeq, WAIT).expect("event");
                assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
                order.push((ev.kind, ev.md_handle));
                if ev.kind == EventKind::Sent {
                    break;
                }
            }
            order
        });
        // The writer goes back to the other connections every
        // `write_budget` bytes, so b's put is taken while most of the
        // 64 MB are still to go, not after the last byte.
        assert_eq!(
            order,
            vec![(EventKind::Put, inbox), (EventKind::Sent, big)],
            "{cfg:?}: {:?}",
            a.nal.stats()
        );
        assert!(a.nal.stats().writes_deferred > 0);
        let mut got = [0u8; 4];
        a.ni.md_read(inbox, 0, &mut got).unwrap();
        assert_eq!(&got, b"tick");
    }
}

#[test]
fn a_peer_that_restarts_at_the_same_address_is_reached_again() {
    for cfg in variants::<TcpConfig>() {
        let mut nodes = job(2, &cfg);
        let b = nodes.pop().unwrap();
        let a = nodes.pop().unwrap();
        let (key, b_addr) = (b.key, b.addr);
        let aeq = a.ni.eq_alloc(16).unwrap();
        // One acknowledged put to whichever process is `b` now; the target's
        // thread waits for it (which drives progress in polling mode).
        let put_to_b = |b: &Node, seed: u8| {
            let beq = b.ni.eq_alloc(8).unwrap();
            let desc = MdDesc::new(MdOptions::OP_PUT).eq(beq);
            let tmd = attach(&b.ni, ProcessId::ANY, 0, 0, &desc, 1000);
            let data = pattern(1000, seed);
            let src = bind_md(&a.ni, aeq, data.clone());
            std::thread::scope(|s| {
                s.spawn(|| expect(&b.ni, beq, EventKind::Put));
                a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
                    .unwrap();
                let sent = expect(&a.ni, aeq, EventKind::Sent);
                let ack = expect(&a.ni, aeq, EventKind::Ack);
                assert_eq!(
                    (sent.fail, ack.fail),
                    (FailType::Ok, FailType::Ok),
                    "{cfg:?}"
                );
            });
            let mut got = vec![0; 1000];
            b.ni.md_read(tmd, 0, &mut got).unwrap();
            assert!(got == data);
        };
        put_to_b(&b, 1);
        // b dies; a sees its connection end.
        drop(b);
        // The connection is marked closed before the loss is counted, by
        // whichever thread saw it: wait for both.
        progress_until(&[&a.ni], Duration::from_secs(20), "connection loss", || {
            a.nal.established() == 0 && a.nal.stats().connections_lost > 0
        });
        assert_eq!(a.nal.stats().connections_lost, 1, "{cfg:?}");
        // b comes back: same process id, same address, new process state.
        let t0 = Instant::now();
        let ep = loop {
            match TcpEndpoint::bind(TcpConfig {
                bind: b_addr,
                ..cfg.clone()
            }) {
                Ok(ep) => break ep,
                Err(e) if t0.elapsed() < Duration::from_secs(5) => {
                    eprintln!("rebinding {b_addr}: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("could not listen at {b_addr} again: {e}"),
            }
        };
        let b2 = Node::start(ep, key, 1, &[(id(0), a.addr)]);
        // The next send connects again and is delivered.
        put_to_b(&b2, 2);
        let st = a.nal.stats();
        assert_eq!(st.connections_initiated, 2, "{cfg:?}: {st:?}");
        assert_eq!(a.nal.established(), 1);
    }
}

#[test]
fn eager_mode_connects_every_pair_at_start_and_carries_traffic() {
    const N: usize = 3;
    for cfg in variants::<TcpConfig>() {
        let cfg = TcpConfig {
            connect: ConnectMode::Eager,
            ..cfg
        };
        let nodes = job(N, &cfg);
        let nis: Vec<&NetworkInterface> = nodes.iter().map(|n| &n.ni).collect();
        // Every pair is connected without a single send (in polling mode,
        // as soon as the library is called).
        progress_until(&nis, Duration::from_secs(20), "eager set-up", || {
            nodes.iter().all(|n| n.nal.established() == N - 1)
        });
        for (i, n) in nodes.iter().enumerate() {
            let st = n.nal.stats();
            // Each process connects to the larger ids only: no simultaneous
            // connects to resolve.
            assert_eq!(
                st.connections_initiated,
                (N - 1 - i) as u64,
                "{cfg:?} {i}: {st:?}"
            );
            assert_eq!(st.connections_accepted, i as u64, "{cfg:?} {i}: {st:?}");
            assert_eq!(st.duplicates_resolved + st.connects_failed, 0, "{st:?}");
        }
        // Traffic uses those connections.
        exchange(&nodes, 1);
        for (i, n) in nodes.iter().enumerate() {
            let st = n.nal.stats();
            assert_eq!(
                st.connections_initiated + st.connections_accepted,
                (N - 1) as u64,
                "{cfg:?} {i}: traffic opened no new connection: {st:?}"
            );
            assert_eq!(n.nal.established(), N - 1);
        }
    }
}

#[test]
fn a_silent_polling_peer_is_not_declared_dead() {
    for cfg in variants::<TcpConfig>() {
        // a would give up on a silent peer with a progress thread after
        // 300 ms; b polls, so its silence while it computes is legitimate.
        let a_cfg = TcpConfig {
            peer_timeout: Some(Duration::from_millis(300)),
            ..cfg.clone()
        };
        let b_cfg = TcpConfig {
            progress: ProgressMode::Poll,
            ..TcpConfig::default()
        };
        let nodes = job_with(&[a_cfg, b_cfg]);
        let (a, b) = (&nodes[0], &nodes[1]);
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE);
        attach(&b.ni, ProcessId::ANY, 0, 0, &desc, 8);
        let aeq = a.ni.eq_alloc(16).unwrap();
        let src = bind_md(&a.ni, aeq, vec![5; 8]);
        let to_b = Remote::new(id(1), PT, 0);
        // b calls the library (drives its progress) until a's put is
        // acknowledged.
        let acked = |what: &str| {
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    progress_until(&[&b.ni], Duration::from_secs(20), what, || {
                        done.load(Ordering::SeqCst)
                    })
                });
                let ack = expect(&a.ni, aeq, EventKind::Ack);
                assert_eq!(ack.fail, FailType::Ok, "{cfg:?} {what}");
                done.store(true, Ordering::SeqCst);
            });
        };
        let round = |what: &str| {
            a.ni.put(src, AckReq::Ack, &to_b, 0).unwrap();
            acked(what);
        };
        // The connection is up and b answered once.
        round("first put");
        // b computes without calling the library for 5 × a's peer timeout.
        a.ni.put(src, AckReq::Ack, &to_b, 0).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(1500) {
            match a.ni.eq_wait(aeq, Some(Duration::from_millis(100))) {
                Ok(ev) => assert!(
                    ev.kind == EventKind::Sent && ev.fail == FailType::Ok,
                    "{cfg:?}: {ev:?} while b was silent"
                ),
                Err(PtlError::Timeout) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let st = a.nal.stats();
        assert_eq!(
            (st.peers_timed_out, st.probes_sent),
            (0, 0),
            "{cfg:?}: {st:?}"
        );
        assert_eq!(a.nal.established(), 1);
        // b calls the library again: the waiting put is acknowledged.
        acked("late ack");
        round("after the silence");
    }
}

#[test]
fn a_waiting_thread_reads_the_connection_of_the_last_answer_directly() {
    for cfg in variants::<TcpConfig>() {
        // Each waiter spins (yielding, for the 2-core CI machine) for as
        // long as the round takes: with the default 50 µs window a loaded
        // machine that descheduled the peer sent every waiter to sleep
        // before its answer came, and the poller read them all.
        let nodes = job_tuned(&[cfg.clone(), cfg.clone()], &|ni| {
            ni.wait_spin = Duration::from_secs(5);
            ni.wait_yield = true;
        });
        const ROUNDS: usize = 200;
        let hot_before: Vec<u64> = nodes.iter().map(|n| n.nal.stats().hot_reads).collect();
        // Every answer comes back on the connection its request left on.
        ping_pong(&nodes, ROUNDS);
        for (n, before) in nodes.iter().zip(hot_before) {
            let st = n.nal.stats();
            assert!(
                st.hot_reads > before,
                "{cfg:?}: no answer was read without the poller: {st:?}"
            );
        }
    }
}

/// How many of `socks` the other side has closed (non-blocking look).
fn count_closed(socks: &[TcpStream]) -> usize {
    socks
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 64];
            match (&mut &**s).read(&mut b) {
                Ok(0) => true,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                Ok(_) => false,
            }
        })
        .count()
}

/// Drive `node` (poll mode needs a caller) until `done` or `limit`.
fn drive_until(node: &Node, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let eq = node.ni.eq_alloc(4).unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if done() {
            return true;
        }
        let _ = node.ni.eq_wait(eq, Some(Duration::from_millis(20)));
    }
    done()
}

#[test]
fn connections_that_never_send_a_handshake_are_closed_at_the_deadline() {
    for cfg in variants::<TcpConfig>() {
        let cfg = TcpConfig {
            handshake_timeout: Duration::from_millis(300),
            ..cfg
        };
        let nodes = job(1, &cfg);
        let t = &nodes[0];
        let idle: Vec<TcpStream> = (0..20)
            .map(|_| TcpStream::connect(t.addr).unwrap())
            .collect();
        let all_closed = drive_until(t, Duration::from_secs(20), || count_closed(&idle) == 20);
        assert!(all_closed, "{cfg:?}: {} of 20 closed", count_closed(&idle));
        assert_eq!(t.nal.stats().handshakes_timed_out, 20, "{cfg:?}");
        assert_eq!(t.nal.stats().handshakes_rejected, 0, "{cfg:?}");
    }
}

#[test]
fn a_flood_of_idle_connections_is_capped_and_real_peers_still_get_in() {
    for cfg in variants::<TcpConfig>() {
        const CAP: usize = 8;
        const FLOOD: usize = 100;
        let cfg = TcpConfig {
            max_pending_handshakes: CAP,
            handshake_timeout: Duration::from_secs(120),
            ..cfg
        };
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let flood: Vec<TcpStream> = (0..FLOOD)
            .map(|_| TcpStream::connect(b.addr).unwrap())
            .collect();
        // The deadline is far off: only the cap closes them.
        let capped = drive_until(b, Duration::from_secs(20), || {
            count_closed(&flood) >= FLOOD - CAP
        });
        let closed = count_closed(&flood);
        assert!(capped, "{cfg:?}: {closed} of {FLOOD} closed");
        // Exactly the cap stays: (roughly) the newest, as the progress
        // thread and a waiter may each accept a few at once.
        assert_eq!(closed, FLOOD - CAP, "{cfg:?}: {CAP} wait on");
        assert_eq!(b.nal.stats().handshakes_evicted, (FLOOD - CAP) as u64);
        // A member of the job still connects and delivers.
        let beq = b.ni.eq_alloc(8).unwrap();
        catch_all(&b.ni, beq, 64);
        let aeq = a.ni.eq_alloc(8).unwrap();
        let src = bind_md(&a.ni, aeq, b"through".to_vec());
        a.ni.put(src, AckReq::NoAck, &Remote::new(id(1), PT, 0), 0)
            .unwrap();
        std::thread::scope(|sc| {
            // a drives its side of the connection (poll mode needs it).
            sc.spawn(|| expect(&a.ni, aeq, EventKind::Sent));
            let ev = expect(&b.ni, beq, EventKind::Put);
            assert_eq!((ev.initiator, ev.mlength), (id(0), 7), "{cfg:?}");
        });
    }
}

/// A peer whose last message and end of file arrive together, while
/// nobody reads (one readiness edge for both), and then another peer's
/// message (so the first is not the connection a waiter reads first): the
/// message is delivered and the first peer is then known to have gone. A
/// short read that was trusted to have emptied the socket skipped the end
/// of file, and a survivor waiting for that peer never learned it left.
#[test]
fn a_last_message_and_end_of_file_in_one_edge_are_both_seen() {
    for cfg in variants::<TcpConfig>() {
        let cfg = TcpConfig {
            progress: ProgressMode::Poll,
            ..cfg
        };
        let nodes = job(2, &cfg);
        let (t, b) = (&nodes[0], &nodes[1]);
        let eq = t.ni.eq_alloc(8).unwrap();
        catch_all(&t.ni, eq, 64);
        let raw = ProcessId::new(0, 9);
        let mut s = raw_peer(t, raw);
        let beq = b.ni.eq_alloc(8).unwrap();
        let src = bind_md(&b.ni, beq, b"later".to_vec());
        let to_t = Remote::new(id(0), PT, 0);
        // Connect b (both sides driven), then let everything arrive while
        // t does not poll: the raw peer's frame and end of file, then b's.
        std::thread::scope(|sc| {
            sc.spawn(|| expect(&b.ni, beq, EventKind::Sent));
            b.ni.put(src, AckReq::NoAck, &to_t, 0).unwrap();
            expect(&t.ni, eq, EventKind::Put);
        });
        s.write_all(&put_frame(t.key, raw, id(0), b"last words"))
            .unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        b.ni.put(src, AckReq::NoAck, &to_t, 0).unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| expect(&b.ni, beq, EventKind::Sent));
            std::thread::sleep(Duration::from_millis(50));
            let mut from = vec![expect(&t.ni, eq, EventKind::Put).initiator];
            from.push(expect(&t.ni, eq, EventKind::Put).initiator);
            from.sort();
            assert_eq!(from, [id(1), raw], "{cfg:?}");
        });
        let gone = drive_until(t, Duration::from_secs(10), || {
            t.ni.failed_peers().contains(&raw)
        });
        assert!(gone, "{cfg:?}: the end of file was never read");
    }
}

/// A put asking for an acknowledgment, answered by a put the target's
/// application sends as soon as it sees the first: the acknowledgment is
/// held back and leaves in the same write as the answer (one segment
/// instead of two on a round trip's critical path), and the initiator
/// still gets both, the acknowledgment first.
#[test]
fn an_acknowledgment_leaves_with_the_next_message_to_its_peer() {
    // With a progress thread only (polling mode sends it at once: see
    // `a_peer_that_restarts_at_the_same_address_is_reached_again`).
    for cfg in variants::<TcpConfig>()
        .into_iter()
        .filter(|c| c.progress == ProgressMode::Thread)
    {
        let nodes = job(2, &cfg);
        const ROUNDS: u64 = 20;
        // Asserts the acknowledgment first, every round.
        acknowledged_ping_pong(&nodes, ROUNDS as usize);
        let st = nodes[1].nal.stats();
        assert!(
            // At least one: on a loaded machine the progress thread may
            // read some puts while the application is descheduled, and
            // flush their acknowledgments on its next pass.
            st.acks_coalesced >= 1,
            "{cfg:?}: {} of {ROUNDS} acknowledgments left with the answer: {st:?}",
            st.acks_coalesced
        );
    }
}

/// Without a progress thread an ordinary acknowledgment leaves at once (the
/// call that read its put may be the target's last), but a lazy one
/// (`AckReq::Lazy`) stays queued and shares the write of the target's
/// answer: one `sendmsg` per round trip's half instead of two. The
/// initiator still gets the acknowledgment before the answer.
#[test]
fn a_lazy_acknowledgment_leaves_with_the_answer_even_without_a_progress_thread() {
    for cfg in variants::<TcpConfig>()
        .into_iter()
        .filter(|c| c.progress == ProgressMode::Poll)
    {
        const ROUNDS: u64 = 20;
        let nodes = job(2, &cfg);
        acknowledged_ping_pong_with(&nodes, ROUNDS as usize, AckReq::Ack, true);
        let eager = nodes[1].nal.stats().acks_coalesced;
        assert_eq!(eager, 0, "{cfg:?}: an ordinary acknowledgment waited");
        let nodes = job(2, &cfg);
        acknowledged_ping_pong_with(&nodes, ROUNDS as usize, AckReq::Lazy, true);
        let st = nodes[1].nal.stats();
        // The target's application answers right after the wait that read
        // the put, with no pass in between: each acknowledgment is still
        // held when the answer is written. Half is the margin for a pass
        // that found the hold expired on a loaded machine.
        assert!(
            st.acks_coalesced >= ROUNDS / 2,
            "{cfg:?}: {} of {ROUNDS} lazy acknowledgments left with the answer: {st:?}",
            st.acks_coalesced
        );
    }
}
