//! A request refused or failed: an HTTP status and one line saying why.

use hyper::StatusCode;
use sluice_engine::fs::FsError;

/// A request's failure: the status answered and a one-line reason (the body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct Fail {
    /// The HTTP status.
    pub status: StatusCode,
    /// Why, in one line.
    pub message: String,
}

impl Fail {
    /// A failure with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Fail {
        Fail {
            status,
            message: message.into(),
        }
    }

    /// 400 Bad Request.
    pub fn bad(message: impl Into<String>) -> Fail {
        Fail::new(StatusCode::BAD_REQUEST, message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Fail {
        Fail::new(StatusCode::FORBIDDEN, message)
    }

    /// 404 Not Found.
    pub fn not_found(path: &str) -> Fail {
        Fail::new(
            StatusCode::NOT_FOUND,
            format!("/{path}: no such file or directory"),
        )
    }

    /// 500 for an I/O error on `path`, or the status the error's kind calls for.
    pub fn io(what: &str, path: &str, e: &std::io::Error) -> Fail {
        use std::io::ErrorKind as K;
        let status = match e.kind() {
            K::NotFound => StatusCode::NOT_FOUND,
            K::PermissionDenied => StatusCode::FORBIDDEN,
            K::AlreadyExists => StatusCode::METHOD_NOT_ALLOWED,
            K::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            _ if is_escape(e) => StatusCode::FORBIDDEN,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if is_escape(e) {
            return Fail::forbidden(format!("/{path}: outside the account's root"));
        }
        Fail::new(status, format!("{what} /{path}: {e}"))
    }
}

/// Whether cap-std refused `e` because the path leaves the root.
pub(crate) fn is_escape(e: &std::io::Error) -> bool {
    (e.raw_os_error().is_none()
        && e.kind() == std::io::ErrorKind::PermissionDenied
        && e.to_string().contains("outside"))
        || e.raw_os_error() == Some(libc::EXDEV)
}

impl From<FsError> for Fail {
    /// The error without the root's path (which a client must not learn).
    fn from(e: FsError) -> Fail {
        let path = e.path().unwrap_or("").to_owned();
        match (&e, e.io_error()) {
            (FsError::OutsideRoot { .. }, _) => {
                Fail::forbidden(format!("/{path}: outside the account's root"))
            }
            (_, Some(io)) => Fail::io("opening", &path, io),
            _ => Fail::new(StatusCode::CONFLICT, format!("/{path}: {}", e.code_name())),
        }
    }
}

/// What an [`FsError`] without an OS error is, in a word.
trait CodeName {
    fn code_name(&self) -> &'static str;
}

impl CodeName for FsError {
    fn code_name(&self) -> &'static str {
        match self {
            FsError::WrongKind { .. } => "not of the kind asked for",
            FsError::AlreadyExists { .. } => "already exists",
            _ => "cannot be used",
        }
    }
}
