//! Event queues.
//!
//! Overflow: a full queue keeps its old events and drops new ones (an
//! engine deviation from 3.3's ring, which overwrites). The engine reports
//! the loss once, before the kept events; here the report and the next
//! kept event come back together, as 3.3 has it: `PTL_EQ_DROPPED` with a
//! valid event.

use std::ffi::c_int;
use std::time::Duration;

use ptl::{EqHandle, Event, PtlError};

use crate::convert::{c_event, guard, non_null, out, rc};
use crate::state::{self, Iface, Kind};
use crate::types::*;

/// `PtlEQPoll` lists up to this long are kept on the stack.
const POLL_INLINE: usize = 8;

/// Allocate an event queue of `count` events.
///
/// Deviation: event handlers are not supported; `eq_handler` must be
/// `PTL_EQ_HANDLER_NONE` (else `PTL_FAIL`).
///
/// # Safety
/// `eq_handle` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlEQAlloc(
    ni_handle: ptl_handle_ni_t,
    count: ptl_size_t,
    eq_handler: ptl_eq_handler_t,
    eq_handle: *mut ptl_handle_eq_t,
) -> c_int {
    guard(|| {
        let iface = state::iface(ni_handle)?;
        non_null(eq_handle)?;
        if eq_handler.is_some() {
            return Err(PTL_FAIL);
        }
        let count = usize::try_from(count).map_err(|_| PTL_NO_SPACE)?;
        let eq = rc(iface.ni().eq_alloc(count))?;
        let h = iface.handle(Kind::Eq, eq.as_u64()).ok_or_else(|| {
            let _ = iface.ni().eq_free(eq);
            PTL_NO_SPACE
        })?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(eq_handle, h) }?;
        Ok(PTL_OK)
    })
}

/// Free an event queue.
#[no_mangle]
pub extern "C" fn PtlEQFree(eq_handle: ptl_handle_eq_t) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Eq, eq_handle)?;
        rc(iface.ni().eq_free(iface.ni().eq_handle_from_u64(raw)))?;
        Ok(PTL_OK)
    })
}

/// Write `ev` to C, with `code` (`PTL_OK` or `PTL_EQ_DROPPED`).
///
/// # Safety
/// `event` is valid for a write (checked not NULL by the caller).
unsafe fn deliver(
    iface: &Iface,
    event: *mut ptl_event_t,
    ev: &Event,
    code: c_int,
) -> Result<c_int, c_int> {
    // SAFETY: forwarded from our caller.
    unsafe { out(event, c_event(iface, ev)) }?;
    Ok(code)
}

/// Take the next event of one of `eqs` (index `which`), waiting up to
/// `timeout` (`None`: forever; zero: not at all). A drop report is joined
/// to the event after it.
fn take(
    iface: &Iface,
    eqs: &[EqHandle],
    timeout: Option<Duration>,
) -> Result<(Event, usize, c_int), c_int> {
    let ni = iface.ni();
    let once = |t: Option<Duration>| -> ptl::Result<(Event, usize)> {
        if t == Some(Duration::ZERO) {
            // In polling mode nothing moves between calls: a C loop of
            // PtlEQGet must drive the transport to ever see an event.
            ni.poll()?;
            for (i, &q) in eqs.iter().enumerate() {
                if let Some(ev) = ni.eq_get(q)? {
                    return Ok((ev, i));
                }
            }
            return Err(PtlError::Timeout);
        }
        ni.eq_poll(eqs, t)
    };
    match once(timeout) {
        Ok((ev, i)) => Ok((ev, i, PTL_OK)),
        Err(PtlError::EqDropped { .. }) => {
            // The queue was full when it dropped, so its kept events follow
            // at once; wait only as a guard against a reader on another
            // thread taking them first.
            let (ev, i) = rc(once(timeout))?;
            Ok((ev, i, PTL_EQ_DROPPED))
        }
        Err(e) => Err(crate::convert::code(&e)),
    }
}

/// Take the oldest event without waiting: `PTL_EQ_EMPTY` if there is
/// none, `PTL_EQ_DROPPED` (with a valid event) after events were lost.
///
/// # Safety
/// `event` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlEQGet(eq_handle: ptl_handle_eq_t, event: *mut ptl_event_t) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Eq, eq_handle)?;
        non_null(event)?;
        let q = iface.ni().eq_handle_from_u64(raw);
        let (ev, _, code) = take(&iface, &[q], Some(Duration::ZERO))?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { deliver(&iface, event, &ev, code) }
    })
}

/// Wait for the oldest event (the waiting thread drives the transport for
/// a bounded spin, then sleeps). `PTL_EQ_DROPPED` as for `PtlEQGet`.
///
/// # Safety
/// `event` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn PtlEQWait(eq_handle: ptl_handle_eq_t, event: *mut ptl_event_t) -> c_int {
    guard(|| {
        let (iface, raw) = state::object(Kind::Eq, eq_handle)?;
        non_null(event)?;
        let q = iface.ni().eq_handle_from_u64(raw);
        let (ev, _, code) = take(&iface, &[q], None)?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { deliver(&iface, event, &ev, code) }
    })
}

/// Wait up to `timeout` milliseconds (`PTL_TIME_FOREVER`: forever; 0:
/// not at all) for an event on any of `size` queues; earlier queues have
/// priority. `which` receives the index of the event's queue.
/// `PTL_EQ_EMPTY` on timeout. Deviation: every queue must belong to the
/// same interface (else `PTL_EQ_INVALID`).
///
/// # Safety
/// `eq_handles` points to `size` readable handles; `event` and `which`
/// are valid for writes.
#[no_mangle]
pub unsafe extern "C" fn PtlEQPoll(
    eq_handles: *const ptl_handle_eq_t,
    size: c_int,
    timeout: ptl_time_t,
    event: *mut ptl_event_t,
    which: *mut c_int,
) -> c_int {
    guard(|| {
        non_null(eq_handles)?;
        non_null(event)?;
        non_null(which)?;
        let n = usize::try_from(size).map_err(|_| PTL_EQ_INVALID)?;
        if n == 0 {
            return Err(PTL_EQ_INVALID);
        }
        let (iface, _) = state::object(Kind::Eq, {
            // SAFETY: not NULL and `size` >= 1: the caller promised that
            // many readable handles.
            unsafe { eq_handles.read() }
        })?;
        // More queues than an interface may have is a miscount (and would
        // make the list below a large allocation).
        if n > iface.ni().limits().max_eqs {
            return Err(PTL_EQ_INVALID);
        }
        // SAFETY: not NULL; the caller promised `size` readable handles.
        let hs = unsafe { std::slice::from_raw_parts(eq_handles, n) };
        let queue = |h: ptl_handle_eq_t| -> Result<EqHandle, c_int> {
            let (i, raw) = state::object(Kind::Eq, h)?;
            if i.slot != iface.slot {
                return Err(PTL_EQ_INVALID);
            }
            Ok(iface.ni().eq_handle_from_u64(raw))
        };
        // A few queues (the common case) need no allocation.
        let first = queue(hs[0])?;
        let mut few = [first; POLL_INLINE];
        let mut many = Vec::new();
        if n <= POLL_INLINE {
            for (slot, &h) in few.iter_mut().zip(hs) {
                *slot = queue(h)?;
            }
        } else {
            many = hs.iter().map(|&h| queue(h)).collect::<Result<_, _>>()?;
        }
        let qs: &[EqHandle] = if n <= POLL_INLINE { &few[..n] } else { &many };
        let t = match timeout {
            PTL_TIME_FOREVER => None,
            ms if ms >= 0 => Some(Duration::from_millis(ms as u64)),
            _ => return Err(PTL_FAIL),
        };
        let (ev, i, code) = take(&iface, qs, t)?;
        // SAFETY: checked not NULL; the caller promised it is writable.
        unsafe { out(which, i as c_int) }?;
        // SAFETY: as above.
        unsafe { deliver(&iface, event, &ev, code) }
    })
}
