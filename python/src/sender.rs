//! `_sluice.RawSender`: the engine's [`StreamSender`] for Python. Where the stream does
//! not compress, a message's payload is not copied: its buffer is pinned ([`Pins`]) and
//! the records point into it (`StreamSender::push_pinned`), their slots holding only
//! the message's head, until the receiver acknowledges them. Otherwise (or with
//! `copy=True`) it is copied once, with the GIL released, from the caller's buffer into
//! the NUMA-local slots that the net-send threads compress and send and keep until the
//! receiver acknowledges them. `send` blocks while the receiver is slower
//! (back-pressure), pinned or not: every record in flight holds a slot.

use crate::errors::{engine, usage};
use crate::frame::{padded_info_bytes, Header, Kind, FIXED_BYTES, INFO_BYTES_MAX};
use crate::options::{client_tls, size_arg, token_arg, JobSpec, Side};
use crate::pinned::Pins;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use sluice_engine::codec::Planner;
use sluice_engine::stream::{PinnedBytes, PinnedRange, StreamOptions, StreamSender};
use sluice_engine::{CompressMode, EngineError, Populate};
use sluice_wire::ElementSize;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A sender's state: the engine's sender until the stream is closed or abandoned, and
/// the next frame's number.
struct State {
    sender: Option<StreamSender>,
    next_frame: u64,
}

/// The sending end of a stream of messages (see `sluice.Sender`).
#[pyclass(module = "sluice._sluice")]
pub struct RawSender {
    state: Mutex<State>,
    record_bytes: usize,
    /// Whether the stream sends records as they are, so payloads can go pinned.
    sends_raw: bool,
    /// The payloads pinned in flight, and those let go, to release with the GIL.
    pins: Arc<Pins>,
}

/// `sluice://HOST:PORT` or `HOST:PORT`: the address to dial.
fn address(url: &str) -> PyResult<String> {
    let addr = url.strip_prefix("sluice://").unwrap_or(url);
    if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
        return Err(usage(format!(
            "{url:?} is not a receiver: expected sluice://HOST:PORT"
        )));
    }
    Ok(addr.to_string())
}

#[pymethods]
impl RawSender {
    /// Connects to the receiver at `url` (see `sluice.Sender`).
    #[new]
    #[pyo3(signature = (url, *, streams=2, compress="none", policy="auto", chunk_size=None,
        buffer_mem=None, token=None, token_file=None, encrypt="auto", ca=None,
        known_hosts=None, strict_host_key=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &str,
        streams: u32,
        compress: &str,
        policy: &str,
        chunk_size: Option<&Bound<'_, PyAny>>,
        buffer_mem: Option<&Bound<'_, PyAny>>,
        token: Option<&Bound<'_, PyAny>>,
        token_file: Option<PathBuf>,
        encrypt: &str,
        ca: Option<PathBuf>,
        known_hosts: Option<PathBuf>,
        strict_host_key: bool,
    ) -> PyResult<RawSender> {
        let addr = address(url)?;
        let compress: CompressMode = compress
            .parse()
            .map_err(|e| usage(format!("compress={compress:?}: {e}")))?;
        let spec = JobSpec::stream(policy, streams, chunk_size, buffer_mem)?;
        let runtime = spec.runtime(Side::Send, Populate::Now)?;
        let opts = StreamOptions {
            streams: u16::try_from(streams).unwrap_or(u16::MAX),
            record_bytes: runtime.chunk_bytes(),
            compress,
            // Each message says its own element size (`send`'s `elem_bytes`).
            shuffle: None,
            token: token_arg(token, token_file)?,
            tls: client_tls(encrypt, ca, known_hosts, strict_host_key)?,
        };
        let record_bytes = opts.record_bytes as usize;
        let sender = py
            .detach(|| StreamSender::connect(&addr, &opts, runtime))
            .map_err(engine)?;
        Ok(RawSender {
            sends_raw: sender.sends_raw(),
            state: Mutex::new(State {
                sender: Some(sender),
                next_frame: 0,
            }),
            record_bytes,
            pins: Arc::default(),
        })
    }

    /// Sends one message of `kind` (0 frame, 1 series start, 2 series end) with its
    /// JSON `info` and `payload` (a C-contiguous byte buffer); returns the frame's id
    /// (for the other kinds, the next frame's). `elem_bytes` (1, 2, 4 or 8; 0: none)
    /// is the size of the payload's elements: its records are shuffled as such
    /// before they are compressed, where the stream compresses and the receiver
    /// un-shuffles. Blocks, with the GIL released, while the receiver is slower. Where
    /// the stream does not compress (`zero_copy`) and not `copy`, a payload is not
    /// copied: it is pinned, the buffer held, until the receiver has acknowledged it.
    #[pyo3(signature = (kind, series, info, payload=None, elem_bytes=0, copy=false))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        kind: u8,
        series: u64,
        info: &[u8],
        payload: Option<PyBuffer<u8>>,
        elem_bytes: usize,
        copy: bool,
    ) -> PyResult<u64> {
        self.pins.release(py);
        let kind = match Kind::from_u8(kind) {
            Some(k) if k != Kind::End => k,
            _ => return Err(usage(format!("message kind {kind} cannot be sent"))),
        };
        let elem = match (elem_bytes, ElementSize::from_bytes(elem_bytes)) {
            (0, _) => None,
            (_, Some(e)) => Some(e),
            (n, None) => {
                return Err(usage(format!(
                    "shuffle={n}: an element size is 1, 2, 4 or 8 bytes"
                )))
            }
        };
        if let Some(p) = &payload {
            if !p.is_c_contiguous() {
                return Err(usage("the array is not C-contiguous"));
            }
        }
        self.check_info(info)?;
        let pin = self.sends_raw && !copy && payload.as_ref().is_some_and(|p| p.len_bytes() > 0);
        let payload = match payload {
            Some(p) if pin => {
                let owner = self.pins.pin(p);
                let pinned = Payload::Pinned(owner);
                return py.detach(|| self.message(kind, series, info, pinned, elem, false));
            }
            other => other,
        };
        let payload = payload.as_ref();
        py.detach(|| {
            // SAFETY: the buffer stays exported (and its memory valid) while `payload`
            // lives, which outlives this closure; it is read-only here.
            let bytes = payload.map_or(&[][..], |p| unsafe {
                std::slice::from_raw_parts(p.buf_ptr().cast::<u8>(), p.len_bytes())
            });
            self.message(kind, series, info, Payload::Copied(bytes), elem, false)
        })
    }

    /// Waits until the receiver has acknowledged every payload sent without a copy,
    /// and releases their buffers (the GIL released while it waits; signals such as
    /// Ctrl-C interrupt it).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        while !py.detach(|| self.pins.wait_none_held(Duration::from_millis(100))) {
            py.check_signals()?;
        }
        self.pins.release(py);
        Ok(())
    }

    /// Ends the stream and waits until the receiver has every message: the summary as
    /// JSON. Every pinned buffer is released.
    fn close(&self, py: Python<'_>) -> PyResult<String> {
        let summary = py.detach(|| {
            self.message(Kind::End, 0, b"{}", Payload::Copied(&[]), None, true)?;
            let sender = lock(&self.state).sender.take();
            let sender = sender.ok_or_else(closed)?;
            // It joins the net-send threads, which let go of every record.
            let summary = sender.finish().map_err(engine)?;
            Ok(serde_json::to_string(&summary).unwrap_or_default())
        });
        self.pins.release(py);
        summary
    }

    /// Abandons the stream without its end: the receiver reports it broken. Buffers
    /// still pinned are released as the receiver acknowledges them or the connections
    /// close (at the next `flush`).
    fn abort(&self, py: Python<'_>) {
        py.detach(|| drop(lock(&self.state).sender.take()));
        self.pins.release(py);
    }

    /// Whether payloads go without a copy: the stream does not compress.
    #[getter]
    fn zero_copy(&self) -> bool {
        self.sends_raw
    }

    /// Payloads pinned now, not yet acknowledged.
    #[getter]
    fn pinned(&self) -> usize {
        self.pins.held()
    }

    /// Bytes per record (the slot size): a message larger than this spans records.
    #[getter]
    fn record_bytes(&self) -> usize {
        self.record_bytes
    }
}

impl RawSender {
    /// The info must fit the first record with the fixed header.
    fn check_info(&self, info: &[u8]) -> PyResult<()> {
        if info.len() > INFO_BYTES_MAX || FIXED_BYTES + info.len() > self.record_bytes {
            return Err(usage(format!(
                "meta, dtype and shape take {} bytes as JSON: at most {} fit a message",
                info.len(),
                INFO_BYTES_MAX.min(self.record_bytes - FIXED_BYTES)
            )));
        }
        Ok(())
    }

    /// Sends one message in as many records as it needs, shuffled as `elem`-byte
    /// elements where given; `last` marks the stream's end.
    fn message(
        &self,
        kind: Kind,
        series: u64,
        info: &[u8],
        payload: Payload<'_>,
        elem: Option<ElementSize>,
        last: bool,
    ) -> PyResult<u64> {
        let mut state = lock(&self.state);
        let frame_id = state.next_frame;
        let padded = padded_info_bytes(info.len(), self.record_bytes);
        let header = Header {
            kind,
            frame_id,
            series,
            payload_bytes: payload.bytes().len() as u64,
            info_bytes: u32::try_from(padded).map_err(|_| usage("meta is too large"))?,
        };
        // Records after the first continue the payload: they start at an element only
        // where a record holds whole elements.
        let elem = elem.filter(|e| self.record_bytes.is_multiple_of(e.bytes()));
        let sender = state.sender.as_mut().ok_or_else(closed)?;
        let message = Message {
            header: &header,
            info,
            payload: payload.bytes(),
            elem,
        };
        match &payload {
            Payload::Copied(_) => push_message(sender, self.record_bytes, &message, last),
            Payload::Pinned(owner) => {
                push_pinned_message(sender, self.record_bytes, &message, owner, last)
            }
        }
        .map_err(engine)?;
        if kind == Kind::Frame {
            state.next_frame += 1;
        }
        Ok(frame_id)
    }
}

/// A message's payload: borrowed, to copy into the slots, or pinned for the records to
/// point into.
enum Payload<'a> {
    Copied(&'a [u8]),
    Pinned(Arc<dyn PinnedBytes>),
}

impl Payload<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Copied(b) => b,
            Payload::Pinned(owner) => owner.bytes(),
        }
    }
}

/// A message on its way into records.
struct Message<'a> {
    /// Its header; `info_bytes` counts the info's padding.
    header: &'a Header,
    /// The info as JSON, unpadded.
    info: &'a [u8],
    payload: &'a [u8],
    /// The payload's elements, for the shuffle of its records.
    elem: Option<ElementSize>,
}

/// Pushes the header and info (padded with spaces to the header's `info_bytes`), then
/// the payload, starting a new record; every record of the message is shuffled as
/// its elements.
fn push_message(
    sender: &mut StreamSender,
    record_bytes: usize,
    m: &Message<'_>,
    last: bool,
) -> Result<(), EngineError> {
    let len = m.payload.len();
    for (i, r) in record_ranges(m, record_bytes).enumerate() {
        let (end, now) = (r.end, &m.payload[r]);
        sender.push_elements_with(m.elem, last && end == len, |buf| {
            let head = if i == 0 { write_head(m, buf) } else { 0 };
            buf[head..head + now.len()].copy_from_slice(now);
            head + now.len()
        })?;
    }
    Ok(())
}

/// [`push_message`] without copying the payload: the first record's slot holds the
/// header and info, and each record points at its range of the pinned payload (the
/// same records, byte for byte, as [`push_message`] makes: both split by
/// [`record_ranges`]).
fn push_pinned_message(
    sender: &mut StreamSender,
    record_bytes: usize,
    m: &Message<'_>,
    owner: &Arc<dyn PinnedBytes>,
    last: bool,
) -> Result<(), EngineError> {
    let len = m.payload.len();
    for (i, r) in record_ranges(m, record_bytes).enumerate() {
        let end = r.end;
        let tail = range(owner, r.start, end)?;
        let head = |buf: &mut [u8]| if i == 0 { write_head(m, buf) } else { 0 };
        sender.push_pinned(m.elem, last && end == len, head, tail)?;
    }
    Ok(())
}

/// The payload's ranges record by record: the first record's after the message's head,
/// then a whole record each; one (empty) range for an empty payload.
fn record_ranges(m: &Message<'_>, record_bytes: usize) -> impl Iterator<Item = Range<usize>> {
    let head = m.header.head_bytes();
    debug_assert!(head <= record_bytes);
    let len = m.payload.len();
    let first = (record_bytes - head).min(len);
    std::iter::once(0..first).chain(
        (first..len)
            .step_by(record_bytes)
            .map(move |s| s..(s + record_bytes).min(len)),
    )
}

/// Bytes `start..end` of `owner`.
fn range(
    owner: &Arc<dyn PinnedBytes>,
    start: usize,
    end: usize,
) -> Result<PinnedRange, EngineError> {
    PinnedRange::new(Arc::clone(owner), start..end)
        .ok_or_else(|| EngineError::Config(format!("bytes {start}..{end} are not in the payload")))
}

/// Writes the message's header and info, padded with spaces to the header's
/// `info_bytes`, at the start of `buf`; returns their length.
fn write_head(m: &Message<'_>, buf: &mut [u8]) -> usize {
    let head = m.header.head_bytes();
    let info_end = FIXED_BYTES + m.info.len();
    debug_assert!(info_end <= head && head <= buf.len());
    m.header.encode(&mut buf[..FIXED_BYTES]);
    buf[FIXED_BYTES..info_end].copy_from_slice(m.info);
    buf[info_end..head].fill(b' ');
    head
}

/// The error of a call after `close` or `abort`.
fn closed() -> PyErr {
    usage("the stream is closed")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A stream's plan: its net threads compress their own records, slots of 16 MiB unless
/// `chunk_size` says more (`sluice stream`'s defaults).
impl JobSpec {
    /// The plan of one end of a stream.
    pub fn stream(
        policy: &str,
        streams: u32,
        chunk_size: Option<&Bound<'_, PyAny>>,
        buffer_mem: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<JobSpec> {
        Ok(JobSpec {
            policy: policy.to_string(),
            streams,
            io_threads: 2,
            read_depth: sluice_engine::DEFAULT_READ_DEPTH,
            chunk_bytes: chunk_size.map_or(Ok(16 << 20), |c| size_arg("chunk_size", c))?,
            buffer_bytes: buffer_mem
                .map(crate::options::buffer_arg)
                .transpose()?
                .flatten(),
            planner: Planner::Stream,
        })
    }
}
