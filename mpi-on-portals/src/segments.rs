//! Messages over segment lists and staged buffers: how a layer with
//! non-contiguous datatypes (the rsmpi face, `mpi-rsmpi`) sends and
//! receives them.
//!
//! A layout described as a list of segments (one per contiguous run, see
//! [`crate::typemap::Typemap::segments`]) goes to the engine as an iovec
//! descriptor: the transport gathers the message from the segments and
//! scatters it into the receiver's, with no packing copy on either side.
//! A layout that cannot go that way (too many tiny runs, values that must
//! be validated before they are written) is staged: a send takes an owned
//! packed buffer, a receive lands in an owned stage that a completion step
//! unpacks into the user's memory as the request completes — whether that
//! is seen by a wait, a test or the end of the request's scope.
//!
//! The starts return a [`Request<'static>`](Request): tie it to a scope
//! with [`Request::in_scope`], or wait for it before the memory goes.

use crate::comm::{CommData, Process, Tag, ANY_TAG};
use crate::device::{Mem, Mode};
use crate::error::{MpiError, Result};
use crate::p2p::Source;
use crate::raw::SendMode;
use crate::request::Request;
use crate::status::Status;

pub use portals::Iovec;

fn check_tag(tag: Tag) -> Result<u32> {
    u32::try_from(tag).map_err(|_| MpiError::InvalidTag(tag))
}

fn recv_tag(tag: Tag) -> Result<Option<u32>> {
    if tag == ANY_TAG {
        Ok(None)
    } else {
        check_tag(tag).map(Some)
    }
}

fn mode(m: SendMode) -> Mode {
    match m {
        SendMode::Standard => Mode::Standard,
        SendMode::Synchronous => Mode::Synchronous,
        SendMode::Ready => Mode::Ready,
    }
}

/// Most segments one message's list may have here (the engine's
/// `max_iovecs`); a longer list must be staged.
pub fn max_segments(p: &Process<'_>) -> usize {
    p.comm.dev.max_iovecs()
}

/// Start a send of the concatenation of the segments `list` to `dest`.
/// The list is copied; the segments are read until the request completes.
///
/// # Safety
/// Every segment must stay valid for reads, and unmodified, until the
/// request completes (wait for it, or tie it to a scope that the memory
/// outlives with [`Request::in_scope`]).
pub unsafe fn immediate_send(
    dest: &Process<'_>,
    list: &[Iovec],
    tag: Tag,
    send_mode: SendMode,
) -> Result<Request<'static>> {
    let len = list.iter().map(|v| v.len).sum();
    // SAFETY: forwarded from our caller.
    unsafe { start_send(dest, Mem::iov(list), len, tag, send_mode, None) }
}

/// Start a send of `packed` (a layout packed by the caller) to `dest`; the
/// request owns the buffer until it completes.
pub fn immediate_send_staged(
    dest: &Process<'_>,
    packed: Vec<u8>,
    tag: Tag,
    send_mode: SendMode,
) -> Result<Request<'static>> {
    let len = packed.len();
    let mem = Mem::Flat(packed.as_ptr().cast_mut(), len);
    // SAFETY: the vector moves into the request; its heap buffer does not
    // move and lives until the request is done, and nobody writes it.
    unsafe { start_send(dest, mem, len, tag, send_mode, Some(Box::new(packed))) }
}

/// Start a send of `mem` (`len` bytes) to `dest`; the request keeps
/// `owned` until it completes.
///
/// # Safety
/// As for [`immediate_send`], for every segment of `mem`.
unsafe fn start_send(
    dest: &Process<'_>,
    mem: Mem<'_>,
    len: usize,
    tag: Tag,
    send_mode: SendMode,
    owned: Option<Box<dyn std::any::Any + Send>>,
) -> Result<Request<'static>> {
    let c = dest.comm;
    let dst = c.world_rank(dest.rank)?;
    let tag = check_tag(tag)?;
    let id = c.dev.bulk_post(len, || {
        // SAFETY: forwarded from our caller.
        unsafe {
            c.dev
                .isend_mem(c.ctx, c.me, dst, tag, mem, mode(send_mode), owned, false)
        }
    })?;
    Ok(Request::raw(c.dev.clone(), id, false))
}

fn source_of<S: Source>(src: &S) -> Result<(&CommData, Option<(u32, u32)>)> {
    let c = src.comm();
    let source = src.source()?;
    if source.is_none() {
        // From any source: a member's death fails the receive.
        c.dev.watch_members(c.ctx, &c.ranks);
    }
    Ok((c, source))
}

/// Start a receive from `src` into the concatenation of the segments
/// `list` (a message longer than their total is truncated). The list is
/// copied.
///
/// # Safety
/// Every segment must stay valid for writes, and untouched by anything
/// else, until the request completes (wait for it, or tie it to a scope
/// that the memory outlives with [`Request::in_scope`]); any bytes
/// written there must be valid values of the memory's type.
pub unsafe fn immediate_receive<S: Source>(
    src: &S,
    list: &[Iovec],
    tag: Tag,
) -> Result<Request<'static>> {
    let (c, source) = source_of(src)?;
    let tag = recv_tag(tag)?;
    let id = c.dev.bulk_post(list.iter().map(|v| v.len).sum(), || {
        // SAFETY: forwarded from our caller.
        unsafe { c.dev.irecv_mem(c.ctx, source, tag, Mem::iov(list), None) }
    })?;
    Ok(Request::raw(c.dev.clone(), id, true))
}

/// What a staged receive does with its stage once complete: given the
/// stage (the received bytes first; what was not received is as the stage
/// was given) and the result, unpack, and make the result an error if the
/// values do not validate.
pub type Unstage = Box<dyn FnOnce(&[u8], &mut Result<Status>) + Send>;

/// Start a receive from `src` into `stage`, owned by the request; `then`
/// runs once when the request completes (not for a cancelled one), under
/// the library's lock, before anyone can see the request complete. It
/// must not call into this library (the lock is held), only unpack.
pub fn immediate_receive_staged<S: Source>(
    src: &S,
    mut stage: Vec<u8>,
    tag: Tag,
    then: Unstage,
) -> Result<Request<'static>> {
    let (c, source) = source_of(src)?;
    let tag = recv_tag(tag)?;
    let len = stage.len();
    let mem = Mem::Flat(stage.as_mut_ptr(), len);
    let done: crate::device::OnDone = Box::new(move |res: &mut Result<Status>| {
        let cancelled = matches!(res, Ok(s) if s.is_cancelled());
        if !cancelled {
            then(&stage, res);
        }
    });
    let id = c.dev.bulk_post(len, || {
        // SAFETY: the stage moves into the completion step, which the
        // request keeps until it holds nothing in the engine: its heap
        // buffer does not move and outlives every write; nobody else
        // touches it.
        unsafe { c.dev.irecv_mem(c.ctx, source, tag, mem, Some(done)) }
    })?;
    Ok(Request::raw(c.dev.clone(), id, true))
}

/// A step run once when a request completes (a wait, a test or the end of
/// its scope sees it only afterwards), under the library's lock: it may
/// own memory the operation uses, and unpack a stage.
pub type OnComplete = Box<dyn FnOnce(&mut Result<Status>) + Send>;

/// Give a started request memory to keep and work to do at completion:
/// for an operation started on a stage or a packed copy through an API
/// that borrows its buffers (the non-blocking collectives), where `then`
/// owns the stage, so that it lives until the operation is done, and
/// unpacks it. Runs `then` at once if the request is complete already.
/// As for [`immediate_receive_staged`], `then` must not call into this
/// library.
pub fn adopt(request: &Request<'_>, then: OnComplete) {
    let (dev, id) = request.handle();
    dev.adopt(id, then);
}
