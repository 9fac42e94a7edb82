//! Dynamic windows (`MPI_Win_create_dynamic`, `MPI_Win_attach`,
//! `MPI_Win_detach`).
//!
//! Each rank exposes a *region table* on the window's table entry: 64
//! slots of (address, bytes), little-endian, zero bytes for a free slot.
//! Each attached region has an entry of its own whose match bits carry
//! its address in the low 48 bits (user-space addresses fit). An origin
//! addresses a dynamic window by address, as MPI does: it looks the
//! address up in its copy of the target's table, reading the table afresh
//! (a get) when it has none or the address is not in it, and sends to the
//! region's entry with the offset from its start. A region detached after
//! an origin read the table is simply no longer matched: the target
//! refuses the operation and the origin gets `RmaFailed`, never a write
//! elsewhere. The owner updates its table through the engine, which
//! serialises the update against gets of it.
//!
//! `attach` takes the region's memory by value and `detach` gives it
//! back: a borrowed region could be freed by leaking a guard, while the
//! engine still writes into it.

use portals::Unlink;
use portals::{MdDesc, MdHandle, MdOptions, MeHandle, Position, ProcessId, PtlError, Remote};

use super::ops::{Loc, OneOp};
use super::{WinCore, Window, K_REGION, K_TABLE, RETRY, WIN_PT};
use crate::bits;
use crate::comm::{Rank, SimpleCommunicator};
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

/// Regions a rank can attach at once.
pub const MAX_REGIONS: usize = 64;
const SLOT: usize = 16;
const ADDR_MASK: u64 = (1 << 48) - 1;

/// An attached region: its memory (from `Box::into_raw`), its entry and
/// descriptor, and its table slot.
pub(super) struct Region<T> {
    ptr: *mut [T],
    base: u64,
    bytes: u64,
    me: MeHandle,
    md: MdHandle,
    slot: usize,
}

impl WinCore {
    fn region_bits(&self, base: u64) -> u64 {
        bits::encode(K_REGION, self.comm.inner.ctx, 0, 0) | (base & ADDR_MASK)
    }

    fn table_bits(&self) -> u64 {
        bits::encode(K_TABLE, self.comm.inner.ctx, 0, 0)
    }

    /// Read rank `t`'s region table.
    fn read_table(&self, t: u32) -> Result<Vec<(u64, u64)>> {
        let ni = self.ni();
        let mut op = OneOp::new(ni)?;
        let md = op.bind(MdOptions::CT_REPLY, vec![0u8; MAX_REGIONS * SLOT])?;
        let remote = Remote::new(self.ids[t as usize], WIN_PT, self.table_bits());
        ni.get(md, &remote).map_err(MpiError::Portals)?;
        op.wait(1, t)?;
        let mut raw = vec![0u8; MAX_REGIONS * SLOT];
        ni.md_read(md, 0, &mut raw).map_err(MpiError::Portals)?;
        Ok(raw
            .chunks_exact(SLOT)
            .map(|c| {
                let mut a = [0u8; 8];
                let mut b = [0u8; 8];
                a.copy_from_slice(&c[..8]);
                b.copy_from_slice(&c[8..]);
                (u64::from_le_bytes(a), u64::from_le_bytes(b))
            })
            .filter(|&(_, len)| len > 0)
            .collect())
    }

    /// Where `n` elements of `esize` bytes at address `addr` of rank `t`
    /// are: `RmaRange` if no region of `t` holds them all.
    pub(super) fn resolve(&self, t: u32, addr: usize, n: usize, esize: usize) -> Result<Loc> {
        let range = || MpiError::RmaRange {
            rank: t as Rank,
            disp: addr,
            len: n,
            size: 0,
        };
        let len = n.checked_mul(esize).ok_or_else(range)? as u64;
        let start = addr as u64;
        let end = start.checked_add(len).ok_or_else(range)?;
        let find = |table: &[(u64, u64)]| {
            table
                .iter()
                .find(|&&(b, l)| start >= b && end <= b + l)
                .map(|&(b, _)| Loc {
                    bits: self.region_bits(b),
                    off: start - b,
                })
        };
        let cached = self.tables.lock().unwrap_or_else(|p| p.into_inner())[t as usize].clone();
        if let Some(loc) = cached.as_deref().and_then(find) {
            return Ok(loc);
        }
        let fresh = self.read_table(t)?;
        let loc = find(&fresh);
        self.tables.lock().unwrap_or_else(|p| p.into_inner())[t as usize] = Some(fresh);
        loc.ok_or_else(range)
    }
}

impl<T: Equivalence> Window<'_, T> {
    /// Attach the region table entry of a dynamic window.
    pub(super) fn attach_table(&mut self, wcomm: &SimpleCommunicator) -> Result<()> {
        let ni = wcomm.inner.dev.job().ni();
        let bits = bits::encode(K_TABLE, wcomm.inner.ctx, 0, 0);
        let me = ni
            .me_attach(
                WIN_PT,
                ProcessId::ANY,
                bits,
                0,
                Unlink::Retain,
                Position::After,
            )
            .map_err(MpiError::Portals)?;
        let md = ni.md_attach(
            me,
            &MdDesc::new(MdOptions::OP_GET | MdOptions::MANAGE_REMOTE),
            vec![0u8; MAX_REGIONS * SLOT],
            Unlink::Retain,
        );
        match md {
            Ok(md) => {
                self.table = Some((me, md));
                Ok(())
            }
            Err(e) => {
                let _ = ni.me_unlink(me);
                Err(MpiError::Portals(e))
            }
        }
    }

    fn write_slot(&self, slot: usize, base: u64, bytes: u64) -> Result<()> {
        let Some((_, md)) = self.table else {
            return Err(MpiError::RmaUnsupported(
                "attach and detach need a dynamic window".into(),
            ));
        };
        let mut raw = [0u8; SLOT];
        raw[..8].copy_from_slice(&base.to_le_bytes());
        raw[8..].copy_from_slice(&bytes.to_le_bytes());
        let ni = self.core.ni();
        loop {
            match ni.md_write(md, (slot * SLOT) as u64, &raw) {
                Err(PtlError::MdInUse) => std::thread::sleep(RETRY),
                r => return r.map_err(MpiError::Portals),
            }
        }
    }

    /// Attach `mem` to this rank's part of a dynamic window
    /// (`MPI_Win_attach`) and return its address, which origins use as the
    /// displacement of its first element (send it to them). The window
    /// owns the memory until [`Window::detach`] gives it back.
    pub fn attach(&self, mem: Vec<T>) -> Result<usize> {
        if self.table.is_none() {
            return Err(MpiError::RmaUnsupported(
                "attach needs a dynamic window (create_dynamic_window)".into(),
            ));
        }
        if mem.is_empty() {
            return Err(MpiError::InvalidBuffer("attach of an empty region"));
        }
        let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = (0..MAX_REGIONS).find(|s| regions.iter().all(|r| r.slot != *s)) else {
            return Err(MpiError::RmaUnsupported(format!(
                "more than {MAX_REGIONS} regions attached at once"
            )));
        };
        let bytes = (mem.len() * std::mem::size_of::<T>()) as u64;
        let ptr = Box::into_raw(mem.into_boxed_slice());
        let base = ptr as *mut T as usize as u64;
        let give_back = |ptr: *mut [T]| {
            // SAFETY: `ptr` came from `Box::into_raw` above and no entry
            // over it is linked (never attached, or unlinked).
            drop(unsafe { Box::from_raw(ptr) });
        };
        if base > ADDR_MASK {
            give_back(ptr);
            return Err(MpiError::RmaUnsupported(
                "a region above the 48-bit address space".into(),
            ));
        }
        let ni = self.core.ni();
        let me = match ni.me_attach(
            WIN_PT,
            ProcessId::ANY,
            self.core.region_bits(base),
            0,
            Unlink::Retain,
            Position::After,
        ) {
            Ok(me) => me,
            Err(e) => {
                give_back(ptr);
                return Err(MpiError::Portals(e));
            }
        };
        let opts = MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE;
        // SAFETY: the window owns the memory (from `Box::into_raw`) until
        // the entry is unlinked (`detach`, `detach_all`), which is retried
        // while a transfer uses it; a region that cannot be unlinked is
        // leaked, never freed.
        let md = unsafe {
            ni.md_attach_raw(
                me,
                &MdDesc::new(opts),
                ptr as *mut u8,
                bytes as usize,
                Unlink::Retain,
            )
        };
        let md = match md {
            Ok(md) => md,
            Err(e) => {
                if ni.me_unlink(me).is_ok() {
                    give_back(ptr);
                }
                return Err(MpiError::Portals(e));
            }
        };
        regions.push(Region {
            ptr,
            base,
            bytes,
            me,
            md,
            slot,
        });
        drop(regions);
        self.write_slot(slot, base, bytes)?;
        Ok(base as usize)
    }

    /// Detach the region attached at `address` (`MPI_Win_detach`) and give
    /// its memory back. Origins that still send to it are refused.
    pub fn detach(&self, address: usize) -> Result<Vec<T>> {
        let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = regions.iter().position(|r| r.base == address as u64) else {
            return Err(MpiError::InvalidBuffer(
                "no region is attached at that address",
            ));
        };
        let slot = regions[i].slot;
        self.write_slot(slot, 0, 0)?;
        let ni = self.core.ni();
        loop {
            match ni.me_unlink(regions[i].me) {
                Ok(_) | Err(PtlError::InvalidHandle { .. }) => break,
                Err(PtlError::MdInUse) => std::thread::sleep(RETRY),
                Err(e) => {
                    let r = &regions[i];
                    let _ = self.write_slot(slot, r.base, r.bytes);
                    return Err(MpiError::Portals(e));
                }
            }
        }
        let r = regions.remove(i);
        // SAFETY: from `Box::into_raw` in `attach`; its entry is unlinked.
        Ok(unsafe { Box::from_raw(r.ptr) }.into_vec())
    }

    /// Unlink every region (the window goes away); a region whose entry
    /// cannot be unlinked is leaked.
    pub(super) fn detach_all(&self) {
        let ni = self.core.ni();
        let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        for r in regions.drain(..) {
            let mut tries = 0u32;
            loop {
                match ni.me_unlink(r.me) {
                    Ok(_) | Err(PtlError::InvalidHandle { .. }) => {
                        // SAFETY: from `Box::into_raw`; the entry is gone.
                        drop(unsafe { Box::from_raw(r.ptr) });
                        break;
                    }
                    Err(_) if tries < 50_000 => {
                        tries += 1;
                        std::thread::sleep(RETRY);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "a region cannot be unlinked: leaked");
                        break;
                    }
                }
            }
        }
    }

    /// The descriptor and offset of `n` elements at address `addr` of
    /// this rank's regions.
    pub(super) fn local_region(&self, addr: usize, n: usize) -> Result<(MdHandle, u64)> {
        let len = (n * std::mem::size_of::<T>()) as u64;
        let start = addr as u64;
        let regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        regions
            .iter()
            .find(|r| start >= r.base && start.saturating_add(len) <= r.base + r.bytes)
            .map(|r| (r.md, start - r.base))
            .ok_or(MpiError::RmaRange {
                rank: self.rank(),
                disp: addr,
                len: n,
                size: 0,
            })
    }
}
