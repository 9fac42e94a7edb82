//! Atomic operations (Portals 4): `atomic` (`PtlAtomic`), `fetch_atomic`
//! (`PtlFetchAtomic`) and `swap` (`PtlSwap`) at the initiator, and their
//! application at the target.
//!
//! # How a target applies one
//! An atomic request is matched like a put (a fetching one like a get-put:
//! the descriptor needs `OP_PUT` and `OP_GET`), but its payload — the
//! operand element, if the operation takes one, then the source elements —
//! is not streamed into the descriptor: the transport deposits it into a
//! buffer of `max_atomic_size + 16` bytes from the engine's pool (allocated
//! only when the pool is empty, so steady traffic does not allocate), and
//! the engine applies the operation with [`crate::atomic::apply`] when the
//! transport reports the deposit complete ([`Engine::recv_complete`]),
//! under the engine's lock. The descriptor's range stays lent meanwhile
//! (so the descriptor cannot be unlinked) but marked as kept for an
//! atomic, which the transport never touches.
//!
//! # What is serialised
//! * Atomics on one descriptor are applied one at a time, whole, in the
//!   order their payloads complete: each is one engine call.
//! * An atomic is never applied while the transport reads or writes any of
//!   its bytes: a put depositing into them, a get's reply or a send being
//!   read from them. If one is in progress when the atomic's payload
//!   completes, the atomic waits (its response with it) and is applied by
//!   the engine call that ends the last such transfer; the response then
//!   leaves through the engine's outbound queue, as a triggered
//!   operation's message does ([`Engine::take_triggered`]). Conversely a
//!   transfer that starts on those bytes while an atomic waits overlaps
//!   nothing the engine writes, since the engine writes only at the apply.
//!   A transfer that overlaps a *waiting* atomic may therefore delay it:
//!   puts from one initiator keep their order (the transport delivers them
//!   in order), puts from different initiators were never ordered.
//! * Counted against the threshold and the offset like a put when matched;
//!   never truncated: a descriptor with less room than the request (even
//!   with `TRUNCATE`) rejects it, and the search goes on down the match
//!   list as for any rejection, so an atomic is applied whole or not at
//!   all.
//!
//! # Events
//! Target: `PutStart` then `Atomic` for an atomic, `GetStart` then
//! `FetchAtomic` (once the reply has left) for a fetching one, counted by
//! `CT_COMM`. Initiator: as a put (`Sent`, and `Ack` if asked) for an
//! atomic; as a get-put for a fetching one (`Sent` on the put descriptor,
//! `Reply` on the get descriptor, where the old values land).
//!
//! # Refusals
//! The initiator checks the operation with [`crate::atomic::check`] against
//! its own `max_atomic_size` and returns [`PtlError::Atomic`] before
//! anything is lent or sent. A target checks again against its own limit
//! and refuses whatever a peer should not have sent (an unsupported
//! operation and type, lengths that are not whole elements or too large,
//! an operand on a non-fetching atomic) with a negative response, counted
//! in [`crate::NiStatus::dropped_atomic_invalid`]; nothing is applied.

use super::{
    check_range, xfer_info, Engine, OpKind, Outbound, Payload, Region, SendToken, TokenKind,
};
use crate::atomic::{self, AtomicError, AtomicOp, AtomicSpec};
use crate::error::{PtlError, Result};
use crate::handle::{MdHandle, XferKey};
use crate::md::{Access, MdState};
use crate::types::{AckReq, FailType, Remote};
use crate::wire::{Header, Op};

/// Room for the largest operand (a complex `f64`).
const MAX_OPERAND: usize = 16;
/// Buffers kept in the pool beyond the atomics in progress.
const POOL_KEEP: usize = 64;

/// An atomic request being served: its operation and the buffer its
/// payload lands in.
pub(super) struct AtomicXfer {
    spec: AtomicSpec,
    buf: Box<[u8]>,
}

impl AtomicXfer {
    /// The first `len` bytes of the buffer, for the transport to deposit
    /// the payload into.
    pub(super) fn region(&mut self, len: u64) -> Region {
        Region::contiguous(self.buf.as_mut_ptr(), (len as usize).min(self.buf.len()))
    }
}

/// The engine's atomic bookkeeping.
#[derive(Default)]
pub(super) struct AtomicState {
    /// Payload buffers, each `max_atomic_size + MAX_OPERAND` bytes.
    pool: Vec<Box<[u8]>>,
    /// Atomics whose payload is in, waiting for the transport to finish
    /// with their bytes, in arrival order.
    waiting: Vec<XferKey>,
    /// A retry of `waiting` is running (applying one settles its
    /// descriptor, which would retry again).
    retrying: bool,
}

impl AtomicState {
    pub(super) fn take(&mut self, spec: AtomicSpec, max_atomic_size: u64) -> AtomicXfer {
        let buf = self.pool.pop().unwrap_or_else(|| {
            vec![0u8; max_atomic_size as usize + MAX_OPERAND].into_boxed_slice()
        });
        AtomicXfer { spec, buf }
    }

    pub(super) fn recycle(&mut self, a: AtomicXfer) {
        if self.pool.len() < POOL_KEEP {
            self.pool.push(a.buf);
        }
    }
}

impl Engine {
    /// Apply `spec` to `length` bytes at the target with the bytes of `md`
    /// at `local_offset` as source (`PtlAtomic`). Events and counting as
    /// for a put ([`Engine::put_region`]). The conditional and masked swaps
    /// take an operand and go through [`Engine::swap`].
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        md: MdHandle,
        local_offset: u64,
        length: u64,
        ack: AckReq,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
    ) -> Result<Outbound> {
        self.atomic_rules(spec, length, false, None)?;
        let mut out = self.initiate(
            OpKind::Atomic,
            md,
            Some((local_offset, length)),
            remote,
            ack,
            hdr_data,
        )?;
        out.header.atomic = Some(spec);
        Ok(out)
    }

    /// As [`Engine::atomic`] with the bytes of `put_md` at
    /// `local_put_offset` as source, and the target's old values returned
    /// into `get_md` at `local_get_offset` (`PtlFetchAtomic`). `Sent` is
    /// posted on `put_md`, `Reply` on `get_md`; the two may be one
    /// descriptor if the ranges do not overlap.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_atomic(
        &mut self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
    ) -> Result<Outbound> {
        self.atomic_rules(spec, length, false, None)?;
        self.initiate_fetch(
            (get_md, local_get_offset),
            (put_md, local_put_offset),
            length,
            remote,
            hdr_data,
            spec,
            None,
        )
    }

    /// Swap (`PtlSwap`): as [`Engine::fetch_atomic`] for
    /// [`AtomicOp::Swap`], the conditional swaps ([`AtomicOp::Cswap`] and
    /// siblings) and [`AtomicOp::Mswap`]. These last two kinds work on one
    /// element and need `operand`, one element of the type (the value
    /// compared with the target, or the mask); `Swap` takes none.
    #[allow(clippy::too_many_arguments)]
    pub fn swap(
        &mut self,
        get_md: MdHandle,
        local_get_offset: u64,
        put_md: MdHandle,
        local_put_offset: u64,
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        operand: Option<&[u8]>,
        spec: AtomicSpec,
    ) -> Result<Outbound> {
        self.atomic_rules(spec, length, true, operand)?;
        self.initiate_fetch(
            (get_md, local_get_offset),
            (put_md, local_put_offset),
            length,
            remote,
            hdr_data,
            spec,
            operand,
        )
    }

    /// The checks of an atomic at the initiator that no state changes: the
    /// operation on the type, the length, the size limit, and the operand
    /// (only a swap takes one, and only for the operations that need one).
    pub(super) fn atomic_rules(
        &self,
        spec: AtomicSpec,
        length: u64,
        swap: bool,
        operand: Option<&[u8]>,
    ) -> Result<()> {
        atomic::check(spec.op, spec.datatype, length, self.limits.max_atomic_size)?;
        let why = match (swap, spec.op.needs_operand(), operand) {
            (false, true, _) => Some("conditional and masked swaps go through swap"),
            (true, false, _) if spec.op != AtomicOp::Swap => {
                Some("swap takes Swap, the conditional swaps and Mswap")
            }
            (_, false, Some(_)) => Some("this operation takes no operand"),
            (true, true, None) => Some("missing"),
            (true, true, Some(o)) if o.len() != spec.datatype.size() => {
                Some("not one element long")
            }
            _ => None,
        };
        match why {
            Some(why) => Err(AtomicError::Operand { op: spec.op, why }.into()),
            None => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn initiate_fetch(
        &mut self,
        (get_md, get_offset): (MdHandle, u64),
        (put_md, put_offset): (MdHandle, u64),
        length: u64,
        remote: &Remote,
        hdr_data: u64,
        spec: AtomicSpec,
        operand: Option<&[u8]>,
    ) -> Result<Outbound> {
        // Everything about the put descriptor is checked before `initiate`
        // changes anything.
        let pk = self.live_md_key(put_md)?;
        let gk = self.live_md_key(get_md)?;
        let p = &self.mds[pk];
        check_range(put_offset, length, p.length)?;
        if !p.is_active() {
            return Err(PtlError::MdInactive);
        }
        if p.io_conflicts(put_offset, put_offset + length, Access::Read) {
            return Err(PtlError::MdInUse);
        }
        if pk == gk && put_offset < get_offset + length && get_offset < put_offset + length {
            return Err(PtlError::InvalidArgument(
                "the fetched values would land on the source elements",
            ));
        }
        let mut out = self.initiate(
            OpKind::FetchAtomic,
            get_md,
            Some((get_offset, length)),
            remote,
            AckReq::NoAck,
            hdr_data,
        )?;
        let p = &mut self.mds[pk];
        p.consume();
        let region = p.lend(put_offset, length, Access::Read);
        if p.wants_unlink() {
            p.state = MdState::Unlinking;
        }
        if let Some(SendToken(TokenKind::Op(opk))) = &out.token {
            let op = &mut self.ops[*opk];
            op.put_md = Some(pk);
            op.put_offset = put_offset;
        }
        out.header.atomic = Some(spec);
        out.payload = match operand {
            None => Payload::Region(region),
            Some(o) => {
                // The operand travels in front of the source elements; the
                // two are one element each, so copying beats a second
                // region in every transport.
                let mut v = vec![0; o.len() + region.len()];
                v[..o.len()].copy_from_slice(o);
                // SAFETY: the region was lent for reading just now and is
                // inside the descriptor (`check_range`); nothing writes it
                // while we hold the engine, and `v` is not its memory.
                unsafe { region.read_at(0, &mut v[o.len()..]) };
                Payload::Owned(v)
            }
        };
        Ok(out)
    }

    /// Whether an incoming atomic request is one this target carries out
    /// (see the module docs, "Refusals").
    pub(super) fn atomic_request_valid(&self, h: &Header) -> bool {
        let Some(spec) = h.atomic else {
            return false;
        };
        !(h.op == Op::Atomic && spec.op.needs_operand())
            && atomic::check(
                spec.op,
                spec.datatype,
                h.rlength,
                self.limits.max_atomic_size,
            )
            .is_ok()
    }

    /// An atomic's payload is in its buffer: apply it now, or wait for the
    /// transport to finish with its bytes.
    pub(super) fn atomic_arrived(&mut self, xk: XferKey) -> Option<Outbound> {
        let x = self.xfers.get(xk)?;
        let busy = self
            .mds
            .get(x.md)
            .is_some_and(|d| d.transport_overlaps(x.offset, x.offset + x.mlength));
        if busy {
            self.atoms.waiting.push(xk);
            return None;
        }
        self.apply_atomic(xk)
    }

    /// Apply the atomics waiting on descriptor `md` whose bytes the
    /// transport no longer uses, in arrival order. Called whenever a
    /// transfer on a descriptor ends (`settle`).
    pub(super) fn retry_atomics(&mut self, md: super::MdKey) {
        if self.atoms.waiting.is_empty() || self.atoms.retrying {
            return;
        }
        self.atoms.retrying = true;
        let mut i = 0;
        while let Some(&xk) = self.atoms.waiting.get(i) {
            let ready = match self.xfers.get(xk) {
                Some(x) if x.md == md => !self
                    .mds
                    .get(md)
                    .is_some_and(|d| d.transport_overlaps(x.offset, x.offset + x.mlength)),
                Some(_) => false,
                None => {
                    self.atoms.waiting.remove(i);
                    continue;
                }
            };
            if !ready {
                i += 1;
                continue;
            }
            self.atoms.waiting.remove(i);
            if let Some(out) = self.apply_atomic(xk) {
                self.queue_outbound(out);
            }
        }
        self.atoms.retrying = false;
    }

    /// The atomics waiting for the transport (diagnostics and tests).
    pub fn atomics_waiting(&self) -> usize {
        self.atoms.waiting.len()
    }

    /// Apply the atomic of transfer `xk` to its descriptor and answer it.
    fn apply_atomic(&mut self, xk: XferKey) -> Option<Outbound> {
        let x = self.xfers.get_mut(xk)?;
        let a = x.atomic.as_mut()?;
        let d = self.mds.get_mut(x.md)?;
        let n = x.mlength as usize;
        let (operand, rest) = a.buf.split_at_mut(a.spec.operand_len() as usize);
        let applied = match rest.get_mut(..n) {
            Some(source) => {
                let target = d.mem.region(x.offset, n as u64);
                let operand = (!operand.is_empty()).then_some(&*operand);
                // SAFETY (both arms): offset..offset+mlength was checked
                // against the descriptor when the request was accepted and
                // stays lent (kept for this atomic) until the transfer
                // ends; no transfer of the transport reads or writes it
                // (`transport_overlaps` was false), other atomics are
                // applied only by engine calls, and we hold the engine.
                if target.is_contiguous() {
                    let t = unsafe { std::slice::from_raw_parts_mut(target.as_ptr(), n) };
                    atomic::apply(a.spec.op, a.spec.datatype, t, source, operand)
                } else {
                    // Across the segments of an iovec descriptor: apply to
                    // a gathered copy and scatter it back (elements may
                    // straddle a boundary).
                    let mut t = vec![0; n];
                    unsafe { target.read_at(0, &mut t) };
                    let r = atomic::apply(a.spec.op, a.spec.datatype, &mut t, source, operand);
                    if r.is_ok() {
                        unsafe { target.write_at(0, &t) };
                    }
                    r
                }
            }
            None => Err(AtomicError::TooLarge {
                length: x.mlength,
                max: self.limits.max_atomic_size,
            }),
        };
        let fail = if applied.is_ok() {
            FailType::Ok
        } else {
            FailType::Dropped
        };
        if x.kind == OpKind::FetchAtomic && fail == FailType::Ok {
            // The old values left in the buffer go back in the reply; the
            // transfer ends when the reply has left (`xfer_done`).
            let ptr = rest.as_mut_ptr();
            let x = &self.xfers[xk];
            return Some(Outbound {
                header: self.response_header(x, Op::Reply, FailType::Ok),
                payload: Payload::Region(Region::contiguous(ptr, n)),
                token: Some(SendToken(TokenKind::Xfer(xk))),
            });
        }
        let x = self.xfers.remove(xk)?;
        if let Some(d) = self.mds.get_mut(x.md) {
            d.give_back(x.offset, x.mlength);
        }
        self.eq_in_flight(x.md, -1);
        let info = xfer_info(&x, fail);
        self.post(x.md, x.kind.target_event(), &info);
        let response = match x.kind {
            OpKind::FetchAtomic => Some(Op::Reply),
            _ if x.ack => Some(Op::Ack),
            _ => None,
        }
        .map(|op| {
            let mut header = self.response_header(&x, op, fail);
            if fail != FailType::Ok {
                header.mlength = 0;
            }
            Outbound {
                header,
                payload: Payload::None,
                token: None,
            }
        });
        if let Some(a) = x.atomic {
            self.atoms.recycle(a);
        }
        self.settle(x.md);
        response
    }
}
