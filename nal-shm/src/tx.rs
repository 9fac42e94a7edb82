//! The sending side: per-peer queues, and writing them into the peer's
//! ring as inline, pipelined or single-copy records.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

use portals::wire::Op;
use portals::wire::HEADER_LEN;
use portals::{FailType, Outbound, Payload, SendToken};

use crate::doorbell::{self, Urgency};
use crate::failure::Failure;
use crate::nal::{bump, lock, Inner, Peer};
use crate::ring::{Kind, Producer, RingError};
use crate::scatter;
use crate::segment::CMA_OK;

/// Bytes of a single-copy record's body after the header: address,
/// length, cookie.
pub(crate) const CMA_TRAILER: usize = 24;

/// A Portals message on its way into a ring.
pub(crate) struct Pending {
    hdr: [u8; HEADER_LEN],
    payload: Payload,
    token: Option<SendToken>,
    /// Payload bytes already in the ring.
    sent: usize,
    /// Records written so far (0: not started).
    records: u32,
    /// The target answers it with a reply its initiator waits for (get,
    /// swap, fetching atomic): a dozing progress thread must take it.
    answered: bool,
}

/// What a send queue holds.
pub(crate) enum OutMsg {
    /// A Portals message.
    Portals(Pending),
    /// "Done with your single-copy payload `cookie`".
    Done(u64),
}

impl OutMsg {
    pub(crate) fn portals(m: Outbound) -> OutMsg {
        OutMsg::Portals(Pending {
            hdr: m.header.encode(),
            payload: m.payload,
            token: m.token,
            sent: 0,
            records: 0,
            answered: matches!(m.header.op, Op::Get | Op::GetPut | Op::FetchAtomic),
        })
    }
}

/// A single-copy payload the receiver may still be reading: its memory
/// must stay untouched (and alive) until the receiver says it is done.
pub(crate) struct Held {
    /// Keeps owned payload bytes alive; a region stays reserved by the
    /// engine until the token completes.
    _payload: Payload,
    pub(crate) token: Option<SendToken>,
}

/// The send side of one peer.
pub(crate) struct Tx {
    /// Our ring in the peer's inbox, once that is mapped.
    pub(crate) ring: Option<(Producer, usize)>,
    pub(crate) queue: VecDeque<OutMsg>,
    /// Single-copy payloads announced, in announcement order (the receiver
    /// answers in that order, so a `Done` must name the front one).
    pub(crate) awaiting: VecDeque<(u64, Held)>,
    pub(crate) next_cookie: u64,
}

impl Tx {
    pub(crate) fn new() -> Tx {
        Tx {
            ring: None,
            queue: VecDeque::new(),
            awaiting: VecDeque::new(),
            next_cookie: 1,
        }
    }

    /// Take everything queued or awaiting, to fail or abandon; `lent` (the
    /// interface's count of awaited payloads) loses the awaited ones.
    pub(crate) fn take_all(&mut self, lent: &AtomicUsize) -> Vec<Option<SendToken>> {
        lent.fetch_sub(self.awaiting.len(), Ordering::Relaxed);
        let mut out = Vec::new();
        for m in self.queue.drain(..) {
            if let OutMsg::Portals(p) = m {
                out.push(p.token);
            }
        }
        out.extend(self.awaiting.drain(..).map(|(_, h)| h.token));
        out
    }
}

/// Copy the payload's bytes from `from` into `dst` (ring memory), gathering
/// the segments of an iovec descriptor in place.
///
/// # Safety
/// The message's send token must still be open (so the engine keeps a
/// region alive and unwritten).
unsafe fn copy_payload(p: &Payload, from: usize, dst: &mut [u8]) {
    match p {
        Payload::None => {}
        // SAFETY: the caller's contract; ring memory is never descriptor
        // memory.
        Payload::Region(r) => unsafe { r.read_at(from, dst) },
        Payload::Owned(v) => portals_copy::copy(dst, &v[from..from + dst.len()]),
    }
}

/// The payload's address for a single-copy read by the receiver, if it is
/// one range of memory. A region scattered over an iovec descriptor's
/// segments has none (the single-copy record names one range) and goes
/// through the ring instead.
fn payload_addr(p: &Payload) -> Option<u64> {
    match p {
        Payload::None => Some(0),
        Payload::Region(r) if r.is_contiguous() => Some(r.as_ptr() as u64),
        Payload::Region(_) => None,
        Payload::Owned(v) => Some(v.as_ptr() as u64),
    }
}

/// How many ranges a scattered payload lies in, if a single-copy record
/// can name them all (see `scatter.rs`): at most
/// [`scatter::MAX_RANGES`], in a record of at most `max_body` bytes.
fn scattered_ranges(p: &Payload, max_body: usize) -> Option<usize> {
    let Payload::Region(r) = p else {
        return None;
    };
    if r.is_contiguous() {
        return None;
    }
    // SAFETY: called for a queued message, whose token is open.
    let n = unsafe { r.pieces() }
        .filter(|&(_, len)| len > 0)
        .take(scatter::MAX_RANGES + 1)
        .count();
    (n <= scatter::MAX_RANGES && scatter::record_len(n) <= max_body).then_some(n)
}

/// A scattered payload's non-empty ranges as (address, length).
///
/// # Safety
/// The message's send token must still be open.
unsafe fn region_ranges(p: &Payload) -> impl Iterator<Item = (u64, u64)> + '_ {
    let pieces = match p {
        // SAFETY: the caller's contract.
        Payload::Region(r) => Some(unsafe { r.pieces() }),
        _ => None,
    };
    pieces
        .into_iter()
        .flatten()
        .filter(|&(_, len)| len > 0)
        .map(|(ptr, len)| (ptr as u64, len as u64))
}

impl Inner {
    /// Queue `msg` for its destination and write what fits. Does not reap
    /// failures (the caller may hold a receive lock).
    pub(crate) fn send_inner(&self, msg: Outbound) {
        let dst = msg.header.dst;
        tracing::trace!(%dst, op = ?msg.header.op, len = msg.payload.len(), "send");
        if dst == self.me {
            portals::loopback::deliver_local(&self.core, msg);
            return;
        }
        let Some(p) = self.peer(dst) else {
            tracing::warn!(peer = %dst, "send to a process that is not a local peer");
            self.fail_token(msg.token);
            self.core.with_engine(|e| e.peer_failed(dst));
            return;
        };
        if p.failed.load(Ordering::Acquire) || self.stopped.load(Ordering::Acquire) {
            self.fail_token(msg.token);
            self.core.with_engine(|e| e.peer_failed(dst));
            return;
        }
        let mut tx = lock(&p.tx);
        tx.queue.push_back(OutMsg::portals(msg));
        if tx.queue.len() == 1 && tx.ring.is_some() {
            if self.flush(p, &mut tx) > 0 {
                bump(&self.stats.optimistic_sends, 1);
            }
        } else {
            p.has_queue.store(true, Ordering::SeqCst);
        }
    }

    /// Tell `p` we are done with its single-copy payload `cookie`.
    pub(crate) fn send_done(&self, p: &Peer, cookie: u64) {
        let mut tx = lock(&p.tx);
        tx.queue.push_back(OutMsg::Done(cookie));
        if tx.queue.len() == 1 && tx.ring.is_some() {
            self.flush(p, &mut tx);
        } else {
            p.has_queue.store(true, Ordering::SeqCst);
        }
    }

    pub(crate) fn fail_token(&self, token: Option<SendToken>) {
        if let Some(t) = token {
            self.core
                .with_engine(|e| e.send_complete(t, FailType::Unreachable));
        }
    }

    /// Write as much of `p`'s queue into its ring as fits; returns the
    /// number of records written. A full ring leaves the rest queued and
    /// asks the consumer to ring our doorbell when it frees space.
    pub(crate) fn flush(&self, p: &Peer, tx: &mut Tx) -> usize {
        if p.failed.load(Ordering::Relaxed) {
            return 0;
        }
        let Some(seg) = p.outbox.get() else {
            return 0;
        };
        let mut pushed = 0;
        let mut asked = false;
        let mut urgency = Urgency::Message;
        let result = loop {
            if tx.queue.is_empty() {
                break Ok(());
            }
            match self.push_front(p, tx, &mut urgency) {
                Ok(true) => pushed += 1,
                Ok(false) if !asked => {
                    // Full: ask to be rung when space frees, then look once
                    // more (the consumer may have freed it just before it
                    // could see the request; SeqCst fences on both sides).
                    if let Some((_, i)) = &tx.ring {
                        seg.ctl(*i).producer_waiting.store(1, Ordering::SeqCst);
                    }
                    fence(Ordering::SeqCst);
                    asked = true;
                }
                Ok(false) => {
                    bump(&self.stats.ring_full, 1);
                    break Ok(());
                }
                Err(e) => break Err(e),
            }
        };
        p.has_queue.store(!tx.queue.is_empty(), Ordering::SeqCst);
        if pushed > 0 && doorbell::ring(seg, urgency) {
            bump(&self.stats.futex_wakes_sent, 1);
        }
        if let Err(e) = result {
            self.note_failure(p, Failure::Corrupt(format!("our ring in its inbox: {e}")));
        }
        pushed
    }

    /// Write one record of the queue's front message; Ok(false) if the
    /// ring has no room for it now. Raises `urgency` to
    /// [`Urgency::Work`] for a record the receiver must act on (see
    /// `doorbell`): single-copy, pipelined, or a request it answers.
    fn push_front(&self, p: &Peer, tx: &mut Tx, urgency: &mut Urgency) -> Result<bool, RingError> {
        let Tx {
            ring: Some((prod, ring)),
            queue,
            awaiting,
            next_cookie,
        } = tx
        else {
            return Ok(false);
        };
        let Some(front) = queue.front_mut() else {
            return Ok(false);
        };
        let m = match front {
            OutMsg::Done(cookie) => {
                let c = *cookie;
                if !prod.push(Kind::Done, 8, |b| b.copy_from_slice(&c.to_le_bytes()))? {
                    return Ok(false);
                }
                queue.pop_front();
                return Ok(true);
            }
            OutMsg::Portals(m) => m,
        };
        let plen = m.payload.len();
        // Short-circuits: a small message does not look at the peer's
        // single-copy verdict (a load from its inbox) at all.
        let single_copy = m.records == 0
            && plen >= self.cfg.cma_min
            && self.cfg.cma
            && self.single_copy_to(p, *ring);
        if single_copy {
            // One range (a contiguous payload), or the ranges of a
            // scattered one if a record can name them all.
            let cookie = *next_cookie;
            let (hdr, payload) = (&m.hdr, &m.payload);
            let pushed = if let Some(addr) = payload_addr(payload) {
                Some(prod.push(Kind::Cma, HEADER_LEN + CMA_TRAILER, |b| {
                    b[..HEADER_LEN].copy_from_slice(hdr);
                    b[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&addr.to_le_bytes());
                    b[HEADER_LEN + 8..HEADER_LEN + 16]
                        .copy_from_slice(&(plen as u64).to_le_bytes());
                    b[HEADER_LEN + 16..].copy_from_slice(&cookie.to_le_bytes());
                })?)
            } else if let Some(n) = scattered_ranges(payload, self.max_body) {
                Some(prod.push(Kind::CmaV, scatter::record_len(n), |b| {
                    // SAFETY: the token is still open (the payload is held
                    // until the receiver's Done).
                    let pieces = unsafe { region_ranges(payload) };
                    scatter::encode(b, hdr, cookie, n, pieces);
                })?)
            } else {
                None
            };
            match pushed {
                Some(false) => return Ok(false),
                Some(true) => {
                    *urgency = Urgency::Work;
                    *next_cookie += 1;
                    if let Some(OutMsg::Portals(m)) = queue.pop_front() {
                        self.lent.fetch_add(1, Ordering::Relaxed);
                        awaiting.push_back((
                            cookie,
                            Held {
                                _payload: m.payload,
                                token: m.token,
                            },
                        ));
                    }
                    bump(&self.stats.messages_sent, 1);
                    bump(&self.stats.bytes_sent, plen as u64);
                    bump(&self.stats.single_copy_sent, 1);
                    return Ok(true);
                }
                // Too many pieces: through the ring.
                None => {}
            }
        }
        let room = prod.room()?;
        let left = plen - m.sent;
        if m.records == 0 {
            let first = left
                .min(self.max_body - HEADER_LEN)
                .min(room.saturating_sub(HEADER_LEN));
            if room < HEADER_LEN || first < left.min(self.min_chunk) {
                return Ok(false);
            }
            let (hdr, payload) = (&m.hdr, &m.payload);
            prod.push(Kind::Msg, HEADER_LEN + first, |b| {
                b[..HEADER_LEN].copy_from_slice(hdr);
                // SAFETY: the token is still open: it completes below,
                // after the last byte is copied.
                unsafe { copy_payload(payload, 0, &mut b[HEADER_LEN..]) };
            })?;
            m.sent = first;
        } else {
            let n = left.min(self.max_body).min(room);
            if n < left.min(self.min_chunk) {
                return Ok(false);
            }
            let (from, payload) = (m.sent, &m.payload);
            // SAFETY: as above.
            prod.push(Kind::Chunk, n, |b| unsafe {
                copy_payload(payload, from, b)
            })?;
            m.sent += n;
        }
        m.records += 1;
        if m.answered || m.records > 1 || m.sent < plen {
            *urgency = Urgency::Work;
        }
        if m.sent == plen {
            let records = m.records;
            if let Some(OutMsg::Portals(m)) = queue.pop_front() {
                if let Some(t) = m.token {
                    self.core.with_engine(|e| e.send_complete(t, FailType::Ok));
                }
            }
            bump(&self.stats.messages_sent, 1);
            bump(&self.stats.bytes_sent, plen as u64);
            if records == 1 {
                bump(&self.stats.inline_sent, 1);
            } else {
                bump(&self.stats.pipelined_sent, 1);
            }
        }
        Ok(true)
    }

    /// Whether `p` said single-copy works from us (in our ring's control
    /// block in its inbox).
    fn single_copy_to(&self, p: &Peer, ring: usize) -> bool {
        p.outbox
            .get()
            .is_some_and(|s| s.ctl(ring).cma.load(Ordering::Acquire) == CMA_OK)
    }

    /// The receiver is done with single-copy payload `cookie`: complete its
    /// send. A cookie other than the oldest outstanding is a protocol
    /// violation.
    pub(crate) fn on_done(&self, p: &Peer, cookie: u64) -> Result<(), Failure> {
        let held = {
            let mut tx = lock(&p.tx);
            match tx.awaiting.front() {
                Some((c, _)) if *c == cookie => {
                    self.lent.fetch_sub(1, Ordering::Relaxed);
                    tx.awaiting.pop_front().map(|(_, h)| h)
                }
                _ => None,
            }
        };
        let Some(h) = held else {
            return Err(Failure::Corrupt(format!(
                "unknown single-copy cookie {cookie}"
            )));
        };
        if let Some(t) = h.token {
            self.core.with_engine(|e| e.send_complete(t, FailType::Ok));
        }
        Ok(())
    }
}
