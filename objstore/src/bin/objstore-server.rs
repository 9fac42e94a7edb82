//! `objstore-server`: the object store over `portals-rpc`, standalone
//! over TCP.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use objstore::rpc::server::{GetFrom, ObjectService, PULL_DEPTH, PUSH_DEPTH};
use objstore::rpc::{BULK_CHUNK, CALL_CHUNK, MAX_REQUEST};
use objstore::store::Store;
use portals_rpc::{standalone, HandlerError, Request, Service, ServiceConfig};

/// Serve a directory of objects over portals-rpc (standalone, TCP).
///
/// Prints `listening on ADDR` on stdout once clients can connect
/// (`objstore --connect ADDR`). Clients must present the same job key.
/// Runs until killed; the store is crash-safe (a put in flight leaves no
/// object and its temporary file is removed at the next start).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Directory holding the objects (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Job key clients must present, in hex (a shared secret that keeps
    /// strangers out; it travels in clear).
    #[arg(long, default_value = "0b57", value_parser = parse_key)]
    key: u64,
    /// Service threads (each runs one request at a time).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Bulk chunks of a put in flight at once (1: no overlap of the
    /// network with the file writes).
    #[arg(long, default_value_t = PULL_DEPTH)]
    pull_depth: usize,
    /// Bulk chunks of a get in flight at once (1: each waits for the
    /// previous one's acknowledgment).
    #[arg(long, default_value_t = PUSH_DEPTH)]
    push_depth: usize,
    /// Bulk chunk size in KiB (the unit the server moves data in).
    #[arg(long, default_value_t = BULK_CHUNK >> 10)]
    chunk_kib: usize,
    /// Read gets' data into buffers (one copy) instead of sending it
    /// from the mapped file.
    #[arg(long)]
    read_gets: bool,
    /// Who moves the data: a progress thread (`thread`), or the service
    /// threads while they wait for requests and transfers (`poll`; they
    /// yield the core between polls).
    #[arg(long, value_enum, default_value = "thread")]
    progress: Progress,
}

/// `--progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Progress {
    /// A progress thread.
    Thread,
    /// The waiting service threads.
    Poll,
}

fn parse_key(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s, 16).map_err(|e| format!("key {s}: {e} (hex expected)"))
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("objstore-server: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(Store::open(&args.dir)?);
    let opts = match args.progress {
        Progress::Thread => standalone::DialOptions::default(),
        Progress::Poll => standalone::DialOptions {
            progress: standalone::ProgressMode::Poll,
            wait_yield: true,
        },
    };
    let (ni, addr) = standalone::listen_with(args.listen, args.key, opts)?;
    let cfg = ServiceConfig {
        threads: args.threads.max(1),
        // Room for 16 clients' small requests at once before back-off.
        buffers: 8,
        // Small objects travel inside the request.
        max_request: MAX_REQUEST,
        buffer_size: 128 << 10,
        bulk_chunk: args.chunk_kib.max(1).saturating_mul(1024).min(CALL_CHUNK),
        ..ServiceConfig::default()
    };
    let svc = Service::new(&ni, cfg)?;
    let handler = ObjectService::new(store)
        .with_pull_depth(args.pull_depth)
        .with_push_depth(args.push_depth)
        .with_get_from(if args.read_gets {
            GetFrom::Read
        } else {
            GetFrom::Map
        });
    objstore::cli::announce_listening(&addr)?;
    svc.serve(&|req: &mut Request<'_>| -> Result<Vec<u8>, HandlerError> { handler.handle(req) })?;
    Ok(())
}
