//! `ptl-bench`: the benchmark suite of portals-rs, side by side with the
//! physical floor (raw sockets), the MPI libraries users would otherwise
//! pick (Open MPI, MPICH; C programs in `bench/c/`) and the one-sided
//! layers they would otherwise pick at the Portals level (UCX, libfabric;
//! their own benchmark tools).
//!
//! One concept per module:
//!
//! - [`params`]: what a run measures ([`params::Params`], presets);
//! - [`impls`]: what it runs on ([`impls::Impl`]: raw, portals-rs variants, peers);
//! - [`runner`]: running one benchmark on one implementation;
//! - [`mpi_level`], [`portals_level`]: the project's benchmark loops, run in each rank
//!   ([`mpi_rma`]: the one-sided ones);
//! - [`nbc_overlap`]: the non-blocking collectives' overlap loop (MPI level);
//! - [`nbc_progress`]: whether the non-blocking collectives complete during a long compute with no MPI call (MPI level);
//! - [`apps`]: application kernels (cg, halo, a collective loop) timed whole;
//! - [`raw`]: raw-socket ping-pong and stream;
//! - [`rpc`]: the object-store benchmarks (portals-rpc against gRPC);
//! - [`tool_peers`]: the Portals-level peers UCX and libfabric, through their own tools;
//! - [`work`]: the calibrated busy loop of the overlap and COMB benchmarks;
//! - [`timing`], [`stats`], [`cpu`]: timed loops, medians, CPU binding;
//! - [`record`]: the JSON-lines result format shared with the C programs;
//! - [`compare`]: everything in one interleaved, repeated run;
//! - [`results`]: a run's results file and the medians over its rounds;
//! - [`report`], [`plot`], [`machine`]: Markdown tables, SVG plots, machine description;
//! - [`rma_goals`]: the one-sided goals (issue 17) checked against a results file.

#![warn(missing_docs)]

pub mod apps;
pub mod c2c;
pub mod compare;
pub mod cpu;
pub mod error;
pub mod impls;
pub mod machine;
pub mod mpi_level;
pub mod mpi_rma;
pub mod nbc_overlap;
pub mod nbc_progress;
pub mod params;
pub mod plot;
pub mod portals_level;
pub mod raw;
pub mod record;
pub mod report;
pub mod results;
pub mod rma_goals;
pub mod rpc;
pub mod runner;
pub mod stats;
pub mod timing;
pub mod tool_peers;
pub mod work;

pub use error::{BenchError, Result};
