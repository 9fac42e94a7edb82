//! The match index (`engine::index`) against the definition it replaces: a
//! walk of the match list in order, taking the first entry that matches.
//! The reference here reads the list back (`match_list`, `me_info`) and
//! walks it; the engine must pick the same entry for every message, on
//! lists built by every kind of attach and insert, with more ignore masks
//! than the index has classes, and after the inserts that make it relabel.

mod common;

use std::collections::HashMap;

use portals::wire::Op;
use portals::*;
use proptest::prelude::*;

use common::*;

/// One engine whose entries on `PT` each carry a descriptor (retained,
/// unlimited, taking any put) named by its user pointer.
struct List {
    t: Engine,
    eq: EqHandle,
    names: HashMap<MeHandle, u64>,
    next_name: u64,
}

impl List {
    fn new() -> List {
        let mut t = Engine::new(
            ProcessId::new(1, 1),
            KEY,
            NiLimits {
                max_mes: 1 << 20,
                max_mds: 1 << 20,
                ..NiLimits::default()
            },
        )
        .unwrap();
        let eq = t.eq_alloc(16).unwrap();
        List {
            t,
            eq,
            names: HashMap::new(),
            next_name: 1,
        }
    }

    /// Add an entry, at an end (`base` None) or beside `base`.
    fn add(
        &mut self,
        base: Option<MeHandle>,
        pos: Position,
        id: ProcessId,
        bits: u64,
        ignore: u64,
    ) -> MeHandle {
        let me = match base {
            None => self.t.me_attach(PT, id, bits, ignore, Unlink::Retain, pos),
            Some(b) => self.t.me_insert(b, id, bits, ignore, Unlink::Retain, pos),
        }
        .unwrap();
        let name = self.next_name;
        self.next_name += 1;
        self.t
            .md_attach(
                me,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::TRUNCATE)
                    .eq(self.eq)
                    .user_ptr(name),
                Vec::new(),
                Unlink::Retain,
            )
            .unwrap();
        self.names.insert(me, name);
        me
    }

    fn unlink(&mut self, me: MeHandle) {
        self.t.me_unlink(me).unwrap();
        self.names.remove(&me);
    }

    /// The entry the engine gives a put from `src` with `bits` (its name),
    /// or 0 if none matches.
    fn engine_pick(&mut self, src: ProcessId, bits: u64) -> u64 {
        let mut h = request(Op::Put, bits, 0);
        h.src = src;
        match self.t.recv_header(&h) {
            RecvAction::Deposit { token, .. } => {
                let _ = self.t.recv_complete(token);
                let ev = self.t.eq_get(self.eq).unwrap().unwrap();
                ev.md.user_ptr
            }
            RecvAction::Discard(_) | RecvAction::Respond { .. } => 0,
            RecvAction::Defer => panic!("no flow control here"),
        }
    }

    /// The first entry in list order that matches (every descriptor
    /// accepts a put).
    fn reference_pick(&self, src: ProcessId, bits: u64) -> u64 {
        for me in self.t.match_list(PT).unwrap() {
            let (_, id, mbits, ignore) = self.t.me_info(me).unwrap();
            if (bits ^ mbits) & !ignore == 0 && id.accepts(src) {
                return self.names[&me];
            }
        }
        0
    }

    fn agree(&mut self, src: ProcessId, bits: u64) {
        let want = self.reference_pick(src, bits);
        assert_eq!(
            self.engine_pick(src, bits),
            want,
            "src {src}, bits {bits:#x}"
        );
    }
}

const SOURCES: [ProcessId; 3] = [
    ProcessId::new(9, 9),
    ProcessId::new(9, 8),
    ProcessId::new(8, 9),
];

/// Match ids: any, two exact ones, and one wildcarded in a single field
/// (which the index cannot key and keeps in its ordered unindexed list).
fn id(i: u8) -> ProcessId {
    match i % 4 {
        0 => ProcessId::ANY,
        1 => SOURCES[0],
        2 => SOURCES[1],
        _ => ProcessId::new(9, PID_ANY),
    }
}

#[derive(Clone, Debug)]
enum Step {
    Add {
        base: Option<usize>,
        before: bool,
        id: u8,
        bits: u64,
        /// Index into 12 masks: more than the index's 8 classes.
        mask: u8,
    },
    Unlink(usize),
    Check {
        src: usize,
        bits: u64,
    },
}

fn mask(m: u8) -> u64 {
    match m % 12 {
        0 => 0,
        11 => u64::MAX,
        k => (1u64 << k) - 1,
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (prop::option::of(any::<usize>()), any::<bool>(), any::<u8>(), 0u64..16, any::<u8>())
            .prop_map(|(base, before, id, bits, mask)| Step::Add { base, before, id, bits, mask }),
        1 => any::<usize>().prop_map(Step::Unlink),
        4 => (0usize..3, 0u64..16).prop_map(|(src, bits)| Step::Check { src, bits }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_index_picks_the_first_matching_entry_in_list_order(steps in prop::collection::vec(step(), 1..120)) {
        let mut l = List::new();
        let mut live: Vec<MeHandle> = Vec::new();
        for s in steps {
            match s {
                Step::Add { base, before, id: i, bits, mask: m } => {
                    let base = base.filter(|_| !live.is_empty()).map(|b| live[b % live.len()]);
                    let pos = if before { Position::Before } else { Position::After };
                    let me = l.add(base, pos, id(i), bits, mask(m));
                    live.push(me);
                }
                Step::Unlink(i) => {
                    if !live.is_empty() {
                        let me = live.swap_remove(i % live.len());
                        l.unlink(me);
                    }
                }
                Step::Check { src, bits } => l.agree(SOURCES[src], bits),
            }
        }
        for src in SOURCES {
            for bits in 0..16 {
                l.agree(src, bits);
            }
        }
    }
}

/// Inserting again and again into one gap uses up its labels (each insert
/// takes half of what is left once the gap is narrower than the step);
/// the index then relabels a window around it. Three such patterns, five
/// thousand inserts each, interleaved with entries that overlap in what
/// they match, and the engine still agrees with the list walk everywhere.
#[test]
fn gaps_used_up_by_repeated_inserts_are_relabelled_in_order() {
    let mut l = List::new();
    let first = l.add(None, Position::After, ProcessId::ANY, 0, u64::MAX);
    let mark = l.add(None, Position::After, ProcessId::ANY, 1, 0);
    let last = l.add(None, Position::After, SOURCES[0], 2, 1);
    for i in 0..5000u64 {
        // Right after the head, always into the gap the previous one split.
        l.add(
            Some(first),
            Position::After,
            SOURCES[(i % 3) as usize],
            i % 7,
            0,
        );
        // Right before the mark, as MPI posts its receives.
        l.add(
            Some(mark),
            Position::Before,
            SOURCES[(i % 2) as usize],
            i % 5,
            2,
        );
        // Right after the last, always the same entry.
        l.add(Some(last), Position::After, ProcessId::ANY, i % 3, 4);
        if i % 500 == 0 {
            for src in SOURCES {
                for bits in 0..8 {
                    l.agree(src, bits);
                }
            }
        }
    }
    // The head matches everything: take it away and compare again.
    l.unlink(first);
    for src in SOURCES {
        for bits in 0..8 {
            l.agree(src, bits);
        }
    }
}

/// The match cost does not grow with the list: behind 100 000 posted
/// entries of the MPI kind (exact source and bits, protocol bits ignored),
/// a message for the last one is found by the index, not a walk; and the
/// first of several entries with the same key still wins.
#[test]
fn a_message_behind_a_hundred_thousand_exact_entries_finds_the_right_one() {
    let mut l = List::new();
    let ignore = 0b111 << 61;
    for i in 0..100_000u64 {
        l.add(None, Position::After, SOURCES[0], i, ignore);
    }
    let first_dup = l.add(None, Position::After, SOURCES[0], 42, ignore);
    assert_ne!(l.reference_pick(SOURCES[0], 99_999), 0);
    assert_eq!(
        l.engine_pick(SOURCES[0], 99_999 | (5 << 61)),
        l.reference_pick(SOURCES[0], 99_999)
    );
    // 42 was attached long before `first_dup`: the earlier one wins.
    assert_ne!(l.engine_pick(SOURCES[0], 42), l.names[&first_dup]);
    assert_eq!(l.engine_pick(SOURCES[1], 42), 0);
}
