//! Unexpected messages beyond what is posted: floods, the pool that cannot
//! grow, many senders to a late receiver, and the pool growing while the
//! library is held.

use super::*;

/// A flood of 8 KB and 0-byte messages, many times the unexpected-buffer
/// space, in bursts the receiver drains: buffers must be recycled.
pub(crate) fn flood(u: &Universe, bursts: usize) -> R<()> {
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

/// Configuration of the `overflow` scenario: one tiny unexpected buffer
/// that cannot grow.
/// `eqflood`: event queues of 256 events (the unexpected one sized by the
/// envelope cap) and an 8 MiB pool, so that a many-to-one flood of a few
/// thousand messages brings far more envelopes (and acknowledgments to the
/// senders) than a queue holds between two drains. The queues are
/// flow-controlled: the transport holds the messages back instead of
/// overflowing them (`EventQueueOverflow` before).
pub(crate) fn eqflood_config(base: MpiConfig) -> MpiConfig {
    MpiConfig {
        eq_events: 256,
        envelopes: 256,
        unexpected_max: 4,
        ..base
    }
}

pub(crate) fn overflow_config() -> MpiConfig {
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
pub(crate) fn overflow(u: &Universe) -> R<()> {
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
pub(crate) fn flood_msg(len: usize, r: Rank, i: usize) -> Vec<u8> {
    numbered(len, r as usize * 1000 + i % 61)
}

/// Every rank but 0 starts `count` sends of `len` bytes to rank 0, then all
/// meet in a barrier, and only then does rank 0 receive them (round robin
/// over the senders, each in order): far more than its unexpected pool's
/// cap arrives before any receive is posted. Every message must arrive
/// intact and in order, and rank 0's peak memory must stay within the
/// pool's cap plus `slack_mb`.
pub(crate) fn manyto1(u: &Universe, count: usize, len: usize, slack_mb: u64) -> R<()> {
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
    // Every sender's window of distinct messages, computed once: built per
    // message (180 MB of patterns at 1000 x 60 KB from three senders) it
    // was most of the receiver's time in unoptimised test builds.
    let want: Vec<Vec<Vec<u8>>> = (1..n)
        .map(|r| (0..61.min(count)).map(|i| flood_msg(len, r, i)).collect())
        .collect();
    w.barrier().map_err(e)?;
    let t = Instant::now();
    let mut buf = vec![0u8; len];
    for i in 0..count {
        for r in 1..n {
            let s = w.process_at_rank(r).receive_into(&mut buf[..]).map_err(e)?;
            let msgs = &want[r as usize - 1];
            ensure(
                s.tag() == i as i32 && s.count_bytes() == len && buf == msgs[i % msgs.len()],
                || format!("message {i} of rank {r}: out of order or wrong ({s:?})"),
            )?;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    w.barrier().map_err(e)?;
    let cfg = u.config();
    let cap = (cfg.unexpected_max * cfg.unexpected_buffer) as u64;
    let peak = status_kib("VmHWM")? * 1024;
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
pub(crate) fn numbered(len: usize, i: usize) -> Vec<u8> {
    let mut m = pattern(len, i as u64);
    m[..8].copy_from_slice(&(i as u64).to_le_bytes());
    m
}

/// Wait (sleeping) until the interface has accepted `n` messages.
pub(crate) fn wait_accepted(ni: &portals::NetworkInterface, n: usize) -> R<()> {
    let t = Instant::now();
    while ni.status().accepted < n as u64 {
        ensure(t.elapsed() < Duration::from_secs(120), || {
            format!("only {} messages arrived", ni.status().accepted)
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Messages of [`flood_a_held_receiver`].
const HELD_FLOOD: usize = 1400;

/// Rank 0 sends 1400 numbered 8 KB messages (more than 10 MB) to rank 1,
/// which first runs `hold` — keeping its MPI layer from receiving while
/// they arrive — then receives them all and checks each one, in order.
/// With `tag`, every message carries it and is received by it; without,
/// tags cycle 0, 1, 2 and are received from any tag (and checked). Returns
/// rank 1's statistics; `None` on the other ranks.
fn flood_a_held_receiver(
    u: &Universe,
    tag: Option<i32>,
    hold: impl FnOnce() -> R<()>,
) -> R<Option<mpi_on_portals::MpiStats>> {
    const N: usize = HELD_FLOOD;
    const LEN: usize = 8192;
    let tag_of = |i: usize| tag.unwrap_or((i % 3) as i32);
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(None);
    };
    if me == 0 {
        for i in 0..N {
            p.send_with_tag(&numbered(LEN, i)[..], tag_of(i))
                .map_err(e)?;
        }
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        return Ok(None);
    }
    hold()?;
    let mut buf = vec![0u8; LEN];
    for i in 0..N {
        let s = match tag {
            Some(t) => p.receive_into_with_tag(&mut buf[..], t),
            None => p.receive_into(&mut buf[..]),
        }
        .map_err(e)?;
        ensure(s.tag() == tag_of(i) && buf == numbered(LEN, i), || {
            format!("message {i}: out of order or wrong ({s:?})")
        })?;
    }
    let st = u.stats();
    p.send_with_tag(&1u8, CTRL).map_err(e)?;
    Ok(Some(st))
}

/// More than 10 MB of 8 KB messages arrive while the receiver makes no MPI
/// call at all; then it receives them all, in order. The unexpected pool
/// must be replenished without MPI calls (with a progress thread) or the
/// transport must hold the messages back (polling).
pub(crate) fn sleepflood(u: &Universe) -> R<()> {
    let ni = u.network_interface();
    let threaded = ni.nal().progresses_alone();
    let hold = || {
        if threaded {
            // No MPI call until every message is in (the NI counts them).
            wait_accepted(ni, HELD_FLOOD)
        } else {
            std::thread::sleep(Duration::from_millis(1500));
            Ok(())
        }
    };
    if let Some(st) = flood_a_held_receiver(u, None, hold)? {
        println!("sleepflood: {HELD_FLOOD} messages, {st:?}");
        if threaded {
            ensure(st.buffers_grown > 0, || {
                format!("the pool did not grow while the receiver slept: {st:?}")
            })?;
        }
    }
    Ok(())
}

/// More than 10 MB of 8 KB messages arrive while an application thread of
/// the receiver holds the library's state lock (as one preempted inside an
/// MPI call would, by the progress thread on its own core): the unlink hook
/// cannot handle the unexpected queue then, but must still add buffers, or
/// the messages fall off the end of the match list and are lost.
pub(crate) fn heldflood(u: &Universe) -> R<()> {
    // Everything arrives (the NI counts deposits) while the lock is held; a
    // message no buffer could take lands in the zero-byte overflow entry,
    // and its receive fails.
    let ni = u.network_interface();
    let hold = || u.with_state_locked(|| wait_accepted(ni, HELD_FLOOD));
    if let Some(st) = flood_a_held_receiver(u, Some(7), hold)? {
        println!("heldflood: {HELD_FLOOD} messages, {st:?}");
        ensure(st.buffers_grown > 0, || {
            format!("the pool did not grow while the state was held: {st:?}")
        })?;
    }
    Ok(())
}
