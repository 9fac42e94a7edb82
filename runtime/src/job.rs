//! Joining a job: bind the transport, publish its address, fence, learn
//! every peer's address, and bring up the network interface.
//!
//! Two ways to meet the other ranks, one way to bring up the transport
//! ([`bring_up`], which hands the bound address to an `exchange` closure
//! and gets every peer's address back):
//!
//! * `ptlrun`'s rendezvous server ([`join_with`], environment `PTL_*`);
//! * a PMI launcher's key-value space ([`join_pmi`], environment `PMI_*`):
//!   MPICH's `mpiexec.hydra`, Slurm's `srun --mpi=pmi2`;
//! * a PMIx launcher's server ([`join_pmix`], environment `PMIX_*`): Open
//!   MPI's `mpirun`, Slurm's `srun --mpi=pmix`, PRRTE, Flux.
//!
//! A process started as one of several tasks by a launcher that offers
//! none of these is refused ([`crate::launcher`]), never run alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nal_shm::ShmNal;
use nal_tcp::TcpNal;
use nal_udp::UdpNal;
use portals::{NetworkInterface, ProcessId};

use crate::env::{self, JobEnv, JobOptions};
use crate::error::RuntimeError;
use crate::kvs::KvsClient;
use crate::launcher::{self, ForeignLaunch};
use crate::pmi::{PmiClient, PmiEnv, PmiError};
use crate::pmix::{PmixClient, PmixEnv, PmixError};
use crate::transport::{bring_up, BroughtUp, Transport};

mod abort;
mod launched;

/// How long a rank that cannot join waits between printing why and asking
/// the launcher to abort the job.
const ABORT_OUTPUT_GRACE: Duration = Duration::from_millis(300);

pub use launched::{join_pmi, join_pmix, join_with_pmi, join_with_pmix, pmi_job_key};

/// The Portals process id of `rank` in a job: node id = rank, pid 0.
pub fn process_id(rank: u32) -> ProcessId {
    ProcessId::new(rank, 0)
}

/// The rank of a Portals process id of this job, if it is one.
pub fn rank_of(id: ProcessId, size: u32) -> Option<u32> {
    (id.pid == 0 && id.nid < size).then_some(id.nid)
}

/// Who the ranks of a job synchronise through after start-up.
enum Coordinator {
    /// A job of one: nobody to wait for.
    Alone,
    /// `ptlrun`'s rendezvous server: this rank's connection, and the
    /// server's address and the job key for requests made beside it (an
    /// abort while a fence holds the connection).
    Rendezvous {
        client: Mutex<KvsClient>,
        server: String,
        key: u64,
    },
    /// The launcher's PMI server; `None` once finalized.
    Pmi(Mutex<Option<PmiClient>>),
    /// The launcher's PMIx server; `None` once finalized.
    Pmix(Mutex<Option<PmixClient>>),
}

/// A process's membership in a running job.
pub struct Job {
    rank: u32,
    size: u32,
    options: JobOptions,
    ni: NetworkInterface,
    transport: Transport,
    oversubscribed: bool,
    coordinator: Coordinator,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("nal", &self.options.nal)
            .finish()
    }
}

/// How this process was started, as its environment says.
#[derive(Debug, PartialEq)]
enum Start {
    /// By `ptlrun`.
    Ptlrun(JobEnv),
    /// By a PMI launcher; the secret from `PTL_JOB_SECRET`.
    Pmi(PmiEnv, JobOptions, Option<String>),
    /// By a PMIx launcher; the secret from `PTL_JOB_SECRET`.
    Pmix(PmixEnv, JobOptions, Option<String>),
    /// As one of several tasks, by a launcher we cannot join through.
    Refused(ForeignLaunch),
    /// By none: a job of one.
    Alone(JobOptions),
}

impl Start {
    fn from_lookup(get: env::Lookup<'_>) -> Result<Start, RuntimeError> {
        if get(env::BOOTSTRAP).is_none() {
            let text = |name: &str| get(name).map(|v| v.to_string_lossy().into_owned());
            let secret = || text(env::JOB_SECRET).filter(|s| !s.is_empty());
            if let Some(pmi) = PmiEnv::from_lookup(text)? {
                return Ok(Start::Pmi(pmi, JobOptions::from_lookup(get)?, secret()));
            }
            if let Some(pmix) = PmixEnv::from_lookup(text)? {
                return Ok(Start::Pmix(pmix, JobOptions::from_lookup(get)?, secret()));
            }
        }
        Ok(match JobEnv::from_lookup(get)? {
            Some(env) => Start::Ptlrun(env),
            None => {
                let text = |name: &str| get(name).map(|v| v.to_string_lossy().into_owned());
                match launcher::foreign_launch(&text) {
                    Some(f) => Start::Refused(f),
                    None => Start::Alone(JobOptions::from_lookup(get)?),
                }
            }
        })
    }
}

/// Join the job this process belongs to, as its environment describes it:
///
/// 1. started by `ptlrun` (`PTL_BOOTSTRAP` set): through `ptlrun`'s
///    rendezvous (see [`crate::env`]);
/// 2. otherwise, started by a PMI launcher (`PMI_FD` or `PMI_PORT` set):
///    through PMI, see [`join_pmi`];
/// 3. otherwise, started by a PMIx launcher (`PMIX_NAMESPACE` set): through
///    PMIx, see [`join_pmix`];
/// 4. otherwise, if a launcher started this process as one of several
///    tasks (see [`crate::launcher`]): [`RuntimeError::ForeignLaunch`],
///    which names the launcher and the fix;
/// 5. otherwise a job of one.
pub fn join() -> Result<Job, RuntimeError> {
    match Start::from_lookup(&|name| std::env::var_os(name))? {
        Start::Ptlrun(env) => join_with(env),
        Start::Pmi(pmi, options, secret) => join_pmi(&pmi, options, secret.as_deref()),
        Start::Pmix(pmix, options, secret) => join_pmix(&pmix, options, secret.as_deref()),
        Start::Refused(f) => Err(RuntimeError::ForeignLaunch {
            launcher: f.launcher,
            tasks: f.tasks,
            fix: f.fix,
        }),
        Start::Alone(options) => singleton(options),
    }
}

/// A job of one process, with no rendezvous.
pub fn singleton(options: JobOptions) -> Result<Job, RuntimeError> {
    let key = crate::launch::fresh_job_key();
    let BroughtUp {
        ni,
        transport,
        oversubscribed,
    } = bring_up(0, key, &options, |_| Ok(Vec::new()))?;
    Ok(Job {
        rank: 0,
        size: 1,
        options,
        ni,
        transport,
        oversubscribed,
        coordinator: Coordinator::Alone,
    })
}

/// Join the job described by `env`.
pub fn join_with(env: JobEnv) -> Result<Job, RuntimeError> {
    let mut kvs = KvsClient::join(
        &env.bootstrap,
        env.job_key,
        env.rank,
        env.size,
        env.options.timeout,
    )?;
    let size = env.size;
    let BroughtUp {
        ni,
        transport,
        oversubscribed,
    } = bring_up(env.rank, env.job_key, &env.options, |local| {
        kvs.put(&crate::transport::contact_key(env.rank), local)?;
        let all = kvs.fence()?;
        let mut peers = Vec::with_capacity(size as usize);
        for r in 0..size {
            let a = all.get(&crate::transport::contact_key(r)).ok_or_else(|| {
                RuntimeError::Rendezvous {
                    server: env.bootstrap.clone(),
                    why: format!("rank {r} published no address"),
                }
            })?;
            peers.push((r, a.clone()));
        }
        Ok(peers)
    })?;
    Ok(Job {
        rank: env.rank,
        size,
        options: env.options,
        ni,
        transport,
        oversubscribed,
        coordinator: Coordinator::Rendezvous {
            client: Mutex::new(kvs),
            server: env.bootstrap,
            key: env.job_key,
        },
    })
}

impl Job {
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether some host of the job runs more of its ranks than it has
    /// cores online, so that ranks take turns on cores. Worked out from
    /// what every rank published at start-up: the same answer at every
    /// rank, so layers may pick algorithms by it that all ranks must
    /// agree on.
    pub fn oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// The transport options in force.
    pub fn options(&self) -> &JobOptions {
        &self.options
    }

    /// The network interface.
    pub fn ni(&self) -> &NetworkInterface {
        &self.ni
    }

    /// The Portals process id of `rank`.
    pub fn id(&self, rank: u32) -> ProcessId {
        process_id(rank)
    }

    /// The rank of a process id, if it belongs to this job.
    pub fn rank_of(&self, id: ProcessId) -> Option<u32> {
        rank_of(id, self.size)
    }

    /// The transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The TCP transport, for its counters, if the job runs over TCP (or
    /// reaches other hosts through it).
    pub fn tcp(&self) -> Option<&Arc<TcpNal>> {
        match &self.transport {
            Transport::Tcp(t) | Transport::Mixed { tcp: t, .. } => Some(t),
            _ => None,
        }
    }

    /// The UDP transport, for its counters, if the job runs over UDP.
    pub fn udp(&self) -> Option<&Arc<UdpNal>> {
        match &self.transport {
            Transport::Udp(u) => Some(u),
            _ => None,
        }
    }

    /// The shared-memory transport, for its counters, if the job runs over
    /// shared memory (or reaches the ranks of this host through it).
    pub fn shm(&self) -> Option<&Arc<ShmNal>> {
        match &self.transport {
            Transport::Shm(s) | Transport::Mixed { shm: s, .. } => Some(s),
            _ => None,
        }
    }

    /// Wait until every rank has called `barrier` (through the rendezvous
    /// server, or the PMI launcher: slow, meant for start-up and tests, not
    /// for applications' inner loops). Fails after [`finalize`](Self::finalize)
    /// in a PMI job.
    pub fn barrier(&self) -> Result<(), RuntimeError> {
        let nal = self.ni.nal();
        if nal.progresses_alone() {
            return self.coordinator_barrier();
        }
        // Polling mode: nothing moves unless someone calls the transport,
        // and over UDP the other ranks may still need this process to
        // retransmit or acknowledge. Keep driving it (sleeping in the
        // kernel between datagrams) while the barrier runs beside.
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let fence = s.spawn(|| {
                let r = self.coordinator_barrier();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                r
            });
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if nal
                    .progress(Some(std::time::Duration::from_millis(1)))
                    .is_err()
                {
                    break;
                }
            }
            fence
                .join()
                .unwrap_or(Err(RuntimeError::Portals(portals::PtlError::Shutdown)))
        })
    }

    fn coordinator_barrier(&self) -> Result<(), RuntimeError> {
        match &self.coordinator {
            Coordinator::Alone => Ok(()),
            Coordinator::Rendezvous { client, .. } => client
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .fence()
                .map(|_| ()),
            Coordinator::Pmi(p) => match p.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                Some(c) => Ok(c.barrier()?),
                None => Err(PmiError::Usage("barrier after finalize").into()),
            },
            Coordinator::Pmix(p) => match p.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                Some(c) => Ok(c.barrier()?),
                None => Err(PmixError::Finalized("barrier").into()),
            },
        }
    }

    /// Tell a PMI launcher this process is done with it (PMI finalize);
    /// [`barrier`](Self::barrier) fails afterwards. Dropping the job does
    /// this too; calling it again does nothing. Nothing to do in a job
    /// started by `ptlrun`.
    pub fn finalize(&self) -> Result<(), RuntimeError> {
        match &self.coordinator {
            Coordinator::Pmi(p) => {
                if let Some(c) = p.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    c.finalize()?;
                }
            }
            Coordinator::Pmix(p) => {
                if let Some(c) = p.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    c.finalize()?;
                }
            }
            Coordinator::Alone | Coordinator::Rendezvous { .. } => {}
        }
        Ok(())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // A PMI launcher takes a connection that closes without finalize for
        // a crashed process.
        if let Err(e) = self.finalize() {
            tracing::warn!(error = %e, "PMI finalize failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::launched::key_check;
    use super::*;
    use crate::pmi::fake::{rep1, rep2, req1, req2, Fake, Step};
    use crate::pmi::testutil::{fd_env, within};
    use crate::pmi::{PmiEndpoint, PmiOptions, PmiTransport, VersionPreference};
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::time::Duration;

    const KVS: &str = "kvs_4242_0_17_node";

    /// A PMI-2 client, rank `rank` of `size`, that has done its start-up
    /// with the fake, which then plays `then`.
    fn pmi(rank: u32, size: u32, timeout: Duration, then: Vec<Step>) -> (PmiClient, Fake) {
        let mut script = vec![
            req1("cmd=init pmi_version=2 pmi_subversion=0"),
            rep1("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"),
            req2(&format!("cmd=fullinit;pmirank={rank};threaded=FALSE;")),
            rep2(&format!(
                "cmd=fullinit-response;rank={rank};size={size};appnum=0;rc=0;"
            )),
            req2("cmd=job-getid;"),
            rep2(&format!("cmd=job-getid-response;jobid={KVS};rc=0;")),
        ];
        script.extend(then);
        let (sock, fake) = Fake::pair(script);
        let env = fd_env(rank, size);
        let opts = PmiOptions {
            version: VersionPreference::V2,
            timeout,
        };
        let c = PmiClient::connect(PmiTransport::Unix(sock), &env, &opts).expect("start-up");
        (c, fake)
    }

    /// The put of this rank's address, carrying the check of `key`.
    fn put_addr(rank: u32, key: u64) -> Vec<Step> {
        vec![
            Step::CmdLike(
                format!(
                    "cmd=kvs-put;key=ptl-addr-{rank};value={}|127.0.0.1:",
                    crate::host::host_id()
                ),
                format!(
                    "|-|{},{:016x};",
                    crate::transport::online_cores().map_or_else(|| "-".into(), |c| c.to_string()),
                    key_check(key)
                ),
            ),
            rep2("cmd=kvs-put-response;rc=0;"),
        ]
    }

    /// A PMI-2 fence as the client does it (see `pmi::v2::barrier`).
    fn fence() -> Vec<Step> {
        vec![
            req2("cmd=kvs-fence;"),
            rep2("cmd=kvs-fence-response;rc=0;"),
            req2(&format!(
                "cmd=kvs-get;jobid={KVS};srcid=-1;key=ptl.pmi.barrier;"
            )),
            rep2("cmd=kvs-get-response;found=FALSE;rc=0;"),
        ]
    }

    fn get_addr(rank: u32, reply: &str) -> Vec<Step> {
        vec![
            req2(&format!(
                "cmd=kvs-get;jobid={KVS};srcid=-1;key=ptl-addr-{rank};"
            )),
            rep2(reply),
        ]
    }

    /// The abort a rank that cannot join sends; the fake then hangs up, as
    /// a launcher ending the job does.
    fn abort(rank: u32, size: u32) -> Step {
        Step::CmdLike(
            format!("cmd=abort;isworld=TRUE;msg=rank_{rank}_of_{size}_cannot_join_the_job"),
            String::new(),
        )
    }

    /// TCP on loopback (what the PMI scripts below expect ranks to
    /// publish).
    fn loopback() -> JobOptions {
        JobOptions {
            nal: crate::NalKind::Tcp,
            timeout: Duration::from_secs(5),
            ..JobOptions::default()
        }
    }

    #[test]
    fn the_handback_option_reaches_the_tcp_transport() {
        within(20, || {
            let job = singleton(JobOptions {
                handback: Some(Duration::from_micros(1234)),
                ..loopback()
            })
            .expect("job");
            let tcp = job.tcp().expect("tcp was asked for");
            assert_eq!(tcp.config().handback, Duration::from_micros(1234));
            drop(job);
            let job = singleton(loopback()).expect("job");
            let tcp = job.tcp().expect("tcp");
            assert_eq!(
                tcp.config().handback,
                nal_tcp::TcpConfig::default().handback
            );
        });
    }

    /// `PTL_TCP_TAKEOVER`: forced off, it reaches the transport; left to
    /// `auto`, a job of one unbound rank on a host of two cores or more
    /// gets it.
    #[test]
    fn the_takeover_option_reaches_the_tcp_transport() {
        within(20, || {
            let job = singleton(JobOptions {
                tcp_early_takeover: Some(false),
                ..loopback()
            })
            .expect("job");
            assert!(!job.tcp().expect("tcp").config().early_takeover);
            drop(job);
            let job = singleton(loopback()).expect("job");
            assert!(job.tcp().expect("tcp").config().early_takeover);
        });
    }

    /// `PTL_TEST_DRIVES`: forced on, it reaches the interface; left to
    /// `auto`, a job of one unbound rank on a host of two cores or more
    /// (a spare core for its progress thread, as above) leaves tests to
    /// the progress thread.
    #[test]
    fn the_test_drives_option_reaches_the_interface() {
        within(20, || {
            let job = singleton(JobOptions {
                test_drives: Some(true),
                ..loopback()
            })
            .expect("job");
            assert!(job.ni().test_drives());
            drop(job);
            let job = singleton(loopback()).expect("job");
            assert!(!job.ni().test_drives());
        });
    }

    /// The default transport (`auto`): a job whose ranks all run on this
    /// host, as a job of one does, runs on shared memory, with the options
    /// that apply to it.
    #[test]
    fn a_job_on_one_host_runs_on_shared_memory_by_default() {
        within(20, || {
            let job = singleton(JobOptions {
                handback: Some(Duration::from_micros(777)),
                shm_cma: false,
                shm_ring: Some(64 << 10),
                timeout: Duration::from_secs(5),
                ..JobOptions::default()
            })
            .expect("job");
            let shm = job.shm().expect("auto picks shared memory on one host");
            assert!(job.tcp().is_none() && job.udp().is_none());
            assert_eq!(job.ni().nal_name(), "shm");
            assert_eq!(shm.config().handback, Duration::from_micros(777));
            assert!(!shm.config().cma);
            assert_eq!(shm.config().ring_bytes, 64 << 10);
        });
    }

    /// `PTL_SHM_TAKEOVER`: `auto` turns the shared-memory take-over on
    /// whatever the host, also for a rank bound to one CPU, where TCP's
    /// stays off (its doze costs nothing for small messages); forced off,
    /// it reaches the transport off.
    #[test]
    fn the_shared_memory_takeover_is_on_unless_turned_off() {
        within(20, || {
            // Bound to one CPU, as `ptlrun --bind` does (this thread only:
            // the rule reads the calling thread's affinity).
            // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it
            // and sched_setaffinity only reads it.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                assert_eq!(
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                    0
                );
            }
            let shm_job = |shm_early_takeover| {
                singleton(JobOptions {
                    shm_early_takeover,
                    timeout: Duration::from_secs(5),
                    ..JobOptions::default()
                })
                .expect("job")
            };
            let job = shm_job(None);
            assert!(job.shm().expect("shm").config().early_takeover);
            drop(job);
            let job = shm_job(Some(false));
            assert!(!job.shm().expect("shm").config().early_takeover);
        });
    }

    #[test]
    fn the_job_key_mixes_kvs_name_and_secret_and_is_stable() {
        within(5, || {
            let k = pmi_job_key("kvs_1_0", None);
            // Pinned (computed independently from the documented algorithm):
            // ranks built at different times must still agree.
            assert_eq!(k, 0xd101_9fd7_f182_d24a, "{k:#x}");
            assert_eq!(pmi_job_key("kvs_1_0", None), k);
            assert_ne!(pmi_job_key("kvs_2_0", None), k);
            let s = pmi_job_key("kvs_1_0", Some("s3cret"));
            assert_ne!(s, k);
            assert_ne!(pmi_job_key("kvs_1_0", Some("s3cre")), s);
            // Parts are length-prefixed: moving bytes between them matters.
            assert_ne!(
                pmi_job_key("kvs_1_0s", Some("3cret")),
                pmi_job_key("kvs_1_0", Some("s3cret"))
            );
            assert_ne!(key_check(k), k);
        });
    }

    #[test]
    fn a_pmi_job_of_one_joins_barriers_and_finalizes() {
        within(20, || {
            let key = pmi_job_key(KVS, Some("pw"));
            let mut script = put_addr(0, key);
            script.extend(fence());
            script.extend(fence()); // Job::barrier
            script.extend([
                req2("cmd=finalize;"),
                rep2("cmd=finalize-response;rc=0;"),
                Step::Eof,
            ]);
            let (c, fake) = pmi(0, 1, Duration::from_secs(5), script);
            let job = join_with_pmi(c, loopback(), Some("pw")).expect("join");
            assert_eq!((job.rank(), job.size()), (0, 1));
            assert_eq!(job.ni().id(), process_id(0));
            job.barrier().expect("barrier");
            job.finalize().expect("finalize");
            job.finalize().expect("finalize twice does nothing");
            assert!(matches!(
                job.barrier(),
                Err(RuntimeError::Pmi(PmiError::Usage(_)))
            ));
            drop(job);
            fake.finish();
        });
    }

    #[test]
    fn dropping_a_pmi_job_finalizes_it() {
        within(20, || {
            let key = pmi_job_key(KVS, None);
            let mut script = put_addr(0, key);
            script.extend(fence());
            script.extend([
                req2("cmd=finalize;"),
                rep2("cmd=finalize-response;rc=0;"),
                Step::Eof,
            ]);
            let (c, fake) = pmi(0, 1, Duration::from_secs(5), script);
            drop(join_with_pmi(c, loopback(), None).expect("join"));
            fake.finish();
        });
    }

    #[test]
    fn a_bad_peer_entry_fails_the_start_up_clearly_and_aborts_the_job() {
        let key = pmi_job_key(KVS, None);
        let check = key_check(key);
        let cases: Vec<(String, &str)> = vec![
            // Another PTL_JOB_SECRET gives another key, hence another check.
            (
                "cmd=kvs-get-response;found=TRUE;value=127.0.0.1:9,0123456789abcdef;rc=0;".into(),
                "job key mismatch: rank 1 derived a different job key (every rank must be given the same PTL_JOB_SECRET)",
            ),
            (
                "cmd=kvs-get-response;found=FALSE;rc=0;".into(),
                "rank 1 published no address",
            ),
            (
                format!("cmd=kvs-get-response;found=TRUE;value=nowhere:x,{check:016x};rc=0;"),
                "rank 1 published an unusable address \"nowhere:x\"",
            ),
            (
                "cmd=kvs-get-response;found=TRUE;value=127.0.0.1:9;rc=0;".into(),
                "rank 1 published an unusable address \"127.0.0.1:9\"",
            ),
        ];
        for (reply, want) in cases {
            let want = want.to_string();
            within(20, move || {
                let mut script = put_addr(0, key);
                script.extend(fence());
                script.extend(get_addr(1, &reply));
                script.push(abort(0, 2));
                let (c, fake) = pmi(0, 2, Duration::from_secs(5), script);
                let err = join_with_pmi(c, loopback(), None).expect_err("join must fail");
                assert!(err.to_string().contains(&want), "{reply}: {err}");
                fake.finish();
            });
        }
    }

    #[test]
    fn a_start_up_fence_that_never_completes_times_out_clearly() {
        within(20, || {
            let key = pmi_job_key(KVS, None);
            let mut script = put_addr(1, key);
            // The fence is never answered; the next request is the abort.
            script.push(req2("cmd=kvs-fence;"));
            script.push(abort(1, 3));
            let (c, fake) = pmi(1, 3, Duration::from_millis(500), script);
            let t0 = std::time::Instant::now();
            let err = join_with_pmi(c, loopback(), None).expect_err("join must fail");
            assert!(t0.elapsed() >= Duration::from_millis(500));
            match &err {
                RuntimeError::PmiJoin { kvs, why } => {
                    assert_eq!(kvs, KVS);
                    assert!(
                        why.contains("not every rank reached the start-up fence within 500ms"),
                        "{why}"
                    );
                    assert!(why.contains("PTL_BOOTSTRAP_TIMEOUT"), "{why}");
                }
                other => panic!("{other:?}"),
            }
            fake.finish();
        });
    }

    fn start(vars: &[(&str, &str)]) -> Result<Start, RuntimeError> {
        let map: HashMap<&str, OsString> = vars.iter().map(|(k, v)| (*k, (*v).into())).collect();
        Start::from_lookup(&|name| map.get(name).cloned())
    }

    #[test]
    fn the_environment_decides_how_a_process_joins() {
        within(5, || {
            let ptlrun = [
                ("PTL_RANK", "1"),
                ("PTL_SIZE", "2"),
                ("PTL_JOB_KEY", "ab"),
                ("PTL_BOOTSTRAP", "127.0.0.1:9"),
            ];
            let hydra = [("PMI_FD", "7"), ("PMI_RANK", "1"), ("PMI_SIZE", "2")];
            assert!(
                matches!(start(&ptlrun), Ok(Start::Ptlrun(e)) if e.rank == 1 && e.job_key == 0xab)
            );
            // ptlrun's variables win over PMI ones a launcher leaked.
            let both: Vec<_> = ptlrun.iter().chain(&hydra).copied().collect();
            assert!(matches!(start(&both), Ok(Start::Ptlrun(_))));
            match start(&hydra) {
                Ok(Start::Pmi(env, options, None)) => {
                    assert_eq!(env.endpoint, PmiEndpoint::Fd(7));
                    assert_eq!(options, JobOptions::default());
                }
                other => panic!("{other:?}"),
            }
            let with_secret: Vec<_> = hydra
                .iter()
                .copied()
                .chain([("PTL_JOB_SECRET", "pw"), ("PTL_BOOTSTRAP_TIMEOUT", "7")])
                .collect();
            match start(&with_secret) {
                Ok(Start::Pmi(_, options, Some(secret))) => {
                    assert_eq!(secret, "pw");
                    assert_eq!(options.timeout, Duration::from_secs(7));
                }
                other => panic!("{other:?}"),
            }
            // An empty secret is no secret.
            let empty: Vec<_> = hydra
                .iter()
                .copied()
                .chain([("PTL_JOB_SECRET", "")])
                .collect();
            assert!(matches!(start(&empty), Ok(Start::Pmi(_, _, None))));
            assert!(matches!(start(&[]), Ok(Start::Alone(_))));
        });
    }

    /// Open MPI's `mpirun` as it sets up a rank (PMIx and its own
    /// variables), Slurm's `srun` with and without a PMI plug-in.
    #[test]
    fn pmix_launchers_are_joined_and_launchers_without_pmi_refused() {
        within(5, || {
            let mpirun = [
                ("PMIX_NAMESPACE", "1657798657"),
                ("PMIX_RANK", "1"),
                ("PMIX_SERVER_URI4", "1657798656.0;tcp4://127.0.0.1:52207"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("PTL_JOB_SECRET", "pw"),
            ];
            match start(&mpirun) {
                Ok(Start::Pmix(env, _, Some(secret))) => {
                    assert_eq!((env.namespace.as_str(), env.rank), ("1657798657", 1));
                    assert_eq!(env.launcher, "Open MPI's mpirun");
                    assert_eq!(secret, "pw");
                }
                other => panic!("{other:?}"),
            }
            // ptlrun inside an mpirun (or an allocation) still wins.
            let nested: Vec<_> = mpirun
                .iter()
                .copied()
                .chain([
                    ("PTL_RANK", "0"),
                    ("PTL_SIZE", "3"),
                    ("PTL_JOB_KEY", "1"),
                    ("PTL_BOOTSTRAP", "127.0.0.1:9"),
                ])
                .collect();
            assert!(matches!(start(&nested), Ok(Start::Ptlrun(_))));
            // srun --mpi=none: Slurm's step variables and nothing to join.
            let srun = [
                ("SLURM_STEP_NUM_TASKS", "4"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "2"),
            ];
            match start(&srun) {
                Ok(Start::Refused(f)) => {
                    assert_eq!((f.launcher, f.tasks), ("srun", 4));
                    let msg = RuntimeError::ForeignLaunch {
                        launcher: f.launcher,
                        tasks: f.tasks,
                        fix: f.fix,
                    }
                    .to_string();
                    assert!(
                        msg.starts_with("started by srun with 4 tasks but no PMI: ")
                            && msg.contains("--mpi=pmix")
                            && msg.contains("--mpi=pmi2"),
                        "{msg}"
                    );
                }
                other => panic!("{other:?}"),
            }
            // srun --mpi=pmix: the same step, joined through PMIx.
            let srun_pmix: Vec<_> = srun
                .iter()
                .copied()
                .chain([
                    ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
                    ("PMIX_RANK", "2"),
                    ("PMIX_SERVER_URI2", "x"),
                ])
                .collect();
            assert!(matches!(start(&srun_pmix), Ok(Start::Pmix(e, _, None)) if e.rank == 2));
            // A PMIx namespace whose server is not named is an error, not
            // a job of one.
            assert!(matches!(
                start(&[("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")]),
                Err(RuntimeError::Pmix(PmixError::Env { .. }))
            ));
            let forced: Vec<_> = srun
                .iter()
                .copied()
                .chain([("PTL_SINGLETON", "1")])
                .collect();
            assert!(matches!(start(&forced), Ok(Start::Alone(_))));
        });
    }

    #[test]
    fn a_missing_rendezvous_or_malformed_variable_is_named() {
        within(5, || {
            let cases: &[(&[(&str, &str)], &str)] = &[
                // ptlrun's rank without its rendezvous.
                (
                    &[("PTL_RANK", "0"), ("PTL_SIZE", "2"), ("PTL_JOB_KEY", "1")],
                    "PTL_BOOTSTRAP",
                ),
                (&[("PTL_RANK", "0"), ("PTL_BOOTSTRAP", "h:1")], "PTL_SIZE"),
                (
                    &[
                        ("PTL_RANK", "0"),
                        ("PTL_SIZE", "2"),
                        ("PTL_JOB_KEY", "xyz"),
                        ("PTL_BOOTSTRAP", "h:1"),
                    ],
                    "PTL_JOB_KEY",
                ),
                (
                    &[
                        ("PTL_RANK", "2"),
                        ("PTL_SIZE", "2"),
                        ("PTL_JOB_KEY", "1"),
                        ("PTL_BOOTSTRAP", "h:1"),
                    ],
                    "PTL_RANK",
                ),
                (&[("PTL_NAL", "carrier-pigeon")], "PTL_NAL"),
                (&[("PMI_FD", "3"), ("PTL_BIND", "eth0")], "PTL_BIND"),
            ];
            for (vars, which) in cases {
                match start(vars) {
                    Err(RuntimeError::Env { var, why }) => {
                        assert_eq!(var, *which, "{vars:?}: {why}")
                    }
                    other => panic!("{vars:?}: expected an Env error, got {other:?}"),
                }
            }
            match start(&[("PMI_FD", "seven")]) {
                Err(RuntimeError::Pmi(PmiError::Env { var: "PMI_FD", .. })) => {}
                other => panic!("{other:?}"),
            }
        });
    }
}
