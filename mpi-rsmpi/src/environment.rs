//! The MPI environment: initialization, the [`Universe`], and what MPI says
//! about itself (rsmpi's `mpi::environment`).

use std::string::FromUtf8Error;

use crate::fatal::check;
use crate::topology::SimpleCommunicator;

pub use mpi_on_portals::Threading;

/// The MPI environment; dropping it finalizes (see
/// [`mpi_on_portals::Universe`]).
#[derive(Debug)]
pub struct Universe {
    inner: mpi_on_portals::Universe,
    buffer_size: usize,
}

/// Initialize MPI (`MPI_Init`). `None` if it cannot be (already
/// initialized in this process, or the job cannot be joined: the reason is
/// printed).
pub fn initialize() -> Option<Universe> {
    initialize_with_threading(Threading::Single).map(|(u, _)| u)
}

/// Initialize MPI asking for a thread level; the universe and the level
/// provided. `None` as for [`initialize`].
///
/// Every level is supported, so the level provided is the one asked for
/// (as MPICH answers), which is what [`threading_support`] reports after.
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    match mpi_on_portals::initialize_with_threading(threading) {
        Ok((inner, _)) => Some((
            Universe {
                inner,
                buffer_size: 0,
            },
            {
                state::initialized(threading);
                threading
            },
        )),
        Err(e) => {
            eprintln!("mpi: initialize failed: {e}");
            None
        }
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        // The inner universe finalizes right after this.
        state::finalized();
    }
}

impl Universe {
    /// The communicator of all processes (`MPI_COMM_WORLD`).
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::new(self.inner.world())
    }

    /// The number of processes of the job (`MPI_UNIVERSE_SIZE`).
    pub fn size(&self) -> Option<usize> {
        usize::try_from(self.inner.size()).ok()
    }

    /// The size of the buffer attached for buffered sends (0: none).
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// Attach a buffer of `size` bytes for buffered sends
    /// (`MPI_Buffer_attach`), replacing an attached one.
    pub fn set_buffer_size(&mut self, size: usize) {
        self.detach_buffer();
        self.inner.buffer_attach(size);
        self.buffer_size = size;
    }

    /// Detach the buffered-send buffer (`MPI_Buffer_detach`): waits until
    /// the buffered sends are done.
    pub fn detach_buffer(&mut self) {
        if self.buffer_size > 0 {
            check(self.inner.buffer_detach(), "Universe::detach_buffer");
            self.buffer_size = 0;
        }
    }

    /// The `Result` API's universe, for calls this face does not offer.
    pub fn as_result_api(&self) -> &mpi_on_portals::Universe {
        &self.inner
    }
}

/// The MPI standard version this library follows, as (major, minor).
pub fn version() -> (i32, i32) {
    mpi_on_portals::environment::version()
}

/// The library's name and version (`MPI_Get_library_version`).
pub fn library_version() -> Result<String, FromUtf8Error> {
    Ok(mpi_on_portals::environment::library_version())
}

/// The name of this host (`MPI_Get_processor_name`).
pub fn processor_name() -> Result<String, FromUtf8Error> {
    Ok(mpi_on_portals::environment::processor_name())
}

/// The thread level MPI provides (`MPI_Query_thread`): the level asked
/// for at initialization ([`Threading::Multiple`] before it).
pub fn threading_support() -> Threading {
    state::threading()
}

/// Whether MPI is initialized (`MPI_Initialized`): once initialized, it
/// stays so, finalized or not, as in MPI.
pub fn is_initialized() -> bool {
    state::get().0 != state::NEVER
}

/// Whether MPI is finalized (`MPI_Finalized`).
pub fn is_finalized() -> bool {
    state::get().0 == state::FINALIZED
}

/// Where the process stands with MPI, for the checks of derived datatypes
/// (which rsmpi makes at their first use).
pub(crate) mod state {
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::Threading;

    pub(crate) const NEVER: u8 = 0;
    pub(crate) const LIVE: u8 = 1;
    pub(crate) const FINALIZED: u8 = 2;

    /// (stage, level provided, the thread that initialized).
    static STATE: Mutex<(u8, Threading, Option<ThreadId>)> =
        Mutex::new((NEVER, Threading::Multiple, None));

    pub(crate) fn get() -> (u8, Threading, Option<ThreadId>) {
        *STATE.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(f: impl FnOnce(&mut (u8, Threading, Option<ThreadId>))) {
        f(&mut STATE.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn initialized(level: Threading) {
        set(|s| *s = (LIVE, level, Some(std::thread::current().id())));
    }

    pub(crate) fn finalized() {
        set(|s| s.0 = FINALIZED);
    }

    pub(crate) fn threading() -> Threading {
        get().1
    }
}

/// Wall-clock time in seconds (`MPI_Wtime`).
pub fn time() -> f64 {
    mpi_on_portals::environment::time()
}

/// The resolution of [`time`] in seconds (`MPI_Wtick`).
pub fn time_resolution() -> f64 {
    mpi_on_portals::environment::time_resolution()
}
