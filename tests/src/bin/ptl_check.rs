//! A portals-level test program for multi-process tests, run under the
//! launcher: `ptl_check <scenario> [args]`. Prints `OK <scenario>` and exits
//! 0 when the scenario's checks pass; any failed check exits non-zero with a
//! message on stderr.

use std::time::{Duration, Instant};

use portals::*;
use portals_runtime::Job;

const PT: PortalIndex = PortalIndex(9);
const T: Option<Duration> = Some(Duration::from_secs(60));

type R<T> = std::result::Result<T, String>;

/// Byte 1 of `i * 2654435761 + seed`: it depends only on the low 16 bits
/// of `i` (a step of 2^16 in `i` adds a multiple of 2^16), so the pattern
/// repeats every 64 KiB. One period is computed and the rest copied:
/// computed byte by byte, 16 MB took 0.3-2.7 s in these unoptimised test
/// builds, most of a 16 MB put/get job's time.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    const PERIOD: usize = 1 << 16;
    let mut v: Vec<u8> = (0..len.min(PERIOD))
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed)
                .to_le_bytes()[1]
        })
        .collect();
    v.reserve(len - v.len());
    while v.len() < len {
        let n = (len - v.len()).min(v.len());
        v.extend_from_within(..n);
    }
    v
}

fn wait_kind(ni: &NetworkInterface, eq: EqHandle, kind: EventKind) -> R<Event> {
    loop {
        let ev = ni
            .eq_wait(eq, T)
            .map_err(|e| format!("waiting for {kind:?}: {e}"))?;
        if ev.fail != FailType::Ok {
            return Err(format!("{kind:?} wait saw a failed event {ev:?}"));
        }
        if ev.kind == kind {
            return Ok(ev);
        }
    }
}

/// Every rank puts and gets every size to and from every other rank and
/// checks the bytes both ways.
fn putget(job: &Job, max: usize) -> R<()> {
    let sizes: Vec<usize> = [0usize, 1, 88, 4095, 65_536, 1 << 20, 4 << 20, 16 << 20]
        .into_iter()
        .filter(|&s| s <= max)
        .collect();
    let ni = job.ni();
    let (me, n) = (job.rank(), job.size());
    let teq = ni.eq_alloc(4096).map_err(|e| e.to_string())?;
    let ieq = ni.eq_alloc(64).map_err(|e| e.to_string())?;
    // One target buffer per initiator, matched by the initiator's rank.
    let mut targets = Vec::new();
    for src in 0..n {
        let m = ni
            .me_attach(
                PT,
                job.id(src),
                src as u64,
                0,
                Unlink::Retain,
                Position::After,
            )
            .map_err(|e| e.to_string())?;
        let md = ni
            .md_attach(
                m,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE)
                    .eq(teq),
                vec![0; max.max(1)],
                Unlink::Retain,
            )
            .map_err(|e| e.to_string())?;
        targets.push(md);
    }
    job.barrier().map_err(|e| e.to_string())?;
    for round in 1..n {
        let dst = (me + round) % n;
        for (k, &len) in sizes.iter().enumerate() {
            let data = pattern(len, me * 100 + k as u32);
            let src = ni
                .md_bind(&MdDesc::default().eq(ieq), data.clone(), Unlink::Retain)
                .map_err(|e| e.to_string())?;
            let remote = Remote::new(job.id(dst), PT, me as u64);
            ni.put(src, AckReq::Ack, &remote, 0)
                .map_err(|e| e.to_string())?;
            wait_kind(ni, ieq, EventKind::Sent)?;
            let ack = wait_kind(ni, ieq, EventKind::Ack)?;
            if ack.mlength != len as u64 {
                return Err(format!("ack of {len} bytes to {dst} says {}", ack.mlength));
            }
            let back = ni
                .md_bind(&MdDesc::default().eq(ieq), vec![0xa5; len], Unlink::Retain)
                .map_err(|e| e.to_string())?;
            ni.get(back, &remote).map_err(|e| e.to_string())?;
            let rep = wait_kind(ni, ieq, EventKind::Reply)?;
            let got = ni
                .md_unlink(back)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            if rep.mlength != len as u64 || got != data {
                return Err(format!("get of {len} bytes from {dst} came back different"));
            }
            ni.md_unlink(src).map_err(|e| e.to_string())?;
        }
    }
    // Serve the others until every put and get aimed at us is done.
    let expected = (n as usize - 1) * sizes.len() * 2;
    let mut seen = 0;
    let mut drained = ni.eq_get(teq).map_err(|e| e.to_string())?;
    loop {
        if let Some(ev) = drained.take() {
            if ev.fail != FailType::Ok {
                return Err(format!("target event failed: {ev:?}"));
            }
            seen += 1;
        }
        if seen == expected {
            break;
        }
        drained = Some(
            ni.eq_wait(teq, T)
                .map_err(|e| format!("target events: {e}"))?,
        );
    }
    // The last put from each source left its largest pattern in our buffer.
    for src in (0..n).filter(|&s| s != me) {
        let k = sizes.len() - 1;
        let want = pattern(sizes[k], src * 100 + k as u32);
        let mut got = vec![0; want.len()];
        ni.md_read(targets[src as usize], 0, &mut got)
            .map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("buffer for rank {src} holds the wrong bytes"));
        }
    }
    job.barrier().map_err(|e| e.to_string())?;
    Ok(())
}

/// Every rank sends `each` 8-byte puts to every other rank, as fast as it
/// can; each checks it received them all, in order per sender.
fn storm(job: &Job, each: usize) -> R<()> {
    let ni = job.ni();
    let (me, n) = (job.rank(), job.size());
    let eq = ni
        .eq_alloc(each * n as usize * 2 + 16)
        .map_err(|e| e.to_string())?;
    let mut inbox = Vec::new();
    for src in 0..n {
        let m = ni
            .me_attach(PT, job.id(src), 0, 0, Unlink::Retain, Position::After)
            .map_err(|e| e.to_string())?;
        inbox.push(
            ni.md_attach(
                m,
                &MdDesc::new(MdOptions::OP_PUT).eq(eq),
                vec![0; each * 8],
                Unlink::Retain,
            )
            .map_err(|e| e.to_string())?,
        );
    }
    let out = ni
        .md_bind(&MdDesc::default().eq(eq), vec![0; each * 8], Unlink::Retain)
        .map_err(|e| e.to_string())?;
    for i in 0..each {
        ni.md_write(
            out,
            i as u64 * 8,
            &((me as u64) << 32 | i as u64).to_le_bytes(),
        )
        .map_err(|e| e.to_string())?;
    }
    job.barrier().map_err(|e| e.to_string())?;
    for i in 0..each {
        for d in 1..n {
            let dst = (me + d) % n;
            ni.put_region(
                out,
                i as u64 * 8,
                8,
                AckReq::NoAck,
                &Remote::new(job.id(dst), PT, 0),
                0,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    let want = each * (n as usize - 1);
    let (mut puts, mut sents) = (0, 0);
    while puts < want || sents < want {
        let ev = ni.eq_wait(eq, T).map_err(|e| format!("storm: {e}"))?;
        match ev.kind {
            EventKind::Put => puts += 1,
            EventKind::Sent => sents += 1,
            k => return Err(format!("unexpected {k:?}")),
        }
    }
    for src in (0..n).filter(|&s| s != me) {
        let mut got = vec![0u8; each * 8];
        ni.md_read(inbox[src as usize], 0, &mut got)
            .map_err(|e| e.to_string())?;
        for i in 0..each {
            let v = u64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().map_err(|_| "slice")?);
            if v != (src as u64) << 32 | i as u64 {
                return Err(format!("message {i} from {src} out of order or wrong"));
            }
        }
    }
    job.barrier().map_err(|e| e.to_string())?;
    Ok(())
}

/// Rank 1 posts a buffer, then sleeps without calling the library; rank 0
/// puts 4 MB with an acknowledgment. With a progress thread the ack comes
/// back while rank 1 sleeps; in polling mode it cannot.
fn sleepy_target(job: &Job, expect_progress: bool) -> R<()> {
    const LEN: usize = 4 << 20;
    const NAP: Duration = Duration::from_millis(2000);
    let ni = job.ni();
    let data = pattern(LEN, 77);
    match job.rank() {
        1 => {
            let m = ni
                .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
                .map_err(|e| e.to_string())?;
            let md = ni
                .md_attach(
                    m,
                    &MdDesc::new(MdOptions::OP_PUT),
                    vec![0; LEN],
                    Unlink::Retain,
                )
                .map_err(|e| e.to_string())?;
            job.barrier().map_err(|e| e.to_string())?;
            // Compute (here: sleep) without any library call.
            std::thread::sleep(NAP);
            if expect_progress {
                let mut got = vec![0; LEN];
                ni.md_read(md, 0, &mut got).map_err(|e| e.to_string())?;
                if got != data {
                    return Err("data was not in place when the target woke up".into());
                }
            }
            job.barrier().map_err(|e| e.to_string())?;
        }
        0 => {
            let eq = ni.eq_alloc(8).map_err(|e| e.to_string())?;
            let src = ni
                .md_bind(&MdDesc::default().eq(eq), data, Unlink::Retain)
                .map_err(|e| e.to_string())?;
            job.barrier().map_err(|e| e.to_string())?;
            // Let the target leave the barrier first: a target still waiting
            // in it when the put arrives moves the put (a whole 4 MiB
            // single-copy read is one progress step), and polling mode
            // would seem to progress without calls.
            std::thread::sleep(NAP / 8);
            let t0 = Instant::now();
            ni.put(src, AckReq::Ack, &Remote::new(job.id(1), PT, 1), 0)
                .map_err(|e| e.to_string())?;
            let acked = loop {
                match ni.eq_wait(eq, Some(NAP.mul_f32(0.6).saturating_sub(t0.elapsed()))) {
                    Ok(ev) if ev.kind == EventKind::Ack => break Some(t0.elapsed()),
                    Ok(_) => continue,
                    Err(PtlError::Timeout) => break None,
                    Err(e) => return Err(e.to_string()),
                }
            };
            match (expect_progress, acked) {
                (true, Some(t)) => println!(
                    "acknowledged after {} ms while the target slept",
                    t.as_millis()
                ),
                (true, None) => return Err("no acknowledgment while the target slept".into()),
                (false, None) => println!("no progress without library calls, as expected"),
                (false, Some(_)) => return Err("polling mode progressed without calls".into()),
            }
            job.barrier().map_err(|e| e.to_string())?;
        }
        _ => job
            .barrier()
            .and_then(|_| job.barrier())
            .map_err(|e| e.to_string())?,
    }
    Ok(())
}

/// Rank 1 kills itself while rank 0 streams large puts to it; rank 0 must
/// see failure events, quickly.
fn die_mid_transfer(job: &Job) -> R<()> {
    const LEN: usize = 32 << 20;
    let ni = job.ni();
    // The test checks that the ranks share memory (and then that their
    // inbox names, printed by `main`, are gone).
    println!("pid {} on {}", std::process::id(), ni.nal_name());
    match job.rank() {
        1 => {
            let eq = ni.eq_alloc(64).map_err(|e| e.to_string())?;
            let m = ni
                .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
                .map_err(|e| e.to_string())?;
            ni.md_attach(
                m,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE | MdOptions::EVENT_START)
                    .eq(eq),
                vec![0; LEN],
                Unlink::Retain,
            )
            .map_err(|e| e.to_string())?;
            job.barrier().map_err(|e| e.to_string())?;
            // Die as soon as a transfer has started arriving.
            let _ = wait_kind(ni, eq, EventKind::PutStart);
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
            Err("still alive after SIGKILL".into())
        }
        _ => {
            // Survive the launcher's SIGTERM long enough to report.
            // SAFETY: installing SIG_IGN is async-signal-safe and touches no
            // Rust state.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            let eq = ni.eq_alloc(256).map_err(|e| e.to_string())?;
            let src = ni
                .md_bind(&MdDesc::default().eq(eq), vec![3; LEN], Unlink::Retain)
                .map_err(|e| e.to_string())?;
            job.barrier().map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            let remote = Remote::new(job.id(1), PT, 1);
            let mut in_flight = 0;
            loop {
                while in_flight < 2 {
                    match ni.put(src, AckReq::Ack, &remote, 0) {
                        Ok(()) => in_flight += 1,
                        Err(PtlError::MdInUse) => break,
                        Err(e) => return Err(e.to_string()),
                    }
                }
                let ev = ni
                    .eq_wait(eq, Some(Duration::from_secs(15)))
                    .map_err(|e| format!("no failure event: {e}"))?;
                if ev.fail != FailType::Ok {
                    println!(
                        "survivor saw failure {:?} on {:?} after {} ms",
                        ev.fail,
                        ev.kind,
                        t0.elapsed().as_millis()
                    );
                    return Ok(());
                }
                if ev.kind == EventKind::Ack {
                    in_flight -= 1;
                }
            }
        }
    }
}

/// The socket buffer sizes given to the launcher reached the transport
/// (`expect_snd`, `expect_rcv`: the sizes asked for), and traffic flows
/// with them.
fn sockbuf(job: &Job, expect_snd: usize, expect_rcv: usize) -> R<()> {
    let tcp = job.tcp().ok_or("not a TCP job")?;
    let cfg = tcp.config();
    if cfg.send_buffer != Some(expect_snd) || cfg.recv_buffer != Some(expect_rcv) {
        return Err(format!(
            "transport has send {:?} / receive {:?} buffers, expected {expect_snd} / {expect_rcv}",
            cfg.send_buffer, cfg.recv_buffer
        ));
    }
    println!("socket buffers {expect_snd} / {expect_rcv}");
    putget(job, 1 << 20)
}

/// The transport was told whether this host runs more ranks than it has
/// cores (`TcpConfig::crowded`, `UdpConfig::crowded`), as the job worked it
/// out (every rank here shares one host). Prints `crowded BOOL cores N`.
fn crowded(job: &Job) -> R<()> {
    let told = match (job.tcp(), job.udp(), job.shm()) {
        (Some(t), _, _) => t.config().crowded,
        (None, Some(u), _) => u.config().crowded,
        (None, None, Some(s)) => s.config().crowded,
        (None, None, None) => return Err("no TCP, UDP or shared-memory transport".into()),
    };
    if told != job.oversubscribed() {
        return Err(format!(
            "the transport was told crowded = {told}, the job is oversubscribed = {}",
            job.oversubscribed()
        ));
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    println!("crowded {told} cores {cores}");
    Ok(())
}

/// Print the CPUs this rank may use (`cpus 0,1`) and, once its progress
/// thread has placed itself (it does before it first sleeps), that
/// thread's (`progress-cpus 0,1`).
fn affinity() -> Result<(), String> {
    let list = |c: &[usize]| {
        c.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let own = nal_sys::affinity::allowed_cpus().map_err(|e| e.to_string())?;
    println!("cpus {}", list(&own));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let asleep = portals_tests::threads::threads_named(&["ptl-tcp-", "ptl-udp-", "ptl-shm-"])
            .into_iter()
            .find(|t| t.asleep);
        if let Some(t) = asleep {
            println!("progress-cpus {}", list(&t.cpus));
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("no progress thread asleep after 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).cloned().unwrap_or_default();
    portals_runtime::init_logging();
    let job = match portals_runtime::join() {
        Ok(j) => j,
        Err(e) => {
            eprintln!("join failed: {e}");
            std::process::exit(2);
        }
    };
    // Tests look for what the job could have left in /dev/shm.
    if let Some(shm) = job.shm() {
        println!("inbox {}", shm.inbox_name().to_string_lossy());
    }
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let r = match scenario.as_str() {
        "putget" => putget(&job, arg(2, 16 << 20)),
        "storm" => storm(&job, arg(2, 2000)),
        "sleepy-target" => sleepy_target(&job, args.get(2).map(String::as_str) != Some("poll")),
        "die-mid-transfer" => die_mid_transfer(&job),
        "affinity" => affinity(),
        "killed-at-start" => {
            // Before any peer had a reason to map this rank's inbox.
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
            Err("still alive after SIGKILL".into())
        }
        "sockbuf" => sockbuf(&job, arg(2, 0), arg(3, 0)),
        "crowded" => crowded(&job),
        other => Err(format!("unknown scenario {other:?}")),
    };
    portals_tests::finish(&scenario, job.rank() as i32, r);
}
