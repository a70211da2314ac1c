//! Chunk compression (seed 001): LZ4 or zstd per chunk, chosen by the user or by the
//! `auto` controller that compresses only while it makes the transfer faster.
//!
//! Each compressing thread owns one [`Compressor`] and each decompressing thread one
//! [`Decompressor`]; their scratch buffers are allocated once, by the thread itself, so
//! the kernel's first-touch policy puts them on the thread's (pinned) node. A chunk that
//! does not shrink travels raw. The chunk checksum always covers the original bytes.
//!
//! * [`plan`]: every codec decision of a transfer in one place ([`CodecPlan::decide`]):
//!   the mode toward the peer, the compress/decompress stage threads, `auto`'s counts.
//! * [`SharedAuto`]: the session's `auto` controller (the pure
//!   [`sluice_session::auto::Auto`]) behind a lock, fed with this process's clocks.
//! * [`Compressor`] (with `auto`'s dry runs) and [`Decompressor`]: the codecs proper.

mod compressor;
mod decompressor;
pub mod plan;
mod shared;

pub use compressor::{Compressed, Compressor};
pub use decompressor::Decompressor;
pub use plan::{CodecInputs, CodecPlan, CodecSite, Planner};
pub use shared::SharedAuto;
pub use sluice_session::auto::ChunkKey;

use sluice_session::auto::Codec;
use sluice_wire::{Capabilities, ElementSize, Shuffle};
use std::fmt;
use std::str::FromStr;

/// The shuffles a peer undoes, from the session's capabilities: what a sender may put
/// typed chunks through before it compresses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unshuffles {
    /// None (`SHUFFLE` not negotiated, or this end does not compress): chunks are
    /// compressed as they are.
    #[default]
    Nothing,
    /// The bit-shuffle only (`SHUFFLE`).
    Bits,
    /// The bit-shuffle and the byte-shuffle (`SHUFFLE` and `BYTE_SHUFFLE`).
    BitsAndBytes,
}

impl Unshuffles {
    /// What a peer with the negotiated `caps` un-shuffles.
    #[must_use]
    pub fn of(caps: Capabilities) -> Unshuffles {
        if !caps.contains(Capabilities::SHUFFLE) {
            Unshuffles::Nothing
        } else if caps.contains(Capabilities::BYTE_SHUFFLE) {
            Unshuffles::BitsAndBytes
        } else {
            Unshuffles::Bits
        }
    }

    /// Whether typed chunks are shuffled at all.
    #[must_use]
    pub fn any(self) -> bool {
        self != Unshuffles::Nothing
    }

    /// The first choice of shuffle for a chunk of `elem`-byte elements that `codec`
    /// compresses: bytes for zstd where the peer undoes them (its entropy coder takes
    /// the noisy low bytes and the near-constant high bytes each at its own rate: 1.78
    /// against 1.74 with bits on the bench's tomography frames), bits otherwise (LZ4
    /// finds only runs, which the constant high bit-planes make). Where it is the
    /// bytes, the compressor's trial may keep the bits instead (`Compressor::shuffle_for`).
    #[must_use]
    pub fn for_codec(self, codec: Codec, elem: ElementSize) -> Option<Shuffle> {
        match (self, codec) {
            (Unshuffles::Nothing, _) | (_, Codec::Raw) => None,
            (Unshuffles::BitsAndBytes, Codec::Zstd(_)) => Some(Shuffle::Bytes(elem)),
            _ => Some(Shuffle::Bits(elem)),
        }
    }
}

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

impl CompressMode {
    /// The mode a session sending to a peer actually uses: `auto` sends raw to a peer on
    /// this very host, where the bytes cross no wire, only memory that the same CPUs
    /// copy: a codec spends more CPU on a byte than moving it costs, so it can never win,
    /// and trying costs goodput (epochs on a loopback transfer measure within ±30 % of
    /// each other, so a trial could look good by chance). An explicit codec is kept.
    ///
    /// `SLUICE_AUTO_ON_LOOPBACK=1` (test only: the integration tests run over loopback)
    /// keeps `auto` measuring there.
    pub fn toward(self, peer_is_this_host: bool) -> CompressMode {
        let tested = std::env::var_os("SLUICE_AUTO_ON_LOOPBACK").is_some_and(|v| v == "1");
        match self {
            CompressMode::Auto if peer_is_this_host && !tested => {
                tracing::info!("--compress auto: the peer is this host (loopback): sending raw");
                CompressMode::None
            }
            other => other,
        }
    }
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

#[cfg(test)]
mod tests;
