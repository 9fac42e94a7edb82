//! The shared-memory transport between real processes: this test binary
//! re-executes itself (`child` with `NAL_SHM_ROLE` set) as the peer. Peer
//! death by SIGKILL on the inline, pipelined and single-copy paths (both
//! directions), a peer scribbling over ring indices, a receiver that does
//! not progress while its ring overflows, and two jobs on one host. Every
//! wait is bounded.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nal_shm::{ProgressMode, ShmAddr, ShmConfig, ShmEndpoint, ShmNal};
use portals::*;
use portals_tests::conformance::{attach, bind_md, fresh_key, id, logging, pattern, PT};

const ROLE: &str = "NAL_SHM_ROLE";
/// How soon a dead peer's pending operations must fail.
const DEATH_BOUND: Duration = Duration::from_secs(3);
const LONG: Duration = Duration::from_secs(30);

/// A peer process and the lines it prints (those starting `SHM `).
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    addr: ShmAddr,
}

impl Peer {
    /// Start this binary as the peer `role` of job `key`, process `id(1)`,
    /// whose process `id(0)` is at `parent`, with `env`: extra environment variables for the peer.
    fn spawn_with(role: &str, key: u64, parent: ShmAddr, env: &[(&str, &str)]) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["child", "--exact", "--nocapture", "--test-threads=1"])
            .envs(env.iter().copied())
            .env(ROLE, role)
            .env("NAL_SHM_KEY", key.to_string())
            .env("NAL_SHM_PARENT", parent.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the peer");
        let out = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                // libtest may print "test child ... " on the same line.
                match l.find("SHM ") {
                    Some(i) => {
                        if tx.send(l[i + 4..].to_string()).is_err() {
                            break;
                        }
                    }
                    // The peer's own test output and logs.
                    None => eprintln!("[peer] {l}"),
                }
            }
        });
        let mut p = Peer {
            child,
            stdin,
            lines,
            addr: ShmAddr { pid: 1, nonce: 0 },
        };
        let a = p.expect("addr ");
        p.addr = a.parse().expect("the peer's address");
        p
    }

    /// The next line from the peer, which must start with `prefix`; the
    /// rest of it.
    fn expect(&mut self, prefix: &str) -> String {
        let l = self
            .lines
            .recv_timeout(LONG)
            .unwrap_or_else(|_| panic!("the peer did not say {prefix:?}"));
        l.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("the peer said {l:?}, not {prefix:?}"))
            .to_string()
    }

    fn say(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn kill(&mut self) -> Instant {
        self.child.kill().unwrap();
        Instant::now()
    }

    fn wait_ok(mut self) {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "the peer failed: {s}");
                return;
            }
            assert!(t0.elapsed() < LONG, "the peer did not finish");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One side of a two-process job: process `me` of job `key`.
fn start(
    ep: ShmEndpoint,
    key: u64,
    me: usize,
    addrs: [ShmAddr; 2],
) -> (NetworkInterface, Arc<ShmNal>) {
    let peers = vec![(id(0), addrs[0]), (id(1), addrs[1])];
    let mut nal = None;
    let ni = NetworkInterface::init(NiConfig::new(id(me), key), |core| {
        let n = ep.start(core, peers)?;
        nal = Some(n.clone());
        Ok(n as Arc<dyn Nal>)
    })
    .unwrap();
    (ni, nal.unwrap())
}

/// The parent's side of a job with the peer `role`.
struct Job {
    ni: NetworkInterface,
    nal: Arc<ShmNal>,
    peer: Peer,
    /// Both endpoints' addresses.
    addrs: [ShmAddr; 2],
}

fn job(role: &str, cfg: ShmConfig) -> Job {
    job_with(role, cfg, &[])
}

/// [`job`], with extra environment variables for the peer.
fn job_with(role: &str, cfg: ShmConfig, env: &[(&str, &str)]) -> Job {
    logging();
    let key = fresh_key();
    let ep = ShmEndpoint::bind(cfg).unwrap();
    let me = ep.addr();
    let peer = Peer::spawn_with(role, key, me, env);
    let addrs = [me, peer.addr];
    let (ni, nal) = start(ep, key, 0, addrs);
    Job {
        ni,
        nal,
        peer,
        addrs,
    }
}

/// Wait (the progress thread works) until `done` holds.
fn until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Names in /dev/shm that belong to either endpoint.
fn leftovers(addrs: &[ShmAddr]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    addrs
                        .iter()
                        .any(|a| n.contains(&format!("{:032x}", a.nonce)))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn poll_until(ni: &NetworkInterface, limit: Duration, what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        ni.progress().unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The next `n` events of `eq`, each within `within`.
fn events(ni: &NetworkInterface, eq: EqHandle, n: usize, within: Duration) -> Vec<Event> {
    (0..n)
        .map(|_| ni.eq_wait(eq, Some(within)).expect("an event"))
        .collect()
}

// ----- the child --------------------------------------------------------------

/// The peer process's side; a no-op unless this binary was started as one.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    logging();
    let key: u64 = std::env::var("NAL_SHM_KEY").unwrap().parse().unwrap();
    let parent: ShmAddr = std::env::var("NAL_SHM_PARENT").unwrap().parse().unwrap();
    let cfg = match role.as_str() {
        "idle" | "full" => ShmConfig {
            progress: ProgressMode::Poll,
            ring_bytes: 16 << 10,
            ..ShmConfig::default()
        },
        _ => ShmConfig::default(),
    };
    let ep = ShmEndpoint::bind(cfg).unwrap();
    let me = ep.addr();
    println!("SHM addr {me}");
    let (ni, nal) = start(ep, key, 1, [parent, me]);
    let (tx, stdin) = channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let to_parent = Remote::new(id(0), PT, 0);
    match role.as_str() {
        // Take part in start-up until told to stop, then never call the
        // library again.
        "idle" => {
            let t0 = Instant::now();
            while nal.attached() < 1 || stdin.try_recv().is_err() {
                assert!(t0.elapsed() < LONG, "never told to stop");
                ni.progress().unwrap();
                std::thread::sleep(Duration::from_micros(100));
            }
            println!("SHM ready");
            std::thread::sleep(Duration::from_secs(60));
        }
        // A 64 MiB put the parent reads single-copy.
        "bigsender" => {
            until(LONG, "single-copy agreed", || nal.cma_in_use());
            // Read single-copy, a payload moves only as far as it is
            // deposited: the MPI library need not announce to this peer.
            assert!(!portals::Nal::truncated_payload_moves(&*nal, id(0)));
            let eq = ni.eq_alloc(8).unwrap();
            let big = bind_md(&ni, eq, vec![5; 64 << 20]);
            ni.put(big, AckReq::NoAck, &to_parent, 0).unwrap();
            println!("SHM sent");
            std::thread::sleep(Duration::from_secs(60));
        }
        // Ten puts, then break the ring indices as told.
        "scribble" => {
            let eq = ni.eq_alloc(64).unwrap();
            let md = bind_md(&ni, eq, vec![1; 8]);
            stdin.recv_timeout(LONG).expect("told to send");
            for _ in 0..10 {
                ni.put(md, AckReq::NoAck, &to_parent, 0).unwrap();
            }
            let what = stdin.recv_timeout(LONG).expect("told what to break");
            match what.as_str() {
                "tail" => nal.scribble_for_tests(id(0), Some(0xdead_beef_0000), None),
                _ => nal.scribble_for_tests(id(0), None, Some(0x1_0000_0000)),
            }
            println!("SHM done");
            std::thread::sleep(Duration::from_secs(60));
        }
        // Do not progress for a second while the parent fills the ring,
        // then take every message, in order.
        "full" => {
            let eq = ni.eq_alloc(FULL_N + 16).unwrap();
            let md = attach(
                &ni,
                ProcessId::ANY,
                0,
                0,
                &MdDesc::new(MdOptions::OP_PUT).eq(eq),
                FULL_N * FULL_LEN,
            );
            let t0 = Instant::now();
            while nal.attached() < 1 {
                assert!(t0.elapsed() < LONG, "never attached");
                ni.progress().unwrap();
            }
            println!("SHM ready");
            std::thread::sleep(Duration::from_secs(1));
            for i in 0..FULL_N {
                let ev = ni.eq_wait(eq, Some(LONG)).expect("a message");
                assert_eq!(
                    (ev.kind, ev.fail, ev.offset, ev.mlength),
                    (
                        EventKind::Put,
                        FailType::Ok,
                        (i * FULL_LEN) as u64,
                        FULL_LEN as u64
                    ),
                    "message {i}"
                );
            }
            let mut got = vec![0u8; FULL_N * FULL_LEN];
            ni.md_read(md, 0, &mut got).unwrap();
            assert!(got == pattern(FULL_N * FULL_LEN, 3), "the bytes differ");
            println!("SHM ok");
        }
        // Get a single-copy payload from the parent, look for its reply
        // without waiting in the library (so the progress thread reads
        // it), and put to the parent as soon as it is there; GETS times.
        "get-then-put" => {
            let eq = ni.eq_alloc(16).unwrap();
            let small = bind_md(&ni, eq, vec![9; 8]);
            stdin.recv_timeout(LONG).expect("told to start");
            for _ in 0..GETS {
                let back = bind_md(&ni, eq, vec![0; GET_LEN]);
                ni.get(back, &to_parent).unwrap();
                let t0 = Instant::now();
                loop {
                    match ni.eq_get(eq) {
                        Ok(Some(ev)) if ev.kind == EventKind::Reply => break,
                        Ok(_) => {}
                        Err(e) => panic!("{e}"),
                    }
                    assert!(t0.elapsed() < LONG, "no reply");
                    std::thread::sleep(Duration::from_micros(50));
                }
                ni.put(small, AckReq::NoAck, &to_parent, 0).unwrap();
                ni.md_unlink(back).unwrap();
            }
            println!("SHM done");
            std::thread::sleep(Duration::from_secs(60));
        }
        r => panic!("unknown role {r}"),
    }
}

const GETS: usize = 3;
const GET_LEN: usize = 64 << 10;
const FULL_N: usize = 3000;
const FULL_LEN: usize = 100;

// ----- the tests ----------------------------------------------------------------

/// Put with acknowledgments to a peer that never progresses: an inline put
/// (sent, awaiting its ack) and a 1 MiB put streaming through the ring
/// (which fills: its send is still pending). Killing the peer fails all
/// three pending events within the bound, and nothing of the job is left
/// in /dev/shm.
#[test]
fn a_killed_peer_fails_pending_inline_and_pipelined_sends() {
    let cfg = ShmConfig {
        cma: false,
        ..ShmConfig::default()
    };
    let Job {
        ni,
        nal,
        mut peer,
        addrs,
    } = job("idle", cfg);
    until(LONG, "attached", || nal.attached() == 1);
    peer.say("stop");
    peer.expect("ready");
    assert_eq!(
        leftovers(&addrs),
        Vec::<String>::new(),
        "names unlinked once attached"
    );
    let eq = ni.eq_alloc(16).unwrap();
    let small = bind_md(&ni, eq, vec![1; 8]);
    let big = bind_md(&ni, eq, vec![2; 1 << 20]);
    let to = Remote::new(id(1), PT, 0);
    ni.put(small, AckReq::Ack, &to, 0).unwrap();
    ni.put(big, AckReq::Ack, &to, 0).unwrap();
    let sent = ni.eq_wait(eq, Some(LONG)).unwrap();
    assert_eq!(
        (sent.kind, sent.md_handle, sent.fail),
        (EventKind::Sent, small, FailType::Ok)
    );
    std::thread::sleep(Duration::from_millis(50));
    let died = peer.kill();
    let evs = events(&ni, eq, 3, DEATH_BOUND);
    assert!(
        died.elapsed() < DEATH_BOUND,
        "failures after {:?}",
        died.elapsed()
    );
    let mut got: Vec<_> = evs
        .iter()
        .map(|e| (e.md_handle == big, format!("{:?}", e.kind)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (false, "Ack".into()),
            (true, "Ack".into()),
            (true, "Sent".into())
        ],
        "{evs:?}"
    );
    assert!(evs.iter().all(|e| e.fail != FailType::Ok), "{evs:?}");
    assert_eq!(nal.stats().peers_failed, 1);
    assert!(nal.stats().ring_full > 0, "the 1 MiB put filled the ring");
    assert_eq!(ni.failed_peer_count(), 1);
    assert_eq!(leftovers(&addrs), Vec::<String>::new());
}

/// A 4 MiB put announced single-copy to a peer that never reads it: the
/// send stays pending until the peer is killed, then fails with its ack.
#[test]
fn a_killed_peer_fails_a_pending_single_copy_send() {
    let Job {
        ni,
        nal,
        mut peer,
        addrs,
    } = job("idle", ShmConfig::default());
    until(LONG, "single-copy agreed", || nal.cma_in_use());
    peer.say("stop");
    peer.expect("ready");
    let eq = ni.eq_alloc(16).unwrap();
    let big = bind_md(&ni, eq, vec![2; 4 << 20]);
    ni.put(big, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
        .unwrap();
    assert!(
        ni.eq_wait(eq, Some(Duration::from_millis(200))).is_err(),
        "nothing completes while the peer does not read"
    );
    assert_eq!(nal.stats().single_copy_sent, 1);
    let died = peer.kill();
    let evs = events(&ni, eq, 2, DEATH_BOUND);
    assert!(
        died.elapsed() < DEATH_BOUND,
        "failures after {:?}",
        died.elapsed()
    );
    let mut kinds: Vec<_> = evs.iter().map(|e| format!("{:?}", e.kind)).collect();
    kinds.sort();
    assert_eq!(kinds, ["Ack", "Sent"], "{evs:?}");
    assert!(
        evs.iter()
            .all(|e| e.fail != FailType::Ok && e.md_handle == big),
        "{evs:?}"
    );
    assert_eq!(leftovers(&addrs), Vec::<String>::new());
}

/// The peer dies while this process reads its 64 MiB payload single-copy
/// (polling mode, 64 KiB per step): the deposit fails as incomplete.
#[test]
fn a_peer_killed_during_a_single_copy_read_fails_the_deposit() {
    let cfg = ShmConfig {
        progress: ProgressMode::Poll,
        cma_chunk: 64 << 10,
        ..ShmConfig::default()
    };
    let Job {
        ni,
        nal,
        mut peer,
        addrs,
    } = job("bigsender", cfg);
    let eq = ni.eq_alloc(16).unwrap();
    attach(
        &ni,
        ProcessId::ANY,
        0,
        0,
        &MdDesc::new(MdOptions::OP_PUT).eq(eq),
        64 << 20,
    );
    poll_until(&ni, LONG, "the read began", || {
        nal.stats().single_copy_bytes > 0
    });
    let died = peer.kill();
    let ev = ni
        .eq_wait(eq, Some(DEATH_BOUND))
        .expect("the failed deposit");
    assert!(
        died.elapsed() < DEATH_BOUND,
        "failed after {:?}",
        died.elapsed()
    );
    assert_eq!(
        (ev.kind, ev.fail),
        (EventKind::Put, FailType::Incomplete),
        "{ev:?}"
    );
    assert!(
        nal.stats().single_copy_bytes < 64 << 20,
        "killed mid-transfer"
    );
    assert_eq!(nal.stats().single_copy_received, 0);
    assert_eq!(ni.failed_peer_count(), 1);
    assert_eq!(leftovers(&addrs), Vec::<String>::new());
}

/// A peer that writes garbage into ring indices — the tail of its ring in
/// our inbox, or the head of our ring in its inbox — is declared failed
/// (counted as a corrupt ring), without a panic; later sends to it fail.
#[test]
fn a_peer_scribbling_over_ring_indices_is_failed() {
    for what in ["tail", "head"] {
        let Job {
            ni, nal, mut peer, ..
        } = job("scribble", ShmConfig::default());
        let eq = ni.eq_alloc(64).unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq);
        attach(&ni, ProcessId::ANY, 0, 0, &desc, 8);
        peer.say("send");
        for _ in 0..10 {
            let ev = ni.eq_wait(eq, Some(LONG)).unwrap();
            assert_eq!((ev.kind, ev.fail), (EventKind::Put, FailType::Ok));
        }
        peer.say(what);
        peer.expect("done");
        let out = bind_md(&ni, eq, vec![1; 8]);
        if what == "head" {
            // Only a send looks at the head.
            ni.put(out, AckReq::NoAck, &Remote::new(id(1), PT, 0), 0)
                .unwrap();
        }
        // Noticing counts at once; the engine hears of the failure on the
        // next progress pass (`reap_failures`), maybe the progress
        // thread's: wait for both.
        until(Duration::from_secs(5), "the corruption was noticed", || {
            nal.stats().corrupt_ring_errors == 1 && ni.failed_peer_count() == 1
        });
        assert_eq!(ni.failed_peer_count(), 1, "{what}");
        ni.put(out, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
            .unwrap();
        // The put fails at once; skip the events of the earlier one.
        let t0 = Instant::now();
        loop {
            let ev = ni
                .eq_wait(eq, Some(Duration::from_secs(5)))
                .expect("the failed send");
            if ev.kind == EventKind::Sent && ev.fail == FailType::Unreachable {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "{what}: {ev:?}");
        }
        assert_eq!(nal.stats().peers_failed, 1, "{what}");
    }
}

/// 3000 puts of 100 bytes into a 16 KiB ring whose reader does not
/// progress for a second: the sends queue, none is dropped, and all arrive
/// in order once it does.
#[test]
fn a_full_ring_queues_sends_and_delivers_everything_in_order() {
    let cfg = ShmConfig {
        cma: false,
        ..ShmConfig::default()
    };
    let Job {
        ni, nal, mut peer, ..
    } = job("full", cfg);
    peer.expect("ready");
    let eq = ni.eq_alloc(FULL_N + 16).unwrap();
    let src = bind_md(&ni, eq, pattern(FULL_N * FULL_LEN, 3));
    let to = Remote::new(id(1), PT, 0);
    for i in 0..FULL_N {
        ni.put_region(
            src,
            (i * FULL_LEN) as u64,
            FULL_LEN as u64,
            AckReq::NoAck,
            &to,
            0,
        )
        .unwrap();
    }
    for _ in 0..FULL_N {
        let ev = ni.eq_wait(eq, Some(LONG)).expect("sent");
        assert_eq!((ev.kind, ev.fail), (EventKind::Sent, FailType::Ok));
    }
    peer.expect("ok");
    assert!(nal.stats().ring_full > 0, "{:?}", nal.stats());
    peer.wait_ok();
}

/// Two jobs on one host: a process of one that is given the address of a
/// process of the other can never reach it (the inbox name and header
/// depend on the job key): its put fails once the connect timeout passes,
/// and the other job sees nothing. Each job's own traffic is unaffected.
#[test]
fn two_jobs_never_see_each_others_segments() {
    use portals_tests::conformance::{job as conf_job, ping_pong, Node};
    logging();
    let cfg = ShmConfig {
        connect_timeout: Duration::from_millis(300),
        ..ShmConfig::default()
    };
    let one = conf_job(2, &cfg);
    let two = conf_job(2, &cfg);
    assert_ne!(one[0].key, two[0].key);
    let ep = ShmEndpoint::bind(cfg.clone()).unwrap();
    let mine = ep.addr();
    // Process 2 of job two, told that process 0 lives at job one's address.
    let stray = Node::<ShmConfig>::start(ep, two[0].key, 2, &[(id(0), one[0].addr), (id(2), mine)]);
    let eq = stray.ni.eq_alloc(8).unwrap();
    let md = bind_md(&stray.ni, eq, vec![9; 8]);
    stray
        .ni
        .put(md, AckReq::Ack, &Remote::new(id(0), PT, 0), 0)
        .unwrap();
    let ev = stray.ni.eq_wait(eq, Some(Duration::from_secs(5))).unwrap();
    assert_eq!((ev.kind, ev.fail), (EventKind::Sent, FailType::Unreachable));
    assert_eq!(stray.nal.stats().peers_failed, 1);
    ping_pong(&one, 20);
    ping_pong(&two, 20);
    for n in one.iter().chain(two.iter()) {
        let s = n.ni.status();
        assert_eq!((s.dropped_bad_header, s.accepted), (0, 10), "{s:?}");
        assert_eq!(n.nal.stats().corrupt_ring_errors, 0);
    }
}

/// A peer reads our get reply single-copy on its progress thread, which
/// is held (the answer-delay knob, as a preemption would) right after the
/// read completes; meanwhile its application sees the reply and puts to
/// us. Our get's event (posted when the peer says it is done with our
/// memory) still comes before that put's, every time: the "done" is queued
/// before the reply's event can be seen.
#[test]
fn a_get_event_comes_before_a_put_its_reply_caused() {
    let Job {
        ni, nal, mut peer, ..
    } = job_with(
        "get-then-put",
        ShmConfig::default(),
        &[(nal_shm::ANSWER_DELAY_ENV, "100")],
    );
    let eq = ni.eq_alloc(64).unwrap();
    attach(
        &ni,
        ProcessId::ANY,
        0,
        0,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(eq),
        GET_LEN,
    );
    until(LONG, "single-copy agreed", || nal.cma_in_use());
    peer.say("start");
    let kinds: Vec<EventKind> = events(&ni, eq, 2 * GETS, LONG)
        .iter()
        .map(|e| e.kind)
        .collect();
    let want: Vec<EventKind> = (0..GETS)
        .flat_map(|_| [EventKind::Get, EventKind::Put])
        .collect();
    assert_eq!(kinds, want);
    peer.expect("done");
    assert!(nal.stats().single_copy_sent >= GETS as u64);
}
