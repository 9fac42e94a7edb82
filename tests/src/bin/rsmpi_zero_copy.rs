//! Non-contiguous datatypes sent and received without a packing copy
//! (the transport gathers from and scatters into the runs), through
//! rsmpi's face, written as for rsmpi; run by `tests/rsmpi_zero_copy.rs`
//! on 2 ranks (rank 0 sends, rank 1 receives).
//!
//! Each layout — a strided vector, an indexed and a structured one — goes
//! short (eager) and long (rendezvous), blocking and non-blocking, with
//! the receive posted first and last (an unexpected message), byte-exact,
//! with the receive buffer's gaps left as they were (a sentinel). The
//! process's count of packs and unpacks
//! (`mpi_on_portals::typemap::copies`) must not move for these layouts,
//! and must for a layout of 4-byte runs (packed), and for `bool`s
//! (validated through a stage, also in a non-blocking receive and a
//! `ReceiveFuture`).
#![deny(warnings)]

use mpi::datatype::{MutView, UserDatatype, View};
use mpi::request::scope;
use mpi::traits::*;
use mpi::Address;
use mpi_on_portals::typemap::copies;

const SENTINEL: u8 = 0xA5;

/// A layout over a byte buffer: its datatype (over `u8`), how many
/// elements, and the buffer length it needs.
struct Case {
    name: &'static str,
    dt: UserDatatype,
    count: i32,
    len: usize,
    zero_copy: bool,
}

fn cases(scale: usize) -> Vec<Case> {
    let u8t = u8::equivalent_datatype();
    let i32t = i32::equivalent_datatype();
    let f64t = f64::equivalent_datatype();
    // Strided vector: `scale` blocks of 256 bytes, 384 apart.
    let vector = UserDatatype::vector(scale as i32, 256, 384, &u8t);
    // Indexed: three blocks of f64, of 20, 40 and 17, with gaps.
    let indexed = UserDatatype::heterogeneous_indexed(&[20, 40, 17], &[0, 200, 600], &f64t);
    // Structured: 16 u64 (as f64) at 0, 24 i32 at 256, then a gap; two
    // per element, repeated `scale` times as a vector of it.
    let rec = UserDatatype::structured(
        &[16, 24],
        &[0 as Address, 256],
        &[f64::equivalent_datatype(), i32::equivalent_datatype()],
    );
    let recs = UserDatatype::contiguous(scale as i32, &rec);
    // 4-byte runs 8 apart: packed.
    let tiny = UserDatatype::vector(scale as i32 * 64, 1, 2, &i32t);
    vec![
        Case {
            name: "vector",
            dt: vector,
            count: 1,
            len: 384 * scale,
            zero_copy: true,
        },
        Case {
            name: "indexed",
            dt: indexed,
            count: scale as i32,
            len: 736 * scale,
            zero_copy: true,
        },
        Case {
            name: "struct",
            dt: recs,
            count: 1,
            len: 352 * scale,
            zero_copy: true,
        },
        Case {
            name: "tiny-runs",
            dt: tiny,
            count: 1,
            len: 8 * 64 * scale,
            zero_copy: false,
        },
    ]
}

/// The bytes the layout covers in a buffer of `len`: those a send takes.
fn covered<C: Communicator>(world: &C, c: &Case) -> Vec<bool> {
    // Send a buffer of all ones through `pack`, received into zeros:
    // the covered bytes are those that changed.
    let ones = vec![1u8; c.len];
    let mut marks = vec![0u8; c.len];
    // SAFETY: the layout reaches `len` bytes, checked by the views.
    let v = unsafe { View::with_count_and_datatype(&ones[..], c.count, &c.dt) };
    let packed = world.pack(&v);
    // SAFETY: as above.
    let mut m = unsafe { MutView::with_count_and_datatype(&mut marks[..], c.count, &c.dt) };
    // SAFETY: any byte is a valid u8.
    unsafe { world.unpack_into(&packed, &mut m, 0) };
    marks.iter().map(|&b| b == 1).collect()
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7 + 1) as u8).collect()
}

fn check(c: &Case, got: &[u8], sent: &[u8], cover: &[bool], how: &str) {
    for i in 0..c.len {
        let want = if cover[i] { sent[i] } else { SENTINEL };
        assert_eq!(
            got[i], want,
            "{} {how}: byte {i} is {:#x}, not {want:#x}",
            c.name, got[i]
        );
    }
}

fn run<C: Communicator>(world: &C, scale: usize) {
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    for (k, c) in cases(scale).into_iter().enumerate() {
        let cover = covered(world, &c);
        let sent = pattern(c.len, k + scale);
        // 0: blocking both; 1: non-blocking both, the receive posted
        // first; 2: synchronous send, blocking receive; 3: non-blocking
        // send, blocking receive posted once the message is there
        // (unexpected: copied out of the short buffer, or pulled); 4 and
        // 5: a matched probe, then a blocking or a non-blocking matched
        // receive; 6: send_receive_into.
        for how in 0..7 {
            let before = copies();
            if rank == 0 {
                // SAFETY: the layout reaches `len` bytes of `sent`.
                let v = unsafe { View::with_count_and_datatype(&sent[..], c.count, &c.dt) };
                match how {
                    0 | 4 | 5 => {
                        world.barrier();
                        peer.send(&v);
                    }
                    1 => {
                        world.barrier();
                        scope(|s| peer.immediate_send(s, &v).wait());
                    }
                    2 => {
                        world.barrier();
                        peer.synchronous_send(&v);
                    }
                    6 => {
                        world.barrier();
                        let mut none = [0u8; 0];
                        mpi::point_to_point::send_receive_into(&v, &peer, &mut none[..], &peer);
                    }
                    _ => scope(|s| {
                        let r = peer.immediate_send(s, &v);
                        world.barrier();
                        r.wait();
                    }),
                }
            } else {
                let mut got = vec![SENTINEL; c.len];
                {
                    // SAFETY: as above; any byte is a valid u8.
                    let mut m =
                        unsafe { MutView::with_count_and_datatype(&mut got[..], c.count, &c.dt) };
                    match how {
                        1 => scope(|s| {
                            let r = peer.immediate_receive_into(s, &mut m);
                            world.barrier();
                            r.wait();
                        }),
                        2 => {
                            world.barrier();
                            peer.receive_into(&mut m);
                        }
                        6 => {
                            world.barrier();
                            let none = [0u8; 0];
                            mpi::point_to_point::send_receive_into(&none[..], &peer, &mut m, &peer);
                        }
                        4 => {
                            world.barrier();
                            let (msg, _) = peer.matched_probe();
                            msg.matched_receive_into(&mut m);
                        }
                        5 => {
                            world.barrier();
                            let (msg, _) = peer.matched_probe();
                            scope(|s| msg.immediate_matched_receive_into(s, &mut m).wait());
                        }
                        _ => {
                            world.barrier();
                            peer.receive_into(&mut m);
                        }
                    }
                }
                check(
                    &c,
                    &got,
                    &sent,
                    &cover,
                    &format!("scale {scale} form {how}"),
                );
            }
            let moved = copies() - before;
            if c.zero_copy {
                assert_eq!(moved, 0, "{} form {how}: {moved} copies", c.name);
            } else {
                assert!(moved > 0, "{} form {how}: packed without a copy?", c.name);
            }
            world.barrier();
        }
    }
}

#[derive(Equivalence, Default, Debug, PartialEq, Clone, Copy)]
struct Flagged {
    on: bool,
    xs: [f64; 12],
}

fn flagged(i: i32) -> Flagged {
    Flagged {
        on: i % 2 == 1,
        xs: [i as f64 * 0.5; 12],
    }
}

/// Validated layouts (`bool`) in non-blocking receives: staged, unpacked
/// as the request completes; and a `ReceiveFuture` of a derived struct.
fn validated<C: Communicator>(world: &C) {
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let send: Vec<Flagged> = (0..5).map(flagged).collect();
    if rank == 0 {
        world.barrier();
        peer.send(&send[..]);
        peer.send(&flagged(9));
        peer.send(&flagged(4));
    } else {
        let before = copies();
        let mut got = vec![Flagged::default(); 5];
        scope(|s| {
            let r = peer.immediate_receive_into(s, &mut got[..]);
            world.barrier();
            r.wait();
        });
        assert_eq!(got, send);
        let f = peer.immediate_receive::<Flagged>();
        assert_eq!(f.get().0, flagged(9));
        let mut f = peer.immediate_receive::<Flagged>();
        let v = loop {
            match f.r#try() {
                Ok((v, _)) => break v,
                Err(back) => {
                    f = back;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        };
        assert_eq!(v, flagged(4));
        assert!(copies() > before, "bools must be validated through a stage");
        // A staged receive cancelled before any message: nothing written.
        let mut untouched = vec![flagged(1); 3];
        scope(|s| {
            let r = peer.immediate_receive_into_with_tag(s, &mut untouched[..], 99);
            r.cancel();
            assert!(r.wait().is_cancelled());
        });
        assert_eq!(untouched, vec![flagged(1); 3]);
        // Staged receives completed through `test` and a collection's
        // `wait_all`: unpacked by the time either reports them.
        let mut a = vec![Flagged::default(); 2];
        let mut b = vec![Flagged::default(); 2];
        scope(|s| {
            let mut r = peer.immediate_receive_into_with_tag(s, &mut a[..], 1);
            world.barrier();
            loop {
                match r.test() {
                    Ok(_) => break,
                    Err(back) => {
                        r = back;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
        });
        mpi::request::multiple_scope(1, |s, coll| {
            coll.add(peer.immediate_receive_into_with_tag(s, &mut b[..], 2));
            let mut done = Vec::new();
            coll.wait_all(&mut done);
            assert_eq!(done.len(), 1);
        });
        assert_eq!(a, [flagged(20), flagged(21)]);
        assert_eq!(b, [flagged(22), flagged(23)]);
    }
    if rank == 0 {
        world.barrier();
        peer.send_with_tag(&[flagged(20), flagged(21)][..], 1);
        peer.send_with_tag(&[flagged(22), flagged(23)][..], 2);
    }
    world.barrier();
}

/// Non-blocking collectives and a matched receive with layouts that are
/// not dense: staged, owned by the request, unpacked as it completes.
fn immediate_collectives<C: Communicator>(world: &C) {
    let rank = world.rank();
    let root = world.process_at_rank(0);
    let every_other = UserDatatype::vector(8, 1, 2, &i32::equivalent_datatype());
    // A broadcast into every other element.
    let mut buf = [-1i32; 16];
    if rank == 0 {
        for (i, x) in buf.iter_mut().enumerate() {
            *x = if i % 2 == 0 { 100 + i as i32 } else { -1 };
        }
    }
    {
        // SAFETY: 8 elements 2 apart: 15 of 16 i32s; any i32 is valid.
        let mut m = unsafe { MutView::with_count_and_datatype(&mut buf[..], 1, &every_other) };
        scope(|s| root.immediate_broadcast_into(s, &mut m).wait());
    }
    for (i, &x) in buf.iter().enumerate() {
        assert_eq!(
            x,
            if i % 2 == 0 { 100 + i as i32 } else { -1 },
            "ibcast {i}"
        );
    }
    // An all-gather from every other element into a dense buffer, and of
    // bools (staged and validated).
    let mine: Vec<i32> = (0..16).map(|i| rank * 1000 + i).collect();
    let mut all = vec![0i32; 16];
    let mut flags = [false; 2];
    let me_odd = rank == 1;
    {
        // SAFETY: as above, over `mine`.
        let v = unsafe { View::with_count_and_datatype(&mine[..], 1, &every_other) };
        scope(|s| {
            let a = world.immediate_all_gather_into(s, &v, &mut all[..]);
            let b = world.immediate_all_gather_into(s, &me_odd, &mut flags[..]);
            a.wait();
            b.wait();
        });
    }
    let want: Vec<i32> = (0..2)
        .flat_map(|r| (0..8).map(move |i| r * 1000 + 2 * i))
        .collect();
    assert_eq!(all, want);
    assert_eq!(flags, [false, true]);
    // A matched probe, then a non-blocking receive into a layout.
    let peer = world.process_at_rank(1 - rank);
    if rank == 0 {
        peer.send(&[7i32, 8, 9, 10, 11, 12, 13, 14][..]);
    } else {
        let (msg, _) = peer.matched_probe();
        let mut got = [-1i32; 16];
        {
            // SAFETY: as above.
            let mut m = unsafe { MutView::with_count_and_datatype(&mut got[..], 1, &every_other) };
            scope(|s| msg.immediate_matched_receive_into(s, &mut m).wait());
        }
        let want: Vec<i32> = (0..16)
            .map(|i| if i % 2 == 0 { 7 + i / 2 } else { -1 })
            .collect();
        assert_eq!(got[..], want[..]);
    }
    world.barrier();
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    assert_eq!(world.size(), 2, "run on 2 ranks");
    // Short (eager) and long (rendezvous: past the 64 KiB eager limit).
    for scale in [4, 400] {
        run(&world, scale);
    }
    validated(&world);
    immediate_collectives(&world);
    world.barrier();
    println!("OK zero-copy rank {}", world.rank());
}
