//! Shared-memory windows (`MPI_Win_allocate_shared`,
//! `MPI_Win_shared_query`).
//!
//! Every rank's part lies in one POSIX shared-memory object, contiguously
//! in rank order (rank i's part follows rank i−1's, MPI's default
//! `alloc_shared_noncontig = false`). The communicator's rank 0 creates it
//! under an unguessable name (its pid and 128 random bits, broadcast to
//! the others; mode 0600), every rank maps it, and once all have mapped
//! it (or failed) rank 0 removes the name, so a job that crashes later
//! leaves nothing in `/dev/shm`.
//!
//! Each rank's part is also its ordinary window memory, exposed on portal
//! 6 like an [`allocate_window`](super::CommunicatorWindows::allocate_window)'s,
//! so puts, gets, accumulates and locks work on it as on any window.
//! [`Window::shared_query`] gives direct load/store access to any rank's
//! part through a [`SharedRegion`]: other processes (and the engine) write
//! that memory at any time, so no `&[T]`/`&mut [T]` is handed out; element
//! loads and stores are atomic ([`SharedRegion::load`],
//! [`SharedRegion::store`]), bulk copies are `unsafe` and follow MPI's
//! rules (synchronise with `sync`, locks, fences or barriers).
//!
//! Creation is collective and decides collectively: the ranks exchange
//! their sizes and a hash of their host identity
//! ([`portals_runtime::host::host_id`], which `PTL_HOST_ID` overrides),
//! and if any rank is on another host every rank returns
//! [`MpiError::RmaUnsupported`]; if creating or mapping fails anywhere,
//! every rank returns [`MpiError::RmaFailed`] naming the rank. The
//! transport does not matter: ranks on one host share the object whether
//! their engine traffic runs over shared memory or sockets.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use nal_shm::{mapping_name, random_nonce, unlink_mapping, ShmMapping};

use crate::collective::{CommunicatorCollectives, Root};

use crate::comm::{Communicator, Rank, SimpleCommunicator};
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

use super::atomic::AtomicElement;

/// The mapped object and where each rank's part starts in it.
pub(crate) struct SharedSeg {
    pub(crate) map: ShmMapping,
    /// Byte offset of each rank's part; one more entry: the total.
    pub(crate) offsets: Vec<usize>,
}

impl SharedSeg {
    /// Rank `r`'s part: its first byte and its length in bytes.
    pub(crate) fn part(&self, r: usize) -> Option<(*mut u8, usize)> {
        let (start, end) = (*self.offsets.get(r)?, *self.offsets.get(r + 1)?);
        // SAFETY: `offsets` are prefix sums ending at the mapping's length
        // (checked at creation), so `start` is within it or one past.
        Some((unsafe { self.map.base().add(start) }, end - start))
    }
}

/// A stable 64-bit hash of a host identity (FNV-1a): equal identities
/// hash equally in every process of the build.
pub(crate) fn host_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Create (rank 0) or map (the others) the shared object of a window of
/// `len` elements here. Collective over `comm`; every rank gets the same
/// verdict.
pub(crate) fn map_segment<T: Equivalence>(
    comm: &SimpleCommunicator,
    len: usize,
) -> Result<SharedSeg> {
    let n = comm.size() as usize;
    let bytes = len
        .checked_mul(std::mem::size_of::<T>())
        .map_or(u64::MAX, |b| b as u64);
    let host = host_hash(&portals_runtime::host::host_id());
    let mut all = vec![0u64; 2 * n];
    comm.all_gather_into(&[bytes, host][..], &mut all[..])?;
    // Everyone decides from the same gathered data: no extra round.
    if let Some(r) = (0..n).find(|&r| all[2 * r + 1] != all[1]) {
        return Err(MpiError::RmaUnsupported(format!(
            "a shared window needs every rank on one host; rank {r} is on another host than rank 0"
        )));
    }
    let mut offsets = Vec::with_capacity(n + 1);
    let mut total = 0usize;
    offsets.push(0);
    for r in 0..n {
        total = usize::try_from(all[2 * r])
            .ok()
            .and_then(|b| total.checked_add(b))
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(|| {
                MpiError::RmaUnsupported(format!(
                    "a shared window of this size (rank {r}'s part overflows it)"
                ))
            })?;
        offsets.push(total);
    }
    // Rank 0 creates the object and tells the others its name: status
    // (0 = created), nonce low and high halves, its OS pid.
    let mut msg = [0u64; 4];
    let mut mapped: Option<(std::ffi::CString, Option<ShmMapping>)> = None;
    if comm.rank() == 0 {
        let pid = std::process::id();
        let made = random_nonce().and_then(|nonce| {
            let name = mapping_name(pid, nonce);
            ShmMapping::create(&name, total).map(|m| (name, m, nonce))
        });
        match made {
            Ok((name, m, nonce)) => {
                msg = [0, nonce as u64, (nonce >> 64) as u64, u64::from(pid)];
                mapped = Some((name, Some(m)));
            }
            Err(e) => {
                tracing::warn!(error = %e, "creating a shared window's memory failed");
                msg[0] = 1;
            }
        }
    }
    if let Err(e) = comm.process_at_rank(0).broadcast_into(&mut msg[..]) {
        if let Some((name, _)) = &mapped {
            unlink_mapping(name);
        }
        return Err(e);
    }
    if comm.rank() != 0 && msg[0] == 0 {
        let nonce = u128::from(msg[1]) | (u128::from(msg[2]) << 64);
        // A pid that does not fit names no object: the open fails.
        let name = mapping_name(u32::try_from(msg[3]).unwrap_or(0), nonce);
        let m = ShmMapping::open(&name, total)
            .inspect_err(|e| tracing::warn!(error = %e, "mapping a shared window's memory failed"))
            .ok();
        mapped = Some((name, m));
    }
    let ok = [u64::from(matches!(mapped, Some((_, Some(_)))))];
    let mut oks = vec![0u64; n];
    let gathered = comm.all_gather_into(&ok[..], &mut oks[..]);
    // Every rank has mapped the object or given up: its name can go.
    if comm.rank() == 0 {
        if let Some((name, _)) = &mapped {
            unlink_mapping(name);
        }
    }
    gathered?;
    if let Some(r) = oks.iter().position(|&o| o == 0) {
        return Err(MpiError::RmaFailed {
            rank: r as Rank,
            why: "it could not create or map the shared window's memory".into(),
        });
    }
    match mapped {
        Some((_, Some(map))) => Ok(SharedSeg { map, offsets }),
        _ => Err(MpiError::RmaFailed {
            rank: comm.rank(),
            why: "it could not map the shared window's memory".into(),
        }),
    }
}

/// Direct access to one rank's part of a shared window
/// ([`Window::shared_query`](super::Window::shared_query)): `len`
/// elements of `T` at a pointer valid while the window lives.
///
/// Other ranks' processes, and this process's engine serving remote
/// operations, may write these elements at any time, so Rust references
/// to them are never formed. Element loads and stores
/// ([`load`](Self::load), [`store`](Self::store)) are atomic and safe;
/// bulk copies ([`copy_to`](Self::copy_to), [`copy_from`](Self::copy_from))
/// are plain memory copies and `unsafe`: as in MPI, the caller orders
/// conflicting accesses with the window's synchronisation (a barrier or
/// fence between a store and another rank's load, a lock, and
/// [`Window::sync`](super::Window::sync) in a passive-target epoch).
/// Any bit pattern read is a valid `T` (`T` is plain data), so a racing
/// write gives a wrong value, never an invalid one.
pub struct SharedRegion<'w, T> {
    ptr: *mut T,
    len: usize,
    /// The rank whose part this is (for errors).
    rank: Rank,
    _w: PhantomData<&'w T>,
}

impl<T> std::fmt::Debug for SharedRegion<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("rank", &self.rank)
            .finish()
    }
}

impl<'w, T: Equivalence> SharedRegion<'w, T> {
    /// Rank `rank`'s part: `len` elements at `ptr`, valid for `'w`.
    pub(crate) fn new(ptr: *mut T, len: usize, rank: Rank) -> Self {
        SharedRegion {
            ptr,
            len,
            rank,
            _w: PhantomData,
        }
    }

    /// Elements of the part.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the part has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element, in this process's mapping (`MPI_Win_shared_query`'s
    /// base pointer). Valid for [`len`](Self::len) elements while the
    /// window lives; see the type's docs for the rules on using it.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    fn check(&self, disp: usize, n: usize) -> Result<()> {
        if disp.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(MpiError::RmaRange {
                rank: self.rank,
                disp,
                len: n,
                size: self.len,
            });
        }
        Ok(())
    }

    /// Copy elements `disp..disp + buf.len()` of the part into `buf`.
    ///
    /// # Safety
    /// No one (another process, this process's engine serving a remote
    /// operation, another thread) writes those elements during the copy:
    /// the caller synchronised as MPI requires (for example a barrier
    /// after the last store, or an exclusive lock on the owner).
    pub unsafe fn copy_to(&self, disp: usize, buf: &mut [T]) -> Result<()> {
        self.check(disp, buf.len())?;
        // SAFETY: in range (checked); `buf` is our own memory, distinct
        // from the mapping; no concurrent writer by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(disp), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copy `data` into elements `disp..disp + data.len()` of the part.
    ///
    /// # Safety
    /// No one else reads or writes those elements during the copy (see
    /// [`copy_to`](Self::copy_to)).
    pub unsafe fn copy_from(&self, disp: usize, data: &[T]) -> Result<()> {
        self.check(disp, data.len())?;
        // SAFETY: in range (checked); `data` is distinct from the mapping;
        // no concurrent access by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(disp), data.len()) };
        Ok(())
    }
}

/// One element access as the atomic type of its width.
macro_rules! with_atomic {
    ($p:expr, $t:ty, |$a:ident: $at:ident, $u:ident| $body:expr) => {{
        match std::mem::size_of::<$t>() {
            1 => {
                type $u = u8;
                // SAFETY: see `atomic_ok`: in range, aligned, and the
                // mapping outlives the access.
                let $a = unsafe { AtomicU8::from_ptr($p.cast()) };
                $body
            }
            2 => {
                type $u = u16;
                // SAFETY: as above.
                let $a = unsafe { AtomicU16::from_ptr($p.cast()) };
                $body
            }
            4 => {
                type $u = u32;
                // SAFETY: as above.
                let $a = unsafe { AtomicU32::from_ptr($p.cast()) };
                $body
            }
            _ => {
                type $u = u64;
                // SAFETY: as above (`atomic_ok` admits only widths 1 to 8).
                let $a = unsafe { AtomicU64::from_ptr($p.cast()) };
                $body
            }
        }
    }};
}

impl<T: AtomicElement> SharedRegion<'_, T> {
    /// The address of element `i`, if it can be accessed atomically:
    /// in range and aligned to its width (parts start at multiples of the
    /// element size in a page-aligned mapping, so this holds wherever the
    /// width's alignment is the width).
    fn atomic_ok(&self, i: usize) -> Result<*mut T> {
        self.check(i, 1)?;
        // SAFETY: `i < len` (checked).
        let p = unsafe { self.ptr.add(i) };
        let w = std::mem::size_of::<T>();
        if !matches!(w, 1 | 2 | 4 | 8) || (p as usize) % w != 0 {
            return Err(MpiError::RmaUnsupported(format!(
                "atomic access to {w}-byte elements at this address"
            )));
        }
        Ok(p)
    }

    /// Element `i`, read atomically (sequentially consistent): whole,
    /// whatever other processes write meanwhile.
    pub fn load(&self, i: usize) -> Result<T> {
        let p = self.atomic_ok(i)?;
        with_atomic!(p, T, |a: A, U| {
            let v: U = a.load(Ordering::SeqCst);
            bytemuck::try_cast::<U, T>(v)
        })
        .map_err(|e| MpiError::RmaUnsupported(format!("atomic load: {e:?}")))
    }

    /// Store `v` into element `i` atomically (sequentially consistent).
    pub fn store(&self, i: usize, v: T) -> Result<()> {
        let p = self.atomic_ok(i)?;
        with_atomic!(p, T, |a: A, U| bytemuck::try_cast::<T, U>(v)
            .map(|u| a.store(u, Ordering::SeqCst)))
        .map_err(|e| MpiError::RmaUnsupported(format!("atomic store: {e:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two mappings of one object, as two processes would have.
    fn two_views(bytes: usize) -> (ShmMapping, ShmMapping) {
        let name = mapping_name(std::process::id(), random_nonce().expect("nonce"));
        let a = ShmMapping::create(&name, bytes).expect("create");
        let b = ShmMapping::open(&name, bytes).expect("open");
        unlink_mapping(&name);
        (a, b)
    }

    fn roundtrip<T: AtomicElement + PartialEq + std::fmt::Debug>(vals: [T; 3]) {
        let (a, b) = two_views(3 * std::mem::size_of::<T>());
        let (ra, rb) = (
            SharedRegion::<T>::new(a.base().cast(), 3, 0),
            SharedRegion::<T>::new(b.base().cast(), 3, 0),
        );
        for (i, v) in vals.into_iter().enumerate() {
            ra.store(i, v).expect("store");
        }
        for (i, v) in vals.into_iter().enumerate() {
            assert_eq!(rb.load(i).expect("load"), v);
        }
        assert!(matches!(rb.load(3), Err(MpiError::RmaRange { .. })));
        assert!(matches!(
            ra.store(3, vals[0]),
            Err(MpiError::RmaRange { .. })
        ));
    }

    #[test]
    fn stores_through_one_mapping_are_loaded_through_another() {
        roundtrip::<u8>([1, 0xff, 7]);
        roundtrip::<i16>([-2, 300, i16::MIN]);
        roundtrip::<f32>([1.5, -0.0, f32::MAX]);
        roundtrip::<f64>([2.25, f64::MIN_POSITIVE, -1e300]);
        roundtrip::<i64>([-1, i64::MAX, 0x0123_4567_89ab_cdef]);
    }

    #[test]
    fn bulk_copies_are_range_checked() {
        let (a, b) = two_views(8 * 4);
        let (ra, rb) = (
            SharedRegion::<u32>::new(a.base().cast(), 8, 0),
            SharedRegion::<u32>::new(b.base().cast(), 8, 0),
        );
        let mut back = [0u32; 3];
        // SAFETY: this thread alone uses the object.
        unsafe {
            ra.copy_from(5, &[9, 8, 7]).expect("copy in");
            rb.copy_to(5, &mut back).expect("copy out");
            assert!(matches!(
                ra.copy_from(6, &[1, 2, 3]),
                Err(MpiError::RmaRange { .. })
            ));
            assert!(matches!(
                rb.copy_to(usize::MAX, &mut back),
                Err(MpiError::RmaRange { .. })
            ));
        }
        assert_eq!(back, [9, 8, 7]);
    }

    #[test]
    fn host_hashes_tell_identities_apart() {
        assert_eq!(host_hash("hostA"), host_hash("hostA"));
        assert_ne!(host_hash("hostA"), host_hash("hostB"));
        assert_ne!(host_hash(""), host_hash("a"));
    }

    #[test]
    fn parts_follow_each_other() {
        let (a, _b) = two_views(24);
        let seg = SharedSeg {
            map: a,
            offsets: vec![0, 16, 16, 24],
        };
        let base = seg.map.base() as usize;
        let parts: Vec<_> = (0..3)
            .map(|r| seg.part(r).map(|(p, n)| (p as usize - base, n)))
            .collect();
        assert_eq!(parts, [Some((0, 16)), Some((16, 0)), Some((16, 8))]);
        assert!(seg.part(3).is_none());
    }
}
