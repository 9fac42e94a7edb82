//! Matched probes (`MPI_Mprobe`, `MPI_Improbe`, `MPI_Mrecv`,
//! `MPI_Imrecv`): a probed message received by its handle.
//!
//! The handle names the probed message's source and tag in its
//! communicator; its receive matches exactly those. By MPI's non-overtaking
//! rule that is the probed message — the earliest from that source with
//! that tag — as long as no other thread of this process receives from the
//! same source and tag on the same communicator in between (threads that
//! each use a communicator of their own, as multi-threaded programs here
//! do, are safe).

use crate::comm::{Communicator, Rank, SimpleCommunicator, Tag};
use crate::datatype::{BufferMut, Equivalence};
use crate::error::{MpiError, Result};
use crate::p2p::Source;
use crate::request::{Request, Scope};
use crate::status::Status;

/// A probed message, to be received with one of its `matched_receive`
/// calls (rsmpi's `Message`). Holds its communicator, so it borrows
/// nothing.
#[must_use = "a matched message should be received"]
#[derive(Clone, Debug)]
pub struct Message {
    comm: SimpleCommunicator,
    status: Status,
}

impl SimpleCommunicator {
    /// Wait for a message from `source` (`None`: any) with `tag`
    /// ([`crate::ANY_TAG`]: any) that only the returned [`Message`]
    /// receives (`MPI_Mprobe`).
    pub fn matched_probe_with_tag(
        &self,
        source: Option<Rank>,
        tag: Tag,
    ) -> Result<(Message, Status)> {
        let s = match source {
            Some(r) => self.process_at_rank(r).probe_with_tag(tag)?,
            None => self.any_process().probe_with_tag(tag)?,
        };
        Ok((self.message(s), s))
    }

    /// A waiting message from `source` with `tag` as a [`Message`], if
    /// there is one (`MPI_Improbe`).
    pub fn immediate_matched_probe_with_tag(
        &self,
        source: Option<Rank>,
        tag: Tag,
    ) -> Result<Option<(Message, Status)>> {
        let s = match source {
            Some(r) => self.process_at_rank(r).immediate_probe_with_tag(tag)?,
            None => self.any_process().immediate_probe_with_tag(tag)?,
        };
        Ok(s.map(|s| (self.message(s), s)))
    }

    fn message(&self, status: Status) -> Message {
        Message {
            comm: self.clone(),
            status,
        }
    }
}

impl Message {
    /// What the probe said about the message.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The process that sent it, in its communicator: a receive from it
    /// with the message's tag gets exactly this message (see the module
    /// documentation), for a layer that receives in its own way (into
    /// segments: [`crate::segments`]).
    pub fn sender(&self) -> crate::comm::Process<'_> {
        self.comm.process_at_rank(self.status.source_rank())
    }

    /// Receive the message into `buf` (`MPI_Mrecv`).
    pub fn matched_receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Result<Status> {
        self.comm
            .process_at_rank(self.status.source_rank())
            .receive_into_with_tag(buf, self.status.tag())
    }

    /// Receive the message as one value.
    pub fn matched_receive<T: Equivalence>(self) -> Result<(T, Status)> {
        self.comm
            .process_at_rank(self.status.source_rank())
            .receive_with_tag(self.status.tag())
    }

    /// Receive the message into a vector of its length.
    pub fn matched_receive_vec<T: Equivalence>(self) -> Result<(Vec<T>, Status)> {
        let size = std::mem::size_of::<T>().max(1);
        if self.status.message_len() % size != 0 {
            return Err(MpiError::InvalidBuffer(
                "message length is not a whole number of elements",
            ));
        }
        let mut v = vec![T::zeroed(); self.status.message_len() / size];
        let s = self.matched_receive_into(&mut v[..])?;
        Ok((v, s))
    }

    /// Start receiving the message into `buf` (`MPI_Imrecv`).
    pub fn immediate_matched_receive_into<'b, B: BufferMut + ?Sized>(
        self,
        scope: &Scope<'b>,
        buf: &'b mut B,
    ) -> Result<Request<'b>> {
        self.comm
            .process_at_rank(self.status.source_rank())
            .immediate_receive_into_with_tag(scope, buf, self.status.tag())
    }
}
