//! The object store over plain TCP sockets: the floor under the
//! portals-rpc and the gRPC service.
//!
//! The same [`Store`] (temporary file, fsync, rename, directory fsync per
//! put; gets sent from the mapped file, as the portals-rpc service sends
//! them), with the least a network protocol can do around it: one blocking
//! thread per connection, one request at a time, a few bytes of header, the
//! object's bytes streamed on the connection right after it. No RPC layer,
//! no one-sided transfer, no progress thread. What this costs beyond a raw
//! TCP stream of the same bytes is the store's own work plus one round trip
//! per object; what the portals-rpc service costs beyond this is its own.
//! `ptl-bench` runs it as `rpc-raw-tcp` beside `rpc-portals-tcp` and
//! `rpc-tonic`.
//!
//! The protocol, all integers little-endian:
//!
//! | | bytes |
//! |---|---|
//! | request | op (u8: [`OP_PUT`], [`OP_GET`]), name length (u8), name, size (u64: the object's for a put, 0 for a get) |
//! | put | the request, then `size` bytes of the object |
//! | reply | status (u8: 0 ok, 1 error); ok: size (u64), and for a get that many bytes of the object; error: message length (u16), message (UTF-8) |
//!
//! A server that fails a put part-way answers the error and closes the
//! connection (the rest of the object is not read).

use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::map::Mapped;
use crate::store::{ObjectName, Store, StoreError};

/// Opcode of a put.
pub const OP_PUT: u8 = 1;
/// Opcode of a get.
pub const OP_GET: u8 = 2;

/// Bytes the server moves between the connection and the store at a time
/// (the portals-rpc service's bulk chunk).
pub const CHUNK: usize = 1 << 20;

/// Bytes of a get mapped at a time (the address space a large get takes).
const MAP_SPAN: usize = 64 << 20;

/// Reads go through a buffer of this size, so that a request's header (and
/// a small object after it) costs one `recv`, not one per field; larger
/// reads bypass it.
const READ_BUFFER: usize = 64 << 10;

/// Objects up to this size leave in the same `send` as their header.
const COALESCE_MAX: usize = 64 << 10;

/// Bytes of a successful reply's header: status and size.
const REPLY_OK_LEN: usize = 9;

/// Connections served at once, at most (each is a thread); more are
/// closed at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// What can go wrong for a client.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// The connection failed.
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    /// The server answered an error.
    #[error("server: {0}")]
    Server(String),
    /// The server's answer does not follow the protocol.
    #[error("bad answer: {0}")]
    Protocol(&'static str),
    /// The name cannot be sent (longer than 255 bytes).
    #[error("object name longer than 255 bytes")]
    NameTooLong,
}

/// Serve `store` on `listener` until accepting fails: a thread per
/// connection, at most [`MAX_CONNECTIONS`] at once.
pub fn serve(store: Arc<Store>, listener: TcpListener) -> io::Result<()> {
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        let (conn, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A connection that went before it was accepted, or a moment
            // out of descriptors: the listener itself is fine.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) || e.raw_os_error() == Some(libc::EMFILE) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            continue; // dropped: closed
        }
        let (store, live2) = (Arc::clone(&store), Arc::clone(&live));
        let spawned = std::thread::Builder::new()
            .name("objstore-raw".into())
            .spawn(move || {
                // A failed connection ends only itself.
                let _ = serve_connection(&store, conn);
                live2.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Answer one connection's requests until it closes or fails.
fn serve_connection(store: &Store, mut conn: TcpStream) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let mut rd = BufReader::with_capacity(READ_BUFFER, conn.try_clone()?);
    let mut buf = vec![0u8; CHUNK];
    let mut name = [0u8; u8::MAX as usize];
    loop {
        let mut head = [0u8; 2];
        match rd.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let [op, name_len] = head;
        let name = &mut name[..usize::from(name_len)];
        rd.read_exact(name)?;
        let mut size = [0u8; 8];
        rd.read_exact(&mut size)?;
        let size = u64::from_le_bytes(size);
        let name = std::str::from_utf8(name)
            .map_err(|_| StoreError::InvalidName {
                name: String::from_utf8_lossy(name).into_owned(),
                why: "not UTF-8",
            })
            .and_then(ObjectName::new);
        match op {
            OP_PUT => {
                let done = name.and_then(|n| put(store, &n, &mut rd, size, &mut buf));
                match done {
                    Ok(stored) => conn.write_all(&reply_ok(stored))?,
                    Err(e) => {
                        // The rest of the object is not read: the
                        // connection ends with the answer.
                        reply_err(&mut conn, &e)?;
                        let _ = conn.shutdown(Shutdown::Both);
                        return Ok(());
                    }
                }
            }
            OP_GET => match name.and_then(|n| store.get(&n)) {
                Ok(r) => send_object(&r, &mut conn, &mut buf)?,
                Err(e) => reply_err(&mut conn, &e)?,
            },
            _ => {
                reply_err(&mut conn, &format!("unknown opcode {op}"))?;
                let _ = conn.shutdown(Shutdown::Both);
                return Ok(());
            }
        }
    }
}

/// Stream `size` bytes from `conn` into a put of `name`.
fn put(
    store: &Store,
    name: &ObjectName,
    conn: &mut impl Read,
    size: u64,
    buf: &mut [u8],
) -> Result<u64, StoreError> {
    let mut w = store.put(name)?;
    let mut left = size;
    while left > 0 {
        let n = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        conn.read_exact(&mut buf[..n]).map_err(|e| StoreError::Io {
            what: "reading the object from the client".into(),
            source: e,
        })?;
        w.write_chunk(&buf[..n])?;
        left -= n as u64;
    }
    w.commit()
}

/// Answer a get with the whole object `r`: a small one read into `buf`
/// behind its reply header and sent with it; a larger one after the header,
/// from the mapped file, or read through `buf` where the file cannot be
/// mapped.
fn send_object(
    r: &crate::store::ObjectReader,
    conn: &mut TcpStream,
    buf: &mut [u8],
) -> io::Result<()> {
    let size = r.size();
    let head = reply_ok(size);
    if let Some(n) = usize::try_from(size).ok().filter(|&n| n <= COALESCE_MAX) {
        buf[..REPLY_OK_LEN].copy_from_slice(&head);
        let body = &mut buf[REPLY_OK_LEN..REPLY_OK_LEN + n];
        if r.read_at(0, body).map_err(io::Error::other)? < n {
            return Err(io::Error::other("object shorter than its size"));
        }
        return conn.write_all(&buf[..REPLY_OK_LEN + n]);
    }
    conn.write_all(&head)?;
    let mut at = 0u64;
    while at < size {
        let span = usize::try_from(size - at).map_or(MAP_SPAN, |l| l.min(MAP_SPAN));
        match Mapped::new(r.file(), at, span) {
            Ok(m) => conn.write_all(&m)?,
            Err(_) => {
                let n = span.min(buf.len());
                let got = r.read_at(at, &mut buf[..n]).map_err(io::Error::other)?;
                if got < n {
                    // The store never shrinks an object's file: a reader
                    // who sees it shorter has a broken file system.
                    return Err(io::Error::other("object shorter than its size"));
                }
                conn.write_all(&buf[..n])?;
                at += n as u64;
                continue;
            }
        }
        at += span as u64;
    }
    Ok(())
}

/// A successful reply's header.
fn reply_ok(size: u64) -> [u8; REPLY_OK_LEN] {
    let mut m = [0u8; REPLY_OK_LEN];
    m[1..].copy_from_slice(&size.to_le_bytes());
    m
}

fn reply_err(conn: &mut TcpStream, e: &dyn std::fmt::Display) -> io::Result<()> {
    let msg = e.to_string();
    let msg = &msg.as_bytes()[..msg.len().min(usize::from(u16::MAX))];
    let mut m = Vec::with_capacity(3 + msg.len());
    m.push(1);
    m.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    m.extend_from_slice(msg);
    conn.write_all(&m)
}

/// A client of [`serve`]: one connection, one request at a time.
#[derive(Debug)]
pub struct RawClient {
    /// Requests and objects leave here.
    conn: TcpStream,
    /// Replies arrive here (the same connection, buffered).
    rd: BufReader<TcpStream>,
    /// A request being assembled (reused).
    out: Vec<u8>,
    /// Where gets land (reused: the client keeps no object).
    sink: Vec<u8>,
}

impl RawClient {
    /// Connect to a server at `addr`.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<RawClient, RawError> {
        let conn = TcpStream::connect(addr)?;
        conn.set_nodelay(true)?;
        Ok(RawClient {
            rd: BufReader::with_capacity(READ_BUFFER, conn.try_clone()?),
            conn,
            out: Vec::with_capacity(10 + usize::from(u8::MAX) + COALESCE_MAX),
            sink: vec![0u8; CHUNK],
        })
    }

    /// The server's address.
    pub fn peer(&self) -> Result<SocketAddr, RawError> {
        Ok(self.conn.peer_addr()?)
    }

    /// Fail a read or write that waits longer than `limit` (`None`: wait
    /// as long as it takes, the default).
    pub fn set_timeout(&self, limit: Option<Duration>) -> Result<(), RawError> {
        self.conn.set_read_timeout(limit)?;
        self.conn.set_write_timeout(limit)?;
        Ok(())
    }

    /// Send a request; `data` (a put's object) in the same `send` when it
    /// is small.
    fn request(&mut self, op: u8, name: &str, data: &[u8]) -> Result<(), RawError> {
        let len = u8::try_from(name.len()).map_err(|_| RawError::NameTooLong)?;
        self.out.clear();
        self.out.push(op);
        self.out.push(len);
        self.out.extend_from_slice(name.as_bytes());
        self.out
            .extend_from_slice(&(data.len() as u64).to_le_bytes());
        if data.len() <= COALESCE_MAX {
            self.out.extend_from_slice(data);
            self.conn.write_all(&self.out)?;
        } else {
            self.conn.write_all(&self.out)?;
            self.conn.write_all(data)?;
        }
        Ok(())
    }

    /// The reply's status and size (an error reply read whole).
    fn answer(&mut self) -> Result<u64, RawError> {
        let mut status = [0u8; 1];
        self.rd.read_exact(&mut status)?;
        match status[0] {
            0 => {
                let mut size = [0u8; 8];
                self.rd.read_exact(&mut size)?;
                Ok(u64::from_le_bytes(size))
            }
            1 => {
                let mut len = [0u8; 2];
                self.rd.read_exact(&mut len)?;
                let mut msg = vec![0u8; usize::from(u16::from_le_bytes(len))];
                self.rd.read_exact(&mut msg)?;
                Err(RawError::Server(String::from_utf8_lossy(&msg).into_owned()))
            }
            _ => Err(RawError::Protocol("unknown status")),
        }
    }

    /// Store `data` as `name`; the size stored.
    pub fn put_bytes(&mut self, name: &str, data: &[u8]) -> Result<u64, RawError> {
        let sent = match self.request(OP_PUT, name, data) {
            Err(RawError::NameTooLong) => return Err(RawError::NameTooLong),
            sent => sent,
        };
        match self.answer() {
            Ok(n) if n == data.len() as u64 => Ok(n),
            Ok(_) => Err(RawError::Protocol("stored size differs from the sent one")),
            // A server that refuses part-way answers and closes: its
            // answer says more than the write that then failed.
            Err(e @ RawError::Server(_)) => Err(e),
            Err(e) => Err(sent.err().unwrap_or(e)),
        }
    }

    /// Fetch `name` into `out`; its size.
    pub fn get_to(&mut self, name: &str, out: &mut dyn Write) -> Result<u64, RawError> {
        self.request(OP_GET, name, &[])?;
        let size = self.answer()?;
        let mut left = size;
        while left > 0 {
            let n = usize::try_from(left).map_or(self.sink.len(), |l| l.min(self.sink.len()));
            self.rd.read_exact(&mut self.sink[..n])?;
            out.write_all(&self.sink[..n])?;
            left -= n as u64;
        }
        Ok(size)
    }

    /// Fetch `name` and drop its bytes as they arrive; its size.
    pub fn get_discard(&mut self, name: &str) -> Result<u64, RawError> {
        self.get_to(name, &mut io::sink())
    }
}
