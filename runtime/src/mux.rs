//! One network interface over two transports: shared memory to the ranks
//! of this host, a network transport (TCP) to the rest.
//!
//! [`MuxNal`] routes each message by its destination and passes every
//! other call to both transports. Each transport keeps its own progress
//! thread (both stand aside while an application thread waits in the
//! library, as each does alone). What needs care is the blocking wait: the
//! waiting thread must wake for whichever transport has work, so it waits
//! in `ppoll(2)` on both transports' descriptors ([`Nal::wait_fd`], after
//! [`Nal::arm_wait`]) and on an eventfd of its own that the interface's
//! wake-ups signal. The mux installs the interface's waker before either
//! transport starts, so theirs (installed later) never run: every wake-up
//! of the interface comes here.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nal_sys::EventFd;
use portals::{Nal, NiCore, Outbound, ProcessId, PtlError};

/// The interface's wake-up: a sticky flag, and an eventfd written only
/// while a thread blocks (a wake-up nobody sleeps through costs a store).
#[derive(Debug)]
pub struct MuxWake {
    fd: EventFd,
    pending: AtomicBool,
    blocking: AtomicBool,
}

impl MuxWake {
    /// A fresh one.
    pub fn new() -> std::io::Result<Arc<MuxWake>> {
        Ok(Arc::new(MuxWake {
            fd: EventFd::new()?,
            pending: AtomicBool::new(false),
            blocking: AtomicBool::new(false),
        }))
    }

    /// Install this as `core`'s waker. Must run before the transports
    /// start, so that theirs are refused.
    pub fn install(self: &Arc<Self>, core: &NiCore) {
        let w = self.clone();
        core.set_waker(Box::new(move || w.wake()));
    }

    fn wake(&self) {
        // SeqCst against `MuxNal::block`: either the blocking thread sees
        // `pending`, or this sees `blocking` and writes the eventfd.
        self.pending.store(true, Ordering::SeqCst);
        if self.blocking.load(Ordering::SeqCst) {
            self.fd.signal();
        }
    }
}

/// Shared memory to some ranks, a network transport to the others.
pub struct MuxNal {
    name: &'static str,
    local: Arc<dyn Nal>,
    remote: Arc<dyn Nal>,
    /// The ids reached through `local`, sorted; every other id goes to
    /// `remote`. (A handful per host: a binary search beats hashing.)
    local_ids: Vec<ProcessId>,
    wake: Arc<MuxWake>,
}

impl std::fmt::Debug for MuxNal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxNal")
            .field("name", &self.name)
            .field("local", &self.local_ids.len())
            .finish()
    }
}

impl MuxNal {
    /// Compose `local` (reaching the processes `local_ids`) and `remote`
    /// (the others) under the name `name` ("shm+tcp"). `wake` must be the
    /// one installed in the interface's core before the two started. Both
    /// must offer a [`Nal::wait_fd`].
    pub fn new(
        name: &'static str,
        local: Arc<dyn Nal>,
        remote: Arc<dyn Nal>,
        mut local_ids: Vec<ProcessId>,
        wake: Arc<MuxWake>,
    ) -> Result<MuxNal, PtlError> {
        local_ids.sort_unstable();
        local_ids.dedup();
        if local.wait_fd().is_none() || remote.wait_fd().is_none() {
            return Err(PtlError::Nal(format!(
                "{} and {} cannot be waited on together (no wait descriptor)",
                local.name(),
                remote.name()
            )));
        }
        Ok(MuxNal {
            name,
            local,
            remote,
            local_ids,
            wake,
        })
    }

    fn route(&self, id: ProcessId) -> &Arc<dyn Nal> {
        if self.local_ids.binary_search(&id).is_ok() {
            &self.local
        } else {
            &self.remote
        }
    }

    fn both(&self) -> [&Arc<dyn Nal>; 2] {
        [&self.local, &self.remote]
    }

    fn progress_now(&self) -> portals::Result<()> {
        self.local.progress(None)?;
        self.remote.progress(None)
    }

    /// Block until either transport's descriptor or the wake-up eventfd is
    /// readable, or `timeout`.
    fn block(&self, timeout: Duration) -> portals::Result<()> {
        // Each arm is followed by a disarm (see `Nal::arm_wait`); the
        // second is not armed when the first has work.
        let local = self.local.arm_wait();
        let remote = local.and_then(|_| self.remote.arm_wait());
        if let (Some(l), Some(r)) = (local, remote) {
            self.wake.blocking.store(true, Ordering::SeqCst);
            if !self.wake.pending.swap(false, Ordering::SeqCst) {
                let fds = [self.local.wait_fd(), self.remote.wait_fd()];
                wait_readable(&fds, self.wake.fd.fd(), timeout.min(l).min(r))?;
            }
            self.wake.blocking.store(false, Ordering::SeqCst);
            self.wake.fd.drain();
        }
        self.local.disarm_wait();
        if local.is_some() {
            self.remote.disarm_wait();
        }
        Ok(())
    }
}

/// `ppoll` on `fds` (those present) and `wake` for readability, at most
/// `timeout`. An interrupted wait counts as a wake-up.
fn wait_readable(fds: &[Option<RawFd>], wake: RawFd, timeout: Duration) -> portals::Result<()> {
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .flatten()
        .chain(std::iter::once(&wake))
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9, so it fits every platform's c_long.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is a live array of `set.len()` pollfd entries, `ts` a
    // live timespec; no signal mask is passed.
    let r = unsafe {
        libc::ppoll(
            set.as_mut_ptr(),
            set.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(PtlError::Nal(format!("waiting on the transports: {e}")));
        }
    }
    Ok(())
}

impl Nal for MuxNal {
    fn name(&self) -> &'static str {
        self.name
    }

    fn send(&self, msg: Outbound) {
        self.route(msg.header.dst).send(msg);
    }

    fn progress(&self, timeout: Option<Duration>) -> portals::Result<()> {
        if let Some(t) = timeout {
            self.block(t)?;
        }
        self.progress_now()
    }

    fn wake(&self) {
        self.wake.wake();
    }

    fn waiter_enter(&self) {
        for n in self.both() {
            n.waiter_enter();
        }
    }

    fn waiter_leave(&self) {
        for n in self.both() {
            n.waiter_leave();
        }
    }

    fn bulk_post_begin(&self) {
        for n in self.both() {
            n.bulk_post_begin();
        }
    }

    fn bulk_post_end(&self) {
        for n in self.both() {
            n.bulk_post_end();
        }
    }

    fn shutdown(&self) {
        for n in self.both() {
            n.shutdown();
        }
    }

    fn progresses_alone(&self) -> bool {
        self.local.progresses_alone() && self.remote.progresses_alone()
    }

    fn fence_responses(&self) {
        for n in self.both() {
            n.fence_responses();
        }
    }

    fn truncated_payload_moves(&self, to: ProcessId) -> bool {
        self.route(to).truncated_payload_moves(to)
    }

    fn peer_moving_our_data(&self) -> bool {
        self.local.peer_moving_our_data() || self.remote.peer_moving_our_data()
    }

    fn test_pass(&self) -> portals::Result<()> {
        self.local.test_pass()?;
        self.remote.test_pass()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_wake_before_the_wait_is_not_lost_and_one_during_it_ends_it() {
        let w = MuxWake::new().expect("eventfd");
        // Nobody blocks: only the flag is set.
        w.wake();
        assert!(w.pending.load(Ordering::SeqCst));
        // A thread blocking now finds it and does not sleep.
        w.blocking.store(true, Ordering::SeqCst);
        assert!(w.pending.swap(false, Ordering::SeqCst));
        // One arriving while it sleeps writes the eventfd, which ends the
        // wait long before its timeout.
        let w2 = w.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w2.wake();
        });
        let t0 = Instant::now();
        wait_readable(&[None], w.fd.fd(), Duration::from_secs(20)).expect("wait");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        waker.join().expect("waker");
    }

    #[test]
    fn a_quiet_wait_lasts_its_timeout() {
        let w = MuxWake::new().expect("eventfd");
        let t0 = Instant::now();
        wait_readable(&[None, None], w.fd.fd(), Duration::from_millis(30)).expect("wait");
        assert!(
            t0.elapsed() >= Duration::from_millis(25),
            "{:?}",
            t0.elapsed()
        );
    }
}
