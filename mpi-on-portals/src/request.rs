//! Non-blocking operations: requests, and the scope that keeps borrowed
//! buffers alive until their requests are done (rsmpi's `request::scope`).
//!
//! A receive or send started with a borrowed buffer lends that buffer to the
//! Portals engine, which writes or reads it from the progress thread at any
//! time. [`scope`] makes that sound: a request may not outlive its scope, and
//! when the scope ends every request still running in it is completed (sends
//! waited for, receives cancelled or waited for) — even if its handle was
//! leaked with `mem::forget`.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::device::{Device, ReqId};
use crate::error::{MpiError, Result};
use crate::status::Status;

pub use crate::request_collection::RequestCollection;

/// The region in which borrowed-buffer requests live. Obtained from
/// [`scope`].
pub struct Scope<'a> {
    live: RefCell<Vec<(Arc<Device>, ReqId, bool)>>,
    _invariant: PhantomData<&'a mut &'a ()>,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scope({} requests)", self.live.borrow().len())
    }
}

impl<'a> Scope<'a> {
    /// A scope that waits for nothing: for the raw starts of
    /// [`crate::raw`], whose caller promises what a scope would enforce.
    pub(crate) fn detached() -> Scope<'a> {
        Scope {
            live: RefCell::new(Vec::new()),
            _invariant: PhantomData,
        }
    }
}

impl Scope<'_> {
    pub(crate) fn register(&self, dev: &Arc<Device>, id: ReqId, is_recv: bool) {
        self.live.borrow_mut().push((dev.clone(), id, is_recv));
    }

    fn settle_all(&self) {
        let live = std::mem::take(&mut *self.live.borrow_mut());
        for (dev, id, is_recv) in live {
            settle(&dev, id, is_recv);
        }
    }
}

/// Complete a request nobody will wait for: cancel a receive (or let it
/// finish if a message is already arriving), wait for a send.
fn settle(dev: &Device, id: ReqId, is_recv: bool) {
    if !dev.pending(id) {
        dev.detach(id);
        return;
    }
    if is_recv && dev.cancel(id).unwrap_or(false) {
        dev.detach(id);
        return;
    }
    if let Err(e) = dev.wait(id) {
        tracing::warn!(error = %e, "a request abandoned at the end of its scope failed");
    }
    dev.detach(id);
}

/// Run `f` with a scope for non-blocking operations on borrowed buffers;
/// every request of the scope is complete when `scope` returns.
///
/// ```no_run
/// use mpi_on_portals::traits::*;
/// let universe = mpi_on_portals::initialize()?;
/// let world = universe.world();
/// let mut buf = [0u64; 4];
/// mpi_on_portals::request::scope(|scope| -> mpi_on_portals::Result<()> {
///     let req = world.any_process().immediate_receive_into(scope, &mut buf[..])?;
///     // ... compute while the message arrives ...
///     req.wait()?;
///     Ok(())
/// })?;
/// # Ok::<(), mpi_on_portals::MpiError>(())
/// ```
pub fn scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&Scope<'a>) -> R,
{
    struct Guard<'s, 'a>(&'s Scope<'a>);
    impl Drop for Guard<'_, '_> {
        fn drop(&mut self) {
            self.0.settle_all();
        }
    }
    let s = Scope {
        live: RefCell::new(Vec::new()),
        _invariant: PhantomData,
    };
    let _g = Guard(&s);
    f(&s)
}

/// A pending non-blocking operation on a buffer borrowed for `'a`.
/// Dropping it completes it (waits for a send, cancels a receive).
#[must_use = "a request must be waited for or tested"]
pub struct Request<'a> {
    dev: Arc<Device>,
    id: ReqId,
    is_recv: bool,
    done: bool,
    _borrow: PhantomData<&'a mut ()>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Request({:?})", self.id)
    }
}

impl<'a> Request<'a> {
    pub(crate) fn new(dev: Arc<Device>, id: ReqId, is_recv: bool, scope: &Scope<'a>) -> Self {
        scope.register(&dev, id, is_recv);
        Request {
            dev,
            id,
            is_recv,
            done: false,
            _borrow: PhantomData,
        }
    }

    /// The same request, its borrow forgotten: for the raw starts of
    /// [`crate::raw`], whose start borrowed bookkeeping (a partition's
    /// counts) only for the call.
    ///
    /// # Safety
    /// The memory the operation reads or writes must stay valid until
    /// the request completes, as the borrow would have ensured.
    pub(crate) unsafe fn unbound(self) -> Request<'static> {
        let me = std::mem::ManuallyDrop::new(self);
        Request {
            // SAFETY: `me` is never dropped, so its device handle moves
            // out exactly once.
            dev: unsafe { std::ptr::read(&me.dev) },
            id: me.id,
            is_recv: me.is_recv,
            done: me.done,
            _borrow: PhantomData,
        }
    }

    /// A request that borrows nothing (a non-blocking barrier), so needs
    /// no scope. Dropping it still waits for it.
    /// A receive that owns its buffer (see [`crate::ReceiveFuture`]):
    /// cancelled rather than waited for when dropped pending.
    pub(crate) fn unscoped_receive(dev: Arc<Device>, id: ReqId) -> Request<'static> {
        Request {
            dev,
            id,
            is_recv: true,
            done: false,
            _borrow: PhantomData,
        }
    }

    pub(crate) fn unscoped(dev: Arc<Device>, id: ReqId) -> Request<'static> {
        Request {
            dev,
            id,
            is_recv: false,
            done: false,
            _borrow: PhantomData,
        }
    }

    /// A request on memory the caller lends by pointer (see
    /// [`crate::raw`]).
    pub(crate) fn raw(dev: Arc<Device>, id: ReqId, is_recv: bool) -> Request<'static> {
        Request {
            dev,
            id,
            is_recv,
            done: false,
            _borrow: PhantomData,
        }
    }

    /// Forget the request; it completes in the background.
    pub(crate) fn detach(mut self) {
        self.done = true;
        self.dev.detach(self.id);
    }

    /// Wait for completion (`MPI_Wait`). A truncated receive is
    /// [`MpiError::Truncated`], carrying the status.
    pub fn wait(mut self) -> Result<Status> {
        self.done = true;
        self.dev.wait(self.id)
    }

    /// The device and id, for [`crate::request::RequestCollection`].
    pub(crate) fn handle(&self) -> (&Arc<Device>, ReqId) {
        (&self.dev, self.id)
    }

    /// Forget a request the device has already completed and released
    /// (by `wait_any`).
    pub(crate) fn completed_elsewhere(mut self) {
        self.done = true;
    }

    /// Check for completion without blocking (`MPI_Test`): the status if
    /// done, the request back otherwise.
    pub fn test(mut self) -> Result<std::result::Result<Status, Self>> {
        match self.dev.test(self.id)? {
            Some(r) => {
                self.done = true;
                r.map(Ok)
            }
            None => Ok(Err(self)),
        }
    }

    /// True if the operation has completed (without consuming the request).
    ///
    /// Drives the transport in polling mode, so a loop on it finishes. After
    /// a fatal error of the library the request is aborted and reported
    /// complete; [`Request::wait`] then returns the error.
    pub fn is_complete(&self) -> Result<bool> {
        Ok(self.dev.is_complete(self.id))
    }

    /// True if the operation has completed, judged only from what has
    /// already arrived: unlike [`Request::is_complete`] and
    /// [`Request::test`] this makes no transport pass on the calling
    /// thread (it takes the events already queued and nothing else). So it
    /// says whether the operation completed *without* this call's help —
    /// by the transport's progress thread, or an earlier call — and in
    /// polling mode it stays false until some other call makes progress.
    /// After a fatal error of the library the request is aborted and
    /// reported complete, as with [`Request::is_complete`].
    pub fn peek(&self) -> Result<bool> {
        Ok(self.dev.is_complete_seen(self.id))
    }

    /// Cancel a pending receive (`MPI_Cancel`). True if it was cancelled;
    /// [`Request::wait`] then reports a status with
    /// [`Status::is_cancelled`]. Sends cannot be cancelled (false).
    pub fn cancel(&self) -> Result<bool> {
        if !self.is_recv {
            return Ok(false);
        }
        self.dev.cancel(self.id)
    }
}

impl Request<'static> {
    /// The same request, completed (a send waited for, a receive
    /// cancelled) at the end of `scope` if not before, like one started in
    /// it: for the starts of [`crate::segments`], whose memory a caller
    /// borrows for the scope.
    pub fn in_scope<'s>(self, scope: &Scope<'s>) -> Request<'s> {
        scope.register(&self.dev, self.id, self.is_recv);
        let me = std::mem::ManuallyDrop::new(self);
        Request {
            // SAFETY: `me` is never dropped, so its device handle moves
            // out exactly once.
            dev: unsafe { std::ptr::read(&me.dev) },
            id: me.id,
            is_recv: me.is_recv,
            done: me.done,
            _borrow: PhantomData,
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if !self.done {
            settle(&self.dev, self.id, self.is_recv);
        }
    }
}

/// Wait for all requests (`MPI_Waitall`); statuses in the same order. The
/// first error is returned after every request has completed.
pub fn wait_all<'a>(requests: Vec<Request<'a>>) -> Result<Vec<Status>> {
    let mut out = Vec::with_capacity(requests.len());
    let mut first_err = None;
    for r in requests {
        match r.wait() {
            Ok(s) => out.push(s),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Wait for any one request (`MPI_Waitany`): removes it from `requests` and
/// returns its former index and status.
pub fn wait_any(requests: &mut Vec<Request<'_>>) -> Result<(usize, Status)> {
    if requests.is_empty() {
        return Err(MpiError::InvalidBuffer(
            "wait_any needs at least one request",
        ));
    }
    let dev = requests[0].dev.clone();
    let ids: Vec<ReqId> = requests.iter().map(|r| r.id).collect();
    let (i, r) = dev.wait_any(&ids)?;
    let mut req = requests.remove(i);
    req.done = true;
    r.map(|s| (i, s))
}

/// If every request is complete, their statuses (`MPI_Testall`); otherwise
/// `None` and the requests are left as they were.
pub fn test_all(requests: &mut Vec<Request<'_>>) -> Result<Option<Vec<Status>>> {
    for r in requests.iter() {
        if !r.is_complete()? {
            return Ok(None);
        }
    }
    wait_all(std::mem::take(requests)).map(Some)
}

/// A non-blocking send of an owned vector, which it hands back on
/// completion. Needs no scope: the request owns the data. Dropping it lets
/// the send finish in the background.
#[must_use = "an owned request returns its buffer from wait()"]
pub struct OwnedRequest<T> {
    dev: Arc<Device>,
    id: ReqId,
    done: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for OwnedRequest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnedRequest({:?})", self.id)
    }
}

impl<T: 'static> OwnedRequest<T> {
    pub(crate) fn new(dev: Arc<Device>, id: ReqId) -> Self {
        OwnedRequest {
            dev,
            id,
            done: false,
            _t: PhantomData,
        }
    }

    /// Wait for completion; the vector and the status.
    pub fn wait(mut self) -> Result<(Vec<T>, Status)> {
        self.done = true;
        let (s, owned) = self.dev.wait_owned(self.id)?;
        let v = owned
            .and_then(|b| b.downcast::<Vec<T>>().ok())
            .map(|b| *b)
            .ok_or(MpiError::InvalidBuffer("owned request lost its buffer"))?;
        Ok((v, s))
    }
}

impl<T> Drop for OwnedRequest<T> {
    fn drop(&mut self) {
        if !self.done {
            self.dev.detach(self.id);
        }
    }
}
