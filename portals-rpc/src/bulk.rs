//! The handler's side of a bulk transfer: the client's buffer, read or
//! written by the server in chunks, one-sided (ptlrpc's server-driven
//! bulk), so that an object of any size streams through a chunk-sized
//! buffer.

use portals::{ProcessId, Remote};

use crate::bits::{self, Kind};
use crate::config::Portals;
use crate::error::BulkError;
use crate::transfer::Link;
use crate::wire::BulkKind;

/// The client's bulk buffer of one request.
pub struct Bulk<'r> {
    pub(crate) link: Link<'r>,
    pub(crate) portals: Portals,
    pub(crate) xid: u64,
    pub(crate) kind: BulkKind,
    pub(crate) len: u64,
    pub(crate) chunk: usize,
    /// The service thread's chunk buffers, lent for pipelined transfers.
    pub(crate) pool: &'r mut Vec<Vec<u8>>,
}

impl std::fmt::Debug for Bulk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bulk")
            .field("client", &self.link.peer)
            .field("xid", &self.xid)
            .field("kind", &self.kind)
            .field("len", &self.len)
            .finish()
    }
}

/// Where `[offset, offset + len)` of the client's buffer of `xid` is, if
/// it lies inside its `bulk_len` bytes.
fn target(
    peer: ProcessId,
    portals: Portals,
    xid: u64,
    bulk_len: u64,
    offset: u64,
    len: u64,
) -> Result<Remote, BulkError> {
    if offset.checked_add(len).is_none_or(|end| end > bulk_len) {
        return Err(BulkError::OutOfRange {
            offset,
            len,
            bulk_len,
        });
    }
    let mb = bits::encode(Kind::Bulk, xid).ok_or(BulkError::Gone)?;
    Ok(Remote::new(peer, portals.bulk, mb).with_offset(offset))
}

impl Bulk<'_> {
    /// Which way the data moves.
    pub fn kind(&self) -> BulkKind {
        self.kind
    }

    /// Bytes of the client's buffer.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The service's chunk size ([`crate::ServiceConfig::bulk_chunk`]).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The client.
    pub fn client(&self) -> ProcessId {
        self.link.peer
    }

    fn remote(&self, offset: u64, len: u64) -> Result<Remote, BulkError> {
        target(
            self.link.peer,
            self.portals,
            self.xid,
            self.len,
            offset,
            len,
        )
    }

    /// Fill `buf` from the client's buffer at `offset` (a bulk write by the
    /// client). The vector's memory is used in place and given back.
    pub fn pull(&mut self, offset: u64, buf: &mut Vec<u8>) -> Result<(), BulkError> {
        if self.kind != BulkKind::Write {
            return Err(BulkError::WrongDirection("pull from"));
        }
        let remote = self.remote(offset, buf.len() as u64)?;
        self.link.get(buf, &remote)
    }

    /// Write `buf` into the client's buffer at `offset` (a bulk read by the
    /// client); returns once the bytes are in place.
    pub fn push(&mut self, offset: u64, buf: &mut Vec<u8>) -> Result<(), BulkError> {
        if self.kind != BulkKind::Read {
            return Err(BulkError::WrongDirection("push into"));
        }
        let remote = self.remote(offset, buf.len() as u64)?;
        self.link.put(buf, &remote, 0, true)
    }

    /// Pull the client's whole buffer in service chunks with up to `depth`
    /// of them in flight, handing them to `sink` in order while the later
    /// ones move (a handler that writes a file overlaps its writes with
    /// the network). The bytes pulled. The chunk buffers belong to the
    /// service thread and are reused by its next requests.
    pub fn pull_stream<E: From<BulkError>>(
        &mut self,
        depth: usize,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        if self.kind != BulkKind::Write {
            return Err(BulkError::WrongDirection("pull from").into());
        }
        let (peer, portals, xid, bulk_len) = (self.link.peer, self.portals, self.xid, self.len);
        let remote = |offset, len| target(peer, portals, xid, bulk_len, offset, len);
        crate::stream::pull(
            &self.link, &remote, self.len, self.chunk, depth, self.pool, &mut sink,
        )?;
        Ok(self.len)
    }

    /// Push the first `len` bytes of the client's buffer in service chunks
    /// with up to `depth` of them unacknowledged at once; `fill(offset,
    /// chunk)` writes each chunk's bytes (a handler that reads a file
    /// overlaps its reads with the network). Returns once every chunk is
    /// in place. The chunk buffers belong to the service thread and are
    /// reused by its next requests.
    pub fn push_stream<E: From<BulkError>>(
        &mut self,
        len: u64,
        depth: usize,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        if self.kind != BulkKind::Read {
            return Err(BulkError::WrongDirection("push into").into());
        }
        if len > self.len {
            return Err(BulkError::OutOfRange {
                offset: 0,
                len,
                bulk_len: self.len,
            }
            .into());
        }
        let (peer, portals, xid, bulk_len) = (self.link.peer, self.portals, self.xid, self.len);
        let remote = |offset, len| target(peer, portals, xid, bulk_len, offset, len);
        crate::stream::push(
            &self.link, &remote, len, self.chunk, depth, self.pool, &mut fill,
        )?;
        Ok(len)
    }

    /// Push `src` to `[offset, offset + src.len())` of the client's buffer
    /// straight from the handler's memory (a mapped file: no copy on the
    /// server), in service chunks with up to `depth` of them
    /// unacknowledged at once. Returns once every chunk is in place; no
    /// descriptor over `src` is left when it returns, however it ends.
    pub fn push_from(&mut self, offset: u64, src: &[u8], depth: usize) -> Result<(), BulkError> {
        if self.kind != BulkKind::Read {
            return Err(BulkError::WrongDirection("push into"));
        }
        // The whole range is checked before anything moves.
        self.remote(offset, src.len() as u64)?;
        let (peer, portals, xid, bulk_len) = (self.link.peer, self.portals, self.xid, self.len);
        let remote = |offset, len| target(peer, portals, xid, bulk_len, offset, len);
        crate::borrowed::push(&self.link, &remote, offset, src, self.chunk, depth)
    }

    /// The client's whole buffer, pulled in chunks (for small objects; a
    /// large one streams with [`Bulk::pull`]).
    pub fn pull_all(&mut self) -> Result<Vec<u8>, BulkError> {
        let len = usize::try_from(self.len).map_err(|_| BulkError::OutOfRange {
            offset: 0,
            len: self.len,
            bulk_len: self.len,
        })?;
        // The length is the client's word: reserve what one chunk proves,
        // not what it claims.
        let mut out = Vec::with_capacity(len.min(self.chunk));
        let mut chunk = Vec::new();
        let mut off = 0usize;
        while off < len {
            chunk.resize(self.chunk.min(len - off), 0);
            self.pull(off as u64, &mut chunk)?;
            out.extend_from_slice(&chunk);
            off += chunk.len();
        }
        Ok(out)
    }

    /// Push `data` to the start of the client's buffer in chunks.
    pub fn push_all(&mut self, data: &[u8]) -> Result<(), BulkError> {
        let mut chunk = Vec::new();
        for (i, part) in data.chunks(self.chunk.max(1)).enumerate() {
            chunk.clear();
            chunk.extend_from_slice(part);
            self.push((i * self.chunk) as u64, &mut chunk)?;
        }
        Ok(())
    }
}
