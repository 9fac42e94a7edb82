//! `MPI_Reduce_scatter_block`: an all-reduce of the whole vector, of which
//! each member keeps its block. Twice the traffic of a dedicated
//! reduce-scatter for long vectors, but it reuses the all-reduce (and its
//! rank-order guarantee for non-commutative operations) unchanged.

use super::{algos, coll, Operation};
use crate::comm::CommData;
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

/// Member r gets block r (of `recv.len()` elements) of the element-wise
/// reduction of every member's `send`.
pub(super) fn block<T: Equivalence, O: Operation<T> + ?Sized>(
    c: &CommData,
    send: &[T],
    recv: &mut [T],
    op: &O,
) -> Result<()> {
    let n = c.ranks.len();
    if recv.len().checked_mul(n) != Some(send.len()) {
        return Err(MpiError::InvalidBuffer(
            "reduce_scatter_block: the send buffer must hold size blocks of the receive buffer's length",
        ));
    }
    let mut all = send.to_vec();
    algos::all_reduce(&coll(c), &mut all, op)?;
    let start = c.me as usize * recv.len();
    recv.copy_from_slice(&all[start..start + recv.len()]);
    Ok(())
}
