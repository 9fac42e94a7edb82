//! A strided-vector send of 1 MiB in 8 KiB runs (128 blocks, 16 KiB
//! apart), from a strided buffer into a strided buffer, rank 0 to rank 1:
//! `iovec` hands the layout to the transport as segments (this crate's
//! path), `packed` packs it into a contiguous buffer, sends that, and
//! unpacks it on receipt (what this crate did before, less its copy of
//! the receive buffer's old values into the stage).
//!
//! ```sh
//! cargo build --release -p portals-runtime --bin ptlrun
//! cargo build --release -p mpi-rsmpi --example strided_send
//! target/release/ptlrun -n 2 target/release/examples/strided_send iovec 200
//! target/release/ptlrun -n 2 target/release/examples/strided_send packed 200
//! ```
//!
//! Rank 1 prints the mode, the messages, the seconds and the rate.

use mpi::datatype::{MutView, UserDatatype, View};
use mpi::traits::*;

const RUN: i32 = 8 << 10;
const RUNS: i32 = 128;
const STRIDE: i32 = 2 * RUN;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "iovec".into());
    let iters: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100);
    let packed = match mode.as_str() {
        "iovec" => false,
        "packed" => true,
        other => panic!("mode {other}: iovec or packed"),
    };
    let universe = mpi::initialize().expect("MPI");
    let world = universe.world();
    assert_eq!(world.size(), 2, "run on 2 ranks");
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let dt = UserDatatype::vector(RUNS, RUN, STRIDE, &u8::equivalent_datatype());
    let len = (RUNS * STRIDE) as usize;
    let mut buf: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut stage = vec![0u8; (RUNS * RUN) as usize];
    world.barrier();
    let start = mpi::time();
    for _ in 0..iters {
        if rank == 0 {
            // SAFETY: the vector reaches (RUNS - 1) * STRIDE + RUN bytes.
            let v = unsafe { View::with_count_and_datatype(&buf[..], 1, &dt) };
            if packed {
                peer.send(&world.pack(&v)[..]);
            } else {
                peer.send(&v);
            }
        } else {
            // SAFETY: as above; any byte is a u8.
            let mut m = unsafe { MutView::with_count_and_datatype(&mut buf[..], 1, &dt) };
            if packed {
                peer.receive_into(&mut stage[..]);
                // SAFETY: any byte is a u8.
                unsafe { world.unpack_into(&stage, &mut m, 0) };
            } else {
                peer.receive_into(&mut m);
            }
        }
    }
    // The last message is in place once rank 1 is here.
    world.barrier();
    let secs = mpi::time() - start;
    if rank == 1 {
        let mib = (iters as f64) * f64::from(RUNS * RUN) / f64::from(1 << 20);
        println!(
            "strided_send {mode}: {iters} x 1 MiB in 8 KiB runs, {secs:.3} s, {:.1} us/msg, {:.0} MiB/s",
            secs * 1e6 / iters.max(1) as f64,
            mib / secs
        );
    }
}
