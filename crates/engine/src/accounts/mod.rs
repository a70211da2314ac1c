//! Accounts of a shared daemon (`sluice serve --accounts FILE`): each has its own token,
//! root and rights, like rsyncd's modules or XRootD's authorization.
//!
//! The wire is unchanged: a client proves knowledge of its token exactly as with one
//! shared token, and the daemon finds whose token it was by verifying the proof against
//! every account's token ([`Accounts::find`]: constant time per token, every token tried
//! whatever matched, at most [`MAX_ACCOUNTS`]). Two accounts may not share a token, so a
//! proof names at most one account.
//!
//! * [`mod@file`] reads the TOML file (operator input: every error names the file, the
//!   account and the field).
//! * [`handshake`] runs the server handshake against the accounts.
//! * [`Live`] holds the accounts a SIGHUP swaps; a running session keeps the
//!   `Arc<Account>` it authenticated with.

pub mod file;
pub mod handshake;
#[cfg(test)]
mod tests;

use crate::fs::Root;
use sluice_wire::{auth, Direction, Token};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// Most accounts one daemon holds: a failed proof costs one HMAC per account.
pub const MAX_ACCOUNTS: usize = 4096;

/// What an account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights {
    /// Pull from the daemon.
    pub read: bool,
    /// Push to it (and stream to it).
    pub write: bool,
}

impl Rights {
    /// Both rights: the implicit account of `--root`/`--token-file`.
    pub const ALL: Rights = Rights {
        read: true,
        write: true,
    };

    /// Whether these rights allow `direction` (a pull and a third-party copy's source
    /// read, a push writes).
    pub fn allow(self, direction: Direction) -> bool {
        match direction {
            Direction::Pull | Direction::Deliver => self.read,
            Direction::Push => self.write,
        }
    }

    /// `read`, `write`, `read, write` or `none`, as the operator wrote them.
    pub fn describe(self) -> &'static str {
        match (self.read, self.write) {
            (true, true) => "read, write",
            (true, false) => "read",
            (false, true) => "write",
            (false, false) => "none",
        }
    }
}

/// One account: who, with which token, under which root, allowed what, until when.
pub struct Account {
    /// The identity in the audit log (never secret).
    pub name: String,
    /// `None` only for the implicit account of a daemon without authentication.
    token: Option<Token>,
    /// The account's confined root, opened when the accounts were loaded.
    pub root: Arc<Root>,
    /// What it may do.
    pub rights: Rights,
    /// When its token stops being accepted.
    pub expires: Option<SystemTime>,
    /// Its `bwlimit`: bytes per second for all its sessions together, shared fairly.
    pub bwlimit: Option<Arc<crate::bwlimit::Limiter>>,
}

impl Account {
    /// An account; `token` `None` only for a daemon that asks for no authentication.
    pub fn new(
        name: impl Into<String>,
        token: Option<Token>,
        root: Arc<Root>,
        rights: Rights,
        expires: Option<SystemTime>,
    ) -> Account {
        Account {
            name: name.into(),
            token,
            root,
            rights,
            expires,
            bwlimit: None,
        }
    }

    /// The account with a bandwidth limit of `rate` bytes per second for its sessions.
    pub fn with_bwlimit(mut self, rate: Option<u64>) -> Account {
        self.bwlimit = rate.map(crate::bwlimit::Limiter::new);
        self
    }

    /// Whether its token has expired at `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|t| t <= now)
    }

    /// The account's token (for the handshake's own proofs).
    pub(crate) fn token(&self) -> Option<&Token> {
        self.token.as_ref()
    }
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("name", &self.name)
            .field("root", &self.root.path())
            .field("rights", &self.rights)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// The accounts a daemon serves: either one implicit account (`--root`, with or without
/// `--token-file`) or the entries of an accounts file, all with tokens.
#[derive(Debug)]
pub struct Accounts {
    list: Vec<Arc<Account>>,
    /// Where they were read from (re-read on SIGHUP); `None` for the implicit account.
    source: Option<PathBuf>,
    /// The source is a configuration file whose `[[account]]` tables are the accounts
    /// (its other keys are not the accounts loader's).
    embedded: bool,
    /// The implicit account's `--token-file`, re-read on SIGHUP (token rotation).
    token_file: Option<PathBuf>,
}

impl Accounts {
    /// The implicit account of `--root` and `--token-file` (all rights). With no token
    /// the daemon asks for no authentication and its sessions have no identity.
    ///
    /// # Errors
    /// The root cannot be opened.
    pub fn single(root: &Path, token: Option<Token>) -> Result<Accounts, crate::fs::FsError> {
        let root = Arc::new(Root::open(root)?);
        let name = if token.is_some() { "token" } else { "" };
        Ok(Accounts {
            list: vec![Arc::new(Account::new(name, token, root, Rights::ALL, None))],
            source: None,
            embedded: false,
            token_file: None,
        })
    }

    /// Accounts from `list` (at least one, at most [`MAX_ACCOUNTS`], each with its own
    /// token), read from `source`.
    pub(crate) fn from_list(list: Vec<Account>, source: Option<PathBuf>) -> Accounts {
        assert!(!list.is_empty() && list.len() <= MAX_ACCOUNTS);
        assert!(list.iter().all(|a| a.token.is_some()));
        Accounts {
            list: list.into_iter().map(Arc::new).collect(),
            source,
            embedded: false,
            token_file: None,
        }
    }

    /// The implicit account's token came from `file` (`--token-file`): a SIGHUP
    /// re-reads it.
    pub fn with_token_file(mut self, file: Option<PathBuf>) -> Accounts {
        self.token_file = file.filter(|_| self.source.is_none() && self.auth_required());
        self
    }

    /// What a SIGHUP re-reads: the accounts file, or the implicit account's token file.
    pub fn reload_source(&self) -> Option<&Path> {
        self.source.as_deref().or(self.token_file.as_deref())
    }

    /// The implicit account with the token now in its token file (same root, rights).
    fn with_fresh_token(&self, file: &Path) -> Result<Accounts, String> {
        let bytes = file::read_token_file(file)?;
        let token = Token::new(bytes).map_err(|t| format!("token file {}: {t}", file.display()))?;
        let old = self.list.first().ok_or("no account")?;
        let account = Account::new(
            old.name.clone(),
            Some(token),
            Arc::clone(&old.root),
            old.rights,
            None,
        );
        Ok(Accounts {
            list: vec![Arc::new(account)],
            source: None,
            embedded: false,
            token_file: Some(file.to_path_buf()),
        })
    }

    /// These accounts are the `[[account]]` tables of a configuration file.
    pub(crate) fn embedded(mut self) -> Accounts {
        self.embedded = true;
        self
    }

    /// Whether clients must prove a token.
    pub fn auth_required(&self) -> bool {
        self.list.iter().any(|a| a.token.is_some())
    }

    /// The account of a daemon without authentication (its only one).
    pub fn open_account(&self) -> Option<&Arc<Account>> {
        match &self.list[..] {
            [only] if only.token.is_none() => Some(only),
            _ => None,
        }
    }

    /// How many accounts.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Never: there is always at least one account.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The file they came from, if any.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The account whose token made `mac` the client's proof for these nonces. Every
    /// account's token is tried (each comparison constant-time, no early exit), so the
    /// time taken does not tell which account matched, or whether one did.
    pub fn find(
        &self,
        client_nonce: &[u8; 32],
        server_nonce: &[u8; 32],
        mac: &[u8; 32],
    ) -> Option<&Arc<Account>> {
        let mut found = None;
        for account in &self.list {
            let Some(token) = &account.token else {
                continue;
            };
            let ok = auth::verify_client_proof(token, client_nonce, server_nonce, mac);
            if ok && found.is_none() {
                found = Some(account);
            }
        }
        found
    }

    /// The account named `name` (a scoped token issued by the HTTP face names it).
    pub fn by_name(&self, name: &str) -> Option<&Arc<Account>> {
        self.list.iter().find(|a| a.name == name)
    }

    /// The account whose token is `presented` (an HTTP `Authorization: Bearer`). Both
    /// sides are hashed with SHA-256 and every account's digest is compared in constant
    /// time, with no early exit, so the time taken tells neither which account matched
    /// nor the length of any token.
    pub fn find_bearer(&self, presented: &[u8]) -> Option<&Arc<Account>> {
        let want = ring::digest::digest(&ring::digest::SHA256, presented);
        let mut found = None;
        for account in &self.list {
            let Some(token) = &account.token else {
                continue;
            };
            let have = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
            // Every byte compared, no early exit: the time does not depend on where
            // the digests differ.
            let ok = bool::from(subtle::ConstantTimeEq::ct_eq(want.as_ref(), have.as_ref()));
            if ok && found.is_none() {
                found = Some(account);
            }
        }
        found
    }
}

/// The accounts in force, swapped whole by a reload; a session holds the
/// `Arc<Account>` it authenticated with, so a swap never changes a running session.
#[derive(Debug)]
pub struct Live(RwLock<Arc<Accounts>>);

impl Live {
    /// Starts with `accounts`.
    pub fn new(accounts: Accounts) -> Live {
        Live(RwLock::new(Arc::new(accounts)))
    }

    /// The accounts now in force.
    pub fn current(&self) -> Arc<Accounts> {
        Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Re-reads the accounts file and swaps it in; on any error the accounts in force
    /// stay and the error is returned (one line naming the file and what is wrong).
    ///
    /// # Errors
    /// There is no file to re-read, or it does not load.
    pub fn reload(&self) -> Result<usize, String> {
        let current = self.current();
        let fresh = match (current.source(), &current.token_file) {
            (None, Some(token_file)) => Some(current.with_fresh_token(token_file)?),
            _ => None,
        };
        if let Some(fresh) = fresh {
            *self
                .0
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(fresh);
            return Ok(1);
        }
        let Some(path) = current.source().map(Path::to_path_buf) else {
            return Err("no --accounts file to re-read".into());
        };
        let fresh = if current.embedded {
            file::load_embedded(&path)
        } else {
            file::load(&path)
        }
        .map_err(|e| e.to_string())?;
        let n = fresh.len();
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(fresh);
        Ok(n)
    }
}
