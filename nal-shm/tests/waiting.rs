//! A sender waiting for a large payload that its receiver copies out of the
//! sender's memory (single copy) keeps polling instead of sleeping
//! (`Nal::peer_moving_our_data`, `NiConfig::wait_spin_busy`): the
//! completion would otherwise cost the receiver a wake-up system call and
//! the sender a trip through the scheduler, per message.

use std::time::Duration;

use nal_shm::{ProgressMode, ShmConfig};
use portals::nal::Nal;
use portals::*;
use portals_tests::conformance::{attach, bind_md, id, job_tuned, pattern, Node, PT};

const BIG: usize = 1 << 20;

fn poll() -> ShmConfig {
    ShmConfig {
        progress: ProgressMode::Poll,
        ..ShmConfig::default()
    }
}

/// Two polling ranks whose waiters sleep after a 50 ms spin window, with
/// `busy` of polling while a peer moves their data. Rank 0 has a 1 MiB
/// entry (bits 2) on `eq0`; rank 1 a 1 MiB payload on `eq1`.
struct Pair {
    nodes: Vec<Node<ShmConfig>>,
    eq0: EqHandle,
    eq1: EqHandle,
    big: MdHandle,
}

impl Pair {
    fn new(busy: Duration) -> Pair {
        let nodes = job_tuned(&[poll(), poll()], &|c| {
            c.wait_spin = Duration::from_millis(50);
            c.wait_spin_busy = busy;
        });
        let eq0 = nodes[0].ni.eq_alloc(64).unwrap();
        let desc = MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE).eq(eq0);
        attach(&nodes[0].ni, id(1), 2, 0, &desc, BIG);
        let eq1 = nodes[1].ni.eq_alloc(64).unwrap();
        let big = bind_md(&nodes[1].ni, eq1, pattern(BIG, 5));
        Pair {
            nodes,
            eq0,
            eq1,
            big,
        }
    }

    /// Rank 1 puts the payload, asking for an acknowledgment.
    fn put(&self) {
        self.nodes[1]
            .ni
            .put(self.big, AckReq::Ack, &Remote::new(id(0), PT, 2), 0)
            .unwrap();
    }

    /// Rank `i` waits for its next event of `kind`.
    fn wait_for(&self, i: usize, kind: EventKind) {
        let eq = if i == 0 { self.eq0 } else { self.eq1 };
        loop {
            let ev = self.nodes[i]
                .ni
                .eq_wait(eq, Some(Duration::from_secs(20)))
                .unwrap();
            assert_eq!(ev.fail, FailType::Ok, "{ev:?}");
            if ev.kind == kind {
                return;
            }
        }
    }

    /// One put whose acknowledgment rank 1 waits for while rank 0 takes
    /// the payload only after 300 ms; rank 1's sleeps meanwhile, and
    /// whether the payload went by single copy.
    fn sleeps_while_read(&self) -> (u64, bool) {
        let before = self.nodes[1].nal.stats();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                self.wait_for(0, EventKind::Put);
            });
            self.put();
            self.wait_for(1, EventKind::Ack);
        });
        let after = self.nodes[1].nal.stats();
        (
            after.futex_waits - before.futex_waits,
            after.single_copy_sent == before.single_copy_sent + 1,
        )
    }
}

/// A payload counts as being moved from the announcement of its single
/// copy until its receiver says it is done: not before the receiver is
/// told, not after.
#[test]
fn a_single_copy_payload_counts_as_moving_from_its_announcement_until_done() {
    let p = Pair::new(Duration::from_millis(2));
    // Transfers until one goes by single copy bring both ranks up
    // (inboxes mapped, single copy probed), so that the next one is
    // announced at once.
    for _ in 0..10 {
        std::thread::scope(|s| {
            s.spawn(|| p.wait_for(0, EventKind::Put));
            p.put();
            p.wait_for(1, EventKind::Ack);
        });
        if p.nodes[1].nal.stats().single_copy_sent > 0 {
            break;
        }
    }
    assert_eq!(p.nodes[1].nal.stats().single_copy_sent, 1);
    assert!(!p.nodes[1].nal.peer_moving_our_data());
    p.put();
    // Rank 0 does not look yet: the announcement waits in its ring.
    for _ in 0..1000 {
        p.nodes[1].nal.progress(None).unwrap();
        if p.nodes[1].nal.stats().single_copy_sent == 2 {
            break;
        }
    }
    assert_eq!(p.nodes[1].nal.stats().single_copy_sent, 2);
    assert!(p.nodes[1].nal.peer_moving_our_data(), "announced, not done");
    p.wait_for(0, EventKind::Put);
    p.wait_for(1, EventKind::Ack);
    assert!(!p.nodes[1].nal.peer_moving_our_data(), "done");
    assert_eq!(p.nodes[0].nal.stats().single_copy_received, 2);
}

/// The waiting sender polls through the 300 ms before its receiver
/// copies its payload and through the copy, far past its 50 ms spin
/// window, instead of sleeping, then for one more window, which covers
/// the acknowledgment that trails the receiver's "done"; with the busy
/// polling off it sleeps once its window is over, which the same count
/// shows.
#[test]
fn a_sender_polls_instead_of_sleeping_while_its_receiver_copies_its_payload() {
    let on = Pair::new(Duration::from_secs(20));
    // Once to bring the ranks up (the first payload may go through the
    // ring, before single copy is probed), then the one counted.
    on.sleeps_while_read();
    assert_eq!(
        on.sleeps_while_read(),
        (0, true),
        "slept while its payload was read"
    );
    let off = Pair::new(Duration::ZERO);
    off.sleeps_while_read();
    let (sleeps, single_copy) = off.sleeps_while_read();
    assert!(single_copy);
    assert!(sleeps > 0, "the count cannot see a sleep");
}
