//! Live streaming (seed 001): a byte stream (a detector's output) from a producer to a
//! consumer, in order, through the same channels, placement, compression, integrity and
//! authentication as file transfers.
//!
//! The stream is cut into records (default 11.0592 MB, seed 001's tomography frames).
//! Record `k` travels on data connection `k mod N`; each connection's net-send thread
//! compresses its records (so compression runs on N threads in parallel, placed as the
//! plan's net-send threads) and each net-recv thread verifies and decompresses its own.
//! The receiver's writer takes records from connection `k mod N` in turn, so order needs
//! no reordering buffer, and every queue holds at most two records: a slow consumer
//! fills them, TCP's window closes and the producer blocks. Memory stays bounded.
//!
//! A pipe cannot be re-read, so the sender keeps each record in its slot until the
//! receiver acknowledges it (`ChunkAck` on the control connection, `CHUNK_ACKS`): the
//! slots are the window. A record that fails its checksum or does not decompress is
//! answered with `ChunkNack`; the sender sends it again from the slot, followed by every
//! later record of that connection (go-back-N: the receiver drops what arrives on that
//! connection until the record it asked for), so order holds without a reordering
//! buffer. After [`MAX_RESENDS`] failures of one record the stream stops with an error;
//! nothing after the last good record is ever written.
//!
//! The protocol (record order, windows, go-back-N, the receiver's verdicts) is the pure
//! [`sluice_session::stream`]; this module is its I/O shell:
//! * `mod.rs`: the options, the summary, the sender's API ([`StreamSender`],
//!   [`send_from`]);
//! * `send.rs`: one connection's send loop and the control reader that routes the
//!   receiver's words;
//! * `recv.rs`: [`receive_to`]'s writer and the connections' receive loops;
//! * `accept.rs`: the receiver's handshake, `Open` and joins;
//! * `lend.rs`: lending received records' slots to the caller within the pools' spare
//!   slots, so that a caller keeping records never stalls the stream;
//! * `pinned.rs`: records sent from the caller's memory without a copy
//!   ([`StreamSender::push_pinned`]), kept (pinned) until acknowledged.

mod accept;
mod lend;
mod pinned;
mod recv;
mod send;

pub use lend::{spare_slots, LentSlot, Loans};
pub use pinned::{PinnedBytes, PinnedRange};
pub use recv::{receive_to, Polled, StreamReceiver};
pub use sluice_session::stream::MAX_RESENDS;

use crate::codec::plan::announce;
use crate::codec::{CodecInputs, CodecPlan, CodecSite, CompressMode, Unshuffles};
use crate::error::EngineError;
use crate::net::tls::{ClientTls, Link};
use crate::runtime::Runtime;
use crate::session;
use crate::transport::{self, ChunkSender, FrameWriter};
use crate::SessionOptions;
use crossbeam_channel::{Receiver, Sender};
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_session::stream::{AckRoutes, RecordOrder};
use sluice_wire::{Accept, Capabilities, Close, CloseReason, Direction, ElementSize, Open, Token};
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Seed 001's frame size: 2560 x 2160 16-bit pixels.
pub const DEFAULT_RECORD_BYTES: u32 = 11_059_200;
/// Records queued per connection on each side.
const QUEUE_RECORDS: usize = 2;
/// How long a sender waits for the receiver's word on a record it sent.
const ACK_TIMEOUT: Duration = Duration::from_secs(600);
/// The stream's records all belong to this file id on the wire.
const STREAM_FILE_ID: u64 = 1;

/// Stream settings shared by both ends.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Data connections.
    pub streams: u16,
    /// Bytes per record (at most the buffer slot size).
    pub record_bytes: u32,
    /// Compression per record.
    pub compress: CompressMode,
    /// The size of the elements the stream is made of (`--shuffle`): each record is
    /// shuffled as such before it is compressed (bits for LZ4; for zstd bytes or bits,
    /// whichever sends fewer), where it is compressed and the receiver un-shuffles
    /// (`SHUFFLE`, `BYTE_SHUFFLE`), so that typed data (a detector's 16-bit counts)
    /// compresses. `None`: records are compressed as they are. Records must start at an
    /// element, so `record_bytes` must be a multiple of it.
    pub shuffle: Option<ElementSize>,
    /// Shared secret.
    pub token: Option<Token>,
    /// The sender's encryption and trust.
    pub tls: ClientTls,
}

/// Totals of a finished stream.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct StreamSummary {
    /// Payload bytes.
    pub bytes: u64,
    /// Bytes on the wire.
    pub wire_bytes: u64,
    /// Records.
    pub records: u64,
    /// Records sent again (sender) or asked for again (receiver) because they arrived
    /// damaged.
    pub records_resent: u64,
    /// Seconds.
    pub seconds: f64,
}

/// A record on its way out: the slot holds its bytes, or its head where `pinned`
/// follows.
struct Record {
    offset: u64,
    last: bool,
    slot: Slot,
    /// The rest of the record's bytes, sent from the caller's memory (never compressed).
    pinned: Option<PinnedRange>,
    /// The elements the record is made of, for the shuffle.
    shuffle: Option<ElementSize>,
}

impl Record {
    /// The record's bytes in the stream.
    fn raw_len(&self) -> usize {
        self.slot.filled() + self.pinned.as_ref().map_or(0, PinnedRange::len)
    }
}

/// What one connection's sender sent: payload and wire bytes, records sent again.
#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    bytes: u64,
    wire: u64,
    resent: u64,
}

/// The sending end: a library API that pushes records from a producer, used by
/// `sluice stream send` with stdin as the producer.
pub struct StreamSender {
    runtime: Arc<Runtime>,
    queues: Vec<Sender<Record>>,
    threads: Vec<JoinHandle<Result<Sent, EngineError>>>,
    control: FrameWriter,
    /// Which connection sent each record in flight (`None`: the receiver does not
    /// acknowledge records).
    routes: Option<Arc<Mutex<AckRoutes>>>,
    /// What the control reader saw last: the receiver's `CloseAck`, `Error`, or its end.
    closing: Receiver<Result<(), EngineError>>,
    order: RecordOrder,
    started: std::time::Instant,
    record_bytes: u32,
    /// The element size of records pushed without one ([`StreamOptions::shuffle`]).
    shuffle: Option<ElementSize>,
    /// Whether records go as they are (the codec's mode is none): pinned bytes are then
    /// sent from where they are.
    sends_raw: bool,
}

impl std::fmt::Debug for StreamSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSender")
            .field("offset", &self.order.next_offset())
            .finish_non_exhaustive()
    }
}

/// The `Open` a stream's sender sends: a push of no path, through the one conversion
/// of options to the wire, with the stream's own codec announcement.
fn open_frame(opts: &StreamOptions, runtime: &Runtime) -> Open {
    let mut options = SessionOptions {
        streams: opts.streams,
        chunk_bytes: runtime.chunk_bytes(),
        direct: false,
        ..SessionOptions::default()
    }
    .open_options();
    options.compress = announce(opts.compress, CodecSite::StreamSender);
    Open {
        direction: Direction::Push,
        path: String::new(),
        options,
    }
}

/// A record must fit a slot on both ends, and every connection needs slots enough to
/// keep busy (three records each, and the one being filled).
fn check_sizes(
    opts: &StreamOptions,
    runtime: &Runtime,
    accept: &Accept,
    slots: u32,
) -> Result<(), EngineError> {
    if accept.chunk_bytes < opts.record_bytes {
        return Err(EngineError::Config(format!(
            "the receiver's slots hold {} bytes, less than a {}-byte record",
            accept.chunk_bytes, opts.record_bytes
        )));
    }
    let need = 3 * u32::from(accept.streams()) + 1;
    if slots < need {
        return Err(EngineError::Config(format!(
            "{slots} buffer slots cannot keep {} streams busy: raise --buffer-mem to at least {need} chunks",
            accept.streams(),
        )));
    }
    debug_assert!(opts.record_bytes <= runtime.chunk_bytes());
    Ok(())
}

/// Buffer slots of every pool of `runtime`.
fn total_slots(runtime: &Runtime) -> u32 {
    runtime.channels().iter().map(|c| c.pool.slots()).sum()
}

impl StreamSender {
    /// Connects to a `sluice stream recv` at `addr`, authenticates and opens the data
    /// connections, each served by a net-send thread pinned by the plan.
    ///
    /// # Errors
    /// Connection, handshake or join failures.
    pub fn connect(
        addr: &str,
        opts: &StreamOptions,
        runtime: Arc<Runtime>,
    ) -> Result<StreamSender, EngineError> {
        if opts.record_bytes == 0 || opts.record_bytes > runtime.chunk_bytes() {
            return Err(EngineError::Config(format!(
                "record size {} must be between 1 and the {}-byte buffer slot (raise --chunk-size)",
                opts.record_bytes,
                runtime.chunk_bytes()
            )));
        }
        if let Some(elem) = opts
            .shuffle
            .filter(|e| !(opts.record_bytes as usize).is_multiple_of(e.bytes()))
        {
            return Err(EngineError::Config(format!(
                "record size {} is not a multiple of the shuffle's {elem}: records must start at an element",
                opts.record_bytes
            )));
        }
        let open = open_frame(opts, &runtime);
        let opened = session::open_session(addr, opts.token.clone(), open, &opts.tls)?;
        let cap = runtime.plan().buffer_bytes();
        crate::net::tuning::tune_session(opened.reader.link(), &opened.data, cap);
        let acked = opened.capabilities.contains(Capabilities::CHUNK_ACKS);
        let slots = total_slots(&runtime);
        check_sizes(opts, &runtime, &opened.accept, slots)?;
        let unshuffles = Unshuffles::of(opened.capabilities);
        let codec = stream_codec(&runtime, opts.compress, &opened.data, unshuffles);
        if opts.shuffle.is_some() && !codec.shuffle.any() && codec.mode != CompressMode::None {
            tracing::info!("the receiver does not un-shuffle: records are compressed as they are");
        }
        let started = send::start(send::Start {
            runtime: &runtime,
            peer: addr,
            data: ChunkSender::for_connections(opened.data, opened.joining),
            reader: opened.reader,
            codec,
            acked,
            slots: slots as usize,
        })?;
        Ok(StreamSender {
            order: RecordOrder::new(started.queues.len()),
            runtime,
            queues: started.queues,
            threads: started.threads,
            control: opened.writer,
            routes: started.routes,
            closing: started.closing,
            started: std::time::Instant::now(),
            record_bytes: opts.record_bytes,
            shuffle: opts.shuffle,
            sends_raw: codec.mode == CompressMode::None,
        })
    }

    /// Whether the stream sends records as they are (it does not compress): then
    /// [`Self::push_pinned`] sends pinned bytes without a copy.
    pub fn sends_raw(&self) -> bool {
        self.sends_raw
    }

    /// Sends one record produced by `fill`, which writes up to `record_bytes` bytes into
    /// the buffer it is given (a NUMA-local slot) and returns how many; `last` marks the
    /// end of the stream. Blocks while the receiver is slower (back-pressure).
    ///
    /// # Errors
    /// The receiver went away.
    pub fn push_with(
        &mut self,
        last: bool,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), EngineError> {
        self.push_elements_with(self.shuffle, last, fill)
    }

    /// [`Self::push_with`] of a record made of `elem`-byte elements (the first byte of
    /// the record is an element's first byte), which overrides
    /// [`StreamOptions::shuffle`]: the record is shuffled as such before it is
    /// compressed, where the stream compresses and the receiver un-shuffles. `None`: it
    /// is compressed as it is.
    ///
    /// # Errors
    /// The receiver went away.
    pub fn push_elements_with(
        &mut self,
        elem: Option<ElementSize>,
        last: bool,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), EngineError> {
        let (conn, mut slot) = self.next_slot()?;
        let rb = self.record_bytes as usize;
        let n = fill(&mut slot[..rb]).min(rb);
        slot.set_filled(n);
        self.enqueue(conn, slot, None, elem, last)
    }

    /// Sends one record without copying `tail`: `head` writes up to `record_bytes`
    /// less `tail`'s length into the slot it is given and returns how many (0: the
    /// record is `tail` alone), and the net-send thread sends those bytes and then
    /// `tail` from the caller's memory, in one vectored write, checksummed together as
    /// one record. The record (and so its share of `tail`'s owner) is kept until the
    /// receiver acknowledges it, resent from the same memory if it arrives damaged,
    /// then dropped; its owner is dropped when the stream ends or fails, at the latest.
    /// Where the stream compresses ([`Self::sends_raw`] is false) `tail` is copied into
    /// the slot after the head and let go at once, as [`Self::push_elements_with`]
    /// would (the codec reads the record from its slot). Each record holds a slot as
    /// any other, so this blocks while the pool's slots are all in flight: what is
    /// pinned is bounded by the pool. `elem`: as for [`Self::push_elements_with`].
    ///
    /// # Errors
    /// [`EngineError::Config`] for a `tail` longer than a record; the receiver went
    /// away.
    pub fn push_pinned(
        &mut self,
        elem: Option<ElementSize>,
        last: bool,
        head: impl FnOnce(&mut [u8]) -> usize,
        tail: PinnedRange,
    ) -> Result<(), EngineError> {
        let rb = self.record_bytes as usize;
        if tail.len() > rb {
            return Err(EngineError::Config(format!(
                "{} pinned bytes do not fit a {rb}-byte record",
                tail.len()
            )));
        }
        let (conn, mut slot) = self.next_slot()?;
        let pinned = pinned::compose(&mut slot, rb, head, tail, !self.sends_raw);
        self.enqueue(conn, slot, pinned, elem, last)
    }

    /// The connection of the next record and a slot of its pool (blocks while the pool
    /// has none free: the records in flight hold them).
    fn next_slot(&self) -> Result<(usize, Slot), EngineError> {
        let conn = self.order.next_connection();
        if conn >= self.queues.len() {
            return Err(EngineError::Aborted("the stream has already failed".into()));
        }
        let (_, pool) = self
            .runtime
            .pool_for(Role::NetSend, u32::try_from(conn).unwrap_or(0));
        Ok((conn, pool.acquire()))
    }

    /// Queues the next record (`slot`'s bytes, then `pinned`'s) on `conn`.
    fn enqueue(
        &mut self,
        conn: usize,
        slot: Slot,
        pinned: Option<PinnedRange>,
        elem: Option<ElementSize>,
        last: bool,
    ) -> Result<(), EngineError> {
        let offset = self.order.next_offset();
        if let Some(r) = &self.routes {
            lock(r)
                .route(offset, conn)
                .map_err(|e| EngineError::Aborted(e.to_string()))?;
        }
        let record = Record {
            offset,
            last,
            slot,
            pinned,
            shuffle: elem,
        };
        debug_assert!(record.raw_len() <= self.record_bytes as usize);
        self.order.pushed(record.raw_len() as u64);
        if self.queues[conn].send(record).is_err() {
            return Err(self.failure());
        }
        Ok(())
    }

    /// Sends `data` as one record (at most `record_bytes`).
    ///
    /// # Errors
    /// The receiver went away.
    pub fn push(&mut self, data: &[u8], last: bool) -> Result<(), EngineError> {
        self.push_with(last, |buf| {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            n
        })
    }

    /// The error of the first net-send thread that failed.
    fn failure(&mut self) -> EngineError {
        self.queues.clear();
        for t in self.threads.drain(..) {
            if let Ok(Err(e)) = t.join() {
                return e;
            }
        }
        EngineError::Aborted("the receiver closed the stream".into())
    }

    /// Ends the stream (after a record marked `last`) and waits until the receiver has
    /// acknowledged every record and written the stream out (its `CloseAck`).
    ///
    /// # Errors
    /// A net-send thread failed, or the receiver reported an error or went away first.
    pub fn finish(mut self) -> Result<StreamSummary, EngineError> {
        self.queues.clear();
        let sent = join_senders(self.threads.drain(..))?;
        let _ = self.control.send(&Close {
            reason: CloseReason::Done,
        });
        match self.closing.recv_timeout(ACK_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(EngineError::Disconnected {
                    peer: "receiver".into(),
                    state: "waiting for the stream's close to be acknowledged".into(),
                })
            }
        }
        Ok(StreamSummary {
            bytes: sent.bytes,
            wire_bytes: sent.wire,
            records: self.order.records(),
            records_resent: sent.resent,
            seconds: self.started.elapsed().as_secs_f64(),
        })
    }
}

/// The codec decisions of a stream's sender over `data`, toward a receiver that
/// un-shuffles or not.
fn stream_codec(
    runtime: &Runtime,
    asked: CompressMode,
    data: &[Link],
    peer_unshuffles: Unshuffles,
) -> CodecPlan {
    CodecPlan::decide(&CodecInputs {
        peer_is_this_host: data
            .first()
            .is_some_and(|l| transport::peer_is_this_host(l.stream())),
        streams: u32::try_from(data.len()).unwrap_or(u32::MAX),
        peer_unshuffles,
        ..CodecInputs::on(runtime, CodecSite::StreamSender, asked)
    })
}

/// Joins the net-send threads: their totals, or the first one's error.
fn join_senders(
    threads: impl Iterator<Item = JoinHandle<Result<Sent, EngineError>>>,
) -> Result<Sent, EngineError> {
    let mut total = Sent::default();
    let mut first_err = None;
    for t in threads {
        match t.join() {
            Ok(Ok(sent)) => {
                total.bytes += sent.bytes;
                total.wire += sent.wire;
                total.resent += sent.resent;
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(EngineError::Aborted("a net-send thread panicked".into()));
            }
        }
    }
    first_err.map_or(Ok(total), Err)
}

/// Sends everything `input` produces, in records, to the receiver at `addr`.
///
/// # Errors
/// Reading `input` failed, or the stream broke.
pub fn send_from(
    addr: &str,
    opts: &StreamOptions,
    runtime: Arc<Runtime>,
    mut input: impl Read,
) -> Result<StreamSummary, EngineError> {
    let mut sender = StreamSender::connect(addr, opts, runtime)?;
    // Read one record ahead so the last one can be marked.
    let rb = opts.record_bytes as usize;
    let mut pending: Vec<u8> = Vec::with_capacity(rb);
    let mut next: Vec<u8> = Vec::with_capacity(rb);
    let mut eof = fill(&mut input, &mut pending, rb)?;
    if pending.is_empty() {
        return sender.finish(); // an empty stream: no record at all
    }
    loop {
        if eof {
            sender.push(&pending, true)?;
            return sender.finish();
        }
        eof = fill(&mut input, &mut next, rb)?;
        if next.is_empty() && eof {
            sender.push(&pending, true)?;
            return sender.finish();
        }
        sender.push(&pending, false)?;
        std::mem::swap(&mut pending, &mut next);
    }
}

/// Reads up to `n` bytes into `buf` (cleared first); returns whether input ended.
fn fill(input: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> Result<bool, EngineError> {
    buf.clear();
    let got = input
        .by_ref()
        .take(n as u64)
        .read_to_end(buf)
        .map_err(|e| EngineError::io("reading the stream's input", e))?;
    Ok(got < n)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
