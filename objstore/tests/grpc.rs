//! The gRPC service end to end: random files (and an empty one) round trip
//! through a server in this process, errors come back typed, a failed put
//! stores nothing, a 2 GiB sparse file round trips (streamed, compared by
//! hash), and the binaries work together. Every test has a timeout.

#![cfg(feature = "grpc")]

use std::fs::File;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use objstore::grpc::client::{ClientError, GrpcClient};
use objstore::grpc::server::serve;
use objstore::grpc::CHUNK;
use objstore::store::Store;
use rand::{Rng, SeedableRng};

mod common;
use common::{files_in, random_file, same_contents, sparse_file, Failing};

/// A server on a free port, its runtime, and its store directory.
struct Server {
    rt: tokio::runtime::Runtime,
    addr: String,
    dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let store = Arc::new(Store::open(dir.path()).expect("store"));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        rt.spawn(serve(store, listener, async move {
            let _ = rx.await;
        }));
        Server {
            rt,
            addr,
            dir,
            stop: Some(tx),
        }
    }

    /// Run `f` against a fresh client, failing after `limit`.
    fn with_client<T>(&self, limit: Duration, f: impl AsyncFnOnce(GrpcClient) -> T) -> T {
        self.rt.block_on(async {
            tokio::time::timeout(limit, async {
                let c = GrpcClient::connect(&self.addr).await.expect("connect");
                f(c).await
            })
            .await
            .expect("test timed out")
        })
    }

    fn files(&self) -> Vec<String> {
        files_in(self.dir.path())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

#[test]
fn random_files_and_an_empty_one_round_trip() {
    let server = Server::start();
    let local = tempfile::tempdir().expect("tempdir");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
    let mut sizes = vec![0, 1, 4096, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17];
    sizes.push(rng.gen_range(1..5 * CHUNK));
    let files: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            (
                format!("obj-{i}"),
                random_file(local.path(), &format!("in-{i}"), s, &mut rng),
            )
        })
        .collect();
    server.with_client(Duration::from_secs(120), async |mut c| {
        for (name, path) in &files {
            let f = File::open(path).expect("open");
            let n = c.put_reader(name, f, |_| {}).await.expect("put");
            assert_eq!(n, std::fs::metadata(path).expect("meta").len());
        }
        let listed = c.list().await.expect("list");
        assert_eq!(listed.len(), files.len());
        for ((name, path), &size) in files.iter().zip(&sizes) {
            assert_eq!(c.stat(name).await.expect("stat").size, size as u64);
            let out = local.path().join(format!("{name}.back"));
            let mut f = File::create(&out).expect("create");
            let got = c.get_to(name, &mut f, |_| {}).await.expect("get");
            assert_eq!(got, size as u64);
            assert!(same_contents(&out, path), "{name} differs");
        }
        c.delete("obj-0").await.expect("delete");
        assert_eq!(c.list().await.expect("list").len(), files.len() - 1);
    });
}

#[test]
fn errors_come_back_typed() {
    let server = Server::start();
    server.with_client(Duration::from_secs(60), async |mut c| {
        let code = |r: Result<_, ClientError>| match r {
            Err(ClientError::Status(s)) => s.code(),
            other => panic!("expected a status, got {other:?}"),
        };
        assert_eq!(
            code(c.stat("nope").await.map(|_| ())),
            tonic::Code::NotFound
        );
        assert_eq!(code(c.delete("nope").await), tonic::Code::NotFound);
        assert_eq!(
            code(c.get_discard("nope").await.map(|_| ())),
            tonic::Code::NotFound
        );
        assert_eq!(
            code(
                c.put_bytes("../escape", bytes::Bytes::from_static(b"x"))
                    .await
                    .map(|_| ())
            ),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            code(c.stat(".hidden").await.map(|_| ())),
            tonic::Code::InvalidArgument
        );
    });
    assert!(server.files().is_empty());
}

#[test]
fn a_put_whose_source_fails_stores_nothing() {
    let server = Server::start();
    server.with_client(Duration::from_secs(60), async |mut c| {
        let r = c.put_reader("broken", Failing(3 * CHUNK + 5), |_| {}).await;
        assert!(matches!(r, Err(ClientError::Local { .. })), "{r:?}");
    });
    // The server notices the cancelled stream and drops its temp file;
    // give it a moment (sleeping, bounded).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.files().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(server.files().is_empty(), "{:?}", server.files());
}

/// A put stream that ends cleanly without its last message — what a
/// client whose source failed may send when its dropped stream reaches the
/// server before the cancellation — stores nothing: the server answers
/// `Aborted`. (The client test above met this now and then: the object was
/// committed from the chunks sent before the failure.)
#[test]
fn a_put_stream_that_ends_without_its_last_message_stores_nothing() {
    use objstore::grpc::proto::object_store_client::ObjectStoreClient;
    use objstore::grpc::proto::PutChunk;
    let server = Server::start();
    let addr = format!("http://{}", server.addr);
    let status = server.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            let mut raw = ObjectStoreClient::connect(addr).await.expect("connect");
            let chunk = |name: &str, last: bool| PutChunk {
                name: name.into(),
                data: bytes::Bytes::from_static(b"partial"),
                last,
            };
            let cut = vec![chunk("cut", false), chunk("", false)];
            let cut = raw.put(tokio_stream::iter(cut)).await;
            let whole = vec![chunk("whole", false), chunk("", true)];
            let whole = raw.put(tokio_stream::iter(whole)).await;
            (
                cut.map(|r| r.into_inner().size),
                whole.map(|r| r.into_inner().size),
            )
        })
        .await
        .expect("test timed out")
    });
    match status.0 {
        Err(s) => assert_eq!(s.code(), tonic::Code::Aborted, "{s:?}"),
        Ok(size) => panic!("a put stream without its last message stored {size} bytes"),
    }
    assert_eq!(status.1.expect("the complete put"), 14);
    assert_eq!(server.files(), vec!["whole".to_string()]);
}

/// 2 GiB sparse file with random blocks at the start, middle and end:
/// streamed up and down in chunks, compared chunk by chunk. About 2 × 2 GiB
/// of disk writes: 51 s measured on the 2-core machine at load 11 (nextest
/// runs it alone, see `.config/nextest.toml`).
#[test]
fn big_sparse_file_round_trips() {
    const SIZE: u64 = 2 << 30;
    let server = Server::start();
    let local = tempfile::tempdir().expect("tempdir");
    let src = sparse_file(local.path(), "sparse", SIZE);
    let back = local.path().join("back");
    let t0 = Instant::now();
    server.with_client(Duration::from_secs(600), async |mut c| {
        let f = File::open(&src).expect("open");
        assert_eq!(c.put_reader("big", f, |_| {}).await.expect("put"), SIZE);
        let mut out = File::create(&back).expect("create");
        assert_eq!(c.get_to("big", &mut out, |_| {}).await.expect("get"), SIZE);
    });
    let t1 = Instant::now();
    assert!(same_contents(&back, &src));
    eprintln!(
        "2 GiB: put + get {:.1} s, compare {:.1} s",
        (t1 - t0).as_secs_f64(),
        t1.elapsed().as_secs_f64()
    );
}

/// Wait for `child` at most `limit`; kill it after that.
fn wait_or_kill(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process timed out");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start server binary `exe` on store `dir`; the process and the address
/// its first line names (read on a thread, so that a silent server
/// cannot hang the test: killed after 30 s).
fn spawn_server(exe: &str, dir: &std::path::Path) -> (std::process::Child, String) {
    let mut server = Command::new(exe)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut stdout = server.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while stdout.read(&mut b).map(|n| n == 1).unwrap_or(false) && b[0] != b'\n' {
            line.push(b[0]);
        }
        let _ = tx.send(String::from_utf8_lossy(&line).into_owned());
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    match line.strip_prefix("listening on ") {
        Some(addr) => (server, addr.to_string()),
        None => {
            let _ = server.kill();
            let _ = server.wait();
            panic!("{exe} did not start: {line:?}");
        }
    }
}

/// The gRPC CLI at `addr`: its success and stdout.
fn cli(addr: &str, args: &[&str]) -> (bool, String) {
    let (ok, out, _) = run_cli(env!("CARGO_BIN_EXE_objstore-grpc"), addr, args);
    (ok, out)
}

/// Run `bin --connect addr args` (killed after 60 s); its success, stdout
/// and stderr.
fn run_cli(bin: &str, addr: &str, args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(bin)
        .arg("--connect")
        .arg(addr)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    let status = wait_or_kill(&mut child, Duration::from_secs(60));
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    (status.success(), out, err)
}

#[test]
fn server_and_cli_binaries_work_together() {
    let store = tempfile::tempdir().expect("tempdir");
    let local = tempfile::tempdir().expect("tempdir");
    let (mut server, addr) = spawn_server(env!("CARGO_BIN_EXE_objstore-grpc-server"), store.path());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let input = random_file(local.path(), "in", 2 * CHUNK + 3, &mut rng);
    let output = local.path().join("out");
    let run = || -> Result<(), String> {
        let (ok, out) = cli(&addr, &["put", "thing", input.to_str().ok_or("path")?]);
        if !ok || out.trim() != format!("{} thing", 2 * CHUNK + 3) {
            return Err(format!("put: {ok} {out}"));
        }
        let (ok, out) = cli(&addr, &["stat", "thing"]);
        if !ok || out.trim() != (2 * CHUNK + 3).to_string() {
            return Err(format!("stat: {ok} {out}"));
        }
        let (ok, _) = cli(&addr, &["get", "thing", output.to_str().ok_or("path")?]);
        if !ok || !same_contents(&output, &input) {
            return Err("get: differs".into());
        }
        let (ok, out) = cli(&addr, &["list"]);
        if !ok || out.trim() != format!("{} thing", 2 * CHUNK + 3) {
            return Err(format!("list: {ok} {out}"));
        }
        let (ok, _) = cli(&addr, &["delete", "thing"]);
        let (gone, _) = cli(&addr, &["stat", "thing"]);
        let (bad, _) = cli(&addr, &["stat", "../x"]);
        if !ok || gone || bad {
            return Err(format!(
                "delete {ok}, stat after delete {gone}, bad name {bad}"
            ));
        }
        Ok(())
    };
    let result = run();
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_or_kill(&mut server, Duration::from_secs(30));
    result.expect("CLI session");
    assert!(status.success(), "server exit: {status}");
}

/// A server that accepts connections and never answers (a stalled
/// process, a service of another kind waiting for its own greeting) is
/// named as not an object store once the connect probe's time is up,
/// instead of leaving the client waiting for ever.
#[test]
fn a_server_that_never_answers_is_named_once_the_probe_times_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    // Accept (the kernel would anyway) and hold every connection open,
    // unread, until the test ends.
    let holder = std::thread::spawn(move || {
        listener.set_nonblocking(true).expect("nonblocking");
        let mut held = Vec::new();
        while done_rx.try_recv().is_err() {
            match listener.accept() {
                Ok((c, _)) => held.push(c),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let r = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            GrpcClient::connect_within(&addr, Duration::from_millis(300)),
        )
        .await
    });
    let _ = done_tx.send(());
    let _ = holder.join();
    match r {
        Ok(Err(ClientError::NotAnObjectStore { addr: a, why })) => {
            assert_eq!(a, addr);
            assert!(why.contains("no answer"), "{why}");
        }
        other => panic!("a silent server: {other:?}"),
    }
}

/// A client pointed at the other kind of server says so, instead of a
/// bare transport error: the gRPC client and CLI at a portals-rpc
/// `objstore-server`, the portals-rpc CLI at this gRPC server.
#[test]
fn a_client_pointed_at_the_other_kind_of_server_says_so() {
    let store = tempfile::tempdir().expect("tempdir");
    let (mut portals, portals_addr) =
        spawn_server(env!("CARGO_BIN_EXE_objstore-server"), store.path());
    let check = || -> Result<(), String> {
        let grpc = Server::start();
        let r = grpc.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), GrpcClient::connect(&portals_addr)).await
        });
        match r {
            Ok(Err(ClientError::NotAnObjectStore { addr, .. })) if addr == portals_addr => {}
            other => return Err(format!("gRPC client at objstore-server: {other:?}")),
        }
        let (ok, _, err) = run_cli(
            env!("CARGO_BIN_EXE_objstore-grpc"),
            &portals_addr,
            &["list"],
        );
        if ok || !err.contains("use the `objstore` client") {
            return Err(format!("objstore-grpc at objstore-server: {ok} {err}"));
        }
        let (ok, _, err) = run_cli(env!("CARGO_BIN_EXE_objstore"), &grpc.addr, &["list"]);
        if ok || !err.contains("not a portals-rpc server") {
            return Err(format!("objstore at objstore-grpc-server: {ok} {err}"));
        }
        Ok(())
    };
    let result = check();
    let _ = portals.kill();
    let _ = portals.wait();
    if let Err(e) = result {
        panic!("{e}");
    }
}
