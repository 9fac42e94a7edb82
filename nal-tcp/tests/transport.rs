//! Several interfaces in one process, connected over 127.0.0.1 by real TCP
//! sockets. Every test runs for both back ends (epoll, io_uring) and both
//! progress modes (thread, poll); every wait is bounded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nal_tcp::{Backend, ConnectMode, ProgressMode, TcpConfig, TcpEndpoint, TcpNal};
use portals::*;

/// Tests run in parallel in one process and ports get reused, so every job
/// has its own key: a connection that reaches another test's listener is
/// refused by the handshake, as it would be between real jobs.
fn fresh_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (std::process::id() as u64) << 32 | n
}
const PT: PortalIndex = PortalIndex(5);
const T: Option<Duration> = Some(Duration::from_secs(30));

/// `PTL_LOG=nal_tcp=trace cargo test ...` shows what the transport does.
fn logging() {
    if let Ok(f) = tracing_subscriber::EnvFilter::try_from_env("PTL_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(f)
            .with_test_writer()
            .try_init();
    }
}

fn configs() -> Vec<TcpConfig> {
    logging();
    let mut v = Vec::new();
    for backend in [Backend::Epoll, Backend::IoUring] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            v.push(TcpConfig {
                backend,
                progress,
                ..TcpConfig::default()
            });
        }
    }
    v
}

fn id(i: usize) -> ProcessId {
    ProcessId::new(0, i as u32)
}

struct Node {
    key: u64,
    ni: NetworkInterface,
    nal: Arc<TcpNal>,
    addr: SocketAddr,
}

fn job(n: usize, cfg: &TcpConfig) -> Vec<Node> {
    job_with(&vec![cfg.clone(); n])
}

/// A job whose processes may use different configurations.
fn job_with(cfgs: &[TcpConfig]) -> Vec<Node> {
    let key = fresh_key();
    let eps: Vec<TcpEndpoint> = cfgs
        .iter()
        .map(|c| TcpEndpoint::bind(c.clone()).unwrap())
        .collect();
    let addrs: Vec<(ProcessId, SocketAddr)> = eps
        .iter()
        .enumerate()
        .map(|(i, e)| (id(i), e.local_addr()))
        .collect();
    eps.into_iter()
        .enumerate()
        .map(|(i, ep)| start(ep, key, i, &addrs))
        .collect()
}

/// Process `i` of job `key`, serving the bound endpoint `ep`.
fn start(ep: TcpEndpoint, key: u64, i: usize, peers: &[(ProcessId, SocketAddr)]) -> Node {
    let addr = ep.local_addr();
    let mut nal = None;
    let ni = NetworkInterface::init(NiConfig::new(id(i), key), |core| {
        let n = ep.start(core, peers.to_vec())?;
        nal = Some(n.clone());
        Ok(n as Arc<dyn Nal>)
    })
    .unwrap();
    Node {
        key,
        ni,
        nal: nal.unwrap(),
        addr,
    }
}

/// Call `ni.progress()` until `done` holds; panics after `limit`. (In
/// polling mode nothing moves without such calls.)
fn progress_until(nis: &[&NetworkInterface], limit: Duration, what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        for ni in nis {
            ni.progress().unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Wait for an event of `kind`, skipping others; panics on timeout.
fn expect(ni: &NetworkInterface, eq: EqHandle, kind: EventKind) -> Event {
    loop {
        let ev = ni.eq_wait(eq, T).expect("event before the timeout");
        if ev.kind == kind {
            return ev;
        }
    }
}

#[test]
fn puts_and_gets_of_every_size_arrive_byte_exact() {
    const SIZES: [usize; 8] = [0, 1, 88, 1000, 65_536, 100_003, 1 << 20, 16 << 20];
    for cfg in configs() {
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let beq = b.ni.eq_alloc(256).unwrap();
        let me =
            b.ni.me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
                .unwrap();
        let tmd =
            b.ni.md_attach(
                me,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE)
                    .eq(beq),
                vec![0; 16 << 20],
                Unlink::Retain,
            )
            .unwrap();
        std::thread::scope(|s| {
            // The target only waits for events (which is what drives
            // progress in polling mode).
            s.spawn(|| {
                for _ in 0..SIZES.len() {
                    expect(&b.ni, beq, EventKind::Put);
                    expect(&b.ni, beq, EventKind::Get);
                }
            });
            let aeq = a.ni.eq_alloc(64).unwrap();
            for (k, &len) in SIZES.iter().enumerate() {
                let data = pattern(len, k as u8);
                let src =
                    a.ni.md_bind(&MdDesc::default().eq(aeq), data.clone(), Unlink::Retain)
                        .unwrap();
                a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 1), 7)
                    .unwrap();
                let sent = expect(&a.ni, aeq, EventKind::Sent);
                assert_eq!(sent.fail, FailType::Ok);
                let ack = expect(&a.ni, aeq, EventKind::Ack);
                assert_eq!(
                    (ack.mlength, ack.fail),
                    (len as u64, FailType::Ok),
                    "{cfg:?} {len}"
                );
                let back =
                    a.ni.md_bind(&MdDesc::default().eq(aeq), vec![0xee; len], Unlink::Retain)
                        .unwrap();
                a.ni.get(back, &Remote::new(id(1), PT, 1)).unwrap();
                let reply = expect(&a.ni, aeq, EventKind::Reply);
                assert_eq!((reply.mlength, reply.fail), (len as u64, FailType::Ok));
                let got = a.ni.md_unlink(back).unwrap().unwrap();
                assert!(got == data, "{cfg:?}: {len} bytes came back different");
                a.ni.md_unlink(src).unwrap();
            }
        });
        let mut head = vec![0u8; 4096];
        b.ni.md_read(tmd, 0, &mut head).unwrap();
        assert_eq!(head, pattern(16 << 20, 7)[..4096].to_vec());
        assert_eq!(b.ni.status().dropped_bad_header, 0);
    }
}

#[test]
fn all_to_all_storm_of_small_puts() {
    const N: usize = 4;
    const EACH: usize = 300;
    for cfg in configs() {
        let nodes = job(N, &cfg);
        let barrier = Barrier::new(N);
        std::thread::scope(|s| {
            for (me, node) in nodes.iter().enumerate() {
                let barrier = &barrier;
                s.spawn(move || {
                    let ni = &node.ni;
                    let eq = ni.eq_alloc(8192).unwrap();
                    // One ME per source, so each source's messages pack in order.
                    let mut inbox = Vec::new();
                    for src in 0..N {
                        let m = ni
                            .me_attach(PT, id(src), 0, 0, Unlink::Retain, Position::After)
                            .unwrap();
                        inbox.push(
                            ni.md_attach(
                                m,
                                &MdDesc::new(MdOptions::OP_PUT).eq(eq),
                                vec![0; EACH * 8],
                                Unlink::Retain,
                            )
                            .unwrap(),
                        );
                    }
                    let out = ni
                        .md_bind(
                            &MdDesc::default().eq(eq),
                            vec![0; EACH * 8 * N],
                            Unlink::Retain,
                        )
                        .unwrap();
                    for i in 0..EACH * N {
                        ni.md_write(
                            out,
                            i as u64 * 8,
                            &((me * 1_000_000 + i) as u64).to_le_bytes(),
                        )
                        .unwrap();
                    }
                    barrier.wait();
                    for i in 0..EACH {
                        for dst in 0..N {
                            if dst != me {
                                let slot = (i * N + dst) as u64 * 8;
                                ni.put_region(
                                    out,
                                    slot,
                                    8,
                                    AckReq::NoAck,
                                    &Remote::new(id(dst), PT, 0),
                                    0,
                                )
                                .unwrap();
                            }
                        }
                    }
                    let (mut puts, mut sents) = (0, 0);
                    while puts < EACH * (N - 1) || sents < EACH * (N - 1) {
                        match ni.eq_wait(eq, T).expect("storm event").kind {
                            EventKind::Put => puts += 1,
                            EventKind::Sent => sents += 1,
                            k => panic!("unexpected {k:?}"),
                        }
                    }
                    barrier.wait();
                    for (src, md) in inbox.iter().enumerate() {
                        if src == me {
                            continue;
                        }
                        let mut got = vec![0u8; EACH * 8];
                        ni.md_read(*md, 0, &mut got).unwrap();
                        for i in 0..EACH {
                            let v = u64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
                            assert_eq!(
                                v,
                                (src * 1_000_000 + i * N + me) as u64,
                                "order from {src}"
                            );
                        }
                    }
                    // Keep serving until everyone has checked.
                    barrier.wait();
                });
            }
        });
    }
}

#[test]
fn progress_happens_while_the_target_never_calls_the_library() {
    for cfg in configs() {
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let me =
            b.ni.me_attach(PT, ProcessId::ANY, 3, 0, Unlink::Retain, Position::After)
                .unwrap();
        let tmd =
            b.ni.md_attach(
                me,
                &MdDesc::new(MdOptions::OP_PUT),
                vec![0; 4 << 20],
                Unlink::Retain,
            )
            .unwrap();
        let data = pattern(4 << 20, 9);
        let aeq = a.ni.eq_alloc(8).unwrap();
        let src =
            a.ni.md_bind(&MdDesc::default().eq(aeq), data.clone(), Unlink::Retain)
                .unwrap();
        // The target does nothing at all from here on: no library call.
        let started = Instant::now();
        a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 3), 0)
            .unwrap();
        let acked = (|| loop {
            match a.ni.eq_wait(aeq, Some(Duration::from_millis(1500))) {
                Ok(ev) if ev.kind == EventKind::Ack => return Some(started.elapsed()),
                Ok(_) => continue,
                Err(PtlError::Timeout) => return None,
                Err(e) => panic!("{e}"),
            }
        })();
        match cfg.progress {
            ProgressMode::Thread => {
                let t = acked.expect("acknowledged while the target computed");
                assert!(t < Duration::from_millis(1500));
                // The data is already in the target's memory.
                let mut got = vec![0u8; 4 << 20];
                b.ni.md_read(tmd, 0, &mut got).unwrap();
                assert!(got == data);
            }
            ProgressMode::Poll => {
                assert!(
                    acked.is_none(),
                    "polling mode must not progress without calls"
                );
            }
        }
    }
}

fn hello(key: u64, src: ProcessId, dst: ProcessId) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..4].copy_from_slice(b"PTLH");
    b[4..6].copy_from_slice(&1u16.to_le_bytes());
    b[6] = 1;
    b[8..16].copy_from_slice(&key.to_le_bytes());
    b[16..20].copy_from_slice(&src.nid.to_le_bytes());
    b[20..24].copy_from_slice(&src.pid.to_le_bytes());
    b[24..28].copy_from_slice(&dst.nid.to_le_bytes());
    b[28..32].copy_from_slice(&dst.pid.to_le_bytes());
    b
}

fn put_frame(key: u64, src: ProcessId, dst: ProcessId, data: &[u8]) -> Vec<u8> {
    let h = wire::Header {
        op: wire::Op::Put,
        ack_req: false,
        fail: FailType::Ok,
        job_key: key,
        src,
        dst,
        pt_index: PT,
        ac_index: 0,
        match_bits: 0,
        offset: 0,
        hdr_data: 0,
        rlength: data.len() as u64,
        mlength: 0,
        cookie: 0,
    };
    let mut v = h.encode().to_vec();
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
    for cfg in configs() {
        let nodes = job(1, &cfg);
        let t = &nodes[0];
        let eq = t.ni.eq_alloc(8).unwrap();
        let me =
            t.ni.me_attach(
                PT,
                ProcessId::ANY,
                0,
                u64::MAX,
                Unlink::Retain,
                Position::After,
            )
            .unwrap();
        t.ni.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT).eq(eq),
            vec![0; 64],
            Unlink::Retain,
        )
        .unwrap();
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
    for cfg in configs() {
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let beq = b.ni.eq_alloc(64).unwrap();
        let me =
            b.ni.me_attach(
                PT,
                ProcessId::ANY,
                0,
                u64::MAX,
                Unlink::Retain,
                Position::After,
            )
            .unwrap();
        b.ni.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT).eq(beq),
            vec![0; 1024],
            Unlink::Retain,
        )
        .unwrap();
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
            let src =
                a.ni.md_bind(&MdDesc::default().eq(aeq), b"fine".to_vec(), Unlink::Retain)
                    .unwrap();
            a.ni.put(src, AckReq::NoAck, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
            expect(&a.ni, aeq, EventKind::Sent);
        });
        assert_eq!(b.nal.stats().malformed_frames, 1, "{cfg:?}");
        assert_eq!(b.ni.status().dropped_bad_header, 1);
    }
}

#[test]
fn simultaneous_connects_leave_exactly_one_connection() {
    for cfg in configs() {
        for _round in 0..10 {
            let nodes = job(2, &cfg);
            let barrier = Barrier::new(2);
            std::thread::scope(|s| {
                for (me, node) in nodes.iter().enumerate() {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let ni = &node.ni;
                        let eq = ni.eq_alloc(64).unwrap();
                        let m = ni
                            .me_attach(
                                PT,
                                ProcessId::ANY,
                                0,
                                u64::MAX,
                                Unlink::Retain,
                                Position::After,
                            )
                            .unwrap();
                        ni.md_attach(
                            m,
                            &MdDesc::new(MdOptions::OP_PUT).eq(eq),
                            vec![0; 64],
                            Unlink::Retain,
                        )
                        .unwrap();
                        let src = ni
                            .md_bind(&MdDesc::default().eq(eq), vec![me as u8; 8], Unlink::Retain)
                            .unwrap();
                        barrier.wait();
                        for _ in 0..4 {
                            ni.put(src, AckReq::Ack, &Remote::new(id(1 - me), PT, 0), 0)
                                .unwrap();
                        }
                        let mut seen = (0, 0, 0);
                        while seen != (4, 4, 4) {
                            let ev = ni.eq_wait(eq, T).expect("event");
                            assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
                            match ev.kind {
                                EventKind::Put => seen.0 += 1,
                                EventKind::Sent => seen.1 += 1,
                                EventKind::Ack => seen.2 += 1,
                                _ => {}
                            }
                        }
                        barrier.wait();
                    });
                }
            });
            for n in &nodes {
                assert_eq!(n.nal.established(), 1, "{cfg:?}: one connection per pair");
            }
        }
    }
}

#[test]
fn a_dead_peer_fails_pending_operations_in_bounded_time() {
    for cfg in configs() {
        // The target never makes progress (polling mode, never called), so
        // the big put is certainly still in flight when it dies.
        let idle = TcpConfig {
            progress: ProgressMode::Poll,
            ..TcpConfig::default()
        };
        let mut nodes = job_with(&[cfg.clone(), idle]);
        let b = nodes.pop().unwrap();
        let a = nodes.pop().unwrap();
        let aeq = a.ni.eq_alloc(16).unwrap();
        let me =
            b.ni.me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
                .unwrap();
        b.ni.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT),
            vec![0; 64 << 20],
            Unlink::Retain,
        )
        .unwrap();
        let big =
            a.ni.md_bind(
                &MdDesc::default().eq(aeq),
                vec![1; 64 << 20],
                Unlink::Retain,
            )
            .unwrap();
        a.ni.put(big, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let died = Instant::now();
        drop(b);
        // Both the send and the acknowledgment of the big put fail.
        let mut failed = Vec::new();
        while failed.len() < 2 {
            let ev =
                a.ni.eq_wait(aeq, Some(Duration::from_secs(10)))
                    .expect("failure event");
            assert_ne!(ev.fail, FailType::Ok, "{cfg:?}: {ev:?}");
            failed.push(ev.kind);
        }
        assert_eq!(failed, vec![EventKind::Sent, EventKind::Ack], "{cfg:?}");
        assert!(died.elapsed() < Duration::from_secs(10));
        // The target never accepted (it never ran), so this counts as a
        // failed connection attempt.
        let st = a.nal.stats();
        assert_eq!(st.connections_lost + st.connects_failed, 1, "{st:?}");
        // Talking to it again fails cleanly too (connection refused).
        let again =
            a.ni.md_bind(&MdDesc::default().eq(aeq), vec![3; 8], Unlink::Retain)
                .unwrap();
        a.ni.put(again, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
            .unwrap();
        let ev =
            a.ni.eq_wait(aeq, Some(Duration::from_secs(10)))
                .expect("event");
        assert_eq!((ev.md_handle, ev.kind), (again, EventKind::Sent));
        assert_eq!(
            ev.fail,
            FailType::Unreachable,
            "{cfg:?} {:?}",
            a.nal.stats()
        );
        let after = a.nal.stats();
        assert_eq!(after.connects_failed, st.connects_failed + 1, "{after:?}");
    }
}

#[test]
fn a_process_can_put_to_itself() {
    for cfg in configs() {
        let nodes = job(1, &cfg);
        let ni = &nodes[0].ni;
        let eq = ni.eq_alloc(8).unwrap();
        let me = ni
            .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
            .unwrap();
        let md = ni
            .md_attach(
                me,
                &MdDesc::new(MdOptions::OP_PUT).eq(eq),
                vec![0; 8],
                Unlink::Retain,
            )
            .unwrap();
        let src = ni
            .md_bind(&MdDesc::default().eq(eq), b"me".to_vec(), Unlink::Retain)
            .unwrap();
        ni.put(src, AckReq::Ack, &Remote::new(id(0), PT, 1), 0)
            .unwrap();
        let kinds: Vec<_> = (0..3).map(|_| ni.eq_wait(eq, T).unwrap().kind).collect();
        assert!(
            kinds.contains(&EventKind::Put)
                && kinds.contains(&EventKind::Sent)
                && kinds.contains(&EventKind::Ack)
        );
        let mut b = [0u8; 2];
        ni.md_read(md, 0, &mut b).unwrap();
        assert_eq!(&b, b"me");
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
    for cfg in configs() {
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
            let connect = || {
                let mut c = TcpStream::connect(a.addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                c.write_all(&hello(a.key, raw, id(0))).unwrap();
                let mut acc = [0u8; 32];
                c.read_exact(&mut acc).unwrap();
                assert_eq!(acc[6], 2, "accepted");
                c
            };
            let _c1 = connect();
            let big =
                a.ni.md_bind(&MdDesc::default().eq(aeq), pattern(BIG, 1), Unlink::Retain)
                    .unwrap();
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
            let mut c2 = connect();
            let small =
                a.ni.md_bind(
                    &MdDesc::default().eq(aeq),
                    b"after".to_vec(),
                    Unlink::Retain,
                )
                .unwrap();
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
        });
        assert_eq!(a.nal.stats().connections_lost, 1);
        assert_eq!(a.nal.established(), 1);
    }
}

/// A raw TCP client that passes `node`'s handshake as process `me` (and
/// says nothing of answering liveness probes, so it is never probed).
/// Drives `node`'s progress meanwhile, which polling mode needs.
fn raw_peer(node: &Node, me: ProcessId) -> TcpStream {
    let mut c = TcpStream::connect(node.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(&hello(node.key, me, node.ni_id())).unwrap();
    let accepted = AtomicBool::new(false);
    let mut acc = [0u8; 32];
    std::thread::scope(|s| {
        s.spawn(|| {
            progress_until(&[&node.ni], Duration::from_secs(20), "handshake", || {
                accepted.load(Ordering::SeqCst)
            })
        });
        let r = c.read_exact(&mut acc);
        accepted.store(true, Ordering::SeqCst);
        r.unwrap();
    });
    assert_eq!(acc[6], 2, "accepted");
    c
}

impl Node {
    fn ni_id(&self) -> ProcessId {
        self.ni.id()
    }
}

#[test]
fn a_large_stream_to_one_peer_does_not_starve_another() {
    const BIG: usize = 64 << 20;
    for cfg in configs() {
        let nodes = job(1, &cfg);
        let a = &nodes[0];
        let (b, c) = (id(1), id(2));
        let aeq = a.ni.eq_alloc(64).unwrap();
        // a takes b's small puts into a descriptor that reports to the
        // same event queue as the stream, so the queue's order tells what
        // came first.
        let m =
            a.ni.me_attach(PT, b, 0, 0, Unlink::Retain, Position::After)
                .unwrap();
        let inbox =
            a.ni.md_attach(
                m,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(aeq),
                vec![0; 8],
                Unlink::Retain,
            )
            .unwrap();
        let big =
            a.ni.md_bind(&MdDesc::default().eq(aeq), pattern(BIG, 3), Unlink::Retain)
                .unwrap();
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
                let ev = a.ni.eq_wait(aeq, T).expect("event");
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
    for cfg in configs() {
        let mut nodes = job(2, &cfg);
        let b = nodes.pop().unwrap();
        let a = nodes.pop().unwrap();
        let (key, b_addr) = (b.key, b.addr);
        let aeq = a.ni.eq_alloc(16).unwrap();
        // One acknowledged put to whichever process is `b` now; the target's
        // thread waits for it (which drives progress in polling mode).
        let put_to_b = |b: &Node, seed: u8| {
            let beq = b.ni.eq_alloc(8).unwrap();
            let m =
                b.ni.me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
                    .unwrap();
            let tmd =
                b.ni.md_attach(
                    m,
                    &MdDesc::new(MdOptions::OP_PUT).eq(beq),
                    vec![0; 1000],
                    Unlink::Retain,
                )
                .unwrap();
            let data = pattern(1000, seed);
            let src =
                a.ni.md_bind(&MdDesc::default().eq(aeq), data.clone(), Unlink::Retain)
                    .unwrap();
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
        progress_until(&[&a.ni], Duration::from_secs(20), "connection loss", || {
            a.nal.established() == 0
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
        let b2 = start(ep, key, 1, &[(id(0), a.addr)]);
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
    for cfg in configs() {
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
        let barrier = Barrier::new(N);
        std::thread::scope(|s| {
            for (me, node) in nodes.iter().enumerate() {
                let barrier = &barrier;
                s.spawn(move || {
                    let ni = &node.ni;
                    let eq = ni.eq_alloc(64).unwrap();
                    let m = ni
                        .me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
                        .unwrap();
                    ni.md_attach(
                        m,
                        &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq),
                        vec![0; 64],
                        Unlink::Retain,
                    )
                    .unwrap();
                    let src = ni
                        .md_bind(
                            &MdDesc::default().eq(eq),
                            vec![me as u8; 64],
                            Unlink::Retain,
                        )
                        .unwrap();
                    barrier.wait();
                    for dst in (0..N).filter(|&d| d != me) {
                        ni.put(src, AckReq::Ack, &Remote::new(id(dst), PT, 0), 0)
                            .unwrap();
                    }
                    let mut seen = (0, 0, 0);
                    while seen != (N - 1, N - 1, N - 1) {
                        let ev = ni.eq_wait(eq, T).expect("event");
                        assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
                        match ev.kind {
                            EventKind::Put => seen.0 += 1,
                            EventKind::Sent => seen.1 += 1,
                            EventKind::Ack => seen.2 += 1,
                            _ => {}
                        }
                    }
                    barrier.wait();
                });
            }
        });
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
    for cfg in configs() {
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
        let m =
            b.ni.me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
                .unwrap();
        b.ni.md_attach(
            m,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
        let aeq = a.ni.eq_alloc(16).unwrap();
        let src =
            a.ni.md_bind(&MdDesc::default().eq(aeq), vec![5; 8], Unlink::Retain)
                .unwrap();
        let acked = AtomicBool::new(false);
        let round = |what: &str| {
            acked.store(false, Ordering::SeqCst);
            a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
            std::thread::scope(|s| {
                s.spawn(|| {
                    progress_until(&[&b.ni], Duration::from_secs(20), what, || {
                        acked.load(Ordering::SeqCst)
                    })
                });
                let ack = expect(&a.ni, aeq, EventKind::Ack);
                assert_eq!(ack.fail, FailType::Ok, "{cfg:?} {what}");
                acked.store(true, Ordering::SeqCst);
            });
        };
        // The connection is up and b answered once.
        round("first put");
        // b computes without calling the library for 5 × a's peer timeout.
        a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
            .unwrap();
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
        acked.store(false, Ordering::SeqCst);
        std::thread::scope(|s| {
            s.spawn(|| {
                progress_until(&[&b.ni], Duration::from_secs(20), "late ack", || {
                    acked.load(Ordering::SeqCst)
                })
            });
            let ack = expect(&a.ni, aeq, EventKind::Ack);
            assert_eq!(ack.fail, FailType::Ok, "{cfg:?}");
            acked.store(true, Ordering::SeqCst);
        });
        round("after the silence");
    }
}
