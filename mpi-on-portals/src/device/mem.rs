//! The memory of a message: one region of the caller's, or a list of its
//! segments (a non-contiguous datatype described as an iovec descriptor,
//! `PTL_MD_IOVEC`), which the transports gather from and scatter into
//! directly. Every protocol treats either as one logical buffer; only the
//! descriptor that lends it to the engine, and the two copies the device
//! makes itself (the eager copy of a short send, the copy out of an
//! unexpected buffer), look at its shape.

use portals::{Engine, Iovec, MdDesc, MdHandle, MeHandle, NetworkInterface, Unlink};

/// A message's memory, borrowed for `'l` (the list only: the engine
/// copies a segment list when it takes it).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mem<'l> {
    /// `len` bytes at a pointer.
    Flat(*mut u8, usize),
    /// The concatenation of the segments, `len` bytes in all.
    Iov(&'l [Iovec], usize),
}

impl<'l> Mem<'l> {
    /// The segments `list` as one logical buffer.
    pub(crate) fn iov(list: &'l [Iovec]) -> Mem<'l> {
        let len = list.iter().fold(0usize, |n, s| n.saturating_add(s.len));
        Mem::Iov(list, len)
    }

    /// Bytes of the logical buffer.
    pub(crate) fn len(self) -> usize {
        match self {
            Mem::Flat(_, len) | Mem::Iov(_, len) => len,
        }
    }

    /// A descriptor over the memory, not attached.
    ///
    /// # Safety
    /// As for [`NetworkInterface::md_bind_raw`], for every segment.
    pub(crate) unsafe fn bind(
        self,
        ni: &NetworkInterface,
        desc: &MdDesc,
        unlink: Unlink,
    ) -> portals::Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        ni.core()
            .with_engine(|e| unsafe { self.bind_engine(e, desc, unlink) })
    }

    /// [`Mem::bind`] inside an engine call (also from an unlink hook,
    /// which holds only the core).
    ///
    /// # Safety
    /// As for [`Mem::bind`].
    pub(crate) unsafe fn bind_engine(
        self,
        e: &mut Engine,
        desc: &MdDesc,
        unlink: Unlink,
    ) -> portals::Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        unsafe {
            match self {
                Mem::Flat(p, len) => e.md_bind_raw(desc, p, len, unlink),
                Mem::Iov(list, _) => e.md_bind_iovec_raw(desc, list, unlink),
            }
        }
    }

    /// A descriptor over the memory attached to `me`.
    ///
    /// # Safety
    /// As for [`NetworkInterface::md_attach_raw`], for every segment.
    pub(crate) unsafe fn attach_ni(
        self,
        ni: &NetworkInterface,
        me: MeHandle,
        desc: &MdDesc,
        unlink: Unlink,
    ) -> portals::Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        unsafe {
            match self {
                Mem::Flat(p, len) => ni.md_attach_raw(me, desc, p, len, unlink),
                Mem::Iov(list, _) => ni.md_attach_iovec_raw(me, desc, list, unlink),
            }
        }
    }

    /// [`Mem::attach_ni`] inside an engine call.
    ///
    /// # Safety
    /// As for [`Mem::attach_ni`].
    pub(crate) unsafe fn attach(
        self,
        e: &mut Engine,
        me: MeHandle,
        desc: &MdDesc,
        unlink: Unlink,
    ) -> portals::Result<MdHandle> {
        // SAFETY: forwarded from our caller.
        unsafe {
            match self {
                Mem::Flat(p, len) => e.md_attach_raw(me, desc, p, len, unlink),
                Mem::Iov(list, _) => e.md_attach_iovec_raw(me, desc, list, unlink),
            }
        }
    }

    /// Append the logical buffer's bytes to `out`.
    ///
    /// # Safety
    /// Every segment must be valid for reads.
    pub(crate) unsafe fn gather_into(self, out: &mut Vec<u8>) {
        let one;
        let list = match self {
            Mem::Flat(p, len) => {
                one = [Iovec::new(p, len)];
                &one[..]
            }
            Mem::Iov(list, _) => list,
        };
        for s in list {
            if s.len > 0 {
                // SAFETY: readable, by our caller's contract.
                portals_copy::extend_from_slice(out, unsafe {
                    std::slice::from_raw_parts(s.base, s.len)
                });
            }
        }
    }

    /// Copy `src` to the start of the logical buffer (no further than its
    /// end).
    ///
    /// # Safety
    /// Every segment must be valid for writes, and none may overlap `src`.
    pub(crate) unsafe fn scatter_from(self, src: &[u8]) {
        let one;
        let list = match self {
            Mem::Flat(p, len) => {
                one = [Iovec::new(p, len)];
                &one[..]
            }
            Mem::Iov(list, _) => list,
        };
        let mut at = 0;
        for s in list {
            let n = s.len.min(src.len() - at);
            if n == 0 {
                break;
            }
            // SAFETY: `n` bytes of the segment are writable (our caller's
            // contract) and within `src` past `at`; distinct memory.
            unsafe { portals_copy::copy_nonoverlapping(src.as_ptr().add(at), s.base, n) };
            at += n;
        }
    }
}
