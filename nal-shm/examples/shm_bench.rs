//! Two interfaces in one process over shared memory: an 8-byte put
//! ping-pong (half round trip) and a stream of 4 MiB acknowledged-free puts
//! (bandwidth). A quick indicative check, not the benchmark (that is
//! `ptl-bench`, with separate processes).
//!
//! `cargo run --release -p nal-shm --example shm_bench -- [thread|poll] [cma|nocma] [iters]`

use std::sync::Arc;
use std::time::Instant;

use nal_shm::{ProgressMode, ShmAddr, ShmConfig, ShmEndpoint, ShmNal};
use portals::*;

const BIG: usize = 4 << 20;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let progress = match args.get(1).map(String::as_str) {
        Some("poll") => ProgressMode::Poll,
        _ => ProgressMode::Thread,
    };
    let cma = args.get(2).map(String::as_str) != Some("nocma");
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let cfg = ShmConfig {
        progress,
        cma,
        ..ShmConfig::default()
    };
    let nal_err = |e: std::io::Error| PtlError::Nal(e.to_string());
    let eps = [
        ShmEndpoint::bind(cfg.clone()).map_err(nal_err)?,
        ShmEndpoint::bind(cfg).map_err(nal_err)?,
    ];
    let ids = [ProcessId::new(0, 0), ProcessId::new(0, 1)];
    let addrs: Vec<(ProcessId, ShmAddr)> = vec![(ids[0], eps[0].addr()), (ids[1], eps[1].addr())];
    let mut nis = Vec::new();
    let mut nals: Vec<Arc<ShmNal>> = Vec::new();
    for (i, ep) in eps.into_iter().enumerate() {
        let a = addrs.clone();
        nis.push(NetworkInterface::init(NiConfig::new(ids[i], 1), |core| {
            let n = ep.start(core, a)?;
            nals.push(n.clone());
            Ok(n as Arc<dyn Nal>)
        })?);
    }
    let mut sides = Vec::new();
    for ni in &nis {
        let eq = ni.eq_alloc(4096)?;
        let me = ni.me_attach(
            PortalIndex(1),
            ProcessId::ANY,
            0,
            0,
            Unlink::Retain,
            Position::After,
        )?;
        ni.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq),
            vec![0; BIG],
            Unlink::Retain,
        )?;
        let small = ni.md_bind(&MdDesc::default(), vec![0; 8], Unlink::Retain)?;
        let big = ni.md_bind(&MdDesc::default().eq(eq), vec![7; BIG], Unlink::Retain)?;
        sides.push((eq, small, big));
    }
    let wait = |ni: &NetworkInterface, eq: EqHandle, kind: EventKind| -> Result<()> {
        loop {
            if ni.eq_wait(eq, None)?.kind == kind {
                return Ok(());
            }
        }
    };
    // Ping-pong.
    let half_rtt = std::thread::scope(|s| -> Result<f64> {
        let h = s.spawn(|| -> Result<()> {
            let (ni, (eq, small, _)) = (&nis[1], sides[1]);
            let r = Remote::new(ids[0], PortalIndex(1), 0);
            for _ in 0..iters + 100 {
                wait(ni, eq, EventKind::Put)?;
                ni.put(small, AckReq::NoAck, &r, 0)?;
            }
            Ok(())
        });
        let (ni, (eq, small, _)) = (&nis[0], sides[0]);
        let r = Remote::new(ids[1], PortalIndex(1), 0);
        let mut t = Instant::now();
        for i in 0..iters + 100 {
            if i == 100 {
                t = Instant::now();
            }
            ni.put(small, AckReq::NoAck, &r, 0)?;
            wait(ni, eq, EventKind::Put)?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
        h.join().expect("pong side")?;
        Ok(us)
    })?;
    // Bandwidth: a window of 4 MiB puts, then one 8-byte put back.
    let rounds = 50;
    let window = 4;
    let gbps = std::thread::scope(|s| -> Result<f64> {
        let h = s.spawn(|| -> Result<()> {
            let (ni, (eq, small, _)) = (&nis[1], sides[1]);
            let r = Remote::new(ids[0], PortalIndex(1), 0);
            for _ in 0..rounds + 2 {
                for _ in 0..window {
                    wait(ni, eq, EventKind::Put)?;
                }
                ni.put(small, AckReq::NoAck, &r, 0)?;
            }
            Ok(())
        });
        let (ni, (eq, _, big)) = (&nis[0], sides[0]);
        let r = Remote::new(ids[1], PortalIndex(1), 0);
        let mut t = Instant::now();
        for round in 0..rounds + 2 {
            if round == 2 {
                t = Instant::now();
            }
            for _ in 0..window {
                ni.put(big, AckReq::NoAck, &r, 0)?;
            }
            let mut sent = 0;
            let mut back = false;
            while sent < window || !back {
                match ni.eq_wait(eq, None)?.kind {
                    EventKind::Sent => sent += 1,
                    EventKind::Put => back = true,
                    _ => {}
                }
            }
        }
        let secs = t.elapsed().as_secs_f64();
        h.join().expect("sink side")?;
        Ok((rounds * window * BIG) as f64 / secs / 1e9)
    })?;
    println!(
        "shm {progress:?} cma={cma} (in use: {}): 8 B half round trip {half_rtt:.2} us, 4 MiB puts {gbps:.2} GB/s",
        nals[0].cma_in_use()
    );
    println!("sender {:?}", nals[0].stats());
    println!("receiver {:?}", nals[1].stats());
    Ok(())
}
