//! A PMIx client: how processes started by Open MPI's `mpirun`, Slurm's
//! `srun --mpi=pmix`, PRRTE's `prterun` or Flux (with its PMIx plug-in)
//! learn their rank and the job size and exchange addresses.
//!
//! These launchers run a PMIx server beside the job and tell each process
//! where it is through `PMIX_*` variables ([`PmixEnv`]). The server speaks a
//! binary protocol that only OpenPMIx's own client library implements
//! compatibly across versions, so this module drives `libpmix` (loaded at
//! run time, see [`ffi`]'s docs for why) through the calls a job needs:
//! `PMIx_Init`, `PMIx_Get` of the job size, `PMIx_Put` + `PMIx_Commit` +
//! `PMIx_Fence` + `PMIx_Get` to exchange transport addresses, `PMIx_Fence`
//! as a barrier, `PMIx_Abort` to tear the job down, `PMIx_Finalize`.
//!
//! Every call is bounded in time ([`PmixClient::timeout`]): the library's
//! calls block until the server answers, and a server that died without
//! closing its socket would otherwise hang the process for ever. A call
//! that outlives the bound returns [`PmixError::Timeout`] (the library call
//! itself is left behind on a helper thread; the process is expected to
//! give up, which ends it).

pub mod ffi;

use std::ffi::{CStr, CString};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

use ffi::Lib;

/// Environment variable names.
pub mod vars {
    /// The job's namespace, set by every PMIx launcher.
    pub const NAMESPACE: &str = "PMIX_NAMESPACE";
    /// This process's rank in the namespace.
    pub const RANK: &str = "PMIX_RANK";
    /// Where the server listens (one per protocol version the server
    /// speaks; the client library picks).
    pub const SERVER_URIS: [&str; 6] = [
        "PMIX_SERVER_URI",
        "PMIX_SERVER_URI2",
        "PMIX_SERVER_URI21",
        "PMIX_SERVER_URI3",
        "PMIX_SERVER_URI4",
        "PMIX_SERVER_URI41",
    ];
    /// Ours: the PMIx client library to load instead of `libpmix.so.2`.
    pub const LIBRARY: &str = "PTL_PMIX_LIBRARY";
}

/// The library loaded when `PTL_PMIX_LIBRARY` is not set: OpenPMIx's
/// soname since PMIx 2 (Debian `libpmix2`, RHEL `pmix`).
pub const DEFAULT_LIBRARY: &str = "libpmix.so.2";

/// What can go wrong when talking to a PMIx server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmixError {
    /// The client library could not be loaded or lacks an entry point.
    #[error(
        "cannot load the PMIx client library {library}: {why} \
         (install OpenPMIx's library, Debian/Ubuntu package libpmix2, \
         or set PTL_PMIX_LIBRARY to the path of libpmix.so)"
    )]
    Load {
        /// The library asked for.
        library: String,
        /// The loader's words.
        why: String,
    },
    /// A `PMIX_*` variable is malformed.
    #[error("PMIx environment variable {var}: {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A PMIx call returned an error status.
    #[error("PMIx_{call} failed: {status}")]
    Call {
        /// The call, without its `PMIx_` prefix.
        call: &'static str,
        /// PMIx's description and the status code.
        status: String,
    },
    /// The connection to the server is gone: the launcher died, or ended
    /// the job.
    #[error("PMIx_{call}: lost the PMIx server ({status}); the launcher died or ended the job")]
    ServerGone {
        /// The call, without its `PMIx_` prefix.
        call: &'static str,
        /// PMIx's description and the status code.
        status: String,
    },
    /// A PMIx call did not return within the bound.
    #[error(
        "PMIx_{call}: no answer from the PMIx server within {after:?} \
         (the launcher may have died; PTL_BOOTSTRAP_TIMEOUT sets the wait)"
    )]
    Timeout {
        /// The call, without its `PMIx_` prefix.
        call: &'static str,
        /// The bound that expired.
        after: Duration,
    },
    /// A key another process should have put is not there.
    #[error("PMIx: rank {rank} has no key {key:?}")]
    NotFound {
        /// The rank asked.
        rank: u32,
        /// The key.
        key: String,
    },
    /// A value of the wrong type, or a key or value that cannot be passed
    /// to C (an interior NUL).
    #[error("PMIx key {key:?}: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// The client was finalized.
    #[error("PMIx {0} after finalize")]
    Finalized(&'static str),
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, PmixError>;

/// What a PMIx launcher put in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixEnv {
    /// `PMIX_NAMESPACE`.
    pub namespace: String,
    /// `PMIX_RANK`.
    pub rank: u32,
    /// The launcher, as far as its other variables tell (for messages).
    pub launcher: &'static str,
}

impl PmixEnv {
    /// Read the process environment; `Ok(None)` where no PMIx launcher
    /// started this process (no `PMIX_NAMESPACE`).
    pub fn from_env() -> Result<Option<PmixEnv>> {
        PmixEnv::from_lookup(|n| std::env::var_os(n).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Like [`from_env`](Self::from_env), reading variables through `get`.
    ///
    /// A namespace without a rank or without a server address is an error,
    /// not "no PMIx": such a process was started by a PMIx launcher that
    /// cannot be reached, and running it alone would be silently wrong.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<PmixEnv>> {
        let Some(namespace) = get(vars::NAMESPACE).filter(|s| !s.trim().is_empty()) else {
            return Ok(None);
        };
        let rank_text = get(vars::RANK).ok_or_else(|| PmixError::Env {
            var: vars::RANK,
            why: format!("not set, but {} is", vars::NAMESPACE),
        })?;
        let rank = rank_text.trim().parse().map_err(|_| PmixError::Env {
            var: vars::RANK,
            why: format!("expected a non-negative integer, got {rank_text:?}"),
        })?;
        if !vars::SERVER_URIS.iter().any(|v| get(v).is_some()) {
            return Err(PmixError::Env {
                var: "PMIX_SERVER_URI*",
                why: format!(
                    "none is set, but {} is: the launcher's PMIx server cannot be found",
                    vars::NAMESPACE
                ),
            });
        }
        Ok(Some(PmixEnv {
            namespace: namespace.trim().to_string(),
            rank,
            launcher: crate::launcher::name_pmix_launcher(&get),
        }))
    }
}

/// The library, loaded once per process (the first name asked for wins:
/// a library cannot be swapped once its progress thread runs).
fn library(name: &str) -> Result<&'static Lib> {
    static LIB: OnceLock<std::result::Result<Lib, (String, String)>> = OnceLock::new();
    LIB.get_or_init(|| Lib::load(name).map_err(|why| (name.to_string(), why)))
        .as_ref()
        .map_err(|(library, why)| PmixError::Load {
            library: library.clone(),
            why: why.clone(),
        })
}

/// A process's connection to its launcher's PMIx server.
#[derive(Debug)]
pub struct PmixClient {
    lib: &'static Lib,
    me: ffi::Proc,
    namespace: String,
    size: u32,
    timeout: Duration,
    finalized: bool,
}

/// Turn a status into a result.
fn check(lib: &Lib, call: &'static str, status: ffi::Status) -> Result<()> {
    match status {
        ffi::SUCCESS => Ok(()),
        ffi::ERR_UNREACH | ffi::ERR_LOST_CONNECTION => Err(PmixError::ServerGone {
            call,
            status: lib.describe(status),
        }),
        _ => Err(PmixError::Call {
            call,
            status: lib.describe(status),
        }),
    }
}

/// Run `f` on a helper thread and wait for it at most `after`.
fn bounded<T: Send + 'static>(
    call: &'static str,
    after: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("pmix-{call}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| PmixError::Call {
            call,
            status: format!("cannot start a thread for the call: {e}"),
        })?;
    rx.recv_timeout(after)
        .map_err(|_| PmixError::Timeout { call, after })
}

fn c_string(key: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| PmixError::BadValue {
        key: key.to_string(),
        why: "contains a NUL byte".into(),
    })
}

impl PmixClient {
    /// Connect to the server the environment names (`PMIx_Init`), loading
    /// the library `PTL_PMIX_LIBRARY` names or [`DEFAULT_LIBRARY`], and
    /// learn the job size. Every call from here on waits at most `timeout`.
    pub fn init(timeout: Duration) -> Result<PmixClient> {
        let name = std::env::var(vars::LIBRARY)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_string());
        PmixClient::init_with(&name, timeout)
    }

    /// [`init`](Self::init) with the library named explicitly.
    pub fn init_with(library_name: &str, timeout: Duration) -> Result<PmixClient> {
        let lib = library(library_name)?;
        let (status, me) = bounded("Init", timeout, move || {
            let mut me = ffi::Proc::new(b"", 0);
            // SAFETY: `me` is a valid, writable pmix_proc_t; no info array.
            let status = unsafe { (lib.init)(&mut me, std::ptr::null_mut(), 0) };
            (status, me)
        })?;
        check(lib, "Init", status)?;
        let namespace = String::from_utf8_lossy(&me.nspace_bytes()).into_owned();
        let mut client = PmixClient {
            lib,
            me,
            namespace,
            size: 0,
            timeout,
            finalized: false,
        };
        client.size = client.job_size()?;
        if client.me.rank >= client.size {
            return Err(PmixError::BadValue {
                key: "pmix.job.size".into(),
                why: format!(
                    "job size {} but this process is rank {}",
                    client.size, client.me.rank
                ),
            });
        }
        Ok(client)
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// Number of processes in the job (its namespace).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job's namespace, unique per job.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The bound on every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Make every later call wait at most `timeout`.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The loaded library's name.
    pub fn library(&self) -> &str {
        &self.lib.name
    }

    fn live(&self, what: &'static str) -> Result<()> {
        if self.finalized {
            Err(PmixError::Finalized(what))
        } else {
            Ok(())
        }
    }

    /// `PMIx_Get` of `key` on `rank` (or [`ffi::RANK_WILDCARD`]); the
    /// value converted by `convert`, then released.
    fn get_value<T: Send + 'static>(
        &self,
        rank: ffi::Rank,
        key: &str,
        convert: fn(&ffi::Value) -> Option<T>,
        expected: &'static str,
    ) -> Result<T> {
        self.live("get")?;
        let lib = self.lib;
        let proc_ = ffi::Proc::new(self.me.nspace_bytes().as_slice(), rank);
        let ckey = c_string(key, key)?;
        let secs = self.timeout_secs();
        let (status, value) = bounded("Get", self.timeout, move || {
            let info = [ffi::Info::new(ffi::keys::TIMEOUT, ffi::Value::int(secs))];
            let mut out: *mut ffi::Value = std::ptr::null_mut();
            // SAFETY: every pointer is valid for the call: the proc, the
            // NUL-terminated key, one info entry, and the out pointer.
            let status =
                unsafe { (lib.get)(&proc_, ckey.as_ptr(), info.as_ptr(), info.len(), &mut out) };
            if status != ffi::SUCCESS || out.is_null() {
                return (status, None);
            }
            // SAFETY: on success PMIx returned a valid, malloc'ed value.
            let v = convert(unsafe { &*out });
            // SAFETY: `out` came from PMIx_Get and is not used again.
            unsafe { lib.release(out) };
            (status, Some(v))
        })?;
        if status == ffi::ERR_NOT_FOUND {
            return Err(PmixError::NotFound {
                rank,
                key: key.to_string(),
            });
        }
        check(lib, "Get", status)?;
        value.flatten().ok_or_else(|| PmixError::BadValue {
            key: key.to_string(),
            why: format!("expected {expected}"),
        })
    }

    fn timeout_secs(&self) -> i32 {
        i32::try_from(self.timeout.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn job_size(&self) -> Result<u32> {
        self.get_value(
            ffi::RANK_WILDCARD,
            "pmix.job.size",
            value_as_u32,
            "an unsigned integer",
        )
    }

    /// Publish `key` = `value` to every process of the job (`PMIx_Put`
    /// with global scope); visible to the others after [`commit`] and a
    /// collecting [`fence`].
    ///
    /// [`commit`]: Self::commit
    /// [`fence`]: Self::fence
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.live("put")?;
        let lib = self.lib;
        let ckey = c_string(key, key)?;
        let cvalue = c_string(key, value)?;
        tracing::debug!(key, value, "PMIx put");
        let status = bounded("Put", self.timeout, move || {
            let mut v = ffi::Value::borrowed_string(&cvalue);
            // SAFETY: key and value are NUL-terminated and outlive the call;
            // PMIx copies the value.
            unsafe { (lib.put)(ffi::SCOPE_GLOBAL, ckey.as_ptr(), &mut v) }
        })?;
        check(lib, "Put", status)
    }

    /// Send the puts so far to the server (`PMIx_Commit`).
    pub fn commit(&mut self) -> Result<()> {
        self.live("commit")?;
        let lib = self.lib;
        // SAFETY: no arguments.
        let status = bounded("Commit", self.timeout, move || unsafe { (lib.commit)() })?;
        check(lib, "Commit", status)
    }

    /// Wait until every process of the job reached the fence; with
    /// `collect`, every committed put is then visible to every process.
    pub fn fence(&mut self, collect: bool) -> Result<()> {
        self.live("fence")?;
        let lib = self.lib;
        let secs = self.timeout_secs();
        let status = bounded("Fence", self.timeout, move || {
            let mut info = vec![ffi::Info::new(ffi::keys::TIMEOUT, ffi::Value::int(secs))];
            if collect {
                info.push(ffi::Info::new(
                    ffi::keys::COLLECT_DATA,
                    ffi::Value::flag(true),
                ));
            }
            // SAFETY: NULL procs with 0 count means "all of my namespace";
            // the info array is valid for the call.
            unsafe { (lib.fence)(std::ptr::null(), 0, info.as_ptr(), info.len()) }
        })?;
        check(lib, "Fence", status)
    }

    /// A fence without data exchange.
    pub fn barrier(&mut self) -> Result<()> {
        self.fence(false)
    }

    /// The string `rank` put under `key`.
    pub fn get(&self, rank: u32, key: &str) -> Result<String> {
        self.get_value(rank, key, value_as_string, "a string")
    }

    /// Ask the launcher to end the whole job (`PMIx_Abort` of every process
    /// of the namespace) with `code` and `msg`. The launcher usually kills
    /// this process too before the call returns; every later call fails
    /// with [`PmixError::Finalized`].
    pub fn abort(&mut self, code: i32, msg: &str) -> Result<()> {
        let lib = self.lib;
        // Nothing to finalize after an abort: a dead server would only make
        // the drop wait out its bound.
        self.finalized = true;
        let cmsg = c_string("abort message", &msg.replace('\0', " "))?;
        let status = bounded("Abort", self.timeout, move || {
            // SAFETY: the message is NUL-terminated; NULL procs with 0
            // count means the caller's whole namespace.
            unsafe { (lib.abort)(code, cmsg.as_ptr(), std::ptr::null_mut(), 0) }
        })?;
        check(lib, "Abort", status)
    }

    /// Tell the server this process is done (`PMIx_Finalize`); every later
    /// call fails with [`PmixError::Finalized`]. Dropping the client
    /// finalizes too.
    pub fn finalize(mut self) -> Result<()> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        let lib = self.lib;
        // SAFETY: no info array.
        let status = bounded("Finalize", self.timeout, move || unsafe {
            (lib.finalize)(std::ptr::null(), 0)
        })?;
        check(lib, "Finalize", status)
    }
}

impl Drop for PmixClient {
    fn drop(&mut self) {
        if let Err(e) = self.finalize_once() {
            tracing::warn!(error = %e, "PMIx finalize failed");
        }
    }
}

/// An unsigned integer of any of the widths servers use for sizes.
fn value_as_u32(v: &ffi::Value) -> Option<u32> {
    // SAFETY (every arm): the type tag says which union member is valid.
    unsafe {
        match v.ty {
            ffi::types::UINT32 | ffi::types::PROC_RANK => Some(v.data.uint32),
            ffi::types::UINT16 => Some(u32::from(v.data.uint16)),
            ffi::types::UINT => Some(v.data.uint),
            ffi::types::UINT64 => u32::try_from(v.data.uint64).ok(),
            ffi::types::SIZE => u32::try_from(v.data.size).ok(),
            ffi::types::INT => u32::try_from(v.data.integer).ok(),
            ffi::types::INT32 => u32::try_from(v.data.int32).ok(),
            _ => None,
        }
    }
}

/// A `PMIX_STRING`, copied out (invalid UTF-8 replaced).
fn value_as_string(v: &ffi::Value) -> Option<String> {
    if v.ty != ffi::types::STRING {
        return None;
    }
    // SAFETY: the tag says `string` is the valid member.
    let p = unsafe { v.data.string };
    if p.is_null() {
        return None;
    }
    // SAFETY: a PMIX_STRING value owns a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests;
