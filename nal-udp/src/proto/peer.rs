//! Everything the endpoint knows about one peer, and how a datagram, a
//! timer or a transmit opportunity moves it along.
//!
//! Liveness: a peer is declared dead after `max_retransmits` consecutive
//! expiries of whichever timer is waiting on it, once it has also been
//! silent for `peer_timeout`: the retransmission timer
//! (while our datagrams are unacknowledged), the pull silence timer (while
//! we pull from it), or the keep-alive probe timer (while we wait on it for
//! anything else: a window to open, a completion notice for a large message,
//! the rest of an eager message). Probes are bare acks that ask for an
//! immediate answer; any datagram from the peer resets the probe count.
//! While the application waits, the [liveness watch](super::liveness)
//! covers the peers none of those timers watch.

use std::collections::VecDeque;
use std::time::Instant;

use super::config::{Config, Layout};
use super::liveness::{PeerWatch, Waiting, WatchOutcome};
use super::pool::BufPool;
use super::pull::{DataOutcome, PullReceiver, PullReject, PullRequest, PullServer};
use super::recv::{RecvState, Violation};
use super::redundancy::{self, LossMeter};
use super::rtt::RttEstimator;
use super::send::{AckEffects, OutMsg, SegFrame, SendState, TimerOutcome};
use super::types::{Event, MsgId, PeerId, Sink, Stats};
use super::wire::{self, Datagram, Frame, FrameOut, HeaderFields, Sack, Transmission};

/// Endpoint-wide state a peer operation may touch.
pub(crate) struct Ctx<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) layout: &'a Layout,
    pub(crate) job_key: u64,
    pub(crate) local: PeerId,
    pub(crate) events: &'a mut VecDeque<Event>,
    pub(crate) stats: &'a mut Stats,
    pub(crate) pool: &'a mut BufPool,
    pub(crate) copies: &'a mut BufPool,
    pub(crate) waiting: &'a Waiting,
}

impl Ctx<'_> {
    fn violation(&mut self, peer: PeerId, why: Violation) {
        self.stats.protocol_violations += 1;
        tracing::debug!(peer, why, "protocol violation");
    }

    fn buffered(&mut self, delta: isize) {
        let s = &mut self.stats;
        s.buffered_datagrams = s.buffered_datagrams.saturating_add_signed(delta as i64);
        s.max_buffered_datagrams = s.max_buffered_datagrams.max(s.buffered_datagrams);
    }
}

/// In-order processing must wait: no capacity for another pull.
struct Stalled;

/// One peer.
pub(crate) struct Peer {
    pub(crate) id: PeerId,
    pub(crate) dead: bool,
    /// Listed in the endpoint's ready queue.
    pub(crate) in_ready: bool,
    rtt: RttEstimator,
    send: SendState,
    recv: RecvState,
    pulls: PullReceiver,
    server: PullServer,
    probe_at: Option<Instant>,
    probe_count: u32,
    probe_due: bool,
    watch: PeerWatch,
    /// The liveness watch asks for an answer.
    watch_probe_due: bool,
    /// A tail loss probe is queued: its datagram asks for an immediate ack.
    tail_probe_due: bool,
    /// When pull data last went to this peer (it holds tail probes back).
    pull_data_at: Option<Instant>,
    /// Alternate pull data and new sequenced frames.
    pull_data_turn: bool,
    /// How much of what this peer sends us is lost (we report it).
    loss_meter: LossMeter,
    /// How much of what we send this peer is lost, as it last reported.
    peer_loss: u32,
    /// Retransmissions from this peer that we already had and had not
    /// acknowledged yet (we report the count: it probes too early).
    late_dups: u64,
    /// One past the highest sequence number received when our last
    /// datagram (which acknowledges everything received) left.
    acked_high: u64,
    /// `acked_high` before that datagram, and when it left: what it was
    /// the first to acknowledge (see `is_late`).
    acked_before: u64,
    acked_at: Option<Instant>,
    /// A sequenced datagram just sent gets a redundant copy next: its
    /// sequence number, frame, and whether it asked for an immediate ack.
    copy_due: Option<(u64, SegFrame, bool)>,
}

impl Peer {
    pub(crate) fn new(id: PeerId, cfg: &Config) -> Self {
        Peer {
            id,
            dead: false,
            in_ready: false,
            rtt: RttEstimator::for_config(cfg),
            send: SendState::new(id, cfg),
            recv: RecvState::new(cfg),
            pulls: PullReceiver::default(),
            server: PullServer::default(),
            probe_at: None,
            probe_count: 0,
            probe_due: false,
            watch: PeerWatch::default(),
            watch_probe_due: false,
            tail_probe_due: false,
            pull_data_at: None,
            pull_data_turn: false,
            loss_meter: LossMeter::default(),
            peer_loss: 0,
            late_dups: 0,
            acked_high: 0,
            acked_before: 0,
            acked_at: None,
            copy_due: None,
        }
    }

    pub(crate) fn live_messages(&self) -> usize {
        self.send.live_messages()
    }

    pub(crate) fn copied_bytes(&self) -> u64 {
        self.send.copied_bytes()
    }

    pub(crate) fn enqueue(&mut self, m: OutMsg, ctx: &mut Ctx<'_>) {
        self.send.enqueue(m, ctx.cfg, ctx.events);
    }

    /// Whether the datagram's ack refers only to data we sent.
    pub(crate) fn ack_valid(&self, d: &Datagram<'_>) -> bool {
        self.send.ack_valid(&d.ack)
    }

    /// Earliest timer.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if self.dead {
            return None;
        }
        [
            self.recv.ack.deadline(),
            self.send.deadline(),
            self.pulls.deadline(),
            self.probe_at,
            self.watch.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Acknowledge now what the delayed-ack timer holds back. Returns
    /// whether an ack is now due.
    pub(crate) fn release_delayed_ack(&mut self) -> bool {
        !self.dead && self.recv.ack.release()
    }

    /// Whether a retransmission of `seq`, which we already have, arriving
    /// at `now`, was sent before our acknowledgment of it could have
    /// reached the peer: its timer ran out before we answered, not because
    /// anything was lost. Either no datagram of ours has acknowledged `seq`
    /// yet, or the first that did left less than the probe slack ago. (Had
    /// our acknowledgment been lost instead, the peer waited a whole probe
    /// timeout after it, which is longer than the slack.)
    fn is_late(&self, now: Instant, seq: u64, cfg: &Config) -> bool {
        if seq >= self.acked_high {
            return true;
        }
        let raced = match (self.acked_at, cfg.tail_probe_slack) {
            (Some(at), Some(slack)) => now.saturating_duration_since(at) < slack,
            _ => false,
        };
        seq >= self.acked_before && raced
    }

    /// An accepted datagram from this peer.
    pub(crate) fn on_datagram(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        raw: &[u8],
        ctx: &mut Ctx<'_>,
        sink: &mut dyn Sink,
    ) {
        self.probe_count = 0;
        self.probe_at = None;
        self.watch.heard(now);
        self.peer_loss = d.loss_report;
        self.send
            .on_peer_late_dups(d.late_dups, &self.rtt, ctx.cfg, ctx.stats);
        let out = AckEffects {
            events: ctx.events,
            stats: ctx.stats,
            copies: ctx.copies,
        };
        self.send.on_ack(now, &d.ack, &mut self.rtt, ctx.cfg, out);
        if d.ack.ack_requested {
            self.recv.ack.request_now();
        }
        match d.frame {
            Frame::Ack => {}
            Frame::Msg { seq, .. } | Frame::Frag { seq, .. } | Frame::Rndv { seq, .. } => {
                self.on_sequenced(now, seq, d, raw, ctx, sink)
            }
            Frame::Done { msg } => {
                // Acknowledge even a repeated notice: our first answer may
                // have been lost.
                if !self.send.on_done(msg, ctx.events) {
                    ctx.stats.stale_drops += 1;
                }
                self.server.queue_done_ack(msg);
            }
            Frame::DoneAck { msg } => {
                if self.pulls.on_done_ack(msg) {
                    if self.recv.stalled {
                        self.drain(ctx, sink);
                    }
                } else {
                    ctx.stats.stale_drops += 1;
                }
            }
            Frame::Pull {
                msg,
                limit,
                first_frag,
                frag_size,
                mask,
            } => match self.send.pullable(msg) {
                None => ctx.stats.stale_drops += 1,
                Some(m) => {
                    let req = PullRequest {
                        msg,
                        limit,
                        first_frag,
                        frag_size,
                        mask,
                    };
                    match self.server.on_pull(m.total, ctx.layout.pull_cap, req) {
                        Ok(()) => {}
                        Err(PullReject::Violation) => ctx.violation(self.id, "bad pull request"),
                        Err(PullReject::Full) => ctx.stats.pull_jobs_dropped += 1,
                    }
                }
            },
            Frame::PullData { msg, offset, data } => {
                match self.pulls.on_data(
                    now,
                    self.id,
                    msg,
                    offset,
                    data,
                    sink,
                    &mut self.rtt,
                    ctx.cfg,
                    ctx.stats,
                ) {
                    DataOutcome::Progress => {}
                    DataOutcome::Duplicate => ctx.stats.dup_pull_data += 1,
                    DataOutcome::Stale => ctx.stats.stale_drops += 1,
                    DataOutcome::Violation => ctx.violation(self.id, "bad pull data"),
                }
            }
        }
        self.update_keepalive(now);
    }

    fn on_sequenced(
        &mut self,
        now: Instant,
        seq: u64,
        d: &Datagram<'_>,
        raw: &[u8],
        ctx: &mut Ctx<'_>,
        sink: &mut dyn Sink,
    ) {
        use super::seq::SeqClass;
        let frame = &d.frame;
        match self.recv.win.classify(seq) {
            SeqClass::Duplicate => {
                ctx.stats.dup_drops += 1;
                if d.transmission == Transmission::Retransmission && self.is_late(now, seq, ctx.cfg)
                {
                    self.late_dups += 1;
                    ctx.stats.late_dups += 1;
                }
                // A retransmission we have: our ack was probably lost, so
                // repeat it now. The copy of an original we have is the
                // normal case on a lossy path and needs no answer of its
                // own (the original's ack is on its way).
                if d.transmission != Transmission::Copy {
                    self.recv.ack.request_now();
                }
                return;
            }
            SeqClass::Beyond => {
                ctx.stats.out_of_window_drops += 1;
                self.recv.ack.request_now();
                return;
            }
            SeqClass::New => self.loss_meter.on_first_arrival(d.transmission),
        }
        let in_order = seq == self.recv.win.rcv_nxt() && !self.recv.win.has_gap();
        self.recv.win.mark(seq);
        self.recv.ack.on_sequenced(now, !in_order, ctx.cfg);
        if seq == self.recv.win.deliver_nxt() {
            match self.process_in_order(frame, ctx, sink) {
                Ok(()) => {
                    self.recv.win.advance_delivered();
                    self.drain(ctx, sink);
                }
                Err(Stalled) => {
                    self.recv.buffer(seq, raw, ctx.pool);
                    ctx.buffered(1);
                    self.recv.stalled = true;
                }
            }
            return;
        }
        match *frame {
            Frame::Frag {
                msg, offset, data, ..
            } if self.recv.accepts_fragment(msg) => {
                if let Err(why) = self.recv.on_fragment(self.id, msg, offset, data, sink) {
                    ctx.violation(self.id, why);
                }
            }
            _ => {
                self.recv.buffer(seq, raw, ctx.pool);
                ctx.buffered(1);
            }
        }
    }

    /// Process the frame at `deliver_nxt`.
    fn process_in_order(
        &mut self,
        frame: &Frame<'_>,
        ctx: &mut Ctx<'_>,
        sink: &mut dyn Sink,
    ) -> Result<(), Stalled> {
        match *frame {
            Frame::Msg {
                msg,
                total,
                frag_size,
                header,
                data,
                ..
            } => {
                if self.recv.close_current(self.id, sink) {
                    ctx.violation(self.id, "message started before the previous one finished");
                }
                match self
                    .recv
                    .start_eager(self.id, msg, total, frag_size, header, data, sink)
                {
                    Ok(true) => ctx.stats.messages_started += 1,
                    // The receiver cannot take it now: wait in the window.
                    Ok(false) => return Err(Stalled),
                    Err(why) => ctx.violation(self.id, why),
                }
            }
            Frame::Frag {
                msg, offset, data, ..
            } => {
                if let Err(why) = self.recv.on_fragment(self.id, msg, offset, data, sink) {
                    ctx.violation(self.id, why);
                }
            }
            Frame::Rndv {
                msg,
                total,
                frag_size,
                header,
                ..
            } => {
                if msg != self.recv.next_msg() {
                    ctx.violation(self.id, "message index out of order");
                    return Ok(());
                }
                if self.pulls.active() >= ctx.cfg.max_large_in_flight as usize {
                    return Err(Stalled);
                }
                if self.recv.close_current(self.id, sink) {
                    ctx.violation(self.id, "message started before the previous one finished");
                }
                match self.recv.start_large(self.id, msg, total, header, sink) {
                    Ok(None) => return Err(Stalled),
                    Ok(Some(wanted)) => {
                        ctx.stats.messages_started += 1;
                        if wanted == 0 {
                            sink.on_complete(MsgId {
                                peer: self.id,
                                index: msg,
                            });
                        }
                        let frag = u64::from(frag_size).min(ctx.layout.pull_cap as u64);
                        self.pulls.start(msg, wanted, frag, ctx.cfg);
                    }
                    Err(why) => ctx.violation(self.id, why),
                }
            }
            Frame::Ack
            | Frame::Pull { .. }
            | Frame::PullData { .. }
            | Frame::Done { .. }
            | Frame::DoneAck { .. } => {}
        }
        Ok(())
    }

    /// Offer the stalled stream again (the receiver has room now); whether
    /// it was stalled.
    pub(crate) fn resume(&mut self, ctx: &mut Ctx<'_>, sink: &mut dyn Sink) -> bool {
        if !self.recv.stalled || self.dead {
            return false;
        }
        self.drain(ctx, sink);
        true
    }

    /// Process buffered datagrams that are now in order.
    fn drain(&mut self, ctx: &mut Ctx<'_>, sink: &mut dyn Sink) {
        let was_stalled = self.recv.stalled;
        loop {
            let seq = self.recv.win.deliver_nxt();
            if seq >= self.recv.win.rcv_nxt() {
                break;
            }
            if let Some(buf) = self.recv.take(seq) {
                ctx.buffered(-1);
                let result = match wire::decode(&buf) {
                    Ok(d) => self.process_in_order(&d.frame, ctx, sink),
                    Err(_) => {
                        ctx.violation(self.id, "buffered datagram no longer decodes");
                        Ok(())
                    }
                };
                if result.is_err() {
                    self.recv.put_back(seq, buf);
                    ctx.buffered(1);
                    self.recv.stalled = true;
                    return;
                }
                ctx.pool.put(buf);
            }
            self.recv.win.advance_delivered();
        }
        self.recv.stalled = false;
        if was_stalled {
            // The advertised window just reopened.
            self.recv.ack.request_now();
        }
    }

    /// Produce the next datagram for this peer.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        ctx: &mut Ctx<'_>,
    ) -> Option<usize> {
        if self.dead {
            return None;
        }
        let n = self.produce(now, buf, ctx);
        if let Some(n) = n {
            self.recv.ack.on_sent();
            let high = self.recv.win.high();
            if high != self.acked_high {
                self.acked_before = std::mem::replace(&mut self.acked_high, high);
                self.acked_at = Some(now);
            }
            self.tail_probe_due = false;
            if self.probe_due || self.watch_probe_due {
                self.probe_due = false;
                self.watch_probe_due = false;
                ctx.stats.probes_sent += 1;
            }
            ctx.stats.datagrams_sent += 1;
            ctx.stats.bytes_sent += n as u64;
        }
        self.update_keepalive(now);
        n
    }

    fn produce(&mut self, now: Instant, buf: &mut [u8], ctx: &mut Ctx<'_>) -> Option<usize> {
        let mut sack = Sack::ZERO;
        self.recv.win.sack(&mut sack);
        let hdr = HeaderFields {
            job_key: ctx.job_key,
            src: ctx.local,
            dst: self.id,
            cum_ack: self.recv.win.rcv_nxt(),
            window: self.recv.win.advertised(),
            sack: &sack,
            ack_requested: self.probe_due || self.watch_probe_due || self.tail_probe_due,
            transmission: Transmission::Original,
            loss_report: self.loss_meter.report(),
            late_dups: self.late_dups,
        };
        if let Some((seq, frame, ack_requested)) = self.copy_due.take() {
            if self.send.is_unacked(seq) {
                let copy = HeaderFields {
                    transmission: Transmission::Copy,
                    ack_requested,
                    ..hdr
                };
                if let Some(n) = self.encode_segment(buf, &copy, seq, frame, ctx.layout) {
                    ctx.stats.redundant_copies += 1;
                    return Some(n);
                }
            }
        }
        let retx = HeaderFields {
            transmission: Transmission::Retransmission,
            ..hdr
        };
        while let Some((seq, frame)) = self.send.next_retransmit(now, &self.rtt, ctx.stats) {
            if let Some(n) = self.encode_segment(buf, &retx, seq, frame, ctx.layout) {
                self.copy_after(seq, frame, hdr.ack_requested, n, ctx.cfg);
                return Some(n);
            }
        }
        if let Some(r) = self.pulls.next_request(now, &self.rtt, ctx.cfg) {
            ctx.stats.pull_requests_sent += 1;
            let frame = FrameOut::Pull {
                msg: r.msg,
                limit: r.limit,
                first_frag: r.first_frag,
                frag_size: r.frag_size,
                mask: r.mask,
            };
            return encode(buf, &hdr, &frame, |_| {});
        }
        if let Some(msg) = self.pulls.next_done(now, &self.rtt, ctx.cfg) {
            return encode(buf, &hdr, &FrameOut::Done { msg }, |_| {});
        }
        if let Some(msg) = self.server.next_done_ack() {
            return encode(buf, &hdr, &FrameOut::DoneAck { msg }, |_| {});
        }
        for data_turn in [self.pull_data_turn, !self.pull_data_turn] {
            if data_turn {
                while let Some((msg, offset, len)) = self.server.next() {
                    let Some(m) = self.send.pullable(msg) else {
                        // Completed meanwhile; the request was stale.
                        continue;
                    };
                    let frame = FrameOut::PullData { msg, offset, len };
                    let n = encode(buf, &hdr, &frame, |dst| m.body.read_at(offset, dst));
                    if n.is_some() {
                        ctx.stats.pull_data_sent += 1;
                        self.pull_data_at = Some(now);
                        self.pull_data_turn = false;
                        return n;
                    }
                }
            } else {
                while let Some((seq, frame)) =
                    self.send.next_new(now, &self.rtt, ctx.cfg, ctx.layout)
                {
                    if let Some(n) = self.encode_segment(buf, &hdr, seq, frame, ctx.layout) {
                        self.pull_data_turn = true;
                        self.copy_after(seq, frame, hdr.ack_requested, n, ctx.cfg);
                        return Some(n);
                    }
                }
            }
        }
        if self.recv.ack.due() || self.probe_due || self.watch_probe_due {
            ctx.stats.acks_sent += 1;
            return encode(buf, &hdr, &FrameOut::Ack, |_| {});
        }
        None
    }

    /// Sequenced datagram `seq` of `len` bytes just went out: have a copy
    /// follow it if the peer reports loss (module `redundancy`).
    fn copy_after(
        &mut self,
        seq: u64,
        frame: SegFrame,
        ack_requested: bool,
        len: usize,
        cfg: &Config,
    ) {
        if redundancy::wants_copy(self.peer_loss, len, cfg) {
            self.copy_due = Some((seq, frame, ack_requested));
        }
    }

    fn encode_segment(
        &self,
        buf: &mut [u8],
        hdr: &HeaderFields<'_>,
        seq: u64,
        frame: SegFrame,
        layout: &Layout,
    ) -> Option<usize> {
        match frame {
            SegFrame::Rndv { msg } => {
                let m = self.send.message(msg)?;
                let out = FrameOut::Rndv {
                    seq,
                    msg,
                    total: m.total,
                    frag_size: layout.pull_cap as u32,
                    header: &m.header,
                };
                encode(buf, hdr, &out, |_| {})
            }
            SegFrame::Msg { msg, len } => {
                let m = self.send.message(msg)?;
                let out = FrameOut::Msg {
                    seq,
                    msg,
                    total: m.total,
                    frag_size: layout.frag_cap as u32,
                    header: &m.header,
                    len: len as usize,
                };
                encode(buf, hdr, &out, |dst| m.body.read_at(0, dst))
            }
            SegFrame::Frag { msg, offset, len } => {
                let m = self.send.message(msg)?;
                let out = FrameOut::Frag {
                    seq,
                    msg,
                    offset,
                    len: len as usize,
                };
                encode(buf, hdr, &out, |dst| m.body.read_at(offset, dst))
            }
        }
    }

    fn needs_keepalive(&self) -> bool {
        !self.dead
            && !self.send.has_unacked()
            && self.pulls.active() == 0
            && (self.send.has_pending() || self.send.awaiting_done() || self.recv.awaiting_data())
    }

    fn update_keepalive(&mut self, now: Instant) {
        if self.needs_keepalive() {
            if self.probe_at.is_none() {
                let exp = self.probe_count.max(self.send.backoff());
                self.probe_at = Some(now + self.rtt.backed_off(exp));
            }
        } else {
            self.probe_at = None;
            self.probe_count = 0;
            self.probe_due = false;
        }
    }

    /// Run expired timers. The peer may die here.
    pub(crate) fn on_timeout(&mut self, now: Instant, ctx: &mut Ctx<'_>, sink: &mut dyn Sink) {
        if self.dead {
            return;
        }
        self.recv.ack.on_timer(now);
        let may_die = self.watch.silent_for(now, ctx.cfg);
        // Bulk pull data on the path, ours or the peer's, delays acks by
        // more than the smallest RTT says: no probes while it may be
        // queued, and the retransmission timer waits a little longer.
        let bulk_at = if self.pulls.active() > 0 {
            Some(now)
        } else {
            self.pull_data_at
        };
        let send = self
            .send
            .on_timeout(now, &self.rtt, ctx.cfg, ctx.stats, may_die, bulk_at);
        if send == TimerOutcome::Dead {
            self.kill(ctx, sink);
            return;
        }
        if self
            .send
            .on_tail_probe(now, &self.rtt, ctx.cfg, ctx.stats, bulk_at)
        {
            self.tail_probe_due = true;
        }
        if self
            .pulls
            .on_timeout(now, &self.rtt, ctx.cfg, ctx.stats, may_die)
        {
            self.kill(ctx, sink);
            return;
        }
        if self.probe_at.is_some_and(|at| at <= now) {
            self.probe_at = None;
            self.probe_count += 1;
            if self.probe_count > ctx.cfg.max_retransmits && may_die {
                self.kill(ctx, sink);
                return;
            }
            self.probe_due = true;
            self.probe_at = Some(now + self.rtt.backed_off(self.probe_count));
        }
        match self.watch.on_timeout(now, ctx.waiting, ctx.cfg) {
            WatchOutcome::Idle => {}
            WatchOutcome::Probe => self.watch_probe_due = true,
            WatchOutcome::Dead => {
                ctx.stats.watch_deaths += 1;
                self.kill(ctx, sink);
                return;
            }
        }
        self.update_keepalive(now);
    }

    /// The application started waiting: watch this peer.
    pub(crate) fn watch(&mut self, now: Instant, cfg: &Config) {
        if !self.dead {
            self.watch.arm(now, cfg);
        }
    }

    /// Declare the peer dead: fail its sends, abort its receives, free its
    /// buffers. Datagrams from it are dropped from now on.
    pub(crate) fn kill(&mut self, ctx: &mut Ctx<'_>, sink: &mut dyn Sink) {
        tracing::warn!(peer = self.id, "peer declared dead");
        self.dead = true;
        ctx.stats.peers_dead += 1;
        ctx.events.push_back(Event::PeerDead { peer: self.id });
        self.send.fail_all(ctx.events);
        self.pulls.abort_all(self.id, sink);
        self.recv.close_current(self.id, sink);
        let n = self.recv.clear(ctx.pool);
        ctx.buffered(-(n as isize));
        self.server.clear();
        self.recv.ack.on_sent();
        self.probe_at = None;
        self.probe_due = false;
        self.watch.disarm();
        self.watch_probe_due = false;
        self.tail_probe_due = false;
    }
}

fn encode(
    buf: &mut [u8],
    hdr: &HeaderFields<'_>,
    frame: &FrameOut<'_>,
    fill: impl FnOnce(&mut [u8]),
) -> Option<usize> {
    match wire::encode(buf, hdr, frame, fill) {
        Ok(n) => Some(n),
        Err(e) => {
            // The endpoint checks the buffer against `max_datagram` and the
            // layout keeps every frame within it.
            debug_assert!(false, "encode failed: {e}");
            None
        }
    }
}
