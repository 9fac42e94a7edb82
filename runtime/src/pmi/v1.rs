//! PMI-1 over the "simple" line protocol.
//!
//! | operation | request | reply |
//! |---|---|---|
//! | identify (only over `PMI_PORT` with `PMI_ID`) | `cmd=initack pmiid=<id>` | `cmd=initack`, then `cmd=set size=<n>`, `cmd=set rank=<r>`, `cmd=set debug=<d>` (one line each) |
//! | init | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` |
//! | limits | `cmd=get_maxes` | `cmd=maxes kvsname_max=<n> keylen_max=<n> vallen_max=<n>` |
//! | appnum | `cmd=get_appnum` | `cmd=appnum appnum=<n>` |
//! | KVS name | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=<name>` |
//! | universe size | `cmd=get_universe_size` | `cmd=universe_size size=<n>` (`-1`: unknown) |
//! | put | `cmd=put kvsname=<name> key=<k> value=<v>` | `cmd=put_result rc=0 msg=success` |
//! | barrier (and fence) | `cmd=barrier_in` | `cmd=barrier_out` |
//! | get | `cmd=get kvsname=<name> key=<k>` | `cmd=get_result rc=0 msg=success value=<v>`; not found: `rc=-1 msg=key_<k>_not_found` (hydra 4.0) or `rc=1 msg=key_not_found` / `found=FALSE` (later MPICH) |
//! | finalize | `cmd=finalize` | `cmd=finalize_ack` |
//! | abort | `cmd=abort exitcode=<n> message=<text>` | none (the launcher tears the job down) |

use tracing::debug;

use super::conn::Channel;
use super::error::{PmiError, Result};
use super::reply::{boolean, check_rc, field, message, name, number, rc, universe_size};
use super::wire::{self, Msg};

/// What `init` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InitReply {
    /// Accepted; the major version the server will speak.
    Accepted(u32),
    /// Refused (`rc` not 0); the version the server offers instead, if it
    /// said.
    Refused(String),
}

impl InitReply {
    /// Fail with [`PmiError::VersionMismatch`] unless the server accepted
    /// major version `major` (`wanted` is how errors name it, e.g. `2.0`).
    pub(crate) fn require(self, major: u32, wanted: &'static str) -> Result<()> {
        match self {
            InitReply::Accepted(v) if v == major => Ok(()),
            InitReply::Accepted(v) => Err(PmiError::VersionMismatch {
                wanted,
                offered: v.to_string(),
            }),
            InitReply::Refused(offered) => Err(PmiError::VersionMismatch { wanted, offered }),
        }
    }
}

/// Limits from `get_maxes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Maxes {
    pub kvsname_max: usize,
    pub keylen_max: usize,
    pub vallen_max: usize,
}

/// What an `initack` handshake tells the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub rank: u32,
    pub size: u32,
    pub debug: bool,
}

fn encode(cmd: &str, pairs: &[(&str, &str)]) -> Result<String> {
    wire::format_v1(cmd, pairs).map_err(|e| PmiError::InvalidToken {
        what: "field",
        text: e.0,
        why: "not representable in a PMI-1 line",
    })
}

/// Send one command line.
pub(crate) fn send(ch: &mut Channel, request: &'static str, pairs: &[(&str, &str)]) -> Result<()> {
    let line = encode(request, pairs)?;
    debug!(target: "portals_runtime::pmi", "pmi1 > {}", line.trim_end());
    ch.send(request, line.as_bytes())
}

/// Read one reply line and check that it answers `request` with `expect`.
/// `rc` is left to the caller.
pub(crate) fn recv(ch: &mut Channel, request: &'static str, expect: &'static str) -> Result<Msg> {
    let deadline = ch.deadline();
    let line = ch
        .conn()
        .read_line(wire::MAX_V1_LINE, deadline)
        .map_err(|f| ch.fail(request, f))?;
    debug!(target: "portals_runtime::pmi", "pmi1 < {line}");
    let m = wire::parse_v1(&line).map_err(|e| ch.malformed(request, e.0, &line))?;
    ch.expect(request, expect, m)
}

/// Send `request`, read its reply, fail on `rc` not 0.
pub(crate) fn call(
    ch: &mut Channel,
    request: &'static str,
    pairs: &[(&str, &str)],
    expect: &'static str,
) -> Result<Msg> {
    ch.usable()?;
    send(ch, request, pairs)?;
    let m = recv(ch, request, expect)?;
    check_rc(ch, request, &m)?;
    Ok(m)
}

/// `initack`: announce `PMI_ID` on a `PMI_PORT` connection; the server
/// answers with rank, size and debug flag, one `cmd=set` line each.
pub(crate) fn initack(ch: &mut Channel, id: u32) -> Result<Identity> {
    const REQ: &str = "initack";
    ch.usable()?;
    let id = id.to_string();
    send(ch, REQ, &[("pmiid", &id)])?;
    let first = recv(ch, REQ, "initack")?;
    check_rc(ch, REQ, &first)?;
    let (mut rank, mut size, mut debug) = (None, None, None);
    // MPICH's server sends exactly three `cmd=set` lines: size, rank,
    // debug. Accept them in any order, but read no more than three.
    for _ in 0..3 {
        let m = recv(ch, REQ, "set")?;
        if m.get("size").is_some() && size.is_none() {
            size = Some(number::<u32>(ch, REQ, &m, "size")?);
        } else if m.get("rank").is_some() && rank.is_none() {
            rank = Some(number::<u32>(ch, REQ, &m, "rank")?);
        } else if m.get("debug").is_some() && debug.is_none() {
            debug = Some(number::<i64>(ch, REQ, &m, "debug")? != 0);
        } else {
            return Err(ch.malformed(REQ, "unexpected or repeated set".into(), &m.raw));
        }
    }
    let (Some(rank), Some(size), Some(debug)) = (rank, size, debug) else {
        return Err(ch.malformed(REQ, "size, rank or debug missing".into(), ""));
    };
    if size == 0 || rank >= size {
        return Err(PmiError::Malformed {
            request: REQ,
            why: format!("rank {rank} of size {size}"),
            reply: String::new(),
        });
    }
    Ok(Identity { rank, size, debug })
}

/// `init` asking for `version.subversion`.
pub(crate) fn init(ch: &mut Channel, version: u32, subversion: u32) -> Result<InitReply> {
    const REQ: &str = "init";
    ch.usable()?;
    let (v, s) = (version.to_string(), subversion.to_string());
    send(ch, REQ, &[("pmi_version", &v), ("pmi_subversion", &s)])?;
    let m = recv(ch, REQ, "response_to_init")?;
    if rc(ch, REQ, &m)? != 0 {
        let offered = match (m.get("pmi_version"), m.get("pmi_subversion")) {
            (Some(v), Some(s)) => format!("{v}.{s}"),
            (Some(v), None) => v.to_string(),
            _ => "unknown".into(),
        };
        let msg = message(&m);
        debug!(target: "portals_runtime::pmi", "init {version}.{subversion} refused: {msg}");
        return Ok(InitReply::Refused(offered));
    }
    // A server that accepts without saying which version it speaks speaks
    // the one asked for.
    match m.get("pmi_version") {
        None => Ok(InitReply::Accepted(version)),
        Some(_) => Ok(InitReply::Accepted(number(ch, REQ, &m, "pmi_version")?)),
    }
}

/// `get_maxes`.
pub(crate) fn get_maxes(ch: &mut Channel) -> Result<Maxes> {
    const REQ: &str = "get_maxes";
    let m = call(ch, REQ, &[], "maxes")?;
    let mut get = |key| -> Result<usize> {
        let n: usize = number(ch, REQ, &m, key)?;
        if n < 2 {
            // Room for at least one character and the C terminator.
            return Err(ch.malformed(REQ, format!("{key}={n} is too small"), &m.raw));
        }
        Ok(n)
    };
    Ok(Maxes {
        kvsname_max: get("kvsname_max")?,
        keylen_max: get("keylen_max")?,
        vallen_max: get("vallen_max")?,
    })
}

/// `get_appnum`.
pub(crate) fn get_appnum(ch: &mut Channel) -> Result<i32> {
    const REQ: &str = "get_appnum";
    let m = call(ch, REQ, &[], "appnum")?;
    number(ch, REQ, &m, "appnum")
}

/// `get_my_kvsname`.
pub(crate) fn get_my_kvsname(ch: &mut Channel) -> Result<String> {
    const REQ: &str = "get_my_kvsname";
    let m = call(ch, REQ, &[], "my_kvsname")?;
    name(ch, REQ, &m, "kvsname")
}

/// `get_universe_size`; `None` when the server says `-1` (unlimited or
/// unknown).
pub(crate) fn get_universe_size(ch: &mut Channel) -> Result<Option<u32>> {
    const REQ: &str = "get_universe_size";
    let m = call(ch, REQ, &[], "universe_size")?;
    universe_size(ch, REQ, &m, "size")
}

/// `put` into `kvsname`.
pub(crate) fn put(ch: &mut Channel, kvsname: &str, key: &str, value: &str) -> Result<()> {
    call(
        ch,
        "put",
        &[("kvsname", kvsname), ("key", key), ("value", value)],
        "put_result",
    )
    .map(drop)
}

/// `barrier_in` / `barrier_out`.
pub(crate) fn barrier(ch: &mut Channel) -> Result<()> {
    call(ch, "barrier_in", &[], "barrier_out").map(drop)
}

/// `get` from `kvsname`.
pub(crate) fn get(ch: &mut Channel, kvsname: &str, key: &str) -> Result<String> {
    const REQ: &str = "get";
    ch.usable()?;
    send(ch, REQ, &[("kvsname", kvsname), ("key", key)])?;
    let m = recv(ch, REQ, "get_result")?;
    let not_found = || PmiError::KeyNotFound {
        key: key.to_string(),
    };
    if m.get("found").is_some() && !boolean(ch, REQ, &m, "found")? {
        return Err(not_found());
    }
    let code = rc(ch, REQ, &m)?;
    if code != 0 {
        // A missing key is an ordinary answer, not a server failure, but
        // PMI-1 only says so in prose: hydra 4.0 writes
        // msg=key_<key>_not_found, later MPICH msg=key_not_found.
        let msg = message(&m);
        if msg.contains("not_found") || msg.contains("not found") {
            return Err(not_found());
        }
        return Err(PmiError::Server {
            request: REQ,
            rc: code,
            msg,
        });
    }
    Ok(field(REQ, &m, "value")?.to_string())
}

/// `finalize`.
pub(crate) fn finalize(ch: &mut Channel) -> Result<()> {
    call(ch, "finalize", &[], "finalize_ack").map(drop)
}

/// `abort`: no reply comes; the launcher ends the job (hydra 4.0 exits
/// with `exitcode` at once, killing every process).
pub(crate) fn abort(ch: &mut Channel, code: i32, message: &str) -> Result<()> {
    let code = code.to_string();
    send(ch, "abort", &[("exitcode", &code), ("message", message)])
}
