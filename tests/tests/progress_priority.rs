//! Issue 22: every transport's progress thread runs favoured over its
//! application (`nal_sys::sched::progress_thread_sched`), so that after
//! moving a payload it may still preempt the computation for the next one.
//! Where the process may not lower a nice value, the thread keeps its
//! application's.

use std::time::{Duration, Instant};

use nal_shm::ShmConfig;
use nal_tcp::TcpConfig;
use nal_udp::UdpConfig;
use portals_tests::conformance::{job, Backend, ProgressMode, Transport};

/// The nice value of each thread of this process whose name starts with
/// `prefix` (`/proc/self/task/TID/stat`, field 19).
fn nice_of_threads(prefix: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in dir.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The name may hold spaces: fields are counted after its ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        if let Some(nice) = rest.split_whitespace().nth(16).and_then(|f| f.parse().ok()) {
            out.push(nice);
        }
    }
    out
}

/// This process's nice value and the one a thread of it reaches when it
/// asks for `steps` (the probe thread ends; nice values are per thread).
fn reachable(steps: u32) -> (i32, i32) {
    std::thread::spawn(move || {
        let base = nal_sys::sched::current_nice().expect("nice");
        let got = nal_sys::sched::raise_priority(steps).unwrap_or(base);
        (base, got)
    })
    .join()
    .expect("probe thread")
}

/// A one-process job of `cfg` whose progress thread (named `prefix`…) is
/// to run `steps` below this process.
fn check<C: Transport>(cfg: C, steps: u32, prefix: &str) {
    let (base, want) = reachable(steps);
    let nodes = job(1, &cfg);
    // The thread sets its priority first thing; give it a moment to start.
    let deadline = Instant::now() + Duration::from_secs(20);
    let seen = loop {
        let seen = nice_of_threads(prefix);
        if seen.contains(&want) || Instant::now() > deadline {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        seen.contains(&want),
        "{prefix} progress thread at nice {seen:?}, expected {want} (application {base})"
    );
    drop(nodes);
}

const STEPS: u32 = nal_sys::sched::DEFAULT_NICE_STEPS;

#[test]
fn tcp_progress_thread_runs_favoured_over_its_application() {
    let cfg = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    assert_eq!(cfg.progress_nice, STEPS, "the default");
    check(cfg, STEPS, "ptl-tcp-");
}

#[test]
fn udp_progress_thread_runs_favoured_over_its_application() {
    let cfg = UdpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    assert_eq!(cfg.progress_nice, STEPS, "the default");
    check(cfg, STEPS, "ptl-udp-");
}

#[test]
fn shm_progress_thread_runs_favoured_over_its_application() {
    let cfg = ShmConfig::variant(Backend::Epoll, ProgressMode::Thread);
    assert_eq!(cfg.progress_nice, STEPS, "the default");
    check(cfg, STEPS, "ptl-shm-");
}

/// What the runtime asks for on a crowded host: the application's nice.
#[test]
fn a_progress_thread_asked_for_no_steps_keeps_its_applications_priority() {
    let mut cfg = ShmConfig::variant(Backend::Epoll, ProgressMode::Thread);
    cfg.progress_nice = 0;
    check(cfg, 0, "ptl-shm-");
}
