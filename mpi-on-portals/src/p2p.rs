//! Point-to-point communication: rsmpi's `Destination` and `Source`.

use std::sync::Arc;

use crate::comm::{AnyProcess, CommData, Process, Tag, ANY_TAG};
use crate::datatype::{Buffer, BufferMut, Equivalence};
use crate::device::{Device, Mode, ReqId};
use crate::error::{MpiError, Result};
use crate::future::ReceiveFuture;
use crate::request::{OwnedRequest, Request, Scope};
use crate::status::Status;

fn check_tag(tag: Tag) -> Result<u32> {
    u32::try_from(tag).map_err(|_| MpiError::InvalidTag(tag))
}

/// `src` for a receive or probe on `c`; from any source, the device learns
/// the communicator's members first, so that a member's death fails the
/// receive instead of leaving it waiting forever.
fn watched(c: &CommData, src: Option<(u32, u32)>) -> Option<(u32, u32)> {
    if src.is_none() {
        c.dev.watch_members(c.ctx, &c.ranks);
    }
    src
}

fn recv_tag(tag: Tag) -> Result<Option<u32>> {
    if tag == ANY_TAG {
        Ok(None)
    } else {
        check_tag(tag).map(Some)
    }
}

impl Process<'_> {
    fn dev(&self) -> &Arc<Device> {
        &self.comm.dev
    }

    /// Start a send that the caller hands back to the application (see
    /// `Device::bulk_post`); `owned` keeps the memory alive when the
    /// caller does not.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid and unmodified until the request
    /// completes.
    unsafe fn start_send(
        &self,
        ptr: *const u8,
        len: usize,
        tag: Tag,
        mode: Mode,
        owned: Option<Box<dyn std::any::Any + Send>>,
    ) -> Result<ReqId> {
        let dst = self.comm.world_rank(self.rank)?;
        let tag = check_tag(tag)?;
        let c = self.comm;
        c.dev.bulk_post(len, || {
            // SAFETY: forwarded from our caller.
            unsafe {
                c.dev
                    .isend(c.ctx, c.me, dst, tag, ptr, len, mode, owned, false)
            }
        })
    }

    fn immediate<'a>(
        &self,
        scope: &Scope<'a>,
        bytes: &'a [u8],
        tag: Tag,
        mode: Mode,
    ) -> Result<Request<'a>> {
        // SAFETY: `bytes` is borrowed for 'a, and the scope completes the
        // request before 'a ends.
        let id = unsafe { self.start_send(bytes.as_ptr(), bytes.len(), tag, mode, None)? };
        Ok(Request::new(self.dev().clone(), id, false, scope))
    }

    fn blocking_send(&self, bytes: &[u8], tag: Tag, mode: Mode) -> Result<()> {
        let dst = self.comm.world_rank(self.rank)?;
        let tag = check_tag(tag)?;
        // SAFETY: the call waits for completion (or sends a copy) before
        // `bytes` goes out of scope.
        unsafe {
            self.dev().send_blocking(
                self.comm.ctx,
                self.comm.me,
                dst,
                tag,
                bytes.as_ptr(),
                bytes.len(),
                mode,
            )
        }
    }

    fn recv_source(&self) -> Result<Option<(u32, u32)>> {
        let w = self.comm.world_rank(self.rank)?;
        Ok(Some((self.rank as u32, w)))
    }
}

/// Something messages can be sent to (rsmpi's `Destination`).
pub trait Destination {
    /// Send with tag 0 (`MPI_Send`).
    fn send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_with_tag(buf, 0)
    }
    /// Send with a tag (`MPI_Send`): standard mode — short messages complete
    /// as soon as they have left, long ones when the receiver has them.
    fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()>;
    /// Synchronous send (`MPI_Ssend`): completes once the receive matched.
    fn synchronous_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.synchronous_send_with_tag(buf, 0)
    }
    /// Synchronous send with a tag.
    fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()>;
    /// Ready send (`MPI_Rsend`): the matching receive must already be posted.
    fn ready_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.ready_send_with_tag(buf, 0)
    }
    /// Ready send with a tag.
    fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()>;
    /// Buffered send (`MPI_Bsend`): copies into the attached buffer
    /// ([`crate::Universe::buffer_attach`]) and returns at once.
    fn buffered_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.buffered_send_with_tag(buf, 0)
    }
    /// Buffered send with a tag.
    fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()>;
    /// Non-blocking standard send (`MPI_Isend`) of a buffer borrowed for the
    /// scope.
    fn immediate_send<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
    ) -> Result<Request<'a>> {
        self.immediate_send_with_tag(scope, buf, 0)
    }
    /// Non-blocking standard send with a tag.
    fn immediate_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a>>;
    /// Non-blocking synchronous send (`MPI_Issend`).
    fn immediate_synchronous_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a>>;
    /// Non-blocking ready send (`MPI_Irsend`).
    fn immediate_ready_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a>>;
    /// Non-blocking buffered send (`MPI_Ibsend`), tag 0: the data is copied
    /// into the attached buffer space at the call, as
    /// [`Destination::buffered_send`] does, so the request comes back
    /// complete and `buf` is free again at once.
    fn immediate_buffered_send<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &B,
    ) -> Result<Request<'a>> {
        self.immediate_buffered_send_with_tag(scope, buf, 0)
    }
    /// Non-blocking buffered send with a tag.
    fn immediate_buffered_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &B,
        tag: Tag,
    ) -> Result<Request<'a>>;
    /// Non-blocking send of an owned vector, returned by
    /// [`OwnedRequest::wait`]; no scope needed.
    fn immediate_send_owned<T: Equivalence>(
        &self,
        buf: Vec<T>,
        tag: Tag,
    ) -> Result<OwnedRequest<T>>;
}

impl Destination for Process<'_> {
    fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.blocking_send(buf.as_bytes(), tag, Mode::Standard)
    }

    fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.blocking_send(buf.as_bytes(), tag, Mode::Synchronous)
    }

    fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.blocking_send(buf.as_bytes(), tag, Mode::Ready)
    }

    fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        let dst = self.comm.world_rank(self.rank)?;
        let tag = check_tag(tag)?;
        self.dev()
            .bsend(self.comm.ctx, self.comm.me, dst, tag, buf.as_bytes())
    }

    fn immediate_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a>> {
        self.immediate(scope, buf.as_bytes(), tag, Mode::Standard)
    }

    fn immediate_buffered_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        _scope: &Scope<'a>,
        buf: &B,
        tag: Tag,
    ) -> Result<Request<'a>> {
        // The copy into the buffer space is the whole local part of a
        // buffered send: nothing is left for the request to wait for.
        self.buffered_send_with_tag(buf, tag)?;
        Ok(Request::unscoped(
            self.dev().clone(),
            self.dev().completed_req(),
        ))
    }

    fn immediate_synchronous_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a>> {
        self.immediate(scope, buf.as_bytes(), tag, Mode::Synchronous)
    }

    fn immediate_ready_send_with_tag<'a, B: Buffer + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a>> {
        self.immediate(scope, buf.as_bytes(), tag, Mode::Ready)
    }

    fn immediate_send_owned<T: Equivalence>(
        &self,
        buf: Vec<T>,
        tag: Tag,
    ) -> Result<OwnedRequest<T>> {
        let bytes: &[u8] = bytemuck::cast_slice(&buf);
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: the vector moves into the request; its heap buffer does not
        // move and lives until the request is done.
        let id = unsafe { self.start_send(ptr, len, tag, Mode::Standard, Some(Box::new(buf)))? };
        Ok(OwnedRequest::new(self.dev().clone(), id))
    }
}

/// Something messages can be received from (rsmpi's `Source`): a specific
/// process or any process.
pub trait Source {
    #[doc(hidden)]
    fn comm(&self) -> &CommData;
    #[doc(hidden)]
    fn source(&self) -> Result<Option<(u32, u32)>>;

    /// Receive into `buf` from this source with any tag (`MPI_Recv`).
    /// A longer message delivers what fits and fails with
    /// [`MpiError::Truncated`].
    fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status> {
        self.receive_into_with_tag(buf, ANY_TAG)
    }

    /// Receive into `buf` with a tag ([`ANY_TAG`] for any).
    fn receive_into_with_tag<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        tag: Tag,
    ) -> Result<Status> {
        let bytes = buf.as_bytes_mut();
        let c = self.comm();
        // SAFETY: we wait for completion before the borrow of `buf` ends.
        let id = unsafe {
            c.dev.irecv(
                c.ctx,
                watched(c, self.source()?),
                recv_tag(tag)?,
                bytes.as_mut_ptr(),
                bytes.len(),
            )?
        };
        c.dev.wait(id)
    }

    /// Receive one value.
    fn receive<T: Equivalence>(&self) -> Result<(T, Status)> {
        self.receive_with_tag(ANY_TAG)
    }

    /// Receive one value with a tag.
    fn receive_with_tag<T: Equivalence>(&self, tag: Tag) -> Result<(T, Status)> {
        let mut v = T::zeroed();
        let s = self.receive_into_with_tag(std::slice::from_mut(&mut v), tag)?;
        Ok((v, s))
    }

    /// Receive a message of any length into a new vector (probe, then
    /// receive). The message length must be a whole number of `T`.
    fn receive_vec<T: Equivalence>(&self) -> Result<(Vec<T>, Status)> {
        self.receive_vec_with_tag(ANY_TAG)
    }

    /// [`Source::receive_vec`] with a tag.
    fn receive_vec_with_tag<T: Equivalence>(&self, tag: Tag) -> Result<(Vec<T>, Status)> {
        let p = self.probe_with_tag(tag)?;
        let size = std::mem::size_of::<T>().max(1);
        if p.message_len() % size != 0 {
            return Err(MpiError::InvalidBuffer(
                "message length is not a whole number of elements",
            ));
        }
        let mut v = vec![T::zeroed(); p.message_len() / size];
        // Receive exactly the probed message: same source and tag.
        let c = self.comm();
        let src = c.world_rank(p.source_rank())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
        // SAFETY: we wait before the borrow of `v` ends.
        let id = unsafe {
            c.dev.irecv(
                c.ctx,
                Some((p.source_rank() as u32, src)),
                Some(p.tag() as u32),
                bytes.as_mut_ptr(),
                bytes.len(),
            )?
        };
        let s = c.dev.wait(id)?;
        Ok((v, s))
    }

    /// Non-blocking receive (`MPI_Irecv`) into a buffer borrowed for the
    /// scope, any tag.
    fn immediate_receive_into<'a, B: BufferMut + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        self.immediate_receive_into_with_tag(scope, buf, ANY_TAG)
    }

    /// Non-blocking receive with a tag.
    fn immediate_receive_into_with_tag<'a, B: BufferMut + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a mut B,
        tag: Tag,
    ) -> Result<Request<'a>> {
        let bytes = buf.as_bytes_mut();
        let c = self.comm();
        let (src, tag) = (watched(c, self.source()?), recv_tag(tag)?);
        let id = c.dev.bulk_post(bytes.len(), || {
            // SAFETY: `buf` is borrowed for 'a and the scope completes the
            // request before 'a ends.
            unsafe {
                c.dev
                    .irecv(c.ctx, src, tag, bytes.as_mut_ptr(), bytes.len())
            }
        })?;
        Ok(Request::new(c.dev.clone(), id, true, scope))
    }

    /// Start receiving one value into a buffer the returned future owns
    /// (`MPI_Irecv`), any tag.
    fn immediate_receive<T: Equivalence>(&self) -> Result<ReceiveFuture<T>> {
        self.immediate_receive_with_tag(ANY_TAG)
    }

    /// [`Source::immediate_receive`] with a tag.
    fn immediate_receive_with_tag<T: Equivalence>(&self, tag: Tag) -> Result<ReceiveFuture<T>> {
        let mut buf = Box::new(T::zeroed());
        let bytes = bytemuck::bytes_of_mut(&mut *buf);
        let c = self.comm();
        // SAFETY: the box moves into the future without its heap memory
        // moving, and the future settles the receive before freeing it.
        let id = unsafe {
            c.dev.irecv(
                c.ctx,
                watched(c, self.source()?),
                recv_tag(tag)?,
                bytes.as_mut_ptr(),
                bytes.len(),
            )?
        };
        Ok(ReceiveFuture::new(c.dev.clone(), id, buf))
    }

    /// Wait until a message from this source (any tag) can be received, and
    /// describe it without receiving it (`MPI_Probe`).
    fn probe(&self) -> Result<Status> {
        self.probe_with_tag(ANY_TAG)
    }

    /// [`Source::probe`] with a tag.
    fn probe_with_tag(&self, tag: Tag) -> Result<Status> {
        let c = self.comm();
        c.dev
            .probe(c.ctx, watched(c, self.source()?), recv_tag(tag)?)
    }

    /// Describe a waiting message if there is one (`MPI_Iprobe`).
    fn immediate_probe(&self) -> Result<Option<Status>> {
        self.immediate_probe_with_tag(ANY_TAG)
    }

    /// [`Source::immediate_probe`] with a tag.
    fn immediate_probe_with_tag(&self, tag: Tag) -> Result<Option<Status>> {
        let c = self.comm();
        c.dev.iprobe(c.ctx, self.source()?, recv_tag(tag)?)
    }
}

impl Source for Process<'_> {
    fn comm(&self) -> &CommData {
        self.comm
    }
    fn source(&self) -> Result<Option<(u32, u32)>> {
        self.recv_source()
    }
}

impl Source for AnyProcess<'_> {
    fn comm(&self) -> &CommData {
        self.comm
    }
    fn source(&self) -> Result<Option<(u32, u32)>> {
        Ok(None)
    }
}
