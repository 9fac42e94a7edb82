//! An object store served two ways: over `portals-rpc` and over gRPC
//! (`tonic`), the benchmark's peer. Both servers keep their objects in the
//! same [`store::Store`]: one file per object, puts atomic and durable.
//!
//! - [`store`]: the on-disk store (always built);
//! - [`cli`]: the commands both command-line clients take;
//! - [`map`]: a read-only mapping of part of an object's file;
//! - [`raw`]: the store over plain TCP sockets, the floor under both
//!   services, with the binary `objstore-raw-server`;
//! - [`rpc`]: the service and client over `portals-rpc`, with the binaries
//!   `objstore-server` and `objstore` (CLI), standalone over TCP;
//! - [`grpc`]: the gRPC service and client (feature `grpc`, on by default),
//!   with the binaries `objstore-grpc-server`, `objstore-grpc` (CLI) and
//!   `objstore-load` (the load generator `ptl-bench` runs).

#![warn(missing_docs)]

pub mod cli;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod map;
pub mod raw;
pub mod rpc;
pub mod store;
