//! `objstore-grpc-server`: the object store over gRPC (the benchmark's peer
//! of the portals-rpc server).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use objstore::grpc::server::serve;
use objstore::store::Store;

/// Serve a directory of objects over gRPC until SIGTERM or SIGINT.
///
/// Prints `listening on ADDR` (the actual address, useful with port 0) on
/// stdout once it accepts connections.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Directory holding the objects (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Worker threads of the runtime (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("objstore-grpc-server: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(Store::open(&args.dir)?);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    rt.build()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen).await?;
        let addr = listener.local_addr()?;
        objstore::cli::announce_listening(&addr)?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        serve(store, listener, shutdown).await?;
        Ok(())
    })
}
