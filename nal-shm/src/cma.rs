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

/// Read the ranges `remote` of process `pid`, in order, into the local
/// pieces `local`, in order (either side may be scattered: an iovec
/// descriptor's segments; the kernel copies straight from one to the
/// other, one call). Returns how many bytes were read (possibly fewer than
/// either side holds).
///
/// # Safety
/// Every piece of `local` must be writable memory of this process that
/// nothing else reads or writes meanwhile; `remote` is as for [`read`].
pub unsafe fn read_vectored(
    pid: u32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
) -> io::Result<usize> {
    if local.iter().all(|v| v.iov_len == 0) {
        return Ok(0);
    }
    loop {
        // SAFETY: local iovecs over memory the caller vouches for; the
        // remote ones are checked by the kernel against the other process.
        let n = unsafe {
            libc::process_vm_readv(
                pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
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
    fn a_vectored_read_gathers_and_scatters_in_order() {
        let (x, y): ([u8; 4], [u8; 6]) = ([0, 1, 2, 3], [4, 5, 6, 7, 8, 9]);
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
        let remote = [
            libc::iovec {
                iov_base: x.as_ptr() as *mut libc::c_void,
                iov_len: x.len(),
            },
            libc::iovec {
                iov_base: y.as_ptr() as *mut libc::c_void,
                iov_len: y.len(),
            },
        ];
        // SAFETY: `a` and `b` are locals nobody else touches.
        match unsafe { read_vectored(std::process::id(), &local, &remote) } {
            Ok(n) => {
                assert_eq!(n, 10);
                assert_eq!((a, b), ([0, 1, 2], [3, 4, 5, 6, 7, 8, 9]));
            }
            Err(e) => eprintln!("process_vm_readv unavailable here: {e}"),
        }
    }
}
