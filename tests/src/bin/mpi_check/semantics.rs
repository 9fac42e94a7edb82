//! Point-to-point semantics: every send mode, MPI's non-overtaking order under
//! a random mix, probes, cancellation, truncation, requests, threads, and
//! the long `soak` of the order mix.

use super::*;

/// Every send mode × expected/unexpected × short/long × exact/wildcard
/// source and tag, between the pairs (0,1), (2,3), ...
pub(crate) fn modes(u: &Universe) -> R<()> {
    let w = u.world();
    let me = w.rank();
    let peer = me ^ 1;
    if peer >= w.size() {
        return Ok(());
    }
    let eager = u.config().eager_limit;
    u.buffer_attach(64 << 20);
    let sizes = [0usize, 1, 8, eager, eager + 1, 1 << 20];
    let p = w.process_at_rank(peer);
    let mut case = 0u64;
    for mode in [
        Mode::Standard,
        Mode::Synchronous,
        Mode::Ready,
        Mode::Buffered,
    ] {
        for &len in &sizes {
            for expected in [true, false] {
                if mode == Mode::Ready && !expected {
                    continue; // erroneous by definition
                }
                for (any_src, any_tag) in
                    [(false, false), (true, false), (false, true), (true, true)]
                {
                    case += 1;
                    let tag = (case % 50) as i32;
                    let data = pattern(len, case);
                    if me % 2 == 0 {
                        // Sender.
                        if expected {
                            // Wait until the receive is posted.
                            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
                        }
                        scope(|sc| -> R<()> {
                            let req = match mode {
                                Mode::Standard => {
                                    Some(p.immediate_send_with_tag(sc, &data[..], tag).map_err(e)?)
                                }
                                Mode::Synchronous => Some(
                                    p.immediate_synchronous_send_with_tag(sc, &data[..], tag)
                                        .map_err(e)?,
                                ),
                                Mode::Ready => Some(
                                    p.immediate_ready_send_with_tag(sc, &data[..], tag)
                                        .map_err(e)?,
                                ),
                                Mode::Buffered => {
                                    p.buffered_send_with_tag(&data[..], tag).map_err(e)?;
                                    None
                                }
                            };
                            if !expected {
                                // Tell the receiver the data message is on its
                                // way; it arrives after it (non-overtaking).
                                p.send_with_tag(&1u8, CTRL).map_err(e)?;
                            }
                            if let Some(r) = req {
                                r.wait().map_err(e)?;
                            }
                            Ok(())
                        })?;
                    } else {
                        let mut buf = vec![0xeeu8; len];
                        let src = w.any_process();
                        let recv_tag = if any_tag { ANY_TAG } else { tag };
                        let check = |s: Status, buf: &[u8]| -> R<()> {
                            ensure(buf == &data[..], || {
                                format!("{mode:?} {len} expected={expected}: wrong bytes")
                            })?;
                            ensure(
                                s.source_rank() == peer && s.tag() == tag && s.count_bytes() == len,
                                || format!("{mode:?} {len}: bad status {s:?}"),
                            )
                        };
                        if expected {
                            let st = scope(|sc| -> R<Status> {
                                let req = if any_src {
                                    src.immediate_receive_into_with_tag(sc, &mut buf[..], recv_tag)
                                } else {
                                    p.immediate_receive_into_with_tag(sc, &mut buf[..], recv_tag)
                                }
                                .map_err(e)?;
                                p.send_with_tag(&1u8, CTRL).map_err(e)?;
                                req.wait().map_err(e)
                            })?;
                            check(st, &buf)?;
                        } else {
                            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
                            let st = if any_src {
                                src.receive_into_with_tag(&mut buf[..], recv_tag)
                            } else {
                                p.receive_into_with_tag(&mut buf[..], recv_tag)
                            }
                            .map_err(e)?;
                            check(st, &buf)?;
                        }
                    }
                }
            }
        }
    }
    u.buffer_detach().map_err(e)?;
    let s = u.stats();
    if me % 2 == 1 {
        ensure(
            s.expected > 0 && s.unexpected_short > 0 && s.unexpected_long > 0 && s.sync_acks > 0,
            || format!("not every path was exercised: {s:?}"),
        )?;
    }
    Ok(())
}

/// A seeded random mix of short, long, synchronous and buffered messages
/// from every other rank to rank 0, received with a random mix of exact and
/// wildcard receives, some posted early. Checks MPI's non-overtaking rule:
/// each receive gets the oldest pending message (from the sender it came
/// from) that matches it.
pub(crate) fn order(u: &Universe, count: usize, seed: u64) -> R<()> {
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    let eager = u.config().eager_limit;
    u.buffer_attach(256 << 20);
    // Everyone derives every sender's schedule from the seed.
    let schedule = |src: i32| -> Vec<(usize, i32, u8)> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (src as u64) << 20);
        (0..count)
            .map(|_| {
                let len = match rng.gen_range(0..10) {
                    0..=5 => rng.gen_range(0..64),
                    6..=7 => rng.gen_range(eager - 8..eager + 8),
                    _ => rng.gen_range(eager..3 * eager + 100_000),
                };
                (len, rng.gen_range(0..4), rng.gen_range(0..4))
            })
            .collect()
    };
    if me != 0 {
        let p = w.process_at_rank(0);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xabc ^ me as u64);
        for (i, &(len, tag, mode)) in schedule(me).iter().enumerate() {
            let mut data = pattern(len.max(8), (me as u64) << 32 | i as u64);
            data[..8.min(len)].copy_from_slice(&(i as u64).to_le_bytes()[..8.min(len)]);
            data.truncate(len);
            match mode {
                0 | 1 => p.send_with_tag(&data[..], tag).map_err(e)?,
                2 => p.synchronous_send_with_tag(&data[..], tag).map_err(e)?,
                _ => p.buffered_send_with_tag(&data[..], tag).map_err(e)?,
            }
            if rng.gen_ratio(1, 40) {
                std::thread::sleep(Duration::from_micros(rng.gen_range(100..2000)));
            }
        }
        u.buffer_detach().map_err(e)?;
        return Ok(());
    }
    // Rank 0: the pending messages of each sender, in send order, with
    // whether their send blocks until matched (synchronous, or long and not
    // buffered): a receive may only target messages the sender will get to.
    let mut pending: Vec<std::collections::VecDeque<(usize, usize, i32, bool)>> = (0..n)
        .map(|s| {
            if s == 0 {
                Default::default()
            } else {
                schedule(s)
                    .into_iter()
                    .enumerate()
                    .map(|(i, (l, t, m))| (i, l, t, m == 2 || (m < 2 && l > eager)))
                    .collect()
            }
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let total = count * (n as usize - 1);
    let mut got = 0;
    let max_len = 3 * eager + 100_000;
    while got < total {
        // Choose a receive that some pending message satisfies.
        let live: Vec<i32> = (1..n)
            .filter(|&s| !pending[s as usize].is_empty())
            .collect();
        let src = live[rng.gen_range(0..live.len())];
        let any_src = rng.gen_bool(0.4);
        let tag = if rng.gen_bool(0.4) {
            ANY_TAG
        } else {
            // Any message up to (and including) the sender's first blocking
            // one: it will be sent, so the receive cannot deadlock.
            let q = &pending[src as usize];
            let reach = q.iter().position(|m| m.3).map_or(q.len(), |i| i + 1).min(6);
            q[rng.gen_range(0..reach)].2
        };
        let mut buf = vec![0u8; max_len];
        let early = rng.gen_bool(0.3);
        let st = scope(|sc| -> R<Status> {
            let req = if any_src {
                w.any_process()
                    .immediate_receive_into_with_tag(sc, &mut buf[..], tag)
            } else {
                w.process_at_rank(src)
                    .immediate_receive_into_with_tag(sc, &mut buf[..], tag)
            }
            .map_err(e)?;
            if early {
                // Let messages arrive into the posted receive.
                std::thread::sleep(Duration::from_micros(300));
            }
            req.wait().map_err(e)
        })?;
        let from = st.source_rank();
        let q = &mut pending[from as usize];
        let pos = q
            .iter()
            .position(|m| tag == ANY_TAG || m.2 == tag)
            .ok_or_else(|| format!("no pending message from {from} matches tag {tag}"))?;
        let (i, len, t, _) = q.remove(pos).expect("position exists");
        ensure(st.tag() == t && st.count_bytes() == len, || {
            format!("message {i} from {from}: status {st:?}, expected tag {t} len {len} (order violated)")
        })?;
        let mut want = pattern(len.max(8), (from as u64) << 32 | i as u64);
        want[..8.min(len)].copy_from_slice(&(i as u64).to_le_bytes()[..8.min(len)]);
        want.truncate(len);
        ensure(buf[..len] == want[..], || {
            format!("message {i} from {from}: wrong bytes")
        })?;
        got += 1;
    }
    let s = u.stats();
    println!("order: {total} messages, {s:?}");
    ensure(
        s.expected > 0 && s.unexpected_short > 0 && s.unexpected_long > 0,
        || format!("the mix did not exercise every path: {s:?}"),
    )
}

/// Probe before receive, cancel, and truncation.
/// A blocking standard send of a short message may return before any
/// receive is posted (it sends a copy): rewriting its buffer at once must
/// not change what arrives, for every short size, in both progress modes.
pub(crate) fn reuse(u: &Universe) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let eager = u.config().eager_limit;
    let sizes = [1usize, 8, 100, eager];
    if me == 0 {
        let mut buf = vec![0u8; eager];
        for (i, &len) in sizes.iter().enumerate() {
            buf[..len].copy_from_slice(&pattern(len, i as u64 + 1));
            p.send_with_tag(&buf[..len], 60).map_err(e)?;
            buf.fill(0xEE);
        }
        // Only now may the receiver post its receives.
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
    } else {
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        for (i, &len) in sizes.iter().enumerate() {
            let (v, _) = p.receive_vec_with_tag::<u8>(60).map_err(e)?;
            ensure(v == pattern(len, i as u64 + 1), || {
                format!("message {i} ({len} B) changed after its send returned")
            })?;
        }
    }
    Ok(())
}

pub(crate) fn misc(u: &Universe) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let eager = u.config().eager_limit;
    if me == 0 {
        // Probe: wait for the receiver's nothing-yet check.
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        p.send_with_tag(&pattern(300, 1)[..], 42).map_err(e)?;
        p.send_with_tag(&pattern(eager * 3, 2)[..], 43).map_err(e)?;
        // Truncation, short and long, then a normal message.
        p.send_with_tag(&pattern(100, 3)[..], 44).map_err(e)?;
        p.send_with_tag(&pattern(eager * 4, 4)[..], 45).map_err(e)?;
        p.send_with_tag(&pattern(16, 5)[..], 46).map_err(e)?;
        // Cancel: the receiver cancels a receive nobody sends to, then
        // receives this.
        p.send_with_tag(&7u32, 47).map_err(e)?;
    } else {
        ensure(p.immediate_probe_with_tag(42).map_err(e)?.is_none(), || {
            "iprobe found a message before any was sent".into()
        })?;
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
        let s = p.probe_with_tag(42).map_err(e)?;
        ensure(
            s.source_rank() == 0 && s.tag() == 42 && s.message_len() == 300,
            || format!("probe {s:?}"),
        )?;
        let (v, s) = p.receive_vec_with_tag::<u8>(42).map_err(e)?;
        ensure(v == pattern(300, 1) && s.count_bytes() == 300, || {
            "probed receive".into()
        })?;
        // Probe of a long message reports its full size; receive_vec gets it
        // through the get fallback.
        let s = w.any_process().probe().map_err(e)?;
        ensure(s.tag() == 43 && s.message_len() == eager * 3, || {
            format!("long probe {s:?}")
        })?;
        let (v, _) = w.any_process().receive_vec::<u8>().map_err(e)?;
        ensure(v == pattern(eager * 3, 2), || "long receive_vec".into())?;
        for (tag, len, seed) in [(44, 100usize, 3u64), (45, eager * 4, 4)] {
            let mut small = vec![0u8; 10];
            match p.receive_into_with_tag(&mut small[..], tag) {
                Err(MpiError::Truncated(s)) => {
                    ensure(
                        s.count_bytes() == 10 && s.message_len() == len && s.is_truncated(),
                        || format!("{s:?}"),
                    )?;
                    ensure(small == pattern(len, seed)[..10], || {
                        "truncated bytes".into()
                    })?;
                }
                other => return Err(format!("expected truncation for tag {tag}, got {other:?}")),
            }
        }
        let (v, _) = p.receive_vec_with_tag::<u8>(46).map_err(e)?;
        ensure(v == pattern(16, 5), || "message after truncation".into())?;
        let mut never = [0u8; 4];
        let mut seven = [0u8; 4];
        scope(|sc| -> R<()> {
            let r = p
                .immediate_receive_into_with_tag(sc, &mut never[..], 999)
                .map_err(e)?;
            ensure(r.cancel().map_err(e)?, || {
                "cancel of a pending receive failed".into()
            })?;
            let s = r.wait().map_err(e)?;
            ensure(s.is_cancelled(), || "status not cancelled".into())?;
            let r = p
                .immediate_receive_into_with_tag(sc, &mut seven[..], 47)
                .map_err(e)?;
            let s = r.wait().map_err(e)?;
            ensure(!s.is_cancelled(), || {
                "normal receive reported cancelled".into()
            })?;
            Ok(())
        })?;
        ensure(u32::from_le_bytes(seven) == 7, || {
            "value after cancel".into()
        })?;
        // Nothing matched the cancelled receive.
        ensure(p.immediate_probe().map_err(e)?.is_none(), || {
            "stray message".into()
        })?;
    }
    Ok(())
}

/// wait_any, owned sends (waited for and dropped), and wait_all.
pub(crate) fn requests(u: &Universe) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let eager = u.config().eager_limit;
    let long: Vec<u64> = (0..(eager / 8) * 3 + 5).map(|i| i as u64 * 3 + 1).collect();
    if me == 0 {
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        p.send_with_tag(&20u32, 2).map_err(e)?;
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        p.send_with_tag(&30u32, 3).map_err(e)?;
        p.send_with_tag(&10u32, 1).map_err(e)?;
        // Owned sends, waited for: the vector comes back, untouched.
        let (back, _) = p
            .immediate_send_owned(long.clone(), 5)
            .map_err(e)?
            .wait()
            .map_err(e)?;
        ensure(back == long, || "owned send returned other data".into())?;
        let v = long.clone();
        let vp = v.as_ptr();
        let (back, _) = p.immediate_send_owned(v, 6).map_err(e)?.wait().map_err(e)?;
        ensure(back.as_ptr() == vp, || {
            "owned send did not hand its own buffer back".into()
        })?;
        // Owned send dropped: it finishes on its own (the receiver fetches
        // it later while this rank waits for something else).
        drop(p.immediate_send_owned(long.clone(), 7).map_err(e)?);
        let mut back = vec![0u8; eager * 2];
        p.send_with_tag(&pattern(long.len() * 8, 8)[..], 8)
            .map_err(e)?;
        p.receive_into_with_tag(&mut back[..], 9).map_err(e)?;
        ensure(back == pattern(eager * 2, 9), || "wait_all send".into())?;
    } else {
        let mut got = [0u32; 3];
        let [g1, g2, g3] = &mut got;
        scope(|sc| -> R<()> {
            let mut reqs = vec![
                p.immediate_receive_into_with_tag(sc, std::slice::from_mut(g1), 1)
                    .map_err(e)?,
                p.immediate_receive_into_with_tag(sc, std::slice::from_mut(g2), 2)
                    .map_err(e)?,
                p.immediate_receive_into_with_tag(sc, std::slice::from_mut(g3), 3)
                    .map_err(e)?,
            ];
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            // Only tag 2 is on its way: it must be the one.
            let (i, s) = wait_any(&mut reqs).map_err(e)?;
            ensure(i == 1 && s.tag() == 2 && reqs.len() == 2, || {
                format!("wait_any returned {i} {s:?}")
            })?;
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            // Tags 1 and 3 remain, at indices 0 and 1; the index returned
            // names the request that completed.
            let mut left = vec![1, 3];
            while !reqs.is_empty() {
                let (i, s) = wait_any(&mut reqs).map_err(e)?;
                ensure(i < left.len() && left.remove(i) == s.tag(), || {
                    format!("wait_any index {i} does not name tag {}", s.tag())
                })?;
            }
            Ok(())
        })?;
        ensure(got == [10, 20, 30], || format!("wait_any data {got:?}"))?;
        for tag in [5, 6, 7] {
            let mut v = vec![0u64; long.len()];
            let s = p.receive_into_with_tag(&mut v[..], tag).map_err(e)?;
            ensure(v == long && s.count_bytes() == long.len() * 8, || {
                format!("owned send {tag} arrived wrong")
            })?;
        }
        // wait_all over a receive and a send at once.
        let mut inc = vec![0u8; long.len() * 8];
        let out = pattern(eager * 2, 9);
        let st = scope(|sc| -> R<Vec<Status>> {
            let r = p
                .immediate_receive_into_with_tag(sc, &mut inc[..], 8)
                .map_err(e)?;
            let s = p.immediate_send_with_tag(sc, &out[..], 9).map_err(e)?;
            wait_all(vec![r, s]).map_err(e)
        })?;
        ensure(st.len() == 2 && st[0].tag() == 8, || format!("{st:?}"))?;
        ensure(inc == pattern(long.len() * 8, 8), || "wait_all data".into())?;
    }
    Ok(())
}

/// `Threading::Multiple`: four threads per rank, each on its own duplicate
/// of the world, exchange messages of every protocol and run collectives at
/// the same time.
pub(crate) fn threads(u: &Universe) -> R<()> {
    let w = u.world();
    let me = w.rank();
    let eager = u.config().eager_limit;
    let comms: Vec<SimpleCommunicator> = (0..4)
        .map(|_| w.duplicate())
        .collect::<Result<_, _>>()
        .map_err(e)?;
    if me > 1 {
        // Extra ranks join the duplications only.
        return Ok(());
    }
    let sizes = [0usize, 8, 1000, eager + 1, 3 * eager];
    std::thread::scope(|s| -> R<()> {
        let workers: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(k, c)| {
                s.spawn(move || -> R<()> {
                    let p = c.process_at_rank(1 - me);
                    for round in 0..120usize {
                        let len = sizes[(round + k) % sizes.len()];
                        let seed = (k as u64) << 40 | round as u64;
                        let tag = (round % 5) as i32;
                        let mut buf = vec![0u8; len];
                        if me == 0 {
                            if round % 3 == 0 {
                                p.synchronous_send_with_tag(&pattern(len, seed)[..], tag)
                            } else {
                                p.send_with_tag(&pattern(len, seed)[..], tag)
                            }
                            .map_err(e)?;
                            let s = c
                                .any_process()
                                .receive_into_with_tag(&mut buf[..], tag)
                                .map_err(e)?;
                            ensure(s.source_rank() == 1 && buf == pattern(len, !seed), || {
                                format!("thread {k} round {round}: wrong reply")
                            })?;
                        } else {
                            let s = p.receive_into_with_tag(&mut buf[..], tag).map_err(e)?;
                            ensure(s.count_bytes() == len && buf == pattern(len, seed), || {
                                format!("thread {k} round {round}: wrong message")
                            })?;
                            p.send_with_tag(&pattern(len, !seed)[..], tag).map_err(e)?;
                        }
                        if round % 20 == 0 {
                            let mut sum = 0u64;
                            c.all_reduce_into(&(k as u64 + 1), &mut sum, SystemOperation::sum())
                                .map_err(e)?;
                            let n = c.size() as u64;
                            ensure(sum == n * (k as u64 + 1), || {
                                format!("thread {k}: all_reduce {sum}")
                            })?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in workers {
            h.join().map_err(|_| "a thread panicked".to_string())??;
        }
        Ok(())
    })
}

/// Exchange in a ring with every send mode at once (4 ranks): catches
/// mismatched completions across several peers.
pub(crate) fn ring(u: &Universe) -> R<()> {
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    let next = w.process_at_rank((me + 1) % n);
    let prev = w.process_at_rank((me + n - 1) % n);
    let eager = u.config().eager_limit;
    for (k, &len) in [0usize, 100, eager * 2, 1 << 20].iter().enumerate() {
        let out = pattern(len, me as u64 * 10 + k as u64);
        let mut inc = vec![0u8; len];
        scope(|sc| -> R<()> {
            let r = prev.immediate_receive_into(sc, &mut inc[..]).map_err(e)?;
            let s = next
                .immediate_synchronous_send_with_tag(sc, &out[..], 0)
                .map_err(e)?;
            wait_all(vec![r, s]).map_err(e)?;
            Ok(())
        })?;
        let from = (me + n - 1) % n;
        ensure(inc == pattern(len, from as u64 * 10 + k as u64), || {
            format!("ring {len} bytes from {from}")
        })?;
    }
    Ok(())
}

/// `soak <seconds> <seed>`: rounds of the [`order`] mix (wildcards, mixed
/// sizes, every send mode) until the time is up — rank 0 decides, everyone
/// follows — then the messages moved and each rank's resident memory at
/// the start, after the first round (pools and caches warm), about once a
/// minute, and at the end. Not run by the suite; `docs/TESTING.md` says how to run it.
pub(crate) fn soak(u: &Universe, secs: u64, seed: u64) -> R<()> {
    const PER_ROUND: usize = 500;
    let w = u.world();
    let t0 = Instant::now();
    let start = status_kib("VmRSS")?;
    let mut warm = 0;
    let mut rounds = 0u64;
    // A leak shows as a line that keeps climbing; caches and pools level
    // off after the first minutes.
    let mut next_sample = Duration::from_secs(60);
    loop {
        order(u, PER_ROUND, seed.wrapping_add(rounds))?;
        rounds += 1;
        if rounds == 1 {
            warm = status_kib("VmRSS")?;
        }
        if t0.elapsed() >= next_sample {
            println!(
                "soak: rank {} at {:.0} s rounds {rounds} rss_kib {}",
                w.rank(),
                t0.elapsed().as_secs_f64(),
                status_kib("VmRSS")?
            );
            next_sample += Duration::from_secs(60);
        }
        let mut go = [u8::from(t0.elapsed() < Duration::from_secs(secs))];
        w.process_at_rank(0)
            .broadcast_into(&mut go[..])
            .map_err(e)?;
        if go[0] == 0 {
            break;
        }
    }
    let moved = rounds * PER_ROUND as u64 * (w.size() as u64 - 1);
    println!(
        "soak: rank {} rounds {rounds} messages {moved} errors 0 rss_kib start {start} warm {warm} end {} peak {} after {:.0} s",
        w.rank(),
        status_kib("VmRSS")?,
        status_kib("VmHWM")?,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
