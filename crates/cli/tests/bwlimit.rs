//! `--bwlimit RATE`: one transfer paced at its source (`cp`), a daemon's total shared
//! fairly between its sessions (`serve`), a push into a limited daemon paced where it
//! reads, an account's own limit, and bad rates.
//!
//! The durations are asserted with generous bands (the machine is shared): a limiter
//! that does nothing fails every one of them.

#![allow(clippy::unwrap_used)]

mod common;

use common::{cp, run_in, Daemon, Out, BIN};
use serde_json::Value;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn file(path: &Path, bytes: usize) {
    let data: Vec<u8> = (0..bytes)
        .map(|i| u8::try_from((i * 7 + i / 4096) % 251).unwrap())
        .collect();
    std::fs::write(path, data).unwrap();
}

/// The `--json` summary's seconds, after checking the copy succeeded.
#[track_caller]
fn seconds(out: &Out) -> f64 {
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    v["seconds"].as_f64().unwrap()
}

#[test]
fn a_20m_limit_makes_a_50_mb_push_last_about_2_5_s() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = dir.path().join("50mb");
    file(&src, 50_000_000);
    let d = Daemon::start(&root);
    let out = cp(
        &["--json", "--bwlimit", "20M", s(&src), &d.url("50mb")],
        None,
    );
    let secs = seconds(&out);
    eprintln!("50 MB at --bwlimit 20M: {secs:.2} s");
    // Paced, the last of its 48 chunks of 1 MiB cannot leave before 2.41 s.
    assert!((2.3..8.0).contains(&secs), "{secs} s, want about 2.5");
    assert_eq!(
        std::fs::metadata(root.join("50mb")).unwrap().len(),
        50_000_000
    );
}

#[test]
fn a_limited_pull_is_paced_where_the_client_reads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    file(&root.join("20mb"), 20_000_000);
    let d = Daemon::start(&root);
    let to = dir.path().join("got");
    let secs = seconds(&cp(
        &["--json", "--bwlimit", "10M", &d.url("20mb"), s(&to)],
        None,
    ));
    eprintln!("20 MB pulled at --bwlimit 10M: {secs:.2} s");
    assert!(secs > 1.6, "{secs} s: the pull was not paced");
    assert_eq!(std::fs::metadata(&to).unwrap().len(), 20_000_000);
}

#[test]
fn two_clients_share_a_limited_daemon_fairly() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    for name in ["a", "b"] {
        file(&root.join(name), 30_000_000);
    }
    let d = Daemon::start_with(&root, &["--bwlimit", "20M"], &[]);
    let pull = |name: &str| {
        let to = dir.path().join(format!("got-{name}"));
        let (url, to) = (d.url(name), s(&to).to_string());
        cp(&["--json", &url, &to], None)
    };
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(|| pull("a"));
        let b = sc.spawn(|| pull("b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (ra, rb) = (30.0 / seconds(&a), 30.0 / seconds(&b));
    eprintln!("two pulls under serve --bwlimit 20M: {ra:.1} and {rb:.1} MB/s");
    assert!(
        (ra - rb).abs() <= 0.2 * ra.max(rb),
        "{ra:.1} vs {rb:.1} MB/s: not within 20 %"
    );
    // Together they stay near the daemon's 20 MB/s (each alone would be far faster).
    assert!(
        ra + rb < 26.0,
        "{ra:.1} + {rb:.1} MB/s is above the daemon's limit"
    );
}

#[test]
fn a_limited_daemon_paces_what_it_receives_and_an_account_has_its_own_limit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = dir.path().join("30mb");
    file(&src, 30_000_000);
    let d = Daemon::start_with(&root, &["--bwlimit", "20M"], &[]);
    let secs = seconds(&cp(&["--json", s(&src), &d.url("in")], None));
    eprintln!("30 MB pushed into serve --bwlimit 20M: {secs:.2} s");
    assert!(
        secs > 1.2,
        "{secs} s: the daemon did not cap what it received"
    );
    drop(d);

    // An account limited to 10M, on a daemon with no limit of its own.
    let accounts = dir.path().join("accounts.toml");
    let text = format!(
        "[[account]]\nname = \"slow\"\ntoken = \"slow-secret\"\nroot = \"{}\"\nrights = [\"read\", \"write\"]\nbwlimit = \"10M\"\n",
        s(&root)
    );
    std::fs::write(&accounts, text).unwrap();
    std::fs::set_permissions(
        &accounts,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "slow-secret").unwrap();
    let d = Daemon::start_with(&root, &["--accounts", s(&accounts)], &[]);
    let back = dir.path().join("back");
    let secs = seconds(&cp(
        &["--json", "--token-file", s(&token), &d.url("in"), s(&back)],
        None,
    ));
    eprintln!("30 MB pulled from an account with bwlimit 10M: {secs:.2} s");
    assert!(secs > 2.4, "{secs} s: the account's limit did not hold");
    assert_eq!(std::fs::metadata(&back).unwrap().len(), 30_000_000);
}

#[test]
fn a_bad_rate_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        BIN,
        &[
            "cp",
            "--bwlimit",
            "fast",
            s(dir.path()),
            "sluice://127.0.0.1:1/x",
        ],
        None,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--bwlimit \"fast\" is not a rate"),
        "{out:?}"
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
    let out = run_in(
        BIN,
        &[
            "serve",
            "--root",
            s(dir.path()),
            "--listen",
            "127.0.0.1:0",
            "--bwlimit",
            "10k",
        ],
        None,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("below the lowest limit"), "{out:?}");
}
