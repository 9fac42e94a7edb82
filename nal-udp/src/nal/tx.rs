//! Sending: Portals messages handed to the protocol, lazy acknowledgments
//! held for the next message to their peer, the protocol's events, and the
//! datagrams it writes, batched into `sendmmsg`.

use portals::nal::{LAZY_ACK_BATCH, LAZY_ACK_HOLD};
use std::sync::atomic::Ordering;
use std::time::Instant;

use std::os::fd::AsRawFd;

use nal_sys::batch::SendBatch;
use portals::{FailType, Outbound, SendToken};

use crate::deliver::{out_payload, peer_id, process_id};
use crate::fault::{Fate, FaultInjector};
use crate::proto::{Event, SendError};

use super::{Inner, State, NO_TOKEN};

impl Inner {
    /// Hand one Portals message to the protocol.
    pub(super) fn submit(&self, st: &mut State, msg: Outbound, now: Instant) {
        let dst = msg.header.dst;
        tracing::trace!(%dst, op = ?msg.header.op, len = msg.payload.len(), "send");
        if dst == self.me {
            portals::loopback::deliver_local(&self.core, msg);
            return;
        }
        let peer = peer_id(dst);
        if !st.addrs.contains_key(&peer) {
            tracing::warn!(peer = %dst, "send to a process with no known address");
            self.fail(msg.token);
            self.core.with_engine(|e| e.peer_failed(dst));
            return;
        }
        let header = msg.header.encode();
        let token = match msg.token {
            Some(t) => st.tokens.insert(t) as u64,
            None => NO_TOKEN,
        };
        let r = st
            .ep
            .send(now, peer, &header, out_payload(msg.payload), token);
        if let Err(e) = r {
            tracing::debug!(peer = %dst, error = %e, "send refused");
            let t = (token != NO_TOKEN)
                .then(|| st.tokens.try_remove(token as usize))
                .flatten();
            self.fail(t);
            if matches!(e, SendError::PeerDead(_)) {
                self.core.with_engine(|e| e.peer_failed(dst));
            }
        }
    }

    pub(super) fn fail(&self, token: Option<SendToken>) {
        if let Some(t) = token {
            self.core
                .with_engine(|e| e.send_complete(t, FailType::Unreachable));
        }
    }

    /// Send the engine's responses, report the protocol's events to the
    /// engine, and put every datagram the protocol has on the wire. `now` is
    /// the time of the pass that calls it: one clock read per pass, not per
    /// step (each costs about 25 ns here, several times per message).
    ///
    /// A lazy acknowledgment is held back instead: a datagram of its own
    /// put a second `sendmmsg` on a round trip's path, as in TCP (see
    /// `nal-tcp`'s `release_staged`). It leaves with the next message
    /// [`Nal::send`] gets, or from a pass once [`LAZY_ACK_HOLD`] has passed
    /// or [`LAZY_ACK_BATCH`] wait, or before a pass sleeps, or at shutdown.
    pub(super) fn settle(&self, st: &mut State, now: Instant) {
        loop {
            for msg in std::mem::take(&mut st.responses) {
                if msg.header.op == portals::wire::Op::Ack && msg.header.ack_lazy {
                    // The hold starts now, not at the pass's clock: taking
                    // the message that caused it may have used the hold up
                    // (a loaded host, an unoptimised build), and the
                    // application has not had its chance to answer yet.
                    st.lazy_since.get_or_insert_with(Instant::now);
                    st.lazy_acks.push(msg);
                    continue;
                }
                self.submit(st, msg, now);
            }
            self.events(st);
            self.transmit(st, now);
            self.events(st);
            if st.responses.is_empty() {
                return;
            }
        }
    }

    /// Submit the held lazy acknowledgments (the caller settles).
    pub(super) fn release_lazy_acks(&self, st: &mut State, now: Instant) {
        if st.lazy_acks.is_empty() {
            return;
        }
        st.lazy_since = None;
        for msg in std::mem::take(&mut st.lazy_acks) {
            self.submit(st, msg, now);
        }
    }

    /// At the end of a pass: send the held acknowledgments, the Portals
    /// layer's lazy ones and the protocol's delayed ones, if the pass will
    /// sleep (`sleeping`: waking only to send them would cost more), or
    /// the lazy ones once they are old or many enough.
    pub(super) fn settle_held_acks(&self, st: &mut State, sleeping: bool) {
        let delayed = sleeping && st.ep.release_delayed_acks();
        let lazy_due = st.lazy_since.is_some_and(|since| {
            sleeping || st.lazy_acks.len() >= LAZY_ACK_BATCH || since.elapsed() >= LAZY_ACK_HOLD
        });
        if !delayed && !lazy_due {
            return;
        }
        let now = Instant::now();
        if lazy_due {
            self.release_lazy_acks(st, now);
        }
        self.settle(st, now);
    }

    pub(super) fn events(&self, st: &mut State) {
        while let Some(ev) = st.ep.poll_event() {
            match ev {
                Event::SendComplete { token, ok, .. } => {
                    if token == NO_TOKEN {
                        continue;
                    }
                    if let Some(t) = st.tokens.try_remove(token as usize) {
                        let fail = if ok {
                            FailType::Ok
                        } else {
                            FailType::Unreachable
                        };
                        self.core.with_engine(|e| e.send_complete(t, fail));
                    }
                }
                Event::PeerDead { peer } => {
                    let p = process_id(peer);
                    tracing::warn!(peer = %p, "peer declared dead");
                    self.core.with_engine(|e| e.peer_failed(p));
                }
            }
        }
    }

    /// Move datagrams from the protocol to the socket until either has
    /// nothing left.
    pub(super) fn transmit(&self, st: &mut State, now: Instant) {
        let fd = self.sock.as_raw_fd();
        loop {
            if !st.tx.is_empty() {
                let f = st.tx.flush(fd);
                if f.icmp {
                    self.read_icmp(st);
                }
                if f.failed > 0 {
                    self.counters
                        .send_errors
                        .fetch_add(f.failed as u64, Ordering::Relaxed);
                }
                if f.blocked {
                    if !st.tx_blocked {
                        self.counters.send_blocked.fetch_add(1, Ordering::Relaxed);
                        // A quiet application's longer hand-back must not
                        // hold the rest back (under the state lock, as the
                        // progress thread's look: see `progress_thread`).
                        self.gate.unquiet();
                    }
                    st.tx_blocked = true;
                    return;
                }
            }
            st.tx_blocked = false;
            let produced = self.fill(st, now);
            if produced == 0 && st.tx.is_empty() {
                // Nothing follows a held datagram: send it now rather than
                // turn a reordering into a loss.
                match st.held.take() {
                    Some((d, a)) => {
                        st.tx.push(&d, a);
                    }
                    None => return,
                }
            }
        }
    }

    /// Fill the send batch from the protocol; returns datagrams produced.
    pub(super) fn fill(&self, st: &mut State, now: Instant) -> usize {
        let State {
            ep,
            addrs,
            tx,
            fault,
            held,
            ..
        } = st;
        let mut produced = 0;
        while let Some(slot) = tx.slot() {
            let Some((peer, n)) = ep.poll_transmit(now, slot) else {
                break;
            };
            produced += 1;
            let Some(&target) = addrs.get(&peer) else {
                continue;
            };
            let fate = fault.as_mut().map_or(Fate::Send, FaultInjector::decide);
            match fate {
                Fate::Send => tx.commit(n, target),
                Fate::Drop => continue,
                Fate::Duplicate => {
                    tx.commit(n, target);
                    let last = tx.queued_len().saturating_sub(1);
                    if let Some(copy) = tx.queued(last).map(|(d, _)| d.to_vec()) {
                        tx.push(&copy, target);
                    }
                }
                Fate::Hold => {
                    let bytes = slot_copy(tx, n);
                    if let Some((d, a)) = held.replace((bytes, target)) {
                        tx.push(&d, a);
                    }
                    continue;
                }
            }
            if let Some((d, a)) = held.take() {
                if !tx.push(&d, a) {
                    *held = Some((d, a));
                }
            }
        }
        produced
    }
}

/// A copy of the first `n` bytes of the batch's free slot (the datagram the
/// protocol just wrote there, not committed).
fn slot_copy(tx: &mut SendBatch, n: usize) -> Vec<u8> {
    tx.slot()
        .map(|s| s[..n.min(s.len())].to_vec())
        .unwrap_or_default()
}
