//! Engine errors: what went wrong, where, and what to do next.

use sluice_wire::{DecodeError, ErrorCode};
use std::io;

/// Everything that can end a session or fail a file.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A socket or file operation failed; `context` says which and on what.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done (`connecting to 127.0.0.1:7878`, `reading "a/b"`).
        context: String,
        /// The OS error (part of the message, so not repeated as a source).
        cause: io::Error,
    },
    /// The peer sent bytes that are not a valid frame.
    #[error("protocol error from {peer}: {cause}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What was wrong with the frame.
        cause: DecodeError,
    },
    /// The peer sent a valid frame that is not allowed at this point.
    #[error("protocol error from {peer}: unexpected {got} while {state}")]
    Unexpected {
        /// The peer's address.
        peer: String,
        /// The frame type received.
        got: String,
        /// What this side was waiting for.
        state: String,
    },
    /// This side refuses the request (a path outside the root, a missing source); the
    /// message goes to the peer as is.
    #[error("{message}")]
    Refused {
        /// The wire error code.
        code: ErrorCode,
        /// What is wrong, naming the value.
        message: String,
    },
    /// The peer reported an error and closed the session.
    #[error("the peer reported {code:?}: {message}")]
    Remote {
        /// The peer's error code.
        code: ErrorCode,
        /// The peer's message.
        message: String,
    },
    /// Authentication or the handshake failed.
    #[error("handshake with {peer} failed: {message}")]
    Handshake {
        /// The peer's address.
        peer: String,
        /// Why.
        message: String,
    },
    /// A buffer pool could not be created.
    #[error("channel {channel}: {cause}")]
    Buffers {
        /// The channel.
        channel: u32,
        /// Why (part of the message).
        cause: sluice_buffers::BufferError,
    },
    /// A file-system operation under a root failed.
    #[error(transparent)]
    Fs(#[from] crate::fs::FsError),
    /// The configuration cannot work (named in the message).
    #[error("{0}")]
    Config(String),
    /// The peer closed a connection in the middle of the session.
    #[error("connection to {peer} closed unexpectedly while {state}")]
    Disconnected {
        /// The peer's address.
        peer: String,
        /// What this side was doing.
        state: String,
    },
    /// The session was aborted because another part of it failed first.
    #[error("session aborted: {0}")]
    Aborted(String),
}

impl EngineError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> EngineError {
        EngineError::Io {
            context: context.into(),
            cause: source,
        }
    }

    /// The wire error code that reports this error to the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::Io { cause, .. } => io_code(cause),
            EngineError::Protocol { .. } | EngineError::Unexpected { .. } => ErrorCode::BadFrame,
            EngineError::Remote { code, .. } | EngineError::Refused { code, .. } => *code,
            EngineError::Handshake { .. } => ErrorCode::AuthFailed,
            EngineError::Fs(e) => e.code(),
            _ => ErrorCode::Internal,
        }
    }
}

/// The wire error code for an OS error.
pub fn io_code(e: &io::Error) -> ErrorCode {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => ErrorCode::NoSpace,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => ErrorCode::PermissionDenied,
        Some(libc::ENOENT) => ErrorCode::NotFound,
        _ => ErrorCode::Io,
    }
}
