//! `sluice serve` under systemd: `READY=1` on `$NOTIFY_SOCKET` (a real unix datagram
//! socket) only once the listener is bound, `RELOADING=1` … `READY=1` around a SIGHUP,
//! `STOPPING=1` when the SIGTERM drain starts; logs without timestamps under journald
//! and as JSON with `--log-format json`.

#![allow(clippy::unwrap_used)]

mod common;

use common::{ChildGuard, BIN};
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `sluice serve` on loopback with `extra` and `env`; stdout piped, stderr to `log`.
fn serve(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> ChildGuard {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, format!("root = \"{}\"\nlog = \"info\"\n", s(&root))).unwrap();
    ChildGuard(
        Command::new(BIN)
            .args([
                "serve",
                "--config",
                s(&cfg),
                "--listen",
                "127.0.0.1:0",
                "--json",
            ])
            .args(["--buffer-mem", "64MiB", "--chunk-size", "1MiB"])
            .args(["--state-dir", s(&dir.join("state"))])
            .args(extra)
            .env_remove("SLUICE_LOG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap(),
    )
}

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn signal(child: &ChildGuard, sig: i32) {
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.0.id() as i32, sig) };
}

fn wait_exit(child: &mut ChildGuard) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            return st.code();
        }
        assert!(Instant::now() < deadline, "the daemon did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ready_after_bind_reloading_on_sighup_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut child = serve(dir.path(), &[], &[("NOTIFY_SOCKET", s(&path))]);
    let ready = recv(&sock);
    assert!(
        ready.starts_with("READY=1\nSTATUS=serving on 127.0.0.1:"),
        "{ready:?}"
    );
    // READY means bound: the address in the status line takes a connection now.
    let addr = ready
        .split("serving on ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    std::net::TcpStream::connect(addr).expect("the listener is bound when READY=1 comes");
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains(addr), "{line}");

    signal(&child, libc::SIGHUP);
    let reloading = recv(&sock);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    assert!(recv(&sock).starts_with("READY=1\n"));

    signal(&child, libc::SIGTERM);
    let stopping = recv(&sock);
    assert!(
        stopping.starts_with("STOPPING=1\nSTATUS=draining"),
        "{stopping:?}"
    );
    assert_eq!(wait_exit(&mut child), Some(0));
}

/// Runs a daemon until it is ready (its signals handled), stops it, and returns its
/// stderr.
fn log_of(extra: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut env = env.to_vec();
    env.push(("NOTIFY_SOCKET", s(&path)));
    let mut child = serve(dir.path(), extra, &env);
    assert!(recv(&sock).starts_with("READY=1"));
    signal(&child, libc::SIGTERM);
    wait_exit(&mut child);
    std::fs::read_to_string(dir.path().join("log")).unwrap()
}

#[test]
fn under_journald_lines_have_levels_and_no_timestamps() {
    let log = log_of(&[], &[("JOURNAL_STREAM", "8:12345")]);
    let events: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("INFO") || l.contains("WARN"))
        .collect();
    assert!(!events.is_empty(), "{log}");
    for l in events {
        let first = l.trim_start().split(' ').next().unwrap();
        assert!(
            ["INFO", "WARN"].contains(&first),
            "the level comes first: {l:?}"
        );
        assert!(!l.contains('\u{1b}'), "no colours: {l:?}");
    }
}

#[test]
fn log_format_json_writes_one_object_per_event() {
    let log = log_of(&["--log-format", "json"], &[]);
    let objects: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(objects.iter().any(|o| o["level"] == "INFO"), "{log}");
    assert!(
        objects
            .iter()
            .all(|o| o["timestamp"].is_string() && o["fields"]["message"].is_string()),
        "{log}"
    );
    assert!(
        objects.iter().any(|o| o["level"] == "WARN"
            && o["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("draining")),
        "{log}"
    );
}
