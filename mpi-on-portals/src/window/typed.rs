//! Atomics of any element type on a window of bytes, at byte
//! displacements: what a C library needs, where one window (`MPI_Win`)
//! takes `MPI_Fetch_and_op` on `uint64_t` and `MPI_Put` of bytes alike.

use portals::{AckReq, MdOptions, PtlError};

use super::ops::OneOp;
use super::{AtomicElement, RmaOp, Window};
use crate::comm::Rank;
use crate::error::{MpiError, Result};

fn ptl(e: PtlError) -> MpiError {
    MpiError::Portals(e)
}

impl Window<'_, u8> {
    /// `n` elements of `U` at byte `disp` of `target`: the rank index and
    /// location, with `U`'s alignment checked.
    fn typed_target<U>(
        &self,
        target: Rank,
        disp: usize,
        n: usize,
    ) -> Result<(u32, super::ops::Loc)> {
        let sz = std::mem::size_of::<U>();
        if disp % sz != 0 {
            return Err(MpiError::RmaUnsupported(format!(
                "an atomic on {sz}-byte elements at byte {disp}, not a multiple of {sz}"
            )));
        }
        self.core.target(target, disp, n * sz, 1)
    }

    /// [`Window::accumulate`] of elements `U` at byte displacement `disp`.
    pub fn accumulate_typed<U: AtomicElement>(
        &self,
        target: Rank,
        disp: usize,
        data: &[U],
        op: RmaOp,
    ) -> Result<()> {
        let spec = op.spec::<U>()?;
        let (t, off) = self.typed_target::<U>(target, disp, data.len())?;
        let Some(spec) = spec else {
            return Ok(());
        };
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let chunk = self.typed_chunk::<U>()?;
        for (i, piece) in bytes.chunks(chunk).enumerate() {
            self.core.keep_order(t, chunk)?;
            let remote = self.core.remote(t, off + (i * chunk) as u64);
            let len = piece.len() as u64;
            self.core.buffered(t, piece.to_vec(), |ni, md| {
                ni.atomic(md, 0, len, AckReq::Ack, &remote, 0, spec)
            })?;
        }
        Ok(())
    }

    fn typed_chunk<U>(&self) -> Result<usize> {
        let sz = std::mem::size_of::<U>();
        let max = self.core.ni().limits().max_atomic_size as usize;
        match max / sz {
            0 => Err(MpiError::RmaUnsupported(format!(
                "the interface's max_atomic_size ({max} bytes) is below one element"
            ))),
            n => Ok(n * sz),
        }
    }

    /// [`Window::get_accumulate`] of elements `U` at byte displacement
    /// `disp`.
    pub fn get_accumulate_typed<U: AtomicElement>(
        &self,
        target: Rank,
        disp: usize,
        data: &[U],
        result: &mut [U],
        op: RmaOp,
    ) -> Result<()> {
        let spec = op.spec::<U>()?;
        if data.len() != result.len() {
            return Err(MpiError::InvalidBuffer(
                "get_accumulate needs a result buffer as long as its data",
            ));
        }
        let (t, off) = self.typed_target::<U>(target, disp, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let ni = self.core.ni();
        let mut op = OneOp::new(ni)?;
        let res: &mut [u8] = bytemuck::cast_slice_mut(result);
        // SAFETY: `result` is borrowed mutably until this call returns,
        // after `op` dropped its descriptor.
        let get_md = unsafe { op.bind_raw(MdOptions::CT_REPLY, res.as_mut_ptr(), res.len())? };
        let Some(spec) = spec else {
            ni.get(get_md, &self.core.remote(t, off)).map_err(ptl)?;
            return op.wait(1, t);
        };
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let put_md = op.bind(MdOptions::empty(), bytes.to_vec())?;
        let chunk = self.typed_chunk::<U>()?;
        let mut n = 0;
        for start in (0..bytes.len()).step_by(chunk) {
            self.core.keep_order(t, chunk)?;
            let len = chunk.min(bytes.len() - start) as u64;
            let remote = self.core.remote(t, off + start as u64);
            let s = start as u64;
            ni.fetch_atomic(get_md, s, put_md, s, len, &remote, 0, spec)
                .map_err(ptl)?;
            n += 1;
        }
        op.wait(n, t)
    }

    /// [`Window::compare_and_swap`] of an element `U` at byte
    /// displacement `disp`.
    pub fn compare_and_swap_typed<U: AtomicElement>(
        &self,
        target: Rank,
        disp: usize,
        compare: &U,
        value: &U,
    ) -> Result<U> {
        let (t, off) = self.typed_target::<U>(target, disp, 1)?;
        self.core.compare_and_swap(t, off, compare, value)
    }
}
