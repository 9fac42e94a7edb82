//! In-process checks over the loopback network: a client's per-call event
//! queue and reply buffer are reused across calls without one call's reply
//! showing through in the next, and a pipelined pull
//! ([`portals_rpc::Bulk::pull_stream`]) hands the handler every chunk, in
//! order, and cleans up after a failing sink; a pipelined push
//! ([`portals_rpc::Bulk::push_stream`]) fills the client's buffer exactly,
//! at any depth, and cleans up after a failing fill; concurrent requests
//! run on every service thread at once. Each test runs under a time limit.

use std::sync::mpsc;
use std::time::Duration;

use portals::loopback::LoopbackNetwork;
use portals::{NiConfig, ProcessId};
use portals_rpc::{Client, ClientConfig, HandlerError, Request, RpcError, Service, ServiceConfig};

const ECHO: u32 = 1;
/// Pull the bulk buffer with three chunks in flight; reply with it.
const STREAM: u32 = 2;
/// The same, with a sink that fails at the third chunk.
const STREAM_FAIL: u32 = 3;
/// Push the pattern into the bulk buffer at the depth the body names
/// (u64), with the fill failing at the chunk the next u64 names (0:
/// never); the body's third u64, if any, is how many bytes to push.
const PUSH: u32 = 4;
/// Wait inside the handler until as many requests as the service has
/// threads are inside it too.
const MEET: u32 = 5;
/// The service's threads (`ServiceConfig::default`).
const THREADS: usize = 2;
static MEET_ALL: std::sync::Barrier = std::sync::Barrier::new(THREADS);

const CHUNK: usize = 1000;
const LIMIT: Duration = Duration::from_secs(60);
const SERVER: ProcessId = ProcessId::new(0, 0);

fn handler(req: &mut Request<'_>) -> Result<Vec<u8>, HandlerError> {
    match req.opcode() {
        ECHO => Ok(req.body().to_vec()),
        MEET => {
            MEET_ALL.wait();
            Ok(req.body().to_vec())
        }
        op @ (STREAM | STREAM_FAIL) => {
            let bulk = req.bulk().ok_or("no bulk buffer")?;
            let mut got = Vec::new();
            let mut chunks = 0;
            let n = bulk.pull_stream(3, |c: &[u8]| -> Result<(), HandlerError> {
                chunks += 1;
                if op == STREAM_FAIL && chunks == 3 {
                    return Err("sink failed".into());
                }
                if c.len() > CHUNK {
                    return Err("chunk larger than the service's".into());
                }
                got.extend_from_slice(c);
                Ok(())
            })?;
            if n != got.len() as u64 {
                return Err(format!("pulled {n}, sink saw {}", got.len()).into());
            }
            Ok(got)
        }
        PUSH => {
            let body = req.body().to_vec();
            let arg = |i: usize| {
                body.get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
            };
            let (depth, fail_at) = (arg(0).unwrap_or(1), arg(1).unwrap_or(0));
            let bulk = req.bulk().ok_or("no bulk buffer")?;
            let len = arg(2).unwrap_or(bulk.len());
            let mut chunks = 0u64;
            let mut next = 0u64;
            let n =
                bulk.push_stream(len, depth as usize, |off, c| -> Result<(), HandlerError> {
                    chunks += 1;
                    if chunks == fail_at {
                        return Err("fill failed".into());
                    }
                    if c.len() > CHUNK || off != next {
                        return Err(
                            format!("chunk of {} at {off}, expected {next}", c.len()).into()
                        );
                    }
                    next += c.len() as u64;
                    for (i, b) in c.iter_mut().enumerate() {
                        *b = ((off as usize + i) % 251) as u8;
                    }
                    Ok(())
                })?;
            Ok(n.to_le_bytes().to_vec())
        }
        op => Err(format!("unknown opcode {op}").into()),
    }
}

fn push_args(args: &[u64]) -> Vec<u8> {
    args.iter().flat_map(|a| a.to_le_bytes()).collect()
}

/// Run `f` against a two-thread service on a fresh loopback network, on a
/// thread, failing the test after [`LIMIT`].
fn with_service<T: Send + 'static>(f: impl FnOnce(&Client<'_>) -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let net = LoopbackNetwork::new();
        let sni = net.ni(NiConfig::new(SERVER, 7)).expect("server interface");
        let cni = net
            .ni(NiConfig::new(ProcessId::new(1, 0), 7))
            .expect("client interface");
        let cfg = ServiceConfig {
            bulk_chunk: CHUNK,
            ..ServiceConfig::default()
        };
        let svc = Service::new(&sni, cfg).expect("service");
        let stop = svc.stopper();
        let r = std::thread::scope(|s| {
            let server = s.spawn(|| svc.serve(&handler));
            let client = Client::connect(&cni, SERVER, ClientConfig::default()).expect("connect");
            let r = f(&client);
            stop.stop();
            server.join().expect("server thread").expect("serve");
            r
        });
        let _ = tx.send(r);
    });
    rx.recv_timeout(LIMIT)
        .expect("failed or ran past its limit")
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[test]
fn sequential_calls_reuse_one_slot_and_see_only_their_own_reply() {
    with_service(|c| {
        for i in 0..50usize {
            // Long and short replies alternate: a short one must not carry
            // the tail of the long one before it in the reused buffer.
            let body = vec![i as u8; if i % 2 == 0 { 3000 } else { 5 }];
            assert_eq!(c.call(ECHO, &body).expect("echo"), body);
        }
        assert_eq!(c.pooled_calls(), 1);
    });
}

#[test]
fn concurrent_calls_keep_at_most_one_slot_per_caller() {
    with_service(|c| {
        std::thread::scope(|s| {
            for t in 0..4u8 {
                s.spawn(move || {
                    for i in 0..25u8 {
                        let body = [t, i];
                        assert_eq!(c.call(ECHO, &body).expect("echo"), body);
                    }
                });
            }
        });
        let n = c.pooled_calls();
        assert!((1..=4).contains(&n), "{n} slots kept for 4 callers");
    });
}

#[test]
fn concurrent_requests_run_on_every_service_thread_at_once() {
    // Idle threads park outside the interface while one waits in it: the
    // one that takes a request must hand the wait over, or the second
    // request would not run beside the first (each handler waits for the
    // other: the calls would never finish and the limit would fail).
    with_service(|c| {
        assert_eq!(ServiceConfig::default().threads, THREADS);
        for round in 0..20u8 {
            std::thread::scope(|s| {
                for t in 0..THREADS as u8 {
                    s.spawn(move || {
                        let body = [round, t];
                        assert_eq!(c.call(MEET, &body).expect("meet"), body);
                    });
                }
            });
        }
    });
}

#[test]
fn a_pipelined_pull_hands_every_chunk_in_order() {
    with_service(|c| {
        // Several pipe-fulls with a short last chunk, whole chunks only,
        // less than one chunk, and nothing.
        for n in [10 * CHUNK + 7, 3 * CHUNK, CHUNK - 1, 0] {
            let object = pattern(n);
            assert_eq!(c.call_write(STREAM, &[], &object).expect("stream"), object);
        }
    });
}

#[test]
fn a_failing_sink_fails_the_call_and_the_service_goes_on() {
    with_service(|c| {
        let object = pattern(10 * CHUNK);
        match c.call_write(STREAM_FAIL, &[], &object) {
            Err(RpcError::Remote(m)) => assert!(m.contains("sink failed"), "{m}"),
            other => panic!("expected the sink's failure, got {other:?}"),
        }
        // The failed stream's gets and buffers are cleaned up: the same
        // service threads stream the next object whole.
        for _ in 0..4 {
            assert_eq!(c.call_write(STREAM, &[], &object).expect("stream"), object);
        }
    });
}

#[test]
fn a_pipelined_pull_from_a_read_buffer_is_refused() {
    with_service(|c| {
        let mut into = vec![0u8; 4 * CHUNK];
        match c.call_read(STREAM, &[], &mut into) {
            Err(RpcError::Remote(m)) => assert!(m.contains("pull"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
}

#[test]
fn a_pipelined_push_fills_the_whole_buffer_at_depth_1_and_n() {
    with_service(|c| {
        for depth in [1, 3, 16, 100] {
            // Several pipe-fulls with a short last chunk, whole chunks
            // only, less than one chunk, and nothing.
            for n in [10 * CHUNK + 7, 3 * CHUNK, CHUNK - 1, 0] {
                let mut into = vec![0xeeu8; n];
                let r = c
                    .call_read(PUSH, &push_args(&[depth]), &mut into)
                    .expect("push");
                assert_eq!(r, (n as u64).to_le_bytes(), "depth {depth}, {n} bytes");
                assert!(into == pattern(n), "depth {depth}, {n} bytes differ");
            }
        }
    });
}

#[test]
fn a_pipelined_push_of_part_of_the_buffer_leaves_the_rest_alone() {
    with_service(|c| {
        let mut into = vec![0xeeu8; 5 * CHUNK];
        let part = 2 * CHUNK + 3;
        c.call_read(PUSH, &push_args(&[4, 0, part as u64]), &mut into)
            .expect("push");
        assert!(into[..part] == pattern(part)[..]);
        assert!(into[part..].iter().all(|&b| b == 0xee));
        // More than the buffer holds is refused before anything moves.
        let mut small = vec![0u8; CHUNK];
        match c.call_read(PUSH, &push_args(&[4, 0, CHUNK as u64 + 1]), &mut small) {
            Err(RpcError::Remote(_)) => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
}

#[test]
fn a_failing_fill_fails_the_call_and_the_service_goes_on() {
    with_service(|c| {
        let mut into = vec![0u8; 10 * CHUNK];
        match c.call_read(PUSH, &push_args(&[4, 3]), &mut into) {
            Err(RpcError::Remote(m)) => assert!(m.contains("fill failed"), "{m}"),
            other => panic!("expected the fill's failure, got {other:?}"),
        }
        // The failed stream's puts and buffers are cleaned up: the same
        // service threads push the next object whole.
        for _ in 0..4 {
            let mut into = vec![0u8; 10 * CHUNK];
            c.call_read(PUSH, &push_args(&[4]), &mut into)
                .expect("push");
            assert!(into == pattern(10 * CHUNK));
        }
    });
}

#[test]
fn a_pipelined_push_into_a_write_buffer_is_refused() {
    with_service(|c| {
        let from = vec![0u8; 4 * CHUNK];
        match c.call_write(PUSH, &push_args(&[4]), &from) {
            Err(RpcError::Remote(m)) => assert!(m.contains("push"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
}
