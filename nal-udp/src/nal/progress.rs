//! Progress: a pass reads datagrams, runs the protocol's expired timers
//! and sends; sleeping in the poller between passes; the progress thread.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::time::{Duration, Instant};

use nal_sys::{Poller, Ready};

use crate::deliver::process_id;

use super::{lock, Inner, State, PT_SLEEP, TX_BLOCKED_RETRY};

impl Inner {
    /// One progress pass: read datagrams, run expired timers, send. Returns
    /// whether anything happened.
    pub(super) fn drive(&self, st: &mut State) -> bool {
        let fd = self.sock.as_raw_fd();
        let mut work = false;
        // Something happened since the last settle (a timeout, an ICMP
        // error): settle before leaving.
        let mut unsettled = false;
        // The pass's clock, read when first needed.
        let mut clock: Option<Instant> = None;
        st.rx_more = false;
        // After a pass that found the socket empty, the next datagram is
        // most likely the one answer a thread waits for: ask for one.
        let probe = st.rx_idle;
        let mut got_any = false;
        // Read before any header is offered in this pass (see
        // `NiCore::intake_epoch`).
        let epoch = self.core.intake_epoch();
        if std::mem::replace(&mut st.intake_seen, epoch) != epoch {
            // The engine has room again: offer the streams it held back.
            let (ep, mut sink, _, _) = st.split(&self.core);
            ep.resume(&mut sink);
            work = true;
            unsettled = true;
        }
        for pass in 0..self.cfg.recv_batches_per_pass.max(1) {
            let want = if pass == 0 && probe {
                1
            } else {
                self.cfg.batch
            };
            let n = match st.rx.recv_up_to(fd, want) {
                Ok(n) => n,
                Err(e) if nal_sys::batch::is_icmp_error(&e) => {
                    // Reported for an earlier datagram; the receive itself
                    // did not happen. Learn which peer is gone, read again.
                    self.read_icmp(st);
                    work = true;
                    unsettled = true;
                    continue;
                }
                Err(e) => {
                    self.counters.recv_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "recvmmsg failed");
                    0
                }
            };
            if n == 0 {
                break;
            }
            work = true;
            got_any = true;
            let now = *clock.get_or_insert_with(Instant::now);
            {
                let (ep, mut sink, rx, peers) = st.split(&self.core);
                for k in 0..n {
                    let Some((data, from, _)) = rx.get(k) else {
                        break;
                    };
                    // A datagram from an unknown address is offered as from
                    // an unknown peer, so that the protocol counts it.
                    ep.handle_datagram(now, peers.sender(from, data), data, &mut sink);
                }
            }
            self.settle(st, now);
            unsettled = false;
            if n < want {
                break;
            }
            if want < self.cfg.batch {
                // The probe found something: let the caller look at it
                // first; more may be waiting, so do not sleep on it.
                st.rx_more = true;
                break;
            }
            if pass + 1 == self.cfg.recv_batches_per_pass.max(1) {
                st.rx_more = true;
            }
        }
        st.rx_idle = !got_any;
        if let Some(due) = st.ep.poll_timeout() {
            let now = *clock.get_or_insert_with(Instant::now);
            if due <= now {
                let (ep, mut sink, _, _) = st.split(&self.core);
                ep.handle_timeout(now, &mut sink);
                work = true;
                unsettled = true;
            }
        }
        // An idle pass (the common one while a thread waits) has nothing to
        // settle unless datagrams are still waiting for the socket.
        if unsettled
            || !st.tx.is_empty()
            || st.tx_blocked
            || st.held.is_some()
            || !st.responses.is_empty()
        {
            let now = *clock.get_or_insert_with(Instant::now);
            self.settle(st, now);
        }
        work
    }

    /// Read the ICMP errors queued on the socket. "Port unreachable" for a
    /// peer's address means no process receives there any more: the peer
    /// is declared dead at once, as a TCP reset would tell, instead of after
    /// the retransmission bound.
    pub(super) fn read_icmp(&self, st: &mut State) {
        // The error comes back on the socket that sent: the receiving one,
        // or a peer's connected one (which reports the peer's receive
        // address, as the receiving one does).
        let mut errs = Vec::new();
        for fd in
            std::iter::once(self.sock.as_raw_fd()).chain(st.links.iter().map(|s| s.as_raw_fd()))
        {
            if let Err(e) = nal_sys::batch::read_error_queue(fd, &mut errs) {
                tracing::debug!(error = %e, "reading a socket's error queue failed");
            }
        }
        for (addr, errno) in errs {
            if errno != libc::ECONNREFUSED {
                continue;
            }
            let Some(peer) = st.peers.at(&addr) else {
                continue;
            };
            let (ep, mut sink, _, _) = st.split(&self.core);
            if ep.declare_dead(peer, &mut sink) {
                self.counters.icmp_deaths.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %process_id(peer), %addr, "port unreachable: peer declared dead");
            }
        }
        self.events(st);
    }

    /// If the protocol now has a timer earlier than the progress thread's
    /// wake-up, wake it so that it re-arms (only matters while it sleeps).
    pub(super) fn nudge_progress_thread(&self, st: &State) {
        let Some(pt) = &self.pt else { return };
        let Some(d) = st.ep.poll_timeout() else {
            return;
        };
        let at = d.saturating_duration_since(self.epoch).as_nanos() as u64;
        let sleeping_until = self.pt_deadline.load(Ordering::SeqCst);
        // One wake per sleep: whoever moves the deadline to 0 wakes it.
        if at < sleeping_until
            && self
                .pt_deadline
                .compare_exchange(sleeping_until, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.counters
                .progress_thread_wakes
                .fetch_add(1, Ordering::Relaxed);
            pt.wake();
        }
    }

    /// How long to sleep at most: `cap`, or less if a protocol timer is due
    /// sooner or a full send buffer refused datagrams (no write-space edge
    /// of a connected socket wakes the sleeper). Zero means "do not sleep".
    pub(super) fn nap(st: &State, cap: Duration) -> Duration {
        if st.rx_more || !st.responses.is_empty() {
            return Duration::ZERO;
        }
        let cap = if st.tx_blocked {
            cap.min(TX_BLOCKED_RETRY)
        } else {
            cap
        };
        match st.ep.poll_timeout() {
            Some(d) => d.saturating_duration_since(Instant::now()).min(cap),
            None => cap,
        }
    }

    /// One progress pass, framed by sending the messages of triggered
    /// operations: before it, those another thread's engine call released
    /// (so that a blocking pass does not sleep on them); after it, those
    /// the pass's own deliveries released, once the state lock is free
    /// (sending takes it).
    pub(super) fn progress_once(
        &self,
        poller: &Poller,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        self.core.send_triggered();
        let r = self.pass(poller, timeout);
        self.core.send_triggered();
        r
    }

    pub(super) fn pass(&self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        let Some(cap) = timeout else {
            // Non-blocking: if another thread is driving the socket right
            // now, it is doing the work this call would do.
            let mut st = match self.state.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return Ok(()),
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            self.drive(&mut st);
            self.settle_held_acks(&mut st, false);
            self.nudge_progress_thread(&st);
            return Ok(());
        };
        let wait = {
            let mut st = lock(&self.state);
            // Only a thread about to sleep in the library counts as waiting:
            // spinning passes stay free of clock reads, and a computing
            // application (or an idle progress thread) probes nobody.
            st.ep.note_waiting(Instant::now());
            if self.drive(&mut st) {
                self.settle_held_acks(&mut st, false);
                self.nudge_progress_thread(&st);
                return Ok(());
            }
            self.settle_held_acks(&mut st, true);
            Self::nap(&st, cap)
        };
        if !wait.is_zero() {
            let mut events: Vec<Ready> = Vec::new();
            poller.poll(&mut events, Some(wait))?;
        }
        let mut st = lock(&self.state);
        if !wait.is_zero() {
            // It waited until now, however late it woke. Said before the
            // timers run, and as a sleep rather than a fresh note: a sleep
            // to the liveness watch's deadline that overshoots it (epoll
            // rounds up to whole milliseconds) would otherwise end the
            // waiting episode, restart the silence clock, and a waiter
            // sleeping from deadline to deadline would never detect a dead
            // peer.
            st.ep.note_slept(Instant::now());
        }
        self.drive(&mut st);
        self.settle_held_acks(&mut st, false);
        self.nudge_progress_thread(&st);
        Ok(())
    }

    /// Before the socket closes, keep driving it until every message sent
    /// has been acknowledged, for at most [`UdpConfig::linger`]: an eager
    /// send is reported complete when its payload is copied, so the process
    /// may be about to exit with datagrams still to retransmit (TCP's
    /// kernel does this after `close`; here nobody would).
    pub(super) fn linger(&self) {
        let until = Instant::now() + self.cfg.linger;
        loop {
            let left = lock(&self.state).ep.unfinished_sends();
            if left == 0 {
                break;
            }
            if Instant::now() >= until {
                tracing::warn!(unfinished = left, "closing with unacknowledged sends");
                break;
            }
            if let Err(e) = self.progress_once(&self.app, Some(Duration::from_millis(1))) {
                tracing::debug!(error = %e, "progress while lingering failed");
                break;
            }
        }
    }

    // ----- the progress thread --------------------------------------------------

    pub(super) fn progress_thread(self: Arc<Self>) {
        // Preempt a computing application promptly when woken, and stay
        // eligible to after a copy (see `nal_sys::sched`).
        nal_sys::sched::progress_thread_sched(self.cfg.progress_nice, &self.cfg.progress_cpus);
        let Some(pt) = &self.pt else { return };
        let mut events: Vec<Ready> = Vec::new();
        while !self.gate.is_stopped() {
            self.counters.progress_looks.fetch_add(1, Ordering::Relaxed);
            // A quiet application is left alone longer, unless a send of
            // ours waits for socket room or an answer waits to go out.
            // Datagrams in flight do not count: their acknowledgments (and,
            // rarely, retransmissions) wait for the application's next call
            // or the longer hand-back, as in polling mode. (A thread that
            // holds the state drives the endpoint: leave the flag as it is.)
            // Set under the state lock: a send that blocks later clears it
            // (`ProgressGate::unquiet`, in `transmit`).
            if let Ok(st) = self.state.try_lock() {
                let waiting = st.tx_blocked || !st.responses.is_empty() || st.held.is_some();
                self.gate.set_quiet(self.core.app_quiet() && !waiting);
                drop(st);
            }
            if self.gate.stand_aside() {
                self.gate.park();
                continue;
            }
            // Messages of triggered operations the last drive released
            // (sending takes the state lock, so not inside it).
            self.core.send_triggered();
            let wait = {
                let mut st = lock(&self.state);
                if self.drive(&mut st) || self.core.triggered_pending() {
                    self.settle_held_acks(&mut st, false);
                    continue;
                }
                self.settle_held_acks(&mut st, true);
                let wait = Self::nap(&st, PT_SLEEP);
                let at = (Instant::now() + wait).saturating_duration_since(self.epoch);
                self.pt_deadline
                    .store(at.as_nanos() as u64, Ordering::SeqCst);
                wait
            };
            if !wait.is_zero() {
                if let Err(e) = pt.poll(&mut events, Some(wait)) {
                    tracing::error!(error = %e, "progress thread poll failed");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            self.pt_deadline.store(0, Ordering::SeqCst);
        }
    }
}
