//! The object store over gRPC (`tonic`): the benchmark's peer for the
//! portals-rpc service. Same operations, same [`Store`](crate::store::Store);
//! object data streams in [`CHUNK`]-byte messages both ways.

// tonic's API hands `Status` (176 bytes) around by value in every result;
// boxing it only here would not make the calls cheaper.
#![allow(clippy::result_large_err)]

pub mod client;
pub mod server;

/// The generated messages and service stubs (`proto/objstore.proto`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("objstore");
}

/// Bytes of object data per streamed message (tonic refuses messages over
/// 4 MiB by default; 1 MiB keeps well under it and amortises framing).
pub const CHUNK: usize = 1 << 20;

/// Largest message either side accepts: a chunk plus room for the name.
pub const MAX_MESSAGE: usize = CHUNK + 4096;
