//! Data movement: put, get and get-put.

use std::ffi::c_int;

use ptl::{AcIndex, MdHandle, PortalIndex, Remote};

use crate::convert::{self, guard, process, rc};
use crate::state::{self, Iface, Kind};
use crate::types::*;
use std::sync::Arc;

fn md(h: ptl_handle_md_t) -> Result<(Arc<Iface>, MdHandle), c_int> {
    let (iface, raw) = state::object(Kind::Md, h)?;
    let md = iface.ni().md_handle_from_u64(raw);
    Ok((iface, md))
}

fn remote(
    target_id: ptl_process_id_t,
    pt_index: ptl_pt_index_t,
    ac_index: ptl_ac_index_t,
    match_bits: ptl_match_bits_t,
    remote_offset: ptl_size_t,
) -> Result<Remote, c_int> {
    let target = process(target_id);
    if !target.is_concrete() {
        return Err(PTL_PROCESS_INVALID);
    }
    Ok(Remote::new(target, PortalIndex(pt_index), match_bits)
        .with_ac_index(AcIndex(ac_index))
        .with_offset(remote_offset))
}

/// Put all of a descriptor's memory to `target_id`. Deviation: a target
/// that drops the request still answers an acknowledgment-requesting put,
/// with `ni_fail_type` = `PTL_NI_DROPPED` in the `PTL_EVENT_ACK`.
#[no_mangle]
pub extern "C" fn PtlPut(
    md_handle: ptl_handle_md_t,
    ack_req: ptl_ack_req_t,
    target_id: ptl_process_id_t,
    pt_index: ptl_pt_index_t,
    ac_index: ptl_ac_index_t,
    match_bits: ptl_match_bits_t,
    remote_offset: ptl_size_t,
    hdr_data: ptl_hdr_data_t,
) -> c_int {
    guard(|| {
        let (iface, md) = md(md_handle)?;
        let r = remote(target_id, pt_index, ac_index, match_bits, remote_offset)?;
        rc(iface.ni().put(md, convert::ack_req(ack_req)?, &r, hdr_data))?;
        Ok(PTL_OK)
    })
}

/// Put `length` bytes from `local_offset` of a descriptor
/// (`PTL_MD_ILLEGAL` if the region is outside it).
#[no_mangle]
pub extern "C" fn PtlPutRegion(
    md_handle: ptl_handle_md_t,
    local_offset: ptl_size_t,
    length: ptl_size_t,
    ack_req: ptl_ack_req_t,
    target_id: ptl_process_id_t,
    pt_index: ptl_pt_index_t,
    ac_index: ptl_ac_index_t,
    match_bits: ptl_match_bits_t,
    remote_offset: ptl_size_t,
    hdr_data: ptl_hdr_data_t,
) -> c_int {
    guard(|| {
        let (iface, md) = md(md_handle)?;
        let r = remote(target_id, pt_index, ac_index, match_bits, remote_offset)?;
        rc(iface.ni().put_region(
            md,
            local_offset,
            length,
            convert::ack_req(ack_req)?,
            &r,
            hdr_data,
        ))?;
        Ok(PTL_OK)
    })
}

/// Get a descriptor's length of bytes from `target_id` into it. Deviation:
/// a dropped get is answered with a `PTL_EVENT_REPLY_END` whose
/// `ni_fail_type` is `PTL_NI_DROPPED`.
#[no_mangle]
pub extern "C" fn PtlGet(
    md_handle: ptl_handle_md_t,
    target_id: ptl_process_id_t,
    pt_index: ptl_pt_index_t,
    ac_index: ptl_ac_index_t,
    match_bits: ptl_match_bits_t,
    remote_offset: ptl_size_t,
) -> c_int {
    guard(|| {
        let (iface, md) = md(md_handle)?;
        let r = remote(target_id, pt_index, ac_index, match_bits, remote_offset)?;
        rc(iface.ni().get(md, &r))?;
        Ok(PTL_OK)
    })
}

/// Get `length` bytes into a descriptor at `local_offset`.
#[no_mangle]
pub extern "C" fn PtlGetRegion(
    md_handle: ptl_handle_md_t,
    local_offset: ptl_size_t,
    length: ptl_size_t,
    target_id: ptl_process_id_t,
    pt_index: ptl_pt_index_t,
    ac_index: ptl_ac_index_t,
    match_bits: ptl_match_bits_t,
    remote_offset: ptl_size_t,
) -> c_int {
    guard(|| {
        let (iface, md) = md(md_handle)?;
        let r = remote(target_id, pt_index, ac_index, match_bits, remote_offset)?;
        rc(iface.ni().get_region(md, local_offset, length, &r))?;
        Ok(PTL_OK)
    })
}

/// Atomic swap: the target stores `put_md_handle`'s bytes and replies
/// with those they replace, into `get_md_handle`. Both descriptors have
/// the same length (else `PTL_MD_ILLEGAL`) and belong to one interface.
/// The target descriptor needs `PTL_MD_OP_PUT` and `PTL_MD_OP_GET`; it
/// gets a `PTL_EVENT_GET_END`.
#[no_mangle]
pub extern "C" fn PtlGetPut(
    get_md_handle: ptl_handle_md_t,
    put_md_handle: ptl_handle_md_t,
    target_id: ptl_process_id_t,
    pt_index: ptl_pt_index_t,
    ac_index: ptl_ac_index_t,
    match_bits: ptl_match_bits_t,
    remote_offset: ptl_size_t,
    hdr_data: ptl_hdr_data_t,
) -> c_int {
    guard(|| {
        let (iface, get_md) = md(get_md_handle)?;
        let (other, put_md) = md(put_md_handle)?;
        if other.slot != iface.slot {
            return Err(PTL_MD_INVALID);
        }
        let r = remote(target_id, pt_index, ac_index, match_bits, remote_offset)?;
        iface
            .ni()
            .get_put(get_md, put_md, &r, hdr_data)
            .map_err(|e| match e {
                ptl::PtlError::InvalidArgument(_) => PTL_MD_ILLEGAL,
                e => crate::convert::code(&e),
            })?;
        Ok(PTL_OK)
    })
}
