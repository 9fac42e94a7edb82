//! Running `ptl-bench` from the integration tests: with a deadline, and
//! checking that every output line is a sane record.

#![allow(dead_code)] // each test file uses a subset

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use portals_bench::record::Record;

/// What a finished command printed.
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
}

/// Run `ptl-bench args`, killing it after `secs`; panics (with its output)
/// if it times out or fails.
pub fn ptl_bench(args: &[&str], secs: u64) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptl-bench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ptl-bench");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        stdout: to.join().unwrap_or_default(),
        stderr: te.join().unwrap_or_default(),
    };
    match status {
        None => panic!(
            "ptl-bench {args:?} did not finish in {secs} s\nstdout:\n{}\nstderr:\n{}",
            ran.stdout, ran.stderr
        ),
        Some(st) => assert!(
            st.success(),
            "ptl-bench {args:?} failed: {st}\nstdout:\n{}\nstderr:\n{}",
            ran.stdout,
            ran.stderr
        ),
    }
    ran
}

/// Parse every stdout line as a record, check it, and check that it belongs
/// to `bench` and one of `impls`; returns the records.
pub fn records(out: &str, bench: &str, impls: &[&str]) -> Vec<Record> {
    let mut v = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let r = Record::parse_line(line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"));
        r.check().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.bench, bench, "{line}");
        assert!(
            impls.contains(&r.implementation.as_str()),
            "unexpected impl in {line}"
        );
        v.push(r);
    }
    v
}

/// Every (implementation, size) pair of `impls` × `sizes` appears `per` times.
pub fn covers(recs: &[Record], impls: &[&str], sizes: &[u64], per: usize) {
    for i in impls {
        for s in sizes {
            let n = recs
                .iter()
                .filter(|r| r.implementation == *i && r.size == *s)
                .count();
            assert_eq!(n, per, "{i} size {s}: {n} records, expected {per}");
        }
    }
}
