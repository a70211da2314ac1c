//! Compression of one thread's chunks (bit-shuffled first where the chunk holds typed
//! elements and the peer un-shuffles), and `auto`'s dry runs.

use super::{CompressMode, SharedAuto};
use sluice_session::auto::{ChunkKey, Codec, CANDIDATES};
use sluice_wire::shuffle::{bitshuffle, ElementSize};
use sluice_wire::{ChunkHeader, Compression};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of a chunk a dry run compresses to measure a codec's speed and ratio.
const DRY_RUN_BYTES: usize = 512 << 10;
/// Pieces of a chunk, spread over it, that make up a dry run's sample.
const DRY_RUN_PIECES: usize = 4;

/// Compresses chunks for one thread.
pub struct Compressor {
    mode: CompressMode,
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    zstd_level: i32,
    auto: Arc<SharedAuto>,
    /// The `auto` epoch of the last chunk compressed (reported by `record_sent`).
    epoch: u64,
    /// The bit-shuffle of the chunk being compressed; grows once to the largest chunk.
    shuffled: Vec<u8>,
    /// Whether the peer un-shuffles (`SHUFFLE`): element sizes are ignored otherwise.
    shuffle_allowed: bool,
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor")
            .field("mode", &self.mode)
            .field("auto", &self.auto)
            .field("shuffle_allowed", &self.shuffle_allowed)
            .finish()
    }
}

/// The result of [`Compressor::compress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compressed {
    /// How the payload is encoded (`None`: it is the original bytes).
    pub compression: Compression,
    /// Payload bytes.
    pub wire_len: usize,
    /// The element size the original bytes were bit-shuffled as before compression
    /// (`None` when they were not, always when `compression` is `None`).
    pub shuffle: Option<ElementSize>,
}

impl Compressed {
    /// The original bytes, as they are.
    fn raw(raw_len: usize) -> Compressed {
        Compressed {
            compression: Compression::None,
            wire_len: raw_len,
            shuffle: None,
        }
    }

    /// `header` (framed for the original bytes) made to describe this payload: its
    /// compression, wire length and shuffle.
    #[must_use]
    pub fn describe(self, header: ChunkHeader) -> ChunkHeader {
        if self.compression == Compression::None {
            return header;
        }
        let wire_len = u32::try_from(self.wire_len).unwrap_or(header.raw_len);
        header
            .compressed(self.compression, wire_len)
            .shuffled(self.shuffle)
    }
}

impl Compressor {
    /// A compressor for `mode` with a controller of its own; its scratch buffer grows
    /// once to the largest chunk.
    pub fn new(mode: CompressMode) -> Compressor {
        Compressor::sharing(mode, &SharedAuto::new())
    }

    /// A compressor whose `auto` decisions are the session's, shared with every other
    /// compressing thread through `auto`.
    pub fn sharing(mode: CompressMode, auto: &Arc<SharedAuto>) -> Compressor {
        Compressor {
            mode,
            scratch: Vec::new(),
            zstd: None,
            zstd_level: 0,
            auto: Arc::clone(auto),
            epoch: 0,
            shuffled: Vec::new(),
            shuffle_allowed: false,
        }
    }

    /// This compressor, allowed to bit-shuffle where the peer un-shuffles
    /// (`Capabilities::SHUFFLE`): [`Self::compress_elements`] ignores element sizes
    /// unless it is.
    #[must_use]
    pub fn with_shuffle(mut self, peer_unshuffles: bool) -> Compressor {
        self.shuffle_allowed = peer_unshuffles;
        self
    }

    /// Whether compression is off altogether.
    pub fn is_off(&self) -> bool {
        self.mode == CompressMode::None
    }

    /// The codec the controller would use now (for the summary).
    pub fn current(&self) -> &'static str {
        match self.pick_for_mode() {
            Codec::Raw => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd(_) => "zstd",
        }
    }

    fn pick_for_mode(&self) -> Codec {
        match self.mode {
            CompressMode::None => Codec::Raw,
            CompressMode::Lz4 => Codec::Lz4,
            CompressMode::Zstd(l) => Codec::Zstd(l),
            CompressMode::Auto => self.auto.best(),
        }
    }

    /// Compresses `chunk[..raw_len]` in place when that shrinks it: the encoded bytes
    /// replace the chunk's prefix (`chunk` is the buffer slot, at least `raw_len` long).
    pub fn compress(&mut self, chunk: &mut [u8], raw_len: usize) -> Compressed {
        self.compress_elements(chunk, raw_len, None)
    }

    /// [`Self::compress`] of a chunk of `elem`-byte elements (the chunk starting at an
    /// element's first byte): bit-shuffled before it is compressed, where the peer
    /// un-shuffles ([`Self::with_shuffle`]), so that typed data compresses. `auto`'s dry
    /// runs then measure the shuffle too. A chunk that does not shrink travels raw,
    /// unshuffled.
    pub fn compress_elements(
        &mut self,
        chunk: &mut [u8],
        raw_len: usize,
        elem: Option<ElementSize>,
    ) -> Compressed {
        debug_assert!(raw_len <= chunk.len());
        let elem = elem.filter(|_| self.shuffle_allowed);
        let codec = match self.mode {
            CompressMode::Auto => {
                let pick = self.auto.pick();
                self.epoch = pick.epoch;
                if let Some(i) = pick.dry.filter(|_| raw_len > 0) {
                    let (speed, ratio) = self.dry_run(CANDIDATES[i], &chunk[..raw_len], elem);
                    self.auto.observe_speed(i, speed, ratio);
                }
                CANDIDATES[pick.codec]
            }
            _ => self.pick_for_mode(),
        };
        if codec == Codec::Raw || raw_len == 0 {
            return Compressed::raw(raw_len);
        }
        let Some((compression, n)) = self.encode_elements(codec, &chunk[..raw_len], elem) else {
            return Compressed::raw(raw_len);
        };
        if n >= raw_len {
            return Compressed::raw(raw_len); // did not shrink: send the original bytes
        }
        chunk[..n].copy_from_slice(&self.scratch[..n]);
        Compressed {
            compression,
            wire_len: n,
            shuffle: elem,
        }
    }

    /// Measures `codec` on a sample of `chunk` (the output is not used): its speed in
    /// original bytes per second and its ratio, bit-shuffle included where `elem` says
    /// the chunk will be shuffled. The sample is [`DRY_RUN_PIECES`] pieces spread over
    /// the chunk, not its start: a detector frame's first rows lie outside the beam and
    /// are all zeros, which made LZ4 look 100 times better and 5 times faster than it
    /// was on the whole frame. Pieces start at an element's first byte.
    fn dry_run(&mut self, codec: Codec, chunk: &[u8], elem: Option<ElementSize>) -> (f64, f64) {
        let piece = (DRY_RUN_BYTES / DRY_RUN_PIECES).min(chunk.len());
        let step = chunk.len() / DRY_RUN_PIECES;
        let align = elem.map_or(1, ElementSize::bytes);
        // Contexts and scratch exist before the clock starts: their set-up is paid once,
        // not per chunk (it made zstd look 4x slower than it is).
        self.prepare(codec, piece);
        if elem.is_some() {
            self.prepare_shuffle(piece);
        }
        let (mut secs, mut raw, mut out) = (0.0f64, 0usize, 0usize);
        for k in 0..DRY_RUN_PIECES {
            let at = (k * step).min(chunk.len() - piece);
            let at = at - at % align;
            let started = Instant::now();
            let n = self
                .encode_elements(codec, &chunk[at..at + piece], elem)
                .map_or(piece, |(_, n)| n);
            secs += started.elapsed().as_secs_f64();
            raw += piece;
            out += n.min(piece);
        }
        (raw as f64 / secs.max(1e-9), out as f64 / raw.max(1) as f64)
    }

    /// Makes the shuffle buffer hold `len` bytes (it grows once, then is reused).
    fn prepare_shuffle(&mut self, len: usize) {
        if self.shuffled.len() < len {
            self.shuffled.resize(len, 0);
        }
    }

    /// [`Self::encode`] of `input`, bit-shuffled as `elem`-byte elements first if given.
    fn encode_elements(
        &mut self,
        codec: Codec,
        input: &[u8],
        elem: Option<ElementSize>,
    ) -> Option<(Compression, usize)> {
        let Some(elem) = elem else {
            return self.encode(codec, input);
        };
        self.prepare_shuffle(input.len());
        // Taken out for the call and put back: `encode` borrows the compressor.
        let mut shuffled = std::mem::take(&mut self.shuffled);
        let bytes = &mut shuffled[..input.len()];
        bitshuffle(input, elem, bytes);
        let encoded = self.encode(codec, bytes);
        self.shuffled = shuffled;
        encoded
    }

    /// Makes the scratch buffer hold an encoding of `len` bytes and `codec`'s context
    /// exist (each grows or is made once, then reused).
    fn prepare(&mut self, codec: Codec, len: usize) {
        let bound =
            lz4_flex::block::get_maximum_output_size(len).max(zstd::zstd_safe::compress_bound(len));
        if self.scratch.len() < bound {
            self.scratch.resize(bound, 0);
        }
        if let Codec::Zstd(level) = codec {
            if self.zstd.is_none() || self.zstd_level != level {
                self.zstd = zstd::bulk::Compressor::new(level).ok();
                self.zstd_level = level;
            }
        }
    }

    /// Encodes `input` with `codec` into the scratch buffer: the encoding and its
    /// length, or `None` when the codec failed (the chunk then travels raw).
    fn encode(&mut self, codec: Codec, input: &[u8]) -> Option<(Compression, usize)> {
        self.prepare(codec, input.len());
        match codec {
            Codec::Lz4 => lz4_flex::block::compress_into(input, &mut self.scratch)
                .ok()
                .map(|n| (Compression::Lz4, n)),
            Codec::Zstd(_) => {
                let z = self.zstd.as_mut()?;
                z.compress_to_buffer(input, &mut self.scratch)
                    .ok()
                    .map(|n| (Compression::Zstd, n))
            }
            Codec::Raw => None,
        }
    }

    /// Records that the last chunk compressed, `key` with `payload` original bytes, is
    /// on the wire (its socket write returned, or the senders' queue took it) after the
    /// thread waited `blocked` for it: `auto` counts its goodput when the sink
    /// acknowledges it ([`SharedAuto::delivered`]), or now where the sink does not
    /// acknowledge chunks.
    pub fn record_sent(&mut self, key: ChunkKey, payload: usize, blocked: Duration) {
        if self.mode != CompressMode::Auto {
            return;
        }
        self.auto
            .sent(key, self.epoch, payload as u64, Instant::now(), blocked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::poisson_frame;

    #[test]
    fn auto_dry_runs_measure_the_bytes_that_will_be_sent_shuffle_included() {
        let frame = poisson_frame(1280, 216, 1000.0);
        let mut c = Compressor::new(CompressMode::Auto).with_shuffle(true);
        let (speed, plain) = c.dry_run(Codec::Lz4, &frame, None);
        let (_, shuffled) = c.dry_run(Codec::Lz4, &frame, Some(ElementSize::Two));
        assert!(speed > 0.0);
        assert!(
            plain > 0.95,
            "LZ4 alone keeps {plain:.2} of a Poisson frame"
        );
        assert!(shuffled < 0.7, "bit-shuffled first, {shuffled:.2}");
        // Pieces start at an element even where the chunk's quarters do not.
        let odd = &frame[..frame.len() - 2 + 1];
        let (_, odd_ratio) = c.dry_run(Codec::Lz4, odd, Some(ElementSize::Two));
        assert!(odd_ratio < 0.7, "aligned pieces: {odd_ratio:.2}");
    }
}
