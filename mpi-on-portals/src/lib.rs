//! MPI on Portals (in progress).
