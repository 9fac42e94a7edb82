//! The C programs, built with the system `cc` against `include/portals.h`
//! and `libportals.so`, the flags coming from the crate's `portals.pc`
//! through `pkg-config` (as a C user builds them), and run: the error-path
//! test alone (a job of one), the examples as two-rank jobs started the
//! way `ptlrun -n 2` starts them (its launcher library), over each
//! transport. Every run has a timeout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nal_tcp::ProgressMode;
use portals_runtime::launch::{launch, LaunchOutcome, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};

const JOB_LIMIT: Duration = Duration::from_secs(120);

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `libportals.so`: cargo builds it with the
/// library's rlib, beside this test's executable (`target/<profile>/deps`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps").to_path_buf();
    assert!(
        deps.join("libportals.so").exists(),
        "libportals.so is not in {} (the crate's lib must list the rlib \
         crate type, so that cargo builds it for the tests)",
        deps.display()
    );
    deps
}

/// A `portals.pc` for the build tree, from `portals.pc.in`: the header
/// directory and the library directory of this build.
fn pkg_config_dir(out: &Path, lib: &Path) -> PathBuf {
    let dir = out.join("pkgconfig");
    std::fs::create_dir_all(&dir).expect("pkgconfig dir");
    let template =
        std::fs::read_to_string(manifest().join("portals.pc.in")).expect("portals.pc.in");
    let pc = template
        .replace("@PREFIX@", &manifest().display().to_string())
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
        .replace("libdir=${prefix}/lib", &format!("libdir={}", lib.display()));
    std::fs::write(dir.join("portals.pc"), pc).expect("write portals.pc");
    dir
}

/// `cc` flags: from `pkg-config --cflags --libs portals` if pkg-config is
/// installed, else the same flags written out.
fn flags(out: &Path, lib: &Path) -> Vec<String> {
    let pc_dir = pkg_config_dir(out, lib);
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "portals"])
        .env("PKG_CONFIG_PATH", &pc_dir)
        .output();
    let mut f: Vec<String> = match pc {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(String::from)
            .collect(),
        Ok(o) => panic!(
            "pkg-config refused portals.pc: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => {
            eprintln!("pkg-config is not installed: using the flags it would give");
            vec![
                format!("-I{}", manifest().join("include").display()),
                format!("-L{}", lib.display()),
                "-lportals".into(),
            ]
        }
    };
    f.push(format!("-Wl,-rpath,{}", lib.display()));
    f
}

/// Build the C programs once per test process; their paths by name.
fn programs() -> &'static Vec<(String, PathBuf)> {
    static BUILT: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    BUILT.get_or_init(|| {
        // One directory per test process: nextest runs each test in a
        // process of its own, and one must not rewrite a program another
        // is running.
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("portals-capi-c-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("output dir");
        let lib = lib_dir();
        let flags = flags(&out, &lib);
        let sources = [
            manifest().join("tests/c/errors.c"),
            manifest().join("examples/c/pingpong.c"),
            manifest().join("examples/c/mpi_send.c"),
        ];
        sources
            .iter()
            .map(|src| {
                let name = src
                    .file_stem()
                    .expect("stem")
                    .to_string_lossy()
                    .into_owned();
                let exe = out.join(&name);
                let status = Command::new("cc")
                    .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
                    .arg(&exe)
                    .arg(src)
                    .args(&flags)
                    .status()
                    .expect("run cc");
                assert!(status.success(), "cc failed on {}", src.display());
                (name, exe)
            })
            .collect()
    })
}

fn program(name: &str) -> PathBuf {
    programs()
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.clone())
        .expect("built")
}

fn run_job(name: &str, nal: NalKind, args: &[&str]) -> LaunchOutcome {
    run_job_in(name, nal, ProgressMode::Thread, args)
}

fn run_job_in(name: &str, nal: NalKind, progress: ProgressMode, args: &[&str]) -> LaunchOutcome {
    let mut spec = LaunchSpec::new(2, program(name));
    spec.args = args.iter().map(Into::into).collect();
    spec.options = JobOptions {
        nal,
        progress,
        timeout: Duration::from_secs(60),
        ..JobOptions::default()
    };
    spec.output = Output::Capture;
    spec.timeout = Some(JOB_LIMIT);
    launch(&spec).expect("launch")
}

fn assert_ok(out: &LaunchOutcome, ok: &str, what: &str) {
    let lines = out.transcript();
    assert_eq!(out.status, 0, "{what}: {:?}\n{}", out.reason, lines);
    for r in 0..2 {
        assert!(
            out.stdout_of(r).contains(ok),
            "{what}: rank {r} did not print {ok:?}\n{}",
            lines
        );
    }
}

#[test]
fn errors_c_gets_the_documented_code_from_every_error_path() {
    let mut child = Command::new(program("errors"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start errors");
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > JOB_LIMIT {
            // A failed EXPECT does not stop the program, and a wait after
            // it may then never end: show what it printed, the failed
            // check's line among it, not only that it hung.
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "errors did not finish within {JOB_LIMIT:?}; it printed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK errors"),
        "errors failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pingpong_c_over_tcp() {
    assert_ok(
        &run_job("pingpong", NalKind::Tcp, &["200"]),
        "OK pingpong",
        "tcp",
    );
}

#[test]
fn pingpong_c_over_shm() {
    assert_ok(
        &run_job("pingpong", NalKind::Shm, &["200"]),
        "OK pingpong",
        "shm",
    );
}

#[test]
fn pingpong_c_over_udp() {
    assert_ok(
        &run_job("pingpong", NalKind::Udp, &["200"]),
        "OK pingpong",
        "udp",
    );
}

#[test]
fn mpi_send_c_over_tcp() {
    assert_ok(
        &run_job("mpi_send", NalKind::Tcp, &[]),
        "OK mpi_send",
        "tcp",
    );
}

#[test]
fn mpi_send_c_over_shm() {
    assert_ok(
        &run_job("mpi_send", NalKind::Shm, &[]),
        "OK mpi_send",
        "shm",
    );
}

#[test]
fn mpi_send_c_over_udp() {
    assert_ok(
        &run_job("mpi_send", NalKind::Udp, &[]),
        "OK mpi_send",
        "udp",
    );
}

/// Without a progress thread, only calls move messages: the examples
/// still finish because waiting (and `PtlEQGet`) drive the transport.
#[test]
fn pingpong_and_mpi_send_c_over_tcp_in_polling_mode() {
    let out = run_job_in("pingpong", NalKind::Tcp, ProgressMode::Poll, &["50"]);
    assert_ok(&out, "OK pingpong", "tcp poll");
    let out = run_job_in("mpi_send", NalKind::Tcp, ProgressMode::Poll, &[]);
    assert_ok(&out, "OK mpi_send", "tcp poll");
}
