//! Every frame of protocol v1, and [`Frame`], the sum of them.
//!
//! Each frame type is a struct implementing [`Codec`]; its `encode` writes the common header
//! and the body, its `decode` expects that type and consumes exactly one frame.
//! [`Frame::decode`] accepts any type.

mod delegate;
mod flow;
mod handshake;
mod manifest;
mod session;

pub use delegate::{Delegate, DELEGATE_TLS};
pub use flow::{
    ChunkAck, ChunkNack, Close, CloseAck, CloseReason, ErrorFrame, FileDone, FileFailed,
};
pub use handshake::{AuthOk, AuthProof, Capabilities, Hello, Welcome};
pub use manifest::{
    ChunkSet, FileEntry, FileKind, Have, HaveState, Manifest, ManifestBatch, ManifestEnd,
    SkipReason,
};
pub use session::{
    Accept, Addresses, Compression, Direction, Join, Joined, Open, OpenOptions, OptionBits,
    StreamAddress,
};

use crate::chunk::Chunk;
use crate::codec::{encode_frame, split_frame, Codec, FrameType, Reader};
use crate::error::DecodeError;
use crate::limits::MAX_CHUNK_BYTES;

/// The body of a frame type with no flags (all but `Chunk`).
pub(crate) trait Body: Sized {
    /// The type byte.
    const TYPE: FrameType;
    /// Whether later versions may append fields that this version ignores.
    const EXTENSIBLE: bool = false;
    /// Appends the body.
    fn encode_body(&self, out: &mut Vec<u8>);
    /// Reads the body's fields.
    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

/// Decodes a whole body of `T`, rejecting trailing bytes unless `T` is extensible.
pub(crate) fn decode_body<T: Body>(body: &[u8]) -> Result<T, DecodeError> {
    let mut r = Reader::new(body, T::TYPE.name());
    let v = T::decode_body(&mut r)?;
    if !T::EXTENSIBLE {
        r.finish()?;
    }
    Ok(v)
}

macro_rules! body_codec {
    ($($t:ty),* $(,)?) => {$(
        impl Codec for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                encode_frame(out, <$t as Body>::TYPE, 0, |o| self.encode_body(o));
            }

            fn decode(buf: &[u8]) -> Result<(Self, usize), DecodeError> {
                let (header, body, consumed) = split_frame(buf)?;
                if header.frame_type != <$t as Body>::TYPE {
                    return Err(DecodeError::UnexpectedFrameType {
                        expected: <$t as Body>::TYPE.name(),
                        found: header.frame_type.name(),
                    });
                }
                Ok((decode_body::<$t>(body)?, consumed))
            }
        }
    )*};
}

body_codec!(
    Hello,
    Welcome,
    AuthProof,
    AuthOk,
    Open,
    Accept,
    Addresses,
    Delegate,
    Join,
    Joined,
    Manifest,
    ManifestEnd,
    Have,
    ChunkAck,
    ChunkNack,
    FileDone,
    FileFailed,
    ErrorFrame,
    Close,
    CloseAck,
);

/// Any frame of protocol v1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Welcome`].
    Welcome(Welcome),
    /// See [`AuthProof`].
    AuthProof(AuthProof),
    /// See [`AuthOk`].
    AuthOk(AuthOk),
    /// See [`Open`].
    Open(Open),
    /// See [`Accept`].
    Accept(Accept),
    /// See [`Addresses`].
    Addresses(Addresses),
    /// See [`Delegate`].
    Delegate(Delegate),
    /// See [`Join`].
    Join(Join),
    /// See [`Joined`].
    Joined(Joined),
    /// A chunk header and its segment table; `wire_len` payload bytes follow on the wire.
    Chunk(Chunk),
    /// See [`Manifest`].
    Manifest(Manifest),
    /// See [`ManifestEnd`].
    ManifestEnd(ManifestEnd),
    /// See [`Have`].
    Have(Have),
    /// See [`ChunkAck`].
    ChunkAck(ChunkAck),
    /// See [`ChunkNack`].
    ChunkNack(ChunkNack),
    /// See [`FileDone`].
    FileDone(FileDone),
    /// See [`FileFailed`].
    FileFailed(FileFailed),
    /// See [`ErrorFrame`].
    Error(ErrorFrame),
    /// See [`Close`].
    Close(Close),
    /// See [`CloseAck`].
    CloseAck(CloseAck),
}

impl Frame {
    /// The frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::Welcome(_) => FrameType::Welcome,
            Frame::AuthProof(_) => FrameType::AuthProof,
            Frame::AuthOk(_) => FrameType::AuthOk,
            Frame::Open(_) => FrameType::Open,
            Frame::Accept(_) => FrameType::Accept,
            Frame::Addresses(_) => FrameType::Addresses,
            Frame::Delegate(_) => FrameType::Delegate,
            Frame::Join(_) => FrameType::Join,
            Frame::Joined(_) => FrameType::Joined,
            Frame::Chunk(_) => FrameType::Chunk,
            Frame::Manifest(_) => FrameType::Manifest,
            Frame::ManifestEnd(_) => FrameType::ManifestEnd,
            Frame::Have(_) => FrameType::Have,
            Frame::ChunkAck(_) => FrameType::ChunkAck,
            Frame::ChunkNack(_) => FrameType::ChunkNack,
            Frame::FileDone(_) => FrameType::FileDone,
            Frame::FileFailed(_) => FrameType::FileFailed,
            Frame::Error(_) => FrameType::Error,
            Frame::Close(_) => FrameType::Close,
            Frame::CloseAck(_) => FrameType::CloseAck,
        }
    }

    /// Decodes one frame of any type, with chunks limited to `max_chunk_bytes` (the
    /// session's chunk size once it is known; at most [`MAX_CHUNK_BYTES`]).
    ///
    /// For a chunk, the bytes consumed end at its segment table: its payload is not read.
    ///
    /// # Errors
    /// As [`Codec::decode`].
    pub fn decode_limited(buf: &[u8], max_chunk_bytes: u32) -> Result<(Frame, usize), DecodeError> {
        let (header, body, consumed) = split_frame(buf)?;
        let frame = match header.frame_type {
            FrameType::Hello => Frame::Hello(decode_body(body)?),
            FrameType::Welcome => Frame::Welcome(decode_body(body)?),
            FrameType::AuthProof => Frame::AuthProof(decode_body(body)?),
            FrameType::AuthOk => Frame::AuthOk(decode_body(body)?),
            FrameType::Open => Frame::Open(decode_body(body)?),
            FrameType::Accept => Frame::Accept(decode_body(body)?),
            FrameType::Addresses => Frame::Addresses(decode_body(body)?),
            FrameType::Delegate => Frame::Delegate(decode_body(body)?),
            FrameType::Join => Frame::Join(decode_body(body)?),
            FrameType::Joined => Frame::Joined(decode_body(body)?),
            FrameType::Chunk => Frame::Chunk(Chunk::decode_body(header, body, max_chunk_bytes)?),
            FrameType::Manifest => Frame::Manifest(decode_body(body)?),
            FrameType::ManifestEnd => Frame::ManifestEnd(decode_body(body)?),
            FrameType::Have => Frame::Have(decode_body(body)?),
            FrameType::ChunkAck => Frame::ChunkAck(decode_body(body)?),
            FrameType::ChunkNack => Frame::ChunkNack(decode_body(body)?),
            FrameType::FileDone => Frame::FileDone(decode_body(body)?),
            FrameType::FileFailed => Frame::FileFailed(decode_body(body)?),
            FrameType::Error => Frame::Error(decode_body(body)?),
            FrameType::Close => Frame::Close(decode_body(body)?),
            FrameType::CloseAck => Frame::CloseAck(decode_body(body)?),
        };
        Ok((frame, consumed))
    }
}

impl Codec for Frame {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Hello(f) => f.encode(out),
            Frame::Welcome(f) => f.encode(out),
            Frame::AuthProof(f) => f.encode(out),
            Frame::AuthOk(f) => f.encode(out),
            Frame::Open(f) => f.encode(out),
            Frame::Accept(f) => f.encode(out),
            Frame::Addresses(f) => f.encode(out),
            Frame::Delegate(f) => f.encode(out),
            Frame::Join(f) => f.encode(out),
            Frame::Joined(f) => f.encode(out),
            Frame::Chunk(f) => f.encode(out),
            Frame::Manifest(f) => f.encode(out),
            Frame::ManifestEnd(f) => f.encode(out),
            Frame::Have(f) => f.encode(out),
            Frame::ChunkAck(f) => f.encode(out),
            Frame::ChunkNack(f) => f.encode(out),
            Frame::FileDone(f) => f.encode(out),
            Frame::FileFailed(f) => f.encode(out),
            Frame::Error(f) => f.encode(out),
            Frame::Close(f) => f.encode(out),
            Frame::CloseAck(f) => f.encode(out),
        }
    }

    fn decode(buf: &[u8]) -> Result<(Frame, usize), DecodeError> {
        Frame::decode_limited(buf, MAX_CHUNK_BYTES)
    }
}

macro_rules! frame_from {
    ($($t:ident),*) => {$(
        impl From<$t> for Frame {
            fn from(f: $t) -> Frame {
                Frame::$t(f)
            }
        }
    )*};
}
frame_from!(
    Hello,
    Welcome,
    AuthProof,
    AuthOk,
    Open,
    Accept,
    Addresses,
    Delegate,
    Join,
    Joined,
    Chunk,
    Manifest,
    ManifestEnd,
    Have,
    ChunkAck,
    ChunkNack,
    FileDone,
    FileFailed,
    Close,
    CloseAck
);

impl From<ErrorFrame> for Frame {
    fn from(f: ErrorFrame) -> Frame {
        Frame::Error(f)
    }
}
