//! The client against a scripted fake process manager: one test per
//! command, in both protocol versions, plus the ways a server can misbehave.

use std::os::fd::IntoRawFd;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::fake::{raw, rep1, rep2, req1, req2, Fake, Step};
use super::testutil::within;
use super::*;

const KVS: &str = "kvs_77_0_123_vm";

fn fd_env(rank: u32, size: u32) -> PmiEnv {
    PmiEnv {
        // Never opened: the tests hand `connect` a transport directly.
        endpoint: PmiEndpoint::Fd(-1),
        rank: Some(rank),
        size: Some(size),
        id: None,
        jobid: None,
        spawned: false,
        debug: false,
    }
}

fn opts(version: VersionPreference) -> PmiOptions {
    PmiOptions {
        version,
        timeout: Duration::from_secs(3),
    }
}

/// What hydra 4.0 answers to MPICH's PMI-1 start-up, in order.
fn v1_start() -> Vec<Step> {
    vec![
        req1("cmd=init pmi_version=1 pmi_subversion=1"),
        rep1("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"),
        req1("cmd=get_maxes"),
        rep1("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"),
        req1("cmd=get_appnum"),
        rep1("cmd=appnum appnum=0"),
        req1("cmd=get_my_kvsname"),
        rep1(&format!("cmd=my_kvsname kvsname={KVS}")),
    ]
}

/// What hydra 4.0 answers to a PMI-2 start-up from rank 1 of 2.
fn v2_start() -> Vec<Step> {
    vec![
        req1("cmd=init pmi_version=2 pmi_subversion=0"),
        rep1("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"),
        req2("cmd=fullinit;pmirank=1;threaded=FALSE;"),
        rep2("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;"),
        req2("cmd=job-getid;"),
        rep2(&format!("cmd=job-getid-response;jobid={KVS};rc=0;")),
    ]
}

/// A PMI-1 client (rank 1 of 2) that has finished its start-up, and the
/// fake that will play `then` afterwards.
fn v1_client(then: Vec<Step>) -> (PmiClient, Fake) {
    let mut script = v1_start();
    script.extend(then);
    let (sock, fake) = Fake::pair(script);
    let c = PmiClient::connect(
        PmiTransport::Unix(sock),
        &fd_env(1, 2),
        &opts(VersionPreference::V1),
    )
    .expect("PMI-1 start-up");
    (c, fake)
}

fn v2_client(then: Vec<Step>) -> (PmiClient, Fake) {
    let mut script = v2_start();
    script.extend(then);
    let (sock, fake) = Fake::pair(script);
    let c = PmiClient::connect(
        PmiTransport::Unix(sock),
        &fd_env(1, 2),
        &opts(VersionPreference::V2),
    )
    .expect("PMI-2 start-up");
    (c, fake)
}

/// A PMI-2 frame with its length written left aligned, as MPICH's client
/// code does.
fn left_aligned(body: &str) -> String {
    format!("{:<6}{body}", body.len())
}

/// Run a start-up against `script` and return its error.
fn startup_error(script: Vec<Step>, env: &PmiEnv, version: VersionPreference) -> PmiError {
    let (sock, fake) = Fake::pair(script);
    let r = PmiClient::connect(PmiTransport::Unix(sock), env, &opts(version));
    let err = r.expect_err("start-up should fail");
    fake.finish();
    err
}

// ----- PMI-1 -------------------------------------------------------------------

#[test]
fn v1_startup_over_fd() {
    within(10, || {
        let (c, fake) = v1_client(vec![Step::Eof]);
        assert_eq!(c.version(), PmiVersion::V1);
        assert_eq!((c.rank(), c.size(), c.appnum()), (1, 2, 0));
        assert_eq!(c.kvs_name(), KVS);
        // keylen_max less the terminator; the value limit shrunk as MPICH's
        // client does so a put line fits 1024 bytes: 1024-256-64-30-1.
        assert_eq!((c.max_key_len(), c.max_val_len()), (63, 673));
        assert!(!c.spawned() && !c.debug());
        drop(c);
        fake.finish();
    });
}

#[test]
fn v1_startup_over_port_sends_initack_first() {
    within(10, || {
        let mut script = vec![
            req1("cmd=initack pmiid=3"),
            // Hydra sends the four lines in one write.
            raw(b"cmd=initack\ncmd=set size=4\ncmd=set rank=3\ncmd=set debug=1\n"),
        ];
        script.extend(v1_start());
        script.push(Step::Eof);
        let (port, fake) = Fake::tcp(script);
        let env = PmiEnv::from_lookup(|k| match k {
            "PMI_PORT" => Some(format!("127.0.0.1:{port}")),
            "PMI_ID" => Some("3".into()),
            _ => None,
        })
        .unwrap()
        .unwrap();
        let c = PmiClient::open(&env, &opts(VersionPreference::V1)).unwrap();
        assert_eq!((c.rank(), c.size()), (3, 4));
        assert!(c.debug());
        drop(c);
        fake.finish();
    });
}

#[test]
fn v1_initack_with_a_repeated_set_is_malformed() {
    within(10, || {
        let script = vec![
            req1("cmd=initack pmiid=0"),
            raw(b"cmd=initack\ncmd=set size=4\ncmd=set size=4\n"),
        ];
        let mut env = fd_env(0, 1);
        env.endpoint = PmiEndpoint::Port {
            host: "h".into(),
            port: 1,
        };
        env.id = Some(0);
        let err = startup_error(script, &env, VersionPreference::V1);
        assert!(
            matches!(
                err,
                PmiError::Malformed {
                    request: "initack",
                    ..
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn auto_falls_back_to_v1_when_v2_is_refused() {
    within(10, || {
        let mut script = vec![
            req1("cmd=init pmi_version=2 pmi_subversion=0"),
            rep1("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1"),
        ];
        script.extend(v1_start());
        let (sock, fake) = Fake::pair(script);
        let c = PmiClient::connect(
            PmiTransport::Unix(sock),
            &fd_env(0, 1),
            &opts(VersionPreference::Auto),
        )
        .unwrap();
        assert_eq!(c.version(), PmiVersion::V1);
        fake.finish();
    });
}

#[test]
fn auto_takes_a_v1_acceptance_without_a_second_init() {
    within(10, || {
        let mut script = vec![
            req1("cmd=init pmi_version=2 pmi_subversion=0"),
            rep1("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"),
        ];
        script.extend(v1_start().into_iter().skip(2));
        let (sock, fake) = Fake::pair(script);
        let c = PmiClient::connect(
            PmiTransport::Unix(sock),
            &fd_env(0, 1),
            &opts(VersionPreference::Auto),
        )
        .unwrap();
        assert_eq!(c.version(), PmiVersion::V1);
        fake.finish();
    });
}

#[test]
fn auto_prefers_v2() {
    within(10, || {
        let (sock, fake) = Fake::pair(v2_start());
        let c = PmiClient::connect(
            PmiTransport::Unix(sock),
            &fd_env(1, 2),
            &opts(VersionPreference::Auto),
        )
        .unwrap();
        assert_eq!(c.version(), PmiVersion::V2);
        fake.finish();
    });
}

#[test]
fn forced_version_refused_is_a_version_mismatch() {
    within(10, || {
        let err = startup_error(
            vec![
                req1("cmd=init pmi_version=2 pmi_subversion=0"),
                rep1("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=too_new"),
            ],
            &fd_env(0, 1),
            VersionPreference::V2,
        );
        match err {
            PmiError::VersionMismatch { wanted, offered } => {
                assert_eq!((wanted, offered.as_str()), ("2.0", "1.1"));
            }
            other => panic!("{other:?}"),
        }
        let err = startup_error(
            vec![
                req1("cmd=init pmi_version=1 pmi_subversion=1"),
                rep1("cmd=response_to_init rc=-1"),
            ],
            &fd_env(0, 1),
            VersionPreference::V1,
        );
        assert!(
            matches!(&err, PmiError::VersionMismatch { wanted: "1.1", offered } if offered == "unknown"),
            "{err:?}"
        );
    });
}

#[test]
fn v1_over_fd_needs_rank_and_size_from_the_environment() {
    within(10, || {
        let mut env = fd_env(0, 1);
        env.rank = None;
        let err = startup_error(
            v1_start().into_iter().take(2).collect(),
            &env,
            VersionPreference::V1,
        );
        assert!(
            matches!(
                err,
                PmiError::Env {
                    var: "PMI_RANK",
                    ..
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn v1_get_maxes_missing_field() {
    within(10, || {
        let mut script = v1_start();
        script.truncate(3);
        script.push(rep1("cmd=maxes kvsname_max=256 keylen_max=64"));
        let err = startup_error(script, &fd_env(0, 1), VersionPreference::V1);
        assert!(
            matches!(
                err,
                PmiError::MissingKey {
                    request: "get_maxes",
                    key: "vallen_max"
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn v1_get_maxes_rejects_absurd_limits() {
    within(10, || {
        let mut script = v1_start();
        script.truncate(3);
        script.push(rep1(
            "cmd=maxes kvsname_max=256 keylen_max=1 vallen_max=1024",
        ));
        let err = startup_error(script, &fd_env(0, 1), VersionPreference::V1);
        assert!(
            matches!(
                err,
                PmiError::Malformed {
                    request: "get_maxes",
                    ..
                }
            ),
            "{err:?}"
        );
        let mut script = v1_start();
        script.truncate(3);
        script.push(rep1(
            "cmd=maxes kvsname_max=256 keylen_max=-4 vallen_max=1024",
        ));
        let err = startup_error(script, &fd_env(0, 1), VersionPreference::V1);
        assert!(
            matches!(
                err,
                PmiError::Malformed {
                    request: "get_maxes",
                    ..
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn v1_huge_maxes_do_not_overflow() {
    within(10, || {
        let mut script = v1_start();
        script[3] = rep1(&format!(
            "cmd=maxes kvsname_max={m} keylen_max={m} vallen_max={m}",
            m = usize::MAX
        ));
        let (sock, fake) = Fake::pair(script);
        let mut c = PmiClient::connect(
            PmiTransport::Unix(sock),
            &fd_env(0, 1),
            &opts(VersionPreference::V1),
        )
        .unwrap();
        // No line budget is left for values: every non-empty put is refused.
        assert_eq!((c.max_key_len(), c.max_val_len()), (255, 0));
        assert!(matches!(c.put("k", "v"), Err(PmiError::TooLong { .. })));
        fake.finish();
    });
}

#[test]
fn v1_appnum_and_kvsname() {
    within(10, || {
        let mut script = v1_start();
        script[5] = rep1("cmd=appnum appnum=2");
        script[7] = rep1("cmd=my_kvsname kvsname=other");
        let (sock, fake) = Fake::pair(script);
        let c = PmiClient::connect(
            PmiTransport::Unix(sock),
            &fd_env(0, 1),
            &opts(VersionPreference::V1),
        )
        .unwrap();
        assert_eq!((c.appnum(), c.kvs_name()), (2, "other"));
        fake.finish();

        let mut script = v1_start();
        script[7] = rep1("cmd=my_kvsname kvsname=");
        let err = startup_error(script, &fd_env(0, 1), VersionPreference::V1);
        assert!(
            matches!(
                err,
                PmiError::Malformed {
                    request: "get_my_kvsname",
                    ..
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn v1_put() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1(&format!(
                "cmd=put kvsname={KVS} key=addr-1 value=127.0.0.1:4000"
            )),
            rep1("cmd=put_result rc=0 msg=success"),
        ]);
        c.put("addr-1", "127.0.0.1:4000").unwrap();
        fake.finish();
    });
}

#[test]
fn v1_put_refused_by_the_server() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1(&format!("cmd=put kvsname={KVS} key=k value=v")),
            rep1("cmd=put_result rc=-1 msg=duplicate_key"),
            req1(&format!("cmd=put kvsname={KVS} key=k2 value=v")),
            rep1("cmd=put_result rc=0"),
        ]);
        match c.put("k", "v") {
            Err(PmiError::Server { request, rc, msg }) => {
                assert_eq!((request, rc, msg.as_str()), ("put", -1, "duplicate_key"));
            }
            other => panic!("{other:?}"),
        }
        // A refusal leaves the connection in step.
        c.put("k2", "v").unwrap();
        fake.finish();
    });
}

#[test]
fn v1_fence_then_get() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=barrier_in"),
            rep1("cmd=barrier_out"),
            req1(&format!("cmd=get kvsname={KVS} key=addr-0")),
            rep1("cmd=get_result rc=0 msg=success value=10.0.0.1:5=x"),
        ]);
        c.fence().unwrap();
        assert_eq!(c.get("addr-0").unwrap(), "10.0.0.1:5=x");
        fake.finish();
    });
}

#[test]
fn v1_barrier() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=barrier_in"),
            rep1("cmd=barrier_out"),
            req1("cmd=barrier_in"),
            rep1("cmd=barrier_out"),
        ]);
        c.barrier().unwrap();
        c.barrier().unwrap();
        fake.finish();
    });
}

#[test]
fn v1_get_not_found_in_every_dialect() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=barrier_in"),
            rep1("cmd=barrier_out"),
            req1(&format!("cmd=get kvsname={KVS} key=a")),
            // hydra 4.0
            rep1("cmd=get_result rc=-1 msg=key_a_not_found value=unknown"),
            req1(&format!("cmd=get kvsname={KVS} key=b")),
            // MPICH 4.1 and later
            rep1("cmd=get_result rc=1 msg=key_not_found"),
            req1(&format!("cmd=get kvsname={KVS} key=c")),
            rep1("cmd=get_result found=FALSE rc=0"),
            req1(&format!("cmd=get kvsname={KVS} key=d")),
            rep1("cmd=get_result rc=-1 msg=kvs_broken"),
            req1(&format!("cmd=get kvsname={KVS} key=e")),
            rep1("cmd=get_result rc=0 msg=success"),
        ]);
        c.fence().unwrap();
        for key in ["a", "b", "c"] {
            match c.get(key) {
                Err(PmiError::KeyNotFound { key: k }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
        assert!(
            matches!(c.get("d"), Err(PmiError::Server { request: "get", rc: -1, ref msg }) if msg == "kvs_broken")
        );
        assert!(matches!(
            c.get("e"),
            Err(PmiError::MissingKey {
                request: "get",
                key: "value"
            })
        ));
        fake.finish();
    });
}

#[test]
fn get_before_the_first_fence_is_refused_without_asking() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![Step::Eof]);
        assert!(matches!(c.get("k"), Err(PmiError::Usage(_))));
        drop(c);
        fake.finish();
        let (mut c, fake) = v2_client(vec![Step::Eof]);
        assert!(matches!(c.get("k"), Err(PmiError::Usage(_))));
        drop(c);
        fake.finish();
    });
}

#[test]
fn v1_universe_size() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=get_universe_size"),
            rep1("cmd=universe_size size=-1"),
            req1("cmd=get_universe_size"),
            rep1("cmd=universe_size size=8"),
        ]);
        assert_eq!(c.universe_size().unwrap(), None);
        assert_eq!(c.universe_size().unwrap(), Some(8));
        fake.finish();
    });
}

#[test]
fn v1_finalize_closes_the_connection() {
    within(10, || {
        let (c, fake) = v1_client(vec![
            req1("cmd=finalize"),
            rep1("cmd=finalize_ack"),
            Step::Eof,
        ]);
        c.finalize().unwrap();
        fake.finish();
    });
}

#[test]
fn v1_abort() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=abort exitcode=3 message=no_route_to_rank_2_(___)"),
            Step::Eof,
        ]);
        c.abort(3, "no route to rank 2 (=;\\)").unwrap();
        assert!(matches!(c.put("k", "v"), Err(PmiError::Usage(_))));
        assert!(matches!(c.abort(3, "again"), Err(PmiError::Usage(_))));
        drop(c);
        fake.finish();
    });
}

#[test]
fn abort_still_works_after_the_connection_lost_step() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=barrier_in"),
            rep1("this is not pmi"),
            req1("cmd=abort exitcode=1 message=bad"),
            Step::Eof,
        ]);
        assert!(matches!(c.barrier(), Err(PmiError::Malformed { .. })));
        assert!(matches!(c.barrier(), Err(PmiError::Poisoned)));
        c.abort(1, "bad").unwrap();
        drop(c);
        fake.finish();
    });
}

#[test]
fn invalid_keys_and_values_are_refused_without_asking() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![Step::Eof]);
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
        let (mut c, fake) = v1_client(vec![
            req1(&format!("cmd=put kvsname={KVS} key={key} value={value}")),
            rep1("cmd=put_result rc=0"),
            req1(&format!("cmd=put kvsname={KVS} key=empty value=")),
            rep1("cmd=put_result rc=0"),
        ]);
        c.put(&key, &value).unwrap();
        c.put("empty", "").unwrap();
        fake.finish();
    });
}

// ----- PMI-1: a misbehaving server -----------------------------------------------

#[test]
fn v1_garbage_reply() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![req1("cmd=barrier_in"), rep1("garbage")]);
        let err = c.barrier().unwrap_err();
        assert!(
            matches!(&err, PmiError::Malformed { request: "barrier_in", reply, .. } if reply == "garbage"),
            "{err:?}"
        );
        // Out of step from now on: nothing more is sent.
        assert!(matches!(c.put("k", "v"), Err(PmiError::Poisoned)));
        assert!(matches!(c.universe_size(), Err(PmiError::Poisoned)));
        fake.finish();
    });
}

#[test]
fn v1_wrong_command_in_reply() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![req1("cmd=barrier_in"), rep1("cmd=put_result rc=0")]);
        match c.barrier() {
            Err(PmiError::UnexpectedCommand {
                request,
                expected,
                got,
            }) => assert_eq!(
                (request, expected, got.as_str()),
                ("barrier_in", "barrier_out", "put_result")
            ),
            other => panic!("{other:?}"),
        }
        fake.finish();
    });
}

#[test]
fn v1_error_reply_with_message() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=barrier_in"),
            rep1("cmd=barrier_out rc=-1 msg=process_3_died"),
        ]);
        let err = c.barrier().unwrap_err();
        assert!(
            matches!(&err, PmiError::Server { request: "barrier_in", rc: -1, msg } if msg == "process_3_died"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "PMI barrier_in failed: rc=-1 process_3_died"
        );
        fake.finish();
    });
}

#[test]
fn v1_non_numeric_rc_is_malformed() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![
            req1("cmd=barrier_in"),
            rep1("cmd=barrier_out rc=zero"),
        ]);
        assert!(matches!(c.barrier(), Err(PmiError::Malformed { .. })));
        fake.finish();
    });
}

#[test]
fn v1_eof_mid_reply() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![req1("cmd=barrier_in"), raw(b"cmd=barrier_o")]);
        // The fake's script ends here, closing its end mid-line.
        let err = c.barrier().unwrap_err();
        assert!(
            matches!(
                err,
                PmiError::Closed {
                    request: "barrier_in"
                }
            ),
            "{err:?}"
        );
        fake.finish();
    });
}

#[test]
fn v1_eof_before_reply() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![]);
        fake.finish();
        // Depending on timing the write or the read notices the close.
        let err = c.barrier().unwrap_err();
        assert!(matches!(err, PmiError::Closed { .. }), "{err:?}");
    });
}

#[test]
fn v1_timeout() {
    within(10, || {
        let (mut c, fake) = v1_client(vec![req1("cmd=barrier_in"), Step::Hold]);
        c.set_timeout(Duration::from_millis(200));
        let t0 = std::time::Instant::now();
        let err = c.barrier().unwrap_err();
        let waited = t0.elapsed();
        assert!(
            matches!(err, PmiError::Timeout { request: "barrier_in", after } if after == Duration::from_millis(200)),
            "{err:?}"
        );
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        assert!(matches!(c.barrier(), Err(PmiError::Poisoned)));
        drop(c);
        fake.finish();
    });
}

#[test]
fn v1_reply_dribbled_byte_by_byte_is_reassembled() {
    within(10, || {
        let mut script = vec![req1("cmd=barrier_in")];
        for b in b"cmd=barrier_out\n" {
            script.push(raw(&[*b]));
        }
        let (mut c, fake) = v1_client(script);
        c.barrier().unwrap();
        fake.finish();
    });
}

#[test]
fn v1_overlong_and_non_utf8_lines_are_malformed() {
    within(10, || {
        let long = vec![b'x'; wire::MAX_V1_LINE + 10];
        let (mut c, fake) = v1_client(vec![req1("cmd=barrier_in"), raw(&long)]);
        assert!(matches!(c.barrier(), Err(PmiError::Malformed { .. })));
        drop(c);
        fake.finish();
        let (mut c, fake) = v1_client(vec![req1("cmd=barrier_in"), raw(b"cmd=\xff\xfe\n")]);
        assert!(matches!(c.barrier(), Err(PmiError::Malformed { .. })));
        fake.finish();
    });
}

// ----- PMI-2 -------------------------------------------------------------------

#[test]
fn v2_startup() {
    within(10, || {
        let (c, fake) = v2_client(vec![Step::Eof]);
        assert_eq!(c.version(), PmiVersion::V2);
        assert_eq!((c.rank(), c.size(), c.appnum()), (1, 2, 0));
        assert_eq!(c.kvs_name(), KVS);
        assert_eq!((c.max_key_len(), c.max_val_len()), (63, 1023));
        assert!(!c.spawned() && !c.debug());
        drop(c);
        fake.finish();
    });
}

#[test]
fn v2_startup_announces_pmi_id_and_jobid() {
    within(10, || {
        let script = vec![
            req1("cmd=init pmi_version=2 pmi_subversion=0"),
            rep1("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"),
            req2("cmd=fullinit;pmijobid=j.7;pmirank=5;threaded=FALSE;"),
            // Left-aligned length, as MPICH's own code writes it.
            raw(left_aligned("cmd=fullinit-response;rank=5;size=6;appnum=1;spawner-jobid=kvs_1;debugged=TRUE;pmiverbose=FALSE;rc=0;").as_bytes()),
            req2("cmd=job-getid;"),
            rep2("cmd=job-getid-response;jobid=kvs_2;rc=0;"),
        ];
        let (sock, fake) = Fake::pair(script);
        let mut env = fd_env(2, 6);
        env.id = Some(5);
        env.jobid = Some("j.7".into());
        let c = PmiClient::connect(PmiTransport::Unix(sock), &env, &opts(VersionPreference::V2))
            .unwrap();
        assert_eq!((c.rank(), c.size(), c.appnum()), (5, 6, 1));
        assert_eq!(c.kvs_name(), "kvs_2");
        assert!(c.spawned() && c.debug());
        fake.finish();
    });
}

#[test]
fn v2_fullinit_missing_size() {
    within(10, || {
        let mut script = v2_start();
        script.truncate(3);
        script.push(rep2("cmd=fullinit-response;rank=1;appnum=0;rc=0;"));
        let err = startup_error(script, &fd_env(1, 2), VersionPreference::V2);
        assert!(
            matches!(
                err,
                PmiError::MissingKey {
                    request: "fullinit",
                    key: "size"
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn v2_fullinit_refused() {
    within(10, || {
        let mut script = v2_start();
        script.truncate(3);
        script.push(rep2("cmd=fullinit-response;rc=-1;errmsg=unknown rank;"));
        let err = startup_error(script, &fd_env(1, 2), VersionPreference::V2);
        assert!(
            matches!(&err, PmiError::Server { request: "fullinit", rc: -1, msg } if msg == "unknown rank"),
            "{err:?}"
        );
    });
}

#[test]
fn v2_fullinit_rank_outside_size() {
    within(10, || {
        let mut script = v2_start();
        script.truncate(3);
        script.push(rep2("cmd=fullinit-response;rank=2;size=2;appnum=0;rc=0;"));
        let err = startup_error(script, &fd_env(1, 2), VersionPreference::V2);
        assert!(
            matches!(
                err,
                PmiError::Malformed {
                    request: "fullinit",
                    ..
                }
            ),
            "{err:?}"
        );
    });
}

#[test]
fn v2_put() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=kvs-put;key=addr-1;value=127.0.0.1:4000;"),
            rep2("cmd=kvs-put-response;rc=0;"),
            req2("cmd=kvs-put;key=dup;value=x;"),
            rep2("cmd=kvs-put-response;rc=-1;errmsg=duplicate;"),
        ]);
        c.put("addr-1", "127.0.0.1:4000").unwrap();
        assert!(
            matches!(c.put("dup", "x"), Err(PmiError::Server { request: "kvs-put", rc: -1, ref msg }) if msg == "duplicate")
        );
        fake.finish();
    });
}

#[test]
fn v2_fence_waits_with_a_get_of_an_unput_key() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=kvs-fence;"),
            rep2("cmd=kvs-fence-response;rc=0;"),
            req2(&format!(
                "cmd=kvs-get;jobid={KVS};srcid=-1;key=ptl.pmi.barrier;"
            )),
            rep2("cmd=kvs-get-response;found=FALSE;rc=0;"),
            req2(&format!("cmd=kvs-get;jobid={KVS};srcid=-1;key=addr-0;")),
            rep2("cmd=kvs-get-response;found=TRUE;value=10.0.0.1:5;rc=0;"),
        ]);
        c.fence().unwrap();
        assert_eq!(c.get("addr-0").unwrap(), "10.0.0.1:5");
        fake.finish();
    });
}

#[test]
fn v2_barrier() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=kvs-fence;"),
            rep2("cmd=kvs-fence-response;rc=0;"),
            req2(&format!(
                "cmd=kvs-get;jobid={KVS};srcid=-1;key=ptl.pmi.barrier;"
            )),
            // Should a server ever hold the key, the barrier is still done.
            rep2("cmd=kvs-get-response;found=TRUE;value=x;rc=0;"),
        ]);
        c.barrier().unwrap();
        fake.finish();
    });
}

#[test]
fn v2_fence_refused() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=kvs-fence;"),
            rep2("cmd=kvs-fence-response;rc=5;errmsg=epoch;"),
        ]);
        assert!(matches!(
            c.fence(),
            Err(PmiError::Server {
                request: "kvs-fence",
                rc: 5,
                ..
            })
        ));
        // A failed fence does not count: get is still refused.
        assert!(matches!(c.get("k"), Err(PmiError::Usage(_))));
        fake.finish();
    });
}

#[test]
fn v2_get_not_found_and_missing_found() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=kvs-fence;"),
            rep2("cmd=kvs-fence-response;rc=0;"),
            req2(&format!(
                "cmd=kvs-get;jobid={KVS};srcid=-1;key=ptl.pmi.barrier;"
            )),
            rep2("cmd=kvs-get-response;found=FALSE;rc=0;"),
            req2(&format!("cmd=kvs-get;jobid={KVS};srcid=-1;key=nope;")),
            rep2("cmd=kvs-get-response;found=FALSE;rc=0;"),
            req2(&format!("cmd=kvs-get;jobid={KVS};srcid=-1;key=odd;")),
            rep2("cmd=kvs-get-response;value=1;rc=0;"),
            req2(&format!("cmd=kvs-get;jobid={KVS};srcid=-1;key=odd;")),
            rep2("cmd=kvs-get-response;found=maybe;rc=0;"),
        ]);
        c.fence().unwrap();
        assert!(matches!(c.get("nope"), Err(PmiError::KeyNotFound { ref key }) if key == "nope"));
        assert!(matches!(
            c.get("odd"),
            Err(PmiError::MissingKey {
                request: "kvs-get",
                key: "found"
            })
        ));
        assert!(matches!(c.get("odd"), Err(PmiError::Malformed { .. })));
        fake.finish();
    });
}

#[test]
fn v2_universe_size() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=info-getjobattr;key=universeSize;"),
            rep2("cmd=info-getjobattr-response;found=FALSE;rc=0;"),
            req2("cmd=info-getjobattr;key=universeSize;"),
            rep2("cmd=info-getjobattr-response;found=TRUE;value=16;rc=0;"),
        ]);
        assert_eq!(c.universe_size().unwrap(), None);
        assert_eq!(c.universe_size().unwrap(), Some(16));
        fake.finish();
    });
}

#[test]
fn v2_finalize() {
    within(10, || {
        let (c, fake) = v2_client(vec![
            req2("cmd=finalize;"),
            rep2("cmd=finalize-response;rc=0;"),
            Step::Eof,
        ]);
        c.finalize().unwrap();
        fake.finish();
    });
}

#[test]
fn v2_abort() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=abort;isworld=TRUE;msg=lost_rank_0;exitcode=9;message=lost_rank_0;"),
            Step::Eof,
        ]);
        c.abort(9, "lost rank 0").unwrap();
        drop(c);
        fake.finish();
    });
}

// ----- PMI-2: a misbehaving server -----------------------------------------------

#[test]
fn v2_bad_length_prefix() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![req2("cmd=kvs-fence;"), raw(b"abcdefcmd=x;")]);
        let err = c.fence().unwrap_err();
        assert!(
            matches!(&err, PmiError::Malformed { request: "kvs-fence", reply, .. } if reply == "abcdef"),
            "{err:?}"
        );
        assert!(matches!(c.fence(), Err(PmiError::Poisoned)));
        fake.finish();
    });
}

#[test]
fn v2_garbage_body() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![req2("cmd=kvs-fence;"), rep2("garbage")]);
        assert!(matches!(
            c.fence(),
            Err(PmiError::Malformed {
                request: "kvs-fence",
                ..
            })
        ));
        fake.finish();
    });
}

#[test]
fn v2_wrong_command_in_reply() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![
            req2("cmd=kvs-put;key=k;value=v;"),
            rep2("cmd=kvs-fence-response;rc=0;"),
        ]);
        assert!(matches!(
            c.put("k", "v"),
            Err(PmiError::UnexpectedCommand {
                request: "kvs-put",
                expected: "kvs-put-response",
                ..
            })
        ));
        fake.finish();
    });
}

#[test]
fn v2_eof_mid_reply() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![req2("cmd=kvs-fence;"), raw(b"    28cmd=kvs-fence")]);
        let err = c.fence().unwrap_err();
        assert!(
            matches!(
                err,
                PmiError::Closed {
                    request: "kvs-fence"
                }
            ),
            "{err:?}"
        );
        fake.finish();
    });
}

#[test]
fn v2_timeout() {
    within(10, || {
        let (mut c, fake) = v2_client(vec![req2("cmd=kvs-fence;"), raw(b"    28cmd="), Step::Hold]);
        c.set_timeout(Duration::from_millis(200));
        let err = c.fence().unwrap_err();
        assert!(
            matches!(
                err,
                PmiError::Timeout {
                    request: "kvs-fence",
                    ..
                }
            ),
            "{err:?}"
        );
        drop(c);
        fake.finish();
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
        assert!(matches!(
            decode_value("abc"),
            Err(PmiError::BadEncoding { .. })
        ));
        assert!(matches!(
            decode_value("zz"),
            Err(PmiError::BadEncoding { .. })
        ));
        assert!(matches!(
            decode_value("é0"),
            Err(PmiError::BadEncoding { .. })
        ));
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
