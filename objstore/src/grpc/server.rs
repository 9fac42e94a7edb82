//! The gRPC service over a [`Store`].

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::proto::object_store_server::{ObjectStore, ObjectStoreServer};
use super::proto::{
    Chunk, Empty, ListReply, ListRequest, NameRequest, ObjectInfo, PutChunk, PutReply,
};
use super::{CHUNK, MAX_MESSAGE};
use crate::store::{ObjectName, Store, StoreError};

/// The service: every call works on one shared store. File-system calls run
/// on blocking threads so they never stall the runtime's workers.
#[derive(Debug, Clone)]
pub struct GrpcStore {
    store: Arc<Store>,
}

impl GrpcStore {
    /// A service over `store`.
    pub fn new(store: Arc<Store>) -> GrpcStore {
        GrpcStore { store }
    }

    /// The tonic server for this service, with the message limit raised to
    /// a chunk.
    pub fn into_server(self) -> ObjectStoreServer<GrpcStore> {
        ObjectStoreServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE)
    }
}

/// The gRPC status of a store error.
pub fn status_of(e: StoreError) -> Status {
    match e {
        StoreError::InvalidName { .. } => Status::invalid_argument(e.to_string()),
        StoreError::NotFound(_) => Status::not_found(e.to_string()),
        StoreError::Io { .. } => Status::internal(e.to_string()),
    }
}

fn name_of(s: &str) -> Result<ObjectName, Status> {
    ObjectName::new(s).map_err(status_of)
}

/// Run a blocking store call on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("store task failed: {e}")))?
        .map_err(status_of)
}

#[tonic::async_trait]
impl ObjectStore for GrpcStore {
    async fn put(
        &self,
        request: Request<Streaming<PutChunk>>,
    ) -> Result<Response<PutReply>, Status> {
        let mut stream = request.into_inner();
        let first = stream.next().await.ok_or_else(|| {
            Status::invalid_argument("empty put stream: the first message names the object")
        })??;
        let name = name_of(&first.name)?;
        // The data goes to a blocking writer thread through a short queue:
        // the network and the disk overlap, and a failed or cancelled
        // stream drops the writer uncommitted (no object, no temp file).
        let (tx, mut rx) = mpsc::channel::<Bytes>(4);
        let store = Arc::clone(&self.store);
        let writer = tokio::task::spawn_blocking(move || {
            let mut w = store.put(&name)?;
            while let Some(data) = rx.blocking_recv() {
                w.write_chunk(&data)?;
            }
            Ok::<_, StoreError>(w)
        });
        let mut failed: Option<Status> = None;
        let mut last = first.last;
        let mut pending = Some(first.data);
        loop {
            if let Some(data) = pending.take() {
                if !data.is_empty() && tx.send(data).await.is_err() {
                    break; // the writer failed: its error is reported below
                }
            }
            if last {
                break;
            }
            match stream.next().await {
                None => {
                    // A client whose source failed drops its stream, which
                    // may reach us as a clean end: without the last
                    // message, the object is not complete.
                    failed = Some(Status::aborted(
                        "the put stream ended before its last message: nothing stored",
                    ));
                    break;
                }
                Some(Ok(m)) => {
                    last = m.last;
                    pending = Some(m.data);
                }
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(tx);
        let w = writer
            .await
            .map_err(|e| Status::internal(format!("store task failed: {e}")))?
            .map_err(status_of)?;
        if let Some(e) = failed {
            return Err(e); // `w` drops here, uncommitted
        }
        let size = blocking(move || w.commit()).await?;
        Ok(Response::new(PutReply { size }))
    }

    type GetStream = ReceiverStream<Result<Chunk, Status>>;

    async fn get(
        &self,
        request: Request<NameRequest>,
    ) -> Result<Response<Self::GetStream>, Status> {
        let name = name_of(&request.into_inner().name)?;
        let store = Arc::clone(&self.store);
        let mut reader = blocking(move || store.get(&name)).await?;
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let mut left = reader.size();
            // An empty object is one empty chunk: the stream is never
            // mistaken for a failed call.
            let mut first = true;
            while left > 0 || first {
                first = false;
                let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
                let mut buf = vec![0u8; n];
                let msg = match reader.read_exact(&mut buf) {
                    Ok(()) => Ok(Chunk {
                        data: Bytes::from(buf),
                    }),
                    Err(e) => Err(Status::internal(format!("reading the object: {e}"))),
                };
                let stop = msg.is_err();
                if tx.blocking_send(msg).is_err() || stop {
                    return; // the client went away, or the error is sent
                }
                left -= n as u64;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list(&self, _request: Request<ListRequest>) -> Result<Response<ListReply>, Status> {
        let store = Arc::clone(&self.store);
        let objects = blocking(move || store.list()).await?;
        Ok(Response::new(ListReply {
            objects: objects
                .into_iter()
                .map(|o| ObjectInfo {
                    name: o.name,
                    size: o.size,
                })
                .collect(),
        }))
    }

    async fn delete(&self, request: Request<NameRequest>) -> Result<Response<Empty>, Status> {
        let name = name_of(&request.into_inner().name)?;
        let store = Arc::clone(&self.store);
        blocking(move || store.delete(&name)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn stat(&self, request: Request<NameRequest>) -> Result<Response<ObjectInfo>, Status> {
        let name = name_of(&request.into_inner().name)?;
        let store = Arc::clone(&self.store);
        let o = blocking(move || store.stat(&name)).await?;
        Ok(Response::new(ObjectInfo {
            name: o.name,
            size: o.size,
        }))
    }
}

/// Serve `store` on `listener` until `shutdown` resolves.
pub async fn serve(
    store: Arc<Store>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    // Accepted sockets do not get the builder's TCP_NODELAY: set it here, or
    // small replies wait for Nagle.
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        s.and_then(|s| {
            s.set_nodelay(true)?;
            Ok(s)
        })
    });
    tonic::transport::Server::builder()
        .add_service(GrpcStore::new(store).into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
