//! Cartesian process topologies (`MPI_Cart_create`, `MPI_Cart_coords`,
//! `MPI_Cart_rank`, `MPI_Cart_shift`, `MPI_Cart_sub`, `MPI_Cart_map`):
//! ranks laid out on a grid in row-major order (the last dimension varies
//! fastest). Ranks are never reordered: the transport does not tell which
//! ranks are close, so the identity mapping is as good as any.

use crate::comm::{Color, CommData, Communicator, Rank, SimpleCommunicator};
use crate::error::{MpiError, Result};

/// The grid of a Cartesian communicator as this process sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CartesianLayout {
    /// Extent of each dimension.
    pub dims: Vec<i32>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
    /// This process's coordinates.
    pub coords: Vec<i32>,
}

/// A communicator whose members form a grid.
#[derive(Clone, Debug)]
pub struct CartesianCommunicator {
    comm: SimpleCommunicator,
    dims: Vec<i32>,
    periods: Vec<bool>,
}

/// Processes a grid of `dims` holds: an error for a negative extent, or
/// when `periods` does not have one entry per dimension.
fn grid_size(dims: &[i32], periods: &[bool]) -> Result<usize> {
    if dims.len() != periods.len() {
        return Err(MpiError::InvalidBuffer(
            "a Cartesian topology needs one period per dimension",
        ));
    }
    dims.iter().try_fold(1usize, |n, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| n.checked_mul(d))
            .ok_or(MpiError::InvalidBuffer(
                "a Cartesian dimension is negative or the grid too large",
            ))
    })
}

impl SimpleCommunicator {
    /// Lay the first `dims`-product members out on a grid
    /// (`MPI_Cart_create`); collective. The others get `None`. `reorder`
    /// is accepted and ignored (see the module docs).
    pub fn create_cartesian_communicator(
        &self,
        dims: &[i32],
        periods: &[bool],
        _reorder: bool,
    ) -> Result<Option<CartesianCommunicator>> {
        let n = grid_size(dims, periods)?;
        if n > self.size() as usize || dims.contains(&0) {
            return Err(MpiError::InvalidBuffer(
                "a Cartesian grid must have between 1 and size processes",
            ));
        }
        let color = if (self.rank() as usize) < n {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        Ok(self
            .split_by_color_with_key(color, self.rank())?
            .map(|comm| CartesianCommunicator {
                comm,
                dims: dims.to_vec(),
                periods: periods.to_vec(),
            }))
    }

    /// This process's rank in a grid of `dims` made from this communicator
    /// (`MPI_Cart_map`): its own rank if the grid has room for it, else
    /// `None`. Local.
    pub fn cartesian_map(&self, dims: &[i32], periods: &[bool]) -> Result<Option<Rank>> {
        let n = grid_size(dims, periods)?;
        Ok(((self.rank() as usize) < n).then_some(self.rank()))
    }
}

impl CartesianCommunicator {
    /// The communicator underneath.
    pub fn as_simple(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Number of dimensions (`MPI_Cartdim_get`).
    pub fn num_dimensions(&self) -> usize {
        self.dims.len()
    }

    /// Extents, periods and this process's coordinates (`MPI_Cart_get`).
    pub fn get_layout(&self) -> CartesianLayout {
        CartesianLayout {
            dims: self.dims.clone(),
            periods: self.periods.clone(),
            coords: self.coords_of(self.comm.rank()),
        }
    }

    fn coords_of(&self, rank: Rank) -> Vec<i32> {
        let mut rest = rank;
        let mut coords = vec![0; self.dims.len()];
        for (c, &d) in coords.iter_mut().zip(&self.dims).rev() {
            *c = rest % d;
            rest /= d;
        }
        coords
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`).
    pub fn rank_to_coordinates(&self, rank: Rank) -> Result<Vec<i32>> {
        if !(0..self.comm.size()).contains(&rank) {
            return Err(MpiError::InvalidRank {
                rank,
                size: self.comm.size(),
            });
        }
        Ok(self.coords_of(rank))
    }

    /// The rank at `coords` (`MPI_Cart_rank`): periodic dimensions wrap,
    /// a coordinate outside a non-periodic one is an error.
    pub fn coordinates_to_rank(&self, coords: &[i32]) -> Result<Rank> {
        self.try_rank(coords)?.ok_or(MpiError::InvalidBuffer(
            "a coordinate lies outside a non-periodic dimension",
        ))
    }

    /// The rank at `coords`, `None` off the edge of a non-periodic
    /// dimension.
    fn try_rank(&self, coords: &[i32]) -> Result<Option<Rank>> {
        if coords.len() != self.dims.len() {
            return Err(MpiError::InvalidBuffer(
                "coordinates need one entry per dimension",
            ));
        }
        let mut rank = 0;
        for ((&c, &d), &p) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let c = if p {
                c.rem_euclid(d)
            } else if (0..d).contains(&c) {
                c
            } else {
                return Ok(None);
            };
            rank = rank * d + c;
        }
        Ok(Some(rank))
    }

    /// The ranks `disp` steps below and above this process along
    /// `dimension` (`MPI_Cart_shift`): (source, destination), `None` off
    /// the edge of a non-periodic dimension.
    pub fn shift(&self, dimension: usize, disp: i32) -> Result<(Option<Rank>, Option<Rank>)> {
        if dimension >= self.dims.len() {
            return Err(MpiError::InvalidBuffer("no such Cartesian dimension"));
        }
        let mut coords = self.coords_of(self.comm.rank());
        let here = coords[dimension];
        coords[dimension] = here.saturating_sub(disp);
        let source = self.try_rank(&coords)?;
        coords[dimension] = here.saturating_add(disp);
        let destination = self.try_rank(&coords)?;
        Ok((source, destination))
    }

    /// The sub-grids keeping the dimensions marked in `retain`
    /// (`MPI_Cart_sub`); collective. This process's sub-grid.
    pub fn subgroup(&self, retain: &[bool]) -> Result<CartesianCommunicator> {
        if retain.len() != self.dims.len() {
            return Err(MpiError::InvalidBuffer(
                "subgroup needs one flag per dimension",
            ));
        }
        let coords = self.coords_of(self.comm.rank());
        // Members with the same coordinates in the dropped dimensions share
        // a sub-grid; ordered by their coordinates in the kept ones.
        let (mut color, mut key) = (0, 0);
        for ((&c, &d), &keep) in coords.iter().zip(&self.dims).zip(retain) {
            if keep {
                key = key * d + c;
            } else {
                color = color * d + c;
            }
        }
        let comm = self
            .comm
            .split_by_color_with_key(Color::with_value(color), key)?
            .ok_or(MpiError::InvalidBuffer(
                "this process is not in its own sub-grid",
            ))?;
        Ok(CartesianCommunicator {
            comm,
            dims: kept(&self.dims, retain),
            periods: kept(&self.periods, retain),
        })
    }
}

/// The entries of `v` whose flag in `retain` is set.
fn kept<T: Copy>(v: &[T], retain: &[bool]) -> Vec<T> {
    v.iter()
        .zip(retain)
        .filter(|(_, &k)| k)
        .map(|(x, _)| *x)
        .collect()
}

impl Communicator for CartesianCommunicator {
    fn data(&self) -> &CommData {
        self.comm.data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_size_checks_extents_and_periods() {
        assert_eq!(grid_size(&[2, 3], &[false, true]).ok(), Some(6));
        assert_eq!(grid_size(&[2, 0], &[false, false]).ok(), Some(0));
        assert!(grid_size(&[2, -1], &[false, false]).is_err());
        assert!(grid_size(&[2], &[false, false]).is_err());
        assert!(grid_size(&[i32::MAX, i32::MAX, i32::MAX], &[false; 3]).is_err());
        assert_eq!(kept(&[4, 5, 6], &[true, false, true]), vec![4, 6]);
    }
}
