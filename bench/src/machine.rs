//! A description of the machine a comparison ran on: CPU model and count
//! from `/proc/cpuinfo`, memory from `/proc/meminfo`, the kernel from
//! `uname`, and the versions of the compilers, MPI libraries, UCX and
//! libfabric involved.

use std::process::Command;

use serde::{Deserialize, Serialize};

/// Where a comparison ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// CPUs this process may use.
    pub cpus_allowed: usize,
    /// Memory in GiB.
    pub memory_gib: f64,
    /// `uname -srmv`.
    pub kernel: String,
    /// Host name.
    pub host: String,
    /// `rustc --version`.
    pub rustc: String,
    /// Open MPI version line, if installed.
    pub openmpi: String,
    /// MPICH version line, if installed.
    pub mpich: String,
    /// UCX version (`ucx_info -v`), if installed (absent from older results).
    #[serde(default)]
    pub ucx: String,
    /// libfabric version (`fi_info --version`), if installed (absent from
    /// older results).
    #[serde(default)]
    pub libfabric: String,
}

fn first_line_of(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_default()
}

/// The first line of `cmd args`' output that starts with `prefix`.
fn line_with(cmd: &str, args: &[&str], prefix: &str) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.trim_start().starts_with(prefix))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_default()
}

impl Machine {
    /// Describe this machine (fields that cannot be found stay empty).
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let cpus = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .map_or(0.0, |kb| (kb / (1024.0 * 1024.0) * 10.0).round() / 10.0);
        Machine {
            cpu,
            cpus,
            cpus_allowed: crate::cpu::allowed_cpus().map_or(0, |c| c.len()),
            memory_gib,
            kernel: first_line_of("uname", &["-srmv"]),
            host: first_line_of("uname", &["-n"]),
            rustc: first_line_of("rustc", &["--version"]),
            openmpi: first_line_of("mpiexec.openmpi", &["--version"]),
            mpich: first_line_of("mpichversion", &[]),
            // "# Version 1.13.1"
            ucx: first_line_of("ucx_info", &["-v"])
                .trim_start_matches('#')
                .trim()
                .trim_start_matches("Version")
                .trim()
                .to_string(),
            // "fi_info: 1.17.0" first; the library's own line is wanted.
            libfabric: line_with("fi_info", &["--version"], "libfabric:")
                .trim_start_matches("libfabric:")
                .trim()
                .to_string(),
        }
    }
}

/// The current time, UTC, ISO 8601 (from `date`; seconds since the epoch if
/// that fails).
pub fn now_utc() -> String {
    let d = first_line_of("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    if !d.is_empty() {
        return d;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| format!("{}s since 1970", d.as_secs()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_this_machine() {
        let m = Machine::detect();
        assert!(m.cpus >= 1 && m.cpus_allowed >= 1, "{m:?}");
        assert!(!m.kernel.is_empty(), "{m:?}");
        assert!(!now_utc().is_empty());
    }
}
