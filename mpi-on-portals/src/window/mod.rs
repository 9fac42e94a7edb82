//! One-sided communication (MPI-4 RMA windows) on the engine's puts, gets
//! and atomics.
//!
//! # API summary
//! ```text
//! comm.create_window(&mut mem)       zero-copy window over caller memory (collective)
//! comm.allocate_window::<T>(len)     window over zeroed memory it owns (collective)
//! comm.allocate_shared_window::<T>(len)  zeroed memory in one shared object (collective,
//!   every rank on one host); win.shared_query(r) -> SharedRegion: load/store rank r's part
//! comm.create_dynamic_window::<T>()  no memory yet (collective); then
//!   win.attach(vec) -> address, win.detach(address) -> vec   (displacements are addresses)
//! win.put / get / accumulate / get_accumulate / fetch_and_op / compare_and_swap
//! win.rput / rget / raccumulate / rget_accumulate -> RmaRequest (wait, test; drop waits)
//! win.flush(t) / flush_all / flush_local(t) / flush_local_all / sync
//! win.lock(t, LockType) -> LockGuard (unlock(), or drop) ; win.lock_all() -> LockAllGuard
//! win.fence()                        active target, collective
//! win.post(g) / start(g) / complete() / wait()   active target, general (PSCW)
//! win.read_local / write_local / local / with_local   the owner's access to its memory
//! win.free()                         collective; dropping a live window does the same
//! ```
//! Displacements and lengths count elements of `T`; every rank's window
//! size is known everywhere from creation on, so a range outside the
//! target's window is refused ([`MpiError::RmaRange`]) before anything is
//! sent, as is an operation on a target no access epoch covers
//! ([`MpiError::RmaEpoch`]: a lock on it, `lock_all`, a fence epoch, or a
//! `start` group containing it).
//!
//! # Memory safety
//! A window borrows the memory it was created over for its whole life,
//! and a request borrows its local buffer until it completes, so the
//! compiler refuses to free, move or touch either meanwhile. This
//! compiles (freeing the window ends the borrow):
//! ```no_run
//! # use mpi_on_portals::traits::*;
//! # fn f(world: &mpi_on_portals::SimpleCommunicator) -> mpi_on_portals::Result<()> {
//! let mut mem = vec![0u64; 8];
//! let win = world.create_window(&mut mem)?;
//! let all = win.lock_all()?;
//! let mut buf = vec![0u64; 4];
//! let req = win.rget(1, 0, &mut buf)?;
//! req.wait()?;
//! buf[0] += 1;
//! all.unlock()?;
//! win.free()?;
//! drop(mem);
//! # Ok(()) }
//! ```
//! but freeing the memory while the window exists does not:
//! ```compile_fail,E0505
//! # use mpi_on_portals::traits::*;
//! # fn f(world: &mpi_on_portals::SimpleCommunicator) -> mpi_on_portals::Result<()> {
//! let mut mem = vec![0u64; 8];
//! let win = world.create_window(&mut mem)?;
//! drop(mem);
//! win.free()?;
//! # Ok(()) }
//! ```
//! (The requests' buffers: see `request.rs`.)
//!
//! # Exposure
//! Creating a window duplicates the communicator (the window's traffic has
//! its own context id) and attaches two persistent entries on portal
//! 6 that match anyone with the window's context: the *data*
//! entry over the window memory (puts, gets and atomics, remotely managed
//! offsets) and the *lock* entry over an 8-byte lock word owned by the
//! window, never by the user. Nothing of either needs the target's CPU: the
//! engine serves them from whichever thread makes progress (the transport's
//! progress thread by default), so a target that computes or sleeps
//! without MPI calls does not hold up its origins. With `Poll` progress
//! only the target's own MPI calls move anything, as for point-to-point.
//!
//! # Completion
//! Each operation is counted on a counting event: a put or accumulate
//! completes remotely on the engine's acknowledgment of the deposit (or
//! atomic apply), a get or fetching atomic on its reply. Small puts and
//! accumulates (up to [`COPY_LIMIT`] bytes) are copied into a descriptor
//! the window owns and return at once; `flush` waits for their
//! acknowledgments. Larger puts are sent zero-copy from the caller's slice
//! and return once acknowledged. Gets and fetching operations return with
//! the data. Non-blocking forms copy (see `request.rs`), so leaking a
//! request can never leave the engine writing into freed memory.
//!
//! # Ordering
//! Accumulates from one origin to one target location apply in issue
//! order (MPI's default `accumulate_ordering`): every transport delivers a
//! pair's messages in order (TCP and shared-memory rings by construction,
//! UDP by its reliability layer's in-order delivery), and the engine
//! applies atomics on one descriptor in arrival order, one that waits for
//! an overlapping transfer holding back later ones on the same bytes. So no
//! extra waiting is needed while an atomic's payload travels with its
//! header in one datagram (the default `max_atomic_size` is 512 bytes);
//! pieces above 1 KiB, whose datagrams UDP may complete out of order, wait
//! for the earlier accumulates' acknowledgments. An accumulate longer than the interface's
//! `max_atomic_size` is split into element-aligned pieces, each atomic
//! (MPI promises element-wise atomicity only).
//!
//! # Local memory
//! The window memory is written by the engine at any time while exposed,
//! so the owner never gets a plain reference to it while the window
//! lives: [`Window::read_local`], [`Window::write_local`] and
//! [`Window::local`] copy through the engine, which refuses (and they
//! retry) while a transfer uses the bytes; [`Window::with_local`] takes an
//! exclusive lock on the owner's own window, copies the memory out, runs a
//! closure on the copy and writes it back before unlocking.
//!
//! # Shared windows
//! [`CommunicatorWindows::allocate_shared_window`] puts every rank's part
//! in one shared-memory object, contiguous in rank order, and exposes each
//! part as that rank's window memory as above; [`Window::shared_query`]
//! then gives any rank's part for direct loads and stores
//! ([`SharedRegion`], see `shared.rs`).

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use portals::{MdDesc, MdHandle, MdOptions, MeHandle, NetworkInterface, PortalIndex, Position};
use portals::{ProcessId, PtlError, Unlink};

use crate::bits;
use crate::collective::CommunicatorCollectives;
use crate::comm::{Communicator, Rank, SimpleCommunicator};
use crate::datatype::Equivalence;
use crate::error::{MpiError, Result};

mod active;
mod atomic;
mod dynamic;
mod lock;
mod ops;
mod request;
mod shared;
mod typed;

pub use atomic::{AtomicElement, RmaOp};
pub use dynamic::MAX_REGIONS;
pub use lock::{LockAllGuard, LockGuard, LockType};
pub use request::RmaRequest;
pub(crate) use shared::host_hash;
pub use shared::SharedRegion;

/// The portal of window exposures (the MPI device uses 0 to 5).
pub(crate) const WIN_PT: PortalIndex = PortalIndex(6);

/// Match-bit kinds (protocol field; the context field names the window).
const K_DATA: u64 = 1;
const K_LOCK: u64 = 2;
/// A dynamic window's region table.
const K_TABLE: u64 = 3;
/// A dynamic window's region (the low 48 bits: its address).
const K_REGION: u64 = 4;

/// Puts and accumulates up to this many bytes are copied and return at
/// once; larger puts go zero-copy and return when acknowledged.
pub const COPY_LIMIT: usize = 64 * 1024;

/// Pause between two tries of something the engine refused for now (a
/// descriptor still in use, a lock held by another origin).
const RETRY: Duration = Duration::from_micros(200);

/// Who holds which access epochs on the origin side, and what exposure
/// epochs are open.
#[derive(Default, Debug)]
struct Epochs {
    /// Targets locked by `lock` (window ranks).
    locks: Vec<(u32, LockType)>,
    /// `lock_all` holds a shared lock on every rank.
    lock_all: bool,
    /// A fence opened an epoch (until the window is freed).
    fence: bool,
    /// `start`'s group (window ranks).
    start: Option<Vec<u32>>,
    /// `post`'s group (window ranks).
    post: Option<Vec<u32>>,
}

impl Epochs {
    fn covers(&self, t: u32) -> bool {
        self.lock_all
            || self.fence
            || self.locks.iter().any(|&(r, _)| r == t)
            || self.start.as_ref().is_some_and(|g| g.contains(&t))
    }
}

/// Origin-side bookkeeping of operations not waited for yet, per target.
struct Pending {
    /// Counts the acknowledgments of copied puts and accumulates.
    ct: Option<portals::CtHandle>,
    /// Operations counted on `ct`.
    issued: u64,
    /// Failures already reported.
    failed_seen: u64,
    /// Their descriptors, unlinked once acknowledged.
    mds: Vec<MdHandle>,
}

struct WinState {
    epochs: Epochs,
    pending: Vec<Pending>,
    /// Non-blocking operations not yet completed: (id, target, counter,
    /// events expected). A flush waits for them too.
    requests: Vec<(u64, u32, portals::CtHandle, u64)>,
    next_req: u64,
}

/// A rank's attached regions: (address, bytes) each.
type RegionTable = Vec<(u64, u64)>;

/// What a window and its requests share.
pub(crate) struct WinCore {
    comm: SimpleCommunicator,
    ids: Vec<ProcessId>,
    /// Bytes of each rank's window.
    sizes: Vec<u64>,
    data_bits: u64,
    lock_bits: u64,
    /// A dynamic window: accesses name addresses, looked up in the
    /// target's region table (`dynamic.rs`).
    dynamic: bool,
    /// Each target's region table as last read (dynamic windows).
    tables: Mutex<Vec<Option<RegionTable>>>,
    st: Mutex<WinState>,
}

impl WinCore {
    fn ni(&self) -> &NetworkInterface {
        self.comm.inner.dev.job().ni()
    }

    fn lock(&self) -> MutexGuard<'_, WinState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn size(&self) -> u32 {
        self.ids.len() as u32
    }

    fn me(&self) -> u32 {
        self.comm.inner.me
    }

    /// `t` as an index, or `InvalidRank`.
    fn rank(&self, t: Rank) -> Result<u32> {
        u32::try_from(t)
            .ok()
            .filter(|&r| r < self.size())
            .ok_or(MpiError::InvalidRank {
                rank: t,
                size: self.size() as Rank,
            })
    }
}

/// Unlink `md`, retrying while a transfer still uses it: a descriptor over
/// caller memory must be gone before the memory goes back.
fn release_md(ni: &NetworkInterface, md: MdHandle) {
    let mut tries = 0u64;
    loop {
        match ni.md_unlink(md) {
            Ok(_) | Err(PtlError::InvalidHandle { .. }) => return,
            Err(e) => {
                tries += 1;
                if tries % 10_000 == 0 {
                    tracing::warn!(error = %e, "a window descriptor is still in use");
                }
                let _ = ni.poll();
                std::thread::sleep(RETRY);
            }
        }
    }
}

/// A window's memory.
enum Mem<T> {
    /// Caller memory, borrowed for the window's life.
    Borrowed { ptr: *mut T },
    /// Memory the window allocated (`Box::into_raw`), freed after the
    /// exposure is gone.
    Owned { ptr: *mut [T] },
    /// This rank's part of a shared window's object (at `ptr`), unmapped
    /// after the exposure is gone.
    Shared { seg: shared::SharedSeg, ptr: *mut T },
}

/// An RMA window (`MPI_Win`) of elements `T`, over memory borrowed for
/// `'m` ([`CommunicatorWindows::create_window`]) or owned
/// ([`CommunicatorWindows::allocate_window`]). See the module docs.
pub struct Window<'m, T: Equivalence> {
    core: Arc<WinCore>,
    data_me: Option<MeHandle>,
    lock_me: Option<MeHandle>,
    lock_md: Option<MdHandle>,
    data_md: Option<MdHandle>,
    /// Dynamic windows: the region table's entry and descriptor.
    table: Option<(MeHandle, MdHandle)>,
    /// Dynamic windows: the attached regions.
    regions: Mutex<Vec<dynamic::Region<T>>>,
    mem: Mem<T>,
    /// Elements of this rank's window.
    len: usize,
    live: bool,
    /// Keeps the process's transport served while the window exists
    /// (dropped after `teardown`, with the other fields).
    _exposure: crate::device::Exposure,
    _m: PhantomData<&'m mut [T]>,
}

// SAFETY: the raw pointers are the window memory, which only the engine
// touches while the window lives (borrowed mutably for 'm, or owned); all
// other state is behind the core's mutex or immutable. `T: Equivalence`
// is `Send + Sync`.
unsafe impl<T: Equivalence> Send for Window<'_, T> {}
// SAFETY: every `&self` method goes through the engine (which serialises
// access to the memory) or the core's mutex.
unsafe impl<T: Equivalence> Sync for Window<'_, T> {}

impl<T: Equivalence> std::fmt::Debug for Window<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("rank", &self.core.me())
            .field("size", &self.core.size())
            .field("len", &self.len)
            .finish()
    }
}

/// Window creation (`MPI_Win_create`, `MPI_Win_allocate`).
pub trait CommunicatorWindows: Communicator {
    /// A window over `mem` (`MPI_Win_create`). Collective. The slice stays
    /// borrowed, so it can be neither used nor freed directly while the
    /// window exists; read and write it through the window.
    fn create_window<'m, T: Equivalence>(&self, mem: &'m mut [T]) -> Result<Window<'m, T>>;

    /// A window over `len` zeroed elements that it owns
    /// (`MPI_Win_allocate`). Collective.
    fn allocate_window<T: Equivalence>(&self, len: usize) -> Result<Window<'static, T>>;

    /// A window over `len` zeroed elements in memory every rank of the
    /// communicator can load from and store to directly
    /// (`MPI_Win_allocate_shared`). Collective; every rank must run on
    /// this host (else every rank gets [`MpiError::RmaUnsupported`]). The
    /// parts lie contiguously in rank order in one shared-memory object;
    /// [`Window::shared_query`] gives access to any rank's part, and the
    /// window takes every operation an allocated window takes.
    fn allocate_shared_window<T: Equivalence>(&self, len: usize) -> Result<Window<'static, T>>;

    /// A window with no memory yet (`MPI_Win_create_dynamic`). Collective.
    /// Each rank attaches regions with [`Window::attach`] and tells the
    /// origins their addresses; in such a window every displacement is an
    /// address (bytes), as in MPI.
    fn create_dynamic_window<T: Equivalence>(&self) -> Result<Window<'static, T>>;
}

impl CommunicatorWindows for SimpleCommunicator {
    fn create_window<'m, T: Equivalence>(&self, mem: &'m mut [T]) -> Result<Window<'m, T>> {
        let len = mem.len();
        Window::expose(
            self,
            Mem::Borrowed {
                ptr: mem.as_mut_ptr(),
            },
            len,
            false,
        )
    }

    fn allocate_window<T: Equivalence>(&self, len: usize) -> Result<Window<'static, T>> {
        let b: Box<[T]> = vec![T::zeroed(); len].into_boxed_slice();
        Window::expose(
            self,
            Mem::Owned {
                ptr: Box::into_raw(b),
            },
            len,
            false,
        )
    }

    fn allocate_shared_window<T: Equivalence>(&self, len: usize) -> Result<Window<'static, T>> {
        if std::mem::size_of::<T>() == 0 {
            return Err(MpiError::RmaUnsupported(
                "windows of zero-sized elements".into(),
            ));
        }
        let seg = shared::map_segment::<T>(self, len)?;
        let (ptr, _) = seg
            .part(self.inner.me as usize)
            .ok_or(MpiError::RmaUnsupported("a rank outside the window".into()))?;
        Window::expose(
            self,
            Mem::Shared {
                seg,
                ptr: ptr.cast(),
            },
            len,
            false,
        )
    }

    fn create_dynamic_window<T: Equivalence>(&self) -> Result<Window<'static, T>> {
        Window::expose(
            self,
            Mem::Borrowed {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
            },
            0,
            true,
        )
    }
}

impl<'m, T: Equivalence> Window<'m, T> {
    fn mem_ptr(&self) -> *mut u8 {
        match self.mem {
            Mem::Borrowed { ptr, .. } => ptr as *mut u8,
            Mem::Owned { ptr } => ptr as *mut T as *mut u8,
            Mem::Shared { ptr, .. } => ptr as *mut u8,
        }
    }

    /// Rank `r`'s part of a shared window, for direct loads and stores
    /// (`MPI_Win_shared_query`): its length in elements and its address in
    /// this process's mapping, valid while the window lives. Refused
    /// ([`MpiError::RmaUnsupported`]) on a window not made by
    /// [`CommunicatorWindows::allocate_shared_window`].
    pub fn shared_query(&self, r: Rank) -> Result<SharedRegion<'_, T>> {
        let t = self.core.rank(r)?;
        let Mem::Shared { seg, .. } = &self.mem else {
            return Err(MpiError::RmaUnsupported(
                "shared_query on a window not allocated shared".into(),
            ));
        };
        let (ptr, bytes) = seg
            .part(t as usize)
            .ok_or(MpiError::RmaUnsupported("a rank outside the window".into()))?;
        Ok(SharedRegion::new(
            ptr.cast(),
            bytes / std::mem::size_of::<T>().max(1),
            r,
        ))
    }

    fn expose(
        comm: &SimpleCommunicator,
        mem: Mem<T>,
        len: usize,
        dynamic: bool,
    ) -> Result<Window<'m, T>> {
        let esize = std::mem::size_of::<T>();
        let wcomm = comm.duplicate();
        let mut win = Window {
            core: Arc::new(WinCore {
                comm: comm.clone(),
                ids: Vec::new(),
                sizes: Vec::new(),
                data_bits: 0,
                lock_bits: 0,
                dynamic,
                tables: Mutex::new(Vec::new()),
                st: Mutex::new(WinState {
                    epochs: Epochs::default(),
                    pending: Vec::new(),
                    requests: Vec::new(),
                    next_req: 1,
                }),
            }),
            data_me: None,
            lock_me: None,
            lock_md: None,
            data_md: None,
            table: None,
            regions: Mutex::new(Vec::new()),
            mem,
            len,
            live: false,
            _exposure: comm.inner.dev.exposure(),
            _m: PhantomData,
        };
        let wcomm = wcomm?;
        let ctx = wcomm.inner.ctx;
        let n = wcomm.size() as usize;
        let data_bits = bits::encode(K_DATA, ctx, 0, 0);
        let lock_bits = bits::encode(K_LOCK, ctx, 0, 0);
        let attached = if esize == 0 {
            Err(MpiError::RmaUnsupported(
                "windows of zero-sized elements".into(),
            ))
        } else {
            win.attach_entries(&wcomm, data_bits, lock_bits, len * esize)
                .and_then(|()| {
                    if dynamic {
                        win.attach_table(&wcomm)
                    } else {
                        Ok(())
                    }
                })
        };
        // Everyone learns every size, and that every entry is attached
        // before anyone may use it; a rank that failed says so with
        // u64::MAX, so that all of them fail instead of waiting.
        let mine = [match attached {
            Ok(()) => (len * esize) as u64,
            Err(_) => u64::MAX,
        }];
        let mut sizes = vec![0u64; n];
        let gathered = wcomm.all_gather_into(&mine[..], &mut sizes[..]);
        let ids = wcomm
            .inner
            .ranks
            .iter()
            .map(|&w| wcomm.inner.dev.job().id(w))
            .collect();
        let pending = (0..n)
            .map(|_| Pending {
                ct: None,
                issued: 0,
                failed_seen: 0,
                mds: Vec::new(),
            })
            .collect();
        win.core = Arc::new(WinCore {
            comm: wcomm,
            ids,
            sizes: sizes.clone(),
            data_bits,
            lock_bits,
            dynamic,
            tables: Mutex::new(vec![None; n]),
            st: Mutex::new(WinState {
                epochs: Epochs::default(),
                pending,
                requests: Vec::new(),
                next_req: 1,
            }),
        });
        attached?;
        gathered?;
        if let Some(r) = sizes.iter().position(|&s| s == u64::MAX) {
            return Err(MpiError::RmaFailed {
                rank: r as Rank,
                why: "it could not expose its window".into(),
            });
        }
        win.live = true;
        Ok(win)
    }

    /// Attach this rank's lock and data entries.
    fn attach_entries(
        &mut self,
        wcomm: &SimpleCommunicator,
        data: u64,
        lock: u64,
        bytes: usize,
    ) -> Result<()> {
        let ni = wcomm.inner.dev.job().ni();
        let ptl = MpiError::Portals;
        let opts = MdOptions::OP_PUT | MdOptions::OP_GET | MdOptions::MANAGE_REMOTE;
        let me = ni
            .me_attach(
                WIN_PT,
                ProcessId::ANY,
                lock,
                0,
                Unlink::Retain,
                Position::After,
            )
            .map_err(ptl)?;
        self.lock_me = Some(me);
        self.lock_md = Some(
            ni.md_attach(me, &MdDesc::new(opts), vec![0u8; 8], Unlink::Retain)
                .map_err(ptl)?,
        );
        let me = ni
            .me_attach(
                WIN_PT,
                ProcessId::ANY,
                data,
                0,
                Unlink::Retain,
                Position::After,
            )
            .map_err(ptl)?;
        self.data_me = Some(me);
        let md = if bytes == 0 {
            ni.md_attach(me, &MdDesc::new(opts), Vec::new(), Unlink::Retain)
        } else {
            // SAFETY: the memory is borrowed mutably for 'm or owned by the
            // window, both outliving the descriptor: `teardown` unlinks it
            // (retrying while in use) before the borrow ends or the memory
            // is freed, and a window whose entries cannot be unlinked leaks
            // its owned memory instead of freeing it. Nobody else touches
            // it meanwhile: the owner only copies through the engine.
            unsafe {
                ni.md_attach_raw(
                    me,
                    &MdDesc::new(opts),
                    self.mem_ptr(),
                    bytes,
                    Unlink::Retain,
                )
            }
        };
        self.data_md = Some(md.map_err(ptl)?);
        Ok(())
    }

    /// This rank's rank in the window's communicator.
    pub fn rank(&self) -> Rank {
        self.core.me() as Rank
    }

    /// Number of ranks of the window.
    pub fn size(&self) -> Rank {
        self.core.size() as Rank
    }

    /// Elements of rank `r`'s window.
    pub fn len_of(&self, r: Rank) -> Result<usize> {
        let t = self.core.rank(r)?;
        Ok(self.core.sizes[t as usize] as usize / std::mem::size_of::<T>().max(1))
    }

    /// Elements of this rank's window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if this rank's window has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The window's communicator (a duplicate of the one it was created
    /// on).
    pub fn communicator(&self) -> &SimpleCommunicator {
        &self.core.comm
    }

    /// The descriptor and offset of `n` local elements at `disp`.
    fn local_at(&self, disp: usize, n: usize) -> Result<(MdHandle, u64)> {
        let off = if self.core.dynamic {
            if n > 0 {
                return self.local_region(disp, n);
            }
            0 // nothing to access: any address will do
        } else {
            self.check_local(disp, n)?
        };
        let md = self
            .data_md
            .ok_or_else(|| MpiError::RmaEpoch("the window was freed".into()))?;
        Ok((md, off))
    }

    fn check_local(&self, disp: usize, n: usize) -> Result<u64> {
        if disp.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(MpiError::RmaRange {
                rank: self.rank(),
                disp,
                len: n,
                size: self.len,
            });
        }
        Ok((disp * std::mem::size_of::<T>()) as u64)
    }

    /// Copy elements `disp..disp + buf.len()` of this rank's window into
    /// `buf`. Waits while a transfer uses those bytes; each element is
    /// read whole with respect to remote operations.
    pub fn read_local(&self, disp: usize, buf: &mut [T]) -> Result<()> {
        let (md, off) = self.local_at(disp, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        let ni = self.core.ni();
        loop {
            match ni.md_read(md, off, bytemuck::cast_slice_mut(buf)) {
                Err(PtlError::MdInUse) => std::thread::sleep(RETRY),
                r => return r.map_err(MpiError::Portals),
            }
        }
    }

    /// Copy `data` into elements `disp..` of this rank's window (waits
    /// while a transfer uses those bytes).
    pub fn write_local(&self, disp: usize, data: &[T]) -> Result<()> {
        let (md, off) = self.local_at(disp, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let ni = self.core.ni();
        loop {
            match ni.md_write(md, off, bytemuck::cast_slice(data)) {
                Err(PtlError::MdInUse) => std::thread::sleep(RETRY),
                r => return r.map_err(MpiError::Portals),
            }
        }
    }

    /// A copy of this rank's whole window.
    pub fn local(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.read_local(0, &mut v)?;
        Ok(v)
    }

    /// Run `f` on this rank's window memory with no other rank's
    /// passive-target access in between: an exclusive lock on the own
    /// window, then the memory is copied out, `f` runs on the copy and it
    /// is written back before the unlock. Refused (`RmaEpoch`) while this
    /// process holds a lock on its own window or `lock_all`.
    pub fn with_local<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        let g = self.lock(self.rank(), LockType::Exclusive)?;
        let mut v = self.local()?;
        let r = f(&mut v);
        self.write_local(0, &v)?;
        g.unlock()?;
        Ok(r)
    }

    /// Free the window (`MPI_Win_free`). Collective: completes this rank's
    /// operations, waits until every rank is done with the window (a
    /// barrier), then removes the exposure. Dropping a live window does
    /// the same and logs errors.
    pub fn free(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        // A window that never went live (its creation failed) has no
        // operations to complete and no barrier to join, but may have
        // entries over the memory.
        let (flushed, synced) = if self.live {
            self.live = false;
            (self.flush_all(), self.core.comm.barrier())
        } else {
            (Ok(()), Ok(()))
        };
        let ni = self.core.ni();
        let mut gone = true;
        // Borrowed memory goes back to its owner when the window is gone,
        // so its entry must be unlinked first, however long that takes;
        // owned memory can be leaked instead.
        let borrowed = matches!(self.mem, Mem::Borrowed { .. }) && self.len > 0;
        let table = self.table.take().map(|(me, _)| me);
        for me in [self.data_me.take(), self.lock_me.take(), table]
            .into_iter()
            .flatten()
        {
            let mut tries = 0u32;
            loop {
                match ni.me_unlink(me) {
                    Ok(_) | Err(PtlError::InvalidHandle { .. }) => break,
                    Err(e) if borrowed || tries < 50_000 => {
                        tries += 1;
                        if tries % 50_000 == 0 {
                            tracing::warn!(error = %e, "a window entry over borrowed memory is still in use");
                        }
                        let _ = ni.poll();
                        std::thread::sleep(RETRY);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "a window entry cannot be unlinked: its memory is leaked");
                        gone = false;
                        break;
                    }
                }
            }
        }
        self.data_md = None;
        self.lock_md = None;
        self.detach_all();
        let mut st = self.core.lock();
        for p in &mut st.pending {
            for md in p.mds.drain(..) {
                release_md(ni, md);
            }
            if let Some(ct) = p.ct.take() {
                let _ = ni.ct_free(ct);
            }
        }
        drop(st);
        if !gone {
            // Only owned or shared memory gets here (see `borrowed`): leak
            // it (an owned box or a mapping left in place).
            std::mem::forget(std::mem::replace(
                &mut self.mem,
                Mem::Borrowed {
                    ptr: std::ptr::null_mut(),
                },
            ));
        }
        flushed?;
        synced?;
        Ok(())
    }
}

impl<T: Equivalence> Drop for Window<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::error!(error = %e, "freeing a window on drop failed");
        }
        if let Mem::Owned { ptr } = self.mem {
            // SAFETY: `ptr` came from `Box::into_raw` in `allocate_window`
            // and the exposure over it is unlinked (`teardown` replaces it
            // with a null borrowed pointer when it is not, leaking it).
            drop(unsafe { Box::from_raw(ptr) });
        }
    }
}
