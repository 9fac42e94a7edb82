//! The two PMI wire formats, as MPICH's hydra and Slurm speak them.
//!
//! **PMI-1** ("simple" protocol): one command per line, `\n`-terminated,
//! made of `key=value` tokens separated by spaces, the first being
//! `cmd=<name>`:
//!
//! ```text
//! cmd=put kvsname=kvs_42_0 key=addr-0 value=127.0.0.1:4000
//! cmd=put_result rc=0 msg=success
//! ```
//!
//! Keys end at the first `=`; values run to the next space or newline, so a
//! value may contain `=` but never a space. There is no escaping in the
//! servers deployed today (hydra 4.0 splits on spaces), so the client
//! refuses values that would need it.
//!
//! **PMI-2**: a six-character decimal length (hydra writes `%6u`, right
//! aligned; MPICH's client writes it left aligned, padded with spaces),
//! then that many bytes of `key=value;` pairs, the first being
//! `cmd=<name>;`. A `;` inside a value is doubled (`;;`).
//!
//! ```text
//!     28cmd=kvs-fence-response;rc=0;
//! ```

use std::fmt;

/// Longest PMI-1 line either side may send; hydra's own buffers are
/// 64 KiB, and a line longer than that is a broken peer, not a big value.
pub(crate) const MAX_V1_LINE: usize = 64 * 1024;

/// Longest PMI-2 command body (MPICH's `PMII_MAX_COMMAND_LEN`).
pub(crate) const MAX_V2_BODY: usize = 64 * 1024;

/// Width of the PMI-2 length prefix.
pub(crate) const V2_LEN_WIDTH: usize = 6;

/// Why a message could not be formatted or parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad<T>(why: impl Into<String>) -> Result<T, WireError> {
    Err(WireError(why.into()))
}

/// A parsed command or reply: its `cmd` and the other pairs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Msg {
    pub cmd: String,
    pub pairs: Vec<(String, String)>,
    /// The text it was parsed from, for error reports.
    pub raw: String,
}

impl Msg {
    /// The first value under `key` (servers never repeat keys in the
    /// replies this client reads; taking the first keeps that well defined).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

// ----- PMI-1 -------------------------------------------------------------------

fn check_v1_key(key: &str) -> Result<(), WireError> {
    if key.is_empty() {
        return bad("empty key");
    }
    if key.bytes().any(|b| b == b' ' || b == b'=' || b == b'\n') {
        return bad(format!("key {key:?} contains a space, '=' or newline"));
    }
    Ok(())
}

fn check_v1_value(value: &str) -> Result<(), WireError> {
    if value.bytes().any(|b| b == b' ' || b == b'\n') {
        return bad(format!("value {value:?} contains a space or newline"));
    }
    Ok(())
}

/// Format a PMI-1 command line, newline included.
pub(crate) fn format_v1(cmd: &str, pairs: &[(&str, &str)]) -> Result<String, WireError> {
    check_v1_value(cmd)?;
    if cmd.is_empty() {
        return bad("empty command");
    }
    let mut line = format!("cmd={cmd}");
    for (k, v) in pairs {
        check_v1_key(k)?;
        check_v1_value(v)?;
        line.push(' ');
        line.push_str(k);
        line.push('=');
        line.push_str(v);
    }
    line.push('\n');
    if line.len() > MAX_V1_LINE {
        return bad("line too long");
    }
    Ok(line)
}

/// Parse one PMI-1 line (with or without its trailing newline).
pub(crate) fn parse_v1(line: &str) -> Result<Msg, WireError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    if line.contains('\n') {
        return bad("embedded newline");
    }
    let mut cmd = None;
    let mut pairs = Vec::new();
    for token in line.split(' ').filter(|t| !t.is_empty()) {
        let Some((k, v)) = token.split_once('=') else {
            return bad(format!("token {token:?} has no '='"));
        };
        if k.is_empty() {
            return bad(format!("token {token:?} has an empty key"));
        }
        if k == "cmd" && cmd.is_none() {
            cmd = Some(v.to_string());
        } else {
            pairs.push((k.to_string(), v.to_string()));
        }
    }
    match cmd {
        Some(c) if !c.is_empty() => Ok(Msg {
            cmd: c,
            pairs,
            raw: line.to_string(),
        }),
        Some(_) => bad("empty cmd"),
        None if line.trim().is_empty() => bad("empty line"),
        None => bad("no cmd= field"),
    }
}

// ----- PMI-2 -------------------------------------------------------------------

/// Format a PMI-2 command, length prefix included.
pub(crate) fn format_v2(cmd: &str, pairs: &[(&str, &str)]) -> Result<Vec<u8>, WireError> {
    fn push_key(body: &mut String, key: &str) -> Result<(), WireError> {
        if key.is_empty() || key.bytes().any(|b| b == b'=' || b == b';') {
            return bad(format!("key {key:?} is empty or contains '=' or ';'"));
        }
        body.push_str(key);
        body.push('=');
        Ok(())
    }
    fn push_value(body: &mut String, value: &str) {
        for c in value.chars() {
            if c == ';' {
                body.push(';');
            }
            body.push(c);
        }
        body.push(';');
    }
    if cmd.is_empty() {
        return bad("empty command");
    }
    let mut body = String::new();
    push_key(&mut body, "cmd")?;
    push_value(&mut body, cmd);
    for (k, v) in pairs {
        push_key(&mut body, k)?;
        push_value(&mut body, v);
    }
    if body.len() > MAX_V2_BODY {
        return bad("command too long");
    }
    let mut out = format!("{:width$}", body.len(), width = V2_LEN_WIDTH).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Ok(out)
}

/// Parse the six-byte PMI-2 length prefix.
pub(crate) fn parse_v2_len(prefix: &[u8]) -> Result<usize, WireError> {
    let text = std::str::from_utf8(prefix).map_err(|_| WireError("length is not ASCII".into()))?;
    let digits = text.trim_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return bad(format!("length prefix {text:?} is not a decimal number"));
    }
    let len: usize = digits
        .parse()
        .map_err(|_| WireError(format!("length prefix {text:?} out of range")))?;
    if len == 0 {
        return bad("empty command");
    }
    if len > MAX_V2_BODY {
        return bad(format!("command of {len} bytes exceeds {MAX_V2_BODY}"));
    }
    Ok(len)
}

/// Parse a PMI-2 command body (what follows the length prefix).
pub(crate) fn parse_v2_body(body: &str) -> Result<Msg, WireError> {
    let mut rest = body;
    let mut all = Vec::new();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else {
            return bad(format!("pair {rest:?} has no '='"));
        };
        let key = &rest[..eq];
        if key.is_empty() {
            return bad("empty key");
        }
        if key.contains(';') {
            return bad(format!("pair {key:?} has no '='"));
        }
        rest = &rest[eq + 1..];
        // The value runs to the first single ';' (";;" is an escaped ';'),
        // or to the end of the body: the length prefix already frames the
        // message, so a missing final ';' loses nothing.
        let mut value = String::new();
        let mut chars = rest.char_indices().peekable();
        let mut consumed = rest.len();
        while let Some((i, c)) = chars.next() {
            if c == ';' {
                if let Some(&(_, ';')) = chars.peek() {
                    chars.next();
                    value.push(';');
                    continue;
                }
                consumed = i + 1;
                break;
            }
            value.push(c);
        }
        rest = &rest[consumed..];
        all.push((key.to_string(), value));
    }
    let mut it = all.into_iter();
    match it.next() {
        Some((k, cmd)) if k == "cmd" && !cmd.is_empty() => Ok(Msg {
            cmd,
            pairs: it.collect(),
            raw: body.to_string(),
        }),
        Some((k, _)) if k == "cmd" => bad("empty cmd"),
        Some(_) => bad("first pair is not cmd="),
        None => bad("empty command"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmi::testutil::within;

    fn pairs(m: &Msg) -> Vec<(&str, &str)> {
        m.pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn v1_format_is_exact() {
        within(5, || {
            assert_eq!(
                format_v1("init", &[("pmi_version", "1"), ("pmi_subversion", "1")]).unwrap(),
                "cmd=init pmi_version=1 pmi_subversion=1\n"
            );
            assert_eq!(format_v1("barrier_in", &[]).unwrap(), "cmd=barrier_in\n");
            // Values may be empty and may carry '='.
            assert_eq!(
                format_v1("put", &[("key", "k"), ("value", "")]).unwrap(),
                "cmd=put key=k value=\n"
            );
            assert_eq!(
                format_v1("put", &[("value", "a=b")]).unwrap(),
                "cmd=put value=a=b\n"
            );
        });
    }

    #[test]
    fn v1_format_refuses_what_the_wire_cannot_carry() {
        within(5, || {
            assert!(format_v1("put", &[("value", "a b")]).is_err());
            assert!(format_v1("put", &[("value", "a\nb")]).is_err());
            assert!(format_v1("put", &[("k=x", "v")]).is_err());
            assert!(format_v1("put", &[("", "v")]).is_err());
            assert!(format_v1("", &[]).is_err());
            assert!(format_v1("a b", &[]).is_err());
            let huge = "x".repeat(MAX_V1_LINE);
            assert!(format_v1("put", &[("value", &huge)]).is_err());
        });
    }

    #[test]
    fn v1_parse_reply() {
        within(5, || {
            let m = parse_v1("cmd=get_result rc=0 msg=success value=10.0.0.1:80=x\n").unwrap();
            assert_eq!(m.cmd, "get_result");
            assert_eq!(
                pairs(&m),
                [("rc", "0"), ("msg", "success"), ("value", "10.0.0.1:80=x")]
            );
            assert_eq!(m.get("value"), Some("10.0.0.1:80=x"));
            assert_eq!(m.get("nope"), None);
            // Extra spaces are tolerated; cmd need not come first.
            let m = parse_v1("  rc=0   cmd=barrier_out  ").unwrap();
            assert_eq!(m.cmd, "barrier_out");
            assert_eq!(pairs(&m), [("rc", "0")]);
            // An empty value is a value.
            let m = parse_v1("cmd=x value=").unwrap();
            assert_eq!(m.get("value"), Some(""));
        });
    }

    #[test]
    fn v1_parse_rejects_malformed_lines() {
        within(5, || {
            for bad in [
                "",
                "\n",
                "   ",
                "garbage",
                "cmd=ok stray",
                "=value cmd=x",
                "rc=0 msg=no_cmd",
                "cmd= rc=0",
                "cmd=a\nrc=0",
            ] {
                assert!(parse_v1(bad).is_err(), "accepted {bad:?}");
            }
        });
    }

    #[test]
    fn v2_format_is_exact() {
        within(5, || {
            let out = format_v2("kvs-put", &[("key", "k"), ("value", "a;b")]).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "    29cmd=kvs-put;key=k;value=a;;b;"
            );
            let out = format_v2("kvs-fence", &[]).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), "    14cmd=kvs-fence;");
            assert!(format_v2("x", &[("a=b", "v")]).is_err());
            assert!(format_v2("x", &[("a;b", "v")]).is_err());
            assert!(format_v2("", &[]).is_err());
            let huge = "x".repeat(MAX_V2_BODY);
            assert!(format_v2("x", &[("v", &huge)]).is_err());
        });
    }

    #[test]
    fn v2_round_trip() {
        within(5, || {
            let values = ["", ";", ";;", "a;", ";a", "a=b", "x y", "é"];
            for v in values {
                let out = format_v2("c", &[("k", v), ("z", "1")]).unwrap();
                let len = parse_v2_len(&out[..V2_LEN_WIDTH]).unwrap();
                let body = std::str::from_utf8(&out[V2_LEN_WIDTH..]).unwrap();
                assert_eq!(len, body.len());
                let m = parse_v2_body(body).unwrap();
                assert_eq!(m.cmd, "c");
                assert_eq!(pairs(&m), [("k", v), ("z", "1")], "value {v:?}");
            }
        });
    }

    #[test]
    fn v2_length_prefix_both_alignments() {
        within(5, || {
            assert_eq!(parse_v2_len(b"    28").unwrap(), 28);
            assert_eq!(parse_v2_len(b"28    ").unwrap(), 28);
            assert_eq!(parse_v2_len(b"000028").unwrap(), 28);
            for bad in [
                &b"      "[..],
                b"  -1  ",
                b"  2 8 ",
                b"abcdef",
                b"     0",
                b"999999",
                b"\xff\xff\xff\xff\xff\xff",
            ] {
                assert!(parse_v2_len(bad).is_err(), "accepted {bad:?}");
            }
        });
    }

    #[test]
    fn v2_parse_reply() {
        within(5, || {
            let m =
                parse_v2_body("cmd=fullinit-response;pmi-version=2;rank=1;size=2;appnum=0;rc=0;")
                    .unwrap();
            assert_eq!(m.cmd, "fullinit-response");
            assert_eq!(m.get("rank"), Some("1"));
            assert_eq!(m.get("rc"), Some("0"));
            // Missing final ';' is tolerated: the length frames the message.
            let m = parse_v2_body("cmd=kvs-fence-response;rc=0").unwrap();
            assert_eq!(m.get("rc"), Some("0"));
            // Empty values.
            let m = parse_v2_body("cmd=x;v=;w=1;").unwrap();
            assert_eq!(pairs(&m), [("v", ""), ("w", "1")]);
        });
    }

    #[test]
    fn v2_parse_rejects_malformed_bodies() {
        within(5, || {
            for bad in [
                "",
                "garbage",
                "rc=0;cmd=x;",
                "cmd=;rc=0;",
                "cmd=x;junk;",
                "cmd=x;=v;",
                "cmd=x;rc",
            ] {
                assert!(parse_v2_body(bad).is_err(), "accepted {bad:?}");
            }
        });
    }
}
