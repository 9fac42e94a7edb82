//! Combined send and receive (`MPI_Sendrecv`, `MPI_Sendrecv_replace`): the
//! send is started before the receive is waited for, so a ring of ranks
//! that all exchange at once cannot deadlock.

use crate::comm::Tag;
use crate::datatype::{Buffer, BufferMut, Equivalence};
use crate::error::Result;
use crate::p2p::{Destination, Source};
use crate::request::scope;
use crate::status::Status;

/// Send `msg` to `destination` with `sendtag` while receiving into `buf`
/// from `source` with `receivetag` (`MPI_Sendrecv`).
pub fn send_receive_into_with_tags<M, D, B, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    receivetag: Tag,
) -> Result<Status>
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    scope(|s| {
        let sent = destination.immediate_send_with_tag(s, msg, sendtag)?;
        let received = source.receive_into_with_tag(buf, receivetag);
        // The send is waited for even when the receive failed: its buffer
        // is borrowed only for this call.
        let sent = sent.wait();
        let status = received?;
        sent?;
        Ok(status)
    })
}

/// [`send_receive_into_with_tags`] with tag 0 for the send and any tag
/// for the receive.
pub fn send_receive_into<M, D, B, S>(
    msg: &M,
    destination: &D,
    buf: &mut B,
    source: &S,
) -> Result<Status>
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    send_receive_into_with_tags(msg, destination, 0, buf, source, crate::comm::ANY_TAG)
}

/// Send `msg`, receive one value of type `R` (`MPI_Sendrecv`).
pub fn send_receive<R, M, D, S>(msg: &M, destination: &D, source: &S) -> Result<(R, Status)>
where
    R: Equivalence,
    M: Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    let mut v = R::zeroed();
    let status = send_receive_into(msg, destination, std::slice::from_mut(&mut v), source)?;
    Ok((v, status))
}

/// Send the contents of `buf` and replace them with the message received
/// (`MPI_Sendrecv_replace`), tags as in [`send_receive_into_with_tags`].
pub fn send_receive_replace_into_with_tags<B, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> Result<Status>
where
    B: BufferMut + Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    // The outgoing copy: the receive overwrites `buf` while the send may
    // still be reading it.
    let out = buf.as_bytes().to_vec();
    send_receive_into_with_tags(&out[..], destination, sendtag, buf, source, receivetag)
}

/// [`send_receive_replace_into_with_tags`] with tag 0 for the send and any
/// tag for the receive.
pub fn send_receive_replace_into<B, D, S>(
    buf: &mut B,
    destination: &D,
    source: &S,
) -> Result<Status>
where
    B: BufferMut + Buffer + ?Sized,
    D: Destination,
    S: Source,
{
    send_receive_replace_into_with_tags(buf, destination, 0, source, crate::comm::ANY_TAG)
}
