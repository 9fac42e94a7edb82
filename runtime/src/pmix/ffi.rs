//! The part of OpenPMIx's C ABI the client uses, loaded at run time.
//!
//! Why `dlopen` and not a link-time dependency (or `bindgen`): `libpmix` is
//! needed only by a process that a PMIx launcher started, and most builds
//! and runs (`ptlrun`, hydra, a laptop) never touch it. Linking it would
//! make `libpmix-dev` a build requirement of every crate above `runtime`
//! and the library a load-time requirement of every binary; `bindgen`
//! would add libclang on top. Instead the seven calls and three structures
//! below are written out by hand from `pmix_common.h` (PMIx standard 4.x,
//! whose ABI for these has been stable since PMIx 2), their sizes are
//! checked at compile time against the header's, and a test compiles a C
//! probe against the installed header, where there is one, to check the
//! offsets too (`pmix::tests::the_layouts_match_the_installed_header`).

use std::ffi::{c_char, c_int, c_void, CStr};

/// `pmix_status_t`.
pub type Status = c_int;
/// `pmix_rank_t`.
pub type Rank = u32;

/// `PMIX_SUCCESS`.
pub const SUCCESS: Status = 0;
/// `PMIX_ERR_NOT_FOUND`.
pub const ERR_NOT_FOUND: Status = -46;
/// `PMIX_ERR_UNREACH`: the server cannot be reached (any more).
pub const ERR_UNREACH: Status = -25;
/// `PMIX_ERR_LOST_CONNECTION`.
pub const ERR_LOST_CONNECTION: Status = -61;

/// `PMIX_RANK_WILDCARD`: the job as a whole (job-level keys).
pub const RANK_WILDCARD: Rank = u32::MAX - 1;

/// `PMIX_MAX_NSLEN`: a namespace name's longest length.
pub const MAX_NSLEN: usize = 255;
/// `PMIX_MAX_KEYLEN`: a key's longest length.
pub const MAX_KEYLEN: usize = 511;

/// `pmix_data_type_t` values used here.
pub mod types {
    /// `PMIX_BOOL`.
    pub const BOOL: u16 = 1;
    /// `PMIX_STRING`.
    pub const STRING: u16 = 3;
    /// `PMIX_SIZE`.
    pub const SIZE: u16 = 4;
    /// `PMIX_INT`.
    pub const INT: u16 = 6;
    /// `PMIX_INT32`.
    pub const INT32: u16 = 9;
    /// `PMIX_UINT`.
    pub const UINT: u16 = 11;
    /// `PMIX_UINT16`.
    pub const UINT16: u16 = 13;
    /// `PMIX_UINT32`.
    pub const UINT32: u16 = 14;
    /// `PMIX_UINT64`.
    pub const UINT64: u16 = 15;
    /// `PMIX_PROC_RANK`.
    pub const PROC_RANK: u16 = 40;
}

/// `PMIX_GLOBAL`: a put every process of the job may get.
pub const SCOPE_GLOBAL: u8 = 3;

/// Attribute keys (`pmix_common.h`).
pub mod keys {
    /// `PMIX_JOB_SIZE`: number of processes of the job (uint32).
    pub const JOB_SIZE: &std::ffi::CStr = c"pmix.job.size";
    /// `PMIX_COLLECT_DATA`: a fence that also distributes every put.
    pub const COLLECT_DATA: &std::ffi::CStr = c"pmix.collect";
    /// `PMIX_TIMEOUT`: give up on a call after this many seconds (int).
    pub const TIMEOUT: &std::ffi::CStr = c"pmix.timeout";
}

/// `pmix_proc_t`: a namespace and a rank in it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Proc {
    /// NUL-terminated namespace name.
    pub nspace: [c_char; MAX_NSLEN + 1],
    /// Rank in the namespace.
    pub rank: Rank,
}

/// The union of `pmix_value_t`, reduced to the members used here; `_pad`
/// gives it the header's size (its largest member, `pmix_envar_t`, is
/// two pointers and a char).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ValueData {
    /// `bool flag`.
    pub flag: bool,
    /// `char *string`.
    pub string: *mut c_char,
    /// `size_t size`.
    pub size: usize,
    /// `int integer`.
    pub integer: c_int,
    /// `int32_t int32`.
    pub int32: i32,
    /// `unsigned int uint`.
    pub uint: u32,
    /// `uint16_t uint16`.
    pub uint16: u16,
    /// `uint32_t uint32` (and `pmix_rank_t rank`).
    pub uint32: u32,
    /// `uint64_t uint64`.
    pub uint64: u64,
    _pad: [u64; 3],
}

/// `pmix_value_t`: a type tag and the value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Value {
    /// `pmix_data_type_t`.
    pub ty: u16,
    /// The value, as `ty` says.
    pub data: ValueData,
}

/// `pmix_info_t`: a key, directive flags and a value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Info {
    /// NUL-terminated key.
    pub key: [c_char; MAX_KEYLEN + 1],
    /// `pmix_info_directives_t`.
    pub flags: u32,
    /// The value.
    pub value: Value,
}

// The sizes `pmix_common.h` gives on LP64 Linux (see the module docs).
const _: () = assert!(std::mem::size_of::<Proc>() == 260);
const _: () = assert!(std::mem::size_of::<Value>() == 32);
const _: () = assert!(std::mem::size_of::<Info>() == 552);

impl Proc {
    /// `nspace` (truncated to [`MAX_NSLEN`] bytes) and `rank`.
    pub fn new(nspace: &[u8], rank: Rank) -> Proc {
        let mut p = Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank,
        };
        for (d, s) in p.nspace.iter_mut().zip(nspace.iter().take(MAX_NSLEN)) {
            *d = *s as c_char;
        }
        p
    }

    /// The namespace name, up to its NUL (the array always has one).
    pub fn nspace_bytes(&self) -> Vec<u8> {
        self.nspace
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect()
    }
}

impl Info {
    /// An info with `key` (at most [`MAX_KEYLEN`] bytes) and `value`.
    pub fn new(key: &CStr, value: Value) -> Info {
        let mut i = Info {
            key: [0; MAX_KEYLEN + 1],
            flags: 0,
            value,
        };
        for (d, s) in i.key.iter_mut().zip(key.to_bytes().iter().take(MAX_KEYLEN)) {
            *d = *s as c_char;
        }
        i
    }
}

impl Value {
    /// A `PMIX_BOOL`.
    pub fn flag(b: bool) -> Value {
        let mut data = ValueData { _pad: [0; 3] };
        data.flag = b;
        Value {
            ty: types::BOOL,
            data,
        }
    }

    /// A `PMIX_INT`.
    pub fn int(n: c_int) -> Value {
        let mut data = ValueData { _pad: [0; 3] };
        data.integer = n;
        Value {
            ty: types::INT,
            data,
        }
    }

    /// A `PMIX_STRING` borrowing `s`: valid only while `s` lives (PMIx
    /// copies what it is given in `PMIx_Put`).
    pub fn borrowed_string(s: &CStr) -> Value {
        let mut data = ValueData { _pad: [0; 3] };
        data.string = s.as_ptr().cast_mut();
        Value {
            ty: types::STRING,
            data,
        }
    }
}

/// `PMIx_Init(proc, info, ninfo)`.
pub type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> Status;
/// `PMIx_Finalize(info, ninfo)`.
pub type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> Status;
/// `PMIx_Abort(status, msg, procs, nprocs)`.
pub type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut Proc, usize) -> Status;
/// `PMIx_Put(scope, key, value)`.
pub type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> Status;
/// `PMIx_Commit()`.
pub type CommitFn = unsafe extern "C" fn() -> Status;
/// `PMIx_Fence(procs, nprocs, info, ninfo)`.
pub type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> Status;
/// `PMIx_Get(proc, key, info, ninfo, value_out)`.
pub type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> Status;
/// `PMIx_Value_destruct(value)`: frees what a value owns, not the value.
pub type ValueDestructFn = unsafe extern "C" fn(*mut Value);
/// `PMIx_Error_string(status)`: a static description.
pub type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;

/// The loaded library: its entry points, resolved once.
///
/// The library is never unloaded: once `PMIx_Init` ran, PMIx has a
/// progress thread of its own executing the library's code.
pub struct Lib {
    /// The path or name it was loaded from.
    pub name: String,
    /// `PMIx_Init`.
    pub init: InitFn,
    /// `PMIx_Finalize`.
    pub finalize: FinalizeFn,
    /// `PMIx_Abort`.
    pub abort: AbortFn,
    /// `PMIx_Put`.
    pub put: PutFn,
    /// `PMIx_Commit`.
    pub commit: CommitFn,
    /// `PMIx_Fence`.
    pub fence: FenceFn,
    /// `PMIx_Get`.
    pub get: GetFn,
    /// `PMIx_Value_destruct`.
    pub value_destruct: ValueDestructFn,
    /// `PMIx_Error_string`.
    pub error_string: ErrorStringFn,
}

impl std::fmt::Debug for Lib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lib").field("name", &self.name).finish()
    }
}

impl Lib {
    /// Load `name` (a path, or a soname the dynamic loader searches for)
    /// and resolve every entry point; the error says which step failed.
    pub fn load(name: &str) -> Result<Lib, String> {
        // SAFETY: loading a library runs its initialisers. libpmix's only
        // set up its internal state; the caller chose the library (the
        // default soname, or `PTL_PMIX_LIBRARY`), as with any plug-in.
        let lib = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
        /// Resolve one symbol as a function pointer of type `T`.
        fn sym<T: Copy>(lib: &libloading::Library, name: &[u8]) -> Result<T, String> {
            // SAFETY: each call site names the symbol and the type that
            // `pmix_common.h` declares for it (see the type aliases above);
            // the pointer stays valid because the library is never unloaded.
            unsafe { lib.get::<T>(name) }
                .map(|s| *s)
                .map_err(|e| e.to_string())
        }
        let loaded = Lib {
            name: name.to_string(),
            init: sym(&lib, b"PMIx_Init\0")?,
            finalize: sym(&lib, b"PMIx_Finalize\0")?,
            abort: sym(&lib, b"PMIx_Abort\0")?,
            put: sym(&lib, b"PMIx_Put\0")?,
            commit: sym(&lib, b"PMIx_Commit\0")?,
            fence: sym(&lib, b"PMIx_Fence\0")?,
            get: sym(&lib, b"PMIx_Get\0")?,
            value_destruct: sym(&lib, b"PMIx_Value_destruct\0")?,
            error_string: sym(&lib, b"PMIx_Error_string\0")?,
        };
        // Never unloaded (see the type's docs).
        std::mem::forget(lib);
        Ok(loaded)
    }

    /// PMIx's description of `status`.
    pub fn describe(&self, status: Status) -> String {
        // SAFETY: PMIx_Error_string takes any status and returns a pointer
        // to a static NUL-terminated string (or NULL, checked).
        let p = unsafe { (self.error_string)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: non-NULL, NUL-terminated, static (see above).
        let s = unsafe { CStr::from_ptr(p) };
        format!("{} ({status})", s.to_string_lossy())
    }

    /// Free a value `PMIx_Get` returned (`PMIX_VALUE_RELEASE`).
    ///
    /// # Safety
    /// `v` came from `PMIx_Get` of this library and is not used afterwards.
    pub unsafe fn release(&self, v: *mut Value) {
        if v.is_null() {
            return;
        }
        // SAFETY: per the contract, `v` is a live value PMIx allocated with
        // malloc; destruct frees what it owns, then the value itself.
        unsafe {
            (self.value_destruct)(v);
            libc::free(v.cast::<c_void>());
        }
    }
}
