//! The send side of one peer: message queue, sequencing and fragmentation,
//! the in-flight window, acknowledgment processing, loss detection and the
//! retransmission timer.
//!
//! Frames get their sequence number when they first enter the window, not
//! at `send`, so a blocked window costs nothing but the queued message.
//!
//! Loss detection works in *transmission order*: every transmission (first
//! or repeated) takes the next transmit number, and a datagram is presumed
//! lost once one sent `reorder_threshold` transmissions after it has been
//! acknowledged. This is the classic three-duplicate-ack rule, but it also
//! catches a lost retransmission without waiting for a timeout (like TCP
//! RACK), which matters at the 30 % loss rates the tests use. The timer is a
//! single RFC 6298 RTO per peer that, on expiry, resends only the oldest
//! unacknowledged datagram and doubles: a peer that has gone away gets one
//! datagram per back-off step, never a window's worth.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::config::{Config, EagerCompletion, Layout};
use super::pool::BufPool;
use super::rtt::RttEstimator;
use super::tlp::TailProbe;
use super::types::{Event, PayloadSource, PeerId, Stats};
use super::wire::{AckInfo, HEADER_LEN};

/// Where an outgoing message's bytes live.
pub(crate) enum Body {
    /// Owned by the endpoint (inline payloads and copied eager payloads).
    Owned(Vec<u8>),
    /// Owned by the caller (large borrowed payloads, and eager ones beyond
    /// [`Config::max_copied_bytes_per_peer`]).
    Borrowed(Box<dyn PayloadSource>),
}

impl Body {
    /// Copy `dst.len()` bytes at `offset`. Callers only ask for ranges they
    /// validated against the message length.
    pub(crate) fn read_at(&self, offset: u64, dst: &mut [u8]) {
        match self {
            Body::Owned(v) => {
                let range = usize::try_from(offset)
                    .ok()
                    .and_then(|s| Some(s..s.checked_add(dst.len())?));
                match range.and_then(|r| v.get(r)) {
                    Some(src) => portals_copy::copy(dst, src),
                    None => {
                        debug_assert!(false, "read outside the payload");
                        dst.fill(0);
                    }
                }
            }
            Body::Borrowed(src) => src.read_at(offset, dst),
        }
    }
}

/// An accepted `send` that has not completed.
pub(crate) struct OutMsg {
    pub(crate) token: u64,
    pub(crate) header: [u8; HEADER_LEN],
    pub(crate) total: u64,
    pub(crate) body: Body,
    /// Sent by rendezvous and pull.
    pub(crate) large: bool,
    /// Bytes of a borrowed eager payload copied into `body`, counted
    /// against [`Config::max_copied_bytes_per_peer`].
    pub(crate) copied: u64,
    /// `SendComplete` already emitted (eager completion on send).
    reported: bool,
    /// Its first frame (`Msg` or `Rndv`) has a sequence number.
    started: bool,
    /// Eager: payload offset of the next fragment to sequence.
    next_off: u64,
    /// Every frame has a sequence number.
    sequenced_all: bool,
    /// Eager: frames sequenced but not yet cumulatively acknowledged.
    unacked: u32,
}

impl OutMsg {
    pub(crate) fn new(
        token: u64,
        header: [u8; HEADER_LEN],
        total: u64,
        body: Body,
        large: bool,
    ) -> Self {
        OutMsg {
            token,
            header,
            total,
            body,
            large,
            copied: 0,
            reported: false,
            started: false,
            next_off: 0,
            sequenced_all: false,
            unacked: 0,
        }
    }
}

/// What a sequenced datagram carries; enough to encode it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegFrame {
    /// First chunk of an eager message: payload `[0, len)`.
    Msg { msg: u64, len: u32 },
    /// Continuation: payload `[offset, offset + len)`.
    Frag { msg: u64, offset: u64, len: u32 },
    /// Rendezvous of a large message.
    Rndv { msg: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    frame: SegFrame,
    /// Transmit number of the latest transmission.
    tx_no: u64,
    sent_at: Instant,
    retransmitted: bool,
    /// A retransmission took a new transmit number: an ack may then be for
    /// an earlier transmission, under another number.
    renumbered: bool,
    acked: bool,
    /// Queued in `lost` for retransmission.
    lost: bool,
    /// Queued by a tail probe, which is no evidence of loss: its
    /// retransmission keeps the transmit number it had, so that an ack for
    /// the original cannot make everything sent since look lost.
    probe: bool,
    /// A tail probe of it went out. When it is acknowledged, every
    /// datagram sent before it that is still unacknowledged had the whole
    /// probe timeout to arrive, and the acknowledgment (cumulative and
    /// SACK) says it did not: lost.
    probed: bool,
}

/// How many retransmission intervals a datagram may wait behind pull data
/// before the timer resends it anyway.
const BULK_DEFERRALS: u32 = 4;

/// Result of a timer check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimerOutcome {
    /// Nothing expired.
    Idle,
    /// Expired; the oldest datagram is queued for retransmission.
    Retransmit,
    /// Too many consecutive expiries: the peer is dead.
    Dead,
}

/// Where the effects of an acknowledgment go: completions, counters, and
/// the buffers of the messages it finished.
pub(crate) struct AckEffects<'a> {
    pub(crate) events: &'a mut VecDeque<Event>,
    pub(crate) stats: &'a mut Stats,
    pub(crate) copies: &'a mut BufPool,
}

/// Send state towards one peer.
pub(crate) struct SendState {
    peer: PeerId,
    next_msg: u64,
    /// Live messages by index. Ordered, so failing them all on peer death
    /// reports tokens in send order.
    msgs: BTreeMap<u64, OutMsg>,
    /// Messages with frames still to sequence, in send order.
    pending: VecDeque<u64>,
    snd_una: u64,
    snd_nxt: u64,
    /// Segments `snd_una..snd_nxt`.
    inflight: VecDeque<Segment>,
    /// Segments not yet acknowledged.
    unacked: usize,
    /// Sequence numbers to retransmit, oldest concern first.
    lost: VecDeque<u64>,
    /// One past the highest sequence number the peer accepts.
    peer_limit: u64,
    tx_counter: u64,
    highest_acked_tx: u64,
    rto_at: Option<Instant>,
    /// Resends the newest datagram of a silent flight before the RTO.
    tlp: TailProbe,
    /// The highest late-duplicate count the peer has reported.
    peer_late_dups: u64,
    /// When the retransmission timer last expired.
    expired_at: Option<Instant>,
    backoff: u32,
    timeouts: u32,
    large_outstanding: u32,
    /// Bytes of copied eager payloads in `msgs`.
    copied_bytes: u64,
}

impl SendState {
    pub(crate) fn new(peer: PeerId, cfg: &Config) -> Self {
        SendState {
            peer,
            next_msg: 0,
            msgs: BTreeMap::new(),
            pending: VecDeque::new(),
            snd_una: 0,
            snd_nxt: 0,
            inflight: VecDeque::new(),
            unacked: 0,
            lost: VecDeque::new(),
            // Until the peer's first ack says otherwise, assume it is
            // configured like us.
            peer_limit: u64::from(cfg.recv_window),
            tx_counter: 0,
            highest_acked_tx: 0,
            rto_at: None,
            tlp: TailProbe::default(),
            peer_late_dups: 0,
            expired_at: None,
            backoff: 0,
            timeouts: 0,
            large_outstanding: 0,
            copied_bytes: 0,
        }
    }

    /// Messages accepted and not yet completed.
    pub(crate) fn live_messages(&self) -> usize {
        self.msgs.len()
    }

    /// Bytes of copied eager payloads held for messages not yet completed.
    pub(crate) fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }

    /// Forget message `id`, and what its copy counted.
    fn remove_msg(&mut self, id: u64) -> Option<OutMsg> {
        let m = self.msgs.remove(&id)?;
        self.copied_bytes = self.copied_bytes.saturating_sub(m.copied);
        Some(m)
    }

    /// Queue a message; completion is reported now if the policy says so.
    pub(crate) fn enqueue(&mut self, mut m: OutMsg, cfg: &Config, events: &mut VecDeque<Event>) {
        let id = self.next_msg;
        self.next_msg += 1;
        self.copied_bytes += m.copied;
        // Only a copy may complete before the peer has the bytes: a
        // borrowed payload is read until its acknowledgment.
        let owned = matches!(m.body, Body::Owned(_));
        if !m.large && owned && cfg.eager_completion == EagerCompletion::OnSend {
            m.reported = true;
            events.push_back(Event::SendComplete {
                peer: self.peer,
                token: m.token,
                ok: true,
            });
        }
        self.msgs.insert(id, m);
        self.pending.push_back(id);
    }

    /// Whether anything sequenced is unacknowledged.
    pub(crate) fn has_unacked(&self) -> bool {
        self.unacked > 0
    }

    /// Whether frames wait for a sequence number.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether large messages wait for their completion notice.
    pub(crate) fn awaiting_done(&self) -> bool {
        self.large_outstanding > 0
    }

    /// The retransmission or tail probe timer, whichever is sooner.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        [self.rto_at, self.tlp.deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// A large message whose rendezvous has been sequenced (what a pull may
    /// ask for).
    pub(crate) fn pullable(&self, msg: u64) -> Option<&OutMsg> {
        self.msgs.get(&msg).filter(|m| m.large && m.started)
    }

    /// An ack is acceptable if it acknowledges nothing never sent.
    pub(crate) fn ack_valid(&self, ack: &AckInfo) -> bool {
        ack.cum_ack <= self.snd_nxt
    }

    /// Apply a (validated) acknowledgment. Returns whether it acknowledged
    /// anything new.
    pub(crate) fn on_ack(
        &mut self,
        now: Instant,
        ack: &AckInfo,
        rtt: &mut RttEstimator,
        cfg: &Config,
        out: AckEffects<'_>,
    ) -> bool {
        let AckEffects {
            events,
            stats,
            copies,
        } = out;
        let cum = ack.cum_ack;
        if cum < self.snd_una {
            // Overtaken by a newer ack on the way; its window is stale too.
            return false;
        }
        self.peer_limit = cum.saturating_add(u64::from(ack.window));
        let mut progress = false;
        let mut sample: Option<Instant> = None;
        let prev_high = self.highest_acked_tx;
        while self.snd_una < cum {
            let Some(seg) = self.inflight.pop_front() else {
                break;
            };
            self.snd_una += 1;
            if !seg.acked {
                progress = true;
                self.unacked -= 1;
                self.note_acked(now, rtt, &seg, &mut sample);
            }
            self.frame_released(seg.frame, cfg, events, copies);
        }
        for bit in ack.sack.iter_ones() {
            let seq = cum + 1 + bit as u64;
            if seq >= self.snd_nxt {
                break;
            }
            let idx = (seq - self.snd_una) as usize;
            let Some(seg) = self.inflight.get_mut(idx) else {
                break;
            };
            if seg.acked {
                continue;
            }
            seg.acked = true;
            let seg = *seg;
            if seg.probed {
                self.probe_answered_up_to(seq, stats);
            }
            progress = true;
            self.unacked -= 1;
            // Selectively acked frames are never sent again, but only the
            // cumulative ack says everything before them arrived too, i.e.
            // that the message has been started at the receiver.
            self.note_acked(now, rtt, &seg, &mut sample);
        }
        if let Some(sent_at) = sample {
            rtt.on_sample(now.saturating_duration_since(sent_at));
        }

        if self.highest_acked_tx > prev_high {
            self.detect_losses(cfg, stats);
        }
        if progress {
            self.tlp.on_progress();
            self.backoff = 0;
            self.timeouts = 0;
            self.rto_at = self.has_unacked().then(|| now + self.rto_wait(rtt, 0));
            if self.has_unacked() {
                self.tlp.arm(now, rtt, cfg, self.rto_at);
            } else {
                self.tlp.idle();
            }
        }
        progress
    }

    fn note_acked(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        seg: &Segment,
        sample: &mut Option<Instant>,
    ) {
        if !seg.retransmitted {
            // A datagram sent before the timer last expired was in flight
            // beside the lost one the timer resent; its ack may have waited
            // for that retransmission (its own first ack lost, say), so its
            // round trip measures the loss, not the path. Taken as a sample
            // it ratchets the RTO up by the outlier cap loss after loss
            // (at 50 % loss, to seconds).
            let ambiguous = self.expired_at.is_some_and(|t| seg.sent_at <= t);
            if !ambiguous && !matches!(*sample, Some(s) if s >= seg.sent_at) {
                *sample = Some(seg.sent_at);
            }
        }
        if !seg.renumbered {
            // Every transmission of it (the original and any tail probe)
            // carried this number, so the ack is for this number.
            self.highest_acked_tx = self.highest_acked_tx.max(seg.tx_no);
            return;
        }
        // An ack for a retransmitted datagram may be for its original
        // transmission; crediting it with the retransmission's number would
        // make every datagram sent in between look lost. Only an ack that
        // could have made the round trip since the retransmission counts:
        // one taking at least the smoothed RTT, not merely the smallest (on
        // a queued path, the ack of an original that the timer thought lost
        // arrives a little after the retransmission left, and taken for its
        // ack it declared the whole window lost: hundreds of spurious
        // retransmissions).
        // A peer known to answer late (`TailProbe::back_off`) may ack the
        // original that much later still.
        let since = now.saturating_duration_since(seg.sent_at);
        let round_trip = match (rtt.min_rtt(), rtt.srtt()) {
            (Some(m), Some(s)) => Some(m.max(s) + self.tlp.extra()),
            (m, _) => m,
        };
        if round_trip.is_some_and(|m| since >= m) {
            self.highest_acked_tx = self.highest_acked_tx.max(seg.tx_no);
        }
    }

    /// The cumulative ack passed a frame: it and everything before it
    /// reached the peer.
    fn frame_released(
        &mut self,
        frame: SegFrame,
        cfg: &Config,
        events: &mut VecDeque<Event>,
        copies: &mut BufPool,
    ) {
        let msg = match frame {
            SegFrame::Msg { msg, .. } | SegFrame::Frag { msg, .. } => msg,
            // A rendezvous completes with the receiver's notice.
            SegFrame::Rndv { .. } => return,
        };
        let Some(m) = self.msgs.get_mut(&msg) else {
            return;
        };
        m.unacked = m.unacked.saturating_sub(1);
        if m.unacked == 0 && m.sequenced_all {
            if !m.reported {
                debug_assert!(
                    cfg.eager_completion == EagerCompletion::OnAck
                        || matches!(m.body, Body::Borrowed(_))
                );
                events.push_back(Event::SendComplete {
                    peer: self.peer,
                    token: m.token,
                    ok: true,
                });
            }
            if let Some(OutMsg {
                body: Body::Owned(v),
                ..
            }) = self.remove_msg(msg)
            {
                copies.put(v);
            }
        }
    }

    fn detect_losses(&mut self, cfg: &Config, stats: &mut Stats) {
        // Early retransmit (RFC 5827): a flight too short to produce
        // `reorder_threshold` later acknowledgments, with no new data
        // queued behind it, would otherwise wait for a timer; a datagram is
        // then presumed lost once all but one of the flight's datagrams
        // sent after it are acknowledged. A reordering path costs one
        // spurious datagram; a blocking exchange (an MPI token followed by
        // nothing) loses a timer's wait for every loss without it.
        let flight = self.inflight.len() as u64;
        let mut threshold = u64::from(cfg.reorder_threshold);
        if self.pending.is_empty() && flight <= threshold {
            threshold = threshold.min(flight.saturating_sub(1)).max(1);
        }
        for (i, seg) in self.inflight.iter_mut().enumerate() {
            if seg.tx_no.saturating_add(threshold) > self.highest_acked_tx {
                // Transmit numbers are not monotonic along the sequence space
                // (retransmissions), so keep scanning.
                continue;
            }
            if !seg.acked && !seg.lost {
                seg.lost = true;
                self.lost.push_back(self.snd_una + i as u64);
                stats.fast_retransmits += 1;
            }
        }
    }

    /// The probed datagram `seq` was selectively acknowledged: everything
    /// unacknowledged before it is lost (see `Segment::probed`).
    fn probe_answered_up_to(&mut self, seq: u64, stats: &mut Stats) {
        let end = (seq - self.snd_una) as usize;
        for (i, seg) in self.inflight.iter_mut().take(end).enumerate() {
            if !seg.acked && !seg.lost {
                seg.lost = true;
                self.lost.push_back(self.snd_una + i as u64);
                stats.fast_retransmits += 1;
            }
        }
    }

    /// The peer's completion notice for large message `msg` arrived.
    /// Returns false if no such message awaits one.
    pub(crate) fn on_done(&mut self, msg: u64, events: &mut VecDeque<Event>) -> bool {
        match self.msgs.get(&msg) {
            Some(m) if m.large && m.started => {}
            _ => return false,
        }
        if let Some(m) = self.remove_msg(msg) {
            self.large_outstanding = self.large_outstanding.saturating_sub(1);
            if !m.reported {
                events.push_back(Event::SendComplete {
                    peer: self.peer,
                    token: m.token,
                    ok: true,
                });
            }
        }
        true
    }

    /// The retransmission timeout after `backoff` doublings, plus the wait
    /// learnt from late answers (`TailProbe::back_off`): Karn's rule keeps
    /// the RTT estimator from ever sampling an answer that came after a
    /// retransmission, so it cannot learn how late a busy peer answers.
    fn rto_wait(&self, rtt: &RttEstimator, backoff: u32) -> Duration {
        rtt.backed_off(backoff) + self.tlp.extra()
    }

    fn arm(&mut self, now: Instant, rtt: &RttEstimator) {
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto_wait(rtt, self.backoff));
        }
    }

    /// Next datagram to retransmit, if any; marks it transmitted.
    pub(crate) fn next_retransmit(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        stats: &mut Stats,
    ) -> Option<(u64, SegFrame)> {
        while let Some(seq) = self.lost.pop_front() {
            let Some(idx) = seq.checked_sub(self.snd_una) else {
                continue;
            };
            let Some(seg) = self.inflight.get_mut(idx as usize) else {
                continue;
            };
            if !seg.lost || seg.acked {
                continue;
            }
            seg.lost = false;
            if let SegFrame::Rndv { msg } = seg.frame {
                if !self.msgs.contains_key(&msg) {
                    // Its completion notice already arrived: the peer has it.
                    seg.acked = true;
                    self.unacked -= 1;
                    continue;
                }
            }
            if std::mem::take(&mut seg.probe) {
                seg.probed = true;
            } else {
                self.tx_counter += 1;
                seg.tx_no = self.tx_counter;
                seg.renumbered = true;
            }
            seg.sent_at = now;
            seg.retransmitted = true;
            let frame = seg.frame;
            stats.retransmits += 1;
            self.arm(now, rtt);
            return Some((seq, frame));
        }
        None
    }

    /// Whether sequence number `seq` is in flight and not yet
    /// acknowledged.
    pub(crate) fn is_unacked(&self, seq: u64) -> bool {
        seq.checked_sub(self.snd_una)
            .and_then(|i| self.inflight.get(usize::try_from(i).ok()?))
            .is_some_and(|s| !s.acked)
    }

    /// Whether the window lets a new frame in.
    pub(crate) fn window_open(&self, cfg: &Config) -> bool {
        self.snd_nxt - self.snd_una < u64::from(cfg.send_window) && self.snd_nxt < self.peer_limit
    }

    /// Sequence the next frame, if the window and the large-message limit
    /// allow; marks it transmitted.
    pub(crate) fn next_new(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        layout: &Layout,
    ) -> Option<(u64, SegFrame)> {
        if !self.window_open(cfg) {
            return None;
        }
        let frame = self.next_message_frame(cfg, layout)?;
        let seq = self.snd_nxt;
        self.snd_nxt += 1;
        self.tx_counter += 1;
        self.inflight.push_back(Segment {
            frame,
            tx_no: self.tx_counter,
            sent_at: now,
            retransmitted: false,
            renumbered: false,
            acked: false,
            lost: false,
            probe: false,
            probed: false,
        });
        self.unacked += 1;
        self.arm(now, rtt);
        self.tlp.on_new_data(now, rtt, cfg, self.rto_at);
        Some((seq, frame))
    }

    fn next_message_frame(&mut self, cfg: &Config, layout: &Layout) -> Option<SegFrame> {
        loop {
            let &id = self.pending.front()?;
            let Some(m) = self.msgs.get_mut(&id) else {
                self.pending.pop_front();
                continue;
            };
            if m.large {
                if self.large_outstanding >= cfg.max_large_in_flight {
                    // Later messages wait too: starts must stay in order.
                    return None;
                }
                m.started = true;
                m.sequenced_all = true;
                self.large_outstanding += 1;
                self.pending.pop_front();
                return Some(SegFrame::Rndv { msg: id });
            }
            let frame = if !m.started {
                let len = m.total.min(layout.msg_cap as u64);
                m.started = true;
                m.next_off = len;
                SegFrame::Msg {
                    msg: id,
                    len: len as u32,
                }
            } else {
                let offset = m.next_off;
                let len = (m.total - offset).min(layout.frag_cap as u64);
                m.next_off += len;
                SegFrame::Frag {
                    msg: id,
                    offset,
                    len: len as u32,
                }
            };
            m.unacked += 1;
            if m.next_off >= m.total {
                m.sequenced_all = true;
                self.pending.pop_front();
            }
            return Some(frame);
        }
    }

    /// The message a segment belongs to.
    pub(crate) fn message(&self, msg: u64) -> Option<&OutMsg> {
        self.msgs.get(&msg)
    }

    /// Check the retransmission timer. The peer is given up on only when
    /// `may_die` (it has been silent long enough) as well as after
    /// `max_retransmits` expiries. `bulk_at` is the latest time pull data
    /// may have been on the path (see [`SendState::on_tail_probe`]).
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
        may_die: bool,
        bulk_at: Option<Instant>,
    ) -> TimerOutcome {
        match self.rto_at {
            Some(at) if at <= now => {}
            _ => return TimerOutcome::Idle,
        }
        self.rto_at = None;
        self.tlp.disarm();
        let Some(oldest) = self.inflight.iter().find(|s| !s.acked) else {
            return TimerOutcome::Idle;
        };
        // Megabytes of pull data queued ahead of the datagram or its ack
        // take longer than the timer's floor to drain, and the RTT
        // estimate knows nothing of that queue: wait one more interval
        // (no back-off, no count towards death) while a datagram never
        // resent is young, rather than resend what is only waiting. A lost
        // datagram is still found by later acknowledgments meanwhile; once
        // resent, or old, the timer runs its normal course, so a dead peer
        // is found in the same time.
        let young = !oldest.retransmitted
            && now.saturating_duration_since(oldest.sent_at) < rtt.rto() * BULK_DEFERRALS;
        if young && bulk_at.is_some_and(|b| b >= oldest.sent_at) {
            stats.rto_deferrals += 1;
            self.rto_at = Some(now + self.rto_wait(rtt, self.backoff));
            return TimerOutcome::Idle;
        }
        stats.rto_expiries += 1;
        self.expired_at = Some(now);
        self.timeouts += 1;
        if self.timeouts > cfg.max_retransmits && may_die {
            return TimerOutcome::Dead;
        }
        let oldest = self.inflight.iter().position(|s| !s.acked);
        self.queue_first(oldest, false);
        self.backoff += 1;
        self.rto_at = Some(now + self.rto_wait(rtt, self.backoff));
        self.tlp.on_new_data(now, rtt, cfg, self.rto_at);
        TimerOutcome::Retransmit
    }

    /// Queue in-flight datagram `i` for retransmission ahead of any other
    /// (the RTO's oldest unacknowledged one, or a tail probe's newest), if
    /// it is not queued already.
    fn queue_first(&mut self, i: Option<usize>, probe: bool) {
        let Some(i) = i else { return };
        let seg = &mut self.inflight[i];
        if !seg.lost {
            seg.lost = true;
            seg.probe = probe;
            self.lost.push_front(self.snd_una + i as u64);
        }
    }

    /// Check the tail probe timer; when it fires, the newest unacknowledged
    /// datagram is queued for retransmission and the caller must ask for an
    /// immediate ack with it. Returns whether it fired. `bulk_at` is the
    /// latest time pull data may have been on the path between the peers
    /// (sent by us, or pulled by us): a datagram sent before then, or its
    /// ack, may wait behind that data (a queue the smallest RTT knows
    /// nothing about), so its probe is skipped.
    pub(crate) fn on_tail_probe(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
        bulk_at: Option<Instant>,
    ) -> bool {
        if !self.tlp.fire(now, rtt, cfg, self.rto_at) {
            return false;
        }
        let Some(oldest) = self.inflight.iter().find(|s| !s.acked) else {
            return false;
        };
        if bulk_at.is_some_and(|b| oldest.sent_at <= b) {
            return false;
        }
        stats.tail_probes += 1;
        // The newest, as RFC 8985 does: its immediate acknowledgment names
        // every hole before it, and those go again at once (see
        // `Segment::probed`); probing the oldest repaired one hole per
        // probe timeout.
        let newest = self.inflight.iter().rposition(|s| !s.acked);
        self.queue_first(newest, true);
        true
    }

    /// The peer's late-duplicate count, as a datagram from it says
    /// ([`wire::HeaderFields::late_dups`]). A count higher than any before
    /// means some of our retransmissions were needless because the peer
    /// answers late: probes wait longer (`TailProbe::back_off`). Returns
    /// whether they do now.
    pub(crate) fn on_peer_late_dups(
        &mut self,
        count: u64,
        rtt: &RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
    ) -> bool {
        if count <= self.peer_late_dups {
            // Nothing new, or a datagram overtaken by a newer one.
            return false;
        }
        self.peer_late_dups = count;
        self.tlp.back_off(rtt, cfg);
        stats.tail_probe_backoffs += 1;
        true
    }

    /// The current back-off exponent (for probes sharing the peer's RTO).
    pub(crate) fn backoff(&self) -> u32 {
        self.backoff
    }

    /// The peer is dead: fail every message not yet reported, in send order,
    /// and forget everything.
    pub(crate) fn fail_all(&mut self, events: &mut VecDeque<Event>) {
        for m in std::mem::take(&mut self.msgs).into_values() {
            if !m.reported {
                events.push_back(Event::SendComplete {
                    peer: self.peer,
                    token: m.token,
                    ok: false,
                });
            }
        }
        self.pending.clear();
        self.inflight.clear();
        self.lost.clear();
        self.unacked = 0;
        self.rto_at = None;
        self.tlp.disarm();
        self.large_outstanding = 0;
        self.copied_bytes = 0;
    }

    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> u64 {
        self.snd_nxt - self.snd_una
    }
}

#[cfg(test)]
mod tests;
