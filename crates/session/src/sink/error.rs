//! What failed about one file at the sink, typed: the wire code travels with the message.

use sluice_wire::{ErrorCode, Recovery};

/// A file could not be received: the wire code (from the error itself, e.g. `ENOSPC` is
/// [`ErrorCode::NoSpace`]) and the message shown to the user.
///
/// The engine builds it from its file-system errors (their code and their text); the
/// message keeps this side's paths, which the engine redacts before it goes to the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// The code reported in `FileFailed`; its [`Recovery`] says what to do next.
    pub code: ErrorCode,
    /// What went wrong, naming the file (as the user reads it).
    pub message: String,
}

impl FileError {
    /// A file error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> FileError {
        FileError {
            code,
            message: message.into(),
        }
    }

    /// What to do about it: retry the chunk, resume the file in a later session, or abort.
    #[must_use]
    pub fn recovery(&self) -> Recovery {
        self.code.recovery()
    }

    /// The same error with `context` in front of its message (`context: message`).
    #[must_use]
    pub fn context(self, context: impl std::fmt::Display) -> FileError {
        FileError {
            code: self.code,
            message: format!("{context}: {}", self.message),
        }
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FileError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_decides_the_recovery_and_the_message_is_kept() {
        let e = FileError::new(ErrorCode::NoSpace, "cannot write \"a\": No space left");
        assert_eq!(e.recovery(), Recovery::Resume);
        assert_eq!(e.to_string(), "cannot write \"a\": No space left");
        let e = FileError::new(ErrorCode::PermissionDenied, "denied").context("re-reading \"a\"");
        assert_eq!(e.recovery(), Recovery::Abort);
        assert_eq!(e.message, "re-reading \"a\": denied");
    }
}
