//! Property test: random sequences of counting-event and triggered-operation
//! calls — increments and sets crossing thresholds in any order, triggered
//! increments, sets and puts (chains of them), descriptors unlinked under
//! their triggered puts, counters freed, reallocated and cancelled, sends
//! completing or failing, counts near `u64::MAX` — applied both to the
//! engine and to a small reference model written from the documented
//! semantics (`engine/counters.rs`, `engine/triggered.rs`). After every
//! step the counter values, the pending operations, the puts issued (and
//! their order) and every call's result must agree.

use portals::*;
use proptest::prelude::*;

const KEY: u64 = 0xc7;
const ME: ProcessId = ProcessId::new(1, 1);
const PEER: ProcessId = ProcessId::new(1, 2);
const NCT: usize = 3;
const NMD: usize = 2;
const MAX_TRIGGERED: usize = 6;

// ----- the reference model ------------------------------------------------------

/// A model counter, by slot and generation (a freed slot's next counter is
/// another one).
type CtRef = (usize, u64);
type MdRef = (usize, u64);

#[derive(Clone, Copy, Debug, PartialEq)]
enum MOp {
    Inc(CtRef, CtEvent),
    Set(CtRef, CtEvent),
    Put(MdRef, u64),
}

#[derive(Debug)]
struct MCounter {
    gen: u64,
    value: CtEvent,
    /// (threshold, recording order, operation).
    pending: Vec<(u64, u64, MOp)>,
    dirty: bool,
}

#[derive(Debug)]
struct MMd {
    gen: u64,
    ct: Option<CtRef>,
    in_flight: usize,
}

#[derive(Default)]
struct Model {
    cts: [Option<MCounter>; NCT],
    mds: [Option<MMd>; NMD],
    next_gen: u64,
    seq: u64,
    work: Vec<usize>,
    /// Puts issued, in order (their ids), not yet compared.
    fired: Vec<u64>,
    /// Puts whose send has not completed: (descriptor slot, id).
    sending: Vec<(usize, u64)>,
}

fn add(v: &mut CtEvent, by: CtEvent) {
    v.success = v.success.saturating_add(by.success);
    v.failure = v.failure.saturating_add(by.failure);
}

impl Model {
    fn ct(&mut self, r: CtRef) -> Option<&mut MCounter> {
        self.cts[r.0].as_mut().filter(|c| c.gen == r.1)
    }

    fn pending(&self) -> usize {
        self.cts.iter().flatten().map(|c| c.pending.len()).sum()
    }

    fn changed(&mut self, slot: usize) {
        if let Some(c) = self.cts[slot].as_mut() {
            if !c.dirty && !c.pending.is_empty() {
                c.dirty = true;
                self.work.push(slot);
            }
        }
    }

    fn count(&mut self, r: CtRef, by: CtEvent) {
        if let Some(c) = self.ct(r) {
            add(&mut c.value, by);
            self.changed(r.0);
        }
    }

    fn issue(&mut self, op: MOp) {
        match op {
            MOp::Inc(r, by) => self.count(r, by),
            MOp::Set(r, to) => {
                if let Some(c) = self.ct(r) {
                    c.value = to;
                    self.changed(r.0);
                }
            }
            MOp::Put(md, id) => {
                let d = self.mds[md.0].as_mut().expect("unlinking cancels");
                d.in_flight += 1;
                self.fired.push(id);
                self.sending.push((md.0, id));
            }
        }
    }

    /// The first operation waiting in `slot` (threshold, then recording
    /// order) that the counter's value releases.
    fn next_released(&mut self, slot: usize) -> Option<MOp> {
        let c = self.cts[slot].as_mut()?;
        let total = c.value.total();
        let (j, _) = c
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 <= total)
            .min_by_key(|(_, p)| (p.0, p.1))?;
        Some(c.pending.remove(j).2)
    }

    fn run(&mut self) {
        let mut i = 0;
        while let Some(&slot) = self.work.get(i) {
            i += 1;
            while let Some(op) = self.next_released(slot) {
                self.issue(op);
            }
            if let Some(c) = self.cts[slot].as_mut() {
                c.dirty = false;
            }
        }
        self.work.clear();
    }

    /// Record `op` against counter slot `trig` (alive) at `threshold`.
    fn record(&mut self, trig: usize, threshold: u64, op: MOp) -> Result<(), Class> {
        let total = self.cts[trig].as_ref().expect("checked").value.total();
        if total >= threshold {
            self.issue(op);
            self.run();
            return Ok(());
        }
        if self.pending() >= MAX_TRIGGERED {
            return Err(Class::NoSpace);
        }
        self.seq += 1;
        let seq = self.seq;
        self.cts[trig]
            .as_mut()
            .expect("checked")
            .pending
            .push((threshold, seq, op));
        Ok(())
    }
}

// ----- the engine side ----------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Handle,
    NoSpace,
    Argument,
    InUse,
    Other,
}

fn class(e: PtlError) -> Class {
    match e {
        PtlError::InvalidHandle { .. } => Class::Handle,
        PtlError::NoSpace { .. } => Class::NoSpace,
        PtlError::InvalidArgument(_) => Class::Argument,
        PtlError::MdInUse => Class::InUse,
        _ => Class::Other,
    }
}

struct Pair {
    e: Engine,
    cts: [Option<CtHandle>; NCT],
    mds: [Option<MdHandle>; NMD],
    /// Send tokens of issued puts, oldest first.
    tokens: Vec<(SendToken, u64)>,
    m: Model,
    next_id: u64,
}

#[derive(Clone, Copy, Debug)]
enum Act {
    Inc {
        c: usize,
        fail: bool,
        n: u64,
    },
    IncBoth {
        c: usize,
    },
    Set {
        c: usize,
        s: u64,
        f: u64,
    },
    TrigInc {
        trig: usize,
        thr: u64,
        c: usize,
        fail: bool,
        n: u64,
    },
    TrigSet {
        trig: usize,
        thr: u64,
        c: usize,
        s: u64,
        f: u64,
    },
    TrigPut {
        trig: usize,
        thr: u64,
        md: usize,
    },
    Unlink {
        md: usize,
    },
    Rebind {
        md: usize,
    },
    Free {
        c: usize,
    },
    Realloc {
        c: usize,
    },
    Cancel {
        c: usize,
    },
    Complete {
        ok: bool,
    },
}

impl Pair {
    fn new() -> Pair {
        let limits = NiLimits {
            max_triggered: MAX_TRIGGERED,
            ..NiLimits::default()
        };
        let mut p = Pair {
            e: Engine::new(ME, KEY, limits).unwrap(),
            cts: [None; NCT],
            mds: [None; NMD],
            tokens: Vec::new(),
            m: Model::default(),
            next_id: 0,
        };
        for c in 0..NCT {
            p.realloc(c);
        }
        for md in 0..NMD {
            p.rebind(md);
        }
        p
    }

    fn realloc(&mut self, c: usize) {
        if self.cts[c].is_some() {
            return;
        }
        self.cts[c] = Some(self.e.ct_alloc().unwrap());
        self.m.next_gen += 1;
        self.m.cts[c] = Some(MCounter {
            gen: self.m.next_gen,
            value: CtEvent::default(),
            pending: Vec::new(),
            dirty: false,
        });
    }

    fn rebind(&mut self, md: usize) {
        if self.mds[md].is_some() {
            return;
        }
        let slot = md % NCT;
        let mut desc = MdDesc::new(MdOptions::CT_SEND);
        desc.ct = self.cts[slot];
        self.mds[md] = Some(self.e.md_bind(&desc, vec![7; 4], Unlink::Retain).unwrap());
        self.m.next_gen += 1;
        self.m.mds[md] = Some(MMd {
            gen: self.m.next_gen,
            ct: self.m.cts[slot].as_ref().map(|c| (slot, c.gen)),
            in_flight: 0,
        });
    }

    fn ct_ref(&self, c: usize) -> Option<CtRef> {
        self.m.cts[c].as_ref().map(|x| (c, x.gen))
    }

    /// The engine's handle of slot `c`, or a stale one if the slot is free
    /// (a freed counter's handle must be refused).
    fn handle(&mut self, c: usize, stale: &mut Option<CtHandle>) -> CtHandle {
        match self.cts[c] {
            Some(h) => h,
            None => *stale.get_or_insert_with(|| {
                let h = self.e.ct_alloc().unwrap();
                self.e.ct_free(h).unwrap();
                h
            }),
        }
    }

    fn step(&mut self, a: Act) -> Result<(), TestCaseError> {
        let mut stale = None;
        let (got, want): (Result<(), Class>, Result<(), Class>) = match a {
            Act::Inc { c, fail, n } => {
                let by = if fail {
                    CtEvent::failure(n)
                } else {
                    CtEvent::success(n)
                };
                let h = self.handle(c, &mut stale);
                let got = self.e.ct_inc(h, by).map_err(class);
                let want = match self.ct_ref(c) {
                    Some(r) => {
                        self.m.count(r, by);
                        self.m.run();
                        Ok(())
                    }
                    None => Err(Class::Handle),
                };
                (got, want)
            }
            Act::IncBoth { c } => {
                let h = self.handle(c, &mut stale);
                let got = self.e.ct_inc(h, CtEvent::new(1, 1)).map_err(class);
                let want = match self.ct_ref(c) {
                    Some(_) => Err(Class::Argument),
                    None => Err(Class::Handle),
                };
                (got, want)
            }
            Act::Set { c, s, f } => {
                let to = CtEvent::new(s, f);
                let h = self.handle(c, &mut stale);
                let got = self.e.ct_set(h, to).map_err(class);
                let want = match self.ct_ref(c) {
                    Some(r) => {
                        self.m.ct(r).expect("alive").value = to;
                        self.m.changed(c);
                        self.m.run();
                        Ok(())
                    }
                    None => Err(Class::Handle),
                };
                (got, want)
            }
            Act::TrigInc {
                trig,
                thr,
                c,
                fail,
                n,
            } => {
                let by = if fail {
                    CtEvent::failure(n)
                } else {
                    CtEvent::success(n)
                };
                let th = self.handle(trig, &mut stale);
                let ch = self.handle(c, &mut stale);
                let got = self
                    .e
                    .triggered_ct_inc(ch, by, Trigger::new(th, thr))
                    .map_err(class);
                let want = match (self.ct_ref(trig), self.ct_ref(c)) {
                    (Some(_), Some(r)) => self.m.record(trig, thr, MOp::Inc(r, by)),
                    _ => Err(Class::Handle),
                };
                (got, want)
            }
            Act::TrigSet { trig, thr, c, s, f } => {
                let to = CtEvent::new(s, f);
                let th = self.handle(trig, &mut stale);
                let ch = self.handle(c, &mut stale);
                let got = self
                    .e
                    .triggered_ct_set(ch, to, Trigger::new(th, thr))
                    .map_err(class);
                let want = match (self.ct_ref(trig), self.ct_ref(c)) {
                    (Some(_), Some(r)) => self.m.record(trig, thr, MOp::Set(r, to)),
                    _ => Err(Class::Handle),
                };
                (got, want)
            }
            Act::TrigPut { trig, thr, md } => {
                let Some(mh) = self.mds[md] else {
                    return Ok(());
                };
                self.next_id += 1;
                let id = self.next_id;
                let th = self.handle(trig, &mut stale);
                let got = self
                    .e
                    .triggered_put(
                        mh,
                        0,
                        4,
                        AckReq::NoAck,
                        &Remote::new(PEER, PortalIndex(3), 0),
                        id,
                        Trigger::new(th, thr),
                    )
                    .map_err(class);
                let mref = (md, self.m.mds[md].as_ref().expect("bound").gen);
                let want = match self.ct_ref(trig) {
                    Some(_) => self.m.record(trig, thr, MOp::Put(mref, id)),
                    None => Err(Class::Handle),
                };
                (got, want)
            }
            Act::Unlink { md } => {
                let Some(mh) = self.mds[md] else {
                    return Ok(());
                };
                let got = self.e.md_unlink(mh).map(|_| ()).map_err(class);
                let d = self.m.mds[md].as_ref().expect("bound");
                let want = if d.in_flight > 0 {
                    Err(Class::InUse)
                } else {
                    let mref = (md, d.gen);
                    let ct = d.ct;
                    let mut failed = 0;
                    for c in self.m.cts.iter_mut().flatten() {
                        let before = c.pending.len();
                        c.pending
                            .retain(|p| !matches!(p.2, MOp::Put(m, _) if m == mref));
                        failed += before - c.pending.len();
                    }
                    for _ in 0..failed {
                        if let Some(r) = ct {
                            self.m.count(r, CtEvent::failure(1));
                        }
                    }
                    self.m.run();
                    self.m.mds[md] = None;
                    self.mds[md] = None;
                    Ok(())
                };
                (got, want)
            }
            Act::Rebind { md } => {
                self.rebind(md);
                return self.compare();
            }
            Act::Free { c } => {
                let Some(h) = self.cts[c] else {
                    return Ok(());
                };
                let got = self.e.ct_free(h).map_err(class);
                let r = self.ct_ref(c).expect("alive");
                self.m.cts[c] = None;
                for x in self.m.cts.iter_mut().flatten() {
                    x.pending.retain(|p| match p.2 {
                        MOp::Inc(t, _) | MOp::Set(t, _) => t != r,
                        MOp::Put(..) => true,
                    });
                }
                self.cts[c] = None;
                (got, Ok(()))
            }
            Act::Realloc { c } => {
                self.realloc(c);
                return self.compare();
            }
            Act::Cancel { c } => {
                let h = self.handle(c, &mut stale);
                let got = self.e.ct_cancel_triggered(h).map_err(class);
                let want = match self.m.cts[c].as_mut() {
                    Some(x) => {
                        x.pending.clear();
                        Ok(())
                    }
                    None => Err(Class::Handle),
                };
                (got, want)
            }
            Act::Complete { ok } => {
                if self.tokens.is_empty() {
                    return Ok(());
                }
                let (tok, id) = self.tokens.remove(0);
                let fail = if ok {
                    FailType::Ok
                } else {
                    FailType::Unreachable
                };
                self.e.send_complete(tok, fail);
                let (md, mid) = self.m.sending.remove(0);
                prop_assert_eq!(id, mid, "sends complete in the order issued");
                let d = self.m.mds[md].as_mut().expect("in use, not unlinked");
                d.in_flight -= 1;
                if let Some(r) = d.ct {
                    let by = if ok {
                        CtEvent::success(1)
                    } else {
                        CtEvent::failure(1)
                    };
                    self.m.count(r, by);
                }
                self.m.run();
                (Ok(()), Ok(()))
            }
        };
        prop_assert_eq!(got, want, "result of {:?}", a);
        self.compare()
    }

    fn compare(&mut self) -> Result<(), TestCaseError> {
        while let Some(out) = self.e.take_triggered() {
            let token = out.token.expect("a put completes");
            self.tokens.push((token, out.header.hdr_data));
        }
        let issued: Vec<u64> = self.tokens.iter().map(|t| t.1).collect();
        let modelled: Vec<u64> = self.m.sending.iter().map(|s| s.1).collect();
        prop_assert_eq!(issued, modelled, "puts issued, in order");
        prop_assert_eq!(self.e.triggered_pending(), self.m.pending());
        for c in 0..NCT {
            if let (Some(h), Some(x)) = (self.cts[c], self.m.cts[c].as_ref()) {
                prop_assert_eq!(self.e.ct_get(h).unwrap(), x.value, "counter {}", c);
            }
        }
        Ok(())
    }
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..4,
        1 => (0u64..3).prop_map(|d| u64::MAX - d),
    ]
}

fn threshold() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0u64..10,
        1 => (0u64..2).prop_map(|d| u64::MAX - d),
    ]
}

fn act() -> impl Strategy<Value = Act> {
    let c = 0..NCT;
    let md = 0..NMD;
    prop_oneof![
        6 => (c.clone(), any::<bool>(), amount()).prop_map(|(c, fail, n)| Act::Inc { c, fail, n }),
        1 => c.clone().prop_map(|c| Act::IncBoth { c }),
        2 => (c.clone(), amount(), amount()).prop_map(|(c, s, f)| Act::Set { c, s, f }),
        5 => (c.clone(), threshold(), c.clone(), any::<bool>(), amount())
            .prop_map(|(trig, thr, c, fail, n)| Act::TrigInc { trig, thr, c, fail, n }),
        2 => (c.clone(), threshold(), c.clone(), amount(), amount())
            .prop_map(|(trig, thr, c, s, f)| Act::TrigSet { trig, thr, c, s, f }),
        5 => (c.clone(), threshold(), md.clone()).prop_map(|(trig, thr, md)| Act::TrigPut { trig, thr, md }),
        2 => md.clone().prop_map(|md| Act::Unlink { md }),
        2 => md.prop_map(|md| Act::Rebind { md }),
        1 => c.clone().prop_map(|c| Act::Free { c }),
        2 => c.clone().prop_map(|c| Act::Realloc { c }),
        1 => c.prop_map(|c| Act::Cancel { c }),
        4 => any::<bool>().prop_map(|ok| Act::Complete { ok }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn counters_and_triggered_operations_agree_with_the_reference_model(
        acts in prop::collection::vec(act(), 1..80)
    ) {
        let mut p = Pair::new();
        for a in acts {
            p.step(a)?;
        }
    }
}
