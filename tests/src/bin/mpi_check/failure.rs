//! Peer failure: what the survivors of a dead rank see.

use super::*;

/// A rank dies in the middle of an exchange; the survivor's wait fails
/// with `PeerFailed` within a bounded time instead of hanging. `case`:
/// `recv` (a posted receive from the dead rank), `anysrc` (a receive and a
/// probe from any source, in a communicator the dead rank belongs to), `long` (a long send whose
/// receiver got the envelope, acknowledged zero bytes, and died before
/// fetching the data), `sync` (a synchronous send received unexpected by a
/// rank that died before matching it).
pub(crate) fn death(u: &Universe, case: &str) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let eager = u.config().eager_limit;
    // The peer exits as soon as it has this message: the acknowledgment a
    // standard send waits for may die with it. The send reached it either
    // way (it exits only after receiving it).
    let signal_the_dying = |p: &Process<'_>| -> R<()> {
        match p.send_with_tag(&1u8, CTRL) {
            Ok(()) | Err(MpiError::PeerFailed { .. }) => Ok(()),
            Err(x) => Err(e(x)),
        }
    };
    let die = |why: &str| -> ! {
        println!("OK death rank {me} ({why})");
        std::process::exit(0)
    };
    let expect_failure = |r: Result<(), MpiError>, t: Instant| -> R<()> {
        match r {
            Err(MpiError::PeerFailed { rank, .. }) => {
                ensure(rank == 1 - me, || format!("PeerFailed names rank {rank}"))?;
                ensure(t.elapsed() < Duration::from_secs(60), || {
                    format!("the failure took {:?} to show", t.elapsed())
                })?;
                println!("death {case}: PeerFailed after {:?}", t.elapsed());
                Ok(())
            }
            other => Err(format!("{case}: expected PeerFailed, got {other:?}")),
        }
    };
    match (case, me) {
        ("anysrc", 0) => {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            die("after the peer posted its receive from any source");
        }
        ("anysrc", _) => {
            let mut buf = [0u8; 16];
            let any = w.any_process();
            // Posted before the peer dies: a pending receive must fail.
            scope(|sc| -> R<()> {
                let req = any
                    .immediate_receive_into_with_tag(sc, &mut buf[..], 5)
                    .map_err(e)?;
                signal_the_dying(&p)?;
                let t = Instant::now();
                expect_failure(req.wait().map(|_| ()), t)
            })?;
            // Later receives and probes from any source fail at once.
            let t = Instant::now();
            expect_failure(any.receive_into(&mut buf[..]).map(|_| ()), t)?;
            let t = Instant::now();
            expect_failure(any.probe().map(|_| ()), t)
        }
        ("ibarrier", 0) => {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            die("after the peer started a non-blocking barrier");
        }
        ("ibarrier", _) => {
            // Started before the peer dies, never joined by it: the chain
            // waits for a fan-out that cannot come, and must fail.
            let req = w.immediate_barrier().map_err(e)?;
            signal_the_dying(&p)?;
            let t = Instant::now();
            expect_failure(req.wait().map(|_| ()), t)
        }
        ("iallgather", 0) => {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            die("after the peer started a non-blocking all-gather");
        }
        ("iallgather", _) => {
            // A flat chain: its put to the dead rank waits for a posted
            // notice that cannot come, and so does the dead rank's block.
            let mine = [1u64];
            let mut all = [0u64; 2];
            scope(|sc| -> R<()> {
                let req = w
                    .immediate_all_gather_into(sc, &mine[..], &mut all[..])
                    .map_err(e)?;
                signal_the_dying(&p)?;
                let t = Instant::now();
                expect_failure(req.wait().map(|_| ()), t)
            })
        }
        ("recv", 0) => {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            die("after the peer posted its receive");
        }
        ("recv", _) => {
            signal_the_dying(&p)?;
            let mut buf = [0u8; 16];
            let t = Instant::now();
            expect_failure(p.receive_into_with_tag(&mut buf[..], 5).map(|_| ()), t)?;
            // The dead rank cannot be received from any more.
            let t = Instant::now();
            expect_failure(p.receive_into_with_tag(&mut buf[..], 6).map(|_| ()), t)
        }
        ("allreduce", 0) => {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            die("after the peer entered a short all-reduce");
        }
        ("allreduce", _) => {
            // A short all-reduce runs on the communicator's slots: its wait
            // for the dead rank's put must end with the death, not hang.
            signal_the_dying(&p)?;
            let mut sum = 0u64;
            let t = Instant::now();
            expect_failure(
                w.all_reduce_into(&1u64, &mut sum, SystemOperation::sum()),
                t,
            )
        }
        ("long" | "sync", 1) => {
            // Let the message arrive unexpected, then die without matching.
            p.probe_with_tag(5).map_err(e)?;
            std::thread::sleep(Duration::from_millis(100));
            die("after the message arrived unexpected");
        }
        ("long", _) => {
            let data = pattern(eager * 4, 3);
            let t = Instant::now();
            expect_failure(p.send_with_tag(&data[..], 5), t)
        }
        ("sync", _) => {
            let t = Instant::now();
            expect_failure(p.synchronous_send_with_tag(&[1u8, 2, 3][..], 5), t)
        }
        _ => Err(format!("unknown death case {case:?}")),
    }
}

/// `lastlong expected|unexpected`: rank 1's last act is a 1 MiB standard
/// send to rank 0, which receives it (posted before the data comes, or
/// after it waited unexpected) and finalizes at once. Rank 0's departure
/// notice may then reach rank 1 before its transport has confirmed the
/// last datagrams, so the send's final events come after the notice; the
/// send must still complete, not fail with `PeerFinalized` (it did at
/// 30 % UDP loss in about one job of three).
pub(crate) fn lastlong(u: &Universe, case: &str) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let want = pattern(1 << 20, 77);
    if me == 1 {
        return p.send(&want[..]).map_err(e);
    }
    match case {
        "expected" => {}
        // The envelope arrives before the receive: the data is pulled.
        "unexpected" => std::thread::sleep(Duration::from_millis(50)),
        other => return Err(format!("lastlong: unknown case {other:?}")),
    }
    let mut got = vec![0u8; want.len()];
    p.receive_into(&mut got[..]).map_err(e)?;
    ensure(got == want, || "lastlong: wrong data".into())
}
