//! The rendezvous: a small key-value store with fences, served by `ptlrun`
//! (or by `ptlrun --serve` for processes started on several hosts).
//!
//! Every process of the job connects, proves the job key, publishes its
//! endpoint address with `put`, and calls `fence`; the fence completes when
//! every rank has reached it and returns everything published so far. A
//! fence that does not complete in time fails with the list of the ranks
//! that never arrived.
//!
//! Wire protocol: one request per line, one answer per line (fields
//! separated by single spaces; keys and values contain no whitespace).
//!
//! ```text
//! JOIN <job-key-hex> <rank> <size>   → OK | ERR <message>
//! PUT <key> <value>                  → OK | ERR <message>
//! FENCE [<timeout-ms>]               → DATA <n>, then n lines "<key> <value>", then END
//!                                      | ERR <message>   (waits the server's timeout,
//!                                      or the one given)
//! ABORT <job-key-hex> <reason…>      → OK | ERR <message>   (fails every fence)
//! PEERFAILED                         → OK   (this rank saw a peer fail: its own
//!                                           failure is a consequence, not a cause)
//! ABSENT <job-key-hex>               → OK <ranks> | ERR <message>
//!                                      (ranks not waiting in the current fence,
//!                                      comma-separated, `-` for none)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::RuntimeError;

/// Longest line either side accepts; a key-value store for addresses has no
/// business with more.
const MAX_LINE: usize = 4096;

fn read_line<R: BufRead>(r: &mut R) -> io::Result<Option<String>> {
    let mut line = String::new();
    let n = Read::take(&mut *r, MAX_LINE as u64 + 1).read_line(&mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_LINE || !line.ends_with('\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "line too long or unterminated",
        ));
    }
    line.pop();
    Ok(Some(line))
}

/// How long a rank retries an unreachable rendezvous server before it
/// says (once) what it is waiting for.
const SAY_WAITING_AFTER: Duration = Duration::from_secs(3);

fn valid_token(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(char::is_whitespace)
}

// ----- server ------------------------------------------------------------------

struct State {
    size: u32,
    job_key: u64,
    kv: BTreeMap<String, String>,
    joined: BTreeSet<u32>,
    /// Ranks waiting in the current fence.
    fenced: BTreeSet<u32>,
    /// Incremented each time a fence completes.
    generation: u64,
    /// The store as it was when the latest fence completed: what every
    /// waiter of that fence returns, whatever is put after it.
    snapshot: std::sync::Arc<BTreeMap<String, String>>,
    /// A rank left or failed: every fence fails from now on.
    broken: Option<String>,
    /// Ranks that joined and have since disconnected.
    left: BTreeSet<u32>,
    /// Ranks that said they saw a peer fail.
    saw_peer_fail: BTreeSet<u32>,
}

/// The rendezvous server. Runs on its own threads until dropped.
pub struct KvsServer {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for KvsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KvsServer({})", self.addr)
    }
}

impl KvsServer {
    /// Serve a job of `size` ranks with key `job_key` on `bind` (port 0
    /// picks a free one). Fences time out after `timeout`.
    pub fn start(
        bind: SocketAddr,
        size: u32,
        job_key: u64,
        timeout: Duration,
    ) -> io::Result<KvsServer> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let state = Arc::new((
            Mutex::new(State {
                size,
                job_key,
                kv: BTreeMap::new(),
                joined: BTreeSet::new(),
                fenced: BTreeSet::new(),
                generation: 0,
                snapshot: Default::default(),
                broken: None,
                left: BTreeSet::new(),
                saw_peer_fail: BTreeSet::new(),
            }),
            Condvar::new(),
        ));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("ptl-kvs".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if sp.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let st = st.clone();
                    let _ = std::thread::Builder::new()
                        .name("ptl-kvs-conn".into())
                        .spawn(move || serve(conn, st, timeout));
                }
            })?;
        Ok(KvsServer { addr, state, stop })
    }

    /// Where ranks connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Wait until every rank has joined and disconnected again (the job is
    /// over), or `timeout` passes without any rank joining or leaving.
    /// Returns the ranks that never joined, if any.
    pub fn wait_finished(&self, timeout: Duration) -> Result<(), RuntimeError> {
        let (m, c) = &*self.state;
        let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if s.left.len() as u32 == s.size {
                return Ok(());
            }
            let before = (s.joined.len(), s.left.len());
            let (g, t) = c
                .wait_timeout(s, timeout)
                .unwrap_or_else(|p| p.into_inner());
            s = g;
            if t.timed_out() && (s.joined.len(), s.left.len()) == before {
                let missing: Vec<String> = (0..s.size)
                    .filter(|r| !s.joined.contains(r))
                    .map(|r| r.to_string())
                    .collect();
                return Err(RuntimeError::Rendezvous {
                    server: self.addr.to_string(),
                    why: if missing.is_empty() {
                        format!("no rank finished within {timeout:?}")
                    } else {
                        format!(
                            "ranks {} never joined within {timeout:?}",
                            missing.join(",")
                        )
                    },
                });
            }
        }
    }

    /// The value a rank put under `key`, if any.
    pub fn published(&self, key: &str) -> Option<String> {
        let (m, _) = &*self.state;
        m.lock()
            .unwrap_or_else(|p| p.into_inner())
            .kv
            .get(key)
            .cloned()
    }

    /// Whether `rank` said it saw a peer fail (`PEERFAILED`): if it fails
    /// too, that is a consequence of another rank's failure.
    pub fn saw_peer_fail(&self, rank: u32) -> bool {
        let (m, _) = &*self.state;
        m.lock()
            .unwrap_or_else(|p| p.into_inner())
            .saw_peer_fail
            .contains(&rank)
    }

    /// Make every current and future fence fail with `why` (used when a
    /// rank died, so that the others do not wait for it).
    pub fn break_job(&self, why: &str) {
        let (m, c) = &*self.state;
        let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
        s.broken.get_or_insert_with(|| why.to_string());
        c.notify_all();
    }
}

impl Drop for KvsServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.break_job("the rendezvous server shut down");
        // Unblock the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn serve(conn: TcpStream, state: Arc<(Mutex<State>, Condvar)>, timeout: Duration) {
    let Ok(w) = conn.try_clone() else { return };
    let mut w = io::BufWriter::new(w);
    let mut r = BufReader::new(conn);
    let mut rank: Option<u32> = None;
    let (m, c) = &*state;
    let reply = |w: &mut io::BufWriter<TcpStream>, s: &str| -> io::Result<()> {
        w.write_all(s.as_bytes())?;
        w.write_all(b"\n")?;
        w.flush()
    };
    while let Ok(Some(line)) = read_line(&mut r) {
        let f: Vec<&str> = line.split(' ').collect();
        let res = match (f.as_slice(), rank) {
            (["JOIN", key, r_, n], None) => {
                let parsed = (
                    u64::from_str_radix(key, 16),
                    r_.parse::<u32>(),
                    n.parse::<u32>(),
                );
                let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
                match parsed {
                    (Ok(k), _, _) if k != s.job_key => reply(&mut w, "ERR job key mismatch"),
                    (Ok(_), Ok(r_), Ok(n)) if n != s.size => {
                        let _ = r_;
                        reply(
                            &mut w,
                            &format!(
                                "ERR job size mismatch: the job has {} ranks, not {n}",
                                s.size
                            ),
                        )
                    }
                    (Ok(_), Ok(r_), Ok(_)) if r_ >= s.size => {
                        reply(&mut w, &format!("ERR rank {r_} out of range"))
                    }
                    (Ok(_), Ok(r_), Ok(_)) if s.joined.contains(&r_) => {
                        reply(&mut w, &format!("ERR rank {r_} joined twice"))
                    }
                    (Ok(_), Ok(r_), Ok(_)) => {
                        s.joined.insert(r_);
                        rank = Some(r_);
                        reply(&mut w, "OK")
                    }
                    _ => reply(&mut w, "ERR malformed JOIN"),
                }
            }
            (["PUT", k, v], Some(_)) if valid_token(k) && valid_token(v) => {
                let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
                s.kv.insert(k.to_string(), v.to_string());
                reply(&mut w, "OK")
            }
            (["FENCE", rest @ ..], Some(me))
                if rest.len() <= 1 && rest.iter().all(|t| t.parse::<u64>().is_ok()) =>
            {
                let timeout = rest
                    .first()
                    .and_then(|t| t.parse::<u64>().ok())
                    .map_or(timeout, Duration::from_millis);
                let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
                let gen = s.generation;
                s.fenced.insert(me);
                if s.fenced.len() as u32 == s.size {
                    s.fenced.clear();
                    s.snapshot = std::sync::Arc::new(s.kv.clone());
                    s.generation += 1;
                    c.notify_all();
                }
                let deadline = Instant::now() + timeout;
                while s.generation == gen && s.broken.is_none() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    s = c.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
                }
                if s.generation != gen {
                    // Only one fence can complete while we wait: the next
                    // needs us too.
                    let snap = s.snapshot.clone();
                    drop(s);
                    let mut out = format!("DATA {}\n", snap.len());
                    for (k, v) in snap.iter() {
                        out.push_str(k);
                        out.push(' ');
                        out.push_str(v);
                        out.push('\n');
                    }
                    out.push_str("END");
                    reply(&mut w, &out)
                } else if let Some(why) = s.broken.clone() {
                    drop(s);
                    reply(&mut w, &format!("ERR {why}"))
                } else {
                    let missing: Vec<String> = (0..s.size)
                        .filter(|r| !s.fenced.contains(r))
                        .map(|r| r.to_string())
                        .collect();
                    s.fenced.remove(&me);
                    drop(s);
                    reply(
                        &mut w,
                        &format!(
                            "ERR timeout after {timeout:?} waiting for ranks {}",
                            missing.join(",")
                        ),
                    )
                }
            }
            (["PEERFAILED"], Some(me)) => {
                let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
                s.saw_peer_fail.insert(me);
                drop(s);
                reply(&mut w, "OK")
            }
            (["ABSENT", key], _) => {
                let s = m.lock().unwrap_or_else(|p| p.into_inner());
                if u64::from_str_radix(key, 16).ok() != Some(s.job_key) {
                    drop(s);
                    reply(&mut w, "ERR job key mismatch")
                } else {
                    let absent: Vec<String> = (0..s.size)
                        .filter(|r| !s.fenced.contains(r))
                        .map(|r| r.to_string())
                        .collect();
                    drop(s);
                    let list = if absent.is_empty() {
                        "-".to_string()
                    } else {
                        absent.join(",")
                    };
                    reply(&mut w, &format!("OK {list}"))
                }
            }
            (["ABORT", key, ..], _) => {
                // Only a holder of the job key may end the job.
                let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
                if u64::from_str_radix(key, 16).ok() != Some(s.job_key) {
                    drop(s);
                    reply(&mut w, "ERR job key mismatch")
                } else {
                    let why = f[2..].join(" ");
                    s.broken.get_or_insert(if why.is_empty() {
                        "aborted".into()
                    } else {
                        why
                    });
                    c.notify_all();
                    drop(s);
                    reply(&mut w, "OK")
                }
            }
            _ => reply(&mut w, "ERR malformed request"),
        };
        if res.is_err() {
            break;
        }
    }
    if let Some(r) = rank {
        let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
        s.left.insert(r);
        c.notify_all();
    }
}

// ----- client ------------------------------------------------------------------

/// A rank's connection to the rendezvous server.
#[derive(Debug)]
pub struct KvsClient {
    r: BufReader<TcpStream>,
    w: TcpStream,
    server: String,
    /// How long a fence waits, if not the server's own timeout.
    fence_timeout: Option<Duration>,
}

impl KvsClient {
    /// Connect to `server` without joining (to abort a job from outside).
    pub fn connect(server: &str, timeout: Duration) -> Result<KvsClient, RuntimeError> {
        Self::open(server, timeout)
    }

    /// Connect to `server` (host:port), retrying until `timeout`, and join
    /// as `rank` of `size` with `job_key`.
    pub fn join(
        server: &str,
        job_key: u64,
        rank: u32,
        size: u32,
        timeout: Duration,
    ) -> Result<KvsClient, RuntimeError> {
        let mut c = Self::open(server, timeout)?;
        c.request(&format!("JOIN {job_key:x} {rank} {size}"))?;
        Ok(c)
    }

    fn open(server: &str, timeout: Duration) -> Result<KvsClient, RuntimeError> {
        let deadline = Instant::now() + timeout;
        let unreachable = |why: String| RuntimeError::Rendezvous {
            server: server.to_string(),
            why,
        };
        let addrs: Vec<SocketAddr> = server
            .to_socket_addrs()
            .map_err(|e| unreachable(format!("cannot resolve: {e}")))?
            .collect();
        let started = Instant::now();
        let mut warned = false;
        let stream = loop {
            let mut last_err = None;
            let mut got = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                    Ok(s) => {
                        got = Some(s);
                        break;
                    }
                    Err(e) => last_err = Some(e),
                }
            }
            if let Some(s) = got {
                break s;
            }
            let last_err = last_err.unwrap_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address")
            });
            let why = last_err.to_string();
            if Instant::now() >= deadline {
                return Err(RuntimeError::RendezvousUnreachable {
                    server: server.to_string(),
                    waited: timeout,
                    cause: last_err.kind(),
                    detail: why,
                });
            }
            // A rank that waits in silence looks hung: say once what for.
            if !warned && started.elapsed() >= SAY_WAITING_AFTER {
                warned = true;
                eprintln!(
                    "portals-runtime: waiting for the rendezvous server at {server} ({}): {why}; \
                     giving up after {timeout:?} ({})",
                    crate::env::BOOTSTRAP,
                    crate::env::BOOTSTRAP_TIMEOUT
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        stream
            .set_read_timeout(Some(timeout + Duration::from_secs(5)))
            .map_err(|e| unreachable(e.to_string()))?;
        let w = stream.try_clone().map_err(|e| unreachable(e.to_string()))?;
        Ok(KvsClient {
            r: BufReader::new(stream),
            w,
            server: server.to_string(),
            fence_timeout: None,
        })
    }

    fn proto(&self, why: impl Into<String>) -> RuntimeError {
        RuntimeError::Rendezvous {
            server: self.server.clone(),
            why: why.into(),
        }
    }

    fn send(&mut self, line: &str) -> Result<(), RuntimeError> {
        self.w
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| self.proto(format!("connection lost: {e}")))
    }

    fn recv(&mut self) -> Result<String, RuntimeError> {
        match read_line(&mut self.r) {
            Ok(Some(l)) => Ok(l),
            Ok(None) => Err(self.proto("connection closed by the server")),
            Err(e) => Err(self.proto(format!("connection lost: {e}"))),
        }
    }

    fn request(&mut self, line: &str) -> Result<(), RuntimeError> {
        self.send(line)?;
        let a = self.recv()?;
        match a.strip_prefix("ERR ") {
            Some(msg) => Err(self.proto(msg.to_string())),
            None if a == "OK" => Ok(()),
            None => Err(self.proto(format!("unexpected answer {a:?}"))),
        }
    }

    /// Publish `key` = `value` (no whitespace in either).
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), RuntimeError> {
        if !valid_token(key) || !valid_token(value) {
            return Err(RuntimeError::InvalidValue(format!("{key:?} = {value:?}")));
        }
        self.request(&format!("PUT {key} {value}"))
    }

    /// Tell the server the job failed: every fence fails from now on. Needs
    /// the job key.
    pub fn abort(&mut self, job_key: u64, why: &str) -> Result<(), RuntimeError> {
        let why: String = why.split_whitespace().collect::<Vec<_>>().join(" ");
        self.request(&format!("ABORT {job_key:x} {why}"))
    }

    /// Say that this rank saw a peer fail, so that the launcher blames
    /// that peer, not this rank, if this rank fails too.
    pub fn saw_peer_fail(&mut self) -> Result<(), RuntimeError> {
        self.request("PEERFAILED")
    }

    /// The ranks not waiting in the fence under way (every rank if none
    /// is). Needs the job key.
    pub fn absent_from_fence(&mut self, job_key: u64) -> Result<Vec<u32>, RuntimeError> {
        self.send(&format!("ABSENT {job_key:x}"))?;
        let a = self.recv()?;
        if let Some(msg) = a.strip_prefix("ERR ") {
            return Err(self.proto(msg.to_string()));
        }
        match a.strip_prefix("OK ") {
            Some("-") => Ok(Vec::new()),
            Some(list) => list
                .split(',')
                .map(|r| r.parse::<u32>())
                .collect::<Result<Vec<u32>, _>>()
                .map_err(|_| self.proto(format!("unexpected answer {a:?}"))),
            None => Err(self.proto(format!("unexpected answer {a:?}"))),
        }
    }

    /// Make later fences wait `timeout` for every rank instead of the
    /// server's timeout (the bootstrap timeout of the launcher).
    pub fn set_fence_timeout(&mut self, timeout: Duration) -> Result<(), RuntimeError> {
        // The answer comes when the server gives up: read a little longer.
        self.w
            .set_read_timeout(Some(timeout + Duration::from_secs(5)))
            .map_err(|e| self.proto(e.to_string()))?;
        self.fence_timeout = Some(timeout);
        Ok(())
    }

    /// Wait for every rank, then return everything published.
    pub fn fence(&mut self) -> Result<BTreeMap<String, String>, RuntimeError> {
        match self.fence_timeout {
            Some(t) => self.send(&format!("FENCE {}", t.as_millis().max(1)))?,
            None => self.send("FENCE")?,
        }
        let head = self.recv()?;
        if let Some(msg) = head.strip_prefix("ERR ") {
            return Err(self.proto(msg.to_string()));
        }
        let n: usize = head
            .strip_prefix("DATA ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| self.proto(format!("unexpected answer {head:?}")))?;
        let mut kv = BTreeMap::new();
        for _ in 0..n {
            let l = self.recv()?;
            let (k, v) = l
                .split_once(' ')
                .ok_or_else(|| self.proto(format!("malformed entry {l:?}")))?;
            kv.insert(k.to_string(), v.to_string());
        }
        if self.recv()? != "END" {
            return Err(self.proto("missing END"));
        }
        Ok(kv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(n: u32, key: u64, t: Duration) -> KvsServer {
        KvsServer::start("127.0.0.1:0".parse().unwrap(), n, key, t).unwrap()
    }

    #[test]
    fn publish_fence_fetch() {
        let s = server(3, 0xabc, Duration::from_secs(10));
        let addr = s.addr().to_string();
        let results: Vec<_> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    let addr = addr.clone();
                    sc.spawn(move || {
                        let mut c =
                            KvsClient::join(&addr, 0xabc, r, 3, Duration::from_secs(5)).unwrap();
                        c.put(&format!("addr.{r}"), &format!("host:{}", 1000 + r))
                            .unwrap();
                        let a = c.fence().unwrap();
                        c.put(&format!("second.{r}"), "x").unwrap();
                        let b = c.fence().unwrap();
                        (a, b)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (a, b) in results {
            assert_eq!(a.len(), 3);
            assert_eq!(a["addr.2"], "host:1002");
            assert_eq!(b.len(), 6);
        }
    }

    #[test]
    fn wrong_key_wrong_size_and_bad_rank_are_refused() {
        let s = server(2, 7, Duration::from_secs(5));
        let a = s.addr().to_string();
        let e = KvsClient::join(&a, 8, 0, 2, Duration::from_secs(2)).unwrap_err();
        assert!(e.to_string().contains("job key mismatch"), "{e}");
        let e = KvsClient::join(&a, 7, 0, 3, Duration::from_secs(2)).unwrap_err();
        assert!(e.to_string().contains("size mismatch"), "{e}");
        let e = KvsClient::join(&a, 7, 2, 2, Duration::from_secs(2)).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let _ok = KvsClient::join(&a, 7, 1, 2, Duration::from_secs(2)).unwrap();
        let e = KvsClient::join(&a, 7, 1, 2, Duration::from_secs(2)).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn an_incomplete_fence_times_out_naming_the_missing_ranks() {
        let s = server(4, 1, Duration::from_millis(300));
        let a = s.addr().to_string();
        let mut c0 = KvsClient::join(&a, 1, 0, 4, Duration::from_secs(2)).unwrap();
        let mut c2 = KvsClient::join(&a, 1, 2, 4, Duration::from_secs(2)).unwrap();
        let h = std::thread::spawn(move || c2.fence());
        let e = c0.fence().unwrap_err().to_string();
        assert!(
            e.contains("waiting for ranks 1,3") || e.contains("waiting for ranks 1,2,3"),
            "{e}"
        );
        assert!(h.join().unwrap().is_err());
    }

    #[test]
    fn an_unreachable_server_is_a_clear_error() {
        // Bind and drop to find a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = KvsClient::join(
            &format!("127.0.0.1:{port}"),
            1,
            0,
            1,
            Duration::from_millis(300),
        )
        .unwrap_err();
        match &e {
            RuntimeError::RendezvousUnreachable { server, cause, .. } => {
                assert_eq!(server, &format!("127.0.0.1:{port}"));
                assert_eq!(*cause, io::ErrorKind::ConnectionRefused);
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains("unreachable for 300ms (PTL_BOOTSTRAP_TIMEOUT sets the wait)")
                && msg.contains("refused"),
            "{msg}"
        );
    }

    #[test]
    fn a_broken_job_fails_waiting_fences() {
        let s = server(2, 1, Duration::from_secs(30));
        let a = s.addr().to_string();
        let mut c0 = KvsClient::join(&a, 1, 0, 2, Duration::from_secs(2)).unwrap();
        let h = std::thread::spawn(move || c0.fence());
        std::thread::sleep(Duration::from_millis(100));
        s.break_job("rank 1 exited with status 3");
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("rank 1 exited"), "{e}");
    }

    #[test]
    fn the_server_knows_when_the_job_is_over_and_who_never_came() {
        let s = server(2, 1, Duration::from_secs(5));
        let a = s.addr().to_string();
        let c0 = KvsClient::join(&a, 1, 0, 2, Duration::from_secs(2)).unwrap();
        let e = s
            .wait_finished(Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ranks 1 never joined"), "{e}");
        let c1 = KvsClient::join(&a, 1, 1, 2, Duration::from_secs(2)).unwrap();
        drop(c0);
        drop(c1);
        s.wait_finished(Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn an_abort_from_outside_fails_the_fences() {
        let s = server(2, 1, Duration::from_secs(30));
        let a = s.addr().to_string();
        let mut c0 = KvsClient::join(&a, 1, 0, 2, Duration::from_secs(2)).unwrap();
        let h = std::thread::spawn(move || c0.fence());
        std::thread::sleep(Duration::from_millis(50));
        let mut outsider = KvsClient::connect(&a, Duration::from_secs(2)).unwrap();
        let e = outsider.abort(2, "not my job").unwrap_err().to_string();
        assert!(e.contains("job key mismatch"), "{e}");
        outsider
            .abort(1, "rank 1 exited with status 9 on host b")
            .unwrap();
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("host b"), "{e}");
    }

    #[test]
    fn the_server_says_who_is_absent_from_a_fence_and_who_saw_a_peer_fail() {
        let s = server(3, 5, Duration::from_secs(30));
        let a = s.addr().to_string();
        let mut c0 = KvsClient::join(&a, 5, 0, 3, Duration::from_secs(2)).unwrap();
        let mut c1 = KvsClient::join(&a, 5, 1, 3, Duration::from_secs(2)).unwrap();
        let mut outsider = KvsClient::connect(&a, Duration::from_secs(2)).unwrap();
        assert_eq!(outsider.absent_from_fence(5).unwrap(), vec![0, 1, 2]);
        let h = std::thread::spawn(move || c0.fence());
        let t = Instant::now();
        while outsider.absent_from_fence(5).unwrap() != vec![1, 2] {
            assert!(t.elapsed() < Duration::from_secs(20), "rank 0 never fenced");
            std::thread::sleep(Duration::from_millis(10));
        }
        let e = outsider.absent_from_fence(6).unwrap_err().to_string();
        assert!(e.contains("job key mismatch"), "{e}");
        assert!(!s.saw_peer_fail(1));
        c1.saw_peer_fail().unwrap();
        assert!(s.saw_peer_fail(1) && !s.saw_peer_fail(0));
        s.break_job("done");
        assert!(h.join().unwrap().is_err());
    }

    #[test]
    fn a_fence_waits_the_time_its_client_asked_for() {
        // The server would give up after 300 ms; the client asks for more.
        let s = server(2, 1, Duration::from_millis(300));
        let a = s.addr().to_string();
        let mut c0 = KvsClient::join(&a, 1, 0, 2, Duration::from_secs(2)).unwrap();
        let mut c1 = KvsClient::join(&a, 1, 1, 2, Duration::from_secs(2)).unwrap();
        c0.set_fence_timeout(Duration::from_secs(60)).unwrap();
        let h = std::thread::spawn(move || c0.fence().map(|kv| kv.len()));
        std::thread::sleep(Duration::from_millis(1200));
        c1.put("k", "v").unwrap();
        c1.fence().unwrap();
        assert_eq!(h.join().unwrap().unwrap(), 1);
        // And shorter: rank 0 (gone) never comes to this one.
        c1.set_fence_timeout(Duration::from_millis(100)).unwrap();
        let e = c1.fence().unwrap_err().to_string();
        assert!(e.contains("timeout after 100ms waiting for ranks 0"), "{e}");
    }

    #[test]
    fn malformed_requests_and_values_are_refused() {
        let s = server(1, 1, Duration::from_secs(5));
        let mut c =
            KvsClient::join(&s.addr().to_string(), 1, 0, 1, Duration::from_secs(2)).unwrap();
        assert!(matches!(
            c.put("a b", "c"),
            Err(RuntimeError::InvalidValue(_))
        ));
        let e = c.request("BOGUS").unwrap_err().to_string();
        assert!(e.contains("malformed"), "{e}");
        c.put("k", "v").unwrap();
        assert_eq!(c.fence().unwrap()["k"], "v");
    }
}
