//! Buffers described by an explicit count and datatype: [`View`],
//! [`MutView`], [`DynBuffer`], [`DynBufferMut`].

use std::marker::PhantomData;

use super::buffer::{Buffer, BufferMut, Collection, Described, DescribedMut, Pointer, PointerMut};
use super::user::{Datatype, DatatypeRef, UncommittedDatatype};
use crate::fatal::fatal;
use crate::Count;

fn elements(count: Count, call: &str) -> usize {
    usize::try_from(count).unwrap_or_else(|_| fatal(call, &format!("negative count {count}")))
}

/// `count` elements of `datatype` in a buffer, to send.
pub struct View<'d, 'b, D, B: ?Sized>
where
    D: 'd + Datatype,
    B: 'b + Pointer,
{
    datatype: &'d D,
    count: Count,
    buffer: &'b B,
}

impl<'d, 'b, D, B> View<'d, 'b, D, B>
where
    D: 'd + Datatype,
    B: 'b + Pointer + ?Sized,
{
    /// Describe `buffer` as `count` elements of `datatype`.
    ///
    /// # Safety
    /// The datatype must describe initialized memory of `buffer` only. A
    /// layout that reaches past the buffer is caught (the job ends).
    pub unsafe fn with_count_and_datatype(buffer: &'b B, count: Count, datatype: &'d D) -> Self {
        View {
            datatype,
            count,
            buffer,
        }
    }
}

// SAFETY: the count given.
unsafe impl<D: Datatype, B: Pointer + ?Sized> Collection for View<'_, '_, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}

// SAFETY: the caller of `with_count_and_datatype` vouched for the layout;
// its reach is checked against the buffer's length when described.
unsafe impl<D: Datatype, B: Pointer + ?Sized> Buffer for View<'_, '_, D, B> {
    fn described(&self) -> Described<'_> {
        let n = elements(self.count, "View");
        // SAFETY: the buffer's own memory, borrowed for '_.
        unsafe {
            Described::new(
                self.buffer.pointer(),
                n,
                self.datatype.layout(),
                self.buffer.byte_len(),
            )
        }
    }
}

/// `count` elements of `datatype` in a buffer, to receive into.
pub struct MutView<'d, 'b, D, B: ?Sized>
where
    D: 'd + Datatype,
    B: 'b + PointerMut,
{
    datatype: &'d D,
    count: Count,
    buffer: &'b mut B,
}

impl<'d, 'b, D, B> MutView<'d, 'b, D, B>
where
    D: 'd + Datatype,
    B: 'b + PointerMut + ?Sized,
{
    /// Describe `buffer` as `count` elements of `datatype`.
    ///
    /// # Safety
    /// Any value of the datatype written at the bytes it describes must
    /// leave `buffer` valid. A layout that reaches past the buffer is
    /// caught (the job ends).
    pub unsafe fn with_count_and_datatype(
        buffer: &'b mut B,
        count: Count,
        datatype: &'d D,
    ) -> Self {
        MutView {
            datatype,
            count,
            buffer,
        }
    }
}

// SAFETY: the count given.
unsafe impl<D: Datatype, B: PointerMut + ?Sized> Collection for MutView<'_, '_, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}

// SAFETY: see `with_count_and_datatype`; the reach is checked.
unsafe impl<D: Datatype, B: PointerMut + ?Sized> BufferMut for MutView<'_, '_, D, B> {
    fn described_mut(&mut self) -> DescribedMut<'_> {
        let n = elements(self.count, "MutView");
        let avail = self.buffer.byte_len_mut();
        // SAFETY: the buffer's own memory, mutably borrowed for '_.
        unsafe { DescribedMut::new(self.buffer.pointer_mut(), n, self.datatype.layout(), avail) }
    }
}

/// A buffer of any element type, its datatype known at run time.
pub struct DynBuffer<'a> {
    ptr: *const u8,
    len: usize,
    bytes: usize,
    datatype: DatatypeRef<'a>,
    _buf: PhantomData<&'a [u8]>,
}

// SAFETY: a shared borrow of plain data.
unsafe impl Send for DynBuffer<'_> {}
// SAFETY: as above.
unsafe impl Sync for DynBuffer<'_> {}

impl<'a> DynBuffer<'a> {
    /// `len` elements of `datatype` at `ptr`.
    ///
    /// # Safety
    /// `ptr` must point to `len` initialized elements of `datatype`,
    /// readable for `'a`.
    pub unsafe fn from_raw<T>(ptr: *const T, len: Count, datatype: DatatypeRef<'a>) -> Self {
        let len = elements(len, "DynBuffer::from_raw");
        let bytes = datatype_span(&datatype, len);
        DynBuffer {
            ptr: ptr.cast(),
            len,
            bytes,
            datatype,
            _buf: PhantomData,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn datatype_span(d: &DatatypeRef<'_>, len: usize) -> usize {
    crate::fatal::check(d.layout().to_typemap().span(len), "DynBuffer::from_raw")
}

// SAFETY: the caller of `from_raw` vouched for the memory.
unsafe impl Buffer for DynBuffer<'_> {
    fn described(&self) -> Described<'_> {
        // SAFETY: as vouched for.
        unsafe { Described::new(self.ptr, self.len, self.datatype.layout(), self.bytes) }
    }
}

/// A mutable buffer of any element type, its datatype known at run time.
pub struct DynBufferMut<'a> {
    ptr: *mut u8,
    len: usize,
    bytes: usize,
    datatype: DatatypeRef<'a>,
    _buf: PhantomData<&'a mut [u8]>,
}

// SAFETY: an exclusive borrow of plain data.
unsafe impl Send for DynBufferMut<'_> {}
// SAFETY: as above.
unsafe impl Sync for DynBufferMut<'_> {}

impl<'a> DynBufferMut<'a> {
    /// `len` elements of `datatype` at `ptr`.
    ///
    /// # Safety
    /// `ptr` must point to `len` elements of `datatype`, writable for
    /// `'a` with any value of the datatype.
    pub unsafe fn from_raw<T>(ptr: *mut T, len: Count, datatype: DatatypeRef<'a>) -> Self {
        let len = elements(len, "DynBufferMut::from_raw");
        let bytes = datatype_span(&datatype, len);
        DynBufferMut {
            ptr: ptr.cast(),
            len,
            bytes,
            datatype,
            _buf: PhantomData,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// SAFETY: the caller of `from_raw` vouched for the memory.
unsafe impl BufferMut for DynBufferMut<'_> {
    fn described_mut(&mut self) -> DescribedMut<'_> {
        // SAFETY: as vouched for.
        unsafe { DescribedMut::new(self.ptr, self.len, self.datatype.layout(), self.bytes) }
    }
}
