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

use crate::codec::{CompressMode, Compressor, Decompressor, SharedAuto};
use crate::control::spawn_reader;
use crate::error::EngineError;
use crate::runtime::Runtime;
use crate::session::{self, HANDSHAKE_TIMEOUT};
use crate::transport::{self, ChunkReceiver, ChunkSender, DataEvent, FrameReader, FrameWriter};
use crossbeam_channel::{bounded, Receiver, Sender};
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_wire::{
    Accept, Capabilities, ChunkAck, ChunkFlags, ChunkHeader, ChunkNack, Close, CloseReason,
    Compression, Direction, ErrorCode, ErrorFrame, Frame, JoinTable, Open, OpenOptions, Token,
};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Seed 001's frame size: 2560 x 2160 16-bit pixels.
pub const DEFAULT_RECORD_BYTES: u32 = 11_059_200;
/// Records queued per connection on each side.
const QUEUE_RECORDS: usize = 2;
/// Times one record may be sent again before the stream is given up.
pub const MAX_RESENDS: u32 = 3;
/// How long a sender waits for the receiver's word on a record it sent.
const ACK_TIMEOUT: Duration = Duration::from_secs(600);
/// The stream's records all belong to this file id on the wire.
const STREAM_FILE_ID: u64 = 1;

/// The receiver's word on one record, routed to the connection that sent it.
#[derive(Debug, Clone, Copy)]
enum Word {
    Ack(u64),
    Nack(u64),
}

/// What the sender's control reader routes: which connection sent the record at each
/// offset (records not yet acknowledged: at most one per buffer slot), and each
/// connection's queue of words.
struct Routes {
    by_offset: Mutex<HashMap<u64, usize>>,
    words: Vec<Sender<Word>>,
}

/// Stream settings shared by both ends.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Data connections.
    pub streams: u16,
    /// Bytes per record (at most the buffer slot size).
    pub record_bytes: u32,
    /// Compression per record.
    pub compress: CompressMode,
    /// Shared secret.
    pub token: Option<Token>,
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

/// A record on its way out: the slot holds `raw_len` bytes of the stream.
struct Record {
    offset: u64,
    last: bool,
    slot: Slot,
}

/// The sending end: a library API that pushes records from a producer, used by
/// `sluice stream send` with stdin as the producer.
pub struct StreamSender {
    runtime: Arc<Runtime>,
    queues: Vec<Sender<Record>>,
    threads: Vec<std::thread::JoinHandle<Result<Sent, EngineError>>>,
    control: FrameWriter,
    /// Where acknowledgements go (`None`: the receiver does not acknowledge records).
    routes: Option<Arc<Routes>>,
    /// What the control reader saw last: the receiver's `CloseAck`, `Error`, or its end.
    closing: Receiver<Result<(), EngineError>>,
    offset: u64,
    records: u64,
    started: std::time::Instant,
    record_bytes: u32,
}

impl std::fmt::Debug for StreamSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSender")
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
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
        let open = Open {
            direction: Direction::Push,
            path: String::new(),
            options: OpenOptions {
                streams: opts.streams,
                chunk_bytes: runtime.chunk_bytes(),
                resume: false,
                no_clobber: false,
                update: false,
                fsync: false,
                verify: false,
                recursive: false,
                compress: if opts.compress == CompressMode::None {
                    Compression::None
                } else {
                    Compression::Lz4
                },
                direct: false,
            },
        };
        let session::Opened {
            reader,
            writer,
            accept,
            data,
            capabilities,
        } = session::open_session(addr, opts.token.clone(), open)?;
        let acked = capabilities.contains(Capabilities::CHUNK_ACKS);
        if accept.chunk_bytes < opts.record_bytes {
            return Err(EngineError::Config(format!(
                "the receiver's slots hold {} bytes, less than a {}-byte record",
                accept.chunk_bytes, opts.record_bytes
            )));
        }
        let slots: u32 = runtime.channels().iter().map(|c| c.pool.slots()).sum();
        if slots < 3 * u32::from(accept.streams()) + 1 {
            return Err(EngineError::Config(format!(
                "{slots} buffer slots cannot keep {} streams busy: raise --buffer-mem to at least {} chunks",
                accept.streams(),
                3 * u32::from(accept.streams()) + 1
            )));
        }
        let compress_mode = opts
            .compress
            .toward(data.first().is_some_and(transport::peer_is_this_host));
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        // One `auto` controller for the stream: it judges the goodput of all connections.
        let auto = SharedAuto::new();
        if acked {
            auto.measure_on_ack();
        }
        auto.set_senders(u32::try_from(data.len()).unwrap_or(1));
        // Words never wait: a connection has at most one per record it holds unacknowledged.
        let (word_txs, word_rxs): (Vec<_>, Vec<_>) = (0..data.len())
            .map(|_| bounded::<Word>(slots as usize + 1))
            .unzip();
        let routes = acked.then(|| {
            Arc::new(Routes {
                by_offset: Mutex::new(HashMap::with_capacity(slots as usize)),
                words: word_txs,
            })
        });
        let closing = spawn_ack_router(reader, routes.clone(), Arc::clone(&auto))
            .map_err(|e| EngineError::io("starting the control reader", e))?;
        for ((i, s), words) in data.into_iter().enumerate().zip(word_rxs) {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let (tx, rx) = bounded::<Record>(QUEUE_RECORDS);
            queues.push(tx);
            let compress = compress_mode;
            let peer = addr.to_string();
            let compressor = Compressor::sharing(compress, &auto);
            let words = acked.then_some(words);
            threads.push(
                runtime
                    .spawn(Role::NetSend, i, move || {
                        SendLoop {
                            conn: ChunkSender::new(s),
                            compressor,
                            peer,
                            unacked: VecDeque::new(),
                            resent: 0,
                        }
                        .run(&rx, words.as_ref())
                    })
                    .map_err(|e| EngineError::io("starting a net-send thread", e))?,
            );
        }
        Ok(StreamSender {
            runtime,
            queues,
            threads,
            control: writer,
            routes,
            closing,
            offset: 0,
            records: 0,
            started: std::time::Instant::now(),
            record_bytes: opts.record_bytes,
        })
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
        let conn = usize::try_from(self.records % self.queues.len() as u64).unwrap_or(0);
        let (_, pool) = self
            .runtime
            .pool_for(Role::NetSend, u32::try_from(conn).unwrap_or(0));
        let mut slot = pool.acquire();
        let n = fill(&mut slot[..self.record_bytes as usize]).min(self.record_bytes as usize);
        slot.set_filled(n);
        let record = Record {
            offset: self.offset,
            last,
            slot,
        };
        if let Some(r) = &self.routes {
            lock(&r.by_offset).insert(self.offset, conn);
        }
        self.offset += n as u64;
        self.records += 1;
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
        let (mut bytes, mut wire, mut resent) = (0, 0, 0);
        let mut first_err = None;
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(sent)) => {
                    bytes += sent.bytes;
                    wire += sent.wire;
                    resent += sent.resent;
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err
                        .get_or_insert(EngineError::Aborted("a net-send thread panicked".into()));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
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
            bytes,
            wire_bytes: wire,
            records: self.records,
            records_resent: resent,
            seconds: self.started.elapsed().as_secs_f64(),
        })
    }
}

/// The control reader of a sending stream: routes the receiver's `ChunkAck` and
/// `ChunkNack` to the connection that sent the record (and acknowledgements to `auto`),
/// and reports how the control connection ended: `CloseAck`, the receiver's `Error`, or
/// a close or failure (which also drops every route, so no sender waits for ever).
fn spawn_ack_router(
    mut reader: FrameReader,
    routes: Option<Arc<Routes>>,
    auto: Arc<SharedAuto>,
) -> std::io::Result<Receiver<Result<(), EngineError>>> {
    let (tx, rx) = bounded(1);
    std::thread::Builder::new()
        .name("stream-acks".into())
        .spawn(move || {
            let end = loop {
                let frame = match reader.next("streaming") {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        break Err(EngineError::Disconnected {
                            peer: reader.peer().to_string(),
                            state: "streaming".into(),
                        })
                    }
                    Err(e) => break Err(e),
                };
                let at = std::time::Instant::now();
                let word = match frame {
                    Frame::ChunkAck(a) => {
                        auto.delivered((a.file_id, a.offset), at);
                        Word::Ack(a.offset)
                    }
                    Frame::ChunkNack(n) => {
                        auto.refused((n.file_id, n.offset));
                        Word::Nack(n.offset)
                    }
                    Frame::CloseAck(_) => break Ok(()),
                    Frame::Error(e) => {
                        break Err(EngineError::Remote {
                            code: e.code,
                            message: e.message,
                        })
                    }
                    other => {
                        tracing::debug!("stream sender ignores {:?}", other.frame_type());
                        continue;
                    }
                };
                let Some(r) = &routes else { continue };
                let (Word::Ack(offset) | Word::Nack(offset)) = word;
                let conn = {
                    let mut map = lock(&r.by_offset);
                    match word {
                        Word::Ack(_) => map.remove(&offset),
                        Word::Nack(_) => map.get(&offset).copied(),
                    }
                };
                match conn.and_then(|c| r.words.get(c)) {
                    Some(w) => {
                        let _ = w.send(word);
                    }
                    None => tracing::warn!(
                        "the receiver answered for byte {offset}, which is not in flight"
                    ),
                }
            };
            drop(routes);
            let _ = tx.send(end);
        })?;
    Ok(rx)
}

/// What one connection's sender sent: payload and wire bytes, records sent again.
#[derive(Debug, Clone, Copy)]
struct Sent {
    bytes: u64,
    wire: u64,
    resent: u64,
}

/// One connection's sender: compresses and sends its records, and keeps each until the
/// receiver acknowledges it, to send it again when asked.
struct SendLoop {
    conn: ChunkSender,
    compressor: Compressor,
    peer: String,
    /// Sent and not yet acknowledged, oldest first, with the times each was re-sent.
    unacked: VecDeque<(ChunkHeader, Slot, u32)>,
    /// Records sent again.
    resent: u64,
}

impl SendLoop {
    /// Sends what `records` brings until it closes and (`words`: where the receiver
    /// acknowledges) every record is acknowledged.
    fn run(
        mut self,
        records: &Receiver<Record>,
        words: Option<&Receiver<Word>>,
    ) -> Result<Sent, EngineError> {
        let (mut bytes, mut wire) = (0u64, 0u64);
        let mut open = true;
        let no_words = crossbeam_channel::never();
        let no_records = crossbeam_channel::never();
        let words_rx = words.unwrap_or(&no_words);
        loop {
            if !open && self.unacked.is_empty() {
                break;
            }
            let input = if open { records } else { &no_records };
            crossbeam_channel::select! {
                recv(input) -> rec => match rec {
                    Ok(rec) => {
                        let (raw, w) = self.send_record(rec, words.is_some())?;
                        bytes += raw;
                        wire += w;
                    }
                    Err(_) => open = false,
                },
                recv(words_rx) -> word => match word {
                    Ok(Word::Ack(offset)) => self.acknowledged(offset),
                    Ok(Word::Nack(offset)) => self.send_again(offset)?,
                    Err(_) => {
                        let at = self.unacked.front().map_or(0, |(h, _, _)| h.offset);
                        return Err(EngineError::Aborted(format!(
                            "the receiver at {} closed the stream before it acknowledged the record at byte {at}",
                            self.peer
                        )));
                    }
                },
                default(ACK_TIMEOUT) => {
                    // A producer may pause for as long as it likes; a receiver that holds
                    // records without a word for this long is gone.
                    let Some((h, _, _)) = self.unacked.front() else {
                        continue;
                    };
                    let at = h.offset;
                    return Err(EngineError::Aborted(format!(
                        "the receiver at {} acknowledged nothing for {} s (record at byte {at})",
                        self.peer,
                        ACK_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        let _ = self.conn.send_frame(&Close {
            reason: CloseReason::Done,
        });
        self.conn.shutdown();
        Ok(Sent {
            bytes,
            wire,
            resent: self.resent,
        })
    }

    /// Compresses and sends one record; keeps it when `keep` (until acknowledged).
    fn send_record(&mut self, mut rec: Record, keep: bool) -> Result<(u64, u64), EngineError> {
        let raw_len = rec.slot.filled();
        let mut header = ChunkHeader::plain(
            STREAM_FILE_ID,
            rec.offset,
            rec.slot.filled_bytes(),
            rec.last,
        );
        let out = self.compressor.compress(&mut rec.slot, raw_len);
        if out.compression != Compression::None {
            header = header.compressed(
                out.compression,
                u32::try_from(out.wire_len).unwrap_or(header.raw_len),
            );
            rec.slot.set_filled(out.wire_len);
        }
        let handing = std::time::Instant::now();
        self.transmit(&header, &mut rec.slot)?;
        self.compressor
            .record_sent((STREAM_FILE_ID, rec.offset), raw_len, handing.elapsed());
        if keep {
            self.unacked.push_back((header, rec.slot, 0));
        }
        Ok((raw_len as u64, u64::from(header.wire_len)))
    }

    fn transmit(&mut self, header: &ChunkHeader, slot: &mut Slot) -> Result<(), EngineError> {
        let n = slot.filled();
        let conn = &mut self.conn;
        crate::fault::send_maybe_corrupted(&mut slot[..n], |payload| {
            conn.send(header, &[], payload)
        })
        .map_err(|e| match e {
            EngineError::Io { .. } => EngineError::Aborted(format!(
                "the receiver at {} closed the stream at byte {}: {e}",
                self.peer, header.offset
            )),
            other => other,
        })
    }

    /// The receiver has the record at `offset`: its slot goes back to the pool.
    fn acknowledged(&mut self, offset: u64) {
        // Words come in the order this connection's records were verified: the oldest.
        match self.unacked.iter().position(|(h, _, _)| h.offset == offset) {
            Some(0) => {
                self.unacked.pop_front();
            }
            Some(i) => {
                self.unacked.remove(i);
            }
            None => tracing::warn!("an acknowledgement for byte {offset}, not in flight here"),
        }
    }

    /// The record at `offset` arrived damaged: send it and every later one again, in
    /// order (the receiver drops what this connection brings until it arrives again).
    fn send_again(&mut self, offset: u64) -> Result<(), EngineError> {
        let Some(from) = self.unacked.iter().position(|(h, _, _)| h.offset == offset) else {
            return Err(EngineError::Aborted(format!(
                "the receiver asked again for the record at byte {offset}, which this connection does not hold"
            )));
        };
        let tries = &mut self.unacked[from].2;
        *tries += 1;
        if *tries > MAX_RESENDS {
            return Err(EngineError::Aborted(format!(
                "the record at byte {offset} failed its checksum {} times; the stream stops before it",
                MAX_RESENDS + 1
            )));
        }
        tracing::warn!("the receiver asked again for the record at byte {offset}: sending it and what followed it again");
        self.resent += 1;
        let mut held = std::mem::take(&mut self.unacked);
        let result = held
            .iter_mut()
            .skip(from)
            .try_for_each(|(h, slot, _)| self.transmit(h, slot));
        self.unacked = held;
        result
    }
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

/// Receives one stream on `listener` and writes it, in order, to `output`.
///
/// # Errors
/// Handshake, integrity or output failures.
pub fn receive_to(
    listener: &TcpListener,
    token: Option<Token>,
    runtime: Arc<Runtime>,
    mut output: impl Write,
) -> Result<StreamSummary, EngineError> {
    let started = std::time::Instant::now();
    let (stream, _) = listener
        .accept()
        .map_err(|e| EngineError::io("accepting the sender", e))?;
    let _ = transport::tune(&stream, false);
    let (mut reader, mut writer) = transport::control_halves(stream)?;
    let hello = reader
        .next("waiting for Hello")?
        .ok_or_else(|| EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: "waiting for Hello".into(),
        })?;
    let est = session::server_handshake(hello, &mut reader, &mut writer, token)?;
    let acked = est.capabilities.contains(Capabilities::CHUNK_ACKS);
    let open = match reader.next("waiting for Open")? {
        Some(Frame::Open(o)) => o,
        _ => {
            return Err(EngineError::Disconnected {
                peer: reader.peer().to_string(),
                state: "waiting for Open".into(),
            })
        }
    };
    let slots: u32 = runtime.channels().iter().map(|c| c.pool.slots()).sum();
    // Each connection holds up to three records (two queued, one arriving) and the
    // writer one: fewer slots could stall the in-order writer.
    let streams = open.options.streams.clamp(1, 64).min(
        u16::try_from((slots.saturating_sub(1)) / 3)
            .unwrap_or(1)
            .max(1),
    );
    let accept = Accept {
        session_id: u64::from_le_bytes(session::random()?),
        session_secret: session::random()?,
        channels: 1,
        streams_per_channel: streams,
        chunk_bytes: runtime.chunk_bytes(),
    };
    let mut table = JoinTable::new(&accept, est.join_key(&accept.session_secret));
    session::send_accept(
        &mut writer,
        &est,
        &accept,
        sluice_wire::Addresses::default(),
    )?;
    let mut conns: Vec<Option<TcpStream>> = (0..streams).map(|_| None).collect();
    for _ in 0..streams {
        let (s, _) = listener
            .accept()
            .map_err(|e| EngineError::io("accepting a data connection", e))?;
        let mut w = FrameWriter::new(
            s.try_clone()
                .map_err(|e| EngineError::io("cloning a socket", e))?,
        );
        let mut r = FrameReader::new(s);
        r.set_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| EngineError::io("setting a timeout", e))?;
        let Some(Frame::Join(join)) = r.next("joining")? else {
            let _ = w.send(&ErrorFrame::new(ErrorCode::BadFrame, "expected Join"));
            return Err(EngineError::Handshake {
                peer: r.peer().to_string(),
                message: "expected Join".into(),
            });
        };
        let mut out = Vec::new();
        let joined = table.handle(&join, &mut out);
        w.send_raw(&out)?;
        let joined = joined.map_err(|e| EngineError::Handshake {
            peer: r.peer().to_string(),
            message: e.to_string(),
        })?;
        let s = r.into_inner()?;
        let _ = s.set_read_timeout(None);
        let _ = transport::tune(&s, true);
        conns[usize::from(joined.stream_index)] = Some(s);
    }
    reader
        .set_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))?;
    let _control_events =
        spawn_reader(reader).map_err(|e| EngineError::io("starting the control reader", e))?;
    // The net-recv threads acknowledge records on the control connection.
    let writer = Arc::new(Mutex::new(writer));
    let asked_again = Arc::new(AtomicU64::new(0));
    // One net-recv thread per connection, each with a queue of two records.
    let mut queues = Vec::new();
    let mut threads = Vec::new();
    for (i, s) in conns.into_iter().enumerate() {
        let s = s.ok_or_else(|| EngineError::Handshake {
            peer: "sender".into(),
            message: "a stream index joined twice".into(),
        })?;
        let i = u32::try_from(i).unwrap_or(0);
        let (_, pool) = runtime.pool_for(Role::NetRecv, i);
        let (tx, rx) = bounded::<(ChunkHeader, Slot)>(QUEUE_RECORDS);
        queues.push(rx);
        let max = runtime.chunk_bytes();
        let answer = acked.then(|| Arc::clone(&writer));
        let asked = Arc::clone(&asked_again);
        threads.push(
            runtime
                .spawn(Role::NetRecv, i, move || {
                    let conn = ChunkReceiver::new(s, max);
                    recv_loop(conn, &pool, &tx, answer.as_deref(), &asked)
                })
                .map_err(|e| EngineError::io("starting a net-recv thread", e))?,
        );
    }
    // The writer: record k comes from connection k mod N.
    let (mut bytes, mut wire, mut records) = (0u64, 0u64, 0u64);
    let mut expect = 0u64;
    let result = loop {
        let q = &queues[usize::try_from(records % queues.len() as u64).unwrap_or(0)];
        match q.recv_timeout(Duration::from_secs(600)) {
            Ok((h, slot)) => {
                if h.offset != expect {
                    break Err(EngineError::Aborted(format!(
                        "record at byte {} arrived where byte {expect} was due",
                        h.offset
                    )));
                }
                if let Err(e) = output.write_all(slot.filled_bytes()) {
                    break Err(EngineError::io("writing the stream's output", e));
                }
                bytes += u64::from(h.raw_len);
                wire += u64::from(h.wire_len);
                expect += u64::from(h.raw_len);
                records += 1;
                if h.is_last() {
                    break Ok(());
                }
            }
            Err(_) if records == 0 && bytes == 0 => {
                // Every connection closed before any record: an empty stream, unless a
                // thread failed.
                queues.clear();
                for t in threads.drain(..) {
                    if let Ok(Err(e)) = t.join() {
                        return Err(e);
                    }
                }
                break Ok(());
            }
            Err(_) => {
                // The connection's thread ended: its error says why.
                queues.clear();
                let mut err = EngineError::Disconnected {
                    peer: "sender".into(),
                    state: format!("receiving the stream at byte {expect}"),
                };
                for t in threads.drain(..) {
                    if let Ok(Err(e)) = t.join() {
                        err = e;
                        break;
                    }
                }
                return Err(err);
            }
        }
    };
    output
        .flush()
        .map_err(|e| EngineError::io("writing the stream's output", e))?;
    drop(queues);
    result?;
    let _ = lock(&writer).send(&Frame::CloseAck(sluice_wire::CloseAck));
    Ok(StreamSummary {
        bytes,
        wire_bytes: wire,
        records,
        records_resent: asked_again.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Receives one connection's records: each is decompressed and verified, acknowledged
/// (`answer`: the control connection, where the sender wants acknowledgements) and
/// queued for the writer. A damaged record is asked for again and what this connection
/// brings until it comes back is dropped (the sender sends it and everything after it
/// again); without `answer` it ends the stream.
fn recv_loop(
    mut conn: ChunkReceiver,
    pool: &Arc<sluice_buffers::BufferPool>,
    tx: &Sender<(ChunkHeader, Slot)>,
    answer: Option<&Mutex<FrameWriter>>,
    asked_again: &AtomicU64,
) -> Result<(), EngineError> {
    let mut decompressor = Decompressor::new();
    // The record asked for again, and how many times.
    let mut awaiting: Option<(u64, u32)> = None;
    loop {
        let header = match conn.next_event()? {
            DataEvent::Chunk(h) => h,
            DataEvent::Frame(_) | DataEvent::End => {
                return match awaiting {
                    None => Ok(()),
                    Some((offset, _)) => Err(EngineError::Aborted(format!(
                        "the sender closed the connection before it sent the record at byte {offset} again"
                    ))),
                };
            }
        };
        if header.flags.contains(ChunkFlags::PACKED) {
            return Err(EngineError::Aborted("a packed chunk on a stream".into()));
        }
        let mut slot = pool.acquire();
        let wire = header.wire_len as usize;
        conn.payload(&mut slot[..wire])?;
        slot.set_filled(wire);
        if awaiting.is_some_and(|(offset, _)| offset != header.offset) {
            continue; // sent before the sender heard of the damage: it comes again
        }
        if let Err(why) = check_record(&mut decompressor, &header, &mut slot) {
            let Some(answer) = answer else {
                return Err(EngineError::Aborted(format!(
                    "the record at byte {} {why}; the stream stops before it",
                    header.offset
                )));
            };
            let tries = awaiting.map_or(1, |(_, t)| t + 1);
            if tries > MAX_RESENDS {
                return Err(EngineError::Aborted(format!(
                    "the record at byte {} {why}, {tries} times; the stream stops before it",
                    header.offset
                )));
            }
            tracing::warn!(
                "the record at byte {} {why}: asking the sender for it again",
                header.offset
            );
            let reason = if header.compression() == Compression::None {
                ErrorCode::ChecksumMismatch
            } else {
                ErrorCode::DecompressFailed
            };
            lock(answer).send(&Frame::ChunkNack(ChunkNack {
                file_id: header.file_id,
                offset: header.offset,
                reason,
            }))?;
            asked_again.fetch_add(1, Ordering::Relaxed);
            awaiting = Some((header.offset, tries));
            continue;
        }
        awaiting = None;
        if let Some(answer) = answer {
            lock(answer).send(&Frame::ChunkAck(ChunkAck {
                file_id: header.file_id,
                offset: header.offset,
            }))?;
        }
        if tx.send((header, slot)).is_err() {
            return Ok(());
        }
    }
}

/// Decompresses a record in its slot and checks its checksum; says what is wrong.
fn check_record(
    decompressor: &mut Decompressor,
    header: &ChunkHeader,
    slot: &mut Slot,
) -> Result<(), String> {
    let compression = header.compression();
    if compression != Compression::None {
        let (wire, raw) = (header.wire_len as usize, header.raw_len as usize);
        decompressor
            .decompress(compression, slot, wire, raw)
            .map_err(|e| format!("does not decompress ({e})"))?;
        slot.set_filled(raw);
    }
    if header.verify(slot.filled_bytes()) {
        Ok(())
    } else {
        Err("failed its checksum".into())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
