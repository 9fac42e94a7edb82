//! Recycled buffers for the copies of eager payloads.
//!
//! An eager send copies its payload so that it can complete at once
//! ([`EagerCompletion::OnSend`](super::EagerCompletion::OnSend)), and the
//! copy lives until the peer acknowledges the last fragment. A fresh
//! allocation per message is not cheap at these sizes: a 100 KB copy is
//! above what glibc keeps on its heap once freed, so every message zeroed
//! newly faulted-in pages, copied into them, and returned them to the
//! kernel. A COMB sender spent more than half its samples there (`perf`,
//! stop 46). The pool keeps a bounded number of idle buffers, whose pages
//! stay resident, and whose bytes stay initialized (no zeroing unless a
//! buffer must grow).

use super::types::PayloadSource;

/// Idle buffers kept at most; with the default eager limit (128 KiB) that
/// is 4 MiB per endpoint.
pub(crate) const KEEP: usize = 32;

/// Idle copy buffers.
#[derive(Debug, Default)]
pub(crate) struct CopyPool {
    free: Vec<Vec<u8>>,
    /// Copies served by a recycled buffer.
    pub(crate) reused: u64,
}

impl CopyPool {
    /// A buffer holding bytes `0..len` of `src` (`len` at most what `src`
    /// holds).
    pub(crate) fn copy_of(&mut self, src: &dyn PayloadSource, len: usize) -> Vec<u8> {
        let mut v = match self.free.pop() {
            Some(v) => {
                self.reused += 1;
                v
            }
            None => Vec::new(),
        };
        // Shrinking keeps the allocation; growing zeroes only the growth.
        v.resize(len, 0);
        src.read_at(0, &mut v);
        v
    }

    /// A copy is no longer needed.
    pub(crate) fn put(&mut self, v: Vec<u8>) {
        if self.free.len() < KEEP && v.capacity() > 0 {
            self.free.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pattern(u8, u64);

    impl PayloadSource for Pattern {
        fn len(&self) -> u64 {
            self.1
        }
        fn read_at(&self, offset: u64, dst: &mut [u8]) {
            for (i, b) in dst.iter_mut().enumerate() {
                *b = self.0.wrapping_add((offset + i as u64) as u8);
            }
        }
    }

    #[test]
    fn a_returned_buffer_serves_the_next_copy_whole_and_exact() {
        let mut p = CopyPool::default();
        let a = p.copy_of(&Pattern(1, 1000), 1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(a[999], 1u8.wrapping_add(999u64 as u8));
        let at = a.as_ptr();
        p.put(a);
        // smaller: the same allocation, exactly the bytes asked for
        let b = p.copy_of(&Pattern(9, 10), 10);
        assert_eq!(b.as_ptr(), at);
        assert_eq!(b, (0..10u8).map(|i| 9 + i).collect::<Vec<_>>());
        p.put(b);
        // larger again: every byte is the new payload's
        let c = p.copy_of(&Pattern(3, 2000), 2000);
        assert!(c
            .iter()
            .enumerate()
            .all(|(i, &x)| x == 3u8.wrapping_add(i as u8)));
        assert_eq!(p.reused, 2);
    }

    #[test]
    fn at_most_keep_idle_buffers_are_kept() {
        let mut p = CopyPool::default();
        for _ in 0..KEEP + 5 {
            p.put(vec![0; 16]);
        }
        p.put(Vec::new());
        assert_eq!(p.free.len(), KEEP);
    }
}
