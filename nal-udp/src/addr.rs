//! The addresses of a peer: where it receives, and where its datagrams come
//! from.
//!
//! A UDP NAL receives on one socket but, with
//! [`UdpConfig::connected_sends`](crate::UdpConfig::connected_sends), sends
//! through one *connected* socket per peer, all bound to a second port (its
//! source address): the kernel then reuses the route it cached at `connect`
//! instead of looking one up for every datagram. Peers accept datagrams only
//! from addresses they know, so both are published.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// Where a peer receives and where its datagrams come from.
///
/// Its text form (for publishing through a key-value space) is the receive
/// address, followed by `/` and the source address when they differ:
/// `127.0.0.1:40000/127.0.0.1:40001`. A bare address parses as a peer that
/// sends from where it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    /// Where the peer receives: datagrams to it go here.
    pub recv: SocketAddr,
    /// Where the peer's datagrams come from.
    pub source: SocketAddr,
}

impl From<SocketAddr> for PeerAddr {
    /// A peer that sends from the address it receives on.
    fn from(addr: SocketAddr) -> Self {
        PeerAddr {
            recv: addr,
            source: addr,
        }
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.recv == self.source {
            write!(f, "{}", self.recv)
        } else {
            write!(f, "{}/{}", self.recv, self.source)
        }
    }
}

/// A peer address's text is not `ADDR` or `ADDR/ADDR`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a UDP peer address (expected IP:PORT or IP:PORT/IP:PORT): {0:?}")]
pub struct BadPeerAddr(pub String);

impl FromStr for PeerAddr {
    type Err = BadPeerAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPeerAddr(s.to_string());
        let (recv, source) = match s.split_once('/') {
            Some((r, src)) => (r, src),
            None => (s, s),
        };
        Ok(PeerAddr {
            recv: recv.parse().map_err(|_| bad())?,
            source: source.parse().map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips_and_stays_short_when_both_are_one() {
        let one: PeerAddr = "127.0.0.1:4000".parse::<SocketAddr>().unwrap().into();
        assert_eq!(one.to_string(), "127.0.0.1:4000");
        let two = PeerAddr {
            recv: "[::1]:4000".parse().unwrap(),
            source: "[::1]:4001".parse().unwrap(),
        };
        assert_eq!(two.to_string(), "[::1]:4000/[::1]:4001");
        for p in [one, two] {
            assert_eq!(p.to_string().parse::<PeerAddr>(), Ok(p));
        }
    }

    #[test]
    fn malformed_text_is_a_typed_error() {
        for s in [
            "",
            "127.0.0.1",
            "127.0.0.1:4000/",
            "/127.0.0.1:4000",
            "127.0.0.1:4000/x:1",
            "a/b/c",
        ] {
            assert_eq!(
                s.parse::<PeerAddr>(),
                Err(BadPeerAddr(s.to_string())),
                "{s:?}"
            );
        }
    }
}
