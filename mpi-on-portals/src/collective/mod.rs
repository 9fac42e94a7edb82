//! Collective operations (rsmpi's `CommunicatorCollectives` and `Root`).
//!
//! They run over point-to-point messages on the communicator's own
//! collective context id, so a collective message can never match a
//! point-to-point receive, and collectives and point-to-point traffic can be
//! interleaved freely on one communicator. All are blocking except
//! [`CommunicatorCollectives::immediate_barrier`],
//! [`Root::immediate_broadcast_into`] and (for predefined operations on
//! small vectors) [`CommunicatorCollectives::immediate_all_reduce_into`],
//! which run as chains of triggered operations on entries of their own
//! (`device/nbc.rs`), and the gathers, scatters, all-gathers,
//! all-to-alls, reductions and scans of [`ImmediateCollectives`] and
//! [`ImmediateRoot`] (`device/nbc/flat.rs`).

pub(crate) mod algos;
mod immediate;
pub mod op;
mod reduce_scatter;
mod unsafe_op;

use crate::comm::{CommData, Communicator, Process, Rank};
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};
use crate::request::{Request, Scope};

use algos::Coll;
pub use immediate::{ImmediateCollectives, ImmediateRoot};
pub use op::{
    BitwiseOperation, Integer, LogicalOperation, Numeric, Operation, SystemOperation, UserOperation,
};
pub use unsafe_op::{UnsafeUserOperation, UserFunction};

/// A typed view of a send buffer for collectives: a single value, a slice,
/// a vector or an array.
pub trait Elements<T> {
    /// The elements.
    fn elements(&self) -> &[T];
}

/// A typed view of a receive buffer for collectives.
pub trait ElementsMut<T>: Elements<T> {
    /// The elements.
    fn elements_mut(&mut self) -> &mut [T];
}

impl<T: Equivalence> Elements<T> for [T] {
    fn elements(&self) -> &[T] {
        self
    }
}
impl<T: Equivalence> ElementsMut<T> for [T] {
    fn elements_mut(&mut self) -> &mut [T] {
        self
    }
}
impl<T: Equivalence> Elements<T> for Vec<T> {
    fn elements(&self) -> &[T] {
        self
    }
}
impl<T: Equivalence> ElementsMut<T> for Vec<T> {
    fn elements_mut(&mut self) -> &mut [T] {
        self
    }
}
impl<T: Equivalence, const N: usize> Elements<T> for [T; N] {
    fn elements(&self) -> &[T] {
        self
    }
}
impl<T: Equivalence, const N: usize> ElementsMut<T> for [T; N] {
    fn elements_mut(&mut self) -> &mut [T] {
        self
    }
}

macro_rules! scalar_elements {
    ($($t:ty),*) => {$(
        impl Elements<$t> for $t {
            fn elements(&self) -> &[$t] {
                std::slice::from_ref(self)
            }
        }
        impl ElementsMut<$t> for $t {
            fn elements_mut(&mut self) -> &mut [$t] {
                std::slice::from_mut(self)
            }
        }
    )*};
}
scalar_elements!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

/// A buffer cut into per-rank blocks of different sizes, for the
/// `varcount` collectives (counts and displacements in elements).
#[derive(Debug)]
pub struct Partition<'a, T> {
    buf: &'a [T],
    counts: Vec<usize>,
    displs: Vec<usize>,
}

/// The receiving counterpart of [`Partition`].
#[derive(Debug)]
pub struct PartitionMut<'a, T> {
    buf: &'a mut [T],
    counts: Vec<usize>,
    displs: Vec<usize>,
}

/// Every block lies inside a buffer of `len` elements.
fn check_blocks_inside(len: usize, counts: &[usize], displs: &[usize]) -> Result<()> {
    if counts.len() != displs.len() {
        return Err(MpiError::InvalidBuffer(
            "counts and displacements differ in length",
        ));
    }
    for (&c, &d) in counts.iter().zip(displs) {
        if d.checked_add(c).is_none_or(|end| end > len) {
            return Err(MpiError::InvalidBuffer("a block lies outside the buffer"));
        }
    }
    Ok(())
}

/// Blocks of a receive partition: inside the buffer and disjoint (they are
/// written concurrently).
fn check_partition(len: usize, counts: &[usize], displs: &[usize]) -> Result<()> {
    check_blocks_inside(len, counts, displs)?;
    // Receiving blocks must not overlap (they are written concurrently).
    let mut spans: Vec<(usize, usize)> = counts
        .iter()
        .zip(displs)
        .filter(|(&c, _)| c > 0)
        .map(|(&c, &d)| (d, d + c))
        .collect();
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[0].1 > w[1].0) {
        return Err(MpiError::InvalidBuffer("blocks overlap"));
    }
    Ok(())
}

impl<'a, T> Partition<'a, T> {
    /// Blocks of `buf`: block r has `counts[r]` elements at `displs[r]`.
    pub fn new(
        buf: &'a [T],
        counts: impl Into<Vec<usize>>,
        displs: impl Into<Vec<usize>>,
    ) -> Result<Self> {
        let (counts, displs) = (counts.into(), displs.into());
        if counts.len() != displs.len() {
            return Err(MpiError::InvalidBuffer(
                "counts and displacements differ in length",
            ));
        }
        for (&c, &d) in counts.iter().zip(&displs) {
            if d.checked_add(c).is_none_or(|end| end > buf.len()) {
                return Err(MpiError::InvalidBuffer("a block lies outside the buffer"));
            }
        }
        Ok(Partition {
            buf,
            counts,
            displs,
        })
    }
}

impl<'a, T> PartitionMut<'a, T> {
    /// Blocks of `buf`: block r has `counts[r]` elements at `displs[r]`;
    /// they may not overlap.
    pub fn new(
        buf: &'a mut [T],
        counts: impl Into<Vec<usize>>,
        displs: impl Into<Vec<usize>>,
    ) -> Result<Self> {
        let (counts, displs) = (counts.into(), displs.into());
        check_partition(buf.len(), &counts, &displs)?;
        Ok(PartitionMut {
            buf,
            counts,
            displs,
        })
    }

    /// Contiguous blocks of `counts`, one after the other.
    pub fn contiguous(buf: &'a mut [T], counts: impl Into<Vec<usize>>) -> Result<Self> {
        let counts: Vec<usize> = counts.into();
        let displs = displacements(&counts);
        Self::new(buf, counts, displs)
    }
}

/// Displacements of contiguous blocks of `counts`.
pub fn displacements(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |s, &c| {
            let d = *s;
            *s += c;
            Some(d)
        })
        .collect()
}

/// Send and receive buffers of a reduction must have the same length.
fn same_len<T>(send: &[T], recv: &[T], what: &'static str) -> Result<()> {
    if send.len() == recv.len() {
        Ok(())
    } else {
        Err(MpiError::InvalidBuffer(what))
    }
}

fn coll(c: &CommData) -> Coll<'_> {
    Coll { c }
}

/// A barrier on point-to-point messages only: the one that publishes a new
/// communicator's entries, which its slots cannot carry yet.
pub(crate) fn barrier_point_to_point(c: &CommData) -> Result<()> {
    algos::dissemination(&coll(c))
}

fn check_blocks(n: usize, counts: &[usize], what: &'static str) -> Result<()> {
    if counts.len() != n {
        return Err(MpiError::InvalidBuffer(what));
    }
    Ok(())
}

fn root_index(c: &CommData, root: Rank) -> Result<usize> {
    usize::try_from(root)
        .ok()
        .filter(|&r| r < c.ranks.len())
        .ok_or(MpiError::InvalidRank {
            rank: root,
            size: c.ranks.len() as Rank,
        })
}

/// Collectives every member of a communicator calls (rsmpi's
/// `CommunicatorCollectives`).
pub trait CommunicatorCollectives: Communicator {
    /// Wait until every member has called `barrier` (`MPI_Barrier`):
    /// dissemination, ⌈log₂ n⌉ rounds.
    fn barrier(&self) -> Result<()> {
        algos::barrier(&coll(self.data()))
    }

    /// Start a barrier (`MPI_Ibarrier`); the request completes once every
    /// member has started it. It runs as a chain of triggered operations
    /// (a binomial tree, see `device/nbc.rs`), so it completes while every
    /// thread computes or sleeps, without further MPI calls. Borrows
    /// nothing: no scope needed.
    fn immediate_barrier(&self) -> Result<Request<'static>> {
        let c = self.data();
        let id = c.dev.collective_post(|| c.dev.ibarrier(c.ctx))?;
        Ok(Request::unscoped(c.dev.clone(), id))
    }

    /// Every member's `send` block, concatenated in rank order, on every
    /// member (`MPI_Allgather`). `recv` holds `size × send.len()` elements.
    fn all_gather_into<T: Equivalence, S: Elements<T> + ?Sized, R: ElementsMut<T> + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (send, recv) = (send.elements(), recv.elements_mut());
        let c = self.data();
        let (n, blk) = (c.ranks.len(), send.len());
        if recv.len() != n * blk {
            return Err(MpiError::InvalidBuffer(
                "all_gather: the receive buffer must hold size × send elements",
            ));
        }
        let me = c.me as usize;
        recv[me * blk..(me + 1) * blk].copy_from_slice(send);
        let counts = vec![blk; n];
        algos::all_gather(&coll(c), recv, &counts, &displacements(&counts))
    }

    /// All-gather with per-rank block sizes (`MPI_Allgatherv`).
    fn all_gather_varcount_into<T: Equivalence, S: Elements<T> + ?Sized>(
        &self,
        send: &S,
        recv: &mut PartitionMut<'_, T>,
    ) -> Result<()> {
        let c = self.data();
        check_blocks(
            c.ranks.len(),
            &recv.counts,
            "all_gather_varcount: one block per rank",
        )?;
        let me = c.me as usize;
        let send = send.elements();
        if recv.counts[me] != send.len() {
            return Err(MpiError::InvalidBuffer(
                "all_gather_varcount: my block size differs from my send buffer",
            ));
        }
        let d = recv.displs[me];
        recv.buf[d..d + send.len()].copy_from_slice(send);
        algos::all_gather(&coll(c), recv.buf, &recv.counts, &recv.displs)
    }

    /// Block r of every member's `send` goes to member r (`MPI_Alltoall`).
    /// Both buffers hold `size` equal blocks.
    fn all_to_all_into<T: Equivalence, S: Elements<T> + ?Sized, R: ElementsMut<T> + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (send, recv) = (send.elements(), recv.elements_mut());
        let n = self.data().ranks.len();
        if send.len() % n != 0 || recv.len() != send.len() {
            return Err(MpiError::InvalidBuffer(
                "all_to_all: buffers must hold size equal blocks",
            ));
        }
        let blk = send.len() / n;
        let range = move |r: usize| r * blk..(r + 1) * blk;
        algos::all_to_all(&coll(self.data()), send, &range, recv, &range)
    }

    /// All-to-all with per-pair block sizes (`MPI_Alltoallv`).
    fn all_to_all_varcount_into<T: Equivalence>(
        &self,
        send: &Partition<'_, T>,
        recv: &mut PartitionMut<'_, T>,
    ) -> Result<()> {
        let n = self.data().ranks.len();
        check_blocks(
            n,
            &send.counts,
            "all_to_all_varcount: one send block per rank",
        )?;
        check_blocks(
            n,
            &recv.counts,
            "all_to_all_varcount: one receive block per rank",
        )?;
        let (sc, sd) = (send.counts.clone(), send.displs.clone());
        let (rc, rd) = (recv.counts.clone(), recv.displs.clone());
        let srange = move |r: usize| sd[r]..sd[r] + sc[r];
        let rrange = move |r: usize| rd[r]..rd[r] + rc[r];
        algos::all_to_all(&coll(self.data()), send.buf, &srange, recv.buf, &rrange)
    }

    /// Element-wise reduction of every member's `send`, on every member
    /// (`MPI_Allreduce`).
    fn all_reduce_into<
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    >(
        &self,
        send: &S,
        recv: &mut R,
        op: O,
    ) -> Result<()> {
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "all_reduce: send and receive buffers differ in length",
        )?;
        recv.copy_from_slice(send);
        algos::all_reduce(&coll(self.data()), recv, &op)
    }

    /// Start an element-wise reduction of every member's `send`, landing
    /// on every member's `recv` (`MPI_Iallreduce`); `recv` is lent until
    /// the request completes.
    ///
    /// When `op` is a predefined operation the engine has as an atomic on
    /// `T` (sum, product, min, max on numbers; logical and bitwise
    /// operations on integers; any of 8- to 64-bit integers, `f32`, `f64`)
    /// and the vector fits one atomic (`NiLimits::max_atomic_size`, 512
    /// bytes by default), it runs as a chain of triggered atomics and puts
    /// (a binomial tree rooted at rank 0, see `device/nbc.rs`), so it
    /// completes while every thread computes or sleeps, without further
    /// MPI calls. Each node adds its children's partial results to its own
    /// in the order they arrive, so a floating-point sum is grouped by the
    /// tree but its order at a node varies between runs; every member gets
    /// the same (the root's) value.
    ///
    /// Otherwise (a user-defined operation, `u128`, a longer vector) it
    /// runs the blocking algorithm in this call and returns a completed
    /// request: correct, but it then waits here for every member to start
    /// it, as [`CommunicatorCollectives::all_reduce_into`] does.
    fn immediate_all_reduce_into<
        'a,
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    >(
        &self,
        scope: &Scope<'a>,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Result<Request<'a>> {
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "all_reduce: send and receive buffers differ in length",
        )?;
        let c = self.data();
        recv.copy_from_slice(send);
        let bytes = std::mem::size_of_val(recv);
        match op.atomic().filter(|_| c.dev.atomic_fits(bytes)) {
            Some(spec) => {
                let b: &mut [u8] = bytemuck::cast_slice_mut(recv);
                // SAFETY: `recv` is borrowed for 'a, and the scope
                // completes the request before 'a ends.
                let id = c.dev.collective_post(|| unsafe {
                    c.dev.iallreduce(c.ctx, b.as_mut_ptr(), b.len(), spec)
                })?;
                Ok(Request::new(c.dev.clone(), id, false, scope))
            }
            None => {
                algos::all_reduce(&coll(c), recv, &op)?;
                Ok(Request::unscoped(c.dev.clone(), c.dev.completed_req()))
            }
        }
    }

    /// Inclusive prefix reduction: member r gets `send₀ op … op send_r`
    /// (`MPI_Scan`).
    fn scan_into<
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    >(
        &self,
        send: &S,
        recv: &mut R,
        op: O,
    ) -> Result<()> {
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "scan: send and receive buffers differ in length",
        )?;
        recv.copy_from_slice(send);
        algos::scan(&coll(self.data()), recv, &op, false)
    }

    /// Exclusive prefix reduction: member r gets `send₀ op … op send_{r−1}`;
    /// rank 0's `recv` is left unchanged (`MPI_Exscan`).
    fn exclusive_scan_into<
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    >(
        &self,
        send: &S,
        recv: &mut R,
        op: O,
    ) -> Result<()> {
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "exclusive_scan: send and receive buffers differ in length",
        )?;
        let mut acc = send.to_vec();
        algos::scan(&coll(self.data()), &mut acc, &op, true)?;
        if self.data().me != 0 {
            recv.copy_from_slice(&acc);
        }
        Ok(())
    }

    /// Reduce `send` element-wise over all members and give member r block
    /// r of the result (`MPI_Reduce_scatter_block`): `send` holds `size`
    /// blocks of `recv`'s length.
    fn reduce_scatter_block_into<
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    >(
        &self,
        send: &S,
        recv: &mut R,
        op: O,
    ) -> Result<()> {
        reduce_scatter::block(self.data(), send.elements(), recv.elements_mut(), &op)
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

/// Rooted collectives, called on the root process of a communicator
/// (rsmpi's `Root`): `world.process_at_rank(root).broadcast_into(&mut x)`.
pub trait Root {
    #[doc(hidden)]
    fn root(&self) -> (&CommData, Result<usize>);

    /// Copy the root's `buf` to every member (`MPI_Bcast`).
    fn broadcast_into<T: Equivalence, B: ElementsMut<T> + ?Sized>(
        &self,
        buf: &mut B,
    ) -> Result<()> {
        let (c, root) = self.root();
        algos::bcast(
            &coll(c),
            root?,
            bytemuck::cast_slice_mut(buf.elements_mut()),
        )
    }

    /// Start a broadcast of the root's `buf` to every member
    /// (`MPI_Ibcast`); `buf` is lent until the request completes. It runs
    /// as a chain of triggered operations (a binomial tree, see
    /// `device/nbc.rs`), so it completes while every thread computes or
    /// sleeps, without further MPI calls. Any size (store and forward, not
    /// pipelined); every member must pass the same length.
    fn immediate_broadcast_into<'a, T: Equivalence, B: ElementsMut<T> + ?Sized>(
        &self,
        scope: &Scope<'a>,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        let (c, root) = self.root();
        let root = root? as u32;
        let b: &mut [u8] = bytemuck::cast_slice_mut(buf.elements_mut());
        // SAFETY: `buf` is borrowed for 'a, and the scope completes the
        // request before 'a ends.
        let id = c
            .dev
            .collective_post(|| unsafe { c.dev.ibcast(c.ctx, root, b.as_mut_ptr(), b.len()) })?;
        Ok(Request::new(c.dev.clone(), id, false, scope))
    }

    /// Called by the root: reduce everyone's `send` into `recv`
    /// (`MPI_Reduce`).
    fn reduce_into_root<
        T: Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    >(
        &self,
        send: &S,
        recv: &mut R,
        op: O,
    ) -> Result<()> {
        let (c, root) = self.root();
        let root = root?;
        if root != c.me as usize {
            return Err(MpiError::InvalidBuffer(
                "reduce_into_root must be called by the root itself",
            ));
        }
        let (send, recv) = (send.elements(), recv.elements_mut());
        same_len(
            send,
            recv,
            "reduce: send and receive buffers differ in length",
        )?;
        recv.copy_from_slice(send);
        algos::reduce(&coll(c), root, recv, &op)
    }

    /// Called by the non-roots of a reduction: contribute `send`.
    fn reduce_into<T: Equivalence, S: Elements<T> + ?Sized, O: Operation<T>>(
        &self,
        send: &S,
        op: O,
    ) -> Result<()> {
        let (c, root) = self.root();
        let mut acc = send.elements().to_vec();
        algos::reduce(&coll(c), root?, &mut acc, &op)
    }

    /// Called by the root: everyone's `send` concatenated in rank order
    /// (`MPI_Gather`).
    fn gather_into_root<T: Equivalence, S: Elements<T> + ?Sized, R: ElementsMut<T> + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (c, root) = self.root();
        let (send, recv) = (send.elements(), recv.elements_mut());
        if recv.len() != c.ranks.len() * send.len() {
            return Err(MpiError::InvalidBuffer(
                "gather: the receive buffer must hold size × send elements",
            ));
        }
        algos::gather(&coll(c), root?, send, Some(recv))
    }

    /// Called by the non-roots of a gather.
    fn gather_into<T: Equivalence, S: Elements<T> + ?Sized>(&self, send: &S) -> Result<()> {
        let (c, root) = self.root();
        algos::gather(&coll(c), root?, send.elements(), None)
    }

    /// Called by the root: gather blocks of different sizes (`MPI_Gatherv`).
    fn gather_varcount_into_root<T: Equivalence, S: Elements<T> + ?Sized>(
        &self,
        send: &S,
        recv: &mut PartitionMut<'_, T>,
    ) -> Result<()> {
        let (c, root) = self.root();
        check_blocks(
            c.ranks.len(),
            &recv.counts,
            "gather_varcount: one block per rank",
        )?;
        algos::gather_v(
            &coll(c),
            root?,
            send.elements(),
            Some((recv.buf, &recv.counts, &recv.displs)),
        )
    }

    /// Called by the non-roots of a variable gather.
    fn gather_varcount_into<T: Equivalence, S: Elements<T> + ?Sized>(
        &self,
        send: &S,
    ) -> Result<()> {
        let (c, root) = self.root();
        algos::gather_v(&coll(c), root?, send.elements(), None)
    }

    /// Called by the root: block r of `send` goes to member r
    /// (`MPI_Scatter`).
    fn scatter_into_root<T: Equivalence, S: Elements<T> + ?Sized, R: ElementsMut<T> + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (c, root) = self.root();
        let (send, recv) = (send.elements(), recv.elements_mut());
        if send.len() != c.ranks.len() * recv.len() {
            return Err(MpiError::InvalidBuffer(
                "scatter: the send buffer must hold size × receive elements",
            ));
        }
        algos::scatter(&coll(c), root?, Some(send), recv)
    }

    /// Called by the non-roots of a scatter.
    fn scatter_into<T: Equivalence, R: ElementsMut<T> + ?Sized>(&self, recv: &mut R) -> Result<()> {
        let (c, root) = self.root();
        algos::scatter(&coll(c), root?, None, recv.elements_mut())
    }

    /// Called by the root: scatter blocks of different sizes
    /// (`MPI_Scatterv`).
    fn scatter_varcount_into_root<T: Equivalence, R: ElementsMut<T> + ?Sized>(
        &self,
        send: &Partition<'_, T>,
        recv: &mut R,
    ) -> Result<()> {
        let (c, root) = self.root();
        check_blocks(
            c.ranks.len(),
            &send.counts,
            "scatter_varcount: one block per rank",
        )?;
        algos::scatter_v(
            &coll(c),
            root?,
            Some((send.buf, &send.counts, &send.displs)),
            recv.elements_mut(),
        )
    }

    /// Called by the non-roots of a variable scatter.
    fn scatter_varcount_into<T: Equivalence, R: ElementsMut<T> + ?Sized>(
        &self,
        recv: &mut R,
    ) -> Result<()> {
        let (c, root) = self.root();
        algos::scatter_v(&coll(c), root?, None, recv.elements_mut())
    }
}

impl Root for Process<'_> {
    fn root(&self) -> (&CommData, Result<usize>) {
        (self.comm, root_index(self.comm, self.rank))
    }
}

/// `inout = input op inout`, element-wise, on this process alone
/// (`MPI_Reduce_local`). The buffers must have the same length.
pub fn reduce_local_into<T, S, R, O>(input: &S, inout: &mut R, op: O) -> Result<()>
where
    T: Equivalence,
    S: Elements<T> + ?Sized,
    R: ElementsMut<T> + ?Sized,
    O: Operation<T>,
{
    let (a, b) = (input.elements(), inout.elements_mut());
    if a.len() != b.len() {
        return Err(MpiError::InvalidBuffer(
            "the buffers of reduce_local_into differ in length",
        ));
    }
    op.apply(a, b);
    Ok(())
}
