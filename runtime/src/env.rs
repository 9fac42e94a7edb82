//! The environment contract between `ptlrun` and the processes it starts.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `PTL_RANK` | this process's rank, 0-based | (unset: a singleton job of one process) |
//! | `PTL_SIZE` | number of ranks | required with `PTL_RANK` |
//! | `PTL_JOB_KEY` | 64-bit job key, hexadecimal | required with `PTL_RANK` |
//! | `PTL_BOOTSTRAP` | host:port of the rendezvous server | required with `PTL_RANK` |
//! | `PTL_NAL` | `auto` (shared memory between ranks of one host, TCP otherwise), `shm`, `tcp` or `udp` | `auto` |
//! | `PTL_PROGRESS` | `thread` or `poll` | `thread` |
//! | `PTL_BACKEND` | `epoll` or `io_uring` (progress thread's poller) | `epoll` |
//! | `PTL_CONNECT` | `lazy` or `eager` | `lazy` |
//! | `PTL_BIND` | IP address the transport listens on | `127.0.0.1` |
//! | `PTL_BOOTSTRAP_TIMEOUT` | seconds to wait for the rendezvous and for every rank (a rank that cannot reach the rendezvous says so after 3 s) | `60` |
//! | `PTL_FINALIZE_TIMEOUT` | MPI: seconds finalize may take before it aborts the job, naming the ranks that never reached it (see `mpi_on_portals::Universe`) | no limit |
//! | `PTL_WAIT_SPIN_US` | spin window of a waiting thread, µs | `50` |
//! | `PTL_WAIT_SPIN_BUSY_US` | how much longer than the spin window a waiting thread keeps polling while a peer moves this process's data (shared memory: a receiver reading our payload with a single copy), µs; `0` sleeps after the spin window as for any wait (see `portals::NiConfig::wait_spin_busy`) | `2000` |
//! | `PTL_WAIT_YIELD` | `1`: a waiting thread yields the core between polls of its spin window; `0`: it spins; `auto`: yield when this host runs more ranks of the job than it has cores online | `auto` |
//! | `PTL_PROGRESS_SLICE_US` | progress thread only: the time slice it asks the scheduler for (Linux ≥ 6.12, EEVDF), so that when woken it preempts the computing application at once instead of after the application's slice; `0` asks for none (see `nal_sys::sched`) | `100` |
//! | `PTL_PROGRESS_NICE` | progress thread only: how many nice steps (0–40) it runs below (favoured over) its application, so that after moving a payload it stays eligible to preempt the computation for the next one (EEVDF); `0`: the application's nice value; `auto`: 10, or 0 where this host runs more ranks of the job than it has cores online (there favoured progress threads take the cores other ranks compute on). Lowering it needs `CAP_SYS_NICE` or a `RLIMIT_NICE` that allows it; the thread takes as many steps as allowed (see `nal_sys::sched`) | `auto` |
//! | `PTL_PROGRESS_CPUS` | progress thread only: the CPUs it may run on. `launcher`: those the launcher gave out to the job (its parent's affinity, when that holds every CPU of the rank), so that a rank bound to one core moves its arrivals on an idle core, most often the one of the rank waiting for them, instead of on the core it computes on; `rank`: the rank's own (inherited); or a CPU list such as `0-3,8` (see `nal_sys::affinity::ProgressCpus`) | `launcher` |
//! | `PTL_HANDBACK_US` | progress thread only: how long after the last waiting thread left the progress thread takes the sockets back, µs | `200` |
//! | `PTL_TCP_RCVLOWAT` | TCP only: `1` wakes a sleeping thread once per large message (the socket's receive low-water mark set to the rest of a payload being read), `0` at every arriving segment, for comparison (see [`nal_tcp::TcpConfig::wake_per_message`]) | `1` |
//! | `PTL_TCP_TAKEOVER` | TCP, progress thread only: `1` the progress thread takes arrivals at once while the application computes during the hand-back delay, `0` it sleeps the delay out; `auto`: `1` only where each rank's progress thread has a spare core (at least twice as many cores online as ranks of the job on this host, and the rank not bound to one CPU); elsewhere the early wake-ups preempt the computing application and measured slower (see [`nal_tcp::TcpConfig::early_takeover`]) | `auto` |
//! | `PTL_TEST_DRIVES` | progress thread only: `1` an application's test for completion or probe (`MPI_Test`, `MPI_Iprobe`) drives the transport itself, as a wait that ends at once, and the progress thread stays parked while the application calls the library more often than the hand-back delay; `0` a test only looks at what the progress thread delivered; `auto`: `1` unless each rank's progress thread has a spare core (as `PTL_TCP_TAKEOVER`'s rule; see `portals::NiConfig::test_drives`); shared memory ignores it (its dozing progress thread is woken for single-copy reads only) | `auto` |
//! | `PTL_COLL_FLAT` | MPI: `1` short all-reduces and barriers run through one member (everyone sends to rank 0, which combines and answers everyone: two steps whatever the size), `0` by recursive doubling and dissemination (⌈log₂ n⌉ steps); `auto`: `1` when some host of the job runs more ranks than it has cores online, where every step costs each rank a turn on a shared core (8 ranks on 2 cores: an 8-byte all-reduce 1.5–1.8× faster). Every rank must see the same value (a launcher passes the same environment to all) | `auto` |
//! | `PTL_SHM_TAKEOVER` | shared memory, progress thread only: `1` through the hand-back delay the progress thread dozes on its doorbell and moves work that arrives (a single-copy read, a request to answer) at once, while small messages wait for the application's next call (see [`nal_shm::ShmConfig::early_takeover`]); `0` it sleeps the delay out; `auto`: `1` (such a doze costs a bound rank's computation nothing for small messages, unlike TCP's) | `auto` |
//! | `PTL_UDP_MAX_DATAGRAM` | UDP only: largest datagram, bytes (1472 for a 1500-byte Ethernet MTU, 8972 for 9000; every rank of a job must use the same) | `65000` (fits loopback; IP fragments elsewhere) |
//! | `PTL_UDP_CONNECTED` | UDP only: `1` sends to each peer through its own connected socket (no route lookup per datagram), `0` through the receiving socket (ranks may differ) | `1` |
//! | `PTL_UDP_PEER_TIMEOUT` | UDP only: a peer silent this long while a thread waits in the library (probed meanwhile) is declared failed, ms; `0` turns the watch off (see [`nal_udp::UdpConfig::protocol`]) | `10000` |
//! | `PTL_UDP_COPY_ABOVE` | UDP only: while a peer reports losing at least this percentage of our datagrams, small ones (up to 4 KiB) are sent twice, back to back; `off` never (see [`nal_udp::proto::Config::copy_above_loss_ppm`]) | `2` |
//! | `PTL_UDP_FAULT` | UDP only: inject faults into outgoing datagrams, e.g. `loss=0.05,dup=0.01,reorder=0.02,seed=7` (see [`nal_udp::FaultConfig`]) | (unset: none) |
//! | `PTL_SNDBUF` | socket send buffer (`SO_SNDBUF`) of each connection, bytes (suffix `K`, `M`, `G`: KiB, MiB, GiB) | (unset: the kernel's autotuning) |
//! | `PTL_RCVBUF` | socket receive buffer (`SO_RCVBUF`) of each connection, same units | (unset: the kernel's autotuning) |
//! | `PTL_SHM_CMA` | shared memory only: `1` reads large payloads straight from the sender's memory (`process_vm_readv`) where the kernel allows, `0` copies them through the ring | `1` |
//! | `PTL_SHM_RING` | shared memory only: bytes of each per-pair ring (same units as `PTL_SNDBUF`) | `256K` |
//! | `PTL_SHM_CMA_CHUNK` | shared memory only: bytes one single-copy read moves per progress step (same units as `PTL_SNDBUF`; see [`nal_shm::ShmConfig::cma_chunk`]) | `4M` |
//! | `PTL_HOST_ID` | the host identity compared to decide which ranks share memory (see [`crate::host`]) | host name + boot id |
//! | `PTL_JOB_SECRET` | under a PMI or PMIx launcher: a secret mixed into the job key (see [`crate::pmi_job_key`]) | (unset: the key separates jobs but does not authenticate) |
//! | `PTL_PMIX_LIBRARY` | under a PMIx launcher: the PMIx client library to load (see [`crate::pmix`]) | `libpmix.so.2` |
//! | `PTL_SINGLETON` | `1`: a process a launcher started as one of several tasks, with no PMI to join through, runs as a job of one instead of stopping (see [`crate::launcher`]) | (unset: it stops, naming the fix) |
//!
//! A process started by a PMI launcher (MPICH's `mpiexec.hydra`, Slurm's
//! `srun --mpi=pmi2`: `PMI_FD` or `PMI_PORT` set, see
//! [`crate::pmi::PmiEnv`]) or a PMIx launcher (Open MPI's `mpirun`,
//! `srun --mpi=pmix`: `PMIX_NAMESPACE` set, see [`crate::pmix::PmixEnv`])
//! and not by `ptlrun` (no `PTL_BOOTSTRAP`) learns rank, size and its peers
//! through the launcher instead of `PTL_RANK`, `PTL_SIZE`, `PTL_JOB_KEY`
//! and `PTL_BOOTSTRAP`; the transport options above still apply (pass
//! them with `mpiexec -genv`, `mpirun -x`, or `srun --export`).

use std::net::IpAddr;
use std::time::Duration;

use nal_sys::affinity::ProgressCpus;
use nal_tcp::{Backend, ConnectMode, ProgressMode};
use nal_udp::FaultConfig;

use crate::error::RuntimeError;

/// Rank of this process.
pub const RANK: &str = "PTL_RANK";
/// Number of ranks.
pub const SIZE: &str = "PTL_SIZE";
/// Job key (hex).
pub const JOB_KEY: &str = "PTL_JOB_KEY";
/// Rendezvous server address.
pub const BOOTSTRAP: &str = "PTL_BOOTSTRAP";
/// Transport.
pub const NAL: &str = "PTL_NAL";
/// Extra polling while a peer moves our data, µs.
pub const WAIT_SPIN_BUSY_US: &str = "PTL_WAIT_SPIN_BUSY_US";
/// Waiting threads yield the core between polls (`auto`/`1`/`0`).
pub const WAIT_YIELD: &str = "PTL_WAIT_YIELD";
/// Shared memory: single-copy large payloads (`1`/`0`).
pub const SHM_CMA: &str = "PTL_SHM_CMA";
/// Shared memory: bytes of each per-pair ring.
pub const SHM_RING: &str = "PTL_SHM_RING";
/// Shared memory: bytes one single-copy read moves per progress step.
pub const SHM_CMA_CHUNK: &str = "PTL_SHM_CMA_CHUNK";
/// Progress mode.
pub const PROGRESS: &str = "PTL_PROGRESS";
/// Poller back end of the progress thread.
pub const BACKEND: &str = "PTL_BACKEND";
/// Connection set-up mode.
pub const CONNECT: &str = "PTL_CONNECT";
/// Address the transport binds to.
pub const BIND: &str = "PTL_BIND";
/// Rendezvous timeout in seconds.
pub const BOOTSTRAP_TIMEOUT: &str = "PTL_BOOTSTRAP_TIMEOUT";
/// How long MPI's finalize may take, in seconds, before it aborts the job.
pub const FINALIZE_TIMEOUT: &str = "PTL_FINALIZE_TIMEOUT";
/// Spin window in microseconds.
pub const WAIT_SPIN_US: &str = "PTL_WAIT_SPIN_US";
/// Hand-back delay of the progress thread in microseconds.
pub const HANDBACK_US: &str = "PTL_HANDBACK_US";
/// UDP fault injection.
pub const UDP_FAULT: &str = "PTL_UDP_FAULT";
/// See the module table.
pub const UDP_PEER_TIMEOUT: &str = "PTL_UDP_PEER_TIMEOUT";
/// UDP datagram size.
pub const UDP_MAX_DATAGRAM: &str = "PTL_UDP_MAX_DATAGRAM";
/// UDP: loss percentage above which small datagrams are sent twice, or
/// `off`.
pub const UDP_COPY_ABOVE: &str = "PTL_UDP_COPY_ABOVE";
/// UDP sends through connected per-peer sockets (`1`) or not (`0`).
pub const UDP_CONNECTED: &str = "PTL_UDP_CONNECTED";
/// TCP wakes a sleeping thread once per large message (`1`) or per
/// segment (`0`).
pub const TCP_RCVLOWAT: &str = "PTL_TCP_RCVLOWAT";
/// TCP's progress thread takes over early while the application computes
/// (`1`) or after the whole hand-back delay (`0`).
pub const TCP_TAKEOVER: &str = "PTL_TCP_TAKEOVER";
/// Progress thread: an application's test drives the transport
/// (`auto`/`1`/`0`).
pub const TEST_DRIVES: &str = "PTL_TEST_DRIVES";
/// MPI's short all-reduces and barriers through one member (`1`), by
/// recursive doubling (`0`), or as the job's hosts' load says (`auto`).
pub const COLL_FLAT: &str = "PTL_COLL_FLAT";
/// Shared memory's progress thread takes over early while the application
/// computes (`1`) or after the whole hand-back delay (`0`).
pub const SHM_TAKEOVER: &str = "PTL_SHM_TAKEOVER";
/// Nice steps the progress thread runs below its application (`auto` or
/// 0–40).
pub const PROGRESS_NICE: &str = "PTL_PROGRESS_NICE";
/// The CPUs a progress thread may run on (`launcher`, `rank` or a CPU
/// list).
pub const PROGRESS_CPUS: &str = "PTL_PROGRESS_CPUS";
/// Secret mixed into the job key of a job started by a PMI launcher.
pub const JOB_SECRET: &str = "PTL_JOB_SECRET";
/// Socket send buffer of each connection, in bytes.
pub const SNDBUF: &str = "PTL_SNDBUF";
/// Socket receive buffer of each connection, in bytes.
pub const RCVBUF: &str = "PTL_RCVBUF";

/// Where [`JobOptions::from_lookup`] and [`JobEnv::from_lookup`] read a
/// variable: `std::env::var_os` for the process environment.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<std::ffi::OsString>;

/// Which transport a job uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NalKind {
    /// `nal-shm` when every rank of the job runs on this host (same host
    /// identity, see [`crate::host`]), `nal-tcp` otherwise.
    #[default]
    Auto,
    /// `nal-shm`: every rank must run on this host.
    Shm,
    /// `nal-tcp`.
    Tcp,
    /// `nal-udp`.
    Udp,
}

impl NalKind {
    /// The name used on the command line and in `PTL_NAL`.
    pub fn name(&self) -> &'static str {
        match self {
            NalKind::Auto => "auto",
            NalKind::Shm => "shm",
            NalKind::Tcp => "tcp",
            NalKind::Udp => "udp",
        }
    }
}

/// How each process of a job sets up its transport.
#[derive(Clone, Debug, PartialEq)]
pub struct JobOptions {
    /// Transport.
    pub nal: NalKind,
    /// Progress thread or polling.
    pub progress: ProgressMode,
    /// Poller of the progress thread.
    pub backend: Backend,
    /// Connection set-up.
    pub connect: ConnectMode,
    /// Address to listen on.
    pub bind: IpAddr,
    /// Rendezvous timeout.
    pub timeout: Duration,
    /// Spin window of a thread waiting in the library.
    pub wait_spin: Duration,
    /// How much longer a waiting thread polls while a peer moves this
    /// process's data (`None`: the interface's default, 2 ms; see
    /// `portals::NiConfig::wait_spin_busy`).
    pub wait_spin_busy: Option<Duration>,
    /// How long after the last thread waiting in the library left the
    /// progress thread takes the sockets back (`None`: the transport's
    /// default, 200 µs). Longer suits applications that call the library in
    /// bursts with short gaps; shorter hands progress back sooner to one that
    /// goes off to compute.
    pub handback: Option<Duration>,
    /// UDP only: faults injected into outgoing datagrams (tests).
    pub udp_fault: Option<FaultConfig>,
    /// UDP only: the peer timeout (`None`: the protocol's default;
    /// `Some(None)`: no liveness watch).
    pub udp_peer_timeout: Option<Option<Duration>>,
    /// UDP only: largest datagram (`None`: the protocol's default).
    pub udp_max_datagram: Option<usize>,
    /// UDP only: the redundant-copy threshold in parts per million of loss
    /// (`None`: the protocol's default, 2 %; `Some(None)`: never copy; see
    /// [`nal_udp::proto::Config::copy_above_loss_ppm`]).
    pub udp_copy_above: Option<Option<u32>>,
    /// UDP only: send through one connected socket per peer
    /// ([`nal_udp::UdpConfig::connected_sends`]; on by default). Off is for
    /// comparison: the kernel then looks up a route for every datagram.
    pub udp_connected_sends: bool,
    /// TCP only: wake a sleeping thread once per large message
    /// ([`nal_tcp::TcpConfig::wake_per_message`]; on by default). Off is
    /// for comparison.
    pub tcp_wake_per_message: bool,
    /// TCP only: the progress thread takes over early while the
    /// application computes ([`nal_tcp::TcpConfig::early_takeover`]);
    /// `None`: unless this host runs more ranks of the job than it has
    /// cores online (4 ranks on 2 cores ran the `halo` and `coll` kernels
    /// 40–50 % slower with it, 2 bound ranks faster).
    pub tcp_early_takeover: Option<bool>,
    /// With a progress thread, an application's test or probe drives the
    /// transport itself ([`portals::NiConfig::test_drives`]); `None`: unless
    /// each rank's progress thread has a spare core (the rule of
    /// `tcp_early_takeover`).
    pub test_drives: Option<bool>,
    /// MPI: short all-reduces and barriers run through one member instead
    /// of in ⌈log₂ n⌉ steps; `None`: where some host of the job runs more
    /// ranks than it has cores online ([`crate::Job::oversubscribed`]).
    /// Must be the same at every rank.
    pub coll_flat: Option<bool>,
    /// Shared memory only: the progress thread takes over early while the
    /// application computes ([`nal_shm::ShmConfig::early_takeover`]);
    /// `None`: as TCP's, only where each rank's progress thread has a
    /// core to itself.
    pub shm_early_takeover: Option<bool>,
    /// Progress thread only: nice steps it runs below its application
    /// (`TcpConfig::progress_nice` and its siblings); `None`: the
    /// transports' default ([`nal_sys::sched::DEFAULT_NICE_STEPS`]) unless
    /// this host runs more ranks of the job than it has cores online, then
    /// none (there, favoured progress threads took the cores other ranks
    /// computed on: UDP's `cg` and `coll` on 8 ranks ran 1.5–1.7× polling
    /// mode instead of 1.03–1.14×).
    pub progress_nice: Option<u32>,
    /// Progress thread only: the CPUs it may run on
    /// (`TcpConfig::progress_cpus` and its siblings).
    pub progress_cpus: ProgressCpus,
    /// `SO_SNDBUF` of each connection (`None`: the kernel's autotuning).
    /// Linux doubles the request and caps it at `net.core.wmem_max`; a
    /// set size also turns the kernel's autotuning off.
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF` of each connection (`None`: the kernel's autotuning);
    /// capped at `net.core.rmem_max`.
    pub recv_buffer: Option<usize>,
    /// Whether a waiting thread yields the core between polls
    /// ([`portals::NiConfig::wait_yield`]); `None`: when this host runs more
    /// ranks of the job than it has cores online.
    pub wait_yield: Option<bool>,
    /// Shared memory: single-copy large payloads where the kernel allows
    /// ([`nal_shm::ShmConfig::cma`]; on by default).
    pub shm_cma: bool,
    /// Shared memory: bytes of each per-pair ring (`None`: the transport's
    /// default).
    pub shm_ring: Option<usize>,
    /// Shared memory: bytes one single-copy read moves per progress step
    /// (`None`: the transport's default, [`nal_shm::ShmConfig::cma_chunk`]).
    pub shm_cma_chunk: Option<usize>,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            nal: NalKind::Auto,
            progress: ProgressMode::Thread,
            backend: Backend::Epoll,
            connect: ConnectMode::Lazy,
            bind: IpAddr::from([127, 0, 0, 1]),
            timeout: Duration::from_secs(60),
            wait_spin: Duration::from_micros(50),
            wait_spin_busy: None,
            handback: None,
            udp_fault: None,
            udp_peer_timeout: None,
            udp_max_datagram: None,
            udp_copy_above: None,
            udp_connected_sends: true,
            tcp_wake_per_message: true,
            tcp_early_takeover: None,
            test_drives: None,
            coll_flat: None,
            send_buffer: None,
            recv_buffer: None,
            wait_yield: None,
            shm_cma: true,
            shm_ring: None,
            shm_cma_chunk: None,
            shm_early_takeover: None,
            progress_nice: None,
            progress_cpus: ProgressCpus::Launcher,
        }
    }
}

impl JobOptions {
    /// The environment variables that carry these options to a process.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            (NAL, self.nal.name().into()),
            (
                PROGRESS,
                match self.progress {
                    ProgressMode::Thread => "thread",
                    ProgressMode::Poll => "poll",
                }
                .into(),
            ),
            (
                BACKEND,
                match self.backend {
                    Backend::Epoll => "epoll",
                    Backend::IoUring => "io_uring",
                }
                .into(),
            ),
            (
                CONNECT,
                match self.connect {
                    ConnectMode::Lazy => "lazy",
                    ConnectMode::Eager => "eager",
                }
                .into(),
            ),
            (BIND, self.bind.to_string()),
            (BOOTSTRAP_TIMEOUT, self.timeout.as_secs().max(1).to_string()),
            (WAIT_SPIN_US, self.wait_spin.as_micros().to_string()),
        ];
        if let Some(d) = self.handback {
            env.push((HANDBACK_US, d.as_micros().to_string()));
        }
        if let Some(d) = self.wait_spin_busy {
            env.push((WAIT_SPIN_BUSY_US, d.as_micros().to_string()));
        }
        if let Some(f) = &self.udp_fault {
            env.push((UDP_FAULT, f.to_string()));
        }
        if let Some(t) = self.udp_peer_timeout {
            env.push((UDP_PEER_TIMEOUT, t.map_or(0, |d| d.as_millis()).to_string()));
        }
        if let Some(n) = self.udp_max_datagram {
            env.push((UDP_MAX_DATAGRAM, n.to_string()));
        }
        if let Some(c) = self.udp_copy_above {
            let v = c.map_or_else(
                || "off".to_string(),
                |ppm| format!("{}", f64::from(ppm) / 1e4),
            );
            env.push((UDP_COPY_ABOVE, v));
        }
        if !self.udp_connected_sends {
            env.push((UDP_CONNECTED, "0".into()));
        }
        if !self.tcp_wake_per_message {
            env.push((TCP_RCVLOWAT, "0".into()));
        }
        for (name, v) in [
            (TCP_TAKEOVER, self.tcp_early_takeover),
            (TEST_DRIVES, self.test_drives),
            (COLL_FLAT, self.coll_flat),
            (SHM_TAKEOVER, self.shm_early_takeover),
            (WAIT_YIELD, self.wait_yield),
        ] {
            if let Some(t) = v {
                env.push((name, if t { "1" } else { "0" }.into()));
            }
        }
        if let Some(n) = self.progress_nice {
            env.push((PROGRESS_NICE, n.to_string()));
        }
        if self.progress_cpus != ProgressCpus::Launcher {
            env.push((PROGRESS_CPUS, self.progress_cpus.to_string()));
        }
        if let Some(n) = self.send_buffer {
            env.push((SNDBUF, n.to_string()));
        }
        if let Some(n) = self.recv_buffer {
            env.push((RCVBUF, n.to_string()));
        }
        if !self.shm_cma {
            env.push((SHM_CMA, "0".into()));
        }
        if let Some(n) = self.shm_ring {
            env.push((SHM_RING, n.to_string()));
        }
        if let Some(n) = self.shm_cma_chunk {
            env.push((SHM_CMA_CHUNK, n.to_string()));
        }
        env
    }

    /// Read the options from the environment; unset variables keep their
    /// defaults.
    pub fn from_env() -> Result<JobOptions, RuntimeError> {
        JobOptions::from_lookup(&|name| std::env::var_os(name))
    }

    /// Like [`from_env`](Self::from_env), reading variables through `get`
    /// (for tests, or a launcher that passes the environment explicitly).
    pub fn from_lookup(get: Lookup<'_>) -> Result<JobOptions, RuntimeError> {
        let mut o = JobOptions::default();
        if let Some(v) = var(get, NAL)? {
            o.nal = match v.as_str() {
                "auto" => NalKind::Auto,
                "shm" => NalKind::Shm,
                "tcp" => NalKind::Tcp,
                "udp" => NalKind::Udp,
                _ => return Err(bad(NAL, "expected auto, shm, tcp or udp")),
            };
        }
        if let Some(v) = var(get, PROGRESS)? {
            o.progress = match v.as_str() {
                "thread" => ProgressMode::Thread,
                "poll" => ProgressMode::Poll,
                _ => return Err(bad(PROGRESS, "expected thread or poll")),
            };
        }
        if let Some(v) = var(get, BACKEND)? {
            o.backend = match v.as_str() {
                "epoll" => Backend::Epoll,
                "io_uring" | "io-uring" => Backend::IoUring,
                _ => return Err(bad(BACKEND, "expected epoll or io_uring")),
            };
        }
        if let Some(v) = var(get, CONNECT)? {
            o.connect = match v.as_str() {
                "lazy" => ConnectMode::Lazy,
                "eager" => ConnectMode::Eager,
                _ => return Err(bad(CONNECT, "expected lazy or eager")),
            };
        }
        if let Some(v) = var(get, BIND)? {
            o.bind = v.parse().map_err(|_| bad(BIND, "expected an IP address"))?;
        }
        if let Some(v) = var(get, BOOTSTRAP_TIMEOUT)? {
            let s: u64 = v
                .parse()
                .map_err(|_| bad(BOOTSTRAP_TIMEOUT, "expected seconds"))?;
            o.timeout = Duration::from_secs(s.max(1));
        }
        if let Some(v) = var(get, WAIT_SPIN_US)? {
            let us: u64 = v
                .parse()
                .map_err(|_| bad(WAIT_SPIN_US, "expected microseconds"))?;
            o.wait_spin = Duration::from_micros(us);
        }
        if let Some(v) = var(get, WAIT_SPIN_BUSY_US)? {
            let us: u64 = v
                .parse()
                .map_err(|_| bad(WAIT_SPIN_BUSY_US, "expected microseconds"))?;
            o.wait_spin_busy = Some(Duration::from_micros(us));
        }
        if let Some(v) = var(get, HANDBACK_US)? {
            let us: u64 = v
                .parse()
                .map_err(|_| bad(HANDBACK_US, "expected microseconds"))?;
            o.handback = Some(Duration::from_micros(us));
        }
        if let Some(v) = var(get, UDP_PEER_TIMEOUT)? {
            o.udp_peer_timeout = Some(nal_udp::parse_peer_timeout(&v).map_err(|_| {
                bad(
                    UDP_PEER_TIMEOUT,
                    "expected milliseconds, 0 (off) or at least 16",
                )
            })?);
        }
        if let Some(v) = var(get, UDP_FAULT)? {
            o.udp_fault = Some(
                v.parse()
                    .map_err(|_| bad(UDP_FAULT, "expected loss=P,dup=P,reorder=P,seed=N"))?,
            );
        }
        if let Some(v) = var(get, UDP_MAX_DATAGRAM)? {
            let n: usize = v
                .parse()
                .ok()
                .filter(|n| {
                    (nal_udp::proto::MIN_DATAGRAM..=nal_udp::proto::MAX_UDP_PAYLOAD).contains(n)
                })
                .ok_or_else(|| bad(UDP_MAX_DATAGRAM, "expected bytes in 512..=65507"))?;
            o.udp_max_datagram = Some(n);
        }
        if let Some(v) = var(get, UDP_COPY_ABOVE)? {
            o.udp_copy_above = Some(nal_udp::parse_copy_above(&v).map_err(|_| {
                bad(
                    UDP_COPY_ABOVE,
                    "expected a loss percentage in (0, 100] or off",
                )
            })?);
        }
        if let Some(v) = var(get, UDP_CONNECTED)? {
            o.udp_connected_sends = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(bad(UDP_CONNECTED, "expected 1 or 0")),
            };
        }
        if let Some(v) = var(get, TCP_RCVLOWAT)? {
            o.tcp_wake_per_message = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(bad(TCP_RCVLOWAT, "expected 1 or 0")),
            };
        }
        if let Some(v) = on_off_auto(get, TCP_TAKEOVER)? {
            o.tcp_early_takeover = v;
        }
        if let Some(v) = on_off_auto(get, TEST_DRIVES)? {
            o.test_drives = v;
        }
        if let Some(v) = on_off_auto(get, COLL_FLAT)? {
            o.coll_flat = v;
        }
        if let Some(v) = on_off_auto(get, SHM_TAKEOVER)? {
            o.shm_early_takeover = v;
        }
        if let Some(v) = var(get, PROGRESS_NICE)? {
            o.progress_nice = match v.trim() {
                "auto" => None,
                n => Some(n.parse::<u32>().ok().filter(|&n| n <= 40).ok_or_else(|| {
                    bad(PROGRESS_NICE, "expected auto or nice steps from 0 to 40")
                })?),
            };
        }
        if let Some(v) = var(get, PROGRESS_CPUS)? {
            o.progress_cpus = ProgressCpus::parse(&v).map_err(|_| {
                bad(
                    PROGRESS_CPUS,
                    "expected launcher, rank or a CPU list such as 0-3,8",
                )
            })?;
        }
        if let Some(v) = on_off_auto(get, WAIT_YIELD)? {
            o.wait_yield = v;
        }
        if let Some(v) = var(get, SHM_CMA)? {
            o.shm_cma = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(bad(SHM_CMA, "expected 1 or 0")),
            };
        }
        if let Some(v) = var(get, SHM_RING)? {
            let n = parse_bytes(&v)
                .filter(|n| (4 << 10..=1 << 30).contains(n) && n % 64 == 0)
                .ok_or_else(|| {
                    bad(
                        SHM_RING,
                        "expected a multiple of 64 bytes from 4K to 1G (K, M, G suffixes)",
                    )
                })?;
            o.shm_ring = Some(n);
        }
        if let Some(v) = var(get, SHM_CMA_CHUNK)? {
            let n = parse_bytes(&v)
                .filter(|n| (4 << 10..=1 << 30).contains(n))
                .ok_or_else(|| {
                    bad(
                        SHM_CMA_CHUNK,
                        "expected bytes from 4K to 1G (K, M, G suffixes)",
                    )
                })?;
            o.shm_cma_chunk = Some(n);
        }
        if let Some(v) = var(get, SNDBUF)? {
            o.send_buffer = Some(parse_bytes(&v).ok_or_else(|| bad(SNDBUF, BYTES))?);
        }
        if let Some(v) = var(get, RCVBUF)? {
            o.recv_buffer = Some(parse_bytes(&v).ok_or_else(|| bad(RCVBUF, BYTES))?);
        }
        Ok(o)
    }
}

/// Everything a process learns from `ptlrun`.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEnv {
    /// This process's rank.
    pub rank: u32,
    /// Number of ranks.
    pub size: u32,
    /// Job key.
    pub job_key: u64,
    /// Rendezvous server (host:port).
    pub bootstrap: String,
    /// Transport options.
    pub options: JobOptions,
}

impl JobEnv {
    /// Read the environment. `Ok(None)` if `PTL_RANK` is unset (the process
    /// was not started by `ptlrun`).
    pub fn from_env() -> Result<Option<JobEnv>, RuntimeError> {
        JobEnv::from_lookup(&|name| std::env::var_os(name))
    }

    /// Like [`from_env`](Self::from_env), reading variables through `get`.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Option<JobEnv>, RuntimeError> {
        let Some(rank) = var(get, RANK)? else {
            return Ok(None);
        };
        let rank: u32 = rank.parse().map_err(|_| bad(RANK, "expected a number"))?;
        let size: u32 = required(get, SIZE)?
            .parse()
            .map_err(|_| bad(SIZE, "expected a number"))?;
        if size == 0 || rank >= size {
            return Err(bad(RANK, &format!("rank {rank} is not below size {size}")));
        }
        let job_key = u64::from_str_radix(&required(get, JOB_KEY)?, 16)
            .map_err(|_| bad(JOB_KEY, "expected 64-bit hexadecimal"))?;
        let bootstrap = required(get, BOOTSTRAP)?;
        Ok(Some(JobEnv {
            rank,
            size,
            job_key,
            bootstrap,
            options: JobOptions::from_lookup(get)?,
        }))
    }
}

const BYTES: &str = "expected a positive number of bytes, optionally with K, M or G";

/// A positive byte count: digits with an optional `K`, `M` or `G` (powers
/// of 1024, either case). Used for `PTL_SNDBUF`, `PTL_RCVBUF` and the
/// matching `ptlrun` options.
pub fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: usize = digits.parse().ok()?;
    let n = n.checked_mul(1usize << shift)?;
    (n > 0).then_some(n)
}

fn var(get: Lookup<'_>, name: &'static str) -> Result<Option<String>, RuntimeError> {
    get(name)
        .map(|v| v.into_string().map_err(|_| bad(name, "not valid UTF-8")))
        .transpose()
}

/// A variable of `1`, `0` or `auto` (`Some(None)`: auto, decided at
/// start-up); `None` if unset.
fn on_off_auto(get: Lookup<'_>, name: &'static str) -> Result<Option<Option<bool>>, RuntimeError> {
    var(get, name)?
        .map(|v| match v.as_str() {
            "1" => Ok(Some(true)),
            "0" => Ok(Some(false)),
            "auto" => Ok(None),
            _ => Err(bad(name, "expected 1, 0 or auto")),
        })
        .transpose()
}

fn required(get: Lookup<'_>, name: &'static str) -> Result<String, RuntimeError> {
    var(get, name)?.ok_or_else(|| bad(name, "missing (set by ptlrun)"))
}

fn bad(var: &'static str, why: &str) -> RuntimeError {
    RuntimeError::Env {
        var,
        why: why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    /// What a rank reads back from the environment `ptlrun` exports for `o`.
    fn through_env(o: &JobOptions) -> JobOptions {
        let env: Vec<(String, String)> = o
            .to_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        JobOptions::from_lookup(&|k| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| OsString::from(v))
        })
        .unwrap()
    }

    /// Each of `values` for `var` is refused with an error naming `var`.
    fn refused_naming(var: &'static str, values: &[&str]) {
        for v in values {
            let err = JobOptions::from_lookup(&lookup(&[(var, v)])).unwrap_err();
            assert!(
                matches!(err, RuntimeError::Env { var: got, .. } if got == var),
                "{var}={v:?}: {err}"
            );
        }
    }

    #[test]
    fn socket_buffer_sizes_parse_and_round_trip_through_the_environment() {
        let get = lookup(&[(SNDBUF, "4M"), (RCVBUF, "262144")]);
        let o = JobOptions::from_lookup(&get).unwrap();
        assert_eq!(o.send_buffer, Some(4 << 20));
        assert_eq!(o.recv_buffer, Some(256 << 10));
        // What ptlrun exports is what the rank reads back.
        assert_eq!(through_env(&o), o);
        // Unset: the kernel decides, and nothing is exported.
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!((d.send_buffer, d.recv_buffer), (None, None));
        assert!(d.to_env().iter().all(|(k, _)| *k != SNDBUF && *k != RCVBUF));
    }

    #[test]
    fn the_shm_cma_chunk_round_trips_and_bad_values_are_named_errors() {
        let o = JobOptions::from_lookup(&lookup(&[(SHM_CMA_CHUNK, "4M")])).unwrap();
        assert_eq!(o.shm_cma_chunk, Some(4 << 20));
        assert_eq!(through_env(&o), o);
        refused_naming(SHM_CMA_CHUNK, &["0", "1K", "2G", "lots"]);
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(d.shm_cma_chunk, None);
        assert!(d.to_env().iter().all(|(k, _)| *k != SHM_CMA_CHUNK));
    }

    #[test]
    fn the_busy_spin_parses_and_round_trips_through_the_environment() {
        let o = JobOptions::from_lookup(&lookup(&[(WAIT_SPIN_BUSY_US, "0")])).unwrap();
        assert_eq!(o.wait_spin_busy, Some(Duration::ZERO));
        let env = o.to_env();
        assert!(
            env.contains(&(WAIT_SPIN_BUSY_US, "0".to_string())),
            "{env:?}"
        );
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(d.wait_spin_busy, None, "unset: the interface's default");
        assert!(d.to_env().iter().all(|(k, _)| *k != WAIT_SPIN_BUSY_US));
        refused_naming(WAIT_SPIN_BUSY_US, &["", "-5", "2ms"]);
    }

    #[test]
    fn the_handback_parses_and_round_trips_through_the_environment() {
        let o = JobOptions::from_lookup(&lookup(&[(HANDBACK_US, "1500")])).unwrap();
        assert_eq!(o.handback, Some(Duration::from_micros(1500)));
        let env = o.to_env();
        assert!(env.contains(&(HANDBACK_US, "1500".to_string())), "{env:?}");
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(d.handback, None, "unset: the transport's default");
        assert!(d.to_env().iter().all(|(k, _)| *k != HANDBACK_US));
        refused_naming(HANDBACK_US, &["", "-5", "1.5", "200us"]);
    }

    #[test]
    fn tcp_wake_per_message_defaults_on_and_round_trips_when_off() {
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert!(d.tcp_wake_per_message);
        assert!(d.to_env().iter().all(|(k, _)| *k != TCP_RCVLOWAT));
        let off = JobOptions::from_lookup(&lookup(&[(TCP_RCVLOWAT, "0")])).unwrap();
        assert!(!off.tcp_wake_per_message);
        let env = off.to_env();
        assert!(env.contains(&(TCP_RCVLOWAT, "0".to_string())), "{env:?}");
        refused_naming(TCP_RCVLOWAT, &["", "on", "2"]);
    }

    /// A `1`/`0`/`auto` option: unset and `auto` leave it to start-up (and
    /// out of the environment), `1` and `0` force it and go through the
    /// environment, anything else is refused naming the variable.
    fn on_off_auto_option(name: &'static str, field: fn(&JobOptions) -> Option<bool>) {
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(field(&d), None);
        assert!(d.to_env().iter().all(|(k, _)| *k != name));
        let auto = JobOptions::from_lookup(&lookup(&[(name, "auto")])).unwrap();
        assert_eq!(field(&auto), None);
        for (v, want) in [("0", false), ("1", true)] {
            let o = JobOptions::from_lookup(&lookup(&[(name, v)])).unwrap();
            assert_eq!(field(&o), Some(want));
            let env = o.to_env();
            assert!(env.contains(&(name, v.to_string())), "{env:?}");
            assert_eq!(through_env(&o), o);
        }
        refused_naming(name, &["", "yes", "2"]);
    }

    #[test]
    fn tcp_early_takeover_defaults_to_auto_and_round_trips() {
        on_off_auto_option(TCP_TAKEOVER, |o| o.tcp_early_takeover);
    }

    #[test]
    fn test_drives_defaults_to_auto_and_round_trips() {
        on_off_auto_option(TEST_DRIVES, |o| o.test_drives);
    }

    #[test]
    fn progress_nice_defaults_to_auto_and_round_trips_and_a_bad_value_is_named() {
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(d.progress_nice, None);
        assert!(d.to_env().iter().all(|(k, _)| *k != PROGRESS_NICE));
        let auto = JobOptions::from_lookup(&lookup(&[(PROGRESS_NICE, "auto")])).unwrap();
        assert_eq!(auto.progress_nice, None);
        for n in ["0", "5", "40"] {
            let o = JobOptions::from_lookup(&lookup(&[(PROGRESS_NICE, n)])).unwrap();
            assert_eq!(o.progress_nice, n.parse().ok());
            assert!(o.to_env().contains(&(PROGRESS_NICE, n.to_string())));
            assert_eq!(through_env(&o), o);
        }
        refused_naming(PROGRESS_NICE, &["", "41", "-2", "high"]);
    }

    #[test]
    fn progress_cpus_default_to_the_launchers_and_round_trip_and_a_bad_value_is_named() {
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(d.progress_cpus, ProgressCpus::Launcher);
        assert!(d.to_env().iter().all(|(k, _)| *k != PROGRESS_CPUS));
        for (text, want) in [
            ("launcher", ProgressCpus::Launcher),
            ("rank", ProgressCpus::Rank),
            ("1-2,5", ProgressCpus::List(vec![1, 2, 5])),
        ] {
            let o = JobOptions::from_lookup(&lookup(&[(PROGRESS_CPUS, text)])).unwrap();
            assert_eq!(o.progress_cpus, want, "{text}");
            assert_eq!(through_env(&o), o);
        }
        refused_naming(PROGRESS_CPUS, &["", "cores", "2-1", "0,,1"]);
    }

    #[test]
    fn coll_flat_defaults_to_auto_and_round_trips() {
        on_off_auto_option(COLL_FLAT, |o| o.coll_flat);
    }

    #[test]
    fn shm_early_takeover_defaults_to_auto_and_round_trips() {
        on_off_auto_option(SHM_TAKEOVER, |o| o.shm_early_takeover);
    }

    #[test]
    fn udp_connected_sends_default_on_and_round_trip_when_off() {
        let d = JobOptions::from_lookup(&lookup(&[])).unwrap();
        assert!(d.udp_connected_sends);
        assert!(d.to_env().iter().all(|(k, _)| *k != UDP_CONNECTED));
        let off = JobOptions::from_lookup(&lookup(&[(UDP_CONNECTED, "0")])).unwrap();
        assert!(!off.udp_connected_sends);
        let env = off.to_env();
        assert!(env.contains(&(UDP_CONNECTED, "0".to_string())), "{env:?}");
        let on = JobOptions::from_lookup(&lookup(&[(UDP_CONNECTED, "1")])).unwrap();
        assert!(on.udp_connected_sends);
        refused_naming(UDP_CONNECTED, &["", "yes", "2"]);
    }

    #[test]
    fn the_udp_peer_timeout_round_trips_and_bad_values_are_named_errors() {
        for (v, want) in [
            ("0", Some(None)),
            ("2500", Some(Some(Duration::from_millis(2500)))),
        ] {
            let o = JobOptions::from_lookup(&lookup(&[(UDP_PEER_TIMEOUT, v)])).unwrap();
            assert_eq!(o.udp_peer_timeout, want, "{v:?}");
            // What ptlrun passes on reads back the same.
            let env: Vec<(&str, String)> = o.to_env();
            let again = env.iter().find(|(k, _)| *k == UDP_PEER_TIMEOUT);
            assert_eq!(again.map(|(_, v)| v.as_str()), Some(v));
        }
        refused_naming(UDP_PEER_TIMEOUT, &["", "x", "-5", "15"]);
    }

    #[test]
    fn the_udp_copy_threshold_round_trips_and_bad_values_are_named_errors() {
        for (v, want) in [
            ("off", Some(None)),
            ("2", Some(Some(20_000))),
            ("0.5", Some(Some(5_000))),
            ("100", Some(Some(1_000_000))),
        ] {
            let o = JobOptions::from_lookup(&lookup(&[(UDP_COPY_ABOVE, v)])).unwrap();
            assert_eq!(o.udp_copy_above, want, "{v:?}");
            // What ptlrun passes on reads back the same.
            let env: Vec<(&str, String)> = o.to_env();
            let again = env.iter().find(|(k, _)| *k == UDP_COPY_ABOVE);
            assert_eq!(again.map(|(_, v)| v.as_str()), Some(v));
        }
        refused_naming(UDP_COPY_ABOVE, &["", "x", "0", "-5", "100.5", "NaN", "inf"]);
    }

    #[test]
    fn bad_socket_buffer_sizes_are_named_errors() {
        for v in ["", "0", "-1", "4X", "1T", "99999999999999999999G"] {
            let err = JobOptions::from_lookup(&lookup(&[(RCVBUF, v)])).unwrap_err();
            assert!(
                matches!(err, RuntimeError::Env { var: RCVBUF, .. }),
                "{v:?}: {err}"
            );
        }
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("1G"), Some(1 << 30));
    }
}
