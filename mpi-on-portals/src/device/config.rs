//! The MPI library's tunables ([`MpiConfig`], read from `PTL_MPI_*`
//! environment variables) and its protocol counters ([`MpiStats`]).

use crate::error::{MpiError, Result};

/// Tunables of the MPI library. Read from the environment by
/// [`MpiConfig::from_env`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiConfig {
    /// Messages up to this many bytes use the short (eager, buffered when
    /// unexpected) protocol; longer ones the long protocol
    /// (`PTL_MPI_EAGER`).
    ///
    /// The default, 64 KiB, was chosen by measurement (2 ranks, TCP,
    /// progress thread, `mpi-on-portals/examples/pingpong` with `PTL_MPI_EAGER` varied,
    /// medians of 3 runs): the short protocol's half round trip beats the
    /// long one's at every size, by 17–20 % at 32–64 KiB (9.5 vs 11.7 µs,
    /// 15.2 vs 18.1 µs) and by ~10 % at 128–256 KiB. Above 64 KiB the long
    /// protocol is kept because it never buffers an unexpected message: the
    /// receiver pulls it straight into place, and each 2 MiB unexpected
    /// buffer still holds at least 31 short messages.
    pub eager_limit: usize,
    /// Size of each unexpected-message buffer (`PTL_MPI_UNEXPECTED_BUFFER`).
    pub unexpected_buffer: usize,
    /// Unexpected-message buffers created at start (`PTL_MPI_UNEXPECTED_BUFFERS`).
    pub unexpected_buffers: usize,
    /// The pool grows up to this many buffers when messages arrive faster
    /// than they are received (`PTL_MPI_UNEXPECTED_MAX`).
    pub unexpected_max: usize,
    /// Capacity of the request event queue (`PTL_MPI_EQ_EVENTS`, at least
    /// 2): completions of this process's own operations. Flow-controlled:
    /// when it is full, arriving acknowledgments and replies wait in the
    /// transport until it is drained.
    pub eq_events: usize,
    /// The cap on unexpected messages held as envelopes
    /// (`PTL_MPI_ENVELOPES`, at least 2, default 65 536): the capacity of
    /// the unexpected event queue, whose slots stay taken while their
    /// envelopes are saved (see `device/saved.rs`). Beyond it, senders are
    /// held back in their transport until receives take envelopes — except
    /// a sender that a posted receive or a probe waits for, which is let in
    /// (the messages in front of the awaited one must get in for it to
    /// arrive), so the cap can be exceeded by the messages a waiting
    /// receive's sender has queued in front of the one it waits for. A
    /// wait for a collective message admits its sender too, but only one
    /// send window ([`MpiConfig::send_window`]) of its point-to-point
    /// messages is in front of it, and a sender that passes the cap so is
    /// asked to pause (`device/throttle.rs`). Each envelope costs about 170
    /// bytes.
    pub envelopes: usize,
    /// Bytes of library copies that short standard sends may hold
    /// (`PTL_MPI_EAGER_COPY`). Such a send must keep its data until the
    /// receiver acknowledges it (see the module docs); within this budget
    /// the library keeps a copy instead and the send completes at once, as
    /// an eager send did before, so the acknowledgment's round trip stays
    /// off the sender's critical path. Beyond it, sends keep the caller's
    /// buffer and complete on the acknowledgment. 0 turns copies off.
    pub eager_copy: usize,
    /// Point-to-point messages to one target that may be in its stream
    /// unacknowledged (`PTL_MPI_SEND_WINDOW`, at least 1, default 256);
    /// later sends to it wait in this process, in order, until
    /// acknowledgments make room (`device/window.rs`). Collective traffic
    /// never waits, so a receiver at its envelope cap that waits for a
    /// collective message takes at most this many point-to-point messages
    /// of each sender in front of it: its envelopes stay within
    /// [`MpiConfig::envelopes`] plus one window per sender it waits for.
    pub send_window: usize,
    /// Long sends to a target announced after one met no posted receive
    /// there (`PTL_MPI_ANNOUNCE`: a count, `never` (0) or `always`
    /// (`usize::MAX`, every long send from the first); default 4).
    ///
    /// An announced send puts its envelope alone and the receiver gets the
    /// data once a receive matches it, so an unexpected long message
    /// crosses the network once instead of twice (the unannounced put is
    /// truncated to nothing and its data fetched again). Expected, an
    /// announcement costs a round trip more than the put; every expected
    /// one counts the run down, and every unexpected one starts it again
    /// (`device/announce.rs`).
    pub long_announce: usize,
}

impl Default for MpiConfig {
    fn default() -> Self {
        MpiConfig {
            eager_limit: 64 << 10,
            unexpected_buffer: 2 << 20,
            unexpected_buffers: 3,
            unexpected_max: 32,
            eq_events: 1 << 16,
            envelopes: 1 << 16,
            eager_copy: 16 << 20,
            send_window: 256,
            long_announce: 4,
        }
    }
}

impl MpiConfig {
    /// Defaults, overridden by `PTL_MPI_*` environment variables.
    pub fn from_env() -> Result<MpiConfig> {
        let mut c = MpiConfig::default();
        let get = |name: &str, v: &mut usize| -> Result<()> {
            if let Ok(s) = std::env::var(name) {
                *v = s
                    .parse()
                    .map_err(|_| MpiError::Init(format!("{name}={s:?} is not a number")))?;
            }
            Ok(())
        };
        get("PTL_MPI_EAGER", &mut c.eager_limit)?;
        get("PTL_MPI_UNEXPECTED_BUFFER", &mut c.unexpected_buffer)?;
        get("PTL_MPI_UNEXPECTED_BUFFERS", &mut c.unexpected_buffers)?;
        get("PTL_MPI_UNEXPECTED_MAX", &mut c.unexpected_max)?;
        get("PTL_MPI_EQ_EVENTS", &mut c.eq_events)?;
        get("PTL_MPI_ENVELOPES", &mut c.envelopes)?;
        get("PTL_MPI_EAGER_COPY", &mut c.eager_copy)?;
        get("PTL_MPI_SEND_WINDOW", &mut c.send_window)?;
        if let Ok(s) = std::env::var("PTL_MPI_ANNOUNCE") {
            c.long_announce = parse_announce(&s).ok_or_else(|| {
                MpiError::Init(format!(
                    "PTL_MPI_ANNOUNCE={s:?} is not a number, `never` or `always`"
                ))
            })?;
        }
        c.checked()
    }

    /// Check the tunables (also those given to
    /// [`crate::initialize_with_config`]): an unexpected-message buffer must
    /// hold two eager messages (its high-water mark is the eager limit: a
    /// smaller buffer would never accept anything); at least one buffer, and
    /// a cap no lower than the initial count.
    pub(crate) fn checked(mut self) -> Result<MpiConfig> {
        if self.unexpected_buffer < 2 * self.eager_limit.max(1) {
            return Err(MpiError::Init(
                "an unexpected-message buffer must hold at least two eager messages".into(),
            ));
        }
        if self.eq_events < 2 {
            return Err(MpiError::Init(
                "event queues need room for at least two events".into(),
            ));
        }
        if self.envelopes < 2 {
            return Err(MpiError::Init(
                "PTL_MPI_ENVELOPES must be at least 2 (the unexpected queue needs room for two events)"
                    .into(),
            ));
        }
        if self.send_window == 0 {
            return Err(MpiError::Init(
                "PTL_MPI_SEND_WINDOW must be at least 1 (a message must be able to leave)".into(),
            ));
        }
        self.unexpected_buffers = self.unexpected_buffers.max(1);
        self.unexpected_max = self.unexpected_max.max(self.unexpected_buffers);
        Ok(self)
    }
}

/// `PTL_MPI_ANNOUNCE`'s value: a count, `never` or `always`.
fn parse_announce(s: &str) -> Option<usize> {
    match s.trim() {
        "never" => Some(0),
        "always" => Some(usize::MAX),
        n => n.parse().ok(),
    }
}

/// Counters of the MPI protocols in this process, for tests and tuning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiStats {
    /// Messages that found their receive posted (deposited in place).
    pub expected: u64,
    /// Short messages received from an unexpected-message buffer.
    pub unexpected_short: u64,
    /// Long messages that arrived unexpected and were fetched with a get.
    pub unexpected_long: u64,
    /// Long sends of this process that were announced (their envelope put
    /// alone, the data pulled by the receiver: [`MpiConfig::long_announce`]).
    pub long_announced: u64,
    /// Announced long messages that found their receive posted here and
    /// were pulled into it at once.
    pub announced_expected: u64,
    /// Explicit acknowledgments sent for synchronous sends received late.
    pub sync_acks: u64,
    /// Unexpected-message buffers drained and re-attached.
    pub buffers_recycled: u64,
    /// Unexpected-message buffers added beyond the initial ones.
    pub buffers_grown: u64,
    /// Short messages that found no room in the unexpected-message buffers
    /// (all full, the pool at its cap): accepted as zero bytes and fetched
    /// from the sender's read portal when received.
    pub unexpected_pulled: u64,
    /// The most unexpected-message envelopes saved at once. Bounded by
    /// [`MpiConfig::envelopes`], plus the messages a waiting receive's (or
    /// probe's) sender had in front of the awaited one — at most
    /// [`MpiConfig::send_window`] per sender for a collective wait.
    pub saved_peak: u64,
    /// Pause requests this process sent to senders whose envelopes passed
    /// its cap while a collective wait let them in.
    pub pauses_sent: u64,
    /// Pause requests this process received from its receivers.
    pub pauses_received: u64,
    /// Point-to-point sends that waited in this process for room in their
    /// target's window ([`MpiConfig::send_window`]).
    pub window_waits: u64,
    /// Blocking collectives (short all-reduces, barriers) that ran on their
    /// communicator's slots instead of point-to-point messages.
    pub slot_collectives: u64,
    /// Of those, the ones that ran through one member (everyone to rank 0
    /// and back) rather than in ⌈log₂ n⌉ steps: the job's hosts are
    /// oversubscribed, or `PTL_COLL_FLAT=1` (see
    /// `portals_runtime::JobOptions::coll_flat`).
    pub flat_collectives: u64,
    /// Bytes of library copies of short standard sends held now (a level,
    /// not a count; [`MpiConfig::eager_copy`] bounds it): a copy waits for
    /// its acknowledgment, and an acknowledged one is kept until this
    /// process next sends or has to wait, at most 64 of them.
    pub eager_copy_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_cap_must_hold_two_events() {
        let c = |envelopes| {
            MpiConfig {
                envelopes,
                ..MpiConfig::default()
            }
            .checked()
        };
        assert!(matches!(c(1), Err(MpiError::Init(_))));
        assert!(matches!(c(0), Err(MpiError::Init(_))));
        assert_eq!(c(2).map(|c| c.envelopes).ok(), Some(2));
        assert_eq!(MpiConfig::default().envelopes, 1 << 16);
    }

    #[test]
    fn announce_takes_a_count_never_or_always() {
        assert_eq!(parse_announce("never"), Some(0));
        assert_eq!(parse_announce(" always"), Some(usize::MAX));
        assert_eq!(parse_announce("16"), Some(16));
        assert_eq!(parse_announce("sometimes"), None);
        assert_eq!(parse_announce("-1"), None);
    }

    #[test]
    fn a_send_window_of_zero_is_refused() {
        let c = |send_window| {
            MpiConfig {
                send_window,
                ..MpiConfig::default()
            }
            .checked()
        };
        assert!(matches!(c(0), Err(MpiError::Init(_))));
        assert_eq!(c(1).map(|c| c.send_window).ok(), Some(1));
        assert_eq!(MpiConfig::default().send_window, 256);
    }
}
