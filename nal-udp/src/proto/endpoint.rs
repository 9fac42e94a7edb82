//! The endpoint: one per process, the driver's only handle on the protocol.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use std::time::Instant;

use super::config::{Config, ConfigError, Layout};
use super::liveness::Waiting;
use super::peer::{Ctx, Peer};
use super::pool::{BufPool, COPIES_KEPT};
use super::send::{Body, OutMsg};
use super::types::{Event, OutPayload, PeerId, SendError, Sink, Stats};
use super::wire::{self, HEADER_LEN, MAX_MESSAGE_LEN};

/// The sans-I/O protocol state of one process.
///
/// The driver owns the socket and the clock, and moves data in and out:
///
/// ```text
/// loop {
///     while let Some((peer, n)) = ep.poll_transmit(now, &mut buf) { socket.send_to(&buf[..n], addr_of(peer)) }
///     wait for a datagram or until ep.poll_timeout()
///     on a datagram: ep.handle_datagram(now, peer_of(addr), &data, &mut sink)
///     on the deadline: ep.handle_timeout(now, &mut sink)
///     while let Some(ev) = ep.poll_event() { … }
/// }
/// ```
///
/// Nothing here reads a clock, touches a socket or draws a random number,
/// so a simulation that feeds it the same inputs gets the same outputs.
pub struct Endpoint {
    cfg: Config,
    layout: Layout,
    job_key: u64,
    local: PeerId,
    peers: Vec<Peer>,
    index: FxHashMap<PeerId, usize>,
    /// Peers that may have something to transmit, round-robin.
    ready: VecDeque<usize>,
    events: VecDeque<Event>,
    stats: Stats,
    pool: BufPool,
    /// Copies of eager payloads (module `pool`).
    copies: BufPool,
    waiting: Waiting,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.local)
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint for process `local` of the job identified by `job_key`.
    /// Every datagram carries the key; datagrams with another key are
    /// dropped.
    pub fn new(config: Config, job_key: u64, local: PeerId) -> Result<Self, ConfigError> {
        config.validate()?;
        let layout = Layout::new(&config);
        let keep = config.recv_window as usize;
        Ok(Endpoint {
            cfg: config,
            layout,
            job_key,
            local,
            peers: Vec::new(),
            index: FxHashMap::default(),
            ready: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            pool: BufPool::new(keep),
            copies: BufPool::new(COPIES_KEPT),
            waiting: Waiting::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// This process's peer id.
    pub fn local(&self) -> PeerId {
        self.local
    }

    /// Size `poll_transmit`'s buffer must have: the configured
    /// `max_datagram`. Received datagrams longer than this are dropped.
    pub fn max_datagram(&self) -> usize {
        self.cfg.max_datagram
    }

    /// Start talking to `peer`. Adding a known peer again does nothing (a
    /// dead peer stays dead), and neither does adding this endpoint itself:
    /// a process's messages to itself never travel, so it is not watched or
    /// probed.
    pub fn add_peer(&mut self, peer: PeerId) {
        if peer != self.local && !self.index.contains_key(&peer) {
            self.index.insert(peer, self.peers.len());
            self.peers.push(Peer::new(peer, &self.cfg));
        }
    }

    /// Whether `peer` has been declared dead (false for unknown peers).
    pub fn is_dead(&self, peer: PeerId) -> bool {
        self.index.get(&peer).is_some_and(|&i| self.peers[i].dead)
    }

    fn ctx(&mut self) -> (&mut Vec<Peer>, Ctx<'_>) {
        (
            &mut self.peers,
            Ctx {
                cfg: &self.cfg,
                layout: &self.layout,
                job_key: self.job_key,
                local: self.local,
                events: &mut self.events,
                stats: &mut self.stats,
                pool: &mut self.pool,
                copies: &mut self.copies,
                waiting: &self.waiting,
            },
        )
    }

    fn mark_ready(&mut self, i: usize) {
        let p = &mut self.peers[i];
        if !p.in_ready && !p.dead {
            p.in_ready = true;
            self.ready.push_back(i);
        }
    }

    /// Queue a message to `peer`: `header` (delivered with the message's
    /// start, in send order) and `payload`. `token` comes back in exactly one
    /// [`Event::SendComplete`] if this returns `Ok`.
    ///
    /// Payloads up to [`Config::eager_max`] bytes are copied (or moved, if
    /// inline) into the endpoint here, and a borrowed eager payload is
    /// dropped before this returns, while the peer's copies stay within
    /// [`Config::max_copied_bytes_per_peer`]; beyond, it is read until its
    /// completion like a large one. Longer ones are pulled by the receiver; a
    /// borrowed large payload is read until, and never after, its
    /// completion. `now` is the current time, as for every entry point.
    pub fn send(
        &mut self,
        now: Instant,
        peer: PeerId,
        header: &[u8; HEADER_LEN],
        payload: OutPayload,
        token: u64,
    ) -> Result<(), SendError> {
        let _ = now;
        let &i = self.index.get(&peer).ok_or(SendError::UnknownPeer(peer))?;
        if self.peers[i].dead {
            return Err(SendError::PeerDead(peer));
        }
        if self.peers[i].live_messages() >= self.cfg.max_queued_sends {
            return Err(SendError::QueueFull(peer));
        }
        let total = payload.len();
        if total > MAX_MESSAGE_LEN {
            return Err(SendError::TooLarge(total));
        }
        let large = total > self.cfg.eager_max;
        let copy_room = self.cfg.max_copied_bytes_per_peer
            - self.peers[i]
                .copied_bytes()
                .min(self.cfg.max_copied_bytes_per_peer);
        let (body, copied) = match payload {
            OutPayload::Inline(v) => (Body::Owned(v), 0),
            OutPayload::Borrowed(src) if large || total > copy_room => (Body::Borrowed(src), 0),
            OutPayload::Borrowed(src) => {
                // `total <= eager_max`, which validation bounds well below usize.
                let mut v = self.copies.take();
                v.resize(total as usize, 0);
                src.read_at(0, &mut v);
                (Body::Owned(v), total)
            }
        };
        let mut msg = OutMsg::new(token, *header, total, body, large);
        msg.copied = copied;
        self.stats.messages_sent += 1;
        let (peers, mut ctx) = self.ctx();
        peers[i].enqueue(msg, &mut ctx);
        self.mark_ready(i);
        Ok(())
    }

    /// Feed one datagram that arrived from `peer` (as the driver resolved its
    /// source address). Malformed, foreign or unexpected datagrams are
    /// counted in [`Stats`] and otherwise ignored. Receive into a buffer
    /// longer than [`max_datagram`](Self::max_datagram), so that an
    /// oversized datagram is seen whole and dropped rather than truncated.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        peer: PeerId,
        datagram: &[u8],
        sink: &mut impl Sink,
    ) {
        let sink: &mut dyn Sink = sink;
        if datagram.len() > self.cfg.max_datagram {
            self.stats.malformed_drops += 1;
            return;
        }
        let d = match wire::decode(datagram) {
            Ok(d) => d,
            Err(e) if e.is_foreign() => {
                self.stats.bad_magic_drops += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed_drops += 1;
                return;
            }
        };
        if d.job_key != self.job_key {
            self.stats.bad_key_drops += 1;
            return;
        }
        let Some(&i) = self.index.get(&peer) else {
            self.stats.unknown_peer_drops += 1;
            return;
        };
        if d.src != peer || d.dst != self.local {
            self.stats.misaddressed_drops += 1;
            return;
        }
        if self.peers[i].dead {
            self.stats.dead_peer_drops += 1;
            return;
        }
        if !self.peers[i].ack_valid(&d) {
            self.stats.malformed_drops += 1;
            return;
        }
        self.stats.datagrams_received += 1;
        let (peers, mut ctx) = self.ctx();
        peers[i].on_datagram(now, &d, datagram, &mut ctx, sink);
        self.mark_ready(i);
    }

    /// Write the next datagram to send into `buf` (at least
    /// [`max_datagram`](Self::max_datagram) bytes, or nothing is produced) and
    /// return its destination and length. Call until it returns `None` after
    /// every other entry point; peers are served round-robin.
    ///
    /// The datagram counts as sent: if the socket cannot take it right now,
    /// keep it and send it once writable before polling again (dropping it
    /// is harmless, but costs a retransmission like any network loss).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(PeerId, usize)> {
        if buf.len() < self.cfg.max_datagram {
            debug_assert!(false, "poll_transmit buffer smaller than max_datagram");
            return None;
        }
        while let Some(i) = self.ready.pop_front() {
            let (peers, mut ctx) = self.ctx();
            let p = &mut peers[i];
            if let Some(n) = p.poll_transmit(now, buf, &mut ctx) {
                let id = p.id;
                self.ready.push_back(i);
                return Some((id, n));
            }
            p.in_ready = false;
        }
        None
    }

    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work
    /// to do, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peers.iter().filter_map(Peer::deadline).min()
    }

    /// Run every timer that has expired by `now`: delayed acks,
    /// retransmissions, pull re-requests, probes, and peer death (which
    /// aborts the peer's receives through `sink`).
    pub fn handle_timeout(&mut self, now: Instant, sink: &mut impl Sink) {
        let sink: &mut dyn Sink = sink;
        for i in 0..self.peers.len() {
            if self.peers[i].deadline().is_some_and(|d| d <= now) {
                let (peers, mut ctx) = self.ctx();
                peers[i].on_timeout(now, &mut ctx, sink);
                self.mark_ready(i);
            }
        }
    }

    /// The driver is about to sleep: every ack held back by the
    /// delayed-ack timer goes out with the next [`poll_transmit`](Self::poll_transmit)
    /// instead of at its deadline. A sleeping driver would otherwise wake
    /// only to send it, and a wake-up costs a context switch on a busy host
    /// where a datagram costs a system call; a woken driver is also late on
    /// a busy host, and an ack that arrives late makes the peer probe
    /// (module `tlp`). Coalescing still happens while datagrams keep coming:
    /// then the driver does not sleep. Returns whether any ack was released.
    pub fn release_delayed_acks(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.peers.len() {
            if self.peers[i].release_delayed_ack() {
                self.mark_ready(i);
                any = true;
            }
        }
        any
    }

    /// The receiver can take messages again after its sink held one back
    /// ([`Sink::take_held`]): offer every stalled peer's stream again.
    pub fn resume(&mut self, sink: &mut impl Sink) {
        let sink: &mut dyn Sink = sink;
        for i in 0..self.peers.len() {
            let (peers, mut ctx) = self.ctx();
            if peers[i].resume(&mut ctx, sink) {
                self.mark_ready(i);
            }
        }
    }

    /// The application is waiting (blocked in the library for an event) at
    /// `now`. Call it whenever a waiting thread drives the endpoint, at
    /// least once per [`Config::peer_timeout`]` / 16`; gaps shorter than
    /// that count as one wait, and so does a sleep in the library reported
    /// with [`note_slept`](Self::note_slept). While it waits, peers silent
    /// for too long are probed and, once silent for the whole timeout,
    /// declared dead (see [`Config::peer_timeout`]). An endpoint never told
    /// this only watches peers it is owed something by.
    pub fn note_waiting(&mut self, now: Instant) {
        if self.waiting.note(now, &self.cfg) {
            self.watch_peers(now);
        }
    }

    /// The thread that last called [`note_waiting`](Self::note_waiting)
    /// slept in the library until `now` (until a timer of this endpoint was
    /// due, or a datagram came) and is still waiting. Call it on waking,
    /// before [`handle_timeout`](Self::handle_timeout): the sleep counts as
    /// waiting however long it took, so a wake-up later than the timer does
    /// not end the wait.
    pub fn note_slept(&mut self, now: Instant) {
        if self.waiting.note_slept(now, &self.cfg) {
            self.watch_peers(now);
        }
    }

    /// A waiting episode began at `now`: watch every peer.
    fn watch_peers(&mut self, now: Instant) {
        for p in &mut self.peers {
            p.watch(now, &self.cfg);
        }
    }

    /// Declare `peer` dead now, on the driver's authority, without waiting
    /// for the retransmission bound: the network said it is gone (an ICMP
    /// "port unreachable" for its address means no process receives there
    /// any more). Does what the retransmission bound would: reports
    /// [`Event::PeerDead`], fails its sends, aborts its receives through
    /// `sink`. Returns false if the peer is unknown or already dead.
    pub fn declare_dead(&mut self, peer: PeerId, sink: &mut impl Sink) -> bool {
        let sink: &mut dyn Sink = sink;
        let Some(&i) = self.index.get(&peer) else {
            return false;
        };
        if self.peers[i].dead {
            return false;
        }
        let (peers, mut ctx) = self.ctx();
        peers[i].kill(&mut ctx, sink);
        true
    }

    /// Messages to live peers that are not yet acknowledged (eager) or
    /// completed (large), whether or not their completion was reported. A
    /// driver shutting down lingers until this is zero, so that data it
    /// reported as sent is not lost with its socket.
    pub fn unfinished_sends(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| !p.dead)
            .map(Peer::live_messages)
            .sum()
    }

    /// Next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }
}
