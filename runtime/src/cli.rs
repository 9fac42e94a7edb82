//! The `ptlrun` command line (the binary is a one-line wrapper, so tests can
//! run the same launcher).

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};
use nal_tcp::{Backend, ConnectMode, ProgressMode};

use crate::launch::{
    end_jobs_on_termination_signals, fresh_job_key, launch, serve, CpuBind, LaunchSpec, Output,
    Rendezvous,
};
use crate::{JobOptions, NalKind};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum NalArg {
    /// Shared memory between the ranks of one host, TCP between hosts
    /// (both in one job when it spans hosts).
    Auto,
    /// Shared memory (rings in a shared segment, single-copy large
    /// messages): every rank must run on this host.
    Shm,
    /// TCP: one connection per pair of processes.
    Tcp,
    /// UDP: one socket per process, reliability in the library.
    Udp,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProgressArg {
    /// A progress thread per process moves data while the application
    /// computes; a thread waiting in the library drives the sockets itself.
    Thread,
    /// No progress thread: data moves only inside library calls.
    Poll,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendArg {
    /// epoll, edge-triggered.
    Epoll,
    /// io_uring multishot poll (progress thread only).
    IoUring,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum YieldArg {
    /// Yield when this host runs more ranks than it has cores online.
    Auto,
    /// Always yield between polls.
    On,
    /// Always spin.
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CpuBindArg {
    /// Leave placement to the scheduler.
    None,
    /// Pin the i-th rank started here to the i-th CPU ptlrun may use,
    /// round-robin when there are more ranks than CPUs.
    Core,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ConnectArg {
    /// Connect on the first message to a peer.
    Lazy,
    /// Connect to every peer at start-up.
    Eager,
}

/// Start a portals-rs job: N copies of PROGRAM on this machine, connected by
/// the chosen transport.
///
/// A job can span hosts: one ptlrun runs the rendezvous server on an address
/// the others reach (--listen, or --serve for a server without local ranks),
/// and the others join it (--rendezvous HOST:PORT --job-key KEY), each
/// starting a slice of the ranks (--first-rank, --size), with the transport
/// bound to an address of the host's network (--bind).
///
/// C MPI programs run as they are when built with mpi-capi's ptlcc
/// (`target/<profile>/ptlcc`: it links portals-rs's libmpich.so.12 with an
/// rpath); ones built with mpicc.mpich need
/// `LD_LIBRARY_PATH=target/<profile>/mpich-abi` (see mpi-capi/README.md).
///
/// Every rank gets its rank, the job size, a fresh job key and the address of
/// a rendezvous server in its environment (PTL_RANK, PTL_SIZE, PTL_JOB_KEY,
/// PTL_BOOTSTRAP, plus PTL_NAL, PTL_PROGRESS, PTL_BACKEND, PTL_CONNECT,
/// PTL_BIND, PTL_BOOTSTRAP_TIMEOUT, PTL_WAIT_SPIN_US, PTL_WAIT_YIELD,
/// PTL_HANDBACK_US, PTL_SNDBUF, PTL_RCVBUF, PTL_SHM_CMA, PTL_SHM_RING for
/// the options below). Variables with no option here reach the ranks
/// unchanged from ptlrun's own environment, among them
/// PTL_PROGRESS_SLICE_US (the progress thread's scheduler slice, µs,
/// default 100, 0 for none), PTL_PROGRESS_NICE (how many nice steps the
/// progress thread runs below its application: auto, the default, is 10,
/// or 0 on a host running more ranks than cores; as many as CAP_SYS_NICE
/// or RLIMIT_NICE allow), PTL_PROGRESS_CPUS (the CPUs the progress thread
/// may run on: launcher, the default, those ptlrun itself may use, so
/// that a rank bound by --cpu-bind core moves arriving data on an idle
/// core; rank, its rank's; or a list such as 0-3,8), PTL_WAIT_SPIN_BUSY_US (how much longer a
/// waiting thread polls while a peer copies its data, µs, default 2000),
/// PTL_COLL_FLAT (MPI's short all-reduces and barriers through rank 0:
/// 1, 0, or auto, the default: where some host runs more ranks than it
/// has cores), PTL_FINALIZE_TIMEOUT, PTL_HOST_ID and the
/// PTL_UDP_* settings; the full table is in the portals-runtime docs
/// (module `env`).
/// Each rank's output is forwarded line by line, prefixed with `[rank] `.
/// The first rank that fails (non-zero exit status or a signal) fails the
/// job: the other ranks are terminated and ptlrun exits with that rank's
/// status (128 + signal for a signal, 124 if --timeout expired). Which
/// rank is blamed is decided within 1 s of the first failure: a rank
/// killed by a signal, else one that failed on its own, before one that
/// failed because a peer did.
/// SIGTERM, SIGINT or SIGHUP to ptlrun terminates every rank the same way
/// (SIGTERM, then SIGKILL after 2 s) and ptlrun exits with 128 + the
/// signal's number; if ptlrun is killed outright, the kernel kills the
/// ranks (parent-death signal).
#[derive(Parser, Debug)]
#[command(name = "ptlrun", version, about, long_about)]
struct Args {
    /// Number of processes (ranks) to start here.
    #[arg(short = 'n', long = "np", value_name = "N", default_value_t = 0)]
    ranks: u32,
    /// Ranks in the whole job, when other hosts start some of them
    /// (default: N).
    #[arg(long, value_name = "SIZE")]
    size: Option<u32>,
    /// Rank of the first process started here.
    #[arg(long, value_name = "RANK", default_value_t = 0)]
    first_rank: u32,
    /// Address the rendezvous server listens on (port 0: any free port).
    /// Use an address other hosts can reach for a multi-host job.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Join the rendezvous server at HOST:PORT instead of running one.
    #[arg(long, value_name = "HOST:PORT", requires = "job_key")]
    rendezvous: Option<String>,
    /// The job key, in hexadecimal (default: a fresh random key, printed
    /// when other hosts need it).
    #[arg(long, value_name = "HEX", value_parser = parse_key)]
    job_key: Option<u64>,
    /// Only run the rendezvous server for a job of --size ranks started
    /// elsewhere, until they have all finished.
    #[arg(long, requires = "size", conflicts_with = "rendezvous")]
    serve: bool,
    /// Transport (sets PTL_NAL).
    #[arg(long, value_enum, default_value = "auto")]
    nal: NalArg,
    /// Progress mode.
    #[arg(long, value_enum, default_value = "thread")]
    progress: ProgressArg,
    /// Kernel interface the progress thread waits in.
    #[arg(long, value_enum, default_value = "epoll")]
    backend: BackendArg,
    /// When connections are set up.
    #[arg(long, value_enum, default_value = "lazy")]
    connect: ConnectArg,
    /// UDP only: inject faults into every rank's outgoing datagrams, e.g.
    /// `loss=0.05,dup=0.01,reorder=0.02,seed=7` (for testing).
    #[arg(long, value_name = "SPEC")]
    udp_fault: Option<nal_udp::FaultConfig>,
    /// UDP only: declare a peer failed when it stays silent this long, in
    /// milliseconds, while a rank waits in the library (it is probed
    /// meanwhile); 0 turns the watch off (default 10000). With
    /// `--progress poll`, keep it above the longest computation between
    /// library calls.
    #[arg(long, value_name = "MS", value_parser = parse_udp_peer_timeout)]
    udp_peer_timeout: Option<PeerTimeoutArg>,
    /// UDP only: largest datagram in bytes, headers included (1472 for a
    /// 1500-byte Ethernet MTU, 8972 for 9000; default 65000, which fits
    /// loopback and is IP-fragmented elsewhere).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(512..=65507))]
    udp_max_datagram: Option<u16>,
    /// UDP only: while a peer reports losing at least this percentage of
    /// our datagrams, send each small one (up to 4 KiB: tokens,
    /// acknowledgments) twice, back to back, so a latency-bound exchange
    /// rarely waits for a loss probe; `off` never does (default 2).
    #[arg(long, value_name = "PERCENT|off", value_parser = parse_udp_copy_above)]
    udp_copy_above: Option<CopyAboveArg>,
    /// UDP only: send through the receiving socket instead of one
    /// connected socket per peer (for comparison: the kernel then looks up
    /// a route for every datagram; sets PTL_UDP_CONNECTED=0).
    #[arg(long)]
    udp_unconnected: bool,
    /// TCP only: wake a sleeping thread at every arriving segment of a
    /// large message instead of once per message (for comparison; sets
    /// PTL_TCP_RCVLOWAT=0).
    #[arg(long)]
    tcp_wake_per_segment: bool,
    /// TCP only: the progress thread sleeps out the whole hand-back delay
    /// even while the application computes (for comparison; sets
    /// PTL_TCP_TAKEOVER=0).
    #[arg(long)]
    tcp_late_takeover: bool,
    /// Shared memory only: copy large payloads through the rings instead
    /// of reading them straight from the sender's memory with
    /// process_vm_readv (for comparison, or where the kernel refuses it;
    /// sets PTL_SHM_CMA=0).
    #[arg(long)]
    shm_no_cma: bool,
    /// Shared memory only: bytes of each per-pair ring, a multiple of 64
    /// from 4K to 1G (K, M, G: KiB, MiB, GiB; sets PTL_SHM_RING; default
    /// 256K).
    #[arg(long, value_name = "BYTES", value_parser = parse_ring_arg)]
    shm_ring: Option<usize>,
    /// IP address the ranks' transports listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Kill the whole job after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// How long ranks wait for each other at start-up.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    bootstrap_timeout: u64,
    /// Spin window of a thread waiting in the library, in microseconds.
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 50)]
    wait_spin: u64,
    /// Whether a thread waiting in the library yields the core between
    /// its polls (sets PTL_WAIT_YIELD): with more ranks than cores on a
    /// host, spinning holds the core the awaited rank needs.
    #[arg(long, value_enum, default_value = "auto")]
    wait_yield: YieldArg,
    /// With --progress thread: how long after the last thread waiting in the
    /// library left the progress thread takes the sockets back, in
    /// microseconds; default: the transport's, 200 (sets PTL_HANDBACK_US).
    #[arg(long, value_name = "MICROSECONDS")]
    handback: Option<u64>,
    /// SO_SNDBUF of every connection, in bytes (K, M, G: KiB, MiB, GiB);
    /// default: the kernel's autotuning (sets PTL_SNDBUF).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes_arg)]
    sndbuf: Option<usize>,
    /// SO_RCVBUF of every connection, in bytes (K, M, G: KiB, MiB, GiB);
    /// default: the kernel's autotuning (sets PTL_RCVBUF).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes_arg)]
    rcvbuf: Option<usize>,
    /// CPU placement of the ranks started here: `core` pins the i-th to the
    /// i-th CPU ptlrun may use (its affinity; round-robin when there are
    /// more ranks than CPUs, as `mpirun --bind-to core:overload-allowed`),
    /// with its threads (the progress thread among them) on the same CPU;
    /// `none` leaves placement to the scheduler, which moves ranks as it
    /// sees fit (on an oversubscribed host their pairings then change
    /// over time, and so do collective timings).
    #[arg(long, value_enum, default_value = "none")]
    cpu_bind: CpuBindArg,
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    no_prefix: bool,
    /// The program to run, followed by its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<OsString>,
}

fn parse_bytes_arg(s: &str) -> Result<usize, String> {
    crate::env::parse_bytes(s)
        .ok_or_else(|| format!("{s:?} is not a positive number of bytes (suffix K, M, G allowed)"))
}

fn parse_ring_arg(s: &str) -> Result<usize, String> {
    let n = parse_bytes_arg(s)?;
    if (4 << 10..=1 << 30).contains(&n) && n % 64 == 0 {
        Ok(n)
    } else {
        Err(format!(
            "{s:?}: a ring is a multiple of 64 bytes from 4K to 1G"
        ))
    }
}

fn parse_key(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| format!("{s:?} is not a 64-bit hexadecimal key"))
}

/// Run `ptlrun` with the process's command line; the exit code to return.
pub fn main() -> ExitCode {
    let args = Args::parse();
    if args.serve {
        let size = args.size.unwrap_or(0);
        let key = args.job_key.unwrap_or_else(fresh_job_key);
        let timeout = Duration::from_secs(args.bootstrap_timeout.max(1));
        let r = serve(args.listen, size, key, timeout, |addr| {
            println!("ptlrun: rendezvous for {size} ranks at {addr}; join with --rendezvous {addr} --job-key {key:x}");
        });
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ptlrun: {e}");
                ExitCode::from(1)
            }
        };
    }
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        eprintln!("ptlrun: no program given (see --help)");
        return ExitCode::from(2);
    };
    if args.ranks == 0 {
        eprintln!("ptlrun: -n N: at least one rank to start");
        return ExitCode::from(2);
    }
    let options = JobOptions {
        nal: match args.nal {
            NalArg::Auto => NalKind::Auto,
            NalArg::Shm => NalKind::Shm,
            NalArg::Tcp => NalKind::Tcp,
            NalArg::Udp => NalKind::Udp,
        },
        progress: match args.progress {
            ProgressArg::Thread => ProgressMode::Thread,
            ProgressArg::Poll => ProgressMode::Poll,
        },
        backend: match args.backend {
            BackendArg::Epoll => Backend::Epoll,
            BackendArg::IoUring => Backend::IoUring,
        },
        connect: match args.connect {
            ConnectArg::Lazy => ConnectMode::Lazy,
            ConnectArg::Eager => ConnectMode::Eager,
        },
        bind: args.bind,
        timeout: Duration::from_secs(args.bootstrap_timeout.max(1)),
        wait_spin: Duration::from_micros(args.wait_spin),
        // No option: PTL_WAIT_SPIN_BUSY_US reaches the ranks from ptlrun's
        // own environment.
        wait_spin_busy: None,
        wait_yield: match args.wait_yield {
            YieldArg::Auto => None,
            YieldArg::On => Some(true),
            YieldArg::Off => Some(false),
        },
        handback: args.handback.map(Duration::from_micros),
        udp_fault: args.udp_fault,
        udp_peer_timeout: args.udp_peer_timeout.map(|t| t.0),
        udp_max_datagram: args.udp_max_datagram.map(usize::from),
        udp_copy_above: args.udp_copy_above.map(|c| c.0),
        udp_connected_sends: !args.udp_unconnected,
        tcp_wake_per_message: !args.tcp_wake_per_segment,
        tcp_early_takeover: args.tcp_late_takeover.then_some(false),
        test_drives: None,
        coll_flat: None,
        send_buffer: args.sndbuf,
        recv_buffer: args.rcvbuf,
        shm_cma: !args.shm_no_cma,
        shm_ring: args.shm_ring,
        shm_cma_chunk: None,
        shm_early_takeover: None,
        // No option: PTL_PROGRESS_NICE reaches the ranks from ptlrun's own
        // environment.
        progress_nice: None,
        // Nor for PTL_PROGRESS_CPUS.
        progress_cpus: nal_sys::affinity::ProgressCpus::Launcher,
    };
    let mut spec = LaunchSpec::new(args.ranks, PathBuf::from(program));
    spec.args = command.collect();
    spec.size = args.size;
    spec.first_rank = args.first_rank;
    spec.job_key = args.job_key;
    spec.rendezvous = match args.rendezvous {
        Some(addr) => Rendezvous::Join(addr),
        None => Rendezvous::Serve(args.listen),
    };
    let total = args.size.unwrap_or(args.first_rank + args.ranks);
    if matches!(spec.rendezvous, Rendezvous::Serve(_)) && total > args.first_rank + args.ranks {
        // Other hosts need the key to join: draw it here and say it.
        let key = *spec.job_key.get_or_insert_with(fresh_job_key);
        eprintln!(
            "ptlrun: serving a job of {total} ranks; other hosts join with --rendezvous <this host>:{} --job-key {key:x}",
            args.listen.port()
        );
    }
    spec.options = options;
    spec.output = if args.no_prefix {
        Output::ForwardRaw
    } else {
        Output::Forward
    };
    spec.timeout = args.timeout.map(Duration::from_secs);
    spec.cpu_bind = match args.cpu_bind {
        CpuBindArg::None => CpuBind::None,
        CpuBindArg::Core => CpuBind::Core,
    };
    if let Err(e) = end_jobs_on_termination_signals() {
        eprintln!("ptlrun: {e}");
        return ExitCode::from(1);
    }
    match launch(&spec) {
        Ok(out) => {
            if let Some(why) = &out.reason {
                eprintln!("ptlrun: {why}");
            }
            ExitCode::from(out.status.clamp(0, 255) as u8)
        }
        Err(e) => {
            eprintln!("ptlrun: {e}");
            ExitCode::from(1)
        }
    }
}

/// A `--udp-peer-timeout` value (`None`: no liveness watch). A type of its
/// own: clap reads `Option<Option<_>>` as a flag whose value is optional.
#[derive(Clone, Copy, Debug)]
struct PeerTimeoutArg(Option<Duration>);

/// A `--udp-copy-above` value (`None`: never copy), a type of its own for
/// the same reason as [`PeerTimeoutArg`].
#[derive(Clone, Copy, Debug)]
struct CopyAboveArg(Option<u32>);

/// `--udp-copy-above`: a loss percentage, or `off`.
fn parse_udp_copy_above(v: &str) -> Result<CopyAboveArg, String> {
    nal_udp::parse_copy_above(v)
        .map(CopyAboveArg)
        .map_err(|e| e.to_string())
}

/// `--udp-peer-timeout`: milliseconds, 0 for none.
fn parse_udp_peer_timeout(v: &str) -> Result<PeerTimeoutArg, String> {
    nal_udp::parse_peer_timeout(v)
        .map(PeerTimeoutArg)
        .map_err(|e| e.to_string())
}
