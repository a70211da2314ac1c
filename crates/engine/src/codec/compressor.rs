//! Compression of one thread's chunks (shuffled first where the chunk holds typed
//! elements and the peer un-shuffles: bits for LZ4, bytes for zstd), and `auto`'s dry
//! runs.

use super::{CompressMode, SharedAuto, Unshuffles};
use sluice_session::auto::{ChunkKey, Codec, CANDIDATES};
use sluice_wire::{ChunkHeader, Compression, ElementSize, Shuffle};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of a chunk a dry run compresses to measure a codec's speed and ratio.
const DRY_RUN_BYTES: usize = 512 << 10;
/// Pieces of a chunk, spread over it, that make up a dry run's sample.
const DRY_RUN_PIECES: usize = 4;
/// Chunks between two trials of the byte- against the bit-shuffle for zstd.
const SHUFFLE_TRIAL_EVERY: u32 = 32;
/// Pieces of a chunk, spread over it, that a shuffle trial compresses both ways.
const TRIAL_PIECES: usize = 2;
/// Bytes of each piece of a shuffle trial. Not less: zstd takes a Huffman table per
/// 128 KiB block, and a byte-shuffled piece of 128 KiB puts its high and its low bytes
/// in one block (one table for both), which lost to the bit-shuffle where the whole
/// frame of 11 MB won by 1.5-4 %; pieces of 512 KiB and 2 MiB ranked the two as the
/// whole frame did. A trial compresses 2 MiB: 0.6 % of 32 such frames.
const TRIAL_PIECE_BYTES: usize = 512 << 10;

/// Compresses chunks for one thread.
pub struct Compressor {
    mode: CompressMode,
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    zstd_level: i32,
    auto: Arc<SharedAuto>,
    /// The `auto` epoch of the last chunk compressed (reported by `record_sent`).
    epoch: u64,
    /// The shuffle of the chunk being compressed; grows once to the largest chunk.
    shuffled: Vec<u8>,
    /// What the peer un-shuffles: element sizes are ignored where it is nothing.
    unshuffles: Unshuffles,
    /// Whether zstd gets the byte-shuffle (else the bit-shuffle) where the peer undoes
    /// both: which one sent fewer bytes in the last trial. Neither wins everywhere: on
    /// 16-bit Poisson counts the bytes win at means 100, 3000 and 10,000, the bits at
    /// 1000 (`whole_frame_ratios`), as the noise falls on or across a byte boundary.
    zstd_bytes: bool,
    /// Chunks until the next trial (0: the next typed zstd chunk runs one).
    trial_in: u32,
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor")
            .field("mode", &self.mode)
            .field("auto", &self.auto)
            .field("unshuffles", &self.unshuffles)
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
    /// How the original bytes were shuffled before compression (`None` when they were
    /// not, always when `compression` is `None`).
    pub shuffle: Option<Shuffle>,
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
            unshuffles: Unshuffles::Nothing,
            zstd_bytes: true,
            trial_in: 0,
        }
    }

    /// This compressor, allowed the shuffles the peer undoes ([`Unshuffles::of`] its
    /// capabilities): [`Self::compress_elements`] ignores element sizes where it undoes
    /// none.
    #[must_use]
    pub fn with_shuffle(mut self, unshuffles: Unshuffles) -> Compressor {
        self.unshuffles = unshuffles;
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
    /// element's first byte): shuffled before it is compressed, where the peer
    /// un-shuffles ([`Self::with_shuffle`]), so that typed data compresses: bits for
    /// LZ4; for zstd, toward a peer that undoes both, bytes or bits as a trial on a
    /// sample of every 32nd such chunk found smaller. `auto`'s dry runs then measure the
    /// shuffle too. A chunk that does not shrink travels raw, unshuffled.
    pub fn compress_elements(
        &mut self,
        chunk: &mut [u8],
        raw_len: usize,
        elem: Option<ElementSize>,
    ) -> Compressed {
        debug_assert!(raw_len <= chunk.len());
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
        let shuffle = self.shuffle_for(codec, &chunk[..raw_len], elem);
        let Some((compression, n)) = self.encode_shuffled(codec, &chunk[..raw_len], shuffle) else {
            return Compressed::raw(raw_len);
        };
        if n >= raw_len {
            return Compressed::raw(raw_len); // did not shrink: send the original bytes
        }
        chunk[..n].copy_from_slice(&self.scratch[..n]);
        Compressed {
            compression,
            wire_len: n,
            shuffle,
        }
    }

    /// The shuffle for `chunk`, of `elem`-byte elements, before `codec`: what
    /// [`Unshuffles::for_codec`] allows, and for zstd where the peer undoes both, the
    /// byte- or the bit-shuffle as the last trial found (a trial every
    /// [`SHUFFLE_TRIAL_EVERY`] such chunks, on a sample of this one).
    fn shuffle_for(
        &mut self,
        codec: Codec,
        chunk: &[u8],
        elem: Option<ElementSize>,
    ) -> Option<Shuffle> {
        let shuffle = self.unshuffles.for_codec(codec, elem?)?;
        let Shuffle::Bytes(e) = shuffle else {
            return Some(shuffle);
        };
        if self.trial_in == 0 {
            let bytes = self.sample_bytes(codec, chunk, shuffle);
            let bits = self.sample_bytes(codec, chunk, Shuffle::Bits(e));
            self.zstd_bytes = bytes <= bits;
            self.trial_in = SHUFFLE_TRIAL_EVERY;
        }
        self.trial_in -= 1;
        Some(self.preferred(shuffle))
    }

    /// `shuffle` as the last trial prefers it: a byte-shuffle becomes the bit-shuffle of
    /// its elements where the bits won.
    fn preferred(&self, shuffle: Shuffle) -> Shuffle {
        match shuffle {
            Shuffle::Bytes(e) if !self.zstd_bytes => Shuffle::Bits(e),
            other => other,
        }
    }

    /// The bytes `codec` makes of a trial's sample of `chunk` put through `shuffle`
    /// first.
    fn sample_bytes(&mut self, codec: Codec, chunk: &[u8], shuffle: Shuffle) -> usize {
        let piece = TRIAL_PIECE_BYTES.min(chunk.len());
        sample_pieces(chunk.len(), TRIAL_PIECES, piece, shuffle.elem().bytes())
            .map(|at| {
                self.encode_shuffled(codec, &chunk[at..at + piece], Some(shuffle))
                    .map_or(piece, |(_, n)| n)
            })
            .sum()
    }

    /// Measures `codec` on a sample of `chunk` (the output is not used): its speed in
    /// original bytes per second and its ratio, bit-shuffle included where `elem` says
    /// the chunk will be shuffled for `codec`. The sample is [`DRY_RUN_PIECES`] pieces spread over
    /// the chunk, not its start: a detector frame's first rows lie outside the beam and
    /// are all zeros, which made LZ4 look 100 times better and 5 times faster than it
    /// was on the whole frame. Pieces start at an element's first byte.
    fn dry_run(&mut self, codec: Codec, chunk: &[u8], elem: Option<ElementSize>) -> (f64, f64) {
        let piece = (DRY_RUN_BYTES / DRY_RUN_PIECES).min(chunk.len());
        let shuffle = elem
            .and_then(|e| self.unshuffles.for_codec(codec, e))
            .map(|s| self.preferred(s));
        let align = shuffle.map_or(1, |s| s.elem().bytes());
        // Contexts and scratch exist before the clock starts: their set-up is paid once,
        // not per chunk (it made zstd look 4x slower than it is).
        self.prepare(codec, piece);
        if shuffle.is_some() {
            self.prepare_shuffle(piece);
        }
        let (mut secs, mut raw, mut out) = (0.0f64, 0usize, 0usize);
        for at in sample_pieces(chunk.len(), DRY_RUN_PIECES, piece, align) {
            let started = Instant::now();
            let n = self
                .encode_shuffled(codec, &chunk[at..at + piece], shuffle)
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

    /// [`Self::encode`] of `input`, put through `shuffle` first if given.
    fn encode_shuffled(
        &mut self,
        codec: Codec,
        input: &[u8],
        shuffle: Option<Shuffle>,
    ) -> Option<(Compression, usize)> {
        let Some(shuffle) = shuffle else {
            return self.encode(codec, input);
        };
        self.prepare_shuffle(input.len());
        // Taken out for the call and put back: `encode` borrows the compressor.
        let mut shuffled = std::mem::take(&mut self.shuffled);
        let bytes = &mut shuffled[..input.len()];
        shuffle.apply(input, bytes);
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

/// Where up to `pieces` pieces of `piece` bytes of a `len`-byte chunk start: spread over
/// it, each at a multiple of `align` (an element's first byte). Only as many as fit side
/// by side: on a chunk shorter than all of them, the rest would measure the same bytes
/// again (a chunk no longer than one piece is one piece, itself).
fn sample_pieces(
    len: usize,
    pieces: usize,
    piece: usize,
    align: usize,
) -> impl Iterator<Item = usize> {
    debug_assert!(piece > 0 && piece <= len && align > 0 && pieces > 0);
    let pieces = pieces.min(len / piece.max(1)).max(1);
    let step = len / pieces;
    (0..pieces).map(move |k| {
        let at = (k * step).min(len - piece);
        at - at % align
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_pieces_lie_in_the_chunk_aligned_and_never_twice() {
        // (len, pieces, piece, align): room for all, for some, for one; a chunk that is
        // one piece; odd lengths.
        for (len, pieces, piece, align) in [
            (1 << 20, 4, 128 << 10, 2),
            (300 << 10, 4, 128 << 10, 2),
            (200_000, 2, 200_000, 4),
            (200_001, 4, 131_072, 8),
            (7, 4, 7, 1),
        ] {
            let at: Vec<usize> = sample_pieces(len, pieces, piece, align).collect();
            let fit = (len / piece).clamp(1, pieces);
            assert_eq!(at.len(), fit, "{len} {pieces} {piece}");
            for (k, &a) in at.iter().enumerate() {
                assert!(a + piece <= len && a % align == 0, "{len}: {at:?}");
                if k > 0 {
                    assert!(a >= at[k - 1] + piece, "overlap, {len}: {at:?}");
                }
            }
        }
    }
    use crate::codec::tests::poisson_frame;

    #[test]
    fn auto_dry_runs_measure_the_bytes_that_will_be_sent_shuffle_included() {
        let frame = poisson_frame(1280, 216, 1000.0);
        let mut c = Compressor::new(CompressMode::Auto).with_shuffle(Unshuffles::BitsAndBytes);
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
