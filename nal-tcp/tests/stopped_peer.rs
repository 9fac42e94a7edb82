//! A peer process that stops (SIGSTOP) while operations wait for its
//! answers. Its kernel still acknowledges every TCP segment and keepalive
//! probe, so only the transport's own liveness probe can tell; the waiting
//! operations must fail within a bounded time instead of hanging.
//!
//! The peer is this test binary run again as a child process (the ignored
//! test `child_serving_peer`, selected by an environment variable).

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nal_tcp::{Backend, ProgressMode, TcpConfig, TcpEndpoint, TcpNal};
use portals::*;

const CHILD: &str = "NAL_TCP_STOPPED_PEER_CHILD";
const PT: PortalIndex = PortalIndex(3);
const PARENT: ProcessId = ProcessId::new(0, 0);
const PEER: ProcessId = ProcessId::new(0, 1);

/// The child: a process with a progress thread that accepts puts and gets
/// until its standard input closes.
#[test]
#[ignore = "the peer process of a_stopped_peer_fails_waiting_operations_in_bounded_time"]
fn child_serving_peer() {
    let Ok(key) = std::env::var(CHILD) else {
        return;
    };
    let key = u64::from_str_radix(&key, 16).expect("job key");
    let ep = TcpEndpoint::bind(TcpConfig::default()).expect("bind");
    let addr = ep.local_addr();
    let ni = NetworkInterface::init(NiConfig::new(PEER, key), |core| {
        Ok(ep.start(core, [])? as Arc<dyn Nal>)
    })
    .expect("init");
    let me = ni
        .me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
        .expect("me");
    ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE),
        vec![7; 64],
        Unlink::Retain,
    )
    .expect("md");
    println!("CHILD-READY {addr}");
    // The progress thread serves; this thread only waits for the end.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// The child process; killed (stopped or not) and reaped when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill has no memory-safety preconditions; `pid` is our own
    // child, not yet reaped (Peer waits for it only when dropped).
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
}

/// The state letter of `/proc/<pid>/stat` (`T` once stopped).
fn state(child: &Child) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn spawn_peer(key: u64) -> (Peer, SocketAddr) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "child_serving_peer",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, format!("{key:x}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the peer");
    let out = child.stdout.take().expect("stdout");
    let peer = Peer(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if let Some((_, rest)) = line.split_once("CHILD-READY ") {
                let _ = tx.send(rest.trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the peer process reports its address");
    (peer, addr.parse().expect("address"))
}

#[test]
fn a_stopped_peer_fails_waiting_operations_in_bounded_time() {
    const PEER_TIMEOUT: Duration = Duration::from_secs(2);
    const BOUND: Duration = Duration::from_secs(30);
    for backend in [Backend::Epoll, Backend::IoUring] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            let key = (u64::from(std::process::id()) << 32) | 0x5709;
            let (peer, addr) = spawn_peer(key);
            let cfg = TcpConfig {
                backend,
                progress,
                peer_timeout: Some(PEER_TIMEOUT),
                ..TcpConfig::default()
            };
            let what = format!("{backend:?} {progress:?}");
            let ep = TcpEndpoint::bind(cfg).unwrap();
            let mut nal: Option<Arc<TcpNal>> = None;
            let ni = NetworkInterface::init(NiConfig::new(PARENT, key), |core| {
                let n = ep.start(core, [(PEER, addr)])?;
                nal = Some(n.clone());
                Ok(n as Arc<dyn Nal>)
            })
            .unwrap();
            let nal = nal.unwrap();
            let eq = ni.eq_alloc(64).unwrap();
            let src = ni
                .md_bind(&MdDesc::default().eq(eq), vec![1; 8], Unlink::Retain)
                .unwrap();
            let back = ni
                .md_bind(&MdDesc::default().eq(eq), vec![0; 8], Unlink::Retain)
                .unwrap();
            let remote = Remote::new(PEER, PT, 0);
            let next = |what: &str| {
                ni.eq_wait(eq, Some(BOUND))
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
            };
            // Alive: acknowledged.
            ni.put(src, AckReq::Ack, &remote, 0).unwrap();
            let kinds: Vec<(EventKind, FailType)> = (0..2)
                .map(|_| {
                    let ev = next(&what);
                    (ev.kind, ev.fail)
                })
                .collect();
            assert_eq!(
                kinds,
                vec![
                    (EventKind::Sent, FailType::Ok),
                    (EventKind::Ack, FailType::Ok)
                ],
                "{what}"
            );
            // Stopped: a put and a get wait for answers that cannot come.
            signal(&peer.0, libc::SIGSTOP);
            let t = Instant::now();
            while state(&peer.0) != Some('T') {
                assert!(t.elapsed() < BOUND, "{what}: the peer did not stop");
                std::thread::sleep(Duration::from_millis(5));
            }
            let t0 = Instant::now();
            ni.put(src, AckReq::Ack, &remote, 0).unwrap();
            ni.get(back, &remote).unwrap();
            let (mut ack, mut reply) = (None, None);
            while ack.is_none() || reply.is_none() {
                let ev = next(&what);
                match ev.kind {
                    // The stopped peer's kernel took the bytes.
                    EventKind::Sent => assert_eq!(ev.fail, FailType::Ok, "{what}"),
                    EventKind::Ack => ack = Some(ev.fail),
                    EventKind::Reply => reply = Some(ev.fail),
                    k => panic!("{what}: unexpected {k:?}"),
                }
            }
            let took = t0.elapsed();
            assert_eq!(ack, Some(FailType::Unreachable), "{what}");
            assert_eq!(reply, Some(FailType::Unreachable), "{what}");
            assert!(took < BOUND, "{what}: failures after {took:?}");
            let st = nal.stats();
            assert_eq!(st.peers_timed_out, 1, "{what}: {st:?}");
            assert!(st.probes_sent >= 1, "{what}: {st:?}");
            eprintln!("{what}: stopped peer declared failed after {took:?}");
            // Let it run again before it dies, so it exits normally.
            signal(&peer.0, libc::SIGCONT);
            drop(ni);
            drop(peer);
        }
    }
}
