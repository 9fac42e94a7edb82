//! What `/proc` says about this process's threads: the tests of the
//! progress thread's priority and placement read it from inside a job.

/// One thread of this process, from `/proc/self/task/TID`.
#[derive(Clone, Debug)]
pub struct ThreadInfo {
    /// Its thread id.
    pub tid: String,
    /// Whether it is asleep (state `S`: it blocked since it last ran).
    pub asleep: bool,
    /// Its nice value.
    pub nice: Option<i32>,
    /// The CPUs it may run on (`Cpus_allowed_list`).
    pub cpus: Vec<usize>,
}

/// The threads of this process whose name starts with one of `prefixes`.
pub fn threads_named(prefixes: &[&str]) -> Vec<ThreadInfo> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in dir.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !prefixes.iter().any(|p| comm.starts_with(p)) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The name may hold spaces: fields are counted after its ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        out.push(ThreadInfo {
            tid: task.file_name().to_string_lossy().into_owned(),
            asleep: fields.first() == Some(&"S"),
            nice: fields.get(16).and_then(|f| f.parse().ok()),
            cpus: status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(nal_sys::affinity::parse_cpu_list)
                .unwrap_or_default(),
        });
    }
    out
}

/// The CPUs the process that started this one may use (a launcher's, for
/// a rank; the test runner's, for a test); none if unreadable.
pub fn parent_cpus() -> Vec<usize> {
    nal_sys::affinity::parent_cpus().unwrap_or_default()
}
