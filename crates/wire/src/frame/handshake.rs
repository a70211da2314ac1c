//! Handshake frames: `Hello`, `Welcome`, `AuthProof`, `AuthOk`.

use super::Body;
use crate::codec::{bitflags_type, FrameType, Put, Reader};
use crate::error::DecodeError;
use crate::limits::MAGIC;

bitflags_type! {
    /// Optional features. A peer offers what it supports; `Welcome` carries the
    /// intersection. Bits this version does not know are kept in `Hello` and dropped by the
    /// intersection, so new capabilities need no new version.
    Capabilities: u64 {
        /// The sink may report what it already holds (`Have`).
        const RESUME = 1 << 0;
        /// Small files may be packed into one chunk.
        const PACKED = 1 << 1;
        /// Chunks may be LZ4-compressed.
        const COMPRESS_LZ4 = 1 << 2;
        /// Chunks may be zstd-compressed.
        const COMPRESS_ZSTD = 1 << 3;
        /// The server honours `Open`'s `DIRECT` option (`O_DIRECT` reads and writes).
        const DIRECT_IO = 1 << 4;
        /// The server follows `Accept` with `Addresses` (where each data connection
        /// should go: the NIC of the channel that will serve it).
        const ADDRESSES = 1 << 5;
        /// The sink answers every chunk it received with `ChunkAck` (delivered: written,
        /// or dropped because its file had already ended) or `ChunkNack` on the control
        /// connection, so the source can measure what arrives, not only what it sent.
        const CHUNK_ACKS = 1 << 6;
        /// The sink un-shuffles chunks flagged `SHUFFLED` (bit-shuffled before they were
        /// compressed, [`crate::shuffle`]); a source shuffles only toward a sink that
        /// offers it.
        const SHUFFLE = 1 << 7;
        /// The sink also un-shuffles chunks flagged `SHUFFLED | BYTE_SHUFFLED`
        /// (byte-shuffled, [`crate::shuffle::byteshuffle`]); a source byte-shuffles only
        /// toward a sink that offers it, and bit-shuffles otherwise.
        const BYTE_SHUFFLE = 1 << 8;
        /// The server reads a data connection's `Join` and not a byte more, so a
        /// source client may send chunks right behind its `Join` and read `Joined`
        /// later, instead of waiting a round trip for it.
        const CHUNKS_AFTER_JOIN = 1 << 9;
        /// A file session's sink ends it by itself: once `ManifestEnd` has come and
        /// every entry has its final word, it finishes the directories and sends
        /// `CloseAck` unasked, right behind the last `FileDone`; the source sends no
        /// `Close` (one round trip less at the end).
        const SINK_CLOSES = 1 << 10;
    }
}

/// Client → server, the first frame on a control connection.
///
/// Body (50 bytes in v1; later versions may append fields, which v1 ignores):
/// `magic [6] = "SLUICE"`, `version u16`, `min_version u16`, `capabilities u64`,
/// `client_nonce [32]`. The layout of the first 50 bytes is frozen across versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Newest version the client speaks.
    pub version: u16,
    /// Oldest version the client speaks (≥ 1, ≤ `version`).
    pub min_version: u16,
    /// What the client supports.
    pub capabilities: Capabilities,
    /// Fresh random bytes from the client, bound into both proofs.
    pub client_nonce: [u8; 32],
}

impl Body for Hello {
    const TYPE: FrameType = FrameType::Hello;
    const EXTENSIBLE: bool = true;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.put_u16(self.version);
        out.put_u16(self.min_version);
        out.put_u64(self.capabilities.bits());
        out.extend_from_slice(&self.client_nonce);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.array::<6>("Hello.magic")? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u16("Hello.version")?;
        let min_version = r.u16("Hello.min_version")?;
        if min_version == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Hello.min_version",
                value: 0,
            });
        }
        if min_version > version {
            return Err(DecodeError::Inconsistent {
                field: "Hello.min_version",
                reason: "greater than Hello.version",
            });
        }
        Ok(Hello {
            version,
            min_version,
            capabilities: Capabilities::from_bits_retain(r.u64("Hello.capabilities")?),
            client_nonce: r.array("Hello.client_nonce")?,
        })
    }
}

/// Server → client, answers an acceptable `Hello`.
///
/// Body (43 bytes in v1, extensible like `Hello`): `version u16`, `capabilities u64`,
/// `server_nonce [32]`, `auth_required u8 (0|1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The version chosen: the newest both speak.
    pub version: u16,
    /// Capabilities both support (a subset of the `Hello`'s).
    pub capabilities: Capabilities,
    /// Fresh random bytes from the server, bound into both proofs.
    pub server_nonce: [u8; 32],
    /// Whether the client must prove it knows the token (`AuthProof`).
    pub auth_required: bool,
}

impl Body for Welcome {
    const TYPE: FrameType = FrameType::Welcome;
    const EXTENSIBLE: bool = true;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u16(self.version);
        out.put_u64(self.capabilities.bits());
        out.extend_from_slice(&self.server_nonce);
        out.push(u8::from(self.auth_required));
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let version = r.u16("Welcome.version")?;
        if version == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Welcome.version",
                value: 0,
            });
        }
        Ok(Welcome {
            version,
            capabilities: Capabilities::from_bits_retain(r.u64("Welcome.capabilities")?),
            server_nonce: r.array("Welcome.server_nonce")?,
            auth_required: r.bool("Welcome.auth_required")?,
        })
    }
}

/// Client → server: `mac = HMAC-SHA256(token, "sluice-v1 client" ‖ client_nonce ‖
/// server_nonce)`. Body: `mac [32]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthProof {
    /// See [`crate::auth::client_proof`].
    pub mac: [u8; 32],
}

impl Body for AuthProof {
    const TYPE: FrameType = FrameType::AuthProof;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.mac);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(AuthProof {
            mac: r.array("AuthProof.mac")?,
        })
    }
}

/// Server → client: `mac = HMAC-SHA256(token, "sluice-v1 server" ‖ client_nonce ‖
/// server_nonce)`, so authentication is mutual. Body: `mac [32]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthOk {
    /// See [`crate::auth::server_proof`].
    pub mac: [u8; 32],
}

impl Body for AuthOk {
    const TYPE: FrameType = FrameType::AuthOk;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.mac);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(AuthOk {
            mac: r.array("AuthOk.mac")?,
        })
    }
}
