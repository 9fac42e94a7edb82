//! A client of the gRPC service: the CLI's and the load generator's.

use std::io::{Read, Write};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::proto::object_store_client::ObjectStoreClient;
use super::proto::{ListRequest, NameRequest, PutChunk};
use super::{CHUNK, MAX_MESSAGE};
use crate::store::ObjectInfo;

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Could not connect.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The connection opened, but the first call failed below the service
    /// (the server closed it, or spoke something other than gRPC): most
    /// likely not an `objstore-grpc-server` at that address.
    #[error(
        "{addr} does not answer as a gRPC object store ({why}); an objstore-server speaks \
         portals-rpc: use the `objstore` client (objstore-load: --rpc portals)"
    )]
    NotAnObjectStore {
        /// The address.
        addr: String,
        /// The first call's failure.
        why: String,
    },
    /// The server answered with an error (bad name, no such object, ...).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// Reading the data to put or writing the data got failed locally.
    #[error("{what}: {source}")]
    Local {
        /// What the client was doing.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Codes with which tonic reports a failure below the service (a closed
/// or garbled connection, no such service): the object store itself never
/// answers with them.
fn below_the_service(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unknown
            | tonic::Code::Cancelled
            | tonic::Code::Unavailable
            | tonic::Code::Unimplemented
    )
}

/// How long [`GrpcClient::connect`]'s first call may take before the
/// address counts as not a gRPC object store: an object store answers it
/// from memory in microseconds, a loaded host in well under a second.
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Result of client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// A connection to an object-store server.
#[derive(Debug, Clone)]
pub struct GrpcClient {
    inner: ObjectStoreClient<Channel>,
}

impl GrpcClient {
    /// Connect to `addr` (`host:port`).
    pub async fn connect(addr: &str) -> Result<GrpcClient> {
        Self::connect_within(addr, PROBE_TIMEOUT).await
    }

    /// Connect to `addr`, allowing the first call `probe_timeout` to be
    /// answered (see [`PROBE_TIMEOUT`]) before the address counts as not
    /// a gRPC object store.
    pub async fn connect_within(
        addr: &str,
        probe_timeout: std::time::Duration,
    ) -> Result<GrpcClient> {
        let err = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| ClientError::Status(tonic::Status::invalid_argument(e.to_string())))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(err)?;
        let mut c = GrpcClient {
            inner: ObjectStoreClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        };
        // One call, so that a server of another kind is named as such now
        // rather than as a bare transport error on the first real call. Any
        // answer of the service (the object, "no such object", "bad name")
        // will do.
        let probe = NameRequest {
            name: "objstore-connect-probe".into(),
        };
        //
        // Bounded: tonic's channel reopens a connection that fails before
        // its first request leaves (`Reconnect` goes from "connected" back
        // to "idle" without telling the caller), and a server of another
        // kind closes each one as soon as it has read the HTTP/2 preface;
        // and a server that accepts and never answers leaves the call
        // waiting. Either way the call would never end (the test suite
        // once saw no answer from an objstore-server after 60 s, on a
        // loaded host; the cause was not found).
        match tokio::time::timeout(probe_timeout, c.inner.stat(probe)).await {
            Err(_) => Err(ClientError::NotAnObjectStore {
                addr: addr.to_string(),
                why: format!("no answer to a gRPC call in {probe_timeout:?}"),
            }),
            Ok(Err(s)) if below_the_service(s.code()) => Err(ClientError::NotAnObjectStore {
                addr: addr.to_string(),
                why: format!("{}: {}", s.code(), s.message()),
            }),
            Ok(_) => Ok(c),
        }
    }

    /// Put an object held in memory (sent in [`CHUNK`]-byte slices, no copy).
    pub async fn put_bytes(&mut self, name: &str, data: Bytes) -> Result<u64> {
        let mut msgs = Vec::with_capacity(data.len() / CHUNK + 1);
        let mut off = 0;
        loop {
            let end = (off + CHUNK).min(data.len());
            msgs.push(PutChunk {
                name: if off == 0 {
                    name.to_string()
                } else {
                    String::new()
                },
                data: data.slice(off..end),
                last: end == data.len(),
            });
            off = end;
            if off >= data.len() {
                break;
            }
        }
        let reply = self.inner.put(tokio_stream::iter(msgs)).await?;
        Ok(reply.into_inner().size)
    }

    /// Put everything `src` yields, read in chunks on a blocking thread;
    /// `progress` is called with the bytes sent so far. If `src` fails the
    /// call is cancelled, so the server stores nothing.
    pub async fn put_reader(
        &mut self,
        name: &str,
        mut src: impl Read + Send + 'static,
        progress: impl Fn(u64) + Send + 'static,
    ) -> Result<u64> {
        let (tx, rx) = mpsc::channel::<PutChunk>(4);
        // On a read error the sender travels with the error, so the stream
        // stays open (not cleanly ended) until the call is dropped.
        let (fail_tx, fail_rx) = oneshot::channel::<(std::io::Error, mpsc::Sender<PutChunk>)>();
        let first_name = name.to_string();
        tokio::task::spawn_blocking(move || {
            let mut name = first_name;
            let mut sent = 0u64;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let n = match read_full(&mut src, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = fail_tx.send((e, tx));
                        return;
                    }
                };
                buf.truncate(n);
                // `read_full` returns a short chunk only at the end of the
                // data; the message that carries it (maybe empty) is the
                // last, and only it lets the server commit.
                let msg = PutChunk {
                    name: std::mem::take(&mut name),
                    data: Bytes::from(buf),
                    last: n < CHUNK,
                };
                if tx.blocking_send(msg).is_err() {
                    return; // the call ended (failed on the server)
                }
                sent += n as u64;
                progress(sent);
                if n < CHUNK {
                    return;
                }
            }
        });
        let call = self.inner.put(ReceiverStream::new(rx));
        tokio::select! {
            reply = call => Ok(reply?.into_inner().size),
            Ok((e, _tx)) = fail_rx => Err(ClientError::Local { what: "reading the data to put", source: e }),
        }
    }

    /// Get an object into `dst`, chunk by chunk; `progress` is called with
    /// the bytes received so far. The object's size.
    pub async fn get_to(
        &mut self,
        name: &str,
        dst: &mut (dyn Write + Send),
        progress: impl Fn(u64),
    ) -> Result<u64> {
        let mut stream = self
            .inner
            .get(NameRequest {
                name: name.to_string(),
            })
            .await?
            .into_inner();
        let mut got = 0u64;
        while let Some(chunk) = stream.message().await? {
            dst.write_all(&chunk.data).map_err(|e| ClientError::Local {
                what: "writing the object",
                source: e,
            })?;
            got += chunk.data.len() as u64;
            progress(got);
        }
        Ok(got)
    }

    /// Get an object and only count its bytes (the load generator: what a
    /// transport costs, without a local copy).
    pub async fn get_discard(&mut self, name: &str) -> Result<u64> {
        let mut stream = self
            .inner
            .get(NameRequest {
                name: name.to_string(),
            })
            .await?
            .into_inner();
        let mut got = 0u64;
        while let Some(chunk) = stream.message().await? {
            got += chunk.data.len() as u64;
        }
        Ok(got)
    }

    /// Every object.
    pub async fn list(&mut self) -> Result<Vec<ObjectInfo>> {
        let reply = self.inner.list(ListRequest {}).await?.into_inner();
        Ok(reply
            .objects
            .into_iter()
            .map(|o| ObjectInfo {
                name: o.name,
                size: o.size,
            })
            .collect())
    }

    /// Name and size of an object.
    pub async fn stat(&mut self, name: &str) -> Result<ObjectInfo> {
        let o = self
            .inner
            .stat(NameRequest {
                name: name.to_string(),
            })
            .await?
            .into_inner();
        Ok(ObjectInfo {
            name: o.name,
            size: o.size,
        })
    }

    /// Remove an object.
    pub async fn delete(&mut self, name: &str) -> Result<()> {
        self.inner
            .delete(NameRequest {
                name: name.to_string(),
            })
            .await?;
        Ok(())
    }
}

/// Read until `buf` is full or the source ends; the bytes read.
fn read_full(src: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match src.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
