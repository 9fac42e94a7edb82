//! Recycled byte buffers, so that steady traffic does not allocate.
//!
//! Two pools of an endpoint use it: out-of-order datagrams waiting for the
//! gap before them (`recv.rs`), and the copies of eager payloads, which let
//! an eager send complete at once
//! ([`EagerCompletion::OnSend`](super::EagerCompletion::OnSend)) and live
//! until the peer acknowledges the last fragment. A fresh allocation per
//! copy is not cheap at these sizes: a 100 KB copy is above what glibc
//! keeps on its heap once freed, so every message zeroed newly faulted-in
//! pages, copied into them, and returned them to the kernel. A COMB sender
//! spent more than half its samples there (`perf`, stop 46). Idle buffers
//! keep their pages resident, and their bytes initialized.

/// Idle copy buffers an endpoint keeps at most; with the default eager
/// limit (128 KiB) that is 4 MiB.
pub(crate) const COPIES_KEPT: usize = 32;

/// Idle buffers.
#[derive(Debug)]
pub(crate) struct BufPool {
    free: Vec<Vec<u8>>,
    keep: usize,
}

impl BufPool {
    /// A pool that keeps at most `keep` idle buffers.
    pub(crate) fn new(keep: usize) -> Self {
        BufPool {
            free: Vec::new(),
            keep,
        }
    }

    /// An empty buffer, recycled if possible.
    pub(crate) fn get(&mut self) -> Vec<u8> {
        let mut v = self.take();
        v.clear();
        v
    }

    /// A buffer recycled as it was returned, bytes and all, if possible:
    /// for a caller about to overwrite it whole (resizing only zeroes what
    /// grows).
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_default()
    }

    /// Return a buffer.
    pub(crate) fn put(&mut self, v: Vec<u8>) {
        if self.free.len() < self.keep && v.capacity() > 0 {
            self.free.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_comes_back_with_its_allocation_and_bytes() {
        let mut p = BufPool::new(4);
        let a = vec![5u8; 1000];
        let at = a.as_ptr();
        p.put(a);
        let b = p.take();
        assert_eq!((b.as_ptr(), b.len()), (at, 1000));
        assert!(b.iter().all(|&x| x == 5));
        p.put(b);
        let c = p.get();
        assert_eq!((c.as_ptr(), c.len()), (at, 0));
        // nothing idle: a new, empty buffer
        assert!(p.take().is_empty());
    }

    #[test]
    fn at_most_keep_idle_buffers_are_kept() {
        let mut p = BufPool::new(COPIES_KEPT);
        for _ in 0..COPIES_KEPT + 5 {
            p.put(vec![0; 16]);
        }
        p.put(Vec::new());
        assert_eq!(p.free.len(), COPIES_KEPT);
    }
}
