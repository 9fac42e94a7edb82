//! Point-to-point transfers of any buffer: a dense one as its bytes, a
//! non-contiguous one as segments the transport gathers from and scatters
//! into (no copy), and one that must be packed (many tiny runs) or
//! validated (`bool`) through a staged copy — owned by the request in the
//! non-blocking forms, and unpacked as the request completes.

use mpi_on_portals::raw::SendMode;
use mpi_on_portals::request as inner;
use mpi_on_portals::segments;
use mpi_on_portals::{Destination as _, Process, Result, Source, Status};

use std::mem::MaybeUninit;

use mpi_on_portals::segments::Iovec;
use mpi_on_portals::typemap::Typemap;

use crate::datatype::UncommittedDatatype as _;
use crate::datatype::{Buffer, BufferMut, DescribedMut, Equivalence, Landing, Outgoing};
use crate::fatal::check;
use crate::Tag;

/// Send `buf` to `p` and wait for the send to complete.
pub(crate) fn send<B: Buffer + ?Sized>(
    p: &Process<'_>,
    buf: &B,
    tag: Tag,
    mode: SendMode,
    call: &str,
) {
    let r = match check(buf.described().outgoing(), call) {
        Outgoing::Bytes(b) => match mode {
            SendMode::Standard => p.send_with_tag(&*b, tag),
            SendMode::Synchronous => p.synchronous_send_with_tag(&*b, tag),
            SendMode::Ready => p.ready_send_with_tag(&*b, tag),
        },
        Outgoing::Segments(list, _) => {
            // SAFETY: the segments are `buf`'s initialized memory, borrowed
            // until the send completes here.
            unsafe { segments::immediate_send(p, &list, tag, mode) }
                .and_then(|r| r.wait().map(drop))
        }
    };
    check(r, call)
}

/// Start sending `buf`, borrowed for the scope, to `p`.
pub(crate) fn immediate_send<'a, B: Buffer + ?Sized>(
    p: &Process<'_>,
    scope: &inner::Scope<'a>,
    buf: &'a B,
    tag: Tag,
    mode: SendMode,
    call: &str,
) -> inner::Request<'a> {
    use mpi_on_portals::Destination;
    use std::borrow::Cow;
    let r = match check(buf.described().outgoing(), call) {
        Outgoing::Bytes(Cow::Borrowed(b)) => match mode {
            SendMode::Standard => p.immediate_send_with_tag(scope, b, tag),
            SendMode::Synchronous => p.immediate_synchronous_send_with_tag(scope, b, tag),
            SendMode::Ready => p.immediate_ready_send_with_tag(scope, b, tag),
        },
        Outgoing::Bytes(Cow::Owned(packed)) => {
            segments::immediate_send_staged(p, packed, tag, mode).map(|r| r.in_scope(scope))
        }
        // SAFETY: the segments are `buf`'s memory, borrowed for 'a, which
        // the scope outlives only with the request completed.
        Outgoing::Segments(list, _) => {
            unsafe { segments::immediate_send(p, &list, tag, mode) }.map(|r| r.in_scope(scope))
        }
    };
    check(r, call)
}

/// Receive into `buf` from `s` through `f` (for a buffer that lands as
/// one region), or straight into its segments.
pub(crate) fn receive<S: Source, B: BufferMut + ?Sized>(
    s: &S,
    buf: &mut B,
    tag: Tag,
    call: &str,
    f: impl FnOnce(&mut [u8]) -> Result<Status>,
) -> Status {
    let mut landing = check(buf.described_mut().landing(), call);
    if let Landing::Scatter {
        list, stage: None, ..
    } = &landing
    {
        // SAFETY: the segments are `buf`'s memory, mutably borrowed until
        // the receive completes here; any bytes are values.
        let r = unsafe { segments::immediate_receive(s, list, tag) }.and_then(|r| r.wait());
        return check(r, call);
    }
    let r = check(f(landing.bytes()), call);
    check(landing.finish(), call);
    r
}

/// A pointer the completion step of a staged receive writes through.
struct Dst(*mut u8);

// SAFETY: the memory behind it is the receive buffer, lent to the
// request for its scope (as to the engine's progress thread); only the
// completion step, run once, writes through it.
unsafe impl Send for Dst {}

/// Start receiving into `buf`, borrowed for the scope, from `s`.
pub(crate) fn immediate_receive<'a, S: Source, B: BufferMut + ?Sized>(
    s: &S,
    scope: &inner::Scope<'a>,
    buf: &'a mut B,
    tag: Tag,
    call: &str,
) -> inner::Request<'a> {
    let r = match check(buf.described_mut().landing(), call) {
        Landing::Direct(b) => s.immediate_receive_into_with_tag(scope, b, tag),
        // SAFETY: the segments are `buf`'s memory, mutably borrowed for
        // 'a, which the scope outlives only with the request completed;
        // any bytes are values.
        Landing::Scatter { list, .. } => {
            unsafe { segments::immediate_receive(s, &list, tag) }.map(|r| r.in_scope(scope))
        }
        Landing::Staged {
            stage,
            map,
            count,
            dst,
        } => staged(s, stage, map, count, dst, tag).map(|r| r.in_scope(scope)),
    };
    check(r, call)
}

/// Start a receive from `s` into `stage`, unpacked (validated) into
/// `count` elements of `map` at `dst` as the request completes.
///
/// The caller must keep `dst` valid for writes of `map.span(count)` bytes
/// until the request completes (a scope, or an owner that drops the
/// request first).
fn staged<S: Source>(
    s: &S,
    stage: Vec<u8>,
    map: Typemap,
    count: usize,
    dst: *mut u8,
    tag: Tag,
) -> Result<inner::Request<'static>> {
    let dst = Dst(dst);
    let then: segments::Unstage = Box::new(move |got, res| {
        // The whole `Dst`, not its field: that is what is `Send`.
        let dst = dst;
        let n = match res {
            Ok(s) => s.count_bytes(),
            Err(_) => return,
        };
        // SAFETY: `dst` is writable for span(count) bytes (checked when
        // the landing was made) until the request completes, which waits
        // for this step (our caller's duty).
        if let Err(e) = unsafe { map.unpack(count, &got[..n.min(got.len())], dst.0) } {
            *res = Err(e);
        }
    });
    segments::immediate_receive_staged(s, stage, tag, then)
}

/// Start receiving one value of `T` from `s` into a zeroed box (see
/// [`crate::point_to_point::ReceiveFuture`]): in place, into its
/// segments, or staged and validated, as its datatype allows.
pub(crate) fn receive_future<T: Equivalence, S: Source>(
    s: &S,
    tag: Tag,
    call: &str,
) -> (inner::Request<'static>, Box<MaybeUninit<T>>) {
    let mut value = Box::new(MaybeUninit::<T>::zeroed());
    let avail = std::mem::size_of::<T>();
    let dt = T::equivalent_datatype();
    // SAFETY: the box is valid for reads and writes of `avail` bytes, and
    // zeroed: the bytes the layout describes hold values. The landing
    // borrows nothing past this function but the box's heap memory, which
    // does not move when the box does.
    let described = unsafe { DescribedMut::new(value.as_mut_ptr().cast(), 1, dt.layout(), avail) };
    let r = match check(described.landing(), call) {
        Landing::Direct(b) => {
            let one = [Iovec::from_slice(b)];
            let list = if one[0].len == 0 { &[][..] } else { &one[..] };
            // SAFETY: the box's memory; the future drops the request
            // before the box.
            unsafe { segments::immediate_receive(s, list, tag) }
        }
        // SAFETY: as above.
        Landing::Scatter { list, .. } => unsafe { segments::immediate_receive(s, &list, tag) },
        Landing::Staged {
            stage,
            map,
            count,
            dst,
        } => staged(s, stage, map, count, dst, tag),
    };
    (check(r, call), value)
}
