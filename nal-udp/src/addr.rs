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

use rustc_hash::FxHashMap;

use crate::proto::{wire, PeerId};

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

/// The peers' addresses, for naming who sent a received datagram and whom
/// an ICMP error is about.
///
/// A source address may belong to more than one peer. Source ports are
/// bound with `SO_REUSEPORT` (every per-peer connected socket shares its
/// process's), and when Linux picks a free port for such a bind it counts a
/// port that only other reuse-port sockets of the same user hold as free:
/// two ranks of one job, both running as one user, can draw the same
/// source port (about one job in five thousand with four ranks). So the
/// sender is the peer the datagram's header names, accepted when the
/// datagram came from one of that peer's addresses, rather than whoever
/// registered the address first.
// Fx, not SipHash: looked up for every datagram, and only known peers are
// ever inserted, so a sender cannot grow a bucket.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    /// Each peer's addresses.
    peers: FxHashMap<PeerId, PeerAddr>,
    /// The first peer registered at each address, receive or source.
    by_addr: FxHashMap<SocketAddr, PeerId>,
}

impl Directory {
    /// Register `peer`'s addresses; a peer already known keeps its first.
    pub(crate) fn insert(&mut self, peer: PeerId, addr: PeerAddr) {
        self.peers.entry(peer).or_insert(addr);
        self.by_addr.entry(addr.recv).or_insert(peer);
        self.by_addr.entry(addr.source).or_insert(peer);
    }

    /// The peer receiving at `addr`, or sending from it (ICMP errors name
    /// the address a datagram was sent to: a receive address, which only
    /// one process can hold).
    pub(crate) fn at(&self, addr: &SocketAddr) -> Option<PeerId> {
        self.by_addr.get(addr).copied()
    }

    /// Who sent `datagram`, received from `from`: the peer its header
    /// names, if `from` is one of that peer's addresses. Otherwise the peer
    /// registered at `from`, or `u64::MAX` (no peer) for an unknown address
    /// or none; the protocol then counts the datagram as misaddressed or
    /// from an unknown peer, and drops it.
    pub(crate) fn sender(&self, from: Option<SocketAddr>, datagram: &[u8]) -> PeerId {
        let Some(from) = from else { return u64::MAX };
        if let Some(claimed) = wire::claimed_source(datagram) {
            if self
                .peers
                .get(&claimed)
                .is_some_and(|a| a.recv == from || a.source == from)
            {
                return claimed;
            }
        }
        self.at(&from).unwrap_or(u64::MAX)
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

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// An acknowledgment whose header names `src`.
    fn claiming(src: PeerId) -> Vec<u8> {
        let sack = wire::Sack::ZERO;
        let fields = wire::HeaderFields {
            job_key: 1,
            src,
            dst: 0,
            cum_ack: 0,
            window: 1,
            sack: &sack,
            ack_requested: false,
            transmission: wire::Transmission::Original,
            loss_report: 0,
            late_dups: 0,
        };
        let mut d = vec![0u8; 256];
        let n = wire::encode(&mut d, &fields, &wire::FrameOut::Ack, |_| {}).unwrap();
        d.truncate(n);
        d
    }

    #[test]
    fn two_peers_sharing_a_source_port_are_each_named_by_their_header() {
        let shared = addr("127.0.0.1:5000");
        let mut dir = Directory::default();
        dir.insert(
            1,
            PeerAddr {
                recv: addr("127.0.0.1:4001"),
                source: shared,
            },
        );
        dir.insert(
            2,
            PeerAddr {
                recv: addr("127.0.0.1:4002"),
                source: shared,
            },
        );
        assert_eq!(dir.sender(Some(shared), &claiming(1)), 1);
        assert_eq!(dir.sender(Some(shared), &claiming(2)), 2);
        assert_eq!(dir.sender(Some(addr("127.0.0.1:4002")), &claiming(2)), 2);
        // ICMP names receive addresses, which are never shared.
        assert_eq!(dir.at(&addr("127.0.0.1:4002")), Some(2));
    }

    #[test]
    fn a_claim_from_another_peers_address_names_the_address_owner() {
        let mut dir = Directory::default();
        dir.insert(1, PeerAddr::from(addr("127.0.0.1:4001")));
        dir.insert(2, PeerAddr::from(addr("127.0.0.1:4002")));
        // Rank 2's address, claiming rank 1: handed over as rank 2's, for
        // the protocol to count as misaddressed.
        assert_eq!(dir.sender(Some(addr("127.0.0.1:4002")), &claiming(1)), 2);
        // Unknown address, unknown claim, no address, too short to claim.
        assert_eq!(
            dir.sender(Some(addr("127.0.0.1:9")), &claiming(1)),
            u64::MAX
        );
        assert_eq!(dir.sender(Some(addr("127.0.0.1:4001")), &claiming(7)), 1);
        assert_eq!(dir.sender(None, &claiming(1)), u64::MAX);
        assert_eq!(dir.sender(Some(addr("127.0.0.1:4001")), &[1, 2, 3]), 1);
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
