//! Single-copy reads from another process's memory (`process_vm_readv`,
//! "cross-memory attach"). The kernel checks that this process may read
//! the other (same user, ptrace access mode); where it may not, the call
//! fails with `EPERM` and the pair falls back to copying through the ring.

use std::io;

/// Read up to `len` bytes at `remote` in process `pid` into `dst`. Returns
/// how many bytes were read (possibly fewer than asked).
///
/// # Safety
/// `dst .. dst + len` must be writable memory of this process that nothing
/// else reads or writes meanwhile. `remote` is only interpreted by the
/// kernel, in the other process: a bad address there is an `EFAULT`, never
/// an access here.
pub unsafe fn read(pid: u32, remote: u64, dst: *mut u8, len: usize) -> io::Result<usize> {
    if len == 0 {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: dst.cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: remote as usize as *mut libc::c_void,
        iov_len: len,
    };
    loop {
        // SAFETY: one local iovec over memory the caller vouches for; the
        // remote iovec is checked by the kernel against the other process.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Read from `remote` in process `pid`, contiguous there, into the local
/// pieces `local` in order (a scattered region of an iovec descriptor: the
/// kernel fills them straight from the other process, one call).
/// Returns how many bytes were read (possibly fewer than the pieces hold).
///
/// # Safety
/// Every piece of `local` must be writable memory of this process that
/// nothing else reads or writes meanwhile; `remote` is as for [`read`].
pub unsafe fn read_scattered(pid: u32, remote: u64, local: &[libc::iovec]) -> io::Result<usize> {
    let len: usize = local.iter().map(|v| v.iov_len).sum();
    if len == 0 {
        return Ok(0);
    }
    let remote = libc::iovec {
        iov_base: remote as usize as *mut libc::c_void,
        iov_len: len,
    };
    loop {
        // SAFETY: local iovecs over memory the caller vouches for; the
        // remote iovec is checked by the kernel against the other process.
        let n = unsafe {
            libc::process_vm_readv(
                pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                &remote,
                1,
                0,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether `pid` can be read single-copy: read the `u64` it published at
/// `addr` and compare with `value`.
pub fn probe(pid: u32, addr: u64, value: u64) -> io::Result<bool> {
    let mut got = 0u64;
    // SAFETY: `got` is a local of exactly 8 bytes.
    let n = unsafe { read(pid, addr, (&mut got as *mut u64).cast(), 8)? };
    Ok(n == 8 && got == value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_can_read_itself() {
        let word = 0x1122_3344_5566_7788u64;
        let addr = &word as *const u64 as u64;
        match probe(std::process::id(), addr, word) {
            Ok(ok) => assert!(ok),
            // Kernels without CMA, or sandboxes that forbid it.
            Err(e) => eprintln!("process_vm_readv unavailable here: {e}"),
        }
        assert!(!probe(std::process::id(), addr, 1).unwrap_or(false));
    }

    #[test]
    fn a_scattered_read_fills_the_pieces_in_order() {
        let src: Vec<u8> = (0..10).collect();
        let (mut a, mut b) = ([0u8; 3], [0u8; 7]);
        let local = [
            libc::iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            },
        ];
        // SAFETY: `a` and `b` are locals nobody else touches.
        match unsafe { read_scattered(std::process::id(), src.as_ptr() as u64, &local) } {
            Ok(n) => {
                assert_eq!(n, 10);
                assert_eq!((a, b), ([0, 1, 2], [3, 4, 5, 6, 7, 8, 9]));
            }
            Err(e) => eprintln!("process_vm_readv unavailable here: {e}"),
        }
    }
}
