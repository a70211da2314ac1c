//! Flow and control frames: `ChunkAck`, `ChunkNack`, `FileDone`, `FileFailed`, `Error`,
//! `Close`, `CloseAck`.

use super::Body;
use crate::codec::{FrameType, Put, Reader};
use crate::error::{DecodeError, ErrorCode};
use crate::limits::MAX_MESSAGE_BYTES;

fn code(r: &mut Reader<'_>, field: &'static str) -> Result<ErrorCode, DecodeError> {
    let v = r.u16(field)?;
    ErrorCode::from_u16(v).ok_or(DecodeError::InvalidValue {
        field,
        value: v.into(),
    })
}

/// `message` cut to [`MAX_MESSAGE_BYTES`] at a character boundary.
fn bounded(message: impl Into<String>) -> String {
    let mut m = message.into();
    if m.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
    }
    m
}

/// Sink → source: the chunk at (`file_id`, `offset`) was delivered: verified and written
/// (a file session), or verified and queued for the consumer (a stream); the source may
/// release what it kept of it. Body (16 bytes): `file_id u64`, `offset u64`.
///
/// Sent on the control connection, when `CHUNK_ACKS` was negotiated. A packed chunk is
/// acknowledged by its header's `file_id` (its first segment's) and offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkAck {
    /// From the chunk header.
    pub file_id: u64,
    /// From the chunk header.
    pub offset: u64,
}

impl Body for ChunkAck {
    const TYPE: FrameType = FrameType::ChunkAck;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.file_id);
        out.put_u64(self.offset);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ChunkAck {
            file_id: r.u64("ChunkAck.file_id")?,
            offset: r.u64("ChunkAck.offset")?,
        })
    }
}

/// Sink → source, on the control connection: the chunk was rejected and nothing of it was
/// written; the source sends it again (a file session: on any stream; a stream: on the
/// connection it came on, with every later record of that connection after it). Body
/// (18 bytes): `file_id u64`, `offset u64`, `reason u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkNack {
    /// From the chunk header.
    pub file_id: u64,
    /// From the chunk header.
    pub offset: u64,
    /// Usually `ChecksumMismatch` or `DecompressFailed`.
    pub reason: ErrorCode,
}

impl Body for ChunkNack {
    const TYPE: FrameType = FrameType::ChunkNack;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.file_id);
        out.put_u64(self.offset);
        out.put_u16(self.reason as u16);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ChunkNack {
            file_id: r.u64("ChunkNack.file_id")?,
            offset: r.u64("ChunkNack.offset")?,
            reason: code(r, "ChunkNack.reason")?,
        })
    }
}

/// Sink → source: the file is complete, its digest verified, and it was renamed into
/// place. Body (24 bytes): `file_id u64`, `digest [16]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDone {
    /// The file.
    pub file_id: u64,
    /// Its digest ([`crate::FileDigest`]), as the sink computed it; the source reports it.
    pub digest: [u8; 16],
}

impl Body for FileDone {
    const TYPE: FrameType = FrameType::FileDone;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.file_id);
        out.extend_from_slice(&self.digest);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(FileDone {
            file_id: r.u64("FileDone.file_id")?,
            digest: r.array("FileDone.digest")?,
        })
    }
}

/// Either way: one file failed; the session goes on with the others.
/// Body: `file_id u64`, `code u16`, `message_len u16`, `message` (UTF-8, ≤ 1024 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFailed {
    /// The file.
    pub file_id: u64,
    /// Why.
    pub code: ErrorCode,
    /// For the user.
    pub message: String,
}

impl FileFailed {
    /// A `FileFailed`, its message cut to the limit.
    pub fn new(file_id: u64, code: ErrorCode, message: impl Into<String>) -> FileFailed {
        FileFailed {
            file_id,
            code,
            message: bounded(message),
        }
    }
}

impl Body for FileFailed {
    const TYPE: FrameType = FrameType::FileFailed;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.file_id);
        out.put_u16(self.code as u16);
        out.put_str16(self.message.as_bytes());
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(FileFailed {
            file_id: r.u64("FileFailed.file_id")?,
            code: code(r, "FileFailed.code")?,
            message: r.str16(MAX_MESSAGE_BYTES, "FileFailed.message")?.to_owned(),
        })
    }
}

/// Either way: a fatal error; the sender closes the connection after sending it.
/// Body: `code u16`, `message_len u16`, `message` (UTF-8, ≤ 1024 bytes). This layout is
/// frozen across versions, so that `UnsupportedVersion` can be read by any peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// What went wrong.
    pub code: ErrorCode,
    /// For the user.
    pub message: String,
}

impl ErrorFrame {
    /// An `Error` frame, its message cut to the limit.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorFrame {
        ErrorFrame {
            code,
            message: bounded(message),
        }
    }
}

impl Body for ErrorFrame {
    const TYPE: FrameType = FrameType::Error;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u16(self.code as u16);
        out.put_str16(self.message.as_bytes());
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ErrorFrame {
            code: code(r, "Error.code")?,
            message: r.str16(MAX_MESSAGE_BYTES, "Error.message")?.to_owned(),
        })
    }
}

/// Why a side closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Everything was transferred.
    Done = 0,
    /// A user cancelled; a later `--resume` can finish the job.
    Cancelled = 1,
    /// Closing after an error already reported.
    Failed = 2,
}

/// Either way: asks for an orderly close. The peer answers `CloseAck` once everything it
/// owes is flushed. Body (1 byte): `reason u8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    /// Why.
    pub reason: CloseReason,
}

impl Body for Close {
    const TYPE: FrameType = FrameType::Close;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.push(self.reason as u8);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let reason = match r.u8("Close.reason")? {
            0 => CloseReason::Done,
            1 => CloseReason::Cancelled,
            2 => CloseReason::Failed,
            v => {
                return Err(DecodeError::InvalidValue {
                    field: "Close.reason",
                    value: v.into(),
                })
            }
        };
        Ok(Close { reason })
    }
}

/// Answers `Close`. Empty body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CloseAck;

impl Body for CloseAck {
    const TYPE: FrameType = FrameType::CloseAck;

    fn encode_body(&self, _out: &mut Vec<u8>) {}

    fn decode_body(_r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CloseAck)
    }
}
