//! Checks shared by both protocol versions on a parsed reply.

use std::str::FromStr;

use super::conn::Channel;
use super::error::{PmiError, Result};
use super::wire::Msg;

/// Fail with [`PmiError::Server`] when the reply carries a non-zero `rc`.
/// A reply without `rc` counts as success: the PMI specifications make `rc`
/// optional, and hydra omits it from several replies (`maxes`, `appnum`).
pub(crate) fn check_rc(ch: &mut Channel, request: &'static str, m: &Msg) -> Result<()> {
    match rc(ch, request, m)? {
        0 => Ok(()),
        rc => Err(PmiError::Server {
            request,
            rc,
            msg: message(m),
        }),
    }
}

/// The reply's `rc`, 0 when absent.
pub(crate) fn rc(ch: &mut Channel, request: &'static str, m: &Msg) -> Result<i64> {
    match m.get("rc") {
        None => Ok(0),
        Some(t) => t
            .trim()
            .parse()
            .map_err(|_| ch.malformed(request, format!("rc={t:?} is not an integer"), &m.raw)),
    }
}

/// The server's explanation: PMI-1 calls it `msg`, PMI-2 `errmsg`.
pub(crate) fn message(m: &Msg) -> String {
    m.get("msg")
        .or_else(|| m.get("errmsg"))
        .unwrap_or("")
        .to_string()
}

/// A field that must be present.
pub(crate) fn field<'m>(request: &'static str, m: &'m Msg, key: &'static str) -> Result<&'m str> {
    m.get(key).ok_or(PmiError::MissingKey { request, key })
}

/// A field that must be present and non-empty (a name the protocol
/// hands out: the KVS name, the job id).
pub(crate) fn name(
    ch: &mut Channel,
    request: &'static str,
    m: &Msg,
    key: &'static str,
) -> Result<String> {
    let t = field(request, m, key)?;
    if t.is_empty() {
        return Err(ch.malformed(request, format!("empty {key}"), &m.raw));
    }
    Ok(t.to_string())
}

/// A universe size as both versions report it: a positive number, or
/// anything else (`-1`, `0`) for "unknown".
pub(crate) fn universe_size(
    ch: &mut Channel,
    request: &'static str,
    m: &Msg,
    key: &'static str,
) -> Result<Option<u32>> {
    let n: i64 = number(ch, request, m, key)?;
    Ok(u32::try_from(n).ok().filter(|&n| n > 0))
}

/// A field that must be present and parse as `T`.
pub(crate) fn number<T: FromStr>(
    ch: &mut Channel,
    request: &'static str,
    m: &Msg,
    key: &'static str,
) -> Result<T> {
    let t = field(request, m, key)?;
    t.trim().parse().map_err(|_| {
        ch.malformed(
            request,
            format!("{key}={t:?} is not a valid number"),
            &m.raw,
        )
    })
}

/// A PMI boolean (`TRUE`/`FALSE`; MPICH writes them upper case, any case
/// is accepted).
pub(crate) fn boolean(
    ch: &mut Channel,
    request: &'static str,
    m: &Msg,
    key: &'static str,
) -> Result<bool> {
    let t = field(request, m, key)?;
    if t.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if t.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(ch.malformed(request, format!("{key}={t:?} is not TRUE or FALSE"), &m.raw))
    }
}
