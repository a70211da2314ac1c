//! The pieces both ends of `sluice cp` over ssh agree on, with no I/O: scp's rule for
//! what is a remote endpoint (`[user@]host:path`), how a remote path becomes the far
//! side's root and the session's path, the far side's ready line, and the quoting of a
//! remote command line.

use std::net::{IpAddr, SocketAddr};

/// The first word of the far side's one ready line (the version of this little
/// protocol: a client that reads another version refuses it).
pub const READY_PREFIX: &str = "SLUICE1 READY";

/// A `[user@]host:path` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// What ssh is given as the destination: `user@host` or `host`, an IPv6 address
    /// without its brackets.
    pub dest: String,
    /// The path on the far side as typed (relative to the remote home; may be empty).
    pub path: String,
}

/// The endpoint `s` as scp reads it: `Some` when it is `[user@]host:path` (a ':'
/// before any '/', not at the start; `[v6addr]:path` and `user@[v6addr]:path` too),
/// `None` when it is a local path or a `sluice://` URL. So `./a:b` and `/x/a:b` stay
/// local, as in scp.
///
/// # Errors
/// The host is empty (`user@:path`).
pub fn parse_scp(s: &str) -> Option<Result<SshTarget, String>> {
    if s.starts_with("sluice://") {
        return None;
    }
    let colon = scp_colon(s)?;
    let (host, path) = (&s[..colon], &s[colon + 1..]);
    let (user, host) = match host.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, host),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() || user.is_some_and(str::is_empty) {
        return Some(Err(format!("{s:?} has no host: expected [user@]host:path")));
    }
    let dest = match user {
        Some(u) => format!("{u}@{host}"),
        None => host.to_string(),
    };
    Some(Ok(SshTarget {
        dest,
        path: path.to_string(),
    }))
}

/// The index of the ':' that ends the host part, by scp's `colon()`: none when the
/// string starts with ':' or has a '/' first; inside `[...]` a ':' does not count.
fn scp_colon(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.first() == Some(&b':') {
        return None;
    }
    let mut bracket = b.first() == Some(&b'[');
    for (i, &c) in b.iter().enumerate() {
        if c == b'@' && b.get(i + 1) == Some(&b'[') {
            bracket = true;
        }
        if c == b']' && b.get(i + 1) == Some(&b':') && bracket {
            return Some(i + 1);
        }
        if c == b':' && !bracket {
            return Some(i);
        }
        if c == b'/' {
            return None;
        }
    }
    None
}

/// The far side's root and the session's path for a remote path typed as `raw`: the
/// root is the path's parent directory and the session names only the path's last
/// component (kept with its trailing '/'), so the daemon's rules decide what a push
/// creates (`cp -r` and rsync's: a new name, or into an existing directory) and a pull
/// names its file relative to the root. A path that is a directory's contents (`/`,
/// `.`, `dir/.`, empty: the remote home) is its own root, with the session's path `/`.
pub fn split_remote_path(raw: &str) -> (String, String) {
    let raw = raw.strip_prefix("~/").unwrap_or(raw);
    let raw = if raw == "~" { "" } else { raw };
    let trimmed = raw.trim_end_matches('/');
    if trimmed.is_empty() {
        let root = if raw.is_empty() { "." } else { "/" };
        return (root.to_string(), "/".to_string());
    }
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((parent, name)) => (parent, name),
        None => (".", trimmed),
    };
    if name == "." || name == ".." {
        return (trimmed.to_string(), "/".to_string());
    }
    let slash = if raw.ends_with('/') { "/" } else { "" };
    (parent.to_string(), format!("{name}{slash}"))
}

/// What the far side says once it listens: where, and the fingerprint of its
/// certificate (`None` until the far side has TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The address the far side listens on (the one the ssh connection arrived at, or
    /// 127.0.0.1 with `--via-ssh`).
    pub addr: SocketAddr,
    /// `sha256:...` of the far side's certificate; `None` for "none".
    pub fingerprint: Option<String>,
}

impl Ready {
    /// The line the far side prints (without its newline):
    /// `SLUICE1 READY port=P host=IP fingerprint=sha256:...|none`.
    pub fn line(&self) -> String {
        format!(
            "{READY_PREFIX} port={} host={} fingerprint={}",
            self.addr.port(),
            self.addr.ip(),
            self.fingerprint.as_deref().unwrap_or("none")
        )
    }

    /// Reads a ready line; `None` when `line` is not one (it is then the far side's
    /// error, shown as it is). Fields it does not know are ignored.
    pub fn parse(line: &str) -> Option<Ready> {
        let rest = line.trim_end().strip_prefix(READY_PREFIX)?;
        let (mut port, mut host, mut fingerprint) = (None, None, None);
        for field in rest.split_whitespace() {
            match field.split_once('=')? {
                ("port", p) => port = p.parse::<u16>().ok(),
                ("host", h) => host = h.parse::<IpAddr>().ok(),
                ("fingerprint", "none") => fingerprint = Some(None),
                ("fingerprint", f) if f.starts_with("sha256:") => {
                    fingerprint = Some(Some(f.to_string()));
                }
                _ => {}
            }
        }
        Some(Ready {
            addr: SocketAddr::new(host?, port.filter(|p| *p != 0)?),
            fingerprint: fingerprint?,
        })
    }
}

/// `s` as one word for a POSIX shell (the far side's login shell runs the command
/// line ssh sends): in single quotes, each `'` as `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Splits a remote-shell command (`-e "ssh -p 2222 -i 'my key'"`) into words as a
/// shell would: whitespace separates, single quotes keep everything, double quotes
/// keep everything but `\"` and `\\`, a backslash outside quotes keeps the next
/// character.
///
/// # Errors
/// A quote is not closed, or there is no word at all.
pub fn split_command(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let (mut word, mut in_word) = (String::new(), false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                continue;
            }
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some(c) => word.push(c),
                    None => return Err(format!("{s:?}: a ' is not closed")),
                }
            },
            '"' => {
                double_quoted(&mut chars, &mut word).ok_or(format!("{s:?}: a \" is not closed"))?
            }
            '\\' => word.extend(chars.next()),
            c => word.push(c),
        }
        in_word = true;
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("the remote shell command is empty".into());
    }
    Ok(words)
}

/// The rest of a double-quoted string, appended to `word`; `None` when it is not closed.
fn double_quoted(chars: &mut std::str::Chars<'_>, word: &mut String) -> Option<()> {
    loop {
        match chars.next()? {
            '"' => return Some(()),
            '\\' => match chars.next()? {
                c @ ('"' | '\\') => word.push(c),
                c => {
                    word.push('\\');
                    word.push(c);
                }
            },
            c => word.push(c),
        }
    }
}

#[cfg(test)]
mod tests;
