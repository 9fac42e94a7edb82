//! CPU placement: which CPUs this process may use, and pinning the calling
//! thread (and the threads it starts afterwards) to one of them, like MPI
//! launchers' `--bind-to core`.

use std::io;

pub(crate) use nal_sys::affinity::{
    allowed_cpus, current as current_affinity, set as set_affinity, single_cpu,
};

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
    fn the_index_wraps_round_the_allowed_cpus() {
        let allowed = allowed_cpus().expect("affinity");
        // A thread of its own: the binding stays with it.
        std::thread::scope(|s| {
            s.spawn(|| match bind_to_nth(allowed.len()).expect("bind") {
                Some(cpu) => {
                    assert_eq!(cpu, allowed[0], "index len is index 0 again");
                    assert_eq!(allowed_cpus().expect("affinity"), vec![cpu]);
                }
                None => assert!(allowed.len() < 2, "unbound with {allowed:?}"),
            });
        });
    }
}
