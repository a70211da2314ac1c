//! The receiving end: one net-recv thread per data connection checks its records in
//! order (asking again for a damaged one), and the writer takes record `k` from
//! connection `k mod N` and writes it out.

use super::accept::{accept_session, Accepted};
use super::lend::{LentSlot, Loans};
use super::{lock, StreamSummary, QUEUE_RECORDS};
use crate::codec::Decompressor;
use crate::control::spawn_reader;
use crate::error::EngineError;
use crate::net::tls::{Link, ServerTls};
use crate::runtime::Runtime;
use crate::transport::{ChunkReceiver, DataEvent, FrameWriter};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use sluice_buffers::{BufferPool, Slot};
use sluice_placement::Role;
use sluice_session::stream::{
    check_record, nack_reason, Arrival, RecordOrder, RecvConn, StreamError, Verdict,
};
use sluice_wire::{ChunkAck, ChunkHeader, ChunkNack, Frame, Token};
use std::io::Write;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writer waits for the next record.
const RECORD_TIMEOUT: Duration = Duration::from_secs(600);

type Queue = Receiver<(ChunkHeader, Slot)>;
type Thread = JoinHandle<Result<(), EngineError>>;

/// Receives one stream on `listener` and writes it, in order, to `output`; `tls` is
/// the receiver's identity and clear-text policy.
///
/// # Errors
/// Handshake, integrity or output failures.
pub fn receive_to(
    listener: &TcpListener,
    token: Option<Token>,
    tls: &ServerTls,
    runtime: Arc<Runtime>,
    mut output: impl Write,
) -> Result<StreamSummary, EngineError> {
    let mut receiver = StreamReceiver::accept(listener, token, tls, runtime)?;
    let result = write_records(&mut receiver, &mut output);
    let flushed = output
        .flush()
        .map_err(|e| EngineError::io("writing the stream's output", e));
    result?;
    flushed?;
    Ok(receiver.finish())
}

/// Writes every record `receiver` yields to `output`, in order.
fn write_records(
    receiver: &mut StreamReceiver,
    output: &mut impl Write,
) -> Result<(), EngineError> {
    while let Some(record) = receiver.next_record()? {
        output
            .write_all(record.filled_bytes())
            .map_err(|e| EngineError::io("writing the stream's output", e))?;
    }
    Ok(())
}

/// What [`StreamReceiver::poll_record`] found.
#[derive(Debug)]
pub enum Polled {
    /// The next record, in stream order.
    Record(Slot),
    /// The stream has ended (after its last record, or empty).
    End,
    /// The record due has not arrived within the wait.
    NotYet,
}

/// The receiving end as a library API: records in order, one at a time, each in its
/// NUMA-local slot until the caller drops it (`sluice stream recv` writes them to its
/// output; the Python package lends them to the caller as arrays, or copies them into
/// the caller's arrays).
pub struct StreamReceiver {
    queues: Vec<Queue>,
    threads: Vec<Thread>,
    /// Loans of records' slots to the caller, within each pool's spare slots.
    loans: Loans,
    order: RecordOrder,
    writer: Arc<Mutex<FrameWriter>>,
    asked_again: Arc<AtomicU64>,
    started: std::time::Instant,
    /// The record marked last has been taken, or the connections ended.
    ended: bool,
}

impl std::fmt::Debug for StreamReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReceiver")
            .field("records", &self.order.records())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl StreamReceiver {
    /// Accepts one sender on `listener` (`tls`: the receiver's identity and clear-text
    /// policy; `token`: the secret it must prove it knows) and starts one pinned
    /// net-recv thread per data connection.
    ///
    /// # Errors
    /// Handshake or join failures.
    pub fn accept(
        listener: &TcpListener,
        token: Option<Token>,
        tls: &ServerTls,
        runtime: Arc<Runtime>,
    ) -> Result<StreamReceiver, EngineError> {
        let started = std::time::Instant::now();
        let Accepted {
            reader,
            writer,
            acked,
            data,
        } = accept_session(listener, token, tls, &runtime)?;
        let _control_events =
            spawn_reader(reader).map_err(|e| EngineError::io("starting the control reader", e))?;
        // The net-recv threads acknowledge records on the control connection.
        let writer = Arc::new(Mutex::new(writer));
        let asked_again = Arc::new(AtomicU64::new(0));
        let answer = acked.then(|| Arc::clone(&writer));
        let Receivers {
            queues,
            threads,
            pools,
        } = spawn_receivers(&runtime, data, answer, &asked_again)?;
        Ok(StreamReceiver {
            order: RecordOrder::new(queues.len()),
            queues,
            threads,
            loans: Loans::new(&pools),
            writer,
            asked_again,
            started,
            ended: false,
        })
    }

    /// The next record, in stream order (decompressed and verified, its bytes the
    /// slot's `filled_bytes`; dropping the slot gives it back to its pool): `Ok(None)`
    /// once the record marked last has been taken, or when the sender closed an empty
    /// stream. Blocks until the record is due.
    ///
    /// # Errors
    /// A connection failed or closed in the middle of the stream, or a record broke the
    /// stream's order.
    pub fn next_record(&mut self) -> Result<Option<Slot>, EngineError> {
        let started = std::time::Instant::now();
        loop {
            let left = RECORD_TIMEOUT.saturating_sub(started.elapsed());
            match self.poll_record(left)? {
                Polled::Record(slot) => return Ok(Some(slot)),
                Polled::End => return Ok(None),
                Polled::NotYet if left.is_zero() => {
                    self.ended = true;
                    return connections_ended(&mut self.queues, &mut self.threads, &self.order)
                        .map(|()| None);
                }
                Polled::NotYet => {}
            }
        }
    }

    /// [`StreamReceiver::next_record`] waiting at most `wait` (a caller that must
    /// look up now and then, e.g. for a Ctrl-C, waits in slices).
    ///
    /// # Errors
    /// As [`StreamReceiver::next_record`].
    pub fn poll_record(&mut self, wait: Duration) -> Result<Polled, EngineError> {
        if self.ended {
            return Ok(Polled::End);
        }
        let q = &self.queues[self.order.next_connection()];
        let (h, slot) = match q.recv_timeout(wait) {
            Ok(record) => record,
            Err(RecvTimeoutError::Timeout) => return Ok(Polled::NotYet),
            Err(RecvTimeoutError::Disconnected) => {
                self.ended = true;
                return connections_ended(&mut self.queues, &mut self.threads, &self.order)
                    .map(|()| Polled::End);
            }
        };
        let last = self
            .order
            .arrived(&h)
            .map_err(|e| EngineError::Aborted(e.to_string()))?;
        self.ended = last;
        Ok(Polled::Record(slot))
    }

    /// Records taken so far.
    pub fn records(&self) -> u64 {
        self.order.records()
    }

    /// `slot`, a record this receiver yielded, lent to the caller for as long as it
    /// likes, where its pool has a spare slot (beyond what every connection drawing from
    /// it needs to keep the stream going, [`spare_slots`](super::spare_slots), counted
    /// over the loans not yet dropped); else `slot` back, to copy out and drop. The
    /// stream never waits for a [`LentSlot`]: dropping one, on any thread, only makes
    /// room for the next loan.
    ///
    /// # Errors
    /// `slot` itself (`Err`), when lending it could stall the stream.
    pub fn lend(&self, slot: Slot) -> Result<LentSlot, Slot> {
        self.loans.lend(slot)
    }

    /// The loans ([`StreamReceiver::lend`]): how many slots are lent, how many may be
    /// (clone it to count on after the stream ends).
    pub fn loans(&self) -> &Loans {
        &self.loans
    }

    /// Ends the stream: tells the sender every record is out of the receiver's hands
    /// (its `CloseAck`: call it only once what was taken is safely stored) and returns
    /// the totals.
    pub fn finish(mut self) -> StreamSummary {
        self.queues.clear();
        let _ = lock(&self.writer).send(&Frame::CloseAck(sluice_wire::CloseAck));
        StreamSummary {
            bytes: self.order.bytes(),
            wire_bytes: self.order.wire_bytes(),
            records: self.order.records(),
            records_resent: self.asked_again.load(Ordering::Relaxed),
            seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

/// The net-recv threads, by connection.
struct Receivers {
    /// Each one's queue of records to the writer.
    queues: Vec<Queue>,
    threads: Vec<Thread>,
    /// The pool each one draws its slots from.
    pools: Vec<Arc<BufferPool>>,
}

/// One net-recv thread per data connection, pinned by the plan, each with a queue of
/// two records to the writer.
fn spawn_receivers(
    runtime: &Arc<Runtime>,
    data: Vec<Link>,
    answer: Option<Arc<Mutex<FrameWriter>>>,
    asked_again: &Arc<AtomicU64>,
) -> Result<Receivers, EngineError> {
    let mut queues = Vec::with_capacity(data.len());
    let mut threads = Vec::with_capacity(data.len());
    let mut pools = Vec::with_capacity(data.len());
    for (i, s) in data.into_iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(0);
        let (_, pool) = runtime.pool_for(Role::NetRecv, i);
        pools.push(Arc::clone(&pool));
        let (tx, rx) = bounded::<(ChunkHeader, Slot)>(QUEUE_RECORDS);
        queues.push(rx);
        let max = runtime.chunk_bytes();
        let answer = answer.clone();
        let asked = Arc::clone(asked_again);
        let t = runtime
            .spawn(Role::NetRecv, i, move || {
                let conn = ChunkReceiver::new(s, max);
                recv_loop(conn, &pool, &tx, answer.as_deref(), &asked)
            })
            .map_err(|e| EngineError::io("starting a net-recv thread", e))?;
        threads.push(t);
    }
    Ok(Receivers {
        queues,
        threads,
        pools,
    })
}

/// A connection's thread ended before the record due: its error says why. Every
/// connection closed before any record is an empty stream (no error), unless a thread
/// failed.
fn connections_ended(
    queues: &mut Vec<Queue>,
    threads: &mut Vec<Thread>,
    order: &RecordOrder,
) -> Result<(), EngineError> {
    queues.clear();
    let failed = threads
        .drain(..)
        .find_map(|t| t.join().ok().and_then(Result::err));
    match failed {
        Some(e) => Err(e),
        None if order.records() == 0 => Ok(()),
        None => Err(EngineError::Disconnected {
            peer: "sender".into(),
            state: format!("receiving the stream at byte {}", order.bytes()),
        }),
    }
}

/// Receives one connection's records: each is decompressed and verified, acknowledged
/// (`answer`: the control connection, where the sender wants acknowledgements) and
/// queued for the writer. A damaged record is asked for again and what this connection
/// brings until it comes back is dropped (the sender sends it and everything after it
/// again); without `answer` it ends the stream.
fn recv_loop(
    mut conn: ChunkReceiver,
    pool: &Arc<BufferPool>,
    tx: &Sender<(ChunkHeader, Slot)>,
    answer: Option<&Mutex<FrameWriter>>,
    asked_again: &AtomicU64,
) -> Result<(), EngineError> {
    let aborted = |e: StreamError| EngineError::Aborted(e.to_string());
    let mut decompressor = Decompressor::new();
    let mut state = RecvConn::new(answer.is_some());
    loop {
        let header = match conn.next_event()? {
            DataEvent::Chunk(h) => h,
            DataEvent::Frame(_) | DataEvent::End => return state.ended().map_err(aborted),
        };
        let arrival = state.arrives(&header).map_err(aborted)?;
        let mut slot = pool.acquire();
        let (wire, raw) = (header.wire_len as usize, header.raw_len as usize);
        conn.payload(&mut slot[..wire])?;
        slot.set_filled(wire);
        if arrival == Arrival::Drop {
            continue; // sent before the sender heard of the damage: it comes again
        }
        let shuffle = header.shuffle();
        let checked = check_record(&header, &mut slot, |c, buf| {
            decompressor.decompress(c, shuffle, buf, wire, raw)
        });
        let verdict = state.checked(header.offset, checked.map(|len| slot.set_filled(len)));
        match verdict {
            Verdict::Deliver => {
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
            Verdict::AskAgain { damage, .. } => {
                tracing::warn!(
                    "the record at byte {} {damage}: asking the sender for it again",
                    header.offset
                );
                let nack = ChunkNack {
                    file_id: header.file_id,
                    offset: header.offset,
                    reason: nack_reason(&header),
                };
                // `AskAgain` comes only where the sender acknowledges, so `answer` exists.
                if let Some(answer) = answer {
                    lock(answer).send(&Frame::ChunkNack(nack))?;
                }
                asked_again.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Fail(e) => return Err(aborted(e)),
        }
    }
}
