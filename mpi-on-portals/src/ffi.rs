//! C types of the MPI interface that Rust programs name in the signatures
//! of their C callbacks.

/// `MPI_Datatype`: an opaque handle. This library has no datatype handles
/// (datatypes are Rust types); callbacks receive a null pointer to one.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct MPI_Datatype {
    _opaque: [u8; 0],
}
