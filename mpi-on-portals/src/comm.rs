//! Communicators and the processes in them.

use std::sync::{Arc, Mutex};

use crate::collective::{CommunicatorCollectives, SystemOperation};
use crate::datatype::{Buffer, BufferMut};
use crate::device::{Device, CTX_WORDS};
use crate::error::{MpiError, Result};
use crate::group::{Group, GroupRelation};

/// A rank in a communicator (`int` in MPI, `i32` in rsmpi).
pub type Rank = i32;
/// A message tag.
pub type Tag = i32;

/// Wildcard tag for receives and probes (`MPI_ANY_TAG`).
pub const ANY_TAG: Tag = -1;

/// The data every communicator carries: its context id and the world ranks
/// of its members. Public only so that the traits can name it; it cannot be
/// constructed or inspected outside this crate.
pub struct CommData {
    pub(crate) dev: Arc<Device>,
    /// Context id of point-to-point traffic.
    pub(crate) ctx: u16,
    /// Context id of collective traffic (`ctx + 1`): separate, so that a
    /// collective message can never match a point-to-point receive (seed
    /// 002's separate collective channel).
    pub(crate) coll_ctx: u16,
    /// World rank of each member, by communicator rank.
    pub(crate) ranks: Vec<u32>,
    /// This process's rank in the communicator.
    pub(crate) me: u32,
    /// Its name (`MPI_Comm_set_name`), local to this process.
    pub(crate) name: Mutex<String>,
}

impl std::fmt::Debug for CommData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommData")
            .field("ctx", &self.ctx)
            .field("size", &self.ranks.len())
            .field("me", &self.me)
            .finish()
    }
}

impl Drop for CommData {
    fn drop(&mut self) {
        self.dev.release_context_pair(self.ctx);
    }
}

impl CommData {
    pub(crate) fn world_rank(&self, r: Rank) -> Result<u32> {
        usize::try_from(r)
            .ok()
            .and_then(|i| self.ranks.get(i).copied())
            .ok_or(MpiError::InvalidRank {
                rank: r,
                size: self.ranks.len() as Rank,
            })
    }
}

/// What every communicator offers (rsmpi's `Communicator`).
pub trait Communicator {
    #[doc(hidden)]
    fn data(&self) -> &CommData;

    /// Number of processes (`MPI_Comm_size`).
    fn size(&self) -> Rank {
        self.data().ranks.len() as Rank
    }

    /// This process's rank (`MPI_Comm_rank`).
    fn rank(&self) -> Rank {
        self.data().me as Rank
    }

    /// The process at rank `r`, to send to or receive from. Sending to or
    /// receiving from a rank outside the communicator fails with
    /// [`MpiError::InvalidRank`].
    fn process_at_rank(&self, r: Rank) -> Process<'_> {
        Process {
            comm: self.data(),
            rank: r,
        }
    }

    /// End the whole job with exit status `errorcode` (`MPI_Abort`, rsmpi's
    /// `Communicator::abort`): every rank of the job is terminated, not
    /// only the members of this communicator, and the launcher (`ptlrun`,
    /// hydra through PMI, `mpirun` and `srun` through PMIx) exits with
    /// that status (hydra over PMI-2 with 255). See
    /// [`portals_runtime::Job::abort`].
    fn abort(&self, errorcode: i32) -> ! {
        let d = self.data();
        d.dev.job().abort(
            errorcode,
            &format!(
                "MPI abort called by rank {} of a communicator of {}",
                d.me,
                d.ranks.len()
            ),
        )
    }

    /// Any process, for receives and probes (`MPI_ANY_SOURCE`).
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess { comm: self.data() }
    }

    /// This process.
    fn this_process(&self) -> Process<'_> {
        self.process_at_rank(self.rank())
    }

    /// The group of the members (`MPI_Comm_group`).
    fn group(&self) -> Group {
        let d = self.data();
        Group {
            world: d.ranks.clone(),
            me: d.ranks[d.me as usize],
        }
    }

    /// `inbuf`'s packed form (`MPI_Pack`): its bytes, since every
    /// datatype here is contiguous plain old data.
    fn pack<B: Buffer + ?Sized>(&self, inbuf: &B) -> Vec<u8>
    where
        Self: Sized,
    {
        inbuf.as_bytes().to_vec()
    }

    /// Pack `inbuf` into `outbuf` at byte `position` (`MPI_Pack`); the
    /// position after it. Fails if it does not fit.
    fn pack_into<B: Buffer + ?Sized>(
        &self,
        inbuf: &B,
        outbuf: &mut [u8],
        position: usize,
    ) -> Result<usize>
    where
        Self: Sized,
    {
        crate::pack::pack_into(inbuf, outbuf, position)
    }

    /// Fill `outbuf` from the packed bytes at `position` (`MPI_Unpack`);
    /// the position after them. Fails if too few bytes are left.
    fn unpack_into<B: BufferMut + ?Sized>(
        &self,
        inbuf: &[u8],
        outbuf: &mut B,
        position: usize,
    ) -> Result<usize>
    where
        Self: Sized,
    {
        crate::pack::unpack_into(inbuf, outbuf, position)
    }

    /// The communicator's name (`MPI_Comm_get_name`): `MPI_COMM_WORLD`
    /// for the world, empty for a new communicator until named.
    fn get_name(&self) -> String {
        self.data()
            .name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Name the communicator (`MPI_Comm_set_name`), in this process only;
    /// its clones share the name.
    fn set_name(&self, name: &str) {
        *self.data().name.lock().unwrap_or_else(|p| p.into_inner()) = name.to_owned();
    }

    /// Compare with another communicator (`MPI_Comm_compare`).
    fn compare<C: Communicator + ?Sized>(&self, other: &C) -> CommunicatorRelation
    where
        Self: Sized,
    {
        let (a, b) = (self.data(), other.data());
        if std::ptr::eq(a, b) {
            return CommunicatorRelation::Identical;
        }
        match self.group().compare(&other.group()) {
            GroupRelation::Identical => CommunicatorRelation::Congruent,
            GroupRelation::Similar => CommunicatorRelation::Similar,
            GroupRelation::Unequal => CommunicatorRelation::Unequal,
        }
    }
}

/// A communicator (rsmpi's `SimpleCommunicator`). Cheap to clone.
#[derive(Clone)]
pub struct SimpleCommunicator {
    pub(crate) inner: Arc<CommData>,
}

impl std::fmt::Debug for SimpleCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimpleCommunicator")
            .field("rank", &self.inner.me)
            .field("size", &self.inner.ranks.len())
            .field("context", &self.inner.ctx)
            .finish()
    }
}

impl SimpleCommunicator {
    pub(crate) fn world(dev: Arc<Device>) -> Self {
        let size = dev.job().size();
        let me = dev.job().rank();
        SimpleCommunicator {
            inner: Arc::new(CommData {
                dev,
                ctx: 0,
                coll_ctx: 1,
                ranks: (0..size).collect(),
                me,
                name: Mutex::new("MPI_COMM_WORLD".to_owned()),
            }),
        }
    }
}

/// The color of a process in [`SimpleCommunicator::split_by_color`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Color(Option<i32>);

impl Color {
    /// Join the communicator of the processes with this (non-negative)
    /// color.
    pub fn with_value(c: i32) -> Color {
        Color(Some(c))
    }

    /// Join no communicator (`MPI_UNDEFINED`).
    pub fn undefined() -> Color {
        Color(None)
    }
}

/// How two communicators relate (`MPI_Comm_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommunicatorRelation {
    /// The same communicator (`MPI_IDENT`).
    Identical,
    /// Same members in the same order, another context (`MPI_CONGRUENT`).
    Congruent,
    /// Same members, other order (`MPI_SIMILAR`).
    Similar,
    /// Different members (`MPI_UNEQUAL`).
    Unequal,
}

impl SimpleCommunicator {
    /// Agree with every member on a context pair free everywhere: an
    /// all-reduce (bitwise AND) of the members' free-context maps, then the
    /// lowest free pair. Collective over `self`.
    fn agree_on_context(&self) -> Result<u16> {
        let dev = &self.inner.dev;
        let mine = dev.free_contexts();
        let mut all = [0u64; CTX_WORDS];
        self.all_reduce_into(&mine[..], &mut all[..], SystemOperation::bitwise_and())?;
        dev.take_context_pair(&all)
    }

    fn with_members(&self, ctx: u16, world: Vec<u32>) -> Option<SimpleCommunicator> {
        let me_world = self.inner.ranks[self.inner.me as usize];
        match world.iter().position(|&w| w == me_world) {
            Some(me) => Some(SimpleCommunicator {
                inner: Arc::new(CommData {
                    dev: self.inner.dev.clone(),
                    ctx,
                    coll_ctx: ctx + 1,
                    ranks: world,
                    me: me as u32,
                    name: Mutex::new(String::new()),
                }),
            }),
            None => {
                self.inner.dev.release_context_pair(ctx);
                None
            }
        }
    }

    /// The new communicator of members `world` on the agreed pair `ctx`
    /// (`None` here if this process is not one), once every member has its
    /// non-blocking-collective entries: they are created here, then a
    /// barrier over `self` — a member may start a non-blocking collective
    /// as soon as it returns, and a put that finds no entry is dropped. The
    /// pair is only known after the agreement's all-reduce, so the entries
    /// cannot come before it; one barrier per new communicator is the
    /// price.
    fn new_communicator(&self, ctx: u16, world: Vec<u32>) -> Result<Option<SimpleCommunicator>> {
        let comm = self.with_members(ctx, world);
        let made = match &comm {
            Some(c) => c.inner.dev.nbc_create(ctx, &c.inner.ranks, c.inner.me),
            None => Ok(()),
        };
        // Every member of `self` joins, also after an error here, so that
        // the others are not left waiting.
        self.barrier()?;
        made?;
        Ok(comm)
    }

    /// A new communicator with the same members in the same order and its
    /// own contexts (`MPI_Comm_dup`). Collective.
    pub fn duplicate(&self) -> Result<SimpleCommunicator> {
        let ctx = self.agree_on_context()?;
        self.new_communicator(ctx, self.inner.ranks.clone())?
            .ok_or(MpiError::InvalidBuffer(
                "this process is not a member of its own communicator",
            ))
    }

    /// Split into one communicator per color, ordered by rank here
    /// (`MPI_Comm_split` with key 0). Collective; `None` for
    /// [`Color::undefined`].
    pub fn split_by_color(&self, color: Color) -> Result<Option<SimpleCommunicator>> {
        self.split_by_color_with_key(color, 0)
    }

    /// Split into one communicator per color, members ordered by `key`,
    /// ties by rank here (`MPI_Comm_split`). Collective.
    pub fn split_by_color_with_key(
        &self,
        color: Color,
        key: i32,
    ) -> Result<Option<SimpleCommunicator>> {
        if color.0.is_some_and(|c| c < 0) {
            return Err(MpiError::InvalidBuffer(
                "colors are non-negative (use Color::undefined)",
            ));
        }
        let n = self.inner.ranks.len();
        let mine = [color.0.unwrap_or(-1), key];
        let mut all = vec![0i32; 2 * n];
        self.all_gather_into(&mine[..], &mut all[..])?;
        let ctx = self.agree_on_context()?;
        let Some(c) = color.0 else {
            return self.new_communicator(ctx, Vec::new());
        };
        let mut members: Vec<(i32, usize)> = (0..n)
            .filter(|&r| all[2 * r] == c)
            .map(|r| (all[2 * r + 1], r))
            .collect();
        members.sort_unstable();
        let world = members.iter().map(|&(_, r)| self.inner.ranks[r]).collect();
        self.new_communicator(ctx, world)
    }

    /// A communicator of the members of `group`, in group order
    /// (`MPI_Comm_create`). Collective over this communicator; `None` for
    /// processes outside the group. Every member must pass the same group.
    pub fn split_by_subgroup(&self, group: &Group) -> Result<Option<SimpleCommunicator>> {
        if let Some(w) = group.world.iter().find(|w| !self.inner.ranks.contains(w)) {
            return Err(MpiError::InvalidRank {
                rank: *w as Rank,
                size: self.size(),
            });
        }
        let ctx = self.agree_on_context()?;
        self.new_communicator(ctx, group.world.clone())
    }
}

impl SimpleCommunicator {
    /// The communicator of `group`'s members, made by them alone
    /// (`MPI_Comm_create_group`): only the members call it, each with the
    /// same group and `tag` (distinct tags keep concurrent calls apart; the
    /// tag never meets point-to-point traffic). A process outside `group`
    /// gets `None` at once.
    pub fn split_by_subgroup_with_tag(
        &self,
        group: &Group,
        tag: Tag,
    ) -> Result<Option<SimpleCommunicator>> {
        let tag = u32::try_from(tag).map_err(|_| MpiError::InvalidTag(tag))?;
        let members = group
            .world
            .iter()
            .map(|w| {
                self.inner
                    .ranks
                    .iter()
                    .position(|x| x == w)
                    .ok_or(MpiError::InvalidRank {
                        rank: *w as Rank,
                        size: self.size(),
                    })
            })
            .collect::<Result<Vec<usize>>>()?;
        let me = self.inner.me as usize;
        if !members.contains(&me) {
            return Ok(None);
        }
        // The members agree on a context free at all of them: the first
        // member ANDs everyone's free set and hands the result back, on
        // the parent's collective context under a tag no collective uses.
        use crate::collective::algos::{Coll, Exchange};
        let c = Coll { c: &self.inner };
        let tag = CREATE_GROUP_TAG | tag;
        let mut all = self.inner.dev.free_contexts();
        let (leader, rest) = (members[0], &members[1..]);
        if me == leader {
            let mut theirs = [0u64; CTX_WORDS];
            for &m in rest {
                c.recv(m, tag, &mut theirs)?;
                for (a, t) in all.iter_mut().zip(&theirs) {
                    *a &= t;
                }
            }
            for &m in rest {
                c.send(m, tag, &all)?;
            }
        } else {
            c.send(leader, tag, &all)?;
            c.recv(leader, tag, &mut all)?;
        }
        let ctx = self.inner.dev.take_context_pair(&all)?;
        let comm = self
            .with_members(ctx, group.world.clone())
            .ok_or(MpiError::InvalidBuffer(
                "this process is not a member of its own group",
            ))?;
        comm.inner
            .dev
            .nbc_create(ctx, &comm.inner.ranks, comm.inner.me)?;
        // Nobody uses the new communicator before every member has set it
        // up. On point-to-point messages: a put to a member's collective
        // slots before it made them would be dropped (`device/slots.rs`).
        crate::collective::barrier_point_to_point(comm.data())?;
        Ok(Some(comm))
    }
}

impl SimpleCommunicator {
    /// The members on this process's host, ordered by `key` then rank
    /// (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`): the processes
    /// a shared window ([`crate::CommunicatorWindows`]) can span.
    /// Collective. Hosts are told apart by
    /// [`portals_runtime::host::host_id`] (`PTL_HOST_ID` overrides it).
    pub fn split_shared(&self, key: i32) -> Result<SimpleCommunicator> {
        let host = crate::window::host_hash(&portals_runtime::host::host_id());
        let mut all = vec![0u64; self.inner.ranks.len()];
        self.all_gather_into(&host, &mut all[..])?;
        // A host's color is the lowest rank on it: the same at every
        // member of the host, different between hosts.
        let color = all.iter().position(|&h| h == host).unwrap_or(0);
        let color = i32::try_from(color).map_err(|_| MpiError::InvalidRank {
            rank: Rank::MAX,
            size: self.size(),
        })?;
        self.split_by_color_with_key(Color::with_value(color), key)?
            .ok_or(MpiError::InvalidBuffer(
                "this process is not on its own host",
            ))
    }
}

/// The tag bit of `split_by_subgroup_with_tag`'s messages on the parent's
/// collective context: collectives use small tags.
const CREATE_GROUP_TAG: u32 = 0x8000_0000;

impl Communicator for SimpleCommunicator {
    fn data(&self) -> &CommData {
        &self.inner
    }
}

/// A process of a communicator (rsmpi's `Process`): the destination of
/// sends and the source of receives.
#[derive(Clone, Copy)]
pub struct Process<'a> {
    pub(crate) comm: &'a CommData,
    pub(crate) rank: Rank,
}

impl std::fmt::Debug for Process<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Process({})", self.rank)
    }
}

impl Process<'_> {
    /// Whether it is this process.
    pub fn is_self(&self) -> bool {
        self.rank == self.comm.me as Rank
    }

    /// Its rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
}

/// Any process of a communicator (rsmpi's `AnyProcess`).
#[derive(Clone, Copy)]
pub struct AnyProcess<'a> {
    pub(crate) comm: &'a CommData,
}

impl std::fmt::Debug for AnyProcess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnyProcess")
    }
}
