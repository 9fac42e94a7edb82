//! CPU placement: which CPUs this process may use, and pinning the calling
//! thread (and the threads it starts afterwards) to one of them, like MPI
//! launchers' `--bind-to core`.

use std::io;

/// A set holding only `cpu`.
pub(crate) fn single_cpu(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is valid;
    // CPU_SET only writes inside it (it ignores out-of-range CPUs).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    }
}

/// The calling thread's affinity.
pub(crate) fn current_affinity() -> io::Result<libc::cpu_set_t> {
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

/// Set the calling thread's affinity.
pub(crate) fn set_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid, initialised cpu_set_t.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs the calling thread may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let allowed = current_affinity()?;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads inside the set for i < max.
    Ok((0..max)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &allowed) })
        .collect())
}

/// Pin the calling thread to the `index`-th allowed CPU (modulo their
/// number); threads it starts later inherit the placement. Returns the CPU,
/// or `None` (and changes nothing) when fewer than two CPUs are allowed.
pub fn bind_to_nth(index: usize) -> io::Result<Option<usize>> {
    let cpus = allowed_cpus()?;
    if cpus.len() < 2 {
        return Ok(None);
    }
    let cpu = cpus[index % cpus.len()];
    set_affinity(&single_cpu(cpu))?;
    Ok(Some(cpu))
}

/// Context switches of this process so far, voluntary and involuntary, all
/// its threads together (`getrusage(RUSAGE_SELF)`): how often a benchmark's
/// progress machinery took its core away (issue 22 counts them per message
/// beside the COMB figures). 0 if the kernel does not say.
pub(crate) fn context_switches() -> u64 {
    // SAFETY: all-zero is a valid rusage, and the kernel writes at most one
    // rusage into it.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return 0;
        }
        ru
    };
    u64::try_from(ru.ru_nvcsw).unwrap_or(0) + u64::try_from(ru.ru_nivcsw).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_a_thread() {
        let before = allowed_cpus().expect("affinity");
        assert!(!before.is_empty());
        std::thread::spawn(move || {
            if let Some(cpu) = bind_to_nth(1).expect("bind") {
                assert_eq!(allowed_cpus().expect("affinity"), vec![cpu]);
                assert!(before.contains(&cpu));
            }
        })
        .join()
        .expect("thread");
    }
}
