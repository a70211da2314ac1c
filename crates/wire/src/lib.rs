//! The sluice wire protocol, with no I/O at all.
//!
//! This crate is fully deterministic: it has no sockets, files, threads, clocks or
//! randomness (nonces and secrets are passed in), so every part of it can be unit-tested,
//! property-tested and fuzzed. The engine owns the sockets and feeds bytes in and out.
//! `docs/protocol.md` is the specification; this crate is its reference implementation.
//!
//! * [`Codec`]: `encode(&self, &mut Vec<u8>)` / `decode(&[u8]) -> (Self, consumed)` for
//!   every frame, with the common 6-byte header ([`FrameHeader`]) and per-type limits.
//! * [`Frame`]: any frame; [`FrameDecoder`]: frames out of a byte stream in bounded memory.
//! * [`ChunkHeader`]: the fixed 42-byte chunk header; the payload is never copied here.
//! * [`ClientHandshake`] / [`ServerHandshake`], [`ClientJoin`] / [`JoinTable`]: the
//!   handshake and join state machines.
//! * [`chunk_checksum`], [`FileDigest`], [`chunk_count`]: integrity and chunk geometry.
//! * [`RelPath`]: relative paths that cannot escape lexically.
//! * [`shuffle`]: the bit- or byte-shuffle a chunk's payload may pass through before it
//!   is compressed (`SHUFFLED`, `BYTE_SHUFFLED`), so that typed data compresses.
//!
//! ```
//! use sluice_wire::{Codec, Frame, FrameDecoder, Close, CloseReason};
//! let mut out = Vec::new();
//! Close { reason: CloseReason::Done }.encode(&mut out);
//! let (frame, used) = Frame::decode(&out)?;
//! assert_eq!(used, out.len());
//! assert_eq!(frame, Frame::Close(Close { reason: CloseReason::Done }));
//! # Ok::<(), sluice_wire::DecodeError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
mod chunk;
mod codec;
mod decoder;
mod error;
mod frame;
pub mod fuzzing;
mod handshake;
mod integrity;
mod join;
pub mod limits;
mod path;
pub mod shuffle;

pub use auth::{Token, TokenError};
pub use chunk::{Chunk, ChunkFlags, ChunkHeader, Segment};
pub use codec::{Codec, FrameHeader, FrameType};
pub use decoder::FrameDecoder;
pub use error::{DecodeError, ErrorCode, Recovery};
pub use frame::*;
pub use fuzzing::fuzz_decode_all;
pub use handshake::{
    ClientConfig, ClientHandshake, Established, HandshakeError, HandshakeStatus, ServerConfig,
    ServerHandshake, BINDING_LABEL, BOUND_ALPN, BOUND_CAPABILITIES,
};
pub use integrity::{
    chunk_checksum, chunk_checksum_parts, chunk_count, chunk_index, chunk_range,
    is_valid_chunk_bytes, ChunkChecksum, DigestError, FileDigest,
};
pub use join::{ClientJoin, JoinError, JoinTable};
pub use limits::*;
pub use path::{PathError, PathErrorKind, RelPath};
pub use shuffle::{ElementSize, Shuffle};
