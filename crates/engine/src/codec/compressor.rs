//! Compression of one thread's chunks, and `auto`'s dry runs.

use super::{CompressMode, SharedAuto};
use sluice_session::auto::{ChunkKey, Codec, CANDIDATES};
use sluice_wire::Compression;
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
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor")
            .field("mode", &self.mode)
            .field("auto", &self.auto)
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
        }
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
        debug_assert!(raw_len <= chunk.len());
        let raw = Compressed {
            compression: Compression::None,
            wire_len: raw_len,
        };
        let codec = match self.mode {
            CompressMode::Auto => {
                let pick = self.auto.pick();
                self.epoch = pick.epoch;
                if let Some(i) = pick.dry.filter(|_| raw_len > 0) {
                    let (speed, ratio) = self.dry_run(CANDIDATES[i], &chunk[..raw_len]);
                    self.auto.observe_speed(i, speed, ratio);
                }
                CANDIDATES[pick.codec]
            }
            _ => self.pick_for_mode(),
        };
        if codec == Codec::Raw || raw_len == 0 {
            return raw;
        }
        let Some((compression, n)) = self.encode(codec, &chunk[..raw_len]) else {
            return raw;
        };
        if n >= raw_len {
            return raw; // did not shrink: send the original bytes
        }
        chunk[..n].copy_from_slice(&self.scratch[..n]);
        Compressed {
            compression,
            wire_len: n,
        }
    }

    /// Measures `codec` on a sample of `chunk` (the output is not used): its speed in
    /// original bytes per second and its ratio. The sample is [`DRY_RUN_PIECES`] pieces
    /// spread over the chunk, not its start: a detector frame's first rows lie outside
    /// the beam and are all zeros, which made LZ4 look 100 times better and 5 times
    /// faster than it was on the whole frame.
    fn dry_run(&mut self, codec: Codec, chunk: &[u8]) -> (f64, f64) {
        let piece = (DRY_RUN_BYTES / DRY_RUN_PIECES).min(chunk.len());
        let step = chunk.len() / DRY_RUN_PIECES;
        // Contexts and scratch exist before the clock starts: their set-up is paid once,
        // not per chunk (it made zstd look 4x slower than it is).
        self.prepare(codec, piece);
        let (mut secs, mut raw, mut out) = (0.0f64, 0usize, 0usize);
        for k in 0..DRY_RUN_PIECES {
            let at = (k * step).min(chunk.len() - piece);
            let started = Instant::now();
            let n = self
                .encode(codec, &chunk[at..at + piece])
                .map_or(piece, |(_, n)| n);
            secs += started.elapsed().as_secs_f64();
            raw += piece;
            out += n.min(piece);
        }
        (raw as f64 / secs.max(1e-9), out as f64 / raw.max(1) as f64)
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
