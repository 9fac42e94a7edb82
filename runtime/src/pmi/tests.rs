//! The client against a scripted fake process manager.
//!
//! [`every_reply_broken_every_way`] walks a whole session of each protocol
//! version — every command the client sends — and breaks each reply in
//! every way a server can: garbage, the wrong command, a refusal, a bad
//! `rc`, a missing or invalid field, silence, a reply cut short. The other
//! tests cover what a table cannot: start-up (version negotiation, the
//! identity handshake over `PMI_PORT`, in [`startup`]), limits, timeouts,
//! abort, and the inherited descriptor.

use std::os::fd::IntoRawFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::fake::{raw, rep1, rep2, req1, req2, Fake, Step};
use super::testutil::{fd_env, within};
use super::*;

mod startup;

const KVS: &str = "kvs_77_0_123_vm";

const BOTH: [PmiVersion; 2] = [PmiVersion::V1, PmiVersion::V2];

fn opts(version: VersionPreference) -> PmiOptions {
    PmiOptions {
        version,
        timeout: Duration::from_secs(3),
    }
}

fn forced(v: PmiVersion) -> VersionPreference {
    match v {
        PmiVersion::V1 => VersionPreference::V1,
        PmiVersion::V2 => VersionPreference::V2,
    }
}

/// A command in the syntax of `v`: `cmd=C k=v …` (PMI-1) or
/// `cmd=C;k=v;…;` (PMI-2), without framing.
fn text<V: AsRef<str>>(v: PmiVersion, cmd: &str, pairs: &[(&str, V)]) -> String {
    let mut out = format!("cmd={cmd}");
    for (k, val) in pairs {
        let sep = if v == PmiVersion::V1 { " " } else { ";" };
        out.push_str(&format!("{sep}{k}={}", val.as_ref()));
    }
    if v == PmiVersion::V2 {
        out.push(';');
    }
    out
}

/// A request as the client writes it in the syntax of `v`.
fn request(v: PmiVersion, cmd: &str, pairs: &[(&str, &str)]) -> Step {
    match v {
        PmiVersion::V1 => req1(&text(v, cmd, pairs)),
        PmiVersion::V2 => req2(&text(v, cmd, pairs)),
    }
}

/// A reply in the syntax of `v`, framed as hydra frames it.
fn reply(v: PmiVersion, cmd: &str, fields: &[(&str, String)]) -> Step {
    match v {
        PmiVersion::V1 => rep1(&text(v, cmd, fields)),
        PmiVersion::V2 => rep2(&text(v, cmd, fields)),
    }
}

/// One request of a session and hydra's answer to it.
#[derive(Clone)]
struct Exchange {
    /// The syntax of both (PMI-2's first `init` is in PMI-1 syntax).
    syntax: PmiVersion,
    request: Step,
    /// The request as errors name it.
    name: &'static str,
    reply_cmd: &'static str,
    fields: Vec<(&'static str, String)>,
    /// Fields whose absence is [`PmiError::MissingKey`].
    required: &'static [&'static str],
    /// A field value the client must refuse as malformed.
    invalid: &'static [(&'static str, &'static str)],
}

impl Exchange {
    fn good(&self) -> Vec<Step> {
        vec![
            self.request.clone(),
            reply(self.syntax, self.reply_cmd, &self.fields),
        ]
    }
}

fn ex(
    syntax: PmiVersion,
    request: Step,
    name: &'static str,
    reply_cmd: &'static str,
    fields: &[(&'static str, &str)],
    required: &'static [&'static str],
    invalid: &'static [(&'static str, &'static str)],
) -> Exchange {
    Exchange {
        syntax,
        request,
        name,
        reply_cmd,
        fields: fields.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        required,
        invalid,
    }
}

type OpFn = fn(&mut Option<PmiClient>) -> Result<()>;

/// A client call after start-up and the exchanges it makes.
struct Op {
    run: OpFn,
    exchanges: Vec<Exchange>,
}

fn client(c: &mut Option<PmiClient>) -> &mut PmiClient {
    c.as_mut().expect("a client")
}

/// A whole session as hydra 4.0 serves rank 1 of 2: start-up, put, fence,
/// get, universe size, finalize.
struct Session {
    version: PmiVersion,
    startup: Vec<Exchange>,
    ops: Vec<Op>,
}

fn session(v: PmiVersion) -> Session {
    use PmiVersion::{V1, V2};
    let (put, fence, get, usize_, fin): (OpFn, OpFn, OpFn, OpFn, OpFn) = (
        |c| client(c).put("k", "v"),
        |c| client(c).fence(),
        |c| client(c).get("k").map(|got| assert_eq!(got, "v")),
        |c| client(c).universe_size().map(|n| assert_eq!(n, Some(4))),
        |c| c.take().expect("a client").finalize(),
    );
    let op = |run, exchanges| Op { run, exchanges };
    match v {
        V1 => Session {
            version: v,
            startup: vec![
                ex(
                    V1,
                    request(V1, "init", &[("pmi_version", "1"), ("pmi_subversion", "1")]),
                    "init",
                    "response_to_init",
                    &[("pmi_version", "1"), ("pmi_subversion", "1"), ("rc", "0")],
                    &[],
                    &[("pmi_version", "x")],
                ),
                ex(
                    V1,
                    request(V1, "get_maxes", &[]),
                    "get_maxes",
                    "maxes",
                    &[
                        ("kvsname_max", "256"),
                        ("keylen_max", "64"),
                        ("vallen_max", "1024"),
                    ],
                    &["kvsname_max", "keylen_max", "vallen_max"],
                    &[
                        ("kvsname_max", "x"),
                        ("keylen_max", "1"),
                        ("vallen_max", "-4"),
                    ],
                ),
                ex(
                    V1,
                    request(V1, "get_appnum", &[]),
                    "get_appnum",
                    "appnum",
                    &[("appnum", "0")],
                    &["appnum"],
                    &[("appnum", "x")],
                ),
                ex(
                    V1,
                    request(V1, "get_my_kvsname", &[]),
                    "get_my_kvsname",
                    "my_kvsname",
                    &[("kvsname", KVS)],
                    &["kvsname"],
                    &[("kvsname", "")],
                ),
            ],
            ops: vec![
                op(
                    put,
                    vec![ex(
                        V1,
                        request(V1, "put", &[("kvsname", KVS), ("key", "k"), ("value", "v")]),
                        "put",
                        "put_result",
                        &[("rc", "0"), ("msg", "success")],
                        &[],
                        &[],
                    )],
                ),
                op(
                    fence,
                    vec![ex(
                        V1,
                        request(V1, "barrier_in", &[]),
                        "barrier_in",
                        "barrier_out",
                        &[],
                        &[],
                        &[],
                    )],
                ),
                op(
                    get,
                    vec![ex(
                        V1,
                        request(V1, "get", &[("kvsname", KVS), ("key", "k")]),
                        "get",
                        "get_result",
                        &[("rc", "0"), ("msg", "success"), ("value", "v")],
                        &["value"],
                        &[("found", "maybe")],
                    )],
                ),
                op(
                    usize_,
                    vec![ex(
                        V1,
                        request(V1, "get_universe_size", &[]),
                        "get_universe_size",
                        "universe_size",
                        &[("size", "4")],
                        &["size"],
                        &[("size", "four")],
                    )],
                ),
                op(
                    fin,
                    vec![ex(
                        V1,
                        request(V1, "finalize", &[]),
                        "finalize",
                        "finalize_ack",
                        &[],
                        &[],
                        &[],
                    )],
                ),
            ],
        },
        V2 => {
            let get_key = |key: &'static str| {
                request(
                    V2,
                    "kvs-get",
                    &[("jobid", KVS), ("srcid", "-1"), ("key", key)],
                )
            };
            Session {
                version: v,
                startup: vec![
                    ex(
                        V1,
                        request(V1, "init", &[("pmi_version", "2"), ("pmi_subversion", "0")]),
                        "init",
                        "response_to_init",
                        &[("pmi_version", "2"), ("pmi_subversion", "0"), ("rc", "0")],
                        &[],
                        &[("pmi_version", "x")],
                    ),
                    ex(
                        V2,
                        request(V2, "fullinit", &[("pmirank", "1"), ("threaded", "FALSE")]),
                        "fullinit",
                        "fullinit-response",
                        &[
                            ("pmi-version", "2"),
                            ("pmi-subversion", "0"),
                            ("rank", "1"),
                            ("size", "2"),
                            ("appnum", "0"),
                            ("debugged", "FALSE"),
                            ("pmiverbose", "FALSE"),
                            ("rc", "0"),
                        ],
                        &["rank", "size", "appnum"],
                        &[
                            ("rank", "x"),
                            ("rank", "2"),
                            ("size", "0"),
                            ("appnum", "x"),
                            ("debugged", "maybe"),
                        ],
                    ),
                    ex(
                        V2,
                        request(V2, "job-getid", &[]),
                        "job-getid",
                        "job-getid-response",
                        &[("jobid", KVS), ("rc", "0")],
                        &["jobid"],
                        &[("jobid", "")],
                    ),
                ],
                ops: vec![
                    op(
                        put,
                        vec![ex(
                            V2,
                            request(V2, "kvs-put", &[("key", "k"), ("value", "v")]),
                            "kvs-put",
                            "kvs-put-response",
                            &[("rc", "0")],
                            &[],
                            &[],
                        )],
                    ),
                    op(
                        fence,
                        vec![
                            ex(
                                V2,
                                request(V2, "kvs-fence", &[]),
                                "kvs-fence",
                                "kvs-fence-response",
                                &[("rc", "0")],
                                &[],
                                &[],
                            ),
                            // Hydra's fence does not wait; the get of an
                            // unput key does (see v2::barrier).
                            ex(
                                V2,
                                get_key("ptl.pmi.barrier"),
                                "kvs-get",
                                "kvs-get-response",
                                &[("found", "FALSE"), ("rc", "0")],
                                &["found"],
                                &[("found", "maybe")],
                            ),
                        ],
                    ),
                    op(
                        get,
                        vec![ex(
                            V2,
                            get_key("k"),
                            "kvs-get",
                            "kvs-get-response",
                            &[("found", "TRUE"), ("value", "v"), ("rc", "0")],
                            &["found", "value"],
                            &[("found", "maybe")],
                        )],
                    ),
                    op(
                        usize_,
                        vec![ex(
                            V2,
                            request(V2, "info-getjobattr", &[("key", "universeSize")]),
                            "info-getjobattr",
                            "info-getjobattr-response",
                            &[("found", "TRUE"), ("value", "4"), ("rc", "0")],
                            &["found", "value"],
                            &[("found", "maybe"), ("value", "four")],
                        )],
                    ),
                    op(
                        fin,
                        vec![ex(
                            V2,
                            request(V2, "finalize", &[]),
                            "finalize",
                            "finalize-response",
                            &[("rc", "0")],
                            &[],
                            &[],
                        )],
                    ),
                ],
            }
        }
    }
}

/// What a broken server sends instead of a good reply.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Not the wire format at all.
    Garbage,
    /// A well-formed reply to another command.
    WrongCommand,
    /// `rc=-1` with an explanation.
    Refused,
    /// An `rc` that is not a number.
    BadRc,
    /// A required field left out.
    Missing(&'static str),
    /// A field with a value the client must refuse.
    Invalid(&'static str, &'static str),
    /// No reply: the server closes the connection.
    Silent,
    /// The first half of the good reply, then the connection closes.
    CutShort,
}

impl Fault {
    /// Whether the client must stop using the connection afterwards (the
    /// reply was incomplete or not understood; a refusal or a complete
    /// reply lacking a field leaves it in step).
    fn poisons(self) -> bool {
        !matches!(self, Fault::Refused | Fault::Missing(_))
    }
}

fn faults(e: &Exchange) -> Vec<Fault> {
    let mut all = vec![
        Fault::Garbage,
        Fault::WrongCommand,
        Fault::Refused,
        Fault::BadRc,
        Fault::Silent,
        Fault::CutShort,
    ];
    all.extend(e.required.iter().map(|k| Fault::Missing(k)));
    all.extend(e.invalid.iter().map(|(k, v)| Fault::Invalid(k, v)));
    all
}

fn with_field(
    fields: &[(&'static str, String)],
    key: &'static str,
    value: Option<&str>,
) -> Vec<(&'static str, String)> {
    let mut out: Vec<_> = fields.iter().filter(|(k, _)| *k != key).cloned().collect();
    if let Some(v) = value {
        out.push((key, v.to_string()));
    }
    out
}

/// What the server sends for `fault` in answer to `e`.
fn broken(e: &Exchange, fault: Fault) -> Vec<Step> {
    let send = |cmd: &str, fields: &[(&str, String)]| vec![reply(e.syntax, cmd, fields)];
    match fault {
        Fault::Garbage => match e.syntax {
            PmiVersion::V1 => vec![rep1("garbage")],
            PmiVersion::V2 => vec![rep2("garbage")],
        },
        Fault::WrongCommand => send("bogus", &e.fields),
        Fault::Refused => {
            let why = match e.syntax {
                PmiVersion::V1 => "msg",
                PmiVersion::V2 => "errmsg",
            };
            let fields = with_field(&e.fields, "rc", Some("-1"));
            send(e.reply_cmd, &with_field(&fields, why, Some("refused")))
        }
        Fault::BadRc => send(e.reply_cmd, &with_field(&e.fields, "rc", Some("zero"))),
        Fault::Missing(key) => send(e.reply_cmd, &with_field(&e.fields, key, None)),
        Fault::Invalid(key, value) => send(e.reply_cmd, &with_field(&e.fields, key, Some(value))),
        Fault::Silent => vec![],
        Fault::CutShort => match reply(e.syntax, e.reply_cmd, &e.fields) {
            Step::Send(bytes) => vec![raw(&bytes[..bytes.len() / 2])],
            other => panic!("a reply is sent: {other:?}"),
        },
    }
}

/// Whether `err` is what `fault` in answer to `e` must give.
fn expected(e: &Exchange, fault: Fault, err: &PmiError) -> bool {
    let name = e.name;
    match (fault, err) {
        (Fault::Refused, PmiError::VersionMismatch { .. }) => name == "init",
        (Fault::Refused, PmiError::Server { request, rc, msg }) => {
            name != "init" && *request == name && *rc == -1 && msg == "refused"
        }
        (
            Fault::WrongCommand,
            PmiError::UnexpectedCommand {
                request,
                expected,
                got,
            },
        ) => *request == name && *expected == e.reply_cmd && got == "bogus",
        (Fault::Missing(k), PmiError::MissingKey { request, key }) => *request == name && *key == k,
        (
            Fault::Garbage | Fault::BadRc | Fault::Invalid(..),
            PmiError::Malformed { request, .. },
        ) => *request == name,
        (Fault::Silent | Fault::CutShort, PmiError::Closed { request }) => *request == name,
        _ => false,
    }
}

/// Play `s` with the reply to exchange `at` (an index into the start-up
/// exchanges followed by every op's) replaced by `fault`; return the error
/// the client reported, the client if start-up had succeeded, and the
/// exchange broken.
fn run_broken(s: &Session, at: usize, fault: Fault) -> (PmiError, Option<PmiClient>, Exchange) {
    // Every exchange with the op that makes it (`None`: start-up).
    let all: Vec<(Option<usize>, &Exchange)> = s
        .startup
        .iter()
        .map(|e| (None, e))
        .chain(
            s.ops
                .iter()
                .enumerate()
                .flat_map(|(i, op)| op.exchanges.iter().map(move |e| (Some(i), e))),
        )
        .collect();
    let (failing_op, target) = all[at];
    let mut script: Vec<Step> = all[..at].iter().flat_map(|(_, e)| e.good()).collect();
    script.push(target.request.clone());
    script.extend(broken(target, fault));
    let (sock, fake) = Fake::pair(script);
    let connected = PmiClient::connect(
        PmiTransport::Unix(sock),
        &fd_env(1, 2),
        &opts(forced(s.version)),
    );
    let (mut c, failing_op) = match (connected, failing_op) {
        (Err(err), None) => {
            fake.finish();
            return (err, None, target.clone());
        }
        (Ok(c), Some(i)) => (Some(c), i),
        (r, _) => panic!("{} start-up: {:?}", target.name, r.map(|c| c.version())),
    };
    for (i, op) in s.ops.iter().enumerate() {
        match ((op.run)(&mut c), i == failing_op) {
            (Ok(()), false) => {}
            (Err(err), true) => {
                fake.finish();
                return (err, c, target.clone());
            }
            (r, _) => panic!("{} in op {i}: {r:?}", target.name),
        }
    }
    panic!("{}: no call failed", target.name)
}

#[test]
fn every_reply_broken_every_way() {
    within(120, || {
        let mut cases = 0;
        for v in BOTH {
            let s = session(v);
            let count = s.startup.len() + s.ops.iter().map(|o| o.exchanges.len()).sum::<usize>();
            for at in 0..count {
                let target = s
                    .startup
                    .iter()
                    .chain(s.ops.iter().flat_map(|o| &o.exchanges))
                    .nth(at)
                    .expect("exchange")
                    .clone();
                for fault in faults(&target) {
                    let (err, c, e) = run_broken(&s, at, fault);
                    cases += 1;
                    let what = format!("PMI {v} {} {fault:?}", e.name);
                    assert!(expected(&e, fault, &err), "{what}: got {err:?}");
                    let Some(mut c) = c else { continue };
                    // Out of step: refused without a byte sent. In step: the
                    // next request goes out (and finds the fake gone).
                    match c.universe_size() {
                        Err(PmiError::Poisoned) => assert!(fault.poisons(), "{what}"),
                        Err(PmiError::Closed { .. }) => assert!(!fault.poisons(), "{what}"),
                        other => panic!("{what}: then {other:?}"),
                    }
                }
            }
        }
        // 9 exchanges of PMI-1 and 10 of PMI-2, 6 faults each, plus one per
        // required and per invalid field: the table really ran.
        assert_eq!(cases, 143);
    });
}

#[test]
fn a_whole_session_in_both_versions() {
    within(20, || {
        for v in BOTH {
            let s = session(v);
            let mut script: Vec<Step> = s.startup.iter().flat_map(Exchange::good).collect();
            for op in &s.ops {
                script.extend(op.exchanges.iter().flat_map(Exchange::good));
            }
            script.push(Step::Eof);
            let (sock, fake) = Fake::pair(script);
            let c = PmiClient::connect(PmiTransport::Unix(sock), &fd_env(1, 2), &opts(forced(v)))
                .expect("start-up");
            assert_eq!(c.version(), v);
            assert_eq!((c.rank(), c.size(), c.appnum()), (1, 2, 0));
            assert_eq!(c.kvs_name(), KVS);
            assert!(!c.spawned() && !c.debug());
            // PMI-1: keylen_max less the terminator; the value limit shrunk
            // as MPICH's client does so a put line fits 1024 bytes:
            // 1024-256-64-30-1. PMI-2: hydra's fixed buffers less one.
            let limits = match v {
                PmiVersion::V1 => (63, 673),
                PmiVersion::V2 => (63, 1023),
            };
            assert_eq!((c.max_key_len(), c.max_val_len()), limits);
            // Each op checks its own result (get: "v", universe size: 4).
            let mut c = Some(c);
            for op in &s.ops {
                (op.run)(&mut c).unwrap_or_else(|e| panic!("PMI {v}: {e}"));
            }
            fake.finish();
        }
    });
}

// ----- start-up ------------------------------------------------------------------

/// What hydra 4.0 answers to MPICH's PMI-1 start-up, in order.
fn v1_start() -> Vec<Step> {
    session(PmiVersion::V1)
        .startup
        .iter()
        .flat_map(Exchange::good)
        .collect()
}

/// What hydra 4.0 answers to a PMI-2 start-up from rank 1 of 2.
fn v2_start() -> Vec<Step> {
    session(PmiVersion::V2)
        .startup
        .iter()
        .flat_map(Exchange::good)
        .collect()
}

/// A client of version `v` (rank 1 of 2) that has finished its start-up,
/// and the fake that will play `then` afterwards.
fn started(v: PmiVersion, then: Vec<Step>) -> (PmiClient, Fake) {
    let mut script = match v {
        PmiVersion::V1 => v1_start(),
        PmiVersion::V2 => v2_start(),
    };
    script.extend(then);
    let (sock, fake) = Fake::pair(script);
    let c = PmiClient::connect(PmiTransport::Unix(sock), &fd_env(1, 2), &opts(forced(v)))
        .unwrap_or_else(|e| panic!("PMI {v} start-up: {e}"));
    (c, fake)
}

/// Run a start-up against `script` and return its result.
fn startup(script: Vec<Step>, env: &PmiEnv, version: VersionPreference) -> Result<PmiClient> {
    let (sock, fake) = Fake::pair(script);
    let r = PmiClient::connect(PmiTransport::Unix(sock), env, &opts(version));
    fake.finish();
    r
}

// ----- the key-value space ---------------------------------------------------------

/// The requests of a `fence` in version `v`, answered.
fn fence(v: PmiVersion) -> Vec<Step> {
    session(v).ops[1]
        .exchanges
        .iter()
        .flat_map(Exchange::good)
        .collect()
}

fn get_req(v: PmiVersion, key: &str) -> Step {
    match v {
        PmiVersion::V1 => request(v, "get", &[("kvsname", KVS), ("key", key)]),
        PmiVersion::V2 => request(
            v,
            "kvs-get",
            &[("jobid", KVS), ("srcid", "-1"), ("key", key)],
        ),
    }
}

#[test]
fn a_missing_key_in_every_dialect() {
    within(10, || {
        let cases = [
            // hydra 4.0
            (
                PmiVersion::V1,
                "cmd=get_result rc=-1 msg=key_a_not_found value=unknown",
            ),
            // MPICH 4.1 and later
            (PmiVersion::V1, "cmd=get_result rc=1 msg=key_not_found"),
            (PmiVersion::V1, "cmd=get_result found=FALSE rc=0"),
            (PmiVersion::V2, "cmd=kvs-get-response;found=FALSE;rc=0;"),
        ];
        for (v, answer) in cases {
            let mut then = fence(v);
            then.push(get_req(v, "a"));
            then.push(match v {
                PmiVersion::V1 => rep1(answer),
                PmiVersion::V2 => rep2(answer),
            });
            let (mut c, fake) = started(v, then);
            c.fence().unwrap();
            match c.get("a") {
                Err(PmiError::KeyNotFound { key }) => assert_eq!(key, "a"),
                other => panic!("{answer}: {other:?}"),
            }
            fake.finish();
        }
    });
}

#[test]
fn v2_barrier_completes_even_if_the_server_holds_its_key() {
    within(10, || {
        let mut then = vec![req2("cmd=kvs-fence;"), rep2("cmd=kvs-fence-response;rc=0;")];
        then.push(get_req(PmiVersion::V2, "ptl.pmi.barrier"));
        then.push(rep2("cmd=kvs-get-response;found=TRUE;value=x;rc=0;"));
        let (mut c, fake) = started(PmiVersion::V2, then);
        c.barrier().unwrap();
        fake.finish();
    });
}

#[test]
fn get_before_the_first_fence_is_refused_without_asking() {
    within(10, || {
        for v in BOTH {
            let (mut c, fake) = started(v, vec![Step::Eof]);
            assert!(matches!(c.get("k"), Err(PmiError::Usage(_))), "{v}");
            drop(c);
            fake.finish();
        }
    });
}

#[test]
fn a_refusal_leaves_the_connection_in_step() {
    within(10, || {
        for v in BOTH {
            let s = session(v);
            let (put, barrier) = (&s.ops[0].exchanges[0], &s.ops[1].exchanges[0]);
            let refused = |e: &Exchange| broken(e, Fault::Refused);
            let mut then = vec![put.request.clone()];
            then.extend(refused(put));
            then.push(barrier.request.clone());
            then.extend(refused(barrier));
            then.extend(put.good());
            let (mut c, fake) = started(v, then);
            let err = c.put("k", "v").unwrap_err();
            assert!(
                matches!(&err, PmiError::Server { rc: -1, msg, .. } if msg == "refused"),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("PMI {} failed: rc=-1 refused", put.name)
            );
            assert!(matches!(c.fence(), Err(PmiError::Server { .. })));
            // A failed fence does not count: get is still refused.
            assert!(matches!(c.get("k"), Err(PmiError::Usage(_))));
            c.put("k", "v").unwrap();
            fake.finish();
        }
    });
}

#[test]
fn invalid_keys_and_values_are_refused_without_asking() {
    within(10, || {
        let (mut c, fake) = started(PmiVersion::V1, vec![Step::Eof]);
        let long_key = "k".repeat(64);
        let long_val = "v".repeat(674);
        for (key, value) in [
            ("", "v"),
            ("a b", "v"),
            ("a=b", "v"),
            ("k", "a b"),
            ("k", "a;b"),
            ("k", "a=b"),
            ("k", "a\\b"),
            ("k", "é"),
            ("k", "tab\t"),
            ("ptl.pmi.barrier", "v"),
        ] {
            assert!(
                matches!(c.put(key, value), Err(PmiError::InvalidToken { .. })),
                "accepted {key:?}={value:?}"
            );
        }
        assert!(matches!(
            c.put(&long_key, "v"),
            Err(PmiError::TooLong {
                what: "key",
                len: 64,
                max: 63
            })
        ));
        assert!(matches!(
            c.put("k", &long_val),
            Err(PmiError::TooLong {
                what: "value",
                len: 674,
                max: 673
            })
        ));
        drop(c);
        fake.finish();
    });
}

#[test]
fn limits_are_inclusive() {
    within(10, || {
        let key = "k".repeat(63);
        let value = "v".repeat(673);
        let (mut c, fake) = started(
            PmiVersion::V1,
            vec![
                req1(&format!("cmd=put kvsname={KVS} key={key} value={value}")),
                rep1("cmd=put_result rc=0"),
                req1(&format!("cmd=put kvsname={KVS} key=empty value=")),
                rep1("cmd=put_result rc=0"),
            ],
        );
        c.put(&key, &value).unwrap();
        c.put("empty", "").unwrap();
        fake.finish();
    });
}

// ----- abort ---------------------------------------------------------------------

fn abort_req(v: PmiVersion, code: &str, msg: &str) -> Step {
    match v {
        PmiVersion::V1 => request(v, "abort", &[("exitcode", code), ("message", msg)]),
        PmiVersion::V2 => request(
            v,
            "abort",
            &[
                ("isworld", "TRUE"),
                ("msg", msg),
                ("exitcode", code),
                ("message", msg),
            ],
        ),
    }
}

#[test]
fn abort_waits_for_the_launcher_to_hang_up() {
    within(10, || {
        for v in BOTH {
            // The launcher says something, and takes 300 ms to act.
            let (mut c, fake) = started(
                v,
                vec![
                    abort_req(v, "3", "no_route_to_rank_2_(___)"),
                    raw(b"late words"),
                    Step::Pause(Duration::from_millis(300)),
                ],
            );
            let t0 = Instant::now();
            c.abort(3, "no route to rank 2 (=;\\)").unwrap();
            let waited = t0.elapsed();
            assert!(waited >= Duration::from_millis(250), "{v}: {waited:?}");
            assert!(waited < Duration::from_secs(3), "{v}: {waited:?}");
            assert!(matches!(c.put("k", "v"), Err(PmiError::Usage(_))));
            assert!(matches!(c.abort(3, "again"), Err(PmiError::Usage(_))));
            fake.finish();
        }
    });
}

#[test]
fn abort_gives_up_waiting_after_the_timeout() {
    within(10, || {
        let (mut c, fake) = started(
            PmiVersion::V2,
            vec![abort_req(PmiVersion::V2, "1", "x"), Step::Hold],
        );
        c.set_timeout(Duration::from_millis(200));
        let t0 = Instant::now();
        c.abort(1, "x").unwrap();
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        drop(c);
        fake.finish();
    });
}

#[test]
fn abort_still_works_after_the_connection_lost_step() {
    within(10, || {
        let (mut c, fake) = started(
            PmiVersion::V1,
            vec![
                req1("cmd=barrier_in"),
                rep1("this is not pmi"),
                abort_req(PmiVersion::V1, "1", "bad"),
            ],
        );
        assert!(matches!(c.barrier(), Err(PmiError::Malformed { .. })));
        assert!(matches!(c.barrier(), Err(PmiError::Poisoned)));
        c.abort(1, "bad").unwrap();
        fake.finish();
    });
}

// ----- a server that misbehaves at the byte level ------------------------------------

#[test]
fn a_silent_server_times_out_and_poisons_the_connection() {
    within(10, || {
        for v in BOTH {
            let s = session(v);
            let fence = &s.ops[1].exchanges[0];
            // PMI-2: part of the frame arrives, the rest never does.
            let mut then = vec![fence.request.clone()];
            if v == PmiVersion::V2 {
                then.push(raw(b"    28cmd="));
            }
            then.push(Step::Hold);
            let (mut c, fake) = started(v, then);
            c.set_timeout(Duration::from_millis(200));
            let t0 = Instant::now();
            let err = c.fence().unwrap_err();
            let waited = t0.elapsed();
            assert!(
                matches!(err, PmiError::Timeout { request, after } if request == fence.name && after == Duration::from_millis(200)),
                "{v}: {err:?}"
            );
            assert!(waited >= Duration::from_millis(200), "{v}: {waited:?}");
            assert!(waited < Duration::from_secs(2), "{v}: {waited:?}");
            assert!(matches!(c.fence(), Err(PmiError::Poisoned)));
            drop(c);
            fake.finish();
        }
    });
}

#[test]
fn v1_reply_dribbled_byte_by_byte_is_reassembled() {
    within(10, || {
        let mut then = vec![req1("cmd=barrier_in")];
        for b in b"cmd=barrier_out\n" {
            then.push(raw(&[*b]));
        }
        let (mut c, fake) = started(PmiVersion::V1, then);
        c.barrier().unwrap();
        fake.finish();
    });
}

#[test]
fn overlong_badly_framed_and_non_utf8_replies_are_malformed() {
    within(10, || {
        let long = vec![b'x'; wire::MAX_V1_LINE + 10];
        let cases: [(PmiVersion, Vec<u8>, Option<&str>); 5] = [
            (PmiVersion::V1, long, None),
            (PmiVersion::V1, b"cmd=\xff\xfe\n".to_vec(), None),
            (PmiVersion::V2, b"abcdefcmd=x;".to_vec(), Some("abcdef")),
            (PmiVersion::V2, b"999999".to_vec(), None),
            (PmiVersion::V2, b"     4\xff\xfe\xfd\xfc".to_vec(), None),
        ];
        for (v, bytes, shown) in cases {
            let fence = session(v).ops[1].exchanges[0].clone();
            let (mut c, fake) = started(v, vec![fence.request.clone(), raw(&bytes)]);
            match c.fence() {
                Err(PmiError::Malformed { request, reply, .. }) => {
                    assert_eq!(request, fence.name);
                    if let Some(s) = shown {
                        assert_eq!(reply, s);
                    }
                }
                other => panic!("{v} {bytes:?}: {other:?}"),
            }
            assert!(matches!(c.fence(), Err(PmiError::Poisoned)));
            drop(c);
            fake.finish();
        }
    });
}

// ----- helpers and the inherited descriptor ------------------------------------

#[test]
fn hex_round_trip() {
    within(5, || {
        let all: Vec<u8> = (0..=255).collect();
        let enc = encode_value(&all);
        assert_eq!(enc.len(), 512);
        assert!(is_wire_safe(&enc));
        assert_eq!(decode_value(&enc).unwrap(), all);
        assert_eq!(encode_value(b"\x00\xffA"), "00ff41");
        assert_eq!(decode_value("00FF41").unwrap(), b"\x00\xffA");
        assert_eq!(decode_value("").unwrap(), b"");
        for bad in ["abc", "zz", "é0"] {
            assert!(
                matches!(decode_value(bad), Err(PmiError::BadEncoding { .. })),
                "{bad}"
            );
        }
    });
}

#[test]
fn wire_safe_charset() {
    within(5, || {
        assert!(is_wire_safe("127.0.0.1:4000"));
        assert!(is_wire_safe("[::1]:80,tcp/x_y-z@host#1"));
        assert!(is_wire_safe(""));
        for bad in ["a b", "a=b", "a;b", "a\\b", "a\nb", "é", "\u{7f}"] {
            assert!(!is_wire_safe(bad), "{bad:?}");
        }
        assert_eq!(sanitize_message("a b=c;d\\é"), "a_b_c_d___");
        assert_eq!(sanitize_message(&"x".repeat(500)).len(), MAX_ABORT_MESSAGE);
    });
}

#[test]
fn claiming_an_inherited_descriptor() {
    within(10, || {
        let claimed = AtomicBool::new(false);
        // Not open.
        assert!(matches!(
            claim_fd(1 << 20, &claimed),
            Err(PmiError::Env { var: "PMI_FD", .. })
        ));
        // Open, but not a socket.
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let err = claim_fd(std::os::fd::AsRawFd::as_raw_fd(&file), &claimed).unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        // A socket: taken once, with close-on-exec set, and never twice.
        let (mine, theirs) = UnixStream::pair().unwrap();
        let raw = mine.into_raw_fd();
        let stream = claim_fd(raw, &claimed).unwrap();
        // SAFETY: F_GETFD on a descriptor `stream` owns.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFD) };
        assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0);
        let err = claim_fd(raw, &claimed).unwrap_err();
        assert!(err.to_string().contains("already taken"), "{err}");
        // The claimed stream is the socket: it talks to the other end.
        use std::io::{Read, Write};
        (&stream).write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        (&theirs).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    });
}

#[test]
fn connect_errors_are_typed() {
    within(10, || {
        // A port nobody listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let env = PmiEnv::from_lookup(|k| (k == "PMI_PORT").then(|| format!("127.0.0.1:{port}")))
            .unwrap()
            .unwrap();
        let err = PmiClient::open(&env, &opts(VersionPreference::Auto)).unwrap_err();
        assert!(
            matches!(&err, PmiError::Connect { endpoint, .. } if endpoint == &format!("127.0.0.1:{port}")),
            "{err:?}"
        );
    });
}
