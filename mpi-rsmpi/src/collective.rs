//! Collective communication (rsmpi's `mpi::collective`).

use mpi_on_portals::collective::{Elements, ElementsMut, Operation};
use mpi_on_portals::{
    CommunicatorCollectives as _, ImmediateCollectives as _, ImmediateRoot as _, Root as _,
};

use crate::datatype::{
    receiving, receiving_in_place, sending, sending_in_place, Buffer, BufferMut, Partition,
    PartitionMut, Staging,
};
use crate::fatal::check;
use crate::request::{scoped, Request, Scope, StaticScope};
use crate::topology::{Communicator, Process};

pub use mpi_on_portals::collective::{
    BitwiseOperation, LogicalOperation, SystemOperation, UnsafeUserOperation, UserFunction,
    UserOperation,
};

/// `inout = input op inout` on this process alone (`MPI_Reduce_local`).
pub fn reduce_local_into<T, S, R, O>(input: &S, inout: &mut R, op: O)
where
    T: mpi_on_portals::Equivalence,
    S: Elements<T> + ?Sized,
    R: ElementsMut<T> + ?Sized,
    O: Operation<T>,
{
    check(
        mpi_on_portals::collective::reduce_local_into(input, inout, op),
        "reduce_local_into",
    )
}

/// Collectives over all members (rsmpi's `CommunicatorCollectives`).
pub trait CommunicatorCollectives: Communicator {
    /// Wait until every member has called it (`MPI_Barrier`).
    fn barrier(&self) {
        check(self.target().as_result_api().barrier(), "barrier")
    }

    /// Start a barrier (`MPI_Ibarrier`).
    fn immediate_barrier(&self) -> Request<'static, (), StaticScope> {
        Request::new(
            check(
                self.target().as_result_api().immediate_barrier(),
                "immediate_barrier",
            ),
            // A barrier's data is `()`, which `wait_any` and friends of a
            // request collection hand back.
            Some(std::ptr::NonNull::from(&())),
        )
    }

    /// Every member's block, in rank order, on every member
    /// (`MPI_Allgather`).
    fn all_gather_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "all_gather_into";
        let send = sending(send, CALL);
        receiving(recv, CALL, |r| {
            self.target().as_result_api().all_gather_into(&*send, r)
        })
    }

    /// All-gather with per-rank block sizes (`MPI_Allgatherv`).
    fn all_gather_varcount_into<T, S>(&self, send: &S, recv: &mut PartitionMut<'_, T>)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
    {
        check(
            self.target()
                .as_result_api()
                .all_gather_varcount_into(send, &mut recv.0),
            "all_gather_varcount_into",
        )
    }

    /// Block r of every member's `send` to member r (`MPI_Alltoall`).
    fn all_to_all_into<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "all_to_all_into";
        let send = sending(send, CALL);
        receiving(recv, CALL, |r| {
            self.target().as_result_api().all_to_all_into(&*send, r)
        })
    }

    /// All-to-all with per-pair block sizes (`MPI_Alltoallv`).
    fn all_to_all_varcount_into<T>(&self, send: &Partition<'_, T>, recv: &mut PartitionMut<'_, T>)
    where
        T: mpi_on_portals::Equivalence,
    {
        check(
            self.target()
                .as_result_api()
                .all_to_all_varcount_into(&send.0, &mut recv.0),
            "all_to_all_varcount_into",
        )
    }

    /// Element-wise reduction on every member (`MPI_Allreduce`).
    fn all_reduce_into<T, S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        check(
            self.target()
                .as_result_api()
                .all_reduce_into(send, recv, op),
            "all_reduce_into",
        )
    }

    /// Start an all-reduce (`MPI_Iallreduce`).
    fn immediate_all_reduce_into<'a, Sc, T, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        const CALL: &str = "immediate_all_reduce_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().as_result_api().immediate_all_reduce_into(
            scoped(&scope, CALL),
            send,
            recv,
            op,
        );
        Request::new(check(r, CALL), Some(data))
    }

    /// Start an all-gather (`MPI_Iallgather`).
    fn immediate_all_gather_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "immediate_all_gather_into";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().as_result_api().immediate_all_gather_into(
            scoped(&scope, CALL),
            sending_in_place(send, CALL, &mut staging),
            receiving_in_place(recv, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start an all-gather with per-rank block sizes (`MPI_Iallgatherv`).
    fn immediate_all_gather_varcount_into<'a, 'b: 'a, Sc, T, S>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut PartitionMut<'b, T>,
    ) -> Request<'a, PartitionMut<'b, T>, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
    {
        const CALL: &str = "immediate_all_gather_varcount_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self
            .target()
            .as_result_api()
            .immediate_all_gather_varcount_into(scoped(&scope, CALL), send, &mut recv.0);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start an all-to-all (`MPI_Ialltoall`).
    fn immediate_all_to_all_into<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "immediate_all_to_all_into";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().as_result_api().immediate_all_to_all_into(
            scoped(&scope, CALL),
            sending_in_place(send, CALL, &mut staging),
            receiving_in_place(recv, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start an all-to-all with per-pair block sizes (`MPI_Ialltoallv`).
    fn immediate_all_to_all_varcount_into<'a, 'b: 'a, 'c: 'a, Sc, T>(
        &self,
        scope: Sc,
        send: &'a Partition<'b, T>,
        recv: &'a mut PartitionMut<'c, T>,
    ) -> Request<'a, PartitionMut<'c, T>, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
    {
        const CALL: &str = "immediate_all_to_all_varcount_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self
            .target()
            .as_result_api()
            .immediate_all_to_all_varcount_into(scoped(&scope, CALL), &send.0, &mut recv.0);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start an inclusive prefix reduction (`MPI_Iscan`).
    fn immediate_scan_into<'a, Sc, T, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        const CALL: &str = "immediate_scan_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r =
            self.target()
                .as_result_api()
                .immediate_scan_into(scoped(&scope, CALL), send, recv, op);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start an exclusive prefix reduction (`MPI_Iexscan`).
    fn immediate_exclusive_scan_into<'a, Sc, T, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        const CALL: &str = "immediate_exclusive_scan_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().as_result_api().immediate_exclusive_scan_into(
            scoped(&scope, CALL),
            send,
            recv,
            op,
        );
        Request::new(check(r, CALL), Some(data))
    }

    /// Start a reduce-scatter with equal blocks
    /// (`MPI_Ireduce_scatter_block`).
    fn immediate_reduce_scatter_block_into<'a, Sc, T, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        const CALL: &str = "immediate_reduce_scatter_block_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self
            .target()
            .as_result_api()
            .immediate_reduce_scatter_block_into(scoped(&scope, CALL), send, recv, op);
        Request::new(check(r, CALL), Some(data))
    }

    /// Inclusive prefix reduction (`MPI_Scan`).
    fn scan_into<T, S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        check(
            self.target().as_result_api().scan_into(send, recv, op),
            "scan_into",
        )
    }

    /// Reduce over all members, member r keeping block r
    /// (`MPI_Reduce_scatter_block`).
    fn reduce_scatter_block_into<T, S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        check(
            self.target()
                .as_result_api()
                .reduce_scatter_block_into(send, recv, op),
            "reduce_scatter_block_into",
        )
    }

    /// Exclusive prefix reduction (`MPI_Exscan`).
    fn exclusive_scan_into<T, S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        check(
            self.target()
                .as_result_api()
                .exclusive_scan_into(send, recv, op),
            "exclusive_scan_into",
        )
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

/// Rooted collectives, called on the root process (rsmpi's `Root`).
pub trait Root {
    /// The root this face wraps.
    #[doc(hidden)]
    fn target(&self) -> mpi_on_portals::Process<'_>;

    /// Copy the root's `buf` to every member (`MPI_Bcast`).
    fn broadcast_into<B>(&self, buf: &mut B)
    where
        B: BufferMut + ?Sized,
    {
        const CALL: &str = "broadcast_into";
        receiving(buf, CALL, |b| self.target().broadcast_into(b))
    }

    /// Start a broadcast (`MPI_Ibcast`).
    fn immediate_broadcast_into<'a, Sc, B>(&self, scope: Sc, buf: &'a mut B) -> Request<'a, B, Sc>
    where
        Sc: Scope<'a>,
        B: BufferMut + ?Sized,
    {
        const CALL: &str = "immediate_broadcast_into";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(&mut *buf);
        let r = self.target().immediate_broadcast_into(
            scoped(&scope, CALL),
            receiving_in_place(buf, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start a gather (`MPI_Igather`), at a non-root member.
    fn immediate_gather_into<'a, Sc, S>(&self, scope: Sc, send: &'a S) -> Request<'a, S, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
    {
        const CALL: &str = "immediate_gather_into";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(send);
        let r = self.target().immediate_gather_into(
            scoped(&scope, CALL),
            sending_in_place(send, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start a gather (`MPI_Igather`), at the root.
    fn immediate_gather_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "immediate_gather_into_root";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().immediate_gather_into_root(
            scoped(&scope, CALL),
            sending_in_place(send, CALL, &mut staging),
            receiving_in_place(recv, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start a variable gather (`MPI_Igatherv`), at a non-root member.
    fn immediate_gather_varcount_into<'a, Sc, T, S>(
        &self,
        scope: Sc,
        send: &'a S,
    ) -> Request<'a, S, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
    {
        const CALL: &str = "immediate_gather_varcount_into";
        let data = std::ptr::NonNull::from(send);
        let r = self
            .target()
            .immediate_gather_varcount_into(scoped(&scope, CALL), send);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start a variable gather (`MPI_Igatherv`), at the root.
    fn immediate_gather_varcount_into_root<'a, 'b: 'a, Sc, T, S>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut PartitionMut<'b, T>,
    ) -> Request<'a, PartitionMut<'b, T>, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
    {
        const CALL: &str = "immediate_gather_varcount_into_root";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().immediate_gather_varcount_into_root(
            scoped(&scope, CALL),
            send,
            &mut recv.0,
        );
        Request::new(check(r, CALL), Some(data))
    }

    /// Start a scatter (`MPI_Iscatter`), at a non-root member.
    fn immediate_scatter_into<'a, Sc, R>(&self, scope: Sc, recv: &'a mut R) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "immediate_scatter_into";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().immediate_scatter_into(
            scoped(&scope, CALL),
            receiving_in_place(recv, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start a scatter (`MPI_Iscatter`), at the root.
    fn immediate_scatter_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "immediate_scatter_into_root";
        let mut staging = Staging::default();
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self.target().immediate_scatter_into_root(
            scoped(&scope, CALL),
            sending_in_place(send, CALL, &mut staging),
            receiving_in_place(recv, CALL, &mut staging),
        );
        Request::new(staging.started(check(r, CALL)), Some(data))
    }

    /// Start a variable scatter (`MPI_Iscatterv`), at a non-root member.
    fn immediate_scatter_varcount_into<'a, Sc, T, R>(
        &self,
        scope: Sc,
        recv: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        const CALL: &str = "immediate_scatter_varcount_into";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self
            .target()
            .immediate_scatter_varcount_into(scoped(&scope, CALL), recv);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start a variable scatter (`MPI_Iscatterv`), at the root.
    fn immediate_scatter_varcount_into_root<'a, 'b: 'a, Sc, T, R>(
        &self,
        scope: Sc,
        send: &'a Partition<'b, T>,
        recv: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        const CALL: &str = "immediate_scatter_varcount_into_root";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r =
            self.target()
                .immediate_scatter_varcount_into_root(scoped(&scope, CALL), &send.0, recv);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start a reduction (`MPI_Ireduce`), at a non-root member.
    fn immediate_reduce_into<'a, Sc, T, S, O>(
        &self,
        scope: Sc,
        send: &'a S,
        op: O,
    ) -> Request<'a, S, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        O: Operation<T>,
    {
        const CALL: &str = "immediate_reduce_into";
        let data = std::ptr::NonNull::from(send);
        let r = self
            .target()
            .immediate_reduce_into(scoped(&scope, CALL), send, op);
        Request::new(check(r, CALL), Some(data))
    }

    /// Start a reduction (`MPI_Ireduce`), at the root.
    fn immediate_reduce_into_root<'a, Sc, T, S, R, O>(
        &self,
        scope: Sc,
        send: &'a S,
        recv: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        Sc: Scope<'a>,
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        const CALL: &str = "immediate_reduce_into_root";
        let data = std::ptr::NonNull::from(&mut *recv);
        let r = self
            .target()
            .immediate_reduce_into_root(scoped(&scope, CALL), send, recv, op);
        Request::new(check(r, CALL), Some(data))
    }

    /// At the root: reduce everyone's `send` into `recv` (`MPI_Reduce`).
    fn reduce_into_root<T, S, R, O>(&self, send: &S, recv: &mut R, op: O)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        R: ElementsMut<T> + ?Sized,
        O: Operation<T>,
    {
        check(
            self.target().reduce_into_root(send, recv, op),
            "reduce_into_root",
        )
    }

    /// At the other members: contribute `send` to a reduction.
    fn reduce_into<T, S, O>(&self, send: &S, op: O)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
        O: Operation<T>,
    {
        check(self.target().reduce_into(send, op), "reduce_into")
    }

    /// At the root: everyone's `send` in rank order (`MPI_Gather`).
    fn gather_into_root<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "gather_into_root";
        let send = sending(send, CALL);
        receiving(recv, CALL, |r| self.target().gather_into_root(&*send, r))
    }

    /// At the other members of a gather.
    fn gather_into<S>(&self, send: &S)
    where
        S: Buffer + ?Sized,
    {
        const CALL: &str = "gather_into";
        check(self.target().gather_into(&*sending(send, CALL)), CALL)
    }

    /// At the root: gather blocks of different sizes (`MPI_Gatherv`).
    fn gather_varcount_into_root<T, S>(&self, send: &S, recv: &mut PartitionMut<'_, T>)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
    {
        check(
            self.target().gather_varcount_into_root(send, &mut recv.0),
            "gather_varcount_into_root",
        )
    }

    /// At the other members of a variable gather.
    fn gather_varcount_into<T, S>(&self, send: &S)
    where
        T: mpi_on_portals::Equivalence,
        S: Elements<T> + ?Sized,
    {
        check(
            self.target().gather_varcount_into(send),
            "gather_varcount_into",
        )
    }

    /// At the root: block r of `send` to member r (`MPI_Scatter`).
    fn scatter_into_root<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "scatter_into_root";
        let send = sending(send, CALL);
        receiving(recv, CALL, |r| self.target().scatter_into_root(&*send, r))
    }

    /// At the other members of a scatter.
    fn scatter_into<R>(&self, recv: &mut R)
    where
        R: BufferMut + ?Sized,
    {
        const CALL: &str = "scatter_into";
        receiving(recv, CALL, |r| self.target().scatter_into(r))
    }

    /// At the root: scatter blocks of different sizes (`MPI_Scatterv`).
    fn scatter_varcount_into_root<T, R>(&self, send: &Partition<'_, T>, recv: &mut R)
    where
        T: mpi_on_portals::Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        check(
            self.target().scatter_varcount_into_root(&send.0, recv),
            "scatter_varcount_into_root",
        )
    }

    /// At the other members of a variable scatter.
    fn scatter_varcount_into<T, R>(&self, recv: &mut R)
    where
        T: mpi_on_portals::Equivalence,
        R: ElementsMut<T> + ?Sized,
    {
        check(
            self.target().scatter_varcount_into(recv),
            "scatter_varcount_into",
        )
    }
}

impl Root for Process<'_> {
    fn target(&self) -> mpi_on_portals::Process<'_> {
        self.inner
    }
}
