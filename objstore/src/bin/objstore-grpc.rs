//! `objstore-grpc`: command-line client of `objstore-grpc-server`.

use std::fs::File;

use clap::Parser;
use objstore::cli::{bar, Cmd};
use objstore::grpc::client::GrpcClient;

/// Put, get, list, stat and delete objects on an `objstore-grpc-server`.
///
/// Object names are 1 to 255 ASCII letters, digits, '.', '_' and '-', not
/// starting with '.'. Data moves in 1 MiB chunks; large transfers show a
/// progress bar on a terminal (none when stderr is not one).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Server address (`host:port`, as the server printed it).
    #[arg(long, short)]
    connect: String,
    #[command(subcommand)]
    cmd: Cmd,
}

fn main() {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("objstore-grpc: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(args)) {
        eprintln!("objstore-grpc: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = GrpcClient::connect(&args.connect).await?;
    match args.cmd {
        Cmd::Put { name, file } => {
            let f = File::open(&file).map_err(|e| format!("opening {}: {e}", file.display()))?;
            let b = bar(f.metadata()?.len());
            let pb = b.clone();
            let size = c.put_reader(&name, f, move |n| pb.set_position(n)).await?;
            b.finish_and_clear();
            println!("{size} {name}");
        }
        Cmd::Get { name, file } => {
            let size = c.stat(&name).await?.size;
            let mut f =
                File::create(&file).map_err(|e| format!("creating {}: {e}", file.display()))?;
            let b = bar(size);
            let got = c.get_to(&name, &mut f, |n| b.set_position(n)).await;
            b.finish_and_clear();
            let done = got
                .map_err(Box::<dyn std::error::Error>::from)
                .and_then(|n| {
                    f.sync_all()?;
                    Ok(n)
                });
            match done {
                Ok(n) => println!("{n} {name}"),
                Err(e) => {
                    drop(f);
                    let _ = std::fs::remove_file(&file);
                    return Err(e);
                }
            }
        }
        Cmd::List => {
            for o in c.list().await? {
                println!("{} {}", o.size, o.name);
            }
        }
        Cmd::Delete { name } => c.delete(&name).await?,
        Cmd::Stat { name } => println!("{}", c.stat(&name).await?.size),
    }
    Ok(())
}
