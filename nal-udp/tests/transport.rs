//! Several interfaces in one process, connected over 127.0.0.1 by real UDP
//! sockets. Every test runs for both back ends (epoll, io_uring) and both
//! progress modes (thread, poll), and the data-carrying ones also through
//! the fault injector (loss, duplication, reordering); every wait is bounded.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nal_udp::proto::{self, Endpoint, OutPayload};
use nal_udp::{Backend, FaultConfig, ProgressMode, UdpConfig, UdpEndpoint, UdpNal};
use portals::*;

fn fresh_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (std::process::id() as u64) << 32 | n
}
const PT: PortalIndex = PortalIndex(5);
const T: Option<Duration> = Some(Duration::from_secs(60));

/// `PTL_LOG=nal_udp=trace cargo test ...` shows what the transport does.
fn logging() {
    if let Ok(f) = tracing_subscriber::EnvFilter::try_from_env("PTL_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(f)
            .with_test_writer()
            .try_init();
    }
}

fn configs() -> Vec<UdpConfig> {
    logging();
    let mut v = Vec::new();
    for backend in [Backend::Epoll, Backend::IoUring] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            v.push(UdpConfig {
                backend,
                progress,
                ..UdpConfig::default()
            });
        }
    }
    v
}

/// The configurations plus lossy ones (5 % loss, duplication, reordering).
fn configs_with_faults() -> Vec<UdpConfig> {
    let mut v = configs();
    for (progress, seed) in [(ProgressMode::Thread, 11), (ProgressMode::Poll, 12)] {
        v.push(UdpConfig {
            progress,
            fault: Some(FaultConfig {
                loss: 0.05,
                dup: 0.02,
                reorder: 0.05,
                seed,
            }),
            ..UdpConfig::default()
        });
    }
    v
}

fn id(i: usize) -> ProcessId {
    ProcessId::new(0, i as u32)
}

struct Node {
    key: u64,
    ni: NetworkInterface,
    nal: Arc<UdpNal>,
    addr: SocketAddr,
}

fn job(n: usize, cfg: &UdpConfig) -> Vec<Node> {
    job_with(&vec![cfg.clone(); n])
}

fn job_with(cfgs: &[UdpConfig]) -> Vec<Node> {
    let key = fresh_key();
    let eps: Vec<UdpEndpoint> = cfgs
        .iter()
        .map(|c| UdpEndpoint::bind(c.clone()).unwrap())
        .collect();
    let addrs: Vec<(ProcessId, SocketAddr)> = eps
        .iter()
        .enumerate()
        .map(|(i, e)| (id(i), e.local_addr()))
        .collect();
    eps.into_iter()
        .enumerate()
        .map(|(i, ep)| {
            let addr = ep.local_addr();
            let mut nal = None;
            let ni = NetworkInterface::init(NiConfig::new(id(i), key), |core| {
                let n = ep.start(core, addrs.clone())?;
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
        })
        .collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

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
    // Tiny, one datagram, medium (eager fragments), large (pulled).
    const SIZES: [usize; 9] = [0, 1, 88, 1000, 64_900, 100_003, 131_073, 1 << 20, 16 << 20];
    for cfg in configs_with_faults() {
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
        assert_eq!(head, pattern(16 << 20, 8)[..4096].to_vec());
        assert_eq!(b.ni.status().dropped_bad_header, 0);
        if cfg.fault.is_some() {
            let st = a.nal.stats();
            assert!(st.injected_drops > 0, "the fault injector ran: {st:?}");
            assert!(st.protocol.retransmits > 0, "losses were repaired: {st:?}");
        }
    }
}

#[test]
fn all_to_all_storm_of_small_puts_keeps_per_source_order() {
    const N: usize = 4;
    const EACH: usize = 300;
    for cfg in configs_with_faults() {
        let nodes = job(N, &cfg);
        let barrier = Barrier::new(N);
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (me, node) in nodes.iter().enumerate() {
                let barrier = &barrier;
                let done = &done;
                let cfg = &cfg;
                s.spawn(move || {
                    let ni = &node.ni;
                    let eq = ni.eq_alloc(8192).unwrap();
                    // One ME per source, locally managed offsets: each
                    // source's messages land one after another, in order.
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
                    barrier.wait();
                    let seq = ni.eq_alloc(8192).unwrap();
                    for k in 0..EACH {
                        for dst in (0..N).filter(|&d| d != me) {
                            let v = ((me * 1_000_000 + k) as u64).to_le_bytes().to_vec();
                            let md = ni
                                .md_bind(&MdDesc::default().eq(seq), v, Unlink::Retain)
                                .unwrap();
                            ni.put(md, AckReq::NoAck, &Remote::new(id(dst), PT, 0), 0)
                                .unwrap();
                        }
                    }
                    let mut puts = 0;
                    while puts < EACH * (N - 1) {
                        if ni.eq_wait(eq, T).unwrap().kind == EventKind::Put {
                            puts += 1;
                        }
                    }
                    for (src, &md) in inbox.iter().enumerate() {
                        if src == me {
                            continue;
                        }
                        let mut got = vec![0u8; EACH * 8];
                        ni.md_read(md, 0, &mut got).unwrap();
                        for (k, c) in got.chunks_exact(8).enumerate() {
                            let v = u64::from_le_bytes(c.try_into().unwrap());
                            assert_eq!(v, (src * 1_000_000 + k) as u64, "{cfg:?}");
                        }
                    }
                    // Keep driving progress (in polling mode nobody else
                    // retransmits this process's lost datagrams or acks)
                    // until everyone is done.
                    done.fetch_add(1, Ordering::SeqCst);
                    while done.load(Ordering::SeqCst) < N {
                        match ni.eq_wait(eq, Some(Duration::from_millis(5))) {
                            Ok(_) | Err(PtlError::Timeout) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
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
        a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 3), 0)
            .unwrap();
        let acked = (|| loop {
            match a.ni.eq_wait(aeq, Some(Duration::from_millis(3000))) {
                Ok(ev) if ev.kind == EventKind::Ack => return true,
                Ok(_) => continue,
                Err(PtlError::Timeout) => return false,
                Err(e) => panic!("{e}"),
            }
        })();
        match cfg.progress {
            ProgressMode::Thread => {
                assert!(acked, "acknowledged while the target computed");
                let mut got = vec![0u8; 4 << 20];
                b.ni.md_read(tmd, 0, &mut got).unwrap();
                assert!(got == data, "the data is already in the target's memory");
            }
            ProgressMode::Poll => {
                assert!(!acked, "polling mode must not progress without calls");
            }
        }
    }
}

#[test]
fn an_oversized_put_is_pulled_only_as_far_as_the_descriptor_takes() {
    for cfg in configs() {
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let beq = b.ni.eq_alloc(8).unwrap();
        let me =
            b.ni.me_attach(PT, ProcessId::ANY, 4, 0, Unlink::Retain, Position::After)
                .unwrap();
        let tmd =
            b.ni.md_attach(
                me,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE).eq(beq),
                vec![0; 1000],
                Unlink::Retain,
            )
            .unwrap();
        let aeq = a.ni.eq_alloc(8).unwrap();
        let data = pattern(8 << 20, 3);
        let src =
            a.ni.md_bind(&MdDesc::default().eq(aeq), data.clone(), Unlink::Retain)
                .unwrap();
        let before = a.nal.stats().protocol.pull_data_sent;
        a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 4), 0)
            .unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let ev = expect(&b.ni, beq, EventKind::Put);
                assert_eq!((ev.rlength, ev.mlength), (8 << 20, 1000));
            });
            let ack = expect(&a.ni, aeq, EventKind::Ack);
            assert_eq!(ack.mlength, 1000, "{cfg:?}");
        });
        let mut got = vec![0u8; 1000];
        b.ni.md_read(tmd, 0, &mut got).unwrap();
        assert_eq!(got, data[..1000].to_vec());
        let pulled = a.nal.stats().protocol.pull_data_sent - before;
        assert!(
            pulled <= 1,
            "{pulled} datagrams pulled for 1000 wanted bytes"
        );
    }
}

/// A Portals put header from `src` to `dst`.
fn put_header(key: u64, src: ProcessId, dst: ProcessId, len: u64) -> [u8; wire::HEADER_LEN] {
    wire::Header {
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
        rlength: len,
        mlength: 0,
        cookie: 0,
    }
    .encode()
}

/// The first datagram a protocol endpoint with `key` and peer id `from`
/// sends for a small message to `to`.
fn forged_datagram(key: u64, from: ProcessId, to: ProcessId, hdr_key: u64) -> Vec<u8> {
    let pid = |p: ProcessId| (u64::from(p.nid) << 32) | u64::from(p.pid);
    let mut ep = Endpoint::new(proto::Config::default(), key, pid(from)).unwrap();
    ep.add_peer(pid(to));
    let now = Instant::now();
    ep.send(
        now,
        pid(to),
        &put_header(hdr_key, from, to, 4),
        OutPayload::copy_from(b"evil"),
        1,
    )
    .unwrap();
    let mut buf = vec![0u8; ep.max_datagram()];
    let (_, n) = ep.poll_transmit(now, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn foreign_and_malformed_datagrams_never_reach_the_engine() {
    for cfg in configs() {
        let nodes = job(2, &cfg);
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
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = t.nal.stats().protocol;
        // Not the protocol at all.
        stranger.send_to(&[0x47; 40], t.addr).unwrap();
        // The protocol, a wrong job key.
        let wrong = forged_datagram(t.key ^ 1, id(1), id(0), t.key ^ 1);
        stranger.send_to(&wrong, t.addr).unwrap();
        // The right key, but posing as rank 1 from another address.
        let posing = forged_datagram(t.key, id(1), id(0), t.key);
        stranger.send_to(&posing, t.addr).unwrap();
        // Truncated.
        stranger
            .send_to(&posing[..posing.len() / 2], t.addr)
            .unwrap();
        let r = t.ni.eq_wait(eq, Some(Duration::from_millis(700)));
        assert_eq!(r, Err(PtlError::Timeout), "{cfg:?}: no event may be posted");
        // In polling mode the datagrams are read by that wait.
        let after = t.nal.stats().protocol;
        assert_eq!(
            after.bad_magic_drops - before.bad_magic_drops,
            1,
            "{after:?}"
        );
        assert_eq!(after.bad_key_drops - before.bad_key_drops, 1, "{after:?}");
        assert_eq!(
            after.unknown_peer_drops - before.unknown_peer_drops,
            1,
            "{after:?}"
        );
        assert_eq!(
            after.malformed_drops - before.malformed_drops,
            1,
            "{after:?}"
        );
        assert_eq!(t.ni.status().accepted, 0);
    }
}

#[test]
fn a_header_claiming_another_sender_is_counted_and_dropped() {
    // A member of the job (right key, right address) whose Portals header
    // names another source: the driver refuses it before matching.
    let cfg = UdpConfig::default();
    let nodes = job(2, &cfg);
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
    // Rank 1's socket is taken by its NAL; rebuild an endpoint that uses a
    // socket bound to a fresh address registered as a new peer instead.
    let liar = UdpSocket::bind("127.0.0.1:0").unwrap();
    let liar_id = ProcessId::new(0, 9);
    t.nal.add_peer(liar_id, liar.local_addr().unwrap());
    let pid = |p: ProcessId| (u64::from(p.nid) << 32) | u64::from(p.pid);
    let mut ep = Endpoint::new(proto::Config::default(), t.key, pid(liar_id)).unwrap();
    ep.add_peer(pid(id(0)));
    let now = Instant::now();
    ep.send(
        now,
        pid(id(0)),
        &put_header(t.key, id(1), id(0), 4),
        OutPayload::copy_from(b"evil"),
        1,
    )
    .unwrap();
    let mut buf = vec![0u8; ep.max_datagram()];
    let (_, n) = ep.poll_transmit(now, &mut buf).unwrap();
    liar.send_to(&buf[..n], t.addr).unwrap();
    assert_eq!(
        t.ni.eq_wait(eq, Some(Duration::from_millis(700))),
        Err(PtlError::Timeout)
    );
    assert_eq!(t.ni.status().dropped_bad_header, 1);
    assert_eq!(t.ni.status().accepted, 0);
}

#[test]
fn a_dead_peer_fails_pending_operations_in_bounded_time() {
    // With ICMP: the closed port answers at once. Without: the protocol's
    // retransmission bound decides (shortened here).
    for icmp in [true, false] {
        for cfg in configs() {
            let fast = |mut c: UdpConfig| {
                c.protocol.rto_max = Duration::from_millis(100);
                c.protocol.max_retransmits = 4;
                c.icmp_peer_death = icmp;
                c
            };
            // The target never makes progress (polling mode, never called).
            let idle = UdpConfig {
                progress: ProgressMode::Poll,
                ..UdpConfig::default()
            };
            let mut nodes = job_with(&[fast(cfg.clone()), fast(idle)]);
            let b = nodes.pop().unwrap();
            let a = nodes.pop().unwrap();
            let aeq = a.ni.eq_alloc(16).unwrap();
            let big =
                a.ni.md_bind(&MdDesc::default().eq(aeq), vec![1; 8 << 20], Unlink::Retain)
                    .unwrap();
            drop(b);
            let died = Instant::now();
            a.ni.put(big, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
            let mut failed = Vec::new();
            while failed.len() < 2 {
                let ev =
                    a.ni.eq_wait(aeq, Some(Duration::from_secs(20)))
                        .expect("failure event");
                assert_ne!(ev.fail, FailType::Ok, "{cfg:?}: {ev:?}");
                failed.push(ev.kind);
            }
            failed.sort_by_key(|k| format!("{k:?}"));
            assert_eq!(failed, vec![EventKind::Ack, EventKind::Sent], "{cfg:?}");
            assert!(died.elapsed() < Duration::from_secs(20));
            let st = a.nal.stats();
            assert_eq!(st.protocol.peers_dead, 1);
            assert_eq!(st.icmp_deaths, u64::from(icmp), "{st:?}");
            if !icmp {
                assert!(st.protocol.rto_expiries >= 4, "{st:?}");
            }
            // Later operations to it fail at once.
            let again =
                a.ni.md_bind(&MdDesc::default().eq(aeq), vec![3; 8], Unlink::Retain)
                    .unwrap();
            a.ni.put(again, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
            let ev =
                a.ni.eq_wait(aeq, Some(Duration::from_secs(5)))
                    .expect("event");
            assert_eq!((ev.md_handle, ev.fail), (again, FailType::Unreachable));
        }
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

#[test]
fn windows_are_fitted_to_the_granted_receive_buffer() {
    let small = UdpConfig {
        recv_buffer: 1 << 20,
        ..UdpConfig::default()
    };
    let nodes = job(4, &small);
    let st = nodes[0].nal.stats();
    assert!(st.recv_buffer >= 1 << 20, "{st:?}");
    let per_dgram = nal_udp::datagram_truesize(small.protocol.max_datagram);
    // Three senders share the buffer.
    assert!(
        st.recv_window as usize * 3 * per_dgram <= st.recv_buffer || st.recv_window == 4,
        "{st:?}"
    );
    assert!(st.recv_window < small.protocol.recv_window);
}
