//! A deterministic network simulator for `nal_udp::proto` endpoints.
//!
//! Simulated clock, seeded RNG, per-link loss, duplication, reordering,
//! delay, bandwidth, and per-node receive buffers with an optional
//! processing rate (a slow receiver). Payloads and headers are generated
//! from seeds, so checking a delivered byte needs no stored copy, and large
//! borrowed payloads cost no memory. The receiving [`Checker`] asserts the
//! sink contract as it goes: starts exactly once and in order per peer,
//! bytes below the wanted length only, each exactly once, byte-exact.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nal_udp::proto::wire::{self, Frame};
use nal_udp::proto::{
    Config, Endpoint, Event, MsgId, OutPayload, PayloadSource, PeerId, Sink, HEADER_LEN,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const JOB_KEY: u64 = 0x5eed_cafe_f00d_0001;

pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Payload bytes `[offset, offset + dst.len())` of the message with `seed`.
pub fn fill_payload(seed: u64, offset: u64, dst: &mut [u8]) {
    let mut pos = 0usize;
    let mut off = offset;
    while pos < dst.len() {
        let word = splitmix(seed ^ (off / 8).wrapping_mul(0x0100_0000_01B3)).to_le_bytes();
        let within = (off % 8) as usize;
        let n = (8 - within).min(dst.len() - pos);
        dst[pos..pos + n].copy_from_slice(&word[within..within + n]);
        pos += n;
        off += n as u64;
    }
}

/// What the sender put in a message; encoded in its 88-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgSpec {
    pub src: PeerId,
    pub dst: PeerId,
    /// Per-(src, dst) message number, 0, 1, 2, …
    pub no: u64,
    pub total: u64,
    pub seed: u64,
    /// What the receiver's `on_message` returns (may exceed `total`).
    pub want: u64,
    pub borrowed: bool,
}

impl MsgSpec {
    pub fn header(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&(self.src as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(self.dst as u32).to_le_bytes());
        h[8..16].copy_from_slice(&self.no.to_le_bytes());
        h[16..24].copy_from_slice(&self.total.to_le_bytes());
        h[24..32].copy_from_slice(&self.seed.to_le_bytes());
        h[32..40].copy_from_slice(&self.want.to_le_bytes());
        fill_payload(!self.seed, 0, &mut h[40..]);
        h
    }

    pub fn parse(h: &[u8; HEADER_LEN]) -> MsgSpec {
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap());
        let spec = MsgSpec {
            src: u64::from(u32_at(0)),
            dst: u64::from(u32_at(4)),
            no: u64_at(8),
            total: u64_at(16),
            seed: u64_at(24),
            want: u64_at(32),
            borrowed: false,
        };
        let mut tail = [0u8; HEADER_LEN - 40];
        fill_payload(!spec.seed, 0, &mut tail);
        assert_eq!(&h[40..], &tail[..], "header corrupted");
        spec
    }

    pub fn wanted(&self) -> u64 {
        self.want.min(self.total)
    }

    pub fn token(&self) -> u64 {
        (self.dst << 48) | self.no
    }
}

/// A large borrowed payload generated on demand. Reading it after its
/// completion was reported is a test failure.
pub struct GenSource {
    seed: u64,
    len: u64,
    done: Arc<AtomicBool>,
}

impl PayloadSource for GenSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, dst: &mut [u8]) {
        assert!(
            !self.done.load(Ordering::SeqCst),
            "borrowed payload read after SendComplete"
        );
        assert!(offset + dst.len() as u64 <= self.len, "read beyond payload");
        fill_payload(self.seed, offset, dst);
    }
}

#[derive(Debug)]
struct Rx {
    spec: MsgSpec,
    wanted: u64,
    /// Delivered byte ranges, start -> end, merged when adjacent.
    ranges: BTreeMap<u64, u64>,
    delivered: u64,
}

/// The receiving side's sink: checks the contract and records outcomes.
pub struct Checker {
    pub me: PeerId,
    pub now: Instant,
    next_no: HashMap<PeerId, u64>,
    next_index: HashMap<PeerId, u64>,
    active: HashMap<MsgId, Rx>,
    pub started: u64,
    pub completed: u64,
    /// (source, message number) -> completion time.
    pub completed_at: HashMap<(PeerId, u64), Instant>,
    pub aborted: Vec<(PeerId, u64)>,
    pub bytes: u64,
    scratch: Vec<u8>,
    /// Hold back every this-many-th offered message (`Sink::take_held`),
    /// as an engine with a full flow-controlled queue does; 0: never.
    pub hold_every: u64,
    offers: u64,
    held: bool,
    /// Messages held back so far.
    pub holds: u64,
    /// A message was held back and has not been taken since: the engine
    /// will have room again soon, and the endpoint must offer it again.
    holding: bool,
}

impl Checker {
    pub fn new(me: PeerId, now: Instant) -> Self {
        Checker {
            me,
            now,
            next_no: HashMap::new(),
            next_index: HashMap::new(),
            active: HashMap::new(),
            started: 0,
            completed: 0,
            completed_at: HashMap::new(),
            aborted: Vec::new(),
            bytes: 0,
            scratch: Vec::new(),
            hold_every: 0,
            offers: 0,
            held: false,
            holds: 0,
            holding: false,
        }
    }

    /// Messages started and neither completed nor aborted.
    pub fn in_progress(&self) -> usize {
        self.active.len()
    }

    pub fn in_progress_from(&self, peer: PeerId) -> usize {
        self.active.keys().filter(|m| m.peer == peer).count()
    }

    /// Messages started from `peer` so far.
    pub fn started_from(&self, peer: PeerId) -> u64 {
        self.next_no.get(&peer).copied().unwrap_or(0)
    }
}

impl Sink for Checker {
    fn on_message(
        &mut self,
        peer: PeerId,
        msg: MsgId,
        header: &[u8; HEADER_LEN],
        total_len: u64,
    ) -> u64 {
        self.offers += 1;
        if self.hold_every > 0 && self.offers % self.hold_every == 0 {
            self.held = true;
            self.holds += 1;
            self.holding = true;
            return 0;
        }
        self.holding = false;
        let spec = MsgSpec::parse(header);
        assert_eq!(msg.peer, peer);
        assert_eq!((spec.src, spec.dst), (peer, self.me), "misrouted message");
        let no = self.next_no.entry(peer).or_insert(0);
        assert_eq!(
            spec.no, *no,
            "message from {peer} started out of order or twice"
        );
        *no += 1;
        let index = self.next_index.entry(peer).or_insert(0);
        assert_eq!(msg.index, *index, "message index out of sequence");
        *index += 1;
        assert_eq!(total_len, spec.total);
        let wanted = spec.wanted();
        let fresh = self.active.insert(
            msg,
            Rx {
                spec,
                wanted,
                ranges: BTreeMap::new(),
                delivered: 0,
            },
        );
        assert!(fresh.is_none(), "message id reused");
        self.started += 1;
        spec.want
    }

    fn on_data(&mut self, msg: MsgId, offset: u64, data: &[u8]) {
        let rx = self
            .active
            .get_mut(&msg)
            .unwrap_or_else(|| panic!("data for {msg:?}, which is not in progress"));
        assert!(!data.is_empty(), "empty on_data");
        let end = offset + data.len() as u64;
        assert!(
            end <= rx.wanted,
            "data beyond the wanted length: {offset}+{} > {}",
            data.len(),
            rx.wanted
        );
        if let Some((&s, &e)) = rx.ranges.range(..=offset).next_back() {
            assert!(
                e <= offset,
                "byte {offset} of {msg:?} delivered twice (have {s}..{e})"
            );
        }
        if let Some((&s, _)) = rx.ranges.range(offset..).next() {
            assert!(s >= end, "bytes {s}.. of {msg:?} delivered twice");
        }
        // merge with neighbours to keep the map small
        let mut start = offset;
        let mut stop = end;
        if let Some((&s, &e)) = rx.ranges.range(..offset).next_back() {
            if e == offset {
                start = s;
                rx.ranges.remove(&s);
            }
        }
        if let Some(e) = rx.ranges.remove(&end) {
            stop = e;
        }
        rx.ranges.insert(start, stop);
        rx.delivered += data.len() as u64;
        self.scratch.resize(data.len(), 0);
        fill_payload(rx.spec.seed, offset, &mut self.scratch);
        assert!(
            self.scratch == data,
            "payload of {msg:?} corrupted at {offset}"
        );
        self.bytes += data.len() as u64;
    }

    fn on_complete(&mut self, msg: MsgId) {
        let rx = self
            .active
            .remove(&msg)
            .unwrap_or_else(|| panic!("completion of {msg:?}, which is not in progress"));
        assert_eq!(rx.delivered, rx.wanted, "completed with bytes missing");
        self.completed += 1;
        self.completed_at
            .insert((rx.spec.src, rx.spec.no), self.now);
    }

    fn take_held(&mut self) -> bool {
        std::mem::take(&mut self.held)
    }

    fn on_abort(&mut self, msg: MsgId) {
        let rx = self
            .active
            .remove(&msg)
            .unwrap_or_else(|| panic!("abort of {msg:?}, which is not in progress"));
        self.aborted.push((rx.spec.src, rx.spec.no));
    }
}

/// One direction of a link.
#[derive(Clone, Debug)]
pub struct LinkCfg {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub dup: f64,
    /// Probability a datagram is held back and overtaken by later ones.
    pub reorder: f64,
    /// Extra delay of a held-back datagram, up to this.
    pub reorder_delay: Duration,
    /// Propagation delay.
    pub delay: Duration,
    /// Bytes per second; `None` is infinite.
    pub bandwidth: Option<f64>,
    /// Everything is lost.
    pub blackhole: bool,
}

impl Default for LinkCfg {
    fn default() -> Self {
        LinkCfg {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(200),
            delay: Duration::from_micros(20),
            bandwidth: Some(2e9),
            blackhole: false,
        }
    }
}

impl LinkCfg {
    pub fn lossy(loss: f64) -> Self {
        LinkCfg {
            loss,
            dup: 0.02,
            reorder: 0.02,
            ..LinkCfg::default()
        }
    }
}

#[derive(Debug)]
struct Link {
    cfg: LinkCfg,
    /// When the link finishes serializing what it has been given.
    busy_until: Instant,
    /// Latest in-order arrival time (FIFO watermark).
    last_arrival: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    Pending,
    Done { ok: bool, at: Instant },
}

pub struct Node {
    pub ep: Endpoint,
    pub sink: Checker,
    /// Stopped: sends, receives and timers no longer happen.
    pub crashed: bool,
    /// Descheduled until then: arriving datagrams queue in its receive
    /// buffer, and nothing else happens until it runs again.
    pub paused_until: Option<Instant>,
    /// Time to process one datagram; zero processes on arrival.
    pub proc_time: Duration,
    busy_until: Instant,
    inbox: VecDeque<(PeerId, Vec<u8>)>,
    inbox_bytes: usize,
    /// Receive buffer size in bytes (like SO_RCVBUF).
    pub inbox_limit: usize,
    pub tokens: HashMap<u64, TokenState>,
    done_flags: HashMap<u64, Arc<AtomicBool>>,
    pub dead: Vec<(PeerId, Instant)>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct NetStats {
    pub datagrams: u64,
    pub bytes: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    /// Dropped because the receiver's buffer was full.
    pub overflow: u64,
    /// Sequenced datagrams (Msg, Frag, Rndv, Done) sent and lost.
    pub seq_sent: u64,
    pub seq_lost: u64,
    pub pull_data_sent: u64,
    pub pull_data_lost: u64,
    /// Largest datagram seen.
    pub max_len: usize,
}

/// A record of one transmission, when `record_tx` is on.
#[derive(Clone, Copy, Debug)]
pub struct TxRecord {
    pub at: Instant,
    pub src: PeerId,
    pub dst: PeerId,
    pub kind: wire::Kind,
    pub seq: Option<u64>,
    pub ack_requested: bool,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Arrival {
    at: Instant,
    id: u64,
    src: usize,
    dst: usize,
}

pub type Filter = Box<dyn FnMut(&TxRecord) -> bool>;

pub struct Sim {
    pub t0: Instant,
    pub now: Instant,
    pub nodes: Vec<Node>,
    links: Vec<Vec<Link>>,
    heap: BinaryHeap<Reverse<Arrival>>,
    payloads: HashMap<u64, Vec<u8>>,
    next_id: u64,
    rng: ChaCha8Rng,
    buf: Vec<u8>,
    /// Sends scheduled for the future, by time.
    schedule: BTreeMap<(Instant, u64), MsgSpec>,
    pub net: NetStats,
    pub record_tx: bool,
    pub tx_log: Vec<TxRecord>,
    /// Drop transmissions for which this returns true.
    pub drop_filter: Option<Filter>,
    pub steps: u64,
}

impl Sim {
    /// `n` endpoints with ids `0..n`, all links `link`, RNG `seed`.
    pub fn new(n: usize, cfg: Config, link: LinkCfg, seed: u64) -> Sim {
        Sim::with_configs(vec![cfg; n], link, seed)
    }

    /// One endpoint per configuration.
    pub fn with_configs(cfgs: Vec<Config>, link: LinkCfg, seed: u64) -> Sim {
        let t0 = Instant::now();
        let n = cfgs.len();
        let max_datagram = cfgs.iter().map(|c| c.max_datagram).max().unwrap_or(0);
        let nodes = cfgs
            .into_iter()
            .enumerate()
            .map(|(i, cfg)| {
                let mut ep = Endpoint::new(cfg, JOB_KEY, i as PeerId).unwrap();
                for j in 0..n {
                    if j != i {
                        ep.add_peer(j as PeerId);
                    }
                }
                Node {
                    ep,
                    sink: Checker::new(i as PeerId, t0),
                    crashed: false,
                    paused_until: None,
                    proc_time: Duration::ZERO,
                    busy_until: t0,
                    inbox: VecDeque::new(),
                    inbox_bytes: 0,
                    inbox_limit: usize::MAX,
                    tokens: HashMap::new(),
                    done_flags: HashMap::new(),
                    dead: Vec::new(),
                }
            })
            .collect();
        let links = (0..n)
            .map(|_| {
                (0..n)
                    .map(|_| Link {
                        cfg: link.clone(),
                        busy_until: t0,
                        last_arrival: t0,
                    })
                    .collect()
            })
            .collect();
        Sim {
            t0,
            now: t0,
            nodes,
            links,
            heap: BinaryHeap::new(),
            payloads: HashMap::new(),
            next_id: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            buf: vec![0; max_datagram],
            schedule: BTreeMap::new(),
            net: NetStats::default(),
            record_tx: false,
            tx_log: Vec::new(),
            drop_filter: None,
            steps: 0,
        }
    }

    pub fn link_mut(&mut self, src: usize, dst: usize) -> &mut LinkCfg {
        &mut self.links[src][dst].cfg
    }

    pub fn set_all_links(&mut self, f: impl Fn(&mut LinkCfg)) {
        for row in &mut self.links {
            for l in row {
                f(&mut l.cfg);
            }
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Send now.
    pub fn send(&mut self, spec: MsgSpec) {
        let node = &mut self.nodes[spec.src as usize];
        let header = spec.header();
        let payload = if spec.borrowed {
            let done = Arc::new(AtomicBool::new(false));
            node.done_flags.insert(spec.token(), done.clone());
            OutPayload::Borrowed(Box::new(GenSource {
                seed: spec.seed,
                len: spec.total,
                done,
            }))
        } else {
            let mut v = vec![0u8; spec.total as usize];
            fill_payload(spec.seed, 0, &mut v);
            OutPayload::Inline(v)
        };
        node.ep
            .send(self.now, spec.dst, &header, payload, spec.token())
            .expect("send refused");
        let prev = node.tokens.insert(spec.token(), TokenState::Pending);
        assert!(prev.is_none(), "token reused by the test");
        Self::drain_events(node, self.now);
    }

    /// Send at `at` (relative to the start).
    pub fn send_at(&mut self, at: Duration, spec: MsgSpec) {
        let key = (self.t0 + at, self.next_id);
        self.next_id += 1;
        self.schedule.insert(key, spec);
    }

    fn drain_events(node: &mut Node, now: Instant) {
        while let Some(ev) = node.ep.poll_event() {
            match ev {
                Event::SendComplete { token, ok, .. } => {
                    let st = node
                        .tokens
                        .get_mut(&token)
                        .unwrap_or_else(|| panic!("completion of unknown token {token:#x}"));
                    assert_eq!(*st, TokenState::Pending, "token {token:#x} completed twice");
                    *st = TokenState::Done { ok, at: now };
                    if let Some(flag) = node.done_flags.remove(&token) {
                        flag.store(true, Ordering::SeqCst);
                    }
                }
                Event::PeerDead { peer } => {
                    assert!(
                        node.dead.iter().all(|&(p, _)| p != peer),
                        "peer {peer} declared dead twice"
                    );
                    node.dead.push((peer, now));
                }
            }
        }
    }

    fn transmit(&mut self, src: usize, dst: usize, len: usize) {
        let bytes = self.buf[..len].to_vec();
        self.net.datagrams += 1;
        self.net.bytes += len as u64;
        self.net.max_len = self.net.max_len.max(len);
        let d = wire::decode(&bytes).expect("endpoint produced an undecodable datagram");
        let rec = TxRecord {
            at: self.now,
            src: src as PeerId,
            dst: dst as PeerId,
            kind: d.frame.kind(),
            seq: d.frame.seq(),
            ack_requested: d.ack.ack_requested,
        };
        let sequenced = rec.seq.is_some();
        let pull_data = matches!(d.frame, Frame::PullData { .. });
        self.net.seq_sent += u64::from(sequenced);
        self.net.pull_data_sent += u64::from(pull_data);
        if self.record_tx {
            self.tx_log.push(rec);
        }
        let filtered = self.drop_filter.as_mut().is_some_and(|f| f(&rec));
        let link = &mut self.links[src][dst];
        let lost = link.cfg.blackhole || filtered || self.rng.gen_bool(link.cfg.loss);
        // serialization happens whether or not the datagram survives
        let ser = link.cfg.bandwidth.map_or(Duration::ZERO, |bw| {
            Duration::from_secs_f64(len as f64 / bw)
        });
        let departure = link.busy_until.max(self.now) + ser;
        link.busy_until = departure;
        if lost {
            self.net.lost += 1;
            self.net.seq_lost += u64::from(sequenced);
            self.net.pull_data_lost += u64::from(pull_data);
            return;
        }
        let copies = if self.rng.gen_bool(link.cfg.dup) {
            self.net.duplicated += 1;
            2
        } else {
            1
        };
        for c in 0..copies {
            let base = departure + link.cfg.delay;
            let at = if self.rng.gen_bool(link.cfg.reorder) || c == 1 {
                self.net.reordered += 1;
                let extra = link.cfg.reorder_delay.mul_f64(self.rng.gen::<f64>());
                base + extra
            } else {
                let at = base.max(link.last_arrival);
                link.last_arrival = at;
                at
            };
            let id = self.next_id;
            self.next_id += 1;
            self.payloads.insert(id, bytes.clone());
            self.heap.push(Reverse(Arrival { at, id, src, dst }));
        }
    }

    /// Whether node `i` runs at `now` (neither crashed nor descheduled).
    fn runs(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        !n.crashed && n.paused_until.is_none_or(|t| t <= self.now)
    }

    /// Deschedule node `i` for `d` from now.
    pub fn pause(&mut self, i: usize, d: Duration) {
        self.nodes[i].paused_until = Some(self.now + d);
    }

    /// Let every node transmit all it wants now.
    fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.runs(i) {
                continue;
            }
            let max = self.nodes[i].ep.max_datagram();
            while let Some((dst, len)) = self.nodes[i].ep.poll_transmit(self.now, &mut self.buf) {
                assert!(
                    len <= max,
                    "datagram of {len} bytes exceeds max_datagram {max}"
                );
                self.transmit(i, dst as usize, len);
            }
        }
    }

    fn next_time(&self) -> Option<Instant> {
        let mut t = self.heap.peek().map(|Reverse(a)| a.at);
        let mut consider = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for n in &self.nodes {
            if n.crashed {
                continue;
            }
            // a descheduled node does nothing before it runs again
            let paused = n.paused_until.filter(|&t| t > self.now);
            if let Some(x) = n.ep.poll_timeout() {
                consider(paused.map_or(x, |p| p.max(x)));
            }
            if !n.inbox.is_empty() {
                consider(paused.map_or(n.busy_until, |p| p.max(n.busy_until)));
            }
            if n.sink.holding {
                // Its engine makes room as the application takes events: a
                // held-back message is offered again on the next step,
                // even when nothing else is left to happen.
                consider(self.now + Duration::from_micros(10));
            }
        }
        if let Some((&(at, _), _)) = self.schedule.iter().next() {
            consider(at);
        }
        t
    }

    fn process_one(&mut self, i: usize) -> bool {
        let node = &mut self.nodes[i];
        let Some((src, data)) = node.inbox.pop_front() else {
            return false;
        };
        node.inbox_bytes -= data.len();
        node.sink.now = self.now;
        node.ep
            .handle_datagram(self.now, src, &data, &mut node.sink);
        Self::drain_events(node, self.now);
        true
    }

    fn advance(&mut self) {
        self.steps += 1;
        let now = self.now;
        while let Some(&(at, _)) = self.schedule.keys().next() {
            if at > now {
                break;
            }
            let (_, spec) = self.schedule.pop_first().unwrap();
            self.send(spec);
        }
        while self.heap.peek().is_some_and(|Reverse(a)| a.at <= now) {
            let Reverse(a) = self.heap.pop().unwrap();
            let data = self.payloads.remove(&a.id).unwrap();
            let node = &mut self.nodes[a.dst];
            if node.crashed {
                continue;
            }
            if node.inbox_bytes + data.len() > node.inbox_limit {
                self.net.overflow += 1;
                continue;
            }
            node.inbox_bytes += data.len();
            node.inbox.push_back((a.src as PeerId, data));
        }
        for i in 0..self.nodes.len() {
            if !self.runs(i) {
                continue;
            }
            if self.nodes[i].proc_time.is_zero() {
                while self.process_one(i) {}
            } else if self.nodes[i].busy_until <= now && self.process_one(i) {
                self.nodes[i].busy_until = now + self.nodes[i].proc_time;
            }
            let node = &mut self.nodes[i];
            if node.sink.hold_every > 0 {
                // The receiver has room again (its engine's intake resumed).
                node.ep.resume(&mut node.sink);
            }
            if node.ep.poll_timeout().is_some_and(|t| t <= now) {
                node.sink.now = now;
                node.ep.handle_timeout(now, &mut node.sink);
                Self::drain_events(node, now);
            }
        }
    }

    /// Run until `done` holds (true) or `limit` of simulated time passes or
    /// nothing is left to happen (false).
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            self.flush();
            if done(self) {
                return true;
            }
            match self.next_time() {
                None => return false,
                Some(t) if t > end => {
                    self.now = end;
                    return false;
                }
                Some(t) => {
                    self.now = self.now.max(t);
                    self.advance();
                }
            }
        }
    }

    /// One step of an exchange: run until `done` holds or some node has
    /// declared a peer dead, and say which (true: a death). Panics, naming
    /// `step`, if neither happens within `limit`.
    pub fn run_step(
        &mut self,
        limit: Duration,
        step: impl std::fmt::Display,
        mut done: impl FnMut(&Sim) -> bool,
    ) -> bool {
        let any_dead = |s: &Sim| s.nodes.iter().any(|n| !n.dead.is_empty());
        let ok = self.run_until(limit, |s| done(s) || any_dead(s));
        assert!(ok, "{step} stuck");
        any_dead(self)
    }

    /// Run for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(d, |_| false);
    }

    pub fn crash(&mut self, i: usize) {
        self.nodes[i].crashed = true;
    }

    /// Every send reported complete.
    pub fn all_sends_done(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.tokens.values().all(|t| *t != TokenState::Pending))
    }

    pub fn total_started(&self) -> u64 {
        self.nodes.iter().map(|n| n.sink.started).sum()
    }

    pub fn total_finished(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.sink.completed + n.sink.aborted.len() as u64)
            .sum()
    }
}

/// Message size mix.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Messages per ordered pair.
    pub per_pair: usize,
    /// Of which large (above `eager_max`), up to `max_large` bytes.
    pub large_per_pair: usize,
    pub max_large: u64,
    /// Largest eager message (the config's `eager_max`).
    pub eager_max: u64,
    /// Sends are spread uniformly over this much time.
    pub spread: Duration,
}

/// Schedule a random workload between all pairs; returns the plan.
pub fn plan(sim: &mut Sim, mix: &Mix, seed: u64) -> Vec<MsgSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = sim.nodes.len() as PeerId;
    let mut plan = Vec::new();
    for src in 0..n {
        for dst in 0..n {
            if src == dst {
                continue;
            }
            let mut times: Vec<Duration> = (0..mix.per_pair)
                .map(|_| mix.spread.mul_f64(rng.gen::<f64>()))
                .collect();
            times.sort();
            let large_at: Vec<usize> = (0..mix.large_per_pair)
                .map(|_| rng.gen_range(0..mix.per_pair))
                .collect();
            for (no, at) in times.into_iter().enumerate() {
                let total = if large_at.contains(&no) {
                    rng.gen_range(mix.eager_max + 1..=mix.max_large)
                } else {
                    match rng.gen_range(0..100) {
                        0..=4 => 0,
                        5..=59 => rng.gen_range(1..=1024),
                        60..=84 => rng.gen_range(1025..=16 * 1024),
                        _ => rng.gen_range(16 * 1024..=mix.eager_max),
                    }
                };
                let want = match rng.gen_range(0..100) {
                    0..=59 => u64::MAX,
                    60..=69 => total,
                    70..=79 => 0,
                    80..=89 => total + rng.gen_range(1..1000),
                    _ => rng.gen_range(0..=total),
                };
                let borrowed = total > mix.eager_max && rng.gen_bool(0.8) || rng.gen_bool(0.1);
                let spec = MsgSpec {
                    src,
                    dst,
                    no: no as u64,
                    total,
                    seed: rng.gen(),
                    want,
                    borrowed,
                };
                sim.send_at(at, spec);
                plan.push(spec);
            }
        }
    }
    plan
}

/// After a run: every planned message started once, completed with the
/// right bytes (checked on the way), every token completed ok.
pub fn assert_all_delivered(sim: &Sim, plan: &[MsgSpec]) {
    let n = sim.nodes.len();
    for dst in 0..n {
        let node = &sim.nodes[dst];
        for src in 0..n {
            let expected = plan
                .iter()
                .filter(|s| s.src as usize == src && s.dst as usize == dst)
                .count() as u64;
            assert_eq!(
                node.sink.started_from(src as PeerId),
                expected,
                "messages {src}->{dst} started"
            );
        }
        assert_eq!(
            node.sink.in_progress(),
            0,
            "node {dst} has unfinished receives"
        );
        assert!(node.sink.aborted.is_empty(), "node {dst} aborted receives");
        assert!(
            node.dead.is_empty(),
            "node {dst} declared peers dead: {:?}",
            node.dead
        );
    }
    for spec in plan {
        let node = &sim.nodes[spec.src as usize];
        match node.tokens.get(&spec.token()) {
            Some(TokenState::Done { ok: true, .. }) => {}
            other => panic!("send {spec:?} ended as {other:?}"),
        }
        assert!(
            sim.nodes[spec.dst as usize]
                .sink
                .completed_at
                .contains_key(&(spec.src, spec.no)),
            "message {spec:?} never completed"
        );
    }
}
