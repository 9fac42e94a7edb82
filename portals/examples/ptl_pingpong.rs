//! Two threads, two network interfaces on the loopback NAL, ping-ponging a
//! counter with puts. Each side posts one match entry whose descriptor
//! accepts puts, and blocks in `eq_wait` for the next one.
//!
//! Run: `cargo run --release -p portals --example ptl_pingpong -- 10000`

use std::sync::Arc;
use std::time::Instant;

use portals::loopback::LoopbackNetwork;
use portals::*;

const PT: PortalIndex = PortalIndex(2);

/// One side's objects. They must exist before the other side's first put,
/// or that put finds no match entry and is dropped.
struct Side {
    ni: NetworkInterface,
    eq: EqHandle,
    inbox: MdHandle,
    outbox: MdHandle,
}

fn setup(ni: NetworkInterface, peer: ProcessId) -> Result<Side> {
    let eq = ni.eq_alloc(64)?;
    let me = ni.me_attach(PT, peer, 0, 0, Unlink::Retain, Position::After)?;
    let inbox = ni.md_attach(
        me,
        &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq),
        vec![0; 8],
        Unlink::Retain,
    )?;
    let outbox = ni.md_bind(&MdDesc::default(), vec![0; 8], Unlink::Retain)?;
    Ok(Side {
        ni,
        eq,
        inbox,
        outbox,
    })
}

fn side(s: Arc<Side>, peer: ProcessId, rounds: u64, first: bool) -> Result<u64> {
    let (ni, eq, inbox, outbox) = (&s.ni, s.eq, s.inbox, s.outbox);
    let remote = Remote::new(peer, PT, 0);
    let send = |v: u64| -> Result<()> {
        ni.md_write(outbox, 0, &v.to_le_bytes())?;
        ni.put(outbox, AckReq::NoAck, &remote, 0)
    };
    // Values 1..=rounds are each sent once, alternately by the two sides;
    // whoever sends or receives `rounds` is done.
    if first {
        send(1)?;
        if rounds <= 1 {
            return Ok(1);
        }
    }
    loop {
        let ev = ni.eq_wait(eq, None)?;
        if ev.kind != EventKind::Put {
            continue;
        }
        let mut b = [0u8; 8];
        ni.md_read(inbox, 0, &mut b)?;
        let value = u64::from_le_bytes(b);
        if value >= rounds {
            return Ok(value);
        }
        send(value + 1)?;
        if value + 1 >= rounds {
            return Ok(value + 1);
        }
    }
}

fn main() -> Result<()> {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let net = LoopbackNetwork::new();
    let (ida, idb) = (ProcessId::new(0, 0), ProcessId::new(0, 1));
    let a = Arc::new(setup(net.ni(NiConfig::new(ida, 42))?, idb)?);
    let b = Arc::new(setup(net.ni(NiConfig::new(idb, 42))?, ida)?);
    let start = Instant::now();
    let tb = std::thread::spawn(move || side(b, ida, rounds, false));
    let va = side(a, idb, rounds, true)?;
    let vb = tb.join().map_err(|_| PtlError::Shutdown)??;
    let el = start.elapsed();
    println!(
        "pingpong: {} puts, final values {va}/{vb}, {:.2} µs per one-way put",
        rounds,
        el.as_secs_f64() * 1e6 / rounds as f64
    );
    assert!(
        va >= rounds && vb >= rounds,
        "counter did not reach {rounds}"
    );
    Ok(())
}
