//! Configuration of services and clients, and the clients' retry policy.

use std::time::Duration;

use portals::PortalIndex;

/// The portal indices the protocol uses; a service and its clients must
/// agree. The defaults stay clear of the MPI layer's (0–4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Portals {
    /// The service's request buffers.
    pub request: PortalIndex,
    /// The clients' reply entries.
    pub reply: PortalIndex,
    /// The clients' bulk buffers.
    pub bulk: PortalIndex,
}

impl Default for Portals {
    fn default() -> Self {
        Portals {
            request: PortalIndex(48),
            reply: PortalIndex(49),
            bulk: PortalIndex(50),
        }
    }
}

/// How a service is set up.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Portal indices.
    pub portals: Portals,
    /// Service threads: each takes a request, runs the handler, replies.
    pub threads: usize,
    /// Request buffers in the ring.
    pub buffers: usize,
    /// Bytes of each request buffer.
    pub buffer_size: usize,
    /// The largest request (header and body), also each buffer's
    /// high-water mark, so a request is never split across buffers.
    pub max_request: usize,
    /// The chunk size clients are told bulk data moves in.
    pub bulk_chunk: usize,
    /// How long one bulk chunk or reply may take before it is abandoned.
    pub transfer_timeout: Duration,
    /// Replies kept per client for resends (exactly-once execution).
    pub reply_cache_per_client: usize,
    /// Clients whose replies are kept; the least recently heard one is
    /// forgotten beyond this.
    pub reply_cache_clients: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            portals: Portals::default(),
            threads: 2,
            buffers: 4,
            buffer_size: 64 << 10,
            max_request: 4 << 10,
            bulk_chunk: 1 << 20,
            transfer_timeout: Duration::from_secs(30),
            reply_cache_per_client: 64,
            reply_cache_clients: 1024,
        }
    }
}

/// When a client resends and backs off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// How long to wait for a reply before resending with the same xid.
    pub timeout: Duration,
    /// Resends after the first send before [`crate::RpcError::Timeout`].
    /// An early reply (the server has the request and executes it) starts
    /// the count over, so a handler may run longer than
    /// `timeout × resends` while its server is alive.
    pub resends: u32,
    /// First back-off after the service refused a request (its buffers
    /// were full); doubled per refusal up to `backoff_max`, with jitter.
    pub backoff: Duration,
    /// Longest back-off.
    pub backoff_max: Duration,
    /// Refusals in a row before [`crate::RpcError::Busy`].
    pub refusals: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            timeout: Duration::from_secs(10),
            resends: 5,
            backoff: Duration::from_millis(1),
            backoff_max: Duration::from_millis(200),
            refusals: 1000,
        }
    }
}

impl RetryPolicy {
    /// The back-off after the `n`-th refusal in a row (from 0), before
    /// jitter: `backoff · 2ⁿ`, capped at `backoff_max`.
    pub fn backoff_for(&self, n: u32) -> Duration {
        let f = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
        self.backoff.saturating_mul(f).min(self.backoff_max)
    }

    /// [`Self::backoff_for`] with jitter: a uniform draw from half of it
    /// to all of it (`unit` in `[0, 1)`), so that clients refused together
    /// do not come back together.
    pub fn jittered(&self, n: u32, unit: f64) -> Duration {
        let b = self.backoff_for(n);
        b / 2 + b.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
    }
}

/// How a client is set up.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Portal indices.
    pub portals: Portals,
    /// Resends and back-off.
    pub retry: RetryPolicy,
    /// The largest reply a call takes (its reply buffer).
    pub max_reply: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            portals: Portals::default(),
            retry: RetryPolicy::default(),
            max_reply: 64 << 10,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_doubles_then_stops_at_its_cap() {
        let p = RetryPolicy {
            backoff: Duration::from_millis(1),
            backoff_max: Duration::from_millis(10),
            ..RetryPolicy::default()
        };
        assert_eq!(p.backoff_for(0), Duration::from_millis(1));
        assert_eq!(p.backoff_for(1), Duration::from_millis(2));
        assert_eq!(p.backoff_for(3), Duration::from_millis(8));
        assert_eq!(p.backoff_for(4), Duration::from_millis(10));
        assert_eq!(p.backoff_for(1000), Duration::from_millis(10));
    }

    proptest! {
        #[test]
        fn jitter_stays_between_half_and_all_of_the_backoff(n in 0u32..64, unit in 0.0f64..1.0) {
            let p = RetryPolicy::default();
            let b = p.backoff_for(n);
            let j = p.jittered(n, unit);
            prop_assert!(j >= b / 2 && j <= b);
        }

        #[test]
        fn backoff_never_decreases_with_refusals(n in 0u32..100) {
            let p = RetryPolicy::default();
            prop_assert!(p.backoff_for(n) <= p.backoff_for(n + 1));
        }
    }
}
