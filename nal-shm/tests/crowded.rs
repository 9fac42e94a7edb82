//! Issue 22: on a crowded host (more ranks than cores,
//! `ShmConfig::crowded`) a dozing progress thread that finds its
//! application waiting in the library dozes until work wakes it or the
//! crowded nap (`nal_sys::gate::CROWDED_NAP`, 50 ms) passes, instead of
//! looking again every `MAX_BACKOFF` hand-back delays: the waiter drives
//! the rings itself, and on such a host each timed look takes a turn on a
//! core another rank needs. Uncrowded, the same wait is looked at once
//! per `MAX_BACKOFF` delays.

use std::time::Duration;

use nal_shm::{ProgressMode, ShmConfig};
use nal_sys::gate::{CROWDED_NAP, MAX_BACKOFF};
use portals::PtlError;
use portals_tests::conformance::job_with;

/// Short, so that the uncrowded thread's longest doze (`MAX_BACKOFF`
/// delays, 8 ms) is far from the crowded one's (50 ms).
const HANDBACK: Duration = Duration::from_micros(500);

/// One wait this long, with nothing arriving.
const WAIT: Duration = Duration::from_millis(1500);

/// How many times rank 0's progress thread dozed during one `WAIT`-long
/// wait in which nothing arrives.
fn dozes_during_one_long_wait(crowded: bool) -> u64 {
    let cfg = ShmConfig {
        progress: ProgressMode::Thread,
        handback: HANDBACK,
        early_takeover: true,
        crowded,
        ..ShmConfig::default()
    };
    let nodes = job_with(&[cfg.clone(), cfg]);
    let ni = &nodes[0].ni;
    let idle = ni.eq_alloc(1).unwrap();
    let before = nodes[0].nal.stats().progress_dozes;
    let r = ni.eq_wait(idle, Some(WAIT));
    assert!(matches!(r, Err(PtlError::Timeout)), "{r:?}");
    nodes[0].nal.stats().progress_dozes - before
}

#[test]
fn a_crowded_rank_waiting_in_the_library_is_not_looked_at_every_backoff() {
    let longest = HANDBACK * MAX_BACKOFF;
    assert!(longest * 4 < CROWDED_NAP);
    let plain = dozes_during_one_long_wait(false);
    let crowded = dozes_during_one_long_wait(true);
    // Uncrowded: about WAIT / longest = 187 dozes; a loaded machine only
    // stretches them, so the bound is loose. Crowded: about
    // WAIT / CROWDED_NAP = 30.
    assert!(
        plain >= 100,
        "uncrowded, only {plain} dozes in a wait of {WAIT:?} (longest doze {longest:?})"
    );
    assert!(
        crowded <= 45,
        "crowded, {crowded} dozes in a wait of {WAIT:?} (uncrowded {plain})"
    );
}
