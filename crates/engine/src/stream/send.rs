//! The sending end's threads: one send loop per data connection (compress, send, keep
//! until acknowledged, send again on the receiver's word) and the control reader that
//! routes those words to the connection that sent the record.

use super::{lock, Record, Sent, ACK_TIMEOUT, QUEUE_RECORDS, STREAM_FILE_ID};
use crate::codec::{CodecPlan, Compressor, SharedAuto};
use crate::error::EngineError;
use crate::net::tls::Link;
use crate::runtime::Runtime;
use crate::transport::{ChunkSender, FrameReader};
use crossbeam_channel::{bounded, Receiver, Sender};
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_session::stream::{AckRoutes, SendWindow, StreamError, Word};
use sluice_wire::{ChunkHeader, Close, CloseReason, Frame};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// What [`start`] needs.
pub(super) struct Start<'a> {
    pub runtime: &'a Arc<Runtime>,
    /// The receiver, as the user named it (for messages).
    pub peer: &'a str,
    /// The joined data connections, in stream order.
    pub data: Vec<Link>,
    /// The control connection's reading half.
    pub reader: FrameReader,
    pub codec: CodecPlan,
    /// Whether the receiver acknowledges records.
    pub acked: bool,
    /// Buffer slots of the runtime: records in flight, at most.
    pub slots: usize,
}

/// The running sender: each connection's queue of records and thread, the routes of
/// records in flight, and how the control connection ended.
pub(super) struct Started {
    pub queues: Vec<Sender<Record>>,
    pub threads: Vec<JoinHandle<Result<Sent, EngineError>>>,
    pub routes: Option<Arc<Mutex<AckRoutes>>>,
    pub closing: Receiver<Result<(), EngineError>>,
}

/// Starts the control reader and one pinned net-send thread per data connection.
pub(super) fn start(s: Start<'_>) -> Result<Started, EngineError> {
    // One `auto` controller for the stream: it judges the goodput of all connections.
    let auto = s.codec.auto(s.acked);
    // Words never wait: a connection has at most one per record it holds unacknowledged.
    let (word_txs, word_rxs): (Vec<_>, Vec<_>) = (0..s.data.len())
        .map(|_| bounded::<Word>(s.slots + 1))
        .unzip();
    let routes = s
        .acked
        .then(|| Arc::new(Mutex::new(AckRoutes::new(s.slots, s.data.len().max(1)))));
    let closing = spawn_ack_router(s.reader, routes.clone(), word_txs, Arc::clone(&auto))
        .map_err(|e| EngineError::io("starting the control reader", e))?;
    let mut queues = Vec::with_capacity(s.data.len());
    let mut threads = Vec::with_capacity(s.data.len());
    for ((i, stream), words) in s.data.into_iter().enumerate().zip(word_rxs) {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (tx, rx) = bounded::<Record>(QUEUE_RECORDS);
        queues.push(tx);
        let send = SendLoop {
            conn: ChunkSender::new(stream),
            compressor: s.codec.compressor(&auto),
            peer: s.peer.to_string(),
            window: s.acked.then(|| SendWindow::new(s.slots)),
            sent: Sent::default(),
        };
        let words = s.acked.then_some(words);
        let t = s
            .runtime
            .spawn(Role::NetSend, i, move || send.run(&rx, words.as_ref()))
            .map_err(|e| EngineError::io("starting a net-send thread", e))?;
        threads.push(t);
    }
    Ok(Started {
        queues,
        threads,
        routes,
        closing,
    })
}

/// The control reader of a sending stream: routes the receiver's `ChunkAck` and
/// `ChunkNack` to the connection that sent the record (and acknowledgements to `auto`),
/// and reports how the control connection ended: `CloseAck`, the receiver's `Error`, or
/// a close or failure (which also drops every connection's word queue, so no sender
/// waits for ever).
fn spawn_ack_router(
    mut reader: FrameReader,
    routes: Option<Arc<Mutex<AckRoutes>>>,
    words: Vec<Sender<Word>>,
    auto: Arc<SharedAuto>,
) -> std::io::Result<Receiver<Result<(), EngineError>>> {
    let (tx, rx) = bounded(1);
    std::thread::Builder::new()
        .name("stream-acks".into())
        .spawn(move || {
            let end = route_words(&mut reader, routes.as_deref(), &words, &auto);
            drop(words);
            let _ = tx.send(end);
        })?;
    Ok(rx)
}

/// Reads the control connection until it ends; see [`spawn_ack_router`].
fn route_words(
    reader: &mut FrameReader,
    routes: Option<&Mutex<AckRoutes>>,
    words: &[Sender<Word>],
    auto: &SharedAuto,
) -> Result<(), EngineError> {
    loop {
        let Some(frame) = reader.next("streaming")? else {
            return Err(EngineError::Disconnected {
                peer: reader.peer().to_string(),
                state: "streaming".into(),
            });
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
            Frame::CloseAck(_) => return Ok(()),
            Frame::Error(e) => {
                return Err(EngineError::Remote {
                    code: e.code,
                    message: e.message,
                })
            }
            other => {
                tracing::debug!("stream sender ignores {:?}", other.frame_type());
                continue;
            }
        };
        let Some(routes) = routes else { continue };
        let conn = lock(routes).heard(word);
        match conn.and_then(|c| words.get(c)) {
            Some(w) => {
                let _ = w.send(word);
            }
            None => tracing::warn!(
                "the receiver answered for byte {}, which is not in flight",
                word.offset()
            ),
        }
    }
}

/// One connection's sender: compresses and sends its records, and keeps each until the
/// receiver acknowledges it (`window`), to send it again when asked.
struct SendLoop {
    conn: ChunkSender,
    compressor: Compressor,
    peer: String,
    /// Sent and not yet acknowledged (`None`: the receiver does not acknowledge).
    window: Option<SendWindow<(ChunkHeader, Slot)>>,
    sent: Sent,
}

impl SendLoop {
    /// Sends what `records` brings until it closes and (`words`: where the receiver
    /// acknowledges) every record is acknowledged.
    fn run(
        mut self,
        records: &Receiver<Record>,
        words: Option<&Receiver<Word>>,
    ) -> Result<Sent, EngineError> {
        let mut open = true;
        // The receiver may close the stream (`CloseAck`, which ends the words) as soon
        // as it has the last record, while this connection, holding nothing, still
        // waits for the producer to close its queue: that is no error, but a record
        // after it would never be acknowledged.
        let mut words_ended = false;
        let no_words = crossbeam_channel::never();
        let no_records = crossbeam_channel::never();
        while open || self.window.as_ref().is_some_and(|w| !w.is_empty()) {
            let input = if open { records } else { &no_records };
            let words_rx = match words {
                Some(w) if !words_ended => w,
                _ => &no_words,
            };
            crossbeam_channel::select! {
                recv(input) -> rec => match rec {
                    Ok(rec) if words_ended => {
                        return Err(EngineError::Aborted(format!(
                            "the receiver at {} closed the stream before the record at byte {} was sent",
                            self.peer, rec.offset
                        )))
                    }
                    Ok(rec) => self.send_record(rec)?,
                    Err(_) => open = false,
                },
                recv(words_rx) -> word => match word {
                    Ok(Word::Ack(offset)) => self.acknowledged(offset),
                    Ok(Word::Nack(offset)) => self.send_again(offset)?,
                    Err(_) if self.oldest().is_none() => words_ended = true,
                    Err(_) => return Err(self.closed_early()),
                },
                default(ACK_TIMEOUT) => {
                    // A producer may pause for as long as it likes; a receiver that holds
                    // records without a word for this long is gone.
                    if let Some(at) = self.oldest() {
                        return Err(self.silent(at));
                    }
                }
            }
        }
        let _ = self.conn.send_frame(&Close {
            reason: CloseReason::Done,
        });
        self.conn.shutdown();
        self.sent.resent = self.window.as_ref().map_or(0, SendWindow::resent);
        Ok(self.sent)
    }

    /// The oldest record the receiver owes a word on.
    fn oldest(&self) -> Option<u64> {
        self.window.as_ref().and_then(SendWindow::oldest)
    }

    /// The receiver closed the control connection with records unanswered.
    fn closed_early(&self) -> EngineError {
        EngineError::Aborted(format!(
            "the receiver at {} closed the stream before it acknowledged the record at byte {}",
            self.peer,
            self.oldest().unwrap_or(0)
        ))
    }

    /// The receiver said nothing for [`ACK_TIMEOUT`] on the record at `at`.
    fn silent(&self, at: u64) -> EngineError {
        EngineError::Aborted(format!(
            "the receiver at {} acknowledged nothing for {} s (record at byte {at})",
            self.peer,
            ACK_TIMEOUT.as_secs()
        ))
    }

    /// Compresses and sends one record; keeps it until acknowledged (where the
    /// receiver acknowledges).
    fn send_record(&mut self, mut rec: Record) -> Result<(), EngineError> {
        let raw_len = rec.slot.filled();
        // Framed (checksummed) before the slot's bytes are compressed in place.
        let plain = ChunkHeader::plain(
            STREAM_FILE_ID,
            rec.offset,
            rec.slot.filled_bytes(),
            rec.last,
        );
        let out = self
            .compressor
            .compress_elements(&mut rec.slot, raw_len, rec.shuffle);
        let header = out.describe(plain);
        rec.slot.set_filled(out.wire_len);
        let handing = std::time::Instant::now();
        transmit(&mut self.conn, &self.peer, &header, &mut rec.slot)?;
        self.compressor
            .record_sent((STREAM_FILE_ID, rec.offset), raw_len, handing.elapsed());
        if let Some(w) = &mut self.window {
            w.hold(rec.offset, (header, rec.slot));
        }
        self.sent.bytes += raw_len as u64;
        self.sent.wire += u64::from(header.wire_len);
        Ok(())
    }

    /// The receiver has the record at `offset`: its slot goes back to the pool.
    fn acknowledged(&mut self, offset: u64) {
        let released = self.window.as_mut().and_then(|w| w.acknowledged(offset));
        if released.is_none() {
            tracing::warn!("an acknowledgement for byte {offset}, not in flight here");
        }
    }

    /// The record at `offset` arrived damaged: send it and every later one again, in
    /// order (the receiver drops what this connection brings until it arrives again).
    fn send_again(&mut self, offset: u64) -> Result<(), EngineError> {
        let aborted = |e: StreamError| EngineError::Aborted(e.to_string());
        let window = self
            .window
            .as_mut()
            .ok_or(StreamError::NotHeld { offset })
            .map_err(aborted)?;
        let again = window.nacked(offset).map_err(aborted)?;
        tracing::warn!("the receiver asked again for the record at byte {offset}: sending it and what followed it again");
        for (header, slot) in again {
            transmit(&mut self.conn, &self.peer, header, slot)?;
        }
        Ok(())
    }
}

/// Sends one record on `conn` (corrupted on the way where the fault injection says).
fn transmit(
    conn: &mut ChunkSender,
    peer: &str,
    header: &ChunkHeader,
    slot: &mut Slot,
) -> Result<(), EngineError> {
    let n = slot.filled();
    crate::fault::send_maybe_corrupted(&mut slot[..n], |payload| conn.send(header, &[], payload))
        .map_err(|e| match e {
            EngineError::Io { .. } => EngineError::Aborted(format!(
                "the receiver at {peer} closed the stream at byte {}: {e}",
                header.offset
            )),
            other => other,
        })
}
