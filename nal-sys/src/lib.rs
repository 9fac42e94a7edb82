//! # nal-sys
//!
//! The operating-system layer of the portals transports, all in one place:
//! an eventfd, an edge-triggered readiness poller with two back ends
//! (epoll, io_uring multishot poll), and batched datagram I/O
//! ([`batch`]: `recvmmsg`/`sendmmsg`), and the hand-over of the sockets
//! between a progress thread and waiting application threads ([`gate`]),
//! and CPU placement ([`affinity`]).
//!
//! Both back ends report *edges* (new readiness), so the caller must read or
//! write until `EAGAIN`, or remember that it stopped early. One `Poller` is
//! used by one thread at a time for waiting (`poll` takes a lock), while any
//! thread may register, deregister or wake it.

#![warn(missing_docs)]

pub mod affinity;
pub mod batch;
pub mod gate;
pub mod sched;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

/// Which kernel interface the progress thread waits in.
///
/// Application threads that wait inside the library always use epoll:
/// io_uring completes requests as task work of the thread that submitted
/// them, so a ring shared with application threads would interrupt their
/// own system calls or stall until they enter it. The io_uring ring is
/// created and driven by the progress thread alone (single issuer, deferred
/// task running). A transport without a progress thread therefore behaves
/// the same on both back ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// `epoll` in edge-triggered mode.
    #[default]
    Epoll,
    /// `io_uring` with multishot `POLL_ADD` requests.
    IoUring,
}

/// Who drives the sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// A progress thread per interface, plus the application thread while it
    /// waits inside the library.
    #[default]
    Thread,
    /// No thread: progress only inside library calls.
    Poll,
}

/// A Linux eventfd used to interrupt a blocked poll.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions; we check the
        // result before wrapping the descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Make the eventfd readable (increments its counter).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor. A
        // failure (counter overflow) means it is already readable.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Consume pending signals.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN when empty.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// One readiness report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// The token the descriptor was registered with.
    pub token: u64,
    /// Data (or a hang-up) to read.
    pub readable: bool,
    /// Room to write.
    pub writable: bool,
    /// Hang-up or error: the connection is finished.
    pub closed: bool,
    /// The peer sent its last byte (`RDHUP`, or a hang-up or error): read
    /// until end of file. A reader that skips its confirming read after a
    /// short one (the edge of later data would wake it) must not skip it
    /// now — the end of file may have come with this very edge, and no
    /// other will follow.
    pub peer_done: bool,
}

/// The token the poller uses for its own wake-up eventfd.
const WAKE: u64 = u64::MAX;

/// An edge-triggered poller plus its wake-up eventfd.
pub struct Poller {
    imp: Imp,
    wake: EventFd,
    /// A wake-up no blocking poll has seen yet: the next one returns at
    /// once.
    pending: AtomicBool,
    /// A thread blocks (or is about to) in this poller. Only then does
    /// [`Poller::wake`] write the eventfd: a wake-up nobody sleeps through
    /// costs an atomic store instead of a `write` here and a `read` in the
    /// next poll.
    blocking: AtomicBool,
}

enum Imp {
    Epoll(Epoll),
    Uring(Box<Uring>),
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = match self.imp {
            Imp::Epoll(_) => "epoll",
            Imp::Uring(_) => "io_uring",
        };
        write!(f, "Poller({b})")
    }
}

impl Poller {
    /// A poller on `backend`.
    pub fn new(backend: Backend) -> io::Result<Self> {
        let imp = match backend {
            Backend::Epoll => Imp::Epoll(Epoll::new()?),
            Backend::IoUring => Imp::Uring(Box::new(Uring::new()?)),
        };
        let p = Poller {
            imp,
            wake: EventFd::new()?,
            pending: AtomicBool::new(false),
            blocking: AtomicBool::new(false),
        };
        p.add(p.wake.fd(), WAKE, true, false)?;
        Ok(p)
    }

    /// Register a descriptor for read (and optionally write) edges. The
    /// token must not be `u64::MAX` or `u64::MAX - 1` (reserved).
    pub fn register(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        debug_assert_ne!(token, WAKE);
        self.add(fd, token, true, write)
    }

    fn add(&self, fd: RawFd, token: u64, read: bool, write: bool) -> io::Result<()> {
        match &self.imp {
            Imp::Epoll(e) => e.add(fd, token, read, write),
            Imp::Uring(u) => u.add(fd, token, read, write),
        }
    }

    /// Stop reporting `fd`. Stale reports for `token` may still arrive; the
    /// caller must ignore tokens it no longer knows.
    pub fn deregister(&self, fd: RawFd, token: u64) {
        match &self.imp {
            Imp::Epoll(e) => e.delete(fd),
            Imp::Uring(u) => u.delete(token),
        }
    }

    /// Interrupt a blocked `poll` (or make the next blocking one return at
    /// once).
    pub fn wake(&self) {
        // SeqCst against `poll`: either the blocking thread sees `pending`,
        // or this sees `blocking` and interrupts it.
        self.pending.store(true, Ordering::SeqCst);
        if self.blocking.load(Ordering::SeqCst) {
            self.wake.signal();
        }
    }

    /// Collect readiness into `out` (cleared first). With `timeout` = `None`
    /// it never blocks and gives up (returns `Ok(false)`) if another thread
    /// is polling; with a timeout it waits for the lock and then blocks until
    /// an event, a wake-up, or the timeout.
    pub fn poll(&self, out: &mut Vec<Ready>, timeout: Option<Duration>) -> io::Result<bool> {
        out.clear();
        let guard = match timeout {
            None => match self.lock().try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return Ok(false),
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            },
            Some(_) => self.lock().lock().unwrap_or_else(|p| p.into_inner()),
        };
        let mut timeout = timeout;
        let blocks = timeout.is_some();
        if blocks {
            self.blocking.store(true, Ordering::SeqCst);
            if self.pending.swap(false, Ordering::SeqCst) {
                timeout = None;
            }
        }
        let mut _g = guard;
        let r = match &self.imp {
            Imp::Epoll(e) => e.wait(out, timeout),
            Imp::Uring(u) => u.wait(out, timeout),
        };
        if blocks {
            self.blocking.store(false, Ordering::SeqCst);
        }
        r?;
        if let Some(i) = out.iter().position(|r| r.token == WAKE) {
            out.swap_remove(i);
            self.wake.drain();
        }
        Ok(true)
    }

    /// A descriptor that is readable while this poller has readiness to
    /// report (its epoll descriptor), for a thread that waits on it beside
    /// other descriptors with `poll(2)` and then calls [`Poller::poll`]
    /// without a timeout. `None` for io_uring, whose completions do not
    /// make a descriptor readable without a registered eventfd.
    pub fn wait_fd(&self) -> Option<RawFd> {
        match &self.imp {
            Imp::Epoll(e) => Some(e.fd.as_raw_fd()),
            Imp::Uring(_) => None,
        }
    }

    fn lock(&self) -> &Mutex<()> {
        match &self.imp {
            Imp::Epoll(e) => &e.lock,
            Imp::Uring(u) => &u.lock,
        }
    }
}

// ----- epoll -----------------------------------------------------------------

struct Epoll {
    fd: OwnedFd,
    /// Held by the polling thread.
    lock: Mutex<()>,
}

/// `epoll_pwait2` is missing (kernel before 5.11): fall back to
/// `epoll_wait`.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// `epoll_wait` with a timeout in nanoseconds where the kernel has
/// `epoll_pwait2`. `epoll_wait` counts in milliseconds, so a protocol timer
/// due in 200 µs (a delayed ack, a tail loss probe) would fire after a full
/// millisecond: five times late, and every loss recovered by such a timer
/// costs that much. Returns what `epoll_wait` returns.
fn epoll_wait_precise(
    epfd: RawFd,
    evs: &mut [libc::epoll_event],
    timeout: Option<Duration>,
) -> libc::c_int {
    let max = evs.len().min(i32::MAX as usize) as libc::c_int;
    if let Some(t) = timeout {
        if !t.is_zero() && !NO_PWAIT2.load(Ordering::Relaxed) {
            let ts = libc::timespec {
                tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
            };
            // SAFETY: `evs` has room for `max` events; `ts` outlives the
            // call; a null signal mask means "leave it alone", like
            // `epoll_wait`. Called through `syscall` so that an older C
            // library without the wrapper still links.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    epfd,
                    evs.as_mut_ptr(),
                    max,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS) {
                return n as libc::c_int;
            }
            NO_PWAIT2.store(true, Ordering::Relaxed);
        }
    }
    let ms = match timeout {
        None => 0,
        Some(t) => t.as_millis().clamp(1, i32::MAX as u128) as libc::c_int,
    };
    // SAFETY: `evs` has room for `max` events.
    unsafe { libc::epoll_wait(epfd, evs.as_mut_ptr(), max, ms) }
}

impl Epoll {
    fn new() -> io::Result<Self> {
        // SAFETY: no preconditions; result checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: fresh descriptor owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            lock: Mutex::new(()),
        })
    }

    fn add(&self, fd: RawFd, token: u64, read: bool, write: bool) -> io::Result<()> {
        let mut flags = libc::EPOLLRDHUP as u32;
        if token != WAKE {
            flags |= libc::EPOLLET as u32;
        }
        if read {
            flags |= libc::EPOLLIN as u32;
        }
        if write {
            flags |= libc::EPOLLOUT as u32;
        }
        let mut ev = libc::epoll_event {
            events: flags,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn delete(&self, fd: RawFd) {
        // SAFETY: DEL ignores the event argument on modern kernels; passing a
        // valid pointer keeps old ones happy. Errors (already gone) are moot.
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        let _ = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    fn wait(&self, out: &mut Vec<Ready>, timeout: Option<Duration>) -> io::Result<()> {
        const N: usize = 64;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; N];
        let n = epoll_wait_precise(self.fd.as_raw_fd(), &mut evs, timeout);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e);
        }
        for ev in &evs[..n as usize] {
            let f = ev.events;
            out.push(Ready {
                token: ev.u64,
                readable: f
                    & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32
                    != 0,
                writable: f & libc::EPOLLOUT as u32 != 0,
                closed: f & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0,
                peer_done: f & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0,
            });
        }
        Ok(())
    }
}

// ----- io_uring ----------------------------------------------------------------

/// io_uring completes a request as task work of the thread that *submitted*
/// it: an application thread that submitted a poll would be interrupted
/// (`EINTR` in its own system calls) or, with deferred task running, would
/// have to enter the ring for anything to complete. So the ring belongs to
/// one thread, the first that polls it (the progress thread): it creates the
/// ring as single-issuer with deferred task running, and it alone submits.
/// Other threads queue registrations and wake it.
struct Uring {
    ring: std::sync::OnceLock<io_uring::IoUring>,
    /// Registrations queued by any thread, applied by the owner.
    cmds: Mutex<Vec<Cmd>>,
    /// Owner-side state (behind the poll lock in practice).
    live: Mutex<std::collections::HashMap<u64, (RawFd, u32)>>,
    /// Held by the owner while polling.
    lock: Mutex<()>,
}

enum Cmd {
    Add { fd: RawFd, token: u64, mask: u32 },
    Remove { token: u64 },
}

/// user_data of POLL_REMOVE completions, which carry no readiness.
const REMOVED: u64 = WAKE - 1;

impl Uring {
    fn new() -> io::Result<Self> {
        Ok(Uring {
            ring: std::sync::OnceLock::new(),
            cmds: Mutex::new(Vec::new()),
            live: Mutex::new(std::collections::HashMap::new()),
            lock: Mutex::new(()),
        })
    }

    fn build() -> io::Result<io_uring::IoUring> {
        io_uring::IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(256)
            // Kernels before 6.1 lack deferred task running; the ring is
            // still only ever used by its owner thread.
            .or_else(|_| io_uring::IoUring::new(256))
    }

    fn add(&self, fd: RawFd, token: u64, read: bool, write: bool) -> io::Result<()> {
        let mut mask = libc::POLLRDHUP as u32;
        if read {
            mask |= libc::POLLIN as u32;
        }
        if write {
            mask |= libc::POLLOUT as u32;
        }
        self.cmds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Cmd::Add { fd, token, mask });
        Ok(())
    }

    fn delete(&self, token: u64) {
        self.cmds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Cmd::Remove { token });
    }

    fn push(ring: &io_uring::IoUring, entry: io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: only the owner thread, holding the poll lock, touches
            // the submission queue.
            let mut sq = unsafe { ring.submission_shared() };
            // SAFETY: POLL_ADD and POLL_REMOVE name descriptors and user
            // data only; the kernel reads no caller memory.
            if unsafe { sq.push(&entry) }.is_ok() {
                sq.sync();
                return Ok(());
            }
            drop(sq);
            ring.submitter().submit()?;
        }
    }

    fn poll_entry(fd: RawFd, token: u64, mask: u32) -> io_uring::squeue::Entry {
        io_uring::opcode::PollAdd::new(io_uring::types::Fd(fd), mask)
            .multi(true)
            .build()
            .user_data(token)
    }

    fn wait(&self, out: &mut Vec<Ready>, timeout: Option<Duration>) -> io::Result<()> {
        let ring = match self.ring.get() {
            Some(r) => r,
            None => {
                let r = Self::build()?;
                self.ring.get_or_init(|| r)
            }
        };
        let cmds = std::mem::take(&mut *self.cmds.lock().unwrap_or_else(|p| p.into_inner()));
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        for c in cmds {
            match c {
                Cmd::Add { fd, token, mask } => {
                    live.insert(token, (fd, mask));
                    Self::push(ring, Self::poll_entry(fd, token, mask))?;
                }
                Cmd::Remove { token } => {
                    if live.remove(&token).is_some() {
                        let e = io_uring::opcode::PollRemove::new(token)
                            .build()
                            .user_data(REMOVED);
                        Self::push(ring, e)?;
                    }
                }
            }
        }
        let ts;
        let r = match timeout {
            None => ring.submitter().submit_and_wait(0),
            Some(t) => {
                ts = io_uring::types::Timespec::new()
                    .sec(t.as_secs())
                    .nsec(t.subsec_nanos());
                let args = io_uring::types::SubmitArgs::new().timespec(&ts);
                ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let mut rearm = Vec::new();
        {
            // SAFETY: only the owner, holding the poll lock, reaps.
            let cq = unsafe { ring.completion_shared() };
            for cqe in cq {
                let token = cqe.user_data();
                if token == REMOVED {
                    continue;
                }
                let res = cqe.result();
                if !io_uring::cqueue::more(cqe.flags()) {
                    rearm.push(token);
                }
                if res < 0 {
                    // -ECANCELED after a removal; any other error: let the
                    // owner of the descriptor look and find out.
                    if res != -libc::ECANCELED {
                        out.push(Ready {
                            token,
                            readable: true,
                            writable: true,
                            closed: false,
                            // Unknown: read to the end to find out.
                            peer_done: true,
                        });
                    }
                    continue;
                }
                let m = res as u32;
                out.push(Ready {
                    token,
                    readable: m
                        & (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as u32
                        != 0,
                    writable: m & libc::POLLOUT as u32 != 0,
                    closed: m & (libc::POLLHUP | libc::POLLERR) as u32 != 0,
                    peer_done: m & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as u32 != 0,
                });
            }
        }
        for token in rearm {
            if let Some(&(fd, mask)) = live.get(&token) {
                Self::push(ring, Self::poll_entry(fd, token, mask))?;
            }
        }
        Ok(())
    }
}

// ----- socket buffers ------------------------------------------------------------

/// Ask for `recv` and `send` bytes of kernel socket buffer on `fd`, past the
/// `net.core.rmem_max`/`wmem_max` limits when the process may
/// (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` need `CAP_NET_ADMIN`), within them
/// otherwise. Returns the sizes granted as the kernel reports them (Linux
/// reports twice the request: the other half pays for its bookkeeping).
pub fn request_socket_buffers(fd: RawFd, recv: usize, send: usize) -> io::Result<(usize, usize)> {
    fn set(fd: RawFd, opt: libc::c_int, v: usize) -> bool {
        let v = v.min(i32::MAX as usize) as libc::c_int;
        // SAFETY: passes a pointer to a live c_int and its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        r == 0
    }
    fn get(fd: RawFd, opt: libc::c_int) -> io::Result<usize> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into the live c_int.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(v.max(0) as usize)
    }
    for (force, plain, want) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, recv),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, send),
    ] {
        if want > 0 && !set(fd, force, want) && !set(fd, plain, want) {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((get(fd, libc::SO_RCVBUF)?, get(fd, libc::SO_SNDBUF)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    const BACKENDS: [Backend; 2] = [Backend::Epoll, Backend::IoUring];

    /// Whether the poller's eventfd holds a wake-up (read without blocking).
    fn eventfd_signalled(p: &Poller) -> bool {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from a non-blocking eventfd.
        let n = unsafe { libc::read(p.wake.fd(), (&mut v as *mut u64).cast(), 8) };
        n == 8
    }

    #[test]
    fn a_wake_before_a_blocking_poll_makes_it_return_at_once() {
        for b in BACKENDS {
            let p = Poller::new(b).expect("poller");
            let mut out = Vec::new();
            p.wake();
            assert!(p.poll(&mut out, None).expect("poll"), "{b:?}");
            let t0 = Instant::now();
            assert!(p
                .poll(&mut out, Some(Duration::from_secs(20)))
                .expect("poll"));
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{b:?}: the wake was lost"
            );
        }
    }

    #[test]
    fn a_wake_nobody_sleeps_through_does_not_touch_the_eventfd() {
        for b in BACKENDS {
            let p = Poller::new(b).expect("poller");
            p.wake();
            p.wake();
            assert!(
                !eventfd_signalled(&p),
                "{b:?}: wrote the eventfd for nobody"
            );
        }
    }

    #[test]
    fn a_wake_interrupts_a_blocked_poll() {
        for b in BACKENDS {
            let p = Arc::new(Poller::new(b).expect("poller"));
            let sleeper = {
                let p = p.clone();
                std::thread::spawn(move || {
                    let t0 = Instant::now();
                    let mut out = Vec::new();
                    p.poll(&mut out, Some(Duration::from_secs(20)))
                        .expect("poll");
                    (t0.elapsed(), out.len())
                })
            };
            let t0 = Instant::now();
            while !p.blocking.load(Ordering::SeqCst) {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "{b:?}: never blocked"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            // Give it time to enter the kernel: a wake before that is
            // caught by `pending` instead, which this test is not about.
            std::thread::sleep(Duration::from_millis(20));
            p.wake();
            let (took, events) = sleeper.join().expect("sleeper");
            assert!(took < Duration::from_secs(10), "{b:?}: slept {took:?}");
            assert_eq!(events, 0, "{b:?}: the wake-up is not a readiness event");
        }
    }
}
