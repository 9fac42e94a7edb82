//! The object-store handler for a `portals-rpc` service.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use portals_rpc::{HandlerError, Request};

use super::PUT_SMALL;
use super::{u64_at, Code, GET_SMALL_HEADER, INLINE_MAX, MAX_PART};
use super::{DELETE, GET, GET_SMALL, LIST, PUT, PUT_ABORT, PUT_COMMIT, PUT_OPEN, PUT_WRITE, STAT};
use crate::map::Mapped;
use crate::store::{ObjectName, PutWriter, Store, StoreError};

/// Multi-call puts open at once, at most (a client that vanishes mid-put
/// leaves its entry; beyond this the oldest is dropped, uncommitted).
const MAX_OPEN_PUTS: usize = 256;

/// Bulk chunks of a put in flight at once by default: the network fills
/// the next ones while a chunk is written to the file (4 of 1 MiB).
pub const PULL_DEPTH: usize = 4;

/// Bulk chunks of a get in flight (unacknowledged) at once by default:
/// the next one leaves while the previous one's acknowledgment is on its
/// way. Deeper pipelines measured no faster and cost more server CPU per
/// GB on the 2-core host (docs/PERFORMANCE.md).
pub const PUSH_DEPTH: usize = 2;

/// How a get's data reaches the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetFrom {
    /// The file mapped, pushed from the page cache (no copy).
    Map,
    /// Read into the service thread's chunk buffers (one copy).
    Read,
}

/// The handler: plain blocking code on the service's threads.
#[derive(Debug)]
pub struct ObjectService {
    store: Arc<Store>,
    puts: Mutex<HashMap<u64, Option<PutWriter>>>,
    next_handle: AtomicU64,
    pull_depth: usize,
    push_depth: usize,
    get_from: GetFrom,
}

fn err(code: Code, msg: impl std::fmt::Display) -> HandlerError {
    HandlerError(format!("{}: {msg}", code.tag()))
}

fn store_err(e: StoreError) -> HandlerError {
    let code = match &e {
        StoreError::InvalidName { .. } => Code::InvalidName,
        StoreError::NotFound(_) => Code::NotFound,
        StoreError::Io { .. } => Code::Internal,
    };
    err(code, e)
}

fn name_in(body: &[u8]) -> Result<ObjectName, HandlerError> {
    let s = std::str::from_utf8(body).map_err(|_| err(Code::InvalidName, "not UTF-8"))?;
    ObjectName::new(s).map_err(store_err)
}

fn arg(body: &[u8], at: usize) -> Result<u64, HandlerError> {
    u64_at(body, at).ok_or_else(|| err(Code::BadRequest, "request body too short"))
}

impl ObjectService {
    /// A handler over `store`.
    pub fn new(store: Arc<Store>) -> ObjectService {
        ObjectService {
            store,
            puts: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            pull_depth: PULL_DEPTH,
            push_depth: PUSH_DEPTH,
            get_from: GetFrom::Map,
        }
    }

    /// Pull a put's data with `depth` bulk chunks in flight (1: one chunk
    /// at a time, no overlap with the file writes).
    pub fn with_pull_depth(mut self, depth: usize) -> ObjectService {
        self.pull_depth = depth.max(1);
        self
    }

    /// Push a get's data with `depth` bulk chunks unacknowledged at once
    /// (1: each chunk waits for the previous one's acknowledgment).
    pub fn with_push_depth(mut self, depth: usize) -> ObjectService {
        self.push_depth = depth.max(1);
        self
    }

    /// Where gets take their data from (default [`GetFrom::Map`]).
    pub fn with_get_from(mut self, from: GetFrom) -> ObjectService {
        self.get_from = from;
        self
    }

    /// Handle one request (the service's [`portals_rpc::Handler`]).
    pub fn handle(&self, req: &mut Request<'_>) -> Result<Vec<u8>, HandlerError> {
        let body = req.body();
        match req.opcode() {
            PUT_SMALL => {
                let len = body
                    .get(..2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
                    .ok_or_else(|| err(Code::BadRequest, "request body too short"))?;
                let name = body
                    .get(2..2 + len)
                    .ok_or_else(|| err(Code::BadRequest, "name past the body"))?;
                let data = &body[2 + len..];
                if data.len() > INLINE_MAX {
                    return Err(err(Code::BadRequest, "inline object too large"));
                }
                let mut w = self.store.put(&name_in(name)?).map_err(store_err)?;
                w.write_chunk(data).map_err(store_err)?;
                Ok(w.commit().map_err(store_err)?.to_le_bytes().to_vec())
            }
            GET_SMALL => {
                let r = self.store.get(&name_in(body)?).map_err(store_err)?;
                let version = r
                    .file()
                    .metadata()
                    .map_err(|e| err(Code::Internal, e))?
                    .ino();
                let size = r.size();
                let mut reply = Vec::with_capacity(GET_SMALL_HEADER + INLINE_MAX);
                reply.extend_from_slice(&size.to_le_bytes());
                reply.extend_from_slice(&version.to_le_bytes());
                // A larger object: the client gets it in bulk calls.
                if size <= INLINE_MAX as u64 {
                    reply.resize(GET_SMALL_HEADER + size as usize, 0);
                    let got = r
                        .read_at(0, &mut reply[GET_SMALL_HEADER..])
                        .map_err(store_err)?;
                    if got < size as usize {
                        return Err(err(Code::Internal, "object shorter than its size"));
                    }
                }
                Ok(reply)
            }
            PUT => {
                let name = name_in(body)?;
                let mut w = self.store.put(&name).map_err(store_err)?;
                pull_into(req, &mut w, self.pull_depth)?;
                Ok(w.commit().map_err(store_err)?.to_le_bytes().to_vec())
            }
            PUT_OPEN => {
                let name = name_in(body)?;
                let w = self.store.put(&name).map_err(store_err)?;
                let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
                let mut puts = self.puts.lock().map_err(|_| err(Code::Internal, "lock"))?;
                if puts.len() >= MAX_OPEN_PUTS {
                    if let Some(&oldest) = puts.keys().min() {
                        puts.remove(&oldest);
                    }
                }
                puts.insert(h, Some(w));
                Ok(h.to_le_bytes().to_vec())
            }
            PUT_WRITE => {
                let (h, offset) = (arg(body, 0)?, arg(body, 8)?);
                let mut w = self.take(h)?;
                let done = if w.written() == offset {
                    pull_into(req, &mut w, self.pull_depth)
                } else {
                    Err(err(
                        Code::BadRequest,
                        format!("write at {offset}, expected {}", w.written()),
                    ))
                };
                match done {
                    // A failed part abandons the put (the writer drops).
                    Ok(()) => self.give_back(h, w).map(|()| Vec::new()),
                    Err(e) => {
                        self.forget(h);
                        Err(e)
                    }
                }
            }
            PUT_COMMIT => {
                let h = arg(body, 0)?;
                let w = self.take(h)?;
                self.forget(h);
                Ok(w.commit().map_err(store_err)?.to_le_bytes().to_vec())
            }
            PUT_ABORT => {
                self.forget(arg(body, 0)?);
                Ok(Vec::new())
            }
            GET => {
                let offset = arg(body, 0)?;
                let name = name_in(&body[8..])?;
                let r = self.store.get(&name).map_err(store_err)?;
                let version = r
                    .file()
                    .metadata()
                    .map_err(|e| err(Code::Internal, e))?
                    .ino();
                let size = r.size();
                let bulk = req
                    .bulk()
                    .ok_or_else(|| err(Code::BadRequest, "get without a buffer"))?;
                let want = bulk.len().min(size.saturating_sub(offset));
                // From the page cache to the socket: no copy here. The range
                // lies inside the size at open, and the store never shrinks
                // an object's file. A file system that cannot map the file
                // (or a range too large for the address space) takes the
                // read path.
                let mapped = match (self.get_from, usize::try_from(want)) {
                    (GetFrom::Map, Ok(n)) if n > 0 => Mapped::new(r.file(), offset, n).ok(),
                    _ => None,
                };
                let done = match mapped {
                    Some(m) => {
                        bulk.push_from(0, &m, self.push_depth)?;
                        want
                    }
                    // The next chunks are read from the file while the
                    // earlier ones are on the wire.
                    None => bulk.push_stream(want, self.push_depth, |at, chunk| {
                        let got = r.read_at(offset + at, chunk).map_err(store_err)?;
                        if got < chunk.len() {
                            return Err(err(Code::Internal, "object shorter than its size"));
                        }
                        Ok(())
                    })?,
                };
                let mut reply = Vec::with_capacity(24);
                for v in [size, done, version] {
                    reply.extend_from_slice(&v.to_le_bytes());
                }
                Ok(reply)
            }
            STAT => {
                let info = self.store.stat(&name_in(body)?).map_err(store_err)?;
                Ok(info.size.to_le_bytes().to_vec())
            }
            LIST => {
                let mut reply = Vec::new();
                for o in self.store.list().map_err(store_err)? {
                    // Names are at most 255 bytes: the length fits.
                    reply.extend_from_slice(&(o.name.len() as u16).to_le_bytes());
                    reply.extend_from_slice(o.name.as_bytes());
                    reply.extend_from_slice(&o.size.to_le_bytes());
                }
                Ok(reply)
            }
            DELETE => {
                self.store.delete(&name_in(body)?).map_err(store_err)?;
                Ok(Vec::new())
            }
            op => Err(err(Code::BadRequest, format!("unknown opcode {op}"))),
        }
    }

    /// Take the writer of put `h` out of the table while a part is
    /// written (a concurrent call on the same handle sees it busy).
    fn take(&self, h: u64) -> Result<PutWriter, HandlerError> {
        let mut puts = self.puts.lock().map_err(|_| err(Code::Internal, "lock"))?;
        match puts.get_mut(&h) {
            Some(slot) => slot
                .take()
                .ok_or_else(|| err(Code::BadHandle, "put busy in another call")),
            None => Err(err(Code::BadHandle, format!("no open put {h}"))),
        }
    }

    fn give_back(&self, h: u64, w: PutWriter) -> Result<(), HandlerError> {
        let mut puts = self.puts.lock().map_err(|_| err(Code::Internal, "lock"))?;
        match puts.get_mut(&h) {
            Some(slot) => {
                *slot = Some(w);
                Ok(())
            }
            None => Err(err(Code::BadHandle, format!("put {h} was dropped"))),
        }
    }

    fn forget(&self, h: u64) {
        if let Ok(mut puts) = self.puts.lock() {
            puts.remove(&h);
        }
    }
}

/// Pull the request's whole bulk buffer into `w`, a service chunk at a time.
fn pull_into(req: &mut Request<'_>, w: &mut PutWriter, depth: usize) -> Result<(), HandlerError> {
    let Some(bulk) = req.bulk() else {
        return Ok(()); // an empty object has no buffer
    };
    if bulk.len() > MAX_PART as u64 {
        return Err(err(Code::BadRequest, "part larger than the largest part"));
    }
    // The next chunks move while this one is written.
    bulk.pull_stream(depth, |chunk| w.write_chunk(chunk).map_err(store_err))?;
    Ok(())
}
