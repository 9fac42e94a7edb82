//! `pmi-probe`: check that PMI works under a launcher.
//!
//! ```text
//! mpiexec.hydra -n 4 pmi-probe [--pmi auto|1|2] [--timeout SECS] [--late RANK:MS] [--abort RANK:CODE]
//! ```
//!
//! Every process connects through [`portals_runtime::pmi`], publishes two
//! values (one plain, one hex-encoded with spaces in it), fences, reads and
//! checks every other process's values, checks that an unpublished key is
//! reported missing, passes a barrier, and finalizes; then it prints
//!
//! ```text
//! pmi-probe: rank R/N version=V appnum=A kvs=NAME verified
//! ```
//!
//! With `--late RANK:MS`, process RANK sleeps MS milliseconds before its
//! fence, and every other process checks that its own fence waited for it
//! (at least MS/2), which shows the fence is a barrier.
//!
//! With `--abort RANK:CODE`, process RANK aborts the job with CODE after
//! the fence instead, while the others wait in a barrier for the launcher
//! to end them. Exit status: 0 verified, 1 PMI failure or mismatch, 2 usage
//! or no PMI launcher.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use portals_runtime::pmi::{
    decode_value, encode_value, PmiClient, PmiError, PmiOptions, VersionPreference,
};

struct Args {
    opts: PmiOptions,
    late: Option<(u32, u64)>,
    abort: Option<(u32, i32)>,
}

fn rank_and<T: std::str::FromStr>(flag: &str, v: &str) -> Result<(u32, T), String> {
    v.split_once(':')
        .and_then(|(r, x)| Some((r.parse().ok()?, x.parse().ok()?)))
        .ok_or_else(|| format!("{flag} {v}: expected RANK:NUMBER"))
}

fn usage(why: &str) -> ExitCode {
    eprintln!("pmi-probe: {why}");
    eprintln!(
        "usage: pmi-probe [--pmi auto|1|2] [--timeout SECS] [--late RANK:MS] [--abort RANK:CODE]"
    );
    ExitCode::from(2)
}

fn parse_args() -> Result<Args, String> {
    let mut opts = PmiOptions::default();
    let mut abort = None;
    let mut late = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--pmi" => {
                opts.version = match value()?.as_str() {
                    "auto" => VersionPreference::Auto,
                    "1" => VersionPreference::V1,
                    "2" => VersionPreference::V2,
                    v => return Err(format!("--pmi {v}: expected auto, 1 or 2")),
                }
            }
            "--timeout" => {
                let v = value()?;
                let secs: u64 = v.parse().map_err(|_| format!("--timeout {v}: seconds"))?;
                opts.timeout = Duration::from_secs(secs.max(1));
            }
            "--abort" => abort = Some(rank_and("--abort", &value()?)?),
            "--late" => late = Some(rank_and("--late", &value()?)?),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(Args { opts, late, abort })
}

fn plain(rank: u32) -> String {
    format!("127.0.0.1:{}", 40000 + rank)
}

fn message(rank: u32, size: u32) -> String {
    format!("rank {rank} of {size}; says hello = ok")
}

enum Outcome {
    Verified,
    Aborted(i32),
    NoLauncher,
}

fn probe(args: &Args) -> Result<Outcome, String> {
    let mut pmi = match PmiClient::from_env_with(&args.opts) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(Outcome::NoLauncher),
        Err(e) => return Err(format!("connect: {e}")),
    };
    let (me, size) = (pmi.rank(), pmi.size());
    let fail = |what: &str, e: PmiError| format!("rank {me}: {what}: {e}");

    pmi.put(&format!("plain-{me}"), &plain(me))
        .map_err(|e| fail("put", e))?;
    pmi.put(
        &format!("hex-{me}"),
        &encode_value(message(me, size).as_bytes()),
    )
    .map_err(|e| fail("put", e))?;
    if let Some((rank, ms)) = args.late {
        if rank == me {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
    let t0 = Instant::now();
    pmi.fence().map_err(|e| fail("fence", e))?;
    if let Some((rank, ms)) = args.late {
        let waited = t0.elapsed();
        if rank != me && waited < Duration::from_millis(ms / 2) {
            return Err(format!(
                "rank {me}: fence returned after {waited:?}, before late rank {rank} arrived"
            ));
        }
    }

    if let Some((rank, code)) = args.abort {
        if rank == me {
            pmi.abort(code, &format!("pmi-probe rank {me} aborts as asked"))
                .map_err(|e| fail("abort", e))?;
            return Ok(Outcome::Aborted(code));
        }
        // Wait for the launcher to end the job; a barrier that completes
        // means the abort did not work.
        pmi.barrier().map_err(|e| fail("barrier", e))?;
        return Err(format!(
            "rank {me}: barrier completed although rank {rank} aborted"
        ));
    }

    for r in 0..size {
        let got = pmi
            .get(&format!("plain-{r}"))
            .map_err(|e| fail("get plain", e))?;
        if got != plain(r) {
            return Err(format!(
                "rank {me}: plain-{r} is {got:?}, expected {:?}",
                plain(r)
            ));
        }
        let hex = pmi
            .get(&format!("hex-{r}"))
            .map_err(|e| fail("get hex", e))?;
        let bytes = decode_value(&hex).map_err(|e| fail("decode", e))?;
        if bytes != message(r, size).as_bytes() {
            return Err(format!(
                "rank {me}: hex-{r} decodes to {:?}",
                String::from_utf8_lossy(&bytes)
            ));
        }
    }
    match pmi.get("never-put") {
        Err(PmiError::KeyNotFound { .. }) => {}
        other => return Err(format!("rank {me}: get of an unput key gave {other:?}")),
    }
    pmi.barrier().map_err(|e| fail("barrier", e))?;
    let line = format!(
        "pmi-probe: rank {me}/{size} version={} appnum={} kvs={} verified",
        pmi.version(),
        pmi.appnum(),
        pmi.kvs_name()
    );
    pmi.finalize().map_err(|e| fail("finalize", e))?;
    println!("{line}");
    Ok(Outcome::Verified)
}

fn main() -> ExitCode {
    portals_runtime::init_logging();
    let args = match parse_args() {
        Ok(a) => a,
        Err(why) => return usage(&why),
    };
    match probe(&args) {
        Ok(Outcome::Verified) => ExitCode::SUCCESS,
        Ok(Outcome::NoLauncher) => usage("no PMI_FD or PMI_PORT: not started by a PMI launcher"),
        Ok(Outcome::Aborted(code)) => {
            // The launcher ends the job; exit with the code in case it is
            // slower than us.
            std::process::exit(code)
        }
        Err(why) => {
            eprintln!("pmi-probe: {why}");
            ExitCode::from(1)
        }
    }
}
