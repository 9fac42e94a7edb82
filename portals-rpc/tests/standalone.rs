//! Standalone mode: a server started on its own (`rpc_check listen`)
//! outlives client processes that come and go (`rpc_check dial`), one
//! after another and side by side; a client with the wrong job key is
//! refused. Every process has a time limit.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const RPC: &str = env!("CARGO_BIN_EXE_rpc_check");
const KEY: &str = "5eed0f0a11";
const LIMIT: Duration = Duration::from_secs(120);

/// Wait for `child` until the deadline, killing it then.
fn wait(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("output"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "{what} ran past {LIMIT:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

fn client(addr: &str, key: &str, mode: &str) -> Child {
    Command::new(RPC)
        .args(["dial", addr, key, mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client")
}

fn assert_ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{what}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Kills the server if the test fails before it stopped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn a_standalone_server_outlives_clients_that_come_and_go() {
    let mut server = KillOnDrop(
        Command::new(RPC)
            .args(["listen", "127.0.0.1:0", KEY])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn server"),
    );
    let mut lines = BufReader::new(server.0.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(|l| l.ok()).unwrap_or_default();
    let addr = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("server said {first:?}"))
        .to_string();
    // The rest of the server's output, read as it comes so it never blocks.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    for i in 0..2 {
        assert_ok(
            &wait(client(&addr, KEY, "incr"), "client"),
            &format!("client {i}"),
        );
    }
    let both = [client(&addr, KEY, "incr"), client(&addr, KEY, "incr")];
    for (i, c) in both.into_iter().enumerate() {
        assert_ok(&wait(c, "client"), &format!("concurrent client {i}"));
    }
    assert_ok(
        &wait(client(&addr, "badc0ffee", "badkey"), "bad key"),
        "client with a wrong key",
    );
    let stop = assert_ok(
        &wait(client(&addr, KEY, "stop"), "stopper"),
        "stopping client",
    );
    // Four clients of 60 increments each, every one applied once.
    assert!(stop.contains("counter 240"), "{stop}");

    let status = {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(s) = server.0.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() >= deadline {
                panic!("the server did not stop");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let out = rest.join().expect("reader").join("\n");
    assert!(
        status.success() && out.contains("OK listen"),
        "{status:?}\n{out}"
    );
}
