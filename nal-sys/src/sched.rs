//! The scheduling request of a progress thread.
//!
//! A progress thread may share its rank's core with the application: where
//! every core runs a rank, the thread's own core is some rank's, and where
//! ranks are bound one per core (`mpiexec --bind-to core`) and the thread
//! keeps its rank's CPU ([`ProgressCpus::Rank`]) it is its own rank's
//! (the default lets it onto the launcher's other CPUs,
//! [`ProgressCpus::Launcher`]). When data arrive
//! while the application computes, the thread is woken, but the kernel's
//! EEVDF scheduler (Linux 6.6 and later) lets the running task finish its
//! time slice first (`RUN_TO_PARITY`, about 3 ms on a few cores): a compute
//! step shorter than that got no progress at all. Since Linux 6.12 a task
//! may ask for a shorter slice (`sched_attr.sched_runtime` under
//! `SCHED_OTHER`, 0.1–100 ms); a waking task with a shorter slice than the
//! running one preempts it (`PREEMPT_SHORT`). The progress thread asks for
//! the shortest slice: it runs briefly when woken, then sleeps again, so
//! the application keeps its core otherwise. No privilege is needed, and
//! the request is only a hint: older kernels refuse it (`EINVAL`/`E2BIG`),
//! and the thread simply runs with the default slice there.
//!
//! The slice alone is not enough. EEVDF preempts only for a task that is
//! *eligible*, one that has not run ahead of its fair share: a progress
//! thread that just spent 25 µs reading a 256 KB payload while its
//! application computed left that share behind it, and when woken for the
//! next payload it waited for the scheduler's tick (4 ms at `HZ=250`)
//! while the application computed on, so the application copied the
//! payload itself at its next wait. A quarter to a third of the iterations
//! of a 256 KB overlap loop went that way. The progress thread therefore also asks for
//! a larger share of its core: a nice value [`DEFAULT_NICE_STEPS`] below
//! its application's (weight ×9 at 10 steps), which keeps it eligible
//! after a copy; it sleeps whenever it has nothing to move, so the weight
//! costs the application nothing then. Lowering a nice value needs
//! `CAP_SYS_NICE` or a `RLIMIT_NICE` (`ulimit -e`) that allows it; the
//! thread takes as many steps as the limit allows, and none without it.

use std::io;
use std::time::Duration;

use crate::affinity::ProgressCpus;

/// The shortest slice the kernel accepts (`sched_runtime` lower bound).
pub const MIN_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` of `sched_setattr(2)` (the version-1 layout with
/// the utilisation clamps; `size` tells the kernel which fields we know).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Ask the kernel for time slices of `slice` for the calling thread, keeping
/// its policy (`SCHED_OTHER`) and nice value. `slice` is clamped to the
/// kernel's bounds. An error means the kernel does not support it (before
/// 6.12) or refused it; the caller goes on with the default slice.
pub fn request_slice(slice: Duration) -> io::Result<()> {
    let ns = u64::try_from(slice.as_nanos())
        .unwrap_or(u64::MAX)
        .clamp(MIN_SLICE.as_nanos() as u64, 100_000_000);
    let nice = current_nice()?;
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_nice: nice,
        sched_runtime: ns,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a valid, initialised sched_attr whose `size` field
    // gives its true length; the kernel only reads it. pid 0 = this thread.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How many nice steps a progress thread runs below (favoured over) its
/// application by default (`PTL_PROGRESS_NICE`, read by the runtime).
pub const DEFAULT_NICE_STEPS: u32 = 10;

/// The calling thread's nice value (Linux: per thread).
pub fn current_nice() -> io::Result<i32> {
    // SAFETY: getpriority reads the calling thread's nice value (who = 0:
    // this thread under Linux's per-thread scheduling); no memory involved.
    // errno is reset first because -1 is also a valid nice value.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, 0);
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n)
    }
}

/// Set the calling thread's nice value.
fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority changes only the calling thread's nice value
    // (who = 0, per-thread on Linux); no memory involved.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The lowest nice value `RLIMIT_NICE` lets an unprivileged thread take
/// (`20 - rlim_cur`; 20 when the limit allows none).
fn nice_floor() -> i32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `lim`, which is that.
    if unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut lim) } != 0 {
        return 20;
    }
    let cur = i32::try_from(lim.rlim_cur.min(40)).unwrap_or(0);
    20 - cur
}

/// Lower the calling thread's nice value by `steps` (not below -20), or as
/// far as it may: with `CAP_SYS_NICE` all the way, otherwise down to the
/// floor `RLIMIT_NICE` allows. Returns the nice value it runs at now; an
/// error only if it could lower it by no step at all while asked to.
pub fn raise_priority(steps: u32) -> io::Result<i32> {
    let nice = current_nice()?;
    let want = nice
        .saturating_sub(i32::try_from(steps).unwrap_or(i32::MAX))
        .max(-20);
    if want >= nice {
        return Ok(nice);
    }
    match set_nice(want) {
        Ok(()) => Ok(want),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
            let floor = nice_floor().max(want);
            if floor < nice && set_nice(floor).is_ok() {
                Ok(floor)
            } else {
                Err(e)
            }
        }
        Err(e) => Err(e),
    }
}

/// What a progress thread calls first: the CPUs it may run on
/// ([`ProgressCpus::apply`]), `nice_steps` of priority over the
/// application ([`raise_priority`]; 0 for none), then its time slice
/// ([`progress_thread_slice`]). Each refusal is logged at debug level and
/// the thread goes on as it was: all three are hints to the scheduler.
pub fn progress_thread_sched(nice_steps: u32, cpus: &ProgressCpus) {
    match cpus.apply() {
        Ok(Some(cpus)) => tracing::debug!(?cpus, "progress thread placement"),
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e, "progress thread keeps its application's CPUs"),
    }
    match raise_priority(nice_steps) {
        Ok(nice) => tracing::debug!(nice, "progress thread priority"),
        Err(e) => tracing::debug!(error = %e, "progress thread keeps its application's priority"),
    }
    if let Err(e) = progress_thread_slice() {
        tracing::debug!(error = %e, "progress thread keeps the default time slice");
    }
}

/// The environment variable that sets a progress thread's slice in
/// microseconds (`0`: ask for nothing, keep the kernel's default).
pub const SLICE_VAR: &str = "PTL_PROGRESS_SLICE_US";

/// What a progress thread calls first: request the slice `PTL_PROGRESS_SLICE_US`
/// names (default [`MIN_SLICE`]). `Ok(None)`: the variable asked for none;
/// `Err`: the kernel refused (the thread runs with the default slice).
pub fn progress_thread_slice() -> io::Result<Option<Duration>> {
    let slice = match std::env::var(SLICE_VAR) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(0) => return Ok(None),
            Ok(us) => Duration::from_micros(us),
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{SLICE_VAR}={v:?}: expected microseconds"),
                ))
            }
        },
        Err(_) => MIN_SLICE,
    };
    request_slice(slice).map(|()| Some(slice))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the running kernel's release is at least `major.minor`.
    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (a, b) >= (major, minor)
    }

    /// Asked for steps, a thread runs that many nice steps lower (not
    /// below -20) where it may, as far as `RLIMIT_NICE` allows where it
    /// may not, and otherwise keeps its nice value and says why; zero
    /// steps change nothing. Each case runs on a thread of its own (nice
    /// values are per thread), so the test's own is untouched.
    #[test]
    fn raising_priority_takes_the_steps_allowed_and_reports_a_refusal() {
        let run = |steps: u32| {
            std::thread::spawn(move || {
                let before = current_nice().expect("nice");
                let got = raise_priority(steps);
                (before, got, current_nice().expect("nice"))
            })
            .join()
            .expect("thread")
        };
        let (before, got, after) = run(0);
        assert_eq!(got.expect("zero steps"), before);
        assert_eq!(after, before);

        let (before, got, after) = run(7);
        match got {
            Ok(n) => {
                assert_eq!(n, after, "the value reported is the one in force");
                assert!(n < before, "lowered: {before} -> {n}");
                assert!(n >= (before - 7).max(-20), "at most the steps asked for");
                let privileged = n == (before - 7).max(-20);
                assert!(privileged || n == nice_floor(), "else the limit's floor");
            }
            Err(e) => {
                assert!(
                    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)),
                    "a refusal, not {e}"
                );
                assert_eq!(after, before, "a refused thread keeps its nice value");
            }
        }
    }

    /// On a kernel that knows custom slices the request is granted and the
    /// thread reads it back; elsewhere it is refused with an error, never a
    /// crash. Either way the thread keeps running with its nice value.
    #[test]
    fn a_slice_request_is_granted_or_cleanly_refused() {
        std::thread::spawn(|| {
            match request_slice(Duration::from_micros(150)) {
                Ok(()) => {
                    let mut attr = SchedAttr::default();
                    // SAFETY: the kernel writes at most `size` bytes into
                    // `attr`, which is that long.
                    let r = unsafe {
                        libc::syscall(
                            libc::SYS_sched_getattr,
                            0,
                            &mut attr as *mut SchedAttr,
                            std::mem::size_of::<SchedAttr>() as u32,
                            0u32,
                        )
                    };
                    assert_eq!(r, 0, "{}", io::Error::last_os_error());
                    assert_eq!(attr.sched_policy, libc::SCHED_OTHER as u32);
                    // Kernels before 6.12 accept the field for SCHED_OTHER
                    // and ignore it; from 6.12 on it is the slice.
                    if kernel_at_least(6, 12) {
                        assert_eq!(attr.sched_runtime, 150_000, "the slice asked for");
                    }
                }
                Err(e) => {
                    let code = e.raw_os_error();
                    assert!(
                        matches!(
                            code,
                            Some(libc::EINVAL)
                                | Some(libc::E2BIG)
                                | Some(libc::EPERM)
                                | Some(libc::ENOSYS)
                        ),
                        "unexpected refusal: {e}"
                    );
                }
            }
        })
        .join()
        .expect("thread");
    }
}
