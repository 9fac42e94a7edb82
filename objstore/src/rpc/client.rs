//! A client of the object store over `portals-rpc`.

use std::io::{Read, Write};

use portals_rpc::{Client, RpcError};

use super::{u64_at, Code, CALL_CHUNK};
use super::{DELETE, GET, LIST, PUT, PUT_ABORT, PUT_COMMIT, PUT_OPEN, PUT_WRITE, STAT};
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

/// Object-store calls over a connected [`Client`].
#[derive(Debug)]
pub struct ObjClient<'a> {
    rpc: Client<'a>,
    /// One call's worth of object data, reused across calls.
    buf: Vec<u8>,
}

impl<'a> ObjClient<'a> {
    /// Wrap a client connected to an object-store service.
    pub fn new(rpc: Client<'a>) -> ObjClient<'a> {
        ObjClient {
            rpc,
            buf: Vec::new(),
        }
    }

    /// Put an object held in memory (one call up to [`CALL_CHUNK`] bytes).
    pub fn put_bytes(&mut self, name: &str, data: &[u8]) -> Result<u64> {
        if data.len() <= CALL_CHUNK {
            let r = self.rpc.call_write(PUT, name.as_bytes(), data)?;
            return u64_at(&r, 0).ok_or(ObjError::Protocol("put"));
        }
        self.put_reader(name, &mut &data[..], |_| {})
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
                let r = self.rpc.call_write(PUT, name.as_bytes(), &buf[..n]);
                progress(n as u64);
                r.map_err(ObjError::from)
                    .and_then(|r| u64_at(&r, 0).ok_or(ObjError::Protocol("put")))
            }
            Ok(n) => self.put_parts(name, src, &mut buf, n, &progress),
            Err(e) => Err(ObjError::Local {
                what: "reading the data to put",
                source: e,
            }),
        };
        self.buf = buf;
        r
    }

    fn put_parts(
        &mut self,
        name: &str,
        src: &mut dyn Read,
        buf: &mut [u8],
        mut n: usize,
        progress: &impl Fn(u64),
    ) -> Result<u64> {
        let r = self.rpc.call(PUT_OPEN, name.as_bytes())?;
        let h = u64_at(&r, 0).ok_or(ObjError::Protocol("put open"))?;
        let mut sent = 0u64;
        let result = loop {
            let mut args = [0u8; 16];
            args[..8].copy_from_slice(&h.to_le_bytes());
            args[8..].copy_from_slice(&sent.to_le_bytes());
            if let Err(e) = self.rpc.call_write(PUT_WRITE, &args, &buf[..n]) {
                break Err(e.into());
            }
            sent += n as u64;
            progress(sent);
            n = match read_full(src, buf) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) => {
                    break Err(ObjError::Local {
                        what: "reading the data to put",
                        source: e,
                    })
                }
            };
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
    pub fn get_discard(&mut self, name: &str, hint: usize) -> Result<u64> {
        let mut buf = std::mem::take(&mut self.buf);
        let call = hint.clamp(1, CALL_CHUNK);
        let r = self.get_with(name, &mut buf, call, |_| Ok(()), &|_| {});
        self.buf = buf;
        r
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
