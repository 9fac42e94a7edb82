//! The access-control table (`PtlACEntry`).

use crate::types::{PortalIndex, ProcessId};

/// One access-control entry: which initiators may use which portal index
/// when they name this entry's index in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcEntry {
    /// Initiators admitted (wildcards allowed).
    pub match_id: ProcessId,
    /// Portal index admitted, or [`PortalIndex::ANY`].
    pub pt_index: PortalIndex,
}

impl AcEntry {
    /// Admits everyone everywhere: the default of entry 0.
    pub const OPEN: AcEntry = AcEntry {
        match_id: ProcessId::ANY,
        pt_index: PortalIndex::ANY,
    };

    #[inline]
    pub(crate) fn admits(&self, initiator: ProcessId, pt_index: PortalIndex) -> bool {
        self.match_id.accepts(initiator)
            && (self.pt_index == PortalIndex::ANY || self.pt_index == pt_index)
    }
}

/// The table. Entry 0 starts open; the others start empty (admit nobody).
pub(crate) struct AccessControl {
    entries: Vec<Option<AcEntry>>,
}

impl AccessControl {
    pub(crate) fn new(size: usize) -> Self {
        let mut entries = vec![None; size.max(1)];
        entries[0] = Some(AcEntry::OPEN);
        AccessControl { entries }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn set(&mut self, index: usize, entry: Option<AcEntry>) -> bool {
        match self.entries.get_mut(index) {
            Some(slot) => {
                *slot = entry;
                true
            }
            None => false,
        }
    }

    pub(crate) fn get(&self, index: usize) -> Option<AcEntry> {
        self.entries.get(index).copied().flatten()
    }

    #[inline]
    pub(crate) fn admits(&self, index: u32, initiator: ProcessId, pt_index: PortalIndex) -> bool {
        matches!(self.entries.get(index as usize), Some(Some(e)) if e.admits(initiator, pt_index))
    }
}
