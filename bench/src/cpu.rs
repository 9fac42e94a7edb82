//! CPU placement (from `nal_sys::affinity`; the project's ranks are pinned
//! by the launcher, `portals_runtime::launch::CpuBind`), and the context
//! switches a benchmark counts.

pub(crate) use nal_sys::affinity::{
    allowed_cpus, current as current_affinity, set as set_affinity, single_cpu,
};

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
