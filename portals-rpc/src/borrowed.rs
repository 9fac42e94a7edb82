//! Pipelined bulk pushes straight from the handler's memory (a mapped
//! file, say): no chunk buffer, no copy on the server; the descriptors
//! borrow the slice and are all unlinked before the push returns.

use std::collections::VecDeque;
use std::time::Duration;

use portals::{AckReq, EventKind, MdDesc, MdHandle, MdOptions, PtlError, Remote, Unlink};

use crate::error::BulkError;
use crate::stream::MAX_BULK_DEPTH;
use crate::transfer::Link;

/// Unlink `md`, waiting while a transfer still uses its memory: the
/// memory is borrowed and may not be given back while lent. A transfer
/// in progress ends, one way or the other, when the transport delivers it
/// or gives up on the peer.
fn unlink_borrowed(link: &Link<'_>, md: MdHandle) {
    loop {
        match link.ni.md_unlink(md) {
            Err(PtlError::MdInUse) => std::thread::sleep(Duration::from_millis(1)),
            _ => return,
        }
    }
}

/// Put `src` at `[at, at + src.len())` of the peer's buffer in
/// `chunk`-byte pieces, at most `depth` unacknowledged at once, each
/// piece a descriptor over its part of `src` (`remote(offset, len)` names
/// where it lands). Returns once every piece is acknowledged, or on the
/// first failure; either way no descriptor over `src` is left.
pub(crate) fn push(
    link: &Link<'_>,
    remote: &dyn Fn(u64, u64) -> Result<Remote, BulkError>,
    at: u64,
    src: &[u8],
    chunk: usize,
    depth: usize,
) -> Result<(), BulkError> {
    let chunk = chunk.max(1);
    let depth = depth.clamp(1, MAX_BULK_DEPTH);
    let desc = MdDesc::new(MdOptions::empty()).eq(link.eq);
    let mut flight: VecDeque<(MdHandle, usize)> = VecDeque::with_capacity(depth);
    let mut pieces = src.chunks(chunk);
    let mut next = at;
    let r = loop {
        let mut issued = Ok(());
        while flight.len() < depth {
            let Some(piece) = pieces.next() else { break };
            let target = match remote(next, piece.len() as u64) {
                Ok(t) => t,
                Err(e) => {
                    issued = Err(e);
                    break;
                }
            };
            // SAFETY: `piece` is borrowed from `src` for this whole call;
            // a descriptor bound for a put is only read by the engine,
            // never written; every descriptor made here is unlinked, by
            // `unlink_borrowed`, which waits out a transfer in progress,
            // before this function returns.
            let md = match unsafe {
                link.ni.md_bind_raw(
                    &desc,
                    piece.as_ptr().cast_mut(),
                    piece.len(),
                    Unlink::Retain,
                )
            } {
                Ok(md) => md,
                Err(e) => {
                    issued = Err(e.into());
                    break;
                }
            };
            flight.push_back((md, piece.len()));
            if let Err(e) = link.ni.put(md, AckReq::Ack, &target, 0) {
                issued = Err(e.into());
                break;
            }
            next += piece.len() as u64;
        }
        if let Err(e) = issued {
            break Err(e);
        }
        if flight.is_empty() {
            break Ok(());
        }
        let ev = match link.wait_for(|h| flight.iter().any(|f| f.0 == h), EventKind::Ack) {
            Ok(ev) => ev,
            Err(e) => break Err(e),
        };
        let Some(i) = flight.iter().position(|f| f.0 == ev.md_handle) else {
            continue;
        };
        // A short acknowledgment: the client's buffer went away.
        if ev.mlength < flight[i].1 as u64 {
            break Err(BulkError::Gone);
        }
        // Acknowledgments may come in any order (a lost datagram resent).
        if let Some((md, _)) = flight.remove(i) {
            unlink_borrowed(link, md);
        }
    };
    for (md, _) in flight {
        unlink_borrowed(link, md);
    }
    r
}
