//! Chunk compression (seed 001): LZ4 or zstd per chunk, chosen by the user or by an
//! adaptive controller that compresses only while the link, not the CPU, is the
//! bottleneck.
//!
//! Each reading thread owns one [`Compressor`] and each receiving thread one
//! [`Decompressor`]; their scratch buffers are allocated once, by the thread itself, so
//! the kernel's first-touch policy puts them on the thread's (pinned) node. A chunk that
//! does not shrink travels raw. The chunk checksum always covers the original bytes.

use sluice_wire::Compression;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What `--compress` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressMode {
    /// Never compress.
    #[default]
    None,
    /// LZ4 block format on every chunk.
    Lz4,
    /// zstd at this level on every chunk.
    Zstd(i32),
    /// Measure, and compress (LZ4 or zstd level 1) only while it makes chunks arrive sooner.
    Auto,
}

impl FromStr for CompressMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let expected = "expected none, lz4, zstd, zstd:LEVEL (1-19) or auto";
        match s {
            "none" => Ok(CompressMode::None),
            "lz4" => Ok(CompressMode::Lz4),
            "zstd" => Ok(CompressMode::Zstd(3)),
            "auto" => Ok(CompressMode::Auto),
            _ => match s.strip_prefix("zstd:").map(str::parse::<i32>) {
                Some(Ok(level)) if (1..=19).contains(&level) => Ok(CompressMode::Zstd(level)),
                _ => Err(format!("unknown compression {s:?}: {expected}")),
            },
        }
    }
}

impl fmt::Display for CompressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompressMode::None => f.write_str("none"),
            CompressMode::Lz4 => f.write_str("lz4"),
            CompressMode::Zstd(l) => write!(f, "zstd:{l}"),
            CompressMode::Auto => f.write_str("auto"),
        }
    }
}

/// The codecs the adaptive controller chooses between.
const CANDIDATES: [Codec; 3] = [Codec::Raw, Codec::Lz4, Codec::Zstd(1)];

/// One concrete way to send a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Raw,
    Lz4,
    Zstd(i32),
}

/// Running estimates for one codec (exponentially weighted).
#[derive(Debug, Clone, Copy, Default)]
struct Estimate {
    /// CPU nanoseconds per original byte to compress.
    cpu_ns_per_byte: f64,
    /// Wire bytes per original byte.
    ratio: f64,
    samples: u32,
}

impl Estimate {
    fn update(&mut self, cpu_ns_per_byte: f64, ratio: f64) {
        const ALPHA: f64 = 0.25;
        if self.samples == 0 {
            self.cpu_ns_per_byte = cpu_ns_per_byte;
            self.ratio = ratio;
        } else {
            self.cpu_ns_per_byte += ALPHA * (cpu_ns_per_byte - self.cpu_ns_per_byte);
            self.ratio += ALPHA * (ratio - self.ratio);
        }
        self.samples = self.samples.saturating_add(1);
    }
}

/// Chunks between probes of a codec the controller is not using.
const PROBE_EVERY: u32 = 16;

/// The adaptive choice, apart from the codecs so it can be tested with chosen costs:
/// per original byte, raw costs the link's time; a codec costs its CPU time plus the
/// link's time for its (smaller) output. The cheapest wins, by a clear margin.
#[derive(Debug, Clone, Default)]
pub struct AutoController {
    estimates: [Estimate; 3],
    /// Nanoseconds per wire byte spent in socket writes (the link's cost).
    send_ns_per_byte: f64,
    send_samples: u32,
    chunks: u32,
    chosen: usize,
}

impl AutoController {
    /// Expected nanoseconds per original byte for candidate `i`.
    fn cost(&self, i: usize) -> f64 {
        let e = &self.estimates[i];
        e.cpu_ns_per_byte + e.ratio * self.send_ns_per_byte
    }

    /// The candidate for the next chunk: each learned once, then the cheapest, with
    /// every other candidate probed every [`PROBE_EVERY`] chunks so estimates stay fresh.
    fn next(&mut self) -> usize {
        self.chunks = self.chunks.wrapping_add(1);
        if let Some(i) = self.estimates.iter().position(|e| e.samples == 0) {
            return i;
        }
        if self.chunks % PROBE_EVERY == 0 {
            let probe = (self.chunks / PROBE_EVERY) as usize % CANDIDATES.len();
            if probe != self.chosen {
                return probe;
            }
        }
        let best = (0..CANDIDATES.len())
            .min_by(|&a, &b| self.cost(a).total_cmp(&self.cost(b)))
            .unwrap_or(0);
        // Switch only for a clear gain (5 %), so noise does not flap the choice.
        if best != self.chosen && self.cost(best) < 0.95 * self.cost(self.chosen) {
            self.chosen = best;
        }
        self.chosen
    }

    /// Candidate `i` took `cpu_ns_per_byte` and produced `ratio` wire bytes per byte.
    fn observe_compress(&mut self, i: usize, cpu_ns_per_byte: f64, ratio: f64) {
        self.estimates[i].update(cpu_ns_per_byte, ratio);
    }

    /// A socket write cost `ns_per_byte` per wire byte.
    fn observe_send(&mut self, ns_per_byte: f64) {
        const ALPHA: f64 = 0.25;
        if self.send_samples == 0 {
            self.send_ns_per_byte = ns_per_byte;
        } else {
            self.send_ns_per_byte += ALPHA * (ns_per_byte - self.send_ns_per_byte);
        }
        self.send_samples = self.send_samples.saturating_add(1);
    }
}

/// Compresses chunks for one thread.
pub struct Compressor {
    mode: CompressMode,
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    zstd_level: i32,
    auto: AutoController,
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
    /// A compressor for `mode`; its scratch buffer grows once to the largest chunk.
    pub fn new(mode: CompressMode) -> Compressor {
        Compressor {
            mode,
            scratch: Vec::new(),
            zstd: None,
            zstd_level: 0,
            auto: AutoController::default(),
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
            CompressMode::Auto => CANDIDATES[self.auto.chosen],
        }
    }

    /// Compresses `chunk[..raw_len]` in place when that shrinks it: the encoded bytes
    /// replace the chunk's prefix (`chunk` is the buffer slot, at least `raw_len` long).
    pub fn compress(&mut self, chunk: &mut [u8], raw_len: usize) -> Compressed {
        let raw = Compressed {
            compression: Compression::None,
            wire_len: raw_len,
        };
        let codec = match self.mode {
            CompressMode::Auto => CANDIDATES[self.auto.next()],
            _ => self.pick_for_mode(),
        };
        if codec == Codec::Raw || raw_len == 0 {
            self.auto.observe_compress(0, 0.0, 1.0);
            return raw;
        }
        let started = std::time::Instant::now();
        let bound = lz4_flex::block::get_maximum_output_size(raw_len)
            .max(zstd::zstd_safe::compress_bound(raw_len));
        if self.scratch.len() < bound {
            self.scratch.resize(bound, 0);
        }
        let input = &chunk[..raw_len];
        let (compression, n) = match codec {
            Codec::Lz4 => match lz4_flex::block::compress_into(input, &mut self.scratch) {
                Ok(n) => (Compression::Lz4, n),
                Err(_) => return raw,
            },
            Codec::Zstd(level) => {
                if self.zstd.is_none() || self.zstd_level != level {
                    self.zstd = zstd::bulk::Compressor::new(level).ok();
                    self.zstd_level = level;
                }
                let Some(z) = self.zstd.as_mut() else {
                    return raw;
                };
                match z.compress_to_buffer(input, &mut self.scratch) {
                    Ok(n) => (Compression::Zstd, n),
                    Err(_) => return raw,
                }
            }
            Codec::Raw => return raw,
        };
        let ns = started.elapsed().as_nanos() as f64;
        let i = CANDIDATES
            .iter()
            .position(|c| std::mem::discriminant(c) == std::mem::discriminant(&codec))
            .unwrap_or(0);
        self.auto
            .observe_compress(i, ns / raw_len as f64, n as f64 / raw_len as f64);
        if n >= raw_len {
            return raw; // did not shrink: send the original bytes
        }
        chunk[..n].copy_from_slice(&self.scratch[..n]);
        Compressed {
            compression,
            wire_len: n,
        }
    }

    /// Records how long a socket write of `wire_bytes` took: the link's cost per byte.
    pub fn record_send(&mut self, wire_bytes: usize, elapsed: Duration) {
        if self.mode != CompressMode::Auto || wire_bytes == 0 {
            return;
        }
        self.auto
            .observe_send(elapsed.as_nanos() as f64 / wire_bytes as f64);
    }
}

/// Decompresses chunks for one thread.
pub struct Decompressor {
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decompressor").finish_non_exhaustive()
    }
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor::new()
    }
}

impl Decompressor {
    /// A decompressor; its scratch buffer grows once to the largest chunk.
    pub fn new() -> Decompressor {
        Decompressor {
            scratch: Vec::new(),
            zstd: None,
        }
    }

    /// Replaces the `wire_len` encoded bytes at the start of `chunk` by the `raw_len`
    /// original bytes. A payload that does not decode to exactly `raw_len` bytes is an
    /// error: the chunk is corrupt and must never be written.
    ///
    /// # Errors
    /// The payload is not a valid `compression` encoding of `raw_len` bytes.
    pub fn decompress(
        &mut self,
        compression: Compression,
        chunk: &mut [u8],
        wire_len: usize,
        raw_len: usize,
    ) -> Result<(), String> {
        if compression == Compression::None {
            return Ok(());
        }
        if raw_len > chunk.len() {
            return Err(format!(
                "{raw_len} original bytes exceed the {}-byte slot",
                chunk.len()
            ));
        }
        if self.scratch.len() < raw_len {
            self.scratch.resize(raw_len, 0);
        }
        let input = &chunk[..wire_len];
        let out = &mut self.scratch[..raw_len];
        let n = match compression {
            Compression::Lz4 => {
                lz4_flex::block::decompress_into(input, out).map_err(|e| format!("lz4: {e}"))?
            }
            Compression::Zstd => {
                if self.zstd.is_none() {
                    self.zstd = zstd::bulk::Decompressor::new().ok();
                }
                let z = self
                    .zstd
                    .as_mut()
                    .ok_or("zstd: cannot create a decompression context")?;
                z.decompress_to_buffer(input, out)
                    .map_err(|e| format!("zstd: {e}"))?
            }
            Compression::None => raw_len,
        };
        if n != raw_len {
            return Err(format!("decoded {n} bytes, the header says {raw_len}"));
        }
        chunk[..raw_len].copy_from_slice(&self.scratch[..raw_len]);
        Ok(())
    }
}

#[cfg(test)]
// Test data generators truncate on purpose.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    fn compressible(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i / 7) % 13) as u8).collect()
    }

    fn random(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn round_trip(mode: CompressMode, data: &[u8]) -> Compressed {
        let mut slot = data.to_vec();
        let mut c = Compressor::new(mode);
        let out = c.compress(&mut slot, data.len());
        let mut d = Decompressor::new();
        d.decompress(out.compression, &mut slot, out.wire_len, data.len())
            .unwrap();
        assert_eq!(&slot[..data.len()], data, "{mode} round trip");
        out
    }

    #[test]
    fn every_codec_round_trips_compressible_random_and_mixed_data() {
        let mut mixed = compressible(1 << 19);
        mixed.extend(random(1 << 19));
        for mode in [
            CompressMode::None,
            CompressMode::Lz4,
            CompressMode::Zstd(1),
            CompressMode::Zstd(9),
            CompressMode::Auto,
        ] {
            for data in [
                compressible(1 << 20),
                random(1 << 20),
                mixed.clone(),
                vec![],
                vec![7],
            ] {
                round_trip(mode, &data);
            }
        }
    }

    #[test]
    fn a_chunk_that_does_not_shrink_travels_raw() {
        let out = round_trip(CompressMode::Lz4, &random(1 << 20));
        assert_eq!(out.compression, Compression::None);
        assert_eq!(out.wire_len, 1 << 20);
        let out = round_trip(CompressMode::Lz4, &compressible(1 << 20));
        assert_eq!(out.compression, Compression::Lz4);
        assert!(out.wire_len < 1 << 18);
    }

    #[test]
    fn a_corrupt_compressed_chunk_is_an_error() {
        let data = compressible(1 << 16);
        let mut slot = data.clone();
        let out = Compressor::new(CompressMode::Lz4).compress(&mut slot, data.len());
        slot[out.wire_len / 2] ^= 0xff;
        slot[1] ^= 0x55;
        let mut d = Decompressor::new();
        let r = d.decompress(out.compression, &mut slot, out.wire_len, data.len());
        // Either the decoder refuses it, or it decodes to other bytes, which the chunk
        // checksum then refuses: it never silently yields the original length of garbage
        // without one of the two checks failing.
        if r.is_ok() {
            assert_ne!(&slot[..data.len()], &data[..]);
        }
        let mut zslot = data.clone();
        let zout = Compressor::new(CompressMode::Zstd(3)).compress(&mut zslot, data.len());
        zslot[zout.wire_len - 3] ^= 0xff;
        assert!(d
            .decompress(zout.compression, &mut zslot, zout.wire_len, data.len())
            .is_err());
    }

    /// Drives the controller with chosen costs (no clocks): `cpu` ns/byte and `ratio`
    /// per candidate, `link` ns per wire byte; returns the settled choice.
    fn settle(cpu: [f64; 3], ratio: [f64; 3], link: f64) -> Codec {
        let mut a = AutoController::default();
        for _ in 0..200 {
            let i = a.next();
            a.observe_compress(i, cpu[i], ratio[i]);
            a.observe_send(link);
        }
        CANDIDATES[a.chosen]
    }

    #[test]
    fn auto_compresses_only_while_the_link_is_the_bottleneck() {
        // LZ4 ~1.5 ns/byte at 2:1, zstd-1 ~4 ns/byte at 2.6:1 (one core, seed 001's data).
        let cpu = [0.0, 1.5, 4.0];
        let ratio = [1.0, 0.5, 0.38];
        // 1 Gbit/s: 8 ns per byte: compressing wins (LZ4: 1.5 + 4 < 8).
        assert_ne!(settle(cpu, ratio, 8.0), Codec::Raw);
        // Very slow link (100 Mbit/s, 80 ns/byte): the stronger codec wins.
        assert_eq!(settle(cpu, ratio, 80.0), Codec::Zstd(1));
        // Loopback (~0.3 ns/byte): the CPU is the bottleneck, send raw.
        assert_eq!(settle(cpu, ratio, 0.3), Codec::Raw);
        // Incompressible data on a slow link: nothing to gain.
        assert_eq!(settle(cpu, [1.0, 1.004, 1.001], 8.0), Codec::Raw);
    }

    #[test]
    fn auto_follows_a_change_of_link() {
        let mut a = AutoController::default();
        let (cpu, ratio) = ([0.0, 1.5, 4.0], [1.0, 0.5, 0.38]);
        for link in [8.0, 0.3] {
            for _ in 0..200 {
                let i = a.next();
                a.observe_compress(i, cpu[i], ratio[i]);
                a.observe_send(link);
            }
        }
        assert_eq!(
            CANDIDATES[a.chosen],
            Codec::Raw,
            "the link got fast: stop compressing"
        );
    }

    #[test]
    fn modes_parse_and_print() {
        for s in ["none", "lz4", "zstd:3", "zstd:19", "auto"] {
            assert_eq!(s.parse::<CompressMode>().unwrap().to_string(), s);
        }
        assert_eq!(
            "zstd".parse::<CompressMode>().unwrap(),
            CompressMode::Zstd(3)
        );
        for bad in ["gzip", "zstd:0", "zstd:x", ""] {
            assert!(bad.parse::<CompressMode>().unwrap_err().contains(bad));
        }
    }
}
