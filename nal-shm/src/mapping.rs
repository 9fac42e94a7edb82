//! A plain shared-memory object of a given length, named, created by one
//! process and mapped by others: the memory of an MPI shared window
//! (`MPI_Win_allocate_shared`). Unlike an inbox it has no header: its
//! contents are the application's, written by every process that maps
//! it, so this module only creates, opens (checking the length), maps and
//! unmaps.

use std::ffi::CString;
use std::io;

use crate::segment::{check, map, unlink, Fd};

/// The prefix of every shared-window object's name (after the `/`), so
/// that leftovers are recognisable in `/dev/shm`.
pub const MAPPING_PREFIX: &str = "ptl-win.";

/// The name of the shared-window object created by OS process `pid` with
/// `nonce` (128 random bits, told only to the window's ranks, so the name
/// cannot be guessed by another user's process).
pub fn mapping_name(pid: u32, nonce: u128) -> CString {
    let s = format!("/{MAPPING_PREFIX}{pid}.{nonce:032x}");
    // The format has no NUL byte.
    CString::new(s).unwrap_or_default()
}

/// 128 random bits from the kernel, for [`mapping_name`].
pub fn random_nonce() -> io::Result<u128> {
    crate::addr::random_nonce()
}

/// Remove the name of a shared-memory object (mapped processes keep the
/// memory); a name already gone is fine.
pub fn unlink_mapping(name: &CString) {
    unlink(name)
}

/// A shared mapping of a named shared-memory object, unmapped on drop.
pub struct ShmMapping {
    base: *mut u8,
    /// Bytes asked for.
    len: usize,
    /// Bytes mapped (at least one: `mmap` refuses zero).
    mapped: usize,
}

// SAFETY: the mapping is plain memory owned by this value; what callers do
// with the pointer is theirs to justify.
unsafe impl Send for ShmMapping {}
// SAFETY: `&self` only hands out the base pointer and the length.
unsafe impl Sync for ShmMapping {}

impl std::fmt::Debug for ShmMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmMapping")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

impl ShmMapping {
    /// Create the object `name` (mode 0600, failing if it exists) of
    /// `len` zeroed bytes and map it. On failure the name is removed.
    pub fn create(name: &CString, len: usize) -> io::Result<ShmMapping> {
        let mapped = len.max(1);
        let off = libc::off_t::try_from(mapped)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        // SAFETY: a NUL-terminated name; the flags create a new object.
        let fd = Fd(check(unsafe {
            libc::shm_open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        })?);
        crate::names::track(name);
        // SAFETY: our own descriptor.
        let made = check(unsafe { libc::ftruncate(fd.0, off) }).and_then(|_| map(&fd, mapped));
        match made {
            Ok(base) => Ok(ShmMapping { base, len, mapped }),
            Err(e) => {
                unlink(name);
                Err(e)
            }
        }
    }

    /// Open and map the object `name` another process created, refusing
    /// it unless it is exactly as long as a [`create`](Self::create) of
    /// `len` bytes made it.
    pub fn open(name: &CString, len: usize) -> io::Result<ShmMapping> {
        let mapped = len.max(1);
        // SAFETY: a NUL-terminated name.
        let fd = Fd(check(unsafe {
            libc::shm_open(name.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0)
        })?);
        // SAFETY: `st` is plain data the kernel fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our descriptor, a valid out-pointer.
        check(unsafe { libc::fstat(fd.0, &mut st) })?;
        if u64::try_from(st.st_size).ok() != Some(mapped as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared object is {} bytes, expected {mapped}", st.st_size),
            ));
        }
        let base = map(&fd, mapped)?;
        Ok(ShmMapping { base, len, mapped })
    }

    /// The first byte of the mapping (page-aligned).
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Bytes of the object as asked for (may be zero).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the object has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ShmMapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `mapped` bytes; nothing of ours uses
        // it any more (the owner drops this last).
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_shared_between_opens_and_the_name_goes_away() {
        let name = mapping_name(std::process::id(), random_nonce().expect("nonce"));
        let a = ShmMapping::create(&name, 100).expect("create");
        // The name exists once: a second create fails.
        assert!(ShmMapping::create(&name, 100).is_err());
        // Another length is refused.
        assert!(ShmMapping::open(&name, 4096).is_err());
        let b = ShmMapping::open(&name, 100).expect("open");
        unlink_mapping(&name);
        // SAFETY: both map the same 100 bytes; this thread alone uses them.
        unsafe {
            a.base().add(7).write_volatile(42);
            assert_eq!(b.base().add(7).read_volatile(), 42);
        }
        assert!(ShmMapping::open(&name, 100).is_err(), "unlinked");
        let z = ShmMapping::create(&name, 0).expect("zero-length object");
        assert!(z.is_empty());
        unlink_mapping(&name);
    }
}
