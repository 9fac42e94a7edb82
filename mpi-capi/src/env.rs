//! The environment: `MPI_Init` … `MPI_Finalize`, `MPI_Abort`, clocks,
//! versions, attributes of `MPI_COMM_WORLD`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Instant;

use mpi_on_portals::traits::*;
use mpi_on_portals::{Color, Threading};

use crate::consts::*;
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::state::{self, CommEntry, State, Table, BEFORE, FINALIZED, PHASE, RUNNING};

/// Join the job (`mpi_on_portals::initialize_with_threading`) and set up
/// the predefined handles.
fn init(required: c_int) -> Res {
    if PHASE
        .compare_exchange(BEFORE, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return match PHASE.load(Ordering::SeqCst) {
            FINALIZED => fail(
                MPI_ERR_OTHER,
                "MPI cannot be initialized after MPI_Finalize",
            ),
            _ => fail(MPI_ERR_OTHER, "MPI is already initialized"),
        };
    }
    let made = (|| -> Result<State, Fail> {
        let level = match required {
            0 => Threading::Single,
            1 => Threading::Funneled,
            2 => Threading::Serialized,
            _ => Threading::Multiple,
        };
        let (universe, _) = mpi_on_portals::initialize_with_threading(level)?;
        let world = universe.world();
        let me = world.rank();
        let selfc = world
            .split_by_color(Color::with_value(me))?
            .ok_or_else(|| Fail::new(MPI_ERR_INTERN, "MPI_COMM_SELF could not be made"))?;
        let empty = world.group().include(&[])?;
        let mut st = State {
            rank: me,
            size: world.size(),
            universe,
            comms: Table::default(),
            groups: Table::default(),
            types: Table::default(),
            ops: Table::default(),
            wins: Table::default(),
            reqs: Table::default(),
            msgs: Table::default(),
        };
        for comm in [world, selfc] {
            st.comms.insert(CommEntry {
                comm,
                errh: MPI_ERRORS_ARE_FATAL,
            });
        }
        st.groups.insert(empty);
        Ok(st)
    })();
    match made {
        Ok(st) => {
            *state::lock() = Some(st);
            state::comms_changed();
            state::THREAD_LEVEL.store(MPI_THREAD_MULTIPLE as u8, Ordering::SeqCst);
            Ok(())
        }
        Err(e) => {
            PHASE.store(BEFORE, Ordering::SeqCst);
            Err(e)
        }
    }
}

entry! {
    fn MPI_Init | PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) {
        init(MPI_THREAD_SINGLE)
    }
}

entry! {
    fn MPI_Init_thread | PMPI_Init_thread(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) {
        ptr::out(provided, MPI_THREAD_MULTIPLE, "provided")?;
        init(required)
    }
}

entry! {
    fn MPI_Query_thread | PMPI_Query_thread(provided: *mut c_int) {
        ptr::out(provided, state::THREAD_LEVEL.load(Ordering::SeqCst) as c_int, "provided")
    }
}

entry! {
    fn MPI_Is_thread_main | PMPI_Is_thread_main(flag: *mut c_int) {
        ptr::out(flag, 1, "flag")
    }
}

entry! {
    fn MPI_Initialized | PMPI_Initialized(flag: *mut c_int) {
        ptr::out(flag, (PHASE.load(Ordering::SeqCst) != BEFORE) as c_int, "flag")
    }
}

entry! {
    fn MPI_Finalized | PMPI_Finalized(flag: *mut c_int) {
        ptr::out(flag, (PHASE.load(Ordering::SeqCst) == FINALIZED) as c_int, "flag")
    }
}

entry! {
    /// Completes what is pending (sends waited for, receives cancelled),
    /// frees windows and communicators, then finalizes the universe
    /// (closing barrier).
    fn MPI_Finalize | PMPI_Finalize() {
        // Every rank reaches finalize before any departs. Added when a
        // peer still in a closing collective (the barrier of
        // MPI_Win_free) failed with PeerFinalized over shm; the cause, a
        // departure notice overtaking an acknowledgment still owed, is
        // fixed where the notice is sent (mpi-on-portals'
        // `Device::depart` fences the transport's responses first), and a
        // barrier followed by departing had the same race anyway. Kept:
        // one barrier, harmless. Errors (a dead peer) are left to the
        // universe's own closing barrier.
        if let Ok(world) = state::comm(MPI_COMM_WORLD) {
            let _ = world.barrier();
        }
        let taken = state::lock().take();
        let Some(st) = taken else {
            return match PHASE.load(Ordering::SeqCst) {
                FINALIZED => fail(MPI_ERR_OTHER, "MPI_Finalize was already called"),
                _ => fail(MPI_ERR_OTHER, "called before MPI_Init"),
            };
        };
        PHASE.store(FINALIZED, Ordering::SeqCst);
        state::comms_changed();
        state::forget_cached_comms();
        let State { universe, mut comms, mut groups, mut wins, mut reqs, mut types, .. } = st;
        drop(reqs.drain());
        drop(wins.drain());
        drop(comms.drain());
        drop(groups.drain());
        drop(types.drain());
        drop(universe);
        Ok(())
    }
}

entry! {
    /// Ends every rank of the job with `errorcode` (see
    /// `Communicator::abort`).
    fn MPI_Abort | PMPI_Abort(comm: c_int, errorcode: c_int) {
        match state::comm(comm).or_else(|_| state::comm(MPI_COMM_WORLD)) {
            Ok(c) => c.abort(errorcode),
            Err(_) => {
                eprintln!("MPI_Abort({errorcode}) before MPI_Init or after MPI_Finalize");
                std::process::exit(if errorcode & 0xff == 0 { 1 } else { errorcode });
            }
        }
    }
}

fn epoch() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Seconds on a monotonic clock (`MPI_Wtime`; not synchronised between
/// ranks: `MPI_WTIME_IS_GLOBAL` is false).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> f64 {
    epoch().elapsed().as_secs_f64()
}

/// See [`PMPI_Wtime`].
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    PMPI_Wtime()
}

/// The clock's resolution (`MPI_Wtick`): a nanosecond.
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> f64 {
    1e-9
}

/// See [`PMPI_Wtick`].
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    PMPI_Wtick()
}

/// `MPI_Aint_add`: `base + disp`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

/// See [`PMPI_Aint_add`].
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    PMPI_Aint_add(base, disp)
}

/// `MPI_Aint_diff`: `a - b`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(a: isize, b: isize) -> isize {
    a.wrapping_sub(b)
}

/// See [`PMPI_Aint_diff`].
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(a: isize, b: isize) -> isize {
    PMPI_Aint_diff(a, b)
}

/// `MPI_File_f2c`: there are no files here; `MPI_FILE_NULL`.
#[no_mangle]
pub extern "C" fn PMPI_File_f2c(_f: c_int) -> *mut c_void {
    std::ptr::null_mut()
}

/// See [`PMPI_File_f2c`].
#[no_mangle]
pub extern "C" fn MPI_File_f2c(f: c_int) -> *mut c_void {
    PMPI_File_f2c(f)
}

entry! {
    fn MPI_Get_processor_name | PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) {
        let mut buf = [0u8; MPI_MAX_PROCESSOR_NAME];
        // SAFETY: `buf` is writable for its length; gethostname writes at
        // most that many bytes.
        let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
        let host = if r == 0 {
            let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len() - 1);
            String::from_utf8_lossy(&buf[..n]).into_owned()
        } else {
            "localhost".to_string()
        };
        ptr::c_string(name, MPI_MAX_PROCESSOR_NAME, &host, resultlen)
    }
}

entry! {
    fn MPI_Get_version | PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) {
        ptr::out(version, MPI_VERSION, "version")?;
        ptr::out(subversion, MPI_SUBVERSION, "subversion")
    }
}

entry! {
    fn MPI_Get_library_version | PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) {
        let v = format!(
            "portals-rs mpi-capi {} (MPICH ABI, over mpi-on-portals)",
            env!("CARGO_PKG_VERSION")
        );
        ptr::c_string(version, MPI_MAX_LIBRARY_VERSION_STRING, &v, resultlen)
    }
}

entry! {
    fn MPI_Pcontrol | PMPI_Pcontrol(_level: c_int) {
        Ok(())
    }
}

/// Values behind the predefined attributes (`MPI_Comm_get_attr` returns
/// pointers to them).
static TAG_UB: c_int = c_int::MAX;
static NO_HOST: c_int = MPI_PROC_NULL;
static ANY_IO: c_int = MPI_ANY_SOURCE;
static NOT_GLOBAL: c_int = 0;
static APPNUM: c_int = 0;
static UNIVERSE: OnceLock<c_int> = OnceLock::new();

entry! {
    /// The predefined attributes (`MPI_TAG_UB`, `MPI_HOST`, `MPI_IO`,
    /// `MPI_WTIME_IS_GLOBAL`, `MPI_UNIVERSE_SIZE`, `MPI_APPNUM`); user
    /// keys are not supported (flag 0).
    fn MPI_Comm_get_attr | PMPI_Comm_get_attr(
        comm: c_int,
        keyval: c_int,
        attribute_val: *mut c_void,
        flag: *mut c_int,
    ) {
        let size = state::with(|st| {
            st.comm_entry(comm)?;
            Ok(st.size)
        })
        .map_err(|f| f.on_comm(comm))?;
        let p: Option<&'static c_int> = match keyval {
            MPI_TAG_UB => Some(&TAG_UB),
            MPI_HOST => Some(&NO_HOST),
            MPI_IO => Some(&ANY_IO),
            MPI_WTIME_IS_GLOBAL => Some(&NOT_GLOBAL),
            MPI_UNIVERSE_SIZE => Some(UNIVERSE.get_or_init(|| size)),
            MPI_APPNUM => Some(&APPNUM),
            _ => None,
        };
        ptr::out(flag, p.is_some() as c_int, "flag")?;
        if let Some(p) = p {
            ptr::out(
                attribute_val.cast::<*const c_int>(),
                p as *const c_int,
                "attribute_val",
            )?;
        }
        Ok(())
    }
}

entry! {
    fn MPI_Error_string | PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) {
        let s = crate::error::class_string(errorcode);
        ptr::c_string(string, MPI_MAX_ERROR_STRING, s, resultlen)
    }
}

entry! {
    /// Codes are classes here.
    fn MPI_Error_class | PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) {
        if !(0..=MPI_ERR_LASTCODE).contains(&errorcode) {
            return fail(MPI_ERR_ARG, format!("invalid error code {errorcode}"));
        }
        ptr::out(errorclass, errorcode, "errorclass")
    }
}

entry! {
    /// Plain `malloc`: no memory is special to the engine.
    fn MPI_Alloc_mem | PMPI_Alloc_mem(size: isize, _info: c_int, baseptr: *mut c_void) {
        let n = usize::try_from(size).map_err(|_| Fail::new(MPI_ERR_ARG, format!("invalid size {size}")))?;
        // SAFETY: malloc of any size; the result is checked.
        let p = unsafe { libc::malloc(n.max(1)) };
        if p.is_null() {
            return fail(MPI_ERR_NO_MEM, format!("cannot allocate {n} bytes"));
        }
        ptr::out(baseptr.cast::<*mut c_void>(), p, "baseptr")
    }
}

entry! {
    fn MPI_Free_mem | PMPI_Free_mem(base: *mut c_void) {
        // SAFETY: MPI requires `base` to come from MPI_Alloc_mem (malloc).
        unsafe { libc::free(base) };
        Ok(())
    }
}
