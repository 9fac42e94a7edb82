//! The Portals-level benchmarks: latency and bandwidth with puts, the same
//! loops as the MPI level (and `bench/c/latency.c`, `bench/c/bandwidth.c`)
//! without the MPI protocols on top, run inside both ranks of a two-rank job
//! joined through `portals-runtime`. Rank 0 emits the records. Ping-pong
//! bandwidth (`pingpong-bw`, the figure `fi_pingpong` reports) is the
//! latency loop's size / half round trip.
//!
//! Each rank attaches one match entry per message kind with a descriptor
//! that accepts puts at remotely managed offsets and reports them on an
//! event queue; the initiator's descriptor has no event queue and requests
//! no acknowledgment, so a round trip is one put each way and one event
//! each side.

use std::time::Duration;

use portals::{
    AckReq, EqHandle, EventKind, FailType, MdDesc, MdHandle, MdOptions, NetworkInterface,
    PortalIndex, Position, ProcessId, Remote, Unlink,
};
use portals_runtime::Job;

use crate::error::{BenchError, Result};
use crate::params::{scale_iters, Bench, Params};
use crate::record::Record;
use crate::timing::{settle, timed};

const PT: PortalIndex = PortalIndex(2);
const DATA: u64 = 1;
const ACK: u64 = 2;
/// A lost message would otherwise hang the job; the launcher's timeout is
/// the backstop, this gives a clearer error.
const WAIT: Option<Duration> = Some(Duration::from_secs(60));

/// Run benchmark `p` (latency or bandwidth) as this rank of a two-rank job;
/// rank 0 passes every record to `emit`.
pub fn run(p: &Params, label: &str, emit: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
    let job = portals_runtime::join()?;
    if job.size() != 2 {
        return Err(BenchError::Invalid(format!(
            "{} needs exactly 2 ranks, not {}",
            p.bench,
            job.size()
        )));
    }
    let mut out = |r: Record| if job.rank() == 0 { emit(r) } else { Ok(()) };
    let r = match p.bench {
        Bench::Latency | Bench::PingpongBw => latency(&job, p, label, &mut out),
        Bench::Bandwidth => bandwidth(&job, p, label, &mut out),
        b => Err(BenchError::Invalid(format!(
            "{b} has no Portals-level version (only latency, bandwidth and pingpong-bw)"
        ))),
    };
    // Leave together, so nobody tears down while the other still sends.
    job.barrier()?;
    r
}

/// A match entry for puts from `peer` with `bits`, over `len` bytes.
fn inbox(
    ni: &NetworkInterface,
    peer: ProcessId,
    bits: u64,
    len: usize,
    eq: EqHandle,
) -> Result<MdHandle> {
    let me = ni.me_attach(PT, peer, bits, 0, Unlink::Retain, Position::After)?;
    Ok(ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq),
        vec![0; len.max(1)],
        Unlink::Retain,
    )?)
}

/// Wait for the next put to arrive.
fn wait_put(ni: &NetworkInterface, eq: EqHandle) -> Result<()> {
    wait_put_data(ni, eq).map(|_| ())
}

/// Wait for the next put to arrive; its header data.
fn wait_put_data(ni: &NetworkInterface, eq: EqHandle) -> Result<u64> {
    loop {
        let ev = ni.eq_wait(eq, WAIT)?;
        if ev.kind == EventKind::Put {
            if ev.fail != FailType::Ok {
                return Err(BenchError::Invalid(format!("a put failed: {:?}", ev.fail)));
            }
            return Ok(ev.hdr_data);
        }
    }
}

/// Header data of rank 0's puts while settling (`Params::settle_ms`):
/// more to come, or the last round.
const SETTLE_MORE: u64 = 1;
const SETTLE_LAST: u64 = 2;

/// Settle (see [`crate::params::SETTLE_MS`]) as the MPI level does, with
/// [`settle`]: `round(hdr)` runs one iteration, rank 0 sending with header
/// data `hdr`, and returns the header data rank 1 received (ignored on rank
/// 0). The agreement after each chunk is one more round whose header data
/// carries rank 0's decision, so no barrier (which sleeps in the launcher
/// here) comes between settling and timing. Returns the iterations run.
fn settle_by_puts(me: u32, ms: u64, round: impl Fn(u64) -> Result<u64>) -> Result<usize> {
    settle(
        ms,
        || round(SETTLE_MORE).map(drop),
        |more| {
            let got = round(if more { SETTLE_MORE } else { SETTLE_LAST })?;
            match (me, got) {
                (0, _) => Ok(more),
                (_, SETTLE_MORE) => Ok(true),
                (_, SETTLE_LAST) => Ok(false),
                (_, other) => Err(BenchError::Invalid(format!(
                    "settling: unexpected header data {other}"
                ))),
            }
        },
    )
}

/// Ping-pong of puts; half round trip in µs, or for `pingpong-bw` the
/// same loop as size / half round trip in MB/s (what `fi_pingpong` calls
/// its bandwidth).
fn latency(
    job: &Job,
    p: &Params,
    label: &str,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let ni = job.ni();
    let me = job.rank();
    let peer = job.id(1 - me);
    let max = p.max_size();
    let eq = ni.eq_alloc(1024)?;
    inbox(ni, peer, DATA, max, eq)?;
    let src = ni.md_bind(&MdDesc::default(), vec![0x5a; max], Unlink::Retain)?;
    let remote = Remote::new(peer, PT, DATA);
    job.barrier()?;
    let first = p.sizes.first().copied().unwrap_or(0) as u64;
    let mut settled = settle_by_puts(me, p.settle_ms, |hdr| {
        if me == 0 {
            ni.put_region(src, 0, first, AckReq::NoAck, &remote, hdr)?;
            wait_put(ni, eq)?;
            Ok(hdr)
        } else {
            let got = wait_put_data(ni, eq)?;
            ni.put_region(src, 0, first, AckReq::NoAck, &remote, 0)?;
            Ok(got)
        }
    })?;
    for &n in &p.sizes {
        let iters = scale_iters(p.iters, n, 8192, 20);
        let warm = scale_iters(p.warmup, n, 8192, 2);
        let mut vals = Vec::with_capacity(p.reps);
        // No barrier between repetitions (the C programs' `MPI_Barrier`
        // spins; the runtime's sleeps in the launcher, and an idle CPU
        // comes back slow here): a ping-pong keeps its ranks in step.
        for _ in 0..p.reps {
            let secs = timed(warm, iters, || {
                if me == 0 {
                    ni.put_region(src, 0, n as u64, AckReq::NoAck, &remote, 0)?;
                    wait_put(ni, eq)
                } else {
                    wait_put(ni, eq)?;
                    Ok(ni.put_region(src, 0, n as u64, AckReq::NoAck, &remote, 0)?)
                }
            })?;
            let half_rtt_us = secs * 1e6 / (2.0 * iters as f64);
            vals.push(if p.bench == Bench::PingpongBw {
                n as f64 / half_rtt_us
            } else {
                half_rtt_us
            });
        }
        out(settle_note(
            Record::of_values(p.bench, label, n, iters, &mut vals)?,
            &mut settled,
        ))?;
    }
    Ok(())
}

/// The first point's record notes the settling iterations run before it.
fn settle_note(r: Record, settled: &mut usize) -> Record {
    match std::mem::take(settled) {
        0 => r,
        n => r.with("settle_iters", n),
    }
}

/// Windows of puts into distinct regions of the receiver's descriptor; the
/// receiver answers each window with an empty put. MB/s (10^6 B/s).
fn bandwidth(
    job: &Job,
    p: &Params,
    label: &str,
    out: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let ni = job.ni();
    let me = job.rank();
    let peer = job.id(1 - me);
    let max = p.max_size();
    let maxbuf = p.max_window_bytes();
    let eq = ni.eq_alloc(4 * p.window.max(64))?;
    if me == 0 {
        inbox(ni, peer, ACK, 1, eq)?;
    } else {
        inbox(ni, peer, DATA, maxbuf, eq)?;
    }
    let src = ni.md_bind(&MdDesc::default(), vec![0x5a; max], Unlink::Retain)?;
    job.barrier()?;
    // A window of the first size, its last put carrying the decision.
    let first = p.sizes.first().copied().unwrap_or(0);
    let (fw, fs) = (p.window_for(first) as u64, first.max(1) as u64);
    let mut settled = settle_by_puts(me, p.settle_ms, |hdr| {
        if me == 0 {
            for j in 0..fw {
                let remote = Remote::new(peer, PT, DATA).with_offset(j * fs);
                let h = if j + 1 == fw { hdr } else { SETTLE_MORE };
                ni.put_region(src, 0, first as u64, AckReq::NoAck, &remote, h)?;
            }
            wait_put(ni, eq)?;
            Ok(hdr)
        } else {
            let mut got = 0;
            for _ in 0..fw {
                got = wait_put_data(ni, eq)?;
            }
            let remote = Remote::new(peer, PT, ACK);
            ni.put_region(src, 0, 0, AckReq::NoAck, &remote, 0)?;
            Ok(got)
        }
    })?;
    for &n in &p.sizes {
        let ns = n.max(1) as u64;
        let w = p.window_for(n);
        let iters = scale_iters(p.iters, n, 65536, 2);
        let warm = scale_iters(p.warmup, n, 65536, 1);
        let mut vals = Vec::with_capacity(p.reps);
        // No barrier between repetitions, as in `latency`: the receiver's
        // answer to each window keeps the ranks in step.
        for _ in 0..p.reps {
            let secs = timed(warm, iters, || {
                if me == 0 {
                    for j in 0..w as u64 {
                        let remote = Remote::new(peer, PT, DATA).with_offset(j * ns);
                        ni.put_region(src, 0, n as u64, AckReq::NoAck, &remote, 0)?;
                    }
                    wait_put(ni, eq)
                } else {
                    for _ in 0..w {
                        wait_put(ni, eq)?;
                    }
                    let remote = Remote::new(peer, PT, ACK);
                    Ok(ni.put_region(src, 0, 0, AckReq::NoAck, &remote, 0)?)
                }
            })?;
            vals.push(n as f64 * (iters * w) as f64 / secs / 1e6);
        }
        out(settle_note(
            Record::of_values(p.bench, label, n, iters, &mut vals)?.with("window", w),
            &mut settled,
        ))?;
    }
    Ok(())
}
