//! The transport conformance suite (`portals_tests::conformance`) for each
//! transport, back end and progress mode, for UDP through the fault
//! injector (loss, duplication, reordering), and for shared memory with
//! single-copy transfers on and off, and for shared memory and TCP
//! composed (two "hosts" in one process). Several interfaces in one process,
//! connected over 127.0.0.1 or shared memory; one test per behaviour and
//! variant.

use nal_tcp::TcpConfig;
use nal_udp::UdpConfig;
use portals_tests::conformance::{self, mixed, shm, udp_lossy, Backend, ProgressMode, Transport};

/// A module `$variant` with a test for each of `$behaviour`, run with the
/// configuration `$cfg`.
macro_rules! suite {
    ($variant:ident = $cfg:expr; $($behaviour:ident),* $(,)?) => {
        mod $variant {
            use super::*;
            $(
                #[test]
                fn $behaviour() {
                    conformance::logging();
                    conformance::$behaviour(&$cfg);
                }
            )*
        }
    };
}

/// Every behaviour of the suite.
macro_rules! full_suite {
    ($($variant:ident = $cfg:expr;)*) => {
        $(
            suite!($variant = $cfg;
                puts_and_gets_of_every_size_arrive_byte_exact,
                all_to_all_storm_of_small_puts_keeps_per_source_order,
                progress_happens_while_the_target_never_calls_the_library,
                a_process_can_put_to_itself,
                iovec_descriptors_scatter_and_gather_byte_exact,
                concurrent_fetching_sums_lose_no_update,
                a_lazy_acknowledgment_reaches_an_initiator_whose_target_only_waits,
            );
        )*
    };
}

full_suite! {
    tcp_epoll_thread = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    tcp_epoll_poll = TcpConfig::variant(Backend::Epoll, ProgressMode::Poll);
    tcp_io_uring_thread = TcpConfig::variant(Backend::IoUring, ProgressMode::Thread);
    tcp_io_uring_poll = TcpConfig::variant(Backend::IoUring, ProgressMode::Poll);
    udp_epoll_thread = UdpConfig::variant(Backend::Epoll, ProgressMode::Thread);
    udp_epoll_poll = UdpConfig::variant(Backend::Epoll, ProgressMode::Poll);
    udp_io_uring_thread = UdpConfig::variant(Backend::IoUring, ProgressMode::Thread);
    udp_io_uring_poll = UdpConfig::variant(Backend::IoUring, ProgressMode::Poll);
    udp_lossy_thread = udp_lossy(ProgressMode::Thread, 11);
    udp_lossy_poll = udp_lossy(ProgressMode::Poll, 12);
    shm_thread = shm(ProgressMode::Thread, true);
    shm_poll = shm(ProgressMode::Poll, true);
    shm_thread_ring_copy = shm(ProgressMode::Thread, false);
    shm_poll_ring_copy = shm(ProgressMode::Poll, false);
    mixed_thread = mixed(ProgressMode::Thread);
    mixed_poll = mixed(ProgressMode::Poll);
}

/// Behaviours that need progress threads, for each transport.
mod progress_threads {
    use super::*;

    macro_rules! thread_suite {
        ($($variant:ident = $cfg:expr;)*) => {
            $(
                suite!($variant = $cfg;
                    a_triggered_chain_completes_while_every_application_thread_sleeps,
                    triggered_atomics_fire_while_the_application_sleeps,
                    a_response_stays_ahead_of_a_send_after_fence_responses,
                );
            )*
        };
    }

    /// TCP only: shared memory and UDP do not promise this order (see
    /// docs/ARCHITECTURE.md, "An answer is never overtaken").
    macro_rules! answer_order_suite {
        ($($variant:ident = $cfg:expr;)*) => {
            $(
                suite!($variant = $cfg;
                    an_acknowledgment_comes_before_the_reply_its_put_caused,
                );
            )*
        };
    }

    mod answer_order {
        use super::*;

        answer_order_suite! {
            tcp_epoll = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
            tcp_io_uring = TcpConfig::variant(Backend::IoUring, ProgressMode::Thread);
        }
    }

    thread_suite! {
        tcp_epoll = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
        tcp_io_uring = TcpConfig::variant(Backend::IoUring, ProgressMode::Thread);
        udp_epoll = UdpConfig::variant(Backend::Epoll, ProgressMode::Thread);
        udp_lossy = udp_lossy(ProgressMode::Thread, 13);
        shm = shm(ProgressMode::Thread, true);
        mixed = mixed(ProgressMode::Thread);
    }
}

/// Shared memory only: which path a payload takes.
mod shm_paths {
    use portals::*;
    use portals_tests::conformance::{attach, cut, expect, id, job, pattern, PT};

    use super::*;

    /// A put from a scattered (iovec) descriptor that a single-copy record
    /// can describe goes single-copy, gathered by the receiver straight
    /// from the segments; one in more pieces than a record names goes
    /// through the ring. Both arrive byte-exact.
    #[test]
    fn a_scattered_put_goes_single_copy_unless_it_has_too_many_pieces() {
        conformance::logging();
        let cfg = shm(ProgressMode::Thread, true);
        let nodes = job(2, &cfg);
        let (a, b) = (&nodes[0], &nodes[1]);
        let beq = b.ni.eq_alloc(16).unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(beq);
        let tmd = attach(&b.ni, ProcessId::ANY, 1, 0, &desc, 1 << 20);
        let aeq = a.ni.eq_alloc(16).unwrap();
        // The receiver decides at start-up, by a probe, whether it can read
        // from us single-copy; until then even a contiguous payload goes
        // through the ring (a loaded host showed it: 1 run in 40).
        let t0 = std::time::Instant::now();
        while !a.nal.cma_in_use() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(20),
                "single-copy never agreed"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let cases = [
            // 300 KB in 10 odd segments: single-copy.
            (
                pattern(300_001, 4),
                vec![1, 4095, 4097, 65_536, 3, 100_000, 7, 60_000, 30_000, 36_262],
                true,
            ),
            // 400 KB in 2000 pieces: more than a record names, the ring.
            (pattern(400_000, 5), vec![200; 2000], false),
        ];
        for (data, lens, single) in cases {
            assert_eq!(lens.iter().sum::<usize>(), data.len());
            let before = a.nal.stats();
            let src =
                a.ni.md_bind_iovec(
                    &MdDesc::default().eq(aeq),
                    cut(&data, &lens),
                    Unlink::Retain,
                )
                .unwrap();
            a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 1), 0)
                .unwrap();
            let ack = expect(&a.ni, aeq, EventKind::Ack);
            assert_eq!((ack.mlength, ack.fail), (data.len() as u64, FailType::Ok));
            expect(&b.ni, beq, EventKind::Put);
            let mut got = vec![0u8; data.len()];
            b.ni.md_read(tmd, 0, &mut got).unwrap();
            assert!(got == data, "{} bytes arrived different", data.len());
            let after = a.nal.stats();
            assert_eq!(
                (
                    after.single_copy_sent - before.single_copy_sent,
                    after.pipelined_sent - before.pipelined_sent
                ),
                if single { (1, 0) } else { (0, 1) },
                "{} pieces",
                lens.len()
            );
            a.ni.md_unlink_iovec(src).unwrap();
        }
    }
}
