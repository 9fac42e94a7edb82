//! Between the C and the Rust vocabularies: errors to return codes,
//! `ptl_md_t` to descriptions and memory, events to `ptl_event_t`, and the
//! panic guard every entry point runs in.

use std::ffi::{c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ptl::{
    AckReq, Event, EventKind, FailType, Iovec, MdDesc, MdOptions, MdSnapshot, Position, ProcessId,
    PtlError, Threshold, Unlink,
};

use crate::state::{Iface, Kind};
use crate::types::*;

/// Run an entry point's body; a panic (a bug) becomes `PTL_FAIL` instead
/// of unwinding into C, which is undefined behaviour.
pub(crate) fn guard(body: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(rc)) | Ok(Err(rc)) => rc,
        Err(_) => PTL_FAIL,
    }
}

/// The 3.3 return code of an engine error.
pub(crate) fn code(e: &PtlError) -> c_int {
    match e {
        PtlError::InvalidHandle { kind } => match *kind {
            "match entry" => PTL_ME_INVALID,
            "memory descriptor" => PTL_MD_INVALID,
            "event queue" => PTL_EQ_INVALID,
            _ => PTL_HANDLE_INVALID,
        },
        PtlError::InvalidPortalIndex { .. } => PTL_PT_INDEX_INVALID,
        PtlError::InvalidAcIndex { .. } => PTL_AC_INDEX_INVALID,
        PtlError::InvalidProcess(_) => PTL_PROCESS_INVALID,
        PtlError::NoSpace { .. } => PTL_NO_SPACE,
        PtlError::MeInUse => PTL_ME_IN_USE,
        PtlError::MdInUse => PTL_MD_IN_USE,
        PtlError::MdInactive | PtlError::OutOfRange { .. } | PtlError::Iovec(_) => PTL_MD_ILLEGAL,
        PtlError::MdNoUpdate => PTL_MD_NO_UPDATE,
        PtlError::Timeout => PTL_EQ_EMPTY,
        PtlError::EqDropped { .. } => PTL_EQ_DROPPED,
        PtlError::InvalidArgument(_)
        | PtlError::Shutdown
        | PtlError::Atomic(_)
        | PtlError::Nal(_) => PTL_FAIL,
        _ => PTL_UNKNOWN_ERROR,
    }
}

/// `Result<_, PtlError>` to `Result<_, c_int>`.
pub(crate) fn rc<T>(r: ptl::Result<T>) -> Result<T, c_int> {
    r.map_err(|e| code(&e))
}

/// Write through an out-pointer from C.
///
/// # Safety
/// `p` is NULL or valid for a write of `T` (the C caller's promise for
/// every out-parameter).
pub(crate) unsafe fn out<T>(p: *mut T, v: T) -> Result<(), c_int> {
    if p.is_null() {
        return Err(PTL_SEGV);
    }
    // SAFETY: not NULL, and the caller promised it is valid for a write.
    unsafe { p.write(v) };
    Ok(())
}

/// Fail with `PTL_SEGV` if an out-pointer is NULL, before doing anything.
pub(crate) fn non_null<T>(p: *const T) -> Result<(), c_int> {
    if p.is_null() {
        Err(PTL_SEGV)
    } else {
        Ok(())
    }
}

pub(crate) fn process(id: ptl_process_id_t) -> ProcessId {
    ProcessId::new(id.nid, id.pid)
}

pub(crate) fn c_process(id: ProcessId) -> ptl_process_id_t {
    ptl_process_id_t {
        nid: id.nid,
        pid: id.pid,
    }
}

pub(crate) fn unlink(u: ptl_unlink_t) -> Result<Unlink, c_int> {
    match u {
        PTL_UNLINK => Ok(Unlink::Unlink),
        PTL_RETAIN => Ok(Unlink::Retain),
        _ => Err(PTL_FAIL),
    }
}

pub(crate) fn position(p: ptl_ins_pos_t) -> Result<Position, c_int> {
    match p {
        PTL_INS_BEFORE => Ok(Position::Before),
        PTL_INS_AFTER => Ok(Position::After),
        _ => Err(PTL_FAIL),
    }
}

pub(crate) fn ack_req(a: ptl_ack_req_t) -> Result<AckReq, c_int> {
    match a {
        PTL_ACK_REQ => Ok(AckReq::Ack),
        PTL_NOACK_REQ => Ok(AckReq::NoAck),
        PTL_ACK_REQ_LAZY => Ok(AckReq::Lazy),
        _ => Err(PTL_FAIL),
    }
}

const KNOWN_OPTIONS: c_uint = PTL_MD_OP_PUT
    | PTL_MD_OP_GET
    | PTL_MD_MANAGE_REMOTE
    | PTL_MD_TRUNCATE
    | PTL_MD_ACK_DISABLE
    | PTL_MD_IOVEC
    | PTL_MD_MAX_SIZE
    | PTL_MD_EVENT_START_DISABLE
    | PTL_MD_EVENT_END_DISABLE;

/// The same bit in both vocabularies, for the options that map one to one.
const SAME: [(c_uint, MdOptions); 6] = [
    (PTL_MD_OP_PUT, MdOptions::OP_PUT),
    (PTL_MD_OP_GET, MdOptions::OP_GET),
    (PTL_MD_MANAGE_REMOTE, MdOptions::MANAGE_REMOTE),
    (PTL_MD_TRUNCATE, MdOptions::TRUNCATE),
    (PTL_MD_ACK_DISABLE, MdOptions::ACK_DISABLE),
    (PTL_MD_EVENT_END_DISABLE, MdOptions::EVENT_END_DISABLE),
];

/// The engine's description of a C descriptor (everything but the
/// memory). Start events are on unless disabled, as in 3.3 (the engine's
/// default is the opposite).
pub(crate) fn desc(iface: &Iface, md: &ptl_md_t) -> Result<MdDesc, c_int> {
    if md.options & !KNOWN_OPTIONS != 0 {
        return Err(PTL_MD_ILLEGAL);
    }
    let mut options = MdOptions::empty();
    for (c, r) in SAME {
        if md.options & c != 0 {
            options |= r;
        }
    }
    if md.options & PTL_MD_EVENT_START_DISABLE == 0 {
        options |= MdOptions::EVENT_START;
    }
    let threshold = match md.threshold {
        PTL_MD_THRESH_INF => Threshold::Infinite,
        n if n >= 0 => Threshold::Count(n as u32),
        _ => return Err(PTL_MD_ILLEGAL),
    };
    let mut d = MdDesc::new(options).threshold(threshold);
    if md.options & PTL_MD_MAX_SIZE != 0 {
        d = d.max_size(md.max_size);
    }
    d.user_ptr = md.user_ptr as usize as u64;
    if md.eq_handle != PTL_EQ_NONE {
        let (slot, raw) = crate::state::decode(Kind::Eq, md.eq_handle)?;
        if slot != iface.slot {
            return Err(PTL_EQ_INVALID);
        }
        d.eq = Some(iface.ni().eq_handle_from_u64(raw));
    }
    Ok(d)
}

/// The memory of a C descriptor.
pub(crate) enum Mem {
    /// One region.
    Flat(*mut u8, usize),
    /// Segments (`PTL_MD_IOVEC`), copied out of the C array.
    Iovec(Vec<Iovec>),
}

/// Read the memory a C descriptor names: NULL with a non-zero length is
/// `PTL_SEGV`, a length that does not fit the address space or an iovec
/// list longer than the interface allows is `PTL_MD_ILLEGAL`.
///
/// # Safety
/// With `PTL_MD_IOVEC`, `md.start` (when not NULL) points to `md.length`
/// readable `ptl_md_iovec_t` (the C caller's promise).
pub(crate) unsafe fn memory(iface: &Iface, md: &ptl_md_t) -> Result<Mem, c_int> {
    let len = usize::try_from(md.length).map_err(|_| PTL_MD_ILLEGAL)?;
    if md.start.is_null() && len > 0 {
        return Err(PTL_SEGV);
    }
    if md.options & PTL_MD_IOVEC == 0 {
        if len > isize::MAX as usize {
            return Err(PTL_MD_ILLEGAL);
        }
        return Ok(Mem::Flat(md.start.cast(), len));
    }
    if len > iface.ni().limits().max_iovecs {
        return Err(PTL_MD_ILLEGAL);
    }
    if len == 0 {
        return Ok(Mem::Iovec(Vec::new()));
    }
    // SAFETY: not NULL, and the caller promised `len` readable entries;
    // `len` is at most max_iovecs, so the slice is small and in bounds.
    let list = unsafe { std::slice::from_raw_parts(md.start as *const ptl_md_iovec_t, len) };
    list.iter()
        .map(|s| {
            let n = usize::try_from(s.iov_len).map_err(|_| PTL_MD_ILLEGAL)?;
            Ok(Iovec::new(s.iov_base.cast(), n))
        })
        .collect::<Result<Vec<_>, c_int>>()
        .map(Mem::Iovec)
}

/// The C options of an engine descriptor.
fn c_options(o: MdOptions) -> c_uint {
    let mut c = 0;
    for (cb, r) in SAME {
        if o.contains(r) {
            c |= cb;
        }
    }
    if o.contains(MdOptions::MAX_SIZE) {
        c |= PTL_MD_MAX_SIZE;
    }
    if !o.contains(MdOptions::EVENT_START) {
        c |= PTL_MD_EVENT_START_DISABLE;
    }
    c
}

/// A descriptor's state as a `ptl_md_t`.
pub(crate) fn c_md(iface: &Iface, s: &MdSnapshot) -> ptl_md_t {
    ptl_md_t {
        start: s.start as *mut c_void,
        length: s.length,
        threshold: match s.threshold {
            Threshold::Infinite => PTL_MD_THRESH_INF,
            Threshold::Count(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
        },
        max_size: s.max_size,
        options: c_options(s.options),
        user_ptr: s.user_ptr as usize as *mut c_void,
        eq_handle: s
            .eq
            .and_then(|q| iface.handle(Kind::Eq, q.as_u64()))
            .unwrap_or(PTL_EQ_NONE),
    }
}

fn c_kind(k: EventKind) -> ptl_event_kind_t {
    match k {
        EventKind::PutStart => PTL_EVENT_PUT_START,
        EventKind::Put | EventKind::Atomic => PTL_EVENT_PUT_END,
        EventKind::GetStart => PTL_EVENT_GET_START,
        EventKind::Get | EventKind::FetchAtomic => PTL_EVENT_GET_END,
        EventKind::ReplyStart => PTL_EVENT_REPLY_START,
        EventKind::Reply => PTL_EVENT_REPLY_END,
        EventKind::SendStart => PTL_EVENT_SEND_START,
        EventKind::Sent => PTL_EVENT_SEND_END,
        EventKind::Ack => PTL_EVENT_ACK,
        EventKind::Unlink => PTL_EVENT_UNLINK,
    }
}

fn c_fail(f: FailType) -> ptl_ni_fail_t {
    match f {
        FailType::Ok => PTL_NI_OK,
        FailType::Dropped => PTL_NI_DROPPED,
        FailType::Unreachable => PTL_NI_FAIL,
        FailType::Incomplete => PTL_NI_INCOMPLETE,
    }
}

/// An event as a `ptl_event_t`.
pub(crate) fn c_event(iface: &Iface, e: &Event) -> ptl_event_t {
    ptl_event_t {
        r#type: c_kind(e.kind),
        initiator: c_process(e.initiator),
        uid: iface.uid,
        jid: iface.ni().job_key(),
        pt_index: e.pt_index.0,
        match_bits: e.match_bits,
        rlength: e.rlength,
        mlength: e.mlength,
        offset: e.offset,
        md_handle: iface
            .handle(Kind::Md, e.md_handle.as_u64())
            .unwrap_or(PTL_INVALID_HANDLE),
        md: c_md(iface, &e.md),
        hdr_data: e.hdr_data,
        link: 0,
        ni_fail_type: c_fail(e.fail),
        sequence: e.sequence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_an_entry_point_returns_ptl_fail() {
        assert_eq!(guard(|| panic!("a bug")), PTL_FAIL);
        assert_eq!(guard(|| Err(PTL_SEGV)), PTL_SEGV);
        assert_eq!(guard(|| Ok(PTL_IFACE_DUP)), PTL_IFACE_DUP);
    }

    #[test]
    fn options_round_trip_and_start_events_follow_3_3() {
        let all = PTL_MD_OP_PUT
            | PTL_MD_OP_GET
            | PTL_MD_MANAGE_REMOTE
            | PTL_MD_TRUNCATE
            | PTL_MD_ACK_DISABLE
            | PTL_MD_EVENT_END_DISABLE;
        let mut o = MdOptions::empty();
        for (c, r) in SAME {
            if all & c != 0 {
                o |= r;
            }
        }
        // No EVENT_START in the engine's options: 3.3's "start disabled".
        assert_eq!(c_options(o), all | PTL_MD_EVENT_START_DISABLE);
        assert_eq!(c_options(o | MdOptions::EVENT_START), all);
        assert_eq!(
            c_options(MdOptions::MAX_SIZE | MdOptions::EVENT_START),
            PTL_MD_MAX_SIZE
        );
    }

    #[test]
    fn engine_errors_map_to_their_3_3_codes() {
        let cases = [
            (
                PtlError::InvalidHandle {
                    kind: "match entry",
                },
                PTL_ME_INVALID,
            ),
            (
                PtlError::InvalidHandle {
                    kind: "memory descriptor",
                },
                PTL_MD_INVALID,
            ),
            (
                PtlError::InvalidHandle {
                    kind: "event queue",
                },
                PTL_EQ_INVALID,
            ),
            (
                PtlError::InvalidHandle {
                    kind: "counting event",
                },
                PTL_HANDLE_INVALID,
            ),
            (PtlError::MdNoUpdate, PTL_MD_NO_UPDATE),
            (PtlError::EqDropped { dropped: 3 }, PTL_EQ_DROPPED),
            (PtlError::Timeout, PTL_EQ_EMPTY),
            (PtlError::MeInUse, PTL_ME_IN_USE),
            (PtlError::MdInUse, PTL_MD_IN_USE),
            (PtlError::MdInactive, PTL_MD_ILLEGAL),
            (
                PtlError::NoSpace {
                    what: "x",
                    limit: 1,
                },
                PTL_NO_SPACE,
            ),
        ];
        for (e, c) in cases {
            assert_eq!(code(&e), c, "{e}");
        }
    }
}
