//! The PMI client against MPICH's real launcher: `mpiexec.hydra` starts
//! `pmi-probe` processes, which exchange values through hydra's key-value
//! space and print a verified line each.
//!
//! Skipped, with a message, where `mpiexec.hydra` is not installed (Debian:
//! `apt-get install mpich`). Hydra runs with `-launcher fork` so that no
//! ssh is involved; every run is killed if it outlasts its timeout.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PROBE: &str = env!("CARGO_BIN_EXE_pmi-probe");

/// Time a whole mpiexec run may take; a healthy one takes well under a
/// second, so this only catches hangs.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

fn hydra() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpiexec.hydra"))
        .find(|p| p.is_file())
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Run `mpiexec.hydra -launcher fork <hydra_args> -n <n> pmi-probe
/// <probe_args>` with [`RUN_TIMEOUT`]. `None` when hydra is missing.
fn run(hydra_args: &[&str], n: u32, probe_args: &[&str]) -> Option<Run> {
    let Some(mpiexec) = hydra() else {
        eprintln!("skipping: mpiexec.hydra not found in PATH (Debian package mpich)");
        return None;
    };
    let n = n.to_string();
    let mut child = Command::new(&mpiexec)
        .args(["-launcher", "fork"])
        .args(hydra_args)
        .args(["-n", &n, PROBE])
        .args(probe_args)
        // Probes must find the launcher's PMI variables, not stray ones
        // from whatever started this test.
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env_remove("PMI_RANK")
        .env_remove("PMI_SIZE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mpiexec.hydra");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "mpiexec.hydra {hydra_args:?} -n {n} pmi-probe {probe_args:?} \
                 did not finish within {RUN_TIMEOUT:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    Some(Run {
        code: status.code(),
        stdout: out_t.join().expect("stdout reader"),
        stderr: err_t.join().expect("stderr reader"),
        took,
    })
}

/// Run a job of `n` and check that each rank printed exactly one verified
/// line naming `version`.
fn verified(hydra_args: &[&str], n: u32, probe_args: &[&str], version: &str) {
    let Some(r) = run(hydra_args, n, probe_args) else {
        return;
    };
    assert_eq!(
        r.code,
        Some(0),
        "mpiexec failed\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let mut ranks: Vec<u32> = Vec::new();
    let mut kvs_names = Vec::new();
    for line in r.stdout.lines().filter(|l| l.starts_with("pmi-probe: ")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // pmi-probe: rank R/N version=V appnum=A kvs=NAME verified
        assert_eq!(fields.len(), 7, "{line}");
        assert_eq!(fields[1], "rank", "{line}");
        let (rank, size) = fields[2].split_once('/').expect("R/N");
        assert_eq!(size, n.to_string(), "{line}");
        assert_eq!(fields[3], format!("version={version}"), "{line}");
        assert_eq!(fields[4], "appnum=0", "{line}");
        kvs_names.push(fields[5].to_string());
        assert_eq!(fields[6], "verified", "{line}");
        ranks.push(rank.parse().expect("rank"));
    }
    ranks.sort_unstable();
    assert_eq!(
        ranks,
        (0..n).collect::<Vec<_>>(),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    kvs_names.dedup();
    assert_eq!(kvs_names.len(), 1, "one job, one KVS: {kvs_names:?}");
    assert!(kvs_names[0].starts_with("kvs="), "{kvs_names:?}");
}

#[test]
fn hydra_pmi1_over_fd() {
    for n in [1, 2, 4] {
        verified(&[], n, &["--pmi", "1"], "1.1");
    }
}

#[test]
fn hydra_pmi2_over_fd() {
    for n in [1, 2, 4] {
        verified(&[], n, &["--pmi", "2"], "2.0");
    }
}

#[test]
fn hydra_auto_picks_pmi2() {
    verified(&[], 2, &[], "2.0");
}

#[test]
fn hydra_pmi1_over_port() {
    for n in [1, 2, 4] {
        verified(&["-pmi-port"], n, &["--pmi", "1"], "1.1");
    }
}

#[test]
fn hydra_pmi2_over_port() {
    for n in [2, 4] {
        verified(&["-pmi-port"], n, &["--pmi", "2"], "2.0");
    }
}

/// The fence is a barrier in both versions: with rank 2 arriving 600 ms
/// late, every other rank's fence must wait for it. (Hydra's own PMI-2
/// fence does not wait; the client's extra get makes it.)
#[test]
fn hydra_fence_waits_for_a_late_rank() {
    verified(&[], 3, &["--pmi", "1", "--late", "2:600"], "1.1");
    verified(&[], 3, &["--pmi", "2", "--late", "2:600"], "2.0");
}

/// Rank 1 aborts with status 7 while the others wait in a barrier: hydra
/// must end the whole job at once (not after a timeout), with status 7.
#[test]
fn hydra_pmi1_abort_ends_the_job_with_its_code() {
    let Some(r) = run(&[], 3, &["--pmi", "1", "--abort", "1:7", "--timeout", "30"]) else {
        return;
    };
    assert_eq!(
        r.code,
        Some(7),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    assert!(!r.stdout.contains("verified"), "{}", r.stdout);
    assert!(r.took < Duration::from_secs(20), "abort took {:?}", r.took);
}

/// Hydra 4.0 does not know PMI-2's abort and tears the job down on it;
/// later versions abort with the code. Either way the job ends at once and
/// fails.
#[test]
fn hydra_pmi2_abort_ends_the_job() {
    let Some(r) = run(&[], 3, &["--pmi", "2", "--abort", "1:7", "--timeout", "30"]) else {
        return;
    };
    assert!(
        matches!(r.code, Some(c) if c != 0),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    assert!(!r.stdout.contains("verified"), "{}", r.stdout);
    assert!(r.took < Duration::from_secs(20), "abort took {:?}", r.took);
}

/// Outside a launcher the probe finds no PMI and says so.
#[test]
fn probe_without_a_launcher() {
    let out = Command::new(PROBE)
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .stdin(Stdio::null())
        .output()
        .expect("run pmi-probe");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not started by a PMI launcher"));
}
