//! Match entries and memory descriptors.
//!
//! Descriptors always use the engine's raw (zero-copy) attach: the memory
//! belongs to the C program, the engine reads and writes it in place, and
//! nothing is copied or freed by the library.

use std::ffi::c_int;

use ptl::{MdHandle, PortalIndex};

use crate::convert::{self, c_md, desc, guard, memory, non_null, out, process, rc, unlink, Mem};
use crate::state::{self, Iface, Kind};
use crate::types::*;

/// A new object's handle, or `PTL_NO_SPACE` (after undoing the creation)
/// if its key does not fit a C handle.
fn new_me(iface: &Iface, me: ptl::MeHandle) -> Result<ptl_handle_me_t, c_int> {
    iface.handle(Kind::Me, me.as_u64()).ok_or_else(|| {
        let _ = iface.ni().me_unlink(me);
        PTL_NO_SPACE
    })
}

fn new_md(iface: &Iface, md: MdHandle) -> Result<ptl_handle_md_t, c_int> {
    iface.handle(Kind::Md, md.as_u64()).ok_or_else(|| {
        let _ = iface.ni().md_unlink(md);
        PTL_NO_SPACE
    })
}

/// Create a match entry at the head (`PTL_INS_BEFORE`) or tail
/// (`PTL_INS_AFTER`) of portal `pt_index`'s match list.
///
/// # Safety
/// `me_handle` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlMEAttach(
    ni_handle: ptl_handle_ni_t,
    pt_index: ptl_pt_index_t,
    match_id: ptl_process_id_t,
    match_bits: ptl_match_bits_t,
    ignore_bits: ptl_match_bits_t,
    unlink_op: ptl_unlink_t,
    position: ptl_ins_pos_t,
    me_handle: *mut ptl_handle_me_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(me_handle)?;
        let me = rc(iface.ni().me_attach(
            PortalIndex(pt_index),
            process(match_id),
            match_bits,
            ignore_bits,
            unlink(unlink_op)?,
            convert::position(position)?,
        ))?;
        let h = new_me(&iface, me)?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(me_handle, h) }?;
        Ok(PTL_OK)
    })
}

/// Create a match entry on a portal index whose match list is empty;
/// the index is returned in `pt_index` (`PTL_PT_FULL` if none is free).
///
/// # Safety
/// `pt_index` and `me_handle` are valid for writes.
#[no_mangle]
pub unsafe extern "C" fn PtlMEAttachAny(
    ni_handle: ptl_handle_ni_t,
    pt_index: *mut ptl_pt_index_t,
    match_id: ptl_process_id_t,
    match_bits: ptl_match_bits_t,
    ignore_bits: ptl_match_bits_t,
    unlink_op: ptl_unlink_t,
    me_handle: *mut ptl_handle_me_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(pt_index)?;
        non_null(me_handle)?;
        let (pt, me) = iface
            .ni()
            .me_attach_any(
                process(match_id),
                match_bits,
                ignore_bits,
                unlink(unlink_op)?,
            )
            .map_err(|e| match e {
                ptl::PtlError::NoSpace { what, .. } if what.contains("portal") => PTL_PT_FULL,
                e => convert::code(&e),
            })?;
        let h = new_me(&iface, me)?;
        // SAFETY: both checked not NULL; the caller promised they are writable.
        unsafe {
            out(pt_index, pt.0)?;
            out(me_handle, h)?;
        }
        Ok(PTL_OK)
    })
}

/// Create a match entry just before or after the entry `base`.
///
/// # Safety
/// `me_handle` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlMEInsert(
    base: ptl_handle_me_t,
    match_id: ptl_process_id_t,
    match_bits: ptl_match_bits_t,
    ignore_bits: ptl_match_bits_t,
    unlink_op: ptl_unlink_t,
    position: ptl_ins_pos_t,
    me_handle: *mut ptl_handle_me_t,
) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Me, base)?;
        non_null(me_handle)?;
        let base = iface.ni().me_handle_from_u64(raw);
        let me = rc(iface.ni().me_insert(
            base,
            process(match_id),
            match_bits,
            ignore_bits,
            unlink(unlink_op)?,
            convert::position(position)?,
        ))?;
        let h = new_me(&iface, me)?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(me_handle, h) }?;
        Ok(PTL_OK)
    })
}

/// Unlink a match entry and its descriptor (`PTL_MD_IN_USE` while a
/// transfer uses the descriptor's memory). The memory is the program's
/// again once this returns `PTL_OK`.
#[no_mangle]
pub extern "C" fn PtlMEUnlink(me_handle: ptl_handle_me_t) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Me, me_handle)?;
        let me = iface.ni().me_handle_from_u64(raw);
        rc(iface.ni().me_unlink(me))?;
        Ok(PTL_OK)
    })
}

/// Attach a descriptor to a match entry. The memory is used in place
/// (zero-copy) until the descriptor is unlinked; see `ptl_md_t`.
///
/// # Safety
/// `md.start..md.start + md.length` (each segment, with `PTL_MD_IOVEC`,
/// whose array `md.start` points to) is valid for reads and writes, and
/// is not freed or touched by the program while a transfer may use it,
/// until the descriptor is unlinked. `md_handle` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlMDAttach(
    me_handle: ptl_handle_me_t,
    md: ptl_md_t,
    unlink_op: ptl_unlink_t,
    md_handle: *mut ptl_handle_md_t,
) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Me, me_handle)?;
        non_null(md_handle)?;
        let me = iface.ni().me_handle_from_u64(raw);
        let d = desc(&iface, &md)?;
        let u = unlink(unlink_op)?;
        let ni = iface.ni();
        // SAFETY: the caller promised that the iovec array (if any) is
        // readable.
        let h = match unsafe { memory(&iface, &md) }? {
            // SAFETY: the caller promised the region stays valid and
            // untouched by the program until the descriptor is unlinked,
            // which is what md_attach_raw requires.
            Mem::Flat(ptr, len) => rc(unsafe { ni.md_attach_raw(me, &d, ptr, len, u) })?,
            // SAFETY: as above, for every segment; the engine checks the
            // list (null or empty segments, overflow) before using it.
            Mem::Iovec(list) => rc(unsafe { ni.md_attach_iovec_raw(me, &d, &list, u) })?,
        };
        let h = new_md(&iface, h)?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(md_handle, h) }?;
        Ok(PTL_OK)
    })
}

/// Create a free-floating descriptor, for initiating operations. The
/// memory is used in place (zero-copy), as with `PtlMDAttach`.
///
/// # Safety
/// As for `PtlMDAttach`.
#[no_mangle]
pub unsafe extern "C" fn PtlMDBind(
    ni_handle: ptl_handle_ni_t,
    md: ptl_md_t,
    unlink_op: ptl_unlink_t,
    md_handle: *mut ptl_handle_md_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(md_handle)?;
        let d = desc(&iface, &md)?;
        let u = unlink(unlink_op)?;
        let ni = iface.ni();
        // SAFETY: the caller promised that the iovec array (if any) is
        // readable.
        let h = match unsafe { memory(&iface, &md) }? {
            // SAFETY: the caller promised the region stays valid and
            // untouched by the program until the descriptor is unlinked,
            // which is what md_bind_raw requires.
            Mem::Flat(ptr, len) => rc(unsafe { ni.md_bind_raw(&d, ptr, len, u) })?,
            // SAFETY: as above, for every segment.
            Mem::Iovec(list) => rc(unsafe { ni.md_bind_iovec_raw(&d, &list, u) })?,
        };
        let h = new_md(&iface, h)?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(md_handle, h) }?;
        Ok(PTL_OK)
    })
}

/// Unlink a descriptor (`PTL_MD_IN_USE` while a transfer uses its
/// memory). The memory is the program's again once this returns
/// `PTL_OK`.
#[no_mangle]
pub extern "C" fn PtlMDUnlink(md_handle: ptl_handle_md_t) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Md, md_handle)?;
        let md = iface.ni().md_handle_from_u64(raw);
        rc(iface.ni().md_unlink(md))?;
        Ok(PTL_OK)
    })
}

/// Read (`old_md`, may be NULL) and replace (`new_md`, may be NULL) a
/// descriptor's description, atomically with respect to incoming
/// messages; with `eq_handle` other than `PTL_EQ_NONE`, only if that
/// queue is empty (else `PTL_MD_NO_UPDATE` and nothing changes).
///
/// Deviation: the memory is never replaced. `new_md->start` and `length`
/// must equal the descriptor's (else `PTL_MD_ILLEGAL`); with
/// `PTL_MD_IOVEC` in `new_md->options` they are not compared. The
/// emptiness test also counts transfers matched but not yet complete.
///
/// # Safety
/// `old_md` is NULL or valid for a write; `new_md` is NULL or valid for a
/// read.
#[no_mangle]
pub unsafe extern "C" fn PtlMDUpdate(
    md_handle: ptl_handle_md_t,
    old_md: *mut ptl_md_t,
    new_md: *const ptl_md_t,
    eq_handle: ptl_handle_eq_t,
) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Md, md_handle)?;
        let ni = iface.ni();
        let md = ni.md_handle_from_u64(raw);
        let test_eq = if eq_handle == PTL_EQ_NONE {
            None
        } else {
            let (slot, raw) = state::object(Kind::Eq, eq_handle)?;
            if slot.slot != iface.slot {
                return Err(PTL_EQ_INVALID);
            }
            Some(ni.eq_handle_from_u64(raw))
        };
        let new = if new_md.is_null() {
            None
        } else {
            // SAFETY: not NULL; the caller promised it is readable.
            let n = unsafe { new_md.read() };
            let d = desc(&iface, &n)?;
            if n.options & PTL_MD_IOVEC == 0 {
                let now = rc(ni.md_update(md, None, None))?;
                if n.start as usize != now.start || n.length != now.length {
                    return Err(PTL_MD_ILLEGAL);
                }
            }
            Some(d)
        };
        let before = rc(ni.md_update(md, new.as_ref(), test_eq))?;
        if !old_md.is_null() {
            // SAFETY: not NULL; the caller promised it is writable.
            unsafe { out(old_md, c_md(&iface, &before)) }?;
        }
        Ok(PTL_OK)
    })
}
