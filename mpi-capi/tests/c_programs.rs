//! C programs built with `mpicc.mpich` (MPICH's headers and link line,
//! unmodified) run against this crate's `libmpich.so.12` under the
//! `ptlrun` launcher library: the project's `bench/c` benchmarks (tcp and
//! shm, 2 and 4 ranks), the semantics suite `tests/c/semantics.c` (4
//! ranks), the non-blocking collectives `tests/c/nbc.c` (3 and 4
//! ranks), the coverage and bad-input suites, and the fatal-error paths. Skipped, saying so, where
//! `mpicc.mpich` is not installed (`.ci/run` installs `mpich
//! libmpich-dev`). Every run has a timeout.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use portals_runtime::launch::{launch, LaunchOutcome, LaunchSpec, Output};
use portals_runtime::{JobOptions, NalKind};

const JOB_LIMIT: Duration = Duration::from_secs(180);

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have_mpicc() -> bool {
    let ok = Command::new("mpicc.mpich")
        .arg("-show")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: mpicc.mpich is not installed (apt-get install mpich libmpich-dev)");
    }
    ok
}

/// A directory with `libmpich.so.12`, the soname MPICH programs need,
/// pointing at the library cargo built beside this test.
fn lib_dir(out: &Path) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let so = deps.join("libmpich.so");
    assert!(so.exists(), "libmpich.so is not in {}", deps.display());
    let dir = out.join("lib");
    std::fs::create_dir_all(&dir).expect("lib dir");
    let link = dir.join("libmpich.so.12");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&so, &link).expect("symlink libmpich.so.12");
    dir
}

struct Built {
    lib: PathBuf,
    out: PathBuf,
    progs: Mutex<Vec<(String, PathBuf)>>,
}

/// The output directory and the library link, once per test process.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("mpi-capi-c-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("output dir");
        let lib = lib_dir(&out);
        Built {
            lib,
            out,
            progs: Mutex::new(Vec::new()),
        }
    })
}

/// The source, extra flag and whether it links `bench/c/common.c`, of the
/// C program `name`.
fn source(name: &str) -> (PathBuf, Option<&'static str>, bool) {
    let bench = manifest().join("../bench/c");
    let list: Vec<(&str, PathBuf, Option<&str>, bool)> = vec![
        ("latency", bench.join("latency.c"), None, true),
        (
            "bandwidth",
            bench.join("bandwidth.c"),
            Some("-DBENCH_MODE=0"),
            true,
        ),
        (
            "msgrate",
            bench.join("bandwidth.c"),
            Some("-DBENCH_MODE=2"),
            true,
        ),
        ("matchlist", bench.join("matchlist.c"), None, true),
        ("comb", bench.join("comb.c"), None, true),
        ("overlap", bench.join("overlap.c"), None, true),
        (
            "allreduce",
            bench.join("collectives.c"),
            Some("-DBENCH_MODE=0"),
            true,
        ),
        (
            "bcast",
            bench.join("collectives.c"),
            Some("-DBENCH_MODE=1"),
            true,
        ),
        ("nbc-overlap", bench.join("nbc_overlap.c"), None, true),
        (
            "rma-latency",
            bench.join("rma.c"),
            Some("-DBENCH_MODE=0"),
            true,
        ),
        ("rma-bw", bench.join("rma.c"), Some("-DBENCH_MODE=1"), true),
        (
            "rma-overlap",
            bench.join("rma.c"),
            Some("-DBENCH_MODE=2"),
            true,
        ),
        (
            "bibw",
            bench.join("bandwidth.c"),
            Some("-DBENCH_MODE=1"),
            true,
        ),
        (
            "semantics",
            manifest().join("tests/c/semantics.c"),
            None,
            false,
        ),
        (
            "coverage",
            manifest().join("tests/c/coverage.c"),
            None,
            false,
        ),
        (
            "badinput",
            manifest().join("tests/c/badinput.c"),
            None,
            false,
        ),
        ("nbc", manifest().join("tests/c/nbc.c"), None, false),
        ("fatal", manifest().join("tests/c/fatal.c"), None, false),
        ("abi", manifest().join("tests/c/abi.c"), None, false),
        (
            "threads",
            manifest().join("tests/c/threads.c"),
            Some("-pthread"),
            false,
        ),
    ];
    list.into_iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, src, def, with_common)| (src, def, with_common))
        .unwrap_or_else(|| panic!("no C program named {name}"))
}

/// The C program `name`, compiled with `mpicc.mpich` on first use. Each
/// test runs in its own process under nextest: compiling all 20 programs
/// up front cost every test about 4 s, for the one or few it runs.
fn program(name: &str) -> PathBuf {
    let b = built();
    let mut progs = b.progs.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = progs.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let (src, def, with_common) = source(name);
    let exe = b.out.join(name);
    let mut cmd = Command::new("mpicc.mpich");
    cmd.args(["-O2", "-std=c99", "-w", "-o"]).arg(&exe);
    if let Some(d) = def {
        cmd.arg(d);
    }
    cmd.arg(&src);
    if with_common {
        cmd.arg(manifest().join("../bench/c/common.c"));
    }
    let st = cmd.status().expect("run mpicc.mpich");
    assert!(st.success(), "mpicc.mpich failed on {}", src.display());
    progs.push((name.to_string(), exe.clone()));
    exe
}

fn run(name: &str, ranks: u32, nal: NalKind, args: &[&str]) -> LaunchOutcome {
    let b = built();
    let mut spec = LaunchSpec::new(ranks, program(name));
    spec.args = args.iter().map(Into::into).collect();
    spec.options = JobOptions {
        nal,
        timeout: Duration::from_secs(60),
        ..JobOptions::default()
    };
    spec.env = vec![("LD_LIBRARY_PATH".into(), b.lib.display().to_string())];
    spec.output = Output::Capture;
    spec.timeout = Some(JOB_LIMIT);
    launch(&spec).expect("launch")
}

/// The job succeeded and rank 0 printed `points` JSON records.
fn assert_points(out: &LaunchOutcome, points: usize, what: &str) {
    let t = out.transcript();
    assert_eq!(out.status, 0, "{what}: {:?}\n{t}", out.reason);
    let n = out
        .stdout_of(0)
        .lines()
        .filter(|l| l.starts_with("{\"bench\"") && l.contains("\"value\":"))
        .count();
    assert_eq!(n, points, "{what}: rank 0 printed {n} records\n{t}");
}

fn bench_suite(nal: NalKind) {
    let two = [
        ("latency", vec!["-s", "0,8,64K", "-r", "1", "-i", "20"], 3),
        ("bandwidth", vec!["-s", "1K,64K", "-r", "1", "-i", "3"], 2),
        ("msgrate", vec!["-r", "1", "-i", "3"], 1),
        ("matchlist", vec!["-n", "1,10", "-r", "1", "-i", "10"], 2),
        ("comb", vec!["-r", "1", "-T", "2000", "-f", "100"], 1),
        ("rma-latency", vec!["-s", "8", "-r", "1", "-i", "10"], 3),
        ("rma-bw", vec!["-s", "1K", "-r", "1", "-i", "2"], 1),
        (
            "rma-overlap",
            vec!["-s", "8", "-r", "1", "-i", "2", "-f", "0"],
            2,
        ),
        ("bibw", vec!["-s", "1K", "-r", "1", "-i", "3"], 1),
        (
            "overlap",
            vec!["-m", "1K", "-M", "2K", "-r", "1", "-i", "3", "-f", "1"],
            4,
        ),
    ];
    for (name, args, points) in two {
        let out = run(name, 2, nal, &args);
        assert_points(&out, points, &format!("{name} {nal:?}"));
    }
    for ranks in [2, 4] {
        for name in ["allreduce", "bcast"] {
            let out = run(name, ranks, nal, &["-s", "8,1K", "-r", "1", "-i", "5"]);
            assert_points(&out, 2, &format!("{name} {ranks} ranks {nal:?}"));
        }
        let out = run(
            "nbc-overlap",
            ranks,
            nal,
            &["-s", "8", "-r", "1", "-i", "3", "-f", "1"],
        );
        assert_eq!(
            out.status,
            0,
            "nbc-overlap {ranks} ranks\n{}",
            out.transcript()
        );
    }
}

#[test]
fn bench_c_programs_run_over_tcp() {
    if have_mpicc() {
        bench_suite(NalKind::Tcp);
    }
}

#[test]
fn bench_c_programs_run_over_shm() {
    if have_mpicc() {
        bench_suite(NalKind::Shm);
    }
}

/// Run the C program `name` once per `(ranks, nal)` and require exit
/// status 0 and `OK <name>` from every rank.
fn assert_passes_everywhere(name: &str, runs: &[(u32, NalKind)]) {
    for &(ranks, nal) in runs {
        let out = run(name, ranks, nal, &[]);
        let t = out.transcript();
        assert_eq!(
            out.status, 0,
            "{name}, {ranks} ranks {nal:?}: {:?}\n{t}",
            out.reason
        );
        let marker = format!("OK {name}");
        for r in 0..ranks {
            assert!(
                out.stdout_of(r).contains(&marker),
                "{name}, {ranks} ranks {nal:?}, rank {r}\n{t}"
            );
        }
    }
}

/// Every check of `semantics.c` (ranks, statuses, counts, persistent
/// requests, cancel, derived types, reductions, MINLOC, user operations,
/// collectives, communicators, group translations, RMA, error classes
/// under `MPI_ERRORS_RETURN`, an unsupported function's class) passes on
/// every rank.
#[test]
fn semantics_c_passes_on_four_ranks() {
    if !have_mpicc() {
        return;
    }
    assert_passes_everywhere("semantics", &[(4, NalKind::Tcp), (4, NalKind::Shm)]);
}

/// Every implemented function `semantics.c` does not call (send modes,
/// persistent sends, the test/wait families, more type constructors and
/// `MPI_Get_elements`, vector collectives, group algebra, passive-target
/// RMA with flushes, window error handlers), values checked on every rank.
/// `tests/coverage.rs` keeps the list complete.
#[test]
fn coverage_c_passes_on_four_ranks() {
    if !have_mpicc() {
        return;
    }
    assert_passes_everywhere("coverage", &[(4, NalKind::Tcp), (4, NalKind::Shm)]);
}

/// Bad input under `MPI_ERRORS_RETURN`, family by family (point-to-point,
/// requests, datatypes, communicators and groups, collectives, RMA,
/// environment): null pointers, invalid and stale handles (a datatype
/// freed while a receive uses it), negative counts, bad ranks, roots,
/// tags and displacements return their error class without a crash, and
/// the library still communicates afterwards.
#[test]
fn badinput_c_returns_the_class_of_each_bad_argument() {
    if !have_mpicc() {
        return;
    }
    assert_passes_everywhere("badinput", &[(2, NalKind::Shm), (4, NalKind::Tcp)]);
}

/// Every check of `nbc.c` passes on every rank, on 4 ranks and on 3 (a
/// non-power of two), over tcp and shm: `MPI_Ireduce`, `_Iscan`,
/// `_Iexscan`, `_Ireduce_scatter(_block)`, `_Igatherv`, `_Iscatterv`,
/// `_Iallgatherv`, `_Ialltoallv`, `_Ialltoallw` and `MPI_Alltoallw` (also
/// with a strided type), their values with nine in flight under one
/// `MPI_Waitall`, the
/// `MPI_IN_PLACE` forms under `MPI_Test` loops, zero-length blocks, user
/// operations (a non-commutative one keeps rank order), and the error
/// classes of bad counts, roots, buffers, datatypes and operations under
/// `MPI_ERRORS_RETURN`.
#[test]
fn nbc_c_passes_on_four_and_three_ranks() {
    if !have_mpicc() {
        return;
    }
    assert_passes_everywhere(
        "nbc",
        &[
            (4, NalKind::Tcp),
            (4, NalKind::Shm),
            (3, NalKind::Shm),
            (3, NalKind::Tcp),
        ],
    );
}

/// Under the default handler, a non-blocking collective's bad root ends
/// the job with a message naming the call and `MPI_ERR_ROOT`.
#[test]
fn a_bad_root_in_ireduce_aborts_naming_the_call() {
    if !have_mpicc() {
        return;
    }
    let out = run("nbc", 2, NalKind::Tcp, &["fatal"]);
    let t = out.transcript();
    assert_ne!(out.status, 0, "the job should have failed\n{t}");
    assert!(t.contains("MPI error in MPI_Ireduce"), "{t}");
    assert!(t.contains("MPI_ERR_ROOT"), "{t}");
    assert!(!t.contains("NOT REACHED"), "{t}");
}

/// `MPI_THREAD_MULTIPLE`: four threads per rank exchange messages on
/// their own communicators while the main thread creates and frees
/// others (each thread's cached communicator table goes stale and is
/// refreshed under their feet).
#[test]
fn threads_c_runs_four_threads_per_rank() {
    if !have_mpicc() {
        return;
    }
    assert_passes_everywhere("threads", &[(2, NalKind::Shm), (4, NalKind::Tcp)]);
}

/// Under the default `MPI_ERRORS_ARE_FATAL`, an invalid rank ends the job
/// with a message naming the call.
#[test]
fn errors_are_fatal_aborts_the_job_naming_the_call() {
    if !have_mpicc() {
        return;
    }
    let out = run("fatal", 2, NalKind::Tcp, &[]);
    let t = out.transcript();
    assert_ne!(out.status, 0, "the job should have failed\n{t}");
    assert!(
        t.contains("MPI error in MPI_Send"),
        "no message naming MPI_Send\n{t}"
    );
    assert!(
        t.contains("MPI_ERR_RANK"),
        "no error class in the message\n{t}"
    );
    assert!(!t.contains("NOT REACHED"), "{t}");
}

/// Under the default handlers, one bad call of each family ends the job
/// with a message naming the call and its class (a window's default
/// handler is fatal even where the world's returns).
#[test]
fn errors_are_fatal_names_the_call_in_every_family() {
    if !have_mpicc() {
        return;
    }
    for (mode, call, class) in [
        ("bcast-root", "MPI_Bcast", "MPI_ERR_ROOT"),
        ("null-buffer", "MPI_Recv", "MPI_ERR_BUFFER"),
        ("bad-type", "MPI_Type_size", "MPI_ERR_TYPE"),
        ("bad-request", "MPI_Wait", "MPI_ERR_REQUEST"),
        ("win-range", "MPI_Put", "MPI_ERR_RMA_RANGE"),
        ("errors-abort", "MPI_Send", "MPI_ERR_RANK"),
    ] {
        let out = run("fatal", 2, NalKind::Shm, &[mode]);
        let t = out.transcript();
        assert_ne!(out.status, 0, "{mode}: the job should have failed\n{t}");
        assert!(t.contains(&format!("MPI error in {call}: ")), "{mode}\n{t}");
        assert!(t.contains(class), "{mode}: no {class}\n{t}");
        assert!(!t.contains("NOT REACHED"), "{mode}\n{t}");
    }
}

#[test]
fn finalize_twice_is_an_error_naming_the_call() {
    if !have_mpicc() {
        return;
    }
    let out = run("fatal", 2, NalKind::Tcp, &["finalize-twice"]);
    let t = out.transcript();
    assert_ne!(out.status, 0, "{t}");
    assert!(
        t.contains("MPI error in MPI_Finalize: MPI_Finalize was already called"),
        "{t}"
    );
}

/// A program calling a function this library does not implement loads
/// (every `mpi.h` symbol is there) and, under the default handler, the
/// job ends with a message naming the call and its class.
#[test]
fn an_unsupported_function_loads_and_fails_naming_the_call() {
    if !have_mpicc() {
        return;
    }
    let out = run("fatal", 2, NalKind::Tcp, &["unsupported"]);
    let t = out.transcript();
    assert_ne!(out.status, 0, "{t}");
    assert!(t.contains("MPI error in MPI_Comm_spawn"), "{t}");
    assert!(t.contains("MPI_ERR_UNSUPPORTED_OPERATION"), "{t}");
    assert!(!t.contains("NOT REACHED"), "{t}");
}

/// A call before `MPI_Init` goes to the (fatal) default handler: the
/// process ends with a message naming the call, it does not crash.
#[test]
fn a_call_before_init_fails_naming_the_call() {
    if !have_mpicc() {
        return;
    }
    let out = run("fatal", 2, NalKind::Tcp, &["before-init"]);
    let t = out.transcript();
    assert_ne!(out.status, 0, "{t}");
    assert!(
        t.contains("MPI error in MPI_Comm_rank: called before MPI_Init"),
        "{t}"
    );
    assert!(!t.contains("NOT REACHED"), "{t}");
}

/// The values the library hard-codes (`src/consts.rs`) are those of the
/// installed MPICH `mpi.h`: handles, sentinels, error classes, the
/// `MPI_Status` layout.
#[test]
fn abi_values_match_mpich_mpi_h() {
    use mpich::consts::*;
    if !have_mpicc() {
        return;
    }
    let out = Command::new(program("abi")).output().expect("run abi");
    assert!(out.status.success(), "abi failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let c: std::collections::HashMap<&str, i64> = text
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k, v.parse().expect("number")))
        .collect();
    let rust: &[(&str, i64)] = &[
        ("MPI_COMM_WORLD", MPI_COMM_WORLD as i64),
        ("MPI_COMM_SELF", MPI_COMM_SELF as i64),
        ("MPI_COMM_NULL", MPI_COMM_NULL as i64),
        ("MPI_GROUP_NULL", MPI_GROUP_NULL as i64),
        ("MPI_GROUP_EMPTY", MPI_GROUP_EMPTY as i64),
        ("MPI_DATATYPE_NULL", MPI_DATATYPE_NULL as i64),
        ("MPI_OP_NULL", MPI_OP_NULL as i64),
        ("MPI_REQUEST_NULL", MPI_REQUEST_NULL as i64),
        ("MPI_MESSAGE_NULL", MPI_MESSAGE_NULL as i64),
        ("MPI_MESSAGE_NO_PROC", MPI_MESSAGE_NO_PROC as i64),
        ("MPI_WIN_NULL", MPI_WIN_NULL as i64),
        ("MPI_INFO_NULL", MPI_INFO_NULL as i64),
        ("MPI_ERRHANDLER_NULL", MPI_ERRHANDLER_NULL as i64),
        ("MPI_ERRORS_ARE_FATAL", MPI_ERRORS_ARE_FATAL as i64),
        ("MPI_ERRORS_RETURN", MPI_ERRORS_RETURN as i64),
        ("MPI_ERRORS_ABORT", MPI_ERRORS_ABORT as i64),
        ("MPI_SUM", MPI_SUM as i64),
        ("MPI_PROD", MPI_PROD as i64),
        ("MPI_MAX", MPI_MAX as i64),
        ("MPI_MIN", MPI_MIN as i64),
        ("MPI_LAND", MPI_LAND as i64),
        ("MPI_LOR", MPI_LOR as i64),
        ("MPI_LXOR", MPI_LXOR as i64),
        ("MPI_BAND", MPI_BAND as i64),
        ("MPI_BOR", MPI_BOR as i64),
        ("MPI_BXOR", MPI_BXOR as i64),
        ("MPI_MINLOC", MPI_MINLOC as i64),
        ("MPI_MAXLOC", MPI_MAXLOC as i64),
        ("MPI_REPLACE", MPI_REPLACE as i64),
        ("MPI_NO_OP", MPI_NO_OP as i64),
        ("MPI_UNDEFINED", MPI_UNDEFINED as i64),
        ("MPI_PROC_NULL", MPI_PROC_NULL as i64),
        ("MPI_ANY_SOURCE", MPI_ANY_SOURCE as i64),
        ("MPI_ANY_TAG", MPI_ANY_TAG as i64),
        ("MPI_IDENT", MPI_IDENT as i64),
        ("MPI_CONGRUENT", MPI_CONGRUENT as i64),
        ("MPI_SIMILAR", MPI_SIMILAR as i64),
        ("MPI_UNEQUAL", MPI_UNEQUAL as i64),
        ("MPI_TAG_UB", MPI_TAG_UB as i64),
        ("MPI_WIN_BASE", MPI_WIN_BASE as i64),
        ("MPI_WIN_SIZE", MPI_WIN_SIZE as i64),
        ("MPI_WIN_DISP_UNIT", MPI_WIN_DISP_UNIT as i64),
        ("MPI_LOCK_EXCLUSIVE", MPI_LOCK_EXCLUSIVE as i64),
        ("MPI_LOCK_SHARED", MPI_LOCK_SHARED as i64),
        ("MPI_THREAD_MULTIPLE", MPI_THREAD_MULTIPLE as i64),
        ("MPI_MAX_PROCESSOR_NAME", MPI_MAX_PROCESSOR_NAME as i64),
        ("MPI_MAX_ERROR_STRING", MPI_MAX_ERROR_STRING as i64),
        ("MPI_VERSION", MPI_VERSION as i64),
        ("MPI_SUBVERSION", MPI_SUBVERSION as i64),
        ("MPI_SUCCESS", MPI_SUCCESS as i64),
        ("MPI_ERR_BUFFER", MPI_ERR_BUFFER as i64),
        ("MPI_ERR_COUNT", MPI_ERR_COUNT as i64),
        ("MPI_ERR_TYPE", MPI_ERR_TYPE as i64),
        ("MPI_ERR_TAG", MPI_ERR_TAG as i64),
        ("MPI_ERR_COMM", MPI_ERR_COMM as i64),
        ("MPI_ERR_RANK", MPI_ERR_RANK as i64),
        ("MPI_ERR_ROOT", MPI_ERR_ROOT as i64),
        ("MPI_ERR_GROUP", MPI_ERR_GROUP as i64),
        ("MPI_ERR_OP", MPI_ERR_OP as i64),
        ("MPI_ERR_ARG", MPI_ERR_ARG as i64),
        ("MPI_ERR_TRUNCATE", MPI_ERR_TRUNCATE as i64),
        ("MPI_ERR_OTHER", MPI_ERR_OTHER as i64),
        ("MPI_ERR_INTERN", MPI_ERR_INTERN as i64),
        ("MPI_ERR_IN_STATUS", MPI_ERR_IN_STATUS as i64),
        ("MPI_ERR_REQUEST", MPI_ERR_REQUEST as i64),
        ("MPI_ERR_NO_MEM", MPI_ERR_NO_MEM as i64),
        (
            "MPI_ERR_UNSUPPORTED_OPERATION",
            MPI_ERR_UNSUPPORTED_OPERATION as i64,
        ),
        ("MPI_ERR_WIN", MPI_ERR_WIN as i64),
        ("MPI_ERR_RMA_SYNC", MPI_ERR_RMA_SYNC as i64),
        ("MPI_ERR_RMA_RANGE", MPI_ERR_RMA_RANGE as i64),
        ("MPI_ERR_PROC_ABORTED", MPI_ERR_PROC_ABORTED as i64),
        ("(size_t)MPI_STATUS_IGNORE", STATUS_IGNORE_ADDR as i64),
        ("(size_t)MPI_STATUSES_IGNORE", STATUS_IGNORE_ADDR as i64),
        ("(size_t)MPI_IN_PLACE", IN_PLACE_ADDR as i64),
        ("(size_t)MPI_BOTTOM", 0),
        (
            "sizeof(MPI_Status)",
            std::mem::size_of::<MpiStatus>() as i64,
        ),
        (
            "offsetof(MPI_Status, count_lo)",
            std::mem::offset_of!(MpiStatus, count_lo) as i64,
        ),
        (
            "offsetof(MPI_Status, count_hi_and_cancelled)",
            std::mem::offset_of!(MpiStatus, count_hi_and_cancelled) as i64,
        ),
        (
            "offsetof(MPI_Status, MPI_SOURCE)",
            std::mem::offset_of!(MpiStatus, source) as i64,
        ),
        (
            "offsetof(MPI_Status, MPI_TAG)",
            std::mem::offset_of!(MpiStatus, tag) as i64,
        ),
        (
            "offsetof(MPI_Status, MPI_ERROR)",
            std::mem::offset_of!(MpiStatus, error) as i64,
        ),
        ("sizeof(MPI_Aint)", std::mem::size_of::<isize>() as i64),
        (
            "sizeof(MPI_Comm)",
            std::mem::size_of::<std::ffi::c_int>() as i64,
        ),
    ];
    assert_eq!(
        c.len(),
        rust.len(),
        "abi.c and this test list different names"
    );
    for (name, v) in rust {
        assert_eq!(
            c.get(name),
            Some(v),
            "{name}: mpi.h says {:?}, consts.rs {v}",
            c.get(name)
        );
    }
}

/// Every function of MPICH's `mpi.h` (`functions.txt`) resolves in the
/// library, with its `PMPI_` name: no MPICH program fails to load.
#[test]
fn every_mpi_h_function_is_exported() {
    let exe = std::env::current_exe().expect("exe");
    let so = exe.parent().expect("deps").join("libmpich.so");
    let names = std::fs::read_to_string(manifest().join("functions.txt")).expect("functions.txt");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output();
    let Ok(out) = out else {
        eprintln!("SKIPPED: nm is not installed");
        return;
    };
    let syms = String::from_utf8_lossy(&out.stdout).into_owned();
    let defined: std::collections::HashSet<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    for n in names.lines().filter(|l| !l.is_empty()) {
        assert!(defined.contains(n), "{n} is not exported");
        let p = format!("P{n}");
        assert!(defined.contains(p.as_str()), "{p} is not exported");
    }
}

/// `ptlcc` compiles against MPICH's `mpi.h` and links this library with
/// an rpath: the program runs under the launcher with `LD_LIBRARY_PATH`
/// empty, on portals-rs (its `MPI_Get_library_version` says so, not
/// MPICH's), and the ranks exchange values. `-show` prints the command
/// without running it.
#[test]
fn ptlcc_builds_a_program_that_runs_without_ld_library_path() {
    if !have_mpicc() {
        return;
    }
    let ptlcc = env!("CARGO_BIN_EXE_ptlcc");
    let out =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ptlcc-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("output dir");
    let exe = out.join("ptlcc-prog");
    let src = manifest().join("tests/c/ptlcc.c");
    let show = Command::new(ptlcc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-show")
        .output()
        .expect("run ptlcc -show");
    let line = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(show.status.success(), "ptlcc -show: {line}");
    for part in ["-lmpich", "-Wl,-rpath,", "mpich-abi", "-I"] {
        assert!(line.contains(part), "no {part} in: {line}");
    }
    assert!(!exe.exists(), "-show must not compile");
    let st = Command::new(ptlcc)
        .args(["-O2", "-std=c99", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("run ptlcc");
    assert!(st.success(), "ptlcc failed");
    let mut spec = LaunchSpec::new(2, exe);
    spec.options = JobOptions {
        nal: NalKind::Shm,
        timeout: Duration::from_secs(60),
        ..JobOptions::default()
    };
    // Empty, not inherited: only the rpath can find the library.
    spec.env = vec![("LD_LIBRARY_PATH".into(), String::new())];
    spec.output = Output::Capture;
    spec.timeout = Some(JOB_LIMIT);
    let run = launch(&spec).expect("launch");
    let t = run.transcript();
    assert_eq!(run.status, 0, "{:?}\n{t}", run.reason);
    for (r, from) in [(0, 1001), (1, 1000)] {
        let o = run.stdout_of(r);
        assert!(
            o.contains(&format!("rank {r} of 2 got {from} on portals-rs")),
            "rank {r}\n{t}"
        );
    }
}

/// Started by MPICH's own launcher (`mpiexec.hydra`, PMI) instead of
/// `ptlrun`, the same binaries join through PMI: the semantics suite on 4
/// ranks and a benchmark on 2. Skipped, saying so, without hydra.
#[test]
fn semantics_and_latency_run_under_mpiexec_hydra() {
    if !have_mpicc() {
        return;
    }
    let b = built();
    let prog = |n: &str| program(n).display().to_string();
    let lib = b.lib.display().to_string();
    let env = [("LD_LIBRARY_PATH", lib.as_str())];
    let sem = prog("semantics");
    let Some(r) = portals_tests::hydra::run(&["-n", "4", &sem], &env, JOB_LIMIT) else {
        return;
    };
    assert!(r.ok(), "semantics under hydra: {}", r.describe());
    assert_eq!(
        r.stdout.matches("OK semantics").count(),
        4,
        "{}",
        r.describe()
    );
    let lat = prog("latency");
    let Some(r) = portals_tests::hydra::run(
        &["-n", "2", &lat, "-s", "8", "-r", "1", "-i", "20"],
        &env,
        JOB_LIMIT,
    ) else {
        return;
    };
    assert!(r.ok(), "latency under hydra: {}", r.describe());
    assert_eq!(
        r.stdout.matches("\"bench\":\"latency\"").count(),
        1,
        "{}",
        r.describe()
    );
}
