//! The accounts file: TOML, one `[[account]]` table per account.
//!
//! ```toml
//! [[account]]
//! name = "alice"                            # identity in the audit log
//! token_file = "/etc/sluice/alice.token"    # or token = "..." (then the file itself
//!                                           # must not be group/world readable)
//! root = "/data/alice"
//! rights = ["read", "write"]                # read = pull from, write = push to
//! expires = "2027-01-31T00:00:00Z"          # optional
//! bwlimit = "500M"                          # optional: bytes/s for all its sessions
//! ```
//!
//! Relative `root` and `token_file` paths are taken from the accounts file's directory.
//! Every error is one line naming the file, the account and what is wrong; nothing is
//! half-loaded.

use super::{Account, Accounts, Rights, MAX_ACCOUNTS};
use crate::fs::Root;
use serde::Deserialize;
use sluice_wire::Token;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Largest accounts file read, in bytes (4,096 accounts of a few hundred bytes each).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Longest account name.
pub const MAX_NAME_BYTES: usize = 64;

/// Why an accounts file was refused.
#[derive(Debug, thiserror::Error)]
#[error("accounts file {}: {message}", path.display())]
pub struct AccountsError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, and where in it.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    account: Vec<RawAccount>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccount {
    name: String,
    token: Option<String>,
    token_file: Option<PathBuf>,
    root: PathBuf,
    rights: Vec<String>,
    expires: Option<toml::Value>,
    bwlimit: Option<toml::Value>,
}

/// An account as the file describes it, checked but with nothing opened yet.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Inline token or token file.
    pub secret: Secret,
    /// Its root, relative to the file's directory when not absolute.
    pub root: PathBuf,
    /// Its rights.
    pub rights: Rights,
    /// Its expiry.
    pub expires: Option<SystemTime>,
    /// Its bandwidth limit, bytes per second.
    pub bwlimit: Option<u64>,
}

/// Where an account's token is.
#[derive(PartialEq, Eq)]
pub enum Secret {
    /// In the accounts file.
    Inline(Vec<u8>),
    /// In a file of its own.
    File(PathBuf),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Secret::Inline(_) => f.write_str("Inline(<redacted>)"),
            Secret::File(p) => write!(f, "File({})", p.display()),
        }
    }
}

/// Parses the text of an accounts file (no file system access): every account checked.
///
/// # Errors
/// One line naming the account (by number and name) and what is wrong.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let raw: RawFile = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
    entries(raw)
}

/// [`parse`] for a configuration file that holds `[[account]]` tables among keys of its
/// own (`sluice serve --config`): only the tables are read.
///
/// # Errors
/// As [`parse`].
pub fn parse_embedded(text: &str) -> Result<Vec<Entry>, String> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
    let mut only = toml::Table::new();
    if let Some(accounts) = table.remove("account") {
        only.insert("account".into(), accounts);
    }
    let raw =
        RawFile::deserialize(toml::Value::Table(only)).map_err(|e| one_line(&e.to_string()))?;
    entries(raw)
}

fn entries(raw: RawFile) -> Result<Vec<Entry>, String> {
    if raw.account.is_empty() {
        return Err("no [[account]] entries".into());
    }
    if raw.account.len() > MAX_ACCOUNTS {
        return Err(format!(
            "{} accounts, at most {MAX_ACCOUNTS}",
            raw.account.len()
        ));
    }
    let mut names = HashSet::new();
    let mut entries = Vec::with_capacity(raw.account.len());
    for (i, a) in raw.account.into_iter().enumerate() {
        let at = format!("account {} ({:?})", i + 1, a.name);
        let entry = entry(a).map_err(|m| format!("{at}: {m}"))?;
        if !names.insert(entry.name.clone()) {
            return Err(format!("{at}: the name is used twice"));
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn entry(a: RawAccount) -> Result<Entry, String> {
    check_name(&a.name)?;
    let secret = match (a.token, a.token_file) {
        (Some(t), None) => Secret::Inline(t.into_bytes()),
        (None, Some(p)) => Secret::File(p),
        (Some(_), Some(_)) => return Err("give token or token_file, not both".into()),
        (None, None) => return Err("no token or token_file".into()),
    };
    if a.root.as_os_str().is_empty() {
        return Err("root is empty".into());
    }
    Ok(Entry {
        name: a.name,
        secret,
        root: a.root,
        rights: rights(&a.rights)?,
        expires: a.expires.as_ref().map(expiry).transpose()?,
        bwlimit: a.bwlimit.as_ref().map(bwlimit).transpose()?,
    })
}

fn check_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "._-@+".contains(c);
    if name.is_empty() || name.len() > MAX_NAME_BYTES || !name.chars().all(ok_char) {
        return Err(format!(
            "name must be 1 to {MAX_NAME_BYTES} of A-Z a-z 0-9 . _ - @ +"
        ));
    }
    Ok(())
}

fn rights(list: &[String]) -> Result<Rights, String> {
    let mut r = Rights::default();
    for s in list {
        let slot = match s.as_str() {
            "read" => &mut r.read,
            "write" => &mut r.write,
            other => return Err(format!("rights: unknown right {other:?} (read, write)")),
        };
        if std::mem::replace(slot, true) {
            return Err(format!("rights: {s:?} given twice"));
        }
    }
    if r == Rights::default() {
        return Err("rights: empty (give \"read\", \"write\" or both)".into());
    }
    Ok(r)
}

fn expiry(v: &toml::Value) -> Result<SystemTime, String> {
    let text = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        other => {
            return Err(format!(
                "expires: expected a date, got {}",
                other.type_str()
            ))
        }
    };
    humantime::parse_rfc3339(&text).map_err(|e| {
        format!("expires: {text:?} is not an RFC 3339 UTC time like 2027-01-31T00:00:00Z ({e})")
    })
}

fn bwlimit(v: &toml::Value) -> Result<u64, String> {
    let text = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        other => {
            return Err(format!(
                "bwlimit: expected a rate such as \"500M\", got {}",
                other.type_str()
            ))
        }
    };
    crate::bwlimit::parse_rate(&text).map_err(|e| format!("bwlimit: {e}"))
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads, checks and opens the accounts file at `path`: every root opened, every token
/// read; nothing is returned unless every account loads.
///
/// # Errors
/// [`AccountsError`] naming the file and what is wrong.
pub fn load(path: &Path) -> Result<Accounts, AccountsError> {
    load_as(path, false)
}

/// [`load`] for the `[[account]]` tables of a configuration file ([`parse_embedded`]);
/// a SIGHUP re-reads them the same way.
///
/// # Errors
/// As [`load`].
pub fn load_embedded(path: &Path) -> Result<Accounts, AccountsError> {
    load_as(path, true)
}

fn load_as(path: &Path, embedded: bool) -> Result<Accounts, AccountsError> {
    let err = |message: String| AccountsError {
        path: path.to_path_buf(),
        message,
    };
    let text = read_bounded(path).map_err(&err)?;
    let entries = if embedded {
        parse_embedded(&text)
    } else {
        parse(&text)
    }
    .map_err(&err)?;
    if entries
        .iter()
        .any(|e| matches!(e.secret, Secret::Inline(_)))
    {
        private(path).map_err(&err)?;
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let mut list = Vec::with_capacity(entries.len());
    let mut tokens = HashSet::new();
    for (i, e) in entries.into_iter().enumerate() {
        let at = format!("account {} ({:?})", i + 1, e.name);
        let account = open(e, base).map_err(|m| err(format!("{at}: {m}")))?;
        let token = account.token().map(|t| t.as_bytes().to_vec());
        if !tokens.insert(token) {
            return Err(err(format!("{at}: the same token as another account")));
        }
        list.push(account);
    }
    let accounts = Accounts::from_list(list, Some(path.to_path_buf()));
    Ok(if embedded {
        accounts.embedded()
    } else {
        accounts
    })
}

/// The text of a settings file (this accounts file, or the daemon's configuration file,
/// which may hold accounts inline) of at most [`MAX_FILE_BYTES`].
///
/// # Errors
/// Why it cannot be used, as the tail of a line naming the file: unreadable, too large,
/// not UTF-8.
pub fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

/// Refuses a file that holds tokens and that its group or others may read.
fn private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| format!("cannot stat it: {e}"))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "holds tokens but its mode is {:o}: make it readable by its owner only (chmod 600)",
            mode & 0o777
        ));
    }
    Ok(())
}

fn open(e: Entry, base: &Path) -> Result<Account, String> {
    let bytes = match e.secret {
        Secret::Inline(b) => b,
        Secret::File(p) => read_token_file(&base.join(p))?,
    };
    let token = Token::new(bytes).map_err(|t| format!("token: {t}"))?;
    let root_path = base.join(&e.root);
    let root = Root::open(&root_path).map_err(|f| f.to_string())?;
    if !std::fs::metadata(&root_path).is_ok_and(|m| m.is_dir()) {
        return Err(format!("root {}: not a directory", root_path.display()));
    }
    Ok(
        Account::new(e.name, Some(token), Arc::new(root), e.rights, e.expires)
            .with_bwlimit(e.bwlimit),
    )
}

/// A token file's bytes, one trailing newline dropped (as `--token-file`).
pub(crate) fn read_token_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let limit = sluice_wire::auth::MAX_TOKEN_BYTES as u64 + 2;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit).read_to_end(&mut bytes))
        .map_err(|e| format!("token_file {}: cannot read it: {e}", path.display()))?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
    }
    Ok(bytes)
}
