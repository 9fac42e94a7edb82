//! Which non-blocking passes of a spinning waiter ask the poller about the
//! other sockets (one more system call), beside reading the hot connection.

use std::cell::Cell;

thread_local! {
    static SPIN: Cell<Spin> = const { Cell::new(Spin { owner: 0, last_look_ns: 0, skipped: 0 }) };
}

/// A thread spinning in non-blocking passes reads the hot connection on
/// every pass but asks the poller about the other sockets (one more system
/// call) only on every this-many-th.
const SPINS_PER_POLL: u32 = 4;
/// Passes closer together than this (since the last look) are a spin; a
/// pass after a longer gap, such as one call between two pieces of
/// compute, always looks.
const SPIN_GAP_NS: u64 = 10_000;

/// A thread's recent non-blocking passes.
///
/// Kept per thread but meant per interface: a thread that drives several
/// interfaces in turn (the conformance jobs run three in one thread; a
/// process may open more than one) must not count one interface's passes
/// against another's, whose clock also starts at another instant.
#[derive(Clone, Copy, Debug)]
struct Spin {
    /// The interface the passes were of (its `Inner`'s address; 0: none).
    owner: usize,
    /// When it last asked the poller (the interface's clock, ns).
    last_look_ns: u64,
    /// Passes since then that did not.
    skipped: u32,
}

/// Whether a non-blocking pass of interface `owner` at `now_ns` (its clock)
/// asks the poller about the other sockets. A pass of another interface
/// than the thread's last one always looks.
fn look(spin: &Cell<Spin>, owner: usize, now_ns: u64) -> bool {
    let s = spin.get();
    let spinning = s.owner == owner && now_ns.saturating_sub(s.last_look_ns) < SPIN_GAP_NS;
    if spinning && s.skipped + 1 < SPINS_PER_POLL {
        spin.set(Spin {
            skipped: s.skipped + 1,
            ..s
        });
        return false;
    }
    spin.set(Spin {
        owner,
        last_look_ns: now_ns,
        skipped: 0,
    });
    true
}

/// Whether this thread's non-blocking pass of interface `owner` at
/// `now_ns` (its clock) asks the poller about the other sockets.
pub(super) fn look_this_pass(owner: usize, now_ns: u64) -> bool {
    SPIN.with(|sp| look(sp, owner, now_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(every_ns: u64, n: u64) -> Vec<bool> {
        let spin = Cell::new(Spin {
            owner: 0,
            last_look_ns: 0,
            skipped: 0,
        });
        (1..=n)
            .map(|i| look(&spin, 1, 1_000_000 + i * every_ns))
            .collect()
    }

    /// One thread driving three interfaces in turn, each spinning fast by
    /// its own clock (whose epochs differ): every pass of every interface
    /// looks, none is starved of its other sockets. (Counting them as one
    /// spin left an interface that always came right after another without
    /// a look for good: a connection it was setting up never completed.)
    #[test]
    fn passes_of_interfaces_driven_in_turn_each_look() {
        let spin = Cell::new(Spin {
            owner: 0,
            last_look_ns: 0,
            skipped: 0,
        });
        let epochs = [5_000_000u64, 1_000, 300_000];
        for i in 0..20u64 {
            for (k, e) in epochs.iter().enumerate() {
                let owner = 100 + k;
                assert!(
                    look(&spin, owner, e + i * 300),
                    "pass {i} of interface {k} skipped the poller"
                );
            }
        }
        // Back to one interface spinning: skipping resumes.
        let looks: Vec<bool> = (0..8u64)
            .map(|i| look(&spin, 7, 10_000_000 + i * 300))
            .collect();
        assert_eq!(looks.iter().filter(|l| **l).count(), 2, "{looks:?}");
    }

    #[test]
    fn a_spinning_waiter_looks_at_the_other_sockets_once_every_few_passes() {
        // A spin: passes 400 ns apart.
        let looks = passes(400, 4 * u64::from(SPINS_PER_POLL));
        assert_eq!(looks.iter().filter(|l| **l).count(), 4, "{looks:?}");
        for w in looks.windows(SPINS_PER_POLL as usize) {
            assert_eq!(w.iter().filter(|l| **l).count(), 1, "{looks:?}");
        }
    }

    #[test]
    fn a_pass_after_a_gap_always_looks_at_the_other_sockets() {
        // One call between pieces of compute: every one looks.
        assert!(passes(SPIN_GAP_NS, 20).iter().all(|l| *l));
        assert!(passes(1_000_000, 20).iter().all(|l| *l));
        // Passes a little closer than the gap: never more than the gap
        // between two looks.
        let every = SPIN_GAP_NS / 2;
        let mut since = 0;
        for l in passes(every, 20) {
            since = if l { 0 } else { since + every };
            assert!(since < SPIN_GAP_NS);
        }
    }
}
