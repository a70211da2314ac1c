//! Engine errors: what went wrong, where, and what to do next.

use sluice_wire::{DecodeError, ErrorCode, Recovery};
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
    /// The peer refused the handshake with an `Error` frame (a wrong token, a busy
    /// daemon): its code says what to do next.
    #[error("handshake with {peer} failed: peer reported {code}: {message}")]
    HandshakeRefused {
        /// The peer's address.
        peer: String,
        /// The peer's error code.
        code: ErrorCode,
        /// The peer's message.
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
            EngineError::Remote { code, .. }
            | EngineError::Refused { code, .. }
            | EngineError::HandshakeRefused { code, .. } => *code,
            EngineError::Handshake { .. } => ErrorCode::AuthFailed,
            EngineError::Fs(e) => e.code(),
            _ => ErrorCode::Internal,
        }
    }
}

impl EngineError {
    /// What to do about it, by its class (rclone's retry / no-retry / fatal): send
    /// again within the session ([`Recovery::Retry`]), start a new session that resumes
    /// from what arrived ([`Recovery::Resume`]: a full disk, a lost connection, a busy
    /// daemon), or stop until the user changes something ([`Recovery::Abort`]: a missing
    /// path, a refused secret, a protocol error, a daemon that is not there). Derived
    /// from [`EngineError::code`], except where the variant says more than its code.
    pub fn recovery(&self) -> Recovery {
        match self {
            EngineError::Fs(e) => e.recovery(),
            // The session is lost; the destination keeps what arrived.
            EngineError::Disconnected { .. } => Recovery::Resume,
            EngineError::Io { cause, .. } if needs_the_user(cause) => Recovery::Abort,
            other => other.code().recovery(),
        }
    }
}

/// OS errors that a new session cannot get past until the user changes something,
/// though their wire code ([`io_code`]: `Io`) reads as transient: nobody listens at the
/// address, or a path is of the wrong kind (a file where a directory must go).
fn needs_the_user(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::ConnectionRefused
        || matches!(
            e.raw_os_error(),
            Some(libc::EEXIST | libc::ENOTDIR | libc::EISDIR)
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: io::ErrorKind) -> EngineError {
        EngineError::io("doing it", io::Error::from(kind))
    }

    #[test]
    fn recovery_follows_the_code_and_the_variant() {
        let full = EngineError::io("writing", io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(full.code(), ErrorCode::NoSpace);
        assert_eq!(full.recovery(), Recovery::Resume);
        assert_eq!(
            io(io::ErrorKind::ConnectionReset).recovery(),
            Recovery::Resume
        );
        assert_eq!(
            io(io::ErrorKind::ConnectionRefused).recovery(),
            Recovery::Abort
        );
        let exists = EngineError::io("creating", io::Error::from_raw_os_error(libc::EEXIST));
        assert_eq!(exists.code(), ErrorCode::Io, "the wire code is unchanged");
        assert_eq!(exists.recovery(), Recovery::Abort);
        let denied = EngineError::io("opening", io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(denied.recovery(), Recovery::Abort);
        let gone = EngineError::Disconnected {
            peer: "p".into(),
            state: "s".into(),
        };
        assert_eq!(gone.code(), ErrorCode::Internal, "reported as internal");
        assert_eq!(gone.recovery(), Recovery::Resume, "but resumable");
        let remote = |code| EngineError::Remote {
            code,
            message: String::new(),
        };
        assert_eq!(remote(ErrorCode::NoSpace).recovery(), Recovery::Resume);
        assert_eq!(remote(ErrorCode::Busy).recovery(), Recovery::Resume);
        assert_eq!(remote(ErrorCode::NotFound).recovery(), Recovery::Abort);
        assert_eq!(
            remote(ErrorCode::ChecksumMismatch).recovery(),
            Recovery::Retry
        );
        let handshake = EngineError::Handshake {
            peer: "p".into(),
            message: "m".into(),
        };
        assert_eq!(handshake.recovery(), Recovery::Abort);
        let busy = EngineError::HandshakeRefused {
            peer: "p".into(),
            code: ErrorCode::Busy,
            message: "too many connections".into(),
        };
        assert_eq!(busy.recovery(), Recovery::Resume);
        assert_eq!(
            busy.to_string(),
            "handshake with p failed: peer reported Busy(10): too many connections"
        );
        assert_eq!(EngineError::Config("x".into()).recovery(), Recovery::Abort);
    }
}
