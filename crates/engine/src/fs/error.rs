//! The one error type of the file-system layer, and what to do about each error.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use sluice_session::sink::FileError;
use sluice_wire::{ErrorCode, Recovery};

/// The operation that failed; it opens the message ("cannot *create* ...").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Open a file or directory.
    Open,
    /// Read bytes.
    Read,
    /// Create a file.
    Create,
    /// Write bytes.
    Write,
    /// `lstat`/`fstat`.
    Stat,
    /// Rename a temporary name over the destination.
    Rename,
    /// `fallocate` or `set_len`.
    Preallocate,
    /// `fsync` a file or directory.
    Sync,
    /// Set permission bits.
    SetMode,
    /// Set modification time.
    SetTimes,
    /// Remove a file.
    Remove,
    /// Read a symlink's target.
    ReadLink,
    /// List a directory.
    List,
    /// Create a directory.
    CreateDir,
    /// Create a symlink.
    CreateSymlink,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Read => "read",
            Op::Create => "create",
            Op::Write => "write",
            Op::Stat => "stat",
            Op::Rename => "rename into place",
            Op::Preallocate => "preallocate",
            Op::Sync => "sync",
            Op::SetMode => "set the mode of",
            Op::SetTimes => "set the times of",
            Op::Remove => "remove",
            Op::ReadLink => "read the link",
            Op::List => "list",
            Op::CreateDir => "create the directory",
            Op::CreateSymlink => "create the symlink",
        })
    }
}

/// A file-system operation failed. Every variant names the path (relative to the root)
/// and the root, and says why; [`FsError::recovery`] says what the session should do.
///
/// The OS error is part of the message (`cannot create "a/b.txt" under /srv/data: No
/// space left on device (os error 28)`), so it is not repeated as a `source()`.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The root directory itself could not be opened.
    #[error("cannot open the root directory {}: {cause}", root.display())]
    Root {
        /// The root as given.
        root: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// An operation on a path under the root failed.
    #[error("cannot {op} {path:?} under {}: {cause}", root.display())]
    Io {
        /// What was being done.
        op: Op,
        /// The path, relative to the root.
        path: String,
        /// The root.
        root: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// Resolving the path would leave the root: an intermediate symlink (or `..` inside a
    /// symlink's target) points outside it. Nothing outside was touched.
    #[error("cannot {op} {path:?} under {}: the path leads outside the root (through a symlink)", root.display())]
    OutsideRoot {
        /// What was being done.
        op: Op,
        /// The path, relative to the root.
        path: String,
        /// The root.
        root: PathBuf,
    },
    /// The path names something other than the regular file (or directory) expected; a
    /// symlink in the last component is never followed.
    #[error("cannot {op} {path:?} under {}: it is {found}, not {expected}", root.display())]
    WrongKind {
        /// What was being done.
        op: Op,
        /// The path, relative to the root.
        path: String,
        /// The root.
        root: PathBuf,
        /// What the path is ("a symlink", "a directory", ...).
        found: &'static str,
        /// What it should have been ("a regular file", "a directory").
        expected: &'static str,
    },
    /// The destination exists and replacing it was refused (no-clobber).
    #[error("{path:?} already exists under {} and no-clobber forbids replacing it", root.display())]
    AlreadyExists {
        /// The path, relative to the root.
        path: String,
        /// The root.
        root: PathBuf,
    },
    /// A write would go past the size announced for the file (a peer or caller bug).
    #[error("cannot write {len} bytes at offset {offset} of {path:?} under {}: the file is {size} bytes", root.display())]
    OutOfRange {
        /// The path, relative to the root.
        path: String,
        /// The root.
        root: PathBuf,
        /// Offset of the write.
        offset: u64,
        /// Bytes of the write.
        len: u64,
        /// Size of the file.
        size: u64,
    },
}

impl FsError {
    /// Wraps an I/O error of `op` on `path` under `root`, recognising cap-std's refusal
    /// to leave the root and `ELOOP` from a no-follow open.
    pub(crate) fn io(op: Op, root: &Path, path: &str, cause: io::Error) -> FsError {
        if is_escape(&cause) {
            return FsError::OutsideRoot {
                op,
                path: path.to_owned(),
                root: root.to_path_buf(),
            };
        }
        FsError::Io {
            op,
            path: path.to_owned(),
            root: root.to_path_buf(),
            cause,
        }
    }

    /// The path (relative to the root) the error is about; `None` for [`FsError::Root`].
    pub fn path(&self) -> Option<&str> {
        match self {
            FsError::Root { .. } => None,
            FsError::Io { path, .. }
            | FsError::OutsideRoot { path, .. }
            | FsError::WrongKind { path, .. }
            | FsError::AlreadyExists { path, .. }
            | FsError::OutOfRange { path, .. } => Some(path),
        }
    }

    /// The OS error behind it, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            FsError::Root { cause, .. } | FsError::Io { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// The wire error code to report to the peer (`Error` / `FileFailed`).
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::OutsideRoot { .. } => ErrorCode::PathOutsideRoot,
            FsError::AlreadyExists { .. } => ErrorCode::Exists,
            FsError::OutOfRange { .. } => ErrorCode::BadFrame,
            FsError::WrongKind { .. } => ErrorCode::Io,
            FsError::Root { cause, .. } | FsError::Io { cause, .. } => code_of(cause),
        }
    }

    /// What to do about it: resume later (disk full, transient I/O error), or abort
    /// (missing path, permission, escape, no-clobber, wrong kind of file).
    pub fn recovery(&self) -> Recovery {
        match self {
            FsError::WrongKind { .. } => Recovery::Abort,
            _ => self.code().recovery(),
        }
    }
}

impl From<FsError> for FileError {
    /// The sink's typed file error: this error's code, and its message as the user reads
    /// it (root included; redacted before it goes to the peer).
    fn from(e: FsError) -> FileError {
        FileError::new(e.code(), e.to_string())
    }
}

/// A [`FileError`] for an OS error, with its own code (`ENOSPC` is
/// [`ErrorCode::NoSpace`]) and its text.
pub fn io_file_error(cause: &io::Error) -> FileError {
    FileError::new(code_of(cause), cause.to_string())
}

/// [`io_file_error`] for an error met while `context` (`context: cause`).
pub fn file_error(context: impl fmt::Display, cause: &io::Error) -> FileError {
    io_file_error(cause).context(context)
}

/// The wire error code for an OS error.
fn code_of(e: &io::Error) -> ErrorCode {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => ErrorCode::NoSpace,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => ErrorCode::PermissionDenied,
        Some(libc::ENOENT) => ErrorCode::NotFound,
        Some(libc::EEXIST) => ErrorCode::Exists,
        Some(libc::EFBIG) => ErrorCode::TooLarge,
        _ => match e.kind() {
            io::ErrorKind::NotFound => ErrorCode::NotFound,
            io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            _ => ErrorCode::Io,
        },
    }
}

/// cap-std reports an attempt to leave the directory as a `PermissionDenied` error
/// without an errno ("a path led outside of the filesystem"); openat2 gives `EXDEV`.
pub(crate) fn is_escape(e: &io::Error) -> bool {
    (e.raw_os_error().is_none()
        && e.kind() == io::ErrorKind::PermissionDenied
        && e.to_string().contains("outside"))
        || e.raw_os_error() == Some(libc::EXDEV)
}

/// Names a file type for messages ("a symlink", "a directory", ...).
pub(crate) fn kind_name(ft: &cap_std::fs::FileType) -> &'static str {
    use cap_std::fs::FileTypeExt;
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_fifo() {
        "a fifo"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_char_device() {
        "a character device"
    } else {
        "an unknown kind of file"
    }
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    #[test]
    fn display_names_op_path_root_and_cause() {
        let e = FsError::io(
            Op::Create,
            Path::new("/srv/data"),
            "a/b.txt",
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let text = e.to_string();
        assert!(
            text.starts_with("cannot create \"a/b.txt\" under /srv/data: No space left on device"),
            "{text}"
        );
        assert_eq!(e.code(), ErrorCode::NoSpace);
        assert_eq!(e.recovery(), Recovery::Resume);
        assert_eq!(e.path(), Some("a/b.txt"));
        let f = FileError::from(e);
        assert_eq!(f.code, ErrorCode::NoSpace);
        assert!(f.message.contains("No space left"), "{f}");
        let f = file_error(
            "re-reading \"x\"",
            &io::Error::from_raw_os_error(libc::EDQUOT),
        );
        assert_eq!(
            (f.code, f.recovery()),
            (ErrorCode::NoSpace, Recovery::Resume)
        );
        assert!(f.message.starts_with("re-reading \"x\": "), "{f}");
    }

    #[test]
    fn escape_is_classified() {
        let cause = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a path led outside of the filesystem",
        );
        let e = FsError::io(Op::Open, Path::new("/r"), "l/x", cause);
        assert!(matches!(e, FsError::OutsideRoot { .. }));
        assert_eq!(e.code(), ErrorCode::PathOutsideRoot);
        assert_eq!(e.recovery(), Recovery::Abort);
        assert!(e.to_string().contains("outside the root"), "{e}");
    }

    #[test]
    fn permission_and_missing_abort() {
        let e = FsError::io(
            Op::Open,
            Path::new("/r"),
            "x",
            io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_eq!(e.code(), ErrorCode::PermissionDenied);
        assert_eq!(e.recovery(), Recovery::Abort);
        let e = FsError::io(
            Op::Open,
            Path::new("/r"),
            "x",
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert_eq!(e.code(), ErrorCode::NotFound);
    }
}
