//! The distributed hash table example (`mpi-on-portals/examples/dht.rs`) on
//! 4 ranks over shared memory and TCP with a progress thread: every rank's
//! inserts and lookups of its own and the others' keys through one-sided
//! operations come back right. Every job has a timeout.

use std::time::Duration;

use nal_tcp::ProgressMode;
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{run_job_limited, LaunchOutcome};

const DHT: &str = env!("CARGO_BIN_EXE_example-dht");

fn run(nal: NalKind, args: &[&str]) -> LaunchOutcome {
    let options = JobOptions {
        nal,
        progress: ProgressMode::Thread,
        ..JobOptions::default()
    };
    run_job_limited(DHT, 4, args, options, Duration::from_secs(180))
}

fn assert_dht_ok(out: &LaunchOutcome, what: &str) {
    let lines = out.transcript();
    assert_eq!(out.status, 0, "{what}: {:?}\n{}", out.reason, lines);
    let rank0 = out.stdout_of(0);
    assert!(rank0.contains("dht: OK"), "{what}:\n{}", lines);
    // 4 ranks x 500 keys, every one held once, no wrong lookup.
    assert!(
        rank0.contains("2000 slots held") && rank0.contains(" 0 wrong"),
        "{what}:\n{}",
        lines
    );
}

#[test]
fn dht_inserts_and_lookups_on_four_ranks_over_shm_and_tcp() {
    for (nal, name) in [(NalKind::Shm, "shm"), (NalKind::Tcp, "tcp")] {
        let out = run(nal, &["500", "7"]);
        assert_dht_ok(&out, &format!("dht over {name}"));
    }
}

#[test]
fn dht_reports_a_corrupted_value_and_fails() {
    let out = run(NalKind::Shm, &["100", "7", "corrupt"]);
    assert_ne!(out.status, 0, "a corrupted table must fail the job");
    let errs: String = out
        .output
        .iter()
        .filter(|l| l.stderr)
        .map(|l| l.text.clone() + "\n")
        .collect();
    assert!(errs.contains("wrong lookups"), "{errs}");
}
