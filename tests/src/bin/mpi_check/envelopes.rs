//! The envelope cap (`MpiConfig::envelopes`, `PTL_MPI_ENVELOPES`): saved
//! unexpected envelopes stay bounded by flow control, and the receives that
//! a naive cap would deadlock still complete (the receiver admits the
//! sender it waits for past the cap).

use super::*;

/// The cap of these scenarios.
pub(crate) const ENVELOPE_CAP: usize = 64;

/// Slack over the cap allowed for the receiver's peak of saved envelopes.
/// The cap holds for senders the receiver is not waiting for; the one it
/// waits for is admitted until the awaited message uses the receive's
/// entry up. In a round robin by source with tags in order, that message
/// is the sender's next one, so nothing but a message already on its way
/// (a deposit under way when the entry went) should pass: a few are
/// allowed.
const CAP_SLACK: usize = 8;

/// The send window of these scenarios: small, so that the floods (and the
/// 500 messages in front of `caphol`'s awaited one) go through many rounds
/// of waiting for acknowledgments.
pub(crate) const SEND_WINDOW: usize = 8;

/// `capflood`, `capbarrier`, `caphol`, `caphol_any`, `capiprobe`: the
/// environment's configuration with [`ENVELOPE_CAP`] envelopes and a
/// [`SEND_WINDOW`]-message send window.
pub(crate) fn cap_config(base: MpiConfig) -> MpiConfig {
    MpiConfig {
        envelopes: ENVELOPE_CAP,
        send_window: SEND_WINDOW,
        ..base
    }
}

/// Message `i` of sender `r` in `capflood`.
fn cap_msg(r: Rank, i: usize) -> Vec<u8> {
    numbered(256, r as usize * 100_000 + i)
}

/// A sender's part of `capflood` and `capbarrier`: start `count` sends of
/// [`cap_msg`]s to rank 0 (tag = index), then wait for them all — after a
/// barrier with `barrier_first`.
fn flood_root(w: &SimpleCommunicator, count: usize, barrier_first: bool) -> R<()> {
    let me = w.rank();
    let msgs: Vec<Vec<u8>> = (0..count).map(|i| cap_msg(me, i)).collect();
    let p = w.process_at_rank(0);
    scope(|sc| -> R<()> {
        let mut reqs = Vec::with_capacity(count);
        for (i, m) in msgs.iter().enumerate() {
            reqs.push(p.immediate_send_with_tag(sc, &m[..], i as i32).map_err(e)?);
        }
        if barrier_first {
            if me == 1 {
                // Late to the barrier. Rank 0's dissemination barrier
                // waits, in its second round, for rank 2, which itself
                // waits for rank 1: for this long rank 0 lets rank 2 past
                // its cap while rank 2, waiting in its own barrier, keeps
                // sending as acknowledgments make room.
                std::thread::sleep(Duration::from_millis(500));
            }
            w.barrier().map_err(e)?;
        }
        wait_all(reqs).map_err(e)?;
        Ok(())
    })
}

/// Rank 0's part: receive every sender's `count` messages round robin by
/// source, checking order and bytes.
fn receive_round_robin(w: &SimpleCommunicator, count: usize) -> R<()> {
    let mut buf = vec![0u8; 256];
    for i in 0..count {
        for r in 1..w.size() {
            let s = w.process_at_rank(r).receive_into(&mut buf[..]).map_err(e)?;
            ensure(s.tag() == i as i32 && buf == cap_msg(r, i), || {
                format!("message {i} of rank {r}: out of order or wrong ({s:?})")
            })?;
        }
    }
    Ok(())
}

/// `capflood`: every other rank sends `count` messages of 256 B (tag = its
/// index) to rank 0, which starts receiving late and receives round robin
/// by source. Every message must arrive intact and in order, and rank 0's
/// peak of saved envelopes must stay within the cap (plus [`CAP_SLACK`]):
/// without the cap, all `count` × senders would be saved.
pub(crate) fn capflood(u: &Universe, count: usize) -> R<()> {
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    w.barrier().map_err(e)?;
    if me != 0 {
        flood_root(&w, count, false)?;
        w.barrier().map_err(e)?;
        return Ok(());
    }
    // Late: let the senders run into the cap first.
    std::thread::sleep(Duration::from_millis(300));
    receive_round_robin(&w, count)?;
    let st = u.stats();
    println!(
        "capflood: {} senders x {count}, cap {ENVELOPE_CAP}, {st:?}",
        n - 1
    );
    ensure(st.saved_peak as usize <= ENVELOPE_CAP + CAP_SLACK, || {
        format!(
            "{} envelopes saved at once, cap {ENVELOPE_CAP} + {CAP_SLACK}",
            st.saved_peak
        )
    })?;
    w.barrier().map_err(e)?;
    Ok(())
}

/// Windows per sender `capbarrier` allows over the cap (see there).
const BARRIER_WINDOWS: usize = 6;

/// `capbarrier`: issue 23's late receiver. Every other rank starts `count`
/// sends of 256 B to rank 0, then all meet in a barrier, and only then does
/// rank 0 receive (round robin by source). Rank 0 waits in the barrier for
/// collective messages that its senders put *after* their floods; it must
/// admit those senders to reach them, and before send windows it took
/// every message in front — the whole flood (3 × 2000 saved at a cap of
/// 64). Now each sender keeps point-to-point messages beyond its window
/// out of its stream while the barrier's message overtakes them (another
/// context), and rank 0 asks a sender it lets past the cap to pause — rank
/// 1 enters the barrier 500 ms late, so rank 0 waits there for rank 2 long
/// enough for rank 2 to send its whole flood without pauses. What
/// gets past: the sender's window, plus what it sends on the
/// acknowledgments of those before rank 0's next drain sends the pause and
/// it arrives — a window or two when rank 0 gets the CPU promptly, more on
/// an oversubscribed host (99 seen at most, 3 senders × window 8, in a
/// loaded full-suite run). The bound checked, [`BARRIER_WINDOWS`] windows
/// per sender over the cap, is far below the flood (6000) it replaced.
pub(crate) fn capbarrier(u: &Universe, count: usize) -> R<()> {
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    if me != 0 {
        flood_root(&w, count, true)?;
        let st = u.stats();
        println!("capbarrier sender {me}: {st:?}");
        ensure(count <= SEND_WINDOW || st.window_waits > 0, || {
            format!("{count} sends and none waited for the window ({st:?})")
        })?;
        w.barrier().map_err(e)?;
        return Ok(());
    }
    w.barrier().map_err(e)?;
    receive_round_robin(&w, count)?;
    let st = u.stats();
    let bound = ENVELOPE_CAP + BARRIER_WINDOWS * SEND_WINDOW * (n as usize - 1);
    println!(
        "capbarrier: {} senders x {count}, cap {ENVELOPE_CAP}, window {SEND_WINDOW}, {st:?}",
        n - 1
    );
    ensure(st.saved_peak as usize <= bound, || {
        format!(
            "{} envelopes saved at once, bound {bound} (cap {ENVELOPE_CAP} + {} senders x \
             {BARRIER_WINDOWS} windows of {SEND_WINDOW})",
            st.saved_peak,
            n - 1
        )
    })?;
    w.barrier().map_err(e)?;
    Ok(())
}

/// How `caphol` looks for its tag-2 message first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum First {
    /// A receive from rank 1.
    Recv,
    /// A receive from any source.
    AnySource,
    /// A loop of `iprobe`s from rank 1, then a receive.
    Iprobe,
}

/// `caphol` / `caphol_any` / `capiprobe`: rank 1 sends 500 messages with
/// tag 1, then one with tag 2; rank 0 (cap [`ENVELOPE_CAP`]) receives the
/// tag-2 one first — from rank 1, from any source, or after `iprobe`s for
/// it — then the 500 in order. The tag-2 message is held in rank 1's
/// stream behind the others, which overflow the cap: the receive (or the
/// probe) admits rank 1 (any sender for any source), so they get in and it
/// completes. A cap that simply stopped taking messages would hang here.
pub(crate) fn caphol(u: &Universe, first: First) -> R<()> {
    const N: usize = 500;
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        w.barrier().map_err(e)?;
        return Ok(());
    };
    if me == 1 {
        let msgs: Vec<Vec<u8>> = (0..N).map(|i| numbered(1024, i)).collect();
        let last = pattern(64, 9);
        scope(|sc| -> R<()> {
            let mut reqs = Vec::with_capacity(N + 1);
            for m in &msgs {
                reqs.push(p.immediate_send_with_tag(sc, &m[..], 1).map_err(e)?);
            }
            reqs.push(p.immediate_send_with_tag(sc, &last[..], 2).map_err(e)?);
            wait_all(reqs).map_err(e)?;
            Ok(())
        })?;
        w.barrier().map_err(e)?;
        return Ok(());
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut last = vec![0u8; 64];
    if first == First::Iprobe {
        let t = Instant::now();
        while p.immediate_probe_with_tag(2).map_err(e)?.is_none() {
            ensure(t.elapsed() < Duration::from_secs(30), || {
                "iprobe never saw the tag-2 message".to_string()
            })?;
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let s = if first == First::AnySource {
        w.any_process().receive_into_with_tag(&mut last[..], 2)
    } else {
        p.receive_into_with_tag(&mut last[..], 2)
    }
    .map_err(e)?;
    ensure(s.source_rank() == 1 && last == pattern(64, 9), || {
        format!("the tag-2 message is wrong ({s:?})")
    })?;
    let mut buf = vec![0u8; 1024];
    for i in 0..N {
        let s = p.receive_into_with_tag(&mut buf[..], 1).map_err(e)?;
        ensure(buf == numbered(1024, i), || {
            format!("message {i}: out of order or wrong ({s:?})")
        })?;
    }
    let st = u.stats();
    println!("caphol {first:?}: {N} + 1 messages, cap {ENVELOPE_CAP}, {st:?}");
    w.barrier().map_err(e)?;
    Ok(())
}
