//! A client of the object store over `portals-rpc`.

use std::io::{Read, Write};

use portals_rpc::{Client, RpcError};

use super::PUT_SMALL;
use super::{u64_at, Code, CALL_CHUNK, GET_SMALL_HEADER, INLINE_MAX, MAX_PART, MAX_REQUEST};
use super::{DELETE, GET, GET_SMALL, LIST, PUT, PUT_ABORT, PUT_COMMIT, PUT_OPEN, PUT_WRITE, STAT};
use crate::store::ObjectInfo;

/// Why an object-store call failed.
#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    /// The server refused or failed the operation.
    #[error("{}: {message}", .code.tag())]
    Server {
        /// What kind of failure.
        code: Code,
        /// The server's message.
        message: String,
    },
    /// The call itself failed (timeout, server gone, ...).
    #[error("rpc: {0}")]
    Rpc(RpcError),
    /// A reply this client does not understand.
    #[error("malformed reply to {0}")]
    Protocol(&'static str),
    /// Reading the data to put or writing the data got failed locally.
    #[error("{what}: {source}")]
    Local {
        /// What the client was doing.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl From<RpcError> for ObjError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Remote(text) => {
                let (code, message) = Code::parse(&text);
                ObjError::Server {
                    code,
                    message: message.to_string(),
                }
            }
            e => ObjError::Rpc(e),
        }
    }
}

impl ObjError {
    /// The server's code, if the server refused the operation.
    pub fn code(&self) -> Option<Code> {
        match self {
            ObjError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Result of object-store calls.
pub type Result<T> = std::result::Result<T, ObjError>;

/// The rpc client: this object-store client's own, or one shared by
/// several (threads of one process on one network interface).
#[derive(Debug)]
enum Rpc<'a> {
    Own(Client<'a>),
    Shared(&'a Client<'a>),
}

impl<'a> std::ops::Deref for Rpc<'a> {
    type Target = Client<'a>;
    fn deref(&self) -> &Client<'a> {
        match self {
            Rpc::Own(c) => c,
            Rpc::Shared(c) => c,
        }
    }
}

/// Object-store calls over a connected [`Client`].
#[derive(Debug)]
pub struct ObjClient<'a> {
    rpc: Rpc<'a>,
    /// One call's worth of object data, reused across calls.
    buf: Vec<u8>,
    /// Most bytes of an object in memory one put call moves.
    part: usize,
}

impl<'a> ObjClient<'a> {
    /// Wrap a client connected to an object-store service.
    pub fn new(rpc: Client<'a>) -> ObjClient<'a> {
        ObjClient {
            rpc: Rpc::Own(rpc),
            buf: Vec::new(),
            part: MAX_PART,
        }
    }

    /// Calls over a client shared with other threads (each thread its own
    /// `ObjClient`, all on one network interface and one xid sequence).
    pub fn shared(rpc: &'a Client<'a>) -> ObjClient<'a> {
        ObjClient {
            rpc: Rpc::Shared(rpc),
            buf: Vec::new(),
            part: MAX_PART,
        }
    }

    /// Put objects held in memory in calls of at most `part` bytes
    /// (default and most [`MAX_PART`]; fewer bytes per call, more calls).
    pub fn set_part(&mut self, part: usize) {
        self.part = part.clamp(1, MAX_PART);
    }

    /// Whether the service takes small objects inline ([`PUT_SMALL`],
    /// [`GET_SMALL`]): its largest request holds one.
    fn inline(&self) -> bool {
        self.rpc.max_request() >= MAX_REQUEST as u64
    }

    /// Put a small object inside the request, if the service takes it
    /// inline and it fits; `None` otherwise.
    fn put_small(&mut self, name: &str, data: &[u8]) -> Option<Result<u64>> {
        let len = u16::try_from(name.len()).ok()?;
        if data.len() > INLINE_MAX || !self.inline() {
            return None;
        }
        let mut body = Vec::with_capacity(2 + name.len() + data.len());
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(data);
        if body.len() as u64 > self.rpc.max_body() {
            return None;
        }
        Some(
            self.rpc
                .call(PUT_SMALL, &body)
                .map_err(ObjError::from)
                .and_then(|r| u64_at(&r, 0).ok_or(ObjError::Protocol("put"))),
        )
    }

    /// Put an object held in memory: one call up to [`MAX_PART`] bytes
    /// (see [`ObjClient::set_part`]), the server pulling straight from
    /// `data` (no copy).
    pub fn put_bytes(&mut self, name: &str, data: &[u8]) -> Result<u64> {
        if let Some(r) = self.put_small(name, data) {
            return r;
        }
        if data.len() <= self.part {
            let r = self.rpc.call_write(PUT, name.as_bytes(), data)?;
            return u64_at(&r, 0).ok_or(ObjError::Protocol("put"));
        }
        let part = self.part;
        self.put_parts(name, &mut Parts::Slices(data.chunks(part)), &|_| {})
    }

    /// Put everything `src` yields, a call chunk at a time; `progress` is
    /// called with the bytes sent so far. On any failure the put is
    /// abandoned and the server keeps nothing of it.
    pub fn put_reader(
        &mut self,
        name: &str,
        src: &mut dyn Read,
        progress: impl Fn(u64),
    ) -> Result<u64> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(CALL_CHUNK, 0);
        let first = read_full(src, &mut buf);
        let r = match first {
            // Small: one call.
            Ok(n) if n < CALL_CHUNK => {
                let r = match self.put_small(name, &buf[..n]) {
                    Some(r) => r,
                    None => self
                        .rpc
                        .call_write(PUT, name.as_bytes(), &buf[..n])
                        .map_err(ObjError::from)
                        .and_then(|r| u64_at(&r, 0).ok_or(ObjError::Protocol("put"))),
                };
                progress(n as u64);
                r
            }
            Ok(n) => {
                let mut parts = Parts::Reader {
                    src,
                    buf: &mut buf,
                    first: Some(n),
                };
                self.put_parts(name, &mut parts, &progress)
            }
            Err(e) => Err(ObjError::Local {
                what: "reading the data to put",
                source: e,
            }),
        };
        self.buf = buf;
        r
    }

    /// A multi-call put of the parts `parts` yields.
    fn put_parts(
        &mut self,
        name: &str,
        parts: &mut Parts<'_>,
        progress: &impl Fn(u64),
    ) -> Result<u64> {
        let r = self.rpc.call(PUT_OPEN, name.as_bytes())?;
        let h = u64_at(&r, 0).ok_or(ObjError::Protocol("put open"))?;
        let mut sent = 0u64;
        let result = loop {
            let data = match parts.next() {
                Ok(Some(d)) => d,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            };
            let mut args = [0u8; 16];
            args[..8].copy_from_slice(&h.to_le_bytes());
            args[8..].copy_from_slice(&sent.to_le_bytes());
            if let Err(e) = self.rpc.call_write(PUT_WRITE, &args, data) {
                break Err(e.into());
            }
            sent += data.len() as u64;
            progress(sent);
        };
        match result {
            Ok(()) => {
                let r = self.rpc.call(PUT_COMMIT, &h.to_le_bytes())?;
                u64_at(&r, 0).ok_or(ObjError::Protocol("put commit"))
            }
            Err(e) => {
                // Best effort: the server drops the put either way once the
                // handle is forgotten or the table is full.
                let _ = self.rpc.call(PUT_ABORT, &h.to_le_bytes());
                Err(e)
            }
        }
    }

    /// Get an object into `dst`, a call chunk at a time; `progress` is
    /// called with the bytes received so far. The object's size.
    pub fn get_to(
        &mut self,
        name: &str,
        dst: &mut dyn Write,
        progress: impl Fn(u64),
    ) -> Result<u64> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.get_with(
            name,
            &mut buf,
            CALL_CHUNK,
            |part| {
                dst.write_all(part).map_err(|e| ObjError::Local {
                    what: "writing the object",
                    source: e,
                })
            },
            &progress,
        );
        self.buf = buf;
        r
    }

    /// Get an object whose size is about `hint`, only counting its bytes
    /// (the load generator: the transport's cost without a local copy).
    /// A small one comes inside the reply.
    pub fn get_discard(&mut self, name: &str, hint: usize) -> Result<u64> {
        if hint <= INLINE_MAX {
            if let Some(r) = self.get_small(name)? {
                return Ok(r.len() as u64);
            }
        }
        let mut buf = std::mem::take(&mut self.buf);
        let call = hint.clamp(1, CALL_CHUNK);
        let r = self.get_with(name, &mut buf, call, |_| Ok(()), &|_| {});
        self.buf = buf;
        r
    }

    /// A small object inside the reply: `None` if the service does not
    /// take small objects inline, or the object is larger than
    /// [`INLINE_MAX`] (then it moves in bulk calls).
    pub fn get_small(&mut self, name: &str) -> Result<Option<Vec<u8>>> {
        if !self.inline() {
            return Ok(None);
        }
        let mut r = self.rpc.call(GET_SMALL, name.as_bytes())?;
        let size = u64_at(&r, 0).ok_or(ObjError::Protocol("get"))?;
        if size > INLINE_MAX as u64 {
            return Ok(None);
        }
        if r.len() as u64 != GET_SMALL_HEADER as u64 + size {
            return Err(ObjError::Protocol("get length"));
        }
        r.drain(..GET_SMALL_HEADER);
        Ok(Some(r))
    }

    fn get_with(
        &mut self,
        name: &str,
        buf: &mut Vec<u8>,
        call: usize,
        mut sink: impl FnMut(&[u8]) -> Result<()>,
        progress: &impl Fn(u64),
    ) -> Result<u64> {
        buf.resize(call, 0);
        let mut body = Vec::with_capacity(8 + name.len());
        let mut offset = 0u64;
        let mut first_version = None;
        loop {
            body.clear();
            body.extend_from_slice(&offset.to_le_bytes());
            body.extend_from_slice(name.as_bytes());
            let r = self.rpc.call_read(GET, &body, buf)?;
            let (Some(size), Some(n), Some(version)) =
                (u64_at(&r, 0), u64_at(&r, 8), u64_at(&r, 16))
            else {
                return Err(ObjError::Protocol("get"));
            };
            if *first_version.get_or_insert(version) != version {
                return Err(ObjError::Server {
                    code: Code::Changed,
                    message: format!("{name} was replaced during the get"),
                });
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= buf.len())
                .ok_or(ObjError::Protocol("get length"))?;
            sink(&buf[..n])?;
            offset += n as u64;
            progress(offset);
            if offset >= size || n == 0 {
                return Ok(offset);
            }
        }
    }

    /// Size of an object.
    pub fn stat(&mut self, name: &str) -> Result<u64> {
        let r = self.rpc.call(STAT, name.as_bytes())?;
        u64_at(&r, 0).ok_or(ObjError::Protocol("stat"))
    }

    /// Every object.
    pub fn list(&mut self) -> Result<Vec<ObjectInfo>> {
        let r = self.rpc.call(LIST, &[])?;
        let mut v = Vec::new();
        let mut at = 0;
        while at < r.len() {
            let len = r
                .get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
                .ok_or(ObjError::Protocol("list"))?;
            let name = r
                .get(at + 2..at + 2 + len)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or(ObjError::Protocol("list"))?;
            let size = u64_at(&r, at + 2 + len).ok_or(ObjError::Protocol("list"))?;
            v.push(ObjectInfo {
                name: name.to_string(),
                size,
            });
            at += 2 + len + 8;
        }
        Ok(v)
    }

    /// Remove an object.
    pub fn delete(&mut self, name: &str) -> Result<()> {
        self.rpc.call(DELETE, name.as_bytes())?;
        Ok(())
    }
}

/// The parts of a multi-call put.
enum Parts<'d> {
    /// An object in memory, each part used in place.
    Slices(std::slice::Chunks<'d, u8>),
    /// A stream read into one call-sized buffer, part after part.
    Reader {
        src: &'d mut dyn Read,
        buf: &'d mut Vec<u8>,
        /// The bytes of the first part, read into `buf` already.
        first: Option<usize>,
    },
}

impl Parts<'_> {
    /// The next part, `None` at the end.
    fn next(&mut self) -> Result<Option<&[u8]>> {
        match self {
            Parts::Slices(c) => Ok(c.next()),
            Parts::Reader { src, buf, first } => {
                let n = match first.take() {
                    Some(n) => n,
                    None => read_full(*src, buf).map_err(|e| ObjError::Local {
                        what: "reading the data to put",
                        source: e,
                    })?,
                };
                Ok((n > 0).then(|| &buf[..n]))
            }
        }
    }
}

/// Read until `buf` is full or the source ends; the bytes read.
fn read_full(src: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
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
