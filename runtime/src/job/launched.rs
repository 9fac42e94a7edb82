//! Joining through a launcher's key-value space: a PMI launcher
//! (MPICH's `mpiexec.hydra`, Slurm's `srun --mpi=pmi2`) or a PMIx one
//! (Open MPI's `mpirun`, Slurm's `srun --mpi=pmix`, PRRTE, Flux). Each
//! rank publishes its contact under a key of its own, fences, and reads
//! every other rank's; the job key comes from the launcher's namespace
//! (and `PTL_JOB_SECRET`), and each published value carries a check of it
//! so that ranks of two jobs never take each other's contacts.

use std::sync::Mutex;
use std::time::Duration;

use crate::env::{self, JobOptions};
use crate::error::RuntimeError;
use crate::pmi::{PmiClient, PmiEnv, PmiError, PmiOptions, VersionPreference};
use crate::pmix::{PmixClient, PmixEnv, PmixError};
use crate::transport::{bring_up, BroughtUp, Published};

use super::{Coordinator, Job, ABORT_OUTPUT_GRACE};

/// The key under which a rank publishes its transport address in the PMI
/// key-value space.
fn pmi_addr_key(rank: u32) -> String {
    format!("ptl-addr-{rank}")
}

/// 64-bit FNV-1a, then the SplitMix64 finaliser so every input bit moves
/// every output bit. Stable across builds and platforms (unlike std's
/// `DefaultHasher`), so ranks built separately agree.
fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        // Length-prefix each part so that ("ab", "c") and ("a", "bc") differ.
        for b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The job key of a job started by a PMI launcher, which hands out no key
/// of its own: a stable 64-bit hash of the job's key-value space name (which
/// the launcher makes unique per job) and, if given, the secret from
/// `PTL_JOB_SECRET`. The hash is 64-bit FNV-1a over the parts
/// `portals-rs pmi job key`, the KVS name and the secret, each preceded by
/// its length as 8 little-endian bytes, followed by the SplitMix64
/// finaliser; every rank computes the same key without talking.
///
/// Without a secret the key only keeps jobs apart (a message of another job
/// is refused): anyone who learns or guesses the KVS name (hydra's are
/// made of the launcher's pid, a counter, a random number and the host
/// name) can compute it, so it authenticates nothing.
/// With a secret every rank is given (`mpiexec -genv PTL_JOB_SECRET …`),
/// only holders of the secret can.
pub fn pmi_job_key(kvs_name: &str, secret: Option<&str>) -> u64 {
    let mut parts: Vec<&[u8]> = vec![b"portals-rs pmi job key", kvs_name.as_bytes()];
    if let Some(s) = secret {
        parts.push(s.as_bytes());
    }
    stable_hash(&parts)
}

/// What a rank publishes next to its address so that the others can tell
/// it derived the same job key, without publishing the key itself.
pub(super) fn key_check(job_key: u64) -> u64 {
    stable_hash(&[b"portals-rs job key check", &job_key.to_le_bytes()])
}

/// Join a job started by a PMI launcher: connect to it as `pmi` says, then
/// continue as [`join_with_pmi`].
pub fn join_pmi(
    pmi: &PmiEnv,
    options: JobOptions,
    secret: Option<&str>,
) -> Result<Job, RuntimeError> {
    let client = PmiClient::open(
        pmi,
        &PmiOptions {
            version: VersionPreference::Auto,
            timeout: options.timeout,
        },
    )?;
    join_with_pmi(client, options, secret)
}

/// Join a job through an open PMI connection: rank and size come from the
/// launcher, the job key from [`pmi_job_key`], and the ranks exchange
/// transport addresses through the launcher's key-value space (put, fence,
/// get). [`Job::barrier`] is then a PMI barrier, and the connection is
/// finalized when the job is dropped (or by [`Job::finalize`]).
///
/// A failure after the connection is open is fatal for the whole job: the
/// error is printed on stderr and the launcher is asked to abort the job
/// (exit status 1), so that no rank waits for this one until a timeout.
pub fn join_with_pmi(
    pmi: PmiClient,
    options: JobOptions,
    secret: Option<&str>,
) -> Result<Job, RuntimeError> {
    join_through(pmi, options, secret)
}

/// What a launcher-started rank does when it cannot join: print why, give
/// the launcher a moment to forward that (it tears the job down on the
/// abort, and hydra drops output it has not forwarded yet; this is the
/// fatal path, so the time is free), then `abort` the whole job.
fn or_abort<T>(
    rank: u32,
    size: u32,
    made: Result<T, RuntimeError>,
    abort: impl FnOnce(&str),
) -> Result<T, RuntimeError> {
    made.inspect_err(|e| {
        let why = format!("rank {rank} of {size} cannot join the job: {e}");
        eprintln!("portals-runtime: {why}; aborting the job");
        std::thread::sleep(ABORT_OUTPUT_GRACE);
        abort(&why);
    })
}

/// What joining through a launcher needs of its key-value space (PMI's or
/// PMIx's): publish, wait for every rank, read.
trait LauncherKvs {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// The job's name at the launcher (PMI's key-value space, PMIx's
    /// namespace): unique per job, the seed of its job key.
    fn job_name(&self) -> &str;
    /// Ask the launcher to end the whole job, saying `why`.
    fn abort_job(&mut self, why: &str);
    /// The job's coordinator from now on (its barriers, its finalize).
    fn into_coordinator(self) -> Coordinator;
    /// The error that names this launcher's key-value space.
    fn join_error(&self, why: String) -> RuntimeError;
    /// What a fence that timed out tells about the missing ranks.
    const TIMEOUT_HINT: &'static str;
    /// Publish `value` under `key`, visible to every rank after the fence.
    fn publish(&mut self, key: &str, value: &str) -> Result<(), RuntimeError>;
    /// Wait for every rank; `Ok(Some(after))` if the wait timed out.
    fn fence_all(&mut self) -> Result<Option<Duration>, RuntimeError>;
    /// What rank `r` published under `key` (`None`: nothing).
    fn read(&mut self, r: u32, key: &str) -> Result<Option<String>, RuntimeError>;
}

impl LauncherKvs for PmiClient {
    fn rank(&self) -> u32 {
        PmiClient::rank(self)
    }
    fn size(&self) -> u32 {
        PmiClient::size(self)
    }
    fn job_name(&self) -> &str {
        self.kvs_name()
    }
    fn abort_job(&mut self, why: &str) {
        if let Err(e) = self.abort(1, why) {
            tracing::warn!(error = %e, "PMI abort failed");
        }
    }
    fn into_coordinator(self) -> Coordinator {
        Coordinator::Pmi(Mutex::new(Some(self)))
    }
    fn join_error(&self, why: String) -> RuntimeError {
        RuntimeError::PmiJoin {
            kvs: self.kvs_name().to_string(),
            why,
        }
    }
    const TIMEOUT_HINT: &'static str = "PMI does not say which ranks are missing";
    fn publish(&mut self, key: &str, value: &str) -> Result<(), RuntimeError> {
        Ok(self.put(key, value)?)
    }
    fn fence_all(&mut self) -> Result<Option<Duration>, RuntimeError> {
        match self.fence() {
            Ok(()) => Ok(None),
            Err(PmiError::Timeout { after, .. }) => Ok(Some(after)),
            Err(e) => Err(e.into()),
        }
    }
    fn read(&mut self, _r: u32, key: &str) -> Result<Option<String>, RuntimeError> {
        match self.get(key) {
            Ok(v) => Ok(Some(v)),
            Err(PmiError::KeyNotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl LauncherKvs for PmixClient {
    fn rank(&self) -> u32 {
        PmixClient::rank(self)
    }
    fn size(&self) -> u32 {
        PmixClient::size(self)
    }
    fn job_name(&self) -> &str {
        self.namespace()
    }
    fn abort_job(&mut self, why: &str) {
        if let Err(e) = self.abort(1, why) {
            tracing::warn!(error = %e, "PMIx abort failed");
        }
    }
    fn into_coordinator(self) -> Coordinator {
        Coordinator::Pmix(Mutex::new(Some(self)))
    }
    fn join_error(&self, why: String) -> RuntimeError {
        RuntimeError::PmixJoin {
            namespace: self.namespace().to_string(),
            why,
        }
    }
    const TIMEOUT_HINT: &'static str = "or the launcher died";
    fn publish(&mut self, key: &str, value: &str) -> Result<(), RuntimeError> {
        self.put(key, value)?;
        Ok(self.commit()?)
    }
    fn fence_all(&mut self) -> Result<Option<Duration>, RuntimeError> {
        match self.fence(true) {
            Ok(()) => Ok(None),
            Err(PmixError::Timeout { after, .. }) => Ok(Some(after)),
            Err(e) => Err(e.into()),
        }
    }
    fn read(&mut self, r: u32, key: &str) -> Result<Option<String>, RuntimeError> {
        match self.get(r, key) {
            Ok(v) => Ok(Some(v)),
            Err(PmixError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// Publish this rank's address with the check of its job key, fence, and
/// read every other rank's, checking theirs.
fn exchange<K: LauncherKvs>(
    kvs: &mut K,
    job_key: u64,
    local: &str,
) -> Result<Published, RuntimeError> {
    let (rank, size) = (kvs.rank(), kvs.size());
    let check = key_check(job_key);
    kvs.publish(&pmi_addr_key(rank), &published_value(local, job_key))?;
    if let Some(after) = kvs.fence_all()? {
        return Err(kvs.join_error(format!(
            "not every rank reached the start-up fence within {after:?} ({}; {} sets the wait)",
            K::TIMEOUT_HINT,
            env::BOOTSTRAP_TIMEOUT
        )));
    }
    let mut peers = Vec::with_capacity(size as usize);
    for r in 0..size {
        if r == rank {
            peers.push((r, local.to_string()));
            continue;
        }
        let Some(value) = kvs.read(r, &pmi_addr_key(r))? else {
            return Err(kvs.join_error(format!("rank {r} published no address")));
        };
        match split_published(r, value, check)? {
            Ok(addr) => peers.push((r, addr)),
            Err(why) => return Err(kvs.join_error(why)),
        }
    }
    Ok(peers)
}

/// What a rank publishes through a launcher: its transport address and the
/// check of its job key.
fn published_value(local: &str, job_key: u64) -> String {
    format!("{local},{:016x}", key_check(job_key))
}

/// Split what rank `r` published into its address, checking that it
/// derived the job key whose check is `check`. The outer error is a value
/// of the wrong form; the inner one a key mismatch, for the caller to wrap
/// with the launcher's name.
fn split_published(
    r: u32,
    value: String,
    check: u64,
) -> Result<Result<String, String>, RuntimeError> {
    let Some((addr, their_check)) = value.rsplit_once(',') else {
        return Err(RuntimeError::BadAddress {
            rank: r,
            addr: value,
        });
    };
    if u64::from_str_radix(their_check, 16).ok() != Some(check) {
        return Ok(Err(format!(
            "job key mismatch: rank {r} derived a different job key \
             (every rank must be given the same {})",
            env::JOB_SECRET
        )));
    }
    Ok(Ok(addr.to_string()))
}

// ----- PMIx --------------------------------------------------------------------

/// Join a job started by a PMIx launcher: connect to its server (the
/// environment says where, `pmix` says who), then continue as
/// [`join_with_pmix`]. Every PMIx call waits at most the bootstrap timeout.
pub fn join_pmix(
    pmix: &PmixEnv,
    options: JobOptions,
    secret: Option<&str>,
) -> Result<Job, RuntimeError> {
    let client = PmixClient::init(options.timeout).map_err(|e| match e {
        // Say who started us: "cannot load libpmix" alone leaves a user of
        // `mpirun` wondering what PMIx has to do with anything.
        PmixError::Load { .. } => RuntimeError::PmixJoin {
            namespace: pmix.namespace.clone(),
            why: format!(
                "started by {} (a PMIx launcher) as rank {}, but {e}",
                pmix.launcher, pmix.rank
            ),
        },
        e => e.into(),
    })?;
    join_with_pmix(client, options, secret)
}

/// Join a job through a PMIx connection: rank and size come from the
/// server, the job key from [`pmi_job_key`] of the namespace (unique per
/// job) and the secret, and the ranks exchange transport addresses with
/// put, commit, a collecting fence, and get. [`Job::barrier`] is then a
/// PMIx fence, and the connection is finalized when the job is dropped.
///
/// A failure after the connection is open is fatal for the whole job: the
/// error is printed on stderr and the launcher is asked to abort the job
/// (`PMIx_Abort`), so that no rank waits for this one until a timeout.
pub fn join_with_pmix(
    pmix: PmixClient,
    options: JobOptions,
    secret: Option<&str>,
) -> Result<Job, RuntimeError> {
    join_through(pmix, options, secret)
}

/// [`join_with_pmi`] and [`join_with_pmix`]: rank, size and the job's name
/// from the launcher, the contacts exchanged through its key-value space,
/// and the launcher asked to abort the job if this rank cannot join.
fn join_through<K: LauncherKvs>(
    mut kvs: K,
    options: JobOptions,
    secret: Option<&str>,
) -> Result<Job, RuntimeError> {
    let (rank, size) = (kvs.rank(), kvs.size());
    let key = pmi_job_key(kvs.job_name(), secret);
    let made = bring_up(rank, key, &options, |local| exchange(&mut kvs, key, local));
    let BroughtUp {
        ni,
        transport,
        oversubscribed,
    } = or_abort(rank, size, made, |why| kvs.abort_job(why))?;
    Ok(Job {
        rank,
        size,
        options,
        ni,
        transport,
        oversubscribed,
        coordinator: kvs.into_coordinator(),
    })
}
