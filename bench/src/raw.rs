//! Raw-socket physical-limit benchmarks over 127.0.0.1.
//!
//! These measure what the kernel's loopback path allows with no messaging
//! library on top, the floor against which the MPI peers (`bench/c/`) and
//! portals-rs are compared:
//!
//! - [`tcp_pingpong`]: TCP (`TCP_NODELAY`) ping-pong, half round trip in µs;
//! - [`udp_pingpong`]: UDP ping-pong over connected sockets, half round trip in µs;
//! - [`tcp_stream`]: unidirectional TCP streaming throughput in MB/s (10^6 B/s).
//!
//! Each ping-pong can read with blocking `read`/`recv` (the process sleeps in
//! the kernel until data arrives) or busy-poll non-blocking sockets (what MPI
//! libraries do while waiting), selected by [`PollMode`].
//!
//! # Two processes
//!
//! Every call sets up a connected socket pair (ports chosen by binding to
//! port 0) and then `fork`s: the child process is the echo (or sink) peer,
//! the parent measures. Separate processes are closer to the MPI setting than
//! two threads (separate address spaces, separate scheduler entities, no
//! shared cache lines). The child runs only plain system calls on memory
//! allocated before the fork (`read`, `write`, `recv`, `send`, `close`,
//! `clock_gettime`, `sched_setaffinity`), never allocates, and leaves with
//! `_exit`, so forking from a multi-threaded process (such as the test
//! harness) is sound. (The child also inherits every other descriptor the
//! process has open at that moment; it never touches them and they close when
//! it exits.) Both sides know
//! the number of messages in advance, so no shutdown protocol is needed; every
//! blocking operation has a 10 s timeout and a failed parent kills its child.
//!
//! # Placement
//!
//! By default ([`Placement::Pinned`]) the measuring thread and the peer
//! process are pinned to the first two CPUs the caller may run on, like MPI
//! launchers that bind each rank to a core (`--bind-to core`). Unpinned, the
//! scheduler may put both on one CPU: a blocking ping-pong then becomes a cheap
//! same-CPU context switch and a busy-polling one degrades badly (each side
//! spins away its time slice). The measuring thread's affinity is restored
//! when the call returns.
//!
//! TCP cannot carry an empty message, so a 0-byte TCP message is sent as one
//! byte; UDP sends real 0-byte datagrams. UDP payloads are limited to
//! [`UDP_MAX_PAYLOAD`] (65 507 bytes, the IPv4 maximum).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use crate::cpu::{current_affinity, set_affinity, single_cpu};
use crate::stats::Summary;

/// Result type of this module; errors are plain I/O errors.
pub type Result<T> = io::Result<T>;

/// Largest UDP payload over IPv4 (65 535 − 20 IP − 8 UDP header bytes).
pub const UDP_MAX_PAYLOAD: usize = 65_507;

/// Every blocking read, write or busy-poll gives up after this long.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Stream batches are capped at this many bytes (and at [`STREAM_WINDOW`] messages).
const STREAM_BATCH_BYTES: usize = 64 << 20;

/// Messages per acknowledged batch in [`tcp_stream`] (as the MPI window of 64).
pub const STREAM_WINDOW: usize = 64;

/// How the receiving side waits for data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PollMode {
    /// Blocking sockets: the reader sleeps in the kernel until data arrives.
    Blocking,
    /// Non-blocking sockets polled in a tight loop: no sleep/wake-up on the path.
    BusyPoll,
}

impl PollMode {
    /// Short label used in implementation names (`blocking`, `busy`).
    pub fn label(self) -> &'static str {
        match self {
            PollMode::Blocking => "blocking",
            PollMode::BusyPoll => "busy",
        }
    }
}

/// Where the measuring thread and the peer process run; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Measuring thread on the first allowed CPU, peer on the second (no
    /// pinning when fewer than two CPUs are allowed).
    #[default]
    Pinned,
    /// Leave placement to the scheduler.
    Unpinned,
}

/// Unit of a [`Stats`] value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// Microseconds (half round trip).
    #[serde(rename = "us")]
    Micros,
    /// Megabytes (10^6 bytes) per second.
    #[serde(rename = "MB/s")]
    MegabytesPerSec,
}

impl Unit {
    /// The unit as written in the JSON-lines output (`us`, `MB/s`).
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::MegabytesPerSec => "MB/s",
        }
    }
}

/// Summary of one measured point.
///
/// For ping-pongs every round trip is one sample (half round trip in µs) and
/// `mean` equals total time / (2 × iterations). For streams every acknowledged
/// batch is one sample (MB/s) and `mean` is the aggregate rate, total bytes /
/// total time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Median sample.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Mean (see the type documentation for streams).
    pub mean: f64,
    /// Number of samples.
    pub samples: usize,
    /// Unit of all values.
    pub unit: Unit,
    /// Messages measured (excluding warm-up).
    pub messages: usize,
}

impl Stats {
    /// Summarise samples (sorted in place); `mean` is their arithmetic mean.
    /// Returns `None` for an empty slice.
    pub fn from_samples(samples: &mut [f64], unit: Unit, messages: usize) -> Option<Stats> {
        let s = Summary::of(samples)?;
        Some(Stats {
            median: s.median,
            min: s.min,
            max: s.max,
            mean: s.mean,
            samples: s.count,
            unit,
            messages,
        })
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

fn warmup_for(iters: usize) -> usize {
    (iters / 10).clamp(1, 1000)
}

/// Half round trip of `size`-byte TCP messages (`TCP_NODELAY`), `iters`
/// measured round trips after `iters / 10` (1..=1000) warm-up round trips,
/// with the default [`Placement::Pinned`].
pub fn tcp_pingpong(size: usize, iters: usize, mode: PollMode) -> Result<Stats> {
    tcp_pingpong_with(size, iters, mode, Placement::default())
}

/// [`tcp_pingpong`] with an explicit [`Placement`].
pub fn tcp_pingpong_with(
    size: usize,
    iters: usize,
    mode: PollMode,
    placement: Placement,
) -> Result<Stats> {
    if iters == 0 {
        return Err(invalid("iters must be > 0"));
    }
    let (mine, theirs) = tcp_pair()?;
    pingpong(Transport::Tcp, mine, theirs, size, iters, mode, placement)
}

/// Half round trip of `size`-byte UDP datagrams (0..=[`UDP_MAX_PAYLOAD`]),
/// `iters` measured round trips after `iters / 10` (1..=1000) warm-up ones,
/// with the default [`Placement::Pinned`]. A lost datagram ends the run with a
/// timeout error (not expected on loopback).
pub fn udp_pingpong(size: usize, iters: usize, mode: PollMode) -> Result<Stats> {
    udp_pingpong_with(size, iters, mode, Placement::default())
}

/// [`udp_pingpong`] with an explicit [`Placement`].
pub fn udp_pingpong_with(
    size: usize,
    iters: usize,
    mode: PollMode,
    placement: Placement,
) -> Result<Stats> {
    if iters == 0 {
        return Err(invalid("iters must be > 0"));
    }
    if size > UDP_MAX_PAYLOAD {
        return Err(invalid("UDP payload larger than 65507 bytes"));
    }
    let (mine, theirs) = udp_pair()?;
    pingpong(Transport::Udp, mine, theirs, size, iters, mode, placement)
}

/// Unidirectional TCP streaming throughput: the parent writes `size`-byte
/// messages with blocking writes, the child reads them; after every batch of
/// up to [`STREAM_WINDOW`] messages (at most 64 MiB) the child returns a
/// 1-byte acknowledgement. At least `iters` messages are measured (rounded up
/// to whole batches) after one warm-up batch. Samples are per-batch MB/s.
/// Uses the default [`Placement::Pinned`].
pub fn tcp_stream(size: usize, iters: usize) -> Result<Stats> {
    tcp_stream_with(size, iters, Placement::default())
}

/// [`tcp_stream`] with an explicit [`Placement`].
pub fn tcp_stream_with(size: usize, iters: usize, placement: Placement) -> Result<Stats> {
    if size == 0 || iters == 0 {
        return Err(invalid("size and iters must be > 0"));
    }
    let batch = stream_batch(size);
    let batches = iters.div_ceil(batch);
    let total_batches = batches + 1; // + warm-up
    let (mine, theirs) = tcp_pair()?;
    let sbuf = vec![0x5au8; size];
    let mut cbuf = vec![0u8; size];
    let cfd = theirs.as_raw_fd();
    let cptr = cbuf.as_mut_ptr();
    let cpus = CpuPlan::new(placement)?;
    let child = Peer::spawn(mine.as_raw_fd(), cpus.child, move || {
        let mut ack = 1u8;
        for _ in 0..total_batches {
            for _ in 0..batch {
                if read_exact_raw(cfd, cptr, size, false).is_err() {
                    return false;
                }
            }
            if write_all_raw(cfd, &mut ack, 1, false).is_err() {
                return false;
            }
        }
        true
    })?;
    drop(theirs);
    let _pin = cpus.pin_caller()?;
    let fd = mine.as_raw_fd();
    let mut samples = Vec::with_capacity(batches);
    let mut ack = 0u8;
    let mut total_time = 0.0f64;
    for b in 0..total_batches {
        let t0 = Instant::now();
        for _ in 0..batch {
            write_all_raw(fd, sbuf.as_ptr().cast_mut(), size, false).map_err(os_err)?;
        }
        read_exact_raw(fd, &mut ack, 1, false).map_err(os_err)?;
        let dt = t0.elapsed().as_secs_f64();
        if b > 0 {
            total_time += dt;
            samples.push((batch * size) as f64 / dt / 1e6);
        }
    }
    child.wait()?;
    drop(cbuf);
    let messages = batches * batch;
    let mut st = Stats::from_samples(&mut samples, Unit::MegabytesPerSec, messages)
        .ok_or_else(|| invalid("no samples"))?;
    st.mean = (messages * size) as f64 / total_time / 1e6;
    Ok(st)
}

/// Messages per acknowledged batch used by [`tcp_stream`] for `size`.
pub fn stream_batch(size: usize) -> usize {
    (STREAM_BATCH_BYTES / size.max(1)).clamp(1, STREAM_WINDOW)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Udp,
}

fn pingpong(
    transport: Transport,
    mine: Socket,
    theirs: Socket,
    size: usize,
    iters: usize,
    mode: PollMode,
    placement: Placement,
) -> Result<Stats> {
    let busy = mode == PollMode::BusyPoll;
    mine.set_nonblocking(busy)?;
    theirs.set_nonblocking(busy)?;
    // TCP cannot carry an empty message: send one byte instead.
    let wire = match transport {
        Transport::Tcp => size.max(1),
        Transport::Udp => size,
    };
    let warmup = warmup_for(iters);
    let total = warmup + iters;
    let mut sbuf = vec![0x5au8; wire.max(1)];
    let mut rbuf = vec![0u8; wire.max(1)];
    let mut cbuf = vec![0u8; wire.max(1)];
    let cfd = theirs.as_raw_fd();
    let cptr = cbuf.as_mut_ptr();
    let cpus = CpuPlan::new(placement)?;
    let child = Peer::spawn(mine.as_raw_fd(), cpus.child, move || {
        for _ in 0..total {
            let ok = match transport {
                Transport::Tcp => {
                    read_exact_raw(cfd, cptr, wire, busy).is_ok()
                        && write_all_raw(cfd, cptr, wire, busy).is_ok()
                }
                Transport::Udp => {
                    recv_dgram_raw(cfd, cptr, wire, busy).is_ok()
                        && send_dgram_raw(cfd, cptr, wire, busy).is_ok()
                }
            };
            if !ok {
                return false;
            }
        }
        true
    })?;
    drop(theirs);
    let _pin = cpus.pin_caller()?;
    let fd = mine.as_raw_fd();
    let mut samples = Vec::with_capacity(iters);
    let mut t = Instant::now();
    for i in 0..total {
        match transport {
            Transport::Tcp => {
                write_all_raw(fd, sbuf.as_mut_ptr(), wire, busy).map_err(os_err)?;
                read_exact_raw(fd, rbuf.as_mut_ptr(), wire, busy).map_err(os_err)?;
            }
            Transport::Udp => {
                send_dgram_raw(fd, sbuf.as_mut_ptr(), wire, busy).map_err(os_err)?;
                recv_dgram_raw(fd, rbuf.as_mut_ptr(), wire, busy).map_err(os_err)?;
            }
        }
        let now = Instant::now();
        if i >= warmup {
            samples.push((now - t).as_secs_f64() * 1e6 / 2.0);
        }
        t = now;
    }
    child.wait()?;
    drop(cbuf);
    Stats::from_samples(&mut samples, Unit::Micros, iters).ok_or_else(|| invalid("no samples"))
}

// ---- socket setup ---------------------------------------------------------

fn loopback0() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
}

fn tcp_pair() -> Result<(Socket, Socket)> {
    let listener = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    listener.bind(&loopback0().into())?;
    listener.listen(1)?;
    let addr = listener.local_addr()?;
    let client = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    client.connect(&addr)?;
    let (server, _) = listener.accept()?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
    }
    Ok((client, server))
}

fn udp_pair() -> Result<(Socket, Socket)> {
    let a = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let b = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    a.bind(&loopback0().into())?;
    b.bind(&loopback0().into())?;
    a.connect(&b.local_addr()?)?;
    b.connect(&a.local_addr()?)?;
    for s in [&a, &b] {
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        // room for a few maximum-size datagrams
        s.set_recv_buffer_size(1 << 20)?;
        s.set_send_buffer_size(1 << 20)?;
    }
    Ok((a, b))
}

// ---- CPU placement ----------------------------------------------------------

/// The CPUs chosen for one run: the caller's thread and the child.
struct CpuPlan {
    caller: Option<libc::cpu_set_t>,
    child: Option<libc::cpu_set_t>,
}

impl CpuPlan {
    fn new(placement: Placement) -> Result<CpuPlan> {
        let none = CpuPlan {
            caller: None,
            child: None,
        };
        if placement == Placement::Unpinned {
            return Ok(none);
        }
        let mut cpus = crate::cpu::allowed_cpus()?.into_iter();
        match (cpus.next(), cpus.next()) {
            (Some(a), Some(b)) => Ok(CpuPlan {
                caller: Some(single_cpu(a)),
                child: Some(single_cpu(b)),
            }),
            _ => Ok(none),
        }
    }

    /// Pin the calling thread; its previous affinity comes back when the
    /// guard drops.
    fn pin_caller(&self) -> Result<Option<AffinityGuard>> {
        let Some(set) = self.caller else {
            return Ok(None);
        };
        let saved = current_affinity()?;
        set_affinity(&set)?;
        Ok(Some(AffinityGuard { saved }))
    }
}

/// Restores the calling thread's CPU affinity on drop.
struct AffinityGuard {
    saved: libc::cpu_set_t,
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        let _ = set_affinity(&self.saved);
    }
}

// ---- the forked peer --------------------------------------------------------

/// A forked child process; killed and reaped on drop unless [`Peer::wait`]ed.
struct Peer {
    pid: libc::pid_t,
    reaped: bool,
}

impl Peer {
    /// Fork; the child closes `parent_fd`, pins itself to `cpu` (if any),
    /// runs `job` and `_exit`s with status 0 if it returned true, 1 otherwise.
    ///
    /// `job` must only make async-signal-safe calls and must neither allocate
    /// nor panic: the child of a multi-threaded process may find allocator or
    /// stdio locks held by threads that do not exist in it.
    fn spawn<F: FnOnce() -> bool>(
        parent_fd: RawFd,
        cpu: Option<libc::cpu_set_t>,
        job: F,
    ) -> Result<Peer> {
        // SAFETY: fork has no memory-safety preconditions. In the child only
        // `close`, `job` (restricted as documented above) and `_exit` run;
        // `_exit` skips atexit handlers and destructors that belong to the
        // parent, so no parent-owned state is touched twice.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: closing our copy of the parent's socket descriptor; the
            // owning `Socket` lives in the parent's address space copy and is
            // never dropped here because the child leaves through `_exit`.
            unsafe { libc::close(parent_fd) };
            if let Some(set) = cpu {
                // SAFETY: `set` is a fully initialised cpu_set_t on our stack;
                // sched_setaffinity is a plain system call. Failure only means
                // the child stays unpinned.
                unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
            }
            let ok = job();
            // SAFETY: `_exit` is async-signal-safe and never returns.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        Ok(Peer { pid, reaped: false })
    }

    /// Wait for the child; an error if it did not exit with status 0.
    fn wait(mut self) -> Result<()> {
        let status = self.reap()?;
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "benchmark peer process failed (wait status {status:#x})"
            )))
        }
    }

    fn reap(&mut self) -> Result<libc::c_int> {
        let mut status: libc::c_int = 0;
        loop {
            // SAFETY: `status` is a valid out-pointer; `pid` is our child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                self.reaped = true;
                return Ok(status);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                self.reaped = true; // ECHILD: nothing left to reap
                return Err(e);
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signalling and reaping our own child process.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.reap();
        }
    }
}

// ---- async-signal-safe I/O loops (used by both processes) ------------------
//
// They take raw pointers because the child must not touch Rust-managed state
// beyond plain memory. Errors are errno values (ETIMEDOUT on timeout, EPIPE
// on an unexpected end of stream, EMSGSIZE on a datagram of the wrong size).

fn os_err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Decide what to do after a call failed with `e`: Ok(()) to retry, Err to fail.
fn retry_or_fail(e: i32, busy: bool, start: Instant) -> std::result::Result<(), i32> {
    if e == libc::EINTR {
        return Ok(());
    }
    if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
        // blocking socket: SO_RCVTIMEO / SO_SNDTIMEO expired
        if !busy || start.elapsed() > IO_TIMEOUT {
            return Err(libc::ETIMEDOUT);
        }
        std::hint::spin_loop();
        return Ok(());
    }
    Err(e)
}

fn read_exact_raw(fd: RawFd, buf: *mut u8, len: usize, busy: bool) -> std::result::Result<(), i32> {
    let start = Instant::now();
    let mut done = 0usize;
    while done < len {
        // SAFETY: `buf` points to at least `len` writable bytes owned by the
        // caller for the duration of the call, and `done < len`.
        let r = unsafe { libc::read(fd, buf.add(done).cast(), len - done) };
        if r > 0 {
            done += r as usize;
        } else if r == 0 {
            return Err(libc::EPIPE);
        } else {
            retry_or_fail(errno(), busy, start)?;
        }
    }
    Ok(())
}

fn write_all_raw(fd: RawFd, buf: *mut u8, len: usize, busy: bool) -> std::result::Result<(), i32> {
    let start = Instant::now();
    let mut done = 0usize;
    while done < len {
        // SAFETY: `buf` points to at least `len` readable bytes, `done < len`.
        let r = unsafe { libc::write(fd, buf.add(done).cast(), len - done) };
        if r >= 0 {
            done += r as usize;
        } else {
            retry_or_fail(errno(), busy, start)?;
        }
    }
    Ok(())
}

fn recv_dgram_raw(fd: RawFd, buf: *mut u8, len: usize, busy: bool) -> std::result::Result<(), i32> {
    let start = Instant::now();
    loop {
        // SAFETY: `buf` points to at least max(len, 1) writable bytes (the
        // callers allocate at least one byte); MSG_TRUNC makes the kernel
        // report the real datagram length without writing past `cap`.
        let cap = len.max(1);
        let r = unsafe { libc::recv(fd, buf.cast(), cap, libc::MSG_TRUNC) };
        if r >= 0 {
            return if r as usize == len {
                Ok(())
            } else {
                Err(libc::EMSGSIZE)
            };
        }
        retry_or_fail(errno(), busy, start)?;
    }
}

fn send_dgram_raw(fd: RawFd, buf: *mut u8, len: usize, busy: bool) -> std::result::Result<(), i32> {
    let start = Instant::now();
    loop {
        // SAFETY: `buf` points to at least `len` readable bytes.
        let r = unsafe { libc::send(fd, buf.cast(), len, 0) };
        if r >= 0 {
            return if r as usize == len {
                Ok(())
            } else {
                Err(libc::EMSGSIZE)
            };
        }
        let e = errno();
        if e == libc::ENOBUFS {
            // transient on loopback; retry within the deadline
            if start.elapsed() > IO_TIMEOUT {
                return Err(libc::ETIMEDOUT);
            }
            continue;
        }
        retry_or_fail(e, busy, start)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &Stats, unit: Unit, messages: usize) {
        assert_eq!(s.unit, unit);
        assert_eq!(s.messages, messages);
        assert!(s.samples > 0);
        for v in [s.median, s.min, s.max, s.mean] {
            assert!(v.is_finite() && v > 0.0, "bad value {v} in {s:?}");
        }
        assert!(s.min <= s.median && s.median <= s.max, "{s:?}");
        let json = serde_json::to_string(s).expect("serialise");
        let back: Stats = serde_json::from_str(&json).expect("parse");
        assert_eq!(
            (back.unit, back.samples, back.messages),
            (s.unit, s.samples, s.messages)
        );
        assert!((back.median - s.median).abs() <= 1e-9 * s.median.abs());
    }

    #[test]
    fn tcp_pingpong_blocking_and_busy() {
        for mode in [PollMode::Blocking, PollMode::BusyPoll] {
            for size in [0, 1, 4096, 100_000] {
                let s = tcp_pingpong(size, 20, mode).expect("tcp ping-pong");
                check(&s, Unit::Micros, 20);
                assert_eq!(s.samples, 20);
            }
        }
    }

    #[test]
    fn udp_pingpong_blocking_and_busy() {
        for mode in [PollMode::Blocking, PollMode::BusyPoll] {
            for size in [0, 8, 1500, UDP_MAX_PAYLOAD] {
                let s = udp_pingpong(size, 20, mode).expect("udp ping-pong");
                check(&s, Unit::Micros, 20);
            }
        }
    }

    #[test]
    fn tcp_stream_small() {
        let s = tcp_stream(1024, 100).expect("tcp stream");
        // rounded up to whole batches of 64
        check(&s, Unit::MegabytesPerSec, 128);
        assert_eq!(s.samples, 2);
        let s = tcp_stream(64 << 10, 3).expect("tcp stream 64 KiB");
        check(&s, Unit::MegabytesPerSec, 64);
    }

    #[test]
    fn unpinned_placement() {
        let s = tcp_pingpong_with(8, 10, PollMode::Blocking, Placement::Unpinned).expect("tcp");
        check(&s, Unit::Micros, 10);
        let s = udp_pingpong_with(8, 10, PollMode::Blocking, Placement::Unpinned).expect("udp");
        check(&s, Unit::Micros, 10);
        let s = tcp_stream_with(4096, 64, Placement::Unpinned).expect("stream");
        check(&s, Unit::MegabytesPerSec, 64);
    }

    #[test]
    fn rejects_bad_arguments() {
        let e = udp_pingpong(UDP_MAX_PAYLOAD + 1, 10, PollMode::Blocking).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(tcp_pingpong(8, 0, PollMode::Blocking).is_err());
        assert!(tcp_stream(0, 10).is_err());
    }

    #[test]
    fn stats_from_samples() {
        let mut v = [3.0, 1.0, 2.0, 10.0];
        let s = Stats::from_samples(&mut v, Unit::Micros, 4).expect("non-empty");
        assert_eq!((s.min, s.median, s.max, s.mean), (1.0, 2.5, 10.0, 4.0));
        assert!(Stats::from_samples(&mut [], Unit::Micros, 0).is_none());
        assert_eq!(stream_batch(1), STREAM_WINDOW);
        assert_eq!(stream_batch(16 << 20), 4);
        assert_eq!(stream_batch(1 << 30), 1);
    }
}
