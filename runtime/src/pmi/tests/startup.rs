//! Start-up against the scripted fake: version negotiation, the identity
//! handshake over `PMI_PORT`, what each version needs from the
//! environment.

use super::*;

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
        let err = startup(script, &env, VersionPreference::V1).unwrap_err();
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

/// `Auto` asking for `first` then `second` (the init's version fields):
/// started by `first`'s script when the server accepts (if given), by
/// `second`'s after a refusal, and by `second`'s without its init when the
/// server accepts `first`'s init as `second`.
fn negotiates(
    env: &PmiEnv,
    first: (&str, PmiVersion, Option<Vec<Step>>),
    second: (&str, PmiVersion, Vec<Step>),
) {
    let (first_init, first_v, first_start) = first;
    let (second_answer, second_v, second_start) = second;
    let init = || req1(&format!("cmd=init {first_init}"));
    let mut refused = vec![
        init(),
        rep1(&format!("cmd=response_to_init {second_answer} rc=-1")),
    ];
    refused.extend(second_start.clone());
    let mut as_second = vec![
        init(),
        rep1(&format!("cmd=response_to_init {second_answer} rc=0")),
    ];
    as_second.extend(second_start.into_iter().skip(2));
    let accepted = first_start.map(|s| (s, first_v));
    for (script, want) in accepted
        .into_iter()
        .chain([(refused, second_v), (as_second, second_v)])
    {
        let c = startup(script, env, VersionPreference::Auto).unwrap();
        assert_eq!(c.version(), want);
    }
}

/// Outside Slurm, `Auto` asks for PMI-1.1 first (the version whose abort
/// hydra 4.0 ends the job on with the abort's status), and for PMI-2 only
/// when the server refuses.
#[test]
fn auto_asks_for_pmi1_first_outside_slurm() {
    within(10, || {
        negotiates(
            &fd_env(1, 2),
            (
                "pmi_version=1 pmi_subversion=1",
                PmiVersion::V1,
                Some(v1_start()),
            ),
            ("pmi_version=2 pmi_subversion=0", PmiVersion::V2, v2_start()),
        );
    });
}

/// Under Slurm (`PMI_JOBID` set), `Auto` asks for PMI-2 first, its
/// plugin's own protocol, and falls back to PMI-1.1.
#[test]
fn auto_asks_for_pmi2_first_under_slurm() {
    within(10, || {
        let mut env = fd_env(1, 2);
        env.jobid = Some("4711.0".into());
        // Accepted, PMI-2 announces the job id: covered by
        // v2_startup_announces_pmi_id_and_jobid.
        negotiates(
            &env,
            ("pmi_version=2 pmi_subversion=0", PmiVersion::V2, None),
            ("pmi_version=1 pmi_subversion=1", PmiVersion::V1, v1_start()),
        );
    });
}

#[test]
fn forced_version_refused_is_a_version_mismatch() {
    within(10, || {
        let init1 = "cmd=init pmi_version=1 pmi_subversion=1";
        let init2 = "cmd=init pmi_version=2 pmi_subversion=0";
        let cases = [
            (
                VersionPreference::V2,
                init2,
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=too_new",
                "2.0",
                "1.1",
            ),
            (
                VersionPreference::V1,
                init1,
                "cmd=response_to_init rc=-1",
                "1.1",
                "unknown",
            ),
            // Accepted, but as another version than forced.
            (
                VersionPreference::V2,
                init2,
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
                "2.0",
                "1",
            ),
        ];
        for (pref, init, answer, want_wanted, want_offered) in cases {
            let err = startup(vec![req1(init), rep1(answer)], &fd_env(0, 1), pref).unwrap_err();
            match err {
                PmiError::VersionMismatch { wanted, offered } => {
                    assert_eq!((wanted, offered.as_str()), (want_wanted, want_offered));
                }
                other => panic!("{answer}: {other:?}"),
            }
        }
    });
}

#[test]
fn v1_over_fd_needs_rank_and_size_from_the_environment() {
    within(10, || {
        let mut env = fd_env(0, 1);
        env.rank = None;
        let err = startup(
            v1_start().into_iter().take(2).collect(),
            &env,
            VersionPreference::V1,
        )
        .unwrap_err();
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
fn v1_huge_maxes_do_not_overflow() {
    within(10, || {
        let mut script = v1_start();
        script[3] = rep1(&format!(
            "cmd=maxes kvsname_max={m} keylen_max={m} vallen_max={m}",
            m = usize::MAX
        ));
        let mut c = startup(script, &fd_env(0, 1), VersionPreference::V1).unwrap();
        // No line budget is left for values: every non-empty put is refused.
        assert_eq!((c.max_key_len(), c.max_val_len()), (255, 0));
        assert!(matches!(c.put("k", "v"), Err(PmiError::TooLong { .. })));
    });
}

#[test]
fn v2_startup_announces_pmi_id_and_jobid() {
    within(10, || {
        let body = "cmd=fullinit-response;rank=5;size=6;appnum=1;spawner-jobid=kvs_1;debugged=TRUE;pmiverbose=FALSE;rc=0;";
        let script = vec![
            req1("cmd=init pmi_version=2 pmi_subversion=0"),
            rep1("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"),
            req2("cmd=fullinit;pmijobid=j.7;pmirank=5;threaded=FALSE;"),
            // Left-aligned length, as MPICH's own code writes it.
            raw(format!("{:<6}{body}", body.len()).as_bytes()),
            req2("cmd=job-getid;"),
            rep2("cmd=job-getid-response;jobid=kvs_2;rc=0;"),
        ];
        let mut env = fd_env(2, 6);
        env.id = Some(5);
        env.jobid = Some("j.7".into());
        let c = startup(script, &env, VersionPreference::V2).unwrap();
        assert_eq!((c.rank(), c.size(), c.appnum()), (5, 6, 1));
        assert_eq!(c.kvs_name(), "kvs_2");
        assert!(c.spawned() && c.debug());
    });
}
