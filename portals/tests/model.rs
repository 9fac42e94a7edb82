//! Property tests: random sequences of match-entry / memory-descriptor
//! operations and incoming puts and gets, applied both to the engine and to
//! a small reference model written here from the documented semantics.
//! Atomic requests (Portals 4) are among the incoming messages: the model
//! matches them as puts (fetching ones need a get-capable descriptor too),
//! never truncates them, computes their result on its own for a few
//! integer types, and refuses what a target must refuse.
//! After every step the deposits, events, acknowledgments, match lists,
//! unlinks, drop counters and error results must agree.

use std::collections::VecDeque;

use portals::wire::{Header, Op};
use portals::*;
use portals::{AtomicOp, AtomicSpec, Datatype};
use proptest::prelude::*;

const KEY: u64 = 0x5a5a;
const ME_ID: ProcessId = ProcessId::new(7, 7);
const INITIATORS: [ProcessId; 2] = [ProcessId::new(1, 1), ProcessId::new(1, 2)];
const EQ_CAP: usize = 6;

#[path = "model/reference.rs"]
mod reference;

use reference::*;

// ----- operations -------------------------------------------------------------

#[derive(Clone, Debug)]
enum Action {
    Attach {
        pt: u32,
        head: bool,
        mid: u8,
        bits: u64,
        ignore: u64,
        unlink: bool,
        md: Option<MdSpec>,
    },
    Insert {
        base: usize,
        before: bool,
        mid: u8,
        bits: u64,
        ignore: u64,
        unlink: bool,
        md: Option<MdSpec>,
    },
    AttachMd {
        me: usize,
        md: MdSpec,
    },
    UnlinkMe {
        me: usize,
    },
    UnlinkMd {
        md: usize,
        /// Take the memory back as a list (`md_unlink_iovec`).
        as_list: bool,
    },
    Update {
        md: usize,
        threshold: Option<u32>,
        test_eq: bool,
    },
    Put {
        src: usize,
        pt: u32,
        bits: u64,
        len: u64,
        offset: u64,
        ack: bool,
        hdr: u64,
    },
    Get {
        src: usize,
        pt: u32,
        bits: u64,
        len: u64,
        offset: u64,
    },
    Atomic {
        src: usize,
        pt: u32,
        bits: u64,
        offset: u64,
        ack: bool,
        hdr: u64,
        fetch: bool,
        spec: AtomicSpec,
        elements: u64,
        operand: u64,
    },
    Drain {
        n: usize,
    },
}

/// Atomics of the kinds the model computes, some of them refused (bitwise
/// on floats, no elements, compare-and-swap on several elements or
/// without a reply).
fn atomic_action() -> impl Strategy<Value = Action> {
    let op = prop_oneof![
        Just(AtomicOp::Sum),
        Just(AtomicOp::Max),
        Just(AtomicOp::Band),
        Just(AtomicOp::Bor),
        Just(AtomicOp::Swap),
        Just(AtomicOp::Cswap),
    ];
    let dt = prop_oneof![
        Just(Datatype::U8),
        Just(Datatype::U32),
        Just(Datatype::I64),
        Just(Datatype::F64),
    ];
    (
        (
            0usize..2,
            0u32..2,
            0u64..4,
            0u64..40,
            any::<bool>(),
            any::<u64>(),
        ),
        (any::<bool>(), op, dt, 0u64..4, 0u64..3),
    )
        .prop_map(
            |((src, pt, bits, offset, ack, hdr), (fetch, op, datatype, elements, operand))| {
                // The model computes no float arithmetic: floats only swap
                // (or are refused a bitwise operation).
                let op = match (datatype, op) {
                    (Datatype::F64, AtomicOp::Sum | AtomicOp::Max | AtomicOp::Cswap) => {
                        AtomicOp::Swap
                    }
                    (_, op) => op,
                };
                Action::Atomic {
                    src,
                    pt,
                    bits,
                    offset,
                    ack: ack && !fetch,
                    hdr,
                    fetch,
                    spec: AtomicSpec { op, datatype },
                    elements,
                    operand,
                }
            },
        )
}

fn md_spec() -> impl Strategy<Value = MdSpec> {
    (
        0usize..40,
        any::<[bool; 6]>(),
        prop::option::of(0u64..12),
        prop::option::of(0u32..4),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(len, f, max_size, threshold, iovec)| MdSpec {
            len,
            put: f[0] || !f[1],
            get: f[1],
            remote: f[2],
            truncate: f[3],
            ack_disable: f[4],
            max_size,
            threshold,
            unlink: f[5],
            iovec,
        })
}

fn action() -> impl Strategy<Value = Action> {
    let ignore = prop_oneof![Just(0u64), Just(1), Just(3), Just(u64::MAX)];
    prop_oneof![
        3 => (0u32..2, any::<bool>(), 0u8..3, 0u64..4, ignore.clone(), any::<bool>(), prop::option::weighted(0.8, md_spec()))
            .prop_map(|(pt, head, mid, bits, ignore, unlink, md)| Action::Attach { pt, head, mid, bits, ignore, unlink, md }),
        1 => (any::<usize>(), any::<bool>(), 0u8..3, 0u64..4, ignore, any::<bool>(), prop::option::weighted(0.8, md_spec()))
            .prop_map(|(base, before, mid, bits, ignore, unlink, md)| Action::Insert { base, before, mid, bits, ignore, unlink, md }),
        1 => (any::<usize>(), md_spec()).prop_map(|(me, md)| Action::AttachMd { me, md }),
        1 => any::<usize>().prop_map(|me| Action::UnlinkMe { me }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(md, as_list)| Action::UnlinkMd { md, as_list }),
        1 => (any::<usize>(), prop::option::of(0u32..3), any::<bool>())
            .prop_map(|(md, threshold, test_eq)| Action::Update { md, threshold, test_eq }),
        6 => (0usize..2, 0u32..2, 0u64..4, 0u64..24, 0u64..40, any::<bool>(), any::<u64>())
            .prop_map(|(src, pt, bits, len, offset, ack, hdr)| Action::Put { src, pt, bits, len, offset, ack, hdr }),
        2 => (0usize..2, 0u32..2, 0u64..4, 0u64..24, 0u64..40)
            .prop_map(|(src, pt, bits, len, offset)| Action::Get { src, pt, bits, len, offset }),
        3 => atomic_action(),
        2 => (0usize..4).prop_map(|n| Action::Drain { n }),
    ]
}

fn mid(m: u8) -> ProcessId {
    match m {
        0 => ProcessId::ANY,
        1 => ProcessId::new(1, PID_ANY),
        _ => INITIATORS[1],
    }
}

fn header(r: Incoming) -> Header {
    Header {
        op: r.op,
        ack_req: r.ack,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: KEY,
        src: r.src,
        dst: ME_ID,
        pt_index: PortalIndex(r.pt),
        ac_index: 0,
        match_bits: r.bits,
        offset: r.offset,
        hdr_data: r.hdr,
        rlength: r.len,
        mlength: 0,
        cookie: 99,
        atomic: r.atomic,
    }
}

/// Drives the engine and the model side by side.
struct Pair {
    e: Engine,
    m: Model,
    eq: EqHandle,
    me_h: Vec<MeHandle>,
    md_h: Vec<MdHandle>,
}

impl Pair {
    fn new() -> Self {
        let mut e = Engine::new(ME_ID, KEY, NiLimits::default()).unwrap();
        let eq = e.eq_alloc(EQ_CAP).unwrap();
        Pair {
            e,
            m: Model::new(),
            eq,
            me_h: Vec::new(),
            md_h: Vec::new(),
        }
    }

    fn new_md(&mut self, me: usize, spec: MdSpec) -> Result<(), TestCaseError> {
        let id = self.md_h.len();
        let mem: Vec<u8> = (0..spec.len)
            .map(|i| (i as u8).wrapping_mul(3).wrapping_add(id as u8))
            .collect();
        let unlink = if spec.unlink {
            Unlink::Unlink
        } else {
            Unlink::Retain
        };
        let desc = spec.desc(self.eq, id as u64);
        let h = match spec.iovec {
            Some(seed) => self.e.md_attach_iovec(
                self.me_h[me],
                &desc,
                segments(&mem, &split(spec.len, seed)),
                unlink,
            ),
            None => self.e.md_attach(self.me_h[me], &desc, mem.clone(), unlink),
        };
        let live = self.m.mes.get(me).is_some_and(|x| x.is_some());
        let free = live && self.m.mes[me].as_ref().is_some_and(|x| x.md.is_none());
        match h {
            Ok(h) => {
                prop_assert!(free, "engine attached to an entry that is gone or busy");
                self.md_h.push(h);
                self.m.mds.push(Some(MMd {
                    spec,
                    mem,
                    local: 0,
                    threshold: spec.threshold,
                    // Portals 3.3: a high-water mark beyond the length makes
                    // the descriptor inactive from the start.
                    exhausted: spec.max_size.is_some_and(|x| x > spec.len as u64),
                    me: Some(me),
                    parked: false,
                }));
                if let Some(m) = self.m.mes[me].as_mut() {
                    m.md = Some(id);
                }
            }
            Err(PtlError::MeInUse) => prop_assert!(live && !free),
            Err(PtlError::InvalidHandle { .. }) => prop_assert!(!live),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        Ok(())
    }

    fn new_me(
        &mut self,
        r: portals::Result<MeHandle>,
        pt: u32,
        m: u8,
        bits: u64,
        ignore: u64,
        unlink: bool,
    ) -> Option<usize> {
        let h = r.ok()?;
        self.me_h.push(h);
        self.m.mes.push(Some(MMe {
            pt,
            mid: mid(m),
            bits,
            ignore,
            unlink,
            md: None,
        }));
        Some(self.me_h.len() - 1)
    }

    fn step(&mut self, a: &Action, k: usize) -> Result<(), TestCaseError> {
        match a.clone() {
            Action::Attach {
                pt,
                head,
                mid: m,
                bits,
                ignore,
                unlink,
                md,
            } => {
                let pos = if head {
                    Position::Before
                } else {
                    Position::After
                };
                let r = self.e.me_attach(
                    PortalIndex(pt),
                    mid(m),
                    bits,
                    ignore,
                    if unlink {
                        Unlink::Unlink
                    } else {
                        Unlink::Retain
                    },
                    pos,
                );
                let id = self
                    .new_me(r, pt, m, bits, ignore, unlink)
                    .expect("attach on a valid portal");
                if head {
                    self.m.lists[pt as usize].insert(0, id);
                } else {
                    self.m.lists[pt as usize].push(id);
                }
                if let Some(spec) = md {
                    self.new_md(id, spec)?;
                }
            }
            Action::Insert {
                base,
                before,
                mid: m,
                bits,
                ignore,
                unlink,
                md,
            } => {
                if self.me_h.is_empty() {
                    return Ok(());
                }
                let b = base % self.me_h.len();
                let pos = if before {
                    Position::Before
                } else {
                    Position::After
                };
                let r = self.e.me_insert(
                    self.me_h[b],
                    mid(m),
                    bits,
                    ignore,
                    if unlink {
                        Unlink::Unlink
                    } else {
                        Unlink::Retain
                    },
                    pos,
                );
                match &self.m.mes[b] {
                    None => prop_assert!(
                        matches!(r, Err(PtlError::InvalidHandle { .. })),
                        "insert after a stale entry"
                    ),
                    Some(base_me) => {
                        let pt = base_me.pt;
                        let id = self
                            .new_me(r, pt, m, bits, ignore, unlink)
                            .expect("insert after a live entry");
                        let list = &mut self.m.lists[pt as usize];
                        let i = list.iter().position(|&x| x == b).expect("base listed");
                        list.insert(if before { i } else { i + 1 }, id);
                        if let Some(spec) = md {
                            self.new_md(id, spec)?;
                        }
                    }
                }
            }
            Action::AttachMd { me, md } => {
                if !self.me_h.is_empty() {
                    self.new_md(me % self.me_h.len(), md)?;
                }
            }
            Action::UnlinkMe { me } => {
                if self.me_h.is_empty() {
                    return Ok(());
                }
                let i = me % self.me_h.len();
                let r = self.e.me_unlink(self.me_h[i]);
                match self.m.mes[i].clone() {
                    None => prop_assert!(
                        matches!(r, Err(PtlError::InvalidHandle { .. })),
                        "expected a stale handle: {:?}",
                        r
                    ),
                    Some(me) => {
                        if let Some(d) = me.md.filter(|&d| {
                            self.m.mds[d]
                                .as_ref()
                                .is_some_and(|m| m.spec.iovec.is_some())
                        }) {
                            // Owned segments come back only through
                            // md_unlink_iovec: refused, nothing changes.
                            prop_assert!(
                                matches!(r, Err(PtlError::InvalidArgument(_))),
                                "me_unlink over iovec md {}: {:?}",
                                d,
                                r
                            );
                            return self.compare_state();
                        }
                        let got = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                        match me.md {
                            Some(d) => {
                                let md = self.m.mds[d].take().expect("attached md is live");
                                prop_assert_eq!(got, Some(md.mem));
                            }
                            None => prop_assert_eq!(got, None),
                        }
                        self.m.unlink_me(i);
                    }
                }
            }
            Action::UnlinkMd { md, as_list } => {
                if self.md_h.is_empty() {
                    return Ok(());
                }
                let d = md % self.md_h.len();
                let iovec = self.m.mds[d].as_ref().and_then(|m| m.spec.iovec);
                let r = if as_list || iovec.is_some() {
                    if iovec.is_some() && !as_list {
                        // The one-buffer call refuses a list and changes
                        // nothing.
                        let r = self.e.md_unlink(self.md_h[d]);
                        prop_assert!(
                            matches!(r, Err(PtlError::InvalidArgument(_))),
                            "md_unlink of iovec md {}: {:?}",
                            d,
                            r
                        );
                    }
                    self.e.md_unlink_iovec(self.md_h[d]).map(|segs| {
                        segs.map(|segs| {
                            let lens: Vec<usize> = segs.iter().map(Vec::len).collect();
                            (segs.concat(), lens)
                        })
                    })
                } else {
                    self.e
                        .md_unlink(self.md_h[d])
                        .map(|m| m.map(|m| (m.clone(), vec![m.len()])))
                };
                match self.m.mds[d].take() {
                    None => prop_assert!(
                        matches!(r, Err(PtlError::InvalidHandle { .. })),
                        "expected a stale handle: {:?}",
                        r
                    ),
                    Some(md) => {
                        // The segments come back as given: same split.
                        let lens = match md.spec.iovec {
                            Some(seed) => split(md.spec.len, seed),
                            None => vec![md.mem.len()],
                        };
                        prop_assert_eq!(
                            r.map_err(|e| TestCaseError::fail(e.to_string()))?,
                            Some((md.mem.clone(), lens))
                        );
                        if let Some(me) = md.me {
                            let unlink_me = self.m.mes[me].as_ref().is_some_and(|m| m.unlink);
                            if let Some(m) = self.m.mes[me].as_mut() {
                                m.md = None;
                            }
                            if unlink_me {
                                self.m.unlink_me(me);
                            }
                        }
                    }
                }
            }
            Action::Update {
                md,
                threshold,
                test_eq,
            } => {
                if self.md_h.is_empty() {
                    return Ok(());
                }
                let d = md % self.md_h.len();
                let Some(old) = self.m.mds[d].clone() else {
                    let r = self.e.md_update(self.md_h[d], None, None);
                    prop_assert!(
                        matches!(r, Err(PtlError::InvalidHandle { .. })),
                        "expected a stale handle: {:?}",
                        r
                    );
                    return Ok(());
                };
                let mut spec = old.spec;
                spec.threshold = threshold;
                let r = self.e.md_update(
                    self.md_h[d],
                    Some(&spec.desc(self.eq, d as u64)),
                    test_eq.then_some(self.eq),
                );
                if old.parked {
                    prop_assert!(
                        matches!(r, Err(PtlError::InvalidHandle { .. })),
                        "update of an unlinked md: {r:?}"
                    );
                } else if test_eq && (!self.m.eq.is_empty() || self.m.dropped > 0) {
                    prop_assert_eq!(r.map(|_| ()), Err(PtlError::MdNoUpdate));
                } else {
                    let snap = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(snap.local_offset, old.local);
                    let m = self.m.mds[d].as_mut().expect("live");
                    m.spec.threshold = threshold;
                    m.threshold = threshold;
                    // The high-water mark is re-evaluated against the new
                    // description.
                    m.exhausted = m
                        .spec
                        .max_size
                        .is_some_and(|x| m.local + x > m.mem.len() as u64);
                }
            }
            Action::Put {
                src,
                pt,
                bits,
                len,
                offset,
                ack,
                hdr,
            } => {
                let src = INITIATORS[src];
                let payload: Vec<u8> = (0..len)
                    .map(|i| (k as u8).wrapping_add(i as u8).wrapping_mul(7))
                    .collect();
                let inc = Incoming {
                    op: Op::Put,
                    src,
                    pt,
                    bits,
                    len,
                    offset,
                    ack,
                    hdr,
                    atomic: None,
                };
                let (want, _) = self.m.request(inc, &payload);
                let h = header(inc);
                match (self.e.recv_header(&h), want) {
                    (
                        RecvAction::Deposit {
                            region,
                            discard,
                            token,
                        },
                        Outcome::Accepted { mlength, ack, .. },
                    ) => {
                        prop_assert_eq!(region.len() as u64, mlength);
                        prop_assert_eq!(discard, len - mlength);
                        // SAFETY: token open; sole user of the region.
                        // Across segments for an iovec descriptor.
                        unsafe { region.write_at(0, &payload[..mlength as usize]) };
                        let resp = self.e.recv_complete(token);
                        prop_assert_eq!(resp.is_some(), ack, "ack decision");
                        if let Some(r) = resp {
                            prop_assert_eq!(
                                (r.header.op, r.header.mlength, r.header.fail),
                                (Op::Ack, mlength, FailType::Ok)
                            );
                        }
                    }
                    (RecvAction::Respond { response, .. }, Outcome::Dropped { nack: true }) => {
                        prop_assert_eq!(
                            (response.header.op, response.header.fail),
                            (Op::Ack, FailType::Dropped)
                        );
                    }
                    (RecvAction::Discard(n), Outcome::Dropped { nack: false }) => {
                        prop_assert_eq!(n, len)
                    }
                    (got, want) => prop_assert!(false, "put: engine {got:?}, model {want:?}"),
                }
            }
            Action::Get {
                src,
                pt,
                bits,
                len,
                offset,
            } => {
                let src = INITIATORS[src];
                let inc = Incoming {
                    op: Op::Get,
                    src,
                    pt,
                    bits,
                    len,
                    offset,
                    ack: false,
                    hdr: 0,
                    atomic: None,
                };
                let (want, reply) = self.m.request(inc, &[]);
                let h = header(inc);
                match (self.e.recv_header(&h), want) {
                    (RecvAction::Respond { response, .. }, Outcome::Accepted { mlength, .. }) => {
                        prop_assert_eq!(
                            (response.header.op, response.header.mlength),
                            (Op::Reply, mlength)
                        );
                        match &response.payload {
                            // SAFETY: the send token is open.
                            Payload::Region(r) => {
                                let mut got = vec![0u8; r.len()];
                                unsafe { r.read_at(0, &mut got) };
                                prop_assert_eq!(got, reply.clone())
                            }
                            Payload::None => prop_assert!(reply.is_empty()),
                            Payload::Owned(v) => prop_assert_eq!(v, &reply),
                        }
                        if let Some(t) = response.token {
                            self.e.send_complete(t, FailType::Ok);
                        }
                    }
                    (RecvAction::Respond { response, .. }, Outcome::Dropped { nack: true }) => {
                        prop_assert_eq!(
                            (response.header.op, response.header.fail),
                            (Op::Reply, FailType::Dropped)
                        );
                    }
                    (got, want) => prop_assert!(false, "get: engine {got:?}, model {want:?}"),
                }
            }
            Action::Atomic {
                src,
                pt,
                bits,
                offset,
                ack,
                hdr,
                fetch,
                spec,
                elements,
                operand,
            } => self.atomic(
                Incoming {
                    op: if fetch { Op::FetchAtomic } else { Op::Atomic },
                    src: INITIATORS[src],
                    pt,
                    bits,
                    len: elements * spec.datatype.size() as u64,
                    offset,
                    ack,
                    hdr,
                    atomic: Some(spec),
                },
                operand,
                k,
            )?,
            Action::Drain { n } => {
                for _ in 0..n {
                    self.compare_one_event()?;
                }
            }
        }
        self.compare_state()
    }

    fn atomic(&mut self, inc: Incoming, operand: u64, k: usize) -> Result<(), TestCaseError> {
        let Some(spec) = inc.atomic else {
            return Ok(());
        };
        let fetch = inc.op == Op::FetchAtomic;
        // A small operand value, so that compare-and-swap sometimes swaps
        // (descriptor bytes are small too).
        let mut payload = Vec::new();
        if spec.op == AtomicOp::Cswap {
            payload.extend_from_slice(&operand.to_le_bytes()[..spec.datatype.size()]);
        }
        payload.extend((0..inc.len).map(|i| (k as u8).wrapping_add(i as u8).wrapping_mul(5)));
        let (want, old) = self.m.request(inc, &payload);
        let h = header(inc);
        prop_assert_eq!(h.payload_len(), payload.len() as u64);
        match (self.e.recv_header(&h), want) {
            (
                RecvAction::Deposit {
                    region,
                    discard,
                    token,
                },
                Outcome::Accepted { mlength, ack, .. },
            ) => {
                prop_assert_eq!(mlength, inc.len, "an atomic is never truncated");
                prop_assert_eq!((region.len(), discard), (payload.len(), 0));
                // SAFETY: token open; sole user of the region.
                unsafe { region.as_mut_slice() }.copy_from_slice(&payload);
                let resp = self.e.recv_complete(token);
                prop_assert_eq!(resp.is_some(), ack || fetch, "response decision");
                if let Some(r) = resp {
                    let op = if fetch { Op::Reply } else { Op::Ack };
                    prop_assert_eq!(
                        (r.header.op, r.header.mlength, r.header.fail),
                        (op, mlength, FailType::Ok)
                    );
                    match &r.payload {
                        // SAFETY: the send token is open.
                        Payload::Region(reg) => {
                            prop_assert_eq!(unsafe { reg.as_slice() }, &old[..])
                        }
                        Payload::None => prop_assert!(!fetch),
                        Payload::Owned(v) => prop_assert_eq!(v, &old),
                    }
                    if let Some(t) = r.token {
                        self.e.send_complete(t, FailType::Ok);
                    }
                }
            }
            (RecvAction::Respond { response, .. }, Outcome::Dropped { nack: true }) => {
                let op = if fetch { Op::Reply } else { Op::Ack };
                prop_assert_eq!(
                    (response.header.op, response.header.fail),
                    (op, FailType::Dropped)
                );
            }
            (RecvAction::Discard(n), Outcome::Dropped { nack: false }) => {
                prop_assert_eq!(n, payload.len() as u64)
            }
            (got, want) => prop_assert!(false, "atomic: engine {got:?}, model {want:?}"),
        }
        Ok(())
    }

    fn compare_one_event(&mut self) -> Result<(), TestCaseError> {
        let got = self.e.eq_get(self.eq);
        if self.m.dropped > 0 {
            let d = std::mem::take(&mut self.m.dropped);
            prop_assert_eq!(got, Err(PtlError::EqDropped { dropped: d }));
            return Ok(());
        }
        match (got, self.m.eq.pop_front()) {
            (Ok(None), None) => {}
            (Ok(Some(ev)), Some(want)) => {
                let mapped = MEv {
                    kind: ev.kind,
                    md: ev.md.user_ptr as usize,
                    initiator: ev.initiator,
                    pt: ev.pt_index.0,
                    bits: ev.match_bits,
                    rlength: ev.rlength,
                    mlength: ev.mlength,
                    offset: ev.offset,
                    hdr: ev.hdr_data,
                    seq: ev.sequence,
                    fail: ev.fail,
                };
                let want_cmp = if want.kind == EventKind::Unlink {
                    // Unlink events describe the descriptor, not a message.
                    MEv {
                        initiator: ev.initiator,
                        pt: ev.pt_index.0,
                        bits: ev.match_bits,
                        ..want
                    }
                } else {
                    want
                };
                prop_assert_eq!(mapped, want_cmp);
                prop_assert_eq!(ev.md_handle, self.md_h[ev.md.user_ptr as usize]);
            }
            (got, want) => prop_assert!(false, "event: engine {got:?}, model {want:?}"),
        }
        Ok(())
    }

    fn compare_state(&mut self) -> Result<(), TestCaseError> {
        let s = self.e.status();
        prop_assert_eq!(
            (
                s.dropped_no_match,
                s.dropped_rejected,
                s.accepted,
                s.dropped_atomic_invalid
            ),
            (
                self.m.no_match,
                self.m.rejected,
                self.m.accepted,
                self.m.atomic_invalid
            )
        );
        for pt in 0..2u32 {
            let got = self.e.match_list(PortalIndex(pt)).unwrap();
            let want: Vec<MeHandle> = self.m.lists[pt as usize]
                .iter()
                .map(|&i| self.me_h[i])
                .collect();
            prop_assert_eq!(got, want, "match list of portal {}", pt);
        }
        for (d, md) in self.m.mds.iter().enumerate() {
            if let Some(md) = md {
                let mut buf = vec![0u8; md.mem.len()];
                self.e
                    .md_read(self.md_h[d], 0, &mut buf)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&buf, &md.mem, "memory of md {}", d);
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn engine_agrees_with_the_reference_model(actions in prop::collection::vec(action(), 1..60)) {
        let mut p = Pair::new();
        for (k, a) in actions.iter().enumerate() {
            p.step(a, k)?;
        }
        // Drain everything that is left.
        for _ in 0..(EQ_CAP + 2) {
            p.compare_one_event()?;
        }
    }
}
