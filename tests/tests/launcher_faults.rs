//! The launcher under faults: `ptlrun` terminated or killed never leaves
//! ranks behind; the rank that caused a failure is the one blamed, not a
//! survivor that failed because of it; one rank's abort, panic or error
//! ends the whole job while the others block; and a rank whose rendezvous
//! is unreachable says what it waits for. Every wait is bounded: a
//! regression fails, it does not hang.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nal_tcp::{ConnectMode, ProgressMode};
use portals_runtime::launch::{launch, LaunchOutcome, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};

const PTLRUN: &str = env!("CARGO_BIN_EXE_tests-ptlrun");
const RING: &str = env!("CARGO_BIN_EXE_example-ring");
const HELLO: &str = env!("CARGO_BIN_EXE_example-hello");
const FAULT: &str = env!("CARGO_BIN_EXE_fault_check");

/// Run `fault_check scenario` on 4 ranks over TCP (connected eagerly, so
/// that every rank notices a peer's failure), capturing the output; the
/// job is killed (status 124) after `limit`.
fn fault_job(
    scenario: &str,
    progress: ProgressMode,
    env: &[(&str, &str)],
    limit: u64,
) -> LaunchOutcome {
    fault_job_with(&[scenario], progress, env, Duration::from_secs(60), limit)
}

/// [`fault_job`] with arguments and the bootstrap timeout (which also
/// bounds every fence of the rendezvous server unless a rank asks for
/// another).
fn fault_job_with(
    args: &[&str],
    progress: ProgressMode,
    env: &[(&str, &str)],
    bootstrap: Duration,
    limit: u64,
) -> LaunchOutcome {
    let mut spec = LaunchSpec::new(4, FAULT);
    spec.args = args.iter().map(Into::into).collect();
    spec.options = JobOptions {
        nal: NalKind::Tcp,
        progress,
        connect: ConnectMode::Eager,
        timeout: bootstrap,
        ..JobOptions::default()
    };
    spec.output = Output::Capture;
    spec.timeout = Some(Duration::from_secs(limit));
    spec.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    launch(&spec).expect("launch")
}

fn lines(out: &LaunchOutcome) -> String {
    out.transcript()
}

/// The children of `pid` (from /proc: every task's `children` file).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// True while `pid` is a live (not zombie) process running `program`.
fn runs(pid: u32, program: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    if state == Some('Z') {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).starts_with(program))
        .unwrap_or(false)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Wait for `child` to exit, at most `limit`; kill it if it does not.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Start a 4-rank ring that runs for a long time under `ptlrun`, and
/// return the launcher and its ranks once all four run the ring.
// The launcher is handed to the caller, which waits for it.
#[allow(clippy::zombie_processes)]
fn long_ring() -> (Child, Vec<u32>) {
    let mut ptlrun = Command::new(PTLRUN)
        .args(["-n", "4", "--timeout", "300", RING, "1000000000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ptlrun");
    let t = Instant::now();
    loop {
        let ranks: Vec<u32> = children(ptlrun.id())
            .into_iter()
            .filter(|&p| runs(p, RING))
            .collect();
        if ranks.len() == 4 {
            return (ptlrun, ranks);
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = ptlrun.kill();
            let _ = ptlrun.wait();
            for p in ranks {
                signal(p, libc::SIGKILL);
            }
            panic!("the four ranks did not start within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The ranks still running `limit` after the launcher went away (none is
/// the expected answer); kills them, so a failing test leaves nothing.
fn survivors(ranks: &[u32], limit: Duration) -> Vec<u32> {
    let t = Instant::now();
    loop {
        let alive: Vec<u32> = ranks.iter().copied().filter(|&p| runs(p, RING)).collect();
        if alive.is_empty() || t.elapsed() > limit {
            for &p in &alive {
                signal(p, libc::SIGKILL);
            }
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_terminated_launcher_terminates_its_ranks_and_exits_128_plus_the_signal() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let (mut ptlrun, ranks) = long_ring();
        signal(ptlrun.id(), sig);
        let st = wait_bounded(&mut ptlrun, Duration::from_secs(60));
        let left = survivors(&ranks, Duration::from_secs(20));
        let mut err = String::new();
        if let Some(mut e) = ptlrun.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let st = st.unwrap_or_else(|| panic!("signal {sig}: ptlrun did not exit: {err}"));
        assert!(left.is_empty(), "signal {sig}: ranks {left:?} survived");
        assert_eq!(st.code(), Some(128 + sig), "signal {sig}: {err}");
        assert!(
            err.contains("the job was terminated"),
            "signal {sig}: {err}"
        );
    }
}

/// The pids of live processes whose command line is exactly `args`.
fn processes_running(args: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want)
                && runs(pid, args[0])
            {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn a_terminated_launcher_terminates_what_its_ranks_started() {
    // Each rank is a shell that runs a program as its child (no exec: a
    // command follows), as a wrapper script does. A sleep whose length no
    // other process on the machine uses marks the programs.
    let marker = format!(
        "{}.{}",
        3000 + std::process::id() % 1000,
        std::process::id() % 97
    );
    let script = format!("sleep {marker}; true");
    let mut ptlrun = Command::new(PTLRUN)
        .args(["-n", "2", "--timeout", "300", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ptlrun");
    let programs = ["sleep", marker.as_str()];
    let t = Instant::now();
    while processes_running(&programs).len() < 2 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = processes_running(&programs);
    signal(ptlrun.id(), libc::SIGTERM);
    let st = wait_bounded(&mut ptlrun, Duration::from_secs(60));
    let t = Instant::now();
    let mut left = processes_running(&programs);
    while !left.is_empty() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_running(&programs);
    }
    for &p in &left {
        signal(p, libc::SIGKILL);
    }
    assert_eq!(started.len(), 2, "both ranks' programs ran: {started:?}");
    assert_eq!(st.and_then(|s| s.code()), Some(128 + libc::SIGTERM));
    assert!(left.is_empty(), "the ranks' programs {left:?} survived");
}

#[test]
fn a_killed_launcher_takes_its_ranks_with_it() {
    let (mut ptlrun, ranks) = long_ring();
    signal(ptlrun.id(), libc::SIGKILL);
    assert!(wait_bounded(&mut ptlrun, Duration::from_secs(30)).is_some());
    let left = survivors(&ranks, Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "ranks {left:?} outlived the killed launcher"
    );
}

#[test]
fn a_rank_whose_rendezvous_is_unreachable_says_what_it_waits_for_then_fails() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut rank = Command::new(HELLO)
        .env("PTL_RANK", "0")
        .env("PTL_SIZE", "2")
        .env("PTL_JOB_KEY", "1")
        .env("PTL_BOOTSTRAP", &addr)
        .env("PTL_BOOTSTRAP_TIMEOUT", "5")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the rank");
    let stderr = rank.stderr.take();
    // Read on a thread: the reader ends when the rank exits (or is killed
    // by wait_bounded, which a reader blocked here would never reach).
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let st = wait_bounded(&mut rank, Duration::from_secs(60));
    let err = reader.join().unwrap_or_default();
    assert!(st.is_some_and(|s| !s.success()), "{st:?}: {err}");
    let waiting = format!("waiting for the rendezvous server at {addr} (PTL_BOOTSTRAP)");
    assert_eq!(err.matches(&waiting).count(), 1, "{err}");
    assert!(
        err.contains("giving up after 5s (PTL_BOOTSTRAP_TIMEOUT)"),
        "{err}"
    );
    assert!(err.contains("refused"), "the cause is named: {err}");
    // The final error names the address and the cause too.
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains(&addr) && last.contains("refused") && last.contains("unreachable"),
        "{err}"
    );
}

/// Rank 2 fails (exit 3, or SIGKILL) 300 ms after its peers saw it go;
/// they exit first, with their PeerFailed errors. The launcher must blame
/// rank 2 every time, whatever order it reaps the ranks in.
#[test]
fn the_rank_that_failed_first_is_blamed_not_the_survivors_it_took_down() {
    for round in 0..3 {
        for (scenario, progress, status) in [
            ("blame-exit", ProgressMode::Poll, 3),
            ("blame-signal", ProgressMode::Poll, 128 + 9),
            ("blame-exit", ProgressMode::Thread, 3),
        ] {
            let out = fault_job(scenario, progress, &[], 120);
            let what = format!("{scenario} {progress:?} round {round}: {:?}", out.reason);
            assert_eq!(out.failed_rank, Some(2), "{what}\n{}", lines(&out));
            assert_eq!(out.status, status, "{what}\n{}", lines(&out));
            // The survivors did fail, and before rank 2 exited.
            assert!(
                (0..4).filter(|&r| r != 2).all(|r| out
                    .output
                    .iter()
                    .any(|l| l.rank == r && l.text.contains("PeerFailed"))),
                "{what}\n{}",
                lines(&out)
            );
        }
    }
}

/// One rank aborts, panics or returns an error while the others wait in
/// a receive or a probe that nothing will ever satisfy: the job ends, with
/// that rank's status, long before the job's own limit.
#[test]
fn one_ranks_abort_panic_or_error_ends_the_job_while_the_others_block() {
    for (scenario, status, says) in [
        ("abort", 3, "aborts the job with status 3"),
        ("panic", 101, "panicked with MPI initialized"),
        // Ranks 0, 2 and 3 each wait for any of the others, which no
        // departure notice can settle: the deadline does.
        ("error", 1, "ranks 0,2,3 never reached it"),
    ] {
        let t = Instant::now();
        let out = fault_job(
            scenario,
            ProgressMode::Thread,
            &[("PTL_FINALIZE_TIMEOUT", "3")],
            90,
        );
        let what = format!("{scenario}: {:?} after {:?}", out.reason, t.elapsed());
        // Generous for a loaded machine, yet well below the 60 s the
        // rendezvous would wait for a closing barrier.
        assert!(
            t.elapsed() < Duration::from_secs(45),
            "{what}\n{}",
            lines(&out)
        );
        assert_eq!(out.status, status, "{what}\n{}", lines(&out));
        assert_eq!(out.failed_rank, Some(1), "{what}\n{}", lines(&out));
        assert!(
            out.output
                .iter()
                .any(|l| l.rank == 1 && l.stderr && l.text.contains(says)),
            "{what}\n{}",
            lines(&out)
        );
    }
}

/// A rank that reaches finalize later than the bootstrap timeout (which
/// bounds the rendezvous's fences by default) is still waited for: the
/// closing barrier waits as long as `PTL_FINALIZE_TIMEOUT` allows, and
/// without it for good (a late rank is no error).
#[test]
fn the_closing_barrier_waits_as_long_as_the_finalize_timeout_allows() {
    for env in [&[("PTL_FINALIZE_TIMEOUT", "120")][..], &[]] {
        let out = fault_job_with(
            &["late", "8"],
            ProgressMode::Thread,
            env,
            Duration::from_secs(5),
            150,
        );
        assert_eq!(out.status, 0, "{env:?}: {:?}\n{}", out.reason, lines(&out));
    }
}

/// The hang, with no finalize deadline: rank 0 returns an error
/// from `main` while rank 1 probes for any message and rank 2 waits for
/// one from rank 0. Once the ranks they wait for have finalized, their
/// waits fail with `PeerFinalized` (departure notices), they return those
/// errors, and the job ends with a failure instead of hanging in the
/// closing barrier.
#[test]
fn waits_for_ranks_that_finalized_fail_and_the_job_ends() {
    for progress in [ProgressMode::Thread, ProgressMode::Poll] {
        let t = Instant::now();
        let out = fault_job("stranded", progress, &[], 90);
        let what = format!("{progress:?}: {:?} after {:?}", out.reason, t.elapsed());
        assert!(
            t.elapsed() < Duration::from_secs(45),
            "{what}\n{}",
            lines(&out)
        );
        assert_eq!(out.status, 1, "{what}\n{}", lines(&out));
        for r in [1, 2] {
            assert!(
                out.output
                    .iter()
                    .any(|l| l.rank == r && l.text.contains("PeerFinalized")),
                "rank {r} names the departed rank: {what}\n{}",
                lines(&out)
            );
        }
    }
}
