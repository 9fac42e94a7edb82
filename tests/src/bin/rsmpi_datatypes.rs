//! User-defined datatypes, views, `bool`, complex numbers,
//! `#[derive(Equivalence)]` and communicator attributes through rsmpi's
//! face, written as for rsmpi; run by
//! `tests/rsmpi_datatypes.rs`. Scenario "all" checks values; the others are
//! bad input that must end the job naming the call.
#![deny(warnings)]

use mpi::datatype::{DynBufferMut, MutView, UserDatatype, View};
use mpi::point_to_point as p2p;
use mpi::traits::*;
use mpi::{Address, Count};
use num_complex::{Complex32, Complex64};

/// The hand-written form, with `memoffset` as rsmpi's examples write it.
#[derive(Default, Debug, PartialEq)]
struct Hand {
    z: Complex64,
    b: bool,
    xs: [i32; 2],
}

// SAFETY: the three fields at their offsets, with their own datatypes.
unsafe impl Equivalence for Hand {
    type Out = UserDatatype;
    fn equivalent_datatype() -> Self::Out {
        UserDatatype::structured(
            &[1, 1, 2],
            &[
                memoffset::offset_of!(Hand, z) as Address,
                memoffset::offset_of!(Hand, b) as Address,
                memoffset::offset_of!(Hand, xs) as Address,
            ],
            &[
                Complex64::equivalent_datatype(),
                bool::equivalent_datatype(),
                i32::equivalent_datatype(),
            ],
        )
    }
}

#[derive(Equivalence, Default, Debug, PartialEq, Clone, Copy)]
struct Inner(f64, u16);

#[derive(Equivalence, Default, Debug, PartialEq, Clone, Copy)]
struct Record {
    flag: bool,
    pair: (i8, bool),
    grid: [[i16; 2]; 3],
    inner: Inner,
}

#[derive(Equivalence, Default, Debug, PartialEq)]
struct Unit;

fn record(r: i32) -> Record {
    Record {
        flag: r % 2 == 1,
        pair: (r as i8 - 3, r % 3 == 0),
        grid: [[r as i16, -1], [2, 3], [4, r as i16 * 7]],
        inner: Inner(r as f64 / 4.0, 60000 + r as u16),
    }
}

fn all<C: Communicator>(world: &C) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev_rank = (rank + size - 1) % size;
    let prev = world.process_at_rank(prev_rank);

    // Indexed: elements 0, 3..5 and 7 travel; the rest stay as they were.
    let t = UserDatatype::indexed(&[1, 2, 1], &[0, 3, 7], &i32::equivalent_datatype());
    let send: Vec<i32> = (0..8).map(|i| rank * 10 + i).collect();
    let mut recv = vec![-1i32; 8];
    {
        // SAFETY: the layout reaches element 7 of 8 i32s.
        let v = unsafe { View::with_count_and_datatype(&send[..], 1, &t) };
        // SAFETY: as above; any i32 is valid.
        let mut m = unsafe { MutView::with_count_and_datatype(&mut recv[..], 1, &t) };
        p2p::send_receive_into(&v, &next, &mut m, &prev);
    }
    let p = prev_rank * 10;
    assert_eq!(recv, [p, -1, -1, p + 3, p + 4, -1, -1, p + 7]);

    // A vector datatype sent, a contiguous buffer received: 4 values, in
    // the vector's order.
    let v2 = UserDatatype::vector(2, 2, 3, &i32::equivalent_datatype());
    let mut dense = [0i32; 4];
    {
        // SAFETY: 2 blocks of 2, stride 3: elements 0..5 of 8.
        let v = unsafe { View::with_count_and_datatype(&send[..], 1, &v2) };
        p2p::send_receive_into(&v, &next, &mut dense[..], &prev);
    }
    assert_eq!(dense, [p, p + 1, p + 3, p + 4]);

    // bool buffers, gathered.
    let mut flags = vec![false; size as usize];
    world.all_gather_into(&(rank % 2 == 0), &mut flags[..]);
    assert!(flags.iter().enumerate().all(|(i, &f)| f == (i % 2 == 0)));

    // Derived structs: one, a vector of them, broadcast and exchanged.
    let root = world.process_at_rank(0);
    let mut one = if rank == 0 {
        record(5)
    } else {
        Record::default()
    };
    root.broadcast_into(&mut one);
    assert_eq!(one, record(5));
    let mine: Vec<Record> = (0..3).map(|i| record(rank + i)).collect();
    let mut theirs = vec![Record::default(); 3];
    p2p::send_receive_into(&mine[..], &next, &mut theirs[..], &prev);
    let want: Vec<Record> = (0..3).map(|i| record(prev_rank + i)).collect();
    assert_eq!(theirs, want);
    let mut gathered = vec![Record::default(); size as usize];
    world.all_gather_into(&record(rank), &mut gathered[..]);
    assert!(gathered
        .iter()
        .enumerate()
        .all(|(i, g)| *g == record(i as i32)));
    let (u, _) = (Unit, Unit::equivalent_datatype());
    assert_eq!(world.pack(&u), Vec::<u8>::new());

    // A struct's fields listed in another order go in that order.
    let rev = UserDatatype::structured(
        &[1, 1],
        &[4 as Address, 0],
        &[i32::equivalent_datatype(), i32::equivalent_datatype()],
    );
    let mut swapped = [0i32; 2];
    {
        let pair = [rank, -rank];
        // SAFETY: two i32s at offsets 4 and 0 of a [i32; 2].
        let v = unsafe { View::with_count_and_datatype(&pair[..], 1, &rev) };
        p2p::send_receive_into(&v, &next, &mut swapped[..], &prev);
    }
    assert_eq!(swapped, [-prev_rank, prev_rank]);

    // A duplicated predefined type through a dynamic buffer.
    let dup = u16::equivalent_datatype().dup();
    let mut vals = if rank == 0 { [1u16, 2, 3] } else { [0; 3] };
    {
        // SAFETY: 3 u16s described by a u16 datatype.
        let mut b =
            unsafe { DynBufferMut::from_raw(vals.as_mut_ptr(), vals.count(), dup.as_ref()) };
        root.broadcast_into(&mut b);
    }
    assert_eq!(vals, [1, 2, 3]);

    // New values received by value: a derived struct (with bools inside),
    // a vector of them (probed for its length), a bool, and by a matched
    // probe.
    next.send(&record(rank));
    let (got, status) = prev.receive::<Record>();
    assert_eq!((got, status.source_rank()), (record(prev_rank), prev_rank));
    let mine: Vec<Record> = (0..rank + 1).map(|i| record(rank * 10 + i)).collect();
    next.send_with_tag(&mine[..], 5);
    let (v, _) = prev.receive_vec_with_tag::<Record>(5);
    let want: Vec<Record> = (0..prev_rank + 1)
        .map(|i| record(prev_rank * 10 + i))
        .collect();
    assert_eq!(v, want);
    next.send(&(rank % 2 == 0));
    assert_eq!(prev.receive::<bool>().0, prev_rank % 2 == 0);
    next.send(&Inner(rank as f64, rank as u16));
    let (m, _) = prev.matched_probe();
    assert_eq!(
        m.matched_receive::<Inner>().0,
        Inner(prev_rank as f64, prev_rank as u16)
    );
    world.barrier();

    // Complex numbers, and a hand-written structured datatype.
    let mut zs = vec![Complex32::new(0.0, 0.0); 3];
    if rank == 0 {
        zs = (0..3)
            .map(|i| Complex32::new(i as f32, -(i as f32)))
            .collect();
    }
    root.broadcast_into(&mut zs[..]);
    assert_eq!(zs[2], Complex32::new(2.0, -2.0));
    let mut hands: Vec<Hand> = (0..2).map(|_| Hand::default()).collect();
    if rank == 0 {
        hands[1] = Hand {
            z: Complex64::new(1.5, -2.5),
            b: true,
            xs: [7, -7],
        };
    }
    root.broadcast_into(&mut hands[..]);
    assert_eq!(
        hands[1],
        Hand {
            z: Complex64::new(1.5, -2.5),
            b: true,
            xs: [7, -7]
        }
    );
    assert_eq!(hands[0], Hand::default());
}

#[derive(Clone, Debug, PartialEq)]
struct Copied(i32);

impl CommAttribute for Copied {
    const CLONE_ON_DUP: bool = true;
}

#[derive(Clone, Debug, PartialEq)]
struct Kept;

impl CommAttribute for Kept {}

/// Attributes: set, read, carried to a duplicate only where asked for,
/// deleted.
fn attributes(world: &mut impl Communicator) {
    let rank = world.rank();
    world.set_attr(Copied(rank));
    world.set_attr(Kept);
    world.set_attr(Copied(rank + 1));
    let dup = world.duplicate();
    assert_eq!(dup.get_attr::<Copied>(), Some(&Copied(rank + 1)));
    assert_eq!(dup.get_attr::<Kept>(), None);
    assert_eq!(world.delete_attr::<Kept>(), Some(Kept));
    assert_eq!(world.get_attr::<Kept>(), None);
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let universe = mpi::initialize().unwrap();
    let mut world = universe.world();
    let rank = world.rank();
    match scenario.as_str() {
        "all" => {
            all(&world);
            attributes(&mut world);
            world.barrier();
            println!("OK all rank {rank}");
        }
        "bad-bool" => {
            // A byte that is not a bool, received as one.
            if rank == 0 {
                world.process_at_rank(1).send(&[1u8, 2][..]);
            } else if rank == 1 {
                let mut b = [false; 2];
                world.process_at_rank(0).receive_into(&mut b[..]);
            }
            world.barrier();
        }
        "short-value" => {
            // Fewer bytes than one value: no half-received value.
            if rank == 0 {
                world.process_at_rank(1).send(&[1u8; 3][..]);
            } else if rank == 1 {
                let _ = world.process_at_rank(0).receive::<Record>();
            }
            world.barrier();
        }
        "bad-view" => {
            let buf = [0i32; 4];
            let t = UserDatatype::contiguous(3, &i32::equivalent_datatype());
            // SAFETY: deliberately wrong: two of them reach 24 bytes of 16.
            let v = unsafe { View::with_count_and_datatype(&buf[..], 2 as Count, &t) };
            world.process_at_rank(0).send(&v);
        }
        "overlap" => {
            let _ = UserDatatype::indexed(&[2, 2], &[0, 1], &i32::equivalent_datatype());
        }
        other => panic!("unknown scenario {other}"),
    }
}
