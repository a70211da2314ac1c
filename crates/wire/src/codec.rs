//! The [`Codec`] trait, the common frame header, and the byte-level readers and writers.
//!
//! Every frame starts with the same 6-byte header, little-endian:
//!
//! ```text
//! offset size field
//!      0    1 type      FrameType
//!      1    1 flags     per type; 0 for every type but Chunk in v1
//!      2    4 body_len  bytes of body that follow (a chunk's payload is NOT counted)
//! ```
//!
//! The header alone is enough to reject a frame whose type, flags or body length are out of
//! range, before any of its body has been buffered.

use crate::error::DecodeError;
use crate::limits::{
    ADDRESS_ENTRY_MAX_BYTES, CHUNK_FIXED_BODY_BYTES, DELEGATE_FIXED_BODY_BYTES, FRAME_HEADER_BYTES,
    MAX_CONTROL_BODY_BYTES, MAX_HAVE_BITMAP_BYTES, MAX_HELLO_BODY_BYTES, MAX_MESSAGE_BYTES,
    MAX_PACK_SEGMENTS, MAX_PATH_BYTES, MAX_STREAMS, SEGMENT_BYTES,
};

/// A value with a wire encoding (after quinn-proto's `coding::Codec`).
///
/// `encode` appends to a caller-owned buffer and cannot fail: encoding a value that breaks
/// a limit yields bytes that the peer's `decode` rejects, so build frames through the
/// checked constructors (`RelPath::parse`, `Manifest::try_push`, ...).
pub trait Codec: Sized {
    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Decodes one value from the front of `buf`; returns it and the bytes consumed.
    ///
    /// # Errors
    /// [`DecodeError::Incomplete`] if `buf` is a prefix of a valid encoding; any other
    /// variant if the bytes can never be valid.
    fn decode(buf: &[u8]) -> Result<(Self, usize), DecodeError>;
}

macro_rules! frame_types {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $min:expr, $max:expr; )*) => {
        /// The type byte of a frame. Numbering is frozen across versions.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum FrameType {
            $( $(#[$doc])* $name = $value, )*
        }

        impl FrameType {
            /// Every frame type, in numeric order.
            pub const ALL: &'static [FrameType] = &[$(FrameType::$name,)*];

            /// The type for a wire byte, or `None` if v1 defines none.
            pub fn from_u8(value: u8) -> Option<FrameType> {
                match value {
                    $( $value => Some(FrameType::$name), )*
                    _ => None,
                }
            }

            /// The frame's name, as in `docs/protocol.md`.
            pub fn name(self) -> &'static str {
                match self {
                    $( FrameType::$name => stringify!($name), )*
                }
            }

            /// The smallest and largest `body_len` allowed for this type.
            pub fn body_len_range(self) -> (u32, u32) {
                match self {
                    $( FrameType::$name => const { (to_u32($min), to_u32($max)) }, )*
                }
            }
        }
    };
}

frame_types! {
    /// Client → server, first frame of a control connection.
    Hello = 0x01, 50, MAX_HELLO_BODY_BYTES as usize;
    /// Server → client, answers `Hello`.
    Welcome = 0x02, 43, MAX_HELLO_BODY_BYTES as usize;
    /// Client → server, proves the client knows the token.
    AuthProof = 0x03, 32, 32;
    /// Server → client, proves the server knows the token.
    AuthOk = 0x04, 32, 32;
    /// Client → server, asks for a transfer.
    Open = 0x10, 12, 12 + MAX_PATH_BYTES;
    /// Server → client, grants a transfer.
    Accept = 0x11, 48, 48;
    /// Server → client, right after `Accept`: where each data connection should go.
    Addresses = 0x12, 2, 2 + MAX_STREAMS as usize * ADDRESS_ENTRY_MAX_BYTES;
    /// Client → source daemon, right after `Open { direction: Deliver }`: the capability
    /// to join another daemon's session (a third-party copy).
    Delegate = 0x13, DELEGATE_FIXED_BODY_BYTES + 2,
        DELEGATE_FIXED_BODY_BYTES + 2 + MAX_STREAMS as usize * ADDRESS_ENTRY_MAX_BYTES;
    /// Client → server, first frame of a data connection.
    Join = 0x20, 44, 44;
    /// Server → client, accepts a data connection.
    Joined = 0x21, 4, 4;
    /// Source → sink on a data connection; a payload follows the frame.
    Chunk = 0x22, CHUNK_FIXED_BODY_BYTES,
        CHUNK_FIXED_BODY_BYTES + MAX_PACK_SEGMENTS as usize * SEGMENT_BYTES;
    /// Source → sink, a batch of file entries.
    Manifest = 0x30, 2, MAX_CONTROL_BODY_BYTES as usize;
    /// Source → sink, the manifest is complete.
    ManifestEnd = 0x31, 16, 16;
    /// Sink → source, what the sink already holds of one file.
    Have = 0x32, 9, 9 + 20 + MAX_HAVE_BITMAP_BYTES;
    /// Sink → source, a chunk verified and handed to the writer.
    ChunkAck = 0x40, 16, 16;
    /// Sink → source, a chunk was rejected and must be sent again.
    ChunkNack = 0x41, 18, 18;
    /// Sink → source, a file is complete, verified and renamed into place.
    FileDone = 0x42, 24, 24;
    /// Either way, one file failed; the session goes on.
    FileFailed = 0x43, 12, 12 + MAX_MESSAGE_BYTES;
    /// Either way, a fatal error; the sender closes the connection after it.
    Error = 0x50, 4, 4 + MAX_MESSAGE_BYTES;
    /// Either way, asks for an orderly close.
    Close = 0x51, 1, 1;
    /// Answers `Close`.
    CloseAck = 0x52, 0, 0;
}

/// A body-length bound as u32, checked at compile time (every caller is in a `const`).
#[allow(clippy::cast_possible_truncation)] // asserted to fit just above
const fn to_u32(v: usize) -> u32 {
    assert!(v <= u32::MAX as usize);
    v as u32
}

impl FrameType {
    /// Flag bits this type defines; any other bit set is an error.
    pub fn allowed_flags(self) -> u8 {
        match self {
            FrameType::Chunk => crate::chunk::ChunkFlags::ALL.bits(),
            _ => 0,
        }
    }
}

impl std::fmt::Display for FrameType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The common 6-byte header, already validated against its type's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Which frame follows.
    pub frame_type: FrameType,
    /// Per-type flags.
    pub flags: u8,
    /// Bytes of body that follow the header.
    pub body_len: u32,
}

impl FrameHeader {
    /// Bytes of the whole frame: header plus body (a chunk's payload excluded).
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_BYTES + self.body_len as usize
    }
}

impl Codec for FrameHeader {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.frame_type as u8);
        out.push(self.flags);
        out.put_u32(self.body_len);
    }

    fn decode(buf: &[u8]) -> Result<(FrameHeader, usize), DecodeError> {
        if buf.is_empty() {
            return Err(DecodeError::Incomplete {
                needed: FRAME_HEADER_BYTES,
                have: 0,
            });
        }
        // Check the type byte first so that garbage is rejected after one byte.
        let frame_type = FrameType::from_u8(buf[0]).ok_or(DecodeError::UnknownFrameType(buf[0]))?;
        if buf.len() < 2 {
            return Err(DecodeError::Incomplete {
                needed: FRAME_HEADER_BYTES,
                have: buf.len(),
            });
        }
        let flags = buf[1];
        if flags & !frame_type.allowed_flags() != 0 {
            return Err(DecodeError::BadFlags {
                frame: frame_type.name(),
                flags,
            });
        }
        let Some(len_bytes) = buf.get(2..FRAME_HEADER_BYTES) else {
            return Err(DecodeError::Incomplete {
                needed: FRAME_HEADER_BYTES,
                have: buf.len(),
            });
        };
        let body_len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let (min, max) = frame_type.body_len_range();
        if body_len < min || body_len > max {
            return Err(DecodeError::BodyLength {
                frame: frame_type.name(),
                len: body_len,
                min,
                max,
            });
        }
        Ok((
            FrameHeader {
                frame_type,
                flags,
                body_len,
            },
            FRAME_HEADER_BYTES,
        ))
    }
}

/// Splits a complete frame off the front of `buf`: its header, its body, bytes consumed.
pub(crate) fn split_frame(buf: &[u8]) -> Result<(FrameHeader, &[u8], usize), DecodeError> {
    let (header, _) = FrameHeader::decode(buf)?;
    let len = header.frame_len();
    match buf.get(FRAME_HEADER_BYTES..len) {
        Some(body) => Ok((header, body, len)),
        None => Err(DecodeError::Incomplete {
            needed: len,
            have: buf.len(),
        }),
    }
}

/// Appends a frame: header, then whatever `body` writes, then patches `body_len`.
pub(crate) fn encode_frame(
    out: &mut Vec<u8>,
    frame_type: FrameType,
    flags: u8,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let start = out.len();
    out.push(frame_type as u8);
    out.push(flags);
    out.put_u32(0);
    let body_start = out.len();
    body(out);
    // An over-long body cannot be described; saturate so that the peer rejects it.
    let len = u32::try_from(out.len() - body_start).unwrap_or(u32::MAX);
    out[start + 2..start + FRAME_HEADER_BYTES].copy_from_slice(&len.to_le_bytes());
}

/// Little-endian appends on a caller-owned buffer.
pub(crate) trait Put {
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i64(&mut self, v: i64);
    /// A string or byte string with a u16 length prefix (callers keep it ≤ its limit).
    fn put_str16(&mut self, s: &[u8]);
}

impl Put for Vec<u8> {
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_str16(&mut self, s: &[u8]) {
        self.put_u16(u16::try_from(s.len()).unwrap_or(u16::MAX));
        self.extend_from_slice(s);
    }
}

/// Cursor over one frame body; every read names its field for the error.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    frame: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], frame: &'static str) -> Reader<'a> {
        Reader { buf, frame }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated { field });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.array(field).map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.array(field).map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.array(field).map(u64::from_le_bytes)
    }
    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.array(field).map(i64::from_le_bytes)
    }

    /// A 0/1 byte.
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::InvalidValue {
                field,
                value: v.into(),
            }),
        }
    }

    /// A u16-length-prefixed UTF-8 string of at most `limit` bytes, borrowed from the body.
    /// The limit is checked before the bytes are touched.
    pub(crate) fn str16(
        &mut self,
        limit: usize,
        field: &'static str,
    ) -> Result<&'a str, DecodeError> {
        let len = self.u16(field)?;
        self.str_of_len(len.into(), limit, field)
    }

    /// A UTF-8 string of a length read earlier.
    pub(crate) fn str_of_len(
        &mut self,
        len: usize,
        limit: usize,
        field: &'static str,
    ) -> Result<&'a str, DecodeError> {
        check_limit(field, len as u64, limit as u64)?;
        let b = self.bytes(len, field)?;
        std::str::from_utf8(b).map_err(|_| DecodeError::Utf8 { field })
    }

    /// Fails if bytes are left.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                frame: self.frame,
                extra: self.buf.len(),
            })
        }
    }
}

/// `Err(LimitExceeded)` if `value > limit`.
pub(crate) fn check_limit(field: &'static str, value: u64, limit: u64) -> Result<(), DecodeError> {
    if value > limit {
        Err(DecodeError::LimitExceeded {
            field,
            value,
            limit,
        })
    } else {
        Ok(())
    }
}

/// Defines a bit-flag newtype with named constants and `Debug` listing the names.
macro_rules! bitflags_type {
    ($(#[$m:meta])* $name:ident: $t:ty { $( $(#[$fm:meta])* const $f:ident = $v:expr; )* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name($t);

        impl $name {
            $( $(#[$fm])* pub const $f: $name = $name($v); )*
            /// No flag set.
            pub const EMPTY: $name = $name(0);
            /// Every flag this version defines.
            pub const ALL: $name = $name(0 $(| $v)*);

            /// The raw bits.
            pub const fn bits(self) -> $t {
                self.0
            }
            /// From raw bits, keeping bits this version does not define.
            pub const fn from_bits_retain(bits: $t) -> $name {
                $name(bits)
            }
            /// From raw bits, or `None` if an undefined bit is set.
            // Where a type defines every bit (ChunkFlags), the mask is zero: still right.
            #[allow(clippy::bad_bit_mask)]
            pub const fn from_bits(bits: $t) -> Option<$name> {
                if bits & !Self::ALL.0 == 0 { Some($name(bits)) } else { None }
            }
            /// Whether every flag of `other` is set in `self`.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            /// Flags set in both.
            pub const fn intersection(self, other: $name) -> $name {
                $name(self.0 & other.0)
            }
            /// Flags set in either.
            pub const fn union(self, other: $name) -> $name {
                $name(self.0 | other.0)
            }
            /// Sets or clears `other`.
            pub fn set(&mut self, other: $name, on: bool) {
                if on { self.0 |= other.0 } else { self.0 &= !other.0 }
            }
        }

        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                self.union(rhs)
            }
        }

        impl std::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name {
                self.intersection(rhs)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                $(
                    if $v != 0 && self.0 & $v == $v {
                        if !first { f.write_str(" | ")?; }
                        f.write_str(stringify!($f))?;
                        first = false;
                    }
                )*
                let rest = self.0 & !Self::ALL.0;
                if rest != 0 {
                    if !first { f.write_str(" | ")?; }
                    write!(f, "{rest:#x}")?;
                }
                f.write_str(")")
            }
        }
    };
}
pub(crate) use bitflags_type;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_rejects_early() {
        assert_eq!(
            FrameHeader::decode(&[0xee]).unwrap_err(),
            DecodeError::UnknownFrameType(0xee)
        );
        assert!(matches!(
            FrameHeader::decode(&[FrameType::Hello as u8, 1]).unwrap_err(),
            DecodeError::BadFlags {
                frame: "Hello",
                flags: 1
            }
        ));
        let mut b = vec![FrameType::Manifest as u8, 0];
        b.put_u32(MAX_CONTROL_BODY_BYTES + 1);
        assert!(matches!(
            FrameHeader::decode(&b).unwrap_err(),
            DecodeError::BodyLength {
                frame: "Manifest",
                ..
            }
        ));
        assert!(matches!(
            FrameHeader::decode(&b[..3]).unwrap_err(),
            DecodeError::Incomplete { needed: 6, have: 3 }
        ));
    }

    #[test]
    fn frame_types_are_unique_and_round_trip() {
        for t in FrameType::ALL {
            assert_eq!(FrameType::from_u8(*t as u8), Some(*t));
            let (min, max) = t.body_len_range();
            assert!(min <= max && max <= MAX_CONTROL_BODY_BYTES, "{t}");
        }
    }
}
