//! The RPC library's multi-process test program, run under the launcher:
//! `rpc_check <scenario>`. Rank 0 serves, the other ranks are clients.
//! Prints `OK <scenario> rank <r>` when the scenario's checks pass; a
//! failed check exits non-zero with a message on stderr.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portals_rpc::{
    standalone, BulkError, Client, ClientConfig, HandlerError, Request, RetryPolicy, RpcError,
    Service, ServiceConfig,
};
use portals_runtime::Job;

const ECHO: u32 = 1;
const INCR: u32 = 2;
const PUT_OBJ: u32 = 3;
const GET_OBJ: u32 = 4;
const BIG: u32 = 5;
const STATUS: u32 = 6;
const STOP: u32 = 7;
const DIE: u32 = 8;
const SINK: u32 = 9;
const SOURCE: u32 = 10;
/// A bulk read that pushes its first chunk and then never finishes: a call
/// in the middle of a bulk read when the server dies, whatever the timing.
const STALLED_READ: u32 = 11;
/// A bulk read pushed from the handler's memory (`Bulk::push_from`, four
/// chunks deep) a MiB at a time, 5 ms apart: slow enough that a client
/// killed during it dies mid-transfer.
const PACED_READ: u32 = 12;

/// Bytes of the objects moved in bulk, and the chunk they stream in.
const OBJECT: usize = 24 << 20;
const CHUNK: usize = 1 << 20;
const INCREMENTS: u64 = 60;

type R<T> = Result<T, String>;

fn pattern(i: usize, seed: u32) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8
}

/// [`pattern`] takes bits 13..21 of `i * 2654435761 + seed`, which a step
/// of 2^21 in `i` leaves alone: the pattern repeats every 2 MiB.
const PERIOD: usize = 1 << 21;

/// One period of [`pattern`] for `seed`. The objects (24 MiB, 256 MiB) are
/// copied from it and read-backs checked against it: computed byte by byte
/// they were seconds of every bulk job in unoptimised test builds.
fn pattern_period(seed: u32) -> Vec<u8> {
    (0..PERIOD).map(|i| pattern(i, seed)).collect()
}

/// `dst` filled with the pattern from offset `off` on.
fn fill_pattern(period: &[u8], off: usize, dst: &mut [u8]) {
    let mut done = 0;
    while done < dst.len() {
        let p = (off + done) % PERIOD;
        let n = (PERIOD - p).min(dst.len() - done);
        dst[done..done + n].copy_from_slice(&period[p..p + n]);
        done += n;
    }
}

/// The first offset (counted from `off`'s start of `data`) where `data`
/// differs from the pattern that starts at `off`.
fn pattern_mismatch(period: &[u8], off: usize, data: &[u8]) -> Option<usize> {
    let mut done = 0;
    while done < data.len() {
        let p = (off + done) % PERIOD;
        let n = (PERIOD - p).min(data.len() - done);
        let (got, want) = (&data[done..done + n], &period[p..p + n]);
        if got != want {
            return got
                .iter()
                .zip(want)
                .position(|(a, b)| a != b)
                .map(|i| done + i);
        }
        done += n;
    }
    None
}

fn fnv(h: &mut u64, data: &[u8]) {
    for &b in data {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

const FNV0: u64 = 0xcbf2_9ce4_8422_2325;

fn seed_of(body: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    if let Some(s) = body.get(..4) {
        b.copy_from_slice(s);
    }
    u32::from_le_bytes(b)
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// What the server of every scenario shares with its handler.
struct Server {
    clients: u32,
    stops: AtomicU32,
    counter: AtomicU64,
    /// Slow down one increment in this many (0: never), past the clients'
    /// timeout, so that they resend while it executes.
    slow_every: u64,
    slow: Duration,
    /// Per-request work, so that a flood keeps the buffers full.
    work: Duration,
    /// Hold every echo until the engine has refused a request, so that a
    /// flood fills the buffers whatever the scheduler does (bounded: a
    /// flood that never fills them fails the scenario, not the job's
    /// time limit).
    hold_until_refused: bool,
    bulk_failed: AtomicBool,
}

impl Server {
    fn handle(
        &self,
        req: &mut Request<'_>,
        stop: &portals_rpc::Stopper,
        refusals: &dyn Fn() -> u64,
    ) -> Result<Vec<u8>, HandlerError> {
        if self.hold_until_refused && req.opcode() == ECHO {
            let start = Instant::now();
            while refusals() == 0 && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if !self.work.is_zero() {
            std::thread::sleep(self.work);
        }
        match req.opcode() {
            ECHO => Ok(req.body().to_vec()),
            INCR => {
                let v = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                if self.slow_every > 0 && v % self.slow_every == 0 {
                    std::thread::sleep(self.slow);
                }
                Ok(v.to_le_bytes().to_vec())
            }
            PUT_OBJ => {
                let seed = seed_of(req.body());
                let bulk = req.bulk().ok_or("no bulk buffer")?;
                let len = bulk.len();
                let chunk = bulk.chunk() as u64;
                let mut buf = Vec::new();
                let mut h = FNV0;
                let mut off = 0u64;
                while off < len {
                    buf.resize((len - off).min(chunk) as usize, 0);
                    if let Err(e) = bulk.pull(off, &mut buf) {
                        if matches!(e, BulkError::PeerFailed(_)) {
                            println!("bulk from {} failed: {e}", bulk.client());
                            self.bulk_failed.store(true, Ordering::SeqCst);
                        }
                        return Err(e.into());
                    }
                    // Verify as it streams: the object is never whole here.
                    // Byte by byte on purpose: this paces the pull, so
                    // that the client `kill` shoots 300 ms into its 256 MiB
                    // write is still mid-transfer (checked at memory speed
                    // the write might end first).
                    for (i, &b) in buf.iter().enumerate() {
                        if b != pattern(off as usize + i, seed) {
                            return Err(format!("byte {} differs", off as usize + i).into());
                        }
                    }
                    fnv(&mut h, &buf);
                    off += buf.len() as u64;
                }
                Ok(h.to_le_bytes().to_vec())
            }
            GET_OBJ => {
                let seed = seed_of(req.body());
                // Chunks in flight at once; none named: one push at a time.
                let depth = req
                    .body()
                    .get(4..12)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes);
                // Pushed from the handler's own memory, not chunk buffers.
                let borrowed = req.body().get(12) == Some(&1);
                let bulk = req.bulk().ok_or("no bulk buffer")?;
                let len = bulk.len();
                let period = pattern_period(seed);
                if let (Some(depth), true) = (depth, borrowed) {
                    let n = usize::try_from(len)
                        .ok()
                        .filter(|&n| n <= OBJECT)
                        .ok_or("object too large")?;
                    let mut object = vec![0u8; n];
                    fill_pattern(&period, 0, &mut object);
                    bulk.push_from(0, &object, depth as usize)?;
                    return Ok(Vec::new());
                }
                if let Some(depth) = depth {
                    bulk.push_stream(
                        len,
                        depth as usize,
                        |off, buf| -> Result<(), HandlerError> {
                            fill_pattern(&period, off as usize, buf);
                            Ok(())
                        },
                    )?;
                    return Ok(Vec::new());
                }
                let chunk = bulk.chunk() as u64;
                let mut buf = Vec::new();
                let mut off = 0u64;
                while off < len {
                    let n = (len - off).min(chunk) as usize;
                    buf.resize(n, 0);
                    fill_pattern(&period, off as usize, &mut buf);
                    bulk.push(off, &mut buf)?;
                    off += n as u64;
                }
                Ok(Vec::new())
            }
            SINK | SOURCE => {
                // Bulk at the transport's speed: no data generated or
                // checked, one chunk buffer reused.
                let op = req.opcode();
                let bulk = req.bulk().ok_or("no bulk buffer")?;
                let (len, chunk) = (bulk.len(), bulk.chunk() as u64);
                let mut buf = vec![0u8; chunk.min(len) as usize];
                let mut off = 0u64;
                while off < len {
                    buf.resize((len - off).min(chunk) as usize, 0);
                    if op == SINK {
                        bulk.pull(off, &mut buf)?;
                    } else {
                        bulk.push(off, &mut buf)?;
                    }
                    off += buf.len() as u64;
                }
                Ok(Vec::new())
            }
            STALLED_READ => {
                let bulk = req.bulk().ok_or("no bulk buffer")?;
                let mut buf = vec![7u8; (bulk.chunk() as u64).min(bulk.len()) as usize];
                bulk.push(0, &mut buf)?;
                loop {
                    // Until the process dies (DIE, on another thread).
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            PACED_READ => {
                let bulk = req.bulk().ok_or("no bulk buffer")?;
                let len = usize::try_from(bulk.len()).map_err(|_| "too large")?;
                let mut part = vec![0u8; 1 << 20];
                fill_pattern(&pattern_period(9), 0, &mut part);
                let mut off = 0;
                while off < len {
                    let n = part.len().min(len - off);
                    if let Err(e) = bulk.push_from(off as u64, &part[..n], 4) {
                        if matches!(e, BulkError::PeerFailed(_)) {
                            println!("paced read to {} failed: {e}", bulk.client());
                            self.bulk_failed.store(true, Ordering::SeqCst);
                        }
                        return Err(e.into());
                    }
                    off += n;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(Vec::new())
            }
            BIG => Ok(vec![1; 1 << 20]),
            STATUS => Ok(vec![self.bulk_failed.load(Ordering::SeqCst) as u8]),
            STOP => {
                if self.stops.fetch_add(1, Ordering::SeqCst) + 1 == self.clients {
                    stop.stop();
                }
                Ok(self.counter.load(Ordering::SeqCst).to_le_bytes().to_vec())
            }
            DIE => {
                // SAFETY: raise has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGKILL) };
                Err("still alive after SIGKILL".into())
            }
            op => Err(format!("unknown opcode {op}").into()),
        }
    }
}

fn serve(
    job: &Job,
    cfg: ServiceConfig,
    server: Server,
) -> R<(Server, portals_rpc::ServiceStats, Service<'_>)> {
    let svc = Service::new(job.ni(), cfg).map_err(|e| e.to_string())?;
    job.barrier().map_err(|e| e.to_string())?;
    let stop = svc.stopper();
    let refusals = || {
        let st = job.ni().status();
        st.dropped_no_match + st.dropped_rejected
    };
    let h = |req: &mut Request<'_>| server.handle(req, &stop, &refusals);
    let stats = svc.serve(&h).map_err(|e| e.to_string())?;
    println!("service stats {stats:?}, VmRSS {} KiB", vm_rss_kib());
    Ok((server, stats, svc))
}

fn server_cfg() -> ServiceConfig {
    ServiceConfig {
        bulk_chunk: CHUNK,
        ..ServiceConfig::default()
    }
}

fn new_server(job: &Job) -> Server {
    new_server_of(job.size() - 1)
}

fn new_server_of(clients: u32) -> Server {
    Server {
        clients,
        stops: AtomicU32::new(0),
        counter: AtomicU64::new(0),
        slow_every: 0,
        slow: Duration::ZERO,
        work: Duration::ZERO,
        hold_until_refused: false,
        bulk_failed: AtomicBool::new(false),
    }
}

fn connect<'a>(job: &'a Job, retry: RetryPolicy) -> R<Client<'a>> {
    job.barrier().map_err(|e| e.to_string())?;
    let cfg = ClientConfig {
        retry,
        ..ClientConfig::default()
    };
    Client::connect(job.ni(), job.id(0), cfg).map_err(|e| format!("connect: {e}"))
}

fn stop(c: &Client<'_>) -> R<u64> {
    let r = c.call(STOP, &[]).map_err(|e| format!("stop: {e}"))?;
    Ok(u64::from_le_bytes(
        r.get(..8)
            .and_then(|s| s.try_into().ok())
            .ok_or("short stop reply")?,
    ))
}

fn increments(c: &Client<'_>) -> R<()> {
    let mut last = 0;
    for _ in 0..INCREMENTS {
        let r = c.call(INCR, &[]).map_err(|e| format!("increment: {e}"))?;
        let v = u64::from_le_bytes(
            r.get(..8)
                .and_then(|s| s.try_into().ok())
                .ok_or("short reply")?,
        );
        if v <= last {
            return Err(format!("counter went from {last} to {v}"));
        }
        last = v;
    }
    Ok(())
}

fn bulk_round_trip(c: &Client<'_>, seed: u32) -> R<()> {
    let mut object = vec![0u8; OBJECT];
    fill_pattern(&pattern_period(seed), 0, &mut object);
    let r = c
        .call_write(PUT_OBJ, &seed.to_le_bytes(), &object)
        .map_err(|e| format!("bulk write: {e}"))?;
    let mut h = FNV0;
    fnv(&mut h, &object);
    if r != h.to_le_bytes() {
        return Err("the server's checksum of the written object differs".into());
    }
    // One chunk pushed at a time, then pipelined pushes (chunks landing
    // in any order, lost ones resent over lossy UDP) at depth 1 and 4,
    // from chunk buffers and from the handler's memory.
    for (depth, borrowed) in [
        (None, false),
        (Some(1u64), false),
        (Some(4), false),
        (Some(4), true),
    ] {
        let mut back = vec![0u8; OBJECT];
        let mut body = (seed + 1).to_le_bytes().to_vec();
        if let Some(d) = depth {
            body.extend_from_slice(&d.to_le_bytes());
            body.push(borrowed as u8);
        }
        c.call_read(GET_OBJ, &body, &mut back)
            .map_err(|e| format!("bulk read (depth {depth:?}, borrowed {borrowed}): {e}"))?;
        if let Some(i) = pattern_mismatch(&pattern_period(seed + 1), 0, &back) {
            return Err(format!(
                "bulk read (depth {depth:?}, borrowed {borrowed}): byte {i} differs"
            ));
        }
    }
    Ok(())
}

/// Echo, bulk write and read, a counter, the typed errors.
fn basic(job: &Job) -> R<()> {
    if job.rank() == 0 {
        let (s, stats, _svc) = serve(job, server_cfg(), new_server(job))?;
        let want = INCREMENTS * (job.size() as u64 - 1);
        if s.counter.load(Ordering::SeqCst) != want || stats.executed == 0 {
            return Err(format!(
                "counter {} != {want}",
                s.counter.load(Ordering::SeqCst)
            ));
        }
        return Ok(());
    }
    let c = connect(job, RetryPolicy::default())?;
    let msg = format!("hello from {}", job.rank());
    for _ in 0..20 {
        if c.call(ECHO, msg.as_bytes()).map_err(|e| e.to_string())? != msg.as_bytes() {
            return Err("echo differs".into());
        }
    }
    // An oversized request fails before it is sent; no hang.
    let body = vec![0u8; c.max_body() as usize + 1];
    match c.call(ECHO, &body) {
        Err(RpcError::RequestTooLarge { size, max }) if size == max + 1 => {}
        other => return Err(format!("oversized request: {other:?}")),
    }
    // The largest request that fits is handled whole.
    let body = vec![9u8; c.max_body() as usize];
    if c.call(ECHO, &body).map_err(|e| e.to_string())? != body {
        return Err("largest request echoed differently".into());
    }
    match c.call(BIG, &[]) {
        Err(RpcError::ReplyTooLarge(_)) => {}
        other => return Err(format!("oversized reply: {:?}", other.map(|v| v.len()))),
    }
    match c.call(99, &[]) {
        Err(RpcError::Remote(m)) if m.contains("unknown opcode") => {}
        other => return Err(format!("handler error: {other:?}")),
    }
    bulk_round_trip(&c, job.rank() * 7)?;
    increments(&c)?;
    stop(&c)?;
    Ok(())
}

/// Increments while the server sometimes takes four times the clients'
/// timeout, with two resends allowed: resends of executing and executed
/// requests, each applied once, and early replies keep the clients waiting
/// past timeout × resends.
fn counter(job: &Job) -> R<()> {
    let timeout = Duration::from_millis(300);
    if job.rank() == 0 {
        let mut s = new_server(job);
        s.slow_every = 7;
        s.slow = timeout * 4;
        let cfg = ServiceConfig {
            threads: 3,
            ..server_cfg()
        };
        let (s, stats, _svc) = serve(job, cfg, s)?;
        let want = INCREMENTS * (job.size() as u64 - 1);
        let got = s.counter.load(Ordering::SeqCst);
        if got != want {
            return Err(format!(
                "counter {got} != {want}: a write applied twice or lost"
            ));
        }
        if stats.duplicates + stats.replayed == 0 {
            return Err(format!("no resend reached the server: {stats:?}"));
        }
        return Ok(());
    }
    let retry = RetryPolicy {
        timeout,
        resends: 2,
        ..RetryPolicy::default()
    };
    let c = connect(job, retry)?;
    increments(&c)?;
    bulk_round_trip(&c, job.rank())?;
    stop(&c)?;
    Ok(())
}

/// Several threads of every client flood a service with two small request
/// buffers and one slow thread: requests are refused while the buffers are
/// full, clients back off, and every request is answered.
fn flood(job: &Job) -> R<()> {
    const THREADS: usize = 4;
    const CALLS: usize = 40;
    if job.rank() == 0 {
        let mut s = new_server(job);
        s.work = Duration::from_millis(2);
        s.hold_until_refused = true;
        // Two requests fill a buffer (the second leaves less than
        // `max_request` free), so the 8 concurrent callers overflow both
        // while the first echo is held.
        let cfg = ServiceConfig {
            threads: 1,
            buffers: 2,
            max_request: 256,
            buffer_size: 320,
            reply_cache_per_client: 8,
            ..server_cfg()
        };
        let before = vm_rss_kib();
        let (_s, stats, svc) = serve(job, cfg, s)?;
        let st = job.ni().status();
        let refused = st.dropped_no_match + st.dropped_rejected;
        println!(
            "refused {refused}, reposted {}, VmRSS before {before} KiB",
            stats.reposted
        );
        let want = ((job.size() - 1) as usize * (THREADS * CALLS + 1)) as u64;
        if stats.executed != want {
            return Err(format!("executed {} requests, not {want}", stats.executed));
        }
        if refused == 0 {
            return Err("the request buffers never filled".into());
        }
        for r in 1..job.size() {
            let kept = svc.cached_replies(job.id(r));
            if kept > 8 + 1 {
                return Err(format!(
                    "{kept} replies kept for rank {r}, beyond the bound"
                ));
            }
        }
        return Ok(());
    }
    let retry = RetryPolicy {
        refusals: 100_000,
        backoff_max: Duration::from_millis(20),
        timeout: Duration::from_secs(20),
        ..RetryPolicy::default()
    };
    let c = connect(job, retry)?;
    let ok = AtomicU64::new(0);
    let errors = std::thread::scope(|s| {
        let ts: Vec<_> = (0..THREADS)
            .map(|t| {
                let (c, ok) = (&c, &ok);
                s.spawn(move || -> R<()> {
                    for i in 0..CALLS {
                        let body = format!("{} {t} {i}", job.rank()).into_bytes();
                        let r = c
                            .call(ECHO, &body)
                            .map_err(|e| format!("call {t}/{i}: {e}"))?;
                        if r != body {
                            return Err("echo differs".into());
                        }
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        ts.into_iter()
            .filter_map(|t| t.join().unwrap_or(Err("panicked".into())).err())
            .collect::<Vec<_>>()
    });
    if let Some(e) = errors.first() {
        return Err(e.clone());
    }
    println!("{} calls answered", ok.load(Ordering::Relaxed));
    stop(&c)?;
    Ok(())
}

/// Rank 1 dies (SIGKILL) in the middle of a bulk write; the server frees
/// its state and keeps serving rank 2.
/// A client killed (SIGKILL) in the middle of a 256 MiB bulk write
/// (`read` false: the server pulls) or read (`read` true: the server
/// pushes from its own memory, `Bulk::push_from`).
fn kill(job: &Job, read: bool) -> R<()> {
    // Survive the launcher's SIGTERM after rank 1's death long enough to
    // finish.
    // SAFETY: installing SIG_IGN is async-signal-safe and touches no Rust
    // state.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    match job.rank() {
        0 => {
            let mut s = new_server(job);
            s.clients = 1; // rank 1 never stops the service
            let cfg = ServiceConfig {
                bulk_chunk: 64 << 10,
                transfer_timeout: Duration::from_secs(60),
                ..server_cfg()
            };
            let (s, stats, svc) = serve(job, cfg, s)?;
            if !s.bulk_failed.load(Ordering::SeqCst) {
                return Err("the bulk transfer did not fail".into());
            }
            if stats.clients_failed == 0 || svc.cached_replies(job.id(1)) != 0 {
                return Err(format!("rank 1's state was not freed: {stats:?}"));
            }
            Ok(())
        }
        1 => {
            let c = connect(job, RetryPolicy::default())?;
            let mut object = vec![0u8; 256 << 20];
            fill_pattern(&pattern_period(5), 0, &mut object);
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: raise has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGKILL) };
            });
            if read {
                let r = c.call_read(PACED_READ, &[], &mut object);
                return Err(format!("the 256 MiB read finished before the kill: {r:?}"));
            }
            let r = c.call_write(PUT_OBJ, &5u32.to_le_bytes(), &object);
            Err(format!("the 256 MiB write finished before the kill: {r:?}"))
        }
        _ => {
            let c = connect(job, RetryPolicy::default())?;
            let t0 = Instant::now();
            loop {
                if c.call(ECHO, b"still there").map_err(|e| e.to_string())? != b"still there" {
                    return Err("echo differs".into());
                }
                if c.call(STATUS, &[]).map_err(|e| e.to_string())? == [1] {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(90) {
                    return Err("the server never saw rank 1 fail".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            bulk_round_trip(&c, 3)?;
            for _ in 0..20 {
                c.call(ECHO, b"after").map_err(|e| e.to_string())?;
            }
            stop(&c)?;
            Ok(())
        }
    }
}

/// Round trips and bulk bandwidth (`rpc_check perf [calls] [MiB]`, two
/// ranks): prints the mean time of an 8-byte call and the bandwidth of
/// bulk writes and reads, best of three.
fn perf(job: &Job) -> R<()> {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    if job.rank() == 0 {
        serve(job, server_cfg(), new_server(job))?;
        return Ok(());
    }
    let (calls, mib) = (arg(2, 20_000), arg(3, 256));
    let c = connect(job, RetryPolicy::default())?;
    for _ in 0..100 {
        c.call(ECHO, &[0; 8]).map_err(|e| e.to_string())?;
    }
    let t0 = Instant::now();
    for _ in 0..calls {
        c.call(ECHO, &[0; 8]).map_err(|e| e.to_string())?;
    }
    let per_call = t0.elapsed() / calls as u32;
    let mut buf = vec![1u8; mib << 20];
    let best = |op: u32, buf: &mut Vec<u8>| -> R<f64> {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t0 = Instant::now();
            if op == SINK {
                c.call_write(op, &[], buf).map_err(|e| e.to_string())?;
            } else {
                c.call_read(op, &[], buf).map_err(|e| e.to_string())?;
            }
            best = best.min(t0.elapsed().as_secs_f64());
        }
        Ok(buf.len() as f64 / best / 1e6)
    };
    let write = best(SINK, &mut buf)?;
    let read = best(SOURCE, &mut buf)?;
    println!(
        "perf {}: 8-byte call {:.1} us; bulk write {write:.0} MB/s, read {read:.0} MB/s ({mib} MiB, 1 MiB chunks)",
        job.ni().nal_name(),
        per_call.as_secs_f64() * 1e6
    );
    stop(&c)?;
    Ok(())
}

/// The baseline of `perf`'s call time: an 8-byte put ping-pong on the raw
/// Portals API (`rpc_check pingpong [rounds]`, two ranks), the same two
/// one-way messages a call makes, on the same transport.
fn pingpong(job: &Job) -> R<()> {
    use portals::{AckReq, EventKind, MdDesc, MdOptions, Position, ProcessId, Remote, Unlink};
    let e = |e: portals::PtlError| e.to_string();
    let rounds: u32 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let ni = job.ni();
    let pt = portals::PortalIndex(60);
    let eq = ni.eq_alloc(1024).map_err(e)?;
    let me = ni
        .me_attach(pt, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .map_err(e)?;
    let opts = MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE;
    ni.md_attach(me, &MdDesc::new(opts).eq(eq), vec![0; 8], Unlink::Retain)
        .map_err(e)?;
    let src = ni
        .md_bind(&MdDesc::new(MdOptions::empty()), vec![0; 8], Unlink::Retain)
        .map_err(e)?;
    job.barrier().map_err(|e| e.to_string())?;
    let peer = Remote::new(job.id(1 - job.rank()), pt, 1);
    let wait_put = || -> R<()> {
        loop {
            if ni.eq_wait(eq, None).map_err(e)?.kind == EventKind::Put {
                return Ok(());
            }
        }
    };
    let t0 = Instant::now();
    for _ in 0..rounds + 100 {
        if job.rank() == 1 {
            ni.put(src, AckReq::NoAck, &peer, 0).map_err(e)?;
            wait_put()?;
        } else {
            wait_put()?;
            ni.put(src, AckReq::NoAck, &peer, 0).map_err(e)?;
        }
    }
    if job.rank() == 1 {
        println!(
            "pingpong {}: 8-byte round trip {:.1} us",
            ni.nal_name(),
            t0.elapsed().as_secs_f64() * 1e6 / (rounds + 100) as f64
        );
    }
    job.barrier().map_err(|e| e.to_string())
}

/// The server dies (SIGKILL) while every client has a request in it: each
/// call fails with the server's failure, typed, and promptly.
fn server_dies(job: &Job) -> R<()> {
    // SAFETY: installing SIG_IGN is async-signal-safe and touches no Rust
    // state.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    if job.rank() == 0 {
        serve(job, server_cfg(), new_server(job))?;
        return Err("the service outlived its death".into());
    }
    // A timeout far beyond the job's limit: only the failure report can
    // end the call in time.
    let retry = RetryPolicy {
        timeout: Duration::from_secs(3600),
        ..RetryPolicy::default()
    };
    let c = connect(job, retry)?;
    c.call(ECHO, b"alive").map_err(|e| e.to_string())?;
    let r = if job.rank() == 1 {
        // Rank 2's bulk read has most likely begun by now; if not, its
        // request meets a dead server, which must fail it all the same.
        std::thread::sleep(Duration::from_millis(100));
        c.call(DIE, &[])
    } else {
        let mut back = vec![0u8; OBJECT];
        c.call_read(STALLED_READ, &[], &mut back)
            .map(|_| Vec::new())
    };
    match r {
        Err(RpcError::PeerFailed(p)) if p == job.id(0) => Ok(()),
        other => Err(format!("a call to the dead server ended with {other:?}")),
    }
}

/// Standalone server: `rpc_check listen <addr> <key>`; serves until a
/// client sends STOP, then checks that the clients that left were freed.
fn listen(addr: &str, key: u64) -> R<()> {
    let bind = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let (ni, local) = standalone::listen(bind, key).map_err(|e| e.to_string())?;
    let svc = Service::new(&ni, server_cfg()).map_err(|e| e.to_string())?;
    println!("listening on {local}");
    let s = new_server_of(1);
    let stop = svc.stopper();
    let h = |req: &mut Request<'_>| s.handle(req, &stop, &|| 0);
    let stats = svc.serve(&h).map_err(|e| e.to_string())?;
    println!(
        "service stats {stats:?}, counter {}",
        s.counter.load(Ordering::SeqCst)
    );
    if stats.clients_failed == 0 {
        return Err("no departed client was noticed".into());
    }
    Ok(())
}

/// Standalone client: `rpc_check dial <addr> <key> incr|stop|badkey`.
fn dial(addr: &str, key: u64, mode: &str) -> R<()> {
    let server = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let ni = standalone::dial(server, key).map_err(|e| e.to_string())?;
    let cfg = ClientConfig::default();
    let connected = Client::connect(&ni, standalone::SERVER_ID, cfg);
    match mode {
        "badkey" => match connected {
            Err(RpcError::PeerFailed(_)) => Ok(()),
            other => Err(format!(
                "a client with a wrong key: {:?}",
                other.map(|_| ())
            )),
        },
        "incr" => {
            let c = connected.map_err(|e| format!("connect: {e}"))?;
            increments(&c)?;
            bulk_round_trip(&c, std::process::id())
        }
        "stop" => {
            let c = connected.map_err(|e| format!("connect: {e}"))?;
            println!("counter {}", stop(&c)?);
            Ok(())
        }
        other => Err(format!("unknown mode {other:?}")),
    }
}

fn standalone_main(args: &[String]) -> Option<R<()>> {
    let key = |s: &String| u64::from_str_radix(s, 16).map_err(|e| format!("key {s}: {e}"));
    match args {
        [_, cmd, addr, k] if cmd == "listen" => Some(key(k).and_then(|k| listen(addr, k))),
        [_, cmd, addr, k, mode] if cmd == "dial" => Some(key(k).and_then(|k| dial(addr, k, mode))),
        _ => None,
    }
}

fn main() {
    portals_runtime::init_logging();
    let args: Vec<String> = std::env::args().collect();
    if let Some(r) = standalone_main(&args) {
        match r {
            Ok(()) => println!("OK {}", args[1]),
            Err(x) => {
                eprintln!("FAILED {}: {x}", args[1]);
                std::process::exit(1);
            }
        }
        return;
    }
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let job = match portals_runtime::join() {
        Ok(j) => j,
        Err(e) => {
            eprintln!("join: {e}");
            std::process::exit(2);
        }
    };
    let r = match scenario.as_str() {
        "basic" => basic(&job),
        "counter" => counter(&job),
        "flood" => flood(&job),
        "kill" => kill(&job, false),
        "kill-read" => kill(&job, true),
        "server-dies" => server_dies(&job),
        "perf" => perf(&job),
        "pingpong" => pingpong(&job),
        other => Err(format!("unknown scenario {other:?}")),
    };
    match r {
        Ok(()) => println!("OK {scenario} rank {}", job.rank()),
        Err(x) => {
            eprintln!("FAILED {scenario} rank {}: {x}", job.rank());
            std::process::exit(1);
        }
    }
}
