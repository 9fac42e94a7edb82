//! The doorbell: a futex word in an inbox's header that the owner's
//! sleeping threads wait on and that producers bump to wake them.
//!
//! The word lives in a shared mapping, so the futex calls are the shared
//! (not `FUTEX_PRIVATE_FLAG`) kind: the kernel keys them by the page, not
//! by this process's address space.
//!
//! The protocol makes the fast path free of system calls:
//! * a sleeper increments `sleepers`, then (SeqCst fence) reads the
//!   doorbell, then re-checks every source of work, then waits on the
//!   value it read;
//! * a producer publishes its record (the ring's `tail`), then (SeqCst
//!   fence) loads `sleepers`, and only if it is non-zero bumps the doorbell
//!   and wakes.
//!
//! Either the producer's load sees the sleeper, or the sleeper's re-check
//! sees the record (the two fences are ordered one way or the other); a
//! bump between the sleeper's read and its wait makes the wait return at
//! once (the value changed).
//!
//! A progress thread that *dozes* while its application computes (the
//! hand-back delay, `Inner::doze`) announces itself in `dozers` instead,
//! and only an [`Urgency::Work`] ring wakes it: a record it has work to do
//! for (a single-copy read, a pipelined payload, a request to answer),
//! where moving the data now is the overlap. A small message waits in the
//! ring for the application's next call, or for the end of the delay: on a
//! rank whose progress thread shares the application's core, waking for it
//! would preempt the computation (two context switches) to do what the
//! next call does anyway (issue 22). The protocol is the same with
//! `dozers` for `sleepers`; the dozer's re-check looks only for urgent
//! work ([`Urgency`] is the producer's classification, recorded nowhere
//! else), so it sleeps past small messages already in the ring. Dozers
//! wait on a futex word of their own (`doze_bell`): a wake for a sleeping
//! application thread does not reach them.
//!
//! Except while its owner has triggered operations armed (a non-blocking
//! collective under way; `dozer_armed`): then any message may be the one
//! that fires the collective's next step, which nobody else would send
//! while the application computes, so every ring wakes the dozer. The
//! owner sets the flag when a post leaves operations armed (a collective's
//! start), and the dozer sets it to what the engine holds at every doze,
//! both under the engine lock. A message published before the flag was
//! set woke nobody: the post's end looks at the rings after setting it
//! (SeqCst, against the producer's publish-then-load) and wakes the dozer
//! for what it finds.
//!
//! Nor is a dozer woken while an application thread of its process waits
//! in the library (`app_inside`): that thread drives the rings itself.
//! A producer with work for a dozer flags it (`work_unrung`) before it
//! looks for a waiter; the owner's last waiter to leave clears
//! `app_inside`, then (SeqCst) looks at the flag and wakes the dozer if it
//! is set: either the producer saw the waiter gone and rang, or the
//! leaving waiter sees the flag. So the end of a wait makes a system call
//! only when work was left unrung, and a transfer that arrives afterwards
//! goes to the progress thread at once.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::segment::Segment;

/// How much what a producer published needs its consumer's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Small messages complete in the ring: any later pass takes them.
    Message,
    /// Work only the consumer can do, and someone waits for: a single-copy
    /// payload to read, a payload pipelined through the ring, a request to
    /// answer, ring space freed for a waiting producer, a shutdown.
    Work,
}

/// Wake every thread of `seg`'s owner sleeping on its doorbell, if any
/// announced itself: on the futex, or in `poll(2)` on its doorbell socket
/// ([`Bell`]); a dozing progress thread only for [`Urgency::Work`] (for
/// any record while triggered operations are armed). Call
/// after publishing what they should see. Returns true if it made a system
/// call.
pub fn ring(seg: &Segment, urgency: Urgency) -> bool {
    let h = seg.header();
    fence(Ordering::SeqCst);
    let futex = h.sleepers.load(Ordering::Relaxed) != 0;
    // Flag, then look (SeqCst, against the leaving waiter's clear-then-
    // look in `Inner::app_left`): either we see no waiter and ring, or the
    // last waiter out sees the flag and wakes the dozer.
    // Any message is work while the owner has triggered operations armed.
    let work = urgency == Urgency::Work || h.dozer_armed.load(Ordering::Relaxed) != 0;
    let doze = work && h.dozers.load(Ordering::Relaxed) != 0 && {
        h.work_unrung.store(1, Ordering::SeqCst);
        h.app_inside.load(Ordering::SeqCst) == 0
    };
    let socket = h.fd_sleepers.load(Ordering::Relaxed) != 0;
    if futex {
        h.doorbell.fetch_add(1, Ordering::SeqCst);
        wake_all(&h.doorbell);
    }
    if doze {
        h.doze_bell.fetch_add(1, Ordering::SeqCst);
        wake_all(&h.doze_bell);
    }
    if socket {
        ring_socket(seg);
    }
    futex || doze || socket
}

/// Wake the dozing progress thread of `seg`'s owner, if it dozes. Returns
/// true if it made a system call.
pub fn wake_dozers(seg: &Segment) -> bool {
    let h = seg.header();
    fence(Ordering::SeqCst);
    if h.dozers.load(Ordering::Relaxed) == 0 {
        return false;
    }
    h.doze_bell.fetch_add(1, Ordering::SeqCst);
    wake_all(&h.doze_bell);
    true
}

/// Wake every thread of our own that sleeps on `seg` (our inbox), and the
/// dozing ones too if `dozers` says so (asked only when one dozes): a
/// wake-up the interface asked for. Returns true if it made a system call.
pub fn wake_own(seg: &Segment, dozers: impl FnOnce() -> bool) -> bool {
    let dozing = seg.header().dozers.load(Ordering::SeqCst) != 0;
    let doze = dozing && dozers() && wake_dozers(seg);
    ring(seg, Urgency::Message) || doze
}

/// One datagram to the owner's doorbell socket. Failures are fine: a full
/// socket queue is readable already, and an owner without a socket has no
/// fd sleepers to wake.
fn ring_socket(seg: &Segment) {
    static SENDER: OnceLock<Option<UnixDatagram>> = OnceLock::new();
    let sender = SENDER.get_or_init(|| {
        let s = UnixDatagram::unbound().ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    });
    if let (Some(s), Some(addr)) = (sender, seg.bell_addr()) {
        let _ = s.send_to_addr(&[1], addr);
    }
}

/// The owner's side of the socket doorbell: a datagram socket bound in the
/// abstract namespace (nothing on any file system, gone with the process)
/// at its inbox's [`Segment::bell_addr`]. A thread that waits for this
/// transport and others at once polls it.
#[derive(Debug)]
pub struct Bell(UnixDatagram);

impl Bell {
    /// Bind the doorbell socket of inbox `seg`.
    pub fn bind(seg: &Segment) -> io::Result<Bell> {
        let addr = seg.bell_addr().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "inbox name too long for a socket address",
            )
        })?;
        let s = UnixDatagram::bind_addr(addr)?;
        s.set_nonblocking(true)?;
        Ok(Bell(s))
    }

    /// The descriptor to poll.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Consume every pending ring.
    pub fn drain(&self) {
        let mut b = [0u8; 16];
        while self.0.recv(&mut b).is_ok() {}
    }
}

/// `FUTEX_WAKE` every waiter on `word`.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: a valid, aligned u32 in a live mapping; FUTEX_WAKE only reads
    // the address to find waiters.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// How a [`wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// Woken, or the word had already changed.
    Rung,
    /// The timeout passed (or a signal interrupted the wait).
    TimedOut,
}

/// `FUTEX_WAIT` on `word` while it holds `seen`, up to `timeout`.
pub fn wait(word: &AtomicU32, seen: u32, timeout: Duration) -> Woke {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a valid, aligned u32 in a live mapping and a valid timespec;
    // the kernel compares the word with `seen` atomically before sleeping.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == 0 {
        return Woke::Rung;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Woke::Rung,
        _ => Woke::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_socket_sleeper_is_rung_and_others_cost_nothing() {
        let name =
            std::ffi::CString::new(format!("/ptl-bell-test-{}", std::process::id())).expect("name");
        let seg = Segment::create(name, 7, 4096, &[]).expect("segment");
        let bell = Bell::bind(&seg).expect("bell");
        let readable = |b: &Bell| {
            let mut p = libc::pollfd {
                fd: b.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        // Nobody sleeps: no system call, nothing to read.
        assert!(!ring(&seg, Urgency::Work));
        assert!(!readable(&bell));
        // A socket sleeper: the ring reaches the socket.
        seg.header().fd_sleepers.fetch_add(1, Ordering::SeqCst);
        assert!(ring(&seg, Urgency::Message));
        assert!(readable(&bell));
        bell.drain();
        assert!(!readable(&bell));
        seg.header().fd_sleepers.fetch_sub(1, Ordering::SeqCst);
        crate::segment::unlink(&seg.name);
    }

    #[test]
    fn a_dozer_is_woken_by_work_not_by_a_small_message() {
        let name =
            std::ffi::CString::new(format!("/ptl-doze-test-{}", std::process::id())).expect("name");
        let seg = Segment::create(name, 7, 4096, &[]).expect("segment");
        let h = seg.header();
        h.dozers.fetch_add(1, Ordering::SeqCst);
        let before = h.doze_bell.load(Ordering::SeqCst);
        assert!(!ring(&seg, Urgency::Message), "a message woke a dozer");
        assert_eq!(h.doze_bell.load(Ordering::SeqCst), before);
        assert!(ring(&seg, Urgency::Work), "work did not wake the dozer");
        assert_ne!(h.doze_bell.load(Ordering::SeqCst), before);
        // The sleepers' word is left alone.
        assert_eq!(h.doorbell.load(Ordering::SeqCst), 0);
        // Nor while an application thread waits in the library.
        h.app_inside.fetch_add(1, Ordering::SeqCst);
        assert!(
            !ring(&seg, Urgency::Work),
            "work woke a dozer beside a waiter"
        );
        h.app_inside.fetch_sub(1, Ordering::SeqCst);
        h.dozers.fetch_sub(1, Ordering::SeqCst);
        // A sleeper proper is woken by anything.
        h.sleepers.fetch_add(1, Ordering::SeqCst);
        assert!(ring(&seg, Urgency::Message));
        h.sleepers.fetch_sub(1, Ordering::SeqCst);
        crate::segment::unlink(&seg.name);
    }

    #[test]
    fn while_operations_are_armed_a_small_message_wakes_a_dozer_but_not_beside_a_waiter() {
        let name = std::ffi::CString::new(format!("/ptl-armed-test-{}", std::process::id()))
            .expect("name");
        let seg = Segment::create(name, 7, 4096, &[]).expect("segment");
        let h = seg.header();
        h.dozers.fetch_add(1, Ordering::SeqCst);
        h.dozer_armed.store(1, Ordering::SeqCst);
        let before = h.doze_bell.load(Ordering::SeqCst);
        assert!(ring(&seg, Urgency::Message), "an armed dozer slept on");
        assert_ne!(h.doze_bell.load(Ordering::SeqCst), before);
        // Beside a waiter it is flagged for the waiter's leave instead.
        h.work_unrung.store(0, Ordering::SeqCst);
        h.app_inside.fetch_add(1, Ordering::SeqCst);
        assert!(
            !ring(&seg, Urgency::Message),
            "a dozer woken beside a waiter"
        );
        assert_eq!(h.work_unrung.load(Ordering::SeqCst), 1);
        h.app_inside.fetch_sub(1, Ordering::SeqCst);
        // Disarmed, a small message leaves it alone again.
        h.dozer_armed.store(0, Ordering::SeqCst);
        assert!(!ring(&seg, Urgency::Message), "a disarmed dozer was woken");
        h.dozers.fetch_sub(1, Ordering::SeqCst);
        crate::segment::unlink(&seg.name);
    }

    #[test]
    fn a_wait_times_out_returns_on_a_changed_word_and_is_woken() {
        let w = AtomicU32::new(5);
        let t0 = Instant::now();
        assert_eq!(wait(&w, 5, Duration::from_millis(20)), Woke::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(15));
        assert_eq!(wait(&w, 4, Duration::from_secs(10)), Woke::Rung);
        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let t = std::thread::spawn(move || wait(&w2, 0, Duration::from_secs(20)));
        std::thread::sleep(Duration::from_millis(20));
        w.fetch_add(1, Ordering::SeqCst);
        wake_all(&w);
        assert_eq!(t.join().unwrap(), Woke::Rung);
    }
}
