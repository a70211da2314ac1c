//! Decoding errors and the error codes carried on the wire.

use crate::path::PathError;

/// Why bytes could not be decoded into a frame.
///
/// Every variant except [`DecodeError::Incomplete`] means the peer sent something malformed:
/// answer with `Error { code: BadFrame }` and close the connection, since the byte stream
/// can no longer be trusted to be in sync.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer ends before the frame does; not an error on a stream, wait for more.
    #[error("incomplete frame: {needed} bytes needed, {have} buffered")]
    Incomplete {
        /// Bytes the whole frame needs (header, body, and for a chunk its segment table).
        needed: usize,
        /// Bytes available.
        have: usize,
    },
    /// The stream ended in the middle of a frame or of a chunk payload.
    #[error("stream ended inside a frame: {buffered} bytes buffered, {payload_remaining} payload bytes missing")]
    TruncatedStream {
        /// Bytes of an unfinished frame still buffered.
        buffered: usize,
        /// Payload bytes of the last chunk that never arrived.
        payload_remaining: u32,
    },
    /// The frame type byte names no v1 frame.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrameType(u8),
    /// A specific frame type was expected (e.g. a chunk header) and another came.
    #[error("expected a {expected} frame, found {found}")]
    UnexpectedFrameType {
        /// The frame the decoder was asked for.
        expected: &'static str,
        /// The frame type on the wire.
        found: &'static str,
    },
    /// The header's flags byte has bits that this frame type does not define.
    #[error("{frame}: undefined flags {flags:#04x}")]
    BadFlags {
        /// Frame type.
        frame: &'static str,
        /// The flags byte as received.
        flags: u8,
    },
    /// The header's body length is outside the range allowed for this frame type.
    #[error("{frame}: body_len {len} outside the allowed range {min}..={max}")]
    BodyLength {
        /// Frame type.
        frame: &'static str,
        /// Body length in the header.
        len: u32,
        /// Smallest allowed body.
        min: u32,
        /// Largest allowed body.
        max: u32,
    },
    /// The body ended before a field.
    #[error("{field}: body ends before this field")]
    Truncated {
        /// `Frame.field` that could not be read.
        field: &'static str,
    },
    /// Bytes were left in the body after the last field.
    #[error("{frame}: {extra} unexpected trailing bytes in body")]
    TrailingBytes {
        /// Frame type.
        frame: &'static str,
        /// How many.
        extra: usize,
    },
    /// A length or count exceeds its limit; nothing was allocated for it.
    #[error("{field}: {value} exceeds limit {limit}")]
    LimitExceeded {
        /// `Frame.field` holding the length or count.
        field: &'static str,
        /// The value received.
        value: u64,
        /// The limit (see [`crate::limits`]).
        limit: u64,
    },
    /// A field holds a value outside its domain (unknown enum tag, zero where one is needed).
    #[error("{field}: invalid value {value}")]
    InvalidValue {
        /// `Frame.field`.
        field: &'static str,
        /// The value received.
        value: u64,
    },
    /// Fields contradict each other.
    #[error("{field}: {reason}")]
    Inconsistent {
        /// `Frame.field` found inconsistent.
        field: &'static str,
        /// What does not hold.
        reason: &'static str,
    },
    /// `Hello` does not start with `SLUICE`: the peer does not speak this protocol.
    #[error("Hello.magic: not a sluice peer (bad magic)")]
    BadMagic,
    /// A string field is not UTF-8.
    #[error("{field}: not valid UTF-8")]
    Utf8 {
        /// `Frame.field`.
        field: &'static str,
    },
    /// A path field is not a safe relative path.
    #[error("{field}: {source}")]
    Path {
        /// `Frame.field`.
        field: &'static str,
        /// Why the path was rejected.
        source: PathError,
    },
}

/// What a side should do about an error, in the spirit of "retry, resume or abort".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Send the chunk or file again within this session.
    Retry,
    /// The session is lost but may be resumed by a new one (`--resume`).
    Resume,
    /// Retrying will not help without a change by the user.
    Abort,
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $recovery:ident; )*) => {
        /// Error codes carried by `Error`, `FileFailed` and `ChunkNack` frames.
        ///
        /// The numbering is frozen: codes are never reused or renumbered.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $value, )*
        }

        impl ErrorCode {
            /// Every code, in numeric order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code for a wire value, or `None` if v1 defines none.
            pub fn from_u16(value: u16) -> Option<ErrorCode> {
                match value {
                    $( $value => Some(ErrorCode::$name), )*
                    _ => None,
                }
            }

            /// What to do about it.
            pub fn recovery(self) -> Recovery {
                match self {
                    $( ErrorCode::$name => Recovery::$recovery, )*
                }
            }

            /// The name, as in `docs/protocol.md`.
            pub fn name(self) -> &'static str {
                match self {
                    $( ErrorCode::$name => stringify!($name), )*
                }
            }
        }
    };
}

error_codes! {
    /// A frame could not be decoded, or came in a state where it is not allowed.
    BadFrame = 1, Abort;
    /// No protocol version is spoken by both sides.
    UnsupportedVersion = 2, Abort;
    /// A handshake proof did not verify, or a required token is missing.
    AuthFailed = 3, Abort;
    /// A path would leave the daemon root (absolute, `..`, or through a symlink).
    PathOutsideRoot = 4, Abort;
    /// The requested path does not exist.
    NotFound = 5, Abort;
    /// The operating system refused access.
    PermissionDenied = 6, Abort;
    /// The sink's filesystem is full.
    NoSpace = 7, Resume;
    /// A chunk's checksum did not match its bytes; the source sends it again.
    ChecksumMismatch = 8, Retry;
    /// Another I/O error.
    Io = 9, Resume;
    /// The daemon has no room for another session now.
    Busy = 10, Resume;
    /// A bug: an invariant did not hold.
    Internal = 11, Abort;
    /// The file exists and `no_clobber` forbids replacing it.
    Exists = 12, Abort;
    /// The file is larger than the protocol can describe at this chunk size.
    TooLarge = 13, Abort;
    /// A compressed chunk could not be decompressed; the source sends it again.
    DecompressFailed = 14, Retry;
    /// A join named an unknown session, a bad MAC, or a stream already joined.
    JoinRejected = 15, Abort;
    /// The session was cancelled by a user.
    Cancelled = 16, Abort;
    /// The server requires TLS and the client spoke clear text (the message names the
    /// server's `--encrypt` setting).
    EncryptionRequired = 17, Abort;
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), *self as u16)
    }
}
