//! HTTP third-party copies (`COPY` with `Source:`) into `sluice serve --http`: from a
//! foreign server (Python's http.server), from a source that breaks off or stalls
//! (failure marker, nothing under the final name), the concurrency limit (429),
//! cancellation when the client goes away, the 400/501 refusals, and `gfal-copy
//! --copy-mode pull` between two daemons in two network namespaces, with the links'
//! byte counters showing the data went daemon to daemon.

// Test helpers may unwrap: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "http/netns.rs"]
mod netns;
#[path = "http/tools.rs"]
mod tools;

use common::{ChildGuard, Daemon};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use tools::{curl, data, have, http_addr, run, Served, GFAL_INSECURE};

const TOKEN: &str = "http-tpc-token-0123456789";

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn token_file(dir: &Path) -> PathBuf {
    let tok = dir.join("token");
    std::fs::write(&tok, TOKEN).unwrap();
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o600)).unwrap();
    tok
}

/// A loopback daemon with `--http` and `extra`: (daemon, `http://ADDR`).
fn daemon(dir: &Path, root: &Path, extra: &[&str]) -> (Daemon, String) {
    let tok = token_file(dir);
    let mut args = vec!["--token-file", s(&tok), "--http", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let d = Daemon::start_with(root, &args, &[]);
    let base = format!("http://{}", http_addr(&d));
    (d, base)
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    (dir, root)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Polls (at most 60 s, no timing assertion) until `dir` holds exactly `want`.
fn settle(dir: &Path, want: &[&str]) {
    for _ in 0..600 {
        if names(dir) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(names(dir), want);
}

fn copy_pull(base: &str, path: &str, source: &str) -> (u16, String) {
    let auth = format!("Authorization: Bearer {TOKEN}");
    let src = format!("Source: {source}");
    curl(&[
        "-N",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        &src,
        &format!("{base}/{path}"),
    ])
}

/// A source that answers one GET with `Content-Length: announced`, sends `sent`
/// bytes, then closes (`hold` false) or waits until the other side closes; it reports
/// on the channel when its connection ended.
fn fake_source(announced: u64, sent: usize, hold: bool) -> (String, mpsc::Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut c, _)) = l.accept() else { return };
        let mut req = [0u8; 4096];
        let _ = c.read(&mut req);
        let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\n\r\n");
        let _ = c.write_all(&vec![5u8; sent]);
        if hold {
            let mut b = [0u8; 64];
            while matches!(c.read(&mut b), Ok(n) if n > 0) {}
        }
        drop(c);
        let _ = tx.send(());
    });
    (format!("http://{addr}/f"), rx)
}

#[test]
fn pull_from_python_http_server() {
    if !have("curl") || !have("python3") {
        return;
    }
    let (dir, root) = setup();
    let srv = dir.path().join("srv");
    std::fs::create_dir(&srv).unwrap();
    let bytes = data(8_000_000, 7);
    std::fs::write(srv.join("big.bin"), &bytes).unwrap();
    let port = tools::free_port();
    let _py = ChildGuard(
        std::process::Command::new("/usr/bin/python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(&srv)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    tools::wait_listening(&format!("127.0.0.1:{port}"));
    let (_d, base) = daemon(dir.path(), &root, &[]);
    let (code, body) = copy_pull(
        &base,
        "pulled.bin",
        &format!("http://127.0.0.1:{port}/big.bin"),
    );
    assert_eq!(code, 202, "{body}");
    assert!(
        body.starts_with("Perf Marker\n") && body.contains("Stripe Bytes Transferred:"),
        "{body}"
    );
    assert!(body.ends_with("success: Created\n"), "{body}");
    assert_eq!(std::fs::read(root.join("pulled.bin")).unwrap(), bytes);
    // A missing source: a failure line, nothing written.
    let (code, body) = copy_pull(
        &base,
        "missing.bin",
        &format!("http://127.0.0.1:{port}/nope"),
    );
    assert_eq!(code, 202);
    assert!(
        body.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("failure: ") && l.contains("404")),
        "{body}"
    );
    settle(&root, &["pulled.bin"]);
}

#[test]
fn a_source_that_breaks_off_fails_the_copy_and_leaves_nothing() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let (_d, base) = daemon(dir.path(), &root, &[]);
    let (url, _done) = fake_source(10_000_000, 300_000, false);
    let (code, body) = copy_pull(&base, "cut.bin", &url);
    assert_eq!(code, 202, "{body}");
    let last = body.trim_end().lines().last().unwrap_or("").to_string();
    assert!(last.starts_with("failure: "), "{body}");
    settle(&root, &[]);
}

#[test]
fn refusals_400_501_and_rights() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let (_d, base) = daemon(dir.path(), &root, &[]);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (code, body) = curl(&[
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        "Source: http://127.0.0.1:1/a",
        "-H",
        "Destination: http://127.0.0.1:1/b",
        &format!("{base}/x"),
    ]);
    assert_eq!(code, 400, "{body}");
    let (code, body) = copy_pull(&base, "x", "gsiftp://example.org/a");
    assert_eq!(code, 501, "{body}");
    let (code, _) = curl(&[
        "-X",
        "COPY",
        "-H",
        "Source: http://127.0.0.1:1/a",
        &format!("{base}/x"),
    ]);
    assert_eq!(code, 401);
    assert_eq!(names(&root), Vec::<String>::new());
    // Overwrite: F on an existing file: 412, the file untouched.
    std::fs::write(root.join("kept"), b"kept").unwrap();
    let (code, body) = curl(&[
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        "Overwrite: F",
        "-H",
        "Source: http://127.0.0.1:1/a",
        &format!("{base}/kept"),
    ]);
    assert_eq!(code, 412, "{body}");
    assert_eq!(std::fs::read(root.join("kept")).unwrap(), b"kept");
}

#[test]
fn the_copy_limit_answers_429_and_a_client_that_leaves_cancels_its_copy() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let (_d, base) = daemon(dir.path(), &root, &["--http-max-copies", "1"]);
    let (url, source_closed) = fake_source(50_000_000, 1_000_000, true);
    let addr = base.trim_start_matches("http://").to_string();
    let mut client = std::net::TcpStream::connect(&addr).unwrap();
    write!(client, "COPY /held.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nSource: {url}\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("End\n") {
        let n = client.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the daemon closed: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 202"));
    let (code, body) = copy_pull(&base, "second.bin", "http://127.0.0.1:1/x");
    assert_eq!(code, 429, "{body}");
    // The client leaves: the daemon cancels the copy, closes the source, removes the
    // partial file, and frees its slot.
    drop(client);
    source_closed
        .recv_timeout(Duration::from_secs(90))
        .expect("the daemon closed the source connection");
    settle(&root, &[]);
    let mut freed = false;
    for _ in 0..300 {
        if copy_pull(&base, "third.bin", "http://127.0.0.1:1/x").0 == 202 {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(freed, "the cancelled copy's slot was never freed");
}

/// The two namespaced daemons of a third-party test, each trusting the other's
/// certificate, and the file A holds.
struct Site {
    pair: netns::Pair,
    dir: tempfile::TempDir,
    _a: Served,
    _b: Served,
    root_b: PathBuf,
    bytes: Vec<u8>,
}

fn start_in(dir: &Path, ns: &str, ip: &str, name: &str, extra: &[&str]) -> Served {
    let tok = token_file(dir);
    let root = dir.join(name);
    std::fs::create_dir_all(&root).unwrap();
    let state = dir.join(format!("state-{name}"));
    let listen = format!("{ip}:7000");
    let http = format!("{ip}:8443");
    let mut args = vec![
        "--root",
        s(&root),
        "--token-file",
        s(&tok),
        "--listen",
        &listen,
        "--http",
        &http,
        "--state-dir",
        s(&state),
    ];
    args.extend_from_slice(extra);
    Served::start(
        &["ip", "netns", "exec", ns],
        &args,
        &dir.join(format!("{name}.log")),
    )
}

/// A and B in their namespaces; A restarted once B exists so that each trusts the
/// other's (self-signed, kept) certificate.
fn site() -> Option<Site> {
    let pair = netns::Pair::new()?;
    let dir = tempfile::tempdir().unwrap();
    let bytes = data(24_000_000, 9);
    let a = start_in(dir.path(), &pair.a, netns::A_IP, "a", &[]);
    std::fs::write(dir.path().join("a/f.bin"), &bytes).unwrap();
    let ca_a = dir.path().join("state-a/identity.pem");
    let b = start_in(
        dir.path(),
        &pair.b,
        netns::B_IP,
        "b",
        &[
            "--http-ca",
            s(&ca_a),
            "--audit-log",
            s(&dir.path().join("b-audit.log")),
        ],
    );
    drop(a);
    let ca_b = dir.path().join("state-b/identity.pem");
    let audit = dir.path().join("a-audit.log");
    let a = start_in(
        dir.path(),
        &pair.a,
        netns::A_IP,
        "a",
        &["--http-ca", s(&ca_b), "--audit-log", s(&audit)],
    );
    let root_b = dir.path().join("b");
    Some(Site {
        pair,
        dir,
        _a: a,
        _b: b,
        root_b,
        bytes,
    })
}

impl Site {
    fn logs(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        format!(
            "\nA: {}\nB: {}\naudit: {}",
            read("a.log"),
            read("b.log"),
            read("a-audit.log")
        )
    }

    /// Sessions A served over sluice's own protocol so far, once at least `least` are
    /// (A writes a session's audit record as it closes, which may follow B's success
    /// by a moment: polled for at most 30 s, no timing assertion).
    fn native_sessions(&self, log: &str, op: &str, least: usize) -> usize {
        let op = format!("\"op\":\"{op}\"");
        let count = || {
            std::fs::read_to_string(self.dir.path().join(log))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(&op) && l.contains("\"result\":\"ok\""))
                .count()
        };
        for _ in 0..300 {
            if count() >= least {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        count()
    }

    /// `gfal-copy --copy-mode MODE` of A's file to B's `name`; asserts the bytes
    /// arrived whole and crossed the A-B link, not the client's links.
    fn gfal(&self, mode: &str, name: &str) {
        let client_before = self.pair.client_rx(0) + self.pair.client_rx(1);
        let link_before = self.pair.b_rx_from_a();
        let src = format!("davs://{}:8443/f.bin", netns::A_IP);
        let dst = format!("davs://{}:8443/{name}", netns::B_IP);
        let env = [("BEARER_TOKEN", TOKEN)];
        let args = [
            "-D",
            GFAL_INSECURE,
            "-D",
            "HTTP PLUGIN:ENABLE_FALLBACK_TPC_COPY=false",
            "--copy-mode",
            mode,
            "-K",
            "ADLER32",
            &src,
            &dst,
        ];
        let r = run("gfal-copy", &args, &env);
        let logs = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        assert_eq!(
            r.code,
            Some(0),
            "{r:?}\nA: {}\nB: {}",
            logs("a.log"),
            logs("b.log")
        );
        assert_eq!(std::fs::read(self.root_b.join(name)).unwrap(), self.bytes);
        let link = self.pair.b_rx_from_a() - link_before;
        let client = self.pair.client_rx(0) + self.pair.client_rx(1) - client_before;
        let n = self.bytes.len() as u64;
        assert!(
            link >= n,
            "{mode}: the A-B link carried {link} bytes, the file is {n}"
        );
        assert!(
            client < n / 4,
            "{mode}: the client's links carried {client} bytes: the data went through the client"
        );
    }
}

#[test]
fn gfal_copy_pull_and_push_between_daemons_in_two_namespaces() {
    if !have("gfal-copy") {
        return;
    }
    let Some(site) = site() else {
        return;
    };
    // B pulls: A's HTTPS face says it is sluice, so the bytes move over sluice's
    // protocol (a session in A's audit log).
    site.gfal("pull", "pulled.bin");
    assert_eq!(
        site.native_sessions("a-audit.log", "pull", 1),
        1,
        "the pull did not go over sluice's protocol: {}",
        site.logs()
    );
    // A pushes: B's HTTPS face says it is sluice, so A pushes over sluice's protocol
    // (a session in B's audit log).
    site.gfal("push", "pushed.bin");
    assert_eq!(
        site.native_sessions("b-audit.log", "push", 1),
        1,
        "the push did not go over sluice's protocol: {}",
        site.logs()
    );
}

#[test]
fn a_sluice_source_moves_over_sluice() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let src_root = dir.path().join("src");
    std::fs::create_dir(&src_root).unwrap();
    let bytes = data(6_000_000, 11);
    std::fs::write(src_root.join("f.bin"), &bytes).unwrap();
    let tok = token_file(dir.path());
    let source = Daemon::start_with(&src_root, &["--token-file", s(&tok)], &[]);
    let (_d, base) = daemon(dir.path(), &root, &[]);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let fwd = format!("TransferHeaderAuthorization: Bearer {TOKEN}");
    let src = format!("Source: sluice://{}/f.bin", source.addr);
    let (code, body) = curl(&[
        "-N",
        "-i",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        &fwd,
        "-H",
        &src,
        &format!("{base}/native.bin"),
    ]);
    assert_eq!(code, 202, "{body}");
    assert!(
        body.to_lowercase().contains("x-sluice-transport: sluice"),
        "{body}"
    );
    assert!(body.ends_with("success: Created\n"), "{body}");
    assert_eq!(std::fs::read(root.join("native.bin")).unwrap(), bytes);
    // A wrong forwarded token: the source daemon refuses, the copy fails, nothing kept.
    let (code, body) = curl(&[
        "-N",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        "TransferHeaderAuthorization: Bearer nope-nope-nope-nope",
        "-H",
        &src,
        &format!("{base}/denied.bin"),
    ]);
    assert_eq!(code, 202, "{body}");
    assert!(
        body.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("failure: ")),
        "{body}"
    );
    settle(&root, &["native.bin"]);
}

/// A destination that takes one PUT and answers `status`; it sends the bytes it
/// received (and the Authorization it saw) on the channel.
fn fake_destination(status: &'static str) -> (String, mpsc::Receiver<(Vec<u8>, String)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((c, _)) = l.accept() else { return };
        let mut r = std::io::BufReader::new(c);
        let (mut len, mut auth) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if std::io::BufRead::read_line(&mut r, &mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("authorization:") {
                auth = line.trim_end().to_string();
            }
        }
        let mut body = vec![0u8; len];
        let _ = r.read_exact(&mut body);
        let mut c = r.into_inner();
        let _ = write!(c, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        let _ = tx.send((body, auth));
    });
    (format!("http://{addr}/put-here"), rx)
}

#[test]
fn push_to_a_foreign_http_destination() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let bytes = data(2_000_000, 13);
    std::fs::write(root.join("f.bin"), &bytes).unwrap();
    let (_d, base) = daemon(dir.path(), &root, &[]);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (url, got) = fake_destination("201 Created");
    let dst = format!("Destination: {url}");
    let fwd = "TransferHeaderAuthorization: Bearer far-token";
    let (code, body) = curl(&[
        "-N",
        "-i",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        fwd,
        "-H",
        &dst,
        &format!("{base}/f.bin"),
    ]);
    assert_eq!(code, 202, "{body}");
    assert!(
        body.to_lowercase().contains("x-sluice-transport: http"),
        "{body}"
    );
    assert!(body.ends_with("success: Created\n"), "{body}");
    let (received, seen_auth) = got.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(received, bytes);
    assert_eq!(
        seen_auth.to_ascii_lowercase(),
        "authorization: bearer far-token"
    );
    // A destination that refuses: a failure line.
    let (url, _got) = fake_destination("403 Forbidden");
    let dst = format!("Destination: {url}");
    let (code, body) = curl(&[
        "-N",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        &dst,
        &format!("{base}/f.bin"),
    ]);
    assert_eq!(code, 202, "{body}");
    assert!(
        body.trim_end()
            .ends_with("failure: the destination answered 403 Forbidden"),
        "{body}"
    );
    // A missing source file: 404 before anything starts.
    assert_eq!(
        curl(&[
            "-X",
            "COPY",
            "-H",
            &auth,
            "-H",
            &dst,
            &format!("{base}/nope")
        ])
        .0,
        404
    );
}
