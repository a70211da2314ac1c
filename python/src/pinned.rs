//! Arrays sent without a copy: a message's payload stays in the caller's buffer, pinned
//! (its `PyBuffer` export held, and so the array) until the receiver has acknowledged
//! every record over it; the engine's net-send threads send it from there
//! (`StreamSender::push_pinned`).
//!
//! The engine lets go of a buffer on a net-send thread, which must never wait for the
//! GIL (a Python thread busy for milliseconds would stall the stream, and releasing an
//! export may run arbitrary Python code). So a buffer let go is only parked in its
//! sender's [`Pins`]; the Python thread releases the parked exports, holding the GIL,
//! at its next `send`, `flush`, `close` or `abort` ([`Pins::release`]). Should a
//! net-send thread outlive its `RawSender`, the last reference to the `Pins` releases
//! what is left there (pyo3 takes the GIL then, or leaves the export to an interpreter
//! that has already gone).

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use sluice_engine::stream::PinnedBytes;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// A sender's pinned buffers: how many the engine holds, and those it let go of that
/// still wait for the GIL to be released.
#[derive(Default)]
pub struct Pins {
    state: Mutex<PinState>,
    /// Signalled whenever a buffer is let go.
    changed: Condvar,
}

#[derive(Default)]
struct PinState {
    /// Buffers the engine holds now.
    held: usize,
    /// Buffers let go, whose exports are released at the next [`Pins::release`].
    parked: Vec<PyBuffer<u8>>,
}

impl Pins {
    /// Pins `buf` (a C-contiguous byte buffer) for the engine: the owner its records
    /// share.
    pub fn pin(self: &Arc<Self>, buf: PyBuffer<u8>) -> Arc<dyn PinnedBytes> {
        debug_assert!(buf.is_c_contiguous());
        let (ptr, len) = (buf.buf_ptr().cast::<u8>().cast_const(), buf.len_bytes());
        self.lock().held += 1;
        Arc::new(PinnedBuffer {
            buf: Some(buf),
            ptr,
            len,
            pins: Arc::clone(self),
        })
    }

    /// Buffers the engine holds now.
    pub fn held(&self) -> usize {
        self.lock().held
    }

    /// Waits, for `timeout` at most, until the engine holds no buffer; whether it holds
    /// none. Call it with the GIL released.
    pub fn wait_none_held(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| s.held > 0)
            .unwrap_or_else(PoisonError::into_inner);
        state.held == 0
    }

    /// Releases the exports of the buffers let go since the last call (the arrays may
    /// be freed here, running their finalizers: hence the GIL).
    pub fn release(&self, py: Python<'_>) {
        let parked = std::mem::take(&mut self.lock().parked);
        for buf in parked {
            buf.release(py);
        }
    }

    /// The engine let go of `buf`.
    fn let_go(&self, buf: PyBuffer<u8>) {
        let mut state = self.lock();
        debug_assert!(state.held > 0, "a buffer let go that was not pinned");
        state.held -= 1;
        state.parked.push(buf);
        drop(state);
        self.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, PinState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One pinned buffer: its export, and where its bytes are.
struct PinnedBuffer {
    /// `Some` until dropped.
    buf: Option<PyBuffer<u8>>,
    ptr: *const u8,
    len: usize,
    pins: Arc<Pins>,
}

// SAFETY: `ptr` points into the exported buffer, which stays valid and in place while
// the export (`buf`) is held, and is only read; `PyBuffer` itself is Send and Sync.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as for Send: shared references only read the bytes.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBytes for PinnedBuffer {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` bytes at `ptr` are the C-contiguous buffer exported to `buf`,
        // held as long as `self`; the caller promised not to write into it meanwhile
        // (`Sender.send`'s contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pins.let_go(buf);
        }
    }
}
