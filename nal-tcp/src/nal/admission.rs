//! Who may hold a connection before proving it belongs to the job: the
//! deadline and the cap on accepted connections that have not finished the
//! handshake, and warnings about refused ones that a flood cannot turn
//! into a log flood.
//!
//! A legitimate peer sends its Hello in the same breath as its connect, so
//! a connection that stays silent is either a peer on a badly overloaded
//! host or something that is not part of the job; either way it holds a
//! file descriptor. The deadline bounds how long, the cap how many. At the
//! cap the *oldest* pending connection is closed, not the new one: a real
//! peer finishes its handshake within one round trip, so only a flood that
//! opens connections faster than that can crowd it out, whereas refusing
//! new ones would let a few hundred idle connections lock every peer out
//! for a whole deadline.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// At most one warning about refused connections per this many ns; the
/// next one says how many were not reported.
const WARN_EVERY_NS: u64 = 1_000_000_000;

/// Allows a log line at most once every [`WARN_EVERY_NS`] and counts the
/// ones it held back.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    /// When a line was last allowed (ns on the caller's clock; 0: never).
    last_ns: AtomicU64,
    /// Lines held back since then.
    held: AtomicU64,
}

impl Throttle {
    /// Whether a line may be written at `now_ns`; if so, how many were held
    /// back before it.
    pub(super) fn allow(&self, now_ns: u64) -> Option<u64> {
        let last = self.last_ns.load(Ordering::Relaxed);
        // `max(1)`: 0 means "never", and the first line is always allowed.
        let now_ns = now_ns.max(1);
        if (last == 0 || now_ns.saturating_sub(last) >= WARN_EVERY_NS)
            && self
                .last_ns
                .compare_exchange(last, now_ns, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Inner {
    /// Warn, at most once a second, that a connection was refused.
    pub(super) fn warn_refused(&self, token: u64, why: &str) {
        if let Some(held) = self.refusals_logged.allow(self.now_ns()) {
            tracing::warn!(
                token,
                why,
                not_reported_since_last = held,
                "connection refused"
            );
        }
    }

    /// Note an accepted connection that is waiting for its Hello, closing
    /// the oldest waiting ones beyond [`TcpConfig::max_pending_handshakes`].
    pub(super) fn admit(&self, conn: &Arc<Conn>) {
        let evicted: Vec<u64> = {
            let mut pending = lock(&self.pending_handshakes);
            pending.push_back(conn.token);
            let cap = self.cfg.max_pending_handshakes.max(1);
            if pending.len() <= cap {
                Vec::new()
            } else {
                // Forget the ones that finished (or failed) their handshake
                // meanwhile, then close the oldest still waiting.
                pending.retain(|t| {
                    self.conn(*t)
                        .is_some_and(|c| c.state() == ConnState::Handshaking)
                });
                let excess = pending.len().saturating_sub(cap);
                pending.drain(..excess).collect()
            }
        };
        for t in evicted {
            if let Some(c) = self.conn(t) {
                if c.state() == ConnState::Handshaking {
                    bump(&self.stats.handshakes_evicted, 1);
                    self.warn_refused(t, "too many connections waiting for a handshake");
                    self.close(&c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_allows_one_line_a_second_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.allow(5), Some(0));
        for i in 1..=7 {
            assert_eq!(t.allow(5 + i * 1000), None);
        }
        assert_eq!(t.allow(5 + WARN_EVERY_NS - 1), None);
        assert_eq!(t.allow(5 + WARN_EVERY_NS), Some(8));
        assert_eq!(t.allow(5 + WARN_EVERY_NS + 1), None);
        // A clock at 0 (the interface's first nanosecond) still logs once.
        let t = Throttle::default();
        assert_eq!(t.allow(0), Some(0));
        assert_eq!(t.allow(0), None);
    }
}
