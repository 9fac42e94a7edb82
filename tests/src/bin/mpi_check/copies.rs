//! Blocking and standard sends from a library copy: their transport
//! passes, and what happens to a copy once its acknowledgment arrived.

use super::*;

/// A loop of blocking short sends serves the peer's gets. Rank 0 sends
/// three 4 KB messages and a control message to rank 1 (whose one 8 KB
/// buffer cannot hold them all: the control message at least finds no room
/// and must be pulled from rank 0's read portal), then only sends: a 1-byte
/// message every 10 ms, with blocking standard sends, until rank 1 has
/// received all four and said so in a file beside the job. Rank 0 makes no
/// receive, wait or test in that loop, so in polling mode only the sends'
/// own transport passes answer rank 1's gets: with none, the loop would
/// never end (a send past the window is queued, not waited for), and it
/// fails after 20 s.
pub(crate) fn sendloop(u: &Universe) -> R<()> {
    const LOOP_LIMIT: Duration = Duration::from_secs(20);
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let marker = marker("sendloop");
    if me == 0 {
        let _ = std::fs::remove_file(&marker);
        w.barrier().map_err(e)?;
        for i in 0..3 {
            p.send_with_tag(&numbered(4096, i)[..], 1).map_err(e)?;
        }
        p.send_with_tag(&pattern(64, 9)[..], CTRL).map_err(e)?;
        let start = Instant::now();
        let mut fillers = 0u32;
        while !marker.exists() {
            ensure(start.elapsed() < LOOP_LIMIT, || {
                format!("rank 1 did not receive its messages in {LOOP_LIMIT:?}")
            })?;
            p.send_with_tag(&[fillers as u8][..], 2).map_err(e)?;
            fillers += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&marker);
        println!("sendloop: {fillers} sends in the loop");
        p.send_with_tag(&fillers, 3).map_err(e)?;
    } else {
        w.barrier().map_err(e)?;
        let mut ctrl = [0u8; 64];
        p.receive_into_with_tag(&mut ctrl[..], CTRL).map_err(e)?;
        let mut big = vec![0u8; 4096];
        for i in 0..3 {
            p.receive_into_with_tag(&mut big[..], 1).map_err(e)?;
            ensure(big == numbered(4096, i), || format!("message {i}: wrong"))?;
        }
        ensure(ctrl[..] == pattern(64, 9)[..], || {
            "control message: wrong".into()
        })?;
        let st = u.stats();
        ensure(st.unexpected_pulled > 0, || {
            format!("no message had to be pulled: {st:?}")
        })?;
        std::fs::write(&marker, b"received").map_err(|x| x.to_string())?;
        let (fillers, _) = p.receive_with_tag::<u32>(3).map_err(e)?;
        let mut one = [0u8; 1];
        for i in 0..fillers {
            p.receive_into_with_tag(&mut one[..], 2).map_err(e)?;
            ensure(one[0] == i as u8, || format!("loop message {i}: wrong"))?;
        }
    }
    w.barrier().map_err(e)
}

/// The marker file two ranks of one job share (both are children of the
/// same launcher).
fn marker(what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "mpi_check-{what}-{}",
        std::os::unix::process::parent_id()
    ))
}

/// Wait, making no MPI call, until `path` exists (at most 20 s).
fn await_marker(path: &std::path::Path) -> R<()> {
    let start = Instant::now();
    while !path.exists() {
        ensure(start.elapsed() < Duration::from_secs(20), || {
            format!("{} did not appear in 20 s", path.display())
        })?;
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Acknowledged library copies do not pile up. Rank 0 sends 200 messages of
/// 1 KB to rank 1 with blocking standard sends (each from a library copy),
/// then only tests a receive of rank 1's answer until it completes: it
/// neither sends nor waits meanwhile. Rank 1 makes no MPI call until rank 0
/// has sent all 200 (in polling mode its transport then reads nothing), and
/// then receives them and answers. The acknowledgments reach rank 0 during
/// its tests, before the answer; a copy whose acknowledgment arrived is
/// finished only when this process next sends or has to wait, but at most
/// 64 are held, so once the answer is in, rank 0 holds at most 64 KB of
/// copies (`eager_copy_bytes`; without the bound, 95 KB in polling mode).
/// Its next blocking send finishes them: afterwards it holds only that
/// send's own copy.
pub(crate) fn copies(u: &Universe) -> R<()> {
    const N: usize = 200;
    const LEN: usize = 1024;
    let w = u.world();
    let Some((me, p)) = pair(&w) else {
        return Ok(());
    };
    let sent = marker("copies");
    if me == 0 {
        let _ = std::fs::remove_file(&sent);
        w.barrier().map_err(e)?;
        for i in 0..N {
            p.send_with_tag(&numbered(LEN, i)[..], 4).map_err(e)?;
        }
        std::fs::write(&sent, b"sent").map_err(|x| x.to_string())?;
        let mut answer = [0u8; 8];
        scope(|sc| -> R<()> {
            let mut req = p
                .immediate_receive_into_with_tag(sc, &mut answer[..], 5)
                .map_err(e)?;
            let start = Instant::now();
            loop {
                match req.test().map_err(e)? {
                    Ok(_) => break,
                    Err(r) => req = r,
                }
                ensure(start.elapsed() < Duration::from_secs(20), || {
                    "no answer in 20 s".into()
                })?;
            }
            Ok(())
        })?;
        let held = u.stats().eager_copy_bytes;
        println!("copies: {held} bytes of copies held after the answer");
        ensure(held <= (64 * LEN) as u64, || {
            format!("{held} bytes of acknowledged copies held (at most 64 KB)")
        })?;
        p.send_with_tag(&[1u8][..], 6).map_err(e)?;
        let held = u.stats().eager_copy_bytes;
        ensure(held <= 1, || {
            format!("{held} bytes of copies held after the next send (its own: 1)")
        })?;
        let _ = std::fs::remove_file(&sent);
    } else {
        w.barrier().map_err(e)?;
        await_marker(&sent)?;
        let mut buf = vec![0u8; LEN];
        for i in 0..N {
            p.receive_into_with_tag(&mut buf[..], 4).map_err(e)?;
            ensure(buf == numbered(LEN, i), || format!("message {i}: wrong"))?;
        }
        p.send_with_tag(&pattern(8, 3)[..], 5).map_err(e)?;
        let mut one = [0u8; 1];
        p.receive_into_with_tag(&mut one[..], 6).map_err(e)?;
    }
    w.barrier().map_err(e)
}
