//! The event queue and the simulated network.
//!
//! Events are ordered by (time, sequence): two runs of a seed pop them in the same order.
//! The control connection is reliable and in order each way, with latency; every frame
//! is encoded with `sluice_wire`'s `Codec` when sent and decoded by a `FrameDecoder` when
//! it arrives, and must arrive as it was sent. A data connection is in order too (TCP),
//! each with its own latency and speed, so connections reorder chunks against each
//! other; its chunk frames are decoded the same way, payload included.

use crate::rng::Rng;
use sluice_wire::{Chunk, Codec, Frame, FrameDecoder};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// One scheduled event.
struct Item<E> {
    at: u64,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Item<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Item<E> {}

impl<E> PartialOrd for Item<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Item<E> {
    /// Reversed: the heap pops the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Events by (time, sequence).
pub struct Queue<E> {
    heap: BinaryHeap<Item<E>>,
    seq: u64,
}

impl<E> Queue<E> {
    pub fn new() -> Queue<E> {
        Queue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    pub fn at(&mut self, at: u64, ev: E) {
        self.seq += 1;
        self.heap.push(Item {
            at,
            seq: self.seq,
            ev,
        });
    }

    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.heap.pop().map(|i| (i.at, i.ev))
    }
}

/// One direction of the control connection.
pub struct CtlLink {
    /// Frames sent and not yet arrived, to check each against what arrives.
    sent: VecDeque<Frame>,
    decoder: FrameDecoder,
    /// When the last frame arrives (a later one arrives no earlier).
    last: u64,
    latency: u64,
    pub closed: bool,
    buf: Vec<u8>,
}

impl CtlLink {
    pub fn new(latency: u64) -> CtlLink {
        CtlLink {
            sent: VecDeque::new(),
            decoder: FrameDecoder::new(),
            last: 0,
            latency,
            closed: false,
            buf: Vec::new(),
        }
    }

    /// Encodes `frame` into the bytes written now; `false` once closed.
    pub fn send(&mut self, frame: Frame) -> bool {
        if self.closed {
            return false;
        }
        frame.encode(&mut self.buf);
        self.sent.push_back(frame);
        true
    }

    /// The frames written during one event go out together (one write, one arrival):
    /// their bytes and when they arrive.
    pub fn flush(&mut self, now: u64, rng: &mut Rng) -> Option<(u64, Vec<u8>)> {
        if self.buf.is_empty() {
            return None;
        }
        let at = self.arrival(now, rng);
        Some((at, std::mem::take(&mut self.buf)))
    }

    fn arrival(&mut self, now: u64, rng: &mut Rng) -> u64 {
        let at = (now + self.latency + rng.below(self.latency / 2 + 1)).max(self.last);
        self.last = at;
        at
    }

    /// Closes the connection: the end arrives after every frame sent (flush first).
    pub fn close(&mut self, now: u64, rng: &mut Rng) -> Option<u64> {
        if self.closed {
            return None;
        }
        assert!(
            self.buf.is_empty(),
            "frames written are flushed before the close"
        );
        self.closed = true;
        Some(self.arrival(now, rng))
    }

    /// The frames in `bytes`, each checked against the one sent.
    pub fn receive(&mut self, bytes: &[u8], out: &mut Vec<Frame>) {
        let mut bytes = bytes;
        while !bytes.is_empty() {
            let taken = self.decoder.feed(bytes);
            assert!(taken > 0, "the decoder takes bytes once its frames are out");
            bytes = &bytes[taken..];
            for frame in self.decoder.by_ref() {
                let frame = frame.expect("a control frame decodes");
                let sent = self
                    .sent
                    .pop_front()
                    .expect("a frame arrives that was sent");
                assert_eq!(frame, sent, "a control frame arrives as it was sent");
                out.push(frame);
            }
        }
    }
}

/// One chunk in flight on a data connection: its bytes on the wire, what the source
/// framed, and (for the checks only: the sink never looks) whether it was damaged.
#[derive(Debug, Clone)]
pub struct Tx {
    pub id: u64,
    pub bytes: Vec<u8>,
    pub sent: Chunk,
    pub payload: usize,
    pub damaged: bool,
}

/// A data connection: in order, with its own latency and speed.
pub struct DataConn {
    latency: u64,
    ns_per_byte: u64,
    /// When the sender's socket is free again (sending blocks until then).
    free: u64,
    /// When the last chunk arrives.
    last: u64,
    pub closed: bool,
    decoder: FrameDecoder,
}

impl DataConn {
    pub fn new(latency: u64, ns_per_byte: u64, chunk_bytes: u32) -> DataConn {
        DataConn {
            latency,
            ns_per_byte,
            free: 0,
            last: 0,
            closed: false,
            decoder: FrameDecoder::with_max_chunk_bytes(chunk_bytes),
        }
    }

    /// Puts `len` bytes on the wire at `now`: when the sender is done, and when they
    /// arrive.
    pub fn transmit(&mut self, now: u64, len: usize) -> (u64, u64) {
        let wire = (len as u64 * self.ns_per_byte).div_ceil(1000);
        self.free = self.free.max(now) + wire;
        let at = (self.free + self.latency).max(self.last);
        self.last = at;
        (self.free, at)
    }

    /// Closes the sending end: the end arrives after every chunk sent.
    pub fn close(&mut self, now: u64) -> Option<u64> {
        if self.closed {
            return None;
        }
        self.closed = true;
        let at = (now.max(self.free) + self.latency).max(self.last);
        self.last = at;
        Some(at)
    }

    /// Decodes a chunk that arrived: its header and table, and its payload into `payload`.
    pub fn receive(&mut self, tx: &Tx, payload: &mut Vec<u8>) -> Chunk {
        let taken = self.decoder.feed(&tx.bytes);
        assert_eq!(taken, tx.bytes.len(), "a chunk fits the decoder");
        let frame = self
            .decoder
            .next()
            .expect("a whole chunk frame")
            .expect("a chunk decodes");
        let Frame::Chunk(chunk) = frame else {
            panic!("a data connection carries chunks: {frame:?}");
        };
        assert_eq!(chunk, tx.sent, "a chunk header arrives as it was sent");
        let wire = chunk.header.wire_len as usize;
        assert_eq!(wire, tx.payload);
        payload.clear();
        payload.resize(wire, 0);
        assert_eq!(
            self.decoder.read_payload(payload),
            wire,
            "the payload follows"
        );
        assert_eq!(self.decoder.buffered(), 0);
        assert!(self.decoder.next().is_none());
        chunk
    }
}
