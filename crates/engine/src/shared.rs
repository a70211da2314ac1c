//! The settings `sluice serve` adds for a daemon shared by several users.

use crate::accounts::{self, Accounts};
use crate::audit::AuditLog;
use crate::error::EngineError;
use crate::guard::Limits;
use sluice_wire::Token;
use std::path::Path;
use std::time::Duration;

/// What `sluice serve` adds to [`crate::daemon::ServeConfig`] for a daemon shared by several users.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The accounts file (`--accounts`); `None`: the one account of `root` and `token`.
    pub accounts_file: Option<std::path::PathBuf>,
    /// `accounts_file` is a configuration file whose `[[account]]` tables are the
    /// accounts (`sluice serve --config` with inline accounts).
    pub accounts_embedded: bool,
    /// The file the one account's token was read from (`--token-file`): a SIGHUP
    /// re-reads it.
    pub token_file: Option<std::path::PathBuf>,
    /// Where audit records are appended (`--audit-log`).
    pub audit_log: Option<std::path::PathBuf>,
    /// Limits and timeouts.
    pub limits: Limits,
    /// How long running sessions may finish after SIGTERM or SIGINT.
    pub drain_timeout: Duration,
    /// Whether this process's SIGTERM, SIGINT (and SIGHUP with an accounts file) are the
    /// daemon's (`sluice serve`; not a daemon started inside another command).
    pub signals: bool,
    /// What a SIGHUP reloads besides the accounts (the command's configuration file).
    pub on_reload: Option<crate::drain::OnReload>,
    /// `--bwlimit`: bytes per second for all sessions together, shared fairly.
    pub bwlimit: Option<u64>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            accounts_file: None,
            accounts_embedded: false,
            token_file: None,
            audit_log: None,
            limits: Limits::default(),
            drain_timeout: Duration::from_secs(30),
            signals: false,
            on_reload: None,
            bwlimit: None,
        }
    }
}

impl Shared {
    /// The accounts to serve: the accounts file's, or the one account of `root` and
    /// `token`.
    ///
    /// # Errors
    /// The file does not load ([`EngineError::Config`]), or the root cannot be opened.
    pub fn accounts(&self, root: &Path, token: Option<Token>) -> Result<Accounts, EngineError> {
        match &self.accounts_file {
            Some(path) if self.accounts_embedded => {
                accounts::file::load_embedded(path).map_err(|e| EngineError::Config(e.to_string()))
            }
            Some(path) => {
                accounts::file::load(path).map_err(|e| EngineError::Config(e.to_string()))
            }
            None => Ok(Accounts::single(root, token)?.with_token_file(self.token_file.clone())),
        }
    }

    /// The audit log, opened for appending, if one was asked for.
    ///
    /// # Errors
    /// It cannot be opened.
    pub fn audit_log(&self) -> Result<Option<AuditLog>, EngineError> {
        let Some(p) = &self.audit_log else {
            return Ok(None);
        };
        AuditLog::open(p)
            .map(Some)
            .map_err(|e| EngineError::io(format!("opening the audit log {}", p.display()), e))
    }
}
