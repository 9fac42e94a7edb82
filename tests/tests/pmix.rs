//! The PMIx client against a server that goes away: Open MPI's `mpirun`
//! (whose PMIx server runs inside it) is killed while a rank waits in the
//! start-up fence for a rank that never comes. The waiting rank must say
//! what happened and exit non-zero well within the bootstrap timeout,
//! never hang.
//!
//! Skipped, with a message, where `mpirun.openmpi` is not installed
//! (Debian: `apt-get install openmpi-bin`; `.ci/run` installs it).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HELLO: &str = env!("CARGO_BIN_EXE_example-hello");

/// The start-up timeout the ranks are given: the failure must come from
/// the lost server, well before it.
const BOOTSTRAP_TIMEOUT_S: u64 = 30;

fn mpirun() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpirun.openmpi"))
        .find(|p| p.is_file())
}

/// Kills the launcher's process group (the ranks and the stray `sleep`
/// included) however the test ends.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0.id()) {
            // SAFETY: kill has no memory-safety preconditions; the group
            // id is that of a child this test started with its own group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.0.wait();
    }
}

/// Whether process `pid` has a thread named `name` (the PMIx client names
/// the helper thread of each bounded call `pmix-<Call>`).
fn has_thread(pid: &str, name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn a_launcher_that_dies_mid_start_up_fails_the_waiting_rank_clearly() {
    let Some(mpirun) = mpirun() else {
        eprintln!("SKIPPED: mpirun.openmpi not found in PATH (Debian/Ubuntu package openmpi-bin)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ptl-pmix-death-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let d = dir.display();
    // Rank 1 never joins; rank 0's own stderr and exit status go to files
    // because its output pipe dies with mpirun.
    let script = format!(
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec sleep 120; fi; \
         echo $$ > {d}/r0.pid; {HELLO} 2>{d}/r0.err; echo $? > {d}/r0.status"
    );
    let mut cmd = Command::new(&mpirun);
    cmd.args(["--oversubscribe", "-n", "2", "sh", "-c", &script])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("PTL_BOOTSTRAP_TIMEOUT", BOOTSTRAP_TIMEOUT_S.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    for var in [
        "PTL_RANK",
        "PTL_SIZE",
        "PTL_JOB_KEY",
        "PTL_BOOTSTRAP",
        "PMI_FD",
        "PMI_PORT",
    ] {
        cmd.env_remove(var);
    }
    let group = Group(cmd.spawn().expect("start mpirun.openmpi"));

    let pid_file = dir.join("r0.pid");
    wait_for("rank 0 started", Duration::from_secs(60), || {
        !read(&pid_file).trim().is_empty()
    });
    // The shell's pid is the program's once it runs (no exec: the shell
    // waits for it), so look for the program among the shell's children.
    let shell = read(&pid_file).trim().to_string();
    let mut rank0 = String::new();
    wait_for(
        "rank 0 in the start-up fence",
        Duration::from_secs(60),
        || {
            let children = read(Path::new(&format!("/proc/{shell}/task/{shell}/children")));
            rank0 = children.split_whitespace().next().unwrap_or("").to_string();
            !rank0.is_empty() && has_thread(&rank0, "pmix-Fence")
        },
    );

    // The launcher, and with it the PMIx server, dies.
    let killed = Instant::now();
    if let Ok(pid) = libc::pid_t::try_from(group.0.id()) {
        // SAFETY: no memory-safety preconditions; mpirun is our child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let status_file = dir.join("r0.status");
    wait_for(
        "rank 0 gives up",
        Duration::from_secs(BOOTSTRAP_TIMEOUT_S + 15),
        || !read(&status_file).trim().is_empty(),
    );
    let took = killed.elapsed();
    let status = read(&status_file);
    let err = read(&dir.join("r0.err"));
    drop(group);
    let _ = std::fs::remove_dir_all(&dir);

    assert_ne!(status.trim(), "0", "rank 0 must fail; stderr:\n{err}");
    assert!(
        err.contains("lost the PMIx server") || err.contains("no answer from the PMIx server"),
        "the error says the launcher is gone:\n{err}"
    );
    assert!(
        took < Duration::from_secs(BOOTSTRAP_TIMEOUT_S),
        "rank 0 gave up after {took:?}, not within the bootstrap timeout:\n{err}"
    );
}
