//! Issue 22: every transport's progress thread runs favoured over its
//! application (`nal_sys::sched::progress_thread_sched`), so that after
//! moving a payload it may still preempt the computation for the next one.
//! Where the process may not lower a nice value, the thread keeps its
//! application's.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use nal_shm::ShmConfig;
use nal_sys::affinity::ProgressCpus;
use nal_tcp::TcpConfig;
use nal_udp::UdpConfig;
use portals_tests::conformance::{job, Backend, ProgressMode, Transport};
use portals_tests::threads::{parent_cpus, threads_named};

/// The nice value of each thread of this process whose name starts with
/// `prefix`.
fn nice_of_threads(prefix: &str) -> Vec<i32> {
    threads_named(&[prefix])
        .into_iter()
        .filter_map(|t| t.nice)
        .collect()
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
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
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

/// The placement tests look at the threads of one job at a time: in a
/// test binary run by `cargo test` the other tests' jobs run beside them.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Start a one-process job of `cfg` from a thread pinned to one CPU, as a
/// bound rank's threads are, and return that CPU and the CPUs its progress
/// thread (named `prefix`…) may run on once it has placed itself, which
/// it does before it first sleeps (`None` where the runner may use one
/// CPU only: nothing to widen to).
fn placement<C: Transport + Send + 'static>(
    cfg: C,
    prefix: &'static str,
) -> Option<(usize, Vec<usize>)> {
    let parent = parent_cpus();
    if parent.len() < 2 {
        eprintln!("skipped: the test runner may use one CPU only ({parent:?})");
        return None;
    }
    let pinned = parent[parent.len() - 1];
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let seen = std::thread::spawn(move || {
        let before: Vec<String> = threads_named(&[prefix])
            .into_iter()
            .map(|t| t.tid)
            .collect();
        nal_sys::affinity::set(&nal_sys::affinity::single_cpu(pinned)).expect("pin");
        let nodes = job(1, &cfg);
        let deadline = Instant::now() + Duration::from_secs(20);
        let seen = loop {
            let ours: Vec<_> = threads_named(&[prefix])
                .into_iter()
                .filter(|t| !before.contains(&t.tid))
                .collect();
            if (ours.len() == 1 && ours[0].asleep) || Instant::now() > deadline {
                break ours;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        drop(nodes);
        seen
    })
    .join()
    .expect("job thread");
    assert!(
        seen.len() == 1 && seen[0].asleep,
        "one {prefix} progress thread, asleep after starting: {seen:?}"
    );
    seen.into_iter().next().map(|t| (pinned, t.cpus))
}

/// A job of `cfg`, whose placement is `default`, started from a bound
/// thread: its progress thread may run on every CPU of the launcher.
fn on_the_launchers_cpus<C: Transport + Send + 'static>(
    cfg: C,
    default: ProgressCpus,
    prefix: &'static str,
) {
    assert_eq!(default, ProgressCpus::Launcher, "the default");
    if let Some((_, cpus)) = placement(cfg, prefix) {
        assert_eq!(cpus, parent_cpus());
    }
}

#[test]
fn tcp_progress_thread_of_a_bound_rank_runs_on_the_launchers_cpus() {
    let cfg = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    on_the_launchers_cpus(cfg.clone(), cfg.progress_cpus, "ptl-tcp-");
}

#[test]
fn udp_progress_thread_of_a_bound_rank_runs_on_the_launchers_cpus() {
    let cfg = UdpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    on_the_launchers_cpus(cfg.clone(), cfg.progress_cpus, "ptl-udp-");
}

#[test]
fn shm_progress_thread_of_a_bound_rank_runs_on_the_launchers_cpus() {
    let cfg = ShmConfig::variant(Backend::Epoll, ProgressMode::Thread);
    on_the_launchers_cpus(cfg.clone(), cfg.progress_cpus, "ptl-shm-");
}

#[test]
fn a_progress_thread_asked_to_stay_on_its_ranks_cpu_or_on_a_list_does() {
    let mut cfg = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    cfg.progress_cpus = ProgressCpus::Rank;
    if let Some((pinned, cpus)) = placement(cfg, "ptl-tcp-") {
        assert_eq!(cpus, vec![pinned]);
    }
    let first = parent_cpus().first().copied().unwrap_or(0);
    let mut cfg = ShmConfig::variant(Backend::Epoll, ProgressMode::Thread);
    cfg.progress_cpus = ProgressCpus::List(vec![first]);
    if let Some((pinned, cpus)) = placement(cfg, "ptl-shm-") {
        assert_ne!(pinned, first, "the list names another CPU than the rank's");
        assert_eq!(cpus, vec![first]);
    }
}
