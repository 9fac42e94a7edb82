//! Communicators, processes and groups (rsmpi's `mpi::topology`).

use mpi_on_portals::Communicator as _;

use crate::attribute::Attributes;
use crate::fatal::check;

pub use crate::Rank;
pub use mpi_on_portals::{CartesianLayout, Color, CommunicatorRelation, GroupRelation};

use crate::Count;

/// A communicator (`MPI_Comm`): the world, or one made from another.
#[derive(Debug)]
pub struct SimpleCommunicator {
    inner: mpi_on_portals::SimpleCommunicator,
    attributes: Attributes,
}

impl SimpleCommunicator {
    pub(crate) fn new(inner: mpi_on_portals::SimpleCommunicator) -> Self {
        SimpleCommunicator {
            inner,
            attributes: Attributes::default(),
        }
    }

    pub(crate) fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    pub(crate) fn attributes_mut(&mut self) -> &mut Attributes {
        &mut self.attributes
    }

    fn made(inner: Option<mpi_on_portals::SimpleCommunicator>) -> Option<Self> {
        inner.map(Self::new)
    }

    /// The `Result` API's communicator, for calls this face does not offer.
    pub fn as_result_api(&self) -> &mpi_on_portals::SimpleCommunicator {
        &self.inner
    }
}

/// Something that gives access to a communicator (rsmpi's
/// `AsCommunicator`).
pub trait AsCommunicator {
    /// The communicator type.
    type Out: Communicator;
    /// The communicator.
    fn as_communicator(&self) -> &Self::Out;
}

impl AsCommunicator for SimpleCommunicator {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &SimpleCommunicator {
        self
    }
}

/// What every communicator offers (rsmpi's `Communicator`).
pub trait Communicator {
    /// The communicator this face wraps.
    #[doc(hidden)]
    fn target(&self) -> &SimpleCommunicator;

    /// The same, mutable (for its attributes).
    #[doc(hidden)]
    fn target_mut(&mut self) -> &mut SimpleCommunicator;

    /// Number of processes (`MPI_Comm_size`).
    fn size(&self) -> Rank {
        self.target().inner.size()
    }

    /// This process's rank (`MPI_Comm_rank`).
    fn rank(&self) -> Rank {
        self.target().inner.rank()
    }

    /// The process at rank `r`, to send to or receive from; a rank outside
    /// the communicator ends the job at the first call that uses it.
    fn process_at_rank(&self, r: Rank) -> Process<'_> {
        let comm = &self.target().inner;
        Process {
            inner: comm.process_at_rank(r),
            comm,
        }
    }

    /// Any process, for receives and probes (`MPI_ANY_SOURCE`).
    fn any_process(&self) -> AnyProcess<'_> {
        let comm = &self.target().inner;
        AnyProcess {
            inner: comm.any_process(),
            comm,
        }
    }

    /// This process.
    fn this_process(&self) -> Process<'_> {
        self.process_at_rank(self.rank())
    }

    /// End the whole job with exit status `errorcode` (`MPI_Abort`).
    fn abort(&self, errorcode: i32) -> ! {
        self.target().inner.abort(errorcode)
    }

    /// The group of the members (`MPI_Comm_group`).
    fn group(&self) -> UserGroup {
        UserGroup(self.target().inner.group())
    }

    /// Compare with another communicator (`MPI_Comm_compare`).
    fn compare<C: Communicator + ?Sized>(&self, other: &C) -> CommunicatorRelation
    where
        Self: Sized,
    {
        self.target().inner.compare(&other.target().inner)
    }

    /// A new communicator with the same members (`MPI_Comm_dup`);
    /// collective.
    fn duplicate(&self) -> SimpleCommunicator {
        let mut dup = SimpleCommunicator::new(check(
            self.target().inner.duplicate(),
            "Communicator::duplicate",
        ));
        dup.attributes = self.target().attributes.duplicate();
        dup
    }

    /// Split by color (`MPI_Comm_split`, key 0); collective. `None` for
    /// [`Color::undefined`].
    fn split_by_color(&self, color: Color) -> Option<SimpleCommunicator> {
        SimpleCommunicator::made(check(
            self.target().inner.split_by_color(color),
            "Communicator::split_by_color",
        ))
    }

    /// Split by color, ordering each part by `key` (`MPI_Comm_split`).
    fn split_by_color_with_key(&self, color: Color, key: Rank) -> Option<SimpleCommunicator> {
        SimpleCommunicator::made(check(
            self.target().inner.split_by_color_with_key(color, key),
            "Communicator::split_by_color_with_key",
        ))
    }

    /// The communicator of `group`'s members (`MPI_Comm_create`): every
    /// member of this communicator calls it with the same group; those not
    /// in it get `None`.
    fn split_by_subgroup_collective<G: Group + ?Sized>(
        &self,
        group: &G,
    ) -> Option<SimpleCommunicator>
    where
        Self: Sized,
    {
        SimpleCommunicator::made(check(
            self.target().inner.split_by_subgroup(group.as_result_api()),
            "Communicator::split_by_subgroup_collective",
        ))
    }

    /// The communicator of `group`'s members, made by them alone
    /// (`MPI_Comm_create_group`, tag 0); others get `None`.
    fn split_by_subgroup<G: Group + ?Sized>(&self, group: &G) -> Option<SimpleCommunicator>
    where
        Self: Sized,
    {
        self.split_by_subgroup_with_tag(group, 0)
    }

    /// [`Communicator::split_by_subgroup`] with a tag that keeps concurrent
    /// calls apart.
    fn split_by_subgroup_with_tag<G: Group + ?Sized>(
        &self,
        group: &G,
        tag: crate::Tag,
    ) -> Option<SimpleCommunicator>
    where
        Self: Sized,
    {
        SimpleCommunicator::made(check(
            self.target()
                .inner
                .split_by_subgroup_with_tag(group.as_result_api(), tag),
            "Communicator::split_by_subgroup",
        ))
    }

    /// The members on this host, ordered by `key` then rank
    /// (`MPI_Comm_split_type`, `MPI_COMM_TYPE_SHARED`); collective.
    fn split_shared(&self, key: i32) -> SimpleCommunicator {
        SimpleCommunicator::new(check(
            self.target().inner.split_shared(key),
            "Communicator::split_shared",
        ))
    }

    /// Lay the first `dims`-product members out on a grid
    /// (`MPI_Cart_create`); collective. The others get `None`.
    fn create_cartesian_communicator(
        &self,
        dims: &[Count],
        periods: &[bool],
        reorder: bool,
    ) -> Option<CartesianCommunicator> {
        check(
            self.target()
                .inner
                .create_cartesian_communicator(dims, periods, reorder),
            "Communicator::create_cartesian_communicator",
        )
        .map(CartesianCommunicator::new)
    }

    /// This process's rank in a grid of `dims` (`MPI_Cart_map`), `None`
    /// if the grid has no room for it.
    fn cartesian_map(&self, dims: &[Count], periods: &[bool]) -> Option<Rank> {
        check(
            self.target().inner.cartesian_map(dims, periods),
            "Communicator::cartesian_map",
        )
    }

    /// `inbuf`'s packed form (`MPI_Pack`).
    fn pack<B: crate::datatype::Buffer + ?Sized>(&self, inbuf: &B) -> Vec<u8>
    where
        Self: Sized,
    {
        crate::datatype::sending(inbuf, "Communicator::pack").into_owned()
    }

    /// Pack `inbuf` into `outbuf` at byte `position` (`MPI_Pack`); the
    /// position after it.
    fn pack_into<B: crate::datatype::Buffer + ?Sized>(
        &self,
        inbuf: &B,
        outbuf: &mut [u8],
        position: Count,
    ) -> Count
    where
        Self: Sized,
    {
        const CALL: &str = "Communicator::pack_into";
        let end = check(
            self.target().inner.pack_into(
                &*crate::datatype::sending(inbuf, CALL),
                outbuf,
                position_of(position, CALL),
            ),
            CALL,
        );
        count_of(end, CALL)
    }

    /// Fill `outbuf` from the packed bytes at `position` (`MPI_Unpack`);
    /// the position after them.
    ///
    /// # Safety
    /// As in rsmpi, where the bytes must hold valid values of the buffer's
    /// type. Here the values are validated before they are written (a
    /// `bool` that is not 0 or 1 ends the job), so this is never unsafe in
    /// fact.
    unsafe fn unpack_into<B: crate::datatype::BufferMut + ?Sized>(
        &self,
        inbuf: &[u8],
        outbuf: &mut B,
        position: Count,
    ) -> Count
    where
        Self: Sized,
    {
        const CALL: &str = "Communicator::unpack_into";
        let position = position_of(position, CALL);
        let end = crate::datatype::receiving(outbuf, CALL, |b| {
            self.target().inner.unpack_into(inbuf, b, position)
        });
        count_of(end, CALL)
    }

    /// The communicator's name (`MPI_Comm_get_name`): `MPI_COMM_WORLD` for
    /// the world, empty for a new one until named.
    fn get_name(&self) -> String {
        self.target().inner.get_name()
    }

    /// Name the communicator (`MPI_Comm_set_name`), for this process only.
    fn set_name(&self, name: &str) {
        self.target().inner.set_name(name)
    }
}

/// A byte position from rsmpi's `Count`, or the end of the job.
fn position_of(position: Count, call: &str) -> usize {
    match usize::try_from(position) {
        Ok(p) => p,
        Err(_) => crate::fatal::fatal(call, &format!("negative position {position}")),
    }
}

/// A byte position as rsmpi's `Count`, or the end of the job.
fn count_of(position: usize, call: &str) -> Count {
    match Count::try_from(position) {
        Ok(c) => c,
        Err(_) => crate::fatal::fatal(call, &format!("position {position} exceeds a Count")),
    }
}

impl Communicator for SimpleCommunicator {
    fn target(&self) -> &SimpleCommunicator {
        self
    }
    fn target_mut(&mut self) -> &mut SimpleCommunicator {
        self
    }
}

/// A communicator whose members form a grid (rsmpi's
/// `CartesianCommunicator`), row-major, never reordered.
#[derive(Debug)]
pub struct CartesianCommunicator {
    comm: SimpleCommunicator,
    grid: mpi_on_portals::CartesianCommunicator,
}

impl CartesianCommunicator {
    fn new(grid: mpi_on_portals::CartesianCommunicator) -> Self {
        CartesianCommunicator {
            comm: SimpleCommunicator::new(grid.as_simple().clone()),
            grid,
        }
    }

    /// Number of dimensions (`MPI_Cartdim_get`).
    pub fn num_dimensions(&self) -> Count {
        Count::try_from(self.grid.num_dimensions()).unwrap_or(Count::MAX)
    }

    /// Extents, periods and this process's coordinates (`MPI_Cart_get`).
    pub fn get_layout(&self) -> CartesianLayout {
        self.grid.get_layout()
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`).
    pub fn rank_to_coordinates(&self, rank: Rank) -> Vec<Count> {
        check(
            self.grid.rank_to_coordinates(rank),
            "CartesianCommunicator::rank_to_coordinates",
        )
    }

    /// The rank at `coords` (`MPI_Cart_rank`).
    pub fn coordinates_to_rank(&self, coords: &[Count]) -> Rank {
        check(
            self.grid.coordinates_to_rank(coords),
            "CartesianCommunicator::coordinates_to_rank",
        )
    }

    /// (source, destination) `disp` steps along `dimension`
    /// (`MPI_Cart_shift`); `None` off a non-periodic edge.
    pub fn shift(&self, dimension: Count, disp: Count) -> (Option<Rank>, Option<Rank>) {
        const CALL: &str = "CartesianCommunicator::shift";
        let dimension = match usize::try_from(dimension) {
            Ok(d) => d,
            Err(_) => crate::fatal::fatal(CALL, &format!("negative dimension {dimension}")),
        };
        check(self.grid.shift(dimension, disp), CALL)
    }

    /// This process's sub-grid keeping the dimensions marked in `retain`
    /// (`MPI_Cart_sub`); collective.
    pub fn subgroup(&self, retain: &[bool]) -> CartesianCommunicator {
        CartesianCommunicator::new(check(
            self.grid.subgroup(retain),
            "CartesianCommunicator::subgroup",
        ))
    }
}

impl Communicator for CartesianCommunicator {
    fn target(&self) -> &SimpleCommunicator {
        &self.comm
    }
    fn target_mut(&mut self) -> &mut SimpleCommunicator {
        &mut self.comm
    }
}

impl AsCommunicator for CartesianCommunicator {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &SimpleCommunicator {
        &self.comm
    }
}

/// A process of a communicator (rsmpi's `Process`).
#[derive(Clone, Copy, Debug)]
pub struct Process<'a> {
    pub(crate) inner: mpi_on_portals::Process<'a>,
    pub(crate) comm: &'a mpi_on_portals::SimpleCommunicator,
}

impl Process<'_> {
    /// Its rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.inner.rank()
    }

    /// Whether it is this process.
    pub fn is_self(&self) -> bool {
        self.inner.is_self()
    }
}

/// Any process of a communicator (`MPI_ANY_SOURCE`).
#[derive(Clone, Copy, Debug)]
pub struct AnyProcess<'a> {
    pub(crate) inner: mpi_on_portals::AnyProcess<'a>,
    pub(crate) comm: &'a mpi_on_portals::SimpleCommunicator,
}

/// A group made by this library (rsmpi's `UserGroup`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserGroup(mpi_on_portals::Group);

/// A predefined group (rsmpi's `SystemGroup`): only the empty group here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemGroup(mpi_on_portals::Group);

impl SystemGroup {
    /// The empty group (`MPI_GROUP_EMPTY`).
    pub fn empty() -> SystemGroup {
        SystemGroup(mpi_on_portals::Group::empty())
    }
}

/// What every group offers (rsmpi's `Group`).
pub trait Group {
    /// The group this face wraps.
    #[doc(hidden)]
    fn as_result_api(&self) -> &mpi_on_portals::Group;

    /// Number of members (`MPI_Group_size`).
    fn size(&self) -> Rank {
        self.as_result_api().size()
    }

    /// This process's rank in the group, if a member (`MPI_Group_rank`).
    fn rank(&self) -> Option<Rank> {
        self.as_result_api().rank()
    }

    /// The members of both, `self`'s first (`MPI_Group_union`).
    fn union<G: Group + ?Sized>(&self, other: &G) -> UserGroup {
        UserGroup(self.as_result_api().union(other.as_result_api()))
    }

    /// The members of `self` also in `other` (`MPI_Group_intersection`).
    fn intersection<G: Group + ?Sized>(&self, other: &G) -> UserGroup {
        UserGroup(self.as_result_api().intersection(other.as_result_api()))
    }

    /// The members of `self` not in `other` (`MPI_Group_difference`).
    fn difference<G: Group + ?Sized>(&self, other: &G) -> UserGroup {
        UserGroup(self.as_result_api().difference(other.as_result_api()))
    }

    /// The members at `ranks`, in that order (`MPI_Group_incl`).
    fn include(&self, ranks: &[Rank]) -> UserGroup {
        UserGroup(check(self.as_result_api().include(ranks), "Group::include"))
    }

    /// The members except those at `ranks` (`MPI_Group_excl`).
    fn exclude(&self, ranks: &[Rank]) -> UserGroup {
        UserGroup(check(self.as_result_api().exclude(ranks), "Group::exclude"))
    }

    /// The rank in `other` of the member at `rank` here
    /// (`MPI_Group_translate_ranks`).
    fn translate_rank<G: Group + ?Sized>(&self, rank: Rank, other: &G) -> Option<Rank> {
        self.translate_ranks(&[rank], other).pop().flatten()
    }

    /// [`Group::translate_rank`] for several ranks.
    fn translate_ranks<G: Group + ?Sized>(&self, ranks: &[Rank], other: &G) -> Vec<Option<Rank>> {
        check(
            self.as_result_api()
                .translate_ranks(ranks, other.as_result_api()),
            "Group::translate_ranks",
        )
    }

    /// Compare two groups (`MPI_Group_compare`).
    fn compare<G: Group + ?Sized>(&self, other: &G) -> GroupRelation {
        self.as_result_api().compare(other.as_result_api())
    }
}

impl Group for UserGroup {
    fn as_result_api(&self) -> &mpi_on_portals::Group {
        &self.0
    }
}

impl Group for SystemGroup {
    fn as_result_api(&self) -> &mpi_on_portals::Group {
        &self.0
    }
}
