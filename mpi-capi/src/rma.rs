//! One-sided communication over `mpi_on_portals::window`: every `MPI_Win`
//! is a window of bytes; displacements are scaled by the window's
//! `disp_unit`, and atomics take their element type from the datatype.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use mpi_on_portals::traits::*;
use mpi_on_portals::{LockType, RmaOp, SystemOperation, Window};

use crate::consts::*;
use crate::datatype::{comm_ty, Elem};
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::state::{self, handle, slot};

/// A window and what `MPI_Win_get_attr` reports about it.
pub struct WinEntry {
    pub win: Window<'static, u8>,
    pub base: usize,
    pub size: usize,
    pub disp_unit: usize,
    /// `disp_unit` as the `int` `MPI_WIN_DISP_UNIT` points to.
    pub disp_unit_attr: c_int,
    pub errh: c_int,
    /// Memory `MPI_Win_allocate` made (pointer, words), freed with the
    /// window.
    pub owned: Option<(usize, usize)>,
}

/// The table holds `Arc`s so that calls can wait without the state lock.
pub type WinRef = Arc<WinEntry>;

pub(crate) fn win(h: c_int) -> Result<WinRef, Fail> {
    slot(h, KIND_WIN)
        .and_then(|i| {
            state::lock()
                .as_ref()
                .and_then(|st| st.wins.get(i).map(|w| w.0.clone()))
        })
        .ok_or_else(|| Fail::new(MPI_ERR_WIN, format!("invalid window {h:#x}")).on_win(h))
}

fn expose(
    comm: c_int,
    base: *mut u8,
    size: usize,
    disp_unit: c_int,
    owned: Option<(usize, usize)>,
    out: *mut c_int,
) -> Res {
    let du = usize::try_from(disp_unit)
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| Fail::new(MPI_ERR_ARG, format!("invalid disp_unit {disp_unit}")))?;
    let c = state::comm(comm)?;
    let mem: &'static mut [u8] = if size == 0 {
        &mut []
    } else {
        // SAFETY: MPI requires the window memory to stay valid until
        // MPI_Win_free; the window reaches it only through the engine.
        unsafe { std::slice::from_raw_parts_mut(base, size) }
    };
    let w = c.create_window(mem)?;
    let entry = WinEntry {
        win: w,
        base: base as usize,
        size,
        disp_unit: du,
        disp_unit_attr: disp_unit,
        errh: MPI_ERRORS_ARE_FATAL,
        owned,
    };
    let h = state::with(|st| {
        st.wins
            .insert(WinSlot(Arc::new(entry)))
            .map(|i| handle(i, KIND_WIN))
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many windows"))
    })?;
    ptr::out(out, h, "win")
}

/// A table slot (a newtype so the table's element is `Send`).
pub struct WinSlot(pub WinRef);

entry! {
    fn MPI_Win_create | PMPI_Win_create(base: *mut c_void, size: isize, disp_unit: c_int, _info: c_int, comm: c_int, win: *mut c_int) {
        let n = usize::try_from(size).map_err(|_| Fail::new(MPI_ERR_SIZE, format!("invalid size {size}")))?;
        if n > 0 && base.is_null() {
            return fail(MPI_ERR_ARG, "base is NULL");
        }
        expose(comm, base.cast(), n, disp_unit, None, win).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Win_allocate | PMPI_Win_allocate(size: isize, disp_unit: c_int, _info: c_int, comm: c_int, baseptr: *mut c_void, win: *mut c_int) {
        let n = usize::try_from(size).map_err(|_| Fail::new(MPI_ERR_SIZE, format!("invalid size {size}")))?;
        if baseptr.is_null() {
            return fail(MPI_ERR_ARG, "baseptr is NULL");
        }
        let words = n.div_ceil(8).max(1);
        let mem: Box<[u64]> = vec![0u64; words].into_boxed_slice();
        let p = Box::into_raw(mem) as *mut u64;
        let r = expose(comm, p.cast(), n, disp_unit, Some((p as usize, words)), win);
        if r.is_err() {
            // SAFETY: made just above from a box of `words` words; the
            // window was not made, so nothing else refers to it.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, words)) });
        }
        r.map_err(|f| f.on_comm(comm))?;
        ptr::out(baseptr.cast::<*mut c_void>(), p.cast(), "baseptr")
    }
}

entry! {
    fn MPI_Win_free | PMPI_Win_free(win: *mut c_int) {
        let h = ptr::read(win, "win")?;
        let i = slot(h, KIND_WIN).ok_or_else(|| Fail::new(MPI_ERR_WIN, format!("invalid window {h:#x}")))?;
        let e = state::with(|st| st.wins.remove(i).ok_or_else(|| Fail::new(MPI_ERR_WIN, format!("invalid window {h:#x}"))))?;
        let e = Arc::try_unwrap(e.0).map_err(|_| Fail::new(MPI_ERR_WIN, "the window is in use by another thread"))?;
        let owned = e.owned;
        let r = e.win.free();
        if let Some((p, words)) = owned {
            // SAFETY: the box MPI_Win_allocate made; the window that
            // exposed it is gone.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p as *mut u64, words)) });
        }
        r.map_err(|e| Fail::from(e).on_win(h))?;
        ptr::out(win, MPI_WIN_NULL, "win")
    }
}

/// Byte displacement of `disp` units.
fn byte_disp(w: &WinEntry, disp: isize) -> Result<usize, Fail> {
    usize::try_from(disp)
        .ok()
        .and_then(|d| d.checked_mul(w.disp_unit))
        .ok_or_else(|| Fail::new(MPI_ERR_DISP, format!("invalid displacement {disp}")))
}

entry! {
    fn MPI_Put | PMPI_Put(origin_addr: *const c_void, origin_count: c_int, origin_datatype: c_int, target_rank: c_int, target_disp: isize, _target_count: c_int, _target_datatype: c_int, win: c_int) {
        (|| {
            let w = self::win(win)?;
            if target_rank == MPI_PROC_NULL {
                return Ok(());
            }
            let t = comm_ty(origin_datatype)?;
            let bytes = t.send_bytes(origin_addr, ptr::count(origin_count)?)?;
            w.win.put(target_rank, byte_disp(&w, target_disp)?, &bytes)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

entry! {
    fn MPI_Get | PMPI_Get(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: c_int, target_rank: c_int, target_disp: isize, _target_count: c_int, _target_datatype: c_int, win: c_int) {
        (|| {
            let w = self::win(win)?;
            if target_rank == MPI_PROC_NULL {
                return Ok(());
            }
            let t = comm_ty(origin_datatype)?;
            let n = ptr::count(origin_count)?;
            let d = byte_disp(&w, target_disp)?;
            if t.contiguous() {
                let b = ptr::slice_mut(origin_addr.cast::<u8>(), n * t.extent(), "origin_addr")?;
                w.win.get(target_rank, d, b)?;
            } else {
                let mut tmp = vec![0u8; n * t.size()];
                w.win.get(target_rank, d, &mut tmp)?;
                // SAFETY: MPI requires origin_addr to hold `n` elements.
                unsafe { t.unpack(&tmp, origin_addr.cast(), n) };
            }
            Ok(())
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

fn rma_op(op: c_int) -> Result<RmaOp, Fail> {
    Ok(match op {
        MPI_SUM => SystemOperation::sum().into(),
        MPI_PROD => SystemOperation::product().into(),
        MPI_MAX => SystemOperation::max().into(),
        MPI_MIN => SystemOperation::min().into(),
        MPI_LAND => SystemOperation::logical_and().into(),
        MPI_LOR => SystemOperation::logical_or().into(),
        MPI_LXOR => SystemOperation::logical_xor().into(),
        MPI_BAND => SystemOperation::bitwise_and().into(),
        MPI_BOR => SystemOperation::bitwise_or().into(),
        MPI_BXOR => SystemOperation::bitwise_xor().into(),
        MPI_REPLACE => RmaOp::Replace,
        MPI_NO_OP => RmaOp::NoOp,
        _ => {
            return fail(
                MPI_ERR_OP,
                format!("operation {op:#x} is not available to one-sided calls"),
            )
        }
    })
}

/// Run `$body` with `$T` the element type of datatype `$dt`.
macro_rules! typed {
    ($dt:expr, $T:ident => $body:expr) => {{
        match comm_ty($dt)?.elem() {
            Some(Elem::I8) => {
                type $T = i8;
                $body
            }
            Some(Elem::U8) => {
                type $T = u8;
                $body
            }
            Some(Elem::I16) => {
                type $T = i16;
                $body
            }
            Some(Elem::U16) => {
                type $T = u16;
                $body
            }
            Some(Elem::I32) => {
                type $T = i32;
                $body
            }
            Some(Elem::U32) => {
                type $T = u32;
                $body
            }
            Some(Elem::I64) => {
                type $T = i64;
                $body
            }
            Some(Elem::U64) => {
                type $T = u64;
                $body
            }
            Some(Elem::F32) => {
                type $T = f32;
                $body
            }
            Some(Elem::F64) => {
                type $T = f64;
                $body
            }
            None => fail(
                MPI_ERR_TYPE,
                "one-sided atomics need a predefined numeric datatype",
            ),
        }
    }};
}

fn aligned<'a, T>(p: *const c_void, n: usize, what: &str) -> Result<&'a [T], Fail> {
    if n > 0 && (p as usize) % std::mem::align_of::<T>() != 0 {
        return fail(
            MPI_ERR_BUFFER,
            format!("{what} is not aligned for its datatype"),
        );
    }
    ptr::slice(p.cast::<T>(), n, what)
}

fn aligned_mut<'a, T>(p: *mut c_void, n: usize, what: &str) -> Result<&'a mut [T], Fail> {
    if n > 0 && (p as usize) % std::mem::align_of::<T>() != 0 {
        return fail(
            MPI_ERR_BUFFER,
            format!("{what} is not aligned for its datatype"),
        );
    }
    ptr::slice_mut(p.cast::<T>(), n, what)
}

entry! {
    fn MPI_Accumulate | PMPI_Accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: c_int, target_rank: c_int, target_disp: isize, _target_count: c_int, _target_datatype: c_int, op: c_int, win: c_int) {
        (|| {
            let w = self::win(win)?;
            if target_rank == MPI_PROC_NULL {
                return Ok(());
            }
            let (n, d, o) = (ptr::count(origin_count)?, byte_disp(&w, target_disp)?, rma_op(op)?);
            typed!(origin_datatype, T => {
                let data = aligned::<T>(origin_addr, n, "origin_addr")?;
                w.win.accumulate_typed::<T>(target_rank, d, data, o)?;
                Ok(())
            })
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

entry! {
    fn MPI_Get_accumulate | PMPI_Get_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: c_int, result_addr: *mut c_void, result_count: c_int, _result_datatype: c_int, target_rank: c_int, target_disp: isize, _target_count: c_int, _target_datatype: c_int, op: c_int, win: c_int) {
        (|| {
            let w = self::win(win)?;
            if target_rank == MPI_PROC_NULL {
                return Ok(());
            }
            let (d, o) = (byte_disp(&w, target_disp)?, rma_op(op)?);
            let rn = ptr::count(result_count)?;
            let n = if o == RmaOp::NoOp { rn } else { ptr::count(origin_count)? };
            typed!(origin_datatype, T => {
                let data: Vec<T> = if o == RmaOp::NoOp { vec![0 as T; rn] } else { aligned::<T>(origin_addr, n, "origin_addr")?.to_vec() };
                let res = aligned_mut::<T>(result_addr, rn, "result_addr")?;
                w.win.get_accumulate_typed::<T>(target_rank, d, &data, res, o)?;
                Ok(())
            })
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

entry! {
    fn MPI_Fetch_and_op | PMPI_Fetch_and_op(origin_addr: *const c_void, result_addr: *mut c_void, datatype: c_int, target_rank: c_int, target_disp: isize, op: c_int, win: c_int) {
        (|| {
            let w = self::win(win)?;
            if target_rank == MPI_PROC_NULL {
                return Ok(());
            }
            let (d, o) = (byte_disp(&w, target_disp)?, rma_op(op)?);
            typed!(datatype, T => {
                let v: Vec<T> = if o == RmaOp::NoOp { vec![0 as T] } else { aligned::<T>(origin_addr, 1, "origin_addr")?.to_vec() };
                let res = aligned_mut::<T>(result_addr, 1, "result_addr")?;
                w.win.get_accumulate_typed::<T>(target_rank, d, &v, res, o)?;
                Ok(())
            })
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

entry! {
    fn MPI_Compare_and_swap | PMPI_Compare_and_swap(origin_addr: *const c_void, compare_addr: *const c_void, result_addr: *mut c_void, datatype: c_int, target_rank: c_int, target_disp: isize, win: c_int) {
        (|| {
            let w = self::win(win)?;
            if target_rank == MPI_PROC_NULL {
                return Ok(());
            }
            let d = byte_disp(&w, target_disp)?;
            typed!(datatype, T => {
                let v = aligned::<T>(origin_addr, 1, "origin_addr")?[0];
                let c = aligned::<T>(compare_addr, 1, "compare_addr")?[0];
                let old = w.win.compare_and_swap_typed::<T>(target_rank, d, &c, &v)?;
                aligned_mut::<T>(result_addr, 1, "result_addr")?[0] = old;
                Ok(())
            })
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

macro_rules! win_call {
    ($name:ident, $pname:ident, ($($a:ident : $t:ty),*), |$w:ident| $body:expr) => {
        entry! {
            fn $name | $pname($($a: $t,)* win: c_int) {
                (|| {
                    let $w = self::win(win)?;
                    $body.map_err(Fail::from)
                })()
                .map_err(|f: Fail| f.on_win(win))
            }
        }
    };
}

win_call!(MPI_Win_fence, PMPI_Win_fence, (_assert: c_int), |w| w.win.fence());
win_call!(MPI_Win_flush, PMPI_Win_flush, (rank: c_int), |w| w.win.flush(rank));
win_call!(MPI_Win_flush_all, PMPI_Win_flush_all, (), |w| w
    .win
    .flush_all());
win_call!(MPI_Win_flush_local, PMPI_Win_flush_local, (rank: c_int), |w| w.win.flush_local(rank));
win_call!(MPI_Win_flush_local_all, PMPI_Win_flush_local_all, (), |w| w
    .win
    .flush_local_all());
win_call!(MPI_Win_sync, PMPI_Win_sync, (), |w| w.win.sync());
win_call!(MPI_Win_unlock, PMPI_Win_unlock, (rank: c_int), |w| w.win.unlock_held(rank));
win_call!(MPI_Win_lock_all, PMPI_Win_lock_all, (_assert: c_int), |w| w.win.lock_all_held());
win_call!(MPI_Win_unlock_all, PMPI_Win_unlock_all, (), |w| w
    .win
    .unlock_all_held());

entry! {
    fn MPI_Win_lock | PMPI_Win_lock(lock_type: c_int, rank: c_int, _assert: c_int, win: c_int) {
        (|| {
            let w = self::win(win)?;
            let k = match lock_type {
                MPI_LOCK_EXCLUSIVE => LockType::Exclusive,
                MPI_LOCK_SHARED => LockType::Shared,
                _ => return fail(47, format!("invalid lock type {lock_type}")),
            };
            w.win.lock_held(rank, k)?;
            Ok(())
        })()
        .map_err(|f: Fail| f.on_win(win))
    }
}

entry! {
    fn MPI_Win_set_errhandler | PMPI_Win_set_errhandler(win: c_int, errhandler: c_int) {
        crate::errhandler::check(errhandler, crate::errhandler::Serves::Win).map_err(|f| f.on_win(win))?;
        let i = slot(win, KIND_WIN).ok_or_else(|| Fail::new(MPI_ERR_WIN, "invalid window"))?;
        state::with(|st| {
            let e = st.wins.get_mut(i).ok_or_else(|| Fail::new(MPI_ERR_WIN, "invalid window"))?;
            match Arc::get_mut(&mut e.0) {
                Some(w) => {
                    w.errh = errhandler;
                    Ok(())
                }
                None => fail(MPI_ERR_WIN, "the window is in use by another thread"),
            }
        })
    }
}

entry! {
    fn MPI_Win_get_errhandler | PMPI_Win_get_errhandler(win: c_int, errhandler: *mut c_int) {
        let w = self::win(win)?;
        ptr::out(errhandler, w.errh, "errhandler")
    }
}

entry! {
    fn MPI_Win_get_attr | PMPI_Win_get_attr(win: c_int, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        let w = self::win(win)?;
        // MPICH keeps these per window; the pointers stay valid while the
        // window does (the size and unit are boxed in the entry's Arc).
        let v: Option<*const c_void> = match keyval {
            MPI_WIN_BASE => Some(w.base as *const c_void),
            MPI_WIN_SIZE => Some(&w.size as *const usize as *const c_void),
            MPI_WIN_DISP_UNIT => Some(&w.disp_unit_attr as *const c_int as *const c_void),
            _ => None,
        };
        ptr::out(flag, v.is_some() as c_int, "flag")?;
        if let Some(v) = v {
            ptr::out(attribute_val.cast::<*const c_void>(), v, "attribute_val")?;
        }
        Ok(())
    }
}
