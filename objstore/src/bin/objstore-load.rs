//! `objstore-load`: the load generator `ptl-bench` runs against
//! `objstore-grpc-server` (impl `rpc-tonic`), `objstore-server` (impl
//! `rpc-portals-tcp`) and `objstore-raw-server` (impl `rpc-raw-tcp`, the
//! floor): the same loop, the same clients, any of the three.

use std::sync::Barrier;
use std::time::Instant;

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use objstore::grpc::client::GrpcClient;

/// Time object gets or puts against an object-store server.
///
/// Prints one JSON object per repetition on stdout: `op`, `size`,
/// `clients`, `requests` (all clients together), `bytes`, `secs` (wall
/// time of the repetition) and, with `--server-pid`, `server_cpu_s` (user +
/// system CPU the server process used during the repetition, from
/// /proc/PID/stat: the counters getrusage(RUSAGE_SELF) reports).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Server address.
    #[arg(long)]
    connect: String,
    /// Operation to time.
    #[arg(long, value_enum)]
    op: Op,
    /// Object size in bytes.
    #[arg(long)]
    size: usize,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Requests per client per repetition.
    #[arg(long, default_value_t = 100)]
    requests: usize,
    /// Untimed requests per client before the first repetition.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Process id of the server, to measure its CPU time.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Which server: gRPC, portals-rpc or plain TCP (the floor).
    #[arg(long, value_enum, default_value = "tonic")]
    rpc: Rpc,
    /// Job key of a portals-rpc server, in hex.
    #[arg(long, default_value = "0b57")]
    key: String,
    /// portals-rpc: network interfaces of the client threads (`own`: one
    /// each, its own connection, like the gRPC clients; `shared`: one for
    /// all, one connection, the calls of all threads multiplexed on it).
    #[arg(long, value_enum, default_value = "own")]
    interfaces: Interfaces,
    /// portals-rpc: who moves the clients' data (`thread`: a progress
    /// thread per interface; `poll`: the calling threads while they wait,
    /// as tonic's clients are driven by the calls awaiting them).
    #[arg(long, value_enum, default_value = "poll")]
    progress: Progress,
    /// portals-rpc: waiting client threads yield the core between polls
    /// (`true`: for more client threads than cores, as here: 16 clients on
    /// 2 cores went from 10000 to 29500 gets/s with polling; even at one
    /// client it costs nothing measurable).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    wait_yield: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Interfaces {
    /// One network interface per client thread.
    Own,
    /// One network interface and one rpc client for all client threads.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Progress {
    /// A progress thread per interface.
    Thread,
    /// No progress thread.
    Poll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Rpc {
    /// `objstore-grpc-server`.
    Tonic,
    /// `objstore-server` (portals-rpc, standalone TCP).
    Portals,
    /// `objstore-raw-server` (plain TCP sockets: the floor under both).
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    /// Get one object (pre-stored) again and again.
    Get,
    /// Put an object (each client its own name) again and again.
    Put,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let args = Args::parse();
    let threaded = match args.rpc {
        Rpc::Portals => Some(portals_load(&args)),
        Rpc::Raw => Some(raw_load(&args)),
        Rpc::Tonic => None,
    };
    if let Some(done) = threaded {
        if let Err(e) = done {
            eprintln!("objstore-load: {e}");
            std::process::exit(1);
        }
        return;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("objstore-load: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(args)) {
        eprintln!("objstore-load: {e}");
        std::process::exit(1);
    }
}

/// User + system CPU seconds of process `pid` so far.
fn cpu_seconds(pid: u32) -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("unexpected /proc/PID/stat format")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (Some(u), Some(s)) = (f.get(11), f.get(12)) else {
        return Err("unexpected /proc/PID/stat format".into());
    };
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok((u.parse::<u64>()? + s.parse::<u64>()?) as f64 / hz)
}

async fn one(c: &mut GrpcClient, op: Op, name: &str, data: &Bytes) -> Result<u64, BoxError> {
    Ok(match op {
        Op::Get => c.get_discard(name).await?,
        Op::Put => c.put_bytes(name, data.clone()).await?,
    })
}

async fn run(args: Args) -> Result<(), BoxError> {
    let data = Bytes::from((0..args.size).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let get_name = format!("load-get-{}", args.size);
    let mut clients = Vec::with_capacity(args.clients.max(1));
    for _ in 0..args.clients.max(1) {
        clients.push(GrpcClient::connect(&args.connect).await?);
    }
    if args.op == Op::Get {
        clients[0].put_bytes(&get_name, data.clone()).await?;
    }
    for rep in 0..=args.reps {
        // Repetition 0 is the warm-up.
        let requests = if rep == 0 { args.warmup } else { args.requests };
        let cpu0 = args.server_pid.map(cpu_seconds).transpose()?;
        let t0 = Instant::now();
        let mut tasks = Vec::with_capacity(clients.len());
        for (k, mut c) in clients.drain(..).enumerate() {
            let name = match args.op {
                Op::Get => get_name.clone(),
                Op::Put => format!("load-put-{}-{k}", args.size),
            };
            let (data, op) = (data.clone(), args.op);
            tasks.push(tokio::spawn(async move {
                let mut bytes = 0u64;
                for _ in 0..requests {
                    bytes += one(&mut c, op, &name, &data).await?;
                }
                Ok::<_, BoxError>((c, bytes))
            }));
        }
        let mut bytes = 0u64;
        for t in tasks {
            let (c, b) = t.await??;
            clients.push(c);
            bytes += b;
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = match (cpu0, args.server_pid) {
            (Some(c0), Some(pid)) => Some(cpu_seconds(pid)? - c0),
            _ => None,
        };
        if rep > 0 {
            report(&args, requests * clients.len(), bytes, secs, cpu);
        }
    }
    Ok(())
}

fn report(args: &Args, requests: usize, bytes: u64, secs: f64, cpu: Option<f64>) {
    let line = serde_json::json!({
        "op": match args.op { Op::Get => "get", Op::Put => "put" },
        "size": args.size,
        "clients": args.clients.max(1),
        "requests": requests,
        "bytes": bytes,
        "secs": secs,
        "server_cpu_s": cpu,
    });
    println!("{line}");
}

/// One client thread's side of the repetitions: all client threads and
/// the main thread meet at the start and the end of each one (warm-up
/// included).
struct Reps<'a> {
    start: &'a Barrier,
    end: &'a Barrier,
    reps: usize,
    warmup: usize,
    requests: usize,
}

impl Reps<'_> {
    /// Run `one` request after request through every repetition, meeting
    /// the barriers even after a failure (so that the main thread never
    /// waits forever); the bytes moved in the timed repetitions, or the
    /// first failure (`failed`: one before the first request).
    fn run(
        &self,
        mut failed: Option<String>,
        mut one: impl FnMut() -> Result<u64, String>,
    ) -> Result<u64, String> {
        let mut total = 0u64;
        for rep in 0..=self.reps {
            self.start.wait();
            let count = if rep == 0 { self.warmup } else { self.requests };
            for _ in 0..count {
                if failed.is_some() {
                    break;
                }
                match one() {
                    Ok(b) if rep > 0 => total += b,
                    Ok(_) => {}
                    Err(e) => failed = Some(e),
                }
            }
            self.end.wait();
        }
        failed.map_or(Ok(total), Err)
    }
}

/// Run `client(k, reps)` on `--clients` threads, time every repetition
/// from the main thread and print it.
fn threaded_load<F>(args: &Args, client: F) -> Result<(), BoxError>
where
    F: Fn(usize, &Reps<'_>) -> Result<u64, String> + Sync,
{
    let n = args.clients.max(1);
    let start = Barrier::new(n + 1);
    let end = Barrier::new(n + 1);
    let reps = Reps {
        start: &start,
        end: &end,
        reps: args.reps,
        warmup: args.warmup,
        requests: args.requests,
    };
    let (results, bytes) = std::thread::scope(|s| -> Result<_, BoxError> {
        let threads: Vec<_> = (0..n)
            .map(|k| {
                let (f, r) = (&client, &reps);
                s.spawn(move || f(k, r))
            })
            .collect();
        let mut results = Vec::new();
        for rep in 0..=args.reps {
            let requests = if rep == 0 { args.warmup } else { args.requests };
            let cpu0 = args.server_pid.map(cpu_seconds).transpose();
            start.wait();
            let t0 = Instant::now();
            end.wait();
            let secs = t0.elapsed().as_secs_f64();
            let cpu = match (cpu0, args.server_pid) {
                (Ok(Some(c0)), Some(pid)) => cpu_seconds(pid).ok().map(|c| c - c0),
                _ => None,
            };
            if rep > 0 {
                results.push((requests * n, secs, cpu));
            }
        }
        let mut bytes = 0u64;
        for t in threads {
            bytes += t.join().map_err(|_| "a client thread panicked")??;
        }
        Ok((results, bytes))
    })?;
    // Every request moved the object: bytes per repetition are even.
    let per_rep = bytes / args.reps.max(1) as u64;
    for (requests, secs, cpu) in results {
        report(args, requests, per_rep, secs, cpu);
    }
    Ok(())
}

/// The same loop over portals-rpc: each client a thread, with its own
/// network interface or all on one (`--interfaces`).
fn portals_load(args: &Args) -> Result<(), BoxError> {
    use objstore::rpc::client::ObjClient;
    use portals_rpc::standalone::{self, DialOptions, ProgressMode};
    use portals_rpc::{Client, ClientConfig};

    let server: std::net::SocketAddr = args.connect.parse()?;
    let key = u64::from_str_radix(&args.key, 16)?;
    let opts = DialOptions {
        progress: match args.progress {
            Progress::Thread => ProgressMode::Thread,
            Progress::Poll => ProgressMode::Poll,
        },
        wait_yield: args.wait_yield,
    };
    let data: Vec<u8> = (0..args.size).map(|i| (i % 251) as u8).collect();
    let get_name = format!("load-get-{}", args.size);
    let shared_ni = match args.interfaces {
        Interfaces::Shared => Some(standalone::dial_with(server, key, opts)?),
        Interfaces::Own => None,
    };
    let shared_client = match &shared_ni {
        Some(ni) => Some(Client::connect(
            ni,
            standalone::SERVER_ID,
            ClientConfig::default(),
        )?),
        None => None,
    };
    let (op, size) = (args.op, args.size);
    threaded_load(args, |k, reps| {
        let own_ni = match &shared_client {
            Some(_) => None,
            None => Some(standalone::dial_with(server, key, opts).map_err(|e| e.to_string())),
        };
        let mut failure: Option<String> = None;
        let mut client = match (&shared_client, &own_ni) {
            (Some(c), _) => Some(ObjClient::shared(c)),
            (None, Some(Ok(ni))) => {
                Client::connect(ni, standalone::SERVER_ID, ClientConfig::default())
                    .map(ObjClient::new)
                    .map_err(|e| failure = Some(e.to_string()))
                    .ok()
            }
            (None, Some(Err(e))) => {
                failure = Some(e.clone());
                None
            }
            (None, None) => None,
        };
        if k == 0 && op == Op::Get {
            if let Some(c) = client.as_mut() {
                if let Err(e) = c.put_bytes(&get_name, &data) {
                    failure = Some(e.to_string());
                }
            }
        }
        let put_name = format!("load-put-{size}-{k}");
        let total = reps.run(failure, || {
            let c = client.as_mut().ok_or("no client")?;
            match op {
                Op::Get => c.get_discard(&get_name, size),
                Op::Put => c.put_bytes(&put_name, &data),
            }
            .map_err(|e| e.to_string())
        });
        drop(client);
        total
    })
}

/// The same loop over plain TCP (`objstore-raw-server`): each client a
/// thread with its own connection.
fn raw_load(args: &Args) -> Result<(), BoxError> {
    use objstore::raw::RawClient;

    let data: Vec<u8> = (0..args.size).map(|i| (i % 251) as u8).collect();
    let get_name = format!("load-get-{}", args.size);
    let (op, size) = (args.op, args.size);
    threaded_load(args, |k, reps| {
        let mut client = RawClient::connect(&args.connect).map_err(|e| e.to_string());
        if k == 0 && op == Op::Get {
            if let Ok(c) = client.as_mut() {
                if let Err(e) = c.put_bytes(&get_name, &data) {
                    client = Err(e.to_string());
                }
            }
        }
        let put_name = format!("load-put-{size}-{k}");
        let (mut c, failed) = match client {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        reps.run(failed, || {
            let c = c.as_mut().ok_or("no client")?;
            match op {
                Op::Get => c.get_discard(&get_name),
                Op::Put => c.put_bytes(&put_name, &data),
            }
            .map_err(|e| e.to_string())
        })
    })
}
