//! Test helpers.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use super::{PmiEndpoint, PmiEnv};

/// The environment hydra gives rank `rank` of `size` over `PMI_FD`, with a
/// descriptor that is never opened: tests hand `PmiClient::connect` a
/// transport directly.
pub(crate) fn fd_env(rank: u32, size: u32) -> PmiEnv {
    PmiEnv {
        endpoint: PmiEndpoint::Fd(-1),
        rank: Some(rank),
        size: Some(size),
        id: None,
        jobid: None,
        spawned: false,
        debug: false,
    }
}

/// Run `f` on its own thread and fail the test if it has not finished after
/// `secs` seconds, so that no test can hang the suite.
pub(crate) fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        // Finished, or panicked (the sender dropped without sending).
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(RecvTimeoutError::Timeout) => panic!("test did not finish within {secs} s"),
    }
}
