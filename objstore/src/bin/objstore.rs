//! `objstore`: command-line client of `objstore-server`.

use std::fs::File;

use clap::Parser;
use objstore::cli::{bar, Cmd};
use objstore::rpc::client::ObjClient;
use objstore::rpc::MAX_REPLY;
use portals_rpc::{standalone, Client, ClientConfig};

/// Put, get, list, stat and delete objects on an `objstore-server`
/// (portals-rpc, standalone over TCP).
///
/// Object names are 1 to 255 ASCII letters, digits, '.', '_' and '-', not
/// starting with '.'. Object data moves one-sided: the server pulls a
/// put's data from this process's buffer and pushes a get's data into it,
/// 16 MiB per call, so objects of any size stream through. Transfers of 16
/// MiB and more show a progress bar when stderr is a terminal.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Server address (`host:port`, as the server printed it).
    #[arg(long, short)]
    connect: std::net::SocketAddr,
    /// The server's job key, in hex.
    #[arg(long, default_value = "0b57", value_parser = parse_key)]
    key: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

fn parse_key(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s, 16).map_err(|e| format!("key {s}: {e} (hex expected)"))
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("objstore: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let ni = standalone::dial(args.connect, args.key)?;
    let cfg = ClientConfig {
        max_reply: MAX_REPLY,
        ..ClientConfig::default()
    };
    let mut c = ObjClient::new(Client::connect(&ni, standalone::SERVER_ID, cfg)?);
    match args.cmd {
        Cmd::Put { name, file } => {
            let mut f =
                File::open(&file).map_err(|e| format!("opening {}: {e}", file.display()))?;
            let b = bar(f.metadata()?.len());
            let size = c.put_reader(&name, &mut f, |n| b.set_position(n));
            b.finish_and_clear();
            println!("{} {name}", size?);
        }
        Cmd::Get { name, file } => {
            let size = c.stat(&name)?;
            let mut f =
                File::create(&file).map_err(|e| format!("creating {}: {e}", file.display()))?;
            let b = bar(size);
            let got = c.get_to(&name, &mut f, |n| b.set_position(n));
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
            for o in c.list()? {
                println!("{} {}", o.size, o.name);
            }
        }
        Cmd::Delete { name } => c.delete(&name)?,
        Cmd::Stat { name } => println!("{}", c.stat(&name)?),
    }
    Ok(())
}
