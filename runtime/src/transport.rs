//! Bringing up a rank's transport: bind, publish a *contact*, learn every
//! rank's, choose the transport the job uses, start it.
//!
//! A contact is `<host>|<network address>|<shared-memory address>` (`-`
//! where a rank has none): the host identity ([`crate::host`]) tells which
//! ranks share a host, the addresses how to reach them. Every rank sees the
//! same contacts, so every rank makes the same choice without talking
//! again:
//!
//! | `PTL_NAL` | every rank on this host | ranks on several hosts |
//! |---|---|---|
//! | `auto` (default) | shared memory | shared memory to the ranks of this host, TCP to the others ([`crate::mux`]) |
//! | `shm` | shared memory | error naming a rank elsewhere |
//! | `tcp`, `udp` | that | that |
//!
//! Under `auto` each pair of ranks agrees without talking: two ranks of
//! one host both pick shared memory for each other, two of different
//! hosts both pick TCP. A rank alone on its host runs on TCP only.

use std::net::SocketAddr;
use std::sync::Arc;

use nal_shm::{ShmAddr, ShmConfig, ShmEndpoint, ShmNal};
use nal_tcp::{TcpConfig, TcpEndpoint, TcpNal};
use nal_udp::{PeerAddr, UdpConfig, UdpEndpoint, UdpNal};
use portals::{Nal, NetworkInterface, NiConfig, ProcessId};

use crate::env::{JobOptions, NalKind};
use crate::error::RuntimeError;
use crate::job::process_id;
use crate::mux::{MuxNal, MuxWake};

/// What every rank published (its contact, as text), by rank.
pub(crate) type Published = Vec<(u32, String)>;

/// The running transport of a job.
#[derive(Debug, Clone)]
pub enum Transport {
    /// `nal-tcp`.
    Tcp(Arc<TcpNal>),
    /// `nal-udp`.
    Udp(Arc<UdpNal>),
    /// `nal-shm`.
    Shm(Arc<ShmNal>),
    /// `nal-shm` to the ranks of this host, `nal-tcp` to the others.
    Mixed {
        /// The shared-memory transport.
        shm: Arc<ShmNal>,
        /// The TCP transport.
        tcp: Arc<TcpNal>,
    },
}

/// The key under which `rank` publishes its [`Contact`] at the rendezvous.
pub(crate) fn contact_key(rank: u32) -> String {
    format!("addr.{rank}")
}

/// The shared-memory address in the contact `rank` published, if it
/// offered one: it names the inbox its launcher removes from `/dev/shm`
/// after it exited (see [`nal_shm::remove_inbox_name`]).
pub(crate) fn published_shm_addr(rank: u32, text: &str) -> Option<ShmAddr> {
    Contact::decode(rank, text).ok()?.shm?.parse().ok()
}

/// What a rank publishes: where it runs and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contact {
    /// Its host identity.
    pub host: String,
    /// Its network NAL's address (TCP socket address, UDP `PeerAddr`).
    pub net: Option<String>,
    /// Its shared-memory endpoint.
    pub shm: Option<String>,
    /// Cores online on its host, if its kernel said: with the hosts of
    /// every rank, each rank works out alike whether some host of the job
    /// is oversubscribed ([`job_oversubscribed`]).
    pub cores: Option<usize>,
}

impl Contact {
    /// The published text form.
    pub fn encode(&self) -> String {
        let part = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".into());
        let cores = self.cores.map_or_else(|| "-".into(), |c| c.to_string());
        format!(
            "{}|{}|{}|{cores}",
            self.host,
            part(&self.net),
            part(&self.shm)
        )
    }

    /// Parse what `rank` published.
    pub fn decode(rank: u32, text: &str) -> Result<Contact, RuntimeError> {
        let bad = || RuntimeError::BadAddress {
            rank,
            addr: text.to_string(),
        };
        let mut parts = text.split('|');
        let (Some(host), Some(net), Some(shm), Some(cores), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        if host.is_empty() || net.is_empty() || shm.is_empty() {
            return Err(bad());
        }
        let cores = match cores {
            "-" => None,
            c => Some(c.parse::<usize>().ok().filter(|&c| c > 0).ok_or_else(bad)?),
        };
        let part = |p: &str| (p != "-").then(|| p.to_string());
        Ok(Contact {
            host: host.to_string(),
            net: part(net),
            shm: part(shm),
            cores,
        })
    }
}

/// Parse one address per rank (a socket address for `nal-tcp`, a
/// [`PeerAddr`] for `nal-udp`, a [`ShmAddr`] for `nal-shm`), taking it
/// from each rank's contact with `pick`.
fn parse_peers<A: std::str::FromStr>(
    contacts: &[(u32, Contact)],
    pick: impl Fn(&Contact) -> &Option<String>,
) -> Result<Vec<(ProcessId, A)>, RuntimeError> {
    contacts
        .iter()
        .map(|(rank, c)| {
            let bad = || RuntimeError::BadAddress {
                rank: *rank,
                addr: c.encode(),
            };
            let text = pick(c).as_deref().ok_or_else(bad)?;
            text.parse()
                .map(|a| (process_id(*rank), a))
                .map_err(|_| bad())
        })
        .collect()
}

/// A bound network endpoint, before the job's choice is known.
enum NetEndpoint {
    Tcp(TcpEndpoint),
    Udp(UdpEndpoint),
}

/// The transports a rank offers, for `o.nal`: a network endpoint (for
/// `auto`, TCP, which is what a job that spans hosts falls back to) and a
/// shared-memory one (for `auto` and `shm`).
fn bind_endpoints(
    o: &JobOptions,
) -> Result<(Option<NetEndpoint>, Option<ShmEndpoint>), RuntimeError> {
    let net = match o.nal {
        NalKind::Tcp | NalKind::Auto => {
            let mut cfg = TcpConfig {
                bind: SocketAddr::new(o.bind, 0),
                progress: o.progress,
                backend: o.backend,
                connect: o.connect,
                send_buffer: o.send_buffer,
                recv_buffer: o.recv_buffer,
                wake_per_message: o.tcp_wake_per_message,
                ..TcpConfig::default()
            };
            if let Some(d) = o.handback {
                cfg.handback = d;
            }
            Some(NetEndpoint::Tcp(TcpEndpoint::bind(cfg)?))
        }
        NalKind::Udp => {
            let mut cfg = UdpConfig {
                bind: SocketAddr::new(o.bind, 0),
                progress: o.progress,
                backend: o.backend,
                fault: o.udp_fault,
                connected_sends: o.udp_connected_sends,
                ..UdpConfig::default()
            };
            if let Some(d) = o.handback {
                cfg.handback = d;
            }
            if let Some(n) = o.udp_max_datagram {
                cfg.protocol.max_datagram = n;
            }
            if let Some(t) = o.udp_peer_timeout {
                cfg.protocol.peer_timeout = t;
            }
            if let Some(c) = o.udp_copy_above {
                cfg.protocol.copy_above_loss_ppm = c;
            }
            if let Some(n) = o.recv_buffer {
                cfg.recv_buffer = n;
            }
            if let Some(n) = o.send_buffer {
                cfg.send_buffer = n;
            }
            Some(NetEndpoint::Udp(UdpEndpoint::bind(cfg)?))
        }
        NalKind::Shm => None,
    };
    let shm = match o.nal {
        NalKind::Auto | NalKind::Shm => {
            let mut cfg = ShmConfig {
                progress: o.progress,
                cma: o.shm_cma,
                connect_timeout: o.timeout,
                ..ShmConfig::default()
            };
            if let Some(d) = o.handback {
                cfg.handback = d;
            }
            if let Some(n) = o.shm_ring {
                cfg.ring_bytes = n;
            }
            if let Some(n) = o.shm_cma_chunk {
                cfg.cma_chunk = n;
            }
            Some(ShmEndpoint::bind(cfg)?)
        }
        NalKind::Tcp | NalKind::Udp => None,
    };
    Ok((net, shm))
}

/// Which transport the job runs on, from every rank's contact (the same
/// answer on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Net,
    Shm,
    Mixed,
}

fn choose(o: &JobOptions, me: &Contact, all: &[(u32, Contact)]) -> Result<Choice, RuntimeError> {
    let elsewhere = all.iter().find(|(_, c)| c.host != me.host);
    // Besides this rank itself, which is in `all` too.
    let neighbours = all.iter().filter(|(_, c)| c.host == me.host).count() > 1;
    match (o.nal, elsewhere) {
        (NalKind::Tcp | NalKind::Udp, _) => Ok(Choice::Net),
        (NalKind::Auto, Some(_)) if neighbours => Ok(Choice::Mixed),
        (NalKind::Auto, Some(_)) => Ok(Choice::Net),
        (NalKind::Auto | NalKind::Shm, None) => Ok(Choice::Shm),
        (NalKind::Shm, Some((rank, c))) => Err(RuntimeError::NotOneHost {
            rank: *rank,
            host: c.host.clone(),
            mine: me.host.clone(),
        }),
    }
}

/// Bind this rank's endpoints, hand its contact to `exchange` (which
/// returns every rank's, this one's included), choose the transport (see
/// the module docs) and start it under a new network interface.
pub(crate) fn bring_up(
    rank: u32,
    job_key: u64,
    o: &JobOptions,
    exchange: impl FnOnce(&str) -> Result<Published, RuntimeError>,
) -> Result<BroughtUp, RuntimeError> {
    let mut ni_cfg = NiConfig::new(process_id(rank), job_key);
    ni_cfg.wait_spin = o.wait_spin;
    if let Some(d) = o.wait_spin_busy {
        ni_cfg.wait_spin_busy = d;
    }
    let (net, shm) = bind_endpoints(o)?;
    let me = Contact {
        host: crate::host::host_id(),
        net: net.as_ref().map(|n| match n {
            NetEndpoint::Tcp(ep) => ep.local_addr().to_string(),
            NetEndpoint::Udp(ep) => ep.addr().to_string(),
        }),
        shm: shm.as_ref().map(|ep| ep.addr().to_string()),
        cores: online_cores(),
    };
    let contacts = exchange(&me.encode())?
        .into_iter()
        .map(|(r, text)| Contact::decode(r, &text).map(|c| (r, c)))
        .collect::<Result<Vec<_>, _>>()?;
    let neighbours = contacts.iter().filter(|(_, c)| c.host == me.host).count();
    // A job of one exchanges nothing, and one rank never outnumbers a
    // host's cores: no contacts, no crowded host.
    let job_crowded = job_oversubscribed(&contacts);
    let crowded = oversubscribed(neighbours, online_cores());
    ni_cfg.wait_yield = o.wait_yield.unwrap_or(crowded);
    let spare = spare_core_per_rank(neighbours, online_cores(), allowed_cpus());
    // A progress thread with a core of its own moves data in parallel with
    // the application; one that shares the application's core only takes
    // its time when woken between two of its tests.
    ni_cfg.test_drives = o.test_drives.unwrap_or(!spare);
    let nice = progress_nice(o.progress_nice, crowded);
    let mut net = net;
    match &mut net {
        Some(NetEndpoint::Tcp(ep)) => {
            ep.set_early_takeover(o.tcp_early_takeover.unwrap_or(spare));
            ep.set_crowded(crowded);
            ep.set_progress_nice(nice);
            ep.set_progress_cpus(o.progress_cpus.clone());
        }
        Some(NetEndpoint::Udp(ep)) => {
            ep.set_crowded(crowded);
            ep.set_progress_nice(nice);
            ep.set_progress_cpus(o.progress_cpus.clone());
        }
        None => {}
    }
    let mut shm = shm;
    if let Some(ep) = &mut shm {
        ep.set_progress_nice(nice);
        ep.set_progress_cpus(o.progress_cpus.clone());
        // On by default: a dozing shared-memory progress thread is woken
        // only for work (a single-copy read, a request to answer), never
        // for a small message nor beside a waiter, so it does not preempt
        // a bound rank's computation for what its next call does anyway.
        ep.set_early_takeover(o.shm_early_takeover.unwrap_or(true));
        ep.set_crowded(crowded);
    }
    let mut transport = None;
    let ni = match (choose(o, &me, &contacts)?, net, shm) {
        (Choice::Shm, _, Some(ep)) => {
            let peers: Vec<(ProcessId, ShmAddr)> = parse_peers(&contacts, |c| &c.shm)?;
            NetworkInterface::init(ni_cfg, |core| {
                let n = ep.start(core, peers)?;
                transport = Some(Transport::Shm(n.clone()));
                Ok(n as Arc<dyn Nal>)
            })?
        }
        (Choice::Mixed, Some(NetEndpoint::Tcp(tcp_ep)), Some(shm_ep)) => {
            let local: Vec<(u32, Contact)> = contacts
                .iter()
                .filter(|(_, c)| c.host == me.host)
                .cloned()
                .collect();
            let shm_peers: Vec<(ProcessId, ShmAddr)> = parse_peers(&local, |c| &c.shm)?;
            let tcp_peers: Vec<(ProcessId, SocketAddr)> = parse_peers(&contacts, |c| &c.net)?;
            let local_ids = shm_peers.iter().map(|(id, _)| *id).collect();
            let wake = MuxWake::new()?;
            NetworkInterface::init(ni_cfg, |core| {
                // Before the transports start, so that every wake-up of
                // the interface comes to the mux (see `crate::mux`).
                wake.install(&core);
                let shm = shm_ep.start(core.clone(), shm_peers)?;
                let tcp = tcp_ep.start(core, tcp_peers)?;
                let mux = MuxNal::new(
                    "shm+tcp",
                    shm.clone() as Arc<dyn Nal>,
                    tcp.clone() as Arc<dyn Nal>,
                    local_ids,
                    wake,
                )?;
                transport = Some(Transport::Mixed { shm, tcp });
                Ok(Arc::new(mux) as Arc<dyn Nal>)
            })?
        }
        (Choice::Net, Some(NetEndpoint::Tcp(ep)), _) => {
            let peers: Vec<(ProcessId, SocketAddr)> = parse_peers(&contacts, |c| &c.net)?;
            NetworkInterface::init(ni_cfg, |core| {
                let n = ep.start(core, peers)?;
                transport = Some(Transport::Tcp(n.clone()));
                Ok(n as Arc<dyn Nal>)
            })?
        }
        (Choice::Net, Some(NetEndpoint::Udp(ep)), _) => {
            let peers: Vec<(ProcessId, PeerAddr)> = parse_peers(&contacts, |c| &c.net)?;
            NetworkInterface::init(ni_cfg, |core| {
                let n = ep.start(core, peers)?;
                transport = Some(Transport::Udp(n.clone()));
                Ok(n as Arc<dyn Nal>)
            })?
        }
        // `bind_endpoints` binds what `choose` can pick for the same
        // options; reaching this is a bug here, reported, not a panic.
        (choice, _, _) => {
            return Err(RuntimeError::Launch(format!(
                "no endpoint bound for the chosen transport ({choice:?}, {})",
                o.nal.name()
            )))
        }
    };
    let transport = transport.ok_or(RuntimeError::Portals(portals::PtlError::Shutdown))?;
    Ok(BroughtUp {
        ni,
        transport,
        oversubscribed: job_crowded,
    })
}

/// What [`bring_up`] made.
pub(crate) struct BroughtUp {
    /// The network interface.
    pub ni: NetworkInterface,
    /// The transport under it.
    pub transport: Transport,
    /// Whether some host of the job runs more of its ranks than it has
    /// cores online ([`job_oversubscribed`]); the same at every rank.
    pub oversubscribed: bool,
}

/// The nice steps a progress thread runs below its application: as asked,
/// else the transports' default where each rank has a core, none on a
/// crowded host (favoured progress threads there take the cores other
/// ranks compute on).
fn progress_nice(asked: Option<u32>, crowded: bool) -> u32 {
    asked.unwrap_or(if crowded {
        0
    } else {
        nal_sys::sched::DEFAULT_NICE_STEPS
    })
}

/// Whether some host of the job runs more ranks than it has cores online,
/// worked out from every rank's contact, so every rank answers alike
/// (the MPI layer picks its collective algorithms by it, and all ranks
/// must run the same one). A host's cores are the fewest any of its ranks
/// reported; a host none of whose ranks knew counts as not oversubscribed.
pub(crate) fn job_oversubscribed(contacts: &[(u32, Contact)]) -> bool {
    let mut hosts: std::collections::HashMap<&str, (usize, Option<usize>)> =
        std::collections::HashMap::new();
    for (_, c) in contacts {
        let h = hosts.entry(c.host.as_str()).or_insert((0, None));
        h.0 += 1;
        if let Some(n) = c.cores {
            h.1 = Some(h.1.map_or(n, |m: usize| m.min(n)));
        }
    }
    hosts
        .values()
        .any(|&(ranks, cores)| oversubscribed(ranks, cores))
}

/// Whether `ranks` processes of the job on this host outnumber its `cores`
/// (`None`: unknown, assume not).
fn oversubscribed(ranks: usize, cores: Option<usize>) -> bool {
    cores.is_some_and(|c| ranks > c)
}

/// Whether the progress thread of each of `ranks` processes of the job on
/// this host has a core its application thread does not need: twice as
/// many `cores` as ranks, and this process not bound to a single CPU
/// (`allowed`; a bound rank's progress thread shares its core whatever the
/// host has). TCP's early take-over pays only then: on 2 cores, 2 bound
/// ranks ran cg, halo and a collective loop 27–52 % slower with it (every
/// arrival during a compute step preempting the application), and 4 ranks
/// 40–50 % slower, while it lifted overlap at 256–512 KB from 0 to 76–97 %
/// (PERFORMANCE.md, "The state after stop 32"). `None`: unknown, assume
/// not.
fn spare_core_per_rank(ranks: usize, cores: Option<usize>, allowed: Option<usize>) -> bool {
    cores.is_some_and(|c| ranks.saturating_mul(2) <= c) && allowed.is_none_or(|a| a >= 2)
}

/// How many CPUs this process may run on (its affinity), if the kernel
/// says.
fn allowed_cpus() -> Option<usize> {
    nal_sys::affinity::allowed_cpus().ok().map(|c| c.len())
}

/// The cores of this host that are online, if the kernel says. Not this
/// process's affinity: a launcher that binds each rank to a core of its
/// own (`ptl-bench`, `mpirun --bind-to core`) leaves every rank one core,
/// which says nothing about how many the host's ranks share.
pub(crate) fn online_cores() -> Option<usize> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contact(host: &str) -> Contact {
        Contact {
            host: host.into(),
            net: Some("127.0.0.1:4000".into()),
            shm: Some(format!("shm:1:{:032x}", 0xabcu32)),
            cores: Some(16),
        }
    }

    #[test]
    fn contacts_round_trip_and_a_malformed_one_names_its_rank() {
        let c = contact("nodeA-1234");
        assert_eq!(Contact::decode(3, &c.encode()).expect("parses"), c);
        let none = Contact {
            host: "h".into(),
            net: None,
            shm: None,
            cores: None,
        };
        assert_eq!(none.encode(), "h|-|-|-");
        assert_eq!(Contact::decode(0, "h|-|-|-").expect("parses"), none);
        for bad in [
            "",
            "h",
            "h|a",
            "h|a|b",
            "h|a|b|c",
            "h|a|b|0",
            "h|a|b|-1",
            "h|a|b|4|e",
            "|a|b|4",
            "h||b|4",
        ] {
            assert!(
                matches!(
                    Contact::decode(7, bad),
                    Err(RuntimeError::BadAddress { rank: 7, .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn published_addresses_parse_per_transport_and_a_bad_one_names_its_rank() {
        let contacts = vec![
            (
                0,
                Contact {
                    net: Some("127.0.0.1:4000".into()),
                    ..contact("h")
                },
            ),
            (
                1,
                Contact {
                    net: Some("127.0.0.1:4001/127.0.0.1:4002".into()),
                    ..contact("h")
                },
            ),
        ];
        let udp: Vec<(ProcessId, PeerAddr)> = parse_peers(&contacts, |c| &c.net).expect("udp");
        assert_eq!(
            udp[0].1,
            PeerAddr::from(SocketAddr::from(([127, 0, 0, 1], 4000)))
        );
        assert_eq!(udp[1].0, process_id(1));
        assert_eq!(udp[1].1.source, SocketAddr::from(([127, 0, 0, 1], 4002)));
        // The pair form is not a TCP address.
        let tcp = parse_peers::<SocketAddr>(&contacts, |c| &c.net);
        assert!(
            matches!(&tcp, Err(RuntimeError::BadAddress { rank: 1, addr }) if addr.contains('/')),
            "{tcp:?}"
        );
        // A rank that offers no shared memory cannot be reached by it.
        let mut no_shm = contacts.clone();
        no_shm[1].1.shm = None;
        assert!(matches!(
            parse_peers::<ShmAddr>(&no_shm, |c| &c.shm),
            Err(RuntimeError::BadAddress { rank: 1, .. })
        ));
    }

    #[test]
    fn waiters_yield_only_where_ranks_outnumber_cores() {
        assert!(oversubscribed(4, Some(2)));
        assert!(!oversubscribed(2, Some(2)));
        assert!(!oversubscribed(1, Some(8)));
        assert!(!oversubscribed(64, None), "unknown cores: spin as before");
        assert!(online_cores().is_some_and(|n| n >= 1));
    }

    #[test]
    fn progress_threads_are_favoured_unless_the_host_is_crowded_or_told_otherwise() {
        let d = nal_sys::sched::DEFAULT_NICE_STEPS;
        assert_eq!(progress_nice(None, false), d);
        assert_eq!(progress_nice(None, true), 0);
        assert_eq!(progress_nice(Some(3), true), 3);
        assert_eq!(progress_nice(Some(0), false), 0);
    }

    #[test]
    fn a_job_is_oversubscribed_when_any_host_runs_more_ranks_than_its_cores() {
        let on = |host: &str, cores: Option<usize>| Contact {
            cores,
            ..contact(host)
        };
        let job = |cs: &[Contact]| -> Vec<(u32, Contact)> {
            cs.iter()
                .cloned()
                .enumerate()
                .map(|(r, c)| (r as u32, c))
                .collect()
        };
        // Two hosts of 2 cores: 2 ranks each fit, 3 on one do not.
        let fits = job(&[
            on("a", Some(2)),
            on("a", Some(2)),
            on("b", Some(2)),
            on("b", Some(2)),
        ]);
        assert!(!job_oversubscribed(&fits));
        let mut crowded = fits.clone();
        crowded.push((4, on("b", Some(2))));
        assert!(
            job_oversubscribed(&crowded),
            "host b runs 3 ranks on 2 cores"
        );
        // The fewest cores any rank of a host reported count.
        let mixed = job(&[on("a", Some(8)), on("a", Some(1))]);
        assert!(job_oversubscribed(&mixed));
        // A host whose cores nobody knew is not counted as crowded.
        let unknown = job(&[on("a", None), on("a", None), on("a", None)]);
        assert!(!job_oversubscribed(&unknown));
        // Every rank decides from the same contacts, whatever its own host.
        let rotated: Vec<_> = crowded.iter().rev().cloned().collect();
        assert_eq!(job_oversubscribed(&rotated), job_oversubscribed(&crowded));
    }

    #[test]
    fn the_early_takeover_needs_a_spare_core_per_rank_and_an_unbound_rank() {
        assert!(spare_core_per_rank(1, Some(2), Some(2)));
        assert!(spare_core_per_rank(4, Some(8), None));
        assert!(
            !spare_core_per_rank(2, Some(2), Some(2)),
            "2 ranks on 2 cores"
        );
        assert!(
            !spare_core_per_rank(1, Some(16), Some(1)),
            "bound to one CPU"
        );
        assert!(!spare_core_per_rank(1, None, Some(4)), "unknown cores");
        assert!(allowed_cpus().is_some_and(|n| n >= 1));
    }

    /// Four ranks on this host against the cores it has: the job's
    /// interfaces yield exactly when they outnumber them, unless told.
    #[test]
    fn a_job_of_one_spins_and_the_option_forces_either_way() {
        let one = |wait_yield| {
            let o = JobOptions {
                nal: NalKind::Tcp,
                wait_yield,
                timeout: std::time::Duration::from_secs(5),
                ..JobOptions::default()
            };
            let ni = bring_up(0, 7, &o, |c| Ok(vec![(0, c.to_string())]))
                .expect("up")
                .ni;
            ni.wait_yields()
        };
        assert!(!one(None), "one rank never outnumbers the cores");
        assert!(one(Some(true)));
        assert!(!one(Some(false)));
    }

    #[test]
    fn the_choice_follows_the_hosts_and_the_option() {
        let one_host = vec![(0, contact("a")), (1, contact("a"))];
        let two_hosts = vec![(0, contact("a")), (1, contact("b"))];
        let me = contact("a");
        let with = |nal| JobOptions {
            nal,
            ..JobOptions::default()
        };
        assert_eq!(JobOptions::default().nal, NalKind::Auto);
        assert_eq!(
            choose(&with(NalKind::Auto), &me, &one_host).ok(),
            Some(Choice::Shm)
        );
        assert_eq!(
            choose(&with(NalKind::Auto), &me, &two_hosts).ok(),
            Some(Choice::Net)
        );
        assert_eq!(
            choose(&with(NalKind::Shm), &me, &one_host).ok(),
            Some(Choice::Shm)
        );
        assert_eq!(
            choose(&with(NalKind::Tcp), &me, &one_host).ok(),
            Some(Choice::Net)
        );
        assert_eq!(
            choose(&with(NalKind::Udp), &me, &one_host).ok(),
            Some(Choice::Net)
        );
        // Alone on its host, a rank runs on TCP; with a neighbour, on both.
        let mixed = vec![(0, contact("a")), (1, contact("a")), (2, contact("b"))];
        assert_eq!(
            choose(&with(NalKind::Auto), &me, &mixed).ok(),
            Some(Choice::Mixed)
        );
        assert_eq!(
            choose(&with(NalKind::Auto), &contact("b"), &mixed).ok(),
            Some(Choice::Net)
        );
        assert_eq!(
            choose(&with(NalKind::Tcp), &me, &mixed).ok(),
            Some(Choice::Net)
        );
        match choose(&with(NalKind::Shm), &me, &two_hosts) {
            Err(e @ RuntimeError::NotOneHost { rank: 1, .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("rank 1") && msg.contains("PTL_NAL"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }
}
