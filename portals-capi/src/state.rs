//! The library's process-wide state (initialised or not, the interfaces)
//! and the encoding of handles as C integers.
//!
//! A C handle is 64 bits: `0 | kind (2) | interface slot + 1 (6) |
//! generation >> 1 (31) | slot index (24)`. The kind makes a handle of one
//! kind useless as another (the engine's slot maps are per kind, so an
//! unchecked key could name a live object of the wrong kind); the
//! interface slot finds the interface from a handle alone (`PtlMDUnlink`
//! takes nothing else); generation and index are the engine's
//! generation-checked key, without the generation's low bit, which is
//! always 1 for a live object. The top bit is 0 in every handle, so
//! `PTL_INVALID_HANDLE` (all ones) never decodes.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use portals_runtime::Job;
use ptl::NetworkInterface;

use crate::types::*;

/// What a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ni = 0,
    Me = 1,
    Md = 2,
    Eq = 3,
}

impl Kind {
    /// The return code for a handle of this kind that names nothing.
    pub(crate) fn invalid(self) -> c_int {
        match self {
            Kind::Ni => PTL_NI_INVALID,
            Kind::Me => PTL_ME_INVALID,
            Kind::Md => PTL_MD_INVALID,
            Kind::Eq => PTL_EQ_INVALID,
        }
    }
}

/// How many interfaces exist (`PtlInit`'s `max_interfaces`).
pub(crate) const MAX_INTERFACES: usize = 1;

const INDEX_BITS: u32 = 24;
const GEN_BITS: u32 = 31;
const SLOT_BITS: u32 = 6;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
const GEN_SHIFT: u32 = INDEX_BITS;
const SLOT_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const KIND_SHIFT: u32 = SLOT_SHIFT + SLOT_BITS;

/// A handle of `kind` for interface `slot` from an engine key
/// (`as_u64`: generation in the high 32 bits, index in the low); `None`
/// if the index does not fit (more than 16 M live objects of one kind).
pub(crate) fn encode(kind: Kind, slot: usize, raw: u64) -> Option<ptl_handle_any_t> {
    let index = raw & 0xFFFF_FFFF;
    let generation = raw >> 32;
    if index > INDEX_MASK || slot as u64 >= SLOT_MASK {
        return None;
    }
    Some(
        ((kind as u64) << KIND_SHIFT)
            | ((slot as u64 + 1) << SLOT_SHIFT)
            | (((generation >> 1) & GEN_MASK) << GEN_SHIFT)
            | index,
    )
}

/// The interface slot and engine key of a handle of `kind`, or the
/// return code for an invalid one.
pub(crate) fn decode(kind: Kind, h: ptl_handle_any_t) -> Result<(usize, u64), c_int> {
    if h >> 63 != 0 || (h >> KIND_SHIFT) & 3 != kind as u64 {
        return Err(kind.invalid());
    }
    let slot = ((h >> SLOT_SHIFT) & SLOT_MASK) as usize;
    if slot == 0 {
        return Err(kind.invalid());
    }
    let generation = (((h >> GEN_SHIFT) & GEN_MASK) << 1) | 1;
    Ok((slot - 1, (generation << 32) | (h & INDEX_MASK)))
}

/// The interface slot of any handle (`PtlNIHandle`).
pub(crate) fn slot_of_any(h: ptl_handle_any_t) -> Option<usize> {
    if h >> 63 != 0 {
        return None;
    }
    match ((h >> SLOT_SHIFT) & SLOT_MASK) as usize {
        0 => None,
        s => Some(s - 1),
    }
}

/// One interface: the job this process joined.
pub(crate) struct Iface {
    pub(crate) job: Job,
    pub(crate) slot: usize,
    /// This process's user id, read once: every event reports it.
    pub(crate) uid: u32,
}

impl Iface {
    pub(crate) fn ni(&self) -> &NetworkInterface {
        self.job.ni()
    }

    /// A handle of `kind` for an engine key of this interface.
    pub(crate) fn handle(&self, kind: Kind, raw: u64) -> Option<ptl_handle_any_t> {
        encode(kind, self.slot, raw)
    }

    /// This interface's own handle.
    pub(crate) fn ni_handle(&self, generation: u32) -> ptl_handle_ni_t {
        encode(Kind::Ni, self.slot, u64::from(generation) << 32).unwrap_or(PTL_INVALID_HANDLE)
    }
}

#[derive(Default)]
struct Slot {
    /// Odd while the interface is live, like the engine's generations.
    generation: u32,
    iface: Option<Arc<Iface>>,
    /// Joined once: a process belongs to one job, and joins it once.
    joined: bool,
}

#[derive(Default)]
pub(crate) struct Global {
    initialized: bool,
    slots: [Slot; MAX_INTERFACES],
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    initialized: false,
    slots: [Slot {
        generation: 0,
        iface: None,
        joined: false,
    }],
});

/// The global state. A panic while it was held (caught at the boundary)
/// leaves it consistent: every change is a single assignment.
pub(crate) fn global() -> MutexGuard<'static, Global> {
    GLOBAL.lock().unwrap_or_else(|p| p.into_inner())
}

impl Global {
    pub(crate) fn init(&mut self) {
        self.initialized = true;
    }

    /// `PtlFini`: every interface goes (its transport shuts down once no
    /// call in progress holds it).
    pub(crate) fn fini(&mut self) {
        self.initialized = false;
        for s in &mut self.slots {
            if s.iface.take().is_some() {
                s.generation = s.generation.wrapping_add(1);
            }
        }
    }

    pub(crate) fn check_init(&self) -> Result<(), c_int> {
        if self.initialized {
            Ok(())
        } else {
            Err(PTL_NO_INIT)
        }
    }

    /// The live interface of `iface`, with its handle, if any; whether it
    /// was ever joined.
    pub(crate) fn live(&self, iface: usize) -> (Option<ptl_handle_ni_t>, bool) {
        let s = &self.slots[iface];
        (
            s.iface.as_ref().map(|i| i.ni_handle(s.generation)),
            s.joined,
        )
    }

    /// Install a joined interface; returns its handle.
    pub(crate) fn install(&mut self, slot: usize, job: Job) -> ptl_handle_ni_t {
        let s = &mut self.slots[slot];
        s.joined = true;
        s.generation = s.generation.wrapping_add(1) | 1;
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let iface = Arc::new(Iface { job, slot, uid });
        let h = iface.ni_handle(s.generation);
        s.iface = Some(iface);
        h
    }

    /// Remember that the interface was joined and given up at once.
    pub(crate) fn mark_joined(&mut self, slot: usize) {
        self.slots[slot].joined = true;
    }

    /// `PtlNIFini`.
    pub(crate) fn remove(&mut self, h: ptl_handle_ni_t) -> Result<(), c_int> {
        self.check_init()?;
        let slot = self.ni_slot(h)?;
        let s = &mut self.slots[slot];
        s.iface = None;
        s.generation = s.generation.wrapping_add(1);
        Ok(())
    }

    fn ni_slot(&self, h: ptl_handle_ni_t) -> Result<usize, c_int> {
        let (slot, raw) = decode(Kind::Ni, h)?;
        let s = self.slots.get(slot).ok_or(PTL_NI_INVALID)?;
        if s.iface.is_none() || (raw >> 32) as u32 != s.generation || raw & INDEX_MASK != 0 {
            return Err(PTL_NI_INVALID);
        }
        Ok(slot)
    }

    /// The interface named by an interface handle.
    pub(crate) fn by_ni(&self, h: ptl_handle_ni_t) -> Result<Arc<Iface>, c_int> {
        self.check_init()?;
        let slot = self.ni_slot(h)?;
        self.slots[slot].iface.clone().ok_or(PTL_NI_INVALID)
    }

    /// The interface of an object handle of `kind`, and the engine key.
    pub(crate) fn by_object(
        &self,
        kind: Kind,
        h: ptl_handle_any_t,
    ) -> Result<(Arc<Iface>, u64), c_int> {
        self.check_init()?;
        let (slot, raw) = decode(kind, h)?;
        let iface = self
            .slots
            .get(slot)
            .and_then(|s| s.iface.clone())
            .ok_or(kind.invalid())?;
        Ok((iface, raw))
    }

    /// The interface slot of any handle, if that interface is live.
    pub(crate) fn ni_of_any(&self, h: ptl_handle_any_t) -> Result<ptl_handle_ni_t, c_int> {
        self.check_init()?;
        let slot = slot_of_any(h).ok_or(PTL_HANDLE_INVALID)?;
        let s = self.slots.get(slot).ok_or(PTL_HANDLE_INVALID)?;
        s.iface
            .as_ref()
            .map(|i| i.ni_handle(s.generation))
            .ok_or(PTL_HANDLE_INVALID)
    }
}

/// Look up the interface of an interface handle.
pub(crate) fn iface(h: ptl_handle_ni_t) -> Result<Arc<Iface>, c_int> {
    global().by_ni(h)
}

/// Look up the interface and engine key of an object handle.
pub(crate) fn object(kind: Kind, h: ptl_handle_any_t) -> Result<(Arc<Iface>, u64), c_int> {
    global().by_object(kind, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_refuse_other_kinds() {
        let raw = (7u64 << 32) | 12345;
        let h = encode(Kind::Md, 0, raw).expect("fits");
        assert_eq!(decode(Kind::Md, h), Ok((0, raw)));
        assert_eq!(decode(Kind::Me, h), Err(PTL_ME_INVALID));
        assert_eq!(decode(Kind::Eq, h), Err(PTL_EQ_INVALID));
        assert_eq!(decode(Kind::Md, PTL_INVALID_HANDLE), Err(PTL_MD_INVALID));
        assert_eq!(decode(Kind::Eq, PTL_EQ_NONE), Err(PTL_EQ_INVALID));
        assert_eq!(decode(Kind::Md, 0), Err(PTL_MD_INVALID));
        assert_eq!(slot_of_any(h), Some(0));
        assert_eq!(slot_of_any(PTL_INVALID_HANDLE), None);
    }

    #[test]
    fn an_index_past_24_bits_is_refused_not_truncated() {
        assert_eq!(encode(Kind::Me, 0, (1u64 << 32) | (1 << 24)), None);
        let top = (u64::from(u32::MAX) << 32) | ((1 << 24) - 1);
        let h = encode(Kind::Eq, 0, top).expect("fits");
        assert_eq!(decode(Kind::Eq, h), Ok((0, top)));
    }
}
