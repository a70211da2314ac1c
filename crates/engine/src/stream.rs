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
//! A record that fails its checksum ends the stream with an error (a pipe cannot be
//! re-read); nothing after the last good record is written.

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
    Accept, ChunkFlags, ChunkHeader, Close, CloseReason, Compression, Direction, ErrorCode,
    ErrorFrame, Frame, JoinTable, Open, OpenOptions, Token,
};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Seed 001's frame size: 2560 x 2160 16-bit pixels.
pub const DEFAULT_RECORD_BYTES: u32 = 11_059_200;
/// Records queued per connection on each side.
const QUEUE_RECORDS: usize = 2;

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
    threads: Vec<std::thread::JoinHandle<Result<(u64, u64), EngineError>>>,
    control: FrameWriter,
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
        } = session::open_session(addr, opts.token.clone(), open)?;
        drop(reader);
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
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        // One `auto` controller for the stream: it judges the goodput of all connections.
        let auto = SharedAuto::new();
        for (i, s) in data.into_iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let (tx, rx) = bounded::<Record>(QUEUE_RECORDS);
            queues.push(tx);
            let compress = opts.compress;
            let peer = addr.to_string();
            let compressor = Compressor::sharing(compress, &auto);
            threads.push(
                runtime
                    .spawn(Role::NetSend, i, move || {
                        send_loop(ChunkSender::new(s), rx, compressor, &peer)
                    })
                    .map_err(|e| EngineError::io("starting a net-send thread", e))?,
            );
        }
        Ok(StreamSender {
            runtime,
            queues,
            threads,
            control: writer,
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

    /// Ends the stream (after a record marked `last`) and waits for the receiver.
    ///
    /// # Errors
    /// A net-send thread failed, or the receiver reported an error.
    pub fn finish(mut self) -> Result<StreamSummary, EngineError> {
        self.queues.clear();
        let (mut bytes, mut wire) = (0, 0);
        let mut first_err = None;
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok((b, w))) => {
                    bytes += b;
                    wire += w;
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
        Ok(StreamSummary {
            bytes,
            wire_bytes: wire,
            records: self.records,
            seconds: self.started.elapsed().as_secs_f64(),
        })
    }
}

fn send_loop(
    mut conn: ChunkSender,
    rx: Receiver<Record>,
    mut compressor: Compressor,
    peer: &str,
) -> Result<(u64, u64), EngineError> {
    let (mut bytes, mut wire) = (0u64, 0u64);
    while let Ok(mut rec) = rx.recv() {
        let raw_len = rec.slot.filled();
        let mut header = ChunkHeader::plain(1, rec.offset, rec.slot.filled_bytes(), rec.last);
        let out = compressor.compress(&mut rec.slot, raw_len);
        if out.compression != Compression::None {
            header = header.compressed(
                out.compression,
                u32::try_from(out.wire_len).unwrap_or(header.raw_len),
            );
            rec.slot.set_filled(out.wire_len);
        }
        conn.send(&header, &[], rec.slot.filled_bytes())
            .map_err(|e| match e {
                EngineError::Io { .. } => EngineError::Aborted(format!(
                    "the receiver at {peer} closed the stream at byte {}: {e}",
                    rec.offset
                )),
                other => other,
            })?;
        compressor.record_sent(raw_len);
        bytes += raw_len as u64;
        wire += u64::from(header.wire_len);
    }
    let _ = conn.send_frame(&Close {
        reason: CloseReason::Done,
    });
    conn.shutdown();
    Ok((bytes, wire))
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
        threads.push(
            runtime
                .spawn(Role::NetRecv, i, move || {
                    recv_loop(ChunkReceiver::new(s, max), &pool, &tx)
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
    let _ = writer.send(&Frame::CloseAck(sluice_wire::CloseAck));
    Ok(StreamSummary {
        bytes,
        wire_bytes: wire,
        records,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn recv_loop(
    mut conn: ChunkReceiver,
    pool: &Arc<sluice_buffers::BufferPool>,
    tx: &Sender<(ChunkHeader, Slot)>,
) -> Result<(), EngineError> {
    let mut decompressor = Decompressor::new();
    loop {
        let header = match conn.next_event()? {
            DataEvent::Chunk(h) => h,
            DataEvent::Frame(_) | DataEvent::End => return Ok(()),
        };
        if header.flags.contains(ChunkFlags::PACKED) {
            return Err(EngineError::Aborted("a packed chunk on a stream".into()));
        }
        let mut slot = pool.acquire();
        let wire = header.wire_len as usize;
        conn.payload(&mut slot[..wire])?;
        slot.set_filled(wire);
        let compression = header.compression();
        if compression != Compression::None {
            let raw = header.raw_len as usize;
            decompressor
                .decompress(compression, &mut slot, wire, raw)
                .map_err(|e| {
                    EngineError::Aborted(format!(
                        "the record at byte {} does not decompress: {e}",
                        header.offset
                    ))
                })?;
            slot.set_filled(raw);
        }
        if !header.verify(slot.filled_bytes()) {
            return Err(EngineError::Aborted(format!(
                "the record at byte {} failed its checksum; the stream stops before it",
                header.offset
            )));
        }
        if tx.send((header, slot)).is_err() {
            return Ok(());
        }
    }
}
