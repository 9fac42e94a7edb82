//! Smoke test of the C peer benchmarks (`bench/c/`): build them and run one
//! tiny point per MPI variant, every program once, and the collectives on 4
//! ranks, when the MPI compilers are installed; skipped with a message
//! otherwise.

mod common;

use common::records;
use portals_bench::impls::{Impl, PEERS, RMA_ONLY_PEER};
use portals_bench::params::{Bench, Params, Preset};
use portals_bench::runner::{build_peers, on_path, Runner};

#[test]
fn c_peers_build_and_run() {
    if !on_path("mpicc.openmpi") && !on_path("mpicc.mpich") {
        eprintln!("SKIPPED: neither mpicc.openmpi nor mpicc.mpich is installed");
        return;
    }
    let mut runner = Runner::new().expect("runner");
    runner.timeout = std::time::Duration::from_secs(60);
    let built = build_peers(&runner.peer_dir).expect("make -C bench/c");
    let usable: Vec<&str> = PEERS
        .iter()
        .copied()
        .filter(|p| built.iter().any(|f| p.starts_with(f)))
        .collect();
    assert!(!usable.is_empty());
    // One tiny latency point per variant (the osc pt2pt variant has only
    // the one-sided benchmarks: checked below).
    let mut p = Params::preset(Bench::Latency, Preset::Smoke);
    p.sizes = vec![8];
    for name in usable.iter().filter(|n| **n != RMA_ONLY_PEER) {
        let recs = runner
            .run(&Impl::Peer(name.to_string()), &p)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
        let recs = records(&text.join("\n"), "latency", &[name]);
        assert_eq!(recs.len(), 1, "{name}");
    }
    // Every program once, on the first variant.
    let first = Impl::Peer(usable[0].to_string());
    // Settling (`-S`), whose rounds every rank must agree on: a
    // disagreement hangs the run into its timeout.
    for b in [Bench::Latency, Bench::Msgrate, Bench::Allreduce] {
        let mut p = Params::preset(b, Preset::Smoke);
        p.settle_ms = 30;
        let recs = runner
            .run(&first, &p)
            .unwrap_or_else(|e| panic!("{first} {b} settling: {e}"));
        assert!(!recs.is_empty(), "{first} {b} settling printed nothing");
    }
    for b in Bench::ALL.into_iter().filter(|&b| first.supports(b)) {
        let recs = runner
            .run(&first, &Params::preset(b, Preset::Smoke))
            .unwrap_or_else(|e| panic!("{first} {b}: {e}"));
        let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
        let recs = records(&text.join("\n"), b.name(), &[usable[0]]);
        assert!(!recs.is_empty(), "{first} {b} printed nothing");
    }
    // The one-sided benchmarks on Open MPI's TCP path (osc pt2pt): every
    // operation of each is reported.
    if usable.contains(&RMA_ONLY_PEER) {
        let pt = Impl::Peer(RMA_ONLY_PEER.to_string());
        for b in Bench::RMA {
            let p = Params::preset(b, Preset::Smoke);
            let recs = runner
                .run(&pt, &p)
                .unwrap_or_else(|e| panic!("{pt} {b}: {e}"));
            let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
            let recs = records(&text.join("\n"), b.name(), &[RMA_ONLY_PEER]);
            let ops: Vec<&str> = recs.iter().filter_map(|r| r.extra_str("op")).collect();
            let expected: &[&str] = match b {
                Bench::RmaLatency => &["put", "get", "fetch_and_op"],
                Bench::RmaBw => &["put", "put"],
                // puts of 8 B and a fetch-and-op, for each compute time
                _ => &["put", "fetch_and_op", "put", "fetch_and_op"],
            };
            assert_eq!(ops, expected, "{pt} {b}");
        }
    }
    // The collectives on 4 ranks (oversubscribed on a 2-CPU machine).
    for b in Bench::COLLECTIVES {
        let mut p = Params::preset(b, Preset::Smoke);
        p.ranks = 4;
        let recs = runner
            .run(&first, &p)
            .unwrap_or_else(|e| panic!("{first} {b} on 4 ranks: {e}"));
        let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
        let recs = records(&text.join("\n"), b.name(), &[usable[0]]);
        assert_eq!(recs.len(), p.sizes.len(), "{first} {b}");
        assert!(recs.iter().all(|r| r.extra_f64("ranks") == Some(4.0)));
    }
}
