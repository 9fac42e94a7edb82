//! Two interfaces in one process over TCP loopback, ping-ponging 8-byte
//! puts; prints the half round trip. A quick check, not the benchmark (that
//! is `ptl-bench`, with separate processes).
//!
//! `cargo run --release -p nal-tcp --example tcp_pingpong -- [iters] [epoll|io_uring] [thread|poll]`

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use nal_tcp::{Backend, ProgressMode, TcpConfig, TcpEndpoint};
use portals::*;

fn nal_err(e: std::io::Error) -> PtlError {
    PtlError::Nal(e.to_string())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let iters: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let backend = match args.get(2).map(String::as_str) {
        Some("io_uring") => Backend::IoUring,
        _ => Backend::Epoll,
    };
    let progress = match args.get(3).map(String::as_str) {
        Some("poll") => ProgressMode::Poll,
        _ => ProgressMode::Thread,
    };
    let cfg = TcpConfig {
        backend,
        progress,
        ..TcpConfig::default()
    };
    let eps = [
        TcpEndpoint::bind(cfg.clone()).map_err(nal_err)?,
        TcpEndpoint::bind(cfg).map_err(nal_err)?,
    ];
    let ids = [ProcessId::new(0, 0), ProcessId::new(0, 1)];
    let addrs: Vec<(ProcessId, SocketAddr)> =
        vec![(ids[0], eps[0].local_addr()), (ids[1], eps[1].local_addr())];
    let mut nis = Vec::new();
    for (i, ep) in eps.into_iter().enumerate() {
        let a = addrs.clone();
        nis.push(NetworkInterface::init(NiConfig::new(ids[i], 1), |core| {
            Ok(ep.start(core, a)? as Arc<dyn Nal>)
        })?);
    }
    let mut sides = Vec::new();
    for ni in &nis {
        let eq = ni.eq_alloc(1024)?;
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
            vec![0; 8],
            Unlink::Retain,
        )?;
        let src = ni.md_bind(&MdDesc::default(), vec![0; 8], Unlink::Retain)?;
        sides.push((eq, src));
    }
    let run = |me: usize| -> Result<f64> {
        let ni = &nis[me];
        let (eq, src) = sides[me];
        let r = Remote::new(ids[1 - me], PortalIndex(1), 0);
        let wait_put = || -> Result<()> {
            loop {
                if ni.eq_wait(eq, None)?.kind == EventKind::Put {
                    return Ok(());
                }
            }
        };
        let t = Instant::now();
        for _ in 0..iters {
            if me == 0 {
                ni.put(src, AckReq::NoAck, &r, 0)?;
                wait_put()?;
            } else {
                wait_put()?;
                ni.put(src, AckReq::NoAck, &r, 0)?;
            }
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0)
    };
    let half = std::thread::scope(|s| {
        let h = s.spawn(|| run(1));
        let a = run(0);
        let _ = h.join();
        a
    })?;
    println!("{backend:?} {progress:?}: 8-byte put half round trip {half:.2} µs");
    Ok(())
}
