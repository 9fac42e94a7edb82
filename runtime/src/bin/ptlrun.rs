//! `ptlrun`: start a portals-rs job of N local processes.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use nal_tcp::{Backend, ConnectMode, ProgressMode};
use portals_runtime::launch::{launch, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum NalArg {
    /// TCP: one connection per pair of processes.
    Tcp,
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
enum ConnectArg {
    /// Connect on the first message to a peer.
    Lazy,
    /// Connect to every peer at start-up.
    Eager,
}

/// Start a portals-rs job: N copies of PROGRAM on this machine, connected by
/// the chosen transport.
///
/// Every rank gets its rank, the job size, a fresh job key and the address of
/// a rendezvous server in its environment (PTL_RANK, PTL_SIZE, PTL_JOB_KEY,
/// PTL_BOOTSTRAP, plus PTL_NAL, PTL_PROGRESS, PTL_BACKEND, PTL_CONNECT,
/// PTL_BIND, PTL_BOOTSTRAP_TIMEOUT, PTL_WAIT_SPIN_US for the options below).
/// Each rank's output is forwarded line by line, prefixed with `[rank] `.
/// The first rank that fails (non-zero exit status or a signal) fails the
/// job: the other ranks are terminated and ptlrun exits with that rank's
/// status (128 + signal for a signal, 124 if --timeout expired).
#[derive(Parser, Debug)]
#[command(name = "ptlrun", version, about, long_about)]
struct Args {
    /// Number of processes (ranks).
    #[arg(short = 'n', long = "np", value_name = "N")]
    ranks: u32,
    /// Transport.
    #[arg(long, value_enum, default_value = "tcp")]
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
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    no_prefix: bool,
    /// The program to run, followed by its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<OsString>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        eprintln!("ptlrun: no program given");
        return ExitCode::from(2);
    };
    let options = JobOptions {
        nal: match args.nal {
            NalArg::Tcp => NalKind::Tcp,
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
    };
    let mut spec = LaunchSpec::new(args.ranks, PathBuf::from(program));
    spec.args = command.collect();
    spec.options = options;
    spec.output = if args.no_prefix {
        Output::ForwardRaw
    } else {
        Output::Forward
    };
    spec.timeout = args.timeout.map(Duration::from_secs);
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
