//! Announced long sends (`mpi_check announce`, 2 ranks, run length 4 set
//! by the scenario): which long sends are announced follows what the
//! receiver's receives met, and an announced message matched by a posted
//! receive arrives byte-exact, also truncated, into an empty buffer, and
//! for a receive from any source.

use super::*;

/// The run length this scenario initializes with.
pub(crate) const RUN: usize = 4;

/// Rank 1's messages: long enough for the long protocol, and a size that
/// no other message of the scenario has.
fn len(u: &Universe) -> usize {
    u.config().eager_limit * 3 + 5
}

pub(crate) fn announce(u: &Universe) -> R<()> {
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let n = len(u);
    const UNEXPECTED: u64 = 3;
    const EXPECTED: u64 = 6;
    if me == 1 {
        // 1. Unexpected: each message is sent before the receiver posts
        // its receive (it waits for our go-ahead after the send started).
        // The first is put whole and taken as nothing; from then on every
        // one is announced.
        for i in 0..UNEXPECTED {
            sent_first(&p, &pattern(n, i), 70)?;
        }
        let after_unexpected = u.stats().long_announced;
        ensure(after_unexpected == UNEXPECTED - 1, || {
            format!(
                "after {UNEXPECTED} unexpected long messages, {after_unexpected} announced \
                 (want all but the first)"
            )
        })?;
        // 2. Expected: the receiver posts first and tells us. The first
        // RUN are still announced, each counting the run down; then puts.
        for i in 0..EXPECTED {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            p.send_with_tag(&pattern(n, 100 + i)[..], 71).map_err(e)?;
        }
        let announced = u.stats().long_announced - after_unexpected;
        ensure(announced == RUN as u64, || {
            format!(
                "{announced} of {EXPECTED} expected long messages announced after an \
                 unexpected run (want {RUN})"
            )
        })?;
        // 3. One unexpected message starts a run again; its announcements
        // go into posted receives that truncate, take nothing, or take any
        // source.
        sent_first(&p, &pattern(n, 200), 72)?;
        for seed in 201..204 {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            p.send_with_tag(&pattern(n, seed)[..], 73).map_err(e)?;
        }
        let total = u.stats().long_announced;
        // 200 was put (the run had ended) and started a new one: 201–203.
        ensure(total == after_unexpected + RUN as u64 + 3, || {
            format!("announced {total} in all")
        })?;
    } else {
        for i in 0..UNEXPECTED {
            p.receive_with_tag::<u8>(CTRL).map_err(e)?;
            let mut buf = vec![0u8; n];
            let st = p.receive_into_with_tag(&mut buf[..], 70).map_err(e)?;
            ensure(st.count_bytes() == n && buf == pattern(n, i), || {
                format!("unexpected message {i}: {st:?}, or wrong bytes")
            })?;
        }
        let before = u.stats().announced_expected;
        for i in 0..EXPECTED {
            let mut buf = vec![0u8; n];
            let st = posted_first(&p, &mut buf, 71)?.map_err(e)?;
            ensure(st.count_bytes() == n && buf == pattern(n, 100 + i), || {
                format!("expected message {i}: {st:?}, or wrong bytes")
            })?;
        }
        let pulled = u.stats().announced_expected - before;
        ensure(pulled == RUN as u64, || {
            format!("{pulled} announced messages met a posted receive (want {RUN})")
        })?;
        p.receive_with_tag::<u8>(CTRL).map_err(e)?;
        let (v, st) = p.receive_vec_with_tag::<u8>(72).map_err(e)?;
        ensure(v == pattern(n, 200) && st.count_bytes() == n, || {
            format!("message 200: {st:?}, or wrong bytes")
        })?;
        // Truncated: the first 1000 bytes, the status says both lengths.
        let mut small = vec![0u8; 1000];
        match posted_first(&p, &mut small, 73)? {
            Err(MpiError::Truncated(st)) => ensure(
                st.count_bytes() == 1000
                    && st.message_len() == n
                    && small == pattern(n, 201)[..1000],
                || format!("truncated announced message: {st:?}, or wrong bytes"),
            )?,
            other => return Err(format!("expected truncation, got {other:?}")),
        }
        // Nothing fits: truncated to zero bytes, and the sender released.
        match posted_first(&p, &mut [], 73)? {
            Err(MpiError::Truncated(st)) => {
                ensure(st.count_bytes() == 0 && st.message_len() == n, || {
                    format!("announced message into no buffer: {st:?}")
                })?
            }
            other => return Err(format!("expected truncation to zero, got {other:?}")),
        }
        // From any source.
        let mut buf = vec![0u8; n + 100];
        let st = scope(|s| -> R<Status> {
            let req = w
                .any_process()
                .immediate_receive_into_with_tag(s, &mut buf[..], 73)
                .map_err(e)?;
            p.send_with_tag(&1u8, CTRL).map_err(e)?;
            req.wait().map_err(e)
        })?;
        ensure(
            st.source_rank() == 1
                && st.count_bytes() == n
                && buf[..n] == pattern(n, 203)[..]
                && buf[n..].iter().all(|&b| b == 0),
            || format!("any-source receive of an announced message: {st:?}, or wrong bytes"),
        )?;
    }
    Ok(())
}

/// Start a send of `data` with `tag` to `p`, then tell `p` it may post its
/// receive (so the message arrives before it), and wait for the send.
fn sent_first(p: &Process<'_>, data: &[u8], tag: i32) -> R<()> {
    scope(|s| -> R<()> {
        let req = p.immediate_send_with_tag(s, data, tag).map_err(e)?;
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
        req.wait().map_err(e)?;
        Ok(())
    })
}

/// Post a receive into `buf` for `tag` from `p`, then tell `p` it may send
/// (so its message finds the receive posted); the receive's outcome.
fn posted_first(
    p: &Process<'_>,
    buf: &mut [u8],
    tag: i32,
) -> R<std::result::Result<Status, MpiError>> {
    scope(|s| -> R<_> {
        let req = p.immediate_receive_into_with_tag(s, buf, tag).map_err(e)?;
        p.send_with_tag(&1u8, CTRL).map_err(e)?;
        Ok(req.wait())
    })
}
