//! MPICH's ABI values (from MPICH's `mpi.h`, which MPICH, Intel MPI and
//! Cray MPICH share): handles are `int`s whose top bits say their kind.

use std::ffi::c_int;

const fn h(v: u32) -> c_int {
    v as c_int
}

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_ERR_WIN: c_int = 45;
pub const MPI_ERR_KEYVAL: c_int = 48;
pub const MPI_ERR_RMA_CONFLICT: c_int = 49;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_SIZE: c_int = 51;
pub const MPI_ERR_DISP: c_int = 52;
pub const MPI_ERR_RMA_RANGE: c_int = 55;
pub const MPI_ERR_RMA_FLAVOR: c_int = 58;
pub const MPI_ERR_PROC_ABORTED: c_int = 76;
pub const MPI_ERR_LASTCODE: c_int = 0x3fffffff;

pub const MPI_COMM_NULL: c_int = h(0x04000000);
pub const MPI_COMM_WORLD: c_int = h(0x44000000);
pub const MPI_COMM_SELF: c_int = h(0x44000001);
pub const MPI_GROUP_NULL: c_int = h(0x08000000);
pub const MPI_GROUP_EMPTY: c_int = h(0x48000000);
pub const MPI_DATATYPE_NULL: c_int = h(0x0c000000);
pub const MPI_OP_NULL: c_int = h(0x18000000);
pub const MPI_ERRHANDLER_NULL: c_int = h(0x14000000);
pub const MPI_REQUEST_NULL: c_int = h(0x2c000000);
pub const MPI_MESSAGE_NULL: c_int = h(0x2c000000);
pub const MPI_MESSAGE_NO_PROC: c_int = h(0x6c000000);
pub const MPI_WIN_NULL: c_int = h(0x20000000);
pub const MPI_INFO_NULL: c_int = h(0x1c000000);
pub const MPI_ERRORS_ARE_FATAL: c_int = h(0x54000000);
pub const MPI_ERRORS_RETURN: c_int = h(0x54000001);
/// MPI 4's "abort the communicator's processes": the job, here.
pub const MPI_ERRORS_ABORT: c_int = h(0x54000003);

/// Kinds of the handles this library makes (top byte; the rest is a slot).
pub const KIND_COMM: u32 = 0x84000000;
pub const KIND_GROUP: u32 = 0x88000000;
pub const KIND_TYPE: u32 = 0xcc000000;
pub const KIND_OP: u32 = 0x98000000;
pub const KIND_WIN: u32 = 0xa0000000;
pub const KIND_REQUEST: u32 = 0xac000000;
pub const KIND_MESSAGE: u32 = 0xec000000;
pub const KIND_ERRHANDLER: u32 = 0x94000000;
pub const SLOT_MASK: u32 = 0x00ffffff;

pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;

pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ANY_TAG: c_int = -1;

pub const MPI_TAG_UB: c_int = 0x64400001;
pub const MPI_HOST: c_int = 0x64400003;
pub const MPI_IO: c_int = 0x64400005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x64400007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x64400009;
pub const MPI_APPNUM: c_int = 0x6440000d;
pub const MPI_WIN_BASE: c_int = 0x66000001;
pub const MPI_WIN_SIZE: c_int = 0x66000003;
pub const MPI_WIN_DISP_UNIT: c_int = 0x66000005;

pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_VERSION: c_int = 4;
pub const MPI_SUBVERSION: c_int = 0;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_MULTIPLE: c_int = 3;
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub const MPI_LOCK_SHARED: c_int = 235;

pub const MPI_MAX: c_int = h(0x58000001);
pub const MPI_MIN: c_int = h(0x58000002);
pub const MPI_SUM: c_int = h(0x58000003);
pub const MPI_PROD: c_int = h(0x58000004);
pub const MPI_LAND: c_int = h(0x58000005);
pub const MPI_BAND: c_int = h(0x58000006);
pub const MPI_LOR: c_int = h(0x58000007);
pub const MPI_BOR: c_int = h(0x58000008);
pub const MPI_LXOR: c_int = h(0x58000009);
pub const MPI_BXOR: c_int = h(0x5800000a);
pub const MPI_MINLOC: c_int = h(0x5800000b);
pub const MPI_MAXLOC: c_int = h(0x5800000c);
pub const MPI_REPLACE: c_int = h(0x5800000d);
pub const MPI_NO_OP: c_int = h(0x5800000e);

/// `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE` are `(MPI_Status *)1`.
pub const STATUS_IGNORE_ADDR: usize = 1;
/// `MPI_IN_PLACE` is `(void *)-1`.
pub const IN_PLACE_ADDR: usize = usize::MAX;

/// MPICH's `MPI_Status`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiStatus {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
}
