//! User error handlers: `MPI_Comm_create_errhandler`,
//! `MPI_Win_create_errhandler`, `MPI_Comm_call_errhandler`,
//! `MPI_Win_call_errhandler`, and freeing and checking handler handles.
//!
//! A handler is a C function `void f(MPI_Comm *, int *, ...)` (or
//! `MPI_Win *`), called with the object the failing call named and the
//! error code; the call then returns that code. Handlers live in a
//! process-wide table whose slots are never reused: MPI lets a freed
//! handler go on serving the objects it is attached to.

use std::ffi::c_int;
use std::sync::Mutex;

use crate::consts::*;
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::state::{handle, slot};

/// The C type of a communicator's or window's error handler.
pub type HandlerFn = unsafe extern "C" fn(*mut c_int, *mut c_int, ...);

/// What a user handler serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    Comm,
    Win,
}

struct Entry {
    f: HandlerFn,
    serves: Serves,
    freed: bool,
}

static TABLE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn table() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The user handler behind `h`, if `h` is one, and whether it was freed.
fn user(h: c_int) -> Option<(HandlerFn, Serves, bool)> {
    let i = slot(h, KIND_ERRHANDLER)?;
    table().get(i).map(|e| (e.f, e.serves, e.freed))
}

/// `h` may be attached to an object that `serves`: a predefined handler
/// (`MPI_ERRORS_ABORT` acts as `MPI_ERRORS_ARE_FATAL`: the job is one
/// communicator's processes or more, and aborting it ends them all), or a
/// user handler made for that kind of object.
pub fn check(h: c_int, serves: Serves) -> Res {
    if h == MPI_ERRORS_ARE_FATAL || h == MPI_ERRORS_RETURN || h == MPI_ERRORS_ABORT {
        return Ok(());
    }
    match user(h) {
        Some((_, s, false)) if s == serves => Ok(()),
        Some((_, _, false)) => fail(
            MPI_ERR_ARG,
            format!("error handler {h:#x} was made for another kind of object"),
        ),
        _ => fail(
            MPI_ERR_ARG,
            format!("invalid or freed error handler {h:#x}"),
        ),
    }
}

/// Call user handler `h` with `object` and `code`; false if `h` is not a
/// user handler (a predefined one decides elsewhere).
pub fn call(h: c_int, object: c_int, code: c_int) -> bool {
    let Some((f, _, _)) = user(h) else {
        return false;
    };
    let (mut object, mut code) = (object, code);
    // SAFETY: `f` is the function the program registered with this
    // signature; both pointers are to live locals for the call.
    unsafe { f(&mut object, &mut code) };
    true
}

/// Register `function` and write its handle through `errhandler`.
fn create(function: Option<HandlerFn>, serves: Serves, errhandler: *mut c_int) -> Res {
    let Some(f) = function else {
        return fail(MPI_ERR_ARG, "the handler function is NULL");
    };
    let h = {
        let mut t = table();
        if t.len() > SLOT_MASK as usize {
            return fail(MPI_ERR_NO_MEM, "too many error handlers");
        }
        t.push(Entry {
            f,
            serves,
            freed: false,
        });
        handle(t.len() - 1, KIND_ERRHANDLER)
    };
    ptr::out(errhandler, h, "errhandler")
}

/// `MPI_Errhandler_free` of `*errhandler`: predefined handlers and live
/// user handlers; the handle becomes `MPI_ERRHANDLER_NULL`.
pub fn free(errhandler: *mut c_int) -> Res {
    let h = ptr::read(errhandler, "errhandler")?;
    if h != MPI_ERRORS_ARE_FATAL && h != MPI_ERRORS_RETURN && h != MPI_ERRORS_ABORT {
        let i = slot(h, KIND_ERRHANDLER);
        let mut t = table();
        match i.and_then(|i| t.get_mut(i)) {
            Some(e) if !e.freed => e.freed = true,
            _ => return fail(MPI_ERR_ARG, format!("invalid error handler {h:#x}")),
        }
    }
    ptr::out(errhandler, MPI_ERRHANDLER_NULL, "errhandler")
}

entry! {
    fn MPI_Comm_create_errhandler | PMPI_Comm_create_errhandler(function: Option<HandlerFn>, errhandler: *mut c_int) {
        create(function, Serves::Comm, errhandler)
    }
}

entry! {
    fn MPI_Win_create_errhandler | PMPI_Win_create_errhandler(function: Option<HandlerFn>, errhandler: *mut c_int) {
        create(function, Serves::Win, errhandler)
    }
}

entry! {
    /// Hand `errorcode` to `comm`'s error handler, as a failing call
    /// would: MPI_SUCCESS if a handler returns.
    fn MPI_Comm_call_errhandler | PMPI_Comm_call_errhandler(comm: c_int, errorcode: c_int) {
        crate::state::comm(comm)?;
        let (h, _) = crate::state::errhandler_of(crate::error::On::Comm(comm));
        if !call(h, comm, errorcode) && h != MPI_ERRORS_RETURN {
            return Err(Fail::new(errorcode, "raised by the program").on_comm(comm));
        }
        Ok(())
    }
}

entry! {
    /// Hand `errorcode` to `win`'s error handler.
    fn MPI_Win_call_errhandler | PMPI_Win_call_errhandler(win: c_int, errorcode: c_int) {
        crate::rma::win(win)?;
        let (h, _) = crate::state::errhandler_of(crate::error::On::Win(win));
        if !call(h, win, errorcode) && h != MPI_ERRORS_RETURN {
            return Err(Fail::new(errorcode, "raised by the program").on_win(win));
        }
        Ok(())
    }
}
