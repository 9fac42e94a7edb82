//! Harnesses shared by the cargo-fuzz targets and the property tests; not
//! part of the API.
//!
//! Both check more than "no panic": decoded datagrams must re-encode to the
//! same value, and every endpoint run is watched by [`ContractSink`], which
//! panics the moment the sink contract breaks (a message started twice or
//! out of order, a byte delivered twice or beyond the wanted length, a
//! completion with bytes missing) or a send token is reported twice.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::proto::wire::{
    self, Frame, FrameOut, HeaderFields, Sack, Transmission, COMMON_LEN, HEADER_LEN,
};
use crate::proto::{Config, Endpoint, Event, MsgId, OutPayload, PayloadSource, PeerId, Sink};

/// Decode arbitrary bytes; whatever decodes must survive a re-encode.
pub fn datagram(data: &[u8]) {
    let Ok(d) = wire::decode(data) else {
        return;
    };
    let (frame, payload): (FrameOut<'_>, &[u8]) = match d.frame {
        Frame::Ack => (FrameOut::Ack, &[]),
        Frame::Msg {
            seq,
            msg,
            total,
            frag_size,
            header,
            data,
        } => (
            FrameOut::Msg {
                seq,
                msg,
                total,
                frag_size,
                header,
                len: data.len(),
            },
            data,
        ),
        Frame::Frag {
            seq,
            msg,
            offset,
            data,
        } => (
            FrameOut::Frag {
                seq,
                msg,
                offset,
                len: data.len(),
            },
            data,
        ),
        Frame::Rndv {
            seq,
            msg,
            total,
            frag_size,
            header,
        } => (
            FrameOut::Rndv {
                seq,
                msg,
                total,
                frag_size,
                header,
            },
            &[],
        ),
        Frame::Done { msg } => (FrameOut::Done { msg }, &[]),
        Frame::DoneAck { msg } => (FrameOut::DoneAck { msg }, &[]),
        Frame::Pull {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        } => (
            FrameOut::Pull {
                msg,
                limit,
                first_frag,
                frag_size,
                mask,
            },
            &[],
        ),
        Frame::PullData { msg, offset, data } => (
            FrameOut::PullData {
                msg,
                offset,
                len: data.len(),
            },
            data,
        ),
    };
    let hdr = HeaderFields {
        job_key: d.job_key,
        src: d.src,
        dst: d.dst,
        cum_ack: d.ack.cum_ack,
        window: d.ack.window,
        sack: &d.ack.sack,
        ack_requested: d.ack.ack_requested,
        transmission: d.transmission,
        loss_report: d.loss_report,
        late_dups: d.late_dups,
    };
    let mut buf = vec![0u8; data.len()];
    let n = wire::encode(&mut buf, &hdr, &frame, |dst| dst.copy_from_slice(payload))
        .expect("a decoded datagram fits in its own length");
    // The encoder drops trailing all-zero SACK words, nothing else.
    assert!(n <= data.len());
    let again = wire::decode(&buf[..n]).expect("re-encoded datagram decodes");
    assert_eq!(again, d);
}

#[derive(Debug)]
struct Rx {
    wanted: u64,
    ranges: BTreeMap<u64, u64>,
    delivered: u64,
}

/// A sink that checks the contract of [`Sink`] and panics on a breach. The
/// wanted length comes from the first header bytes, so inputs can choose it.
#[derive(Debug, Default)]
pub struct ContractSink {
    next: HashMap<PeerId, u64>,
    active: HashMap<MsgId, Rx>,
    /// Messages started.
    pub started: u64,
    /// Messages completed.
    pub completed: u64,
    /// Messages aborted.
    pub aborted: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
}

impl ContractSink {
    /// Messages started and not finished.
    pub fn in_progress(&self) -> usize {
        self.active.len()
    }
}

impl Sink for ContractSink {
    fn on_message(
        &mut self,
        peer: PeerId,
        msg: MsgId,
        header: &[u8; HEADER_LEN],
        total: u64,
    ) -> u64 {
        assert_eq!(msg.peer, peer);
        let next = self.next.entry(peer).or_insert(0);
        assert_eq!(msg.index, *next, "message started out of order or twice");
        *next += 1;
        let mut w = [0u8; 8];
        w.copy_from_slice(&header[..8]);
        let want = u64::from_le_bytes(w);
        let prev = self.active.insert(
            msg,
            Rx {
                wanted: want.min(total),
                ranges: BTreeMap::new(),
                delivered: 0,
            },
        );
        assert!(prev.is_none());
        self.started += 1;
        want
    }

    fn on_data(&mut self, msg: MsgId, offset: u64, data: &[u8]) {
        let rx = self
            .active
            .get_mut(&msg)
            .expect("data for a message not in progress");
        assert!(!data.is_empty());
        let end = offset
            .checked_add(data.len() as u64)
            .expect("offset overflow");
        assert!(end <= rx.wanted, "data beyond the wanted length");
        if let Some((_, &e)) = rx.ranges.range(..=offset).next_back() {
            assert!(e <= offset, "byte delivered twice");
        }
        if let Some((&s, _)) = rx.ranges.range(offset..).next() {
            assert!(s >= end, "byte delivered twice");
        }
        rx.ranges.insert(offset, end);
        rx.delivered += data.len() as u64;
        self.bytes += data.len() as u64;
    }

    fn on_complete(&mut self, msg: MsgId) {
        let rx = self
            .active
            .remove(&msg)
            .expect("completion of a message not in progress");
        assert_eq!(rx.delivered, rx.wanted, "completed with bytes missing");
        self.completed += 1;
    }

    fn on_abort(&mut self, msg: MsgId) {
        self.active
            .remove(&msg)
            .expect("abort of a message not in progress");
        self.aborted += 1;
    }
}

/// A borrowed payload of zeros that must not be read after its completion.
struct Watched {
    len: u64,
    done: Arc<AtomicBool>,
}

impl PayloadSource for Watched {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, dst: &mut [u8]) {
        assert!(
            !self.done.load(Ordering::Relaxed),
            "payload read after SendComplete"
        );
        assert!(
            offset + dst.len() as u64 <= self.len,
            "read beyond the payload"
        );
        dst.fill(0);
    }
}

/// Checks completions: each accepted send exactly once.
#[derive(Default)]
struct Tokens {
    pending: HashSet<u64>,
    flags: HashMap<u64, Arc<AtomicBool>>,
    next: u64,
}

impl Tokens {
    fn drain(&mut self, ep: &mut Endpoint) {
        while let Some(ev) = ep.poll_event() {
            if let Event::SendComplete { token, .. } = ev {
                assert!(
                    self.pending.remove(&token),
                    "token {token} completed twice or never sent"
                );
                if let Some(f) = self.flags.remove(&token) {
                    f.store(true, Ordering::Relaxed);
                }
            }
        }
    }
}

/// A byte cursor that yields zeros when the input runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

const KEY: u64 = 0x00f0_2233_4455_6677;

/// Two endpoints (0 and 1) exchanging real traffic over a wire the input
/// controls (which datagram goes next, mutations, duplicates, drops), while
/// a third known peer (2) and unknown peers inject garbage and crafted
/// datagrams into endpoint 0, and time jumps around.
pub fn endpoint(data: &[u8]) {
    let mut input = Input(data);
    let cfg = Config {
        max_datagram: if input.u8() & 1 == 0 { 1472 } else { 8972 },
        recv_window: 16,
        send_window: 16,
        eager_max: 8 * 1024,
        pull_block_frags: 4,
        pull_blocks_in_flight: 2,
        max_large_in_flight: 2,
        max_retransmits: 4,
        ..Config::default()
    };
    let mut eps: Vec<Endpoint> = (0..2)
        .map(|i| {
            let mut ep = Endpoint::new(cfg.clone(), KEY, i).expect("valid config");
            ep.add_peer(1 - i);
            ep.add_peer(2);
            ep
        })
        .collect();
    let mut sinks = [ContractSink::default(), ContractSink::default()];
    let mut tokens = [Tokens::default(), Tokens::default()];
    // wire[i]: datagrams on their way to endpoint i
    let mut wire: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut now = Instant::now();
    let mut buf = vec![0u8; cfg.max_datagram];
    let mut steps = 0;
    while !input.done() && steps < 4096 {
        steps += 1;
        let op = input.u8();
        let side = usize::from(op >> 7);
        match op & 0xf {
            0 | 1 => {
                // send a message of a size class the input picks
                let class = input.u8();
                let len = match class % 8 {
                    0..=2 => u64::from(class >> 3),
                    3..=5 => u64::from(input.u16()) % 8192,
                    6 => 8193 + u64::from(input.u16()),
                    _ => 8193 + u64::from(input.u16()) * 8,
                };
                let mut header = [0u8; HEADER_LEN];
                header[..8].copy_from_slice(&u64::from(input.u16()).to_le_bytes());
                let t = &mut tokens[side];
                let token = t.next;
                t.next += 1;
                let payload = if class & 0x80 != 0 {
                    let done = Arc::new(AtomicBool::new(false));
                    t.flags.insert(token, done.clone());
                    OutPayload::Borrowed(Box::new(Watched { len, done }))
                } else {
                    OutPayload::Inline(vec![0; len as usize])
                };
                if eps[side]
                    .send(now, 1 - side as PeerId, &header, payload, token)
                    .is_ok()
                {
                    t.pending.insert(token);
                } else {
                    t.flags.remove(&token);
                }
                t.drain(&mut eps[side]);
            }
            2..=4 => {
                // one transmission onto the wire
                if let Some((dst, n)) = eps[side].poll_transmit(now, &mut buf) {
                    if dst == 1 - side as PeerId {
                        let q = &mut wire[1 - side];
                        if q.len() >= 256 {
                            q.pop_front();
                        }
                        q.push_back(buf[..n].to_vec());
                    }
                }
            }
            5..=8 => {
                // deliver a datagram, maybe mutated, maybe keeping a copy
                let q = &mut wire[side];
                if q.is_empty() {
                    continue;
                }
                let pick = usize::from(input.u8()) % q.len();
                // mostly faithful delivery; sometimes duplicate, corrupt, cut
                let how = input.u8() & input.u8();
                let mut d = if how & 1 == 0 {
                    q.remove(pick).unwrap_or_default()
                } else {
                    q[pick].clone()
                };
                if how & 2 != 0 && !d.is_empty() {
                    let at = usize::from(input.u16()) % d.len();
                    d[at] ^= input.u8() | 1;
                }
                if how & 4 != 0 {
                    d.truncate(usize::from(input.u16()) % (d.len() + 1));
                }
                eps[side].handle_datagram(now, 1 - side as PeerId, &d, &mut sinks[side]);
                tokens[side].drain(&mut eps[side]);
            }
            9 => {
                // raw garbage from any peer id
                let peer = PeerId::from(input.u8() % 4);
                let len = usize::from(input.u8());
                let bytes = input.bytes(len).to_vec();
                eps[side].handle_datagram(now, peer, &bytes, &mut sinks[side]);
                tokens[side].drain(&mut eps[side]);
            }
            10 => {
                // a crafted datagram with a valid header from a known peer
                let peer: PeerId = if input.u8() & 1 == 0 {
                    2
                } else {
                    1 - side as PeerId
                };
                let d = crafted(&mut input, peer, side as PeerId);
                eps[side].handle_datagram(now, peer, &d, &mut sinks[side]);
                tokens[side].drain(&mut eps[side]);
            }
            11 => {
                now += Duration::from_micros(u64::from(input.u8()) * 200);
                for i in 0..2 {
                    eps[i].handle_timeout(now, &mut sinks[i]);
                    tokens[i].drain(&mut eps[i]);
                }
            }
            12 | 13 => {
                // drain everything pending onto the wire
                for _ in 0..256 {
                    let Some((dst, n)) = eps[side].poll_transmit(now, &mut buf) else {
                        break;
                    };
                    if dst == 1 - side as PeerId && wire[1 - side].len() < 256 {
                        wire[1 - side].push_back(buf[..n].to_vec());
                    }
                }
            }
            _ => {
                if let Some(t) = eps[side].poll_timeout() {
                    now = now.max(t);
                    eps[side].handle_timeout(now, &mut sinks[side]);
                    tokens[side].drain(&mut eps[side]);
                }
            }
        }
    }
    for (i, ep) in eps.iter().enumerate() {
        let s = ep.stats();
        assert!(
            s.buffered_datagrams <= 2 * u64::from(cfg.recv_window),
            "endpoint {i}: {s:?}"
        );
    }
}

/// A datagram with a correct magic, key and addresses, the rest from input.
fn crafted(input: &mut Input<'_>, src: PeerId, dst: PeerId) -> Vec<u8> {
    let kind = 1 + input.u8() % 8;
    let mut sack = Sack::ZERO;
    sack.as_raw_mut_slice()[0] = u64::from(input.u8());
    let hdr = HeaderFields {
        job_key: KEY,
        src,
        dst,
        cum_ack: u64::from(input.u8() % 4),
        window: u32::from(input.u8()),
        sack: &sack,
        ack_requested: input.u8() & 1 == 1,
        transmission: match input.u8() % 3 {
            0 => Transmission::Original,
            1 => Transmission::Retransmission,
            _ => Transmission::Copy,
        },
        loss_report: u32::from(input.u8()) << 8,
        late_dups: u64::from(input.u8() % 4),
    };
    let mut out = vec![0u8; COMMON_LEN + 64];
    let n = wire::encode(&mut out, &hdr, &FrameOut::Ack, |_| {}).unwrap_or(0);
    out.truncate(n);
    out[5] = kind;
    // Small sequence numbers and message indices reach the deep paths; the
    // rest of the body is whatever the input says.
    let seq = u64::from(input.u8() % 24);
    let msg = u64::from(input.u8() % 6);
    let body_len = usize::from(input.u8()) * 2;
    let mut body = input.bytes(body_len).to_vec();
    body.resize(body_len.max(16), 0);
    if matches!(kind, 2..=4) {
        body[..8].copy_from_slice(&seq.to_le_bytes());
        body[8..16].copy_from_slice(&msg.to_le_bytes());
    } else {
        body[..8].copy_from_slice(&msg.to_le_bytes());
    }
    out.extend_from_slice(&body);
    out
}
