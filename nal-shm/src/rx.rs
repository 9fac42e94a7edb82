//! The receiving side: reading a peer's ring in our inbox, feeding headers
//! to the engine, depositing payloads (from the ring, or single-copy from
//! the sender's memory), and answering single-copy senders.
//!
//! Everything read from the ring is checked; a violation fails the peer.

use std::sync::atomic::{fence, Ordering};
use std::sync::{OnceLock, TryLockError};
use std::time::Duration;

use portals::wire::{Header, HEADER_LEN};
use portals::{Outbound, RecvAction, RecvToken, Region};

use crate::cma;
use crate::doorbell::{self, Urgency};
use crate::failure::Failure;
use crate::nal::{bump, Inner, Peer, NOT_HELD};
use crate::ring::{Consumer, Kind};
use crate::scatter::RemoteRanges;
use crate::segment::CMA_OK;
use crate::tx::CMA_TRAILER;

/// Bytes of ring records one peer's ring is read for in one pass, so that
/// one busy peer does not starve the others (or a waiting thread).
const RX_BUDGET: usize = 512 << 10;

/// Local pieces one single-copy read fills at most (a scattered region of
/// an iovec descriptor; far below the kernel's `IOV_MAX`).
const CMA_IOV: usize = 64;

/// Where the receive side of one peer's ring is.
pub(crate) enum Phase {
    /// Between messages.
    Idle,
    /// A message whose payload continues in chunk records: bytes go to
    /// `region` (from `filled`), the rest is dropped; `remaining` payload
    /// bytes are still to come.
    Pipe {
        region: Region,
        filled: usize,
        remaining: u64,
        total: u64,
        token: Option<RecvToken>,
        respond: Option<Outbound>,
    },
    /// A single-copy read from the sender's memory at `remote`, `done`
    /// bytes of `region` so far.
    Cma {
        region: Region,
        done: usize,
        remote: RemoteRanges,
        token: RecvToken,
        cookie: u64,
    },
}

/// Whether the engine took a record.
enum Taken {
    /// Consumed: the ring cell may be released.
    Yes,
    /// Held back by the engine ([`RecvAction::Defer`]): leave it in the
    /// ring and read nothing more from this peer until the intake resumes.
    Held,
}

/// The receive side of one peer: the consumer of its ring in our inbox.
pub(crate) struct Rx {
    pub(crate) ring: Consumer,
    pub(crate) phase: Phase,
    /// Where single-copy reads land first when they cannot go straight
    /// into the descriptor fast (see [`bounce_read`]); empty until then.
    pub(crate) bounce: Vec<u8>,
}

/// A single-copy read goes through [`Rx::bounce`] when the kernel's copy
/// straight into the descriptor would be slow: the kernel copies with
/// `rep movsb`, which on AMD Zen 3 moves 1.2–2 GB/s instead of 6–10 GB/s
/// (`process_vm_readv` of 256 KiB) when the destination lies 1 to 31
/// bytes past the source modulo a page (`results/stop47-memcpy-scan.txt`,
/// `portals-copy`). The bounce buffer sits at the source's page offset, so
/// the kernel's copy is fast, and `portals-copy`'s own loop moves the
/// bytes on at tens of GB/s. Below this many bytes a read goes straight.
const BOUNCE_MIN: usize = 4096;
/// Largest read through the bounce buffer (one step; the next step reads
/// on): bounds the buffer of each peer.
const BOUNCE_MAX: usize = 1 << 20;

/// Read `len` bytes at `remote` in process `pid` through `bounce` into
/// `dst`; returns how many bytes were read.
///
/// # Safety
/// As [`cma::read`] for `dst` and `len`.
unsafe fn bounce_read(
    bounce: &mut Vec<u8>,
    pid: u32,
    remote: u64,
    dst: *mut u8,
    len: usize,
) -> std::io::Result<usize> {
    let need = len + 2 * 4096;
    if bounce.len() < need {
        *bounce = vec![0; need];
    }
    let at = bounce.as_ptr().align_offset(4096) + (remote % 4096) as usize;
    let via = &mut bounce[at..at + len];
    // SAFETY: `via` is our own buffer of `len` bytes, borrowed alone here.
    let n = unsafe { cma::read(pid, remote, via.as_mut_ptr(), len)? };
    // SAFETY: `dst` is writable for `len >= n` bytes (our caller's
    // contract) and lies outside `bounce`, which is ours alone.
    unsafe { portals_copy::copy_nonoverlapping(via.as_ptr(), dst, n) };
    Ok(n)
}

/// Test knob ([`crate::ANSWER_DELAY_ENV`]): how long the progress thread
/// waits between taking a whole message and queueing its response.
fn answer_delay() -> Option<Duration> {
    static DELAY: OnceLock<Option<Duration>> = OnceLock::new();
    *DELAY.get_or_init(|| {
        std::env::var(crate::ANSWER_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
    })
}

/// Wait as [`answer_delay`] says, on the progress thread only (an
/// application thread that takes a message answers it before it can look
/// at the message's event, so delaying it shows nothing).
fn delay_answer() {
    if let Some(d) = answer_delay() {
        if std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with(crate::nal::PROGRESS_THREAD_PREFIX))
        {
            std::thread::sleep(d);
        }
    }
}

fn corrupt(what: impl Into<String>) -> Failure {
    Failure::Corrupt(what.into())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

/// Copy `data` into the rest of `region` after `filled`, as far as it
/// goes; returns the new fill.
fn fill(region: &Region, filled: usize, data: &[u8]) -> usize {
    let n = data.len().min(region.len() - filled);
    if n > 0 {
        // SAFETY: the region is lent to us until its token completes, and
        // the receive lock we hold makes us its only writer; `data` is ring
        // memory, never descriptor memory. Straight into the segments of an
        // iovec descriptor.
        unsafe { region.write_at(filled, &data[..n]) };
    }
    filled + n
}

impl Inner {
    /// Read `p`'s ring as far as the budget goes; true if anything moved.
    pub(crate) fn service(&self, p: &Peer) -> bool {
        if p.failed.load(Ordering::Relaxed) || p.is_held(&self.core) {
            return false;
        }
        // Nothing published and no single-copy read under way: nothing to
        // do, found with two loads instead of the lock's two atomic
        // read-modify-writes (a spinning waiter makes this look at every
        // peer on every pass).
        if self.cma_active.load(Ordering::SeqCst) == 0 && !self.inbox.ring(p.ring_in).pending() {
            return false;
        }
        let mut rx = match p.rx.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(g)) => g.into_inner(),
            // Another thread reads this ring right now.
            Err(TryLockError::WouldBlock) => return false,
        };
        let (worked, released, result) = self.drain(p, &mut rx);
        drop(rx);
        if released {
            // SeqCst against the producer's request (see `Inner::flush`):
            // either it sees the space we released, or we see its request.
            fence(Ordering::SeqCst);
            let ctl = self.inbox.ctl(p.ring_in);
            if ctl.producer_waiting.load(Ordering::Relaxed) != 0
                && ctl.producer_waiting.swap(0, Ordering::SeqCst) != 0
            {
                if let Some(seg) = p.outbox.get() {
                    if doorbell::ring(seg, Urgency::Work) {
                        bump(&self.stats.futex_wakes_sent, 1);
                    }
                }
            }
        }
        if let Err(f) = result {
            self.note_failure(p, f);
        }
        worked
    }

    /// Returns (anything moved, ring space released, outcome).
    fn drain(&self, p: &Peer, rx: &mut Rx) -> (bool, bool, Result<(), Failure>) {
        let (mut worked, mut released) = (false, false);
        let mut budget = RX_BUDGET;
        // Read before any header is offered (see `NiCore::intake_epoch`).
        let epoch = self.core.intake_epoch();
        // A SeqCst store is a full barrier: skip it when there is nothing
        // to clear (nearly always).
        if p.held.load(Ordering::Relaxed) != NOT_HELD {
            p.held.store(NOT_HELD, Ordering::SeqCst);
        }
        let Rx {
            ring,
            phase,
            bounce,
        } = rx;
        loop {
            if let Phase::Cma { .. } = phase {
                // One step per pass: other peers and the other direction
                // move between the steps of a large read.
                let r = self.cma_step(p, phase, bounce);
                return (true, released, r);
            }
            if budget == 0 {
                return (worked, released, Ok(()));
            }
            let rec = match ring.peek() {
                Ok(Some(r)) => r,
                Ok(None) => return (worked, released, Ok(())),
                Err(e) => return (worked, released, Err(corrupt(format!("its ring: {e}")))),
            };
            worked = true;
            let r = match self.on_record(p, phase, rec.kind, ring.body(&rec)) {
                Ok(Taken::Yes) => Ok(()),
                Ok(Taken::Held) => {
                    // The engine's queue for it is full: the record stays in
                    // the ring (the sender waits for space), and so does
                    // everything behind it, until the intake resumes.
                    p.held.store(epoch, Ordering::SeqCst);
                    return (worked, released, Ok(()));
                }
                Err(f) => Err(f),
            };
            ring.consume(rec);
            released = true;
            budget = budget.saturating_sub(rec.len + 8);
            if r.is_err() {
                return (worked, released, r);
            }
        }
    }

    fn on_record(
        &self,
        p: &Peer,
        phase: &mut Phase,
        kind: Kind,
        body: &[u8],
    ) -> Result<Taken, Failure> {
        match (kind, &mut *phase) {
            (Kind::Done, _) => {
                if body.len() != 8 {
                    return Err(corrupt("done record of the wrong size"));
                }
                self.on_done(p, u64_at(body, 0)).map(|()| Taken::Yes)
            }
            (Kind::Msg, Phase::Idle) => self.on_msg(p, phase, body),
            (Kind::Cma, Phase::Idle) => self.on_cma(p, phase, body),
            (Kind::CmaV, Phase::Idle) => self.on_cmav(p, phase, body),
            (Kind::Chunk, Phase::Pipe { .. }) => self.on_chunk(phase, body).map(|()| Taken::Yes),
            (k, _) => Err(corrupt(format!("{k:?} record out of sequence"))),
        }
    }

    /// Decode and check a header from `p`.
    fn header(&self, p: &Peer, body: &[u8]) -> Result<Header, Failure> {
        let h = match Header::decode(body) {
            Ok(h) => h,
            Err(e) => {
                self.core.with_engine(|e| e.note_bad_header());
                return Err(corrupt(format!("header: {e}")));
            }
        };
        if h.src != p.id {
            self.core.with_engine(|e| e.note_bad_header());
            return Err(corrupt(format!("header claims to come from {}", h.src)));
        }
        Ok(h)
    }

    fn on_msg(&self, p: &Peer, phase: &mut Phase, body: &[u8]) -> Result<Taken, Failure> {
        let h = self.header(p, body)?;
        let data = &body[HEADER_LEN..];
        let plen = h.payload_len();
        if data.len() as u64 > plen {
            return Err(corrupt("more payload than the header announces"));
        }
        if data.len() as u64 == plen {
            // Whole: match, copy and complete under one engine lock.
            let out = self.core.with_engine(|e| match e.recv_header(&h) {
                RecvAction::Deposit { region, token, .. } => {
                    fill(&region, 0, data);
                    Some(e.recv_complete(token))
                }
                RecvAction::Discard(_) => Some(None),
                RecvAction::Respond { response, .. } => Some(Some(response)),
                RecvAction::Defer => None,
            });
            let Some(out) = out else {
                return Ok(Taken::Held);
            };
            self.received(plen);
            if let Some(m) = out {
                delay_answer();
                self.send_inner(m);
            }
            return Ok(Taken::Yes);
        }
        let (region, token, respond) = match self.core.with_engine(|e| e.recv_header(&h)) {
            RecvAction::Deposit { region, token, .. } => (region, Some(token), None),
            RecvAction::Discard(_) => (Region::empty(), None, None),
            RecvAction::Respond { response, .. } => (Region::empty(), None, Some(response)),
            RecvAction::Defer => return Ok(Taken::Held),
        };
        let filled = fill(&region, 0, data);
        *phase = Phase::Pipe {
            region,
            filled,
            remaining: plen - data.len() as u64,
            total: plen,
            token,
            respond,
        };
        Ok(Taken::Yes)
    }

    fn on_chunk(&self, phase: &mut Phase, data: &[u8]) -> Result<(), Failure> {
        let Phase::Pipe {
            region,
            filled,
            remaining,
            ..
        } = phase
        else {
            return Err(corrupt("chunk outside a message"));
        };
        if data.len() as u64 > *remaining || data.is_empty() {
            return Err(corrupt("chunk longer than the message's rest"));
        }
        *filled = fill(region, *filled, data);
        *remaining -= data.len() as u64;
        if *remaining > 0 {
            return Ok(());
        }
        let Phase::Pipe {
            token,
            respond,
            total,
            ..
        } = std::mem::replace(phase, Phase::Idle)
        else {
            return Ok(());
        };
        let total = &total;
        let mut out = respond;
        if let Some(t) = token {
            out = self.core.with_engine(|e| e.recv_complete(t));
        }
        self.received(*total);
        if let Some(m) = out {
            self.send_inner(m);
        }
        Ok(())
    }

    fn on_cma(&self, p: &Peer, phase: &mut Phase, body: &[u8]) -> Result<Taken, Failure> {
        if body.len() != HEADER_LEN + CMA_TRAILER {
            return Err(corrupt("single-copy record of the wrong size"));
        }
        let h = self.header(p, body)?;
        let (remote, len, cookie) = (
            u64_at(body, HEADER_LEN),
            u64_at(body, HEADER_LEN + 8),
            u64_at(body, HEADER_LEN + 16),
        );
        if len != h.payload_len() {
            return Err(corrupt("single-copy length differs from the header's"));
        }
        if remote.checked_add(len).is_none() {
            return Err(corrupt("single-copy address range overflows"));
        }
        self.start_cma(p, phase, &h, RemoteRanges::One(remote), cookie)
    }

    /// A single-copy record naming several ranges (see `scatter.rs`).
    fn on_cmav(&self, p: &Peer, phase: &mut Phase, body: &[u8]) -> Result<Taken, Failure> {
        let h = self.header(p, body)?;
        let (cookie, remote) = RemoteRanges::decode(body, h.payload_len()).map_err(corrupt)?;
        self.start_cma(p, phase, &h, remote, cookie)
    }

    /// Offer a single-copy message's header to the engine and, if it is to
    /// be deposited, start reading from `remote`.
    fn start_cma(
        &self,
        p: &Peer,
        phase: &mut Phase,
        h: &portals::wire::Header,
        remote: RemoteRanges,
        cookie: u64,
    ) -> Result<Taken, Failure> {
        if self.inbox.ctl(p.ring_in).cma.load(Ordering::Acquire) != CMA_OK {
            return Err(corrupt("single-copy record where none was agreed"));
        }
        let len = h.payload_len();
        match self.core.with_engine(|e| e.recv_header(h)) {
            RecvAction::Deposit { region, token, .. } if region.is_empty() => {
                let out = self.core.with_engine(|e| e.recv_complete(token));
                self.send_done(p, cookie);
                self.received(0);
                if let Some(m) = out {
                    self.send_inner(m);
                }
            }
            RecvAction::Deposit { region, token, .. } => {
                if region.len() as u64 > len {
                    return Err(corrupt("engine region longer than the payload"));
                }
                self.cma_active.fetch_add(1, Ordering::SeqCst);
                bump(&self.stats.single_copy_started, 1);
                *phase = Phase::Cma {
                    region,
                    done: 0,
                    remote,
                    token,
                    cookie,
                };
            }
            RecvAction::Discard(_) => self.send_done(p, cookie),
            RecvAction::Respond { response, .. } => {
                self.send_done(p, cookie);
                self.send_inner(response);
            }
            // The sender's memory stays lent until we take it later.
            RecvAction::Defer => return Ok(Taken::Held),
        }
        Ok(Taken::Yes)
    }

    /// Read the next `cma_chunk` bytes of a single-copy payload; complete
    /// it after the last.
    fn cma_step(&self, p: &Peer, phase: &mut Phase, bounce: &mut Vec<u8>) -> Result<(), Failure> {
        let Phase::Cma {
            region,
            done,
            remote,
            ..
        } = phase
        else {
            return Ok(());
        };
        let n = (region.len() - *done).min(self.cfg.cma_chunk.max(1));
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // Our region's pieces (one, or an iovec descriptor's segments),
        // then the sender's ranges for as many bytes: one
        // `process_vm_readv` copies from the one list into the other.
        let mut local = [empty; CMA_IOV];
        let (mut k, mut bytes) = (0, 0);
        // SAFETY: the region is lent to us until its token completes, and
        // the receive lock we hold makes us its only writer.
        for (ptr, len) in unsafe { region.pieces_from(*done) } {
            if k == CMA_IOV || bytes == n {
                break;
            }
            let take = len.min(n - bytes);
            local[k] = libc::iovec {
                iov_base: ptr.cast(),
                iov_len: take,
            };
            k += 1;
            bytes += take;
        }
        let mut far = [empty; CMA_IOV];
        let (r, rbytes) = remote.iovecs(*done, bytes, &mut far);
        if rbytes < bytes {
            // Fewer remote ranges fit: read only as far as they go.
            let mut keep = rbytes;
            k = 0;
            while keep > 0 {
                local[k].iov_len = local[k].iov_len.min(keep);
                keep -= local[k].iov_len;
                k += 1;
            }
        }
        let (to, from) = (local[0].iov_base.cast::<u8>(), far[0].iov_base as *const u8);
        let got = if k == 1
            && r == 1
            && local[0].iov_len >= BOUNCE_MIN
            && portals_copy::short_distance(from, to)
        {
            bump(&self.stats.single_copy_bounced, 1);
            // SAFETY: the one local piece lies inside the region, lent to
            // us alone (see above); the remote range is only interpreted
            // by the kernel.
            unsafe {
                bounce_read(
                    bounce,
                    p.addr.pid,
                    from as u64,
                    to,
                    local[0].iov_len.min(BOUNCE_MAX),
                )
            }
        } else {
            // SAFETY: the local pieces lie inside the region, lent to us
            // alone (see above); the remote ranges are only interpreted by
            // the kernel.
            unsafe { cma::read_vectored(p.addr.pid, &local[..k], &far[..r]) }
        };
        match got {
            Ok(0) => return Err(Failure::CmaRead("the sender's payload ended early".into())),
            Ok(k) => {
                *done += k;
                bump(&self.stats.single_copy_bytes, k as u64);
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(Failure::Dead),
            Err(e) => return Err(Failure::CmaRead(e.to_string())),
        }
        if *done < region.len() {
            return Ok(());
        }
        // The sender may have shut down, and freed the memory, while we
        // read: then the bytes are not trustworthy. (It sets the flag
        // before it lets the memory go.)
        if p.outbox
            .get()
            .is_some_and(|s| s.header().closed.load(Ordering::SeqCst) != 0)
        {
            return Err(Failure::Closed);
        }
        let Phase::Cma {
            token,
            cookie,
            region,
            ..
        } = std::mem::replace(phase, Phase::Idle)
        else {
            return Ok(());
        };
        self.cma_active.fetch_sub(1, Ordering::SeqCst);
        // "Done" goes into the sender's queue before the completion posts
        // its event: once a thread here can see a reply's event and send
        // something new to the same peer, the Done is ahead of it in the
        // ring, so the peer's own event for this transfer (a get's, posted
        // when its memory is released) comes first there too. The other
        // way round, a put sent in reaction to the reply reached the peer
        // before the Done, and the peer saw the put before its get.
        self.send_done(p, cookie);
        let out = self.core.with_engine(|e| e.recv_complete(token));
        bump(&self.stats.single_copy_received, 1);
        self.received(region.len() as u64);
        delay_answer();
        if let Some(m) = out {
            self.send_inner(m);
        }
        Ok(())
    }

    fn received(&self, bytes: u64) {
        bump(&self.stats.messages_received, 1);
        bump(&self.stats.bytes_received, bytes);
    }

    /// Abort whatever `p`'s receive side was in the middle of (the peer
    /// failed); with `abandon`, drop the token instead (shutting down).
    pub(crate) fn abort_rx(&self, p: &Peer, abandon: bool) {
        let mut rx = crate::nal::lock(&p.rx);
        let token = match std::mem::replace(&mut rx.phase, Phase::Idle) {
            Phase::Idle => None,
            Phase::Pipe { token, .. } => token,
            Phase::Cma { token, .. } => {
                self.cma_active.fetch_sub(1, Ordering::SeqCst);
                Some(token)
            }
        };
        drop(rx);
        if let (Some(t), false) = (token, abandon) {
            self.core
                .with_engine(|e| e.recv_abort(t, portals::FailType::Incomplete));
        }
    }
}
