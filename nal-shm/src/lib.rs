//! # nal-shm
//!
//! The shared-memory network abstraction layer for [`portals`]: processes
//! of one host exchange messages through rings in POSIX shared memory, and
//! large payloads move with a single copy (`process_vm_readv`) straight from
//! the sender's memory descriptor into the receiver's.
//!
//! * [`ShmEndpoint::bind`] picks this endpoint's address ([`ShmAddr`]: the
//!   process id and a random nonce) so it can be published during
//!   bootstrap; [`ShmEndpoint::start`] creates the process's *inbox* (one
//!   shared-memory object, one ring per other local peer) and returns the
//!   running [`ShmNal`]. Peers' inboxes are mapped as they appear (start-up
//!   order does not matter) and validated as untrusted input; the last
//!   peer to map an inbox unlinks its name, so after start-up nothing of
//!   the job remains in `/dev/shm`, even if processes are killed. Before
//!   then, a process that exits (`exit`, returning from `main`) removes
//!   the names it still has, and a launcher removes those of ranks killed
//!   by a signal ([`remove_inbox_name`]; `ptlrun` does).
//! * **Messages.** A header and a short payload travel inline in one ring
//!   record. A payload of at least [`ShmConfig::cma_min`] bytes is announced
//!   with its address (or, scattered over an iovec descriptor's segments,
//!   up to 1024 address ranges), and the receiver reads it straight into
//!   the matched descriptor, [`ShmConfig::cma_chunk`] bytes per progress step, then
//!   tells the sender it is done. Where the kernel forbids such reads (or
//!   [`ShmConfig::cma`] is off) large payloads stream through the ring in
//!   chunks instead.
//! * **Progress** is nal-tcp's model: a progress thread
//!   ([`ProgressMode::Thread`]) that stands aside while application threads
//!   wait in the library and drive the rings themselves, or none
//!   ([`ProgressMode::Poll`]). A sleeping thread waits on a futex in its
//!   inbox; producers make the wake-up system call only when someone
//!   sleeps. A thread that waits for this transport and another at once
//!   (shared memory inside a host, TCP across: `portals_runtime::mux`)
//!   polls the inbox's doorbell socket instead (`Nal::wait_fd`), an
//!   abstract-namespace datagram socket that producers ring only while
//!   such a thread sleeps.
//! * **Failures.** Peer death is noticed within
//!   [`ShmConfig::liveness_interval`] (pidfd), a peer that shut down within
//!   the same bound, and a peer that breaks the ring protocol at once; all
//!   are reported to the engine as failed peers. Nothing read from shared
//!   memory is trusted.

#![warn(missing_docs)]

mod addr;
mod attach;
mod cma;
mod doorbell;
mod failure;
pub mod fuzzing;
mod liveness;
mod mapping;
mod nal;
mod names;
mod progress;
pub mod ring;
mod rx;
mod scatter;
mod segment;
mod tx;

use std::time::Duration;

pub use addr::{AddrError, ShmAddr};
pub use mapping::{mapping_name, random_nonce, unlink_mapping, ShmMapping, MAPPING_PREFIX};
pub use nal::{ShmEndpoint, ShmNal};
pub use nal_sys::{Backend, ProgressMode};
pub use segment::SegmentError;

/// Remove the `/dev/shm` name of the inbox of endpoint `addr` in job
/// `job_key`, if it is still there. For a launcher, once its ranks on this
/// host have exited: a rank killed by a signal during start-up, before
/// every peer mapped its inbox, cannot unlink the name itself. Removing a
/// name only stops further opens; processes that mapped it keep the memory.
pub fn remove_inbox_name(job_key: u64, addr: &ShmAddr) {
    segment::unlink(&segment::inbox_name(job_key, addr.pid, addr.nonce));
}

/// Test knob: the environment variable that makes the progress thread
/// wait this many milliseconds between taking a message that asks for a
/// response (an acknowledgment, a reply) and queueing the response, or
/// between completing a single-copy read and queueing what answers it, as
/// a preempted thread would. Meanwhile an application thread can see the
/// message's event and send to its initiator; tests use it to check that
/// such a send does not overtake what must stay ahead of it (a response,
/// fenced by `Nal::fence_responses`; the "done" that releases the sender's
/// memory). Read once; unset (always, outside tests): no delay.
pub const ANSWER_DELAY_ENV: &str = "PTL_SHM_TEST_ANSWER_DELAY_MS";

/// Configuration of a shared-memory NAL.
#[derive(Clone, Debug)]
pub struct ShmConfig {
    /// Progress thread or polling.
    pub progress: ProgressMode,
    /// How long the progress thread keeps standing aside after the last
    /// application thread left a wait (as `TcpConfig::handback`).
    pub handback: Duration,
    /// Bytes of each ring's data area (one ring per ordered pair of local
    /// processes): a multiple of 64, at least 4 KiB.
    pub ring_bytes: usize,
    /// Read payloads of at least [`cma_min`](Self::cma_min) bytes straight
    /// from the sender's memory with `process_vm_readv` where the kernel
    /// allows it (probed per pair at start-up). `false` copies every payload
    /// through the ring.
    pub cma: bool,
    /// Payloads at least this long go single-copy.
    pub cma_min: usize,
    /// Bytes a single-copy read moves per progress step, so other peers and
    /// the other direction keep moving during a large transfer. Each step
    /// costs a system call and a return to the progress loop: 256 KiB steps
    /// cost 4–11 % of MPI bandwidth at 4–16 MB in thread mode against 4 MiB
    /// ones (`ptl-bench bandwidth`, `PTL_SHM_CMA_CHUNK`), and a 4 MiB step
    /// holds the reading thread about half a millisecond.
    pub cma_chunk: usize,
    /// How long a peer's inbox may take to appear after [`ShmEndpoint::start`]
    /// before the peer is declared failed.
    pub connect_timeout: Duration,
    /// How often peers are checked for death (and for having shut down): a
    /// dead peer is noticed within about this long.
    pub liveness_interval: Duration,
    /// Through the hand-back delay (while the application waits in the
    /// library, and for the delay after it leaves) the progress thread
    /// *dozes* on the inbox doorbell instead of parking on the gate: it is
    /// woken only by work that needs it (a single-copy payload to read, a
    /// payload pipelined through the ring, a request to answer), never by
    /// a small message and never while an application thread waits, and
    /// moves that work at once, so a transfer that arrives while the
    /// application computes overlaps the computation. Small messages wait
    /// for the application's next call or the dozer's next timed look.
    /// While triggered operations are armed (a non-blocking collective
    /// under way) any message wakes it, except beside a waiter: any may
    /// fire the next step (see `Nal::bulk_post_end`). On by default, also in
    /// the runtime (`PTL_SHM_TAKEOVER=auto`); off, the thread sleeps the
    /// delay out and a transfer that arrives during a compute step shorter
    /// than the delay waits for the next call.
    pub early_takeover: bool,
    /// Progress thread only: how many nice steps it runs below (favoured
    /// over) the application, so that after moving a payload it may still
    /// preempt the computation for the next one (see `nal_sys::sched`;
    /// [`nal_sys::sched::DEFAULT_NICE_STEPS`] by default, 0 for none). The
    /// runtime asks for none on a host that runs more ranks than it has
    /// cores (`PTL_PROGRESS_NICE=auto`), where favoured progress threads
    /// take the cores other ranks compute on.
    pub progress_nice: u32,
    /// Progress thread only: the CPUs it may run on (see
    /// [`nal_sys::affinity::ProgressCpus`]; by default the launcher's, so
    /// that a rank bound to one core does not move its arrivals on the
    /// core it computes on). `PTL_PROGRESS_CPUS` sets it under the runtime.
    pub progress_cpus: nal_sys::affinity::ProgressCpus,
    /// Progress thread only: this host runs more ranks of the job than it
    /// has cores. A dozing progress thread (see
    /// [`early_takeover`](Self::early_takeover)) that finds an application
    /// thread waiting in the library, or the application in a loop of
    /// short steps, then dozes until work wakes it or
    /// [`nal_sys::gate::CROWDED_NAP`] passes (at most the liveness
    /// interval), instead of at most [`nal_sys::gate::MAX_BACKOFF`]
    /// hand-back delays: on such a host there is no spare core to overlap
    /// on, and each timed look took a turn another rank needed. While a
    /// non-blocking collective is under way any message wakes it (see
    /// `Nal::bulk_post_end`).
    /// Off by default here; the runtime sets it from the ranks' host
    /// identities and core counts, as for `PTL_WAIT_YIELD=auto`.
    pub crowded: bool,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            progress: ProgressMode::Thread,
            handback: Duration::from_micros(200),
            ring_bytes: 256 << 10,
            cma: true,
            cma_min: 32 << 10,
            cma_chunk: 4 << 20,
            connect_timeout: Duration::from_secs(10),
            liveness_interval: Duration::from_millis(100),
            early_takeover: true,
            progress_nice: nal_sys::sched::DEFAULT_NICE_STEPS,
            progress_cpus: nal_sys::affinity::ProgressCpus::Launcher,
            crowded: false,
        }
    }
}

/// Errors of the shared-memory transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The peer list names one process twice, or this process with another
    /// address.
    #[error("peer list: {0}")]
    Peers(String),
    /// A peer's inbox did not appear within the connect timeout.
    #[error("the inbox of {peer} ({addr}) did not appear within {waited:?}")]
    PeerAbsent {
        /// The peer.
        peer: portals::ProcessId,
        /// Its address.
        addr: ShmAddr,
        /// How long it was waited for.
        waited: Duration,
    },
    /// A peer's inbox exists but is not acceptable.
    #[error("the inbox of {peer} ({addr}) was refused: {reason}")]
    Refused {
        /// The peer.
        peer: portals::ProcessId,
        /// Its address.
        addr: ShmAddr,
        /// What was wrong with it.
        reason: SegmentError,
    },
}

/// Counters of a shared-memory NAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Portals messages handed to a ring (inline, single-copy or pipelined).
    pub messages_sent: u64,
    /// Payload bytes of those messages.
    pub bytes_sent: u64,
    /// Portals messages received whole.
    pub messages_received: u64,
    /// Payload bytes received (copied from a ring or read single-copy).
    pub bytes_received: u64,
    /// Messages sent whole in one ring record.
    pub inline_sent: u64,
    /// Messages sent as an address for the receiver to read (single-copy).
    pub single_copy_sent: u64,
    /// Messages whose payload streamed through the ring in several records.
    pub pipelined_sent: u64,
    /// Single-copy reads begun (a read under way counts here, and in
    /// `single_copy_received` once it is complete).
    pub single_copy_started: u64,
    /// Single-copy payloads read from a peer.
    pub single_copy_received: u64,
    /// Bytes read single-copy from peers so far (grows during a transfer).
    pub single_copy_bytes: u64,
    /// Single-copy reads (steps) made through a bounce buffer, because the
    /// kernel's copy straight into the descriptor would have been slow
    /// (its address 1 to 31 bytes past the sender's, modulo a page).
    pub single_copy_bounced: u64,
    /// Times a send found its ring full and was queued.
    pub ring_full: u64,
    /// Messages written by the thread that sent them (optimistic send).
    pub optimistic_sends: u64,
    /// Times the progress thread's sleep ended because it was woken.
    pub progress_thread_wakes: u64,
    /// Dozes of the progress thread through the hand-back delay (see
    /// [`ShmConfig::early_takeover`]), each ended by work or by its timer:
    /// on a rank whose progress thread shares a core, each is a turn taken
    /// from the application or a neighbour.
    pub progress_dozes: u64,
    /// `FUTEX_WAKE` calls made (to peers' doorbells or our own).
    pub futex_wakes_sent: u64,
    /// `FUTEX_WAIT` calls made.
    pub futex_waits: u64,
    /// Peers declared failed (dead, shut down, absent, misbehaving).
    pub peers_failed: u64,
    /// Peers failed for breaking the ring protocol (bad indices, records,
    /// headers or cookies).
    pub corrupt_ring_errors: u64,
    /// Pairs where single-copy from the peer was found not to work.
    pub cma_unavailable: u64,
    /// Times a waiting application thread, finding nothing to do while
    /// another thread of ours made a single-copy read, gave its core away
    /// (`sched_yield`) instead of spinning beside it.
    pub waiter_yields: u64,
}
