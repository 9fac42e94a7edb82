//! MPI one-sided (RMA window) checks for multi-process tests:
//! `ptlrun -n N rma_check <scenario>`. Prints `OK <scenario> rank <r>` per
//! rank and exits 0 when every check passes.

// The checks name the index they report.
#![allow(clippy::needless_range_loop)]

use std::time::{Duration, Instant};

use mpi_on_portals::traits::*;
use mpi_on_portals::{
    LockType, MpiError, RmaOp, SimpleCommunicator, SystemOperation, Universe, Window,
};
use portals_tests::finish;

type R<T> = std::result::Result<T, String>;

fn e(x: MpiError) -> String {
    x.to_string()
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> R<()> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

fn word(r: i32, t: i32, i: usize) -> u64 {
    (r as u64) << 40 | (t as u64) << 20 | i as u64
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
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

/// Every rank puts its row into every rank's window under an exclusive
/// lock, reads every row back under lock_all, and a large (zero-copy)
/// put and get go around a ring; on a window over caller memory and on an
/// allocated one.
fn passive(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    const ROW: usize = 8;
    let mut mem = vec![0u64; ROW * n as usize];
    {
        let win = w.create_window(&mut mem).map_err(e)?;
        rows(w, &win)?;
        win.free().map_err(e)?;
    }
    for t in 0..n {
        for i in 0..ROW {
            let got = mem[t as usize * ROW + i];
            ensure(got == word(t, me, i), || {
                format!("created window: row {t} element {i} is {got:#x}")
            })?;
        }
    }
    let win = w.allocate_window::<u64>(ROW * n as usize).map_err(e)?;
    rows(w, &win)?;
    win.free().map_err(e)?;

    // Larger than the copy limit: zero-copy put, then a get.
    let len = 200 * 1024 + 3;
    let win = w.allocate_window::<u8>(len).map_err(e)?;
    let next = (me + 1) % n;
    let data = bytes(len, me as u64 + 7);
    {
        let g = win.lock(next, LockType::Exclusive).map_err(e)?;
        win.put(next, 0, &data).map_err(e)?;
        let mut back = vec![0u8; len];
        win.get(next, 0, &mut back).map_err(e)?;
        ensure(back == data, || "large get after put differs".into())?;
        g.unlock().map_err(e)?;
    }
    w.barrier().map_err(e)?;
    let prev = (me + n - 1) % n;
    ensure(
        win.local().map_err(e)? == bytes(len, prev as u64 + 7),
        || "large put: local window differs".into(),
    )?;
    win.free().map_err(e)
}

fn rows(w: &SimpleCommunicator, win: &Window<'_, u64>) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    const ROW: usize = 8;
    for t in 0..n {
        let row: Vec<u64> = (0..ROW).map(|i| word(me, t, i)).collect();
        let g = win.lock(t, LockType::Exclusive).map_err(e)?;
        win.put(t, me as usize * ROW, &row).map_err(e)?;
        g.unlock().map_err(e)?;
    }
    w.barrier().map_err(e)?;
    let local = win.local().map_err(e)?;
    for r in 0..n {
        for i in 0..ROW {
            let got = local[r as usize * ROW + i];
            ensure(got == word(r, me, i), || {
                format!("row {r} element {i} is {got:#x} here")
            })?;
        }
    }
    let all = win.lock_all().map_err(e)?;
    for t in 0..n {
        let mut back = vec![0u64; ROW * n as usize];
        win.get(t, 0, &mut back).map_err(e)?;
        for r in 0..n {
            for i in 0..ROW {
                let got = back[r as usize * ROW + i];
                ensure(got == word(r, t, i), || {
                    format!("get from {t}: row {r} element {i} is {got:#x}")
                })?;
            }
        }
    }
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)
}

/// Concurrent fetch_and_op counters on rank 0: the fetched values of all
/// ranks are a permutation of 0..n*k and the counter ends at n*k; then a
/// compare_and_swap that exactly one rank wins; then an exclusive-lock
/// mutex (get, put v + 1) without lost updates.
fn counters(w: &SimpleCommunicator, k: usize) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let win = w.allocate_window::<u64>(4).map_err(e)?;
    let all = win.lock_all().map_err(e)?;
    let mut mine = Vec::with_capacity(k);
    for _ in 0..k {
        mine.push(
            win.fetch_and_op(0, 0, &1, SystemOperation::sum())
                .map_err(e)?,
        );
    }
    let old = win
        .compare_and_swap(0, 1, &0, &(me as u64 + 1))
        .map_err(e)?;
    all.unlock().map_err(e)?;
    let mut every = vec![0u64; k * n as usize];
    w.all_gather_into(&mine[..], &mut every[..]).map_err(e)?;
    every.sort_unstable();
    ensure(every.iter().copied().eq(0..(k as u64 * n as u64)), || {
        "fetched counter values are not a permutation".into()
    })?;
    let olds = {
        let mut v = vec![0u64; n as usize];
        w.all_gather_into(&old, &mut v[..]).map_err(e)?;
        v
    };
    let winners = olds.iter().filter(|&&o| o == 0).count();
    ensure(winners == 1, || {
        format!("{winners} ranks won the CAS: {olds:?}")
    })?;
    // Mutual exclusion: get, then put, under an exclusive lock.
    for _ in 0..k / 4 {
        let g = win.lock(0, LockType::Exclusive).map_err(e)?;
        let mut v = [0u64];
        win.get(0, 2, &mut v).map_err(e)?;
        win.put(0, 2, &[v[0] + 1]).map_err(e)?;
        g.unlock().map_err(e)?;
    }
    w.barrier().map_err(e)?;
    if me == 0 {
        let l = win.local().map_err(e)?;
        ensure(l[0] == k as u64 * n as u64, || {
            format!("counter is {}", l[0])
        })?;
        let winner = olds.iter().position(|&o| o == 0).unwrap_or(0) as u64 + 1;
        ensure(l[1] == winner, || format!("CAS word {} not {winner}", l[1]))?;
        ensure(l[2] == (k / 4) as u64 * n as u64, || {
            format!("mutex counter {} lost updates", l[2])
        })?;
    }
    win.free().map_err(e)
}

/// Rank 1 sleeps without any library call (it waits for a marker file
/// that rank 0 creates when done) while rank 0 locks it, puts, gets,
/// fetches-and-adds and unlocks: with a progress thread, all of it
/// completes.
fn progress(w: &SimpleCommunicator) -> R<()> {
    let me = w.rank();
    let win = w.allocate_window::<u64>(16).map_err(e)?;
    let key = std::env::var("PTL_JOB_KEY").unwrap_or_else(|_| "nokey".into());
    let marker = std::env::temp_dir().join(format!("rma-progress-{key}"));
    w.barrier().map_err(e)?;
    if me == 0 {
        let data: Vec<u64> = (0..8).map(|i| 0xabc0 + i).collect();
        let g = win.lock(1, LockType::Exclusive).map_err(e)?;
        win.put(1, 0, &data).map_err(e)?;
        let mut back = vec![0u64; 8];
        win.get(1, 0, &mut back).map_err(e)?;
        ensure(back == data, || {
            "get while the target sleeps differs".into()
        })?;
        let old = win
            .fetch_and_op(1, 8, &5, SystemOperation::sum())
            .map_err(e)?;
        ensure(old == 0, || format!("fetch_and_op returned {old}"))?;
        g.unlock().map_err(e)?;
        std::fs::write(&marker, b"done").map_err(|x| x.to_string())?;
        println!("rank 0 done while rank 1 slept");
    } else if me == 1 {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !marker.exists() {
            ensure(Instant::now() < deadline, || {
                "the origin did not finish while the target slept".into()
            })?;
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&marker);
        let l = win.local().map_err(e)?;
        ensure(
            l[..8].iter().copied().eq(0xabc0..0xabc8) && l[8] == 5,
            || format!("window after the sleep: {l:?}"),
        )?;
        println!("completed while sleeping");
    }
    w.barrier().map_err(e)?;
    win.free().map_err(e)
}

/// Flushes: under lock_all each rank puts a short pattern (copied, so
/// complete at the target only once flushed) into the next rank's window,
/// flushes — `flush`, `flush_all`, `flush_local`, `flush_local_all` in
/// turn (the local forms complete remotely too, as documented) — and then
/// tells the rank after the next by message, with the epoch still open and
/// no barrier. That rank gets the pattern from the target (its get travels
/// another stream than the put, so only the flush orders them) and finds
/// it byte for byte; the target finds it in its own window (after `sync`)
/// once the epoch is over.
fn flushes(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let next = (me + 1) % n;
    let (reader, writer) = ((me + 2) % n, (me + 2 * n - 2) % n);
    let target = (writer + 1) % n;
    const ROW: usize = 8;
    let win = w.allocate_window::<u64>(4 * ROW).map_err(e)?;
    let all = win.lock_all().map_err(e)?;
    for k in 0..4usize {
        let pat: Vec<u64> = (0..ROW).map(|i| word(me, k as i32, i)).collect();
        win.put(next, k * ROW, &pat).map_err(e)?;
        match k {
            0 => win.flush(next),
            1 => win.flush_all(),
            2 => win.flush_local(next),
            _ => win.flush_local_all(),
        }
        .map_err(e)?;
        w.process_at_rank(reader).send(&(k as u64)).map_err(e)?;
        let (got, _) = w.process_at_rank(writer).receive::<u64>().map_err(e)?;
        ensure(got == k as u64, || format!("message {got} for flush {k}"))?;
        let mut seen = vec![0u64; ROW];
        win.get(target, k * ROW, &mut seen).map_err(e)?;
        for i in 0..ROW {
            ensure(seen[i] == word(writer, k as i32, i), || {
                format!(
                    "after flush {k}: element {i} at rank {target} is {:#x}",
                    seen[i]
                )
            })?;
        }
    }
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)?;
    win.sync().map_err(e)?;
    let prev = (me + n - 1) % n;
    let l = win.local().map_err(e)?;
    for k in 0..4usize {
        for i in 0..ROW {
            ensure(l[k * ROW + i] == word(prev, k as i32, i), || {
                format!("local element {} is {:#x}", k * ROW + i, l[k * ROW + i])
            })?;
        }
    }
    win.free().map_err(e)
}

/// Accumulates: sums from every rank (longer than max_atomic_size, so in
/// pieces), one origin's replace/sum sequence applied in order, and
/// get_accumulate, fetch_and_op with NoOp and the request forms.
fn accumulate(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    const L: usize = 1000; // 8000 bytes: many 512-byte atomics
    let win = w.allocate_window::<i64>(L + 8).map_err(e)?;
    let all = win.lock_all().map_err(e)?;
    let data: Vec<i64> = (0..L as i64).map(|i| (me as i64 + 1) * (i + 1)).collect();
    win.accumulate(0, 0, &data, SystemOperation::sum())
        .map_err(e)?;
    // Ordering: replace then add, many times, to one location.
    let slot = L + 1 + me as usize % 4;
    if me < 4 {
        for i in 0..200i64 {
            win.accumulate(0, slot, &[i], RmaOp::Replace).map_err(e)?;
            win.accumulate(0, slot, &[1000], SystemOperation::sum())
                .map_err(e)?;
            win.accumulate(0, slot, &[3], SystemOperation::product())
                .map_err(e)?;
        }
    }
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)?;
    let total: i64 = (1..=n as i64).sum();
    if me == 0 {
        let l = win.local().map_err(e)?;
        for i in 0..L {
            ensure(l[i] == total * (i as i64 + 1), || {
                format!("sum element {i} is {}", l[i])
            })?;
        }
        for r in 0..n.min(4) as usize {
            ensure(l[L + 1 + r] == (199 + 1000) * 3, || {
                format!("ordered accumulates of rank {r} ended at {}", l[L + 1 + r])
            })?;
        }
    }
    w.barrier().map_err(e)?;
    // get_accumulate and NoOp fetches on the next rank's window.
    let t = (me + 1) % n;
    let all = win.lock_all().map_err(e)?;
    let mut before = vec![0i64; 4];
    let ones = [1i64; 4];
    win.get_accumulate(t, L + 4, &ones, &mut before, SystemOperation::max())
        .map_err(e)?;
    let mut now = vec![0i64; 4];
    win.get_accumulate(t, L + 4, &ones, &mut now, RmaOp::NoOp)
        .map_err(e)?;
    ensure(now.iter().all(|&v| v >= 1), || format!("max left {now:?}"))?;
    let f = win.fetch_and_op(t, L + 4, &0, RmaOp::NoOp).map_err(e)?;
    ensure(f >= 1, || format!("no-op fetch {f}"))?;
    // Request forms.
    let pat: Vec<i64> = (0..L as i64).map(|i| i * 7 + me as i64).collect();
    let r1 = win.rput(t, 0, &pat).map_err(e)?;
    r1.wait().map_err(e)?;
    let mut back = vec![0i64; L];
    let mut r2 = win.rget(t, 0, &mut back).map_err(e)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !r2.test().map_err(e)? {
        ensure(Instant::now() < deadline, || "rget never completed".into())?;
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(r2);
    ensure(back == pat, || "rget after rput differs".into())?;
    let r3 = win
        .raccumulate(t, 0, &pat, SystemOperation::sum())
        .map_err(e)?;
    r3.wait().map_err(e)?;
    let mut old = vec![0i64; L];
    let minus: Vec<i64> = pat.iter().map(|v| -v).collect();
    win.rget_accumulate(t, 0, &minus, &mut old, SystemOperation::sum())
        .map_err(e)?
        .wait()
        .map_err(e)?;
    ensure(old.iter().zip(&pat).all(|(o, p)| *o == 2 * p), || {
        "rget_accumulate fetched wrong values".into()
    })?;
    let mut last = vec![0i64; L];
    win.get(t, 0, &mut last).map_err(e)?;
    ensure(last == pat, || {
        "raccumulate/rget_accumulate left wrong values".into()
    })?;
    // Dropping a request waits for it (and fills the buffer).
    let mut dropped = vec![0i64; L];
    drop(win.rget(t, 0, &mut dropped).map_err(e)?);
    ensure(dropped == pat, || {
        "a dropped rget did not fill its buffer".into()
    })?;
    all.unlock().map_err(e)?;
    win.free().map_err(e)
}

/// Fence epochs: everyone puts its rank into slot `me` of every window
/// and adds 1 to slot n; after the fence each window holds 0..n and n.
fn fence(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let win = w.allocate_window::<u32>(n as usize + 1).map_err(e)?;
    win.fence().map_err(e)?;
    for round in 0..3u32 {
        for t in 0..n {
            win.put(t, me as usize, &[me as u32 + round * 100])
                .map_err(e)?;
            win.accumulate(t, n as usize, &[1], SystemOperation::sum())
                .map_err(e)?;
        }
        win.fence().map_err(e)?;
        let l = win.local().map_err(e)?;
        for r in 0..n as usize {
            ensure(l[r] == r as u32 + round * 100, || {
                format!("round {round}: slot {r} is {}", l[r])
            })?;
        }
        ensure(l[n as usize] == n as u32 * (round + 1), || {
            format!("round {round}: counter {}", l[n as usize])
        })?;
        win.fence().map_err(e)?;
    }
    win.free().map_err(e)
}

/// General active target: rank 0 exposes to all others, which put their
/// rank into slot r, then rank 0 exposes again and they get it back.
fn pscw(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let win = w.allocate_window::<u64>(n as usize).map_err(e)?;
    let world = w.group();
    let others = world.exclude(&[0]).map_err(e)?;
    let zero = world.include(&[0]).map_err(e)?;
    for round in 0..3u64 {
        if me == 0 {
            win.post(&others).map_err(e)?;
            win.wait().map_err(e)?;
            let l = win.local().map_err(e)?;
            for r in 1..n as usize {
                ensure(l[r] == r as u64 * 10 + round, || {
                    format!("round {round}: slot {r} is {}", l[r])
                })?;
            }
        } else {
            win.start(&zero).map_err(e)?;
            win.put(0, me as usize, &[me as u64 * 10 + round])
                .map_err(e)?;
            win.complete().map_err(e)?;
        }
    }
    // Gets and accumulates in an access epoch: each origin reads every
    // slot back and adds its rank to slot 0.
    if me == 0 {
        win.post(&others).map_err(e)?;
        win.wait().map_err(e)?;
        let l = win.local().map_err(e)?;
        let want: u64 = (1..n as u64).sum();
        ensure(l[0] == want, || format!("slot 0 is {} not {want}", l[0]))?;
    } else {
        win.start(&zero).map_err(e)?;
        let mut back = vec![0u64; n as usize];
        win.get(0, 0, &mut back).map_err(e)?;
        for r in 1..n as usize {
            ensure(back[r] == r as u64 * 10 + 2, || {
                format!("get in an access epoch: slot {r} is {}", back[r])
            })?;
        }
        win.accumulate(0, 0, &[me as u64], SystemOperation::sum())
            .map_err(e)?;
        win.complete().map_err(e)?;
    }
    // Dropping a live window frees it (collectively) too.
    drop(win);
    Ok(())
}

/// Every misuse returns its typed error, and the target window is left
/// as it was.
fn errors(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let win = w.allocate_window::<u64>(4).map_err(e)?;
    let fwin = w.allocate_window::<f64>(4).map_err(e)?;
    let init: Vec<u64> = (0..4).map(|i| 0x5555_0000 + i + me as u64 * 16).collect();
    win.write_local(0, &init).map_err(e)?;
    fwin.write_local(0, &[1.5; 4]).map_err(e)?;
    w.barrier().map_err(e)?;
    let t = (me + 1) % n;
    let epoch = |r: mpi_on_portals::Result<()>, what: &str| -> R<()> {
        ensure(matches!(r, Err(MpiError::RmaEpoch(_))), || {
            format!("{what}: expected RmaEpoch, got {r:?}")
        })
    };
    epoch(win.put(t, 0, &[1]), "put without an epoch")?;
    epoch(win.get(t, 0, &mut [0]), "get without an epoch")?;
    epoch(
        win.fetch_and_op(t, 0, &1, SystemOperation::sum())
            .map(|_| ()),
        "fetch_and_op without an epoch",
    )?;
    epoch(win.complete(), "complete without start")?;
    epoch(win.wait(), "wait without post")?;
    {
        let g = win.lock(t, LockType::Shared).map_err(e)?;
        epoch(win.lock(t, LockType::Exclusive).map(|_| ()), "double lock")?;
        epoch(win.lock_all().map(|_| ()), "lock_all while locked")?;
        let r = win.put(t, 3, &[1, 2]);
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("put past the end: {r:?}")
        })?;
        let r = win.get(t, usize::MAX, &mut [0]);
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("get at usize::MAX: {r:?}")
        })?;
        let r = win.put(n, 0, &[1]);
        ensure(matches!(r, Err(MpiError::InvalidRank { .. })), || {
            format!("put to rank n: {r:?}")
        })?;
        let r = win.put(-1, 0, &[1]);
        ensure(matches!(r, Err(MpiError::InvalidRank { .. })), || {
            format!("put to rank -1: {r:?}")
        })?;
        let r = win.accumulate(t, 4, &[1], SystemOperation::sum());
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("accumulate past the end: {r:?}")
        })?;
        let r = win.compare_and_swap(t, 4, &0, &1);
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("compare_and_swap past the end: {r:?}")
        })?;
        let r = win.fetch_and_op(t, usize::MAX, &1, SystemOperation::sum());
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("fetch_and_op at usize::MAX: {r:?}")
        })?;
        let mut two = [0u64; 2];
        let r = win.get_accumulate(t, 3, &[1, 1], &mut two, SystemOperation::sum());
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("get_accumulate past the end: {r:?}")
        })?;
        let r = win.rput(t, 4, &[1]).map(|_| ());
        ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
            format!("rput past the end: {r:?}")
        })?;
        let r = win.fetch_and_op(n, 0, &1, SystemOperation::sum());
        ensure(matches!(r, Err(MpiError::InvalidRank { .. })), || {
            format!("fetch_and_op to rank n: {r:?}")
        })?;
        g.unlock().map_err(e)?;
    }
    // A guard dropped without unlock() unlocks: the same lock is taken
    // again (a held one would be refused, or its lock word never freed).
    for _ in 0..2 {
        let _g = win.lock(t, LockType::Exclusive).map_err(e)?;
        let _all = fwin.lock_all().map_err(e)?;
    }
    {
        let g = fwin.lock(t, LockType::Exclusive).map_err(e)?;
        let r = fwin.accumulate(t, 0, &[1.0], SystemOperation::bitwise_or());
        ensure(matches!(r, Err(MpiError::RmaUnsupported(_))), || {
            format!("bitwise or on f64: {r:?}")
        })?;
        let r = fwin.fetch_and_op(t, 0, &1.0, SystemOperation::logical_and());
        ensure(matches!(r, Err(MpiError::RmaUnsupported(_))), || {
            format!("logical and on f64: {r:?}")
        })?;
        g.unlock().map_err(e)?;
    }
    {
        let all = win.lock_all().map_err(e)?;
        epoch(
            win.lock(t, LockType::Shared).map(|_| ()),
            "lock while lock_all",
        )?;
        all.unlock().map_err(e)?;
    }
    // Active target: a second post or start is refused, and so is an
    // operation on a rank outside the start group; the epochs still end.
    let world = w.group();
    let zero = world.include(&[0]).map_err(e)?;
    let others = world.exclude(&[0]).map_err(e)?;
    if me == 0 {
        win.post(&others).map_err(e)?;
        epoch(win.post(&others), "post twice")?;
        win.wait().map_err(e)?;
    } else {
        win.start(&zero).map_err(e)?;
        epoch(win.start(&zero), "start twice")?;
        // This rank is not in the group {0}.
        epoch(win.put(me, 0, &[1]), "put outside the start group")?;
        epoch(
            win.compare_and_swap(me, 0, &0, &1).map(|_| ()),
            "compare_and_swap outside the start group",
        )?;
        win.complete().map_err(e)?;
    }
    epoch(win.put(t, 0, &[1]), "put after complete")?;
    w.barrier().map_err(e)?;
    ensure(win.local().map_err(e)? == init, || {
        "a refused operation changed the target window".into()
    })?;
    ensure(fwin.local().map_err(e)? == [1.5; 4], || {
        "a refused operation changed the f64 window".into()
    })?;
    // with_local under the own exclusive lock.
    let sum = win.with_local(|m| {
        m[0] += 1;
        m.iter().sum::<u64>()
    });
    ensure(sum.is_ok(), || format!("with_local: {sum:?}"))?;
    ensure(win.local().map_err(e)?[0] == init[0] + 1, || {
        "with_local did not write back".into()
    })?;
    fwin.free().map_err(e)?;
    win.free().map_err(e)
}

/// Dynamic windows: each rank attaches a region and publishes its
/// address; the next rank reads it, writes part of it and adds to it; a
/// detached region is refused (typed error) and gives its memory back
/// with the writes in it; a region attached later is found too.
fn dynamic(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let win = w.create_dynamic_window::<u64>().map_err(e)?;
    ensure(win.local().map_err(e)?.is_empty(), || {
        "a dynamic window has no memory of its own".into()
    })?;
    let mine: Vec<u64> = (0..16).map(|i| word(me, 0, i)).collect();
    let addr = win.attach(mine.clone()).map_err(e)? as u64;
    let mut addrs = vec![0u64; n as usize];
    w.all_gather_into(&addr, &mut addrs[..]).map_err(e)?;
    let t = (me + 1) % n;
    let at = |i: usize| addrs[t as usize] as usize + 8 * i;
    let all = win.lock_all().map_err(e)?;
    let mut back = vec![0u64; 4];
    win.get(t, at(3), &mut back).map_err(e)?;
    ensure(
        back.iter().copied().eq((3..7).map(|i| word(t, 0, i))),
        || format!("dynamic get: {back:?}"),
    )?;
    win.put(t, at(0), &[7, 8]).map_err(e)?;
    let old = win
        .fetch_and_op(t, at(15), &1, SystemOperation::sum())
        .map_err(e)?;
    ensure(old == word(t, 0, 15), || format!("dynamic fetch {old:#x}"))?;
    let r = win.get(t, at(15), &mut back[..2]);
    ensure(matches!(r, Err(MpiError::RmaRange { .. })), || {
        format!("dynamic get past the region: {r:?}")
    })?;
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)?;
    let mut head = [0u64; 2];
    win.read_local(addr as usize, &mut head).map_err(e)?;
    ensure(head == [7, 8], || format!("dynamic put landed as {head:?}"))?;
    let region = win.detach(addr as usize).map_err(e)?;
    ensure(
        region[15] == word(me, 0, 15) + 1 && region[2..15] == mine[2..15],
        || "detached region lost writes".into(),
    )?;
    w.barrier().map_err(e)?;
    let all = win.lock_all().map_err(e)?;
    let r = win.get(t, at(3), &mut back);
    ensure(
        matches!(
            r,
            Err(MpiError::RmaRange { .. } | MpiError::RmaFailed { .. })
        ),
        || format!("get from a detached region: {r:?}"),
    )?;
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)?;
    let addr2 = win.attach(vec![me as u64 + 100; 4]).map_err(e)? as u64;
    w.all_gather_into(&addr2, &mut addrs[..]).map_err(e)?;
    let all = win.lock_all().map_err(e)?;
    let v = win
        .fetch_and_op(t, addrs[t as usize] as usize + 8, &0, RmaOp::NoOp)
        .map_err(e)?;
    ensure(v == t as u64 + 100, || format!("second region read {v}"))?;
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)?;
    win.free().map_err(e)
}

/// Not a check: microseconds per operation from rank 0 to rank 1, which
/// waits in a barrier meanwhile (after a ping-pong for reference).
fn latency(w: &SimpleCommunicator, iters: usize) -> R<()> {
    let me = w.rank();
    let win = w.allocate_window::<u64>(8).map_err(e)?;
    let time = |what: &str, f: &mut dyn FnMut() -> R<()>| -> R<()> {
        for _ in 0..iters / 10 {
            f()?;
        }
        let t0 = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!("latency {what}: {us:.1} us");
        Ok(())
    };
    if me <= 1 {
        let peer = w.process_at_rank(1 - me);
        let mut x = 0u64;
        time("send/recv round trip", &mut || {
            if me == 0 {
                peer.send(&x).map_err(e)?;
                x = peer.receive::<u64>().map_err(e)?.0;
            } else {
                x = peer.receive::<u64>().map_err(e)?.0;
                peer.send(&x).map_err(e)?;
            }
            Ok(())
        })?;
    }
    if me == 0 {
        let all = win.lock_all().map_err(e)?;
        time("put 8 B + flush", &mut || {
            win.put(1, 0, &[1]).map_err(e)?;
            win.flush(1).map_err(e)
        })?;
        time("get 8 B", &mut || win.get(1, 0, &mut [0]).map_err(e))?;
        time("fetch_and_op sum u64", &mut || {
            win.fetch_and_op(1, 1, &1, SystemOperation::sum())
                .map(|_| ())
                .map_err(e)
        })?;
        time("compare_and_swap u64", &mut || {
            win.compare_and_swap(1, 2, &0, &1).map(|_| ()).map_err(e)
        })?;
        time("accumulate 8 B + flush", &mut || {
            win.accumulate(1, 3, &[1], SystemOperation::sum())
                .map_err(e)?;
            win.flush(1).map_err(e)
        })?;
        all.unlock().map_err(e)?;
        time("lock exclusive + put 8 B + unlock", &mut || {
            let g = win.lock(1, LockType::Exclusive).map_err(e)?;
            win.put(1, 0, &[2]).map_err(e)?;
            g.unlock().map_err(e)
        })?;
    }
    w.barrier().map_err(e)?;
    win.free().map_err(e)
}

/// A shared window (`allocate_shared_window`): rank 2's part is empty,
/// the others hold `8 + rank` words. Each rank stores the first half of
/// its own part and the second half of the next rank's directly, then
/// every rank reads every part directly (atomic loads and a bulk copy)
/// and through engine gets, word for word; an engine put is seen by a
/// direct load; the parts are contiguous in rank order in this process's
/// mapping; the object's name is gone while the window lives.
/// Names of shared-window objects in /dev/shm that carry this process's
/// pid (a name from an earlier process with the same pid carries it too:
/// compare before and after).
fn own_window_objects() -> R<Vec<String>> {
    let prefix = format!("ptl-win.{}.", std::process::id());
    Ok(std::fs::read_dir("/dev/shm")
        .map_err(|x| x.to_string())?
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect())
}

fn shared(w: &SimpleCommunicator) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let before = own_window_objects()?;
    let len_of = |r: i32| if r == 2 { 0 } else { 8 + r as usize };
    let win = w.allocate_shared_window::<u64>(len_of(me)).map_err(e)?;
    ensure(win.len() == len_of(me), || "own length".into())?;
    let base = win.shared_query(0).map_err(e)?.as_ptr() as usize;
    let mut off = 0usize;
    for r in 0..n {
        let q = win.shared_query(r).map_err(e)?;
        ensure(
            q.len() == len_of(r) && win.len_of(r).map_err(e)? == len_of(r),
            || format!("rank {r}'s part has {} elements", q.len()),
        )?;
        ensure(q.as_ptr() as usize == base + off, || {
            format!("rank {r}'s part is not contiguous with the earlier ones")
        })?;
        off += len_of(r) * 8;
    }
    // Checked after the window is freed: a rank failing with a live
    // window would wait in its collective teardown.
    let name_left = me == 0 && own_window_objects()?.iter().any(|n| !before.contains(n));
    let next = (me + 1) % n;
    let prev = |r: i32| (r + n - 1) % n;
    let own = win.shared_query(me).map_err(e)?;
    for i in 0..own.len() / 2 {
        own.store(i, word(me, me, i)).map_err(e)?;
    }
    let theirs = win.shared_query(next).map_err(e)?;
    for i in theirs.len() / 2..theirs.len() {
        theirs.store(i, word(me, next, i)).map_err(e)?;
    }
    win.sync().map_err(e)?;
    w.barrier().map_err(e)?;
    win.sync().map_err(e)?;
    let expect = |r: i32, i: usize| {
        if i < len_of(r) / 2 {
            word(r, r, i)
        } else {
            word(prev(r), r, i)
        }
    };
    let all = win.lock_all().map_err(e)?;
    for r in 0..n {
        let q = win.shared_query(r).map_err(e)?;
        let mut copy = vec![0u64; q.len()];
        // SAFETY: every store happened before the barrier; nobody writes
        // until the next one.
        unsafe { q.copy_to(0, &mut copy) }.map_err(e)?;
        let mut got = vec![0u64; q.len()];
        win.get(r, 0, &mut got).map_err(e)?;
        for i in 0..q.len() {
            let direct = q.load(i).map_err(e)?;
            ensure(
                direct == expect(r, i) && copy[i] == direct && got[i] == direct,
                || {
                    format!(
                    "rank {r} element {i}: load {direct:#x}, copy {:#x}, get {:#x}, expected {:#x}",
                    copy[i], got[i], expect(r, i)
                )
                },
            )?;
        }
    }
    all.unlock().map_err(e)?;
    w.barrier().map_err(e)?;
    // An engine put into the next rank's part, seen by a direct load.
    if len_of(next) > 0 {
        let g = win.lock(next, LockType::Exclusive).map_err(e)?;
        win.put(next, 0, &[0xfeed_0000 + me as u64]).map_err(e)?;
        g.unlock().map_err(e)?;
    }
    w.barrier().map_err(e)?;
    win.sync().map_err(e)?;
    if len_of(me) > 0 {
        let v = own.load(0).map_err(e)?;
        ensure(v == 0xfeed_0000 + prev(me) as u64, || {
            format!("engine put not seen directly: {v:#x}")
        })?;
    }
    ensure(own.load(own.len()).is_err(), || {
        "a load past the end".into()
    })?;
    let plain = w.allocate_window::<u64>(1).map_err(e)?;
    ensure(
        matches!(plain.shared_query(0), Err(MpiError::RmaUnsupported(_))),
        || "shared_query on a plain window".into(),
    )?;
    plain.free().map_err(e)?;
    win.free().map_err(e)?;
    ensure(!name_left, || {
        "the shared object's name outlived the window's creation".into()
    })
}

/// Ranks posing as two hosts (`PTL_HOST_ID` set per rank before the
/// call): every rank gets `RmaUnsupported`, none hangs; posing as one
/// host again, the window is made.
fn shared_hosts(w: &SimpleCommunicator) -> R<()> {
    let me = w.rank();
    let host = if me < w.size() / 2 { "hostA" } else { "hostB" };
    // Nothing else reads the variable once the job has joined.
    std::env::set_var("PTL_HOST_ID", host);
    match w.allocate_shared_window::<u32>(4) {
        Err(MpiError::RmaUnsupported(_)) => {}
        Err(x) => return Err(format!("wrong error across hosts: {x}")),
        Ok(_) => return Err("a shared window across two hosts".into()),
    }
    w.barrier().map_err(e)?;
    std::env::set_var("PTL_HOST_ID", "hostA");
    let win = w.allocate_shared_window::<u32>(4).map_err(e)?;
    win.free().map_err(e)
}

/// Windows created, used and freed in a loop, the last free right before
/// finalize: each rank's closing barrier must complete although a faster
/// peer leaves it, finalizes and sends its departure notice at once (the
/// notice must not overtake the acknowledgment of the barrier message
/// that peer received last).
fn free_finalize(w: &SimpleCommunicator, rounds: u64) -> R<()> {
    let (me, n) = (w.rank(), w.size());
    let t = (me + 1) % n;
    for round in 0..rounds {
        let win = w.allocate_window::<u64>(2).map_err(e)?;
        let g = win.lock(t, LockType::Exclusive).map_err(e)?;
        win.put(t, 0, &[round]).map_err(e)?;
        win.fetch_and_op(t, 1, &1, SystemOperation::sum())
            .map_err(e)?;
        g.unlock().map_err(e)?;
        win.free().map_err(e)?;
    }
    Ok(())
}

/// The last message before finalize, taken by the receiver's progress
/// thread while the receiver is away from MPI: rank 0 sends rank 1 an
/// empty message (a standard send, complete on the acknowledgment of
/// rank 1's transport) and finalizes; rank 1 receives it after a nap and
/// finalizes at once. Run with `nal_shm::ANSWER_DELAY_ENV` set, rank 1's
/// progress thread takes the message and holds its acknowledgment back
/// while rank 1 receives, finalizes and departs: rank 0's send must still
/// complete (its acknowledgment ahead of the departure notice), not fail
/// with `PeerFinalized`. The closing barrier of `Window::free` followed by
/// finalize is this pattern.
fn last_before_finalize(w: &SimpleCommunicator) -> R<()> {
    let me = w.rank();
    let key = std::env::var("PTL_JOB_KEY").unwrap_or_else(|_| "nokey".into());
    let marker = std::env::temp_dir().join(format!("rma-napping-{key}"));
    w.barrier().map_err(e)?;
    if me == 0 {
        // Only once rank 1 is away from MPI, so its progress thread (not
        // its application thread, which would answer before looking)
        // takes the message.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !marker.exists() {
            ensure(Instant::now() < deadline, || "rank 1 never napped".into())?;
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&marker);
        w.process_at_rank(1).send(&[0u8; 0][..]).map_err(e)?;
    } else if me == 1 {
        std::fs::write(&marker, b"napping").map_err(|x| x.to_string())?;
        std::thread::sleep(Duration::from_millis(300));
        let (v, _) = w.process_at_rank(0).receive_vec::<u8>().map_err(e)?;
        ensure(v.is_empty(), || format!("received {} bytes", v.len()))?;
    }
    Ok(())
}

fn run(u: &Universe, scenario: &str) -> R<()> {
    let w = u.world();
    match scenario {
        "passive" => passive(&w),
        "counters" => counters(&w, 200),
        "progress" => progress(&w),
        "accumulate" => accumulate(&w),
        "fence" => fence(&w),
        "pscw" => pscw(&w),
        "flushes" => flushes(&w),
        "errors" => errors(&w),
        "dynamic" => dynamic(&w),
        "latency" => latency(&w, 2000),
        "shared" => shared(&w),
        "shared_hosts" => shared_hosts(&w),
        "free_finalize" => free_finalize(&w, 20),
        "last_before_finalize" => last_before_finalize(&w),
        "all" => {
            for s in [
                "passive",
                "counters",
                "accumulate",
                "fence",
                "pscw",
                "errors",
                "flushes",
                "dynamic",
            ] {
                run(u, s).map_err(|x| format!("{s}: {x}"))?;
            }
            Ok(())
        }
        other => Err(format!("unknown scenario {other:?}")),
    }
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let u = match mpi_on_portals::initialize() {
        Ok(u) => u,
        Err(x) => {
            eprintln!("initialize failed: {x}");
            std::process::exit(2);
        }
    };
    let rank = u.world().rank();
    finish(&scenario, rank, run(&u, &scenario));
}
