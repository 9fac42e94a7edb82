//! Pipelined bulk pulls: several chunk gets in flight while the handler
//! consumes the oldest, so that the network and the handler's own work
//! (a file write) overlap instead of taking turns.
//!
//! The chunk buffers come from the service thread's pool and go back to
//! it, so a thread that streams one object after another allocates (and
//! faults in) its buffers once.

use std::collections::VecDeque;

use portals::{EventKind, MdHandle, Remote};

use crate::error::BulkError;
use crate::transfer::Link;

/// One chunk get in flight.
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
    let depth = depth.max(1);
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
