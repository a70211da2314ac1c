//! Exit codes and the error kinds that select them.
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | success |
//! | 1 | the work ran but something failed (a file, a verification) |
//! | 2 | bad input: usage, unknown policy, malformed topology, impossible plan |

use std::fmt;

/// The process exit codes sluice uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    /// Everything worked.
    Ok = 0,
    /// The work ran but part of it failed (a mismatch, a file).
    Failed = 1,
    /// Bad input: nothing was done.
    Usage = 2,
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}

/// An error caused by what the user asked for (exit code 2), as opposed to a failure
/// while doing it. Wrap it in `anyhow` and [`code_of`] finds it in the chain.
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Builds a bad-input error from anything displayable.
pub fn bad_input(msg: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.to_string()))
}

/// The exit code for an error: 2 if any error in the chain is bad input, else 1.
pub fn code_of(err: &anyhow::Error) -> ExitCode {
    if err.chain().any(|e| e.is::<BadInput>()) {
        ExitCode::Usage
    } else {
        ExitCode::Failed
    }
}
