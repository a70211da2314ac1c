//! `_sluice.RawReceiver`: the engine's [`StreamReceiver`] for Python. A message's
//! header is read from its first record. Then either the payload is lent where it lies
//! (`lend_payload`: a [`SlotView`] over the record's NUMA-local slot, when the payload
//! is whole in that record and the stream can spare the slot, see
//! [`StreamReceiver::lend`]), or the caller gives a buffer (a fresh numpy array, or its
//! own for `recv_into`) and the payload is copied into it straight from the slots, with
//! the GIL released.

use crate::errors::{engine, usage};
use crate::frame::{Header, Kind, PAYLOAD_ALIGN_BYTES};
use crate::options::{server_tls, token_arg, JobSpec, Side};
use crate::view::SlotView;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice_buffers::Slot;
use sluice_engine::net::tls::ServerTls;
use sluice_engine::stream::{Loans, Polled, StreamReceiver, StreamSummary};
use sluice_engine::{EngineError, Populate, Runtime};
use sluice_wire::Token;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A message whose header was read and whose payload is still in the stream: the
/// first record (payload from `at`) and the bytes still to come after it.
struct Pending {
    header: Header,
    first: Slot,
    at: usize,
}

/// `(kind, frame_id, series, info, payload_bytes)`, as `next_header` returns it.
type HeaderTuple<'py> = (u8, u64, u64, Bound<'py, PyBytes>, u64);

/// A message's header and info, or `None` at the end of the stream.
type Next = Option<(Header, Vec<u8>)>;

/// How long one wait for the sender lasts before Python may handle a signal.
const WAIT_SLICE: Duration = Duration::from_millis(200);

/// Where the stream stands.
enum Phase {
    /// Listening; the sender has not been accepted.
    Waiting(Box<Waiting>),
    /// Receiving.
    Open(StreamReceiver),
    /// The stream ended (its summary) or broke (`None`).
    Done(Option<StreamSummary>),
}

/// What accepting the sender needs.
struct Waiting {
    listener: TcpListener,
    token: Option<Token>,
    tls: ServerTls,
    runtime: Arc<Runtime>,
}

struct State {
    phase: Phase,
    pending: Option<Pending>,
    /// The stream's loans once the sender is accepted; they outlive the stream.
    loans: Option<Loans>,
}

/// The receiving end of a stream of messages (see `sluice.Receiver`).
#[pyclass(module = "sluice._sluice")]
pub struct RawReceiver {
    state: Mutex<State>,
    /// The listener's descriptor, polled while the sender has not come.
    listen_fd: RawFd,
    address: SocketAddr,
    fingerprint: String,
}

#[pymethods]
impl RawReceiver {
    /// Listens on `listen` (see `sluice.Receiver`); the sender is accepted by the first
    /// `next_header`.
    #[new]
    #[pyo3(signature = (listen="127.0.0.1:0", *, streams=2, policy="auto", chunk_size=None,
        buffer_mem=None, token=None, token_file=None, insecure_no_auth=false,
        encrypt="auto", cert=None, key=None, state_dir=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        listen: &str,
        streams: u32,
        policy: &str,
        chunk_size: Option<&Bound<'_, PyAny>>,
        buffer_mem: Option<&Bound<'_, PyAny>>,
        token: Option<&Bound<'_, PyAny>>,
        token_file: Option<PathBuf>,
        insecure_no_auth: bool,
        encrypt: &str,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        state_dir: Option<PathBuf>,
    ) -> PyResult<RawReceiver> {
        let listen: SocketAddr = listen
            .parse()
            .map_err(|e| usage(format!("listen={listen:?} is not ADDR:PORT: {e}")))?;
        let token = token_arg(token, token_file)?;
        if !listen.ip().is_loopback() && token.is_none() && !insecure_no_auth {
            return Err(usage(format!(
                "listen={listen} is not a loopback address: give token or token_file (or insecure_no_auth=True)"
            )));
        }
        let cert_key = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(usage("cert and key go together")),
        };
        let tls = server_tls(listen, encrypt, cert_key, state_dir)?;
        let spec = JobSpec::stream(policy, streams, chunk_size, buffer_mem)?;
        let runtime = spec.runtime(Side::Recv, Populate::Now)?;
        let listener = TcpListener::bind(listen)
            .map_err(|e| engine(EngineError::io(format!("cannot listen on {listen}"), e)))?;
        let address = listener
            .local_addr()
            .map_err(|e| engine(EngineError::io("reading the listening address", e)))?;
        let fingerprint = tls.fingerprint().to_string();
        let listen_fd = listener.as_raw_fd();
        let waiting = Waiting {
            listener,
            token,
            tls,
            runtime,
        };
        Ok(RawReceiver {
            state: Mutex::new(State {
                phase: Phase::Waiting(Box::new(waiting)),
                pending: None,
                loans: None,
            }),
            listen_fd,
            address,
            fingerprint,
        })
    }

    /// `HOST:PORT` the receiver listens on.
    #[getter]
    fn address(&self) -> String {
        self.address.to_string()
    }

    /// The SHA-256 fingerprint of the receiver's TLS certificate.
    #[getter]
    fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    /// The next message's `(kind, frame_id, series, info, payload_bytes)`, or `None`
    /// at the end of the stream. A payload not read by then is skipped.
    fn next_header<'py>(&self, py: Python<'py>) -> PyResult<Option<HeaderTuple<'py>>> {
        self.wait_for_sender(py)?;
        let got = loop {
            let step = py.detach(|| -> PyResult<Option<Next>> {
                let mut state = lock(&self.state);
                state.skip_payload()?;
                state.poll_header(WAIT_SLICE)
            })?;
            match step {
                Some(next) => break next,
                // Nothing yet: a Ctrl-C raises KeyboardInterrupt here.
                None => py.check_signals()?,
            }
        };
        Ok(got.map(|(h, info)| {
            let info = PyBytes::new(py, &info);
            (h.kind as u8, h.frame_id, h.series, info, h.payload_bytes)
        }))
    }

    /// Copies the pending message's payload into `out` (a writable C-contiguous buffer
    /// of exactly its size).
    fn read_payload(&self, py: Python<'_>, out: PyBuffer<u8>) -> PyResult<()> {
        if out.readonly() || !out.is_c_contiguous() {
            return Err(usage("the output buffer must be writable and C-contiguous"));
        }
        let out = &out;
        py.detach(|| {
            // SAFETY: the buffer stays exported while `out` lives, which outlives this
            // closure; it is writable and contiguous (checked above), and nothing else
            // in this process writes it while the caller waits in this call.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(out.buf_ptr().cast::<u8>(), out.len_bytes())
            };
            lock(&self.state).read_payload(dst)
        })
    }

    /// Lends the pending message's payload in its slot, as a `SlotView`, where the
    /// payload lies whole in the message's first record, 64-byte aligned, not empty,
    /// and the stream can spare the slot; `None` otherwise (the payload stays pending,
    /// for `read_payload`).
    fn lend_payload(&self, py: Python<'_>) -> PyResult<Option<SlotView>> {
        py.detach(|| lock(&self.state).lend_payload())
    }

    /// Slots lent now (`SlotView`s alive).
    #[getter]
    fn slots_lent(&self) -> usize {
        lock(&self.state).loans.as_ref().map_or(0, Loans::lent)
    }

    /// Slots that may be lent at once (0 until the sender is accepted).
    #[getter]
    fn slots_spare(&self) -> usize {
        lock(&self.state).loans.as_ref().map_or(0, Loans::spare)
    }

    /// The stream's totals as JSON once it has ended, else `None`.
    fn summary(&self) -> Option<String> {
        match &lock(&self.state).phase {
            Phase::Done(Some(s)) => serde_json::to_string(s).ok(),
            _ => None,
        }
    }

    /// Stops receiving: a stream not yet ended is abandoned (the sender sees an error).
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            let mut state = lock(&self.state);
            state.pending = None;
            if !matches!(state.phase, Phase::Done(_)) {
                state.phase = Phase::Done(None);
            }
        });
    }
}

impl RawReceiver {
    /// Waits, in slices that let Python handle a Ctrl-C, until a sender knocks (when
    /// none has been accepted yet).
    fn wait_for_sender(&self, py: Python<'_>) -> PyResult<()> {
        while matches!(lock(&self.state).phase, Phase::Waiting(_)) {
            if py.detach(|| readable(self.listen_fd, WAIT_SLICE)) {
                return Ok(());
            }
            py.check_signals()?;
        }
        Ok(())
    }
}

/// Whether `fd` becomes readable (a connection to accept) within `wait`.
fn readable(fd: RawFd, wait: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is one valid pollfd for the duration of the call; an fd that was
    // closed meanwhile only makes poll report POLLNVAL.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    // -1 (EINTR: a signal) is "not yet", so that the caller lets Python handle it.
    n > 0
}

impl State {
    /// The receiver, accepting the sender first if it has not been.
    fn receiver(&mut self) -> PyResult<Option<&mut StreamReceiver>> {
        if let Phase::Waiting(_) = self.phase {
            let Phase::Waiting(w) = std::mem::replace(&mut self.phase, Phase::Done(None)) else {
                return Ok(None);
            };
            let r =
                StreamReceiver::accept(&w.listener, w.token, &w.tls, w.runtime).map_err(engine)?;
            self.loans = Some(r.loans().clone());
            self.phase = Phase::Open(r);
        }
        match &mut self.phase {
            Phase::Open(r) => Ok(Some(r)),
            Phase::Waiting(_) | Phase::Done(_) => Ok(None),
        }
    }

    /// The next record; the stream is broken (and no longer usable) on an error.
    fn record(&mut self) -> PyResult<Option<Slot>> {
        let Some(r) = self.receiver()? else {
            return Ok(None);
        };
        r.next_record().map_err(|e| {
            self.phase = Phase::Done(None);
            engine(e)
        })
    }

    /// Reads the next message's header if its record arrives within `wait` (`None`:
    /// not yet); the end message ends the stream (`CloseAck`: every message before it
    /// is in the caller's hands).
    fn poll_header(&mut self, wait: Duration) -> PyResult<Option<Next>> {
        let Some(r) = self.receiver()? else {
            self.end();
            return Ok(Some(None));
        };
        let first = match r.poll_record(wait) {
            Ok(Polled::Record(slot)) => slot,
            Ok(Polled::End) => {
                self.end();
                return Ok(Some(None));
            }
            Ok(Polled::NotYet) => return Ok(None),
            Err(e) => {
                self.phase = Phase::Done(None);
                return Err(engine(e));
            }
        };
        let bytes = first.filled_bytes();
        let header = Header::decode(bytes).map_err(|m| self.broken(m))?;
        if header.kind == Kind::End {
            self.end();
            return Ok(Some(None));
        }
        let info = bytes[crate::frame::FIXED_BYTES..header.head_bytes()].to_vec();
        self.pending = Some(Pending {
            at: header.head_bytes(),
            header,
            first,
        });
        Ok(Some(Some((header, info))))
    }

    /// The stream ended well: the sender hears so.
    fn end(&mut self) {
        if let Phase::Open(_) = self.phase {
            if let Phase::Open(r) = std::mem::replace(&mut self.phase, Phase::Done(None)) {
                self.phase = Phase::Done(Some(r.finish()));
            }
        }
    }

    /// The stream broke on a bad message.
    fn broken(&mut self, message: String) -> PyErr {
        self.phase = Phase::Done(None);
        self.pending = None;
        engine(EngineError::Aborted(message))
    }

    /// Copies the pending payload into `dst`, which must be exactly its size.
    fn read_payload(&mut self, dst: &mut [u8]) -> PyResult<()> {
        let Some(p) = self.pending.as_ref() else {
            return Err(usage(
                "no message is waiting for its payload: call next_header first",
            ));
        };
        if dst.len() as u64 != p.header.payload_bytes {
            return Err(usage(format!(
                "the buffer holds {} bytes, the frame {}",
                dst.len(),
                p.header.payload_bytes
            )));
        }
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let carried = &p.first.filled_bytes()[p.at..];
        dst[..carried.len()].copy_from_slice(carried);
        let mut at = carried.len();
        drop(p);
        while at < dst.len() {
            let Some(record) = self.record()? else {
                return Err(self.broken(format!(
                    "the stream ended {} bytes into a {}-byte frame",
                    at,
                    dst.len()
                )));
            };
            let bytes = record.filled_bytes();
            let Some(into) = dst.get_mut(at..at + bytes.len()) else {
                return Err(self.broken("a record carries bytes beyond its frame".into()));
            };
            into.copy_from_slice(bytes);
            at += bytes.len();
        }
        Ok(())
    }

    /// The pending payload lent in its slot, where it can be (`RawReceiver::lend_payload`);
    /// otherwise it stays pending.
    fn lend_payload(&mut self) -> PyResult<Option<SlotView>> {
        let Some(p) = self.pending.take() else {
            return Err(usage(
                "no message is waiting for its payload: call next_header first",
            ));
        };
        let len = p.first.filled() - p.at;
        let lendable =
            len > 0 && len as u64 == p.header.payload_bytes && p.at % PAYLOAD_ALIGN_BYTES == 0;
        let r = match &self.phase {
            Phase::Open(r) if lendable => r,
            _ => {
                self.pending = Some(p);
                return Ok(None);
            }
        };
        match r.lend(p.first) {
            Ok(lent) => Ok(Some(SlotView::new(lent, p.at, len))),
            Err(first) => {
                self.pending = Some(Pending { first, ..p });
                Ok(None)
            }
        }
    }

    /// Drops the pending payload (the caller did not read it).
    fn skip_payload(&mut self) -> PyResult<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let mut left = p.header.payload_bytes - (p.first.filled() - p.at) as u64;
        drop(p);
        while left > 0 {
            let Some(record) = self.record()? else {
                return Err(self.broken("the stream ended inside a frame".into()));
            };
            let n = record.filled() as u64;
            if n > left {
                return Err(self.broken("a record carries bytes beyond its frame".into()));
            }
            left -= n;
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
