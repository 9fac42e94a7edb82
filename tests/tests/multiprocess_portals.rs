//! Portals traffic between real processes started by the launcher. Every
//! scenario runs in both progress modes on both poller back ends (in
//! polling mode the back end only picks the poller nobody waits in, but the
//! suite is the same). Every job has a timeout.

use std::time::{Duration, Instant};

use nal_tcp::{Backend, ProgressMode};
use portals_runtime::launch::{launch, CpuBind, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{assert_job_ok, run_job, run_job_with, LaunchOutcome};

fn modes() -> Vec<(ProgressMode, Backend)> {
    vec![
        (ProgressMode::Thread, Backend::Epoll),
        (ProgressMode::Thread, Backend::IoUring),
        (ProgressMode::Poll, Backend::Epoll),
        (ProgressMode::Poll, Backend::IoUring),
    ]
}

fn run(ranks: u32, args: &[&str], progress: ProgressMode, backend: Backend) -> LaunchOutcome {
    run_job(
        env!("CARGO_BIN_EXE_ptl_check"),
        ranks,
        args,
        progress,
        backend,
    )
}

fn assert_ok(out: &LaunchOutcome, ranks: u32, what: &str) {
    assert_job_ok(out, ranks, "OK ", what)
}

#[test]
fn puts_and_gets_up_to_16_mb_between_two_processes() {
    for (p, b) in modes() {
        let out = run(2, &["putget"], p, b);
        assert_ok(&out, 2, &format!("putget 2 {p:?} {b:?}"));
    }
}

#[test]
fn puts_and_gets_up_to_16_mb_between_four_processes() {
    for (p, b) in modes() {
        let out = run(4, &["putget", &(16 << 20).to_string()], p, b);
        assert_ok(&out, 4, &format!("putget 4 {p:?} {b:?}"));
    }
}

#[test]
fn all_to_all_storm_between_four_processes() {
    for (p, b) in modes() {
        let out = run(4, &["storm", "2000"], p, b);
        assert_ok(&out, 4, &format!("storm {p:?} {b:?}"));
    }
}

#[test]
fn a_sleeping_target_receives_with_a_progress_thread_and_not_without() {
    for (p, b) in modes() {
        let mode = if p == ProgressMode::Thread {
            "thread"
        } else {
            "poll"
        };
        let out = run(2, &["sleepy-target", mode], p, b);
        assert_ok(&out, 2, &format!("sleepy-target {p:?} {b:?}"));
    }
}

#[test]
fn a_rank_killed_mid_transfer_fails_the_survivors_and_the_job() {
    for (p, b) in modes() {
        let t0 = Instant::now();
        let out = run(2, &["die-mid-transfer"], p, b);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "took {:?}",
            t0.elapsed()
        );
        assert_eq!(out.status, 128 + 9, "{p:?} {b:?}: {:?}", out.reason);
        assert_eq!(out.failed_rank, Some(1));
        assert!(
            out.stdout_of(0).contains("survivor saw failure"),
            "{p:?} {b:?}: rank 0 said {:?}",
            out.stdout_of(0)
        );
        // On the default transport the two ranks share memory; the killed
        // one leaves nothing behind in /dev/shm, and neither does the
        // survivor.
        assert!(
            out.output.iter().any(|l| l.text.ends_with(" on shm")),
            "{p:?} {b:?}: not on shared memory: {:?}",
            out.output
        );
        let left = inboxes_left(&out, 2);
        assert!(left.is_empty(), "{p:?} {b:?}: left in /dev/shm: {left:?}");
    }
}

/// The inbox names the job's ranks printed (checked to be `ranks` of
/// them) that are still in /dev/shm. Exact names, not pid prefixes: pids
/// are reused within a test run, and an earlier process's name with the
/// same pid is not this job's.
fn inboxes_left(out: &LaunchOutcome, ranks: usize) -> Vec<String> {
    let names: Vec<&str> = out
        .output
        .iter()
        .filter_map(|l| l.text.strip_prefix("inbox /"))
        .collect();
    assert_eq!(names.len(), ranks, "inbox names printed: {:?}", out.output);
    names
        .into_iter()
        .filter(|n| std::path::Path::new("/dev/shm").join(n).exists())
        .map(str::to_string)
        .collect()
}

#[test]
fn ranks_killed_during_start_up_leave_nothing_in_dev_shm() {
    // Without a progress thread a rank maps its peers' inboxes when its
    // transport starts and then only in library calls, which these ranks
    // never make: the inboxes made last are mapped by no one, so their
    // names are still there when the ranks die. The launcher removes them
    // once the job is over.
    let out = run(3, &["killed-at-start"], ProgressMode::Poll, Backend::Epoll);
    assert_eq!(out.status, 128 + 9, "{:?}", out.reason);
    let left = inboxes_left(&out, 3);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

/// The CPUs each rank of a 3-rank job says it may use, and those its
/// progress thread may, by rank.
fn cpus_of_ranks(bind: CpuBind, env: &[(&str, &str)]) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut spec = LaunchSpec::new(3, env!("CARGO_BIN_EXE_ptl_check"));
    spec.args = vec!["affinity".into()];
    spec.output = Output::Capture;
    spec.timeout = Some(Duration::from_secs(120));
    spec.cpu_bind = bind;
    spec.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let out = launch(&spec).expect("launch");
    assert_ok(&out, 3, &format!("affinity {bind:?}"));
    let parse = |r: u32, line: &str, key: &str| -> Vec<usize> {
        let list = line
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("rank {r} printed no {key:?}: {line:?}"));
        list.split(',').map(|c| c.parse().expect("a CPU")).collect()
    };
    (0..3)
        .map(|r| {
            let line = out.stdout_of(r);
            (parse(r, &line, "cpus "), parse(r, &line, "progress-cpus "))
        })
        .collect()
}

/// `--cpu-bind core` pins rank i to the i-th CPU the launcher may use,
/// round-robin (three ranks: on two CPUs the third shares the first's);
/// without it every rank may use them all. Either way a rank's progress
/// thread may run on every CPU the launcher may, unless
/// `PTL_PROGRESS_CPUS=rank` keeps it on its rank's.
#[test]
fn the_launcher_binds_rank_i_to_the_i_th_cpu_when_asked() {
    let allowed = nal_sys::affinity::allowed_cpus().expect("affinity");
    let bound = cpus_of_ranks(CpuBind::Core, &[]);
    for (r, (cpus, progress)) in bound.iter().enumerate() {
        assert_eq!(cpus, &vec![allowed[r % allowed.len()]], "rank {r}");
        assert_eq!(progress, &allowed, "rank {r}'s progress thread");
    }
    for (r, (cpus, progress)) in cpus_of_ranks(CpuBind::None, &[]).iter().enumerate() {
        assert_eq!(cpus, &allowed, "rank {r} unbound");
        assert_eq!(progress, &allowed, "rank {r}'s progress thread, unbound");
    }
    let kept = cpus_of_ranks(CpuBind::Core, &[("PTL_PROGRESS_CPUS", "rank")]);
    for (r, (cpus, progress)) in kept.iter().enumerate() {
        assert_eq!(progress, cpus, "rank {r}'s progress thread kept on its CPU");
    }
}

#[test]
fn the_launcher_propagates_a_failing_rank_and_its_status() {
    let out = run(
        3,
        &["no-such-scenario"],
        ProgressMode::Thread,
        Backend::Epoll,
    );
    assert_eq!(out.status, 1);
    assert!(out.failed_rank.is_some());
    assert!(out
        .output
        .iter()
        .any(|l| l.stderr && l.text.contains("unknown scenario")));
    // The ranks exited before their peers mapped their inboxes.
    let left = inboxes_left(&out, 3);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn socket_buffer_sizes_reach_every_rank_transport() {
    let options = JobOptions {
        nal: NalKind::Tcp,
        send_buffer: Some(256 << 10),
        recv_buffer: Some(128 << 10),
        ..JobOptions::default()
    };
    let out = run_job_with(
        env!("CARGO_BIN_EXE_ptl_check"),
        2,
        &[
            "sockbuf",
            &(256 << 10).to_string(),
            &(128 << 10).to_string(),
        ],
        options,
    );
    assert_ok(&out, 2, "sockbuf");
}

/// Whether the TCP, UDP and shared-memory transports of a 3-rank job were
/// told that their host is crowded (more ranks than cores online: the
/// progress thread then naps longer inside waits,
/// `nal_sys::gate::ProgressGate::crowded`, `nal_shm::ShmConfig::crowded`),
/// checked at each rank against the job's own verdict; here against the
/// host's core count as well.
#[test]
fn three_ranks_tell_their_transport_whether_the_host_is_crowded() {
    for nal in [NalKind::Tcp, NalKind::Udp, NalKind::Shm] {
        let options = JobOptions {
            nal,
            ..JobOptions::default()
        };
        let out = run_job_with(env!("CARGO_BIN_EXE_ptl_check"), 3, &["crowded"], options);
        assert_ok(&out, 3, &format!("crowded {nal:?}"));
        for r in 0..3 {
            let text = out.stdout_of(r);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("crowded "))
                .unwrap_or_else(|| panic!("rank {r} printed no verdict: {text:?}"));
            let (told, cores) = line
                .split_once(" cores ")
                .unwrap_or_else(|| panic!("rank {r}: {line:?}"));
            let cores: u32 = cores.parse().expect("a core count");
            assert_eq!(
                told,
                (3 > cores).to_string(),
                "{nal:?}, rank {r}: 3 ranks on {cores} cores"
            );
        }
    }
}
