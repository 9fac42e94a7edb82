//! The device's state: its requests, what each protocol keeps between
//! calls, and the identity of a request in the engine's events.

use super::*;

/// Send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Standard,
    Synchronous,
    Ready,
}

/// A request's identity: slab slot plus generation, so that a late event for
/// a recycled slot is recognised as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReqId {
    pub(super) idx: u32,
    pub(super) gen: u32,
}

impl ReqId {
    pub(super) fn user_ptr(self) -> u64 {
        (self.gen as u64) << 32 | self.idx as u64
    }

    pub(super) fn from_user_ptr(p: u64) -> ReqId {
        ReqId {
            idx: p as u32,
            gen: (p >> 32) as u32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Ready send (any size): done on Sent. Its receive is posted, so it
    /// never needs to be fetched again.
    SendReady,
    /// Short standard send: done on Sent + Ack(len > 0), or Sent + Ack(0) +
    /// Get (the receiver had no unexpected-buffer room and pulled it).
    SendShort,
    /// Short synchronous send: done on Sent + the receiver's explicit
    /// acknowledgment (sent once it holds the data, which it may first
    /// have pulled from the read portal).
    SendSync,
    /// Long send: done on Sent + Ack(len > 0), or Sent + Ack(0) + Get
    /// (always so when announced).
    SendLong,
    /// Posted receive: done on Put (long truncated to zero: after a release
    /// get; an announced long message: becomes `RecvGet`).
    Recv,
    /// Receive of an unexpected long message, of an announced one, or of a
    /// short one that found no buffer room: done on the Reply of its get.
    RecvGet,
    /// Library-internal message nobody waits for (explicit sync ack).
    Control,
    /// A non-blocking collective's instance: done on its done notice
    /// (`nbc.rs`).
    Nbc,
}

pub(super) struct Req {
    pub(super) gen: u32,
    pub(super) kind: Kind,
    /// The user gave the request up (buffered sends, internal messages):
    /// free it on completion.
    pub(super) detached: bool,
    /// Descriptor of the data (send buffer or receive buffer).
    pub(super) md: Option<MdHandle>,
    /// Match entry owned by the request (read/ack portal for sends, posted
    /// receive for receives).
    pub(super) me: Option<MeHandle>,
    /// Synchronous sends: the zero-byte descriptor on the ack portal.
    pub(super) ack_md: Option<MdHandle>,
    /// Synchronous short sends: the read-portal entry exposing the data
    /// (`me` is the ack-portal entry).
    pub(super) read_me: Option<MeHandle>,
    /// A send of zero bytes: an acknowledgment of zero bytes means it was
    /// delivered, not that it waits to be pulled.
    pub(super) empty: bool,
    /// A receive that pulls a synchronous short message: the sender's
    /// process and ack bits, acknowledged once the data is here.
    pub(super) ack_after: Option<(ProcessId, u64)>,
    /// Receives from any source: the context, whose members' failures fail
    /// the receive (ULFM's `MPI_ERR_PROC_FAILED_PENDING`).
    pub(super) any_ctx: Option<u16>,
    pub(super) sent: bool,
    pub(super) acked: Option<u64>,
    pub(super) got: bool,
    /// Receives: the status to report (filled when the envelope is known).
    pub(super) status: Option<Status>,
    pub(super) result: Option<Result<Status>>,
    /// Memory owned by the request (buffered and owned sends): the send reads
    /// from it, so it lives as long as the request.
    pub(super) owned: Option<Box<dyn std::any::Any + Send>>,
    /// Bytes of attached buffered-send space the request uses.
    pub(super) bsend_len: usize,
    /// Bytes of the eager-copy budget the request's copy uses.
    pub(super) copy_len: usize,
    /// The library's copy of a short send's data (`MpiConfig::eager_copy`):
    /// the send reads from it, so it lives as long as the request, then
    /// goes back to [`State::spare_copies`].
    pub(super) copy: Vec<u8>,
    /// Peer world rank, for error messages.
    pub(super) peer: u32,
    /// A pull's source, admitted past the envelope cap until the request
    /// has its result (see [`Device::admit_for_reply`]).
    pub(super) admits: Option<ProcessId>,
    /// The send's put counts in its target's window until acknowledged
    /// (see `window.rs`).
    pub(super) windowed: bool,
    /// A receive of collective traffic (the odd context of a pair).
    pub(super) coll: bool,
    /// Non-blocking collectives: the instance's own counting events, freed
    /// when it finishes (the first one reports failures; see `nbc.rs`).
    pub(super) cts: Vec<portals::CtHandle>,
    /// Flat non-blocking collectives: the instance's entries and
    /// descriptors beyond `me` and `md` (`nbc/flat.rs`).
    pub(super) nbc_mes: Vec<MeHandle>,
    pub(super) nbc_mds: Vec<MdHandle>,
    /// Non-blocking collectives: the communicator's context pair, whose
    /// release waits for the instance.
    pub(super) nbc_ctx: Option<u16>,
    /// Run once when the request is complete (see [`OnDone`]).
    pub(super) on_done: Option<OnDone>,
    /// A long send that was announced (`announce.rs`): its zero-byte
    /// acknowledgment says nothing about the receive.
    pub(super) announced: bool,
}

/// Work a receive does once it is complete and its memory is out of the
/// engine, before anyone can see it complete (however that is seen: a
/// wait, a test, the end of its scope): a staged receive unpacks its
/// stage into the user's buffer, and may turn the result into an error
/// (a value that does not validate). Runs under the device's state lock,
/// on whichever thread completes the request.
pub(crate) type OnDone = Box<dyn FnOnce(&mut Result<Status>) + Send>;

/// What a put waiting in a send window needs.
#[derive(Clone, Copy, Debug)]
pub(super) struct WindowPut {
    pub(super) md: MdHandle,
    pub(super) ack: AckReq,
    pub(super) remote: Remote,
    pub(super) hdr_data: u64,
    /// An announced long send: the put carries none of the descriptor's
    /// bytes (`announce.rs`).
    pub(super) announce: bool,
}

pub(super) struct State {
    pub(super) reqs: Slab<Req>,
    pub(super) next_gen: u32,
    pub(super) saved: SavedEnvelopes,
    /// Point-to-point puts in flight and waiting, per target.
    pub(super) windows: SendWindows<WindowPut>,
    /// Which long sends are announced, per target (`announce.rs`).
    pub(super) announce: Announcing,
    /// Senders this process asked to pause (see `throttle.rs`).
    pub(super) paused: Vec<ProcessId>,
    /// Sources (a process, or any) admitted past the envelope cap by a
    /// probe that found nothing: a repeated `iprobe` must be able to reach
    /// a message queued behind others of its sender. Kept until a probe or
    /// a receive from the same source finds its message (see `probe.rs`).
    pub(super) probe_admits: Vec<ProcessId>,
    pub(super) next_bits: u64,
    pub(super) fatal: Option<MpiError>,
    pub(super) bsend_attached: usize,
    pub(super) bsend_used: usize,
    /// Bytes of eager copies held by short sends waiting for their
    /// acknowledgment ([`MpiConfig::eager_copy`]).
    pub(super) copy_used: usize,
    /// Requests of short sends from a library copy (their caller's request
    /// completed when the copy was made): what they wait for, their
    /// acknowledgment, only frees the copy. See [`State::quiet`].
    pub(super) copies_waiting: usize,
    /// Live RMA windows of this process ([`Device::exposure`]): others may
    /// access their memory whenever they like.
    pub(super) exposures: usize,
    /// What the interface was last told of [`State::quiet`].
    pub(super) quiet_told: bool,
    /// Emptied eager copies kept for reuse (at most [`SPARE_COPIES`], each
    /// of at most [`SPARE_COPY_BYTES`]), so that a short send allocates
    /// nothing once warm.
    pub(super) spare_copies: Vec<Vec<u8>>,
    pub(super) stats: MpiStats,
    /// Context ids this process does not use: bit i of word i/64. Ids go in
    /// pairs (point-to-point, collective); the world's pair is 0/1.
    pub(super) free_ctx: [u64; CTX_WORDS],
    /// Requests with a result whose engine objects could not be unlinked yet
    /// (a transfer was still using them): retried at every drain. Also
    /// receives that got their result in the current drain, finished at
    /// its end (see `on_request`).
    pub(super) releasing: Vec<ReqId>,
    /// Sends from a library copy whose acknowledgment arrived: finishing
    /// them (unlinking the read-portal entry, keeping the copy for reuse)
    /// waits until this thread has nothing more urgent to do
    /// ([`Device::release_copies`]). In a round trip the acknowledgment
    /// rides on the reply, and finishing it in the drain that found the
    /// reply put about a thousand instructions on the round trip's path.
    pub(super) acked_copies: Vec<ReqId>,
    /// World ranks the transport gave up on.
    pub(super) dead: HashSet<u32>,
    /// World ranks that finalized (their departure notice arrived).
    pub(super) departed: HashSet<u32>,
    /// Senders of departure notices `drain` has not acted on yet.
    pub(super) departures_new: Vec<ProcessId>,
    /// How many entries of the interface's failed-peer list were handled.
    pub(super) failures_seen: usize,
    /// The interface's epoch read before the last drain's look that found
    /// every event queue empty (`intake.rs`): while it reads the same,
    /// nothing was queued since. `None`: look.
    pub(super) quiet_epoch: Option<u64>,
    /// World ranks of the members of each context that a receive from any
    /// source used (a member's death fails such receives).
    pub(super) members: HashMap<u16, Arc<[u32]>>,
    /// Each communicator's non-blocking-collective entries (`nbc.rs`).
    pub(super) nbc: nbc::NbcComms,
    /// The segment lists of posted non-contiguous receives, by request
    /// ([`ReqId::user_ptr`]): the get of an announced message that matches
    /// one needs them again after the announcement used its descriptor up
    /// (`pull.rs`; a flat receive's region is its descriptor's, in the
    /// event). A table beside the requests, not a field of each: every
    /// request would carry it, and the request slab's size is on every
    /// message's path.
    pub(super) segments: HashMap<u64, Vec<portals::Iovec>>,
}

impl State {
    /// Nothing under way that the transport must move while the
    /// application computes (`portals::NiCore::set_app_quiet`): no request
    /// but those of sends from a library copy whose put has left, nothing
    /// waiting to be released or in a send window's queue, no RMA window.
    /// A copy's acknowledgment only frees memory, and comes with the next
    /// pass whoever makes it. (If its receiver had no room and pulls the
    /// data instead, the pull waits for that pass too; the transport's
    /// longer hand-back bounds the wait.)
    pub(super) fn quiet(&self) -> bool {
        self.reqs.len() == self.copies_waiting
            && self.releasing.is_empty()
            && self.exposures == 0
            && self.windows.queued() == 0
    }

    /// Remove request `idx` (live), keeping [`State::copies_waiting`].
    pub(super) fn remove_req(&mut self, idx: usize) -> Req {
        let r = self.reqs.remove(idx);
        if r.copy_len > 0 {
            self.copies_waiting = self.copies_waiting.saturating_sub(1);
        }
        r
    }
}

// SAFETY: `State` holds raw pointers only to memory that a live request's
// borrow keeps alive; all access is under the device mutex.
unsafe impl Send for State {}
