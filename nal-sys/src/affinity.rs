//! CPU placement: which CPUs the calling thread may use, and pinning it (and
//! the threads it starts afterwards) to one of them, as MPI launchers'
//! `--bind-to core` does. Affinity is per thread; a process inherits its
//! creator's at `fork` and keeps it across `exec`.

use std::io;

/// CPUs a `cpu_set_t` can name.
const SET_CPUS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

/// A set holding only `cpu` (empty if `cpu` is past what a `cpu_set_t`
/// holds: `CPU_SET` would panic on it).
pub fn single_cpu(cpu: usize) -> libc::cpu_set_t {
    set_of(&[cpu])
}

/// A set holding `cpus` (those past what a `cpu_set_t` holds left out).
pub fn set_of(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: all-zero is a valid cpu_set_t; CPU_SET writes inside it for
    // c < SET_CPUS.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < SET_CPUS) {
            libc::CPU_SET(c, &mut set);
        }
        set
    }
}

/// The calling thread's affinity.
pub fn current() -> io::Result<libc::cpu_set_t> {
    // SAFETY: all-zero is a valid cpu_set_t; the kernel writes at most
    // `size_of::<cpu_set_t>()` bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(set)
    }
}

/// Set the calling thread's affinity. Only a system call: safe to call
/// between `fork` and `exec`.
pub fn set(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid, initialised cpu_set_t.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs of `set`, in increasing order.
pub fn cpus_of(set: &libc::cpu_set_t) -> Vec<usize> {
    // SAFETY: CPU_ISSET only reads inside the set for i < SET_CPUS.
    (0..SET_CPUS)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, set) })
        .collect()
}

/// The CPUs the calling thread may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    Ok(cpus_of(&current()?))
}

/// Where a progress thread may run.
///
/// A launcher that binds ranks (`mpiexec --bind-to core`, `ptlrun
/// --cpu-bind core`, `ptl-bench`) pins each rank to one CPU, and every
/// thread the rank starts inherits that CPU. A progress thread that
/// inherits it moves every arriving byte on the core its application
/// computes on: the data move *beside* the computation only in the
/// scheduler's bookkeeping, not in time. Allowed onto the other CPUs the
/// launcher gave out, it runs where a core is idle (the kernel places a
/// woken thread on an idle CPU of its set), most often the one whose rank
/// waits for the transfer. See docs/ARCHITECTURE.md, "Where the progress
/// thread runs".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ProgressCpus {
    /// The CPUs the launcher gave out: the parent process's affinity
    /// (`ptlrun`, `prted`, `hydra_pmi_proxy` or `slurmstepd` keep the whole
    /// set and pin each child), when it holds every CPU this thread may
    /// use; else this thread's own, as [`ProgressCpus::Rank`]. A
    /// `taskset` around the launcher therefore still confines the job.
    #[default]
    Launcher,
    /// The application's CPUs, inherited: on a bound rank its one core.
    Rank,
    /// These CPUs (the kernel keeps only those the process's cpuset
    /// allows).
    List(Vec<usize>),
}

impl ProgressCpus {
    /// Parse `launcher`, `rank` or a CPU list such as `0-3,8`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "launcher" | "auto" => Ok(Self::Launcher),
            "rank" => Ok(Self::Rank),
            list => parse_cpu_list(list).map(Self::List).ok_or_else(|| {
                format!("{text:?}: expected launcher, rank or a CPU list such as 0-3,8")
            }),
        }
    }

    /// Allow the calling thread onto these CPUs. `Ok(Some(cpus))`: where it
    /// may run now; `Ok(None)`: nothing to change (it keeps its CPUs).
    pub fn apply(&self) -> io::Result<Option<Vec<usize>>> {
        let own = allowed_cpus()?;
        let want = match self {
            Self::Rank => return Ok(None),
            Self::Launcher => match parent_cpus() {
                Some(parent)
                    if parent.len() > own.len() && own.iter().all(|c| parent.contains(c)) =>
                {
                    parent
                }
                _ => return Ok(None),
            },
            Self::List(cpus) => cpus.clone(),
        };
        set(&set_of(&want))?;
        allowed_cpus().map(Some)
    }
}

impl std::fmt::Display for ProgressCpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Launcher => f.write_str("launcher"),
            Self::Rank => f.write_str("rank"),
            Self::List(cpus) => {
                let parts: Vec<String> = cpus.iter().map(usize::to_string).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

/// The CPUs of a list in the kernel's format (`0-3,8,10-11`), sorted and
/// without duplicates; `None` if it is malformed, empty or names a CPU a
/// `cpu_set_t` cannot hold.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
            None => {
                let c: usize = part.trim().parse().ok()?;
                (c, c)
            }
        };
        if lo > hi || hi >= SET_CPUS {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// The parent process's CPUs (`Cpus_allowed_list` of
/// `/proc/PPID/status`), if it can be read. A process is free to read
/// its parent's status; a parent that exited leaves us a reaper's, which
/// the caller's subset check handles like any other.
pub fn parent_cpus() -> Option<Vec<usize>> {
    // SAFETY: getppid has no preconditions and cannot fail.
    let ppid = unsafe { libc::getppid() };
    let status = std::fs::read_to_string(format!("/proc/{ppid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_allowed_cpu_reports_just_that_cpu() {
        let before = allowed_cpus().expect("affinity");
        assert!(!before.is_empty());
        let last = *before.last().expect("a CPU");
        std::thread::spawn(move || {
            set(&single_cpu(last)).expect("pin");
            assert_eq!(allowed_cpus().expect("affinity"), vec![last]);
            // Its children inherit the placement.
            let inner = std::thread::spawn(|| allowed_cpus().expect("affinity"));
            assert_eq!(inner.join().expect("thread"), vec![last]);
        })
        .join()
        .expect("thread");
        assert_eq!(
            allowed_cpus().expect("affinity"),
            before,
            "only that thread moved"
        );
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them_and_bad_ones_are_refused() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(" 5 "), Some(vec![5]));
        assert_eq!(parse_cpu_list("2,1,1-2"), Some(vec![1, 2]));
        for bad in ["", "a", "3-1", "1,,2", "0-", &format!("{SET_CPUS}")] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn progress_cpus_parse_and_print_round_trip_and_a_bad_value_is_named() {
        for text in ["launcher", "rank", "0,2,3"] {
            let p = ProgressCpus::parse(text).expect("parses");
            assert_eq!(p.to_string(), text);
        }
        assert_eq!(ProgressCpus::parse("auto"), Ok(ProgressCpus::Launcher));
        assert_eq!(
            ProgressCpus::parse("0-2"),
            Ok(ProgressCpus::List(vec![0, 1, 2]))
        );
        let err = ProgressCpus::parse("cores").expect_err("refused");
        assert!(
            err.contains("\"cores\"") && err.contains("CPU list"),
            "{err}"
        );
    }

    #[test]
    fn a_progress_thread_leaves_its_pinned_rank_for_the_launchers_cpus() {
        // This process plays the rank, its parent (the test runner) the
        // launcher: a thread pinned to one CPU, as a bound rank's threads
        // are, widens to the parent's set, and only where asked to.
        let Some(parent) = parent_cpus() else {
            panic!("the parent's status is readable on Linux");
        };
        if parent.len() < 2 {
            eprintln!("skipped: the test runner may use one CPU only ({parent:?})");
            return;
        }
        let pinned = parent[parent.len() - 1];
        std::thread::spawn(move || {
            set(&single_cpu(pinned)).expect("pin");
            assert_eq!(ProgressCpus::Rank.apply().expect("rank"), None);
            assert_eq!(allowed_cpus().expect("affinity"), vec![pinned]);
            let widened = ProgressCpus::Launcher.apply().expect("launcher");
            assert_eq!(widened.as_deref(), Some(&parent[..]));
            assert_eq!(allowed_cpus().expect("affinity"), parent);
            let first = ProgressCpus::List(vec![parent[0]]).apply().expect("list");
            assert_eq!(first, Some(vec![parent[0]]));
            // Already on the launcher's set (or beyond it): nothing to do.
            set(&single_cpu(pinned)).expect("pin");
            ProgressCpus::Launcher.apply().expect("launcher");
            assert_eq!(ProgressCpus::Launcher.apply().expect("again"), None);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_set_lists_its_cpus() {
        assert_eq!(cpus_of(&single_cpu(3)), vec![3]);
        assert!(cpus_of(&single_cpu(1 << 20)).is_empty(), "out of range");
    }
}
