//! An MPI program written exactly as for rsmpi (`use mpi::...`, no `?`,
//! `#![deny(warnings)]` so that an ignored return value would fail the
//! build), built against mpi-rsmpi. Scenarios (first argument):
//!
//! * `all`: point-to-point (an immediate buffered send complete at once),
//!   send-receive, requests and their guards and
//!   collections, collectives, groups and communicators, the environment;
//!   every value checked. Prints `OK all rank <r>`.
//! * `bad-root`, `bad-count`, `bad-block`, `bad-bcast`, `bad-unpack`,
//!   `bad-rank`: a call with bad input, which must
//!   end the job with a message naming the call (never hang).
#![deny(warnings)]

use std::ffi::{c_int, c_void};

use mpi::collective::{SystemOperation, UnsafeUserOperation};
use mpi::datatype::PartitionMut;
use mpi::point_to_point as p2p;
use mpi::request::{CancelGuard, WaitGuard};
use mpi::topology::{Color, CommunicatorRelation, GroupRelation, Rank, SystemGroup};
use mpi::traits::*;
use mpi::Count;

fn point_to_point<C: Communicator>(world: &C) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);

    // A ring exchange through send_receive: nobody deadlocks.
    let (got, status): (Rank, _) = p2p::send_receive(&rank, &next, &prev);
    assert_eq!(got, prev.rank());
    assert_eq!(status.source_rank(), prev.rank());
    let mut x = [rank, rank * 10];
    p2p::send_receive_replace_into(&mut x[..], &next, &prev);
    assert_eq!(x, [prev.rank(), prev.rank() * 10]);

    // Tagged blocking send and receive of a vector.
    if rank == 0 {
        for _ in 1..size {
            let (v, status) = world.any_process().receive_vec_with_tag::<u64>(7);
            let r = status.source_rank() as u64;
            assert_eq!(v, vec![r; r as usize + 1]);
        }
    } else {
        world
            .process_at_rank(0)
            .send_with_tag(&vec![rank as u64; rank as usize + 1][..], 7);
    }

    // An immediate buffered send is complete when it returns (the data
    // is in the attached buffer), before anyone receives it.
    let data = [rank as u64 * 3 + 1; 4];
    let mut got = [0u64; 4];
    mpi::request::scope(|scope| {
        let sreq = next.immediate_buffered_send_with_tag(scope, &data[..], 9);
        assert!(sreq.test().is_ok(), "immediate_buffered_send not complete");
        prev.receive_into_with_tag(&mut got[..], 9);
    });
    assert_eq!(got, [prev.rank() as u64 * 3 + 1; 4]);

    // Requests: wait_for_data, WaitGuard, CancelGuard, test.
    let mut y = 0i32;
    mpi::request::scope(|scope| {
        let sreq = next.immediate_send(scope, &rank);
        let rreq = prev.immediate_receive_into(scope, &mut y);
        assert_eq!(*rreq.wait_for_data(), prev.rank());
        sreq.wait();
    });
    let (mut z, plus) = (0i32, rank + 100);
    mpi::request::scope(|scope| {
        let _r = WaitGuard::from(prev.immediate_receive_into(scope, &mut z));
        let _s = WaitGuard::from(next.immediate_synchronous_send(scope, &plus));
    });
    assert_eq!(z, prev.rank() + 100);
    let mut never = 0i32;
    mpi::request::scope(|scope| {
        // Nobody sends with tag 99: the guard cancels the receive.
        let _c = CancelGuard::from(prev.immediate_receive_into_with_tag(scope, &mut never, 99));
    });
    assert_eq!(never, 0);

    // A collection: every index reported once, with its data.
    let mut got = vec![0i32; 8];
    let sent: Vec<i32> = (0..8).map(|i| rank * 8 + i).collect();
    mpi::request::multiple_scope(16, |scope, coll| {
        for v in &sent {
            coll.add(next.immediate_send(scope, v));
        }
        for v in got.iter_mut() {
            coll.add(prev.immediate_receive_into(scope, v));
        }
        let mut seen = [false; 16];
        let (i, _, _) = coll.wait_any().expect("16 requests pending");
        seen[i] = true;
        let mut some = Vec::new();
        coll.wait_some(&mut some);
        for &(i, _, _) in &some {
            assert!(!seen[i], "index {i} reported twice");
            seen[i] = true;
        }
        let mut rest = Vec::new();
        coll.wait_all(&mut rest);
        for &(i, _, _) in &rest {
            assert!(!seen[i], "index {i} reported twice");
            seen[i] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(coll.incomplete(), 0);
        assert!(coll.wait_any().is_none());
    });
    let want: Vec<i32> = (0..8).map(|i| prev.rank() * 8 + i).collect();
    assert_eq!(got, want);

    // Matched probes: the probed message, and only it, is received through
    // its handle, also while a later one from the same sender waits.
    if rank == 0 {
        for _ in 1..size {
            let (msg, status) = world.any_process().matched_probe_with_tag(5);
            let src = status.source_rank();
            let (v, st) = msg.matched_receive_vec::<u32>();
            assert_eq!(v, vec![src as u32; 3]);
            assert_eq!(st.source_rank(), src);
            let (second, _) = world.process_at_rank(src).receive_with_tag::<u32>(5);
            assert_eq!(second, 1000 + src as u32);
        }
        assert!(world
            .any_process()
            .immediate_matched_probe_with_tag(5)
            .is_none());
    } else {
        let to0 = world.process_at_rank(0);
        to0.send_with_tag(&[rank as u32; 3][..], 5);
        to0.send_with_tag(&(1000 + rank as u32), 5);
    }

    // A receive future owns its buffer: try until it arrives, then get.
    let future = prev.immediate_receive_with_tag::<i64>(11);
    next.send_with_tag(&(rank as i64 * 3), 11);
    let (v, _) = future.get();
    assert_eq!(v, prev.rank() as i64 * 3);
    let mut future = prev.immediate_receive_with_tag::<i64>(12);
    next.send_with_tag(&-(rank as i64), 12);
    let v = loop {
        match future.r#try() {
            Ok((v, _)) => break v,
            Err(f) => future = f,
        }
    };
    assert_eq!(v, -(prev.rank() as i64));
    world.barrier();

    // wait_any over a plain vector: None once it is empty.
    let mut v = [0i32; 1];
    mpi::request::scope(|scope| {
        let mut reqs = vec![next.immediate_send(scope, &rank)];
        let r = prev.immediate_receive_into(scope, &mut v[..]);
        assert!(mpi::request::wait_any(&mut reqs).is_some());
        assert!(mpi::request::wait_any(&mut reqs).is_none());
        r.wait();
    });
    assert_eq!(v[0], prev.rank());
}

/// An `MPI_User_function` adding `i32`s.
unsafe extern "C" fn add_i32(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    _datatype: *mut mpi::ffi::MPI_Datatype,
) {
    // SAFETY: the library passes `*len` elements of the reduced type, i32.
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts(invec as *const i32, *len as usize),
            std::slice::from_raw_parts_mut(inoutvec as *mut i32, *len as usize),
        )
    };
    for (a, b) in x.iter().zip(y) {
        *b += a;
    }
}

fn collectives<C: Communicator>(world: &C) {
    let (rank, size) = (world.rank(), world.size());
    let root = world.process_at_rank(size - 1);

    let mut b = if rank == size - 1 { 42u32 } else { 0 };
    root.broadcast_into(&mut b);
    assert_eq!(b, 42);

    let mut sum = 0i32;
    if rank == size - 1 {
        root.reduce_into_root(&rank, &mut sum, SystemOperation::sum());
        assert_eq!(sum, size * (size - 1) / 2);
    } else {
        root.reduce_into(&rank, SystemOperation::sum());
    }
    let mut max = -1;
    world.all_reduce_into(&rank, &mut max, SystemOperation::max());
    assert_eq!(max, size - 1);

    let mut c = 0b1100u8;
    mpi::collective::reduce_local_into(&0b1010u8, &mut c, SystemOperation::bitwise_and());
    assert_eq!(c, 0b1000);

    // Gather blocks of rank + 1 elements into a partition at the root.
    let msg: Vec<Rank> = vec![rank; rank as usize + 1];
    if rank == size - 1 {
        let counts: Vec<Count> = (1..=size).collect();
        let displs: Vec<Count> = counts
            .iter()
            .scan(0, |acc, &c| {
                let d = *acc;
                *acc += c;
                Some(d)
            })
            .collect();
        let mut buf = vec![0; (size * (size + 1) / 2) as usize];
        let mut part = PartitionMut::new(&mut buf[..], counts, &displs[..]);
        root.gather_varcount_into_root(&msg[..], &mut part);
        let want: Vec<Rank> = (0..size).flat_map(|r| vec![r; r as usize + 1]).collect();
        assert_eq!(buf, want);
    } else {
        root.gather_varcount_into(&msg[..]);
    }

    // Block r of the element-wise product goes to rank r: element k of
    // everyone's send is k + 1, so block r is (r + 1)^size.
    let f: Vec<i64> = (1..=size as i64).collect();
    let mut g = 0i64;
    world.reduce_scatter_block_into(&f[..], &mut g, SystemOperation::product());
    assert_eq!(g, (rank as i64 + 1).pow(size as u32));

    // SAFETY: add_i32 reads and writes `len` i32s and ignores the datatype.
    let op = unsafe { UnsafeUserOperation::commutative(add_i32) };
    let mut total = [0i32; 3];
    world.all_reduce_into(&[rank, 1, -rank][..], &mut total[..], op);
    assert_eq!(total, [size * (size - 1) / 2, size, -size * (size - 1) / 2]);

    let req = world.immediate_barrier();
    req.wait();

    // The non-blocking forms, several in flight in one scope.
    let mut all = vec![0 as Rank; size as usize];
    let mut scanned = 0;
    let mut reduced = 0;
    let mut scattered = 0;
    let blocks: Vec<Rank> = (0..size).map(|r| 10 * r).collect();
    mpi::request::scope(|scope| {
        let a = world.immediate_all_gather_into(scope, &rank, &mut all[..]);
        let s = world.immediate_scan_into(scope, &rank, &mut scanned, SystemOperation::sum());
        if rank == size - 1 {
            root.immediate_reduce_into_root(scope, &rank, &mut reduced, SystemOperation::max())
                .wait();
        } else {
            root.immediate_reduce_into(scope, &rank, SystemOperation::max())
                .wait();
        }
        let c = if rank == size - 1 {
            root.immediate_scatter_into_root(scope, &blocks[..], &mut scattered)
        } else {
            root.immediate_scatter_into(scope, &mut scattered)
        };
        a.wait();
        s.wait();
        c.wait();
    });
    assert_eq!(all, (0..size).collect::<Vec<_>>());
    assert_eq!(scanned, rank * (rank + 1) / 2);
    if rank == size - 1 {
        assert_eq!(reduced, size - 1);
    }
    assert_eq!(scattered, 10 * rank);
}

fn communicators<C: Communicator>(world: &C) {
    let (rank, size) = (world.rank(), world.size());
    let g = world.group();
    let evens: Vec<Rank> = (0..size).step_by(2).collect();
    let even = g.include(&evens);
    let odd = g.difference(&even);
    assert_eq!(even.size() + odd.size(), size);
    assert_eq!(GroupRelation::Identical, g.compare(&g.union(&even)));
    // Evens first, then odds: the same members in another order.
    let want = if size > 2 {
        GroupRelation::Similar
    } else {
        GroupRelation::Identical
    };
    assert_eq!(want, g.compare(&even.union(&odd)));
    assert_eq!(0, even.intersection(&odd).size());
    assert_eq!(
        GroupRelation::Identical,
        SystemGroup::empty().compare(&g.difference(&g))
    );
    let mine = if rank % 2 == 0 { &even } else { &odd };
    let part = world
        .split_by_subgroup_collective(mine)
        .expect("a member of its own part");
    assert_eq!(GroupRelation::Identical, part.group().compare(mine));
    // Each half makes its communicator alone, both at once, with distinct
    // tags; a process asking for the other half's gets None at once.
    let other = if rank % 2 == 0 { &odd } else { &even };
    assert!(world.split_by_subgroup_with_tag(other, 3).is_none());
    let half = world
        .split_by_subgroup_with_tag(mine, 1 + rank % 2)
        .expect("a member of its own half");
    assert_eq!(GroupRelation::Identical, half.group().compare(mine));
    let mut members = 0;
    half.all_reduce_into(&1, &mut members, SystemOperation::sum());
    assert_eq!(members, mine.size());
    let by_color = world
        .split_by_color(Color::with_value(rank % 2))
        .expect("every rank has a color");
    assert_eq!(by_color.size(), mine.size());

    // Packing: two buffers one after the other, sent as bytes, unpacked.
    let mut packed = vec![0u8; 12];
    let at = world.pack_into(&[rank, -rank][..], &mut packed, 0);
    let at = world.pack_into(&(rank as u32 + 7), &mut packed, at);
    assert_eq!(at, 12);
    assert_eq!(world.pack(&[rank, -rank][..]), packed[..8].to_vec());
    let mut bytes = [0u8; 12];
    p2p::send_receive_into(
        &packed[..],
        &world.process_at_rank((rank + 1) % size),
        &mut bytes[..],
        &world.process_at_rank((rank + size - 1) % size),
    );
    let (mut pair, mut tail) = ([0i32; 2], 0u32);
    let prev = (rank + size - 1) % size;
    // SAFETY: i32 and u32 are valid for any bytes.
    let end = unsafe {
        let at = world.unpack_into(&bytes, &mut pair[..], 0);
        world.unpack_into(&bytes, &mut tail, at)
    };
    assert_eq!((pair, tail, end), ([prev, -prev], prev as u32 + 7, 12));

    // Every rank of a ptlrun job is on this host; the key reverses them.
    let local = world.split_shared(-rank);
    assert_eq!((local.size(), local.rank()), (size, size - 1 - rank));

    let dup = world.duplicate();
    assert_eq!(CommunicatorRelation::Congruent, world.compare(&dup));
    assert_eq!(dup.get_name(), "");
    dup.set_name("twin");
    assert_eq!(dup.get_name(), "twin");
    let mut all = vec![0; size as usize];
    dup.all_gather_into(&rank, &mut all[..]);
    assert_eq!(all, (0..size).collect::<Vec<_>>());
}

fn cartesian<C: Communicator>(world: &C) {
    let (rank, size) = (world.rank(), world.size());
    // size/2 x 2, the first dimension periodic: rank = 2 * x + y.
    let cart = world
        .create_cartesian_communicator(&[size / 2, 2], &[true, false], true)
        .expect("every rank fits the grid");
    assert_eq!(cart.num_dimensions(), 2);
    let layout = cart.get_layout();
    assert_eq!(layout.coords, vec![rank / 2, rank % 2]);
    assert_eq!(cart.coordinates_to_rank(&layout.coords), rank);
    assert_eq!(cart.rank_to_coordinates(size - 1), vec![size / 2 - 1, 1]);
    // Along the periodic dimension both neighbours exist and wrap.
    let (src, dst) = cart.shift(0, 1);
    assert_eq!(src, Some((rank - 2).rem_euclid(size)));
    assert_eq!(dst, Some((rank + 2) % size));
    // Along the other one, the edge has no neighbour.
    let (src, dst) = cart.shift(1, 1);
    if rank % 2 == 0 {
        assert_eq!((src, dst), (None, Some(rank + 1)));
    } else {
        assert_eq!((src, dst), (Some(rank - 1), None));
    }
    // The rows: 2 members each, ranked by y.
    let row = cart.subgroup(&[false, true]);
    assert_eq!((row.size(), row.rank()), (2, rank % 2));
    let mut sum = 0;
    row.all_reduce_into(&rank, &mut sum, SystemOperation::sum());
    assert_eq!(sum, 2 * (rank - rank % 2) + 1);
    assert_eq!(
        world.cartesian_map(&[1], &[false]),
        (rank == 0).then_some(0)
    );
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let mut universe = mpi::initialize().unwrap();
    universe.set_buffer_size(1 << 16);
    let world = universe.world();
    let size = world.size();
    match scenario.as_str() {
        "all" => {
            assert_eq!(world.get_name(), "MPI_COMM_WORLD");
            assert!(!mpi::environment::processor_name().unwrap().is_empty());
            assert!(mpi::environment::version().0 >= 3);
            let t0 = mpi::time();
            point_to_point(&world);
            collectives(&world);
            communicators(&world);
            cartesian(&world);
            assert!(mpi::time() >= t0);
            assert!(mpi::time_resolution() > 0.0);
            // The same bad input on the Result API is a typed error.
            let mut x = 0u8;
            let r = mpi_on_portals::Root::broadcast_into(
                &mpi_on_portals::Communicator::process_at_rank(world.as_result_api(), size),
                &mut x,
            );
            assert!(
                matches!(r, Err(mpi_on_portals::MpiError::InvalidRank { .. })),
                "{r:?}"
            );
            let mut one = 0i32;
            let r = mpi_on_portals::CommunicatorCollectives::reduce_scatter_block_into(
                world.as_result_api(),
                &vec![1i32; size as usize + 1][..],
                &mut one,
                SystemOperation::sum(),
            );
            assert!(
                matches!(r, Err(mpi_on_portals::MpiError::InvalidBuffer(_))),
                "{r:?}"
            );
            world.barrier();
            println!("OK all rank {}", world.rank());
        }
        "bad-root" => {
            let mut x = 0u8;
            world.process_at_rank(size).broadcast_into(&mut x);
        }
        "bad-count" => {
            let mut out = [0i32; 2];
            mpi::collective::reduce_local_into(
                &[1i32; 3][..],
                &mut out[..],
                SystemOperation::sum(),
            );
        }
        "bad-block" => {
            // size + 1 blocks of one element: not size blocks.
            let send = vec![1i32; size as usize + 1];
            let mut out = 0i32;
            world.reduce_scatter_block_into(&send[..], &mut out, SystemOperation::sum());
        }
        "bad-bcast" => {
            // The root sends 2 elements, the others expect 3.
            let mut buf = vec![7u32; if world.rank() == 0 { 2 } else { 3 }];
            world.process_at_rank(0).broadcast_into(&mut buf[..]);
            world.barrier();
        }
        "bad-unpack" => {
            let mut out = [0u64; 2];
            // SAFETY: u64 is valid for any bytes.
            unsafe { world.unpack_into(&[0u8; 12], &mut out[..], 0) };
        }
        "bad-rank" => {
            world.process_at_rank(-5).send(&1u8);
        }
        other => panic!("unknown scenario {other}"),
    }
}
