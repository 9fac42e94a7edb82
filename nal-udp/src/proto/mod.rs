//! The UDP transport's protocol core, sans I/O.
//!
//! No sockets, threads, clocks or randomness: the driver passes the time into
//! every call and moves datagrams between [`Endpoint`] and the network, in the
//! style of `quinn-proto`. The same inputs always give the same outputs, which
//! is what the deterministic simulator in the tests relies on.
//!
//! # Protocol
//!
//! * **Sequencing.** Each ordered pair of processes has a 64-bit sequence
//!   space (it never wraps). Message starts and eager fragments are
//!   sequenced; every datagram, whatever it carries, also carries a
//!   cumulative ack, the receiver's window and a selective-ack bitmap of up
//!   to 512 bits ([`wire`]). Duplicates are recognised by sequence number and
//!   dropped.
//! * **Acks.** Coalesced: held back up to [`Config::ack_delay`] or
//!   [`Config::ack_every`] datagrams, riding on any datagram going the other
//!   way, but sent at once when a datagram arrives out of order, fills a
//!   hole, is a duplicate, or a probe asks for one.
//! * **Retransmission.** A datagram is presumed lost once one transmitted
//!   [`Config::reorder_threshold`] transmissions after it is acknowledged
//!   (fast retransmit, also catching lost retransmissions); a flight too
//!   short for that many, with nothing queued behind it, needs one fewer
//!   than its length (early retransmit, RFC 5827). The last datagrams of a
//!   flight have nothing after them to reveal their loss (a blocking
//!   exchange: one message, then silence until the answer): a *tail loss
//!   probe* (after RFC 8985) resends the newest unacknowledged datagram,
//!   asking for an immediate ack, once the flight has gone unanswered for
//!   twice the path's round trip plus the peer's ack delay and
//!   [`Config::tail_probe_slack`]; the answer names every hole before it,
//!   and those go again at once. At most 8 probes per flight, between
//!   acknowledgments that make progress, without back-off or counting
//!   towards death, so an unneeded probe costs a datagram and an ack
//!   (module `tlp`). A receiver counts the retransmissions it already had
//!   and still owed an ack for (a late answer, not a loss) and reports the
//!   count in every datagram; the sender then waits longer before probes
//!   and retransmission timeouts (`TailProbe::back_off`, module `tlp`).
//!   Otherwise an RFC 6298 RTO (Karn's rule, `[rto_min,
//!   rto_max]`) resends only the oldest unacknowledged datagram and
//!   doubles, at most [`Config::max_backoff`] times in a row.
//! * **Redundancy on lossy paths.** Each receiver measures the share of a
//!   peer's sequenced datagrams that reached it only as a retransmission or
//!   a copy and reports it in every datagram; while a peer reports at least
//!   [`Config::copy_above_loss_ppm`], small sequenced datagrams
//!   ([`Config::copy_max_bytes`]) to it are sent twice, back to back, so a
//!   latency-bound exchange rarely waits for a probe (module `redundancy`).
//! * **Flow control.** A sender keeps at most
//!   `min(send_window, advertised window)` datagrams beyond the cumulative
//!   ack; a receiver buffers out-of-order datagrams only inside its window
//!   ([`Config::recv_window`], bounded memory per peer). Pull data is bounded
//!   by the blocks the receiver asks for. [`Config::max_inflight_bytes_per_peer`]
//!   is what a socket receive buffer needs per sending peer.
//! * **Size classes** (after Open-MX). *Tiny/small*: the payload fits in the
//!   first datagram (one `Msg`; there is no PIO/DMA split to justify two
//!   classes here). *Medium*: up to [`Config::eager_max`] (128 KiB by
//!   default), a `Msg` plus sequenced `Frag`s sent eagerly; each fragment is
//!   written into the sink at its offset as soon as it arrives, in any order.
//!   *Large*: a sequenced rendezvous (header and length); once it has been
//!   matched the receiver pulls the part it wants in blocks of fragments,
//!   several blocks in flight, re-requests what goes missing on its own
//!   timer, and sends a completion notice, repeated until acknowledged. A
//!   large message nobody wants costs a rendezvous and a notice.
//! * **Ordering.** [`Sink::on_message`] is called exactly once per message,
//!   in per-peer send order; each wanted byte reaches [`Sink::on_data`]
//!   exactly once.
//! * **Completion.** [`Event::SendComplete`] is reported exactly once per
//!   accepted send: for eager messages when `send` copies the payload or
//!   when the cumulative ack covers it ([`EagerCompletion`]); for large
//!   messages when the receiver's completion notice arrives, after which the
//!   payload is never read again.
//! * **Failure.** A peer that stays silent through [`Config::max_retransmits`]
//!   consecutive back-off steps of whichever timer waits on it (retransmission,
//!   pull, or keep-alive probe), and for at least [`Config::peer_timeout`],
//!   is declared dead: [`Event::PeerDead`], its
//!   pending sends complete with `ok: false`, its receives in progress are
//!   aborted ([`Sink::on_abort`]). While the application waits
//!   ([`Endpoint::note_waiting`]), a peer silent for
//!   [`Config::peer_timeout`] despite probes is declared dead too, even
//!   if nothing is outstanding towards it.
//! * **Hostile input.** Datagrams with a wrong job key, magic or version,
//!   from unknown or dead peers, misaddressed, oversized or malformed are
//!   dropped and counted ([`Stats`]); every number a peer sends is checked
//!   before use; nothing a peer sends can grow a queue beyond a fixed bound.

mod config;
mod endpoint;
mod liveness;
mod peer;
mod pool;
mod pull;
mod recv;
mod redundancy;
mod rtt;
mod send;
mod seq;
mod tlp;
mod types;
pub mod wire;

pub use config::{
    Config, ConfigError, EagerCompletion, MAX_EAGER_FRAGS, MAX_UDP_PAYLOAD, MIN_DATAGRAM,
};
pub use endpoint::Endpoint;
pub use types::{Event, MsgId, OutPayload, PayloadSource, PeerId, SendError, Sink, Stats};
pub use wire::HEADER_LEN;
