//! The bound, listening endpoint a launcher publishes before the
//! interface starts.

use super::*;

/// A bound, listening TCP endpoint that is not serving an interface yet.
/// Bind first, publish [`TcpEndpoint::local_addr`] to the other processes,
/// then [`TcpEndpoint::start`].
#[derive(Debug)]
pub struct TcpEndpoint {
    pub(super) listener: Socket,
    pub(super) local: SocketAddr,
    pub(super) cfg: TcpConfig,
}

impl TcpEndpoint {
    /// Open the listening socket.
    pub fn bind(cfg: TcpConfig) -> io::Result<TcpEndpoint> {
        let listener = Socket::new(
            Domain::for_address(cfg.bind),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        listener.set_reuse_address(true)?;
        listener.bind(&cfg.bind.into())?;
        listener.listen(1024)?;
        listener.set_nonblocking(true)?;
        let local = listener
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("listener has no IP address"))?;
        Ok(TcpEndpoint {
            listener,
            local,
            cfg,
        })
    }

    /// The address peers connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Set [`TcpConfig::early_takeover`] before starting: a launcher knows
    /// only after the ranks exchanged their hosts whether this one is
    /// oversubscribed.
    pub fn set_early_takeover(&mut self, on: bool) {
        self.cfg.early_takeover = on;
    }

    /// Set [`TcpConfig::crowded`] (the runtime decides it per host).
    pub fn set_crowded(&mut self, crowded: bool) {
        self.cfg.crowded = crowded;
    }

    /// Set [`TcpConfig::progress_nice`] (the runtime decides it per host).
    pub fn set_progress_nice(&mut self, steps: u32) {
        self.cfg.progress_nice = steps;
    }

    /// Set [`TcpConfig::progress_cpus`].
    pub fn set_progress_cpus(&mut self, cpus: nal_sys::affinity::ProgressCpus) {
        self.cfg.progress_cpus = cpus;
    }

    /// Start serving `core` (use inside [`portals::NetworkInterface::init`]).
    /// `peers` maps the other processes of the job to their addresses; more
    /// can be added later with [`TcpNal::add_peer`].
    pub fn start(
        self,
        core: Arc<NiCore>,
        peers: impl IntoIterator<Item = (ProcessId, SocketAddr)>,
    ) -> Result<Arc<TcpNal>, PtlError> {
        TcpNal::start(self, core, peers).map_err(|e| PtlError::Nal(e.to_string()))
    }
}
