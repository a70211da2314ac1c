//! What the scanner leaves out, and why.

use std::path::PathBuf;

use sluice_wire::PathError;

use crate::fs::error::FsError;

/// An entry the scanner left out, with the reason. Only [`ScanError::Fs`] on the start
/// ends the scan; every other error concerns one entry (or one directory's subtree).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// An operation failed: the entry (or the directory's subtree) is left out.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A name that is not valid UTF-8 (shown lossily); the entry is left out.
    #[error("skipped {name:?} in {dir:?} under {}: the name is not valid UTF-8", root.display())]
    NonUtf8Name {
        /// The root.
        root: PathBuf,
        /// The directory holding it, relative to the root (`.` for the root).
        dir: String,
        /// The name, with invalid bytes replaced by U+FFFD.
        name: String,
    },
    /// A path the protocol cannot carry (too long, or a component too long).
    #[error("skipped {path:?} under {}: {error}", root.display())]
    BadPath {
        /// The root.
        root: PathBuf,
        /// The path as far as it could be built.
        path: String,
        /// Why it is refused.
        error: PathError,
    },
    /// A socket, fifo, device, or a partial file of an unfinished transfer.
    #[error("skipped {path:?} under {}: it is {kind}, which is not transferred", root.display())]
    Special {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
        /// What it is ("a socket", "a sluice partial file", ...).
        kind: &'static str,
    },
    /// A directory found without `recursive`.
    #[error("skipped the directory {path:?} under {}: not a recursive copy", root.display())]
    NotRecursive {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
    },
    /// The entry disappeared between listing and `lstat`.
    #[error("skipped {path:?} under {}: it vanished during the scan", root.display())]
    Vanished {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
    },
    /// A symlink whose target the protocol cannot carry.
    #[error("skipped the symlink {path:?} under {}: its target {reason}", root.display())]
    BadSymlink {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
        /// Why ("is not valid UTF-8", "is too long").
        reason: &'static str,
    },
}

impl ScanError {
    /// Whether this is a deliberate skip (special file, not recursive, vanished, partial)
    /// that a user sees as a warning, rather than a failure to read something.
    pub fn is_skip(&self) -> bool {
        matches!(
            self,
            ScanError::Special { .. } | ScanError::NotRecursive { .. } | ScanError::Vanished { .. }
        )
    }
}
