//! A single-producer single-consumer byte ring of variable-length records.
//!
//! The ring is a data area of `cap` bytes (a multiple of [`ALIGN`]) plus two
//! `u64` byte counters that only grow: `tail`, written by the producer, and
//! `head`, written by the consumer; each lives on a cache line of its own
//! (see `segment.rs`). A record is `[len u32 | kind u32 | len bytes]`,
//! padded to [`ALIGN`]; records never wrap: when one does not fit before the
//! end of the data area, the producer fills the rest with a [`Kind::Pad`]
//! record and starts at offset 0.
//!
//! Orderings: the producer writes a record's bytes, then stores `tail` with
//! `Release`; the consumer loads `tail` with `Acquire` before reading them.
//! The consumer reads a record, then stores `head` with `Release`; the
//! producer loads `head` with `Acquire` before overwriting that space. So
//! each side owns the bytes between the counters that the protocol gives
//! it, and nothing else is shared.
//!
//! Nothing here trusts the other side: in shared memory the other side is
//! another process, possibly broken or hostile. Every counter and record
//! header read from the ring is checked before use ([`RingError`]); a side
//! keeps its own counter locally and never reads it back from the ring.
//!
//! Each side also keeps the last value it read of the *other* side's
//! counter, and reads the counter again only when that view runs out (the
//! producer: not enough free space; the consumer: nothing left to read).
//! The other side's counter sits on a cache line the other core keeps
//! writing, so every read of it is a transfer between cores; a producer
//! that read `head` on every push paid one per message even with the ring
//! nearly empty. A stale view is always a safe one: `head` and `tail` only
//! grow, so an old `head` under-counts the free space and an old `tail`
//! the published records.
//!
//! This module makes no system call, so its tests run under Miri.

use std::sync::atomic::{AtomicU64, Ordering};

/// Records start at multiples of this many bytes.
pub const ALIGN: usize = 8;
/// Bytes of a record's header (`len`, `kind`).
pub const REC_HDR: usize = 8;

/// What a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Filler up to the end of the data area; skipped.
    Pad = 1,
    /// A Portals header (88 bytes) and the first payload bytes; the rest, if
    /// any, follows in [`Kind::Chunk`] records.
    Msg = 2,
    /// More payload bytes of the message being received.
    Chunk = 3,
    /// A Portals header and where the payload lies in the sender (address,
    /// length, cookie), for a single-copy read.
    Cma = 4,
    /// The receiver is done with the single-copy payload of this cookie.
    Done = 5,
    /// A Portals header and the ranges of the sender's memory its payload
    /// lies in, for a single-copy read of a scattered payload (see
    /// `scatter.rs`).
    CmaV = 6,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        Some(match v {
            1 => Kind::Pad,
            2 => Kind::Msg,
            3 => Kind::Chunk,
            4 => Kind::Cma,
            5 => Kind::Done,
            6 => Kind::CmaV,
            _ => return None,
        })
    }
}

/// A violation of the ring protocol by the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The consumer's `head` is ahead of the producer's `tail`, or more than
    /// a ring behind it.
    #[error("consumer index {head} is inconsistent with producer index {tail}")]
    BadHead {
        /// The head read from the ring.
        head: u64,
        /// The producer's own tail.
        tail: u64,
    },
    /// The producer's `tail` is behind the consumer's `head`, more than a
    /// ring ahead of it, or not record-aligned.
    #[error("producer index {tail} is inconsistent with consumer index {head}")]
    BadTail {
        /// The consumer's own head.
        head: u64,
        /// The tail read from the ring.
        tail: u64,
    },
    /// A record header that overruns the published bytes or the end of the
    /// data area, or a pad that does not end at the end of the data area.
    #[error("record of {len} bytes at offset {pos} overruns the ring")]
    BadRecord {
        /// Offset of the record in the data area.
        pos: u64,
        /// Its claimed body length.
        len: u32,
    },
    /// An unknown record kind.
    #[error("unknown record kind {0}")]
    BadKind(u32),
}

/// Where a ring lives: its two counters and its data area.
#[derive(Clone, Copy, Debug)]
pub struct RingPtrs {
    /// The producer's counter.
    pub tail: *const AtomicU64,
    /// The consumer's counter.
    pub head: *const AtomicU64,
    /// The first byte of the data area.
    pub data: *mut u8,
    /// Bytes in the data area: a non-zero multiple of [`ALIGN`].
    pub cap: u64,
}

// SAFETY: the pointers name memory (a shared mapping, or a test's heap
// region) that the owner of the `RingPtrs` keeps alive; every access to the
// counters is atomic and every access to the data area follows the ring
// protocol, whichever thread makes it.
unsafe impl Send for RingPtrs {}
// SAFETY: as for `Send`; shared references only read the counters.
unsafe impl Sync for RingPtrs {}

impl RingPtrs {
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: valid and aligned for as long as the ring exists (the
        // constructor's contract).
        unsafe { &*self.tail }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`.
        unsafe { &*self.head }
    }

    /// True if records are published that the consumer has not released:
    /// a cheap look, from any thread, before sleeping.
    pub fn pending(&self) -> bool {
        self.tail().load(Ordering::Acquire) != self.head().load(Ordering::Acquire)
    }
}

/// Round `n` up to a multiple of [`ALIGN`].
pub const fn align_up(n: u64) -> u64 {
    (n + (ALIGN as u64 - 1)) & !(ALIGN as u64 - 1)
}

/// Bytes a record with a body of `len` bytes takes in the ring.
pub const fn record_size(len: u64) -> u64 {
    REC_HDR as u64 + align_up(len)
}

/// The producer's end of a ring.
#[derive(Debug)]
pub struct Producer {
    ring: RingPtrs,
    /// The authoritative tail (the copy in the ring is only published).
    tail: u64,
    /// The consumer's `head` as last read (and checked): the space behind
    /// it is certainly free.
    head_seen: u64,
}

impl Producer {
    /// The producer of a fresh ring (both counters 0).
    ///
    /// # Safety
    /// `ring` must name valid, aligned counters and `ring.cap` writable
    /// bytes at `ring.data`, alive as long as the producer, and this must be
    /// the ring's only producer.
    pub unsafe fn new(ring: RingPtrs) -> Producer {
        Producer {
            ring,
            tail: 0,
            head_seen: 0,
        }
    }

    /// Read the consumer's `head` again, check it, and return the bytes it
    /// has not released. It may only have grown since the last read, up to
    /// our tail.
    fn refresh_used(&mut self) -> Result<u64, RingError> {
        let head = self.ring.head().load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.tail - self.head_seen || head % ALIGN as u64 != 0 {
            return Err(RingError::BadHead {
                head,
                tail: self.tail,
            });
        }
        self.head_seen = head;
        Ok(used)
    }

    /// Bytes free for certain: by the cached `head` if that leaves `need`,
    /// otherwise by a fresh read of it.
    fn free_for(&mut self, need: u64) -> Result<u64, RingError> {
        let free = self.ring.cap - (self.tail - self.head_seen);
        if free >= need {
            return Ok(free);
        }
        Ok(self.ring.cap - self.refresh_used()?)
    }

    /// The longest body a record pushed now may have (reads the
    /// consumer's `head` afresh).
    pub fn room(&mut self) -> Result<usize, RingError> {
        let free = self.ring.cap - self.refresh_used()?;
        let pos = self.tail % self.ring.cap;
        let to_end = self.ring.cap - pos;
        // In place, before the end of the data area...
        let here = free.min(to_end).saturating_sub(REC_HDR as u64);
        // ...or after a pad, at the start.
        let wrapped = free.saturating_sub(to_end).saturating_sub(REC_HDR as u64);
        Ok(here.max(wrapped) as usize)
    }

    /// Publish a record of `kind` whose `len`-byte body `fill` writes.
    /// Returns false, having published nothing, if it does not fit now.
    pub fn push(
        &mut self,
        kind: Kind,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool, RingError> {
        let cap = self.ring.cap;
        let size = record_size(len as u64);
        let mut pos = self.tail % cap;
        let to_end = cap - pos;
        let need = if size <= to_end { size } else { to_end + size };
        if need > self.free_for(need)? {
            return Ok(false);
        }
        let mut tail = self.tail;
        if size > to_end {
            // SAFETY: `pos..cap` is free (counted in `need`) and ours until
            // the tail store below publishes it; `to_end` ≥ 8 since both
            // `pos` and `cap` are multiples of ALIGN.
            unsafe { self.write_header(pos, (to_end - REC_HDR as u64) as u32, Kind::Pad) };
            tail += to_end;
            pos = 0;
        }
        // SAFETY: `pos .. pos + size` lies in the data area and is free: the
        // consumer reads none of it before the tail store below.
        let body = unsafe {
            std::slice::from_raw_parts_mut(self.ring.data.add(pos as usize + REC_HDR), len)
        };
        fill(body);
        // SAFETY: as above.
        unsafe { self.write_header(pos, len as u32, kind) };
        tail += size;
        self.tail = tail;
        // Release: the record's bytes before the index that publishes them.
        self.ring.tail().store(tail, Ordering::Release);
        Ok(true)
    }

    /// # Safety
    /// `pos + 8` bytes of the data area must be free and owned by the
    /// producer.
    unsafe fn write_header(&self, pos: u64, len: u32, kind: Kind) {
        let mut h = [0u8; REC_HDR];
        h[..4].copy_from_slice(&len.to_le_bytes());
        h[4..].copy_from_slice(&(kind as u32).to_le_bytes());
        // SAFETY: the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), self.ring.data.add(pos as usize), REC_HDR)
        };
    }
}

/// A record found by [`Consumer::peek`]; valid until it is consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    /// Its kind (never [`Kind::Pad`]).
    pub kind: Kind,
    /// Offset of its body in the data area.
    off: usize,
    /// Length of its body.
    pub len: usize,
    /// Bytes it takes in the ring.
    size: u64,
}

/// The consumer's end of a ring.
#[derive(Debug)]
pub struct Consumer {
    ring: RingPtrs,
    /// The authoritative head.
    head: u64,
    /// The producer's `tail` as last read (and checked): records up to it
    /// are published.
    tail_seen: u64,
}

impl Consumer {
    /// The consumer of a fresh ring (both counters 0).
    ///
    /// # Safety
    /// As for [`Producer::new`], for the ring's only consumer.
    pub unsafe fn new(ring: RingPtrs) -> Consumer {
        Consumer {
            ring,
            head: 0,
            tail_seen: 0,
        }
    }

    /// The ring's pointers.
    pub fn ptrs(&self) -> &RingPtrs {
        &self.ring
    }

    /// The next record, if one is published, after checking it; pads are
    /// skipped (and released).
    pub fn peek(&mut self) -> Result<Option<Rec>, RingError> {
        let cap = self.ring.cap;
        loop {
            if self.tail_seen == self.head {
                let tail = self.ring.tail().load(Ordering::Acquire);
                let avail = tail.wrapping_sub(self.head);
                if avail > cap || avail % ALIGN as u64 != 0 {
                    return Err(RingError::BadTail {
                        head: self.head,
                        tail,
                    });
                }
                if avail == 0 {
                    return Ok(None);
                }
                self.tail_seen = tail;
            }
            let avail = self.tail_seen - self.head;
            let pos = self.head % cap;
            let to_end = cap - pos;
            let mut h = [0u8; REC_HDR];
            // SAFETY: `pos + 8 ≤ cap` (both multiples of ALIGN, pos < cap)
            // and the bytes are published (avail ≥ 8) and not released.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ring.data.add(pos as usize),
                    h.as_mut_ptr(),
                    REC_HDR,
                )
            };
            let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let kind = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            let size = record_size(u64::from(len));
            if size > to_end || size > avail {
                return Err(RingError::BadRecord { pos, len });
            }
            match Kind::from_u32(kind) {
                Some(Kind::Pad) => {
                    if size != to_end {
                        return Err(RingError::BadRecord { pos, len });
                    }
                    self.release(size);
                }
                Some(kind) => {
                    return Ok(Some(Rec {
                        kind,
                        off: pos as usize + REC_HDR,
                        len: len as usize,
                        size,
                    }))
                }
                None => return Err(RingError::BadKind(kind)),
            }
        }
    }

    /// The body of `rec`, the record [`peek`](Self::peek) returned last.
    pub fn body(&self, rec: &Rec) -> &[u8] {
        // SAFETY: `peek` checked that the body lies in the data area and is
        // published; it stays ours until `consume`, which takes `&mut self`
        // and so ends this borrow first.
        unsafe { std::slice::from_raw_parts(self.ring.data.add(rec.off), rec.len) }
    }

    /// Release `rec` (the record [`peek`](Self::peek) returned last) to the
    /// producer.
    pub fn consume(&mut self, rec: Rec) {
        self.release(rec.size);
    }

    fn release(&mut self, size: u64) {
        self.head += size;
        // Release: our reads of the record before the producer may reuse it.
        self.ring.head().store(self.head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A ring on the heap, as the tests' stand-in for a shared segment.
    struct Mem {
        ctl: Box<[AtomicU64; 2]>,
        data: Vec<u64>,
    }

    // SAFETY: the data area is only touched through the ring protocol.
    unsafe impl Send for Mem {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for Mem {}

    impl Mem {
        fn new(cap: usize) -> Arc<Mem> {
            Arc::new(Mem {
                ctl: Box::new([AtomicU64::new(0), AtomicU64::new(0)]),
                data: vec![0u64; cap / 8],
            })
        }

        fn ptrs(&self) -> RingPtrs {
            RingPtrs {
                tail: &self.ctl[0],
                head: &self.ctl[1],
                data: self.data.as_ptr() as *mut u8,
                cap: (self.data.len() * 8) as u64,
            }
        }

        fn ends(&self) -> (Producer, Consumer) {
            // SAFETY: `self` outlives both ends in every test (held in an
            // Arc by each thread that uses them).
            unsafe { (Producer::new(self.ptrs()), Consumer::new(self.ptrs())) }
        }
    }

    fn take(c: &mut Consumer) -> Option<(Kind, Vec<u8>)> {
        let r = c.peek().expect("valid ring")?;
        let out = (r.kind, c.body(&r).to_vec());
        c.consume(r);
        Some(out)
    }

    #[test]
    fn records_come_out_as_they_went_in() {
        let m = Mem::new(256);
        let (mut p, mut c) = m.ends();
        assert_eq!(take(&mut c), None);
        assert!(p.push(Kind::Msg, 3, |b| b.copy_from_slice(b"abc")).unwrap());
        assert!(p.push(Kind::Done, 0, |_| {}).unwrap());
        assert_eq!(take(&mut c), Some((Kind::Msg, b"abc".to_vec())));
        assert_eq!(take(&mut c), Some((Kind::Done, vec![])));
        assert_eq!(take(&mut c), None);
    }

    #[test]
    fn a_full_ring_refuses_and_a_record_never_wraps() {
        let m = Mem::new(128);
        let (mut p, mut c) = m.ends();
        assert_eq!(p.room().unwrap(), 120);
        assert!(p.push(Kind::Msg, 80, |b| b.fill(1)).unwrap()); // 88 bytes
        assert_eq!(p.room().unwrap(), 32);
        assert!(!p.push(Kind::Msg, 40, |_| panic!("no room")).unwrap());
        assert_eq!(take(&mut c).unwrap().1, vec![1; 80]);
        // 40 free at the end, 88 at the start: a 48-byte record goes to
        // offset 0 behind a pad.
        assert_eq!(p.room().unwrap(), 80);
        assert!(p.push(Kind::Chunk, 48, |b| b.fill(2)).unwrap());
        assert_eq!(take(&mut c), Some((Kind::Chunk, vec![2; 48])));
        assert_eq!(m.ctl[0].load(Ordering::Relaxed), 88 + 40 + 56);
    }

    #[test]
    fn a_head_or_tail_out_of_bounds_is_an_error_not_a_crash() {
        let m = Mem::new(128);
        let (mut p, mut c) = m.ends();
        m.ctl[1].store(8, Ordering::Relaxed); // head ahead of tail
        assert!(matches!(p.room(), Err(RingError::BadHead { .. })));
        // A push within the space known to be free does not look at the
        // head; one that needs more does, and refuses it.
        assert!(p.push(Kind::Msg, 100, |_| {}).unwrap());
        m.ctl[1].store(200, Ordering::Relaxed); // past the tail (108)
        assert!(matches!(
            p.push(Kind::Msg, 16, |_| {}),
            Err(RingError::BadHead { .. })
        ));
        m.ctl[1].store(0, Ordering::Relaxed);
        m.ctl[0].store(1 << 40, Ordering::Relaxed); // tail far ahead
        assert!(matches!(c.peek(), Err(RingError::BadTail { .. })));
        m.ctl[0].store(12, Ordering::Relaxed); // misaligned
        assert!(matches!(c.peek(), Err(RingError::BadTail { .. })));
        m.ctl[0].store(u64::MAX, Ordering::Relaxed); // "behind" the head
        assert!(matches!(c.peek(), Err(RingError::BadTail { .. })));
    }

    #[test]
    fn the_producer_reads_the_head_only_when_its_view_runs_out_of_space() {
        let m = Mem::new(128);
        let (mut p, mut c) = m.ends();
        assert!(p.push(Kind::Msg, 40, |b| b.fill(1)).unwrap()); // 48 bytes
        assert_eq!(take(&mut c).unwrap().1, vec![1; 40]);
        // Garbage in the head while the producer's last view (head 0, 80
        // bytes free) still fits the record: not read, so not noticed.
        m.ctl[1].store(1 << 40, Ordering::Relaxed);
        assert!(p.push(Kind::Msg, 40, |b| b.fill(2)).unwrap());
        // The next record needs the space the consumer released: the head
        // is read, and refused.
        assert!(matches!(
            p.push(Kind::Msg, 40, |_| {}),
            Err(RingError::BadHead { .. })
        ));
        // The true head (48): read afresh, the space is there.
        m.ctl[1].store(48, Ordering::Relaxed);
        assert!(p.push(Kind::Msg, 40, |b| b.fill(3)).unwrap());
        assert_eq!(take(&mut c).unwrap().1, vec![2; 40]);
        assert_eq!(take(&mut c).unwrap().1, vec![3; 40]);
        // A head that moves backwards is as wrong as one past the tail.
        m.ctl[1].store(8, Ordering::Relaxed);
        assert!(matches!(p.room(), Err(RingError::BadHead { .. })));
    }

    #[test]
    fn the_consumer_reads_the_tail_only_when_its_view_is_empty() {
        let m = Mem::new(256);
        let (mut p, mut c) = m.ends();
        assert!(p.push(Kind::Msg, 8, |b| b.fill(1)).unwrap());
        assert!(p.push(Kind::Msg, 8, |b| b.fill(2)).unwrap());
        assert_eq!(take(&mut c).unwrap().1, vec![1; 8]);
        // The second record was seen published by the first read of the
        // tail: garbage written to it now is not read.
        m.ctl[0].store(12, Ordering::Relaxed);
        assert_eq!(take(&mut c).unwrap().1, vec![2; 8]);
        // With nothing left in its view, it reads the tail, and refuses it.
        assert!(matches!(c.peek(), Err(RingError::BadTail { .. })));
    }

    #[test]
    fn garbage_record_headers_are_errors() {
        for (len, kind, want) in [
            (200u32, 2u32, "overrun"),
            (16, 9, "kind"),
            (16, 0, "kind"),
            (8, 1, "pad"),
            (u32::MAX, 2, "overrun"),
        ] {
            let m = Mem::new(128);
            let (_, mut c) = m.ends();
            let h = u64::from(len) | (u64::from(kind) << 32);
            // SAFETY: the test owns the ring; nobody else touches it.
            unsafe { (m.data.as_ptr() as *mut u64).write(h.to_le()) };
            m.ctl[0].store(32, Ordering::Relaxed);
            let e = c.peek().expect_err(want);
            match want {
                "kind" => assert_eq!(e, RingError::BadKind(kind)),
                _ => assert!(matches!(e, RingError::BadRecord { .. }), "{e:?}"),
            }
        }
    }

    /// A tiny deterministic generator (no dependency, fast under Miri).
    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn a_producer_thread_and_a_consumer_thread_move_every_byte() {
        let (cap, n) = if cfg!(miri) {
            (256, 300)
        } else {
            (4096, 200_000)
        };
        let m = Mem::new(cap);
        let (mut p, mut c) = m.ends();
        let mp = m.clone();
        let producer = std::thread::spawn(move || {
            let _keep = mp;
            let mut rng = 7u64;
            for i in 0..n {
                let len = (xorshift(&mut rng) % (cap as u64 / 3)) as usize;
                let seed = i as u8;
                while !p
                    .push(Kind::Msg, len, |b| {
                        for (k, x) in b.iter_mut().enumerate() {
                            *x = seed.wrapping_add(k as u8);
                        }
                    })
                    .unwrap()
                {
                    std::thread::yield_now();
                }
            }
        });
        let mut rng = 7u64;
        for i in 0..n {
            let len = (xorshift(&mut rng) % (cap as u64 / 3)) as usize;
            let (kind, body) = loop {
                match take(&mut c) {
                    Some(r) => break r,
                    None => std::thread::yield_now(),
                }
            };
            assert_eq!((kind, body.len()), (Kind::Msg, len), "record {i}");
            for (k, x) in body.iter().enumerate() {
                assert_eq!(*x, (i as u8).wrapping_add(k as u8), "record {i} byte {k}");
            }
        }
        producer.join().unwrap();
        assert_eq!(take(&mut c), None);
    }
}
