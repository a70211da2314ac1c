//! What a daemon session may do: the account's rights checked at `Open`, and the half
//! of the session (sink or source) for the path it opened, under the account's root.

use crate::accounts::Account;
use crate::audit::Record;
use crate::error::EngineError;
use crate::fs::{EntryKind, Root};
use crate::session::{source_start, DestMap, Role};
use crate::source::ScanSpec;
use sluice_wire::{Direction, ErrorCode, Open};
use std::sync::Arc;

/// The half of the session this daemon runs for `open`: a sink for a push, a
/// source for a pull, with the path checked under the root.
pub(crate) fn role_for(root: &Arc<Root>, open: &Open) -> Result<Role, EngineError> {
    match open.direction {
        Direction::Push => sink_role(root, &open.path),
        Direction::Pull | Direction::Deliver => source_role(root, &open.path),
    }
}

/// Receives under the destination typed as `raw` (its directory created).
fn sink_role(root: &Arc<Root>, raw: &str) -> Result<Role, EngineError> {
    let dest = DestMap::for_destination(raw, |p| {
        root.entry_metadata(p)
            .is_ok_and(|m| m.kind == EntryKind::Dir)
    })
    .map_err(|m| bad_path(format!("destination {raw:?}: {m}")))?;
    if let Some(base) = &dest.base {
        root.create_dir_all(base, 0o755)?;
    }
    Ok(Role::Sink {
        root: Arc::clone(root),
        dest,
    })
}

/// Sends the source typed as `raw`, which must exist (and be a directory when its
/// contents are asked for: `cp` and rsync refuse `file/`).
fn source_role(root: &Arc<Root>, raw: &str) -> Result<Role, EngineError> {
    let (start, prefix) =
        source_start(raw).map_err(|m| bad_path(format!("source {raw:?}: {m}")))?;
    if let Some(s) = &start {
        if !root.exists(s)? {
            return Err(EngineError::Refused {
                code: ErrorCode::NotFound,
                message: format!("{raw:?} does not exist on the server"),
            });
        }
        let kind = root.entry_metadata(s)?.kind;
        if prefix.is_none() && !matches!(kind, EntryKind::Dir | EntryKind::Symlink) {
            return Err(EngineError::Refused {
                code: ErrorCode::NotFound,
                message: format!(
                    "{raw:?} is not a directory, but the trailing '/' asks for its contents"
                ),
            });
        }
    }
    Ok(Role::Source(vec![ScanSpec {
        root: Arc::clone(root),
        start,
        prefix,
    }]))
}

/// Refuses `direction` unless `account`'s rights allow it.
pub(crate) fn allowed(account: &Account, direction: Direction) -> Result<(), EngineError> {
    if account.rights.allow(direction) {
        return Ok(());
    }
    let (op, right) = match direction {
        Direction::Push => ("push to", "write"),
        Direction::Pull => ("pull from", "read"),
        Direction::Deliver => ("copy from", "read"),
    };
    Err(EngineError::Refused {
        code: ErrorCode::PermissionDenied,
        message: format!(
            "account {:?} may not {op} this daemon: it lacks the {right} right (it has: {})",
            account.name,
            account.rights.describe()
        ),
    })
}

pub(crate) fn busy(message: String) -> EngineError {
    EngineError::Refused {
        code: ErrorCode::Busy,
        message,
    }
}

/// A session as a drain's report names it.
pub(crate) fn describe(what: &str, rec: &Record) -> String {
    format!(
        "{what} of {} from {}: {} {:?}",
        rec.identity.as_deref().unwrap_or("(no account)"),
        rec.peer,
        rec.op.unwrap_or("?"),
        rec.path.as_deref().unwrap_or("")
    )
}

fn bad_path(message: String) -> EngineError {
    EngineError::Refused {
        code: ErrorCode::PathOutsideRoot,
        message,
    }
}
