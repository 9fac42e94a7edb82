//! # portals-rpc
//!
//! Remote procedure calls and bulk transfers on the Portals engine, in the
//! style of Lustre's ptlrpc over LNet.
//!
//! * A [`Service`] posts a ring of large request buffers on its request
//!   portal, each with a high-water mark of the largest request, so that a
//!   request is never split across buffers (seed 001 §5, the mechanism the
//!   MPI layer uses for unexpected messages). Its threads take requests in
//!   arrival order, run a [`Handler`] (plain blocking Rust) and put the
//!   reply back to the client. A drained buffer is posted again; while all
//!   are full the engine refuses requests and clients back off.
//! * A [`Client`] gives each request a 64-bit xid carried in the match
//!   bits ([`bits`]: a few bits of message kind, the rest xid). Before
//!   sending, it posts the reply entry for the xid and, for bulk, exposes
//!   the caller's buffer as a descriptor matched on the xid — zero copies:
//!   the server moves bulk data one-sided ([`Bulk::push`] puts into it,
//!   [`Bulk::pull`] gets from it) in chunks of its choosing, so an object
//!   of any size streams through a chunk-sized buffer;
//!   [`Bulk::pull_stream`] keeps several chunk gets in flight while the
//!   handler consumes the oldest, [`Bulk::push_stream`] several chunk puts
//!   while it fills the next, and [`Bulk::push_from`] pushes straight from
//!   the handler's memory (a mapped file: no copy on the server). A call's event queue and reply buffer
//!   come from the client's free list and are reused by its next calls;
//!   its match entries are per call, matched on its xid.
//! * An unanswered request is resent with the same xid after
//!   [`RetryPolicy::timeout`]; the service's reply cache ([`cache`]) keeps
//!   each client's recent replies, so a resent request executes once and
//!   gets its first reply again; a resend that finds its request executing
//!   is answered with an early reply, which starts the client's resend
//!   budget over (a handler streaming a large object may take longer than
//!   the timeout). A refused request (negative
//!   acknowledgment) is resent after a jittered, growing back-off; a
//!   request is never lost silently: every call ends in its reply or a
//!   typed [`RpcError`].
//! * A request larger than the service's maximum (learned at
//!   [`Client::connect`]) fails before it is sent
//!   ([`RpcError::RequestTooLarge`]). A server the transport gives up on
//!   fails the calls to it ([`RpcError::PeerFailed`]); a client that dies
//!   mid-bulk fails that handler's transfer ([`BulkError::PeerFailed`]),
//!   its cached replies are freed, and the service keeps serving others.
//! * Transports: inside a `ptlrun` job, whatever the job runs on (TCP, UDP,
//!   shared memory); standalone, a long-lived server that clients dial as
//!   they come and go, over TCP ([`standalone::listen`],
//!   [`standalone::dial`]; the job key admits them).
//!
//! ## Example
//!
//! Rank 0 serves; every other rank calls it (run with `ptlrun -n 3`).
//!
//! ```no_run
//! use portals_rpc::{Client, ClientConfig, HandlerError, Request, Service, ServiceConfig};
//!
//! const ECHO: u32 = 1;
//! const STORE: u32 = 2; // bulk write: the client sends an object
//! const FETCH: u32 = 3; // bulk read: the client receives one
//!
//! let job = portals_runtime::join()?;
//! let ni = job.ni();
//! if job.rank() == 0 {
//!     let svc = Service::new(ni, ServiceConfig::default())?;
//!     let stop = svc.stopper();
//!     let handler = |req: &mut Request<'_>| -> Result<Vec<u8>, HandlerError> {
//!         match req.opcode() {
//!             ECHO => Ok(req.body().to_vec()),
//!             STORE => {
//!                 let bulk = req.bulk().ok_or("no bulk buffer")?;
//!                 // Stream through one chunk-sized buffer.
//!                 let mut chunk = vec![0; bulk.chunk()];
//!                 let mut off = 0;
//!                 while off < bulk.len() {
//!                     chunk.resize((bulk.len() - off).min(bulk.chunk() as u64) as usize, 0);
//!                     bulk.pull(off, &mut chunk)?;
//!                     off += chunk.len() as u64; // ... write `chunk` somewhere
//!                 }
//!                 Ok(off.to_le_bytes().to_vec())
//!             }
//!             FETCH => {
//!                 let bulk = req.bulk().ok_or("no bulk buffer")?;
//!                 let data = vec![7u8; bulk.len() as usize];
//!                 bulk.push_all(&data)?;
//!                 Ok(Vec::new())
//!             }
//!             _ => { stop.stop(); Ok(Vec::new()) }
//!         }
//!     };
//!     svc.serve(&handler)?;
//! } else {
//!     let client = Client::connect(ni, job.id(0), ClientConfig::default())?;
//!     assert_eq!(client.call(ECHO, b"hello")?, b"hello");
//!     let object = vec![1u8; 8 << 20];
//!     client.call_write(STORE, b"key", &object)?;
//!     let mut back = vec![0u8; 8 << 20];
//!     client.call_read(FETCH, b"key", &mut back)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod bits;
mod borrowed;
mod bulk;
pub mod cache;
mod client;
mod config;
mod error;
mod idle;
mod service;
pub mod standalone;
mod stream;
mod transfer;
pub mod wire;

pub use bulk::Bulk;
pub use client::{BulkArg, Client};
pub use config::{ClientConfig, Portals, RetryPolicy, ServiceConfig};
pub use error::{BulkError, HandlerError, RpcError, ServiceError, WireError};
pub use service::{Handler, Request, Service, ServiceStats, Stopper};
pub use stream::MAX_BULK_DEPTH;
pub use wire::{BulkKind, ServiceInfo, Status};
