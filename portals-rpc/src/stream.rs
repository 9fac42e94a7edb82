//! Pipelined bulk transfers: several chunk gets in flight while the
//! handler consumes the oldest, or several chunk puts in flight while the
//! handler fills the next, so that the network and the handler's own work
//! (a file write or read) overlap instead of taking turns, and a chunk's
//! acknowledgment round trip is not paid once per chunk.
//!
//! The chunk buffers come from the service thread's pool and go back to
//! it, so a thread that streams one object after another allocates (and
//! faults in) its buffers once.

use std::collections::VecDeque;

use portals::{AckReq, EventKind, MdHandle, Remote};

use crate::error::BulkError;
use crate::transfer::Link;

/// Most chunks in flight at once: each has up to two events (sent,
/// acknowledged or replied) in the service thread's 64-entry queue, which
/// must not overflow.
pub const MAX_BULK_DEPTH: usize = 16;

/// What writes a pushed chunk's bytes: `fill(offset, chunk)`.
type Fill<'f, E> = dyn FnMut(u64, &mut [u8]) -> Result<(), E> + 'f;

/// One chunk transfer in flight.
struct InFlight {
    md: MdHandle,
    len: usize,
    done: bool,
}

/// Get `[0, total)` of the peer's buffer in `chunk`-byte pieces, at most
/// `depth` at once (`remote(offset, len)` names each piece), handing the
/// pieces to `sink` in order. Every descriptor is unlinked and every
/// buffer back in `pool` when this returns, however it ends.
pub(crate) fn pull<E: From<BulkError>>(
    link: &Link<'_>,
    remote: &dyn Fn(u64, u64) -> Result<Remote, BulkError>,
    total: u64,
    chunk: usize,
    depth: usize,
    pool: &mut Vec<Vec<u8>>,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let chunk = chunk.max(1) as u64;
    let depth = depth.clamp(1, MAX_BULK_DEPTH);
    let mut flight: VecDeque<InFlight> = VecDeque::with_capacity(depth);
    let mut next = 0u64;
    let r = loop {
        // Keep the pipe full.
        let mut issued: Result<(), BulkError> = Ok(());
        while flight.len() < depth && next < total {
            let len = (total - next).min(chunk) as usize;
            let target = match remote(next, len as u64) {
                Ok(t) => t,
                Err(e) => {
                    issued = Err(e);
                    break;
                }
            };
            let mut buf = pool.pop().unwrap_or_default();
            buf.resize(len, 0);
            let md = match link.bind(buf) {
                Ok(md) => md,
                Err(e) => {
                    issued = Err(e);
                    break;
                }
            };
            flight.push_back(InFlight {
                md,
                len,
                done: false,
            });
            if let Err(e) = link.ni.get(md, &target) {
                issued = Err(e.into());
                break;
            }
            next += len as u64;
        }
        if let Err(e) = issued {
            break Err(E::from(e));
        }
        let Some(head) = flight.front() else {
            break Ok(());
        };
        if !head.done {
            let ev = match link.wait_for(|h| flight.iter().any(|f| f.md == h), EventKind::Reply) {
                Ok(ev) => ev,
                Err(e) => break Err(E::from(e)),
            };
            if let Some(f) = flight.iter_mut().find(|f| f.md == ev.md_handle) {
                if ev.mlength < f.len as u64 {
                    break Err(E::from(BulkError::Gone));
                }
                f.done = true;
            }
            continue;
        }
        let len = head.len;
        let md = head.md;
        flight.pop_front();
        let buf = match link.reclaim(md) {
            Ok(b) => b,
            Err(e) => break Err(E::from(e)),
        };
        // The later gets move while the sink works.
        let done = buf
            .get(..len)
            .ok_or(BulkError::Gone)
            .map_err(E::from)
            .and_then(&mut *sink);
        pool.push(buf);
        if let Err(e) = done {
            break Err(e);
        }
    };
    for f in flight {
        if let Ok(buf) = link.reclaim(f.md) {
            pool.push(buf);
        }
    }
    r
}

/// Put `[0, total)` of the peer's buffer in `chunk`-byte pieces, at most
/// `depth` unacknowledged at once; `fill(offset, piece)` writes each
/// piece's bytes before it leaves (`remote(offset, len)` names where it
/// lands). Returns once every piece is acknowledged, so a reply sent after
/// it finds the data in place whatever order the pieces landed in. Every
/// descriptor is unlinked and every buffer back in `pool` when this
/// returns, however it ends.
pub(crate) fn push<E: From<BulkError>>(
    link: &Link<'_>,
    remote: &dyn Fn(u64, u64) -> Result<Remote, BulkError>,
    total: u64,
    chunk: usize,
    depth: usize,
    pool: &mut Vec<Vec<u8>>,
    fill: &mut Fill<'_, E>,
) -> Result<(), E> {
    let chunk = chunk.max(1) as u64;
    let depth = depth.clamp(1, MAX_BULK_DEPTH);
    let mut flight: VecDeque<InFlight> = VecDeque::with_capacity(depth);
    let mut next = 0u64;
    let r = loop {
        // Keep the pipe full: the next piece is read while the earlier
        // ones are on the wire.
        let mut issued: Result<(), E> = Ok(());
        while flight.len() < depth && next < total {
            let len = (total - next).min(chunk) as usize;
            let target = match remote(next, len as u64) {
                Ok(t) => t,
                Err(e) => {
                    issued = Err(e.into());
                    break;
                }
            };
            let mut buf = pool.pop().unwrap_or_default();
            buf.resize(len, 0);
            if let Err(e) = fill(next, &mut buf) {
                pool.push(buf);
                issued = Err(e);
                break;
            }
            let md = match link.bind(buf) {
                Ok(md) => md,
                Err(e) => {
                    issued = Err(e.into());
                    break;
                }
            };
            flight.push_back(InFlight {
                md,
                len,
                done: false,
            });
            if let Err(e) = link.ni.put(md, AckReq::Ack, &target, 0) {
                issued = Err(BulkError::from(e).into());
                break;
            }
            next += len as u64;
        }
        if let Err(e) = issued {
            break Err(e);
        }
        if flight.is_empty() {
            break Ok(());
        }
        let ev = match link.wait_for(|h| flight.iter().any(|f| f.md == h), EventKind::Ack) {
            Ok(ev) => ev,
            Err(e) => break Err(E::from(e)),
        };
        let Some(at) = flight.iter().position(|f| f.md == ev.md_handle) else {
            continue;
        };
        // A short acknowledgment: the client's buffer went away.
        if ev.mlength < flight[at].len as u64 {
            break Err(E::from(BulkError::Gone));
        }
        flight[at].done = true;
        // Acknowledgments may come in any order (a lost datagram resent):
        // free whichever pieces are done.
        let mut freed: Result<(), BulkError> = Ok(());
        flight.retain(|f| {
            if !f.done || freed.is_err() {
                return true;
            }
            match link.reclaim(f.md) {
                Ok(buf) => {
                    pool.push(buf);
                    false
                }
                Err(e) => {
                    freed = Err(e);
                    true
                }
            }
        });
        if let Err(e) = freed {
            break Err(E::from(e));
        }
    };
    for f in flight {
        if let Ok(buf) = link.reclaim(f.md) {
            pool.push(buf);
        }
    }
    r
}
