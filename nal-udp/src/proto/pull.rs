//! Receiver-driven pull of large messages (Open-MX's large-message model).
//!
//! After the rendezvous has been matched (`Sink::on_message`), the receiver
//! asks for the wanted prefix of the payload in *blocks* of up to 64
//! fragments, keeping a few blocks per peer requested at once. When it has
//! every wanted byte it sends a completion notice (`Done`), repeated until
//! the sender acknowledges it (`DoneAck`); only then does the sender report
//! the send complete and stop reading the payload.
//!
//! None of this is sequenced: the receiver owns recovery. It re-requests the
//! missing fragments of a block as soon as the last fragment of a request
//! round arrives with holes before it. When the answers stop coming with
//! fragments still missing (the tail of a round was lost, or the request
//! itself), a *pull probe* fires a probe timeout later (the tail probe's
//! wait, plus twice the usual gap between fragments): it asks each
//! incomplete block for its highest missing fragment only, and sends
//! unacknowledged notices again. If the tail was lost, that fragment comes
//! back and the holes before it are asked for at once; if the sender was
//! only slow, the probe cost one duplicate fragment per block. The probes
//! are bounded ([`MAX_PULL_PROBES`] between two arrivals of new data);
//! behind them, like unacknowledged notices, a block is re-requested whole
//! when that peer's pull traffic has been silent for a backed-off RTO,
//! which also decides liveness. Without the probe, each lost tail cost at
//! least the RTO's 1 ms floor, doubling while the loss repeats: a 1 MiB
//! round trip in simulated time (`tests/loss_recovery.rs`,
//! `explore_array`, 40 seeds; 1.17 ms lossless) took 2.35 ms median and
//! 5.7 ms at worst at 10 % loss, 9.3 and 53 ms at 30 %; with the probe,
//! 1.6 and 3.2 ms at 10 %, 4.4 and 9.2 ms at 30 %. (Without the term for
//! the fragments still awaited the probe waited less, 3.7 and 7.2 ms at
//! 30 %, but fired 41 times on a lossless link queueing 4 MiB of pulls.)
//!
//! Keeping notices out of the sequence space matters: a receiver that
//! holds back in-order processing for lack of pull capacity must be able to
//! finish a pull without window space towards the sender, or two such
//! receivers could wait on each other forever.
//!
//! Pull state is O(blocks in flight) per message, however large the message,
//! and an unwanted large message costs nothing but its rendezvous and notice.
//! The sending side ([`PullServer`]) answers requests from a bounded job
//! queue, reading the payload straight into the outgoing datagram.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::config::Config;
use super::rtt::RttEstimator;
use super::tlp;
use super::types::{MsgId, PeerId, Sink, Stats};

/// Most pull requests a sender keeps queued per peer; requests beyond it are
/// dropped (the receiver's timer asks again), so a peer cannot grow it.
pub(crate) const MAX_PULL_JOBS: usize = 256;
/// Most notice acknowledgments a sender keeps queued per peer (same reason).
pub(crate) const MAX_DONE_ACKS: usize = 64;
/// Pull probes between two arrivals of new data, at most: at 30 % loss a
/// probe and its answer both get through half the time, so eight leave a
/// stall to the retransmission timer about once in two hundred (four left
/// it one time in sixteen: 12.3 ms at worst for the 1 MiB round trip of
/// the module docs, against 9.2 ms with eight), while a merely slow sender
/// costs at most eight duplicate fragments per block.
pub(crate) const MAX_PULL_PROBES: u32 = 8;

/// The highest set bit of a non-zero `mask`.
fn highest_bit(mask: u64) -> u64 {
    1u64 << (63 - mask.leading_zeros())
}

fn mask_of(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[derive(Debug)]
struct Block {
    /// Fragment index of bit 0.
    first: u64,
    /// Fragments in this block.
    n: u32,
    received: u64,
    /// Fragments asked for in the latest request.
    round: u64,
    /// A request for it is queued for transmission.
    queued: bool,
    /// The queued request is a probe: for the highest missing fragment only.
    probe: bool,
    /// When its first request went out, while no answer has come and it has
    /// not been asked for again: the pending RTT sample (Karn's rule).
    first_request: Option<Instant>,
    /// Requested more than once.
    repeated: bool,
}

impl Block {
    fn full(&self) -> u64 {
        mask_of(self.n)
    }
    fn missing(&self) -> u64 {
        self.full() & !self.received
    }
}

#[derive(Debug)]
struct ActivePull {
    msg: u64,
    wanted: u64,
    frag_size: u64,
    n_frags: u64,
    /// Next block index to request for the first time.
    next_block: u64,
    blocks: Vec<Block>,
    delivered: u64,
    /// Every wanted byte is here; the notice awaits its acknowledgment.
    finished: bool,
    /// A notice is queued for transmission.
    done_queued: bool,
}

/// A pull request ready to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PullRequest {
    pub(crate) msg: u64,
    pub(crate) limit: u64,
    pub(crate) first_frag: u64,
    pub(crate) frag_size: u32,
    pub(crate) mask: u64,
}

/// What an arriving pull-data fragment did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataOutcome {
    /// New bytes delivered.
    Progress,
    /// Already had it.
    Duplicate,
    /// No pull in progress for that message.
    Stale,
    /// Not a fragment the receiver could have asked for.
    Violation,
}

/// Pulls in progress from one peer, including finished ones whose notice is
/// not yet acknowledged.
#[derive(Debug, Default)]
pub(crate) struct PullReceiver {
    pulls: Vec<ActivePull>,
    blocks_in_flight: u32,
    /// (message, first fragment of block) whose request awaits transmission.
    requests: VecDeque<(u64, u64)>,
    /// Messages whose notice awaits transmission.
    dones: VecDeque<u64>,
    timer: Option<Instant>,
    timeouts: u32,
    /// The pull probe timer (see the module docs).
    probe_at: Option<Instant>,
    /// Probes since new pull data last arrived.
    probes: u32,
    /// When pull data last arrived.
    last_data: Option<Instant>,
    /// Smoothed gap between arrivals of pull data, for the probe's wait.
    gap: Duration,
}

impl PullReceiver {
    /// Pulls in progress or awaiting a notice acknowledgment.
    pub(crate) fn active(&self) -> usize {
        self.pulls.len()
    }

    /// The earlier of the silence timer and the probe timer.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match (self.timer, self.probe_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expect the answers asked for within a probe timeout from `now`,
    /// unless the probe budget is spent or there is no RTT sample to size
    /// the wait. The sender serves requests in order, one fragment per
    /// `gap`, and its other traffic takes turns with them: every fragment
    /// asked for and not yet here may stand before the last one.
    fn arm_probe(&mut self, now: Instant, rtt: &RttEstimator, cfg: &Config) {
        self.probe_at = if self.probes < MAX_PULL_PROBES {
            let awaited: u32 = self
                .pulls
                .iter()
                .flat_map(|p| &p.blocks)
                .map(|b| (b.round & !b.received).count_ones())
                .sum();
            tlp::probe_wait(rtt, cfg, Duration::ZERO).map(|w| now + w + self.gap * (2 + awaited))
        } else {
            None
        };
    }

    fn outstanding(&self) -> bool {
        self.blocks_in_flight > 0 || self.pulls.iter().any(|p| p.finished)
    }

    /// Start pulling `wanted` bytes of message `msg` in fragments of
    /// `frag_size > 0` bytes. With nothing wanted, go straight to the notice.
    pub(crate) fn start(&mut self, msg: u64, wanted: u64, frag_size: u64, cfg: &Config) {
        let frag_size = frag_size.max(1);
        self.pulls.push(ActivePull {
            msg,
            wanted,
            frag_size,
            n_frags: wanted.div_ceil(frag_size),
            next_block: 0,
            blocks: Vec::new(),
            delivered: 0,
            finished: wanted == 0,
            done_queued: wanted == 0,
        });
        if wanted == 0 {
            self.dones.push_back(msg);
        }
        self.fill(cfg);
    }

    /// Open new blocks, oldest message first, up to the per-peer budget.
    fn fill(&mut self, cfg: &Config) {
        let per_block = u64::from(cfg.pull_block_frags);
        'budget: while self.blocks_in_flight < cfg.pull_blocks_in_flight {
            for p in &mut self.pulls {
                let first = p.next_block * per_block;
                if first < p.n_frags {
                    p.next_block += 1;
                    // at most 64, from the config
                    let n = (p.n_frags - first).min(per_block) as u32;
                    p.blocks.push(Block {
                        first,
                        n,
                        received: 0,
                        round: 0,
                        queued: true,
                        probe: false,
                        first_request: None,
                        repeated: false,
                    });
                    self.requests.push_back((p.msg, first));
                    self.blocks_in_flight += 1;
                    continue 'budget;
                }
            }
            break;
        }
    }

    fn arm(&mut self, now: Instant, rtt: &RttEstimator) {
        if self.timer.is_none() {
            self.timer = Some(now + rtt.backed_off(self.timeouts));
        }
    }

    /// Next request to transmit.
    pub(crate) fn next_request(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
    ) -> Option<PullRequest> {
        while let Some((msg, first)) = self.requests.pop_front() {
            let Some(p) = self.pulls.iter_mut().find(|p| p.msg == msg) else {
                continue;
            };
            let Some(b) = p.blocks.iter_mut().find(|b| b.first == first) else {
                continue;
            };
            b.queued = false;
            let probe = std::mem::take(&mut b.probe);
            let mut mask = b.missing();
            if mask == 0 {
                continue;
            }
            if probe {
                mask = highest_bit(mask);
            }
            if b.round == 0 {
                b.first_request = Some(now);
            } else {
                b.repeated = true;
                b.first_request = None;
            }
            b.round = mask;
            let req = PullRequest {
                msg,
                limit: p.wanted,
                first_frag: first,
                // `frag_size` came from a u32 on the wire
                frag_size: p.frag_size as u32,
                mask,
            };
            self.arm(now, rtt);
            self.arm_probe(now, rtt, cfg);
            return Some(req);
        }
        None
    }

    /// Next completion notice to transmit.
    pub(crate) fn next_done(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
    ) -> Option<u64> {
        while let Some(msg) = self.dones.pop_front() {
            let Some(p) = self.pulls.iter_mut().find(|p| p.msg == msg) else {
                continue;
            };
            p.done_queued = false;
            if p.finished {
                self.arm(now, rtt);
                // The sender's send completes when the notice arrives: a
                // lost one stalls it, so it is probed like a lost fragment.
                self.arm_probe(now, rtt, cfg);
                return Some(msg);
            }
        }
        None
    }

    /// The sender acknowledged the notice for `msg`: the pull is over.
    /// Returns false if no notice for it was outstanding.
    pub(crate) fn on_done_ack(&mut self, msg: u64) -> bool {
        let Some(i) = self.pulls.iter().position(|p| p.msg == msg && p.finished) else {
            return false;
        };
        self.pulls.remove(i);
        self.timeouts = 0;
        self.probes = 0;
        if !self.outstanding() {
            self.timer = None;
            self.probe_at = None;
        }
        true
    }

    /// A pull-data fragment arrived.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_data(
        &mut self,
        now: Instant,
        peer: PeerId,
        msg: u64,
        offset: u64,
        data: &[u8],
        sink: &mut dyn Sink,
        rtt: &mut RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
    ) -> DataOutcome {
        let Some(pi) = self.pulls.iter().position(|p| p.msg == msg) else {
            return DataOutcome::Stale;
        };
        let p = &mut self.pulls[pi];
        if p.finished {
            return DataOutcome::Duplicate;
        }
        if offset % p.frag_size != 0 {
            return DataOutcome::Violation;
        }
        let idx = offset / p.frag_size;
        if idx >= p.n_frags || data.len() as u64 != p.frag_size.min(p.wanted - offset) {
            return DataOutcome::Violation;
        }
        let per_block = u64::from(cfg.pull_block_frags);
        let first = idx - idx % per_block;
        let Some(bi) = p.blocks.iter().position(|b| b.first == first) else {
            return if first < p.next_block * per_block {
                DataOutcome::Duplicate
            } else {
                DataOutcome::Violation
            };
        };
        let b = &mut p.blocks[bi];
        let bit = 1u64 << (idx - first);
        if b.received & bit != 0 {
            return DataOutcome::Duplicate;
        }
        b.received |= bit;
        // A receiver that only pulls sends nothing sequenced, so request to
        // first answer is its only RTT measurement.
        if let Some(at) = b.first_request.take() {
            if !b.repeated {
                rtt.on_sample(now.saturating_duration_since(at));
            }
        }
        let id = MsgId { peer, index: msg };
        sink.on_data(id, offset, data);
        p.delivered += data.len() as u64;
        self.timeouts = 0;
        self.timer = Some(now + rtt.rto());
        if b.missing() == 0 {
            p.blocks.swap_remove(bi);
            self.blocks_in_flight -= 1;
        } else if b.round != 0 && bit == highest_bit(b.round) {
            // The last fragment of the round is here; what is still missing
            // was asked for before it (nothing above a round's highest
            // fragment is ever missing), so it was most likely lost: ask
            // for all of it, also if a probe for one fragment is queued.
            if !b.queued {
                b.queued = true;
                self.requests.push_back((msg, b.first));
                stats.pull_rerequests += 1;
            }
            b.probe = false;
        }
        if p.delivered == p.wanted {
            sink.on_complete(id);
            p.finished = true;
            p.done_queued = true;
            self.dones.push_back(msg);
        }
        // Only gaps within a flow of answers say how fast the sender
        // serves; a pause longer than the RTO is the flow restarting.
        if let Some(last) = self.last_data.replace(now) {
            let sample = now.saturating_duration_since(last);
            if sample < rtt.rto() {
                self.gap = (self.gap * 3 + sample) / 4;
            }
        }
        self.probes = 0;
        self.arm_probe(now, rtt, cfg);
        self.fill(cfg);
        DataOutcome::Progress
    }

    /// Check the probe and silence timers. Returns true when the peer must
    /// be declared dead (only if `may_die`: it has been silent long enough).
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cfg: &Config,
        stats: &mut Stats,
        may_die: bool,
    ) -> bool {
        if self.probe_at.is_some_and(|at| at <= now) {
            self.probe_at = None;
            self.probe(stats);
        }
        match self.timer {
            Some(at) if at <= now => {}
            _ => return false,
        }
        self.timer = None;
        if !self.outstanding() {
            return false;
        }
        stats.pull_timeouts += 1;
        self.timeouts += 1;
        if self.timeouts > cfg.max_retransmits && may_die {
            return true;
        }
        stats.pull_rerequests += self.ask_again(false);
        self.timer = Some(now + rtt.backed_off(self.timeouts));
        false
    }

    /// Queue a request for every incomplete block not already being asked
    /// for (a `probe` for its highest missing fragment only, otherwise for
    /// all it misses) and each unacknowledged notice again. Returns the
    /// blocks asked for.
    fn ask_again(&mut self, probe: bool) -> u64 {
        let mut asked = 0;
        for p in &mut self.pulls {
            if p.finished && !p.done_queued {
                p.done_queued = true;
                self.dones.push_back(p.msg);
            }
            for b in &mut p.blocks {
                if !b.queued && b.missing() != 0 {
                    b.queued = true;
                    b.probe = probe;
                    self.requests.push_back((p.msg, b.first));
                    asked += 1;
                }
            }
        }
        asked
    }

    /// Pull data stopped arriving: ask each incomplete block not already
    /// being asked for its highest missing fragment, and send each
    /// unacknowledged notice again (see the module docs). The probe timer is
    /// armed again when the first of them goes out.
    fn probe(&mut self, stats: &mut Stats) {
        if !self.outstanding() {
            return;
        }
        self.probes += 1;
        stats.pull_probes += 1;
        self.ask_again(true);
    }

    /// The peer is dead: abort every pull not yet complete.
    pub(crate) fn abort_all(&mut self, peer: PeerId, sink: &mut dyn Sink) {
        for p in self.pulls.drain(..) {
            if !p.finished {
                sink.on_abort(MsgId { peer, index: p.msg });
            }
        }
        self.requests.clear();
        self.dones.clear();
        self.blocks_in_flight = 0;
        self.timer = None;
        self.probe_at = None;
    }
}

/// A queued answer to a pull request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PullJob {
    msg: u64,
    limit: u64,
    first_frag: u64,
    frag_size: u64,
    mask: u64,
}

/// Why a pull request was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PullReject {
    /// It asks for bytes outside the message or fragments we cannot send.
    Violation,
    /// Too many requests queued.
    Full,
}

/// Pull requests from one peer waiting to be answered.
#[derive(Debug, Default)]
pub(crate) struct PullServer {
    jobs: VecDeque<PullJob>,
    /// Completion notices to acknowledge.
    done_acks: VecDeque<u64>,
}

impl PullServer {
    /// Queue a request for a message of `total` bytes; `max_frag` is the
    /// largest fragment that fits our datagrams.
    pub(crate) fn on_pull(
        &mut self,
        total: u64,
        max_frag: usize,
        req: PullRequest,
    ) -> Result<(), PullReject> {
        let PullRequest {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        } = req;
        let frag_size = u64::from(frag_size);
        if limit > total || frag_size == 0 || frag_size > max_frag as u64 {
            return Err(PullReject::Violation);
        }
        let n_frags = limit.div_ceil(frag_size);
        if first_frag >= n_frags {
            return Err(PullReject::Violation);
        }
        let avail = n_frags - first_frag;
        let mask = if avail >= 64 {
            mask
        } else {
            mask & mask_of(avail as u32)
        };
        if mask == 0 {
            return Err(PullReject::Violation);
        }
        if let Some(job) = self.jobs.iter_mut().find(|j| {
            j.msg == msg
                && j.first_frag == first_frag
                && j.frag_size == frag_size
                && j.limit == limit
        }) {
            job.mask |= mask;
            return Ok(());
        }
        if self.jobs.len() >= MAX_PULL_JOBS {
            return Err(PullReject::Full);
        }
        self.jobs.push_back(PullJob {
            msg,
            limit,
            first_frag,
            frag_size,
            mask,
        });
        Ok(())
    }

    /// Next fragment to send: (message, offset, length).
    pub(crate) fn next(&mut self) -> Option<(u64, u64, usize)> {
        let job = self.jobs.front_mut()?;
        let bit = job.mask.trailing_zeros();
        job.mask &= !(1u64 << bit);
        // first_frag + bit < n_frags, so offset < limit <= MAX_MESSAGE_LEN
        let offset = (job.first_frag + u64::from(bit)) * job.frag_size;
        let len = job.frag_size.min(job.limit - offset) as usize;
        let msg = job.msg;
        if job.mask == 0 {
            self.jobs.pop_front();
        }
        Some((msg, offset, len))
    }

    /// Acknowledge a completion notice (every notice, even a repeated one:
    /// the first acknowledgment may have been lost).
    pub(crate) fn queue_done_ack(&mut self, msg: u64) {
        if !self.done_acks.contains(&msg) && self.done_acks.len() < MAX_DONE_ACKS {
            self.done_acks.push_back(msg);
        }
    }

    /// Next notice acknowledgment to send.
    pub(crate) fn next_done_ack(&mut self) -> Option<u64> {
        self.done_acks.pop_front()
    }

    /// Forget everything (peer death).
    pub(crate) fn clear(&mut self) {
        self.jobs.clear();
        self.done_acks.clear();
    }
}

#[cfg(test)]
mod tests;
