//! A scripted fake process manager for tests: it checks the client's exact
//! requests and sends canned replies, over a socketpair or a TCP connection
//! on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long the fake waits for any one request before giving up.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// One step of a script.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Expect exactly this PMI-1 line (given without its newline).
    Line(String),
    /// Expect exactly this PMI-2 command body, framed by a right-aligned
    /// six-character length.
    Cmd(String),
    /// Expect a PMI-2 command body, of any length, that starts with the
    /// first text and ends with the second (for requests carrying values
    /// the test cannot know, such as a port).
    CmdLike(String, String),
    /// Send these bytes.
    Send(Vec<u8>),
    /// Wait this long before the next step.
    Pause(Duration),
    /// Keep the connection open, reading nothing, until the client closes
    /// it (at most [`STEP_TIMEOUT`]).
    Hold,
    /// Expect the client to close the connection without sending more.
    Eof,
}

/// Expect a PMI-1 request line.
pub(crate) fn req1(line: &str) -> Step {
    Step::Line(line.to_string())
}

/// Send a PMI-1 reply line (newline added).
pub(crate) fn rep1(line: &str) -> Step {
    Step::Send(format!("{line}\n").into_bytes())
}

/// Expect a PMI-2 request body.
pub(crate) fn req2(body: &str) -> Step {
    Step::Cmd(body.to_string())
}

/// Send a PMI-2 reply, framed like hydra does (`%6u`).
pub(crate) fn rep2(body: &str) -> Step {
    Step::Send(format!("{:6}{body}", body.len()).into_bytes())
}

/// Send raw bytes.
pub(crate) fn raw(bytes: &[u8]) -> Step {
    Step::Send(bytes.to_vec())
}

/// The running fake; [`finish`](Fake::finish) reports whether the client
/// followed the script.
pub(crate) struct Fake {
    handle: JoinHandle<Result<(), String>>,
}

fn run(reader: impl Read, mut writer: impl Write, script: Vec<Step>) -> Result<(), String> {
    let mut reader = BufReader::new(reader);
    for (i, step) in script.into_iter().enumerate() {
        match step {
            Step::Line(want) => {
                let mut got = Vec::new();
                reader
                    .read_until(b'\n', &mut got)
                    .map_err(|e| format!("step {i}: reading {want:?}: {e}"))?;
                let got = String::from_utf8_lossy(&got).into_owned();
                if got != format!("{want}\n") {
                    return Err(format!("step {i}: expected {want:?}, got {got:?}"));
                }
            }
            Step::CmdLike(head, tail) => {
                let mut prefix = [0u8; 6];
                reader
                    .read_exact(&mut prefix)
                    .map_err(|e| format!("step {i}: reading length of {head:?}...: {e}"))?;
                let len: usize = String::from_utf8_lossy(&prefix)
                    .trim()
                    .parse()
                    .map_err(|_| format!("step {i}: bad length {prefix:?}"))?;
                let mut body = vec![0u8; len];
                reader
                    .read_exact(&mut body)
                    .map_err(|e| format!("step {i}: reading {head:?}...: {e}"))?;
                let body = String::from_utf8_lossy(&body).into_owned();
                if !body.starts_with(&head) || !body.ends_with(&tail) {
                    return Err(format!(
                        "step {i}: expected {head:?}...{tail:?}, got {body:?}"
                    ));
                }
            }
            Step::Cmd(want) => {
                let mut prefix = [0u8; 6];
                reader
                    .read_exact(&mut prefix)
                    .map_err(|e| format!("step {i}: reading length of {want:?}: {e}"))?;
                let want_prefix = format!("{:6}", want.len());
                if prefix != want_prefix.as_bytes() {
                    return Err(format!(
                        "step {i}: expected length {want_prefix:?} for {want:?}, got {:?}",
                        String::from_utf8_lossy(&prefix)
                    ));
                }
                let mut body = vec![0u8; want.len()];
                reader
                    .read_exact(&mut body)
                    .map_err(|e| format!("step {i}: reading {want:?}: {e}"))?;
                let body = String::from_utf8_lossy(&body).into_owned();
                if body != want {
                    return Err(format!("step {i}: expected {want:?}, got {body:?}"));
                }
            }
            Step::Send(bytes) => writer
                .write_all(&bytes)
                .map_err(|e| format!("step {i}: sending: {e}"))?,
            Step::Pause(d) => thread::sleep(d),
            Step::Hold => {
                let until = Instant::now() + STEP_TIMEOUT;
                let mut byte = [0u8; 1];
                loop {
                    match reader.read(&mut byte) {
                        Ok(0) => break,
                        Ok(_) => return Err(format!("step {i}: unexpected data while holding")),
                        Err(_) if Instant::now() < until => {}
                        Err(e) => return Err(format!("step {i}: client never closed: {e}")),
                    }
                }
            }
            Step::Eof => {
                let mut rest = Vec::new();
                reader
                    .read_to_end(&mut rest)
                    .map_err(|e| format!("step {i}: waiting for close: {e}"))?;
                if !rest.is_empty() {
                    return Err(format!(
                        "step {i}: expected close, got {:?}",
                        String::from_utf8_lossy(&rest)
                    ));
                }
            }
        }
    }
    Ok(())
}

impl Fake {
    /// Serve `script` on one end of a socketpair; returns the other end.
    pub(crate) fn pair(script: Vec<Step>) -> (UnixStream, Fake) {
        let (client, server) = UnixStream::pair().expect("socketpair");
        server
            .set_read_timeout(Some(STEP_TIMEOUT))
            .expect("read timeout");
        let reader = server.try_clone().expect("clone");
        let handle = thread::spawn(move || run(reader, server, script));
        (client, Fake { handle })
    }

    /// Serve `script` to the first connection to a listener on
    /// 127.0.0.1; returns its port.
    pub(crate) fn tcp(script: Vec<Step>) -> (u16, Fake) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let handle = thread::spawn(move || {
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let until = Instant::now() + STEP_TIMEOUT;
            let stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > until {
                            return Err("no client connected".into());
                        }
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e.to_string()),
                }
            };
            stream.set_nonblocking(false).map_err(|e| e.to_string())?;
            stream
                .set_read_timeout(Some(STEP_TIMEOUT))
                .map_err(|e| e.to_string())?;
            let reader = stream.try_clone().map_err(|e| e.to_string())?;
            run(reader, stream, script)
        });
        (port, Fake { handle })
    }

    /// Wait for the script to end; panic with the fake's complaint if the
    /// client strayed from it.
    pub(crate) fn finish(self) {
        match self.handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(why)) => panic!("fake PMI server: {why}"),
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}
