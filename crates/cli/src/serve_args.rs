//! The flags of `sluice serve` for a daemon shared by several users: accounts, audit
//! log, limits, timeouts and drain.

use anyhow::Result;
use clap::Args;
use sluice_engine::daemon::Shared;
use sluice_engine::drain::Drained;
use sluice_engine::guard::Limits;
use std::path::PathBuf;
use std::time::Duration;

/// `sluice serve`'s accounts, audit and hardening flags.
#[derive(Debug, Clone, Args)]
pub struct SharedArgs {
    /// Accounts file (TOML): several `[[account]]` entries, each with its own token,
    /// root and rights; SIGHUP re-reads it. Replaces --root and --token-file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["root", "token_file", "insecure_no_auth"])]
    pub accounts: Option<PathBuf>,
    /// Append one JSON line per session (and per refused connection) to FILE.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Seconds a connection has, in all, to finish its handshake (or its join).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub handshake_timeout: u64,
    /// Seconds a running session's peer may send nothing before the session is ended
    /// (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub idle_timeout: u64,
    /// Sessions served at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_sessions: usize,
    /// Connections from one address that have not yet authenticated.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_per_address: usize,
    /// Seconds running sessions may finish after SIGTERM or SIGINT before they are
    /// aborted.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub drain_timeout: u64,
}

impl SharedArgs {
    /// The engine's settings for these flags (signals handled: this is `sluice serve`).
    ///
    /// # Errors
    /// A limit of zero, or a zero handshake timeout.
    pub fn shared(&self) -> Result<Shared> {
        for (flag, v) in [
            ("--max-sessions", self.max_sessions),
            ("--max-per-address", self.max_per_address),
            (
                "--handshake-timeout",
                usize::from(self.handshake_timeout > 0),
            ),
        ] {
            if v == 0 {
                return Err(crate::exit::bad_input(format!("{flag} must be at least 1")));
            }
        }
        Ok(Shared {
            accounts_file: self.accounts.clone(),
            audit_log: self.audit_log.clone(),
            limits: Limits {
                max_sessions: self.max_sessions,
                max_per_address: self.max_per_address,
                handshake_timeout: Duration::from_secs(self.handshake_timeout),
                idle_timeout: Duration::from_secs(self.idle_timeout),
            },
            drain_timeout: Duration::from_secs(self.drain_timeout),
            signals: true,
        })
    }
}

/// Reports a drain on stderr (one line per aborted session) and chooses the exit:
/// 0 when every session finished, 1 when some were aborted.
pub fn report_drain(d: &Drained) -> crate::exit::ExitCode {
    for what in &d.aborted {
        crate::output::stderr_line(&format!("sluice: drain: aborted {what}"));
    }
    crate::output::stderr_line(&format!(
        "sluice: drained: {} session(s) finished, {} aborted",
        d.finished,
        d.aborted.len()
    ));
    if d.aborted.is_empty() {
        crate::exit::ExitCode::Ok
    } else {
        crate::exit::ExitCode::Failed
    }
}
