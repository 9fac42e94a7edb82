//! `objstore-raw-server`: the object store over plain TCP sockets, the
//! floor the benchmark measures both services against (`objstore::raw`).

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use objstore::store::Store;

/// Serve a directory of objects over plain TCP: a thread per connection,
/// a few bytes of header per request, the object's bytes on the connection
/// after it (the protocol is in the `objstore::raw` documentation).
///
/// The floor under `objstore-server` (portals-rpc) and
/// `objstore-grpc-server` in `ptl-bench`'s rpc benchmarks (`rpc-raw-tcp`):
/// the same store, no RPC layer. It has no job key and no resends: do not
/// expose it beyond the benchmark. Prints `listening on ADDR` on stdout
/// once clients can connect (`objstore-load --rpc raw --connect ADDR`);
/// runs until killed.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Directory holding the objects (created if missing).
    #[arg(long)]
    dir: PathBuf,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("objstore-raw-server: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(Store::open(&args.dir)?);
    let listener = TcpListener::bind(&args.listen)?;
    objstore::cli::announce_listening(&listener.local_addr()?)?;
    objstore::raw::serve(store, listener)?;
    Ok(())
}
