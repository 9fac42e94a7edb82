//! The reference model: memory descriptors, match entries and events as
//! the documented semantics describe them, written as plainly as possible
//! (one flat buffer per descriptor, a list walked in order) so that the
//! engine's indexes, segments and atomics are checked against it.

use super::*;

#[derive(Clone, Copy, Debug)]
pub(crate) struct MdSpec {
    pub(crate) len: usize,
    pub(crate) put: bool,
    pub(crate) get: bool,
    pub(crate) remote: bool,
    pub(crate) truncate: bool,
    pub(crate) ack_disable: bool,
    pub(crate) max_size: Option<u64>,
    pub(crate) threshold: Option<u32>,
    pub(crate) unlink: bool,
    /// An iovec descriptor: its memory is split into segments whose sizes
    /// this seed picks (see `split`). The model keeps one flat buffer: the
    /// engine must agree with it whatever the split.
    pub(crate) iovec: Option<u32>,
}

/// Segment lengths for `len` bytes: 1 to 9 bytes each, as `seed` says.
pub(crate) fn split(len: usize, seed: u32) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut left, mut s) = (len, seed);
    while left > 0 {
        let n = (1 + (s % 9) as usize).min(left);
        out.push(n);
        left -= n;
        s = s.rotate_right(5) ^ 0x2545_f491;
    }
    out
}

/// `mem` cut into segments of the given lengths.
pub(crate) fn segments(mem: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
    let mut at = 0;
    lens.iter()
        .map(|&n| {
            at += n;
            mem[at - n..at].to_vec()
        })
        .collect()
}

impl MdSpec {
    pub(crate) fn options(&self) -> MdOptions {
        let mut o = MdOptions::empty();
        o.set(MdOptions::OP_PUT, self.put);
        o.set(MdOptions::OP_GET, self.get);
        o.set(MdOptions::MANAGE_REMOTE, self.remote);
        o.set(MdOptions::TRUNCATE, self.truncate);
        o.set(MdOptions::ACK_DISABLE, self.ack_disable);
        o
    }

    pub(crate) fn desc(&self, eq: EqHandle, user: u64) -> MdDesc {
        let mut d = MdDesc::new(self.options())
            .threshold(match self.threshold {
                Some(n) => Threshold::Count(n),
                None => Threshold::Infinite,
            })
            .eq(eq)
            .user_ptr(user);
        if let Some(m) = self.max_size {
            d = d.max_size(m);
        }
        d
    }
}

#[derive(Clone, Debug)]
pub(crate) struct MMd {
    pub(crate) spec: MdSpec,
    pub(crate) mem: Vec<u8>,
    pub(crate) local: u64,
    pub(crate) threshold: Option<u32>,
    pub(crate) exhausted: bool,
    pub(crate) me: Option<usize>,
    /// Unlinked automatically; the buffer waits for md_unlink.
    pub(crate) parked: bool,
}

impl MMd {
    pub(crate) fn active(&self) -> bool {
        !self.parked && self.threshold != Some(0) && !self.exhausted
    }
}

#[derive(Clone, Debug)]
pub(crate) struct MMe {
    pub(crate) pt: u32,
    pub(crate) mid: ProcessId,
    pub(crate) bits: u64,
    pub(crate) ignore: u64,
    pub(crate) unlink: bool,
    pub(crate) md: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MEv {
    pub(crate) kind: EventKind,
    pub(crate) md: usize,
    pub(crate) initiator: ProcessId,
    pub(crate) pt: u32,
    pub(crate) bits: u64,
    pub(crate) rlength: u64,
    pub(crate) mlength: u64,
    pub(crate) offset: u64,
    pub(crate) hdr: u64,
    pub(crate) seq: u64,
    pub(crate) fail: FailType,
}

#[derive(Default)]
pub(crate) struct Model {
    pub(crate) lists: Vec<Vec<usize>>,
    pub(crate) mes: Vec<Option<MMe>>,
    pub(crate) mds: Vec<Option<MMd>>,
    pub(crate) eq: VecDeque<MEv>,
    pub(crate) seq: u64,
    pub(crate) dropped: u64,
    pub(crate) no_match: u64,
    pub(crate) rejected: u64,
    pub(crate) accepted: u64,
    pub(crate) atomic_invalid: u64,
}

/// An incoming request, as the model and the header builder see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Incoming {
    pub(crate) op: Op,
    pub(crate) src: ProcessId,
    pub(crate) pt: u32,
    pub(crate) bits: u64,
    pub(crate) len: u64,
    pub(crate) offset: u64,
    pub(crate) ack: bool,
    pub(crate) hdr: u64,
    /// Atomic requests: the operation, and the operand in front of the
    /// payload for the ones that take one.
    pub(crate) atomic: Option<AtomicSpec>,
}

/// The model's own arithmetic for the atomics it generates (integers of
/// `U8`, `U32`, `I64`, and swaps of `F64`): element by element, returning
/// the old target bytes.
pub(crate) fn model_atomic(s: AtomicSpec, t: &mut [u8], src: &[u8], operand: &[u8]) -> Vec<u8> {
    let old = t.to_vec();
    let n = s.datatype.size();
    let value = |b: &[u8]| -> i128 {
        let mut w = [0u8; 16];
        w[..n].copy_from_slice(b);
        let v = i128::from_le_bytes(w);
        if s.datatype == Datatype::I64 {
            v as i64 as i128
        } else {
            v
        }
    };
    for (te, se) in t.chunks_mut(n).zip(src.chunks(n)) {
        let new: Vec<u8> = match s.op {
            AtomicOp::Sum => (value(te) + value(se)).to_le_bytes()[..n].to_vec(),
            AtomicOp::Max if value(se) > value(te) => se.to_vec(),
            AtomicOp::Max => te.to_vec(),
            AtomicOp::Band => te.iter().zip(se).map(|(a, b)| a & b).collect(),
            AtomicOp::Bor => te.iter().zip(se).map(|(a, b)| a | b).collect(),
            AtomicOp::Swap => se.to_vec(),
            AtomicOp::Cswap if operand == &*te => se.to_vec(),
            AtomicOp::Cswap => te.to_vec(),
            op => unreachable!("the model does not generate {op:?}"),
        };
        te.copy_from_slice(&new);
    }
    old
}

/// Whether a target carries out an atomic request of `len` bytes (the
/// documented refusals, for the operations the model generates).
pub(crate) fn model_atomic_valid(op: Op, s: AtomicSpec, len: u64) -> bool {
    let n = s.datatype.size() as u64;
    let bitwise = matches!(s.op, AtomicOp::Band | AtomicOp::Bor);
    let elements_ok = if s.op == AtomicOp::Cswap {
        len == n && op == Op::FetchAtomic
    } else {
        len > 0 && len % n == 0
    };
    elements_ok && !(bitwise && s.datatype == Datatype::F64)
}

/// What the model says an incoming request does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Accepted by descriptor `md` at `offset`, moving `mlength` bytes; with
    /// an acknowledgment of `mlength` if `ack`.
    Accepted {
        md: usize,
        offset: u64,
        mlength: u64,
        ack: bool,
    },
    /// Dropped; `nack` if the initiator gets a negative response.
    Dropped { nack: bool },
}

impl Model {
    pub(crate) fn new() -> Self {
        Model {
            lists: vec![Vec::new(); 64],
            ..Default::default()
        }
    }

    pub(crate) fn post(&mut self, md: usize, kind: EventKind, f: impl FnOnce(&mut MEv)) {
        let mut ev = MEv {
            kind,
            md,
            initiator: ME_ID,
            pt: 0,
            bits: 0,
            rlength: 0,
            mlength: 0,
            offset: 0,
            hdr: 0,
            seq: self.seq,
            fail: FailType::Ok,
        };
        f(&mut ev);
        ev.seq = self.seq;
        self.seq += 1;
        if self.eq.len() >= EQ_CAP {
            self.dropped += 1;
        } else {
            self.eq.push_back(ev);
        }
    }

    pub(crate) fn unlink_me(&mut self, id: usize) {
        if let Some(me) = self.mes[id].take() {
            self.lists[me.pt as usize].retain(|&x| x != id);
        }
    }

    /// After an operation consumed descriptor `d`: unlink it if it is spent
    /// and asked to unlink itself.
    pub(crate) fn settle(&mut self, d: usize, local_offset_for_event: u64) {
        let md = self.mds[d].as_ref().expect("live");
        if !md.spec.unlink || md.parked || !(md.threshold == Some(0) || md.exhausted) {
            return;
        }
        self.post(d, EventKind::Unlink, |e| {
            e.offset = local_offset_for_event;
        });
        let md = self.mds[d].as_mut().expect("live");
        md.parked = true;
        if let Some(me) = md.me.take() {
            let unlink_me = self.mes[me].as_ref().is_some_and(|m| m.unlink);
            if let Some(m) = self.mes[me].as_mut() {
                m.md = None;
            }
            if unlink_me {
                self.unlink_me(me);
            }
        }
    }

    pub(crate) fn request(&mut self, r: Incoming, payload: &[u8]) -> (Outcome, Vec<u8>) {
        let Incoming {
            op,
            src,
            pt,
            bits,
            len: rlength,
            offset: roffset,
            ack: ack_req,
            hdr,
            atomic,
        } = r;
        let need_get = matches!(op, Op::Get | Op::FetchAtomic);
        let need_put = op != Op::Get;
        let fetch = op == Op::FetchAtomic;
        if let Some(s) = atomic {
            if !model_atomic_valid(op, s, rlength) {
                self.atomic_invalid += 1;
                return (
                    Outcome::Dropped {
                        nack: fetch || ack_req,
                    },
                    Vec::new(),
                );
            }
        }
        let mut matched = false;
        let list = self.lists[pt as usize].clone();
        for id in list {
            let me = self.mes[id].as_ref().expect("listed entries are live");
            let initiator_ok = (me.mid.nid == NID_ANY || me.mid.nid == src.nid)
                && (me.mid.pid == PID_ANY || me.mid.pid == src.pid);
            if !initiator_ok || (bits ^ me.bits) & !me.ignore != 0 {
                continue;
            }
            matched = true;
            let Some(d) = me.md else { continue };
            let md = self.mds[d].as_ref().expect("attached descriptors are live");
            if !md.active() || (need_get && !md.spec.get) || (need_put && !md.spec.put) {
                continue;
            }
            let offset = if md.spec.remote { roffset } else { md.local };
            if offset > md.mem.len() as u64 {
                continue;
            }
            let room = md.mem.len() as u64 - offset;
            let mlength = if rlength <= room {
                rlength
            } else if md.spec.truncate && atomic.is_none() {
                room
            } else {
                continue;
            };
            // Accepted.
            self.accepted += 1;
            let md = self.mds[d].as_mut().expect("live");
            if let Some(t) = md.threshold.as_mut() {
                *t -= 1;
            }
            let (o, n) = (offset as usize, mlength as usize);
            let mut reply = Vec::new();
            if let Some(s) = atomic {
                let operand_len = if s.op == AtomicOp::Cswap {
                    s.datatype.size()
                } else {
                    0
                };
                let (operand, src) = payload.split_at(operand_len);
                reply = model_atomic(s, &mut md.mem[o..o + n], src, operand);
            } else if need_get {
                reply = md.mem[o..o + n].to_vec();
            } else {
                md.mem[o..o + n].copy_from_slice(&payload[..n]);
            }
            if !md.spec.remote {
                md.local += mlength;
            }
            if let Some(m) = md.spec.max_size {
                if md.local + m > md.mem.len() as u64 {
                    md.exhausted = true;
                }
            }
            let ack = !need_get && ack_req && !md.spec.ack_disable;
            let local = md.local;
            let kind = match op {
                Op::Get => EventKind::Get,
                Op::Atomic => EventKind::Atomic,
                Op::FetchAtomic => EventKind::FetchAtomic,
                _ => EventKind::Put,
            };
            self.post(d, kind, |e| {
                e.initiator = src;
                e.pt = pt;
                e.bits = bits;
                e.rlength = rlength;
                e.mlength = mlength;
                e.offset = offset;
                e.hdr = hdr;
            });
            self.settle(d, local);
            return (
                Outcome::Accepted {
                    md: d,
                    offset,
                    mlength,
                    ack,
                },
                reply,
            );
        }
        if matched {
            self.rejected += 1;
        } else {
            self.no_match += 1;
        }
        (
            Outcome::Dropped {
                nack: need_get || ack_req,
            },
            Vec::new(),
        )
    }
}
