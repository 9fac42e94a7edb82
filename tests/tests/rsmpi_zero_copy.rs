//! Non-contiguous datatypes without a packing copy through rsmpi's face
//! (`src/bin/rsmpi_zero_copy.rs`): a strided vector, an indexed and a
//! structured layout, short and long, blocking and non-blocking, arrive
//! byte-exact with the receive buffer's gaps untouched, over shm, TCP and
//! UDP in both progress modes, with no pack or unpack on either side (a
//! layout of tiny runs, and `bool`s, still go through one). Every job has
//! a timeout.

use std::time::Duration;

use nal_tcp::ProgressMode;
use portals_runtime::{JobOptions, NalKind};
use portals_tests::{assert_job_ok, run_job_env, run_job_limited};

const LIMIT: Duration = Duration::from_secs(120);

fn run_on(nal: NalKind, progress: ProgressMode) {
    let options = JobOptions {
        nal,
        progress,
        ..JobOptions::default()
    };
    let out = run_job_limited(
        env!("CARGO_BIN_EXE_rsmpi_zero_copy"),
        2,
        &[],
        options,
        LIMIT,
    );
    assert_job_ok(&out, 2, "OK zero-copy", &format!("{nal:?} {progress:?}"));
}

#[test]
fn non_contiguous_layouts_travel_without_a_copy_over_shm() {
    run_on(NalKind::Shm, ProgressMode::Thread);
}

#[test]
fn non_contiguous_layouts_travel_without_a_copy_over_tcp() {
    run_on(NalKind::Tcp, ProgressMode::Thread);
    run_on(NalKind::Tcp, ProgressMode::Poll);
}

#[test]
fn non_contiguous_layouts_travel_without_a_copy_over_udp() {
    run_on(NalKind::Udp, ProgressMode::Poll);
    run_on(NalKind::Udp, ProgressMode::Thread);
}

/// With every long send announced (`PTL_MPI_ANNOUNCE=always`), a posted
/// non-contiguous receive that an announcement matches gets the data into
/// its own segments (the request kept the segment list for the get).
#[test]
fn non_contiguous_layouts_arrive_when_long_sends_are_announced() {
    let options = JobOptions {
        nal: NalKind::Tcp,
        progress: ProgressMode::Thread,
        ..JobOptions::default()
    };
    let out = run_job_env(
        env!("CARGO_BIN_EXE_rsmpi_zero_copy"),
        2,
        &[],
        options,
        LIMIT,
        &[("PTL_MPI_ANNOUNCE", "always")],
    );
    assert_job_ok(&out, 2, "OK zero-copy", "announced");
}
