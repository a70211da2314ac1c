//! A daemon shared by several accounts (`sluice serve --accounts FILE`): roots and
//! rights per account, wrong and expired tokens, rotation on SIGHUP, the audit log,
//! limits, the handshake deadline, drain on SIGTERM, and the daemon's memory under
//! 1,000 idle and 1,000 trickling connections.
//!
//! Slow transfers run through a network namespace (`dmn-*`, 10.42.N.0/24) whose veth
//! is shaped by `tc tbf`: the client runs inside it, the daemon outside on the veth's
//! address.

// Test helpers may unwrap: a panic there is a failed assertion (clippy.toml allows it in
// #[test] functions only).
#![allow(clippy::unwrap_used)]

mod common;

use common::{cp, run_in, ChildGuard, Daemon, Out, BIN, SMALL};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// An accounts directory: roots, token files, the accounts file.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        Site {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A root directory `name`.
    fn root(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::create_dir_all(&p).expect("a root");
        p
    }

    /// A token file holding `token`.
    fn token(&self, name: &str, token: &str) -> PathBuf {
        let p = self.path(&format!("{name}.token"));
        std::fs::write(&p, format!("{token}\n")).expect("a token file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    /// Writes the accounts file (mode 600) and returns its path.
    fn accounts(&self, text: &str) -> PathBuf {
        let p = self.path("accounts.toml");
        std::fs::write(&p, text).expect("the accounts file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }
}

/// One `[[account]]` entry with an inline token.
fn entry(name: &str, token: &str, root: &str, rights: &str, extra: &str) -> String {
    format!(
        "[[account]]\nname = \"{name}\"\ntoken = \"{token}\"\nroot = \"{root}\"\nrights = [{rights}]\n{extra}\n"
    )
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The audit log's lines once it holds `want` of them (the daemon writes a refusal's
/// line after sending the refusal, so the client may return first), or what it holds
/// after 10 s, for the caller's assertion to show.
fn audit_lines_when(path: &Path, want: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while audit_lines(path).len() < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    audit_lines(path)
}

#[track_caller]
fn assert_refused(out: &Out, want: &str) {
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains(want), "want {want:?}: {out:?}");
    assert_eq!(out.stderr.trim().lines().count(), 1, "one line: {out:?}");
}

#[track_caller]
fn assert_ok(out: &Out) {
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// The three accounts of the tests: alice reads and writes `a`, bob only reads `b`,
/// carol only writes `c`.
fn three(site: &Site) -> PathBuf {
    for r in ["a", "b", "c"] {
        site.root(r);
    }
    site.accounts(&format!(
        "{}{}{}",
        entry("alice", "alice-secret", "a", "\"read\", \"write\"", ""),
        entry("bob", "bob-secret", "b", "\"read\"", ""),
        entry("carol", "carol-secret", "c", "\"write\"", "")
    ))
}

#[test]
fn each_account_sees_only_its_root_and_has_only_its_rights() {
    let site = Site::new();
    let accounts = three(&site);
    let audit = site.path("audit.jsonl");
    let d = Daemon::start_with(
        &site.path("a"),
        &["--accounts", s(&accounts), "--audit-log", s(&audit)],
        &[],
    );
    let (alice, bob, carol) = (
        site.token("alice", "alice-secret"),
        site.token("bob", "bob-secret"),
        site.token("carol", "carol-secret"),
    );
    let src = site.path("src.txt");
    std::fs::write(&src, b"hello accounts\n").unwrap();
    std::fs::write(site.path("b/only-b.txt"), b"bob's\n").unwrap();
    let tok = |p: &PathBuf| vec!["--token-file".to_string(), s(p).to_string()];
    let run = |t: &PathBuf, from: &str, to: &str| {
        let mut args = tok(t);
        args.extend([from.to_string(), to.to_string()]);
        cp(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
    };
    // alice pushes into her root, and pulls back; bob's file is not in her root.
    assert_ok(&run(&alice, s(&src), &d.url("in.txt")));
    assert_eq!(
        std::fs::read(site.path("a/in.txt")).unwrap(),
        b"hello accounts\n"
    );
    let back = site.path("back.txt");
    assert_ok(&run(&alice, &d.url("in.txt"), s(&back)));
    assert_refused(
        &run(&alice, &d.url("only-b.txt"), s(&site.path("x"))),
        "does not exist",
    );
    assert_refused(
        &run(&alice, &d.url("../b/only-b.txt"), s(&site.path("x"))),
        "PathOutsideRoot",
    );
    // bob reads his root only, and may not push.
    assert_ok(&run(&bob, &d.url("only-b.txt"), s(&site.path("got-b.txt"))));
    assert_refused(
        &run(&bob, &d.url("in.txt"), s(&site.path("y"))),
        "does not exist",
    );
    let out = run(&bob, s(&src), &d.url("pushed.txt"));
    assert_refused(&out, "may not push");
    assert!(out.stderr.contains("write right"), "{out:?}");
    // carol writes but may not pull.
    assert_refused(&run(&carol, &d.url(""), s(&site.path("z"))), "may not pull");
    assert_ok(&run(&carol, s(&src), &d.url("c.txt")));
    assert!(site.path("c/c.txt").exists() && !site.path("a/c.txt").exists());
    // Nothing was written by a refused push, nor created for a refused pull.
    assert!(!site.path("b/pushed.txt").exists() && !site.path("z").exists());
    // A wrong token.
    let wrong = site.token("wrong", "nobody-secret");
    let out = run(&wrong, s(&src), &d.url("w.txt"));
    assert_refused(&out, "AuthFailed");
    assert!(
        !out.stderr.contains("alice") && !out.stderr.contains("expired"),
        "{out:?}"
    );
    check_audit(&audit, src.metadata().unwrap().len());
}

/// The audit lines of [`each_account_sees_only_its_root_and_has_only_its_rights`].
fn check_audit(audit: &Path, size: u64) {
    let lines = audit_lines_when(audit, 10);
    let text = std::fs::read_to_string(audit).unwrap();
    for secret in [
        "alice-secret",
        "bob-secret",
        "carol-secret",
        "nobody-secret",
    ] {
        assert!(!text.contains(secret), "a token in the audit log: {text}");
    }
    let fields = [
        "ts", "peer", "identity", "op", "path", "bytes", "files", "result", "secs",
    ];
    for l in &lines {
        for f in fields {
            assert!(l.get(f).is_some(), "{f} missing: {l}");
        }
        assert!(l["ts"].as_str().unwrap().ends_with('Z'), "{l}");
        assert!(l["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{l}");
    }
    let find = |id: Option<&str>, op: Option<&str>, result: &str| {
        lines.iter().find(|l| {
            l["identity"].as_str() == id && l["op"].as_str() == op && l["result"] == result
        })
    };
    let push = find(Some("alice"), Some("push"), "ok").expect("alice's push");
    assert_eq!(push["path"], "in.txt");
    assert_eq!(push["bytes"], size);
    assert_eq!(push["files"], 1);
    assert!(find(Some("alice"), Some("pull"), "ok").is_some());
    assert!(find(Some("alice"), Some("pull"), "NotFound").is_some());
    assert!(find(Some("bob"), Some("push"), "PermissionDenied").is_some());
    assert!(find(Some("carol"), Some("pull"), "PermissionDenied").is_some());
    let wrong = find(None, None, "AuthFailed").expect("the wrong token");
    assert!(wrong["path"].is_null());
    assert_eq!(lines.len(), 10, "{text}");
}

#[test]
fn an_expired_token_is_refused_and_only_its_holder_is_told_why() {
    let site = Site::new();
    site.root("a");
    let accounts = site.accounts(&entry(
        "old",
        "old-secret",
        "a",
        "\"read\", \"write\"",
        "expires = \"2020-01-01T00:00:00Z\"",
    ));
    let audit = site.path("audit.jsonl");
    let d = Daemon::start_with(
        &site.path("a"),
        &["--accounts", s(&accounts), "--audit-log", s(&audit)],
        &[],
    );
    let src = site.path("f.txt");
    std::fs::write(&src, b"x").unwrap();
    let old = site.token("old", "old-secret");
    let out = cp(&["--token-file", s(&old), s(&src), &d.url("f.txt")], None);
    assert_refused(&out, "expired");
    assert!(out.stderr.contains("AuthFailed"), "{out:?}");
    let guess = site.token("guess", "guess");
    let out = cp(&["--token-file", s(&guess), s(&src), &d.url("f.txt")], None);
    assert_refused(&out, "AuthFailed");
    assert!(
        !out.stderr.contains("expired") && !out.stderr.contains("old"),
        "{out:?}"
    );
    assert!(!site.path("a/f.txt").exists());
    // The audit names the account whose token was proved, and only that one.
    let lines = audit_lines_when(&audit, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l["result"] == "AuthFailed"),
        "{lines:?}"
    );
    assert_eq!(lines[0]["identity"], "old");
    assert!(lines[1]["identity"].is_null(), "{lines:?}");
}

#[test]
fn a_bad_accounts_file_is_one_line_and_exit_2() {
    let site = Site::new();
    site.root("a");
    let cases = [
        (
            entry("x", "t", "a", "\"admin\"", ""),
            0o600,
            "unknown right \"admin\"",
        ),
        (
            entry("x", "t", "missing", "\"read\"", ""),
            0o600,
            "account 1 (\"x\")",
        ),
        (entry("x", "t", "a", "\"read\"", ""), 0o644, "chmod 600"),
        ("[[account]]\nname = ".to_string(), 0o600, "accounts.toml"),
    ];
    for (text, mode, want) in cases {
        let p = site.accounts(&text);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = run_in(
            BIN,
            &["serve", "--accounts", s(&p), "--listen", "127.0.0.1:0"],
            None,
        );
        assert_eq!(out.code, Some(2), "{text}: {out:?}");
        assert!(out.stderr.contains(want), "{want}: {out:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    let p = site.accounts(&entry("x", "t", "a", "\"read\"", ""));
    let out = run_in(BIN, &["serve", "--accounts", s(&p), "--root", "a"], None);
    assert_eq!(out.code, Some(2), "--accounts with --root: {out:?}");
}

#[path = "accounts/limits.rs"]
mod limits;
#[path = "accounts/netns.rs"]
mod netns;
#[path = "accounts/rss.rs"]
mod rss;
