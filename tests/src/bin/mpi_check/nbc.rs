//! Non-blocking barrier, broadcast and all-reduce (chains of triggered
//! operations):
//! values, instances back to back and outstanding together, on the world
//! and on derived communicators; completion while every thread sleeps; a
//! barrier never completes before every member started it.

use std::time::SystemTime;

use mpi_on_portals::{Color, UserOperation};

use super::*;

/// Sizes broadcast: empty, tiny, odd, at and past the eager limit.
const SIZES: [usize; 6] = [0, 1, 999, 64 << 10, (64 << 10) + 1, 300_000];

fn seed(root: Rank, len: usize, round: usize) -> u64 {
    (root as u64) << 40 ^ (len as u64) << 8 ^ round as u64
}

/// Every root, every size, one at a time; then `rounds` barriers and
/// broadcasts back to back (each waited at once); then many outstanding at
/// once, waited in reverse order, with blocking collectives between.
fn values_on(c: &SimpleCommunicator, rounds: usize) -> R<()> {
    let (n, me) = (c.size(), c.rank());
    for root in 0..n {
        for len in SIZES {
            let want = pattern(len, seed(root, len, 0));
            let mut buf = if me == root {
                want.clone()
            } else {
                vec![0u8; len]
            };
            scope(|sc| -> R<()> {
                let req = c
                    .process_at_rank(root)
                    .immediate_broadcast_into(sc, &mut buf[..])
                    .map_err(e)?;
                req.wait().map_err(e)?;
                Ok(())
            })?;
            ensure(buf == want, || {
                format!("broadcast of {len} B from {root} wrong")
            })?;
        }
    }
    for i in 0..rounds {
        c.immediate_barrier().map_err(e)?.wait().map_err(e)?;
        let root = (i % n as usize) as Rank;
        let mut x = if me == root { i as u64 * 7 + 1 } else { 0 };
        scope(|sc| -> R<()> {
            c.process_at_rank(root)
                .immediate_broadcast_into(sc, &mut x)
                .map_err(e)?
                .wait()
                .map_err(e)?;
            Ok(())
        })?;
        ensure(x == i as u64 * 7 + 1, || format!("round {i}: got {x}"))?;
    }
    // Many outstanding at once: broadcasts from rotating roots interleaved
    // with barriers, all started before any is waited for.
    const OUT: usize = 24;
    let mut bufs: Vec<Vec<u8>> = (0..OUT)
        .map(|i| {
            let root = (i % n as usize) as Rank;
            let len = 1 + i * 37;
            if me == root {
                pattern(len, seed(root, len, i))
            } else {
                vec![0; len]
            }
        })
        .collect();
    scope(|sc| -> R<()> {
        let mut reqs = Vec::new();
        for (i, b) in bufs.iter_mut().enumerate() {
            let root = (i % n as usize) as Rank;
            reqs.push(
                c.process_at_rank(root)
                    .immediate_broadcast_into(sc, &mut b[..])
                    .map_err(e)?,
            );
            if i % 3 == 0 {
                reqs.push(c.immediate_barrier().map_err(e)?);
            }
        }
        // A blocking collective while they run: separate traffic.
        let mut s = 0u64;
        c.all_reduce_into(&1u64, &mut s, SystemOperation::sum())
            .map_err(e)?;
        ensure(s == n as u64, || format!("all-reduce in between: {s}"))?;
        while let Some(r) = reqs.pop() {
            r.wait().map_err(e)?;
        }
        Ok(())
    })?;
    for (i, b) in bufs.iter().enumerate() {
        let root = (i % n as usize) as Rank;
        let want = pattern(b.len(), seed(root, b.len(), i));
        ensure(*b == want, || format!("outstanding broadcast {i} wrong"))?;
    }
    all_reduce_values_on(c, rounds)
}

/// Lengths (in 8-byte elements) of the u64 and f64 all-reduces: one, odd,
/// exactly `max_atomic_size` (512 B) — all triggered chains — and one past
/// it (the blocking fallback).
const AR_LENS: [usize; 4] = [1, 7, 64, 65];

/// One all-reduce, started and waited at once.
fn iallreduce<T, O>(c: &SimpleCommunicator, send: &[T], op: O) -> R<Vec<T>>
where
    T: mpi_on_portals::Equivalence + Default + Clone,
    O: mpi_on_portals::collective::Operation<T>,
{
    let mut recv = vec![T::default(); send.len()];
    scope(|sc| -> R<()> {
        c.immediate_all_reduce_into(sc, send, &mut recv[..], op)
            .map_err(e)?
            .wait()
            .map_err(e)?;
        Ok(())
    })?;
    Ok(recv)
}

/// Non-blocking all-reduce: sum, max, min and bitwise and on u64, i32 and
/// f64 (sums of small integers, exact in any order), a user-defined
/// operation and a vector past the atomic limit (both the fallback);
/// `rounds` back to back; then several outstanding at once, interleaved
/// with broadcasts and barriers, waited in reverse order.
fn all_reduce_values_on(c: &SimpleCommunicator, rounds: usize) -> R<()> {
    let (n, me) = (c.size() as u64, c.rank() as u64);
    // Rank r contributes (r + 1) · (j + 1) + round at element j.
    let tri = n * (n + 1) / 2;
    for len in AR_LENS {
        let mine: Vec<u64> = (0..len as u64).map(|j| (me + 1) * (j + 1)).collect();
        let got = iallreduce(c, &mine, SystemOperation::sum())?;
        let want: Vec<u64> = (0..len as u64).map(|j| tri * (j + 1)).collect();
        ensure(got == want, || format!("u64 sum of {len}: {got:?}"))?;
        let f: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
        let got = iallreduce(c, &f, SystemOperation::sum())?;
        let fw: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        ensure(got == fw, || format!("f64 sum of {len}: {got:?}"))?;
        let got = iallreduce(c, &f, SystemOperation::max())?;
        let fmax: Vec<f64> = (0..len).map(|j| (n * (j as u64 + 1)) as f64).collect();
        ensure(got == fmax, || format!("f64 max of {len}: {got:?}"))?;
        // Every bit but this rank's (mod 64) in element 0, all in others.
        let bits: Vec<u64> = (0..len)
            .map(|j| if j == 0 { !(1u64 << (me % 64)) } else { !0 })
            .collect();
        let got = iallreduce(c, &bits, SystemOperation::bitwise_and())?;
        let gone = (0..n).fold(0u64, |a, r| a | 1 << (r % 64));
        ensure(got[0] == !gone && got[1..].iter().all(|&x| x == !0), || {
            format!("u64 band of {len}: {got:?}")
        })?;
        let user = UserOperation::commutative(|a: &[u64], b: &mut [u64]| {
            for (o, i) in b.iter_mut().zip(a) {
                *o += i;
            }
        });
        let got = iallreduce(c, &mine, &user)?;
        ensure(got == want, || {
            format!("user-defined sum of {len}: {got:?}")
        })?;
    }
    let signed: Vec<i32> = (0..5).map(|j| me as i32 * (j - 2)).collect();
    let got = iallreduce(c, &signed, SystemOperation::max())?;
    let top = n as i32 - 1;
    let want: Vec<i32> = (0..5)
        .map(|j| if j < 2 { 0 } else { top * (j - 2) })
        .collect();
    ensure(got == want, || format!("i32 max: {got:?}"))?;
    let got = iallreduce(c, &signed, SystemOperation::min())?;
    let want: Vec<i32> = (0..5)
        .map(|j| if j < 2 { top * (j - 2) } else { 0 })
        .collect();
    ensure(got == want, || format!("i32 min: {got:?}"))?;
    let got = iallreduce(c, &signed, SystemOperation::sum())?;
    let want: Vec<i32> = (0..5).map(|j| (tri - n) as i32 * (j - 2)).collect();
    ensure(got == want, || format!("i32 sum: {got:?}"))?;
    for i in 0..rounds as u64 {
        let got = iallreduce(c, &[me + i, 1], SystemOperation::sum())?;
        ensure(got == [tri - n + n * i, n], || {
            format!("round {i}: {got:?}")
        })?;
    }
    // Outstanding together, with broadcasts and barriers among them.
    const OUT: usize = 12;
    let sends: Vec<Vec<u64>> = (0..OUT)
        .map(|i| (0..=i as u64).map(|j| me * 3 + j + i as u64).collect())
        .collect();
    let mut recvs: Vec<Vec<u64>> = sends.iter().map(|s| vec![0; s.len()]).collect();
    let mut xs = vec![0u64; OUT];
    scope(|sc| -> R<()> {
        let mut reqs = Vec::new();
        for (i, ((s, r), x)) in sends.iter().zip(&mut recvs).zip(&mut xs).enumerate() {
            if i % 2 == 0 {
                reqs.push(
                    c.immediate_all_reduce_into(sc, &s[..], &mut r[..], SystemOperation::max())
                        .map_err(e)?,
                );
            } else {
                reqs.push(
                    c.immediate_all_reduce_into(sc, &s[..], &mut r[..], SystemOperation::sum())
                        .map_err(e)?,
                );
            }
            if me == 0 {
                *x = i as u64 + 100;
            }
            reqs.push(
                c.process_at_rank(0)
                    .immediate_broadcast_into(sc, x)
                    .map_err(e)?,
            );
            if i % 4 == 0 {
                reqs.push(c.immediate_barrier().map_err(e)?);
            }
        }
        while let Some(r) = reqs.pop() {
            r.wait().map_err(e)?;
        }
        Ok(())
    })?;
    for (i, r) in recvs.iter().enumerate() {
        let want: Vec<u64> = (0..=i as u64)
            .map(|j| {
                let base = j + i as u64;
                if i % 2 == 0 {
                    (n - 1) * 3 + base
                } else {
                    3 * (tri - n) + n * base
                }
            })
            .collect();
        ensure(*r == want, || format!("outstanding all-reduce {i}: {r:?}"))?;
        ensure(xs[i] == i as u64 + 100, || {
            format!("broadcast {i} among them")
        })?;
    }
    Ok(())
}

/// `nbc [rounds]`: values on the world, a duplicate and a split (by
/// parity), and a root out of range.
pub(crate) fn nbc(u: &Universe, rounds: usize) -> R<()> {
    let w = u.world();
    values_on(&w, rounds)?;
    let d = w.duplicate().map_err(e)?;
    values_on(&d, rounds)?;
    let s = w
        .split_by_color(Color::with_value(w.rank() % 2))
        .map_err(e)?
        .ok_or("split gave no communicator")?;
    values_on(&s, rounds / 2)?;
    // The world again after the others: instance numbers are per
    // communicator.
    values_on(&w, 4)?;
    drop((d, s));
    let mut x = 0u8;
    for bad in [w.size(), -1] {
        let r = scope(|sc| {
            w.process_at_rank(bad)
                .immediate_broadcast_into(sc, &mut x)
                .map(|_| ())
        });
        ensure(matches!(r, Err(MpiError::InvalidRank { .. })), || {
            format!("root {bad}: {r:?}")
        })?;
    }
    // Still usable after the bad calls.
    w.immediate_barrier().map_err(e)?.wait().map_err(e)?;
    // A barrier outlives its communicator: freed while it runs (rank 0
    // starts late, so it cannot be complete yet elsewhere), it still
    // completes, and the pair is reused once it has.
    for round in 0..3 {
        let d = w.duplicate().map_err(e)?;
        if me_is(&w, 0) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let req = d.immediate_barrier().map_err(e)?;
        drop(d);
        req.wait().map_err(e)?;
        let again = w.duplicate().map_err(e)?;
        let mut x = if me_is(&again, 0) { round + 1 } else { 0u32 };
        scope(|sc| -> R<()> {
            again
                .process_at_rank(0)
                .immediate_broadcast_into(sc, &mut x)
                .map_err(e)?
                .wait()
                .map_err(e)?;
            Ok(())
        })?;
        ensure(x == round + 1, || format!("after a freed barrier: {x}"))?;
    }
    Ok(())
}

fn me_is(c: &SimpleCommunicator, r: Rank) -> bool {
    c.rank() == r
}

fn now_ns() -> R<u64> {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .map_err(|x| x.to_string())
}

/// `nbcsleep`, thread mode: every rank starts a barrier and a broadcast
/// (on the world and on a duplicate), then sleeps with no MPI call, then
/// one `peek` of each (no transport pass of its own) must find it complete. Then the order check: rank
/// r starts a barrier r × 150 ms late; no rank's wait may return before
/// the last start (one host: one clock).
pub(crate) fn nbcsleep(u: &Universe, quiet_first: Duration) -> R<()> {
    let w = u.world();
    let d = w.duplicate().map_err(e)?;
    let (n, me) = (w.size(), w.rank());
    let len = 10_000;
    let want: Vec<Vec<u8>> = (0..2).map(|i| pattern(len, 99 + i)).collect();
    let mut bufs: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            if me == (n - 1) * i as Rank {
                want[i].clone()
            } else {
                vec![0; len]
            }
        })
        .collect();
    let mine = [me as u64 + 1, 2];
    let mut sums = [[0u64; 2]; 2];
    w.barrier().map_err(e)?;
    // With nothing under way meanwhile, if asked: the progress thread
    // stands aside for a quiet rank's longer hand-back.
    std::thread::sleep(quiet_first);
    scope(|sc| -> R<()> {
        let (b0, b1) = bufs.split_at_mut(1);
        let (s0, s1) = sums.split_at_mut(1);
        let reqs = vec![
            ("world barrier", w.immediate_barrier().map_err(e)?),
            (
                "world broadcast",
                w.process_at_rank(0)
                    .immediate_broadcast_into(sc, &mut b0[0][..])
                    .map_err(e)?,
            ),
            ("dup barrier", d.immediate_barrier().map_err(e)?),
            (
                "dup broadcast",
                d.process_at_rank(n - 1)
                    .immediate_broadcast_into(sc, &mut b1[0][..])
                    .map_err(e)?,
            ),
            (
                "world all-reduce",
                w.immediate_all_reduce_into(sc, &mine, &mut s0[0], SystemOperation::sum())
                    .map_err(e)?,
            ),
            (
                "dup all-reduce",
                d.immediate_all_reduce_into(sc, &mine, &mut s1[0], SystemOperation::max())
                    .map_err(e)?,
            ),
        ];
        // No MPI call at all: only the progress threads run the chains.
        std::thread::sleep(Duration::from_millis(1500));
        // `peek` makes no transport pass itself (`test` would): what it
        // sees complete, the progress threads completed. Every request is
        // looked at before any wait drives progress.
        let mut seen = Vec::with_capacity(reqs.len());
        for (_, r) in &reqs {
            seen.push(r.peek().map_err(e)?);
        }
        for ((what, r), seen) in reqs.into_iter().zip(seen) {
            r.wait().map_err(e)?;
            ensure(seen, || format!("{what} was not complete after sleeping"))?;
        }
        Ok(())
    })?;
    ensure(bufs == want, || "broadcast values wrong".into())?;
    let n64 = n as u64;
    ensure(sums == [[n64 * (n64 + 1) / 2, 2 * n64], [n64, 2]], || {
        format!("all-reduce values wrong: {sums:?}")
    })?;
    // A triggered all-reduce does not wait in its start for the others
    // (the blocking fallback would): rank 0 starts it, then sends what
    // the last rank needs before it starts its own. Deadlocks otherwise.
    let last = w.process_at_rank(n - 1);
    let mut got = [0u64; 1];
    let mut token = [0u32; 1];
    scope(|sc| -> R<()> {
        if me == n - 1 {
            w.process_at_rank(0)
                .receive_into(&mut token[..])
                .map_err(e)?;
        }
        let req = w
            .immediate_all_reduce_into(sc, &[1u64], &mut got, SystemOperation::sum())
            .map_err(e)?;
        if me == 0 && n > 1 {
            last.send(&[7u32][..]).map_err(e)?;
        }
        req.wait().map_err(e)?;
        Ok(())
    })?;
    ensure(got[0] == n as u64, || format!("late all-reduce: {got:?}"))?;
    ensure(me != n - 1 || n == 1 || token[0] == 7, || {
        "token lost".into()
    })?;
    // Order: a barrier is not complete before every member started it.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(150 * me as u64));
        let start = now_ns()?;
        let req = w.immediate_barrier().map_err(e)?;
        req.wait().map_err(e)?;
        let done = now_ns()?;
        let mut all = vec![0u64; 2 * n as usize];
        w.all_gather_into(&[start, done][..], &mut all[..])
            .map_err(e)?;
        let last_start = all.iter().step_by(2).max().copied().unwrap_or(0);
        let first_done = all.iter().skip(1).step_by(2).min().copied().unwrap_or(0);
        ensure(first_done >= last_start, || {
            format!(
                "a barrier completed {} µs before the last member started it",
                (last_start - first_done) / 1000
            )
        })?;
    }
    println!("nbcsleep: barrier, broadcast and all-reduce completed while every thread slept");
    Ok(())
}
