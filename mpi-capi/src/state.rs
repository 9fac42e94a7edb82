//! The library's process-global state: the `Universe` (from `MPI_Init` to
//! `MPI_Finalize`) and the tables behind the `int` handles C programs hold.
//!
//! One mutex guards it all; calls hold it only to look a handle up (and
//! clone what they need), never while they wait, so threads calling MPI
//! at once do not wait for one another's messages.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

use mpi_on_portals::{Group, SimpleCommunicator, Universe};

use crate::consts::*;
use crate::datatype::Derived;
use crate::error::{fail, Fail, On};
use crate::request::ReqEntry;

/// A slot table: handles are `kind | slot`.
pub struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Table<T> {
    /// Store `v`; its slot. `None` if the slot space (24 bits) is full.
    pub fn insert(&mut self, v: T) -> Option<usize> {
        if let Some(i) = self.free.pop() {
            self.slots[i] = Some(v);
            return Some(i);
        }
        if self.slots.len() > SLOT_MASK as usize {
            return None;
        }
        self.slots.push(Some(v));
        Some(self.slots.len() - 1)
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    pub fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.slots.get_mut(i).and_then(Option::take);
        if v.is_some() {
            self.free.push(i);
        }
        v
    }

    /// Every entry, for finalize.
    pub fn drain(&mut self) -> Vec<T> {
        self.free.clear();
        self.slots.drain(..).flatten().collect()
    }
}

/// The slot of handle `h` of kind `kind`.
pub fn slot(h: c_int, kind: u32) -> Option<usize> {
    let u = h as u32;
    (u & !SLOT_MASK == kind).then_some((u & SLOT_MASK) as usize)
}

/// The handle of slot `i` of kind `kind`.
pub fn handle(i: usize, kind: u32) -> c_int {
    (kind | i as u32) as c_int
}

/// A communicator and its error handler.
pub struct CommEntry {
    pub comm: SimpleCommunicator,
    pub errh: c_int,
}

/// A user-defined reduction (`MPI_Op_create`).
#[derive(Clone, Copy)]
pub struct UserOp {
    pub f: crate::coll::UserFn,
    pub commute: bool,
}

/// Everything that lives from `MPI_Init` to `MPI_Finalize`.
pub struct State {
    pub universe: Universe,
    /// Slot 0 is `MPI_COMM_WORLD`, slot 1 `MPI_COMM_SELF`.
    pub comms: Table<CommEntry>,
    /// Slot 0 is `MPI_GROUP_EMPTY`.
    pub groups: Table<Group>,
    pub types: Table<std::sync::Arc<Derived>>,
    pub ops: Table<UserOp>,
    pub wins: Table<crate::rma::WinSlot>,
    pub reqs: Table<ReqEntry>,
    /// Probed messages (`MPI_Mprobe`).
    pub msgs: Table<crate::mprobe::Msg>,
    /// The world rank of this process and the job size, for quick access.
    pub rank: c_int,
    pub size: c_int,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Before `MPI_Init`, running, after `MPI_Finalize`.
pub const BEFORE: u8 = 0;
pub const RUNNING: u8 = 1;
pub const FINALIZED: u8 = 2;
pub static PHASE: AtomicU8 = AtomicU8::new(BEFORE);
/// The thread level `MPI_Init_thread` provided.
pub static THREAD_LEVEL: AtomicU8 = AtomicU8::new(MPI_THREAD_SINGLE as u8);

pub fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` on the state; fails before `MPI_Init` and after `MPI_Finalize`.
pub fn with<R>(f: impl FnOnce(&mut State) -> Result<R, Fail>) -> Result<R, Fail> {
    let mut g = lock();
    match g.as_mut() {
        Some(st) => f(st),
        None => match PHASE.load(Ordering::SeqCst) {
            FINALIZED => fail(MPI_ERR_OTHER, "called after MPI_Finalize"),
            _ => fail(MPI_ERR_OTHER, "called before MPI_Init"),
        },
    }
}

impl State {
    pub fn comm_slot(&self, h: c_int) -> Option<usize> {
        match h {
            MPI_COMM_WORLD => Some(0),
            MPI_COMM_SELF => Some(1),
            _ => slot(h, KIND_COMM).filter(|&i| i >= 2),
        }
    }

    pub fn comm_entry(&mut self, h: c_int) -> Result<&mut CommEntry, Fail> {
        let i = self.comm_slot(h);
        i.and_then(|i| self.comms.get_mut(i))
            .ok_or_else(|| Fail::new(MPI_ERR_COMM, format!("invalid communicator {h:#x}")))
    }

    pub fn group(&self, h: c_int) -> Result<&Group, Fail> {
        let i = if h == MPI_GROUP_EMPTY {
            Some(0)
        } else {
            slot(h, KIND_GROUP).filter(|&i| i >= 1)
        };
        i.and_then(|i| self.groups.get(i))
            .ok_or_else(|| Fail::new(MPI_ERR_GROUP, format!("invalid group {h:#x}")))
    }

    pub fn add_group(&mut self, g: Group) -> Result<c_int, Fail> {
        let i = self
            .groups
            .insert(g)
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many groups"))?;
        Ok(handle(i, KIND_GROUP))
    }
}

/// The communicator behind `h` (a cheap clone).
pub fn comm(h: c_int) -> Result<SimpleCommunicator, Fail> {
    with(|st| st.comm_entry(h).map(|e| e.comm.clone())).map_err(|f| f.on_comm(h))
}

/// The error handler `f` goes to, and the object it is called with (the
/// world when the named object is not valid).
pub fn errhandler_of(on: On) -> (c_int, c_int) {
    let g = lock();
    let Some(st) = g.as_ref() else {
        return (MPI_ERRORS_ARE_FATAL, MPI_COMM_WORLD);
    };
    let comm = |h| {
        st.comm_slot(h)
            .and_then(|i| st.comms.get(i))
            .map(|e| e.errh)
    };
    let world = (
        comm(MPI_COMM_WORLD).unwrap_or(MPI_ERRORS_ARE_FATAL),
        MPI_COMM_WORLD,
    );
    match on {
        On::World => world,
        On::Comm(h) => comm(h).map_or(world, |e| (e, h)),
        On::Win(h) => slot(h, KIND_WIN)
            .and_then(|i| st.wins.get(i))
            .map_or(world, |w| (w.0.errh, h)),
    }
}

/// End the job: print `msg` and abort every rank (or, before `MPI_Init`,
/// exit this process).
pub fn fatal(msg: &str) -> ! {
    eprintln!("{msg}");
    let g = lock();
    match g.as_ref() {
        Some(st) => st.universe.job().abort(1, msg),
        None => std::process::exit(1),
    }
}

/// Bumped (after the change) whenever the communicator table changes, so
/// that threads know their cached copy is stale.
static COMM_GEN: AtomicU64 = AtomicU64::new(1);

/// Say that the communicator table changed (call after changing it).
pub fn comms_changed() {
    COMM_GEN.fetch_add(1, Ordering::Release);
}

/// A thread's copy of the communicator table: the hot calls find their
/// communicator without the state lock or a reference count (on this
/// loaded 2-core host those cost more than the call itself). A freed
/// communicator's copy lives on in a thread's cache until that thread
/// next looks one up.
struct CommCache {
    gen: u64,
    comms: Vec<Option<SimpleCommunicator>>,
}

thread_local! {
    static CACHE: RefCell<CommCache> = const {
        RefCell::new(CommCache {
            gen: 0,
            comms: Vec::new(),
        })
    };
}

fn refresh(c: &mut CommCache) {
    let g = lock();
    c.gen = COMM_GEN.load(Ordering::Acquire);
    c.comms.clear();
    if let Some(st) = g.as_ref() {
        c.comms.extend(
            st.comms
                .slots
                .iter()
                .map(|e| e.as_ref().map(|e| e.comm.clone())),
        );
    }
}

/// Drop this thread's cached communicators (at `MPI_Finalize`).
pub fn forget_cached_comms() {
    let _ = CACHE.try_with(|cell| {
        if let Ok(mut c) = cell.try_borrow_mut() {
            c.gen = 0;
            c.comms.clear();
        }
    });
}

/// The slot of communicator handle `h`, without the state.
fn comm_slot_of(h: c_int) -> Option<usize> {
    match h {
        MPI_COMM_WORLD => Some(0),
        MPI_COMM_SELF => Some(1),
        _ => slot(h, KIND_COMM).filter(|&i| i >= 2),
    }
}

/// Run `f` on the communicator behind `h`: from this thread's cache when
/// it is current, else (also when the cache is in use further up this
/// thread's stack and stale) through the state lock.
pub fn with_comm<R>(
    h: c_int,
    f: impl FnOnce(&SimpleCommunicator) -> Result<R, Fail>,
) -> Result<R, Fail> {
    let mut f = Some(f);
    let gen = COMM_GEN.load(Ordering::Acquire);
    let hit = CACHE
        .try_with(|cell| {
            if let Ok(mut c) = cell.try_borrow_mut() {
                if c.gen != gen {
                    refresh(&mut c);
                }
            }
            let c = cell.try_borrow().ok()?;
            if c.gen != gen {
                return None;
            }
            let comm = c.comms.get(comm_slot_of(h)?)?.as_ref()?;
            f.take().map(|f| f(comm))
        })
        .ok()
        .flatten();
    match (hit, f.take()) {
        (Some(r), _) => r,
        (None, Some(f)) => {
            let c = comm(h)?;
            f(&c)
        }
        (None, None) => Err(Fail::new(MPI_ERR_INTERN, "communicator lookup ran twice")),
    }
}
