//! Engine-only costs: an 8-byte put→event round trip on the loopback NAL
//! and an 8-byte fetching sum beside it,
//! and the cost of matching a message whose entry sits behind 0, 99 and
//! 9 999 non-matching entries (bare engine, no transport).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use portals::loopback::LoopbackNetwork;
use portals::wire::{Header, Op};
use portals::*;
use std::hint::black_box;

const PT: PortalIndex = PortalIndex(1);

fn put_event_round_trip(c: &mut Criterion) {
    let net = LoopbackNetwork::new();
    let target = net.ni(NiConfig::new(ProcessId::new(0, 1), 3)).unwrap();
    let init = net.ni(NiConfig::new(ProcessId::new(0, 2), 3)).unwrap();
    let teq = target.eq_alloc(1024).unwrap();
    let ieq = init.eq_alloc(1024).unwrap();
    let me = target
        .me_attach(PT, ProcessId::ANY, 1, 0, Unlink::Retain, Position::After)
        .unwrap();
    target
        .md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(teq),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    let src = init
        .md_bind(&MdDesc::default().eq(ieq), vec![7; 8], Unlink::Retain)
        .unwrap();
    let remote = Remote::new(target.id(), PT, 1);
    let mut g = c.benchmark_group("loopback");
    g.throughput(Throughput::Elements(1));
    g.bench_function("put8_ack_events", |b| {
        b.iter(|| {
            init.put(src, AckReq::Ack, &remote, 0).unwrap();
            black_box(target.eq_get(teq).unwrap().unwrap());
            black_box(init.eq_get(ieq).unwrap().unwrap()); // sent
            black_box(init.eq_get(ieq).unwrap().unwrap()); // ack
        })
    });
    let me = target
        .me_attach(PT, ProcessId::ANY, 2, 0, Unlink::Retain, Position::After)
        .unwrap();
    target
        .md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(teq),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    let old = init
        .md_bind(&MdDesc::default().eq(ieq), vec![0; 8], Unlink::Retain)
        .unwrap();
    let counter = Remote::new(target.id(), PT, 2);
    let sum = AtomicSpec {
        op: AtomicOp::Sum,
        datatype: Datatype::U64,
    };
    g.bench_function("fetch_atomic8_events", |b| {
        b.iter(|| {
            init.fetch_atomic(old, 0, src, 0, 8, &counter, 0, sum)
                .unwrap();
            black_box(target.eq_get(teq).unwrap().unwrap()); // fetch-atomic
            black_box(init.eq_get(ieq).unwrap().unwrap()); // sent
            black_box(init.eq_get(ieq).unwrap().unwrap()); // reply
        })
    });
    g.finish();
}

fn match_cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("match");
    // The entries in front are exact (posted receives of the MPI kind) and
    // wildcarded on the initiator: both are indexed (`engine::index`), so
    // the cost should not grow with the depth.
    for depth in [1u64, 100, 10_000, 100_000, 1_000_000] {
        let me_id = ProcessId::new(1, 1);
        let limits = NiLimits {
            max_mes: 2_000_000,
            max_mds: 2_000_000,
            ..NiLimits::default()
        };
        let mut e = Engine::new(me_id, 9, limits).unwrap();
        let eq = e.eq_alloc(16).unwrap();
        for i in 0..depth - 1 {
            let me = e
                .me_attach(
                    PT,
                    ProcessId::ANY,
                    1_000_000 + i,
                    0,
                    Unlink::Retain,
                    Position::After,
                )
                .unwrap();
            e.md_attach(
                me,
                &MdDesc::new(MdOptions::OP_PUT),
                Vec::new(),
                Unlink::Retain,
            )
            .unwrap();
        }
        let me = e
            .me_attach(PT, ProcessId::ANY, 7, 0, Unlink::Retain, Position::After)
            .unwrap();
        e.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
        let h = Header {
            op: Op::Put,
            ack_req: false,
            ack_lazy: false,
            fail: FailType::Ok,
            job_key: 9,
            src: ProcessId::new(2, 2),
            dst: me_id,
            pt_index: PT,
            ac_index: 0,
            match_bits: 7,
            offset: 0,
            hdr_data: 0,
            rlength: 8,
            mlength: 0,
            cookie: 0,
            atomic: None,
        };
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("entries", depth), &depth, |b, _| {
            b.iter(|| {
                let RecvAction::Deposit { token, .. } = e.recv_header(black_box(&h)) else {
                    panic!("expected a deposit");
                };
                e.recv_complete(token);
                black_box(e.eq_get(eq).unwrap());
            })
        });
    }
    g.finish();
}

criterion_group!(benches, put_event_round_trip, match_cost);
criterion_main!(benches);
