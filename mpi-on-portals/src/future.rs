//! A non-blocking receive of one value that owns its buffer (rsmpi's
//! `ReceiveFuture`): no scope needed.

use std::sync::Arc;

use crate::device::{Device, ReqId};
use crate::error::Result;
use crate::request::Request;
use crate::status::Status;

/// A pending receive of one `T`, returned by [`ReceiveFuture::get`].
/// Dropping it cancels the receive (or waits for it if it has matched).
#[must_use = "a receive future must be waited for"]
#[derive(Debug)]
pub struct ReceiveFuture<T> {
    // Declared before `buf`: dropped first, so the receive is settled
    // before the memory it writes is freed.
    request: Request<'static>,
    buf: Box<T>,
}

impl<T> ReceiveFuture<T> {
    /// Wrap receive `id` of `dev` writing into `buf`.
    pub(crate) fn new(dev: Arc<Device>, id: ReqId, buf: Box<T>) -> Self {
        ReceiveFuture {
            request: Request::unscoped_receive(dev, id),
            buf,
        }
    }

    /// Wait for the value (`MPI_Wait`).
    pub fn get(self) -> Result<(T, Status)> {
        let ReceiveFuture { request, buf } = self;
        let s = request.wait()?;
        Ok((*buf, s))
    }

    /// The value if it has arrived (`MPI_Test`), the future back
    /// otherwise.
    pub fn r#try(self) -> Result<std::result::Result<(T, Status), Self>> {
        let ReceiveFuture { request, buf } = self;
        Ok(match request.test()? {
            Ok(s) => Ok((*buf, s)),
            Err(request) => Err(ReceiveFuture { request, buf }),
        })
    }
}
