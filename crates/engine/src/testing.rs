//! Test-only helpers of the engine's in-module tests.

use std::io::Write;

/// A check that cannot run here says so in the test output (past libtest's capture,
/// which takes only `print!`/`eprint!`), and fails where `CI` is set unless
/// `allowed_in_ci` (a capability even root may lack in a container, such as io_uring).
pub(crate) fn skip(reason: &str, allowed_in_ci: bool) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {reason}");
    assert!(
        allowed_in_ci || std::env::var_os("CI").is_none(),
        "CI must run this check: {reason}"
    );
}
