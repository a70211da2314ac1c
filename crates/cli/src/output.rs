//! Writing the command's output without panicking.
//!
//! `println!` panics when stdout is gone (`sluice topo --json | head -1` closes the pipe
//! early). Commands build their whole output as a string and hand it here once.

use anyhow::{Context, Result};
use std::io::{ErrorKind, Write};

/// Writes `text` to stdout and flushes it. A closed pipe is not an error (the reader
/// saw what it wanted, as with `head`); any other write error is, with the reason.
pub fn stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// Writes one line to stderr; errors are ignored (there is nowhere left to report them).
pub fn stderr_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
