//! Non-blocking requests (rsmpi's `mpi::request`): scopes that bound the
//! borrows of buffers in flight, requests whose `wait` returns the status,
//! guards that wait or cancel on drop, and collections of requests.

use std::marker::PhantomData;
use std::ptr::NonNull;

use mpi_on_portals::request as inner;

use crate::fatal::{check, fatal};
use crate::point_to_point::Status;

/// Where a request's borrows end (rsmpi's `Scope`): a [`LocalScope`]
/// reference, or [`StaticScope`] for requests that borrow nothing.
pub trait Scope<'a> {
    /// The `Result` API's scope, if the requests are scoped.
    #[doc(hidden)]
    fn result_api(&self) -> Option<&inner::Scope<'a>>;
}

/// The scope of [`scope`]: every request started in it is completed (or a
/// receive cancelled) when the closure returns.
#[repr(transparent)]
pub struct LocalScope<'a>(inner::Scope<'a>);

impl std::fmt::Debug for LocalScope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<'a> LocalScope<'a> {
    fn from_result_api<'s>(s: &'s inner::Scope<'a>) -> &'s LocalScope<'a> {
        // SAFETY: `LocalScope` is a `repr(transparent)` wrapper of
        // `inner::Scope`, so the two references have the same layout, and
        // the lifetime is carried over unchanged.
        unsafe { &*(s as *const inner::Scope<'a> as *const LocalScope<'a>) }
    }
}

impl<'a> Scope<'a> for &LocalScope<'a> {
    fn result_api(&self) -> Option<&inner::Scope<'a>> {
        Some(&self.0)
    }
}

/// The scope of requests that borrow nothing (a barrier's).
#[derive(Clone, Copy, Debug, Default)]
pub struct StaticScope;

impl Scope<'static> for StaticScope {
    fn result_api(&self) -> Option<&inner::Scope<'static>> {
        None
    }
}

/// Run `f` with a scope for non-blocking calls; every request still
/// pending when it returns is completed first (`MPI_Wait`; a pending
/// receive is cancelled), so borrowed buffers outlive their requests.
pub fn scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&LocalScope<'a>) -> R,
{
    inner::scope(|s| f(LocalScope::from_result_api(s)))
}

/// The `Result` API's scope of `s`, or the end of the job for a call that
/// needs one.
pub(crate) fn scoped<'s, 'a, S: Scope<'a>>(s: &'s S, call: &str) -> &'s inner::Scope<'a> {
    match s.result_api() {
        Some(s) => s,
        None => fatal(call, &"this call needs a LocalScope (mpi::request::scope)"),
    }
}

/// A pending non-blocking operation on data `D` borrowed for `'a` (rsmpi's
/// `Request`). Waited for (or a receive cancelled) at the end of its scope
/// if not before.
#[must_use = "a request must be waited for or tested"]
pub struct Request<'a, D: ?Sized = (), S: Scope<'a> = StaticScope> {
    inner: inner::Request<'a>,
    data: Option<NonNull<D>>,
    _scope: PhantomData<(S, &'a D)>,
}

impl<'a, D: ?Sized, S: Scope<'a>> std::fmt::Debug for Request<'a, D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    /// Wrap a `Result` API request on `data` (a buffer the operation
    /// reads or writes until it completes).
    pub(crate) fn new(inner: inner::Request<'a>, data: Option<NonNull<D>>) -> Self {
        Request {
            inner,
            data,
            _scope: PhantomData,
        }
    }

    /// Wait for completion (`MPI_Wait`); the status.
    pub fn wait(self) -> Status {
        check(self.inner.wait(), "Request::wait")
    }

    /// Wait for completion, ignoring the status.
    pub fn wait_without_status(self) {
        self.wait();
    }

    /// Wait for completion; the data the operation sent or received.
    pub fn wait_for_data(self) -> &'a D {
        let data = self.data;
        self.wait();
        match data {
            // SAFETY: the pointer came from a reference valid for 'a, and
            // the operation that wrote through it has completed, so nothing
            // else accesses the data any more.
            Some(p) => unsafe { p.as_ref() },
            None => fatal("Request::wait_for_data", &"this request carries no data"),
        }
    }

    /// Check for completion without blocking (`MPI_Test`): the status, or
    /// the request back.
    pub fn test(self) -> Result<Status, Self> {
        let data = self.data;
        match check(self.inner.test(), "Request::test") {
            Ok(s) => Ok(s),
            Err(inner) => Err(Request::new(inner, data)),
        }
    }

    /// Ask to cancel the operation (`MPI_Cancel`); it still has to be
    /// waited for. Only a receive can be cancelled here.
    pub fn cancel(&self) {
        check(self.inner.cancel(), "Request::cancel");
    }

    fn into_parts(self) -> (inner::Request<'a>, Option<NonNull<D>>) {
        (self.inner, self.data)
    }
}

/// Wait for any of `requests` (`MPI_Waitany`): removes it and returns its
/// index and status; `None` when `requests` is empty.
pub fn wait_any<'a, D: ?Sized, S: Scope<'a>>(
    requests: &mut Vec<Request<'a, D, S>>,
) -> Option<(usize, Status)> {
    if requests.is_empty() {
        return None;
    }
    let mut raw: Vec<inner::Request<'a>> = Vec::with_capacity(requests.len());
    let mut data = Vec::with_capacity(requests.len());
    for r in requests.drain(..) {
        let (i, d) = r.into_parts();
        raw.push(i);
        data.push(d);
    }
    let result = inner::wait_any(&mut raw);
    if let Ok((i, _)) = &result {
        data.remove(*i);
    }
    requests.extend(raw.into_iter().zip(data).map(|(r, d)| Request::new(r, d)));
    Some(check(result, "wait_any"))
}

/// Waits for its request when dropped (rsmpi's `WaitGuard`).
#[derive(Debug)]
pub struct WaitGuard<'a, D: ?Sized = (), S: Scope<'a> = StaticScope>(Option<Request<'a, D, S>>);

impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(r: Request<'a, D, S>) -> Self {
        WaitGuard(Some(r))
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Drop for WaitGuard<'a, D, S> {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.wait();
        }
    }
}

/// Cancels its request, then waits for it, when dropped (rsmpi's
/// `CancelGuard`).
#[derive(Debug)]
pub struct CancelGuard<'a, D: ?Sized = (), S: Scope<'a> = StaticScope>(Option<Request<'a, D, S>>);

impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(r: Request<'a, D, S>) -> Self {
        CancelGuard(Some(r))
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Drop for CancelGuard<'a, D, S> {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.cancel();
            r.wait();
        }
    }
}

/// Requests addressed by the index they were added at (rsmpi's
/// `RequestCollection`), made by [`multiple_scope`].
#[derive(Debug)]
pub struct RequestCollection<'a, D: ?Sized> {
    inner: inner::RequestCollection<'a>,
    data: Vec<Option<NonNull<D>>>,
}

impl<'a, D: ?Sized> RequestCollection<'a, D> {
    /// Add a request; it is reported by the index it is added at.
    pub fn add<S: Scope<'a>>(&mut self, request: Request<'a, D, S>) {
        let (r, d) = request.into_parts();
        self.inner.add(r);
        self.data.push(d);
    }

    /// How many requests were added.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether none was added.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// How many have not been reported complete.
    pub fn incomplete(&self) -> usize {
        self.inner.incomplete()
    }

    fn with_data(&self, (i, s): (usize, Status)) -> (usize, Status, &'a D) {
        match self.data.get(i).copied().flatten() {
            // SAFETY: the pointer came from a reference valid for 'a and
            // the operation on it has completed.
            Some(p) => (i, s, unsafe { p.as_ref() }),
            None => fatal("RequestCollection", &"this request carries no data"),
        }
    }

    /// Wait for one pending request (`MPI_Waitany`): its index, status and
    /// data; `None` when none is pending.
    pub fn wait_any(&mut self) -> Option<(usize, Status, &'a D)> {
        check(self.inner.wait_any(), "RequestCollection::wait_any").map(|d| self.with_data(d))
    }

    /// Wait for at least one, report all completed (`MPI_Waitsome`) into
    /// `out` (cleared first).
    pub fn wait_some(&mut self, out: &mut Vec<(usize, Status, &'a D)>) {
        let mut done = Vec::new();
        check(
            self.inner.wait_some(&mut done),
            "RequestCollection::wait_some",
        );
        out.clear();
        out.extend(done.into_iter().map(|d| self.with_data(d)));
    }

    /// Wait for all (`MPI_Waitall`), reported into `out` (cleared first).
    pub fn wait_all(&mut self, out: &mut Vec<(usize, Status, &'a D)>) {
        let mut done = Vec::new();
        check(
            self.inner.wait_all(&mut done),
            "RequestCollection::wait_all",
        );
        out.clear();
        out.extend(done.into_iter().map(|d| self.with_data(d)));
    }

    /// One completed request, if any (`MPI_Testany`).
    pub fn test_any(&mut self) -> Option<(usize, Status, &'a D)> {
        check(self.inner.test_any(), "RequestCollection::test_any").map(|d| self.with_data(d))
    }

    /// Every completed request (`MPI_Testsome`), into `out` (cleared
    /// first).
    pub fn test_some(&mut self, out: &mut Vec<(usize, Status, &'a D)>) {
        let mut done = Vec::new();
        check(
            self.inner.test_some(&mut done),
            "RequestCollection::test_some",
        );
        out.clear();
        out.extend(done.into_iter().map(|d| self.with_data(d)));
    }

    /// If all are complete, report them into `out` (cleared first) and
    /// return true (`MPI_Testall`).
    pub fn test_all(&mut self, out: &mut Vec<(usize, Status, &'a D)>) -> bool {
        let mut done = Vec::new();
        let all = check(
            self.inner.test_all(&mut done),
            "RequestCollection::test_all",
        );
        out.clear();
        out.extend(done.into_iter().map(|d| self.with_data(d)));
        all
    }
}

/// Run `f` with a scope and a collection of up to `capacity` requests
/// (more may be added); pending ones are completed when `f` returns.
pub fn multiple_scope<'a, D: ?Sized, F, R>(capacity: usize, f: F) -> R
where
    F: FnOnce(&LocalScope<'a>, &mut RequestCollection<'a, D>) -> R,
{
    scope(|s| {
        let mut coll = RequestCollection {
            inner: inner::RequestCollection::with_capacity(capacity),
            data: Vec::with_capacity(capacity),
        };
        f(s, &mut coll)
    })
}
