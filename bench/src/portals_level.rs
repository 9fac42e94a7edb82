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
use crate::timing::timed;

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
    loop {
        let ev = ni.eq_wait(eq, WAIT)?;
        if ev.kind == EventKind::Put {
            if ev.fail != FailType::Ok {
                return Err(BenchError::Invalid(format!("a put failed: {:?}", ev.fail)));
            }
            return Ok(());
        }
    }
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
    for &n in &p.sizes {
        let iters = scale_iters(p.iters, n, 8192, 20);
        let warm = scale_iters(p.warmup, n, 8192, 2);
        let mut vals = Vec::with_capacity(p.reps);
        for _ in 0..p.reps {
            job.barrier()?;
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
        out(Record::of_values(p.bench, label, n, iters, &mut vals)?)?;
    }
    Ok(())
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
    for &n in &p.sizes {
        let ns = n.max(1) as u64;
        let w = p.window_for(n);
        let iters = scale_iters(p.iters, n, 65536, 2);
        let warm = scale_iters(p.warmup, n, 65536, 1);
        let mut vals = Vec::with_capacity(p.reps);
        for _ in 0..p.reps {
            job.barrier()?;
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
        out(Record::of_values(p.bench, label, n, iters, &mut vals)?.with("window", w))?;
    }
    Ok(())
}
