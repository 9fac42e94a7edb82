//! # portals-capi
//!
//! `libportals` and `portals.h`: the Portals 3.3 C API over the
//! [`ptl`](::ptl) engine's `NetworkInterface` and the `portals-runtime`
//! job bootstrap. A C program started by `ptlrun` becomes a rank of the
//! job at `PtlNIInit`. See the crate's README for building, linking and
//! the deviations from 3.3; `include/portals.h` is generated from this
//! crate by `cbindgen` (the test `header_is_current` checks it).
//!
//! At the boundary: every pointer is checked for NULL (`PTL_SEGV`), every
//! handle is decoded and generation-checked (`PTL_*_INVALID`), lengths
//! that do not fit are refused, and no panic crosses into C (each entry
//! point runs under `catch_unwind`; a panic returns `PTL_FAIL`).
//! Descriptors use the engine's raw attach: C memory is read and written
//! in place, never copied or freed.

#![warn(missing_docs)]
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod convert;
pub mod data;
pub mod eq;
pub mod me_md;
pub mod ni;
mod state;
pub mod types;
