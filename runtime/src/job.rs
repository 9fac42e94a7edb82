//! Joining a job: bind the transport, publish its address, fence, learn
//! every peer's address, and bring up the network interface.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use nal_tcp::{TcpConfig, TcpEndpoint, TcpNal};
use portals::{Nal, NetworkInterface, NiConfig, ProcessId};

use crate::env::{JobEnv, JobOptions, NalKind};
use crate::error::RuntimeError;
use crate::kvs::KvsClient;

/// The Portals process id of `rank` in a job: node id = rank, pid 0.
pub fn process_id(rank: u32) -> ProcessId {
    ProcessId::new(rank, 0)
}

/// The rank of a Portals process id of this job, if it is one.
pub fn rank_of(id: ProcessId, size: u32) -> Option<u32> {
    (id.pid == 0 && id.nid < size).then_some(id.nid)
}

/// A process's membership in a running job.
pub struct Job {
    rank: u32,
    size: u32,
    options: JobOptions,
    ni: NetworkInterface,
    tcp: Option<Arc<TcpNal>>,
    kvs: Option<Mutex<KvsClient>>,
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

/// Join the job this process belongs to, as described by the environment
/// `ptlrun` set (see [`crate::env`]). A process started without `ptlrun` is
/// a job of one.
pub fn join() -> Result<Job, RuntimeError> {
    match JobEnv::from_env()? {
        Some(env) => join_with(env),
        None => singleton(JobOptions::from_env()?),
    }
}

/// A job of one process, with no rendezvous.
pub fn singleton(options: JobOptions) -> Result<Job, RuntimeError> {
    let key = crate::launch::fresh_job_key();
    let (ni, tcp) = bring_up(0, key, &options, |_| Ok(Vec::new()))?;
    Ok(Job {
        rank: 0,
        size: 1,
        options,
        ni,
        tcp,
        kvs: None,
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
    let (ni, tcp) = bring_up(env.rank, env.job_key, &env.options, |local| {
        kvs.put(&format!("addr.{}", env.rank), &local.to_string())?;
        let all = kvs.fence()?;
        let mut peers = Vec::with_capacity(size as usize);
        for r in 0..size {
            let a = all
                .get(&format!("addr.{r}"))
                .ok_or_else(|| RuntimeError::Rendezvous {
                    server: env.bootstrap.clone(),
                    why: format!("rank {r} published no address"),
                })?;
            let addr: SocketAddr = a.parse().map_err(|_| RuntimeError::BadAddress {
                rank: r,
                addr: a.clone(),
            })?;
            peers.push((process_id(r), addr));
        }
        Ok(peers)
    })?;
    Ok(Job {
        rank: env.rank,
        size,
        options: env.options,
        ni,
        tcp,
        kvs: Some(Mutex::new(kvs)),
    })
}

type Peers = Vec<(ProcessId, SocketAddr)>;

fn bring_up(
    rank: u32,
    job_key: u64,
    o: &JobOptions,
    exchange: impl FnOnce(SocketAddr) -> Result<Peers, RuntimeError>,
) -> Result<(NetworkInterface, Option<Arc<TcpNal>>), RuntimeError> {
    match o.nal {
        NalKind::Tcp => {
            let cfg = TcpConfig {
                bind: SocketAddr::new(o.bind, 0),
                progress: o.progress,
                backend: o.backend,
                connect: o.connect,
                ..TcpConfig::default()
            };
            let ep = TcpEndpoint::bind(cfg)?;
            let peers = exchange(ep.local_addr())?;
            let mut ni_cfg = NiConfig::new(process_id(rank), job_key);
            ni_cfg.wait_spin = o.wait_spin;
            let mut tcp = None;
            let ni = NetworkInterface::init(ni_cfg, |core| {
                let n = ep.start(core, peers)?;
                tcp = Some(n.clone());
                Ok(n as Arc<dyn Nal>)
            })?;
            Ok((ni, tcp))
        }
    }
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

    /// The TCP transport, for its counters.
    pub fn tcp(&self) -> Option<&Arc<TcpNal>> {
        self.tcp.as_ref()
    }

    /// Wait until every rank has called `barrier` (through the rendezvous
    /// server: slow, meant for start-up and tests, not for applications'
    /// inner loops).
    pub fn barrier(&self) -> Result<(), RuntimeError> {
        match &self.kvs {
            Some(k) => k
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .fence()
                .map(|_| ()),
            None => Ok(()),
        }
    }
}
