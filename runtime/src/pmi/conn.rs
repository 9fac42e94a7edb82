//! The socket to the process manager, with deadlines on every read and write.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::error::{PmiError, Result};
use super::wire::Msg;

/// The connected socket, whichever way the launcher provided it.
#[derive(Debug)]
pub(crate) enum Stream {
    /// An inherited `PMI_FD` (a socketpair end) or a test's socketpair.
    Unix(UnixStream),
    /// A connection to `PMI_PORT`.
    Tcp(TcpStream),
}

impl Stream {
    fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(Some(t)),
            Stream::Tcp(s) => s.set_read_timeout(Some(t)),
        }
    }
    fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(Some(t)),
            Stream::Tcp(s) => s.set_write_timeout(Some(t)),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn shutdown(&self) {
        // Best effort: the peer learns we are gone either way once the
        // socket is closed on drop.
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

/// Why a read or write did not complete.
#[derive(Debug)]
pub(crate) enum IoFail {
    /// The deadline passed.
    Timeout,
    /// End of stream (or a reset connection).
    Closed,
    /// A line longer than the limit, or not UTF-8; carries what was read.
    Framing(String, String),
    /// Any other socket error.
    Io(io::Error),
}

/// A buffered connection. Replies are read through an internal buffer so a
/// server that sends several lines at once (hydra's `initack` does) loses
/// nothing between reads.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: Stream,
    buf: Vec<u8>,
}

fn remaining(deadline: Instant) -> Result<Duration, IoFail> {
    let left = deadline.saturating_duration_since(Instant::now());
    // SO_RCVTIMEO of zero means "block forever", so an expired deadline
    // must never reach the socket.
    if left.is_zero() {
        Err(IoFail::Timeout)
    } else {
        Ok(left)
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Conn {
    pub(crate) fn new(stream: Stream) -> Conn {
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Write all of `bytes` before `deadline`.
    pub(crate) fn send(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), IoFail> {
        let mut off = 0;
        while off < bytes.len() {
            let left = remaining(deadline)?;
            self.stream.set_write_timeout(left).map_err(IoFail::Io)?;
            match self.stream.write(&bytes[off..]) {
                Ok(0) => return Err(IoFail::Closed),
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(IoFail::Timeout),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
                {
                    return Err(IoFail::Closed)
                }
                Err(e) => return Err(IoFail::Io(e)),
            }
        }
        Ok(())
    }

    /// Read more bytes into the buffer; `Closed` at end of stream.
    fn fill(&mut self, deadline: Instant) -> Result<(), IoFail> {
        let mut chunk = [0u8; 4096];
        loop {
            let left = remaining(deadline)?;
            self.stream.set_read_timeout(left).map_err(IoFail::Io)?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(IoFail::Closed),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(IoFail::Timeout),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Err(IoFail::Closed),
                Err(e) => return Err(IoFail::Io(e)),
            }
        }
    }

    /// Read one `\n`-terminated line of at most `max` bytes (newline
    /// excluded from the result).
    pub(crate) fn read_line(&mut self, max: usize, deadline: Instant) -> Result<String, IoFail> {
        let mut scanned = 0;
        loop {
            if let Some(pos) = self.buf[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + pos;
                let line: Vec<u8> = self.buf.drain(..=end).take(end).collect();
                return String::from_utf8(line).map_err(|e| {
                    IoFail::Framing(
                        "line is not UTF-8".into(),
                        String::from_utf8_lossy(e.as_bytes()).into_owned(),
                    )
                });
            }
            scanned = self.buf.len();
            if scanned > max {
                let head = String::from_utf8_lossy(&self.buf[..max.min(200)]).into_owned();
                return Err(IoFail::Framing(
                    format!("line longer than {max} bytes"),
                    head,
                ));
            }
            self.fill(deadline)?;
        }
    }

    /// Read exactly `n` bytes.
    pub(crate) fn read_exact(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, IoFail> {
        while self.buf.len() < n {
            self.fill(deadline)?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    pub(crate) fn shutdown(&self) {
        self.stream.shutdown();
    }
}

/// A connection plus what every request needs: the timeout, and whether an
/// earlier failure left the byte stream out of step with the server.
#[derive(Debug)]
pub(crate) struct Channel {
    conn: Conn,
    pub(crate) timeout: Duration,
    poisoned: bool,
}

impl Channel {
    pub(crate) fn new(stream: Stream, timeout: Duration) -> Channel {
        Channel {
            conn: Conn::new(stream),
            timeout,
            poisoned: false,
        }
    }

    pub(crate) fn conn(&mut self) -> &mut Conn {
        &mut self.conn
    }

    pub(crate) fn deadline(&self) -> Instant {
        // An absurd timeout (Duration::MAX) must not overflow Instant.
        Instant::now()
            .checked_add(self.timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365))
    }

    /// Refuse to start a request on a connection that is out of step.
    pub(crate) fn usable(&self) -> Result<()> {
        if self.poisoned {
            Err(PmiError::Poisoned)
        } else {
            Ok(())
        }
    }

    /// Turn a transport failure into the error for `request`, and mark the
    /// connection unusable: after a timeout or a framing error, whatever the
    /// server sends next can no longer be matched to our requests.
    pub(crate) fn fail(&mut self, request: &'static str, f: IoFail) -> PmiError {
        self.poisoned = true;
        match f {
            IoFail::Timeout => PmiError::Timeout {
                request,
                after: self.timeout,
            },
            IoFail::Closed => PmiError::Closed { request },
            IoFail::Framing(why, reply) => PmiError::Malformed {
                request,
                why,
                reply,
            },
            IoFail::Io(source) => PmiError::Io { request, source },
        }
    }

    /// Write one whole request within the timeout.
    pub(crate) fn send(&mut self, request: &'static str, bytes: &[u8]) -> Result<()> {
        let deadline = self.deadline();
        self.conn
            .send(bytes, deadline)
            .map_err(|f| self.fail(request, f))
    }

    /// Check that a parsed reply answers `request` with `expect`.
    pub(crate) fn expect(
        &mut self,
        request: &'static str,
        expect: &'static str,
        m: Msg,
    ) -> Result<Msg> {
        if m.cmd == expect {
            Ok(m)
        } else {
            Err(self.unexpected(request, expect, &m.cmd))
        }
    }

    /// A reply we cannot make sense of: report it and poison the channel.
    pub(crate) fn malformed(
        &mut self,
        request: &'static str,
        why: String,
        reply: &str,
    ) -> PmiError {
        self.poisoned = true;
        PmiError::Malformed {
            request,
            why,
            reply: reply.to_string(),
        }
    }

    /// A well-formed reply to the wrong command: the server and we disagree
    /// about where we are in the conversation, so poison the channel.
    pub(crate) fn unexpected(
        &mut self,
        request: &'static str,
        expected: &'static str,
        got: &str,
    ) -> PmiError {
        self.poisoned = true;
        PmiError::UnexpectedCommand {
            request,
            expected,
            got: got.to_string(),
        }
    }

    pub(crate) fn shutdown(&self) {
        self.conn.shutdown();
    }

    /// Read and discard whatever the server sends until it closes the
    /// connection (`true`) or `wait` passes or the socket fails (`false`).
    pub(crate) fn wait_for_close(&mut self, wait: Duration) -> bool {
        let Some(deadline) = Instant::now().checked_add(wait) else {
            return false;
        };
        loop {
            self.conn.buf.clear();
            match self.conn.fill(deadline) {
                Ok(()) => {}
                Err(IoFail::Closed) => return true,
                Err(_) => return false,
            }
        }
    }
}
