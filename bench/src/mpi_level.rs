//! The MPI-level benchmarks on `mpi-on-portals`, run inside every rank of a
//! job: two ranks, or [`Params::ranks`] for the collectives. Each mirrors
//! its C peer in `bench/c/` call for call (the C file is named in each
//! function's documentation), with the same iteration scaling, warm-up,
//! repetitions and output fields, so the numbers compare. Rank 0 emits the
//! records.

use std::time::Instant;

use mpi_on_portals::request::{self, Request};
use mpi_on_portals::traits::*;
use mpi_on_portals::{Process, Rank, SimpleCommunicator, SystemOperation, Tag};

use crate::error::{BenchError, Result};
use crate::params::{scale_iters, Bench, CombMethod, Params};
use crate::record::Record;
use crate::stats::{median, Summary};
use crate::timing::{settle, timed, Slots};
use crate::work::Work;

const TAG_DATA: Tag = 1;
const TAG_ACK: Tag = 2;
const TAG_STOP: Tag = 2;
const TAG_COUNT: Tag = 3;

/// One rank's view of the job.
struct Ctx<'w> {
    world: &'w SimpleCommunicator,
    rank: Rank,
    label: &'w str,
    /// Milliseconds still to settle before the first timed repetition
    /// (`Params::settle_ms`; 0 once done).
    settle_ms: std::cell::Cell<u64>,
    /// Iterations run settling, until a record reports them
    /// (`settle_iters` on the first point).
    settled: std::cell::Cell<Option<usize>>,
}

impl Ctx<'_> {
    fn peer(&self) -> Process<'_> {
        self.world.process_at_rank(1 - self.rank)
    }
}

/// Run benchmark `p` as this rank of an MPI job of `p.ranks` ranks (2 for
/// all but the collectives); rank 0 passes every record to `emit`.
pub fn run(p: &Params, label: &str, emit: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    // The one-sided overlap's busy loop is calibrated before the library
    // starts any thread, so that none of them shares the CPU meanwhile.
    let work = (p.bench == Bench::RmaOverlap).then(Work::calibrate);
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    if usize::try_from(world.size()).ok() != Some(p.ranks) {
        return Err(BenchError::Invalid(format!(
            "{} was asked for {} ranks but runs on {}",
            p.bench,
            p.ranks,
            world.size()
        )));
    }
    let c = Ctx {
        world: &world,
        rank: world.rank(),
        label,
        settle_ms: std::cell::Cell::new(if p.bench.settles() { p.settle_ms } else { 0 }),
        settled: std::cell::Cell::new(None),
    };
    let mut out = |r: Record| {
        let r = match c.settled.take() {
            Some(n) => r.with("settle_iters", n),
            None => r,
        };
        if c.rank == 0 {
            emit(r)
        } else {
            Ok(())
        }
    };
    match p.bench {
        Bench::Latency => latency(&c, p, &mut out),
        Bench::Bandwidth | Bench::Bibw | Bench::Msgrate => stream(&c, p, &mut out),
        Bench::Overlap => overlap(&c, p, &mut out),
        Bench::Comb => comb(&c, p, &mut out),
        Bench::Matchlist => matchlist(&c, p, &mut out),
        Bench::Allreduce | Bench::Bcast => collective(&c, p, &mut out),
        Bench::NbcOverlap => crate::nbc_overlap::run(c.world, label, p, &mut out),
        Bench::NbcProgress => crate::nbc_progress::run(c.world, label, p, &mut out),
        Bench::AppCg | Bench::AppHalo | Bench::AppColl => {
            crate::apps::run(c.world, label, p, &mut out)
        }
        Bench::RmaLatency | Bench::RmaBw | Bench::RmaOverlap => {
            crate::mpi_rma::run(c.world, c.label, p, work, &mut out)
        }
        Bench::PingpongBw => Err(BenchError::Invalid(
            "pingpong-bw has no MPI-level version (Portals level only)".into(),
        )),
        Bench::RpcRate | Bench::RpcBulk | Bench::RpcCpu => Err(BenchError::Invalid(
            "the object-store benchmarks run on the rpc-* implementations".into(),
        )),
    }
}

/// Rank 0's side of a round trip: send, then receive the answer.
fn send_then_receive(peer: &Process, sbuf: &[u8], rbuf: &mut [u8]) -> Result<()> {
    peer.send_with_tag(sbuf, TAG_DATA)?;
    peer.receive_into_with_tag(rbuf, TAG_DATA)?;
    Ok(())
}

/// `reps` repetitions of a barrier and `warm + iters` runs of `body`
/// (`time_reps` in `bench/c/common.c`); each repetition's seconds for the
/// last `iters` runs.
fn timed_reps(
    c: &Ctx,
    reps: usize,
    warm: usize,
    iters: usize,
    mut body: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let mut secs = Vec::with_capacity(reps);
    let ms = c.settle_ms.replace(0);
    if ms > 0 {
        c.world.barrier()?;
        let n = settle(ms, &mut body, |more| {
            let mut go = u8::from(more);
            c.world.process_at_rank(0).broadcast_into(&mut go)?;
            Ok(go != 0)
        })?;
        c.settled.set(Some(n));
    }
    for _ in 0..reps {
        c.world.barrier()?;
        secs.push(timed(warm, iters, &mut body)?);
    }
    Ok(secs)
}

/// `reps` repetitions of a barrier and `warm + iters` round trips; each
/// repetition's half round trip in µs.
fn half_rtt_reps(
    c: &Ctx,
    reps: usize,
    warm: usize,
    iters: usize,
    round_trip: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let secs = timed_reps(c, reps, warm, iters, round_trip)?;
    Ok(secs
        .into_iter()
        .map(|s| s * 1e6 / (2.0 * iters as f64))
        .collect())
}

/// `bench/c/latency.c`: ping-pong, half round trip.
fn latency(c: &Ctx, p: &Params, out: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let max = p.max_size();
    let sbuf = vec![0x5au8; max];
    let mut rbuf = vec![0u8; max];
    let peer = c.peer();
    for &n in &p.sizes {
        let iters = scale_iters(p.iters, n, 8192, 20);
        let warm = scale_iters(p.warmup, n, 8192, 2);
        let mut vals = half_rtt_reps(c, p.reps, warm, iters, || {
            if c.rank == 0 {
                send_then_receive(&peer, &sbuf[..n], &mut rbuf[..n])
            } else {
                peer.receive_into_with_tag(&mut rbuf[..n], TAG_DATA)?;
                Ok(peer.send_with_tag(&sbuf[..n], TAG_DATA)?)
            }
        })?;
        out(Record::of_values(p.bench, c.label, n, iters, &mut vals)?)?;
    }
    Ok(())
}

/// `bench/c/bandwidth.c` (bandwidth, bibw, msgrate): windows of
/// non-blocking operations into distinct receive buffers.
fn stream(c: &Ctx, p: &Params, out: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let bidir = p.bench == Bench::Bibw;
    let max = p.max_size();
    let maxbuf = p.max_window_bytes();
    let sbuf = vec![0x5au8; max];
    let mut rbuf = vec![0u8; maxbuf];
    let peer = c.peer();
    for &n in &p.sizes {
        let ns = n.max(1);
        let w = p.window_for(n);
        let iters = scale_iters(p.iters, n, 65536, 2);
        let warm = scale_iters(p.warmup, n, 65536, 1);
        let secs = timed_reps(c, p.reps, warm, iters, || {
            request::scope(|s| -> Result<()> {
                let mut reqs = Vec::with_capacity(2 * w);
                if bidir || c.rank == 1 {
                    for chunk in rbuf.chunks_mut(ns).take(w) {
                        reqs.push(peer.immediate_receive_into_with_tag(
                            s,
                            &mut chunk[..n],
                            TAG_DATA,
                        )?);
                    }
                }
                if bidir || c.rank == 0 {
                    for _ in 0..w {
                        reqs.push(peer.immediate_send_with_tag(s, &sbuf[..n], TAG_DATA)?);
                    }
                }
                request::wait_all(reqs)?;
                Ok(())
            })?;
            if !bidir {
                let ack = 0i32;
                if c.rank == 0 {
                    peer.receive_with_tag::<i32>(TAG_ACK)?;
                } else {
                    peer.send_with_tag(&ack, TAG_ACK)?;
                }
            }
            Ok(())
        })?;
        let msgs = (iters * w) as f64;
        let mut vals: Vec<f64> = secs
            .into_iter()
            .map(|secs| match p.bench {
                Bench::Msgrate => msgs / secs,
                Bench::Bibw => 2.0 * n as f64 * msgs / secs / 1e6,
                _ => n as f64 * msgs / secs / 1e6,
            })
            .collect();
        out(Record::of_values(p.bench, c.label, n, iters, &mut vals)?.with("window", w))?;
    }
    Ok(())
}

/// Averages of one overlap repetition, µs per iteration, and its longest
/// single wait.
#[derive(Default)]
struct OverlapPoint {
    wait: f64,
    total: f64,
    compute: f64,
    /// One stall (a rank descheduled for milliseconds) takes a whole
    /// repetition's average to 0 %; this shows it.
    wait_max: f64,
}

/// One repetition of `bench/c/overlap.c`: barrier; the sender sends; the
/// receiver posts the receive, computes `c_us`, waits.
fn overlap_rep(
    c: &Ctx,
    buf: &mut [u8],
    warm: usize,
    iters: usize,
    c_us: f64,
    work: &Work,
) -> Result<OverlapPoint> {
    let peer = c.peer();
    let mut p = OverlapPoint::default();
    for i in 0..warm + iters {
        c.world.barrier()?;
        if c.rank == 1 {
            peer.send_with_tag(&*buf, TAG_DATA)?;
            continue;
        }
        let t0 = Instant::now();
        let (t1, t2) = request::scope(|s| -> Result<(Instant, Instant)> {
            let req = peer.immediate_receive_into_with_tag(s, &mut *buf, TAG_DATA)?;
            work.run_us(c_us);
            let t1 = Instant::now();
            req.wait()?;
            Ok((t1, Instant::now()))
        })?;
        if i >= warm {
            p.wait_max = p.wait_max.max((t2 - t1).as_secs_f64() * 1e6);
            p.wait += (t2 - t1).as_secs_f64();
            p.total += (t2 - t0).as_secs_f64();
            p.compute += (t1 - t0).as_secs_f64();
        }
    }
    let per = 1e6 / iters as f64;
    p.wait *= per;
    p.total *= per;
    p.compute *= per;
    Ok(p)
}

/// `bench/c/overlap.c`: wait time and overlap % per size and compute factor;
/// the factor-0 row is the transfer-time baseline.
fn overlap(c: &Ctx, p: &Params, out: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let work = Work::calibrate();
    let mut buf = vec![0x5au8; p.max_size()];
    for &n in &p.sizes {
        let iters = scale_iters(p.iters, n, 65536, 10);
        let warm = scale_iters(p.warmup, n, 65536, 1);
        let (mut t, mut w, mut wmax) = (Vec::new(), Vec::new(), 0.0f64);
        for _ in 0..p.reps {
            let pt = overlap_rep(c, &mut buf[..n], warm, iters, 0.0, &work)?;
            t.push(pt.total);
            w.push(pt.wait);
            wmax = wmax.max(pt.wait_max);
        }
        let transfer = median(&mut t);
        let base = Record::new(
            "overlap",
            c.label,
            n as u64,
            iters as u64,
            "%",
            Summary::zero(p.reps),
        )
        .with("compute_factor", 0.0)
        .with("compute_us", 0.0)
        .with("wait_us", median(&mut w))
        .with("wait_max_us", wmax)
        .with("total_us", transfer)
        .with("transfer_us", transfer);
        out(base)?;
        for &f in &p.factors {
            let c_us = f * transfer;
            let (mut ov, mut w, mut t, mut cu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut wmax = 0.0f64;
            for _ in 0..p.reps {
                let pt = overlap_rep(c, &mut buf[..n], warm, iters, c_us, &work)?;
                let x = if transfer > 0.0 {
                    100.0 * (1.0 - pt.wait / transfer)
                } else {
                    0.0
                };
                ov.push(x.clamp(0.0, 100.0));
                w.push(pt.wait);
                t.push(pt.total);
                cu.push(pt.compute);
                wmax = wmax.max(pt.wait_max);
            }
            let r = Record::of_values(Bench::Overlap, c.label, n, iters, &mut ov)?
                .with("compute_factor", f)
                .with("compute_us", median(&mut cu))
                .with("wait_us", median(&mut w))
                .with("wait_max_us", wmax)
                .with("total_us", median(&mut t))
                .with("transfer_us", transfer);
            out(r)?;
        }
    }
    Ok(())
}

/// COMB polling method, worker side (`poll_worker` in `bench/c/comb.c`):
/// keep `q` receives posted, test them after every work interval, re-post
/// the completed ones. Returns the wet time in seconds and the messages
/// completed in it.
fn comb_poll_worker(
    c: &Ctx,
    slots: &Slots,
    q: usize,
    n: usize,
    interval: f64,
    work: &Work,
) -> Result<(f64, u64)> {
    let peer = c.peer();
    request::scope(|s| -> Result<(f64, u64)> {
        let mut reqs: Vec<Option<Request>> = Vec::with_capacity(q);
        for j in 0..q {
            // SAFETY: slot j has never been posted in this scope.
            let buf = unsafe { slots.slot(j) };
            reqs.push(Some(
                peer.immediate_receive_into_with_tag(s, buf, TAG_DATA)?,
            ));
        }
        let mut posted = q as i64;
        let mut done = 0u64;
        c.world.barrier()?;
        let t0 = Instant::now();
        for _ in 0..n {
            work.run_us(interval);
            for (j, slot) in reqs.iter_mut().enumerate() {
                let Some(r) = slot.take() else { continue };
                match r.test()? {
                    Ok(_) => {
                        done += 1;
                        posted += 1;
                        // SAFETY: the receive on slot j just completed, and
                        // its slice is not used again.
                        let buf = unsafe { slots.slot(j) };
                        *slot = Some(peer.immediate_receive_into_with_tag(s, buf, TAG_DATA)?);
                    }
                    Err(r) => *slot = Some(r),
                }
            }
        }
        let wet = t0.elapsed().as_secs_f64();
        // Drain: tell the sender how many receives are posted, learn how
        // many it sent, and receive the difference.
        peer.send_with_tag(&posted, TAG_STOP)?;
        let (total, _) = peer.receive_with_tag::<i64>(TAG_COUNT)?;
        request::wait_all(reqs.into_iter().flatten().collect())?;
        let mut extra = vec![0u8; slots.slot_len()];
        while posted < total {
            peer.receive_into_with_tag(&mut extra[..], TAG_DATA)?;
            posted += 1;
        }
        Ok((wet, done))
    })
}

/// COMB polling method, support side (`poll_sender` in `bench/c/comb.c`):
/// keep `q` sends outstanding until the worker says stop.
fn comb_poll_sender(c: &Ctx, sbuf: &[u8], q: usize) -> Result<()> {
    let peer = c.peer();
    let stop = Slots::new(1, 8);
    request::scope(|s| -> Result<()> {
        // SAFETY: the only use of the stop slot in this scope.
        let stop_buf = unsafe { stop.slot(0) };
        let mut reqs = vec![peer.immediate_receive_into_with_tag(s, stop_buf, TAG_STOP)?];
        let mut is_stop = vec![true];
        c.world.barrier()?;
        let mut sent = 0i64;
        for _ in 0..q {
            reqs.push(peer.immediate_send_with_tag(s, sbuf, TAG_DATA)?);
            is_stop.push(false);
            sent += 1;
        }
        loop {
            let (i, _) = request::wait_any(&mut reqs)?;
            if is_stop.remove(i) {
                break;
            }
            reqs.push(peer.immediate_send_with_tag(s, sbuf, TAG_DATA)?);
            is_stop.push(false);
            sent += 1;
        }
        let mut b = [0u8; 8];
        // SAFETY: the stop receive completed (wait_any returned it).
        unsafe { stop.read(0, &mut b) };
        let posted = i64::from_ne_bytes(b);
        peer.send_with_tag(&sent, TAG_COUNT)?;
        while sent < posted {
            peer.send_with_tag(sbuf, TAG_DATA)?;
            sent += 1;
        }
        request::wait_all(reqs)?;
        Ok(())
    })
}

/// One COMB point: message size, queue depth, intervals, interval length.
struct CombPoint<'w> {
    size: usize,
    q: usize,
    n: usize,
    interval: f64,
    work: &'w Work,
}

/// COMB post-work-wait method (`pww` in `bench/c/comb.c`); returns the wet
/// time in seconds.
fn comb_pww(c: &Ctx, rbuf: &mut [u8], sbuf: &[u8], pt: &CombPoint) -> Result<f64> {
    let peer = c.peer();
    let (size, q) = (pt.size, pt.q);
    c.world.barrier()?;
    let t0 = Instant::now();
    for _ in 0..pt.n {
        request::scope(|s| -> Result<()> {
            let mut reqs = Vec::with_capacity(q);
            if c.rank == 0 {
                for chunk in rbuf.chunks_mut(size.max(1)).take(q) {
                    reqs.push(peer.immediate_receive_into_with_tag(
                        s,
                        &mut chunk[..size],
                        TAG_DATA,
                    )?);
                }
                pt.work.run_us(pt.interval);
            } else {
                for _ in 0..q {
                    reqs.push(peer.immediate_send_with_tag(s, &sbuf[..size], TAG_DATA)?);
                }
            }
            request::wait_all(reqs)?;
            Ok(())
        })?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// `bench/c/comb.c`: availability % = dry time / wet time.
fn comb(c: &Ctx, p: &Params, out: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let q = p.window;
    let work = Work::calibrate();
    let max = p.max_size();
    let sbuf = vec![0x5au8; max];
    let mut rbuf = vec![0u8; max * q];
    for &size in &p.sizes {
        let slots = Slots::new(q, size);
        for &interval in &p.factors {
            let n = if interval > 0.0 {
                ((p.total_us / interval) as usize).max(1)
            } else {
                1
            };
            let (mut bw, mut dry, mut wet) = (Vec::new(), Vec::new(), Vec::new());
            let mut switches = Vec::new();
            for _ in 0..p.reps {
                c.world.barrier()?;
                let mut tdry = 0.0;
                if c.rank == 0 {
                    let t = Instant::now();
                    for _ in 0..n {
                        work.run_us(interval);
                    }
                    tdry = t.elapsed().as_secs_f64();
                }
                c.world.barrier()?;
                let cs0 = crate::cpu::context_switches();
                let (twet, got) = match p.method {
                    CombMethod::Poll if c.rank == 0 => {
                        comb_poll_worker(c, &slots, q, n, interval, &work)?
                    }
                    CombMethod::Poll => {
                        comb_poll_sender(c, &sbuf[..size], q)?;
                        (1.0, 0)
                    }
                    CombMethod::Pww => (
                        comb_pww(
                            c,
                            &mut rbuf,
                            &sbuf,
                            &CombPoint {
                                size,
                                q,
                                n,
                                interval,
                                work: &work,
                            },
                        )?,
                        (n * q) as u64,
                    ),
                };
                // Over the wet run and its drain, per message received.
                let cs = crate::cpu::context_switches().saturating_sub(cs0);
                if got > 0 {
                    switches.push(cs as f64 / got as f64);
                }
                bw.push(if twet > 0.0 {
                    got as f64 * size as f64 / twet / 1e6
                } else {
                    0.0
                });
                dry.push(tdry * 1e6);
                wet.push(twet * 1e6);
            }
            // Interference only lengthens a run: the shortest dry run is the
            // pure work time, and every wet run is compared with it.
            let dry_min = dry.iter().copied().fold(f64::INFINITY, f64::min);
            let mut av: Vec<f64> = wet
                .iter()
                .map(|&w| if w > 0.0 { 100.0 * dry_min / w } else { 0.0 })
                .collect();
            let r = Record::of_values(Bench::Comb, c.label, size, n, &mut av)?
                .with("method", p.method.name())
                .with("work_interval_us", interval)
                .with("intervals", n)
                .with("queue", q)
                .with("bandwidth", median(&mut bw))
                .with("bandwidth_unit", "MB/s")
                .with("dry_us", dry_min)
                .with("wet_us", median(&mut wet))
                .with("ctx_switches_per_msg", median(&mut switches));
            out(r)?;
        }
    }
    Ok(())
}

/// `bench/c/matchlist.c`: rank 1 keeps N − 1 non-matching receives posted
/// ahead of the ping's; rank 0 measures the half round trip.
fn matchlist(c: &Ctx, p: &Params, out: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let max = p.max_size();
    let sbuf = vec![0x5au8; max];
    let mut rbuf = vec![0u8; max];
    let peer = c.peer();
    for &n in &p.sizes {
        for &len in &p.posted {
            let len = len.max(1);
            if len > i32::MAX as usize - 2 {
                return Err(BenchError::Invalid(
                    "match-list length too large for tags".into(),
                ));
            }
            let iters = scale_iters(p.iters, len, 1000, 100);
            let warm = scale_iters(p.warmup, len, 1000, 10);
            let junk_slots = Slots::new(len - 1, 1);
            let ping_slot = Slots::new(1, n);
            let mut vals = Vec::with_capacity(p.reps);
            request::scope(|s| -> Result<()> {
                let mut junk = Vec::new();
                let mut ping = None;
                if c.rank == 1 {
                    for j in 0..len - 1 {
                        // SAFETY: each junk slot is posted once.
                        let b = unsafe { junk_slots.slot(j) };
                        junk.push(peer.immediate_receive_into_with_tag(s, b, 2 + j as Tag)?);
                    }
                    // SAFETY: the first use of the ping slot.
                    let b = unsafe { ping_slot.slot(0) };
                    ping = Some(peer.immediate_receive_into_with_tag(s, b, TAG_DATA)?);
                }
                vals = half_rtt_reps(c, p.reps, warm, iters, || {
                    if c.rank == 0 {
                        send_then_receive(&peer, &sbuf[..n], &mut rbuf[..n])?;
                    } else {
                        if let Some(r) = ping.take() {
                            r.wait()?;
                        }
                        // SAFETY: the previous receive on the ping slot
                        // completed just above.
                        let b = unsafe { ping_slot.slot(0) };
                        ping = Some(peer.immediate_receive_into_with_tag(s, b, TAG_DATA)?);
                        peer.send_with_tag(&sbuf[..n], TAG_DATA)?;
                    }
                    Ok(())
                })?;
                // The junk and the last ping receive never match: cancel them.
                for r in junk.iter().chain(ping.iter()) {
                    r.cancel()?;
                }
                Ok(())
            })?;
            c.world.barrier()?;
            out(
                Record::of_values(Bench::Matchlist, c.label, n, iters, &mut vals)?
                    .with("posted", len),
            )?;
        }
    }
    Ok(())
}

/// `bench/c/collectives.c` (allreduce, bcast): per repetition a barrier,
/// warm-up calls, then `iters` calls back to back; each rank's average time
/// per call; the repetition's value is the maximum of these averages over
/// the ranks (a max-reduction to rank 0, as OSU does). `all_reduce_into`
/// sums `size / 8` doubles (every send element 1.0); `broadcast_into` sends
/// `size` bytes from rank 0.
fn collective(c: &Ctx, p: &Params, out: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let max = p.max_size();
    let send = vec![1.0f64; max / 8];
    let mut recv = vec![0.0f64; max / 8];
    let mut buf = vec![0x5au8; max];
    let root = c.world.process_at_rank(0);
    let ranks = c.world.size();
    for &n in &p.sizes {
        let iters = scale_iters(p.iters, n, 8192, 10);
        let warm = scale_iters(p.warmup, n, 8192, 2);
        let secs = if p.bench == Bench::Allreduce {
            let k = n / 8;
            timed_reps(c, p.reps, warm, iters, || {
                Ok(c.world
                    .all_reduce_into(&send[..k], &mut recv[..k], SystemOperation::sum())?)
            })?
        } else {
            timed_reps(c, p.reps, warm, iters, || {
                Ok(root.broadcast_into(&mut buf[..n])?)
            })?
        };
        let mine: Vec<f64> = secs.iter().map(|s| s * 1e6 / iters as f64).collect();
        let mut vals = vec![0.0f64; mine.len()];
        if c.rank == 0 {
            root.reduce_into_root(&mine[..], &mut vals[..], SystemOperation::max())?;
        } else {
            root.reduce_into(&mine[..], SystemOperation::max())?;
        }
        out(Record::of_values(p.bench, c.label, n, iters, &mut vals)?.with("ranks", ranks))?;
    }
    Ok(())
}
