//! The `/dev/shm` names this process created and has not unlinked yet,
//! removed when the process exits.
//!
//! An inbox's name lives until every peer has mapped it, and a shared
//! window's until its ranks have; a process that leaves before then
//! through `exit` (`std::process::exit`, `MPI_Abort`, a failed start-up
//! that ends the program) never runs the drop that would unlink it, and the
//! name would stay in `/dev/shm` until reboot. An `atexit` handler removes
//! what is still listed. A process killed by a signal runs no handler:
//! `ptlrun` sweeps its ranks' inbox names when the job ends, and a peer
//! that sees the process die unlinks its name (`Inner::reap_failures`).

use std::ffi::{CStr, CString};
use std::sync::{Mutex, Once, TryLockError};

/// The names, each with the pid of the process that created it: a child
/// made by `fork` inherits the list and the handler, and must not remove
/// its parent's names when it exits.
static LINKED: Mutex<Vec<(u32, CString)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Remember `name`, just created by this process, until [`forget`].
pub(crate) fn track(name: &CStr) {
    HOOK.call_once(|| {
        // SAFETY: registers a function with C linkage that takes nothing
        // and never unwinds; it runs once, in `exit`.
        unsafe { libc::atexit(unlink_at_exit) };
    });
    LINKED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((std::process::id(), name.to_owned()));
}

/// `name` was unlinked (by us or by a peer: a name is only ever unlinked
/// once it need not be opened again).
pub(crate) fn forget(name: &CStr) {
    LINKED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(_, n)| n.as_c_str() != name);
}

/// Whether `name` is still listed (tests).
#[cfg(test)]
pub(crate) fn tracked(name: &CStr) -> bool {
    LINKED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|(_, n)| n.as_c_str() == name)
}

extern "C" fn unlink_at_exit() {
    // Another thread may hold the lock while this one exits (and will never
    // release it): leave the names rather than deadlock the exit.
    let mut names = match LINKED.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    let me = std::process::id();
    for (pid, n) in names.drain(..) {
        if pid == me {
            // SAFETY: a NUL-terminated name.
            unsafe { libc::shm_unlink(n.as_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{inbox_name, Segment};
    use portals::ProcessId;
    use std::process::Command;

    const CHILD: &str = "NAL_SHM_NAMES_TEST_CHILD";

    /// Run as a child of the test below: create an inbox and leave through
    /// `exit` without dropping it.
    fn child() -> ! {
        let name = inbox_name(7, std::process::id(), 0x5eed);
        let seg = match Segment::create(name.clone(), 7, 4096, &[(ProcessId::new(0, 1), 1)]) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("create: {e}");
                std::process::exit(2)
            }
        };
        println!("created {}", name.to_string_lossy());
        // A forked child that exits must leave its parent's name alone.
        // SAFETY: the child calls only `exit`, which runs the handler.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the forked child.
            unsafe { libc::exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made; a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let path = std::path::Path::new("/dev/shm").join(&name.to_string_lossy()[1..]);
        println!(
            "after the forked child: {}",
            if path.exists() { "present" } else { "gone" }
        );
        std::mem::forget(seg);
        std::process::exit(0)
    }

    #[test]
    fn a_process_that_exits_without_dropping_its_inbox_leaves_no_name_but_its_forked_child_does_not_remove_it(
    ) {
        if std::env::var_os(CHILD).is_some() {
            child();
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = Command::new(exe)
            .args([
                "--exact",
                "names::tests::a_process_that_exits_without_dropping_its_inbox_leaves_no_name_but_its_forked_child_does_not_remove_it",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {:?} {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let name = stdout
            .lines()
            .find_map(|l| l.split_once("created /").map(|(_, n)| n.trim()))
            .expect("the child names its inbox");
        assert!(
            stdout.contains("after the forked child: present"),
            "a forked child's exit removed its parent's name: {stdout}"
        );
        let path = std::path::Path::new("/dev/shm").join(name);
        let left = path.exists();
        if left {
            let _ = std::fs::remove_file(&path);
        }
        assert!(
            !left,
            "{name} is still in /dev/shm after its creator exited"
        );
    }

    #[test]
    fn unlinking_a_name_forgets_it() {
        let name = inbox_name(8, std::process::id(), 0xf0f0);
        let seg =
            Segment::create(name.clone(), 8, 4096, &[(ProcessId::new(0, 1), 1)]).expect("create");
        assert!(tracked(&name));
        crate::segment::unlink(&name);
        assert!(!tracked(&name));
        drop(seg);
    }
}
