//! [`FrameDecoder`]: frames out of a byte stream, in bounded memory.

use crate::codec::{Codec, FrameHeader};
use crate::error::DecodeError;
use crate::frame::Frame;
use crate::limits::{FRAME_HEADER_BYTES, MAX_CHUNK_BYTES, MAX_CONTROL_BODY_BYTES};

/// Turns the bytes of one connection into frames.
///
/// Its buffer never holds more than [`FrameDecoder::CAPACITY`] bytes (one largest frame):
/// [`feed`](FrameDecoder::feed) takes what fits and says how much. A frame header is
/// checked as soon as its 6 bytes are in, so a frame whose length breaks its type's limit
/// is refused before its body is buffered.
///
/// After a [`Frame::Chunk`], the chunk's `wire_len` payload bytes follow on the stream.
/// They are not frames: until they are consumed, [`next`](Iterator::next) yields `None`.
/// Take the ones already buffered with [`read_payload`](FrameDecoder::read_payload), then
/// read the rest from the socket straight into the chunk's buffer slot and report them
/// with [`payload_read_externally`](FrameDecoder::payload_read_externally).
///
/// After an error the decoder is spent: `next` yields the error once, then `None`, and
/// `feed` takes nothing. The stream is out of sync; send `Error { BadFrame }` and close.
///
/// ```
/// use sluice_wire::{Codec, Frame, FrameDecoder, ManifestEnd};
/// let mut bytes = Vec::new();
/// ManifestEnd { files: 2, bytes: 10 }.encode(&mut bytes);
/// let mut dec = FrameDecoder::new();
/// assert_eq!(dec.feed(&bytes[..5]), 5);
/// assert!(dec.next().is_none()); // incomplete
/// dec.feed(&bytes[5..]);
/// let frame = dec.next().unwrap()?;
/// assert_eq!(frame, Frame::ManifestEnd(ManifestEnd { files: 2, bytes: 10 }));
/// # Ok::<(), sluice_wire::DecodeError>(())
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
    max_chunk_bytes: u32,
    payload_remaining: u32,
    failed: bool,
}

impl Default for FrameDecoder {
    fn default() -> FrameDecoder {
        FrameDecoder::new()
    }
}

impl FrameDecoder {
    /// Most bytes ever buffered: a header and the largest body of any frame type.
    pub const CAPACITY: usize = FRAME_HEADER_BYTES + MAX_CONTROL_BODY_BYTES as usize;

    /// A decoder accepting chunks up to [`MAX_CHUNK_BYTES`].
    pub fn new() -> FrameDecoder {
        FrameDecoder::with_max_chunk_bytes(MAX_CHUNK_BYTES)
    }

    /// A decoder accepting chunks up to `max_chunk_bytes` (the session's chunk size).
    pub fn with_max_chunk_bytes(max_chunk_bytes: u32) -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            max_chunk_bytes: max_chunk_bytes.min(MAX_CHUNK_BYTES),
            payload_remaining: 0,
            failed: false,
        }
    }

    /// Appends as much of `data` as fits; returns how many bytes were taken. Call
    /// [`next`](Iterator::next) (and drain payload) to make room, then feed the rest.
    pub fn feed(&mut self, data: &[u8]) -> usize {
        if self.failed {
            return 0;
        }
        // Reclaim consumed bytes before growing, and whenever the cap is in the way.
        if self.start > 0 && self.buf.len() + data.len() > self.buf.capacity().min(Self::CAPACITY) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let room = Self::CAPACITY - self.buf.len();
        let n = data.len().min(room);
        if self.buf.len() + n > self.buf.capacity() {
            // Grow geometrically but never past CAPACITY, so the largest allocation is
            // CAPACITY bytes.
            let want = (self.buf.len() + n)
                .max(self.buf.capacity() * 2)
                .min(Self::CAPACITY);
            self.buf.reserve_exact(want - self.buf.len());
        }
        self.buf.extend_from_slice(&data[..n]);
        n
    }

    /// Bytes buffered and not yet consumed (frames or payload).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Payload bytes of the last chunk not yet consumed.
    pub fn payload_remaining(&self) -> u32 {
        self.payload_remaining
    }

    /// Copies buffered payload bytes of the current chunk into `dst`; returns how many.
    pub fn read_payload(&mut self, dst: &mut [u8]) -> usize {
        let n = dst
            .len()
            .min(self.buffered())
            .min(self.payload_remaining as usize);
        dst[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.consume(n);
        // n ≤ payload_remaining, a u32.
        self.payload_remaining -= u32::try_from(n).unwrap_or(self.payload_remaining);
        n
    }

    /// Records that `n` payload bytes were read from the stream without passing through
    /// the decoder. Only valid once the buffered payload is drained.
    ///
    /// # Errors
    /// [`DecodeError::Inconsistent`] if payload is still buffered or `n` exceeds the
    /// payload remaining; the decoder state is unchanged.
    pub fn payload_read_externally(&mut self, n: u32) -> Result<(), DecodeError> {
        if n > self.payload_remaining {
            return Err(DecodeError::Inconsistent {
                field: "payload",
                reason: "more payload bytes read than the chunk has",
            });
        }
        if n > 0 && self.buffered() > 0 {
            return Err(DecodeError::Inconsistent {
                field: "payload",
                reason: "payload read around the decoder while bytes are buffered",
            });
        }
        self.payload_remaining -= n;
        Ok(())
    }

    /// Call at end of stream.
    ///
    /// # Errors
    /// [`DecodeError::TruncatedStream`] if a frame or a payload was cut off.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.buffered() == 0 && self.payload_remaining == 0 {
            Ok(())
        } else {
            Err(DecodeError::TruncatedStream {
                buffered: self.buffered(),
                payload_remaining: self.payload_remaining,
            })
        }
    }

    /// Whether the decoder hit an error.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    fn fail(&mut self, e: DecodeError) -> Option<Result<Frame, DecodeError>> {
        self.failed = true;
        self.buf = Vec::new();
        self.start = 0;
        Some(Err(e))
    }
}

impl Iterator for FrameDecoder {
    type Item = Result<Frame, DecodeError>;

    /// The next complete frame, `None` if more bytes (or payload draining) are needed.
    fn next(&mut self) -> Option<Result<Frame, DecodeError>> {
        if self.failed || self.payload_remaining > 0 {
            return None;
        }
        let avail = &self.buf[self.start..];
        // Validate the header alone first: bad types and lengths fail before buffering.
        match FrameHeader::decode(avail) {
            Ok(_) => {}
            Err(DecodeError::Incomplete { .. }) => return None,
            Err(e) => return self.fail(e),
        }
        match Frame::decode_limited(avail, self.max_chunk_bytes) {
            Ok((frame, n)) => {
                self.consume(n);
                if let Frame::Chunk(c) = &frame {
                    self.payload_remaining = c.header.wire_len;
                }
                Some(Ok(frame))
            }
            Err(DecodeError::Incomplete { .. }) => None,
            Err(e) => self.fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkHeader;
    use crate::frame::{Close, CloseReason, ErrorFrame};
    use crate::ErrorCode;

    #[test]
    fn chunk_payload_is_left_to_the_caller() {
        let raw = vec![42u8; 3000];
        let mut wire = Vec::new();
        let h = ChunkHeader::plain(1, 0, &raw, true);
        h.encode(&mut wire);
        wire.extend_from_slice(&raw);
        Close {
            reason: CloseReason::Done,
        }
        .encode(&mut wire);

        let mut dec = FrameDecoder::with_max_chunk_bytes(1 << 16);
        assert_eq!(dec.feed(&wire[..1000]), 1000);
        let next = dec.next();
        let Some(Ok(Frame::Chunk(c))) = next else {
            panic!("{next:?}")
        };
        assert_eq!(c.header, h);
        assert_eq!(dec.payload_remaining(), 3000);
        assert!(dec.next().is_none());
        let mut slot = vec![0u8; 3000];
        let got = dec.read_payload(&mut slot);
        assert_eq!(got, 1000 - 42);
        assert!(dec.payload_read_externally(3001).is_err());
        // The rest comes "from the socket" directly into the slot.
        slot[got..].copy_from_slice(&wire[1000..42 + 3000]);
        dec.payload_read_externally(u32::try_from(3000 - got).unwrap())
            .unwrap();
        assert!(h.verify(&slot));
        dec.feed(&wire[42 + 3000..]);
        assert_eq!(
            dec.next(),
            Some(Ok(Frame::Close(Close {
                reason: CloseReason::Done
            })))
        );
        dec.finish().unwrap();
    }

    #[test]
    fn oversized_header_fails_before_body() {
        let mut dec = FrameDecoder::new();
        dec.feed(&[0x50, 0, 0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(
            dec.next(),
            Some(Err(DecodeError::BodyLength { frame: "Error", .. }))
        ));
        assert!(dec.next().is_none());
        assert_eq!(dec.feed(b"more"), 0);
        assert!(dec.is_failed());
    }

    #[test]
    fn feed_is_bounded() {
        let mut dec = FrameDecoder::new();
        let big = vec![0x30u8; FrameDecoder::CAPACITY + 100];
        assert_eq!(dec.feed(&big), FrameDecoder::CAPACITY);
        assert_eq!(dec.buffered(), FrameDecoder::CAPACITY);
    }

    #[test]
    fn consumed_bytes_are_reclaimed_at_the_cap() {
        let mut one = Vec::new();
        Close {
            reason: CloseReason::Done,
        }
        .encode(&mut one);
        let stream: Vec<u8> = one
            .iter()
            .copied()
            .cycle()
            .take(3 * FrameDecoder::CAPACITY)
            .collect();
        let mut dec = FrameDecoder::new();
        let (mut fed, mut frames) = (0, 0);
        while fed < stream.len() {
            let n = dec.feed(&stream[fed..]);
            assert!(n > 0, "stalled at {fed} with {} buffered", dec.buffered());
            fed += n;
            // Leave a partial frame behind each time, so `start` is never 0 at the cap.
            for f in dec.by_ref() {
                f.unwrap();
                frames += 1;
            }
        }
        assert_eq!(frames, stream.len() / one.len());
        assert!(dec.buffered() < one.len());
    }

    #[test]
    fn byte_at_a_time() {
        let mut wire = Vec::new();
        ErrorFrame::new(ErrorCode::Busy, "try later").encode(&mut wire);
        Close {
            reason: CloseReason::Failed,
        }
        .encode(&mut wire);
        let mut dec = FrameDecoder::new();
        let mut frames = Vec::new();
        for b in &wire {
            assert_eq!(dec.feed(std::slice::from_ref(b)), 1);
            frames.extend(dec.by_ref());
        }
        assert_eq!(frames.len(), 2);
        assert!(matches!(&frames[0], Ok(Frame::Error(e)) if e.code == ErrorCode::Busy));
        dec.finish().unwrap();
    }

    #[test]
    fn truncated_stream_is_reported() {
        let mut wire = Vec::new();
        ErrorFrame::new(ErrorCode::Busy, "x").encode(&mut wire);
        let mut dec = FrameDecoder::new();
        dec.feed(&wire[..wire.len() - 1]);
        assert!(dec.next().is_none());
        assert!(matches!(
            dec.finish(),
            Err(DecodeError::TruncatedStream { .. })
        ));
    }
}
