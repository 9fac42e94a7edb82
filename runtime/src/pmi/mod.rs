//! A PMI client: how a process started by MPICH's hydra (`mpiexec.hydra`)
//! or by Slurm (`srun --mpi=pmi2`) learns its rank and the job size and
//! exchanges addresses with the other processes of its job.
//!
//! Both launchers serve the PMI-1 "simple" protocol and PMI-2 on one socket
//! per process, which they hand over as an inherited descriptor (`PMI_FD`)
//! or as an address to connect to (`PMI_PORT`); see [`PmiEnv`] for the
//! variables read. [`PmiClient::from_env`] finds that socket, performs the
//! handshake and learns rank, size, application number and the name of the
//! job's key-value space (KVS).
//!
//! # Versions
//!
//! With [`VersionPreference::Auto`] (the default) the client asks for
//! PMI-1.1 (`cmd=init pmi_version=1 pmi_subversion=1`), as MPICH's own
//! client does, and for PMI-2 on the same connection when the server
//! refuses; under Slurm (`PMI_JOBID` set) it asks for PMI-2 first and
//! falls back to PMI-1.1. Hydra and Slurm accept both;
//! [`PmiOptions::version`] forces one. PMI-1 is preferred elsewhere for
//! its abort, which carries the exit status: hydra 4.0 does not know
//! PMI-2's and ends the job with status 255 instead.
//!
//! # Publishing values: put, fence, get
//!
//! Each process [`put`](PmiClient::put)s its own keys, then every process
//! calls [`fence`](PmiClient::fence); after the fence, every key put
//! before any process's fence can be read with [`get`](PmiClient::get).
//!
//! * PMI-1 has no commit on the wire (MPICH's `PMI_KVS_Commit` does nothing
//!   but check its arguments): a put is sent to the server at once, and
//!   hydra's per-node proxy holds puts back until the next `barrier_in`. So
//!   the fence is the barrier: `cmd=barrier_in` → `cmd=barrier_out`.
//! * PMI-2 has a `kvs-fence`, but hydra answers it without waiting for the
//!   other processes. The fence here adds a `kvs-get` of a key no one puts,
//!   which hydra answers only when every process has fenced as often; so in
//!   both versions `fence` returns only once every process has called it.
//!
//! [`barrier`](PmiClient::barrier) is therefore the same operation as
//! `fence`; it exists for callers that synchronise without publishing.
//!
//! # What a value may contain
//!
//! Keys and values travel unescaped (hydra 4.0 splits PMI-1 lines on spaces
//! and PMI-2 pairs on `;`, and understands no escapes), so both are limited
//! to printable ASCII without space, `=`, `;` and `\`
//! ([`is_wire_safe`]). Keys are non-empty, and keys starting with
//! `ptl.pmi.` are reserved for this client. Lengths are limited by the
//! server: [`max_key_len`](PmiClient::max_key_len) and
//! [`max_val_len`](PmiClient::max_val_len) (with hydra: 63 and 673 bytes
//! under PMI-1, 63 and 1023 under PMI-2). Anything else — binary data, job
//! keys, text with spaces — goes through [`encode_value`] (hex, so a value
//! carries `max_val_len / 2` bytes) and comes back with [`decode_value`].
//!
//! # Example
//!
//! ```no_run
//! use portals_runtime::pmi::PmiClient;
//!
//! let Some(mut pmi) = PmiClient::from_env()? else {
//!     return Ok(()); // not started by a PMI launcher
//! };
//! let me = pmi.rank();
//! pmi.put(&format!("addr-{me}"), "127.0.0.1:4000")?;
//! pmi.fence()?;
//! for r in 0..pmi.size() {
//!     let addr = pmi.get(&format!("addr-{r}"))?;
//!     println!("rank {r} is at {addr}");
//! }
//! pmi.finalize()?;
//! # Ok::<(), portals_runtime::pmi::PmiError>(())
//! ```
//!
//! # Lifetime
//!
//! Call [`finalize`](PmiClient::finalize) before exiting: hydra takes a PMI
//! connection that closes without it for a crashed process and kills the
//! job. To end the job on purpose, call [`abort`](PmiClient::abort) and
//! then exit.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod conn;
mod env;
mod error;
mod reply;
mod v1;
mod v2;
pub(crate) mod wire;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;

use conn::{Channel, Stream};
pub use env::{vars, PmiEndpoint, PmiEnv};
pub use error::{PmiError, Result};

/// Keys with this prefix are reserved for the client's own use.
pub const RESERVED_KEY_PREFIX: &str = "ptl.pmi.";

/// The PMI-1 line budget (MPICH's `PMIU_MAXLINE`): MPICH's client shrinks
/// its value limit so that a `put` line never exceeds it, and Slurm's PMI-1
/// server reads lines into buffers of that size; so this client does the
/// same.
const V1_MAX_LINE: usize = 1024;

/// Room MPICH reserves in that budget for `cmd=put kvsname= key= value=`.
const V1_PUT_OVERHEAD: usize = 30;

/// PMI-2 key and value limits (MPICH's `PMI2_MAX_KEYLEN` and
/// `PMI2_MAX_VALLEN`), less one: hydra stores both in C buffers of that
/// size, terminator included, and truncates anything longer.
const V2_MAX_KEY: usize = 64 - 1;
const V2_MAX_VAL: usize = 1024 - 1;

/// Longest abort message sent; the launcher prints it, nothing more.
const MAX_ABORT_MESSAGE: usize = 200;

/// Longest wait, after an abort, for the launcher to end the job.
const ABORT_GRACE: Duration = Duration::from_secs(10);

/// The protocol a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PmiVersion {
    /// PMI-1.1, the "simple" line protocol.
    V1,
    /// PMI-2.0.
    V2,
}

impl std::fmt::Display for PmiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PmiVersion::V1 => "1.1",
            PmiVersion::V2 => "2.0",
        })
    }
}

/// Which protocol to ask the launcher for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VersionPreference {
    /// PMI-1 (MPICH's own default with hydra), else PMI-2; under Slurm
    /// (`PMI_JOBID` set) PMI-2 first, its `pmi2` plugin's native protocol.
    /// PMI-1 first because its abort carries the exit status: hydra 4.0
    /// does not know PMI-2's abort and ends such a job with status 255.
    #[default]
    Auto,
    /// PMI-1 only.
    V1,
    /// PMI-2 only; fail with [`PmiError::VersionMismatch`] if refused.
    V2,
}

/// How a client connects and how long it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmiOptions {
    /// Protocol to ask for.
    pub version: VersionPreference,
    /// Longest wait for connecting and for each reply. A fence waits for
    /// the slowest process of the job, so this bounds start-up skew too.
    pub timeout: Duration,
}

impl Default for PmiOptions {
    /// Auto version, 60 s (the runtime's default bootstrap timeout).
    fn default() -> Self {
        PmiOptions {
            version: VersionPreference::Auto,
            timeout: Duration::from_secs(60),
        }
    }
}

/// An open connection to a process manager, before the handshake.
#[derive(Debug)]
pub enum PmiTransport {
    /// A Unix-domain socket (an inherited `PMI_FD`, or one end of a
    /// socketpair).
    Unix(UnixStream),
    /// A TCP connection (to `PMI_PORT`).
    Tcp(TcpStream),
}

/// Whether `text` can travel as a PMI key or value: printable ASCII without
/// space, `=`, `;` or `\`.
pub fn is_wire_safe(text: &str) -> bool {
    text.bytes().all(wire_safe_byte)
}

fn wire_safe_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'=' | b';' | b'\\')
}

/// Encode arbitrary bytes as a PMI value (lower-case hex, two characters a
/// byte).
pub fn encode_value(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

/// Decode a value made by [`encode_value`] (either case accepted).
pub fn decode_value(text: &str) -> Result<Vec<u8>> {
    fn nibble(c: u8) -> Result<u8> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(PmiError::BadEncoding {
                why: "a character is not a hex digit",
            }),
        }
    }
    let bytes = text.as_bytes();
    if bytes.len() % 2 != 0 {
        return Err(PmiError::BadEncoding {
            why: "odd number of hex digits",
        });
    }
    bytes
        .chunks_exact(2)
        .map(|p| Ok((nibble(p[0])? << 4) | nibble(p[1])?))
        .collect()
}

/// Set once the `PMI_FD` of the environment has been turned into a socket
/// owner, so that no second owner of the same descriptor is ever made.
static ENV_FD_CLAIMED: AtomicBool = AtomicBool::new(false);

/// Take ownership of the inherited descriptor `fd`, once per `claimed` flag.
fn claim_fd(fd: i32, claimed: &AtomicBool) -> Result<UnixStream> {
    let fd_err = |why: String| PmiError::Env { var: vars::FD, why };
    // SAFETY: F_GETFD and fstat only inspect the descriptor table entry;
    // `st` is a properly sized, writable stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(fd_err(format!("descriptor {fd} is not open")));
    }
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(fd_err(format!(
            "fstat({fd}): {}",
            std::io::Error::last_os_error()
        )));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(fd_err(format!("descriptor {fd} is not a socket")));
    }
    if claimed
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Err(fd_err(format!(
            "descriptor {fd} was already taken by another PMI client of this process"
        )));
    }
    // Programs this process starts must not inherit the socket: a child
    // holding it open would hide this process's exit from the launcher.
    // SAFETY: F_SETFD on a descriptor checked open above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(fd_err(format!(
            "fcntl({fd}, F_SETFD): {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the launcher created this descriptor for this process and
    // named it in PMI_FD; it is open and a socket (checked above), and the
    // `claimed` flag makes this the only owner created from it.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

fn connect_tcp(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    let endpoint = PmiEndpoint::Port {
        host: host.to_string(),
        port,
    }
    .to_string();
    let deadline = Instant::now() + timeout;
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|source| PmiError::Connect {
            endpoint: endpoint.clone(),
            source,
        })?
        .collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address for host");
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                // One small request, one small reply: Nagle would only add
                // latency to every round trip.
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(PmiError::Connect {
        endpoint,
        source: last,
    })
}

fn check_token(what: &'static str, text: &str, max: usize, allow_empty: bool) -> Result<()> {
    if text.is_empty() && !allow_empty {
        return Err(PmiError::InvalidToken {
            what,
            text: String::new(),
            why: "must not be empty",
        });
    }
    if text.len() > max {
        return Err(PmiError::TooLong {
            what,
            len: text.len(),
            max,
        });
    }
    if !is_wire_safe(text) {
        return Err(PmiError::InvalidToken {
            what,
            text: text.to_string(),
            why: "only printable ASCII without space, '=', ';' or '\\' (see encode_value)",
        });
    }
    Ok(())
}

/// Make an abort message wire safe: the launcher only prints it.
fn sanitize_message(msg: &str) -> String {
    msg.bytes()
        .take(MAX_ABORT_MESSAGE)
        .map(|b| {
            if wire_safe_byte(b) {
                char::from(b)
            } else {
                '_'
            }
        })
        .collect()
}

/// A connection to the process manager, after the handshake.
#[derive(Debug)]
pub struct PmiClient {
    ch: Channel,
    version: PmiVersion,
    rank: u32,
    size: u32,
    appnum: i32,
    kvs_name: String,
    spawned: bool,
    debug: bool,
    max_key_len: usize,
    max_val_len: usize,
    /// Completed fences and barriers; `get` needs at least one.
    fences: u64,
    aborted: bool,
}

impl PmiClient {
    /// Connect to the launcher named by the environment, with default
    /// [`PmiOptions`]. `Ok(None)` when neither `PMI_FD` nor `PMI_PORT` is
    /// set (the process was not started by a PMI launcher).
    ///
    /// `PMI_FD` can be taken once per process: a second call fails with
    /// [`PmiError::Env`].
    pub fn from_env() -> Result<Option<PmiClient>> {
        PmiClient::from_env_with(&PmiOptions::default())
    }

    /// [`from_env`](Self::from_env) with explicit options.
    pub fn from_env_with(opts: &PmiOptions) -> Result<Option<PmiClient>> {
        match PmiEnv::from_env()? {
            None => Ok(None),
            Some(env) => PmiClient::open(&env, opts).map(Some),
        }
    }

    /// Connect to `env.endpoint` and perform the handshake. For
    /// [`PmiEndpoint::Fd`] this takes ownership of the descriptor, which
    /// must have been inherited from the launcher; see
    /// [`from_env`](Self::from_env).
    pub fn open(env: &PmiEnv, opts: &PmiOptions) -> Result<PmiClient> {
        let transport = match &env.endpoint {
            PmiEndpoint::Fd(fd) => PmiTransport::Unix(claim_fd(*fd, &ENV_FD_CLAIMED)?),
            PmiEndpoint::Port { host, port } => {
                PmiTransport::Tcp(connect_tcp(host, *port, opts.timeout)?)
            }
        };
        PmiClient::connect(transport, env, opts)
    }

    /// Perform the handshake on an already open connection; `env` supplies
    /// what the protocol needs from the environment (`PMI_ID` and the
    /// endpoint kind decide whether PMI-1 sends `initack`; PMI-1 over a
    /// descriptor takes rank and size from `PMI_RANK` and `PMI_SIZE`).
    pub fn connect(transport: PmiTransport, env: &PmiEnv, opts: &PmiOptions) -> Result<PmiClient> {
        let stream = match transport {
            PmiTransport::Unix(s) => Stream::Unix(s),
            PmiTransport::Tcp(s) => Stream::Tcp(s),
        };
        let mut ch = Channel::new(stream, opts.timeout);
        let mut v1_init_done = false;
        let version = match opts.version {
            VersionPreference::V1 => PmiVersion::V1,
            VersionPreference::Auto if env.jobid.is_none() => match v1::init(&mut ch, 1, 1)? {
                v1::InitReply::Accepted(1) => {
                    v1_init_done = true;
                    PmiVersion::V1
                }
                // A server may accept while saying it speaks PMI-2 only.
                v1::InitReply::Accepted(2) => PmiVersion::V2,
                v1::InitReply::Accepted(v) => {
                    return Err(PmiError::VersionMismatch {
                        wanted: "1.1",
                        offered: v.to_string(),
                    })
                }
                v1::InitReply::Refused(_) => {
                    v1::init(&mut ch, 2, 0)?.require(2, "2.0")?;
                    PmiVersion::V2
                }
            },
            pref @ (VersionPreference::Auto | VersionPreference::V2) => {
                match v1::init(&mut ch, 2, 0)? {
                    // A server may accept while saying it speaks PMI-1 only.
                    v1::InitReply::Accepted(1) if pref == VersionPreference::Auto => {
                        v1_init_done = true;
                        PmiVersion::V1
                    }
                    v1::InitReply::Refused(_) if pref == VersionPreference::Auto => PmiVersion::V1,
                    reply => {
                        reply.require(2, "2.0")?;
                        PmiVersion::V2
                    }
                }
            }
        };
        match version {
            PmiVersion::V1 => PmiClient::handshake_v1(ch, env, v1_init_done),
            PmiVersion::V2 => PmiClient::handshake_v2(ch, env),
        }
    }

    fn handshake_v1(mut ch: Channel, env: &PmiEnv, init_done: bool) -> Result<PmiClient> {
        let over_port = matches!(env.endpoint, PmiEndpoint::Port { .. });
        // Over PMI_PORT the connection is anonymous until `initack` names
        // it; MPICH's client sends it before `init`, and so does this one
        // unless a PMI-2 attempt came first.
        let identity = match (over_port, env.id) {
            (true, Some(id)) => Some(v1::initack(&mut ch, id)?),
            _ => None,
        };
        if !init_done {
            v1::init(&mut ch, 1, 1)?.require(1, "1.1")?;
        }
        let (rank, size, debug) = match identity {
            Some(id) => (id.rank, id.size, id.debug || env.debug),
            None => {
                let missing = |var| PmiError::Env {
                    var,
                    why: "not set, and PMI-1 learns rank and size only from the environment here"
                        .into(),
                };
                let rank = env.rank.ok_or_else(|| missing(vars::RANK))?;
                let size = env.size.ok_or_else(|| missing(vars::SIZE))?;
                if rank >= size {
                    return Err(PmiError::Env {
                        var: vars::RANK,
                        why: format!("rank {rank} is not below PMI_SIZE={size}"),
                    });
                }
                (rank, size, env.debug)
            }
        };
        let maxes = v1::get_maxes(&mut ch)?;
        let appnum = v1::get_appnum(&mut ch)?;
        let kvs_name = v1::get_my_kvsname(&mut ch)?;
        // Keep a whole `put` line within V1_MAX_LINE, with MPICH's client's
        // arithmetic, so that no server gets a longer line from us than from
        // it. Hydra's maxes (256, 64, 1024) give 63 and 673.
        let (mut key_budget, mut val_budget) = (maxes.keylen_max, maxes.vallen_max);
        let line = maxes
            .kvsname_max
            .saturating_add(maxes.keylen_max)
            .saturating_add(maxes.vallen_max)
            .saturating_add(V1_PUT_OVERHEAD);
        if line > V1_MAX_LINE {
            key_budget = key_budget.min(256);
            val_budget = V1_MAX_LINE
                .saturating_sub(
                    maxes
                        .kvsname_max
                        .saturating_add(key_budget + V1_PUT_OVERHEAD),
                )
                .min(val_budget);
        }
        // Both limits count the C terminator the server stores.
        let max_key_len = key_budget - 1;
        Ok(PmiClient {
            ch,
            version: PmiVersion::V1,
            rank,
            size,
            appnum,
            kvs_name,
            spawned: env.spawned,
            debug,
            max_key_len,
            max_val_len: val_budget.saturating_sub(1),
            fences: 0,
            aborted: false,
        })
    }

    fn handshake_v2(mut ch: Channel, env: &PmiEnv) -> Result<PmiClient> {
        // Hydra identifies the process by `pmirank`: PMI_ID over PMI_PORT,
        // PMI_RANK otherwise (MPICH's order of preference).
        let fi = v2::fullinit(&mut ch, env.id.or(env.rank), env.jobid.as_deref())?;
        let kvs_name = v2::job_getid(&mut ch)?;
        Ok(PmiClient {
            ch,
            version: PmiVersion::V2,
            rank: fi.rank,
            size: fi.size,
            appnum: fi.appnum,
            kvs_name,
            spawned: fi.spawned || env.spawned,
            debug: fi.debug || env.debug,
            max_key_len: V2_MAX_KEY,
            max_val_len: V2_MAX_VAL,
            fences: 0,
            aborted: false,
        })
    }

    /// The protocol in use.
    pub fn version(&self) -> PmiVersion {
        self.version
    }

    /// This process's rank, 0-based.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Which application of an MPMD launch (`mpiexec -n 2 a : -n 2 b`) this
    /// process belongs to, 0-based.
    pub fn appnum(&self) -> i32 {
        self.appnum
    }

    /// Name of the job's key-value space (PMI-2: the job id).
    pub fn kvs_name(&self) -> &str {
        &self.kvs_name
    }

    /// Whether the process was started by `MPI_Comm_spawn` of another job.
    pub fn spawned(&self) -> bool {
        self.spawned
    }

    /// Whether the launcher or the user asked for PMI debugging
    /// (`PMI_DEBUG`, hydra's `-verbose`). The wire traffic is logged at
    /// `debug` level under `portals_runtime::pmi` either way.
    pub fn debug(&self) -> bool {
        self.debug
    }

    /// Longest key [`put`](Self::put) and [`get`](Self::get) accept, in
    /// bytes.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Longest value [`put`](Self::put) accepts, in bytes.
    pub fn max_val_len(&self) -> usize {
        self.max_val_len
    }

    /// Set the timeout for subsequent requests.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.ch.timeout = timeout;
    }

    fn ready(&self) -> Result<()> {
        if self.aborted {
            return Err(PmiError::Usage("the job was aborted"));
        }
        self.ch.usable()
    }

    /// How many processes the launcher could run in all (`mpiexec
    /// -usize`), `None` if it does not say.
    pub fn universe_size(&mut self) -> Result<Option<u32>> {
        self.ready()?;
        match self.version {
            PmiVersion::V1 => v1::get_universe_size(&mut self.ch),
            PmiVersion::V2 => v2::universe_size(&mut self.ch),
        }
    }

    /// Publish `value` under `key`; other processes can read it after the
    /// next [`fence`](Self::fence). See the module documentation for what
    /// keys and values may contain.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.ready()?;
        check_token("key", key, self.max_key_len, false)?;
        if key.starts_with(RESERVED_KEY_PREFIX) {
            return Err(PmiError::InvalidToken {
                what: "key",
                text: key.to_string(),
                why: "the prefix ptl.pmi. is reserved",
            });
        }
        check_token("value", value, self.max_val_len, true)?;
        match self.version {
            PmiVersion::V1 => v1::put(&mut self.ch, &self.kvs_name, key, value),
            PmiVersion::V2 => v2::put(&mut self.ch, key, value),
        }
    }

    /// Commit this process's puts and wait until every process of the job
    /// has done the same; afterwards every key put before the fence is
    /// readable by [`get`](Self::get).
    pub fn fence(&mut self) -> Result<()> {
        self.ready()?;
        match self.version {
            PmiVersion::V1 => v1::barrier(&mut self.ch)?,
            PmiVersion::V2 => v2::barrier(&mut self.ch, &self.kvs_name)?,
        }
        self.fences += 1;
        Ok(())
    }

    /// Wait until every process of the job has called `barrier` (or
    /// [`fence`](Self::fence)) as often. Puts made before it are published
    /// too: PMI has no barrier that is not also a fence.
    pub fn barrier(&mut self) -> Result<()> {
        self.fence()
    }

    /// Read the value another process (or this one) put under `key` before
    /// its last fence. [`PmiError::KeyNotFound`] if there is none. Needs a
    /// completed [`fence`](Self::fence): before it, nothing is published,
    /// and hydra's PMI-2 server would abort the job on such a get.
    pub fn get(&mut self, key: &str) -> Result<String> {
        self.ready()?;
        if self.fences == 0 {
            return Err(PmiError::Usage(
                "get before the first fence: nothing is published yet",
            ));
        }
        check_token("key", key, self.max_key_len, false)?;
        match self.version {
            PmiVersion::V1 => v1::get(&mut self.ch, &self.kvs_name, key),
            PmiVersion::V2 => v2::get(&mut self.ch, &self.kvs_name, key),
        }
    }

    /// Tell the launcher this process is done with PMI, and close the
    /// connection.
    pub fn finalize(self) -> Result<()> {
        self.ready()?;
        let mut ch = self.ch;
        match self.version {
            PmiVersion::V1 => v1::finalize(&mut ch)?,
            PmiVersion::V2 => v2::finalize(&mut ch)?,
        }
        ch.shutdown();
        Ok(())
    }

    /// Ask the launcher to end the whole job with exit status `code`; `msg`
    /// is for its log (made wire safe: other characters become `_`).
    /// Hydra 4.0 exits with `code` at once for PMI-1 and kills every
    /// process; for PMI-2 it does not know the command and kills the job
    /// with status 255 (which is why [`VersionPreference::Auto`] asks
    /// hydra for PMI-1).
    ///
    /// No reply comes. Like MPICH's `PMI_Abort`, this then waits for the
    /// launcher to act — it normally kills this process — and returns only
    /// when the launcher has closed the connection, or after the client's
    /// timeout (at most 10 s). The caller should exit right after (with
    /// `code`). Exiting at once instead races the launcher: hydra 4.0 then
    /// sees the process die while it still handles the abort, and can die
    /// itself of `SIGPIPE` writing to its proxy.
    ///
    /// Works on a connection an earlier error left out of step, since no
    /// reply needs to be read; every later call fails with
    /// [`PmiError::Usage`].
    pub fn abort(&mut self, code: i32, msg: &str) -> Result<()> {
        if self.aborted {
            return Err(PmiError::Usage("the job was aborted"));
        }
        self.aborted = true;
        let msg = sanitize_message(msg);
        match self.version {
            PmiVersion::V1 => v1::abort(&mut self.ch, code, &msg)?,
            PmiVersion::V2 => v2::abort(&mut self.ch, code, &msg)?,
        }
        let closed = self.ch.wait_for_close(self.ch.timeout.min(ABORT_GRACE));
        tracing::debug!(target: "portals_runtime::pmi", closed, "abort sent");
        Ok(())
    }
}
