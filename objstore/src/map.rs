//! A read-only mapping of part of an object's file, so that a get's data
//! goes from the page cache to the socket without a copy into a buffer of
//! the server's ([`portals_rpc::Bulk::push_from`]).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// `[offset, offset + len)` of a file, mapped read-only; unmapped on drop.
#[derive(Debug)]
pub struct Mapped {
    /// Start of the mapping (page-aligned, at or before `offset`).
    base: NonNull<u8>,
    /// Bytes mapped from `base`.
    map_len: usize,
    /// Where `offset` lies in the mapping.
    skip: usize,
    len: usize,
}

// SAFETY: the mapping is read-only memory owned by this value alone;
// reading it from any thread is sound.
unsafe impl Send for Mapped {}
// SAFETY: as for `Send`: `&Mapped` only gives out shared reads.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Map `len` (> 0) bytes of `file` from `offset`.
    ///
    /// The file must not shrink below `offset + len` while mapped (reads
    /// past its end would raise `SIGBUS`): the store never changes an
    /// object's file once it is renamed in, a put makes a new file, so the
    /// caller passes a range inside the size the object had when opened.
    pub fn new(file: &File, offset: u64, len: usize) -> io::Result<Mapped> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096);
        let start = offset - offset % page;
        let skip = (offset - start) as usize;
        let map_len = skip
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty or huge mapping"))?;
        let at = libc::off_t::try_from(start)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: a fresh shared read-only mapping of an open file at a
        // page-aligned offset; the kernel picks the address, so no memory
        // of ours is touched. The result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                at,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        // The next chunks are read from the page cache as the transport
        // sends; tell the kernel so it maps ahead.
        // SAFETY: advice on the mapping just made; no memory effect.
        unsafe { libc::madvise(p, map_len, libc::MADV_SEQUENTIAL) };
        Ok(Mapped {
            base,
            map_len,
            skip,
            len,
        })
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `base..base + map_len` is mapped readable until drop,
        // and `skip + len == map_len`; the file does not shrink under the
        // mapping (see `Mapped::new`).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.skip), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no slice of it
        // outlives `self` (they borrow it).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}
