//! `ptl-bench compare`: every benchmark on every implementation in one run.
//!
//! For each benchmark, the comparison runs `rounds` rounds; in each round
//! every implementation that has the benchmark runs it once (one process
//! pair, `reps` repetitions inside), in an order rotated by one place per
//! round, so the project and its peers alternate and slow phases of the
//! machine hit all of them alike. A point's published value is the median
//! over the rounds ([`crate::results::aggregate`]). A run that fails is
//! recorded and that implementation sits out the rest of that benchmark.

use std::collections::HashSet;
use std::time::Instant;

use crate::error::{BenchError, Result};
use crate::impls::{Impl, Progress, PEERS, RMA_ONLY_PEER};
use crate::machine::{now_utc, Machine};
use crate::params::{Bench, CombMethod, Params, Preset};
use crate::results::{aggregate, Failure, Meta, Results};
use crate::runner::{build_peers, on_path, probe_peer, probe_project, probe_tool, Runner};
use crate::tool_peers::ToolPeer;

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareOpts {
    /// Sizes and iterations.
    pub preset: Preset,
    /// Rounds per benchmark (medians over these).
    pub rounds: usize,
    /// Repetitions inside each run.
    pub reps: usize,
    /// Benchmarks to run.
    pub benches: Vec<Bench>,
    /// Rank counts of the collective benchmarks (each one a run of its own).
    pub ranks: Vec<usize>,
    /// Exactly these implementations (no detection); `None` for all that work.
    pub impls: Option<Vec<Impl>>,
    /// NALs for the project variants; `None`: `tcp`, plus `udp` if a probe job works.
    pub nals: Option<Vec<String>>,
    /// Progress modes of the project variants.
    pub progress: Vec<Progress>,
    /// Include the peers: the C MPI programs and the Portals-level tool
    /// peers (UCX, libfabric).
    pub peers: bool,
    /// Include the raw-socket floor.
    pub raw: bool,
    /// How runs are started.
    pub runner: Runner,
    /// The command line, for the record.
    pub command: String,
}

/// What a comparison reports while it runs.
#[derive(Debug, Clone)]
pub enum Progressed {
    /// Something worth a line (detection results, skips).
    Note(String),
    /// The number of runs planned.
    Planned(usize),
    /// A run starts.
    Start {
        /// Benchmark (with COMB method).
        bench: String,
        /// Implementation label.
        imp: String,
        /// Round, from 0.
        round: usize,
    },
    /// A run ended.
    Done {
        /// Whether it succeeded.
        ok: bool,
    },
}

/// Implementations left out of a comparison: (label, reason).
pub type Skipped = Vec<(String, String)>;

/// The implementations a comparison runs and the ones it left out (label,
/// reason).
pub fn select_impls(opts: &CompareOpts, note: &dyn Fn(Progressed)) -> Result<(Vec<Impl>, Skipped)> {
    let mut skipped = Vec::new();
    if let Some(list) = &opts.impls {
        if list.iter().any(|i| matches!(i, Impl::Peer(_))) {
            build_peers(&opts.runner.peer_dir)?;
        }
        // A named tool peer whose tool is missing would only fail every
        // round: leave it out, saying so.
        let mut kept = Vec::with_capacity(list.len());
        for i in list {
            match i {
                Impl::Tool(t) if !on_path(t.tool()) => {
                    let why = missing_tool(*t);
                    note(Progressed::Note(format!("{i} left out: {why}")));
                    skipped.push((i.label(), why));
                }
                _ => kept.push(i.clone()),
            }
        }
        return Ok((kept, skipped));
    }
    let mut impls = Vec::new();
    if opts.raw {
        impls.extend(Impl::raw_variants());
    }
    let nals = match &opts.nals {
        Some(n) => n.clone(),
        None => {
            let mut n = vec!["tcp".to_string()];
            for nal in ["udp", "shm"] {
                match probe_project(&opts.runner, nal) {
                    Ok(()) => n.push(nal.into()),
                    Err(e) => {
                        let why = first_line(&e.to_string());
                        note(Progressed::Note(format!("NAL {nal} left out: {why}")));
                        skipped.push((format!("{nal} NAL"), why));
                    }
                }
            }
            n
        }
    };
    impls.extend(Impl::project_variants(&nals, &opts.progress));
    if opts.peers {
        let built = build_peers(&opts.runner.peer_dir)?;
        for p in PEERS {
            let family = if p.starts_with("openmpi") {
                "openmpi"
            } else {
                "mpich"
            };
            if !built.contains(&family) {
                let why = format!("mpicc.{family} not found");
                note(Progressed::Note(format!("{p} left out: {why}")));
                skipped.push((p.to_string(), why));
                continue;
            }
            // `openmpi` (defaults) is the same path as `openmpi-sm` on
            // Debian; keep the explicit variants only.
            if p == "openmpi" {
                continue;
            }
            // The osc pt2pt variant has only the one-sided benchmarks.
            if p == RMA_ONLY_PEER && !opts.benches.iter().any(|b| b.is_rma()) {
                continue;
            }
            match probe_peer(&opts.runner, p) {
                Ok(()) => impls.push(Impl::Peer(p.to_string())),
                Err(e) => {
                    let why = first_line(&e.to_string());
                    note(Progressed::Note(format!("{p} left out: {why}")));
                    skipped.push((p.to_string(), why));
                }
            }
        }
        // Probing the tool peers takes a server and client each: only when
        // one of them has a planned benchmark.
        let tools_needed = opts
            .benches
            .iter()
            .any(|&b| ToolPeer::ALL.iter().any(|t| t.supports(b)));
        if tools_needed {
            impls.extend(select_tools(opts, note, &mut skipped));
        }
    }
    Ok((impls, skipped))
}

/// The Portals-level tool peers that run here: one note (and one skipped
/// entry) per missing tool, one per peer whose probe fails.
fn select_tools(opts: &CompareOpts, note: &dyn Fn(Progressed), skipped: &mut Skipped) -> Vec<Impl> {
    let mut impls = Vec::new();
    let mut missing: Vec<(&str, Vec<&str>, String)> = Vec::new();
    for t in ToolPeer::ALL {
        if !on_path(t.tool()) {
            match missing.iter_mut().find(|(tool, _, _)| *tool == t.tool()) {
                Some((_, labels, _)) => labels.push(t.label()),
                None => missing.push((t.tool(), vec![t.label()], missing_tool(t))),
            }
            continue;
        }
        match probe_tool(&opts.runner, t) {
            Ok(()) => impls.push(Impl::Tool(t)),
            Err(e) => {
                let why = first_line(&e.to_string());
                note(Progressed::Note(format!("{} left out: {why}", t.label())));
                skipped.push((t.label().to_string(), why));
            }
        }
    }
    for (_, labels, why) in missing {
        let labels = labels.join(", ");
        note(Progressed::Note(format!("{labels} left out: {why}")));
        skipped.push((labels, why));
    }
    impls
}

fn missing_tool(t: ToolPeer) -> String {
    format!(
        "{} not installed (Debian package {})",
        t.tool(),
        t.package()
    )
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// The benchmark runs of a comparison: COMB once per method, the
/// collectives once per rank count.
pub fn plan_params(opts: &CompareOpts) -> Vec<Params> {
    let mut v = Vec::new();
    for &b in &opts.benches {
        let mut p = Params::preset(b, opts.preset);
        p.reps = opts.reps.max(1);
        if b == Bench::Comb {
            for m in [CombMethod::Poll, CombMethod::Pww] {
                let mut q = p.clone();
                q.method = m;
                v.push(q);
            }
        } else if b.is_collective() {
            for &n in &opts.ranks {
                let mut q = p.clone();
                q.ranks = n;
                v.push(q);
            }
        } else {
            v.push(p);
        }
    }
    v
}

/// Run the comparison.
pub fn compare(opts: &CompareOpts, report: &dyn Fn(Progressed)) -> Result<Results> {
    let started = now_utc();
    let t0 = Instant::now();
    let machine = Machine::detect();
    let plan = plan_params(opts);
    for p in &plan {
        p.validate()
            .map_err(|e| BenchError::Invalid(format!("{}: {e}", p.run_name())))?;
    }
    let (mut impls, skipped) = select_impls(opts, report)?;
    // Only the implementations that have one of the planned benchmarks
    // (no raw floor in a collectives-only run).
    impls.retain(|i| plan.iter().any(|p| i.supports(p.bench)));
    let rounds = opts.rounds.max(1);
    let total: usize = plan
        .iter()
        .map(|p| impls.iter().filter(|i| i.supports(p.bench)).count() * rounds)
        .sum();
    report(Progressed::Planned(total));
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for p in &plan {
        let name = p.run_name();
        let list: Vec<&Impl> = impls.iter().filter(|i| i.supports(p.bench)).collect();
        let mut broken: HashSet<String> = HashSet::new();
        for round in 0..rounds {
            let n = list.len().max(1);
            for k in 0..list.len() {
                let imp = list[(k + round) % n];
                let label = imp.label();
                report(Progressed::Start {
                    bench: name.clone(),
                    imp: label.clone(),
                    round,
                });
                if broken.contains(&label) {
                    report(Progressed::Done { ok: false });
                    continue;
                }
                match opts.runner.run(imp, p) {
                    Ok(recs) => {
                        runs.extend(recs.into_iter().map(|r| r.with("round", round)));
                        report(Progressed::Done { ok: true });
                    }
                    Err(e) => {
                        report(Progressed::Note(format!(
                            "{label} {name} round {round}: {e}"
                        )));
                        failures.push(Failure {
                            bench: name.clone(),
                            implementation: label.clone(),
                            round,
                            error: e.to_string(),
                        });
                        broken.insert(label);
                        report(Progressed::Done { ok: false });
                    }
                }
            }
        }
    }
    let records = aggregate(&runs);
    Ok(Results {
        meta: Meta {
            command: opts.command.clone(),
            started,
            duration_s: t0.elapsed().as_secs_f64(),
            preset: format!("{:?}", opts.preset).to_lowercase(),
            rounds,
            impls: impls.iter().map(|i| i.label()).collect(),
            skipped,
            machine,
        },
        records,
        runs,
        failures,
    })
}
