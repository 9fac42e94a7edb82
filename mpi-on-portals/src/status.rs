//! `Status`: what a completed receive (or a probe) tells about a message.

/// The envelope and size of a received or probed message (`MPI_Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    source: i32,
    tag: i32,
    count: usize,
    message_len: usize,
    cancelled: bool,
}

impl Status {
    pub(crate) fn new(source: i32, tag: i32, count: usize, message_len: usize) -> Self {
        Status {
            source,
            tag,
            count,
            message_len,
            cancelled: false,
        }
    }

    pub(crate) fn cancelled() -> Self {
        Status {
            source: -1,
            tag: -1,
            count: 0,
            message_len: 0,
            cancelled: true,
        }
    }

    /// Rank of the sender in the communicator (`MPI_SOURCE`).
    pub fn source_rank(&self) -> i32 {
        self.source
    }

    /// The message's tag (`MPI_TAG`).
    pub fn tag(&self) -> i32 {
        self.tag
    }

    /// Bytes delivered into the receive buffer (for a probe: the message
    /// size).
    pub fn count_bytes(&self) -> usize {
        self.count
    }

    /// Elements of type `T` delivered (`MPI_Get_count`).
    pub fn count<T>(&self) -> usize {
        match std::mem::size_of::<T>() {
            0 => 0,
            n => self.count / n,
        }
    }

    /// Bytes the sender sent. Larger than [`Status::count_bytes`] exactly
    /// when the message was truncated.
    pub fn message_len(&self) -> usize {
        self.message_len
    }

    /// True if the message did not fit the receive buffer.
    pub fn is_truncated(&self) -> bool {
        self.message_len > self.count
    }

    /// True if the request was cancelled (`MPI_Test_cancelled`).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}
