//! TCP network abstraction layer for `portals` (in progress).
