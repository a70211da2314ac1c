//! Who a request is and what it may do: `Authorization: Bearer TOKEN` mapped to the
//! daemon's accounts (every account's token compared in constant time,
//! [`Accounts::find_bearer`]) or to a scoped token this daemon issued
//! ([`crate::macaroon`]); rights and root per account, a scoped token's path and
//! activities on top.
//!
//! Missing or unknown credentials: 401 with `WWW-Authenticate: Bearer`; an expired
//! token: 401; an account or token lacking the right: 403.

use crate::error::Fail;
use crate::macaroon::{Key, Scope};
use crate::target::Target;
use hyper::header::{HeaderMap, AUTHORIZATION};
use hyper::StatusCode;
use sluice_engine::accounts::{Account, Accounts};
use std::sync::Arc;
use std::time::SystemTime;

/// What a request does, in the activity names of dCache's macaroons (which gfal2 asks
/// for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Read a file's bytes (GET, the source side of a copy).
    Download,
    /// Write a file (PUT, the destination of a copy).
    Upload,
    /// Remove a file or directory.
    Delete,
    /// Create a directory.
    Manage,
    /// List a directory or stat an entry (PROPFIND, HEAD).
    List,
}

impl Activity {
    /// Its name in a caveat.
    pub fn name(self) -> &'static str {
        match self {
            Activity::Download => "DOWNLOAD",
            Activity::Upload => "UPLOAD",
            Activity::Delete => "DELETE",
            Activity::Manage => "MANAGE",
            Activity::List => "LIST",
        }
    }

    /// The activity named `s` (case-insensitive); `READ_METADATA` is `LIST`.
    pub fn parse(s: &str) -> Option<Activity> {
        let all = [
            Activity::Download,
            Activity::Upload,
            Activity::Delete,
            Activity::Manage,
            Activity::List,
        ];
        if s.eq_ignore_ascii_case("READ_METADATA") {
            return Some(Activity::List);
        }
        all.into_iter().find(|a| a.name().eq_ignore_ascii_case(s))
    }

    /// Whether the account right `write` (else `read`) is needed.
    fn writes(self) -> bool {
        matches!(self, Activity::Upload | Activity::Delete | Activity::Manage)
    }
}

/// An authenticated request: its account and, for a scoped token, the scope.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The account (its root and rights).
    pub account: Arc<Account>,
    /// The scoped token's limits, if the request used one.
    pub scope: Option<Scope>,
}

/// 401 with the reason; the response adds `WWW-Authenticate: Bearer`.
fn unauthorized(message: impl Into<String>) -> Fail {
    Fail::new(StatusCode::UNAUTHORIZED, message)
}

/// The grant of the request with `headers`, at `now`.
///
/// # Errors
/// 401 for missing, malformed, unknown or expired credentials.
pub fn authenticate(
    accounts: &Accounts,
    key: &Key,
    headers: &HeaderMap,
    query: Option<&str>,
    now: SystemTime,
) -> Result<Grant, Fail> {
    let from_query = query.and_then(authz_param);
    let presented = match (headers.get(AUTHORIZATION), &from_query) {
        (Some(v), _) => Some(bearer(v.as_bytes())?),
        (None, Some(t)) => Some(t.as_bytes()),
        (None, None) => None,
    };
    let Some(token) = presented else {
        return match accounts.open_account() {
            Some(a) => Ok(Grant {
                account: Arc::clone(a),
                scope: None,
            }),
            None => Err(unauthorized(
                "no credentials: send Authorization: Bearer TOKEN",
            )),
        };
    };
    if let Some(scope) = key.verify(token, now)? {
        let account = accounts
            .by_name(&scope.account)
            .ok_or_else(|| unauthorized("the scoped token's account no longer exists"))?;
        return live(Arc::clone(account), Some(scope), now);
    }
    match accounts.find_bearer(token) {
        Some(a) => live(Arc::clone(a), None, now),
        None if accounts.open_account().is_some() => Err(unauthorized(
            "this daemon asks for no token, and the one sent is not one it issued",
        )),
        None => Err(unauthorized("the bearer token matches no account")),
    }
}

/// The `authz=TOKEN` parameter of a query (how a URL carries a scoped token, as
/// `targetWithMacaroon` gives it), percent-decoded.
fn authz_param(query: &str) -> Option<String> {
    let raw = query.split('&').find_map(|kv| kv.strip_prefix("authz="))?;
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

fn live(account: Arc<Account>, scope: Option<Scope>, now: SystemTime) -> Result<Grant, Fail> {
    if account.expired(now) {
        return Err(unauthorized(format!(
            "the token of account {:?} has expired",
            account.name
        )));
    }
    Ok(Grant { account, scope })
}

/// The token of an `Authorization: Bearer TOKEN` value.
fn bearer(value: &[u8]) -> Result<&[u8], Fail> {
    let scheme = b"bearer ";
    if value.len() <= scheme.len() || !value[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return Err(unauthorized(
            "Authorization: only the Bearer scheme is accepted",
        ));
    }
    Ok(value[scheme.len()..].trim_ascii())
}

impl Grant {
    /// Refuses `activity` on `target` unless the account's rights and the token's scope
    /// allow it (403).
    ///
    /// # Errors
    /// 403 naming what is missing.
    pub fn allow(&self, activity: Activity, target: &Target) -> Result<(), Fail> {
        let rights = self.account.rights;
        let (ok, right) = if activity.writes() {
            (rights.write, "write")
        } else {
            (rights.read, "read")
        };
        if !ok {
            return Err(Fail::forbidden(format!(
                "account {:?} may not {}: it lacks the {right} right (it has: {})",
                self.account.name,
                activity.name().to_lowercase(),
                rights.describe()
            )));
        }
        match &self.scope {
            Some(scope) => scope.allow(activity, target),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme() {
        assert_eq!(bearer(b"Bearer abc ").ok(), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer x").ok(), Some(&b"x"[..]));
        assert!(bearer(b"Basic abc").is_err());
        assert!(bearer(b"Bearer ").is_err());
    }

    #[test]
    fn authz_in_the_query() {
        assert_eq!(
            authz_param("a=1&authz=sluice1.x%2Ey").as_deref(),
            Some("sluice1.x.y")
        );
        assert_eq!(authz_param("a=1"), None);
    }

    #[test]
    fn activities_by_name() {
        assert_eq!(Activity::parse("download"), Some(Activity::Download));
        assert_eq!(Activity::parse("READ_METADATA"), Some(Activity::List));
        assert_eq!(Activity::parse("FOO"), None);
    }
}
