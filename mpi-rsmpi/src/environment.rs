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
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    match mpi_on_portals::initialize_with_threading(threading) {
        Ok((inner, provided)) => Some((
            Universe {
                inner,
                buffer_size: 0,
            },
            provided,
        )),
        Err(e) => {
            eprintln!("mpi: initialize failed: {e}");
            None
        }
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

/// The thread level MPI provides (`MPI_Query_thread`): always
/// [`Threading::Multiple`] here.
pub fn threading_support() -> Threading {
    Threading::Multiple
}

/// Wall-clock time in seconds (`MPI_Wtime`).
pub fn time() -> f64 {
    mpi_on_portals::environment::time()
}

/// The resolution of [`time`] in seconds (`MPI_Wtick`).
pub fn time_resolution() -> f64 {
    mpi_on_portals::environment::time_resolution()
}
