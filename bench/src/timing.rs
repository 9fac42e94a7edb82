//! Pieces every benchmark loop shares: the timed loop with warm-up, and
//! receive buffers that are posted again and again inside one request scope.

use std::time::Instant;

use crate::error::Result;

/// Run `body` `warm + iters` times and return the seconds taken by the last
/// `iters` runs (as the C programs do: the clock starts at iteration `warm`).
pub fn timed(warm: usize, iters: usize, mut body: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut t0 = Instant::now();
    for i in 0..warm + iters {
        if i == warm {
            t0 = Instant::now();
        }
        body()?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Iterations of `body` between two looks at the clock while settling.
const SETTLE_CHUNK: usize = 8;

/// Run `body` untimed, in chunks of a few iterations, for about `ms`
/// milliseconds (see [`crate::params::SETTLE_MS`]). After each chunk,
/// `agree` gets this rank's wish to go on (its clock says less than `ms`
/// has passed) and returns the job's decision, which must be the same on
/// every rank (the first rank's, broadcast), so that every rank runs the
/// same iterations. Returns the iterations run.
pub fn settle(
    ms: u64,
    mut body: impl FnMut() -> Result<()>,
    mut agree: impl FnMut(bool) -> Result<bool>,
) -> Result<usize> {
    let until = std::time::Duration::from_millis(ms);
    let t0 = Instant::now();
    let mut n = 0;
    if ms == 0 {
        return Ok(0);
    }
    loop {
        for _ in 0..SETTLE_CHUNK {
            body()?;
        }
        n += SETTLE_CHUNK;
        if !agree(t0.elapsed() < until)? {
            return Ok(n);
        }
    }
}

/// `count` receive buffers of `len` bytes each that can be handed to
/// non-blocking receives again and again within one request scope.
///
/// A scoped non-blocking receive borrows its buffer for the whole scope, so
/// safe code cannot post a second receive into a buffer whose first receive
/// has completed. The C benchmarks re-post into the same buffer constantly
/// (COMB's polling worker, the match-list ping); [`Slots::slot`] does the
/// same, with the caller promising that the slot is free.
pub struct Slots {
    /// Owns the memory; never touched after `ptr` is taken, so the raw
    /// pointer stays the only access path.
    _buf: Vec<u8>,
    ptr: *mut u8,
    count: usize,
    len: usize,
    stride: usize,
}

impl Slots {
    /// `count` zeroed slots of `len` bytes.
    pub fn new(count: usize, len: usize) -> Slots {
        let stride = len.max(1);
        let mut buf = vec![0u8; count.max(1) * stride];
        let ptr = buf.as_mut_ptr();
        Slots {
            _buf: buf,
            ptr,
            count,
            len,
            stride,
        }
    }

    /// Length of each slot in bytes.
    pub fn slot_len(&self) -> usize {
        self.len
    }

    /// A fresh mutable view of slot `j` (panics if `j >= count`, a
    /// programming error).
    ///
    /// # Safety
    /// No operation started on an earlier view of slot `j` may still be
    /// pending (it completed, or was never started), and no earlier view of
    /// slot `j` may be used again.
    #[allow(clippy::mut_from_ref)] // the point of the type; see the contract above
    pub unsafe fn slot(&self, j: usize) -> &mut [u8] {
        assert!(j < self.count, "slot {j} of {}", self.count);
        // SAFETY: j < count, so the range lies inside the owned allocation;
        // the caller guarantees no other live access to this slot.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(j * self.stride), self.len) }
    }

    /// Copy slot `j` out into `dst` (at most `len` bytes).
    ///
    /// # Safety
    /// No operation on slot `j` may be pending.
    pub unsafe fn read(&self, j: usize, dst: &mut [u8]) {
        assert!(j < self.count, "slot {j} of {}", self.count);
        let n = dst.len().min(self.len);
        // SAFETY: in bounds as in `slot`; nothing writes the slot meanwhile
        // (caller's promise), and `dst` cannot overlap memory we own.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.add(j * self.stride), dst.as_mut_ptr(), n)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_runs_whole_chunks_until_the_agreed_decision_says_stop() {
        // The decision, not this rank's clock, ends it: a rank whose own
        // time is up goes on while the first rank says so.
        let (mut runs, mut looks) = (0, 0);
        let n = settle(
            1,
            || {
                runs += 1;
                Ok(())
            },
            |_mine| {
                looks += 1;
                Ok(looks < 3)
            },
        )
        .expect("settles");
        assert_eq!((n, runs, looks), (3 * SETTLE_CHUNK, 3 * SETTLE_CHUNK, 3));
        // A rank's own wish is what it offers: false once its time is up.
        let mut wishes = Vec::new();
        settle(
            5,
            || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                Ok(())
            },
            |mine| {
                wishes.push(mine);
                Ok(mine)
            },
        )
        .expect("settles");
        assert_eq!(wishes.last(), Some(&false));
        assert!(wishes.len() == 1, "8 ms of chunk outlast 5 ms: {wishes:?}");
        // 0: nothing at all.
        let n = settle(0, || panic!("no iteration"), |_| panic!("no look")).expect("0 ms");
        assert_eq!(n, 0);
    }

    #[test]
    fn timed_counts_only_measured_iterations() {
        let mut n = 0;
        let secs = timed(3, 5, || {
            n += 1;
            Ok(())
        })
        .expect("loop");
        assert_eq!(n, 8);
        assert!(secs >= 0.0);
    }

    #[test]
    fn slots_are_disjoint() {
        let s = Slots::new(3, 4);
        // SAFETY: each slot is viewed once and no operation is pending.
        unsafe {
            s.slot(1).copy_from_slice(&[1, 2, 3, 4]);
            s.slot(2).fill(9);
            let mut b = [0u8; 4];
            s.read(1, &mut b);
            assert_eq!(b, [1, 2, 3, 4]);
            s.read(0, &mut b);
            assert_eq!(b, [0; 4]);
        }
        assert_eq!(s.slot_len(), 4);
        let z = Slots::new(0, 0);
        assert_eq!(z.slot_len(), 0);
    }
}
