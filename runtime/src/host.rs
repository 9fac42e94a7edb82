//! Which host a process runs on, as the ranks of a job compare it: ranks
//! with the same host identity reach each other through shared memory.
//!
//! The identity is the host name plus the kernel's boot id
//! (`/proc/sys/kernel/random/boot_id`): two containers or network
//! namespaces of one kernel share shared memory and can read each other's
//! memory (subject to permissions), so they count as one host whatever
//! their host names; two machines that happen to share a host name do not,
//! since their boot ids differ. `PTL_HOST_ID` overrides it, so that a test
//! can pose as two hosts on one machine (the network-namespace multi-host
//! test does), or a site can force ranks apart.

/// Overrides the host identity (any text; characters other than ASCII
/// letters, digits, `.`, `_` and `-` are replaced).
pub const HOST_ID: &str = "PTL_HOST_ID";

/// The longest identity kept (longer ones are cut).
const MAX_LEN: usize = 96;

/// This process's host identity: `PTL_HOST_ID` if set and not empty,
/// otherwise `<hostname>-<boot id>`. Made of ASCII letters, digits, `.`,
/// `_` and `-` only, so that it travels in any launcher's key-value space
/// and parses back out of a published contact.
pub fn host_id() -> String {
    host_id_from(
        std::env::var(HOST_ID).ok().as_deref(),
        hostname().as_deref(),
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .as_deref(),
    )
}

/// [`host_id`] from its inputs (for tests).
fn host_id_from(forced: Option<&str>, hostname: Option<&str>, boot_id: Option<&str>) -> String {
    if let Some(f) = forced.map(str::trim).filter(|f| !f.is_empty()) {
        return sanitize(f);
    }
    let host = hostname.map(str::trim).filter(|h| !h.is_empty());
    let boot = boot_id.map(str::trim).filter(|b| !b.is_empty());
    sanitize(&match (host, boot) {
        (Some(h), Some(b)) => format!("{h}-{b}"),
        (Some(h), None) => h.to_string(),
        (None, Some(b)) => b.to_string(),
        // Nothing to tell hosts apart: every such process counts as its
        // own host, so nothing is shared by mistake.
        (None, None) => format!("pid{}", std::process::id()),
    })
}

fn sanitize(s: &str) -> String {
    s.chars()
        .take(MAX_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The kernel's host name (of this UTS namespace), if it has one.
fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_host_name_and_boot_id_unless_forced() {
        let boot = "0d1a5a8c-6a1e-4a43-9f5e-8f0f6a4a1c2e\n";
        assert_eq!(
            host_id_from(None, Some("node7"), Some(boot)),
            "node7-0d1a5a8c-6a1e-4a43-9f5e-8f0f6a4a1c2e"
        );
        assert_eq!(
            host_id_from(Some("hostA"), Some("node7"), Some(boot)),
            "hostA"
        );
        // An empty override is no override.
        assert!(host_id_from(Some(" "), Some("node7"), Some(boot)).starts_with("node7-"));
        assert_eq!(host_id_from(None, Some("node7"), None), "node7");
    }

    #[test]
    fn identities_travel_safely() {
        let id = host_id_from(Some("a b|c,d=e;f/g"), None, None);
        assert_eq!(id, "a_b_c_d_e_f_g");
        assert_eq!(
            host_id_from(Some(&"x".repeat(500)), None, None).len(),
            MAX_LEN
        );
        let real = host_id();
        assert!(!real.is_empty());
        assert!(real
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
    }
}
