//! Job runtime: bootstrap, rendezvous and the `ptlrun` launcher (in progress).
