//! Shared pieces of the multi-process tests: launching a test program as a
//! job (with `ptlrun`, or under MPICH's, Open MPI's or Slurm's launcher:
//! [`hydra`], [`openmpi`], [`slurm`]) and checking what it reported. The
//! integration tests themselves live in `tests/tests/`; the programs they
//! launch in `src/bin/`. Also the transport conformance suite
//! ([`conformance`]), which the transports' own tests build on.

use std::time::Duration;

use nal_tcp::{Backend, ProgressMode};
pub use portals_runtime::launch::LaunchOutcome;
use portals_runtime::launch::{launch, LaunchSpec, Output};
use portals_runtime::JobOptions;

pub mod conformance;
pub mod examples;
pub mod hydra;
pub mod openmpi;
pub mod slurm;
pub mod threads;

// The generic launcher runner lives in hydra's module tree (runtime's
// tests include hydra.rs by path and need it too); compiled once, here.
pub use hydra::launcher;

/// Launch `ranks` copies of `program args` on this host with the given
/// transport options, capturing their output. Bootstrap times out after a
/// minute and the whole job after four.
pub fn run_job(
    program: &str,
    ranks: u32,
    args: &[&str],
    progress: ProgressMode,
    backend: Backend,
) -> LaunchOutcome {
    run_job_within(
        program,
        ranks,
        args,
        progress,
        backend,
        Duration::from_secs(240),
    )
}

/// [`run_job`] with another limit for the whole job, for jobs that would
/// hang if the behaviour under test regressed.
pub fn run_job_within(
    program: &str,
    ranks: u32,
    args: &[&str],
    progress: ProgressMode,
    backend: Backend,
    limit: Duration,
) -> LaunchOutcome {
    let options = JobOptions {
        progress,
        backend,
        ..JobOptions::default()
    };
    run_job_limited(program, ranks, args, options, limit)
}

/// Run `program` on `ranks` processes with the given transport options
/// (the bootstrap timeout is set to 60 s), capturing output, killed after
/// 240 s.
pub fn run_job_with(
    program: &str,
    ranks: u32,
    args: &[&str],
    options: JobOptions,
) -> LaunchOutcome {
    run_job_limited(program, ranks, args, options, Duration::from_secs(240))
}

/// [`run_job_with`] with another limit for the whole job.
pub fn run_job_limited(
    program: &str,
    ranks: u32,
    args: &[&str],
    options: JobOptions,
    limit: Duration,
) -> LaunchOutcome {
    run_job_env(program, ranks, args, options, limit, &[])
}

/// [`run_job_limited`] with extra environment variables for every rank.
pub fn run_job_env(
    program: &str,
    ranks: u32,
    args: &[&str],
    options: JobOptions,
    limit: Duration,
    env: &[(&str, &str)],
) -> LaunchOutcome {
    let mut spec = LaunchSpec::new(ranks, program);
    spec.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    spec.args = args.iter().map(Into::into).collect();
    spec.options = JobOptions {
        timeout: Duration::from_secs(60),
        ..options
    };
    spec.output = Output::Capture;
    spec.timeout = Some(limit);
    launch(&spec).expect("launch")
}

/// Assert the job succeeded and every rank printed `ok`; on failure, show
/// every line the ranks printed.
pub fn assert_job_ok(out: &LaunchOutcome, ranks: u32, ok: &str, what: &str) {
    let lines = out.transcript();
    assert_eq!(out.status, 0, "{what}: {:?}\n{}", out.reason, lines);
    for r in 0..ranks {
        assert!(
            out.stdout_of(r).contains(ok),
            "{what}: rank {r} did not print {ok:?}\n{}",
            lines
        );
    }
}

/// How a test program ends: `OK <scenario> rank <r>` and status 0, or the
/// failure on stderr and status 1.
pub fn finish(scenario: &str, rank: i32, r: Result<(), String>) {
    match r {
        Ok(()) => println!("OK {scenario} rank {rank}"),
        Err(x) => {
            eprintln!("FAILED {scenario} rank {rank}: {x}");
            std::process::exit(1);
        }
    }
}
