//! `sluice serve --config FILE`: keys, `--check`, the bad-input cases of issue 22 (one
//! line each, exit 2, nothing started), a daemon run from a file with inline accounts,
//! and SIGHUP re-reading the file.

#![allow(clippy::unwrap_used)]

mod common;

use common::{cp, run_in, ChildGuard, Out, BIN};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes `text` as a configuration file (mode 600: it may hold tokens).
fn config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("sluice.toml");
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// The lines every test file starts with: small buffers, a state directory.
fn base(dir: &Path) -> String {
    format!(
        "buffer-mem = \"64MiB\"\nchunk-size = \"1MiB\"\nstate-dir = \"{}\"\n",
        s(&dir.join("state"))
    )
}

#[track_caller]
fn assert_bad_input(out: &Out, want: &[&str]) {
    assert_eq!(out.code, Some(2), "{out:?}");
    let lines: Vec<&str> = out.stderr.trim().lines().collect();
    assert_eq!(lines.len(), 1, "one line: {out:?}");
    for w in want {
        assert!(lines[0].contains(w), "want {w:?} in {:?}", lines[0]);
    }
    assert!(out.stdout.is_empty(), "nothing started: {out:?}");
}

fn serve_with(cfg: &Path, extra: &[&str]) -> Out {
    let mut args = vec!["serve", "--config", s(cfg)];
    args.extend_from_slice(extra);
    run_in(BIN, &args, None)
}

#[test]
fn check_prints_the_effective_settings_and_the_plan_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let text = format!(
        "{}root = \"{}\"\nlisten = \"127.0.0.1:7\"\nmax-sessions = 5\n",
        base(dir.path()),
        s(&root)
    );
    let cfg = config(dir.path(), &text);
    let out = serve_with(&cfg, &["--check", "--max-sessions", "6"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(": valid"), "{}", out.stdout);
    assert!(
        out.stdout.contains("listen = \"127.0.0.1:7\""),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("file:5"), "{}", out.stdout);
    // The command line overrides the file.
    assert!(out.stdout.contains("max-sessions = 6"), "{}", out.stdout);
    assert!(
        out.stdout.contains("# plan: listen on 127.0.0.1:7, policy"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("nothing was started"), "{}", out.stdout);
    assert!(
        !dir.path().join("state").exists(),
        "--check created no identity"
    );
    // The HTTP face's flags are checked too, as a start would (before, --check passed
    // them and the start failed).
    let missing = s(&dir.path().join("no-such-ca.pem")).to_string();
    for (flags, want) in [
        (vec!["--http-peer", "https://b:1443"], "need --http"),
        (
            vec!["--http", "127.0.0.1:0", "--http-ca", &missing],
            "no-such-ca.pem",
        ),
        (
            vec!["--http", "127.0.0.1:0", "--http-max-copies", "0"],
            "--http-max-copies",
        ),
    ] {
        let mut args = vec!["--check"];
        args.extend(flags.iter().copied());
        assert_bad_input(&serve_with(&cfg, &args), &[want]);
    }
}

#[test]
fn a_bad_file_is_one_line_naming_the_key_and_the_line_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let head = format!("{}root = \"{}\"\n", base(dir.path()), s(&root));
    // Unknown key, wrong type, impossible value (0 sessions).
    let cases = [
        ("lisen = \"127.0.0.1:0\"\n", vec![":5: lisen: unknown key"]),
        (
            "max-sessions = \"many\"\n",
            vec![":5: max-sessions: expected an integer"],
        ),
        (
            "max-sessions = 0\n",
            vec![":5: max-sessions:", "at least 1"],
        ),
        (
            "listen = \"localhost\"\n",
            vec![":5: listen: invalid value"],
        ),
    ];
    for (tail, want) in cases {
        let cfg = config(dir.path(), &format!("{head}{tail}"));
        let out = serve_with(&cfg, &["--listen", "127.0.0.1:0"]);
        assert_bad_input(&out, &want);
        assert!(out.stderr.contains(s(&cfg)), "names the file: {out:?}");
    }
}

#[test]
fn a_root_that_does_not_exist_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\nroot = \"/nonexistent/sluice-root\"\n",
        base(dir.path())
    );
    let cfg = config(dir.path(), &text);
    let out = serve_with(&cfg, &["--listen", "127.0.0.1:0"]);
    assert_bad_input(
        &out,
        &[":5: root:", "/nonexistent/sluice-root", "not a directory"],
    );
}

#[test]
fn a_port_in_use_and_an_unreadable_certificate_are_one_line_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap();
    let text = format!(
        "{}root = \"{}\"\nlisten = \"{port}\"\n",
        base(dir.path()),
        s(&root)
    );
    let cfg = config(dir.path(), &text);
    let out = serve_with(&cfg, &[]);
    assert_bad_input(&out, &[":5: listen:", "the port is in use"]);
    // The certificate: a file that does not exist, then one that is not PEM.
    let text = format!(
        "buffer-mem = \"64MiB\"\nchunk-size = \"1MiB\"\nroot = \"{}\"\nlisten = \"127.0.0.1:0\"\ncert = \"/nonexistent/cert.pem\"\nkey = \"/nonexistent/key.pem\"\n",
        s(&root)
    );
    let cfg = config(dir.path(), &text);
    let out = serve_with(&cfg, &[]);
    assert_bad_input(&out, &["/nonexistent/cert.pem"]);
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let out = run_in(
        BIN,
        &[
            "serve",
            "--root",
            s(&root),
            "--listen",
            "127.0.0.1:0",
            "--cert",
            s(&junk),
            "--key",
            s(&junk),
        ],
        None,
    );
    assert_bad_input(&out, &["junk.pem"]);
    drop(taken);
}

/// `sluice serve --config CFG --json` started; its address once ready.
fn start(cfg: &Path, log: &Path) -> (ChildGuard, String) {
    let mut child = ChildGuard(
        Command::new(BIN)
            .args(["serve", "--config", s(cfg), "--json"])
            .env_remove("SLUICE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!(
            "{e}: {line:?} {}",
            std::fs::read_to_string(log).unwrap_or_default()
        )
    });
    (child, v["listen"].as_str().unwrap().to_string())
}

fn account(name: &str, token: &str, root: &Path) -> String {
    format!(
        "[[account]]\nname = \"{name}\"\ntoken = \"{token}\"\nroot = \"{}\"\nrights = [\"read\", \"write\"]\n",
        s(root)
    )
}

fn wait_for(log: &Path, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        assert!(Instant::now() < deadline, "no {what:?} in the log: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_daemon_from_a_file_with_inline_accounts_serves_and_reloads_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let head = format!(
        "{}listen = \"127.0.0.1:0\"\nlog = \"warn\"\n",
        base(dir.path())
    );
    let cfg = config(
        dir.path(),
        &format!("{head}{}", account("alice", "alice-secret", &a)),
    );
    let log = dir.path().join("daemon.log");
    let (mut child, addr) = start(&cfg, &log);
    let src = dir.path().join("src.txt");
    std::fs::write(&src, b"from a config file\n").unwrap();
    let token = |name: &str, t: &str| {
        let p = dir.path().join(format!("{name}.token"));
        std::fs::write(&p, t).unwrap();
        p
    };
    let (alice, bob) = (token("alice", "alice-secret"), token("bob", "bob-secret"));
    let push = |tok: &Path, to: &str| {
        cp(
            &[
                "--token-file",
                s(tok),
                s(&src),
                &format!("sluice://{addr}/{to}"),
            ],
            None,
        )
    };
    assert_eq!(push(&alice, "in.txt").code, Some(0));
    assert_eq!(
        std::fs::read(a.join("in.txt")).unwrap(),
        b"from a config file\n"
    );
    assert_ne!(
        push(&bob, "in.txt").code,
        Some(0),
        "bob is not an account yet"
    );
    // The file changes: a new account, a log filter, another listen address.
    let head2 = head
        .replace("log = \"warn\"", "log = \"info\"")
        .replace(":0\"", ":1\"");
    let text = format!(
        "{head2}{}{}",
        account("alice", "alice-secret", &a),
        account("bob", "bob-secret", &b)
    );
    config(dir.path(), &text);
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGHUP) };
    let text = wait_for(&log, "needs a restart: listen");
    assert!(text.contains("reloaded: log"), "{text}");
    assert!(text.contains("2 accounts reloaded"), "{text}");
    assert_eq!(push(&bob, "bob.txt").code, Some(0), "bob is an account now");
    assert!(b.join("bob.txt").exists());
    assert!(child.is_running());
}

#[test]
fn sighup_rereads_the_token_file_of_a_daemon_without_accounts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let server_token = dir.path().join("server.token");
    std::fs::write(&server_token, "old-secret\n").unwrap();
    let text = format!(
        "{}root = \"{}\"\nlisten = \"127.0.0.1:0\"\ntoken-file = \"{}\"\n",
        base(dir.path()),
        s(&root),
        s(&server_token)
    );
    let cfg = config(dir.path(), &text);
    let log = dir.path().join("daemon.log");
    let (child, addr) = start(&cfg, &log);
    let src = dir.path().join("src.txt");
    std::fs::write(&src, b"rotate\n").unwrap();
    let push = |secret: &str, to: &str| {
        let tok = dir.path().join("client.token");
        std::fs::write(&tok, secret).unwrap();
        cp(
            &[
                "--token-file",
                s(&tok),
                s(&src),
                &format!("sluice://{addr}/{to}"),
            ],
            None,
        )
    };
    assert_eq!(push("old-secret", "a").code, Some(0));
    std::fs::write(&server_token, "new-secret\n").unwrap();
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGHUP) };
    wait_for(&log, "reloaded from");
    assert_ne!(
        push("old-secret", "b").code,
        Some(0),
        "the old token is refused"
    );
    assert_eq!(
        push("new-secret", "c").code,
        Some(0),
        "the new token is accepted"
    );
}
