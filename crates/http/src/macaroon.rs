//! Scoped tokens the daemon issues (`POST` with `Content-Type:
//! application/macaroon-request`, as gfal2 and FTS3 ask dCache for macaroons): a token
//! limited to a path, a set of activities and an expiry, for an account, signed with
//! HMAC-SHA-256 under a key the daemon draws at start (tokens end with the daemon), or
//! one read from a file its site's daemons share (`--http-token-key`).
//!
//! A token is `sluice1.` + base64url(payload JSON) + `.` + base64url(MAC). It is
//! self-contained: the daemon keeps nothing per token. A token issued under another
//! scoped token is never wider than it (path under, activities a subset, expiry no
//! later).

use crate::auth::{Activity, Grant};
use crate::error::Fail;
use crate::target::Target;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The prefix of every token this daemon issues.
pub const PREFIX: &str = "sluice1.";
/// Validity when the request asks for none.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(3600);
/// Longest validity granted.
pub const MAX_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// Largest macaroon request body read.
pub const MAX_REQUEST_BYTES: usize = 16 << 10;

/// The daemon's signing key.
pub struct Key(ring::hmac::Key);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// What a scoped token allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    /// The account it acts as.
    #[serde(rename = "a")]
    pub account: String,
    /// The path (relative to the account's root, no leading `/`; empty: the whole
    /// root) it and everything under it may be used.
    #[serde(rename = "p")]
    pub path: String,
    /// The activities allowed.
    #[serde(rename = "act")]
    pub activities: Vec<String>,
    /// Expiry, seconds since the epoch.
    #[serde(rename = "exp")]
    pub expires: u64,
    /// Makes every token unique.
    #[serde(rename = "n")]
    pub nonce: String,
}

impl Scope {
    fn has(&self, a: Activity) -> bool {
        self.activities
            .iter()
            .any(|s| Activity::parse(s) == Some(a))
    }

    fn covers(&self, rel: &str) -> bool {
        self.path.is_empty()
            || rel == self.path
            || rel
                .strip_prefix(self.path.as_str())
                .is_some_and(|r| r.starts_with('/'))
    }

    /// Refuses `activity` on `target` outside this scope (403).
    ///
    /// # Errors
    /// 403 naming the limit.
    pub fn allow(&self, activity: Activity, target: &Target) -> Result<(), Fail> {
        if !self.has(activity) {
            return Err(Fail::forbidden(format!(
                "the scoped token does not allow {} (it allows {})",
                activity.name(),
                self.activities.join(",")
            )));
        }
        let rel = target.rel.as_ref().map_or("", |r| r.as_str());
        if !self.covers(rel) {
            return Err(Fail::forbidden(format!(
                "the scoped token is for /{}, not {}",
                self.path,
                target.display()
            )));
        }
        Ok(())
    }
}

impl Key {
    /// A fresh random key.
    ///
    /// # Errors
    /// The system's random source failed.
    pub fn random() -> std::io::Result<Key> {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Key(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &k)))
    }

    /// The key kept in `path` (shared by the daemons of a site, so that a token one
    /// issued is good at another after a redirect): at least 32 bytes, readable by its
    /// owner only.
    ///
    /// # Errors
    /// One line naming the file and what is wrong.
    pub fn from_file(path: &std::path::Path) -> Result<Key, String> {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let at = |m: String| format!("--http-token-key {}: {m}", path.display());
        let f = std::fs::File::open(path).map_err(|e| at(format!("cannot read it: {e}")))?;
        let mode = f
            .metadata()
            .map_err(|e| at(e.to_string()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(at(format!(
                "its mode is {:o}: make it readable by its owner only (chmod 600)",
                mode & 0o777
            )));
        }
        let mut bytes = Vec::new();
        f.take(4096)
            .read_to_end(&mut bytes)
            .map_err(|e| at(e.to_string()))?;
        if bytes.trim_ascii().len() < 32 {
            return Err(at("shorter than 32 bytes".into()));
        }
        Ok(Key(ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            bytes.trim_ascii(),
        )))
    }

    /// The signed token for `scope`.
    pub fn issue(&self, scope: &Scope) -> String {
        let payload = serde_json::to_vec(scope).unwrap_or_default();
        let mac = ring::hmac::sign(&self.0, &payload);
        format!(
            "{PREFIX}{}.{}",
            B64.encode(&payload),
            B64.encode(mac.as_ref())
        )
    }

    /// The scope of `token` if this daemon issued it; `Ok(None)` for a token of
    /// another kind (an account's).
    ///
    /// # Errors
    /// 401 for a token with this daemon's prefix that is forged, damaged or expired.
    pub fn verify(&self, token: &[u8], now: SystemTime) -> Result<Option<Scope>, Fail> {
        let Some(rest) = token.strip_prefix(PREFIX.as_bytes()) else {
            return Ok(None);
        };
        let bad = || {
            Fail::new(
                StatusCode::UNAUTHORIZED,
                "the scoped token is not valid here",
            )
        };
        let mut parts = rest.split(|b| *b == b'.');
        let (Some(p), Some(m), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let payload = B64.decode(p).map_err(|_| bad())?;
        let mac = B64.decode(m).map_err(|_| bad())?;
        ring::hmac::verify(&self.0, &payload, &mac).map_err(|_| bad())?;
        let scope: Scope = serde_json::from_slice(&payload).map_err(|_| bad())?;
        if unix(now) >= scope.expires {
            return Err(Fail::new(
                StatusCode::UNAUTHORIZED,
                "the scoped token has expired",
            ));
        }
        Ok(Some(scope))
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A macaroon request's body, as gfal2 and FTS3 send it.
#[derive(Debug, Deserialize)]
struct Request {
    #[serde(default)]
    caveats: Vec<String>,
    validity: Option<String>,
}

/// The scope a request for `target`, by `grant`, with `body`, gets at `now`.
///
/// # Errors
/// 400 for a body that is not a macaroon request or asks for an unknown caveat; 403 for
/// a scope wider than the requester's.
pub fn requested(
    grant: &Grant,
    target: &Target,
    body: &[u8],
    now: SystemTime,
) -> Result<Scope, Fail> {
    let req: Request = if body.iter().all(u8::is_ascii_whitespace) {
        Request {
            caveats: Vec::new(),
            validity: None,
        }
    } else {
        serde_json::from_slice(body).map_err(|e| Fail::bad(format!("macaroon request: {e}")))?
    };
    let validity = match &req.validity {
        Some(v) => iso_duration(v).ok_or_else(|| {
            Fail::bad(format!(
                "validity {v:?}: not an ISO 8601 duration like PT60M"
            ))
        })?,
        None => DEFAULT_VALIDITY,
    }
    .min(MAX_VALIDITY);
    let mut path = target
        .rel
        .as_ref()
        .map_or(String::new(), |r| r.as_str().to_owned());
    let mut activities = vec!["DOWNLOAD".to_owned(), "LIST".to_owned()];
    for c in &req.caveats {
        caveat(c, &mut path, &mut activities)?;
    }
    let mut scope = Scope {
        account: grant.account.name.clone(),
        path,
        activities,
        expires: unix(now).saturating_add(validity.as_secs()),
        nonce: nonce()?,
    };
    narrow(grant, &mut scope)?;
    Ok(scope)
}

fn nonce() -> Result<String, Fail> {
    let mut n = [0u8; 12];
    getrandom::fill(&mut n)
        .map_err(|e| Fail::new(StatusCode::INTERNAL_SERVER_ERROR, format!("random: {e}")))?;
    Ok(B64.encode(n))
}

/// Applies one caveat (`activity:A,B`, `path:/p`, `before:TIME` is refused: use
/// `validity`).
fn caveat(c: &str, path: &mut String, activities: &mut Vec<String>) -> Result<(), Fail> {
    let (name, value) = c
        .split_once(':')
        .ok_or_else(|| Fail::bad(format!("caveat {c:?}: expected NAME:VALUE")))?;
    match name.trim() {
        "activity" => {
            let mut list = Vec::new();
            for a in value.split(',') {
                let act = Activity::parse(a.trim())
                    .ok_or_else(|| Fail::bad(format!("caveat {c:?}: unknown activity {a:?}")))?;
                list.push(act.name().to_owned());
            }
            *activities = list;
        }
        "path" => {
            let t = crate::target::parse(value.trim())?;
            *path = t
                .rel
                .map_or(String::new(), sluice_wire::RelPath::into_string);
        }
        other => {
            return Err(Fail::bad(format!(
                "caveat {c:?}: unknown caveat {other:?} (activity, path)"
            )))
        }
    }
    Ok(())
}

/// Refuses a scope the requester could not use itself.
fn narrow(grant: &Grant, scope: &mut Scope) -> Result<(), Fail> {
    let rights = grant.account.rights;
    for a in &scope.activities {
        let writes = !matches!(
            Activity::parse(a),
            Some(Activity::Download | Activity::List)
        );
        if (writes && !rights.write) || (!writes && !rights.read) {
            return Err(Fail::forbidden(format!(
                "account {:?} may not grant {a}: it has the rights {}",
                grant.account.name,
                rights.describe()
            )));
        }
    }
    let Some(parent) = &grant.scope else {
        return Ok(());
    };
    if !parent.covers(&scope.path)
        || !scope
            .activities
            .iter()
            .all(|a| parent.activities.contains(a))
    {
        return Err(Fail::forbidden(
            "a scoped token can only grant within its own scope",
        ));
    }
    scope.expires = scope.expires.min(parent.expires);
    Ok(())
}

/// An ISO 8601 duration of days, hours, minutes and seconds (`P1D`, `PT60M`,
/// `PT1H30M`, `PT3600S`).
pub fn iso_duration(s: &str) -> Option<Duration> {
    let rest = s.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut secs: u64 = 0;
    if !days.is_empty() {
        secs = days
            .strip_suffix('D')?
            .parse::<u64>()
            .ok()?
            .checked_mul(86_400)?;
    }
    let mut num = String::new();
    for ch in time.chars() {
        if ch.is_ascii_digit() {
            num.push(ch);
            continue;
        }
        let unit = match ch {
            'H' => 3600,
            'M' => 60,
            'S' => 1,
            _ => return None,
        };
        secs = secs.checked_add(num.parse::<u64>().ok()?.checked_mul(unit)?)?;
        num.clear();
    }
    if !num.is_empty() || s == "P" || s.ends_with('T') {
        return None;
    }
    Some(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests;
