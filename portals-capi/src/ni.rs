//! Initialisation, network interfaces, identities, access control,
//! handles and error strings; and the job extensions (`PtlJob*`) a C
//! program needs to find its peers, which 3.3 leaves to the runtime.

use std::ffi::{c_char, c_int, c_uint, c_ulong};

use ptl::{AcEntry, PortalIndex, ProcessId};

use crate::convert::{c_process, guard, non_null, out, process, rc};
use crate::state::{self, global, MAX_INTERFACES};
use crate::types::*;

/// Initialise the library; must precede every other call. Calling it
/// again is harmless.
///
/// # Safety
/// `max_interfaces` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlInit(max_interfaces: *mut c_int) -> c_int {
    guard(|| {
        non_null(max_interfaces)?;
        global().init();
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(max_interfaces, MAX_INTERFACES as c_int) }?;
        Ok(PTL_OK)
    })
}

/// Shut the library down: every interface is finalised. Handles become
/// invalid; `PtlInit` must be called before any other call.
#[no_mangle]
pub extern "C" fn PtlFini() {
    let _ = guard(|| {
        global().fini();
        Ok(PTL_OK)
    });
}

/// Initialise interface `iface` (only `PTL_IFACE_DEFAULT`): this process
/// joins its job — the one `ptlrun` (or a PMI/PMIx launcher) started it
/// in, or a job of one — and the interface is its network interface.
///
/// `pid` is `PTL_PID_ANY` or this process's pid (0 under `ptlrun`; else
/// `PTL_PID_INVALID`). Deviation: `desired` is ignored (the job's
/// transport sets the limits); `actual` (may be NULL) receives the limits
/// in force. A second call while the interface is live returns
/// `PTL_IFACE_DUP` and its handle. Deviation: a process joins its job
/// once, so after `PtlNIFini` the interface cannot be initialised again
/// (`PTL_IFACE_INVALID`). Failing to join prints why on stderr and returns
/// `PTL_FAIL`.
///
/// # Safety
/// `desired` and `actual` are NULL or valid for a read / a write;
/// `ni_handle` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlNIInit(
    iface: ptl_interface_t,
    pid: ptl_pid_t,
    desired: *const ptl_ni_limits_t,
    actual: *mut ptl_ni_limits_t,
    ni_handle: *mut ptl_handle_ni_t,
) -> c_int {
    let _ = desired;
    guard(|| {
        let mut g = global();
        g.check_init()?;
        non_null(ni_handle)?;
        if iface != PTL_IFACE_DEFAULT {
            return Err(PTL_IFACE_INVALID);
        }
        let slot = iface as usize;
        match g.live(slot) {
            (Some(h), _) => {
                // SAFETY: checked not NULL; the caller promised it is writable.
                unsafe { out(ni_handle, h) }?;
                return Ok(PTL_IFACE_DUP);
            }
            (None, true) => return Err(PTL_IFACE_INVALID),
            (None, false) => {}
        }
        let job = match portals_runtime::join() {
            Ok(job) => job,
            Err(e) => {
                eprintln!("PtlNIInit: cannot join the job: {e}");
                g.mark_joined(slot);
                return Err(PTL_FAIL);
            }
        };
        if pid != PTL_PID_ANY && pid != job.ni().id().pid {
            g.mark_joined(slot);
            return Err(PTL_PID_INVALID);
        }
        let limits = c_limits(&job.ni().limits());
        let h = g.install(slot, job);
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(ni_handle, h) }?;
        if !actual.is_null() {
            // SAFETY: not NULL; the caller promised it is writable.
            unsafe { out(actual, limits) }?;
        }
        Ok(PTL_OK)
    })
}

fn c_limits(l: &ptl::NiLimits) -> ptl_ni_limits_t {
    let int = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    ptl_ni_limits_t {
        max_mes: int(l.max_mes),
        max_mds: int(l.max_mds),
        max_eqs: int(l.max_eqs),
        max_ac_index: int(l.ac_entries as usize).saturating_sub(1),
        max_pt_index: int(l.pt_entries as usize).saturating_sub(1),
        max_md_iovecs: int(l.max_iovecs),
        max_me_list: int(l.max_mes),
        // The engine bounds a get-put only by its descriptors' length.
        max_getput_md: c_int::MAX,
    }
}

/// Finalise an interface: its transport shuts down (once calls in other
/// threads have returned) and every handle of it becomes invalid.
#[no_mangle]
pub extern "C" fn PtlNIFini(ni_handle: ptl_handle_ni_t) -> c_int {
    guard(|| {
        global().remove(ni_handle)?;
        Ok(PTL_OK)
    })
}

/// Read a status register (`PTL_SR_DROP_COUNT`,
/// `PTL_SR_PERMISSIONS_VIOLATIONS`).
///
/// # Safety
/// `status` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlNIStatus(
    ni_handle: ptl_handle_ni_t,
    status_register: ptl_sr_index_t,
    status: *mut ptl_sr_value_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(status)?;
        let s = iface.ni().status();
        let v = match status_register {
            PTL_SR_DROP_COUNT => {
                s.dropped_no_match
                    + s.dropped_rejected
                    + s.dropped_bad_header
                    + s.dropped_access_denied
                    + s.dropped_stale_response
                    + s.dropped_atomic_invalid
            }
            PTL_SR_PERMISSIONS_VIOLATIONS => s.dropped_access_denied,
            _ => return Err(PTL_SR_INDEX_INVALID),
        };
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(status, v) }?;
        Ok(PTL_OK)
    })
}

/// The distance to a process: 0 for this process, 1 for any other
/// (the transports do not rank their peers).
///
/// # Safety
/// `distance` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlNIDist(
    ni_handle: ptl_handle_ni_t,
    id: ptl_process_id_t,
    distance: *mut c_ulong,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(distance)?;
        let p = process(id);
        if !p.is_concrete() {
            return Err(PTL_PROCESS_INVALID);
        }
        let d = c_ulong::from(p != iface.ni().id());
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(distance, d) }?;
        Ok(PTL_OK)
    })
}

/// The interface an object handle belongs to.
///
/// # Safety
/// `ni_handle` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlNIHandle(
    handle: ptl_handle_any_t,
    ni_handle: *mut ptl_handle_ni_t,
) -> c_int {
    guard(|| {
        let h = global().ni_of_any(handle)?;
        // SAFETY: out() checks NULL; the caller promised it is writable.
        unsafe { out(ni_handle, h) }?;
        Ok(PTL_OK)
    })
}

/// This process's id.
///
/// # Safety
/// `id` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlGetId(ni_handle: ptl_handle_ni_t, id: *mut ptl_process_id_t) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        // SAFETY: out() checks NULL; the caller promised it is writable.
        unsafe { out(id, c_process(iface.ni().id())) }?;
        Ok(PTL_OK)
    })
}

/// This process's job id (the job key).
///
/// # Safety
/// `jid` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlGetJid(ni_handle: ptl_handle_ni_t, jid: *mut ptl_jid_t) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        // SAFETY: out() checks NULL; the caller promised it is writable.
        unsafe { out(jid, iface.ni().job_key()) }?;
        Ok(PTL_OK)
    })
}

/// This process's user id.
///
/// # Safety
/// `uid` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlGetUid(ni_handle: ptl_handle_ni_t, uid: *mut ptl_uid_t) -> c_int {
    guard(|| {
        state::iface(ni_handle)?;
        // SAFETY: getuid has no preconditions and cannot fail.
        let me = unsafe { libc::getuid() };
        // SAFETY: out() checks NULL; the caller promised it is writable.
        unsafe { out(uid, me) }?;
        Ok(PTL_OK)
    })
}

/// Set access-control entry `ac_index`: requests naming it are admitted
/// from `match_id` (wildcards allowed) on `pt_index` (or
/// `PTL_PT_INDEX_ANY`). Entry 0 starts open to the whole job; the others
/// admit nobody until set. Only processes of this job (same job key)
/// ever get in, all of them running as one user; so an entry whose
/// `user_id` is neither `PTL_UID_ANY` nor this process's user, or whose
/// `job_id` is neither `PTL_JID_ANY` nor this job's, admits nobody.
#[no_mangle]
pub extern "C" fn PtlACEntry(
    ni_handle: ptl_handle_ni_t,
    ac_index: ptl_ac_index_t,
    match_id: ptl_process_id_t,
    user_id: ptl_uid_t,
    job_id: ptl_jid_t,
    pt_index: ptl_pt_index_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        let ni = iface.ni();
        let pt = if pt_index == PTL_PT_INDEX_ANY {
            PortalIndex::ANY
        } else {
            let size = ni.limits().pt_entries;
            if pt_index >= size {
                return Err(PTL_PT_INDEX_INVALID);
            }
            PortalIndex(pt_index)
        };
        // SAFETY: getuid has no preconditions and cannot fail.
        let me = unsafe { libc::getuid() };
        let ours = (user_id == PTL_UID_ANY || user_id == me)
            && (job_id == PTL_JID_ANY || job_id == ni.job_key());
        let entry = ours.then_some(AcEntry {
            match_id: process(match_id),
            pt_index: pt,
        });
        rc(ni.ac_entry(ac_index, entry))?;
        Ok(PTL_OK)
    })
}

/// `PTL_OK` if the two handles name the same object, `PTL_FAIL` if not.
#[no_mangle]
pub extern "C" fn PtlHandleIsEqual(handle1: ptl_handle_any_t, handle2: ptl_handle_any_t) -> c_int {
    if handle1 == handle2 {
        PTL_OK
    } else {
        PTL_FAIL
    }
}

/// A static, NUL-terminated description of a return code (never NULL;
/// an unknown code gets "unknown error code").
#[no_mangle]
pub extern "C" fn PtlErrorStr(ptl_errno: c_uint) -> *const c_char {
    let s: &'static [u8] = match c_int::try_from(ptl_errno).unwrap_or(-1) {
        PTL_OK => b"PTL_OK: success\0",
        PTL_AC_INDEX_INVALID => b"PTL_AC_INDEX_INVALID: access-control index outside the table\0",
        PTL_EQ_DROPPED => b"PTL_EQ_DROPPED: events were dropped by a full event queue\0",
        PTL_EQ_EMPTY => b"PTL_EQ_EMPTY: no event\0",
        PTL_EQ_INVALID => b"PTL_EQ_INVALID: not a live event queue handle\0",
        PTL_FAIL => b"PTL_FAIL: the operation failed\0",
        PTL_HANDLE_INVALID => b"PTL_HANDLE_INVALID: not a live handle\0",
        PTL_IFACE_DUP => b"PTL_IFACE_DUP: the interface is initialised already\0",
        PTL_IFACE_INVALID => b"PTL_IFACE_INVALID: no such interface, or it cannot be initialised again\0",
        PTL_MD_ILLEGAL => b"PTL_MD_ILLEGAL: illegal memory descriptor (options, threshold, length, region, or inactive)\0",
        PTL_MD_INVALID => b"PTL_MD_INVALID: not a live memory descriptor handle\0",
        PTL_MD_IN_USE => b"PTL_MD_IN_USE: the memory descriptor has a transfer in progress\0",
        PTL_MD_NO_UPDATE => b"PTL_MD_NO_UPDATE: the test event queue is not empty\0",
        PTL_ME_INVALID => b"PTL_ME_INVALID: not a live match entry handle\0",
        PTL_ME_IN_USE => b"PTL_ME_IN_USE: the match entry already has a memory descriptor\0",
        PTL_ME_LIST_TOO_LONG => b"PTL_ME_LIST_TOO_LONG: the match list is too long\0",
        PTL_NI_INVALID => b"PTL_NI_INVALID: not a live network interface handle\0",
        PTL_NO_INIT => b"PTL_NO_INIT: PtlInit was not called\0",
        PTL_NO_SPACE => b"PTL_NO_SPACE: a limit of the interface was reached\0",
        PTL_PID_INVALID => b"PTL_PID_INVALID: not this process's pid\0",
        PTL_PROCESS_INVALID => b"PTL_PROCESS_INVALID: not a usable process id\0",
        PTL_PT_FULL => b"PTL_PT_FULL: no portal index is free\0",
        PTL_PT_INDEX_INVALID => b"PTL_PT_INDEX_INVALID: portal index outside the table\0",
        PTL_SEGV => b"PTL_SEGV: a pointer argument is NULL\0",
        PTL_SR_INDEX_INVALID => b"PTL_SR_INDEX_INVALID: no such status register\0",
        PTL_UNKNOWN_ERROR => b"PTL_UNKNOWN_ERROR: an error the library does not know\0",
        _ => b"unknown error code\0",
    };
    s.as_ptr().cast()
}

// ----- job extensions ------------------------------------------------------

/// Extension: this process's rank in its job.
///
/// # Safety
/// `rank` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlJobRank(ni_handle: ptl_handle_ni_t, rank: *mut u32) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        // SAFETY: out() checks NULL; the caller promised it is writable.
        unsafe { out(rank, iface.job.rank()) }?;
        Ok(PTL_OK)
    })
}

/// Extension: the number of ranks in the job.
///
/// # Safety
/// `size` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlJobSize(ni_handle: ptl_handle_ni_t, size: *mut u32) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        // SAFETY: out() checks NULL; the caller promised it is writable.
        unsafe { out(size, iface.job.size()) }?;
        Ok(PTL_OK)
    })
}

/// Extension: the process id of rank `rank` (`PTL_PROCESS_INVALID` past
/// the last rank).
///
/// # Safety
/// `id` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlJobProcessId(
    ni_handle: ptl_handle_ni_t,
    rank: u32,
    id: *mut ptl_process_id_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(id)?;
        if rank >= iface.job.size() {
            return Err(PTL_PROCESS_INVALID);
        }
        let p: ProcessId = iface.job.id(rank);
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(id, c_process(p)) }?;
        Ok(PTL_OK)
    })
}

/// Extension: wait until every rank of the job has called
/// `PtlJobBarrier` (through the launcher: slow, for start-up and
/// shutdown — call it before `PtlNIFini` so that no rank's transport
/// closes while a peer still sends to it).
#[no_mangle]
pub extern "C" fn PtlJobBarrier(ni_handle: ptl_handle_ni_t) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        iface.job.barrier().map_err(|e| {
            eprintln!("PtlJobBarrier: {e}");
            PTL_FAIL
        })?;
        Ok(PTL_OK)
    })
}
