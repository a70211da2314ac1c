//! The daemon's audit log (`sluice serve --audit-log FILE`): one JSON line per session
//! when it ends and one per refused connection, appended.
//!
//! A line holds `ts` (RFC 3339 UTC), `peer` (address), `identity` (account name, or
//! null before authentication or without it), `op` (`push`, `pull`, or null when the
//! session never opened), `path` (as the client named it), `bytes`, `files`,
//! `result` (`ok` or the error code's name, e.g. `AuthFailed`, `Busy`) and `secs`.
//! Tokens and proofs are never part of a record: the type has no field that could
//! hold one.

use serde::Serialize;
use sluice_wire::{Direction, ErrorCode};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Longest `path` recorded, in bytes (a client names at most a protocol path).
pub const MAX_PATH_BYTES: usize = 4096;

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    /// When the session ended or the connection was refused, RFC 3339 UTC.
    pub ts: String,
    /// The client's address.
    pub peer: String,
    /// The account, when the client proved one.
    pub identity: Option<String>,
    /// `push` or `pull`, once the session opened.
    pub op: Option<&'static str>,
    /// The path the client opened.
    pub path: Option<String>,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Files moved.
    pub files: u64,
    /// `ok`, or the error code's name.
    pub result: &'static str,
    /// How long the session lasted.
    pub secs: f64,
}

impl Record {
    /// A record at `at` for `peer`, with no session details yet.
    pub fn new(at: SystemTime, peer: &str) -> Record {
        Record {
            ts: humantime::format_rfc3339_millis(at).to_string(),
            peer: peer.to_string(),
            identity: None,
            op: None,
            path: None,
            bytes: 0,
            files: 0,
            result: "ok",
            secs: 0.0,
        }
    }

    /// Sets the time of the record (when the session ended).
    pub fn stamp(&mut self, at: SystemTime) {
        self.ts = humantime::format_rfc3339_millis(at).to_string();
    }

    /// Sets the operation and the path (cut to [`MAX_PATH_BYTES`]).
    pub fn open(&mut self, direction: Direction, path: &str) {
        self.op = Some(op_name(direction));
        let mut end = path.len().min(MAX_PATH_BYTES);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        self.path = Some(path[..end].to_string());
    }

    /// Sets the result: `ok` or the code's name.
    pub fn result(&mut self, code: Option<ErrorCode>) {
        self.result = code.map_or("ok", ErrorCode::name);
    }

    /// Sets the duration, in seconds rounded to milliseconds.
    pub fn took(&mut self, d: Duration) {
        self.secs = (d.as_secs_f64() * 1000.0).round() / 1000.0;
    }

    /// The JSON line (ending in '\n').
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"ts\":\"{}\",\"result\":\"unrecordable: {e}\"}}",
                self.ts
            )
        });
        s.push('\n');
        s
    }
}

/// The name of an operation in the log.
pub fn op_name(direction: Direction) -> &'static str {
    match direction {
        Direction::Push => "push",
        Direction::Pull => "pull",
        Direction::Deliver => "deliver",
    }
}

/// An append-only audit file shared by every connection thread.
#[derive(Debug)]
pub struct AuditLog(Mutex<File>);

impl AuditLog {
    /// Opens (creating, mode 0600) `path` for appending.
    ///
    /// # Errors
    /// It cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(AuditLog(Mutex::new(file)))
    }

    /// Appends `record` as one line (one `write` of the whole line); a failure is
    /// logged, not fatal to the session.
    pub fn write(&self, record: &Record) {
        let line = record.line();
        let mut f = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = f.write_all(line.as_bytes()) {
            tracing::warn!("cannot append to the audit log: {e}");
        }
    }
}

/// A daemon's audit log, or none: every record goes through it.
#[derive(Debug, Default)]
pub struct Auditor(Option<AuditLog>);

impl Auditor {
    /// Records into `log`, or nowhere.
    pub fn new(log: Option<AuditLog>) -> Auditor {
        Auditor(log)
    }

    /// Appends `record`.
    pub fn write(&self, record: &Record) {
        if let Some(log) = &self.0 {
            log.write(record);
        }
    }

    /// Records a connection from `peer` ended before any session, after `took`, with
    /// `result` (a code's name, or `Timeout`).
    pub fn refused(&self, peer: &str, result: &'static str, took: Duration) {
        if self.0.is_some() {
            let mut rec = Record::new(SystemTime::now(), peer);
            rec.result = result;
            rec.took(took);
            self.write(&rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_json_line_with_every_field() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let mut r = Record::new(at, "10.42.0.2:5555");
        r.identity = Some("alice".into());
        r.open(Direction::Push, "in/x");
        r.bytes = 7;
        r.files = 1;
        r.result(Some(ErrorCode::PermissionDenied));
        r.took(Duration::from_micros(1_234_567));
        let line = r.line();
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ts"], "2027-01-15T08:00:00.123Z");
        assert_eq!(v["peer"], "10.42.0.2:5555");
        assert_eq!(v["identity"], "alice");
        assert_eq!(v["op"], "push");
        assert_eq!(v["path"], "in/x");
        assert_eq!(v["bytes"], 7);
        assert_eq!(v["files"], 1);
        assert_eq!(v["result"], "PermissionDenied");
        assert_eq!(v["secs"], 1.235);
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 9, "{line}");
    }

    #[test]
    fn a_refused_connection_has_null_identity_op_and_path() {
        let mut r = Record::new(SystemTime::UNIX_EPOCH, "[::1]:1");
        r.result(Some(ErrorCode::Busy));
        let v: serde_json::Value = serde_json::from_str(&r.line()).unwrap();
        assert!(v["identity"].is_null() && v["op"].is_null() && v["path"].is_null());
        assert_eq!(v["result"], "Busy");
        r.result(None);
        assert_eq!(r.result, "ok");
    }

    #[test]
    fn a_long_path_is_cut_on_a_character_boundary() {
        let mut r = Record::new(SystemTime::UNIX_EPOCH, "p");
        let long = "é".repeat(MAX_PATH_BYTES);
        r.open(Direction::Pull, &long);
        let p = r.path.unwrap();
        assert!(p.len() <= MAX_PATH_BYTES && p.len() >= MAX_PATH_BYTES - 1);
    }

    #[test]
    fn lines_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        for _ in 0..2 {
            let log = AuditLog::open(&path).unwrap();
            log.write(&Record::new(SystemTime::UNIX_EPOCH, "a"));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
    }
}
