//! Collectives and communicator management between real processes: 1, 2, 3,
//! 4 and 7 ranks (the last oversubscribes the machine and exercises the
//! non-power-of-two paths), results checked against local computation.

use std::time::Duration;

use portals_runtime::launch::{launch, LaunchOutcome, LaunchSpec, Output};
use portals_runtime::JobOptions;

fn run(program: &str, ranks: u32, args: &[&str]) -> LaunchOutcome {
    let mut spec = LaunchSpec::new(ranks, program);
    spec.args = args.iter().map(Into::into).collect();
    spec.options = JobOptions {
        timeout: Duration::from_secs(60),
        ..JobOptions::default()
    };
    spec.output = Output::Capture;
    spec.timeout = Some(Duration::from_secs(240));
    launch(&spec).expect("launch")
}

fn assert_ok(out: &LaunchOutcome, ranks: u32, ok: &str, what: &str) {
    let lines: Vec<_> = out
        .output
        .iter()
        .map(|l| format!("[{}{}] {}", l.rank, if l.stderr { "!" } else { "" }, l.text))
        .collect();
    assert_eq!(
        out.status,
        0,
        "{what}: {:?}\n{}",
        out.reason,
        lines.join("\n")
    );
    for r in 0..ranks {
        assert!(
            out.stdout_of(r).contains(ok),
            "{what}: rank {r}\n{}",
            lines.join("\n")
        );
    }
}

const CHECK: &str = env!("CARGO_BIN_EXE_coll_check");

#[test]
fn every_collective_at_every_size_on_1_to_4_ranks() {
    for n in 1..=4 {
        assert_ok(
            &run(CHECK, n, &["sizes"]),
            n,
            "OK sizes",
            &format!("sizes n={n}"),
        );
    }
}

#[test]
fn every_collective_on_7_ranks() {
    assert_ok(&run(CHECK, 7, &["sizes"]), 7, "OK sizes", "sizes n=7");
}

#[test]
fn splits_dups_groups_and_interleaving_with_point_to_point() {
    for n in [1, 2, 3, 4, 7] {
        assert_ok(
            &run(CHECK, n, &["comms"]),
            n,
            "OK comms",
            &format!("comms n={n}"),
        );
    }
}
