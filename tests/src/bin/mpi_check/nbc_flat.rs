//! The flat non-blocking collectives (gather, scatter, all-gather,
//! all-to-all and their varcount forms, reduce, scan, exclusive scan,
//! reduce-scatter with equal blocks or not): values byte for byte with
//! a dozen instances of mixed kinds outstanding at once; bad arguments
//! refused at the start;
//! and (`nbcflatsleep`) an all-gather the others finish while its first
//! member makes no MPI call.

use std::path::PathBuf;

use mpi_on_portals::{Partition, PartitionMut, UserOperation};

use super::*;

/// Element j of member `r`'s contribution to member `d` in round `i`.
fn val(r: usize, d: usize, j: usize, i: usize) -> u64 {
    ((r as u64) << 48) ^ ((d as u64) << 32) ^ ((j as u64) << 8) ^ i as u64 ^ 0x5a5a_0000
}

/// Block length of sender `s` to receiver `d` in the varcount forms
/// (some empty).
fn vlen(s: usize, d: usize, i: usize) -> usize {
    (s + 2 * d + i) % 4
}

/// Displacements with a gap of one element before each block.
fn gapped(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut at = 0;
    let displs = counts
        .iter()
        .map(|&c| {
            at += 1;
            let d = at;
            at += c;
            d
        })
        .collect();
    (displs, at + 1)
}

/// What gather, scatter and the all-forms expect, computed from `val`.
struct Want {
    gather: Vec<u64>,
    allgather: Vec<u64>,
    alltoall: Vec<u64>,
    scatter: Vec<u64>,
}

/// One round: every flat collective started once (roots rotate with the
/// round), all outstanding together, then waited in reverse order.
fn round(c: &SimpleCommunicator, i: usize) -> R<()> {
    let (n, me) = (c.size() as usize, c.rank() as usize);
    let root = i % n;
    let rp = c.process_at_rank(root as Rank);
    let blk = 1 + i % 3;
    // Past the atomic limit (512 B): the reductions go in chunks.
    let long = 70 + i;
    let mine: Vec<u64> = (0..blk).map(|j| val(me, 0, j, i)).collect();
    let to_all: Vec<u64> = (0..n * blk).map(|x| val(me, x / blk, x % blk, i)).collect();
    let want = Want {
        gather: (0..n * blk).map(|x| val(x / blk, 0, x % blk, i)).collect(),
        allgather: (0..n * blk).map(|x| val(x / blk, 0, x % blk, i)).collect(),
        alltoall: (0..n * blk).map(|x| val(x / blk, me, x % blk, i)).collect(),
        scatter: (0..blk).map(|j| val(root, me, j, i)).collect(),
    };
    // Varcount: sender s gives receiver d `vlen(s, d)` elements.
    let vmine: Vec<u64> = (0..vlen(me, 0, i)).map(|j| val(me, 0, j, i)).collect();
    let vcounts_in: Vec<usize> = (0..n).map(|s| vlen(s, 0, i)).collect();
    let (vdispls_in, vlen_in) = gapped(&vcounts_in);
    let send_counts: Vec<usize> = (0..n).map(|d| vlen(me, d, i)).collect();
    let (send_displs, send_len) = gapped(&send_counts);
    let mut vsend = vec![0u64; send_len];
    for d in 0..n {
        for j in 0..send_counts[d] {
            vsend[send_displs[d] + j] = val(me, d, j, i);
        }
    }
    let recv_counts: Vec<usize> = (0..n).map(|s| vlen(s, me, i)).collect();
    let (recv_displs, recv_len) = gapped(&recv_counts);
    let sentinel = u64::MAX;

    let mut gathered = vec![0u64; n * blk];
    let mut allg = vec![0u64; n * blk];
    let mut a2a = vec![0u64; n * blk];
    let mut scat = vec![0u64; blk];
    let mut vgath = vec![sentinel; vlen_in];
    let mut vallg = vec![sentinel; vlen_in];
    let mut va2a = vec![sentinel; recv_len];
    let mut vscat = vec![0u64; vlen(root, me, i)];
    let nums: Vec<u64> = (0..long as u64)
        .map(|j| (me as u64 + 1) * (j + 1))
        .collect();
    let mut red = vec![0u64; long];
    let small: Vec<i32> = vec![me as i32 * 3 - 4, -(me as i32), 7];
    let mut redmax = [0i32; 3];
    let mut scanned = vec![0u64; long];
    let mut exscanned = vec![9u64; long];
    let fl: Vec<f64> = vec![me as f64 + 0.5; 5];
    let mut fscan = [0f64; 5];
    let rs_send: Vec<u64> = (0..n * blk).map(|x| (me * 100 + x) as u64).collect();
    let mut rs = vec![0u64; blk];
    // Varcount reduce-scatter: some blocks empty, some past the atomic
    // limit.
    let rsv_counts: Vec<usize> = (0..n).map(|d| vlen(d, 0, i) * 30).collect();
    let rsv_send: Vec<u64> = (0..rsv_counts.iter().sum::<usize>())
        .map(|x| (me * 1000 + x) as u64)
        .collect();
    let mut rsv = vec![0u64; rsv_counts[me]];
    let user_in = [me as u64, 1];
    let mut user_red = [0u64; 2];
    let user = UserOperation::commutative(|a: &[u64], b: &mut [u64]| {
        for (o, x) in b.iter_mut().zip(a) {
            *o = o.wrapping_add(*x);
        }
    });
    let vsend_part =
        Partition::new(&vsend[..], send_counts.clone(), send_displs.clone()).map_err(e)?;
    let mut vg =
        PartitionMut::new(&mut vgath[..], vcounts_in.clone(), vdispls_in.clone()).map_err(e)?;
    let mut va =
        PartitionMut::new(&mut vallg[..], vcounts_in.clone(), vdispls_in.clone()).map_err(e)?;
    let mut vt =
        PartitionMut::new(&mut va2a[..], recv_counts.clone(), recv_displs.clone()).map_err(e)?;
    scope(|sc| -> R<()> {
        let mut reqs = Vec::new();
        reqs.push(
            c.immediate_all_gather_into(sc, &mine[..], &mut allg[..])
                .map_err(e)?,
        );
        reqs.push(
            if me == root {
                rp.immediate_gather_into_root(sc, &mine[..], &mut gathered[..])
            } else {
                rp.immediate_gather_into(sc, &mine[..])
            }
            .map_err(e)?,
        );
        reqs.push(
            c.immediate_all_to_all_into(sc, &to_all[..], &mut a2a[..])
                .map_err(e)?,
        );
        reqs.push(
            if me == root {
                rp.immediate_scatter_into_root(sc, &to_all[..], &mut scat[..])
            } else {
                rp.immediate_scatter_into(sc, &mut scat[..])
            }
            .map_err(e)?,
        );
        reqs.push(
            if me == root {
                rp.immediate_reduce_into_root(sc, &nums[..], &mut red[..], SystemOperation::sum())
            } else {
                rp.immediate_reduce_into(sc, &nums[..], SystemOperation::sum())
            }
            .map_err(e)?,
        );
        reqs.push(
            c.immediate_scan_into(sc, &nums[..], &mut scanned[..], SystemOperation::sum())
                .map_err(e)?,
        );
        reqs.push(
            if me == root {
                rp.immediate_reduce_into_root(
                    sc,
                    &small[..],
                    &mut redmax[..],
                    SystemOperation::max(),
                )
            } else {
                rp.immediate_reduce_into(sc, &small[..], SystemOperation::max())
            }
            .map_err(e)?,
        );
        reqs.push(
            c.immediate_exclusive_scan_into(
                sc,
                &nums[..],
                &mut exscanned[..],
                SystemOperation::sum(),
            )
            .map_err(e)?,
        );
        reqs.push(
            c.immediate_scan_into(sc, &fl[..], &mut fscan[..], SystemOperation::sum())
                .map_err(e)?,
        );
        reqs.push(
            c.immediate_reduce_scatter_block_into(
                sc,
                &rs_send[..],
                &mut rs[..],
                SystemOperation::sum(),
            )
            .map_err(e)?,
        );
        reqs.push(
            c.immediate_reduce_scatter_into(
                sc,
                &rsv_send[..],
                &mut rsv[..],
                &rsv_counts,
                SystemOperation::sum(),
            )
            .map_err(e)?,
        );
        // A user-defined operation: the blocking fallback, in order with
        // the triggered instances around it.
        reqs.push(
            c.immediate_all_reduce_into(sc, &user_in, &mut user_red, &user)
                .map_err(e)?,
        );
        reqs.push(
            if me == root {
                rp.immediate_gather_varcount_into_root(sc, &vmine[..], &mut vg)
            } else {
                rp.immediate_gather_varcount_into(sc, &vmine[..])
            }
            .map_err(e)?,
        );
        reqs.push(
            c.immediate_all_gather_varcount_into(sc, &vmine[..], &mut va)
                .map_err(e)?,
        );
        reqs.push(
            c.immediate_all_to_all_varcount_into(sc, &vsend_part, &mut vt)
                .map_err(e)?,
        );
        reqs.push(
            if me == root {
                rp.immediate_scatter_varcount_into_root(sc, &vsend_part, &mut vscat[..])
            } else {
                rp.immediate_scatter_varcount_into(sc, &mut vscat[..])
            }
            .map_err(e)?,
        );
        for r in reqs.into_iter().rev() {
            r.wait().map_err(e)?;
        }
        Ok(())
    })?;
    drop((vg, va, vt));
    let at = |what: &str| format!("round {i}, {n} ranks, rank {me}: {what}");
    if me == root {
        ensure(gathered == want.gather, || at("gather"))?;
        ensure(
            red.iter()
                .enumerate()
                .all(|(j, &x)| x == (j as u64 + 1) * (n * (n + 1) / 2) as u64),
            || at("reduce sum"),
        )?;
        let mx = |f: &dyn Fn(i32) -> i32| (0..n as i32).map(f).max().unwrap_or(0);
        ensure(redmax == [mx(&|r| r * 3 - 4), mx(&|r| -r), 7], || {
            at("reduce max")
        })?;
        let mut vg_want = vec![sentinel; vlen_in];
        for s in 0..n {
            for j in 0..vcounts_in[s] {
                vg_want[vdispls_in[s] + j] = val(s, 0, j, i);
            }
        }
        ensure(vgath == vg_want, || at("gather varcount"))?;
    }
    ensure(allg == want.allgather, || at("all-gather"))?;
    ensure(a2a == want.alltoall, || at("all-to-all"))?;
    ensure(scat == want.scatter, || at("scatter"))?;
    let tri = |m: usize| (m * (m + 1) / 2) as u64;
    ensure(
        scanned
            .iter()
            .enumerate()
            .all(|(j, &x)| x == (j as u64 + 1) * tri(me + 1)),
        || at("scan"),
    )?;
    if me == 0 {
        ensure(exscanned.iter().all(|&x| x == 9), || {
            at("exscan left rank 0's buffer")
        })?;
    } else {
        ensure(
            exscanned
                .iter()
                .enumerate()
                .all(|(j, &x)| x == (j as u64 + 1) * tri(me)),
            || at("exscan"),
        )?;
    }
    let fwant: f64 = (0..=me).map(|r| r as f64 + 0.5).sum();
    ensure(fscan.iter().all(|&x| x == fwant), || at("float scan"))?;
    let rs_want: Vec<u64> = (0..blk)
        .map(|j| (0..n).map(|s| (s * 100 + me * blk + j) as u64).sum())
        .collect();
    ensure(rs == rs_want, || at("reduce-scatter-block"))?;
    let before: usize = rsv_counts[..me].iter().sum();
    let rsv_want: Vec<u64> = (0..rsv_counts[me])
        .map(|j| (0..n).map(|s| (s * 1000 + before + j) as u64).sum())
        .collect();
    ensure(rsv == rsv_want, || at("reduce-scatter varcount"))?;
    ensure(user_red == [tri(n - 1), n as u64], || at("user all-reduce"))?;
    let mut va_want = vec![sentinel; vlen_in];
    for s in 0..n {
        for j in 0..vcounts_in[s] {
            va_want[vdispls_in[s] + j] = val(s, 0, j, i);
        }
    }
    ensure(vallg == va_want, || at("all-gather varcount"))?;
    let mut vt_want = vec![sentinel; recv_len];
    for s in 0..n {
        for j in 0..recv_counts[s] {
            vt_want[recv_displs[s] + j] = val(s, me, j, i);
        }
    }
    ensure(va2a == vt_want, || at("all-to-all varcount"))?;
    let vs_want: Vec<u64> = (0..vlen(root, me, i))
        .map(|j| val(root, me, j, i))
        .collect();
    ensure(vscat == vs_want, || at("scatter varcount"))?;
    Ok(())
}

/// Bad arguments: a typed error at the start, and the next collective
/// still lines up on every member.
fn refusals(c: &SimpleCommunicator) -> R<()> {
    let (n, me) = (c.size(), c.rank());
    let two = [1u64, 2];
    let mut small = [0u64; 1];
    let mut small2 = [0u64; 1];
    let blocks = n as usize + 1;
    let mut buf = vec![0u64; blocks];
    let mut part = PartitionMut::new(
        &mut buf[..],
        vec![1; blocks],
        (0..blocks).collect::<Vec<_>>(),
    )
    .map_err(e)?;
    scope(|sc| -> R<()> {
        let bad = c.process_at_rank(n).immediate_gather_into(sc, &two[..]);
        ensure(matches!(bad, Err(MpiError::InvalidRank { .. })), || {
            format!("root out of range: {bad:?}")
        })?;
        let bad = c.immediate_all_gather_into(sc, &two[..], &mut small[..]);
        ensure(matches!(bad, Err(MpiError::InvalidBuffer(_))), || {
            format!("short all-gather buffer: {bad:?}")
        })?;
        let bad = c.immediate_all_gather_varcount_into(sc, &two[..1], &mut part);
        ensure(matches!(bad, Err(MpiError::InvalidBuffer(_))), || {
            format!("partition of n+1 blocks: {bad:?}")
        })?;
        let bad = c
            .process_at_rank(me)
            .immediate_scatter_into(sc, &mut small2[..]);
        ensure(matches!(bad, Err(MpiError::InvalidBuffer(_))), || {
            format!("the root's non-root call: {bad:?}")
        })?;
        Ok(())
    })?;
    let mut got = vec![0u64; n as usize];
    let one = [me as u64];
    scope(|sc| -> R<()> {
        c.immediate_all_gather_into(sc, &one[..], &mut got[..])
            .map_err(e)?
            .wait()
            .map_err(e)?;
        Ok(())
    })?;
    ensure(got == (0..n as u64).collect::<Vec<_>>(), || {
        format!("all-gather after refusals: {got:?}")
    })
}

/// Counts that disagree: the last member sends two elements where the
/// root of a varcount gather posted room for one. The root's wait fails
/// with `CollectiveTruncated` (the element that fits is delivered), the
/// senders' succeed, and the next collective still lines up.
fn mismatch(c: &SimpleCommunicator) -> R<()> {
    let (n, me) = (c.size() as usize, c.rank() as usize);
    let mine: Vec<u64> = if me == n - 1 {
        vec![10 * me as u64 + 1, 10 * me as u64 + 2]
    } else {
        vec![10 * me as u64 + 1]
    };
    let root = c.process_at_rank(0);
    let mut buf = vec![0u64; n];
    let mut part =
        PartitionMut::new(&mut buf[..], vec![1; n], (0..n).collect::<Vec<_>>()).map_err(e)?;
    let got = scope(|sc| -> R<Result<Status, MpiError>> {
        Ok(if me == 0 {
            root.immediate_gather_varcount_into_root(sc, &mine[..], &mut part)
                .map_err(e)?
                .wait()
        } else {
            root.immediate_gather_varcount_into(sc, &mine[..])
                .map_err(e)?
                .wait()
        })
    })?;
    drop(part);
    if me == 0 {
        ensure(matches!(got, Err(MpiError::CollectiveTruncated)), || {
            format!("a block longer than its room: {got:?}")
        })?;
        let want: Vec<u64> = (0..n as u64).map(|r| 10 * r + 1).collect();
        ensure(buf == want, || format!("what fits is delivered: {buf:?}"))?;
    } else {
        ensure(got.is_ok(), || format!("a sender of the mismatch: {got:?}"))?;
    }
    let mut all = vec![0u64; n];
    let one = [me as u64];
    scope(|sc| -> R<()> {
        c.immediate_all_gather_into(sc, &one[..], &mut all[..])
            .map_err(e)?
            .wait()
            .map_err(e)?;
        Ok(())
    })?;
    ensure(all == (0..n as u64).collect::<Vec<_>>(), || {
        format!("all-gather after the mismatch: {all:?}")
    })
}

/// Many instances of the same kinds in flight: `BURST` all-to-alls and
/// gathers (roots rotating) started back to back, waited in an order
/// that mixes them; instance k+1's blocks must not land in k's buffers.
fn burst(c: &SimpleCommunicator) -> R<()> {
    const BURST: usize = 8;
    let (n, me) = (c.size() as usize, c.rank() as usize);
    let sends: Vec<Vec<u64>> = (0..BURST)
        .map(|i| (0..n * 2).map(|x| val(me, x / 2, x % 2, 100 + i)).collect())
        .collect();
    let mut a2a = vec![vec![0u64; n * 2]; BURST];
    let mut gath = vec![vec![0u64; n * 2]; BURST];
    scope(|sc| -> R<()> {
        let mut reqs = Vec::new();
        for (i, (s, (a, g))) in sends.iter().zip(a2a.iter_mut().zip(&mut gath)).enumerate() {
            reqs.push(
                c.immediate_all_to_all_into(sc, &s[..], &mut a[..])
                    .map_err(e)?,
            );
            let rp = c.process_at_rank((i % n) as Rank);
            let mine = &s[me * 2..me * 2 + 2];
            reqs.push(
                if i % n == me {
                    rp.immediate_gather_into_root(sc, mine, &mut g[..])
                } else {
                    rp.immediate_gather_into(sc, mine)
                }
                .map_err(e)?,
            );
        }
        // Odd ones first, then the even ones backwards.
        let (odd, even): (Vec<_>, Vec<_>) =
            reqs.into_iter().enumerate().partition(|(k, _)| k % 2 == 1);
        for (_, r) in odd.into_iter().chain(even.into_iter().rev()) {
            r.wait().map_err(e)?;
        }
        Ok(())
    })?;
    for i in 0..BURST {
        let want: Vec<u64> = (0..n * 2).map(|x| val(x / 2, me, x % 2, 100 + i)).collect();
        ensure(a2a[i] == want, || format!("burst all-to-all {i}"))?;
        if i % n == me {
            let want: Vec<u64> = (0..n * 2)
                .map(|x| val(x / 2, x / 2, x % 2, 100 + i))
                .collect();
            ensure(gath[i] == want, || format!("burst gather {i}"))?;
        }
    }
    Ok(())
}

/// `nbcflat [rounds]`: every flat collective, all outstanding together,
/// on the world and on a duplicate (whose instances interleave with the
/// world's), then the refusals.
pub(crate) fn nbcflat(u: &Universe, rounds: usize) -> R<()> {
    let w = u.world();
    let d = w.duplicate().map_err(e)?;
    for i in 0..rounds {
        round(&w, i)?;
        round(&d, i + 1)?;
    }
    burst(&w)?;
    burst(&d)?;
    refusals(&w)?;
    mismatch(&w)?;
    println!("nbcflat: {rounds} rounds of every flat collective correct");
    Ok(())
}

/// `nbcflatsleep`, thread mode: rank 0 starts an all-gather, then computes
/// with no MPI call until every other rank has *finished* its all-gather
/// (each says so by creating a file; rank 0 looks for them between slices
/// of computation). Only the progress thread can send rank 0's block, so
/// without it the others never finish and rank 0 gives up after a minute.
pub(crate) fn nbcflatsleep(u: &Universe) -> R<()> {
    let w = u.world();
    let (n, me) = (w.size() as usize, w.rank() as usize);
    // Rank 0 names a fresh directory for the flags and tells everyone.
    let mut stamp = [0u64; 2];
    if me == 0 {
        let t = SystemTimeNs::now()?;
        stamp = [std::process::id() as u64, t];
    }
    w.process_at_rank(0)
        .broadcast_into(&mut stamp[..])
        .map_err(e)?;
    let dir: PathBuf = std::env::temp_dir().join(format!("nbcflat-{}-{}", stamp[0], stamp[1]));
    if me == 0 {
        std::fs::create_dir_all(&dir).map_err(|x| x.to_string())?;
    }
    w.barrier().map_err(e)?;
    let mine = [me as u64 * 11 + 1, 5];
    let mut all = vec![0u64; 2 * n];
    let r = scope(|sc| -> R<()> {
        let req = w
            .immediate_all_gather_into(sc, &mine[..], &mut all[..])
            .map_err(e)?;
        if me != 0 {
            req.wait().map_err(e)?;
            std::fs::write(dir.join(format!("done-{me}")), b"").map_err(|x| x.to_string())?;
            return Ok(());
        }
        // Compute, no MPI call, until every other rank's flag is there.
        let mut x = 1u64;
        let give_up = Instant::now() + Duration::from_secs(60);
        while Instant::now() < give_up {
            for _ in 0..20_000 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            }
            // No sleep: this thread only computes (and looks at files).
            if (1..n).all(|r| dir.join(format!("done-{r}")).exists()) {
                std::hint::black_box(x);
                req.wait().map_err(e)?;
                return Ok(());
            }
        }
        Err("the others did not finish their all-gather while rank 0 computed".into())
    });
    w.barrier().map_err(e)?;
    if me == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
    r?;
    let want: Vec<u64> = (0..n as u64).flat_map(|r| [r * 11 + 1, 5]).collect();
    ensure(all == want, || format!("all-gather values wrong: {all:?}"))?;
    println!("nbcflatsleep: the others finished while rank 0 made no MPI call");
    Ok(())
}

struct SystemTimeNs;

impl SystemTimeNs {
    fn now() -> R<u64> {
        std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .map_err(|x| x.to_string())
    }
}
