//! Point-to-point communication (rsmpi's `mpi::point_to_point`).

use std::ptr::NonNull;

use mpi_on_portals::point_to_point as inner;
use mpi_on_portals::{Destination as _, Source as _};

use crate::datatype::{
    self, receiving, receiving_value, receiving_values, sending, wire_size, Buffer, BufferMut,
};
use crate::fatal::{check, fatal};
use crate::request::{scoped, Request, Scope};
use crate::topology::{AnyProcess, Process};
use crate::transfer;
use crate::Tag;
use mpi_on_portals::raw::SendMode;
use mpi_on_portals::Equivalence;

pub use mpi_on_portals::Status;

/// Something messages can be sent to (rsmpi's `Destination`).
pub trait Destination {
    /// The process this face wraps.
    #[doc(hidden)]
    fn target(&self) -> mpi_on_portals::Process<'_>;

    /// Send with tag 0 (`MPI_Send`).
    fn send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.send_with_tag(buf, 0)
    }

    /// Send with a tag (`MPI_Send`).
    fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        const CALL: &str = "Destination::send";
        transfer::send(&self.target(), buf, tag, SendMode::Standard, CALL)
    }

    /// Synchronous send (`MPI_Ssend`).
    fn synchronous_send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.synchronous_send_with_tag(buf, 0)
    }

    /// Synchronous send with a tag.
    fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        const CALL: &str = "Destination::synchronous_send";
        transfer::send(&self.target(), buf, tag, SendMode::Synchronous, CALL)
    }

    /// Ready send (`MPI_Rsend`).
    ///
    /// # Safety
    /// As in rsmpi: the matching receive must already be posted (here a
    /// ready send without one is delivered as a standard send would be,
    /// but a program relying on that is not portable).
    unsafe fn ready_send<B: Buffer + ?Sized>(&self, buf: &B) {
        // SAFETY: forwarded to our caller.
        unsafe { self.ready_send_with_tag(buf, 0) }
    }

    /// Ready send with a tag.
    ///
    /// # Safety
    /// See [`Destination::ready_send`].
    unsafe fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        const CALL: &str = "Destination::ready_send";
        transfer::send(&self.target(), buf, tag, SendMode::Ready, CALL)
    }

    /// Buffered send (`MPI_Bsend`) through the buffer attached with
    /// [`crate::environment::Universe::set_buffer_size`].
    fn buffered_send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.buffered_send_with_tag(buf, 0)
    }

    /// Buffered send with a tag.
    fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        const CALL: &str = "Destination::buffered_send";
        check(
            self.target()
                .buffered_send_with_tag(&*sending(buf, CALL), tag),
            CALL,
        )
    }

    /// Non-blocking buffered send (`MPI_Ibsend`), tag 0: the data is
    /// copied into the attached buffer at the call, so the request is
    /// already complete.
    fn immediate_buffered_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        self.immediate_buffered_send_with_tag(scope, buf, 0)
    }

    /// Non-blocking buffered send with a tag.
    fn immediate_buffered_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        const CALL: &str = "Destination::immediate_buffered_send";
        let r = self.target().immediate_buffered_send_with_tag(
            scoped(&scope, CALL),
            &*sending(buf, CALL),
            tag,
        );
        Request::new(check(r, CALL), Some(NonNull::from(buf)))
    }

    /// Non-blocking standard send (`MPI_Isend`), tag 0.
    fn immediate_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        self.immediate_send_with_tag(scope, buf, 0)
    }

    /// Non-blocking standard send with a tag.
    fn immediate_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        const CALL: &str = "Destination::immediate_send";
        let target = self.target();
        let r = transfer::immediate_send(
            &target,
            scoped(&scope, CALL),
            buf,
            tag,
            SendMode::Standard,
            CALL,
        );
        Request::new(r, Some(NonNull::from(buf)))
    }

    /// Non-blocking synchronous send (`MPI_Issend`), tag 0.
    fn immediate_synchronous_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        self.immediate_synchronous_send_with_tag(scope, buf, 0)
    }

    /// Non-blocking synchronous send with a tag.
    fn immediate_synchronous_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        const CALL: &str = "Destination::immediate_synchronous_send";
        let target = self.target();
        let r = transfer::immediate_send(
            &target,
            scoped(&scope, CALL),
            buf,
            tag,
            SendMode::Synchronous,
            CALL,
        );
        Request::new(r, Some(NonNull::from(buf)))
    }

    /// Non-blocking ready send (`MPI_Irsend`), tag 0.
    ///
    /// # Safety
    /// As in rsmpi: the matching receive must already be posted (here a
    /// ready send without one is delivered as a standard send would be,
    /// but a program relying on that is not portable).
    unsafe fn immediate_ready_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Request<'a, B, S> {
        // SAFETY: forwarded to our caller.
        unsafe { self.immediate_ready_send_with_tag(scope, buf, 0) }
    }

    /// Non-blocking ready send with a tag.
    ///
    /// # Safety
    /// See [`Destination::immediate_ready_send`].
    unsafe fn immediate_ready_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        const CALL: &str = "Destination::immediate_ready_send";
        let target = self.target();
        let r = transfer::immediate_send(
            &target,
            scoped(&scope, CALL),
            buf,
            tag,
            SendMode::Ready,
            CALL,
        );
        Request::new(r, Some(NonNull::from(buf)))
    }
}

impl Destination for Process<'_> {
    fn target(&self) -> mpi_on_portals::Process<'_> {
        self.inner
    }
}

/// The `Result` API's source a face source wraps.
#[doc(hidden)]
pub enum Target<'a> {
    /// A given process.
    Process(mpi_on_portals::Process<'a>),
    /// Any process.
    Any(mpi_on_portals::AnyProcess<'a>),
}

/// Apply `$f` to the `Result` API's source behind `$t`.
macro_rules! on_source {
    ($t:expr, |$s:ident| $f:expr) => {
        match $t {
            Target::Process($s) => $f,
            Target::Any($s) => $f,
        }
    };
}

/// Something messages can be received from (rsmpi's `Source`).
pub trait Source {
    /// The source this face wraps.
    #[doc(hidden)]
    fn target(&self) -> Target<'_>;

    /// The communicator and the source rank (`None`: any) of a matched
    /// probe.
    #[doc(hidden)]
    fn matched_source(&self) -> (&mpi_on_portals::SimpleCommunicator, Option<crate::Rank>);

    /// Receive into `buf`, any tag (`MPI_Recv`).
    fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Status {
        self.receive_into_with_tag(buf, mpi_on_portals::ANY_TAG)
    }

    /// Receive into `buf` with a tag.
    fn receive_into_with_tag<B: BufferMut + ?Sized>(&self, buf: &mut B, tag: Tag) -> Status {
        const CALL: &str = "Source::receive_into";
        on_source!(self.target(), |s| transfer::receive(
            &s,
            buf,
            tag,
            CALL,
            |b| s.receive_into_with_tag(b, tag)
        ))
    }

    /// Receive one value, any tag (a user datatype, a derived struct or
    /// `bool` too: the bytes are validated as for
    /// [`Source::receive_into`]).
    fn receive<T: datatype::Equivalence>(&self) -> (T, Status) {
        self.receive_with_tag(mpi_on_portals::ANY_TAG)
    }

    /// Receive one value with a tag.
    fn receive_with_tag<T: datatype::Equivalence>(&self, tag: Tag) -> (T, Status) {
        receiving_value::<T>("Source::receive", |b| {
            on_source!(self.target(), |s| s.receive_into_with_tag(b, tag))
        })
    }

    /// Receive a message of any length into a new vector, any tag.
    fn receive_vec<T: datatype::Equivalence>(&self) -> (Vec<T>, Status) {
        self.receive_vec_with_tag(mpi_on_portals::ANY_TAG)
    }

    /// Receive a message of any length into a new vector, with a tag:
    /// the message is probed first (`MPI_Mprobe`) for its length.
    fn receive_vec_with_tag<T: datatype::Equivalence>(&self, tag: Tag) -> (Vec<T>, Status) {
        self.matched_probe_with_tag(tag).0.matched_receive_vec()
    }

    /// Non-blocking receive into `buf`, any tag (`MPI_Irecv`).
    fn immediate_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
    ) -> Request<'a, B, S> {
        self.immediate_receive_into_with_tag(scope, buf, mpi_on_portals::ANY_TAG)
    }

    /// Non-blocking receive into `buf` with a tag.
    fn immediate_receive_into_with_tag<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
        tag: Tag,
    ) -> Request<'a, B, S> {
        const CALL: &str = "Source::immediate_receive_into";
        // The data pointer is read only after the receive completed (see
        // `Request::wait_for_data`).
        let data = NonNull::from(&mut *buf);
        let r = on_source!(self.target(), |s| transfer::immediate_receive(
            &s,
            scoped(&scope, CALL),
            buf,
            tag,
            CALL
        ));
        Request::new(r, Some(data))
    }

    /// Start receiving one value into a buffer the future owns
    /// (`MPI_Irecv`), any tag: any datatype (a derived struct, `bool`),
    /// validated as for [`Source::receive`].
    fn immediate_receive<T: datatype::Equivalence>(&self) -> ReceiveFuture<T> {
        self.immediate_receive_with_tag(mpi_on_portals::ANY_TAG)
    }

    /// [`Source::immediate_receive`] with a tag.
    fn immediate_receive_with_tag<T: datatype::Equivalence>(&self, tag: Tag) -> ReceiveFuture<T> {
        let (request, value) = on_source!(self.target(), |s| transfer::receive_future::<T, _>(
            &s,
            tag,
            ReceiveFuture::<T>::CALL
        ));
        ReceiveFuture { request, value }
    }

    /// Wait for a message, any tag, that only the returned [`Message`]
    /// receives (`MPI_Mprobe`).
    fn matched_probe(&self) -> (Message, Status) {
        self.matched_probe_with_tag(mpi_on_portals::ANY_TAG)
    }

    /// [`Source::matched_probe`] with a tag.
    fn matched_probe_with_tag(&self, tag: Tag) -> (Message, Status) {
        let (comm, source) = self.matched_source();
        let (m, s) = check(
            comm.matched_probe_with_tag(source, tag),
            "Source::matched_probe",
        );
        (Message(m), s)
    }

    /// A waiting message as a [`Message`], if any (`MPI_Improbe`).
    fn immediate_matched_probe(&self) -> Option<(Message, Status)> {
        self.immediate_matched_probe_with_tag(mpi_on_portals::ANY_TAG)
    }

    /// [`Source::immediate_matched_probe`] with a tag.
    fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Option<(Message, Status)> {
        let (comm, source) = self.matched_source();
        check(
            comm.immediate_matched_probe_with_tag(source, tag),
            "Source::immediate_matched_probe",
        )
        .map(|(m, s)| (Message(m), s))
    }

    /// Probe for a message, any tag, and receive it into a vector of its
    /// length (`MPI_Mprobe`, `MPI_Mrecv`).
    fn matched_receive_vec<T: datatype::Equivalence>(&self) -> (Vec<T>, Status) {
        self.matched_probe().0.matched_receive_vec()
    }

    /// Wait for a message, any tag, and describe it (`MPI_Probe`).
    fn probe(&self) -> Status {
        check(on_source!(self.target(), |s| s.probe()), "Source::probe")
    }

    /// [`Source::probe`] with a tag.
    fn probe_with_tag(&self, tag: Tag) -> Status {
        check(
            on_source!(self.target(), |s| s.probe_with_tag(tag)),
            "Source::probe_with_tag",
        )
    }

    /// Describe a waiting message if any (`MPI_Iprobe`).
    fn immediate_probe(&self) -> Option<Status> {
        check(
            on_source!(self.target(), |s| s.immediate_probe()),
            "Source::immediate_probe",
        )
    }

    /// [`Source::immediate_probe`] with a tag.
    fn immediate_probe_with_tag(&self, tag: Tag) -> Option<Status> {
        check(
            on_source!(self.target(), |s| s.immediate_probe_with_tag(tag)),
            "Source::immediate_probe_with_tag",
        )
    }
}

/// A probed message, received only through it (rsmpi's `Message`).
#[derive(Debug)]
pub struct Message(mpi_on_portals::Message);

impl Message {
    /// Receive it into `buf` (`MPI_Mrecv`).
    pub fn matched_receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Status {
        const CALL: &str = "Message::matched_receive_into";
        let (from, tag) = (self.0.sender(), self.0.status().tag());
        transfer::receive(&from, buf, tag, CALL, |b| {
            from.receive_into_with_tag(b, tag)
        })
    }

    /// Receive it as one value.
    pub fn matched_receive<T: datatype::Equivalence>(self) -> (T, Status) {
        const CALL: &str = "Message::matched_receive";
        receiving_value::<T>(CALL, |b| self.0.matched_receive_into(b))
    }

    /// Receive it into a vector of its length (a whole number of values).
    pub fn matched_receive_vec<T: datatype::Equivalence>(self) -> (Vec<T>, Status) {
        const CALL: &str = "Message::matched_receive_vec";
        let (len, size) = (self.0.status().message_len(), wire_size::<T>());
        let n = match (len.checked_div(size), len.checked_rem(size)) {
            (Some(n), Some(0)) => n,
            (None, _) if len == 0 => 0,
            _ => fatal(
                CALL,
                &format!("a message of {len} bytes is not a whole number of {size}-byte values"),
            ),
        };
        receiving_values::<T>(n, CALL, |b| self.0.matched_receive_into(b))
    }

    /// Start receiving it into `buf` (`MPI_Imrecv`).
    pub fn immediate_matched_receive_into<'b, S: Scope<'b>, B: BufferMut + ?Sized>(
        self,
        scope: S,
        buf: &'b mut B,
    ) -> Request<'b, B, S> {
        const CALL: &str = "Message::immediate_matched_receive_into";
        let data = NonNull::from(&mut *buf);
        let (from, tag) = (self.0.sender(), self.0.status().tag());
        let r = transfer::immediate_receive(&from, scoped(&scope, CALL), buf, tag, CALL);
        Request::new(r, Some(data))
    }
}

/// A pending receive of one value that owns its buffer (rsmpi's
/// `ReceiveFuture`).
#[derive(Debug)]
pub struct ReceiveFuture<T> {
    // Declared before `value`: dropped first, so the receive is settled
    // (cancelled or completed) before the memory it writes is freed.
    request: mpi_on_portals::request::Request<'static>,
    value: Box<std::mem::MaybeUninit<T>>,
}

impl<T: datatype::Equivalence> ReceiveFuture<T> {
    const CALL: &'static str = "Source::immediate_receive";

    /// The value of a completed receive; the job ends unless the message
    /// filled it.
    fn value(value: &std::mem::MaybeUninit<T>, status: Status) -> (T, Status) {
        let want = wire_size::<T>();
        if status.count_bytes() < want {
            fatal(
                "ReceiveFuture::get",
                &format!(
                    "the message holds {} bytes, less than the {want} of one value",
                    status.count_bytes()
                ),
            );
        }
        // SAFETY: the receive completed and filled every byte the datatype
        // describes with a validated value; the rest are zero, which the
        // contract of `Equivalence` makes a valid `T`.
        (unsafe { value.assume_init_read() }, status)
    }

    /// Wait for the value (`MPI_Wait`).
    pub fn get(self) -> (T, Status) {
        let ReceiveFuture { request, value } = self;
        let status = check(request.wait(), "ReceiveFuture::get");
        Self::value(&value, status)
    }

    /// The value if it has arrived (`MPI_Test`), the future back
    /// otherwise.
    pub fn r#try(self) -> Result<(T, Status), Self> {
        let ReceiveFuture { request, value } = self;
        match check(request.test(), "ReceiveFuture::try") {
            Ok(status) => Ok(Self::value(&value, status)),
            Err(request) => Err(ReceiveFuture { request, value }),
        }
    }
}

impl Source for Process<'_> {
    fn target(&self) -> Target<'_> {
        Target::Process(self.inner)
    }
    fn matched_source(&self) -> (&mpi_on_portals::SimpleCommunicator, Option<crate::Rank>) {
        (self.comm, Some(self.inner.rank()))
    }
}

impl Source for AnyProcess<'_> {
    fn target(&self) -> Target<'_> {
        Target::Any(self.inner)
    }
    fn matched_source(&self) -> (&mpi_on_portals::SimpleCommunicator, Option<crate::Rank>) {
        (self.comm, None)
    }
}

/// Send `msg` to `destination` while receiving one value from `source`
/// (`MPI_Sendrecv`).
pub fn send_receive<R, M, D, S>(msg: &M, destination: &D, source: &S) -> (R, Status)
where
    R: Equivalence + crate::datatype::Equivalence,
    M: Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    let mut v = R::zeroed();
    let status = send_receive_into(msg, destination, std::slice::from_mut(&mut v), source);
    (v, status)
}

/// Send `msg` to `destination` while receiving into `buf` from `source`.
pub fn send_receive_into<M, D, B, S>(msg: &M, destination: &D, buf: &mut B, source: &S) -> Status
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    send_receive_into_with_tags(msg, destination, 0, buf, source, mpi_on_portals::ANY_TAG)
}

/// [`send_receive_into`] with explicit tags.
pub fn send_receive_into_with_tags<M, D, B, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    receivetag: Tag,
) -> Status
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    const CALL: &str = "send_receive_into";
    let dest = destination.target();
    // As the `Result` API's: the send started, the receive done, the send
    // waited for; each side as segments where its layout allows.
    mpi_on_portals::request::scope(|s| {
        let sent = transfer::immediate_send(&dest, s, msg, sendtag, SendMode::Standard, CALL);
        let status = on_source!(source.target(), |src| transfer::receive(
            &src,
            buf,
            receivetag,
            CALL,
            |b| src.receive_into_with_tag(b, receivetag)
        ));
        check(sent.wait(), CALL);
        status
    })
}

/// Send `buf`'s contents and replace them with the message received
/// (`MPI_Sendrecv_replace`).
pub fn send_receive_replace_into<B, D, S>(buf: &mut B, destination: &D, source: &S) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    send_receive_replace_into_with_tags(buf, destination, 0, source, mpi_on_portals::ANY_TAG)
}

/// [`send_receive_replace_into`] with explicit tags.
pub fn send_receive_replace_into_with_tags<B, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    const CALL: &str = "send_receive_replace_into";
    let dest = destination.target();
    // The message is copied out before the buffer is received into.
    let msg = sending(buf, CALL).into_owned();
    receiving(buf, CALL, |b| {
        on_source!(source.target(), |s| inner::send_receive_into_with_tags(
            &msg[..],
            &dest,
            sendtag,
            b,
            &s,
            receivetag
        ))
    })
}
