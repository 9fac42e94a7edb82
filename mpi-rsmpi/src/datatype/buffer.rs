//! Buffers: what can be sent and received into (rsmpi's `Buffer`,
//! `BufferMut`, `View`, `MutView`, `DynBuffer`, `DynBufferMut`).
//!
//! Every buffer is a pointer, a count and a datatype. A buffer whose
//! datatype is dense goes to the transport as its bytes. Any other goes
//! as a list of segments, one per contiguous run
//! ([`Typemap::segments`]), which the transport gathers from and scatters
//! into: no copy here. Two kinds still go through a copy: layouts of runs
//! too short to be worth a segment each (packed, and received through a
//! stage), and layouts with values that must be validated before they are
//! written (a received `bool` that is not 0 or 1 is an error, not
//! undefined behaviour), which are always received through a stage.
//! Calls that take one region (collectives, buffered sends, `pack`) pack
//! segments too.

use std::borrow::Cow;
use std::marker::PhantomData;

use mpi_on_portals::request as inner;
use mpi_on_portals::segments::{self, Iovec};

use mpi_on_portals::typemap::{Kind, Typemap};
use mpi_on_portals::{MpiError, Result, Status};

use super::user::{Datatype, Layout, SystemDatatype};
use crate::fatal::{check, fatal};
use crate::Count;

/// A type with an equivalent MPI datatype (rsmpi's `Equivalence`).
///
/// # Safety
/// The datatype must describe initialized bytes of `Self` only, and every
/// value the datatype can hold at those bytes, with zero in every byte it
/// does not describe, must be a valid `Self` (receiving a new value
/// starts from zeroed memory; `#[derive(Equivalence)]` describes every
/// field, so only padding is left zero).
pub unsafe trait Equivalence {
    /// The datatype's type.
    type Out: Datatype;
    /// The datatype.
    fn equivalent_datatype() -> Self::Out;
}

macro_rules! predefined {
    ($($t:ty),*) => {$(
        // SAFETY: plain numbers (a complex number is two, `repr(C)`, no
        // padding): every bit pattern of its bytes is a value.
        unsafe impl Equivalence for $t {
            type Out = SystemDatatype;
            fn equivalent_datatype() -> SystemDatatype {
                SystemDatatype(Kind::plain::<$t>())
            }
        }
    )*};
}

predefined!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize, f32, f64);

/// Complex numbers as predefined types (`MPI_C_FLOAT_COMPLEX`,
/// `MPI_C_DOUBLE_COMPLEX`), with rsmpi's `complex` feature.
#[cfg(feature = "complex")]
mod complex {
    use num_complex::{Complex32, Complex64};

    use super::{Equivalence, Kind, SystemDatatype};

    predefined!(Complex32, Complex64);
}

// SAFETY: one byte, and unpacking admits only 0 and 1 (Kind::Bool).
unsafe impl Equivalence for bool {
    type Out = SystemDatatype;
    fn equivalent_datatype() -> SystemDatatype {
        SystemDatatype(Kind::Bool)
    }
}

/// How many elements (rsmpi's `Collection`).
///
/// # Safety
/// The count must not reach past the buffer.
pub unsafe trait Collection {
    /// The number of elements.
    fn count(&self) -> Count;
}

/// Where a buffer's memory starts and how long it is (rsmpi's `Pointer`).
///
/// # Safety
/// The bytes from the pointer on must belong to the value.
pub unsafe trait Pointer {
    /// The first byte.
    fn pointer(&self) -> *const u8;
    /// Bytes of memory from the pointer on.
    #[doc(hidden)]
    fn byte_len(&self) -> usize;
}

/// A mutable [`Pointer`] (rsmpi's `PointerMut`).
///
/// # Safety
/// As for [`Pointer`].
pub unsafe trait PointerMut {
    /// The first byte.
    fn pointer_mut(&mut self) -> *mut u8;
    /// Bytes of memory from the pointer on.
    #[doc(hidden)]
    fn byte_len_mut(&self) -> usize;
}

/// Something that can be sent.
///
/// # Safety
/// Its form must describe only initialized memory of the value.
pub unsafe trait Buffer {
    /// The pointer, count and layout of the values to send.
    #[doc(hidden)]
    fn described(&self) -> Described<'_>;
}

/// Something that can be received into.
///
/// # Safety
/// Its form must describe only writable memory of the value, where any
/// value of the datatype is valid.
pub unsafe trait BufferMut {
    /// The pointer, count and layout of the values to receive into.
    #[doc(hidden)]
    fn described_mut(&mut self) -> DescribedMut<'_>;
}

/// A buffer to send, described: its bytes as the transport takes them.
#[doc(hidden)]
pub struct Described<'b>(Result<Outgoing<'b>>);

/// What goes to the transport for a send.
pub(crate) enum Outgoing<'b> {
    /// Bytes: the buffer's own (dense) or a packed copy.
    Bytes(Cow<'b, [u8]>),
    /// The buffer's memory as segments, one per contiguous run, in wire
    /// order: the transport gathers them, nothing is copied here.
    Segments(Vec<Iovec>, PhantomData<&'b [u8]>),
}

/// Most segments the face hands over for one message: the device's engine
/// takes 65536 (`NiLimits::max_iovecs`, not lowered by the device), but a
/// list is built per message, so a longer one (64 KiB of list) is packed.
pub(crate) const MAX_SEGMENTS: usize = 4096;

/// A buffer to receive into, described: where the bytes land.
#[doc(hidden)]
pub struct DescribedMut<'b>(Result<Landing<'b>>);

/// Bytes for `count` values of `kind` within `avail`.
fn kind_bytes(kind: Kind, count: usize, avail: usize) -> Result<usize> {
    count
        .checked_mul(kind.size())
        .filter(|&n| n <= avail)
        .ok_or(MpiError::InvalidBuffer("the count reaches past the buffer"))
}

/// Bytes that `count` elements of `map` reach, within `avail`.
fn map_span(map: &Typemap, count: usize, avail: usize) -> Result<usize> {
    let span = map.span(count)?;
    if span > avail {
        return Err(MpiError::InvalidDatatype(
            "the view reaches past its buffer",
        ));
    }
    Ok(span)
}

impl<'b> Described<'b> {
    /// The buffer's own bytes where the layout is dense, its segments
    /// where they are worth it, else a packed copy (the datatype is needed
    /// only here, so nothing of it is kept).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `avail` bytes for `'b`, and the
    /// bytes the layout describes must be initialized.
    pub(crate) unsafe fn new(
        ptr: *const u8,
        count: usize,
        layout: Layout<'_>,
        avail: usize,
    ) -> Self {
        let map = match layout {
            Layout::Kind(kind) => {
                return Described(kind_bytes(kind, count, avail).map(|n| {
                    // SAFETY: n ≤ `avail` readable bytes; a predefined
                    // kind has no padding.
                    Outgoing::Bytes(Cow::Borrowed(unsafe { std::slice::from_raw_parts(ptr, n) }))
                }));
            }
            Layout::Map(m) => m,
        };
        Described(map_span(map, count, avail).map(|span| {
            if map.is_dense() {
                // SAFETY: as above, `span` ≤ `avail`.
                return Outgoing::Bytes(Cow::Borrowed(unsafe {
                    std::slice::from_raw_parts(ptr, span)
                }));
            }
            let mut list = Vec::new();
            if map.segments(count, ptr.cast_mut(), MAX_SEGMENTS, &mut list) {
                return Outgoing::Segments(list, PhantomData);
            }
            let mut out = Vec::new();
            // SAFETY: `span` bytes are readable, and initialized where
            // the layout says (our caller's contract).
            unsafe { map.pack(count, ptr, &mut out) };
            Outgoing::Bytes(Cow::Owned(out))
        }))
    }

    /// The bytes to hand to the transport, packed if they were segments
    /// (for the calls that take one region: collectives, buffered sends,
    /// `pack`).
    pub(crate) fn bytes(self) -> Result<Cow<'b, [u8]>> {
        self.0.map(Outgoing::into_bytes)
    }

    /// What to hand to the transport: bytes or segments.
    pub(crate) fn outgoing(self) -> Result<Outgoing<'b>> {
        self.0
    }
}

impl<'b> Outgoing<'b> {
    /// The bytes, the segments packed.
    pub(crate) fn into_bytes(self) -> Cow<'b, [u8]> {
        match self {
            Outgoing::Bytes(b) => b,
            Outgoing::Segments(list, _) => {
                let mut out = Vec::new();
                // SAFETY: the segments are the buffer's initialized memory,
                // borrowed for 'b.
                unsafe { Typemap::gather(&list, &mut out) };
                Cow::Owned(out)
            }
        }
    }
}

/// Where received bytes go: the buffer itself, its segments, or a
/// staging buffer that is unpacked into it afterwards.
pub(crate) enum Landing<'b> {
    Direct(&'b mut [u8]),
    /// The buffer's memory as segments, one per contiguous run, in wire
    /// order; the transport scatters into them. `stage` is used only by a
    /// call that takes one region (see [`Landing::bytes`]).
    Scatter {
        list: Vec<Iovec>,
        stage: Option<Vec<u8>>,
        _buf: PhantomData<&'b mut [u8]>,
    },
    Staged {
        stage: Vec<u8>,
        map: Typemap,
        count: usize,
        dst: *mut u8,
    },
}

impl<'b> DescribedMut<'b> {
    /// Receive in place where the layout admits any bytes and is dense
    /// (or, as segments, worth it), else through a stage.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `avail` bytes for `'b`,
    /// and hold initialized values where the layout says.
    pub(crate) unsafe fn new(ptr: *mut u8, count: usize, layout: Layout<'_>, avail: usize) -> Self {
        let staged_map = match layout {
            Layout::Kind(kind @ Kind::Plain { .. }) => {
                return DescribedMut(kind_bytes(kind, count, avail).map(|n| {
                    // SAFETY: n ≤ `avail` writable bytes; any bytes are
                    // values.
                    Landing::Direct(unsafe { std::slice::from_raw_parts_mut(ptr, n) })
                }));
            }
            Layout::Kind(kind) => Typemap::predefined(kind),
            Layout::Map(m) if m.is_dense() && m.any_bits_valid() => {
                return DescribedMut(map_span(m, count, avail).map(|span| {
                    // SAFETY: `span` ≤ `avail` writable bytes; any bytes
                    // are values.
                    Landing::Direct(unsafe { std::slice::from_raw_parts_mut(ptr, span) })
                }));
            }
            Layout::Map(m) if m.any_bits_valid() => {
                return DescribedMut(map_span(m, count, avail).map(|_| {
                    let mut list = Vec::new();
                    if m.segments(count, ptr, MAX_SEGMENTS, &mut list) {
                        return Landing::Scatter {
                            list,
                            stage: None,
                            _buf: PhantomData,
                        };
                    }
                    // SAFETY: as below.
                    unsafe { Landing::staged(m.clone(), count, ptr) }
                }));
            }
            Layout::Map(m) => m.clone(),
        };
        // SAFETY: span(count) bytes are readable, writable and
        // initialized where the layout says (our caller's contract).
        DescribedMut(
            map_span(&staged_map, count, avail)
                .map(|_| unsafe { Landing::staged(staged_map, count, ptr) }),
        )
    }

    pub(crate) fn landing(self) -> Result<Landing<'b>> {
        self.0
    }
}

impl Landing<'_> {
    /// A stage for `count` elements of `map` at `ptr`, unpacked there by
    /// [`Landing::finish`].
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `map.span(count)`
    /// bytes for the landing's lifetime, initialized where the layout
    /// says.
    unsafe fn staged(map: Typemap, count: usize, ptr: *mut u8) -> Self {
        // The stage starts as the buffer's current values, so that a
        // short message leaves the rest of the buffer as it was.
        let mut stage = Vec::new();
        // SAFETY: per our caller.
        unsafe { map.pack(count, ptr, &mut stage) };
        Landing::Staged {
            stage,
            map,
            count,
            dst: ptr,
        }
    }
}

impl Landing<'_> {
    /// The bytes to receive into, for a call that takes one region: a
    /// layout of segments gets a stage holding their current values,
    /// scattered back by [`Landing::finish`].
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        match self {
            Landing::Direct(b) => b,
            Landing::Staged { stage, .. } => stage,
            Landing::Scatter { list, stage, .. } => stage.get_or_insert_with(|| {
                let mut v = Vec::new();
                // SAFETY: the segments are the buffer's initialized
                // memory, borrowed for the landing's lifetime.
                unsafe { Typemap::gather(list, &mut v) };
                v
            }),
        }
    }

    /// Write staged values into the buffer, validated.
    pub(crate) fn finish(self) -> Result<()> {
        match self {
            Landing::Staged {
                stage,
                map,
                count,
                dst,
            } => {
                // SAFETY: `dst` is writable for span(count) bytes (checked
                // in `landing`, and the borrow of the buffer is still
                // held).
                unsafe { map.unpack(count, &stage, dst) }?;
            }
            Landing::Scatter {
                list,
                stage: Some(stage),
                ..
            } => {
                // SAFETY: the segments are the buffer's memory, mutably
                // borrowed for the landing's lifetime; any bytes are
                // values (the layout admits every bit pattern).
                unsafe { Typemap::scatter(&list, &stage) };
            }
            Landing::Direct(_) | Landing::Scatter { stage: None, .. } => {}
        }
        Ok(())
    }
}

/// The bytes to send from `buf`; the job ends on a bad buffer.
pub(crate) fn sending<'b, B: Buffer + ?Sized>(buf: &'b B, call: &str) -> Cow<'b, [u8]> {
    check(buf.described().bytes(), call)
}

/// Memory a non-blocking operation through an API that borrows its
/// buffers (the collectives) must keep, and the unpacking it must do, when
/// a buffer is not dense: a packed copy of what it sends, a stage for what
/// it receives. Handed to the started request ([`Staging::started`]),
/// which runs it as it completes.
#[derive(Default)]
pub(crate) struct Staging(Vec<segments::OnComplete>);

/// Memory the library's completion step writes through from another
/// thread.
struct Lent<T>(T);

// SAFETY: what it holds points into a buffer lent to a request for its
// scope (as to the engine's progress thread); only the completion step,
// run once, uses it, before the request is seen complete.
unsafe impl<T> Send for Lent<T> {}

impl Staging {
    /// Give what was staged to `r`, just started with the staged buffers.
    pub(crate) fn started<'a>(self, r: inner::Request<'a>) -> inner::Request<'a> {
        if !self.0.is_empty() {
            let steps = self.0;
            segments::adopt(
                &r,
                Box::new(move |res: &mut Result<Status>| {
                    for step in steps {
                        step(res);
                    }
                }),
            );
        }
        r
    }
}

/// The bytes of a buffer for a non-blocking operation that borrows them:
/// the buffer's own where it is dense, else a packed copy kept by
/// `staging` until the operation completes.
pub(crate) fn sending_in_place<'b, B: Buffer + ?Sized>(
    buf: &'b B,
    call: &str,
    staging: &mut Staging,
) -> &'b [u8] {
    match check(buf.described().outgoing(), call) {
        Outgoing::Bytes(Cow::Borrowed(b)) => b,
        other => {
            let packed = other.into_bytes().into_owned();
            // SAFETY: the vector's heap buffer does not move when the
            // vector does, and `staging` frees it only once the operation
            // is complete; nobody writes it.
            let bytes = unsafe { std::slice::from_raw_parts(packed.as_ptr(), packed.len()) };
            staging
                .0
                .push(Box::new(move |_: &mut Result<Status>| drop(packed)));
            bytes
        }
    }
}

/// The bytes of a buffer to receive into in a non-blocking operation that
/// borrows them: the buffer's own where it is dense and admits any bytes,
/// else a stage kept by `staging` and unpacked (validated) into the
/// buffer as the operation completes.
pub(crate) fn receiving_in_place<'b, B: BufferMut + ?Sized>(
    buf: &'b mut B,
    call: &str,
    staging: &mut Staging,
) -> &'b mut [u8] {
    let (mut stage, step): (Vec<u8>, segments::Unstage) =
        match check(buf.described_mut().landing(), call) {
            Landing::Direct(b) => return b,
            Landing::Scatter { list, .. } => {
                let mut stage = Vec::new();
                // SAFETY: the segments are the buffer's initialized memory,
                // borrowed for 'b.
                unsafe { Typemap::gather(&list, &mut stage) };
                let list = Lent(list);
                (
                    stage,
                    Box::new(move |got, _| {
                        let list = list;
                        // SAFETY: the buffer's memory, lent to the request
                        // until it completes, which is now; any bytes are
                        // values.
                        unsafe { Typemap::scatter(&list.0, got) };
                    }),
                )
            }
            Landing::Staged {
                stage,
                map,
                count,
                dst,
            } => {
                let dst = Lent(dst);
                (
                    stage,
                    Box::new(move |got, res| {
                        let dst = dst;
                        // SAFETY: as above, span(count) bytes checked when
                        // the landing was made.
                        if let Err(e) = unsafe { map.unpack(count, got, dst.0) } {
                            *res = Err(e);
                        }
                    }),
                )
            }
        };
    // SAFETY: the stage's heap buffer does not move when the vector does,
    // and `staging` frees it only once the operation is complete; only the
    // operation writes it meanwhile.
    let bytes = unsafe { std::slice::from_raw_parts_mut(stage.as_mut_ptr(), stage.len()) };
    staging.0.push(Box::new(move |res: &mut Result<Status>| {
        if matches!(res, Ok(s) if !s.is_cancelled()) {
            step(&stage, res);
        }
    }));
    bytes
}

/// Receive into `buf` through `f`, given the bytes to receive into.
pub(crate) fn receiving<B: BufferMut + ?Sized, R>(
    buf: &mut B,
    call: &str,
    f: impl FnOnce(&mut [u8]) -> Result<R>,
) -> R {
    let mut landing = check(buf.described_mut().landing(), call);
    let r = check(f(landing.bytes()), call);
    check(landing.finish(), call);
    r
}

/// Bytes one value of `T` takes on the wire (its datatype's packed size).
pub(crate) fn wire_size<T: Equivalence>() -> usize {
    match T::equivalent_datatype().layout() {
        Layout::Kind(k) => k.size(),
        Layout::Map(m) => m.size(),
    }
}

/// Receive one new value of `T` through `f`, given the bytes to receive
/// into (see [`fill_zeroed`]); no allocation of its own.
pub(crate) fn receiving_value<T: Equivalence>(
    call: &str,
    f: impl FnOnce(&mut [u8]) -> Result<Status>,
) -> (T, Status) {
    let mut one = [std::mem::MaybeUninit::<T>::zeroed()];
    let status = fill_zeroed(&mut one, call, f);
    let [x] = one;
    // SAFETY: `fill_zeroed` returned, so the value is valid.
    (unsafe { x.assume_init() }, status)
}

/// Receive `n` new values of `T` through `f` (see [`fill_zeroed`]).
pub(crate) fn receiving_values<T: Equivalence>(
    n: usize,
    call: &str,
    f: impl FnOnce(&mut [u8]) -> Result<Status>,
) -> (Vec<T>, Status) {
    let mut v: Vec<std::mem::MaybeUninit<T>> =
        (0..n).map(|_| std::mem::MaybeUninit::zeroed()).collect();
    let status = fill_zeroed(&mut v, call, f);
    // SAFETY: `fill_zeroed` returned, so every value is valid.
    let values = v.into_iter().map(|x| unsafe { x.assume_init() }).collect();
    (values, status)
}

/// Receive into `dst`, zeroed values of `T`, through `f`; the job ends
/// unless the message fills every value (a value only partly received
/// would not be one). On return every byte the datatype describes holds a
/// validated value and the rest are zero, which the contract of
/// [`Equivalence`] makes valid values of `T`.
fn fill_zeroed<T: Equivalence>(
    dst: &mut [std::mem::MaybeUninit<T>],
    call: &str,
    f: impl FnOnce(&mut [u8]) -> Result<Status>,
) -> Status {
    let n = dst.len();
    let dt = T::equivalent_datatype();
    let avail = std::mem::size_of_val(dst);
    // SAFETY: `dst` is valid for reads and writes of `avail` bytes while
    // borrowed here, and zeroed: the bytes the layout describes hold
    // values (zero is a value of every kind, `bool` included).
    let described = unsafe { DescribedMut::new(dst.as_mut_ptr().cast(), n, dt.layout(), avail) };
    let mut landing = check(described.landing(), call);
    let status = check(f(landing.bytes()), call);
    check(landing.finish(), call);
    let want = n.saturating_mul(wire_size::<T>());
    if status.count_bytes() < want {
        fatal(
            call,
            &format!(
                "the message holds {} bytes, less than the {want} of {n} value(s)",
                status.count_bytes()
            ),
        );
    }
    status
}

fn len(n: usize) -> Count {
    Count::try_from(n).unwrap_or(Count::MAX)
}

macro_rules! buffers {
    ($(<$($g:ident),*; $(const $n:ident: usize)?> $t:ty => $elem:ty,
        count $count:expr, at $ptr:expr, at_mut $ptr_mut:expr, bytes $bytes:expr;)*) => {$(
        // SAFETY: the count is the value's own number of elements.
        unsafe impl<$($g: Equivalence),* $(, const $n: usize)?> Collection for $t {
            fn count(&self) -> Count {
                len($count(self))
            }
        }
        // SAFETY: the value's own elements.
        unsafe impl<$($g: Equivalence),* $(, const $n: usize)?> Pointer for $t {
            fn pointer(&self) -> *const u8 {
                $ptr(self).cast()
            }
            fn byte_len(&self) -> usize {
                $bytes(self)
            }
        }
        // SAFETY: as for Pointer.
        unsafe impl<$($g: Equivalence),* $(, const $n: usize)?> PointerMut for $t {
            fn pointer_mut(&mut self) -> *mut u8 {
                $ptr_mut(self).cast()
            }
            fn byte_len_mut(&self) -> usize {
                $bytes(self)
            }
        }
        // SAFETY: the element type's datatype describes its initialized
        // bytes (the contract of `Equivalence`).
        unsafe impl<$($g: Equivalence),* $(, const $n: usize)?> Buffer for $t {
            fn described(&self) -> Described<'_> {
                let dt = <$elem>::equivalent_datatype();
                // SAFETY: the value's own memory, borrowed for '_.
                unsafe { Described::new(self.pointer(), $count(self), dt.layout(), self.byte_len()) }
            }
        }
        // SAFETY: as for Buffer; any value of the datatype is a valid
        // element (the contract of `Equivalence`).
        unsafe impl<$($g: Equivalence),* $(, const $n: usize)?> BufferMut for $t {
            fn described_mut(&mut self) -> DescribedMut<'_> {
                let dt = <$elem>::equivalent_datatype();
                let (n, avail) = ($count(&*self), self.byte_len_mut());
                // SAFETY: the value's own memory, mutably borrowed for '_.
                unsafe { DescribedMut::new(self.pointer_mut(), n, dt.layout(), avail) }
            }
        }
    )*};
}

use super::user::UncommittedDatatype as _;

buffers! {
    <T;> T => T, count |_: &T| 1, at |s: &T| s as *const T,
        at_mut |s: &mut T| s as *mut T, bytes |_: &T| std::mem::size_of::<T>();
    <T;> [T] => T, count |s: &[T]| s.len(), at |s: &[T]| s.as_ptr(),
        at_mut |s: &mut [T]| s.as_mut_ptr(), bytes |s: &[T]| std::mem::size_of_val(s);
    <T;> Vec<T> => T, count |s: &Vec<T>| s.len(), at |s: &Vec<T>| s.as_ptr(),
        at_mut |s: &mut Vec<T>| s.as_mut_ptr(),
        bytes |s: &Vec<T>| std::mem::size_of_val(s.as_slice());
    <T; const N: usize> [T; N] => T, count |_: &[T; N]| N, at |s: &[T; N]| s.as_ptr(),
        at_mut |s: &mut [T; N]| s.as_mut_ptr(), bytes |_: &[T; N]| std::mem::size_of::<[T; N]>();
}
