//! The inbox: one POSIX shared-memory object per process, holding a header
//! and one ring per sending peer. Creation, opening, validation, mapping.
//!
//! Layout (offsets in bytes; every ring's control block and data area are
//! 64-byte aligned):
//!
//! | off | size | what |
//! |----:|-----:|------|
//! | 0 | 256 | [`SegHeader`]: magic, version, job-key hash, creator pid, ring count and size, total length; doorbell futex word; sleeper count; attach count; closed flag |
//! | 256 + i·(256 + ring_bytes) | 256 | [`RingCtl`] of ring i: its sender, the single-copy probe and verdict, `tail`, `head` |
//! | 512 + i·(256 + ring_bytes) | ring_bytes | ring i's data |
//!
//! Everything an opener reads is untrusted: the header is checked in full
//! (magic, version, job key, creator, sizes against the file's length)
//! before any ring is used, and a segment that fails is refused with a
//! [`SegmentError`]. Fields are atomics, so a peer writing them while we
//! read is a race on values, never undefined behaviour here.

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use portals::ProcessId;

use crate::ring::RingPtrs;

/// `"PTLSHM\0\x01"`, little-endian: the first word of a valid inbox.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PTLSHM\x00\x01");
/// The layout version this crate writes and accepts.
pub const VERSION: u32 = 4;
/// Bytes of the segment header.
pub const HEADER_BYTES: u64 = 256;
/// Bytes of a ring's control block.
pub const CTL_BYTES: u64 = 256;
/// Smallest ring accepted.
pub const MIN_RING: u64 = 4096;
/// Largest ring accepted (a header claiming more is refused).
pub const MAX_RING: u64 = 1 << 30;
/// Most rings (sending peers) one inbox may hold.
pub const MAX_RINGS: u32 = 1 << 16;

/// Value of [`RingCtl::cma`] once single-copy from this ring's sender is
/// found to work (0 until the receiver has decided).
pub const CMA_OK: u32 = 1;
/// Single-copy from this ring's sender is unavailable or turned off.
pub const CMA_OFF: u32 = 2;

/// The segment header. All fields atomic: peers read and write it at once.
#[repr(C, align(64))]
pub struct SegHeader {
    /// [`MAGIC`], stored last by the creator (`Release`).
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: AtomicU32,
    /// Number of rings.
    pub ring_count: AtomicU32,
    /// [`key_hash`] of the job key.
    pub key_hash: AtomicU64,
    /// The creating process's operating-system pid.
    pub creator_pid: AtomicU32,
    _r0: u32,
    /// Bytes of each ring's data area.
    pub ring_bytes: AtomicU64,
    /// Bytes of the whole segment.
    pub total_len: AtomicU64,
    _r1: [u64; 2],
    /// The futex word sleepers wait on; producers bump it to wake them.
    pub doorbell: AtomicU32,
    /// Application threads of the owner waiting in the library (published
    /// only with `ShmConfig::early_takeover`): they drive the rings
    /// themselves, so a producer does not wake a dozer for them. Written at
    /// every wait, so kept off the line producers read at every message
    /// (`sleepers`), and read only when a dozer may need waking.
    pub app_inside: AtomicU32,
    /// Set by a producer that had work for a dozer (see `doorbell::ring`):
    /// the waiter that leaves last wakes the dozer for it if nobody did.
    pub work_unrung: AtomicU32,
    _r2: [u32; 13],
    /// Threads of the owner about to sleep or sleeping on the doorbell.
    pub sleepers: AtomicU32,
    /// Threads of the owner about to sleep or sleeping in `poll(2)` on its
    /// doorbell socket ([`crate::doorbell::Bell`]) instead: a thread that
    /// waits for this transport and others at once.
    pub fd_sleepers: AtomicU32,
    /// Progress threads dozing on the doorbell while their application
    /// computes: woken only by records that need their work (see
    /// `doorbell::ring`), not by every message.
    pub dozers: AtomicU32,
    /// The futex word dozers wait on (apart from `doorbell`, so that a
    /// wake for a sleeping application thread does not wake them too).
    pub doze_bell: AtomicU32,
    /// Non-zero while the owner has triggered operations armed (a
    /// non-blocking collective under way): then any message may be the one
    /// that fires the next step, and a producer wakes a dozer for it too
    /// (see `doorbell::ring`). On the line producers read at every message.
    pub dozer_armed: AtomicU32,
    _r3: [u32; 11],
    /// Peers that mapped the segment; the last one unlinks its name.
    pub attached: AtomicU32,
    /// Set by the owner when it shuts down.
    pub closed: AtomicU32,
    _r4: [u32; 14],
}

/// A ring's control block.
#[repr(C, align(64))]
pub struct RingCtl {
    /// The sender's Portals nid.
    pub owner_nid: AtomicU32,
    /// The sender's Portals pid.
    pub owner_pid: AtomicU32,
    /// The sender's operating-system pid.
    pub owner_os_pid: AtomicU32,
    _r0: u32,
    /// Sender: address of a word in its memory the receiver may read to
    /// find out whether single-copy works.
    pub probe_addr: AtomicU64,
    /// Sender: the value of that word.
    pub probe_val: AtomicU64,
    /// Sender: 1 once `probe_addr`/`probe_val` are published.
    pub probe_set: AtomicU32,
    /// Receiver: 0 (undecided), [`CMA_OK`] or [`CMA_OFF`].
    pub cma: AtomicU32,
    _r1: [u64; 3],
    /// The producer's counter (see `ring.rs`).
    pub tail: AtomicU64,
    /// The producer found the ring full and waits for the consumer to ring
    /// its doorbell after releasing space.
    pub producer_waiting: AtomicU32,
    _r2: [u32; 13],
    /// The consumer's counter.
    pub head: AtomicU64,
    _r3: [u64; 7],
    _r4: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<SegHeader>() == HEADER_BYTES as usize);
const _: () = assert!(std::mem::size_of::<RingCtl>() == CTL_BYTES as usize);

/// Why an inbox was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// Not an inbox of this transport.
    #[error("bad magic number {0:#018x}")]
    BadMagic(u64),
    /// An inbox of another layout version.
    #[error("layout version {0}, this build speaks {VERSION}")]
    BadVersion(u32),
    /// An inbox of another job.
    #[error("segment belongs to another job")]
    ForeignJob,
    /// Created by another process than the address names.
    #[error("segment created by pid {found}, expected {expected}")]
    WrongCreator {
        /// The pid in the header.
        found: u32,
        /// The pid of the address.
        expected: u32,
    },
    /// Ring count or size out of range, or sizes that do not add up to
    /// the file's length.
    #[error("inconsistent sizes: {0}")]
    BadSize(&'static str),
    /// No ring of the segment is for this process.
    #[error("no ring for this process")]
    NoRing,
    /// The ring for this process was used before.
    #[error("the ring for this process is not fresh")]
    RingInUse,
}

/// Bytes of a segment of `rings` rings of `ring_bytes` each; `None` on
/// overflow.
pub fn segment_len(rings: u32, ring_bytes: u64) -> Option<u64> {
    u64::from(rings)
        .checked_mul(CTL_BYTES.checked_add(ring_bytes)?)?
        .checked_add(HEADER_BYTES)
}

/// A 64-bit mix of the job key, stored in the header and used in names
/// (splitmix64's finaliser: every key bit reaches every output bit).
pub fn key_hash(key: u64) -> u64 {
    let mut z = key ^ 0x5054_4c53_484d_0001;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The name of the inbox of the endpoint (`pid`, `nonce`) in job `key`.
/// Another job's key gives another name, and the nonce (published only to
/// the job's peers) makes it unguessable.
pub fn inbox_name(key: u64, pid: u32, nonce: u128) -> CString {
    let s = format!("/ptl-shm.{pid}.{nonce:032x}.{:016x}", key_hash(key));
    // The format has no NUL byte.
    CString::new(s).unwrap_or_default()
}

/// What an opener expects of an inbox.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// The job key.
    pub job_key: u64,
    /// The creator's operating-system pid (from its address).
    pub creator_pid: u32,
}

/// Check a header against the file's length and the expectations. Returns
/// `(ring_count, ring_bytes)`; `Ok(None)` if the creator has not finished
/// writing it (no magic yet).
pub fn validate(
    h: &SegHeader,
    file_len: u64,
    want: &Expect,
) -> Result<Option<(u32, u64)>, SegmentError> {
    // Acquire: the creator stores the magic last, with Release.
    let magic = h.magic.load(Ordering::Acquire);
    if magic == 0 {
        return Ok(None);
    }
    if magic != MAGIC {
        return Err(SegmentError::BadMagic(magic));
    }
    let v = h.version.load(Ordering::Relaxed);
    if v != VERSION {
        return Err(SegmentError::BadVersion(v));
    }
    if h.key_hash.load(Ordering::Relaxed) != key_hash(want.job_key) {
        return Err(SegmentError::ForeignJob);
    }
    let found = h.creator_pid.load(Ordering::Relaxed);
    if found != want.creator_pid {
        return Err(SegmentError::WrongCreator {
            found,
            expected: want.creator_pid,
        });
    }
    let rings = h.ring_count.load(Ordering::Relaxed);
    if rings == 0 || rings > MAX_RINGS {
        return Err(SegmentError::BadSize("ring count"));
    }
    let ring_bytes = h.ring_bytes.load(Ordering::Relaxed);
    if !(MIN_RING..=MAX_RING).contains(&ring_bytes) || ring_bytes % 64 != 0 {
        return Err(SegmentError::BadSize("ring size"));
    }
    let total = segment_len(rings, ring_bytes).ok_or(SegmentError::BadSize("overflow"))?;
    if total != h.total_len.load(Ordering::Relaxed) || total != file_len {
        return Err(SegmentError::BadSize("length"));
    }
    Ok(Some((rings, ring_bytes)))
}

/// A mapped inbox (our own, or a peer's).
pub struct Segment {
    base: *mut u8,
    len: usize,
    rings: u32,
    ring_bytes: u64,
    /// The object's name, for unlinking.
    pub name: CString,
    /// [`bell_addr`] of the name, made once: producers ring it from the
    /// send path.
    bell: Option<std::os::unix::net::SocketAddr>,
}

// SAFETY: the mapping is shared memory accessed only through atomics and
// the ring protocol; it stays mapped until the `Segment` is dropped.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("len", &self.len)
            .finish()
    }
}

/// Why [`Segment::open`] did not return a segment.
#[derive(Debug)]
pub enum OpenError {
    /// The object does not exist yet, or its creator has not finished it.
    NotYet,
    /// The object exists but is not an acceptable inbox.
    Refused(SegmentError),
    /// A system call failed.
    Io(io::Error),
}

/// Run a libc call returning -1 on error.
pub(crate) fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An open descriptor, closed on drop.
pub(crate) struct Fd(pub(crate) libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

pub(crate) fn map(fd: &Fd, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh shared mapping of an open descriptor; the kernel
    // picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// The doorbell socket address of the inbox `name` (see
/// [`Segment::bell_addr`]).
fn bell_addr(name: &CString) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    let mut a = b"ptl-bell".to_vec();
    a.extend_from_slice(name.as_bytes());
    std::os::unix::net::SocketAddr::from_abstract_name(a)
}

/// Remove a shared-memory name; a name already gone is fine.
pub fn unlink(name: &CString) {
    // SAFETY: a NUL-terminated name.
    unsafe { libc::shm_unlink(name.as_ptr()) };
    crate::names::forget(name);
}

impl Segment {
    /// Create the inbox `name` with one ring per sender in `senders`
    /// (Portals id, operating-system pid), mode 0600, failing if the name
    /// exists.
    pub fn create(
        name: CString,
        job_key: u64,
        ring_bytes: u64,
        senders: &[(ProcessId, u32)],
    ) -> io::Result<Segment> {
        let rings = u32::try_from(senders.len())
            .ok()
            .filter(|&n| n <= MAX_RINGS)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too many peers"))?;
        let len = segment_len(rings, ring_bytes)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
        // SAFETY: a NUL-terminated name; the flags create a new object.
        let fd = Fd(check(unsafe {
            libc::shm_open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        })?);
        crate::names::track(&name);
        let made = (|| {
            // SAFETY: our own descriptor.
            check(unsafe { libc::ftruncate(fd.0, len as libc::off_t) })?;
            map(&fd, len)
        })();
        let base = match made {
            Ok(b) => b,
            Err(e) => {
                unlink(&name);
                return Err(e);
            }
        };
        let seg = Segment {
            base,
            len,
            rings,
            ring_bytes,
            bell: bell_addr(&name).ok(),
            name,
        };
        let h = seg.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.ring_count.store(rings, Ordering::Relaxed);
        h.key_hash.store(key_hash(job_key), Ordering::Relaxed);
        h.creator_pid.store(std::process::id(), Ordering::Relaxed);
        h.ring_bytes.store(ring_bytes, Ordering::Relaxed);
        h.total_len.store(len as u64, Ordering::Relaxed);
        for (i, (id, os_pid)) in senders.iter().enumerate() {
            let c = seg.ctl(i);
            c.owner_nid.store(id.nid, Ordering::Relaxed);
            c.owner_pid.store(id.pid, Ordering::Relaxed);
            c.owner_os_pid.store(*os_pid, Ordering::Relaxed);
        }
        // Release: every field above before the magic that validates them.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Open and validate the inbox `name` of another process.
    pub fn open(name: &CString, want: &Expect) -> Result<Segment, OpenError> {
        // SAFETY: a NUL-terminated name.
        let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOENT) => OpenError::NotYet,
                _ => OpenError::Io(e),
            });
        }
        let fd = Fd(fd);
        // SAFETY: `st` is plain data the kernel fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our descriptor, a valid out-pointer.
        check(unsafe { libc::fstat(fd.0, &mut st) }).map_err(OpenError::Io)?;
        let file_len = st.st_size as u64;
        if file_len < HEADER_BYTES {
            // Created, not sized yet.
            return Err(OpenError::NotYet);
        }
        let len = usize::try_from(file_len)
            .map_err(|_| OpenError::Refused(SegmentError::BadSize("length")))?;
        let base = map(&fd, len).map_err(OpenError::Io)?;
        let mut seg = Segment {
            base,
            len,
            rings: 0,
            ring_bytes: 0,
            name: name.clone(),
            bell: bell_addr(name).ok(),
        };
        match validate(seg.header(), file_len, want) {
            Ok(Some((rings, ring_bytes))) => {
                seg.rings = rings;
                seg.ring_bytes = ring_bytes;
                Ok(seg)
            }
            Ok(None) => Err(OpenError::NotYet),
            Err(e) => Err(OpenError::Refused(e)),
        }
    }

    /// The abstract-namespace address of the owner's doorbell socket,
    /// derived from the segment's name (never read from the segment: a
    /// peer cannot point our wake-ups elsewhere).
    pub fn bell_addr(&self) -> Option<&std::os::unix::net::SocketAddr> {
        self.bell.as_ref()
    }

    /// The header.
    pub fn header(&self) -> &SegHeader {
        // SAFETY: the mapping is at least HEADER_BYTES long (checked or
        // created so) and page-aligned; all fields are atomics or padding.
        unsafe { &*(self.base as *const SegHeader) }
    }

    /// Number of rings.
    pub fn rings(&self) -> usize {
        self.rings as usize
    }

    fn ring_off(&self, i: usize) -> usize {
        HEADER_BYTES as usize + i * (CTL_BYTES + self.ring_bytes) as usize
    }

    /// Ring `i`'s control block. Panics if `i` is out of range (a bug here,
    /// not a peer's doing: indices come from our own checks).
    pub fn ctl(&self, i: usize) -> &RingCtl {
        assert!(i < self.rings as usize, "ring index out of range");
        // SAFETY: `validate`/`create` established that every ring's control
        // block and data lie inside the mapping; offsets are 64-aligned.
        unsafe { &*(self.base.add(self.ring_off(i)) as *const RingCtl) }
    }

    /// Ring `i`'s pointers, for a producer or consumer.
    pub fn ring(&self, i: usize) -> RingPtrs {
        let c = self.ctl(i);
        RingPtrs {
            tail: &c.tail,
            head: &c.head,
            // SAFETY: inside the mapping, as for `ctl`.
            data: unsafe { self.base.add(self.ring_off(i) + CTL_BYTES as usize) },
            cap: self.ring_bytes,
        }
    }

    /// The ring of `sender` in this (a peer's) inbox: the one whose control
    /// block names it, fresh. Exactly one must.
    pub fn find_ring(&self, sender: ProcessId) -> Result<usize, SegmentError> {
        let mut found = None;
        for i in 0..self.rings() {
            let c = self.ctl(i);
            if c.owner_nid.load(Ordering::Relaxed) == sender.nid
                && c.owner_pid.load(Ordering::Relaxed) == sender.pid
            {
                if found.is_some() {
                    return Err(SegmentError::NoRing);
                }
                found = Some(i);
            }
        }
        let i = found.ok_or(SegmentError::NoRing)?;
        let c = self.ctl(i);
        if c.tail.load(Ordering::Acquire) != 0 || c.probe_set.load(Ordering::Acquire) != 0 {
            return Err(SegmentError::RingInUse);
        }
        Ok(i)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: our mapping; nothing borrowed from it outlives the
        // segment (rings and views are owned next to it and dropped first).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh_name(tag: &str) -> CString {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        inbox_name(
            0x1234,
            std::process::id(),
            (u128::from(n) << 64) | tag.len() as u128 | 0xabc0_0000,
        )
    }

    fn want() -> Expect {
        Expect {
            job_key: 0x1234,
            creator_pid: std::process::id(),
        }
    }

    fn refused(name: &CString, w: &Expect) -> SegmentError {
        match Segment::open(name, w) {
            Err(OpenError::Refused(e)) => e,
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn a_created_inbox_opens_and_names_its_rings() {
        let name = fresh_name("ok");
        let ids = [(ProcessId::new(0, 1), 11), (ProcessId::new(0, 2), 22)];
        let seg = Segment::create(name.clone(), 0x1234, 4096, &ids).unwrap();
        let other = Segment::open(&name, &want()).unwrap();
        unlink(&name);
        assert_eq!(other.rings(), 2);
        assert_eq!(other.find_ring(ProcessId::new(0, 2)), Ok(1));
        assert_eq!(
            other.find_ring(ProcessId::new(0, 3)),
            Err(SegmentError::NoRing)
        );
        // Both mappings see the same memory.
        seg.ctl(1).tail.store(64, Ordering::Release);
        assert_eq!(other.ctl(1).tail.load(Ordering::Acquire), 64);
        assert_eq!(
            other.find_ring(ProcessId::new(0, 2)),
            Err(SegmentError::RingInUse)
        );
        assert!(
            Segment::create(name.clone(), 0x1234, 4096, &ids).is_ok(),
            "the name is free again once unlinked"
        );
        unlink(&name);
    }

    #[test]
    fn a_missing_or_unfinished_inbox_is_not_yet_there() {
        let name = fresh_name("missing");
        assert!(matches!(
            Segment::open(&name, &want()),
            Err(OpenError::NotYet)
        ));
        let seg =
            Segment::create(name.clone(), 0x1234, 4096, &[(ProcessId::new(0, 1), 1)]).unwrap();
        seg.header().magic.store(0, Ordering::Release);
        assert!(matches!(
            Segment::open(&name, &want()),
            Err(OpenError::NotYet)
        ));
        unlink(&name);
    }

    #[test]
    fn corrupted_or_foreign_headers_are_refused() {
        let name = fresh_name("bad");
        let seg =
            Segment::create(name.clone(), 0x1234, 4096, &[(ProcessId::new(0, 1), 1)]).unwrap();
        let h = seg.header();
        let foreign = Expect {
            job_key: 0x9999,
            ..want()
        };
        assert_eq!(refused(&name, &foreign), SegmentError::ForeignJob);
        let other_creator = Expect {
            creator_pid: 1,
            ..want()
        };
        assert!(matches!(
            refused(&name, &other_creator),
            SegmentError::WrongCreator { .. }
        ));
        h.magic.store(0x4141, Ordering::Release);
        assert_eq!(refused(&name, &want()), SegmentError::BadMagic(0x4141));
        h.magic.store(MAGIC, Ordering::Release);
        h.version.store(9, Ordering::Relaxed);
        assert_eq!(refused(&name, &want()), SegmentError::BadVersion(9));
        h.version.store(VERSION, Ordering::Relaxed);
        // Sizes larger than the file.
        h.ring_bytes.store(1 << 20, Ordering::Relaxed);
        h.total_len
            .store(segment_len(1, 1 << 20).unwrap(), Ordering::Relaxed);
        assert_eq!(refused(&name, &want()), SegmentError::BadSize("length"));
        h.ring_bytes.store(4096, Ordering::Relaxed);
        h.ring_count.store(u32::MAX, Ordering::Relaxed);
        assert_eq!(refused(&name, &want()), SegmentError::BadSize("ring count"));
        h.ring_count.store(3, Ordering::Relaxed);
        assert_eq!(refused(&name, &want()), SegmentError::BadSize("length"));
        h.ring_count.store(1, Ordering::Relaxed);
        h.ring_bytes.store(4097, Ordering::Relaxed);
        assert_eq!(refused(&name, &want()), SegmentError::BadSize("ring size"));
        h.ring_bytes.store(4096, Ordering::Relaxed);
        h.total_len.store(1, Ordering::Relaxed);
        assert_eq!(refused(&name, &want()), SegmentError::BadSize("length"));
        h.total_len
            .store(segment_len(1, 4096).unwrap(), Ordering::Relaxed);
        assert!(Segment::open(&name, &want()).is_ok(), "repaired");
        unlink(&name);
    }

    #[test]
    fn names_differ_between_jobs_and_endpoints() {
        let a = inbox_name(1, 10, 5);
        assert_ne!(a, inbox_name(2, 10, 5));
        assert_ne!(a, inbox_name(1, 10, 6));
        assert_ne!(a, inbox_name(1, 11, 5));
        assert!(a.as_bytes().len() < 255 && a.as_bytes()[0] == b'/');
    }
}
