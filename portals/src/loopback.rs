//! The loopback NAL: any number of network interfaces inside one process,
//! connected by memory copies.
//!
//! Delivery is synchronous: a put's payload is copied into the target's
//! memory descriptor inside the initiator's `put` call, and the
//! acknowledgment comes back before `put` returns. There is no background
//! thread and nothing to poll. It serves the engine's tests, and anyone who
//! wants Portals semantics between threads.
//!
//! ```
//! use portals::{loopback::LoopbackNetwork, *};
//!
//! let net = LoopbackNetwork::new();
//! let target = net.ni(NiConfig::new(ProcessId::new(0, 1), 7)).unwrap();
//! let initiator = net.ni(NiConfig::new(ProcessId::new(0, 2), 7)).unwrap();
//!
//! let eq = target.eq_alloc(8).unwrap();
//! let me = target
//!     .me_attach(PortalIndex(4), ProcessId::ANY, 42, 0, Unlink::Retain, Position::After)
//!     .unwrap();
//! let md = target
//!     .md_attach(me, &MdDesc::new(MdOptions::OP_PUT).eq(eq), vec![0; 16], Unlink::Retain)
//!     .unwrap();
//!
//! let src = initiator.md_bind(&MdDesc::default(), b"hello".to_vec(), Unlink::Retain).unwrap();
//! initiator
//!     .put(src, AckReq::NoAck, &Remote::new(target.id(), PortalIndex(4), 42), 0)
//!     .unwrap();
//!
//! let ev = target.eq_wait(eq, None).unwrap();
//! assert_eq!(ev.kind, EventKind::Put);
//! assert_eq!(ev.mlength, 5);
//! let mut got = [0u8; 5];
//! target.md_read(md, 0, &mut got).unwrap();
//! assert_eq!(&got, b"hello");
//! ```

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::engine::{Outbound, Payload, RecvAction, Region};
use crate::error::{PtlError, Result};
use crate::nal::{Nal, NiCore};
use crate::ni::{NetworkInterface, NiConfig};
use crate::types::{FailType, ProcessId};

type Registry = Mutex<HashMap<ProcessId, Entry>>;

/// An interface on the network: its core, and the gate its shutdown closes.
#[derive(Clone)]
struct Entry {
    core: Weak<NiCore>,
    gate: Arc<Gate>,
}

/// Counts the deliveries that read or write an interface's descriptor
/// memory, so that its shutdown can wait for them: once
/// [`Nal::shutdown`] returns, the owner of memory attached with
/// `md_attach_raw` may free it (see that function's contract), so no other
/// thread may still be copying into or out of it.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    idle: Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    busy: usize,
}

/// Permission to touch an interface's memory; dropping it lets a waiting
/// shutdown go on.
struct Pass(Arc<Gate>);

impl Gate {
    /// A pass, unless the interface is shutting down.
    fn enter(gate: &Arc<Gate>) -> Option<Pass> {
        let mut s = gate.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.closed {
            return None;
        }
        s.busy += 1;
        Some(Pass(gate.clone()))
    }

    /// Refuse new passes and wait until every pass given out is dropped.
    fn close(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        while s.busy > 0 {
            s = self.idle.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        s.busy -= 1;
        if s.busy == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// A set of interfaces that can reach each other. Cloning gives another
/// handle to the same network.
#[derive(Clone, Default)]
pub struct LoopbackNetwork {
    peers: Arc<Registry>,
}

impl std::fmt::Debug for LoopbackNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.peers.lock().map(|p| p.len()).unwrap_or(0);
        write!(f, "LoopbackNetwork({n} interfaces)")
    }
}

impl LoopbackNetwork {
    /// An empty network.
    pub fn new() -> Self {
        LoopbackNetwork::default()
    }

    /// Create an interface on this network. Fails if `config.id` is already
    /// in use by a live interface.
    pub fn ni(&self, config: NiConfig) -> Result<NetworkInterface> {
        let peers = self.peers.clone();
        NetworkInterface::init(config, move |core| {
            let mut map = peers.lock().map_err(|_| PtlError::Shutdown)?;
            if map
                .get(&core.id())
                .is_some_and(|e| e.core.strong_count() > 0)
            {
                return Err(PtlError::InvalidArgument(
                    "process id already in use on this loopback network",
                ));
            }
            let gate = Arc::new(Gate::default());
            map.insert(
                core.id(),
                Entry {
                    core: Arc::downgrade(&core),
                    gate: gate.clone(),
                },
            );
            drop(map);
            let signal = Arc::new(Signal::default());
            let s = signal.clone();
            core.set_waker(Box::new(move || s.wake()));
            let nal: Arc<dyn Nal> = Arc::new(LoopbackNal {
                peers,
                me: Arc::downgrade(&core),
                id: core.id(),
                signal,
                gate,
            });
            Ok(nal)
        })
    }
}

/// A sticky wake-up flag for the one thread that blocks in `progress`.
#[derive(Default)]
struct Signal {
    flag: Mutex<bool>,
    cond: Condvar,
}

impl Signal {
    fn wake(&self) {
        let mut f = self.flag.lock().unwrap_or_else(|p| p.into_inner());
        *f = true;
        self.cond.notify_all();
    }

    fn wait(&self, timeout: Duration) {
        let f = self.flag.lock().unwrap_or_else(|p| p.into_inner());
        let (mut f, _) = self
            .cond
            .wait_timeout_while(f, timeout, |set| !*set)
            .unwrap_or_else(|p| p.into_inner());
        *f = false;
    }
}

struct LoopbackNal {
    peers: Arc<Registry>,
    me: Weak<NiCore>,
    id: ProcessId,
    signal: Arc<Signal>,
    gate: Arc<Gate>,
}

/// The interface a message comes from: its core, and its gate (none for a
/// process sending to itself through [`deliver_local`], whose caller keeps
/// the interface alive).
#[derive(Clone)]
struct Source {
    core: Weak<NiCore>,
    gate: Option<Arc<Gate>>,
}

/// Messages waiting for delivery, each with the interface that sent it.
type Queue = VecDeque<(Source, Outbound)>;

thread_local! {
    /// Messages produced while delivering (acks, replies), delivered by the
    /// outermost `send` on this thread so delivery never recurses.
    static PENDING: RefCell<Option<Queue>> = const { RefCell::new(None) };
}

/// Deliver a message a process sends to itself, and every response that
/// produces, synchronously. Transports use it for self-sends, which never
/// touch the network.
pub fn deliver_local(core: &Arc<NiCore>, msg: Outbound) {
    let me = Source {
        core: Arc::downgrade(core),
        gate: None,
    };
    let mut queue = VecDeque::new();
    queue.push_back((me, msg));
    while let Some((from, m)) = queue.pop_front() {
        let target = if m.header.dst == core.id() {
            Some((core.clone(), None))
        } else {
            None
        };
        deliver(&from, target, m, &mut queue);
    }
}

impl LoopbackNal {
    fn lookup(&self, id: ProcessId) -> Option<(Arc<NiCore>, Option<Arc<Gate>>)> {
        let map = self.peers.lock().ok()?;
        let e = map.get(&id)?;
        Some((e.core.upgrade()?, Some(e.gate.clone())))
    }

    fn source(&self) -> Source {
        Source {
            core: self.me.clone(),
            gate: Some(self.gate.clone()),
        }
    }
}

/// Deliver one message from `from` and complete its send token. `target` is
/// the destination's core and gate, if it is on the network.
fn deliver(
    from: &Source,
    target: Option<(Arc<NiCore>, Option<Arc<Gate>>)>,
    msg: Outbound,
    out: &mut Queue,
) {
    let Outbound {
        header,
        payload,
        token,
    } = msg;
    // The payload may be descriptor memory of the source interface (a reply
    // comes out of the responder's memory): hold its gate while reading, so
    // that a concurrent shutdown waits for the copy.
    let source_pass = match (&payload, &from.gate) {
        (Payload::Region(_), Some(g)) => match Gate::enter(g) {
            Some(p) => Some(p),
            None => {
                // The source is shutting down and its memory may be gone:
                // the message is lost with it.
                if let Some(me) = from.core.upgrade() {
                    if let Some(tok) = token {
                        me.with_engine(|e| e.send_complete(tok, FailType::Unreachable));
                    }
                }
                if let Some((t, _)) = &target {
                    t.with_engine(|e| e.peer_failed(header.src));
                }
                return;
            }
        },
        _ => None,
    };
    // Likewise the destination's memory, written below.
    let (target, target_pass) = match target {
        Some((t, Some(g))) => match Gate::enter(&g) {
            Some(p) => (Some(t), Some(p)),
            None => (None, None),
        },
        Some((t, None)) => (Some(t), None),
        None => (None, None),
    };
    let mut fail = FailType::Ok;
    match &target {
        None => fail = FailType::Unreachable,
        Some(t) => match t.with_engine(|e| e.recv_header_unheld(&header)) {
            RecvAction::Deposit { region, token, .. } => {
                let n = region.len().min(payload.len());
                if n > 0 {
                    // SAFETY: `region` is lent to us by the target engine
                    // until `token` completes; a source region is the
                    // initiator's, lent until its send token completes
                    // below; owned bytes live in `payload`.
                    unsafe { copy_payload(&payload, &region, n) };
                }
                if let Some(resp) = t.with_engine(|e| e.recv_complete(token)) {
                    out.push_back((responder(t, &target_pass), resp));
                }
            }
            // `recv_header_unheld` never defers.
            RecvAction::Discard(_) | RecvAction::Defer => {}
            RecvAction::Respond { response, .. } => {
                out.push_back((responder(t, &target_pass), response));
            }
        },
    }
    // Both memories are untouched from here on.
    drop(target_pass);
    drop(source_pass);
    if let Some(tok) = token {
        if let Some(me) = from.core.upgrade() {
            me.with_engine(|e| e.send_complete(tok, fail));
        }
    }
    if target.is_none() {
        if let Some(me) = from.core.upgrade() {
            me.with_engine(|e| e.peer_failed(header.dst));
        }
    }
}

/// Copy the first `n` bytes of `payload` into `dst`, piece by piece when
/// either side is scattered over an iovec descriptor's segments.
///
/// Raw pointers, not slices, and memmove semantics: when a process puts to
/// itself, source and destination may be the same memory. (Overlap happens
/// only when the user's own remote offsets aim a put at the bytes it
/// sends; the result is then as if copied piece by piece in order.)
///
/// # Safety
/// Both tokens open: `dst` is lent for writing, a source region for
/// reading, and nothing else uses either; `n` fits both.
unsafe fn copy_payload(payload: &Payload, dst: &Region, n: usize) {
    let (mut one, mut many) = (None, None);
    match payload {
        Payload::None => return,
        // SAFETY: the source token is open (caller's contract).
        Payload::Region(r) => many = Some(unsafe { r.pieces() }),
        Payload::Owned(v) => one = Some((v.as_ptr().cast_mut(), v.len())),
    }
    let mut src = std::iter::from_fn(|| one.take().or_else(|| many.as_mut()?.next()));
    // SAFETY: the destination token is open.
    let mut dst = unsafe { dst.pieces() };
    let (mut s, mut d) = (
        (std::ptr::null_mut::<u8>(), 0),
        (std::ptr::null_mut::<u8>(), 0),
    );
    let mut left = n;
    while left > 0 {
        if s.1 == 0 {
            let Some(p) = src.next() else { return };
            s = p;
        }
        if d.1 == 0 {
            let Some(p) = dst.next() else { return };
            d = p;
        }
        let k = s.1.min(d.1).min(left);
        // SAFETY: both pieces are valid for `k` more bytes (see above);
        // `copy` tolerates overlap.
        unsafe { std::ptr::copy(s.0, d.0, k) };
        s = (s.0.wrapping_add(k), s.1 - k);
        d = (d.0.wrapping_add(k), d.1 - k);
        left -= k;
    }
}

/// The source of a response sent by `t`, which was reached through `pass`
/// (none: a process talking to itself).
fn responder(t: &Arc<NiCore>, pass: &Option<Pass>) -> Source {
    Source {
        core: Arc::downgrade(t),
        gate: pass.as_ref().map(|p| p.0.clone()),
    }
}

impl Nal for LoopbackNal {
    fn name(&self) -> &'static str {
        "loopback"
    }

    fn send(&self, msg: Outbound) {
        let outermost = PENDING.with(|p| {
            let mut p = p.borrow_mut();
            if p.is_none() {
                *p = Some(VecDeque::new());
                true
            } else {
                false
            }
        });
        if !outermost {
            PENDING.with(|p| {
                if let Some(q) = p.borrow_mut().as_mut() {
                    q.push_back((self.source(), msg));
                }
            });
            return;
        }
        let mut queue = VecDeque::new();
        queue.push_back((self.source(), msg));
        while let Some((from, m)) = queue.pop_front() {
            let target = self.lookup(m.header.dst);
            let reached = target.as_ref().map(|(t, _)| t.clone());
            deliver(&from, target, m, &mut queue);
            // The delivery may have released triggered operations on
            // either side; their interfaces' sends land on `PENDING` (this
            // is the outermost send), so chains never recurse.
            if let Some(c) = from.core.upgrade() {
                c.send_triggered();
            }
            if let Some(t) = reached {
                t.send_triggered();
            }
            PENDING.with(|p| {
                if let Some(q) = p.borrow_mut().as_mut() {
                    queue.extend(q.drain(..));
                }
            });
        }
        PENDING.with(|p| *p.borrow_mut() = None);
    }

    fn progress(&self, timeout: Option<Duration>) -> Result<()> {
        if let Some(t) = timeout {
            self.signal.wait(t);
        }
        Ok(())
    }

    fn wake(&self) {
        self.signal.wake();
    }

    fn progresses_alone(&self) -> bool {
        // Delivery happens inside `send`.
        true
    }

    /// Leave the network, then wait until no other thread is still copying
    /// into or out of this interface's memory (a delivery that started
    /// before), so that memory attached with `md_attach_raw` may be freed as
    /// soon as the interface is dropped.
    fn shutdown(&self) {
        if let Ok(mut map) = self.peers.lock() {
            if map.get(&self.id).is_some_and(|e| e.core.ptr_eq(&self.me)) {
                map.remove(&self.id);
            }
        }
        self.gate.close();
    }
}
