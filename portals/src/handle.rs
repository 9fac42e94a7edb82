//! Generation-checked handles.
//!
//! Objects live in generational slot maps: a handle carries the slot index,
//! the slot's generation, and the tag of the network interface that issued
//! it. A handle whose object was freed (the generation moved on) or that came
//! from another interface resolves to nothing, so it can never reach another
//! object.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

use slotmap::{Key, KeyData};

slotmap::new_key_type! {
    pub(crate) struct MeKey;
    pub(crate) struct MdKey;
    pub(crate) struct EqKey;
    pub(crate) struct OpKey;
    pub(crate) struct XferKey;
    pub(crate) struct CtKey;
}

/// Tags distinguish the handles of different engines in one process.
static NEXT_TAG: AtomicU32 = AtomicU32::new(1);

pub(crate) fn fresh_tag() -> u32 {
    NEXT_TAG.fetch_add(1, Ordering::Relaxed)
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $key:ident, $kind:literal, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name {
            pub(crate) ni: u32,
            pub(crate) key: $key,
        }

        impl $name {
            pub(crate) const KIND: &'static str = $kind;

            /// The handle as an opaque 64-bit value (slot and generation), for
            /// logging or for use as a user key. It does not include the
            /// interface tag.
            pub fn as_u64(&self) -> u64 {
                self.key.data().as_ffi()
            }

            /// The handle of engine `ni` whose [`Self::as_u64`] is `raw`.
            /// Any value is safe: the generation check refuses one that
            /// names no live object.
            #[allow(dead_code)]
            pub(crate) fn from_parts(ni: u32, raw: u64) -> Self {
                $name { ni, key: KeyData::from_ffi(raw).into() }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "#{:x}@{}"), self.as_u64(), self.ni)
            }
        }
    };
}

handle!(
    /// Names a match entry (`ptl_handle_me_t`).
    MeHandle, MeKey, "match entry", "me"
);
handle!(
    /// Names a memory descriptor (`ptl_handle_md_t`).
    MdHandle, MdKey, "memory descriptor", "md"
);
handle!(
    /// Names an event queue (`ptl_handle_eq_t`).
    EqHandle, EqKey, "event queue", "eq"
);

handle!(
    /// Names a counting event (`ptl_handle_ct_t`, Portals 4).
    CtHandle, CtKey, "counting event", "ct"
);

/// Encode an operation key for the wire (the cookie echoed in responses).
pub(crate) fn op_cookie(k: OpKey) -> u64 {
    k.data().as_ffi()
}

/// Decode a cookie from the wire. Any value is safe: a forged or stale cookie
/// yields a key that simply resolves to nothing.
pub(crate) fn cookie_op(c: u64) -> OpKey {
    KeyData::from_ffi(c).into()
}
