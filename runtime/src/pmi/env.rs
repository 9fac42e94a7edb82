//! The `PMI_*` environment a launcher hands its processes.
//!
//! | variable | set by | meaning |
//! |---|---|---|
//! | `PMI_FD` | hydra (default), Slurm `--mpi=pmi2` | inherited, connected socket to the process manager |
//! | `PMI_PORT` | hydra `-pmi-port` | `host:port` to connect to instead |
//! | `PMI_ID` | hydra with `PMI_PORT` | identity to announce (`initack pmiid=`, `fullinit pmirank=`) |
//! | `PMI_RANK`, `PMI_SIZE` | hydra with `PMI_FD`, Slurm | rank and job size (PMI-1 over `PMI_FD` learns them only here) |
//! | `PMI_JOBID` | Slurm | job id, announced in PMI-2 `fullinit` |
//! | `PMI_SPAWNED` | hydra for spawned jobs | non-zero: started by `MPI_Comm_spawn` |
//! | `PMI_DEBUG` | user | non-zero: the launcher was asked to debug PMI |
//!
//! When both `PMI_FD` and `PMI_PORT` are set, `PMI_FD` wins, as in MPICH.

use super::error::{PmiError, Result};

/// How to reach the process manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PmiEndpoint {
    /// An inherited file descriptor (`PMI_FD`).
    Fd(i32),
    /// A TCP endpoint (`PMI_PORT`).
    Port {
        /// Host name or address (brackets of an IPv6 literal removed).
        host: String,
        /// Port number.
        port: u16,
    },
}

impl std::fmt::Display for PmiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PmiEndpoint::Fd(fd) => write!(f, "fd {fd}"),
            PmiEndpoint::Port { host, port } if host.contains(':') => {
                write!(f, "[{host}]:{port}")
            }
            PmiEndpoint::Port { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// What the launcher put in the environment, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmiEnv {
    /// Where the process manager is.
    pub endpoint: PmiEndpoint,
    /// `PMI_RANK`.
    pub rank: Option<u32>,
    /// `PMI_SIZE`.
    pub size: Option<u32>,
    /// `PMI_ID`.
    pub id: Option<u32>,
    /// `PMI_JOBID`.
    pub jobid: Option<String>,
    /// `PMI_SPAWNED` is non-zero.
    pub spawned: bool,
    /// `PMI_DEBUG` is non-zero.
    pub debug: bool,
}

/// Environment variable names.
pub mod vars {
    /// Inherited socket.
    pub const FD: &str = "PMI_FD";
    /// `host:port` of the process manager.
    pub const PORT: &str = "PMI_PORT";
    /// Identity to announce over `PMI_PORT`.
    pub const ID: &str = "PMI_ID";
    /// Rank.
    pub const RANK: &str = "PMI_RANK";
    /// Job size.
    pub const SIZE: &str = "PMI_SIZE";
    /// Job id (Slurm).
    pub const JOBID: &str = "PMI_JOBID";
    /// Spawned by `MPI_Comm_spawn`.
    pub const SPAWNED: &str = "PMI_SPAWNED";
    /// Debug flag.
    pub const DEBUG: &str = "PMI_DEBUG";
}

fn env_err(var: &'static str, why: impl Into<String>) -> PmiError {
    PmiError::Env {
        var,
        why: why.into(),
    }
}

fn parse_u32(var: &'static str, v: &str) -> Result<u32> {
    v.trim()
        .parse()
        .map_err(|_| env_err(var, format!("expected a non-negative integer, got {v:?}")))
}

/// `PMI_SPAWNED` / `PMI_DEBUG`: integers where non-zero means yes (MPICH
/// reads them with `atoi`); an empty value counts as unset.
fn parse_flag(var: &'static str, v: &str) -> Result<bool> {
    let t = v.trim();
    if t.is_empty() {
        return Ok(false);
    }
    t.parse::<i64>()
        .map(|n| n != 0)
        .map_err(|_| env_err(var, format!("expected an integer, got {v:?}")))
}

fn parse_port(v: &str) -> Result<PmiEndpoint> {
    let bad = || env_err(vars::PORT, format!("expected host:port, got {v:?}"));
    let (host, port) = v.trim().rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad());
    }
    let port: u16 = port.parse().map_err(|_| bad())?;
    if port == 0 {
        return Err(bad());
    }
    Ok(PmiEndpoint::Port {
        host: host.to_string(),
        port,
    })
}

impl PmiEnv {
    /// Read the process environment. `Ok(None)` when neither `PMI_FD` nor
    /// `PMI_PORT` is set: the process was not started by a PMI launcher.
    pub fn from_env() -> Result<Option<PmiEnv>> {
        PmiEnv::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Like [`from_env`](Self::from_env), reading variables through `get`
    /// (for tests, or a launcher that passes the environment explicitly).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<PmiEnv>> {
        let endpoint = if let Some(fd) = get(vars::FD) {
            let n: i32 = fd.trim().parse().map_err(|_| {
                env_err(
                    vars::FD,
                    format!("expected a file descriptor number, got {fd:?}"),
                )
            })?;
            if n < 0 {
                return Err(env_err(vars::FD, format!("negative descriptor {n}")));
            }
            PmiEndpoint::Fd(n)
        } else if let Some(port) = get(vars::PORT) {
            parse_port(&port)?
        } else {
            return Ok(None);
        };
        let num = |var: &'static str| get(var).map(|v| parse_u32(var, &v)).transpose();
        let flag = |var: &'static str| {
            get(var)
                .map(|v| parse_flag(var, &v))
                .transpose()
                .map(|f| f.unwrap_or(false))
        };
        let rank = num(vars::RANK)?;
        let size = num(vars::SIZE)?;
        if size == Some(0) {
            return Err(env_err(vars::SIZE, "a job has at least one process"));
        }
        if let (Some(r), Some(s)) = (rank, size) {
            if r >= s {
                return Err(env_err(
                    vars::RANK,
                    format!("rank {r} is not below PMI_SIZE={s}"),
                ));
            }
        }
        Ok(Some(PmiEnv {
            endpoint,
            rank,
            size,
            id: num(vars::ID)?,
            jobid: get(vars::JOBID).filter(|j| !j.is_empty()),
            spawned: flag(vars::SPAWNED)?,
            debug: flag(vars::DEBUG)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmi::testutil::within;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Option<PmiEnv>> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PmiEnv::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn no_pmi_variables_means_none() {
        within(5, || {
            assert_eq!(parse(&[]).unwrap(), None);
            // Rank and size alone name no server to talk to.
            assert_eq!(
                parse(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]).unwrap(),
                None
            );
        });
    }

    #[test]
    fn hydra_fd_environment() {
        within(5, || {
            let env = parse(&[("PMI_FD", "6"), ("PMI_RANK", "1"), ("PMI_SIZE", "4")])
                .unwrap()
                .unwrap();
            assert_eq!(
                env,
                PmiEnv {
                    endpoint: PmiEndpoint::Fd(6),
                    rank: Some(1),
                    size: Some(4),
                    id: None,
                    jobid: None,
                    spawned: false,
                    debug: false,
                }
            );
        });
    }

    #[test]
    fn hydra_port_environment() {
        within(5, || {
            let env = parse(&[
                ("PMI_PORT", "vm:43859"),
                ("PMI_ID", "3"),
                ("PMI_SPAWNED", "1"),
            ])
            .unwrap()
            .unwrap();
            assert_eq!(
                env.endpoint,
                PmiEndpoint::Port {
                    host: "vm".into(),
                    port: 43859
                }
            );
            assert_eq!(env.id, Some(3));
            assert!(env.spawned);
            let env = parse(&[("PMI_PORT", "[::1]:9"), ("PMI_DEBUG", "0")])
                .unwrap()
                .unwrap();
            assert_eq!(
                env.endpoint,
                PmiEndpoint::Port {
                    host: "::1".into(),
                    port: 9
                }
            );
            assert_eq!(env.endpoint.to_string(), "[::1]:9");
            assert!(!env.debug);
        });
    }

    #[test]
    fn fd_wins_over_port() {
        within(5, || {
            let env = parse(&[("PMI_FD", "5"), ("PMI_PORT", "h:1")])
                .unwrap()
                .unwrap();
            assert_eq!(env.endpoint, PmiEndpoint::Fd(5));
        });
    }

    #[test]
    fn malformed_variables_are_typed_errors() {
        within(5, || {
            let cases: &[(&[(&str, &str)], &str)] = &[
                (&[("PMI_FD", "six")], "PMI_FD"),
                (&[("PMI_FD", "-1")], "PMI_FD"),
                (&[("PMI_PORT", "nohost")], "PMI_PORT"),
                (&[("PMI_PORT", ":80")], "PMI_PORT"),
                (&[("PMI_PORT", "h:0")], "PMI_PORT"),
                (&[("PMI_PORT", "h:99999")], "PMI_PORT"),
                (&[("PMI_FD", "3"), ("PMI_RANK", "x")], "PMI_RANK"),
                (&[("PMI_FD", "3"), ("PMI_SIZE", "0")], "PMI_SIZE"),
                (
                    &[("PMI_FD", "3"), ("PMI_RANK", "2"), ("PMI_SIZE", "2")],
                    "PMI_RANK",
                ),
                (&[("PMI_FD", "3"), ("PMI_ID", "-4")], "PMI_ID"),
                (&[("PMI_FD", "3"), ("PMI_SPAWNED", "yes")], "PMI_SPAWNED"),
                (&[("PMI_FD", "3"), ("PMI_DEBUG", "on")], "PMI_DEBUG"),
            ];
            for (vars, which) in cases {
                match parse(vars) {
                    Err(PmiError::Env { var, .. }) => assert_eq!(var, *which, "{vars:?}"),
                    other => panic!("{vars:?}: expected an Env error, got {other:?}"),
                }
            }
        });
    }
}
