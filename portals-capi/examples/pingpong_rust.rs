//! The C ping-pong (`examples/c/pingpong.c`) written against the Rust API
//! directly, call for call: the baseline that shows what the C face
//! costs. Run both the same way, side by side:
//!
//! ```sh
//! ptlrun -n 2 target/release/examples/pingpong_rust 10000
//! ptlrun -n 2 ./pingpong 10000
//! ```

use std::time::Instant;

use ptl::{AckReq, EventKind, FailType, MdDesc, MdOptions, PortalIndex, Position, Remote, Unlink};

const PT: PortalIndex = PortalIndex(7);
const WORDS: usize = 8;
const BITS: u64 = 0x5151;

type Error = Box<dyn std::error::Error>;

fn wait_for(
    ni: &ptl::NetworkInterface,
    eq: ptl::EqHandle,
    kind: EventKind,
) -> Result<ptl::Event, Error> {
    loop {
        let ev = ni.eq_wait(eq, None)?;
        if ev.fail != FailType::Ok {
            return Err(format!("event failed: {ev:?}").into());
        }
        if ev.kind == kind {
            return Ok(ev);
        }
    }
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
}

fn main() -> Result<(), Error> {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let job = portals_runtime::join()?;
    let ni = job.ni();
    if job.size() != 2 {
        return Err("run with 2 ranks".into());
    }
    let rank = job.rank();
    let peer = job.id(1 - rank);
    let recv_eq = ni.eq_alloc(64)?;
    let send_eq = ni.eq_alloc(64)?;
    let me = ni.me_attach(PT, peer, BITS, 0, Unlink::Retain, Position::After)?;
    let rdesc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE | MdOptions::EVENT_START)
        .eq(recv_eq);
    let rmd = ni.md_attach(me, &rdesc, vec![0; WORDS * 8], Unlink::Retain)?;
    let smd = ni.md_bind(
        &MdDesc::new(MdOptions::empty()).eq(send_eq),
        vec![0; WORDS * 8],
        Unlink::Retain,
    )?;
    let remote = Remote::new(peer, PT, BITS);
    job.barrier()?;

    let mut buf = [0u8; WORDS * 8];
    let t0 = Instant::now();
    for i in 0..iters {
        if rank == 0 {
            for (k, c) in buf.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&(i * 1000 + k as u64).to_le_bytes());
            }
            ni.md_write(smd, 0, &buf)?;
            ni.put(smd, AckReq::NoAck, &remote, i)?;
            wait_for(ni, send_eq, EventKind::Sent)?;
            let ev = wait_for(ni, recv_eq, EventKind::Put)?;
            ni.md_read(rmd, 0, &mut buf)?;
            let ok = ev.hdr_data == i
                && words(&buf)
                    .enumerate()
                    .all(|(k, w)| w == i * 1000 + k as u64 + 1);
            if !ok {
                return Err(format!("round trip {i}: wrong answer").into());
            }
        } else {
            let ev = wait_for(ni, recv_eq, EventKind::Put)?;
            ni.md_read(rmd, 0, &mut buf)?;
            if ev.hdr_data != i
                || !words(&buf)
                    .enumerate()
                    .all(|(k, w)| w == i * 1000 + k as u64)
            {
                return Err(format!("round trip {i}: wrong ping").into());
            }
            for c in buf.chunks_exact_mut(8) {
                let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) + 1;
                c.copy_from_slice(&w.to_le_bytes());
            }
            ni.md_write(smd, 0, &buf)?;
            ni.put(smd, AckReq::NoAck, &remote, i)?;
            wait_for(ni, send_eq, EventKind::Sent)?;
        }
    }
    let us = t0.elapsed().as_secs_f64() * 1e6;
    if rank == 0 && iters > 0 {
        println!(
            "pingpong_rust: {iters} round trips of {} bytes, mean {:.1} us",
            WORDS * 8,
            us / iters as f64
        );
    }
    job.barrier()?;
    println!("OK pingpong_rust rank {rank}");
    Ok(())
}
