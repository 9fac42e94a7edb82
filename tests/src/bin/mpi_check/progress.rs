//! Progress: transfers that complete while the target computes, spinning
//! waiters, and finalize completing what nobody waits for.

use super::*;

/// Rank 1 posts an 8 MB receive and computes without calling MPI; rank 0
/// sends. With a progress thread the data is there when rank 1 comes back:
/// the first `test` finds the request complete.
pub(crate) fn progress(u: &Universe, expect_progress: bool) -> R<()> {
    const LEN: usize = 8 << 20;
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let data = pattern(LEN, 11);
    if me == 0 {
        p.receive_with_tag::<u8>(CTRL).map_err(e)?; // receive is posted
        let t = Instant::now();
        p.send(&data[..]).map_err(e)?;
        println!("send of 8 MB completed in {} ms", t.elapsed().as_millis());
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
    } else {
        let mut buf = vec![0u8; LEN];
        let ni = u.network_interface();
        let (completed_early, moved) = scope(|sc| -> R<(bool, bool)> {
            let req = p.immediate_receive_into(sc, &mut buf[..]).map_err(e)?;
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            // Compute for a while: no MPI call at all.
            let before = ni.status().accepted;
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed() < Duration::from_millis(1500) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            let moved = ni.status().accepted != before;
            match req.test().map_err(e)? {
                Ok(_) => Ok((true, moved)),
                Err(req) => {
                    req.wait().map_err(e)?;
                    Ok((false, moved))
                }
            }
        })?;
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        ensure(buf == data, || "8 MB arrived wrong".into())?;
        if expect_progress {
            ensure(completed_early, || {
                "the receive was not complete after computing".into()
            })?;
            println!("progress: 8 MB receive completed while computing");
        } else {
            // Without a progress thread nothing arrives between MPI calls
            // (the first `test` may then finish it: it drives progress).
            ensure(!moved, || {
                "polling mode accepted a message without MPI calls".into()
            })?;
        }
    }
    Ok(())
}

/// Spin on non-blocking calls only — `test`, `immediate_probe`,
/// `is_complete`, `test_all` — each loop bounded by a deadline: in polling
/// mode they must drive progress themselves.
pub(crate) fn spin(u: &Universe) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let eager = u.config().eager_limit;
    let long = pattern(4 * eager + 3, 21);
    let deadline = |what: &str, t: Instant| -> R<()> {
        ensure(t.elapsed() < Duration::from_secs(30), || {
            format!("{what}: no completion within 30 s of non-blocking calls")
        })
    };
    if me == 0 {
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        p.send_with_tag(&long[..], 1).map_err(e)?;
        p.send_with_tag(&pattern(100, 22)[..], 2).map_err(e)?;
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        p.send_with_tag(&7u64, 3).map_err(e)?;
        p.send_with_tag(&pattern(eager * 2, 23)[..], 4).map_err(e)?;
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
    } else {
        // 1. A long receive completed by a loop on test().
        let mut buf = vec![0u8; long.len()];
        scope(|sc| -> R<()> {
            let mut req = p
                .immediate_receive_into_with_tag(sc, &mut buf[..], 1)
                .map_err(e)?;
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            let t = Instant::now();
            loop {
                match req.test().map_err(e)? {
                    Ok(s) => {
                        return ensure(s.count_bytes() == long.len(), || format!("{s:?}"));
                    }
                    Err(r) => req = r,
                }
                deadline("test", t)?;
            }
        })?;
        ensure(buf == long, || {
            "long message via test() arrived wrong".into()
        })?;
        // 2. A probe loop.
        let t = Instant::now();
        let s = loop {
            if let Some(s) = p.immediate_probe_with_tag(2).map_err(e)? {
                break s;
            }
            deadline("immediate_probe", t)?;
        };
        ensure(s.message_len() == 100, || format!("probe {s:?}"))?;
        let (v, _) = p.receive_vec_with_tag::<u8>(2).map_err(e)?;
        ensure(v == pattern(100, 22), || "probed message".into())?;
        // 3. is_complete and test_all loops over two receives.
        let mut seven = 0u64;
        let mut big = vec![0u8; eager * 2];
        scope(|sc| -> R<()> {
            let a = p
                .immediate_receive_into_with_tag(sc, std::slice::from_mut(&mut seven), 3)
                .map_err(e)?;
            let b = p
                .immediate_receive_into_with_tag(sc, &mut big[..], 4)
                .map_err(e)?;
            ensure(!a.is_complete().map_err(e)?, || {
                "a receive was complete before its message was sent".into()
            })?;
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            let t = Instant::now();
            while !a.is_complete().map_err(e)? {
                deadline("is_complete", t)?;
            }
            let mut reqs = vec![a, b];
            let t = Instant::now();
            let st = loop {
                if let Some(st) = test_all(&mut reqs).map_err(e)? {
                    break st;
                }
                deadline("test_all", t)?;
            };
            ensure(
                st.len() == 2 && st[0].tag() == 3 && st[1].tag() == 4,
                || format!("test_all statuses {st:?}"),
            )
        })?;
        ensure(seven == 7 && big == pattern(eager * 2, 23), || {
            "test_all data".into()
        })?;
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
    }
    Ok(())
}

/// A rank finalizes right after starting sends nobody waits for (a buffered
/// long send, a dropped owned long send); the receiver posts its receives
/// only later. Finalize must complete them — serving the receiver's gets,
/// also in polling mode — before its closing barrier.
pub(crate) fn finalize(u: &Universe) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let eager = u.config().eager_limit;
    let a = pattern(eager * 8, 31);
    let b: Vec<u8> = pattern(eager * 5 + 1, 32);
    if me == 0 {
        u.buffer_attach(a.len() + 1024);
        p.buffered_send_with_tag(&a[..], 1).map_err(e)?;
        drop(p.immediate_send_owned(b.clone(), 2).map_err(e)?);
        // Now finalize (when `u` is dropped by the caller).
    } else {
        // Let rank 0 reach finalize first.
        std::thread::sleep(Duration::from_millis(1000));
        for (tag, want) in [(1, &a), (2, &b)] {
            let mut buf = vec![0u8; want.len()];
            scope(|sc| -> R<()> {
                let mut req = p
                    .immediate_receive_into_with_tag(sc, &mut buf[..], tag)
                    .map_err(e)?;
                let t = Instant::now();
                loop {
                    match req.test().map_err(e)? {
                        Ok(_) => return Ok(()),
                        Err(r) => req = r,
                    }
                    ensure(t.elapsed() < Duration::from_secs(30), || {
                        format!("tag {tag}: the finalizing sender never delivered")
                    })?;
                    std::thread::sleep(Duration::from_micros(200));
                }
            })?;
            ensure(buf == *want, || format!("tag {tag}: wrong data"))?;
        }
    }
    Ok(())
}

/// What the library tells the interface of the application
/// (`portals::NiCore::set_app_quiet`, which gives a quiet rank the
/// progress thread's longer hand-back): quiet with nothing under way, and
/// after a short send from a library copy (its acknowledgment only frees
/// the copy); not quiet while a receive is posted, a long send is under
/// way, or an RMA window exists; quiet again once they are done.
pub(crate) fn quiet(u: &Universe) -> R<()> {
    let w = u.world();
    let core = u.network_interface().core();
    let quiet = |what: &str, want: bool| {
        let is = core.app_quiet();
        ensure(is == want, || {
            format!("{what}: quiet is {is}, should be {want}")
        })
    };
    w.barrier().map_err(e)?;
    quiet("after a barrier", true)?;
    let Some((me, p)) = pair(&w) else {
        // The other ranks only take part in the window's collectives.
        drop(w.allocate_window::<u8>(64).map_err(e)?);
        return Ok(());
    };
    const LONG: usize = 1 << 20;
    if me == 0 {
        p.send(&[1u8; 64][..]).map_err(e)?;
        quiet("after a short send", true)?;
        let mut small = [0u8; 8];
        scope(|sc| -> R<()> {
            let req = p
                .immediate_receive_into_with_tag(sc, &mut small[..], 7)
                .map_err(e)?;
            quiet("with a receive posted", false)?;
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            req.wait().map_err(e)?;
            Ok(())
        })?;
        quiet("after the receive", true)?;
        let big = pattern(LONG, 3);
        scope(|sc| -> R<()> {
            let req = p.immediate_send(sc, &big[..]).map_err(e)?;
            quiet("with a long send under way", false)?;
            req.wait().map_err(e)?;
            Ok(())
        })?;
        quiet("after the long send", true)?;
    } else {
        let mut got = [0u8; 64];
        p.receive_into(&mut got[..]).map_err(e)?;
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        p.send_with_tag(&[2u8; 8][..], 7).map_err(e)?;
        let mut big = vec![0u8; LONG];
        p.receive_into(&mut big[..]).map_err(e)?;
        ensure(big == pattern(LONG, 3), || {
            "the long message arrived wrong".into()
        })?;
    }
    let win = w.allocate_window::<u8>(64).map_err(e)?;
    quiet("with a window", false)?;
    drop(win);
    quiet("after the window", true)?;
    println!("quiet: tracked");
    Ok(())
}

/// A look at a pending receive with nothing new queued does not take the
/// engine lock (`intake.rs`): rank 0 peeks while another of its threads
/// holds the lock, and the peek must come back at once. Taking the lock,
/// it would wait until the holder lets go (10 s).
pub(crate) fn quietpeek(u: &Universe) -> R<()> {
    let w = u.world();
    w.barrier().map_err(e)?;
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    if me != 0 {
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        return p.send_with_tag(&[5u8; 8][..], 9).map_err(e);
    }
    let core = u.network_interface().core().clone();
    let mut buf = [0u8; 8];
    scope(|sc| -> R<()> {
        let req = p
            .immediate_receive_into_with_tag(sc, &mut buf[..], 9)
            .map_err(e)?;
        // The premise: an interface where nothing is being queued (the
        // barrier's last acknowledgments may still come in). A peek takes
        // whatever came; the epoch then reads the same for a while.
        let mut quiet = None;
        for _ in 0..100 {
            let before = core.epoch();
            ensure(!req.peek().map_err(e)?, || "nothing was sent yet".into())?;
            std::thread::sleep(Duration::from_millis(20));
            if core.epoch() == before {
                quiet = Some(before);
                break;
            }
        }
        let quiet = quiet.ok_or("the interface never went quiet")?;
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = core.clone();
        let holder = std::thread::spawn(move || {
            holder.with_engine(|_| {
                let _ = held_tx.send(holder.epoch());
                let _ = release_rx.recv_timeout(Duration::from_secs(10));
            })
        });
        let under_lock = held_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|x| format!("the holder never took the lock: {x}"))?;
        let t = Instant::now();
        let done = req.peek().map_err(e)?;
        let took = t.elapsed();
        let _ = release_tx.send(());
        holder.join().map_err(|_| "the lock holder panicked")?;
        ensure(under_lock == quiet, || {
            format!("news came before the lock was held (epoch {quiet} -> {under_lock})")
        })?;
        ensure(!done, || "the receive completed with nothing sent".into())?;
        ensure(took < Duration::from_secs(2), || {
            format!("a peek with nothing new queued waited {took:?} for the engine lock")
        })?;
        println!("quietpeek: a quiet peek took {took:?} with the engine lock held");
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
        req.wait().map_err(e)?;
        Ok(())
    })?;
    ensure(buf == [5u8; 8], || format!("received {buf:?}"))
}
