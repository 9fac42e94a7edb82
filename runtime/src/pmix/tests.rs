//! What can be checked without a PMIx server: the environment, the value
//! conversions, the hand-written layouts against the installed header, and
//! the error for a library that is not there. The client against real
//! servers (Open MPI's `mpirun`, `srun --mpi=pmix`) is tested in
//! `tests/tests/openmpi.rs`, `tests/tests/slurm.rs` and `tests/tests/pmix.rs`.

use super::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn an_environment_without_a_namespace_is_no_pmix() {
    assert_eq!(PmixEnv::from_lookup(env(&[])).expect("no error"), None);
    assert_eq!(
        PmixEnv::from_lookup(env(&[("PMIX_NAMESPACE", " ")])).expect("no error"),
        None
    );
}

#[test]
fn open_mpis_environment_parses_and_names_the_launcher() {
    let e = PmixEnv::from_lookup(env(&[
        ("PMIX_NAMESPACE", "1657798657"),
        ("PMIX_RANK", "1"),
        ("PMIX_SERVER_URI4", "1657798656.0;tcp4://127.0.0.1:52207"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
    ]))
    .expect("valid")
    .expect("present");
    assert_eq!(e.namespace, "1657798657");
    assert_eq!(e.rank, 1);
    assert_eq!(e.launcher, "Open MPI's mpirun");
}

#[test]
fn a_namespace_without_rank_or_server_is_an_error_not_a_job_of_one() {
    let r = PmixEnv::from_lookup(env(&[("PMIX_NAMESPACE", "ns"), ("PMIX_SERVER_URI2", "x")]));
    assert!(
        matches!(
            r,
            Err(PmixError::Env {
                var: "PMIX_RANK",
                ..
            })
        ),
        "{r:?}"
    );
    let r = PmixEnv::from_lookup(env(&[
        ("PMIX_NAMESPACE", "ns"),
        ("PMIX_RANK", "x1"),
        ("PMIX_SERVER_URI2", "x"),
    ]));
    assert!(
        matches!(&r, Err(PmixError::Env { var: "PMIX_RANK", why }) if why.contains("x1")),
        "{r:?}"
    );
    let r = PmixEnv::from_lookup(env(&[("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")]));
    let msg = format!("{}", r.expect_err("no server"));
    assert!(msg.contains("PMIX_SERVER_URI"), "{msg}");
}

#[test]
fn sizes_convert_from_every_integer_type_servers_use() {
    let mut v = ffi::Value::int(7);
    assert_eq!(value_as_u32(&v), Some(7));
    v.ty = ffi::types::UINT32;
    v.data.uint32 = 4;
    assert_eq!(value_as_u32(&v), Some(4));
    v.ty = ffi::types::UINT64;
    v.data.uint64 = u64::from(u32::MAX) + 1;
    assert_eq!(value_as_u32(&v), None, "too large is not truncated");
    v.data.uint64 = 12;
    assert_eq!(value_as_u32(&v), Some(12));
    v.ty = ffi::types::SIZE;
    v.data.size = 9;
    assert_eq!(value_as_u32(&v), Some(9));
    let neg = ffi::Value::int(-1);
    assert_eq!(value_as_u32(&neg), None, "a negative size is refused");
    assert_eq!(value_as_u32(&ffi::Value::flag(true)), None);
}

#[test]
fn strings_are_copied_and_other_types_refused() {
    let s = c"127.0.0.1:5000,00ff";
    let v = ffi::Value::borrowed_string(s);
    assert_eq!(value_as_string(&v).as_deref(), Some("127.0.0.1:5000,00ff"));
    let mut null = v;
    null.data.string = std::ptr::null_mut();
    assert_eq!(value_as_string(&null), None);
    assert_eq!(value_as_string(&ffi::Value::int(3)), None);
}

#[test]
fn proc_and_info_names_are_truncated_and_terminated() {
    let long = vec![b'n'; 400];
    let p = ffi::Proc::new(&long, 3);
    assert_eq!(p.nspace_bytes().len(), ffi::MAX_NSLEN);
    assert_eq!(p.nspace[ffi::MAX_NSLEN], 0);
    assert_eq!(ffi::Proc::new(b"job7", 0).nspace_bytes(), b"job7");
    let i = ffi::Info::new(c"pmix.collect", ffi::Value::flag(true));
    assert_eq!(
        &i.key[..13].iter().map(|&c| c as u8).collect::<Vec<_>>(),
        b"pmix.collect\0"
    );
}

#[test]
fn a_missing_library_is_a_load_error_that_names_it_and_the_fix() {
    let r = PmixClient::init_with("/nonexistent/libpmix-for-test.so", Duration::from_secs(5));
    let e = r.expect_err("cannot load");
    assert!(matches!(e, PmixError::Load { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("/nonexistent/libpmix-for-test.so")
            && msg.contains("libpmix2")
            && msg.contains("PTL_PMIX_LIBRARY"),
        "{msg}"
    );
}

#[test]
fn a_call_that_outlives_its_bound_times_out() {
    let r = bounded("Fence", Duration::from_millis(50), || {
        std::thread::sleep(Duration::from_secs(2));
    });
    assert!(
        matches!(r, Err(PmixError::Timeout { call: "Fence", .. })),
        "{r:?}"
    );
    assert_eq!(bounded("Get", Duration::from_secs(5), || 5).ok(), Some(5));
}

/// Compile a C probe against the installed `pmix_common.h` and compare
/// every size, offset and constant written out by hand in `ffi`. Skipped
/// (saying so) where the header or a C compiler is missing.
#[test]
fn the_layouts_match_the_installed_header() {
    let include = [
        "/usr/lib/x86_64-linux-gnu/pmix2/include",
        "/usr/include/pmix",
        "/usr/include",
    ]
    .into_iter()
    .find(|d| Path::new(d).join("pmix_common.h").is_file());
    let Some(include) = include else {
        eprintln!("SKIPPED: pmix_common.h not installed (Debian/Ubuntu package libpmix-dev)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ptl-pmix-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        r#"#include <pmix_common.h>
#include <stdio.h>
#include <stddef.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu\n", sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
         sizeof(pmix_value_t), offsetof(pmix_value_t, data), sizeof(pmix_info_t),
         offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value));
  printf("%d %d %d %d %d %d %d %d %d %d %d %u %d %d %d %d\n", PMIX_BOOL, PMIX_STRING,
         PMIX_SIZE, PMIX_INT, PMIX_INT32, PMIX_UINT, PMIX_UINT16, PMIX_UINT32, PMIX_UINT64,
         PMIX_PROC_RANK, PMIX_GLOBAL, PMIX_RANK_WILDCARD, PMIX_SUCCESS, PMIX_ERR_NOT_FOUND,
         PMIX_ERR_UNREACH, PMIX_ERR_LOST_CONNECTION);
  printf("%s %s %s %d %d\n", PMIX_JOB_SIZE, PMIX_COLLECT_DATA, PMIX_TIMEOUT, PMIX_MAX_NSLEN,
         PMIX_MAX_KEYLEN);
  return 0;
}
"#,
    )
    .expect("write probe");
    let exe = dir.join("probe");
    let cc = match Command::new("cc")
        .arg(format!("-I{include}"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED: no C compiler ({e})");
            return;
        }
    };
    assert!(
        cc.status.success(),
        "probe did not compile: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().expect("run probe");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    use std::mem::{offset_of, size_of};
    let ours = format!(
        "{} {} {} {} {} {} {}",
        size_of::<ffi::Proc>(),
        offset_of!(ffi::Proc, rank),
        size_of::<ffi::Value>(),
        offset_of!(ffi::Value, data),
        size_of::<ffi::Info>(),
        offset_of!(ffi::Info, flags),
        offset_of!(ffi::Info, value)
    );
    assert_eq!(lines[0], ours, "struct layouts");
    use ffi::types::*;
    let consts = format!(
        "{BOOL} {STRING} {SIZE} {INT} {INT32} {UINT} {UINT16} {UINT32} {UINT64} {PROC_RANK} {} {} {} {} {} {}",
        ffi::SCOPE_GLOBAL,
        ffi::RANK_WILDCARD,
        ffi::SUCCESS,
        ffi::ERR_NOT_FOUND,
        ffi::ERR_UNREACH,
        ffi::ERR_LOST_CONNECTION
    );
    assert_eq!(lines[1], consts, "constants");
    let keys = format!(
        "{} {} {} {} {}",
        ffi::keys::JOB_SIZE.to_string_lossy(),
        ffi::keys::COLLECT_DATA.to_string_lossy(),
        ffi::keys::TIMEOUT.to_string_lossy(),
        ffi::MAX_NSLEN,
        ffi::MAX_KEYLEN
    );
    assert_eq!(lines[2], keys, "keys and lengths");
}
