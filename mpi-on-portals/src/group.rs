//! Process groups (`MPI_Group`): ordered sets of processes.

use crate::comm::Rank;
use crate::error::{MpiError, Result};

/// `me` of a group made without a process (the empty group): no world
/// rank is this large (see [`crate::MAX_RANK`]).
const NOBODY: u32 = u32::MAX;

/// An ordered set of processes of the job (`MPI_Group`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// World rank of each member, in group order.
    pub(crate) world: Vec<u32>,
    /// World rank of this process.
    pub(crate) me: u32,
}

/// How two groups relate (`MPI_Group_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRelation {
    /// Same members in the same order (`MPI_IDENT`).
    Identical,
    /// Same members, different order (`MPI_SIMILAR`).
    Similar,
    /// Different members (`MPI_UNEQUAL`).
    Unequal,
}

impl Group {
    /// Number of members.
    pub fn size(&self) -> Rank {
        self.world.len() as Rank
    }

    /// This process's rank in the group, if it is a member.
    pub fn rank(&self) -> Option<Rank> {
        self.world
            .iter()
            .position(|&w| w == self.me)
            .map(|i| i as Rank)
    }

    fn world_of(&self, r: Rank) -> Result<u32> {
        usize::try_from(r)
            .ok()
            .and_then(|i| self.world.get(i).copied())
            .ok_or(MpiError::InvalidRank {
                rank: r,
                size: self.size(),
            })
    }

    /// The ranks in `other` of the processes at `ranks` in this group
    /// (`MPI_Group_translate_ranks`); `None` where a process is not in
    /// `other`.
    pub fn translate_ranks(&self, ranks: &[Rank], other: &Group) -> Result<Vec<Option<Rank>>> {
        ranks
            .iter()
            .map(|&r| {
                let w = self.world_of(r)?;
                Ok(other.world.iter().position(|&x| x == w).map(|i| i as Rank))
            })
            .collect()
    }

    /// The members at `ranks`, in that order (`MPI_Group_incl`).
    pub fn include(&self, ranks: &[Rank]) -> Result<Group> {
        let mut world = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let w = self.world_of(r)?;
            if world.contains(&w) {
                return Err(MpiError::InvalidRank {
                    rank: r,
                    size: self.size(),
                });
            }
            world.push(w);
        }
        Ok(Group { world, me: self.me })
    }

    /// Every member except those at `ranks`, in group order
    /// (`MPI_Group_excl`).
    pub fn exclude(&self, ranks: &[Rank]) -> Result<Group> {
        let mut drop = Vec::with_capacity(ranks.len());
        for &r in ranks {
            drop.push(self.world_of(r)?);
        }
        Ok(Group {
            world: self
                .world
                .iter()
                .copied()
                .filter(|w| !drop.contains(w))
                .collect(),
            me: self.me,
        })
    }

    /// The empty group (`MPI_GROUP_EMPTY`).
    pub fn empty() -> Group {
        Group {
            world: Vec::new(),
            me: NOBODY,
        }
    }

    /// This process as seen from either group (an empty group knows no
    /// process).
    fn me_with(&self, other: &Group) -> u32 {
        if self.me == NOBODY {
            other.me
        } else {
            self.me
        }
    }

    /// The members of `self`, then those of `other` not in `self`
    /// (`MPI_Group_union`).
    pub fn union(&self, other: &Group) -> Group {
        let mut world = self.world.clone();
        world.extend(other.world.iter().filter(|w| !self.world.contains(w)));
        Group {
            world,
            me: self.me_with(other),
        }
    }

    /// The members of `self` that are also in `other`, in `self`'s order
    /// (`MPI_Group_intersection`).
    pub fn intersection(&self, other: &Group) -> Group {
        Group {
            world: self
                .world
                .iter()
                .copied()
                .filter(|w| other.world.contains(w))
                .collect(),
            me: self.me_with(other),
        }
    }

    /// The members of `self` that are not in `other`, in `self`'s order
    /// (`MPI_Group_difference`).
    pub fn difference(&self, other: &Group) -> Group {
        Group {
            world: self
                .world
                .iter()
                .copied()
                .filter(|w| !other.world.contains(w))
                .collect(),
            me: self.me_with(other),
        }
    }

    /// Compare with another group (`MPI_Group_compare`).
    pub fn compare(&self, other: &Group) -> GroupRelation {
        if self.world == other.world {
            return GroupRelation::Identical;
        }
        let (mut a, mut b) = (self.world.clone(), other.world.clone());
        a.sort_unstable();
        b.sort_unstable();
        if a == b {
            GroupRelation::Similar
        } else {
            GroupRelation::Unequal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(world: &[u32]) -> Group {
        Group {
            world: world.to_vec(),
            me: 2,
        }
    }

    #[test]
    fn include_exclude_translate_compare() {
        let all = g(&[0, 1, 2, 3, 4]);
        assert_eq!(all.rank(), Some(2));
        let odd = all.include(&[3, 1]).unwrap();
        assert_eq!(odd.world, vec![3, 1]);
        assert_eq!(odd.rank(), None);
        let rest = all.exclude(&[1, 3]).unwrap();
        assert_eq!(rest.world, vec![0, 2, 4]);
        assert_eq!(
            all.translate_ranks(&[0, 1, 3], &odd).unwrap(),
            vec![None, Some(1), Some(0)]
        );
        assert_eq!(odd.compare(&g(&[3, 1])), GroupRelation::Identical);
        assert_eq!(odd.compare(&g(&[1, 3])), GroupRelation::Similar);
        assert_eq!(odd.compare(&rest), GroupRelation::Unequal);
        assert!(all.include(&[7]).is_err());
        assert!(all.include(&[1, 1]).is_err());
        assert!(all.translate_ranks(&[-1], &odd).is_err());
    }

    #[test]
    fn union_intersection_difference_follow_mpi_order() {
        let all = g(&[0, 1, 2, 3, 4]);
        let a = g(&[3, 1, 2]);
        let b = g(&[2, 4, 3]);
        assert_eq!(a.union(&b).world, vec![3, 1, 2, 4]);
        assert_eq!(a.intersection(&b).world, vec![3, 2]);
        assert_eq!(a.difference(&b).world, vec![1]);
        let empty = Group::empty();
        assert_eq!(
            all.difference(&all).compare(&empty),
            GroupRelation::Identical
        );
        assert_eq!(empty.union(&a).world, a.world);
        assert_eq!(empty.union(&a).rank(), Some(2));
        assert_eq!(empty.rank(), None);
        assert_eq!(all.intersection(&empty).size(), 0);
    }
}
