//! The RPC library between real processes: rank 0 serves, the others call
//! it (`rpc_check`), over every transport. Every job has a time limit.

use std::time::Duration;

use nal_udp::FaultConfig;
use portals_runtime::launch::{launch, LaunchOutcome, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};
use portals_tests::assert_job_ok;

const RPC: &str = env!("CARGO_BIN_EXE_rpc_check");

fn options(nal: NalKind) -> JobOptions {
    JobOptions {
        nal,
        timeout: Duration::from_secs(60),
        ..JobOptions::default()
    }
}

fn run(scenario: &str, ranks: u32, options: JobOptions, grace: Duration) -> LaunchOutcome {
    let mut spec = LaunchSpec::new(ranks, RPC);
    spec.args = vec![scenario.into()];
    spec.options = options;
    spec.output = Output::Capture;
    spec.timeout = Some(Duration::from_secs(240));
    spec.grace = grace;
    launch(&spec).expect("launch")
}

fn assert_ok(out: &LaunchOutcome, ranks: u32, what: &str) {
    assert_job_ok(out, ranks, "OK ", what);
}

/// Echo, a 24 MiB bulk write and read streamed in 1 MiB chunks, a counter,
/// and the typed errors: an oversized request fails before it is sent, an
/// oversized reply and a handler's failure come back as errors.
fn basic_over(nal: NalKind) {
    let out = run("basic", 3, options(nal), Duration::from_secs(2));
    assert_ok(&out, 3, &format!("basic over {nal:?}"));
}

#[test]
fn request_reply_bulk_and_typed_errors_over_tcp() {
    basic_over(NalKind::Tcp);
}

#[test]
fn request_reply_bulk_and_typed_errors_over_udp() {
    basic_over(NalKind::Udp);
}

#[test]
fn request_reply_bulk_and_typed_errors_over_shm() {
    basic_over(NalKind::Shm);
}

/// 10 % of every process's datagrams lost, and a server slower than the
/// clients' timeout now and then: requests are resent with their xid, and
/// the counter ends at exactly the number of increments (each applied
/// once); the bulk data read back is correct.
#[test]
fn resent_writes_apply_exactly_once_over_udp_with_10_percent_loss() {
    let o = JobOptions {
        udp_fault: Some(FaultConfig {
            loss: 0.1,
            dup: 0.0,
            reorder: 0.0,
            seed: 11,
        }),
        ..options(NalKind::Udp)
    };
    let out = run("counter", 3, o, Duration::from_secs(2));
    assert_ok(&out, 3, "counter over lossy udp");
}

/// The same resends over TCP, where nothing is lost: only the server's
/// slowness makes clients resend.
#[test]
fn resent_writes_apply_exactly_once_over_tcp() {
    let out = run("counter", 3, options(NalKind::Tcp), Duration::from_secs(2));
    assert_ok(&out, 3, "counter over tcp");
}

/// Two clients of four threads each flood a service of two small request
/// buffers: the engine refuses requests while they are full, the clients
/// back off, every request is answered once, the reply cache stays within
/// its bound.
#[test]
fn a_flood_fills_the_request_buffers_and_every_request_is_answered() {
    let out = run("flood", 3, options(NalKind::Tcp), Duration::from_secs(2));
    assert_ok(&out, 3, "flood over tcp");
}

/// A client killed (SIGKILL) in the middle of a 256 MiB bulk write: the
/// server's transfer fails with the client's failure, its state is freed,
/// and the other client is served before and after.
#[test]
fn a_client_killed_mid_bulk_leaves_the_server_serving_others() {
    let out = run("kill", 3, options(NalKind::Tcp), Duration::from_secs(120));
    let lines = out.transcript();
    assert_eq!(out.status, 128 + 9, "{:?}\n{}", out.reason, lines);
    assert_eq!(out.failed_rank, Some(1), "{}", lines);
    for r in [0, 2] {
        assert!(out.stdout_of(r).contains("OK kill"), "rank {r}:\n{}", lines);
    }
}

/// The same with the client killed in the middle of a 256 MiB bulk read
/// that the server pushes from its own memory, chunks in flight
/// (`Bulk::push_from`): the push fails with the client's failure, every
/// descriptor over the handler's memory is released (the handler
/// returns), and the other client is served before and after.
#[test]
fn a_client_killed_mid_pipelined_read_leaves_the_server_serving_others() {
    let out = run(
        "kill-read",
        3,
        options(NalKind::Tcp),
        Duration::from_secs(120),
    );
    let lines = out.transcript();
    assert_eq!(out.status, 128 + 9, "{:?}\n{}", out.reason, lines);
    assert_eq!(out.failed_rank, Some(1), "{}", lines);
    for r in [0, 2] {
        assert!(
            out.stdout_of(r).contains("OK kill-read"),
            "rank {r}:\n{}",
            lines
        );
    }
}

/// The server is killed while both clients wait in calls (one in a bulk
/// read): both calls fail with `PeerFailed`, though their timeout is an
/// hour.
#[test]
fn calls_to_a_server_that_dies_fail_with_its_failure() {
    for nal in [NalKind::Tcp, NalKind::Udp, NalKind::Shm] {
        let out = run("server-dies", 3, options(nal), Duration::from_secs(120));
        let lines = out.transcript();
        assert_eq!(out.failed_rank, Some(0), "{nal:?}: {}", lines);
        for r in [1, 2] {
            assert!(
                out.stdout_of(r).contains("OK server-dies"),
                "{nal:?}: rank {r}:\n{}",
                lines
            );
        }
    }
}
