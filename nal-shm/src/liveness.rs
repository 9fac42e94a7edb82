//! Is a peer process still alive? A pidfd (`pidfd_open`) becomes readable
//! when its process exits, and names that process even if its pid is
//! reused; where pidfds are unavailable, `kill(pid, 0)` failing with
//! `ESRCH` says the pid is gone.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A watch on one process.
#[derive(Debug)]
pub struct Watch {
    pid: u32,
    fd: Option<OwnedFd>,
}

impl Watch {
    /// Watch `pid`. Returns `None` if it is already gone.
    pub fn new(pid: u32) -> Option<Watch> {
        // SAFETY: plain system call with integer arguments.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if r >= 0 {
            // SAFETY: a fresh descriptor that we now own.
            let fd = unsafe { OwnedFd::from_raw_fd(r as i32) };
            return Some(Watch { pid, fd: Some(fd) });
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return None;
        }
        let w = Watch { pid, fd: None };
        w.alive().then_some(w)
    }

    /// True unless the process has exited.
    pub fn alive(&self) -> bool {
        match &self.fd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, zero timeout.
                let n = unsafe { libc::poll(&mut p, 1, 0) };
                !(n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
            }
            None => {
                // SAFETY: signal 0 only checks for existence.
                let r = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
                !(r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_alive_until_it_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let w = Watch::new(child.id()).expect("watch");
        assert!(w.alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!w.alive());
        assert!(Watch::new(std::process::id()).unwrap().alive());
    }
}
