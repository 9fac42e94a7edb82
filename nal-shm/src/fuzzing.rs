//! Entry points for the fuzz targets (`fuzz/`) and their proptest
//! stand-ins: what a hostile or broken producer can do to a consumer.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::ring::{Consumer, RingPtrs, ALIGN};

/// Bytes of the fuzzed ring's data area.
const CAP: usize = 4096;

/// Drive a [`Consumer`] over a ring whose every byte and producer counter
/// come from `input`, as another process could write them: rounds of
/// `[tail: u64 LE][n: u16 LE][n bytes written at data offset (tail % cap)]`.
/// After each round the consumer reads until the ring is empty or refuses
/// it (and is not used again once it has refused it). Panics only if the consumer hands out a record outside the data
/// area or past the published bytes (a bug); errors are the expected
/// answer to garbage.
pub fn hostile_ring(input: &[u8]) {
    let ctl = [AtomicU64::new(0), AtomicU64::new(0)];
    let mut data = vec![0u64; CAP / ALIGN];
    let ring = RingPtrs {
        tail: &ctl[0],
        head: &ctl[1],
        data: data.as_mut_ptr().cast::<u8>(),
        cap: CAP as u64,
    };
    // SAFETY: `ctl` and `data` outlive the consumer (dropped at the end of
    // this function, after it); this thread is its only user.
    let mut consumer = unsafe { Consumer::new(ring) };
    let mut rest = input;
    while rest.len() >= 10 {
        let tail = u64::from_le_bytes(rest[..8].try_into().unwrap_or([0; 8]));
        let n = usize::from(u16::from_le_bytes([rest[8], rest[9]]));
        rest = &rest[10..];
        let n = n.min(rest.len()).min(CAP);
        let at = (tail % CAP as u64) as usize;
        for (i, b) in rest[..n].iter().enumerate() {
            let off = (at + i) % CAP;
            // SAFETY: `off < CAP`, inside `data`; no record borrow is alive
            // between rounds (each `body` below is dropped before).
            unsafe { *ring.data.add(off) = *b };
        }
        rest = &rest[n..];
        ctl[0].store(tail, Ordering::Release);
        for _ in 0..CAP {
            let head_before = ctl[1].load(Ordering::Relaxed);
            match consumer.peek() {
                Ok(Some(rec)) => {
                    let body = consumer.body(&rec);
                    let end = body.as_ptr() as usize + body.len();
                    assert!(end <= ring.data as usize + CAP, "record past the data area");
                    assert!(
                        body.len() as u64 + 8 <= tail.wrapping_sub(head_before),
                        "record past the published bytes"
                    );
                    consumer.consume(rec);
                }
                Ok(None) => break,
                // The transport fails a peer at its first violation and
                // never reads its ring again; neither does this.
                Err(_) => return,
            }
        }
    }
    // `consumer` is dropped before `data` and `ctl` (declared after them).
}
