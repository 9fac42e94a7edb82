//! # nal-udp
//!
//! The UDP network abstraction layer for [`portals`]. Its core is
//! [`proto`], a sans-I/O reliability protocol: per-peer sequencing with
//! cumulative and selective acks, RTT-estimated retransmission, window flow
//! control, and Open-MX-style size classes where large messages are pulled
//! by the receiver once it knows how much it wants. The socket driver that
//! runs it over a UDP socket is built on [`proto::Endpoint`]'s poll-style
//! API (see its documentation for the loop a driver runs).

#![warn(missing_docs)]

#[doc(hidden)]
pub mod fuzzing;
pub mod proto;

pub use proto::{
    Config, ConfigError, EagerCompletion, Endpoint, Event, MsgId, OutPayload, PayloadSource,
    PeerId, SendError, Sink, Stats, HEADER_LEN,
};
