//! The transport conformance suite: what every network abstraction layer
//! must do, written once and run for nal-tcp, nal-udp and nal-shm
//! (`tests/conformance.rs` runs it for each transport, back end and
//! progress mode, for UDP through the fault injector, and for shared memory
//! with single-copy on and off).
//!
//! A [`Transport`] is a transport's configuration: it says how to bind an
//! endpoint and start the NAL of one process. [`job`] builds several
//! processes of one job in this process, connected over 127.0.0.1 (or
//! shared memory); the
//! behaviours (`puts_and_gets_of_every_size_arrive_byte_exact`, ...) each
//! take one configuration. The transports' own tests (`nal-tcp/tests`,
//! `nal-udp/tests`) use the same jobs and helpers for what only they do.
//!
//! Every wait is bounded; the bounds leave room for a loaded 2-core machine.

use std::fmt::Debug;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nal_shm::{ShmAddr, ShmConfig, ShmEndpoint, ShmNal};
pub use nal_tcp::{Backend, ProgressMode};

mod iovec;
pub use iovec::{cut, iovec_descriptors_scatter_and_gather_byte_exact, odd_split};
use nal_tcp::{TcpConfig, TcpEndpoint, TcpNal};
use nal_udp::{FaultConfig, PeerAddr, UdpConfig, UdpEndpoint, UdpNal};
use portals::*;
use portals_runtime::mux::{MuxNal, MuxWake};

mod atomics;
pub use atomics::*;
mod ordering;
pub use ordering::{
    a_lazy_acknowledgment_reaches_an_initiator_whose_target_only_waits,
    a_response_stays_ahead_of_a_send_after_fence_responses, acknowledged_ping_pong,
    acknowledged_ping_pong_with, an_acknowledgment_comes_before_the_reply_its_put_caused,
};

/// The portal table entry the tests use.
pub const PT: PortalIndex = PortalIndex(5);

/// How long a test waits for an event it is owed.
pub const WAIT: Option<Duration> = Some(Duration::from_secs(60));

/// A transport configuration: how a process of a test job binds its
/// endpoint and starts its NAL. Implemented by [`TcpConfig`],
/// [`UdpConfig`] and [`ShmConfig`].
pub trait Transport: Clone + Debug + Send + Sync + 'static {
    /// A bound endpoint whose address can be published before it starts.
    type Endpoint;
    /// Where the endpoint receives (a socket address for the IP
    /// transports, what tests aim raw traffic at).
    type LocalAddr: Clone + Debug + Send + Sync;
    /// What the other processes must know of an endpoint to reach it.
    type Addr: Clone + Debug;
    /// The running NAL (for its counters and the transport's own calls).
    type Nal: Nal;

    /// How soon a put to a target with a progress thread that never calls
    /// the library must be acknowledged; a target in polling mode must not
    /// acknowledge within that time.
    const UNATTENDED_ACK: Duration;

    /// This transport with `backend` (where it has a choice) and
    /// `progress`, defaults otherwise.
    fn variant(backend: Backend, progress: ProgressMode) -> Self;
    /// Who drives this configuration's sockets.
    fn progress(&self) -> ProgressMode;
    /// Bind the endpoint.
    fn bind(&self) -> io::Result<Self::Endpoint>;
    /// The address the endpoint receives on.
    fn local_addr(ep: &Self::Endpoint) -> Self::LocalAddr;
    /// What the endpoint publishes to the other processes.
    fn peer_addr(ep: &Self::Endpoint) -> Self::Addr;
    /// Start serving `core`, reaching the job's processes at `peers`.
    fn start(
        ep: Self::Endpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, Self::Addr)>,
    ) -> Result<Arc<Self::Nal>, PtlError>;

    /// After traffic with this configuration: if it injects faults, assert
    /// that the injector ran and the losses were repaired by `nals`
    /// (together). Nothing to check by default.
    fn assert_faults_repaired(&self, nals: &[&Self::Nal]) {
        let _ = nals;
    }
}

impl Transport for TcpConfig {
    type Endpoint = TcpEndpoint;
    type LocalAddr = SocketAddr;
    type Addr = SocketAddr;
    type Nal = TcpNal;
    const UNATTENDED_ACK: Duration = Duration::from_millis(1500);

    fn variant(backend: Backend, progress: ProgressMode) -> Self {
        TcpConfig {
            backend,
            progress,
            ..TcpConfig::default()
        }
    }
    fn progress(&self) -> ProgressMode {
        self.progress
    }
    fn bind(&self) -> io::Result<TcpEndpoint> {
        TcpEndpoint::bind(self.clone())
    }
    fn local_addr(ep: &TcpEndpoint) -> SocketAddr {
        ep.local_addr()
    }
    fn peer_addr(ep: &TcpEndpoint) -> SocketAddr {
        ep.local_addr()
    }
    fn start(
        ep: TcpEndpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, SocketAddr)>,
    ) -> Result<Arc<TcpNal>, PtlError> {
        ep.start(core, peers)
    }
}

impl Transport for UdpConfig {
    type Endpoint = UdpEndpoint;
    type LocalAddr = SocketAddr;
    type Addr = PeerAddr;
    type Nal = UdpNal;
    const UNATTENDED_ACK: Duration = Duration::from_millis(3000);

    fn variant(backend: Backend, progress: ProgressMode) -> Self {
        UdpConfig {
            backend,
            progress,
            ..UdpConfig::default()
        }
    }
    fn progress(&self) -> ProgressMode {
        self.progress
    }
    fn bind(&self) -> io::Result<UdpEndpoint> {
        UdpEndpoint::bind(self.clone())
    }
    fn local_addr(ep: &UdpEndpoint) -> SocketAddr {
        ep.local_addr()
    }
    fn peer_addr(ep: &UdpEndpoint) -> PeerAddr {
        ep.addr()
    }
    fn start(
        ep: UdpEndpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, PeerAddr)>,
    ) -> Result<Arc<UdpNal>, PtlError> {
        ep.start(core, peers)
    }
    fn assert_faults_repaired(&self, nals: &[&UdpNal]) {
        if self.fault.is_none() {
            return;
        }
        let (mut drops, mut retransmits, mut pulls, mut copies) = (0, 0, 0, 0);
        for st in nals.iter().map(|n| n.stats()) {
            drops += st.injected_drops;
            retransmits += st.protocol.retransmits;
            pulls += st.protocol.pull_rerequests + st.protocol.pull_probes;
            copies += st.protocol.redundant_copies;
        }
        assert!(drops > 0, "{self:?}: the fault injector ran");
        // Lost pull data is asked for again (a re-request, or a probe when
        // the answers stop), not resent; small datagrams may be repaired
        // by redundant copies. Counting retransmits alone failed about one
        // run in ten of the 3 MB iovec transfer (load ~7), whose losses
        // were all repaired by re-requests or probes.
        assert!(
            retransmits + pulls + copies > 0,
            "{self:?}: losses were repaired ({drops} drops, {retransmits} retransmits, \
             {pulls} pull re-requests and probes, {copies} redundant copies; {:?})",
            nals.iter().map(|n| n.stats().protocol).collect::<Vec<_>>()
        );
    }
}

impl Transport for ShmConfig {
    type Endpoint = ShmEndpoint;
    type LocalAddr = ShmAddr;
    type Addr = ShmAddr;
    type Nal = ShmNal;
    const UNATTENDED_ACK: Duration = Duration::from_millis(1500);

    /// Shared memory has no back end to choose.
    fn variant(_backend: Backend, progress: ProgressMode) -> Self {
        ShmConfig {
            progress,
            ..ShmConfig::default()
        }
    }
    fn progress(&self) -> ProgressMode {
        self.progress
    }
    fn bind(&self) -> io::Result<ShmEndpoint> {
        ShmEndpoint::bind(self.clone())
    }
    fn local_addr(ep: &ShmEndpoint) -> ShmAddr {
        ep.addr()
    }
    fn peer_addr(ep: &ShmEndpoint) -> ShmAddr {
        ep.addr()
    }
    fn start(
        ep: ShmEndpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, ShmAddr)>,
    ) -> Result<Arc<ShmNal>, PtlError> {
        ep.start(core, peers)
    }
}

/// Shared memory with single-copy transfers on or off (`cma: false`
/// streams every payload through the rings).
pub fn shm(progress: ProgressMode, cma: bool) -> ShmConfig {
    ShmConfig {
        progress,
        cma,
        ..ShmConfig::default()
    }
}

/// Two "hosts" in one process: shared memory between the interfaces of
/// one, TCP between the two, composed as jobs that span hosts compose them
/// (`portals_runtime::mux`). The interfaces of a job alternate between the
/// hosts in the order they are bound, so a job of three or more has pairs
/// of both kinds, and one of two talks over TCP only.
#[derive(Clone, Debug)]
pub struct Mixed {
    /// The TCP side.
    pub tcp: TcpConfig,
    /// The shared-memory side.
    pub shm: ShmConfig,
    /// Interfaces bound so far (which host the next one is on).
    bound: Arc<AtomicUsize>,
}

/// A bound interface of a [`Mixed`] job: its two endpoints and its host.
#[derive(Debug)]
pub struct MixedEndpoint {
    tcp: TcpEndpoint,
    shm: ShmEndpoint,
    host: usize,
}

impl Transport for Mixed {
    type Endpoint = MixedEndpoint;
    type LocalAddr = SocketAddr;
    type Addr = (SocketAddr, ShmAddr, usize);
    type Nal = MuxNal;
    const UNATTENDED_ACK: Duration = Duration::from_millis(1500);

    fn variant(backend: Backend, progress: ProgressMode) -> Self {
        Mixed {
            tcp: TcpConfig::variant(backend, progress),
            shm: ShmConfig {
                progress,
                ..ShmConfig::default()
            },
            bound: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn progress(&self) -> ProgressMode {
        self.tcp.progress
    }
    fn bind(&self) -> io::Result<MixedEndpoint> {
        Ok(MixedEndpoint {
            tcp: TcpEndpoint::bind(self.tcp.clone())?,
            shm: ShmEndpoint::bind(self.shm.clone())?,
            host: self.bound.fetch_add(1, Ordering::SeqCst) % 2,
        })
    }
    fn local_addr(ep: &MixedEndpoint) -> SocketAddr {
        ep.tcp.local_addr()
    }
    fn peer_addr(ep: &MixedEndpoint) -> (SocketAddr, ShmAddr, usize) {
        (ep.tcp.local_addr(), ep.shm.addr(), ep.host)
    }
    fn start(
        ep: MixedEndpoint,
        core: Arc<NiCore>,
        peers: Vec<(ProcessId, (SocketAddr, ShmAddr, usize))>,
    ) -> Result<Arc<MuxNal>, PtlError> {
        let local: Vec<(ProcessId, ShmAddr)> = peers
            .iter()
            .filter(|(_, (_, _, host))| *host == ep.host)
            .map(|(id, (_, shm, _))| (*id, *shm))
            .collect();
        let ids = local.iter().map(|(id, _)| *id).collect();
        let tcp_peers: Vec<(ProcessId, SocketAddr)> =
            peers.iter().map(|(id, (tcp, _, _))| (*id, *tcp)).collect();
        let wake = MuxWake::new().map_err(|e| PtlError::Nal(e.to_string()))?;
        wake.install(&core);
        let shm = ep.shm.start(core.clone(), local)?;
        let tcp = ep.tcp.start(core, tcp_peers)?;
        Ok(Arc::new(MuxNal::new("shm+tcp", shm, tcp, ids, wake)?))
    }
}

/// The mixed transport with `progress` on both sides.
pub fn mixed(progress: ProgressMode) -> Mixed {
    Mixed::variant(Backend::Epoll, progress)
}

/// UDP through the fault injector: 5 % loss, 2 % duplication, 5 %
/// reordering, seeded.
pub fn udp_lossy(progress: ProgressMode, seed: u64) -> UdpConfig {
    UdpConfig {
        progress,
        fault: Some(FaultConfig {
            loss: 0.05,
            dup: 0.02,
            reorder: 0.05,
            seed,
        }),
        ..UdpConfig::default()
    }
}

/// Every back end × progress mode of transport `C`.
pub fn variants<C: Transport>() -> Vec<C> {
    logging();
    let mut v = Vec::new();
    for backend in [Backend::Epoll, Backend::IoUring] {
        for progress in [ProgressMode::Thread, ProgressMode::Poll] {
            v.push(C::variant(backend, progress));
        }
    }
    v
}

/// `PTL_LOG=nal_tcp=trace cargo test ...` shows what the transport does.
pub fn logging() {
    if let Ok(f) = tracing_subscriber::EnvFilter::try_from_env("PTL_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(f)
            .with_test_writer()
            .try_init();
    }
}

/// Process `i` of a test job.
pub fn id(i: usize) -> ProcessId {
    ProcessId::new(0, i as u32)
}

/// Tests run in parallel and ports get reused, so every job has its own
/// key: a message that reaches another test's process is refused, as it
/// would be between real jobs.
pub fn fresh_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 32) | NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One process of a test job.
pub struct Node<C: Transport> {
    pub key: u64,
    pub ni: NetworkInterface,
    pub nal: Arc<C::Nal>,
    pub addr: C::LocalAddr,
}

impl<C: Transport> Node<C> {
    /// Process `i` of job `key`, serving the bound endpoint `ep`.
    pub fn start(ep: C::Endpoint, key: u64, i: usize, peers: &[(ProcessId, C::Addr)]) -> Node<C> {
        Self::start_tuned(ep, key, i, peers, &|_| {})
    }

    /// [`start`](Self::start), with the interface's configuration changed
    /// by `tune` first.
    pub fn start_tuned(
        ep: C::Endpoint,
        key: u64,
        i: usize,
        peers: &[(ProcessId, C::Addr)],
        tune: &dyn Fn(&mut NiConfig),
    ) -> Node<C> {
        let addr = C::local_addr(&ep);
        let mut nal = None;
        let mut ni_cfg = NiConfig::new(id(i), key);
        tune(&mut ni_cfg);
        let ni = NetworkInterface::init(ni_cfg, |core| {
            let n = C::start(ep, core, peers.to_vec())?;
            nal = Some(n.clone());
            Ok(n as Arc<dyn Nal>)
        })
        .unwrap();
        Node {
            key,
            ni,
            nal: nal.unwrap(),
            addr,
        }
    }
}

/// A job of `n` processes with configuration `cfg`.
pub fn job<C: Transport>(n: usize, cfg: &C) -> Vec<Node<C>> {
    job_with(&vec![cfg.clone(); n])
}

/// A job whose processes may use different configurations.
pub fn job_with<C: Transport>(cfgs: &[C]) -> Vec<Node<C>> {
    job_tuned(cfgs, &|_| {})
}

/// [`job_with`], with every interface's configuration changed by `tune`
/// (a test of the waiting strategy sets its spin window here).
pub fn job_tuned<C: Transport>(cfgs: &[C], tune: &dyn Fn(&mut NiConfig)) -> Vec<Node<C>> {
    let key = fresh_key();
    let eps: Vec<C::Endpoint> = cfgs.iter().map(|c| c.bind().unwrap()).collect();
    let addrs: Vec<(ProcessId, C::Addr)> = eps
        .iter()
        .enumerate()
        .map(|(i, e)| (id(i), C::peer_addr(e)))
        .collect();
    eps.into_iter()
        .enumerate()
        .map(|(i, ep)| Node::start_tuned(ep, key, i, &addrs, tune))
        .collect()
}

/// `len` bytes that differ with `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Wait for an event of `kind`, skipping others; panics after [`WAIT`],
/// naming the events it skipped (an event that came early, out of the
/// order a test expects, is skipped and then never comes: the list shows
/// it).
pub fn expect(ni: &NetworkInterface, eq: EqHandle, kind: EventKind) -> Event {
    let mut skipped = Vec::new();
    loop {
        match ni.eq_wait(eq, WAIT) {
            Ok(ev) if ev.kind == kind => return ev,
            Ok(ev) => skipped.push((ev.kind, ev.mlength, ev.fail)),
            Err(e) => panic!(
                "no {kind:?} event before the timeout ({e}); skipped meanwhile \
                 (kind, mlength, fail): {skipped:?}"
            ),
        }
    }
}

/// Call `ni.progress()` until `done` holds; panics after `limit`. (In
/// polling mode nothing moves without such calls.)
pub fn progress_until(
    nis: &[&NetworkInterface],
    limit: Duration,
    what: &str,
    done: impl Fn() -> bool,
) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        for ni in nis {
            ni.progress().unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Run `body(me, node, start)` for every process of `nodes` at once, each
/// in a thread of its own; `start` is a barrier of all of them (to wait at
/// after the set-up). `body` returns an event queue of its process: when it
/// is done, the process keeps driving its progress through that queue
/// (discarding events) until every process is done, because in polling
/// mode nobody else answers for it or repairs its losses.
pub fn each_process<C: Transport>(
    nodes: &[Node<C>],
    body: impl Fn(usize, &Node<C>, &Barrier) -> EqHandle + Sync,
) {
    let n = nodes.len();
    let start = Barrier::new(n);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (me, node) in nodes.iter().enumerate() {
            let (body, start, done) = (&body, &start, &done);
            s.spawn(move || {
                let eq = body(me, node, start);
                done.fetch_add(1, Ordering::SeqCst);
                let t0 = Instant::now();
                while done.load(Ordering::SeqCst) < n {
                    assert!(t0.elapsed() < WAIT.unwrap(), "the others did not finish");
                    match node.ni.eq_wait(eq, Some(Duration::from_millis(5))) {
                        Ok(_) | Err(PtlError::Timeout) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
}

/// A ping-pong of `rounds` 8-byte puts between the two processes of
/// `nodes`, each waiting in the library (`eq_wait`) for the other's; every
/// put carries its round number, checked on arrival.
pub fn ping_pong<C: Transport>(nodes: &[Node<C>], rounds: usize) {
    assert_eq!(nodes.len(), 2, "a ping-pong has two sides");
    each_process(nodes, |me, node, start| {
        let ni = &node.ni;
        let eq = ni.eq_alloc(64).unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq);
        let inbox = attach(ni, id(1 - me), 0, 0, &desc, 8);
        let src = ni
            .md_bind(&MdDesc::default(), vec![0; 8], Unlink::Retain)
            .unwrap();
        let to_peer = Remote::new(id(1 - me), PT, 0);
        start.wait();
        for round in 0..rounds {
            if (round % 2 == 0) == (me == 0) {
                ni.md_write(src, 0, &(round as u64).to_le_bytes()).unwrap();
                ni.put(src, AckReq::NoAck, &to_peer, 0).unwrap();
            } else {
                let ev = expect(ni, eq, EventKind::Put);
                assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
                let mut got = [0u8; 8];
                ni.md_read(inbox, 0, &mut got).unwrap();
                assert_eq!(u64::from_le_bytes(got), round as u64, "round {round}");
            }
        }
        eq
    });
}

/// Attach to [`PT`] a match entry for `source` and match bits `bits`
/// (`ignore` masked), with a descriptor `desc` over `len` zero bytes.
pub fn attach(
    ni: &NetworkInterface,
    source: ProcessId,
    bits: u64,
    ignore: u64,
    desc: &MdDesc,
    len: usize,
) -> MdHandle {
    let me = ni
        .me_attach(PT, source, bits, ignore, Unlink::Retain, Position::After)
        .unwrap();
    ni.md_attach(me, desc, vec![0; len], Unlink::Retain)
        .unwrap()
}

/// A descriptor of `len` bytes that takes every put to [`PT`], reporting
/// to `eq`.
pub fn catch_all(ni: &NetworkInterface, eq: EqHandle, len: usize) -> MdHandle {
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(eq);
    attach(ni, ProcessId::ANY, 0, u64::MAX, &desc, len)
}

/// A free-floating descriptor over `data` that reports to `eq`.
pub fn bind_md(ni: &NetworkInterface, eq: EqHandle, data: Vec<u8>) -> MdHandle {
    ni.md_bind(&MdDesc::default().eq(eq), data, Unlink::Retain)
        .unwrap()
}

/// The wire header of a put of `len` bytes from `src` to `dst` in job
/// `key`, to [`PT`] with match bits 0.
pub fn put_header(key: u64, src: ProcessId, dst: ProcessId, len: u64) -> [u8; wire::HEADER_LEN] {
    wire::Header {
        op: wire::Op::Put,
        ack_req: false,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: key,
        src,
        dst,
        pt_index: PT,
        ac_index: 0,
        match_bits: 0,
        offset: 0,
        hdr_data: 0,
        rlength: len,
        mlength: 0,
        cookie: 0,
        atomic: None,
    }
    .encode()
}

// ----- the behaviours ----------------------------------------------------------

/// Acknowledged puts, then gets, of every size class of both transports
/// (empty, one datagram, fragmented, pulled, streamed), between two
/// processes; what comes back is what was sent, to the byte.
pub fn puts_and_gets_of_every_size_arrive_byte_exact<C: Transport>(cfg: &C) {
    const SIZES: [usize; 10] = [
        0,
        1,
        88,
        1000,
        64_900,
        65_536,
        100_003,
        131_073,
        1 << 20,
        16 << 20,
    ];
    let nodes = job(2, cfg);
    let (a, b) = (&nodes[0], &nodes[1]);
    let beq = b.ni.eq_alloc(256).unwrap();
    let desc =
        MdDesc::new(MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE).eq(beq);
    let tmd = attach(&b.ni, ProcessId::ANY, 1, 0, &desc, 16 << 20);
    std::thread::scope(|s| {
        // The target only waits for events (which is what drives progress
        // in polling mode).
        s.spawn(|| {
            for _ in 0..SIZES.len() {
                expect(&b.ni, beq, EventKind::Put);
                expect(&b.ni, beq, EventKind::Get);
            }
        });
        let aeq = a.ni.eq_alloc(64).unwrap();
        for (k, &len) in SIZES.iter().enumerate() {
            let data = pattern(len, k as u8);
            let src = bind_md(&a.ni, aeq, data.clone());
            a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 1), 7)
                .unwrap();
            let sent = expect(&a.ni, aeq, EventKind::Sent);
            assert_eq!(sent.fail, FailType::Ok, "{cfg:?} {len}");
            let ack = expect(&a.ni, aeq, EventKind::Ack);
            assert_eq!(
                (ack.mlength, ack.fail),
                (len as u64, FailType::Ok),
                "{cfg:?} {len}"
            );
            let back = bind_md(&a.ni, aeq, vec![0xee; len]);
            a.ni.get(back, &Remote::new(id(1), PT, 1)).unwrap();
            let reply = expect(&a.ni, aeq, EventKind::Reply);
            assert_eq!(
                (reply.mlength, reply.fail),
                (len as u64, FailType::Ok),
                "{cfg:?} {len}"
            );
            let got = a.ni.md_unlink(back).unwrap().unwrap();
            assert!(got == data, "{cfg:?}: {len} bytes came back different");
            a.ni.md_unlink(src).unwrap();
        }
    });
    // The target's memory holds the last (largest) put.
    let mut head = vec![0u8; 4096];
    b.ni.md_read(tmd, 0, &mut head).unwrap();
    let last = pattern(16 << 20, (SIZES.len() - 1) as u8);
    assert_eq!(head, last[..4096].to_vec(), "{cfg:?}");
    assert_eq!(b.ni.status().dropped_bad_header, 0, "{cfg:?}");
    cfg.assert_faults_repaired(&[&*a.nal]);
}

/// Four processes put 300 small messages to each of the others at once,
/// without acknowledgments; every message arrives, and each source's in the
/// order it was sent.
pub fn all_to_all_storm_of_small_puts_keeps_per_source_order<C: Transport>(cfg: &C) {
    const N: usize = 4;
    const EACH: usize = 300;
    let nodes = job(N, cfg);
    each_process(&nodes, |me, node, start| {
        let ni = &node.ni;
        let eq = ni.eq_alloc(8192).unwrap();
        // One ME per source, locally managed offsets: each source's
        // messages land one after another, in order.
        let inbox: Vec<MdHandle> = (0..N)
            .map(|src| {
                let desc = MdDesc::new(MdOptions::OP_PUT).eq(eq);
                attach(ni, id(src), 0, 0, &desc, EACH * 8)
            })
            .collect();
        // Slot i * N + dst holds the i-th message to dst.
        let out = bind_md(ni, eq, vec![0; EACH * 8 * N]);
        for i in 0..EACH * N {
            let v = (me * 1_000_000 + i) as u64;
            ni.md_write(out, i as u64 * 8, &v.to_le_bytes()).unwrap();
        }
        start.wait();
        for i in 0..EACH {
            for dst in (0..N).filter(|&d| d != me) {
                let slot = (i * N + dst) as u64 * 8;
                let to = Remote::new(id(dst), PT, 0);
                ni.put_region(out, slot, 8, AckReq::NoAck, &to, 0).unwrap();
            }
        }
        let (mut puts, mut sents) = (0, 0);
        while puts < EACH * (N - 1) || sents < EACH * (N - 1) {
            let ev = ni.eq_wait(eq, WAIT).expect("storm event");
            assert_eq!(ev.fail, FailType::Ok, "{cfg:?}: {ev:?}");
            match ev.kind {
                EventKind::Put => puts += 1,
                EventKind::Sent => sents += 1,
                k => panic!("{cfg:?}: unexpected {k:?}"),
            }
        }
        for (src, &md) in inbox.iter().enumerate() {
            if src == me {
                continue;
            }
            let mut got = vec![0u8; EACH * 8];
            ni.md_read(md, 0, &mut got).unwrap();
            for (i, c) in got.chunks_exact(8).enumerate() {
                let v = u64::from_le_bytes(c.try_into().unwrap());
                let want = (src * 1_000_000 + i * N + me) as u64;
                assert_eq!(v, want, "{cfg:?}: message {i} from {src}");
            }
        }
        eq
    });
    let nals: Vec<&C::Nal> = nodes.iter().map(|n| &*n.nal).collect();
    cfg.assert_faults_repaired(&nals);
}

/// A 4 MB acknowledged put to a target that never calls the library
/// again: with a progress thread it is delivered and acknowledged within
/// [`Transport::UNATTENDED_ACK`]; in polling mode nothing moves.
pub fn progress_happens_while_the_target_never_calls_the_library<C: Transport>(cfg: &C) {
    let nodes = job(2, cfg);
    let (a, b) = (&nodes[0], &nodes[1]);
    let tmd = attach(
        &b.ni,
        ProcessId::ANY,
        3,
        0,
        &MdDesc::new(MdOptions::OP_PUT),
        4 << 20,
    );
    let data = pattern(4 << 20, 9);
    let aeq = a.ni.eq_alloc(8).unwrap();
    let src = bind_md(&a.ni, aeq, data.clone());
    // The target does nothing at all from here on: no library call.
    let started = Instant::now();
    a.ni.put(src, AckReq::Ack, &Remote::new(id(1), PT, 3), 0)
        .unwrap();
    let acked = loop {
        match a.ni.eq_wait(aeq, Some(C::UNATTENDED_ACK)) {
            Ok(ev) if ev.kind == EventKind::Ack => break Some(started.elapsed()),
            Ok(_) => continue,
            Err(PtlError::Timeout) => break None,
            Err(e) => panic!("{e}"),
        }
    };
    match cfg.progress() {
        ProgressMode::Thread => {
            let t = acked.expect("acknowledged while the target computed");
            assert!(t < C::UNATTENDED_ACK, "{cfg:?}: acknowledged after {t:?}");
            let mut got = vec![0u8; 4 << 20];
            b.ni.md_read(tmd, 0, &mut got).unwrap();
            assert!(got == data, "the data is already in the target's memory");
        }
        ProgressMode::Poll => {
            assert_eq!(acked, None, "polling mode must not progress without calls");
        }
    }
}

/// A chain of triggered operations across four processes, started by one
/// put, runs to its end while no application thread calls the library
/// (the one test thread sleeps, reading a counter between naps): 0 puts to
/// 1; 1's receive counter triggers its put of what it received to 2; 2's
/// triggers a get of 1's exposed bytes, whose reply triggers 2's put of
/// them to 3; 3's receive counter triggers its put to 0; 0's triggers an
/// increment of its `done` counter. Progress threads only: in polling mode
/// nothing moves while the application sleeps.
pub fn a_triggered_chain_completes_while_every_application_thread_sleeps<C: Transport>(cfg: &C) {
    assert_eq!(
        cfg.progress(),
        ProgressMode::Thread,
        "needs progress threads"
    );
    let nodes = job(4, cfg);
    let ni = |i: usize| &nodes[i].ni;
    let mut received = Vec::new();
    let mut rcs = Vec::new();
    for i in 0..4 {
        let rc = ni(i).ct_alloc().unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::CT_COMM).ct(rc);
        received.push(attach(ni(i), ProcessId::ANY, 1, 0, &desc, 8));
        rcs.push(rc);
    }
    let exposed = attach(
        ni(1),
        ProcessId::ANY,
        2,
        0,
        &MdDesc::new(MdOptions::OP_GET),
        8,
    );
    ni(1).md_write(exposed, 0, b"exposed!").unwrap();
    let to = |i: usize, bits: u64| Remote::new(id(i), PT, bits);
    let forward = |i: usize, md: MdHandle, ct: CtHandle, next: usize| {
        ni(i)
            .triggered_put(
                md,
                0,
                8,
                AckReq::NoAck,
                &to(next, 1),
                0,
                Trigger::new(ct, 1),
            )
            .unwrap();
    };
    forward(1, received[1], rcs[1], 2);
    let replied = ni(2).ct_alloc().unwrap();
    let landing = ni(2)
        .md_bind(
            &MdDesc::new(MdOptions::CT_REPLY).ct(replied),
            vec![0; 8],
            Unlink::Retain,
        )
        .unwrap();
    ni(2)
        .triggered_get(landing, 0, 8, &to(1, 2), Trigger::new(rcs[2], 1))
        .unwrap();
    forward(2, landing, replied, 3);
    forward(3, received[3], rcs[3], 0);
    let done = ni(0).ct_alloc().unwrap();
    ni(0)
        .triggered_ct_inc(done, CtEvent::success(1), Trigger::new(rcs[0], 1))
        .unwrap();
    let start = ni(0)
        .md_bind(&MdDesc::default(), b"started!".to_vec(), Unlink::Retain)
        .unwrap();
    ni(0).put(start, AckReq::NoAck, &to(1, 1), 0).unwrap();
    // From here on no thread calls into the library except to read a
    // counter, which drives nothing.
    let deadline = Instant::now() + Duration::from_secs(60);
    while ni(0).ct_get(done).unwrap().total() == 0 {
        assert!(Instant::now() < deadline, "{cfg:?}: the chain stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ni(0).ct_get(done).unwrap(), CtEvent::new(1, 0));
    let mut got = [0u8; 8];
    ni(0).md_read(received[0], 0, &mut got).unwrap();
    assert_eq!(&got, b"exposed!", "{cfg:?}: what 2 fetched went round");
    for (i, rc) in rcs.iter().enumerate() {
        assert_eq!(
            ni(i).ct_get(*rc).unwrap(),
            CtEvent::new(1, 0),
            "process {i}"
        );
        assert_eq!(ni(i).core().with_engine(|e| e.triggered_pending()), 0);
    }
}

/// A put to the process itself is delivered and acknowledged.
pub fn a_process_can_put_to_itself<C: Transport>(cfg: &C) {
    let nodes = job(1, cfg);
    let ni = &nodes[0].ni;
    let eq = ni.eq_alloc(8).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT).eq(eq);
    let md = attach(ni, ProcessId::ANY, 1, 0, &desc, 8);
    let src = bind_md(ni, eq, b"me".to_vec());
    ni.put(src, AckReq::Ack, &Remote::new(id(0), PT, 1), 0)
        .unwrap();
    let kinds: Vec<_> = (0..3).map(|_| ni.eq_wait(eq, WAIT).unwrap().kind).collect();
    assert!(
        kinds.contains(&EventKind::Put)
            && kinds.contains(&EventKind::Sent)
            && kinds.contains(&EventKind::Ack),
        "{cfg:?}: {kinds:?}"
    );
    let mut b = [0u8; 2];
    ni.md_read(md, 0, &mut b).unwrap();
    assert_eq!(&b, b"me");
}

/// When [`a_dead_peer_fails_pending_operations`] kills its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Death {
    /// Just before the put.
    BeforePut,
    /// Shortly after the put started.
    InFlight,
}

/// What [`a_dead_peer_fails_pending_operations`] left: the surviving
/// process, for the transport's own checks and [`Dead::put_again`].
pub struct Dead<C: Transport> {
    pub a: Node<C>,
    /// `a`'s event queue.
    pub eq: EqHandle,
    /// The kinds of the pending put's failure events, in order.
    pub failed: Vec<EventKind>,
}

/// Process `a` (configured `cfg`) puts `len` bytes with an acknowledgment
/// to `b`, a process in polling mode that never calls the library (so the
/// put is certainly still pending), which dies as `death` says: the put's
/// send and acknowledgment both fail within `within`.
pub fn a_dead_peer_fails_pending_operations<C: Transport>(
    cfg: &C,
    len: usize,
    death: Death,
    within: Duration,
) -> Dead<C> {
    let idle = C::variant(Backend::Epoll, ProgressMode::Poll);
    let mut nodes = job_with(&[cfg.clone(), idle]);
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    let eq = a.ni.eq_alloc(16).unwrap();
    let desc = MdDesc::new(MdOptions::OP_PUT);
    attach(&b.ni, ProcessId::ANY, 0, 0, &desc, len);
    let big = bind_md(&a.ni, eq, vec![1; len]);
    let to_b = Remote::new(id(1), PT, 0);
    let died = match death {
        Death::BeforePut => {
            drop(b);
            let died = Instant::now();
            a.ni.put(big, AckReq::Ack, &to_b, 0).unwrap();
            died
        }
        Death::InFlight => {
            a.ni.put(big, AckReq::Ack, &to_b, 0).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let died = Instant::now();
            drop(b);
            died
        }
    };
    // Both the send and the acknowledgment of the put fail.
    let mut failed = Vec::new();
    while failed.len() < 2 {
        let ev = a.ni.eq_wait(eq, Some(within)).expect("failure event");
        assert_ne!(ev.fail, FailType::Ok, "{cfg:?}: {ev:?}");
        assert_eq!(ev.md_handle, big, "{cfg:?}: {ev:?}");
        failed.push(ev.kind);
    }
    let mut kinds = failed.clone();
    kinds.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(kinds, vec![EventKind::Ack, EventKind::Sent], "{cfg:?}");
    let took = died.elapsed();
    assert!(took < within, "{cfg:?}: failures after {took:?}");
    Dead { a, eq, failed }
}

impl<C: Transport> Dead<C> {
    /// Another acknowledged put to the dead process: its first event must
    /// report it unreachable within `within`. Returns that event.
    pub fn put_again(&self, within: Duration) -> Event {
        let ni = &self.a.ni;
        let again = bind_md(ni, self.eq, vec![3; 8]);
        ni.put(again, AckReq::Ack, &Remote::new(id(1), PT, 0), 0)
            .unwrap();
        let ev = ni.eq_wait(self.eq, Some(within)).expect("event");
        assert_eq!(
            (ev.md_handle, ev.fail),
            (again, FailType::Unreachable),
            "{ev:?}"
        );
        ev
    }
}
