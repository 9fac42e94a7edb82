//! MPI point-to-point checks for multi-process tests:
//! `ptlrun -n N mpi_check <scenario> [args]`. Prints `OK <scenario>` per
//! rank and exits 0 when every check passes.

use std::time::{Duration, Instant};

use mpi_on_portals::request::{scope, test_all, wait_all, wait_any};
use mpi_on_portals::traits::*;
use mpi_on_portals::{
    MpiConfig, MpiError, Process, Rank, SimpleCommunicator, Status, SystemOperation, Threading,
    Universe, ANY_TAG,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type R<T> = std::result::Result<T, String>;

fn e(x: MpiError) -> String {
    x.to_string()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Rank `me` of the pair (0, 1) that the two-rank scenarios run between,
/// and the other rank; `None` on the other ranks, which take part in the
/// job only.
fn pair(w: &SimpleCommunicator) -> Option<(Rank, Process<'_>)> {
    let me = w.rank();
    (me <= 1).then(|| (me, w.process_at_rank(1 - me)))
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> R<()> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Standard,
    Synchronous,
    Ready,
    Buffered,
}

const CTRL: i32 = 1_000_000;

/// Every send mode × expected/unexpected × short/long × exact/wildcard
/// source and tag, between the pairs (0,1), (2,3), ...
fn modes(u: &Universe) -> R<()> {
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
fn order(u: &Universe, count: usize, seed: u64) -> R<()> {
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

/// A flood of 8 KB and 0-byte messages, many times the unexpected-buffer
/// space, in bursts the receiver drains: buffers must be recycled.
fn flood(u: &Universe, bursts: usize) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    const PER_BURST: usize = 400; // 400 x 8 KB = 3.2 MB of data per burst
    if me == 0 {
        let data = pattern(8192, 7);
        for b in 0..bursts {
            for i in 0..PER_BURST {
                let tag = (i % 7) as i32;
                p.send_with_tag(&data[..], tag).map_err(e)?;
                p.send_with_tag(&[0u8; 0][..], tag).map_err(e)?;
            }
            p.send_with_tag(&0u8, 100).map_err(e)?;
            // Wait for the receiver to have drained this burst.
            let (ack, _) = p.receive_with_tag::<u64>(CTRL).map_err(e)?;
            ensure(ack == b as u64, || format!("credit {ack} for burst {b}"))?;
        }
    } else {
        let want = pattern(8192, 7);
        let mut buf = vec![0u8; 8192];
        for b in 0..bursts {
            // Let the whole burst pile up in the unexpected buffers: the
            // end-of-burst marker arrives after all of it.
            p.probe_with_tag(100).map_err(e)?;
            for i in 0..PER_BURST {
                let tag = (i % 7) as i32;
                let s = p.receive_into_with_tag(&mut buf[..], tag).map_err(e)?;
                ensure(s.count_bytes() == 8192 && buf == want, || {
                    format!("burst {b} msg {i}: bad data")
                })?;
                let s = p.receive_into_with_tag(&mut buf[..0], tag).map_err(e)?;
                ensure(s.count_bytes() == 0, || {
                    "zero-byte message carried bytes".to_string()
                })?;
            }
            p.receive_with_tag::<u8>(100).map_err(e)?;
            p.send_with_tag(&(b as u64), CTRL).map_err(e)?;
        }
        let s = u.stats();
        println!("flood: {bursts} bursts, {s:?}");
        ensure(s.buffers_recycled >= 4, || {
            format!("buffers were not recycled: {s:?}")
        })?;
    }
    Ok(())
}

/// Probe before receive, cancel, and truncation.
fn misc(u: &Universe) -> R<()> {
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

/// Rank 1 posts an 8 MB receive and computes without calling MPI; rank 0
/// sends. With a progress thread the data is there when rank 1 comes back:
/// the first `test` finds the request complete.
fn progress(u: &Universe, expect_progress: bool) -> R<()> {
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
fn spin(u: &Universe) -> R<()> {
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

/// wait_any, owned sends (waited for and dropped), and wait_all.
fn requests(u: &Universe) -> R<()> {
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
fn threads(u: &Universe) -> R<()> {
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

/// A rank dies in the middle of an exchange; the survivor's wait fails
/// with `PeerFailed` within a bounded time instead of hanging. `case`:
/// `recv` (a posted receive from the dead rank), `anysrc` (a receive and a
/// probe from any source, in a communicator the dead rank belongs to), `long` (a long send whose
/// receiver got the envelope, acknowledged zero bytes, and died before
/// fetching the data), `sync` (a synchronous send received unexpected by a
/// rank that died before matching it).
fn death(u: &Universe, case: &str) -> R<()> {
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

/// Configuration of the `overflow` scenario: one tiny unexpected buffer
/// that cannot grow.
fn overflow_config() -> MpiConfig {
    MpiConfig {
        eager_limit: 4096,
        unexpected_buffer: 8192,
        unexpected_buffers: 1,
        unexpected_max: 1,
        ..MpiConfig::default()
    }
}

/// Rank 0 starts 40 sends of 4 KB (standard, every fifth synchronous, every
/// seventh empty) to rank 1, whose pool is one 8 KB buffer that cannot grow,
/// then a last message with another tag. Rank 1 receives that one first (so
/// the 40 pile up unexpected), then the 40 in order: every one arrives
/// intact — those that found no buffer room are pulled from the sender's
/// read portal — and the synchronous sends complete. Then both ranks send
/// to each other past the peer's pool before receiving (see below).
fn overflow(u: &Universe) -> R<()> {
    const N: usize = 40;
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let msg = |i: usize| {
        if i % 7 == 3 {
            Vec::new()
        } else {
            numbered(4096, i)
        }
    };
    if me == 0 {
        let msgs: Vec<Vec<u8>> = (0..N).map(msg).collect();
        let last = pattern(64, 6);
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        scope(|sc| -> R<()> {
            let mut reqs = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                reqs.push(
                    if i % 5 == 1 {
                        p.immediate_synchronous_send_with_tag(sc, &m[..], 1)
                    } else {
                        p.immediate_send_with_tag(sc, &m[..], 1)
                    }
                    .map_err(e)?,
                );
            }
            reqs.push(p.immediate_send_with_tag(sc, &last[..], 99).map_err(e)?);
            wait_all(reqs).map_err(e)?;
            Ok(())
        })?;
    } else {
        let mut buf = [0u8; 64];
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
        p.receive_into_with_tag(&mut buf[..], 99).map_err(e)?;
        ensure(buf[..] == pattern(64, 6)[..], || {
            "tag 99: wrong data".into()
        })?;
        let mut big = vec![0u8; 4096];
        for i in 0..N {
            let s = p.receive_into_with_tag(&mut big[..], 1).map_err(e)?;
            let want = msg(i);
            ensure(big[..s.count_bytes()] == want[..], || {
                format!("message {i}: out of order or wrong ({s:?})")
            })?;
        }
        let st = u.stats();
        println!("overflow: {N} messages, {st:?}");
        ensure(st.unexpected_pulled > 0, || {
            format!("no message had to be pulled: {st:?}")
        })?;
    }
    // Head to head: each rank sends three 4 KB messages with blocking
    // standard sends before receiving any. The third finds the peer's one
    // buffer full and must be pulled; the send still completes (the
    // library keeps a copy), or both ranks would wait for each other.
    let out: Vec<Vec<u8>> = (0..3)
        .map(|i| numbered(4096, 100 + 10 * me as usize + i))
        .collect();
    for m in &out {
        p.send_with_tag(&m[..], 7).map_err(e)?;
    }
    let mut big = vec![0u8; 4096];
    for i in 0..3 {
        p.receive_into_with_tag(&mut big[..], 7).map_err(e)?;
        let want = numbered(4096, 100 + 10 * (1 - me as usize) + i);
        ensure(big == want, || format!("head-to-head message {i}: wrong"))?;
    }
    Ok(())
}

/// Rank `r`'s message `i` in a many-to-one flood: a pattern of the sender
/// and `i` modulo a small window (so senders need not hold every message's
/// own copy); the tag carries `i` itself.
fn flood_msg(len: usize, r: Rank, i: usize) -> Vec<u8> {
    numbered(len, r as usize * 1000 + i % 61)
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
fn peak_rss() -> R<u64> {
    let s = std::fs::read_to_string("/proc/self/status").map_err(|x| x.to_string())?;
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or("no VmHWM in /proc/self/status")?;
    Ok(kb * 1024)
}

/// Every rank but 0 starts `count` sends of `len` bytes to rank 0, then all
/// meet in a barrier, and only then does rank 0 receive them (round robin
/// over the senders, each in order): far more than its unexpected pool's
/// cap arrives before any receive is posted. Every message must arrive
/// intact and in order, and rank 0's peak memory must stay within the
/// pool's cap plus `slack_mb`.
fn manyto1(u: &Universe, count: usize, len: usize, slack_mb: u64) -> R<()> {
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    if me != 0 {
        let window: Vec<Vec<u8>> = (0..61.min(count)).map(|i| flood_msg(len, me, i)).collect();
        let p = w.process_at_rank(0);
        scope(|sc| -> R<()> {
            let mut reqs = Vec::with_capacity(count);
            for i in 0..count {
                let m = &window[i % window.len()];
                reqs.push(p.immediate_send_with_tag(sc, &m[..], i as i32).map_err(e)?);
            }
            w.barrier().map_err(e)?;
            wait_all(reqs).map_err(e)?;
            Ok(())
        })?;
        w.barrier().map_err(e)?;
        return Ok(());
    }
    w.barrier().map_err(e)?;
    let t = Instant::now();
    let mut buf = vec![0u8; len];
    for i in 0..count {
        for r in 1..n {
            let s = w.process_at_rank(r).receive_into(&mut buf[..]).map_err(e)?;
            ensure(
                s.tag() == i as i32 && s.count_bytes() == len && buf == flood_msg(len, r, i),
                || format!("message {i} of rank {r}: out of order or wrong ({s:?})"),
            )?;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    w.barrier().map_err(e)?;
    let cfg = u.config();
    let cap = (cfg.unexpected_max * cfg.unexpected_buffer) as u64;
    let peak = peak_rss()?;
    let st = u.stats();
    println!(
        "manyto1: {} senders x {count} x {len} B received in {secs:.1} s; receiver peak RSS {} MiB \
         (pool cap {} MiB); {st:?}",
        n - 1,
        peak >> 20,
        cap >> 20
    );
    ensure(peak < cap + (slack_mb << 20), || {
        format!(
            "peak RSS {} MiB exceeds the pool cap {} MiB + {slack_mb} MiB",
            peak >> 20,
            cap >> 20
        )
    })
}

/// Message `i` of a flood: a pattern with its index in the first 8 bytes.
fn numbered(len: usize, i: usize) -> Vec<u8> {
    let mut m = pattern(len, i as u64);
    m[..8].copy_from_slice(&(i as u64).to_le_bytes());
    m
}

/// Wait (sleeping) until the interface has accepted `n` messages.
fn wait_accepted(ni: &portals::NetworkInterface, n: usize) -> R<()> {
    let t = Instant::now();
    while ni.status().accepted < n as u64 {
        ensure(t.elapsed() < Duration::from_secs(120), || {
            format!("only {} messages arrived", ni.status().accepted)
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// More than 10 MB of 8 KB messages arrive while the receiver makes no MPI
/// call at all; then it receives them all, in order. The unexpected pool
/// must be replenished without MPI calls (with a progress thread) or the
/// transport must hold the messages back (polling).
fn sleepflood(u: &Universe) -> R<()> {
    const N: usize = 1400;
    const LEN: usize = 8192;
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    if me == 0 {
        for i in 0..N {
            p.send_with_tag(&numbered(LEN, i)[..], (i % 3) as i32)
                .map_err(e)?;
        }
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
    } else {
        let ni = u.network_interface();
        let threaded = ni.nal().progresses_alone();
        if threaded {
            // No MPI call until every message is in (the NI counts them).
            wait_accepted(ni, N)?;
        } else {
            std::thread::sleep(Duration::from_millis(1500));
        }
        let mut buf = vec![0u8; LEN];
        for i in 0..N {
            let s = p.receive_into(&mut buf[..]).map_err(e)?;
            let want = numbered(LEN, i);
            ensure(s.tag() == (i % 3) as i32 && buf == want, || {
                format!("message {i}: out of order or wrong ({s:?})")
            })?;
        }
        let st = u.stats();
        println!("sleepflood: {N} messages, {st:?}");
        if threaded {
            ensure(st.buffers_grown > 0, || {
                format!("the pool did not grow while the receiver slept: {st:?}")
            })?;
        }
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
    }
    Ok(())
}

/// More than 10 MB of 8 KB messages arrive while an application thread of
/// the receiver holds the library's state lock (as one preempted inside an
/// MPI call would, by the progress thread on its own core): the unlink hook
/// cannot handle the unexpected queue then, but must still add buffers, or
/// the messages fall off the end of the match list and are lost.
fn heldflood(u: &Universe) -> R<()> {
    const N: usize = 1400;
    const LEN: usize = 8192;
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    if me == 0 {
        for i in 0..N {
            p.send_with_tag(&numbered(LEN, i)[..], 7).map_err(e)?;
        }
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
    } else {
        // Everything arrives (the NI counts deposits) while the lock is
        // held; a message no buffer could take lands in the zero-byte
        // overflow entry, and its receive below fails.
        let ni = u.network_interface();
        u.with_state_locked(|| wait_accepted(ni, N))?;
        let mut buf = vec![0u8; LEN];
        for i in 0..N {
            let s = p.receive_into_with_tag(&mut buf[..], 7).map_err(e)?;
            let want = numbered(LEN, i);
            ensure(buf == want, || {
                format!("message {i}: out of order or wrong ({s:?})")
            })?;
        }
        let st = u.stats();
        println!("heldflood: {N} messages, {st:?}");
        ensure(st.buffers_grown > 0, || {
            format!("the pool did not grow while the state was held: {st:?}")
        })?;
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
    }
    Ok(())
}

/// A rank finalizes right after starting sends nobody waits for (a buffered
/// long send, a dropped owned long send); the receiver posts its receives
/// only later. Finalize must complete them — serving the receiver's gets,
/// also in polling mode — before its closing barrier.
fn finalize(u: &Universe) -> R<()> {
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

/// Exchange in a ring with every send mode at once (4 ranks): catches
/// mismatched completions across several peers.
fn ring(u: &Universe) -> R<()> {
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

/// This process's `field` of `/proc/self/status` (`VmRSS`, `VmHWM`), KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `soak <seconds> <seed>`: rounds of the [`order`] mix (wildcards, mixed
/// sizes, every send mode) until the time is up — rank 0 decides, everyone
/// follows — then the messages moved and each rank's resident memory at
/// the start, after the first round (pools and caches warm) and at the
/// end. Not run by the suite; `docs/TESTING.md` says how to run it.
fn soak(u: &Universe, secs: u64, seed: u64) -> R<()> {
    const PER_ROUND: usize = 500;
    let w = u.world();
    let t0 = Instant::now();
    let start = status_kib("VmRSS");
    let mut warm = 0;
    let mut rounds = 0u64;
    loop {
        order(u, PER_ROUND, seed.wrapping_add(rounds))?;
        rounds += 1;
        if rounds == 1 {
            warm = status_kib("VmRSS");
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
        status_kib("VmRSS"),
        status_kib("VmHWM"),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).cloned().unwrap_or_default();
    let init = match scenario.as_str() {
        "threads" => {
            mpi_on_portals::initialize_with_threading(Threading::Multiple).and_then(|(u, level)| {
                if level == Threading::Multiple {
                    Ok(u)
                } else {
                    Err(MpiError::Init(format!("provided {level:?}")))
                }
            })
        }
        "overflow" => mpi_on_portals::initialize_with_config(overflow_config()),
        _ => mpi_on_portals::initialize(),
    };
    let u = match init {
        Ok(u) => u,
        Err(x) => {
            eprintln!("initialize failed: {x}");
            std::process::exit(2);
        }
    };
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let r = match scenario.as_str() {
        "modes" => modes(&u),
        "order" => order(&u, arg(2, 2000) as usize, arg(3, 1)),
        "flood" => flood(&u, arg(2, 10) as usize),
        "misc" => misc(&u),
        "progress" => progress(&u, args.get(2).map(String::as_str) != Some("poll")),
        "ring" => ring(&u),
        "spin" => spin(&u),
        "requests" => requests(&u),
        "threads" => threads(&u),
        "death" => death(&u, args.get(2).map_or("", String::as_str)),
        "overflow" => overflow(&u),
        "manyto1" => manyto1(
            &u,
            arg(2, 2000) as usize,
            arg(3, 60_000) as usize,
            arg(4, 64),
        ),
        "sleepflood" => sleepflood(&u),
        "heldflood" => heldflood(&u),
        "finalize" => finalize(&u),
        "soak" => soak(&u, arg(2, 1800), arg(3, 1)),
        other => Err(format!("unknown scenario {other:?}")),
    };
    portals_tests::finish(&scenario, u.world().rank(), r);
}
