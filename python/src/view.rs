//! `_sluice.SlotView`: a received frame's payload left where it arrived, in the
//! receiver's NUMA-local slot, and lent to Python through the buffer protocol, so that
//! `Receiver` hands the frame out as a numpy array over the slot instead of a copy.
//!
//! The view owns the engine's [`LentSlot`]: every buffer exported from it holds a
//! reference to the view (`Py_buffer.obj`), and a numpy array made from it holds one
//! too (`arr.base`), so the slot stays the array's for as long as any of them lives.
//! When the last reference goes, on whichever thread drops it, the view is dropped, the
//! slot goes back to its pool and the loan back to the stream. Nothing is kept per
//! export, so there is no `__releasebuffer__`.

use pyo3::ffi;
use pyo3::prelude::*;
use sluice_engine::stream::LentSlot;
use std::ffi::{c_int, c_void};

/// A frame's payload in a receiver's slot, lent (see `sluice.Receiver`).
#[pyclass(module = "sluice._sluice", frozen)]
pub struct SlotView {
    lent: LentSlot,
    /// Where the payload starts in the slot.
    at: usize,
    /// Its length in bytes (not zero).
    len: usize,
}

impl SlotView {
    /// The payload of `len` bytes from `at` in the lent slot, which must lie within the
    /// slot's valid bytes.
    pub fn new(lent: LentSlot, at: usize, len: usize) -> SlotView {
        let end = at.checked_add(len);
        assert!(
            len > 0 && end.is_some_and(|end| end <= lent.slot().filled()),
            "a payload of {len} bytes from {at} is not within the slot's {} valid bytes",
            lent.slot().filled()
        );
        SlotView { lent, at, len }
    }
}

#[pymethods]
impl SlotView {
    /// Exports the payload as a writable one-dimensional buffer of bytes.
    ///
    /// # Safety
    /// `view` is the `Py_buffer` Python asks to be filled (the buffer protocol's
    /// `bf_getbuffer`).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let len = ffi::Py_ssize_t::try_from(this.len)
            .map_err(|_| pyo3::exceptions::PyBufferError::new_err("the payload is too large"))?;
        let buf = this.lent.slot().as_mut_ptr().wrapping_add(this.at);
        // SAFETY: `view` is the caller's to fill (the protocol's contract). `buf..+len`
        // lies within the slot (checked in `new`), which this object owns exclusively
        // and which stays mapped and out of its pool while this object lives; the
        // export holds a reference to this object (`PyBuffer_FillInfo` sets `obj`),
        // so it cannot outlive it. Rust never reads or writes the slot's bytes while
        // they are lent: only Python does, through exports like this one, which
        // coordinate among themselves as for any writable buffer (a `bytearray`).
        let filled = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), buf.cast::<c_void>(), len, 0, flags)
        };
        if filled == 0 {
            Ok(())
        } else {
            Err(PyErr::fetch(slf.py()))
        }
    }

    /// The payload's length in bytes.
    fn __len__(&self) -> usize {
        self.len
    }

    fn __repr__(&self) -> String {
        format!(
            "<sluice SlotView: {} bytes in slot {}>",
            self.len,
            self.lent.slot().index()
        )
    }
}
