//! Smoke test of the C peer benchmarks (`bench/c/`): build them and run one
//! tiny point per MPI variant, every program once, and the collectives on 4
//! ranks, when the MPI compilers are installed; skipped with a message
//! otherwise.

mod common;

use common::records;
use portals_bench::impls::{Impl, PEERS};
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
    // One tiny latency point per variant.
    let mut p = Params::preset(Bench::Latency, Preset::Smoke);
    p.sizes = vec![8];
    for name in &usable {
        let recs = runner
            .run(&Impl::Peer(name.to_string()), &p)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
        let recs = records(&text.join("\n"), "latency", &[name]);
        assert_eq!(recs.len(), 1, "{name}");
    }
    // Every program once, on the first variant.
    let first = Impl::Peer(usable[0].to_string());
    for b in Bench::ALL.into_iter().filter(|&b| first.supports(b)) {
        let recs = runner
            .run(&first, &Params::preset(b, Preset::Smoke))
            .unwrap_or_else(|e| panic!("{first} {b}: {e}"));
        let text: Vec<String> = recs.iter().map(|r| r.to_line()).collect();
        let recs = records(&text.join("\n"), b.name(), &[usable[0]]);
        assert!(!recs.is_empty(), "{first} {b} printed nothing");
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
