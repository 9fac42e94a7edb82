//! Single-copy records for payloads scattered over several ranges of the
//! sender's memory (an iovec descriptor's segments): the record lists the
//! ranges, and the receiver's `process_vm_readv` gathers them straight into
//! its own (possibly scattered) region. Without this, a scattered send went
//! through the ring: two copies where a contiguous one takes one.
//!
//! Record body ([`crate::ring::Kind::CmaV`]): the Portals header, the
//! cookie (u64), the range count `n` (u64), then `n` × (address u64,
//! length u64), all little-endian. Everything in it is the peer's word:
//! [`RemoteRanges::decode`] checks it before anything is read.

use portals::wire::HEADER_LEN;

/// Most ranges one record names. A payload in more pieces goes through the
/// ring: a list this long (16 KiB) already costs more to write and check
/// than the copy it saves on pieces of a few bytes.
pub(crate) const MAX_RANGES: usize = 1024;

/// Bytes of a record naming `n` ranges.
pub(crate) fn record_len(n: usize) -> usize {
    HEADER_LEN + 16 + 16 * n
}

/// Where a single-copy payload lies in the sender's memory.
pub(crate) enum RemoteRanges {
    /// One range starting here.
    One(u64),
    /// Several, in payload order: (address, length).
    Many(Box<[(u64, u64)]>),
}

impl RemoteRanges {
    /// Decode and check the ranges of a [`crate::ring::Kind::CmaV`] body
    /// whose header announced `payload_len` bytes: returns the cookie and
    /// the ranges, or what is wrong with them.
    pub(crate) fn decode(body: &[u8], payload_len: u64) -> Result<(u64, RemoteRanges), String> {
        let word = |off: usize| -> Option<u64> {
            let b = body.get(off..off + 8)?;
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            Some(u64::from_le_bytes(w))
        };
        let (Some(cookie), Some(n)) = (word(HEADER_LEN), word(HEADER_LEN + 8)) else {
            return Err("scattered single-copy record too short".into());
        };
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n == 0 || n > MAX_RANGES || body.len() != record_len(n) {
            return Err(format!(
                "scattered single-copy record of {} bytes names {n} ranges",
                body.len()
            ));
        }
        let mut list = Vec::with_capacity(n);
        let mut total: u64 = 0;
        for i in 0..n {
            let at = HEADER_LEN + 16 + 16 * i;
            let (Some(addr), Some(len)) = (word(at), word(at + 8)) else {
                return Err("scattered single-copy record cut short".into());
            };
            if len == 0 || addr.checked_add(len).is_none() {
                return Err(format!(
                    "scattered single-copy range {i} is empty or overflows"
                ));
            }
            total = total
                .checked_add(len)
                .ok_or("scattered single-copy ranges overflow")?;
            list.push((addr, len));
        }
        if total != payload_len {
            return Err(format!(
                "scattered single-copy ranges hold {total} bytes, the header {payload_len}"
            ));
        }
        Ok((cookie, RemoteRanges::Many(list.into_boxed_slice())))
    }

    /// Fill `out` with remote iovecs covering up to `want` bytes from
    /// payload offset `from`; returns how many entries and bytes.
    pub(crate) fn iovecs(
        &self,
        from: usize,
        want: usize,
        out: &mut [libc::iovec],
    ) -> (usize, usize) {
        let iov = |a: u64, n: usize| libc::iovec {
            // Only the kernel interprets it, in the other process.
            iov_base: a as usize as *mut libc::c_void,
            iov_len: n,
        };
        match self {
            RemoteRanges::One(a) => {
                if out.is_empty() || want == 0 {
                    return (0, 0);
                }
                out[0] = iov(a.wrapping_add(from as u64), want);
                (1, want)
            }
            RemoteRanges::Many(list) => {
                let (mut k, mut bytes) = (0, 0);
                let mut skip = from as u64;
                for &(a, len) in list.iter() {
                    if k == out.len() || bytes == want {
                        break;
                    }
                    if skip >= len {
                        skip -= len;
                        continue;
                    }
                    let avail = usize::try_from(len - skip).unwrap_or(usize::MAX);
                    let take = avail.min(want - bytes);
                    out[k] = iov(a + skip, take);
                    skip = 0;
                    k += 1;
                    bytes += take;
                }
                (k, bytes)
            }
        }
    }
}

/// Encode a [`crate::ring::Kind::CmaV`] body naming `n` ranges into `b`
/// (exactly [`record_len`]`(n)` bytes); `ranges` yields at least `n`.
pub(crate) fn encode(
    b: &mut [u8],
    hdr: &[u8; HEADER_LEN],
    cookie: u64,
    n: usize,
    ranges: impl Iterator<Item = (u64, u64)>,
) {
    b[..HEADER_LEN].copy_from_slice(hdr);
    b[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&cookie.to_le_bytes());
    b[HEADER_LEN + 8..HEADER_LEN + 16].copy_from_slice(&(n as u64).to_le_bytes());
    for (i, (a, len)) in ranges.take(n).enumerate() {
        let at = HEADER_LEN + 16 + 16 * i;
        b[at..at + 8].copy_from_slice(&a.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(cookie: u64, ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; record_len(ranges.len())];
        encode(
            &mut b,
            &[7; HEADER_LEN],
            cookie,
            ranges.len(),
            ranges.iter().copied(),
        );
        b
    }

    #[test]
    fn ranges_round_trip_and_iovecs_start_mid_range() {
        let r = [(0x1000, 10), (0x5000, 5), (0x9000, 20)];
        let (cookie, ranges) = RemoteRanges::decode(&body(42, &r), 35).unwrap();
        assert_eq!(cookie, 42);
        let mut out = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 4];
        // From byte 12 (2 into the second range), 10 bytes.
        let (k, n) = ranges.iovecs(12, 10, &mut out);
        assert_eq!((k, n), (2, 10));
        assert_eq!((out[0].iov_base as usize, out[0].iov_len), (0x5002, 3));
        assert_eq!((out[1].iov_base as usize, out[1].iov_len), (0x9000, 7));
        // Limited by the entries offered.
        let (k, n) = ranges.iovecs(0, 35, &mut out[..1]);
        assert_eq!((k, n), (1, 10));
    }

    #[test]
    fn a_lying_record_is_refused() {
        let good = [(0x1000, 10), (0x5000, 5)];
        let b = body(1, &good);
        // Total differs from the header's.
        assert!(RemoteRanges::decode(&b, 16).is_err());
        // Count says more than the body holds, or zero.
        let mut c = b.clone();
        c[HEADER_LEN + 8] = 3;
        assert!(RemoteRanges::decode(&c, 15).is_err());
        c[HEADER_LEN + 8] = 0;
        assert!(RemoteRanges::decode(&c, 15).is_err());
        // Too many ranges.
        let mut big = b.clone();
        big[HEADER_LEN + 8..HEADER_LEN + 16]
            .copy_from_slice(&((MAX_RANGES + 1) as u64).to_le_bytes());
        assert!(RemoteRanges::decode(&big, 15).is_err());
        // An empty range; one that wraps the address space.
        assert!(RemoteRanges::decode(&body(1, &[(0x1000, 0), (0x5000, 15)]), 15).is_err());
        assert!(RemoteRanges::decode(&body(1, &[(u64::MAX - 2, 15)]), 15).is_err());
        // Lengths that overflow when summed.
        assert!(
            RemoteRanges::decode(&body(1, &[(0, u64::MAX / 2 + 1), (0, u64::MAX / 2 + 1)]), 0)
                .is_err()
        );
        // Truncated.
        assert!(RemoteRanges::decode(&b[..b.len() - 1], 15).is_err());
        assert!(RemoteRanges::decode(&b[..HEADER_LEN + 4], 15).is_err());
        assert!(RemoteRanges::decode(&b, 15).is_ok());
    }
}
