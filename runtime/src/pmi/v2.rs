//! PMI-2 over its length-prefixed wire format.
//!
//! The session starts in PMI-1 syntax (`cmd=init pmi_version=2
//! pmi_subversion=0`, see [`super::v1::init`]); everything after is PMI-2:
//!
//! | operation | request | reply |
//! |---|---|---|
//! | fullinit | `cmd=fullinit;pmirank=<PMI_ID or PMI_RANK>;[pmijobid=<PMI_JOBID>;]threaded=FALSE;` | `cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=<r>;size=<n>;appnum=<a>;[spawner-jobid=<j>;]debugged=FALSE;pmiverbose=FALSE;rc=0;` |
//! | job id (KVS name) | `cmd=job-getid;` | `cmd=job-getid-response;jobid=<id>;rc=0;` |
//! | put | `cmd=kvs-put;key=<k>;value=<v>;` | `cmd=kvs-put-response;rc=0;` |
//! | fence | `cmd=kvs-fence;` | `cmd=kvs-fence-response;rc=0;` |
//! | get | `cmd=kvs-get;jobid=<id>;srcid=-1;key=<k>;` | `cmd=kvs-get-response;found=TRUE;value=<v>;rc=0;` or `found=FALSE;` |
//! | universe size | `cmd=info-getjobattr;key=universeSize;` | `cmd=info-getjobattr-response;found=TRUE;value=<n>;rc=0;` or `found=FALSE;` |
//! | finalize | `cmd=finalize;` | `cmd=finalize-response;rc=0;` |
//! | abort | `cmd=abort;isworld=TRUE;msg=<m>;exitcode=<n>;message=<m>;` | none |
//!
//! Hydra's `kvs-fence` does not wait for the other processes: it answers at
//! once and counts a per-process epoch, and it holds back a `kvs-get` for a
//! key it does not have until every process has fenced as often as the
//! caller. [`barrier`] relies on that to synchronise.

use tracing::debug;

use super::conn::Channel;
use super::error::{PmiError, Result};
use super::reply::{self, boolean, check_rc, field, name, number};
use super::wire::{self, Msg};

/// What `fullinit` tells the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FullInit {
    pub rank: u32,
    pub size: u32,
    pub appnum: i32,
    pub spawned: bool,
    pub debug: bool,
}

/// A key no one ever puts (the client refuses keys with the reserved
/// prefix), read after a fence to wait for every process to reach it.
pub(crate) const BARRIER_KEY: &str = "ptl.pmi.barrier";

/// Send `request` and read its reply; `expect` is the reply's `cmd`. `rc`
/// is left to the caller.
fn exchange(
    ch: &mut Channel,
    request: &'static str,
    pairs: &[(&str, &str)],
    expect: &'static str,
) -> Result<Msg> {
    ch.usable()?;
    send(ch, request, pairs)?;
    let deadline = ch.deadline();
    let prefix = ch
        .conn()
        .read_exact(wire::V2_LEN_WIDTH, deadline)
        .map_err(|f| ch.fail(request, f))?;
    let len = wire::parse_v2_len(&prefix).map_err(|e| {
        let text = String::from_utf8_lossy(&prefix).into_owned();
        ch.malformed(request, e.0, &text)
    })?;
    let body = ch
        .conn()
        .read_exact(len, deadline)
        .map_err(|f| ch.fail(request, f))?;
    let body = String::from_utf8(body).map_err(|e| {
        let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
        ch.malformed(request, "reply is not UTF-8".into(), &text)
    })?;
    debug!(target: "portals_runtime::pmi", "pmi2 < {body}");
    let m = wire::parse_v2_body(&body).map_err(|e| ch.malformed(request, e.0, &body))?;
    ch.expect(request, expect, m)
}

/// Send one command.
fn send(ch: &mut Channel, request: &'static str, pairs: &[(&str, &str)]) -> Result<()> {
    let bytes = wire::format_v2(request, pairs).map_err(|e| PmiError::InvalidToken {
        what: "field",
        text: e.0,
        why: "not representable in a PMI-2 command",
    })?;
    debug!(
        target: "portals_runtime::pmi",
        "pmi2 > {}",
        String::from_utf8_lossy(&bytes)
    );
    ch.send(request, &bytes)
}

/// Send, receive, fail on `rc` not 0.
fn call(
    ch: &mut Channel,
    request: &'static str,
    pairs: &[(&str, &str)],
    expect: &'static str,
) -> Result<Msg> {
    let m = exchange(ch, request, pairs, expect)?;
    check_rc(ch, request, &m)?;
    Ok(m)
}

/// `fullinit`, announcing `pmirank` (hydra maps the connection to a process
/// by it) and, when the launcher gave one, `pmijobid`.
pub(crate) fn fullinit(
    ch: &mut Channel,
    pmirank: Option<u32>,
    jobid: Option<&str>,
) -> Result<FullInit> {
    const REQ: &str = "fullinit";
    let rank_text = pmirank.map(|r| r.to_string());
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if let Some(j) = jobid {
        pairs.push(("pmijobid", j));
    }
    if let Some(r) = rank_text.as_deref() {
        pairs.push(("pmirank", r));
    }
    // This client makes one request at a time from one thread, so it never
    // needs the `thrid` multiplexing a threaded client asks for.
    pairs.push(("threaded", "FALSE"));
    let m = call(ch, REQ, &pairs, "fullinit-response")?;
    let rank: u32 = number(ch, REQ, &m, "rank")?;
    let size: u32 = number(ch, REQ, &m, "size")?;
    if size == 0 || rank >= size {
        return Err(ch.malformed(REQ, format!("rank {rank} of size {size}"), &m.raw));
    }
    let appnum: i32 = number(ch, REQ, &m, "appnum")?;
    let mut debug = false;
    for key in ["debugged", "pmiverbose"] {
        if m.get(key).is_some() {
            debug |= boolean(ch, REQ, &m, key)?;
        }
    }
    Ok(FullInit {
        rank,
        size,
        appnum,
        spawned: m.get("spawner-jobid").is_some_and(|j| !j.is_empty()),
        debug,
    })
}

/// `job-getid`: the job's id, which names its key-value space.
pub(crate) fn job_getid(ch: &mut Channel) -> Result<String> {
    const REQ: &str = "job-getid";
    let m = call(ch, REQ, &[], "job-getid-response")?;
    name(ch, REQ, &m, "jobid")
}

/// `kvs-put`.
pub(crate) fn put(ch: &mut Channel, key: &str, value: &str) -> Result<()> {
    call(
        ch,
        "kvs-put",
        &[("key", key), ("value", value)],
        "kvs-put-response",
    )
    .map(drop)
}

/// `kvs-fence`: publishes this process's puts. On hydra it does not wait
/// for the others (see the module documentation).
pub(crate) fn fence(ch: &mut Channel) -> Result<()> {
    call(ch, "kvs-fence", &[], "kvs-fence-response").map(drop)
}

/// A fence that returns only when every process has fenced as often: the
/// `kvs-fence`, then a `kvs-get` of a key no one puts, which hydra answers
/// (`found=FALSE`) only once every process has reached the same epoch.
/// Launchers whose fence already blocks (Slurm) answer the get at once.
pub(crate) fn barrier(ch: &mut Channel, jobid: &str) -> Result<()> {
    fence(ch)?;
    match get(ch, jobid, BARRIER_KEY) {
        Ok(_) | Err(PmiError::KeyNotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `kvs-get`.
pub(crate) fn get(ch: &mut Channel, jobid: &str, key: &str) -> Result<String> {
    const REQ: &str = "kvs-get";
    let m = call(
        ch,
        REQ,
        &[("jobid", jobid), ("srcid", "-1"), ("key", key)],
        "kvs-get-response",
    )?;
    if !boolean(ch, REQ, &m, "found")? {
        return Err(PmiError::KeyNotFound {
            key: key.to_string(),
        });
    }
    Ok(field(REQ, &m, "value")?.to_string())
}

/// `info-getjobattr universeSize`; `None` when the launcher does not say.
pub(crate) fn universe_size(ch: &mut Channel) -> Result<Option<u32>> {
    const REQ: &str = "info-getjobattr";
    let m = call(
        ch,
        REQ,
        &[("key", "universeSize")],
        "info-getjobattr-response",
    )?;
    if !boolean(ch, REQ, &m, "found")? {
        return Ok(None);
    }
    reply::universe_size(ch, REQ, &m, "value")
}

/// `finalize`.
pub(crate) fn finalize(ch: &mut Channel) -> Result<()> {
    call(ch, "finalize", &[], "finalize-response").map(drop)
}

/// `abort`. No reply comes. MPICH up to 4.0 and Slurm read `isworld` and
/// `msg`; MPICH 4.1 and later read `exitcode` and `message`; sending both
/// spellings reaches either. (Hydra 4.0 does not know the command at all
/// and tears the job down on receiving it, which also ends the job.)
pub(crate) fn abort(ch: &mut Channel, code: i32, message: &str) -> Result<()> {
    let code = code.to_string();
    send(
        ch,
        "abort",
        &[
            ("isworld", "TRUE"),
            ("msg", message),
            ("exitcode", &code),
            ("message", message),
        ],
    )
}
