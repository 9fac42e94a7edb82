//! The reply cache: what makes a resent request execute at most once.
//!
//! A request's reply is kept under (client, xid) after it executes; a
//! resend of it — the client timed out, the reply was lost or late — gets
//! the kept reply again, and a resend that arrives while the first copy
//! executes is dropped (its reply is on the way). Each client keeps its
//! `per_client` newest replies; the xid of every reply evicted raises the
//! client's floor, and a resend at or below the floor that is not kept is
//! answered [`Lookup::Lost`] instead of executed, since it may have been
//! executed already. A request whose client knows no earlier copy reached
//! the service ([`Arrival::First`]: every earlier send was refused) is
//! executed wherever its xid falls: a client's concurrent callers and their
//! back-offs let an old xid arrive first after newer ones were evicted. At most `max_clients` clients are kept, the least
//! recently heard forgotten first, so the cache's memory is bounded by
//! `max_clients · per_client` replies.

use std::collections::{BTreeMap, HashMap};

use portals::ProcessId;

use crate::wire::Status;

/// What the client knows about earlier sends of an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// No earlier send reached the service (there was none, or each was
    /// refused by the engine).
    First,
    /// An earlier send may have reached the service.
    MaybeResent,
}

/// What to do with an arriving request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Never seen: execute it (it is now recorded as executing).
    Execute,
    /// A resend of a request that is executing now: drop it.
    Executing,
    /// A resend of a request that executed: send this reply again.
    Replay(Status, Vec<u8>),
    /// A resend whose reply was evicted: it may have executed; refuse it.
    Lost,
}

enum Slot {
    Executing,
    Done(Status, Vec<u8>),
}

struct PerClient {
    slots: BTreeMap<u64, Slot>,
    /// The highest xid evicted.
    floor: Option<u64>,
    heard: u64,
}

/// The reply cache of one service (see the module docs).
pub struct ReplyCache {
    per_client: usize,
    max_clients: usize,
    clients: HashMap<ProcessId, PerClient>,
    clock: u64,
}

impl ReplyCache {
    /// A cache keeping `per_client` replies for each of at most
    /// `max_clients` clients (both at least 1).
    pub fn new(per_client: usize, max_clients: usize) -> Self {
        ReplyCache {
            per_client: per_client.max(1),
            max_clients: max_clients.max(1),
            clients: HashMap::new(),
            clock: 0,
        }
    }

    /// Look up request `xid` of `client`; a new one is recorded as
    /// executing.
    pub fn begin(&mut self, client: ProcessId, xid: u64, arrival: Arrival) -> Lookup {
        self.clock += 1;
        let clock = self.clock;
        if !self.clients.contains_key(&client) && self.clients.len() >= self.max_clients {
            let oldest = self
                .clients
                .iter()
                .min_by_key(|(_, c)| c.heard)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.clients.remove(&id);
            }
        }
        let c = self.clients.entry(client).or_insert_with(|| PerClient {
            slots: BTreeMap::new(),
            floor: None,
            heard: clock,
        });
        c.heard = clock;
        match c.slots.get(&xid) {
            Some(Slot::Executing) => return Lookup::Executing,
            Some(Slot::Done(s, r)) => return Lookup::Replay(*s, r.clone()),
            None => {}
        }
        if arrival == Arrival::MaybeResent && c.floor.is_some_and(|f| xid <= f) {
            return Lookup::Lost;
        }
        c.slots.insert(xid, Slot::Executing);
        self.evict(client);
        Lookup::Execute
    }

    /// Record the reply of request `xid`, which executed.
    pub fn complete(&mut self, client: ProcessId, xid: u64, status: Status, reply: Vec<u8>) {
        if let Some(slot) = self
            .clients
            .get_mut(&client)
            .and_then(|c| c.slots.get_mut(&xid))
        {
            *slot = Slot::Done(status, reply);
        }
        self.evict(client);
    }

    /// Forget everything about `client` (it died).
    pub fn forget(&mut self, client: ProcessId) {
        self.clients.remove(&client);
    }

    /// Replies kept for `client` (executing ones included).
    pub fn kept(&self, client: ProcessId) -> usize {
        self.clients.get(&client).map_or(0, |c| c.slots.len())
    }

    /// Clients known.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Evict `client`'s oldest finished replies beyond its share. An
    /// executing request is never evicted: its count is bounded by the
    /// service threads.
    fn evict(&mut self, client: ProcessId) {
        let per_client = self.per_client;
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        while c.slots.len() > per_client {
            let Some(xid) = c
                .slots
                .iter()
                .find(|(_, s)| matches!(s, Slot::Done(..)))
                .map(|(x, _)| *x)
            else {
                return;
            };
            c.slots.remove(&xid);
            c.floor = Some(c.floor.map_or(xid, |f| f.max(xid)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: ProcessId = ProcessId::new(0, 1);
    const B: ProcessId = ProcessId::new(0, 2);
    const R: Arrival = Arrival::MaybeResent;

    #[test]
    fn a_resend_is_dropped_while_executing_and_replayed_after() {
        let mut c = ReplyCache::new(4, 4);
        assert_eq!(c.begin(A, 7, R), Lookup::Execute);
        assert_eq!(c.begin(A, 7, R), Lookup::Executing);
        c.complete(A, 7, Status::Ok, b"r".to_vec());
        assert_eq!(c.begin(A, 7, R), Lookup::Replay(Status::Ok, b"r".to_vec()));
        // Another client's xid 7 is another request.
        assert_eq!(c.begin(B, 7, R), Lookup::Execute);
    }

    #[test]
    fn evicted_replies_make_their_resends_lost_not_executed() {
        let mut c = ReplyCache::new(2, 4);
        for x in 1..=3 {
            assert_eq!(c.begin(A, x, R), Lookup::Execute);
            c.complete(A, x, Status::Ok, vec![x as u8]);
        }
        assert_eq!(c.kept(A), 2);
        assert_eq!(c.begin(A, 1, R), Lookup::Lost);
        assert_eq!(c.begin(A, 3, R), Lookup::Replay(Status::Ok, vec![3]));
        assert_eq!(c.begin(A, 4, R), Lookup::Execute);
    }

    #[test]
    fn a_first_arrival_below_the_floor_executes() {
        // Caller 1 took xid 1 but was refused while callers 2..=4 of the
        // same client executed and pushed xid 1 under the floor.
        let mut c = ReplyCache::new(2, 4);
        for x in 2..=4 {
            assert_eq!(c.begin(A, x, Arrival::First), Lookup::Execute);
            c.complete(A, x, Status::Ok, vec![x as u8]);
        }
        assert_eq!(c.begin(A, 1, Arrival::First), Lookup::Execute);
        assert_eq!(c.begin(A, 1, R), Lookup::Executing);
        // Evicted xid 2 resent: it executed, so it is lost, not re-run.
        assert_eq!(c.begin(A, 2, R), Lookup::Lost);
    }

    #[test]
    fn executing_requests_are_not_evicted() {
        let mut c = ReplyCache::new(1, 4);
        assert_eq!(c.begin(A, 1, R), Lookup::Execute);
        assert_eq!(c.begin(A, 2, R), Lookup::Execute);
        assert_eq!(c.kept(A), 2);
        assert_eq!(c.begin(A, 1, R), Lookup::Executing);
        c.complete(A, 1, Status::Ok, vec![]);
        c.complete(A, 2, Status::Ok, vec![]);
        assert_eq!(c.kept(A), 1);
    }

    #[test]
    fn the_least_recently_heard_client_is_forgotten_first() {
        let mut c = ReplyCache::new(4, 2);
        let d = ProcessId::new(0, 3);
        c.begin(A, 1, R);
        c.begin(B, 1, R);
        c.begin(A, 2, R);
        c.begin(d, 1, R);
        assert_eq!(c.clients(), 2);
        assert_eq!(c.kept(B), 0);
        assert_eq!(c.kept(A), 2);
        c.forget(A);
        assert_eq!(c.kept(A), 0);
    }

    proptest! {
        /// Whatever the order of arrivals and completions, no xid is
        /// executed twice, and the cache never holds more than its bound
        /// of finished replies per client.
        #[test]
        fn no_request_executes_twice(ops in proptest::collection::vec((0u64..24, any::<bool>()), 1..300), cap in 1usize..6) {
            let mut c = ReplyCache::new(cap, 4);
            let mut executed = std::collections::HashSet::new();
            let mut executing = Vec::new();
            for (xid, finish) in ops {
                if finish {
                    if let Some(x) = executing.pop() {
                        c.complete(A, x, Status::Ok, vec![]);
                    }
                } else if c.begin(A, xid, R) == Lookup::Execute {
                    prop_assert!(executed.insert(xid), "xid {} executed twice", xid);
                    executing.push(xid);
                }
                prop_assert!(c.kept(A) <= cap + executing.len());
            }
        }
    }
}
