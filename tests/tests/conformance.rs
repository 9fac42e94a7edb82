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

    thread_suite! {
        tcp_epoll = TcpConfig::variant(Backend::Epoll, ProgressMode::Thread);
        tcp_io_uring = TcpConfig::variant(Backend::IoUring, ProgressMode::Thread);
        udp_epoll = UdpConfig::variant(Backend::Epoll, ProgressMode::Thread);
        udp_lossy = udp_lossy(ProgressMode::Thread, 13);
        shm = shm(ProgressMode::Thread, true);
        mixed = mixed(ProgressMode::Thread);
    }
}
