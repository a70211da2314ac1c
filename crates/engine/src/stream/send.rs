//! The sending end's threads: one send loop per data connection (compress, send, keep
//! until acknowledged, send again on the receiver's word) and the control reader that
//! routes those words to the connection that sent the record. A record with pinned
//! bytes is sent from the slot (its head) and the caller's memory, never compressed.

use super::{lock, PinnedRange, Record, Sent, ACK_TIMEOUT, QUEUE_RECORDS, STREAM_FILE_ID};
use crate::codec::{CodecPlan, Compressor, SharedAuto};
use crate::error::EngineError;
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
    /// The data connections' senders, in stream order.
    pub data: Vec<ChunkSender>,
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
    for ((i, conn), words) in s.data.into_iter().enumerate().zip(word_rxs) {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (tx, rx) = bounded::<Record>(QUEUE_RECORDS);
        queues.push(tx);
        let send = SendLoop {
            conn,
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

/// A record on the wire, kept until acknowledged: its header, its slot (the payload,
/// or the head of a record with pinned bytes) and its pinned bytes.
struct Outgoing {
    header: ChunkHeader,
    slot: Slot,
    pinned: Option<PinnedRange>,
}

/// One connection's sender: compresses and sends its records, and keeps each until the
/// receiver acknowledges it (`window`), to send it again when asked.
struct SendLoop {
    conn: ChunkSender,
    compressor: Compressor,
    peer: String,
    /// Sent and not yet acknowledged (`None`: the receiver does not acknowledge).
    window: Option<SendWindow<Outgoing>>,
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

    /// Compresses (unless its bytes are pinned) and sends one record; keeps it until
    /// acknowledged (where the receiver acknowledges).
    fn send_record(&mut self, mut rec: Record) -> Result<(), EngineError> {
        let raw_len = rec.raw_len();
        let header = match &rec.pinned {
            Some(pinned) => {
                // `push_pinned` copies into the slot where the stream compresses.
                debug_assert!(self.compressor.is_off());
                let parts = [rec.slot.filled_bytes(), pinned.bytes()];
                ChunkHeader::plain_parts(STREAM_FILE_ID, rec.offset, &parts, rec.last)
            }
            None => self.frame_in_slot(&mut rec),
        };
        debug_assert!(rec.pinned.is_none() || header.raw_len as usize == raw_len);
        let mut out = Outgoing {
            header,
            slot: rec.slot,
            pinned: rec.pinned,
        };
        let handing = std::time::Instant::now();
        transmit(&mut self.conn, &self.peer, &mut out)?;
        self.compressor
            .record_sent((STREAM_FILE_ID, rec.offset), raw_len, handing.elapsed());
        self.sent.bytes += raw_len as u64;
        self.sent.wire += u64::from(header.wire_len);
        if let Some(w) = &mut self.window {
            w.hold(rec.offset, out);
        }
        Ok(())
    }

    /// Frames (checksums) a record held whole in its slot, then compresses it there in
    /// place: its header.
    fn frame_in_slot(&mut self, rec: &mut Record) -> ChunkHeader {
        let raw_len = rec.slot.filled();
        let plain = ChunkHeader::plain(
            STREAM_FILE_ID,
            rec.offset,
            rec.slot.filled_bytes(),
            rec.last,
        );
        let out = self
            .compressor
            .compress_elements(&mut rec.slot, raw_len, rec.shuffle);
        rec.slot.set_filled(out.wire_len);
        out.describe(plain)
    }

    /// The receiver has the record at `offset`: its slot goes back to the pool and its
    /// share of pinned bytes is let go.
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
        for out in again {
            transmit(&mut self.conn, &self.peer, out)?;
        }
        Ok(())
    }
}

/// Sends one record on `conn`: the slot's bytes, then the pinned ones from where they
/// are (corrupted on the way where the fault injection says).
fn transmit(conn: &mut ChunkSender, peer: &str, out: &mut Outgoing) -> Result<(), EngineError> {
    let n = out.slot.filled();
    let header = &out.header;
    let tail = out.pinned.as_ref().map_or(&[][..], PinnedRange::bytes);
    crate::fault::send_parts_maybe_corrupted(&mut out.slot[..n], tail, |head, tail| {
        conn.send_parts(header, &[], head, tail)
    })
    .map_err(|e| match e {
        EngineError::Io { .. } => EngineError::Aborted(format!(
            "the receiver at {peer} closed the stream at byte {}: {e}",
            header.offset
        )),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    //! Records with pinned bytes through a real send loop over loopback, the test
    //! playing the receiver (reading chunks, answering words).

    use super::*;
    use crate::codec::CompressMode;
    use crate::net::tls::Link;
    use crate::stream::PinnedBytes;
    use crate::testing::tcp_pair;
    use crate::transport::{ChunkReceiver, DataEvent};
    use sluice_buffers::BufferPool;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Weak;
    use std::time::{Duration, Instant};

    const SLOT: usize = 64 << 10;

    /// A caller's buffer that counts its drops.
    struct Counted {
        bytes: Vec<u8>,
        drops: Arc<AtomicUsize>,
    }

    impl PinnedBytes for Counted {
        fn bytes(&self) -> &[u8] {
            &self.bytes
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A send loop on its thread, its queues, and the receiving end of its connection.
    struct Harness {
        records: Option<Sender<Record>>,
        words: Sender<Word>,
        rx: ChunkReceiver,
        thread: JoinHandle<Result<Sent, EngineError>>,
        pool: Arc<BufferPool>,
        next_offset: u64,
    }

    fn start() -> Harness {
        let (c, s) = tcp_pair();
        // A record that never comes whole fails the test, rather than hang it.
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a read timeout");
        let send = SendLoop {
            conn: ChunkSender::new(Link::plain(c)),
            compressor: Compressor::new(CompressMode::None),
            peer: "test".into(),
            window: Some(SendWindow::new(8)),
            sent: Sent::default(),
        };
        let (records, records_rx) = bounded(2);
        let (words, words_rx) = bounded(16);
        let thread = std::thread::spawn(move || send.run(&records_rx, Some(&words_rx)));
        let pool = BufferPool::new(None, 8 * SLOT as u64, SLOT).expect("a pool");
        Harness {
            records: Some(records),
            words,
            rx: ChunkReceiver::new(Link::plain(s), u32::try_from(SLOT).expect("a small slot")),
            thread,
            pool: Arc::new(pool),
            next_offset: 0,
        }
    }

    /// `data` pinned, and a weak reference that counts the records holding it.
    fn pinned(
        data: &[u8],
        drops: &Arc<AtomicUsize>,
    ) -> (Arc<dyn PinnedBytes>, Weak<dyn PinnedBytes>) {
        let owner: Arc<dyn PinnedBytes> = Arc::new(Counted {
            bytes: data.to_vec(),
            drops: Arc::clone(drops),
        });
        let weak = Arc::downgrade(&owner);
        (owner, weak)
    }

    fn range(owner: &Arc<dyn PinnedBytes>, r: std::ops::Range<usize>) -> PinnedRange {
        PinnedRange::new(Arc::clone(owner), r).expect("within the bytes")
    }

    impl Harness {
        /// Queues a record of `head` in its slot, then `pinned`; its offset.
        fn push(&mut self, head: &[u8], pinned: Option<PinnedRange>) -> u64 {
            let mut slot = self.pool.acquire();
            slot[..head.len()].copy_from_slice(head);
            slot.set_filled(head.len());
            let offset = self.next_offset;
            let record = Record {
                offset,
                last: false,
                slot,
                pinned,
                shuffle: None,
            };
            self.next_offset += record.raw_len() as u64;
            let queue = self.records.as_ref().expect("open");
            queue.send(record).expect("the loop takes records");
            offset
        }

        /// The next record off the wire: its header and payload.
        fn receive(&mut self) -> (ChunkHeader, Vec<u8>) {
            match self.rx.next_event().expect("an event") {
                DataEvent::Chunk(h) => {
                    let mut payload = vec![0; h.wire_len as usize];
                    self.rx.payload(&mut payload).expect("the payload");
                    (h, payload)
                }
                other => panic!("expected a chunk, got {other:?}"),
            }
        }

        fn word(&self, word: Word) {
            self.words.send(word).expect("the loop takes words");
        }

        /// Ends the producer's side and joins the loop once every record is answered.
        fn finish(mut self) -> Sent {
            self.records = None;
            self.thread
                .join()
                .expect("the loop does not panic")
                .expect("the loop ends cleanly")
        }
    }

    /// Waits (a few seconds at most) until `done`.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "not within 10 s: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 + i / 7).to_le_bytes()[0]).collect()
    }

    #[test]
    fn pinned_records_go_unchanged_and_their_owner_is_dropped_after_the_last_ack() {
        let mut h = start();
        let data = pattern(40_000);
        let drops = Arc::new(AtomicUsize::new(0));
        let (owner, weak) = pinned(&data, &drops);
        let a = h.push(b"HEAD of a message", Some(range(&owner, 0..30_000)));
        let b = h.push(&[], Some(range(&owner, 30_000..40_000)));
        drop(owner);
        // A copied record after them: once it is on the wire, both are held.
        let c = h.push(b"copied", None);

        let (ha, pa) = h.receive();
        let whole_a = [&b"HEAD of a message"[..], &data[..30_000]].concat();
        assert_eq!(pa, whole_a);
        assert_eq!(ha, ChunkHeader::plain(STREAM_FILE_ID, a, &whole_a, false));
        let (hb, pb) = h.receive();
        assert_eq!((hb.offset, &pb[..]), (b, &data[30_000..]));
        assert!(hb.verify(&pb));
        let (hc, pc) = h.receive();
        assert_eq!((hc.offset, &pc[..]), (c, &b"copied"[..]));
        assert_eq!(weak.strong_count(), 2, "both records hold the owner");
        assert_eq!(drops.load(Ordering::SeqCst), 0, "held until acknowledged");

        h.word(Word::Ack(a));
        eventually("the first record let go", || weak.strong_count() == 1);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the second record holds it"
        );
        h.word(Word::Ack(c));
        h.word(Word::Ack(b));
        eventually("the owner dropped", || drops.load(Ordering::SeqCst) == 1);
        let sent = h.finish();
        assert_eq!(sent.bytes, (whole_a.len() + 10_000 + 6) as u64);
        assert_eq!(sent.wire, sent.bytes);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
    }

    #[test]
    fn a_damaged_pinned_record_is_sent_again_from_the_callers_memory() {
        let mut h = start();
        let data = pattern(50_000);
        let drops = Arc::new(AtomicUsize::new(0));
        let (owner, _) = pinned(&data, &drops);
        let a = h.push(b"head", Some(range(&owner, 0..25_000)));
        let b = h.push(&[], Some(range(&owner, 25_000..50_000)));
        drop(owner);
        let (ha, mut pa) = h.receive();
        let (hb, pb) = h.receive();
        // Damaged on the way: the checksum catches it, and the receiver asks again.
        pa[100] ^= 0x5a;
        assert!(!ha.verify(&pa));
        h.word(Word::Nack(a));
        // Go-back-N: the record and every later one of the connection, unchanged.
        let (ha2, pa2) = h.receive();
        assert_eq!(ha2, ha);
        assert!(ha2.verify(&pa2));
        assert_eq!(pa2, [&b"head"[..], &data[..25_000]].concat());
        let (hb2, pb2) = h.receive();
        assert_eq!((hb2, &pb2), (hb, &pb));
        assert_eq!(hb2.offset, b);
        assert_eq!(drops.load(Ordering::SeqCst), 0, "held while unacknowledged");
        h.word(Word::Ack(a));
        h.word(Word::Ack(b));
        let sent = h.finish();
        assert_eq!(sent.resent, 1);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_pinned_record_is_framed_as_the_same_bytes_copied() {
        let mut h = start();
        let data = pattern(20_000);
        let drops = Arc::new(AtomicUsize::new(0));
        let (rest, _) = pinned(&data[64..], &drops);
        let (all, _) = pinned(&data, &drops);
        let copied = h.push(&data, None);
        let split = h.push(&data[..64], Some(range(&rest, 0..data.len() - 64)));
        let all_pinned = h.push(&[], Some(range(&all, 0..data.len())));
        drop((rest, all));
        let mut seen = Vec::new();
        for offset in [copied, split, all_pinned] {
            let (header, payload) = h.receive();
            assert_eq!(header.offset, offset);
            assert_eq!(payload, data);
            h.word(Word::Ack(offset));
            seen.push(header);
        }
        for header in &seen[1..] {
            let same_but_offset = ChunkHeader {
                offset: seen[0].offset,
                ..*header
            };
            assert_eq!(same_but_offset, seen[0], "checksum, lengths and flags");
        }
        h.finish();
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }
}
