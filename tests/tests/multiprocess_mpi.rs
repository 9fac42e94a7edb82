//! MPI point-to-point between real processes, through the launcher, over
//! both progress modes; a subset also on the io_uring back end. Every job
//! has a timeout.

use nal_tcp::{Backend, ProgressMode};
use std::time::Duration;

use portals_runtime::{JobOptions, NalKind};
use portals_tests::{
    assert_job_ok, run_job, run_job_env, run_job_limited, run_job_within, LaunchOutcome,
};

fn run(ranks: u32, args: &[&str], progress: ProgressMode) -> LaunchOutcome {
    run_on(ranks, args, progress, Backend::Epoll)
}

fn run_on(ranks: u32, args: &[&str], progress: ProgressMode, backend: Backend) -> LaunchOutcome {
    run_job(
        env!("CARGO_BIN_EXE_mpi_check"),
        ranks,
        args,
        progress,
        backend,
    )
}

fn assert_ok(out: &LaunchOutcome, ranks: u32, what: &str) {
    assert_job_ok(out, ranks, "OK ", what)
}

const MODES: [ProgressMode; 2] = [ProgressMode::Thread, ProgressMode::Poll];

#[test]
fn every_send_mode_expected_and_unexpected_short_and_long_two_ranks() {
    for p in MODES {
        assert_ok(&run(2, &["modes"], p), 2, &format!("modes {p:?}"));
    }
}

#[test]
fn every_send_mode_four_ranks() {
    assert_ok(&run(4, &["modes"], ProgressMode::Thread), 4, "modes 4");
}

#[test]
fn non_overtaking_order_under_a_random_mix_two_ranks() {
    for (p, seed) in [
        (ProgressMode::Thread, "1"),
        (ProgressMode::Poll, "2"),
        (ProgressMode::Thread, "3"),
    ] {
        assert_ok(
            &run(2, &["order", "2000", seed], p),
            2,
            &format!("order {p:?} seed {seed}"),
        );
    }
}

#[test]
fn non_overtaking_order_with_wildcards_from_three_senders() {
    for (p, seed) in [(ProgressMode::Thread, "4"), (ProgressMode::Poll, "5")] {
        assert_ok(
            &run(4, &["order", "1000", seed], p),
            4,
            &format!("order 4 {p:?} seed {seed}"),
        );
    }
}

#[test]
fn unexpected_buffers_recycle_under_a_flood() {
    for p in MODES {
        assert_ok(&run(2, &["flood", "10"], p), 2, &format!("flood {p:?}"));
    }
}

#[test]
fn probe_cancel_and_truncation() {
    for p in MODES {
        assert_ok(&run(2, &["misc"], p), 2, &format!("misc {p:?}"));
    }
}

#[test]
fn a_blocking_short_send_buffer_is_free_once_the_send_returns() {
    for p in MODES {
        assert_ok(&run(2, &["reuse"], p), 2, &format!("reuse {p:?}"));
    }
}

#[test]
fn synchronous_ring_of_four() {
    assert_ok(&run(4, &["ring"], ProgressMode::Thread), 4, "ring");
}

#[test]
fn a_posted_receive_completes_while_the_receiver_computes() {
    let out = run(2, &["progress"], ProgressMode::Thread);
    assert_ok(&out, 2, "progress thread");
    assert!(out.stdout_of(1).contains("completed while computing"));
    // And the contrast: without a progress thread nothing moves meanwhile.
    assert_ok(
        &run(2, &["progress", "poll"], ProgressMode::Poll),
        2,
        "progress poll",
    );
}

/// The library tells the interface when the application has nothing
/// under way (`NiCore::set_app_quiet`), in both progress modes, with three
/// ranks (the third only in the window's collectives).
#[test]
fn the_interface_hears_when_the_application_has_nothing_under_way() {
    for p in [ProgressMode::Thread, ProgressMode::Poll] {
        let out = run(3, &["quiet"], p);
        assert_ok(&out, 3, &format!("quiet {p:?}"));
        assert!(out.stdout_of(0).contains("quiet: tracked"), "{p:?}");
    }
}

/// The same with every long send announced (`PTL_MPI_ANNOUNCE=always`),
/// over TCP, UDP and shared memory through its ring, thread mode: the
/// announcement meets the posted receive while the receiver computes, and
/// the progress thread that delivered it starts the pull (`pull.rs`), so
/// the 8 MB are in when the computation ends. Pulled at the next MPI call
/// instead, the receive is not complete then, and this fails.
#[test]
fn an_announced_message_is_pulled_while_the_receiver_computes() {
    for nal in [NalKind::Tcp, NalKind::Udp, NalKind::Shm] {
        let options = JobOptions {
            nal,
            progress: ProgressMode::Thread,
            ..JobOptions::default()
        };
        let out = run_job_env(
            env!("CARGO_BIN_EXE_mpi_check"),
            2,
            &["progress"],
            options,
            Duration::from_secs(120),
            &[("PTL_MPI_ANNOUNCE", "always"), ("PTL_SHM_CMA", "0")],
        );
        assert_ok(&out, 2, &format!("progress announced {nal:?}"));
        assert!(out.stdout_of(1).contains("completed while computing"));
    }
}

#[test]
fn loops_of_test_probe_is_complete_and_test_all_finish_in_both_modes() {
    // Each loop has a 30 s deadline inside the program: in polling mode the
    // non-blocking calls must drive the transport themselves.
    for p in [ProgressMode::Poll, ProgressMode::Thread] {
        assert_ok(&run(2, &["spin"], p), 2, &format!("spin {p:?}"));
    }
}

#[test]
fn wait_any_wait_all_and_owned_sends() {
    for p in MODES {
        assert_ok(&run(2, &["requests"], p), 2, &format!("requests {p:?}"));
    }
}

#[test]
fn threading_multiple_four_threads_on_duplicated_communicators() {
    for p in MODES {
        assert_ok(&run(2, &["threads"], p), 2, &format!("threads {p:?}"));
    }
}

#[test]
fn a_dead_peer_fails_passive_waits_with_peer_failed() {
    // recv: a posted receive from the dead rank; anysrc: a receive and a
    // probe from any source in a communicator with the dead rank; long: a long send whose
    // receiver acknowledged zero bytes and died before its get; sync: a
    // synchronous send never matched.
    for (case, p) in [
        ("recv", ProgressMode::Thread),
        ("recv", ProgressMode::Poll),
        ("anysrc", ProgressMode::Thread),
        ("anysrc", ProgressMode::Poll),
        ("long", ProgressMode::Thread),
        ("long", ProgressMode::Poll),
        ("sync", ProgressMode::Thread),
    ] {
        // A regression hangs: bound the job well below the default.
        let out = run_job_within(
            env!("CARGO_BIN_EXE_mpi_check"),
            2,
            &["death", case],
            p,
            Backend::Epoll,
            Duration::from_secs(90),
        );
        assert_ok(&out, 2, &format!("death {case} {p:?}"));
        let survivor = if case == "recv" || case == "anysrc" {
            1
        } else {
            0
        };
        assert!(
            out.stdout_of(survivor).contains("PeerFailed after"),
            "death {case} {p:?}: the survivor did not report the failure"
        );
    }
}

#[test]
fn short_messages_beyond_a_pool_that_cannot_grow_are_pulled_not_lost() {
    for p in MODES {
        assert_ok(&run(2, &["overflow"], p), 2, &format!("overflow {p:?}"));
    }
}

/// A polling rank that only makes blocking short sends still answers its
/// peer's gets (`mpi_check sendloop`): the sends that leave their
/// transport pass to a following wait make one at every second send in a
/// row.
#[test]
fn a_loop_of_blocking_sends_serves_the_peers_gets_in_every_mode() {
    for p in MODES {
        assert_ok(&run(2, &["sendloop"], p), 2, &format!("sendloop {p:?}"));
    }
}

/// Acknowledged library copies are finished when the process next sends
/// or has to wait, and at most 64 are held meanwhile (`mpi_check copies`).
#[test]
fn acknowledged_library_copies_do_not_pile_up_in_every_mode() {
    for p in MODES {
        assert_ok(&run(2, &["copies"], p), 2, &format!("copies {p:?}"));
    }
}

/// A job over TCP (not the shared memory `auto` picks on one host).
fn run_tcp(ranks: u32, args: &[&str], progress: ProgressMode, limit: Duration) -> LaunchOutcome {
    let options = JobOptions {
        nal: NalKind::Tcp,
        progress,
        ..JobOptions::default()
    };
    run_job_limited(env!("CARGO_BIN_EXE_mpi_check"), ranks, args, options, limit)
}

/// Three senders x 1000 x 60 KB (180 MB, about three times the default
/// unexpected pool's 64 MiB cap, and 44 MiB past the cap + 64 MiB the
/// receiver's RSS is held to, so a receiver that kept everything fails) to
/// a receiver that posts its first receive only after a barrier: nothing
/// is lost, all arrive in order, and the receiver's peak RSS stays below
/// the cap + 64 MB. Over TCP and shared memory, both progress modes. (The
/// UDP variant floods as much; 2000 each, 5.4 times the cap, proved
/// nothing more and cost 20 s of the suite.)
#[test]
fn three_senders_flood_a_late_receiver_far_past_the_pool_cap() {
    let args = ["manyto1", "1000", "60000", "64"];
    for p in MODES {
        let out = run_tcp(4, &args, p, Duration::from_secs(400));
        assert_ok(&out, 4, &format!("manyto1 tcp {p:?}"));
        println!("tcp {p:?}: {}", out.stdout_of(0));
        let out = run_job_within(
            env!("CARGO_BIN_EXE_mpi_check"),
            4,
            &args,
            p,
            Backend::Epoll,
            Duration::from_secs(400),
        );
        assert_ok(&out, 4, &format!("manyto1 auto {p:?}"));
        println!("auto {p:?}: {}", out.stdout_of(0));
    }
}

/// Three senders x 1000 x 16 KB to a late receiver whose event queues hold
/// 256 events (`eqflood`): the envelopes and acknowledgments outnumber a
/// queue many times over between two drains. Flow-controlled queues make
/// the transports hold messages back instead of overflowing (before, a
/// rank died with `EventQueueOverflow`). Shared memory, TCP and UDP, both
/// progress modes; every message checked.
#[test]
fn a_flood_never_overflows_small_event_queues_on_any_transport() {
    on_every_transport(|nal, p, options| {
        let out = run_job_limited(
            env!("CARGO_BIN_EXE_mpi_check"),
            4,
            &["eqflood", "1000"],
            options,
            Duration::from_secs(120),
        );
        assert_ok(&out, 4, &format!("eqflood {nal:?} {p:?}"));
    });
}

/// Run `f` with the options of every transport (shared memory, TCP, UDP)
/// in both progress modes.
fn on_every_transport(mut f: impl FnMut(NalKind, ProgressMode, JobOptions)) {
    for nal in [NalKind::Shm, NalKind::Tcp, NalKind::Udp] {
        for p in MODES {
            let options = JobOptions {
                nal,
                progress: p,
                ..JobOptions::default()
            };
            f(nal, p, options);
        }
    }
}

/// A look at a pending receive with nothing new queued costs no engine
/// lock (`mpi_check quietpeek`): rank 0 peeks while one of its threads
/// holds the lock, and the peek comes back at once, on every transport in
/// both modes. Taking the lock, the peek waits until the holder lets go
/// (10 s), and this fails.
#[test]
fn a_peek_with_nothing_new_queued_does_not_wait_for_the_engine_lock_on_any_transport() {
    on_every_transport(|nal, p, options| {
        let out = run_job_env(
            env!("CARGO_BIN_EXE_mpi_check"),
            2,
            &["quietpeek"],
            options,
            Duration::from_secs(60),
            &[],
        );
        assert_ok(&out, 2, &format!("quietpeek {nal:?} {p:?}"));
        assert!(
            out.stdout_of(0).contains("quietpeek: a quiet peek took"),
            "{nal:?} {p:?}"
        );
    });
}

/// Announced long sends (`mpi_check announce`, run length 4), on every
/// transport in both modes (shared memory through its ring,
/// `PTL_SHM_CMA=0`: read single-copy, a truncated payload never moves, and
/// nothing is announced): after a long message met no posted receive,
/// the next ones to that target are announced (all but the first of three
/// unexpected ones); four expected ones count the run down and puts
/// follow; one unexpected put starts a run again. The announced messages
/// that meet posted receives — whole, truncated to 1000 bytes and to none,
/// from any source — arrive byte-exact with the right status.
#[test]
fn long_sends_are_announced_while_their_receives_run_late_on_every_transport() {
    on_every_transport(|nal, p, options| {
        let ring: &[(&str, &str)] = if nal == NalKind::Shm {
            &[("PTL_SHM_CMA", "0")]
        } else {
            &[]
        };
        let out = run_job_env(
            env!("CARGO_BIN_EXE_mpi_check"),
            2,
            &["announce"],
            options,
            Duration::from_secs(60),
            ring,
        );
        assert_ok(&out, 2, &format!("announce {nal:?} {p:?}"));
    });
}

/// With every long send announced (`PTL_MPI_ANNOUNCE=always`), every send
/// mode expected and unexpected, probe, truncation and cancel
/// (`modes`, `misc`), and MPI's non-overtaking order under a random mix
/// of protocols and wildcard receives from three senders (`order`) hold,
/// over shared memory (through its ring, where long sends are announced)
/// and TCP.
#[test]
fn every_protocol_path_and_the_order_hold_when_every_long_send_is_announced() {
    let always = [("PTL_MPI_ANNOUNCE", "always"), ("PTL_SHM_CMA", "0")];
    for (nal, p) in [
        (NalKind::Shm, ProgressMode::Thread),
        (NalKind::Tcp, ProgressMode::Poll),
    ] {
        let options = JobOptions {
            nal,
            progress: p,
            ..JobOptions::default()
        };
        for (ranks, args) in [
            (2, &["modes"][..]),
            (2, &["misc"][..]),
            (4, &["order", "1500", "7"][..]),
        ] {
            let out = run_job_env(
                env!("CARGO_BIN_EXE_mpi_check"),
                ranks,
                args,
                options.clone(),
                Duration::from_secs(120),
                &always,
            );
            assert_ok(&out, ranks, &format!("{args:?} announced {nal:?} {p:?}"));
            if args[0] == "order" {
                let line = out.stdout_of(0);
                assert!(
                    !line.contains("announced_expected: 0,"),
                    "no announced message met a posted receive: {line}"
                );
            }
        }
    }
}

/// The envelope cap (`mpi_check capflood`, `caphol`, `caphol_any`: 64
/// envelopes), on shared memory, TCP and UDP, both progress modes. Three
/// senders x 2000 small messages to a late receiver that receives round
/// robin by source: all arrive, in order, and the receiver never saves
/// more than the cap plus a few envelopes (with the slots not kept, it
/// saved 5444 at once on shared memory, 2351 over TCP). Then the
/// head-of-line case a plain cap deadlocks (it did, with kept slots but no
/// admission): 500 unreceived messages in front of the one received first,
/// from that sender, from any source, and found by a loop of `iprobe`s.
/// And issue 23's late receiver (`capbarrier`): the same floods, then a
/// barrier the receiver waits in before receiving (one sender 500 ms
/// late) — its senders' barrier messages follow their floods. Before send
/// windows it saved 4000-6000 at once at a cap of 64; with windows but no
/// pauses 2160 (the sender it waited for kept sending); now 65-87, checked
/// against the cap plus 6 windows (8) per sender.
#[test]
fn the_envelope_cap_bounds_saved_envelopes_without_deadlock_on_any_transport() {
    on_every_transport(|nal, p, options| {
        for scenario in ["capflood", "capbarrier"] {
            let out = run_job_limited(
                env!("CARGO_BIN_EXE_mpi_check"),
                4,
                &[scenario, "2000"],
                options.clone(),
                Duration::from_secs(120),
            );
            assert_ok(&out, 4, &format!("{scenario} {nal:?} {p:?}"));
            println!("{nal:?} {p:?}: {}", out.stdout_of(0));
        }
        for scenario in ["caphol", "caphol_any", "capiprobe"] {
            let out = run_job_limited(
                env!("CARGO_BIN_EXE_mpi_check"),
                2,
                &[scenario],
                options.clone(),
                Duration::from_secs(60),
            );
            assert_ok(&out, 2, &format!("{scenario} {nal:?} {p:?}"));
        }
    });
}

/// A non-blocking barrier started before the only other member dies (which
/// never joins it) fails with `PeerFailed` naming it, over TCP, in both
/// modes: its chain of triggered operations waits for a message the dead
/// rank will never send, and nothing else would end it. A regression
/// hangs: the job is bounded well below the default.
#[test]
fn a_nonblocking_barrier_fails_when_a_member_dies_over_tcp() {
    for p in MODES {
        let out = run_tcp(2, &["death", "ibarrier"], p, Duration::from_secs(90));
        assert_ok(&out, 2, &format!("death ibarrier tcp {p:?}"));
        assert!(
            out.stdout_of(1).contains("PeerFailed after"),
            "death ibarrier tcp {p:?}: the survivor did not report the failure"
        );
    }
}

/// The same for a flat non-blocking collective (`mpi_check death
/// iallgather`): an all-gather started before its only peer dies fails
/// with `PeerFailed` instead of waiting for the peer's notice forever.
#[test]
fn a_nonblocking_all_gather_fails_when_a_member_dies_over_tcp() {
    for p in MODES {
        let out = run_tcp(2, &["death", "iallgather"], p, Duration::from_secs(90));
        assert_ok(&out, 2, &format!("death iallgather tcp {p:?}"));
        assert!(
            out.stdout_of(1).contains("PeerFailed after"),
            "death iallgather tcp {p:?}: the survivor did not report the failure"
        );
    }
}

/// A short all-reduce (on the communicator's slots, `device/slots.rs`)
/// entered after its only peer decided to die fails with `PeerFailed`
/// naming it, in both modes, instead of waiting for a put that will never
/// come. A regression hangs: the job is bounded well below the default.
#[test]
fn a_short_all_reduce_fails_when_a_member_dies_over_tcp() {
    for p in MODES {
        let out = run_tcp(2, &["death", "allreduce"], p, Duration::from_secs(90));
        assert_ok(&out, 2, &format!("death allreduce tcp {p:?}"));
        assert!(
            out.stdout_of(1).contains("PeerFailed after"),
            "death allreduce tcp {p:?}: the survivor did not report the failure"
        );
    }
}

/// A receive from any source, posted before the only other member dies,
/// fails with `PeerFailed` over TCP (the transport's connection loss), and
/// so do later any-source receives and probes. A regression hangs: the job
/// is bounded well below the default.
#[test]
fn an_any_source_receive_fails_when_a_member_dies_over_tcp() {
    for p in MODES {
        let out = run_tcp(2, &["death", "anysrc"], p, Duration::from_secs(90));
        assert_ok(&out, 2, &format!("death anysrc tcp {p:?}"));
        assert!(
            out.stdout_of(1).contains("PeerFailed after"),
            "death anysrc tcp {p:?}: the survivor did not report the failure"
        );
    }
}

#[test]
fn more_than_10_mb_of_unexpected_messages_while_the_receiver_sleeps() {
    for p in MODES {
        let out = run(2, &["sleepflood"], p);
        assert_ok(&out, 2, &format!("sleepflood {p:?}"));
    }
}

#[test]
fn the_unexpected_pool_grows_while_an_application_thread_holds_the_library() {
    // Only a progress thread deposits while the application is inside the
    // library; in polling mode nothing arrives meanwhile.
    let out = run(2, &["heldflood"], ProgressMode::Thread);
    assert_ok(&out, 2, "heldflood");
}

#[test]
fn finalize_completes_detached_sends_while_driving_progress() {
    for p in [ProgressMode::Poll, ProgressMode::Thread] {
        assert_ok(&run(2, &["finalize"], p), 2, &format!("finalize {p:?}"));
    }
}

/// The protocol mix (every send mode, ordering, unexpected-buffer recycling,
/// probe/cancel/truncation) with the progress thread waiting in io_uring,
/// and the same in polling mode on that back end.
#[test]
fn a_subset_on_the_io_uring_back_end_in_both_progress_modes() {
    for p in MODES {
        for (ranks, args) in [
            (2, &["modes"][..]),
            (4, &["order", "1000", "6"][..]),
            (2, &["flood", "5"][..]),
            (2, &["misc"][..]),
        ] {
            assert_ok(
                &run_on(ranks, args, p, Backend::IoUring),
                ranks,
                &format!("io_uring {p:?} {args:?}"),
            );
        }
    }
    // Progress independence needs the progress thread, here in io_uring.
    let out = run_on(2, &["progress"], ProgressMode::Thread, Backend::IoUring);
    assert_ok(&out, 2, "progress thread io_uring");
    assert!(out.stdout_of(1).contains("completed while computing"));
}

/// The non-blocking barrier and broadcast (`mpi_check nbc`): broadcasts
/// from every root at sizes 0 B to 300 KB, 30 barriers and broadcasts back
/// to back, 24 broadcasts and 8 barriers outstanding at once with a
/// blocking all-reduce between, on the world, a duplicate and a split, a
/// root out of range (`InvalidRank`), and a barrier whose communicator is
/// freed while it runs (it completes; the pair is reused after it). And
/// the non-blocking all-reduce: sum, max, min, bitwise and on u64, i32 and
/// f64 at 1 to 64 elements (triggered atomics) and 65 (past the atomic
/// limit: the blocking fallback), a user-defined operation (fallback),
/// instances back to back and 12 outstanding among broadcasts and
/// barriers. On shared memory, TCP and UDP in both progress modes, 4
/// ranks; 7 ranks (non-power-of-two trees) on TCP.
#[test]
fn nonblocking_barrier_and_broadcast_values_on_every_transport() {
    on_every_transport(|nal, p, options| {
        let out = run_job_limited(
            env!("CARGO_BIN_EXE_mpi_check"),
            4,
            &["nbc", "30"],
            options,
            Duration::from_secs(120),
        );
        assert_ok(&out, 4, &format!("nbc {nal:?} {p:?}"));
    });
    let out = run_tcp(
        7,
        &["nbc", "20"],
        ProgressMode::Thread,
        Duration::from_secs(120),
    );
    assert_ok(&out, 7, "nbc tcp 7");
}

/// The flat non-blocking collectives (`mpi_check nbcflat 3`): gather,
/// scatter, all-gather, all-to-all, their varcount forms (empty blocks,
/// gaps), reduce (sum past the atomic limit, max on i32), scan, float
/// scan, exclusive scan, reduce-scatter-block, a varcount reduce-scatter
/// (empty blocks, blocks past the atomic limit) and a user-defined
/// all-reduce — sixteen instances of mixed kinds outstanding at once,
/// started in one order and waited in the reverse, on the world and a
/// duplicate, roots rotating — equal byte for byte to what `val` says;
/// then bad arguments (root out of range, a short buffer, a partition of
/// n+1 blocks, the root calling the non-root form) are typed errors at
/// the start and the next collective still lines up; counts that
/// disagree (a block longer than its receiver's room) fail the receiver's
/// wait with `CollectiveTruncated`, never silently. 2, 3 and 4 ranks,
/// shared memory, TCP and UDP, both progress modes.
#[test]
fn flat_nonblocking_collectives_values_on_every_transport_2_3_4_ranks() {
    on_every_transport(|nal, p, options| {
        for ranks in [2, 3, 4] {
            let out = run_job_limited(
                env!("CARGO_BIN_EXE_mpi_check"),
                ranks,
                &["nbcflat", "3"],
                options.clone(),
                Duration::from_secs(120),
            );
            assert_ok(&out, ranks, &format!("nbcflat {nal:?} {p:?} {ranks}"));
        }
    });
}

/// Progress without the application (`mpi_check nbcflatsleep`, thread
/// mode): rank 0 starts an all-gather, then computes with no MPI call
/// until every other rank has *finished* its all-gather (a flag file
/// each); they can only finish if rank 0's progress thread sends its
/// block. In polling mode the same job fails (rank 0 gives up after a
/// minute). Shared memory, TCP and UDP, 3 ranks.
#[test]
fn flat_all_gather_completes_while_a_member_computes_without_mpi_calls() {
    for nal in [NalKind::Shm, NalKind::Tcp, NalKind::Udp] {
        let options = JobOptions {
            nal,
            progress: ProgressMode::Thread,
            ..JobOptions::default()
        };
        let out = run_job_limited(
            env!("CARGO_BIN_EXE_mpi_check"),
            3,
            &["nbcflatsleep"],
            options,
            Duration::from_secs(120),
        );
        assert_ok(&out, 3, &format!("nbcflatsleep {nal:?}"));
    }
}

/// The point of triggered operations (`mpi_check nbcsleep`, thread mode):
/// every rank starts a barrier, a broadcast and an all-reduce on the world
/// and on a duplicate, then sleeps 1.5 s with no MPI call, then a single
/// `peek` of each (which makes no transport pass itself, unlike `test`)
/// finds it complete — the progress threads ran the chains.
/// An all-reduce's start does not wait for the other members (rank 0
/// sends what the last rank needs before starting only after its own
/// start). And no
/// rank's barrier completes before the last rank (started 150 ms per rank
/// late) started it. Shared memory, TCP and UDP.
#[test]
fn nonblocking_collectives_complete_while_every_thread_sleeps() {
    for nal in [NalKind::Shm, NalKind::Tcp, NalKind::Udp] {
        let options = JobOptions {
            nal,
            progress: ProgressMode::Thread,
            ..JobOptions::default()
        };
        let out = run_job_limited(
            env!("CARGO_BIN_EXE_mpi_check"),
            4,
            &["nbcsleep"],
            options,
            Duration::from_secs(120),
        );
        assert_ok(&out, 4, &format!("nbcsleep {nal:?}"));
    }
}

/// The same after a quiet stretch (`NiCore::set_app_quiet`: 700 ms with
/// nothing under way after the barrier), with a hand-back delay of 200 ms:
/// a quiet rank's progress thread looks during the stretch and stands
/// aside for 16 delays (3.2 s) from the barrier, past the sleep's end, so
/// only the start's hint (`Device::collective_post`, a bulk post to the
/// transport) has it take the chains over while the ranks sleep. TCP and
/// UDP (shared memory ignores the hint; its dozer wakes for armed
/// triggers).
#[test]
fn nonblocking_collectives_started_after_a_quiet_stretch_complete_while_every_thread_sleeps() {
    for nal in [NalKind::Tcp, NalKind::Udp] {
        let options = JobOptions {
            nal,
            progress: ProgressMode::Thread,
            handback: Some(Duration::from_millis(200)),
            ..JobOptions::default()
        };
        let out = run_job_limited(
            env!("CARGO_BIN_EXE_mpi_check"),
            4,
            &["nbcsleep", "700"],
            options,
            Duration::from_secs(120),
        );
        assert_ok(&out, 4, &format!("nbcsleep after quiet {nal:?}"));
    }
}

/// `PTL_LOG_FILE` sends each rank's log to a file of its own (`%p`: the
/// process id) instead of stderr, which a tool may keep (`ptl-bench` does):
/// the UDP transport's counters at close land there, and not on stderr.
#[test]
fn each_rank_logs_to_its_own_file_when_ptl_log_file_names_one() {
    let dir = std::env::temp_dir().join(format!(
        "ptl-log-file-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let template = dir.join("rank.%p.log");
    let options = JobOptions {
        nal: NalKind::Udp,
        ..JobOptions::default()
    };
    let out = run_job_env(
        env!("CARGO_BIN_EXE_mpi_check"),
        2,
        &["modes"],
        options,
        Duration::from_secs(120),
        &[
            ("PTL_LOG", "nal_udp=debug"),
            ("PTL_LOG_FILE", &template.to_string_lossy()),
        ],
    );
    assert_ok(&out, 2, "modes with PTL_LOG_FILE");
    assert!(
        !out.transcript().contains("closing"),
        "the log went to stderr too:\n{}",
        out.transcript()
    );
    let mut logs: Vec<String> = std::fs::read_dir(&dir)
        .expect("the scratch directory")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    logs.sort();
    assert_eq!(logs.len(), 2, "one file per rank: {logs:?}");
    for log in &logs {
        assert!(
            log.contains("closing") && log.contains("tail_probes"),
            "{log}"
        );
        assert!(!log.contains('\u{1b}'), "colour codes in a file: {log}");
    }
}
