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
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is valid;
    // CPU_SET writes inside it for cpu < SET_CPUS.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < SET_CPUS {
            libc::CPU_SET(cpu, &mut set);
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
    fn a_set_lists_its_cpus() {
        assert_eq!(cpus_of(&single_cpu(3)), vec![3]);
        assert!(cpus_of(&single_cpu(1 << 20)).is_empty(), "out of range");
    }
}
