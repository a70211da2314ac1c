//! Errors raised to Python: the classes of `sluice.errors`, chosen as `sluice cp`
//! chooses its exit code and advice (bad input, or a failure whose recovery class is
//! retry, resume or abort), each carrying the message the CLI prints.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use sluice_engine::client::CopyError;
use sluice_engine::EngineError;
use sluice_wire::{ErrorCode, Recovery};

/// What one raised error carries.
struct Raised<'a> {
    /// The class in `sluice.errors`.
    class: &'static str,
    /// The message (`str(err)`).
    message: String,
    /// What `sluice` would print on stderr for it.
    cli_message: String,
    recovery: &'a str,
    /// The wire error code's name, where the error has one that says more than
    /// "internal".
    code: Option<String>,
    /// The engine's variant (`Io`, `Disconnected`, ...).
    kind: &'a str,
}

/// Builds the exception: an instance of `sluice.errors.<class>` with its attributes (a
/// `RuntimeError` if that module cannot be imported, which only a broken install does).
fn raise(r: Raised<'_>) -> PyErr {
    Python::attach(|py| {
        let made = (|| -> PyResult<PyErr> {
            let class = py.import("sluice.errors")?.getattr(r.class)?;
            let err = class.call1((r.message.clone(),))?;
            err.setattr("cli_message", &r.cli_message)?;
            err.setattr("recovery", r.recovery)?;
            err.setattr("code", r.code.clone())?;
            err.setattr("kind", r.kind)?;
            Ok(PyErr::from_value(err))
        })();
        made.unwrap_or_else(|e| PyRuntimeError::new_err(format!("{}: ({e})", r.message)))
    })
}

/// Bad input (the CLI's exit code 2): raises `sluice.errors.UsageError`, also a
/// `ValueError`.
pub fn usage(message: impl std::fmt::Display) -> PyErr {
    let message = message.to_string();
    raise(Raised {
        class: "UsageError",
        cli_message: format!("sluice: error: {message}"),
        message,
        recovery: "abort",
        code: None,
        kind: "Usage",
    })
}

/// The name of the recovery class.
fn recovery_name(r: Recovery) -> &'static str {
    match r {
        Recovery::Retry => "retry",
        Recovery::Resume => "resume",
        Recovery::Abort => "abort",
    }
}

/// The engine variant's name.
fn kind_of(e: &EngineError) -> &'static str {
    match e {
        EngineError::Io { .. } => "Io",
        EngineError::Protocol { .. } => "Protocol",
        EngineError::Unexpected { .. } => "Unexpected",
        EngineError::Refused { .. } => "Refused",
        EngineError::Remote { .. } => "Remote",
        EngineError::Handshake { .. } => "Handshake",
        EngineError::HandshakeRefused { .. } => "HandshakeRefused",
        EngineError::Buffers { .. } => "Buffers",
        EngineError::Fs(_) => "Fs",
        EngineError::Config(_) => "Config",
        EngineError::Disconnected { .. } => "Disconnected",
        EngineError::Aborted(_) => "Aborted",
    }
}

/// What a lost session's advice says: a copy is called again (with `resume=True`
/// unless it resumed already); a stream, which has no resume, is opened again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Again {
    Copy { resuming: bool },
    Stream,
}

/// A failure of a copy, by its recovery class; `resuming` says whether the call
/// already resumed (the CLI's advice differs).
pub fn failure(e: &EngineError, resuming: bool) -> PyErr {
    failure_then(e, Again::Copy { resuming })
}

fn failure_then(e: &EngineError, again: Again) -> PyErr {
    let recovery = e.recovery();
    let (class, cli_hint, py_hint) = match (recovery, again) {
        (Recovery::Retry, _) => ("RetryError", "", ""),
        (Recovery::Abort, _) => ("AbortError", "", ""),
        (Recovery::Resume, Again::Copy { resuming: true }) => (
            "ResumeError",
            " (run the same command again to continue)",
            " (call it again to continue)",
        ),
        (Recovery::Resume, Again::Copy { resuming: false }) => (
            "ResumeError",
            " (run the same command with --resume to continue)",
            " (call it again with resume=True to continue)",
        ),
        (Recovery::Resume, Again::Stream) => (
            "ResumeError",
            " (start the stream again)",
            " (open the stream again; what was received is kept)",
        ),
    };
    let code = e.code();
    let message = e.to_string().replace('\n', " ");
    raise(Raised {
        class,
        cli_message: format!("sluice: error: {message}{cli_hint}"),
        message: format!("{message}{py_hint}"),
        recovery: recovery_name(recovery),
        code: (code != ErrorCode::Internal).then(|| format!("{code:?}")),
        kind: kind_of(e),
    })
}

/// An engine error outside a copy (setting up a stream's runtime, a stream).
pub fn engine(e: EngineError) -> PyErr {
    failure_then(&e, Again::Stream)
}

/// A copy's error: bad input or a failure.
pub fn copy(e: &CopyError, resuming: bool) -> PyErr {
    match e {
        CopyError::Usage(u) => usage(u),
        CopyError::Engine(e) => failure(e, resuming),
    }
}
