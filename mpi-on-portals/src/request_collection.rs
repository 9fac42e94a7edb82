//! A set of requests addressed by stable indices (rsmpi's
//! `RequestCollection`): `MPI_Waitany`, `MPI_Waitsome`, `MPI_Waitall` and
//! the `MPI_Test*` calls over it, each reporting the index a request was
//! added at, however many have completed before.

use crate::error::Result;
use crate::request::Request;
use crate::status::Status;

/// Requests addressed by the index [`RequestCollection::add`] returned.
/// Dropping it settles those still pending as their scope would.
#[derive(Debug, Default)]
pub struct RequestCollection<'a> {
    slots: Vec<Option<Request<'a>>>,
}

impl<'a> RequestCollection<'a> {
    /// An empty collection with room for `capacity` requests.
    pub fn with_capacity(capacity: usize) -> Self {
        RequestCollection {
            slots: Vec::with_capacity(capacity),
        }
    }

    /// Add a request; its index.
    pub fn add(&mut self, request: Request<'a>) -> usize {
        self.slots.push(Some(request));
        self.slots.len() - 1
    }

    /// How many requests were added.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none was added.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// How many have not been reported complete yet.
    pub fn incomplete(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Wait for one pending request (`MPI_Waitany`): its index and status,
    /// `None` when none is pending.
    pub fn wait_any(&mut self) -> Result<Option<(usize, Status)>> {
        let live: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .collect();
        let Some(dev) = live
            .first()
            .and_then(|&i| self.slots[i].as_ref())
            .map(|r| r.handle().0.clone())
        else {
            return Ok(None);
        };
        let ids: Vec<_> = live
            .iter()
            .filter_map(|&i| self.slots[i].as_ref().map(|r| r.handle().1))
            .collect();
        let (k, outcome) = dev.wait_any(&ids)?;
        let index = live[k];
        if let Some(r) = self.slots[index].take() {
            r.completed_elsewhere();
        }
        outcome.map(|s| Some((index, s)))
    }

    /// Take the request at `index` if it is complete, with its status.
    fn take_if_complete(&mut self, index: usize) -> Result<Option<(usize, Status)>> {
        match &self.slots[index] {
            Some(r) if r.is_complete()? => match self.slots[index].take() {
                Some(r) => r.wait().map(|s| Some((index, s))),
                None => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// Wait until at least one pending request completes, then report
    /// every completed one (`MPI_Waitsome`) into `out` (cleared first;
    /// left empty when none is pending).
    pub fn wait_some(&mut self, out: &mut Vec<(usize, Status)>) -> Result<()> {
        out.clear();
        if let Some(first) = self.wait_any()? {
            out.push(first);
            self.test_some(out)?;
        }
        Ok(())
    }

    /// Wait for every pending request (`MPI_Waitall`); `out` (cleared
    /// first) gets their indices and statuses in index order. The first
    /// error is returned once every request has completed.
    pub fn wait_all(&mut self, out: &mut Vec<(usize, Status)>) -> Result<()> {
        out.clear();
        let mut first_err = None;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(r) = slot.take() {
                match r.wait() {
                    Ok(s) => out.push((i, s)),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One completed request, if any (`MPI_Testany`), without blocking.
    pub fn test_any(&mut self) -> Result<Option<(usize, Status)>> {
        for i in 0..self.slots.len() {
            if let Some(done) = self.take_if_complete(i)? {
                return Ok(Some(done));
            }
        }
        Ok(None)
    }

    /// Every completed request (`MPI_Testsome`), appended to `out`, without
    /// blocking.
    pub fn test_some(&mut self, out: &mut Vec<(usize, Status)>) -> Result<()> {
        for i in 0..self.slots.len() {
            if let Some(done) = self.take_if_complete(i)? {
                out.push(done);
            }
        }
        Ok(())
    }

    /// If every pending request is complete, report them all into `out`
    /// (cleared first) and return true (`MPI_Testall`); otherwise leave
    /// them pending and return false.
    pub fn test_all(&mut self, out: &mut Vec<(usize, Status)>) -> Result<bool> {
        for r in self.slots.iter().flatten() {
            if !r.is_complete()? {
                return Ok(false);
            }
        }
        self.wait_all(out).map(|()| true)
    }
}
