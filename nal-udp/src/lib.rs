//! UDP network abstraction layer for `portals` (in progress).
