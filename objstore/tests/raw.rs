//! The plain-TCP object store (the benchmark's floor) end to end: objects
//! of every size class round trip, errors come back as the server's
//! message on a connection that keeps serving, a client gone mid-put
//! leaves nothing behind, and `objstore-load --rpc raw` drives the binary.
//! nextest ends any of these after 5 minutes; reads also time out.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use objstore::raw::{serve, RawClient, RawError, CHUNK, OP_PUT};
use objstore::store::Store;
use rand::{RngCore, SeedableRng};

mod common;
use common::files_in;

/// A server on a free port in this process, and its store directory.
struct Server {
    addr: String,
    dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(Store::open(dir.path()).expect("store"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        // Serves until the test process ends.
        std::thread::spawn(move || serve(store, listener));
        Server { addr, dir }
    }

    fn client(&self) -> RawClient {
        let c = RawClient::connect(&self.addr).expect("connect");
        c.set_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        c
    }

    fn files(&self) -> Vec<String> {
        files_in(self.dir.path())
    }

    /// Wait (bounded) until the store directory holds exactly `want`.
    fn wait_for_files(&self, want: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.files() != want {
            assert!(
                Instant::now() < deadline,
                "store holds {:?}, expected {want:?}",
                self.files()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn objects_of_every_size_class_round_trip_on_one_connection() {
    let server = Server::start();
    let mut c = server.client();
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    for (i, size) in [0, 1, 4096, CHUNK - 1, CHUNK, CHUNK + 7, 3 * CHUNK + 12345]
        .into_iter()
        .enumerate()
    {
        let mut data = vec![0u8; size];
        rng.fill_bytes(&mut data);
        let name = format!("obj-{i}");
        assert_eq!(c.put_bytes(&name, &data).expect("put"), size as u64);
        let mut back = Vec::new();
        assert_eq!(c.get_to(&name, &mut back).expect("get"), size as u64);
        assert!(back == data, "object of {size} bytes came back different");
        assert_eq!(c.get_discard(&name).expect("get"), size as u64);
    }
    // A put replaces the object whole.
    c.put_bytes("obj-2", b"short").expect("put");
    let mut back = Vec::new();
    c.get_to("obj-2", &mut back).expect("get");
    assert_eq!(back, b"short");
}

#[test]
fn errors_come_back_as_the_servers_message_and_the_connection_keeps_serving() {
    let server = Server::start();
    let mut c = server.client();
    match c.get_discard("missing") {
        Err(RawError::Server(m)) => assert!(m.contains("no object named"), "{m}"),
        other => panic!("get of a missing object gave {other:?}"),
    }
    // The same connection serves on after a refused get.
    c.put_bytes("there", b"abc")
        .expect("put after a refused get");
    assert_eq!(c.get_discard("there").expect("get"), 3);
    assert!(matches!(
        c.get_discard(&"x".repeat(256)),
        Err(RawError::NameTooLong)
    ));
    // A refused put ends its connection (the object's bytes are not read)
    // and stores nothing; the client reports the server's reason.
    match c.put_bytes("../escape", &[7u8; 3 * CHUNK]) {
        Err(RawError::Server(m)) => assert!(m.contains("invalid object name"), "{m}"),
        Err(RawError::Io(_)) => {} // the close raced the answer
        other => panic!("put of a bad name gave {other:?}"),
    }
    server.wait_for_files(&["there"]);
    let mut c = server.client();
    assert_eq!(c.get_discard("there").expect("a new connection"), 3);
}

#[test]
fn a_client_gone_mid_put_leaves_nothing_and_the_server_serves_others() {
    let server = Server::start();
    let mut conn = TcpStream::connect(&server.addr).expect("connect");
    let name = b"half";
    let mut m = vec![OP_PUT, name.len() as u8];
    m.extend_from_slice(name);
    m.extend_from_slice(&(8 * CHUNK as u64).to_le_bytes());
    m.extend_from_slice(&vec![1u8; CHUNK + 100]);
    conn.write_all(&m).expect("half a put");
    // The server is inside the put, waiting for the rest.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.files().iter().any(|f| f.starts_with(".tmp-")) {
        assert!(
            Instant::now() < deadline,
            "no put began: {:?}",
            server.files()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(conn);
    server.wait_for_files(&[]);
    let mut c = server.client();
    c.put_bytes("whole", &[2u8; 1000]).expect("put");
    server.wait_for_files(&["whole"]);
}

/// `objstore-raw-server` on a free port; its address once it says it
/// listens.
#[cfg(feature = "grpc")]
fn spawn_server(dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_objstore-raw-server"))
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start objstore-raw-server");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("read");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address line: {line:?}"))
        .to_string();
    (child, addr)
}

#[cfg(feature = "grpc")]
#[test]
fn the_load_generator_drives_the_raw_server_binary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut server, addr) = spawn_server(dir.path());
    for op in ["put", "get"] {
        let out = Command::new(env!("CARGO_BIN_EXE_objstore-load"))
            .args(["--rpc", "raw", "--connect", &addr, "--op", op])
            .args(["--size", "65536", "--clients", "2", "--requests", "5"])
            .args(["--warmup", "1", "--reps", "2"])
            .args(["--server-pid", &server.id().to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("run objstore-load");
        assert!(
            out.status.success(),
            "objstore-load {op}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 2, "one line per repetition");
        for l in &lines {
            assert_eq!(l["requests"], 10, "{op}: {l}");
            assert_eq!(l["bytes"], 10 * 65536, "{op}: {l}");
            assert!(l["server_cpu_s"].is_number(), "{op}: {l}");
        }
    }
    let _ = server.kill();
    let _ = server.wait();
}
