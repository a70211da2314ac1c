//! Monitoring (issue 17) through the real binary: a real Prometheus (Debian's
//! `prometheus`) scrapes a daemon's `/metrics` during a transfer, `promtool check
//! metrics` passes on the text, the byte counters equal the summary's bytes; the
//! endpoint's bad input; the bytes a daemon sends from the page cache; the summary's
//! bottleneck on a rate-limited link (network) and
//! with zstd on a fast path (the compress stage).

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{cp, free_port, have, skip, ChildGuard, Daemon, BIN};

/// `GET path` (HTTP/1.0) with `headers`: the status line and the body.
fn http_get(addr: &str, path: &str, headers: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

fn write_file(path: &Path, bytes: usize, seed: u64) {
    let mut x = seed | 1;
    let mut data = vec![0u8; bytes];
    for b in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = x.to_le_bytes();
        b.copy_from_slice(&w[..b.len()]);
    }
    std::fs::write(path, data).unwrap();
}

/// `cp --json` output's summary.
fn summary(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'(' | b')' | b'.' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server scraping `target` every 100 ms with a bearer token file.
struct Prometheus {
    _child: ChildGuard,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str, token_file: &Path) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 100ms\n  scrape_timeout: 100ms\nscrape_configs:\n  - job_name: sluice\n    authorization:\n      type: Bearer\n      credentials_file: {}\n    static_configs:\n      - targets: ['{target}']\n",
                token_file.display()
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let p = Prometheus {
            _child: ChildGuard(child),
            addr: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(&p.addr).is_err()
            || !http_get(&p.addr, "/-/ready", "").0.contains("200")
        {
            assert!(Instant::now() < deadline, "prometheus did not get ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// The value of an instant query's first sample, if it has one.
    fn query(&self, q: &str) -> Option<f64> {
        let (_, body) = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", encode(q)),
            "",
        );
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Waits until `q` evaluates to `want` (the scrape after an event lands).
    #[track_caller]
    fn wait_for(&self, q: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.query(q);
            if got == Some(want) {
                return;
            }
            assert!(Instant::now() < deadline, "{q}: {got:?}, want {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn prometheus_scrapes_a_daemon_during_a_transfer_and_its_bytes_match_the_summary() {
    if !have("prometheus") || !have("promtool") {
        return skip("prometheus and promtool are not installed (apt install prometheus)");
    }
    let (src, dst, etc) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let token = etc.path().join("metrics.token");
    let (daemon, metrics) = Daemon::with_metrics(dst.path(), &token, "scrape-secret", &[]);
    let prom = Prometheus::start(&metrics, &token);
    prom.wait_for("up", 1.0);
    let file = src.path().join("big.bin");
    write_file(&file, 192 << 20, 7);
    let out = cp(
        &["--json", file.to_str().unwrap(), &daemon.url("big.bin")],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let bytes = summary(&out.stdout)["bytes"].as_f64().unwrap();
    assert_eq!(bytes, (192u64 << 20) as f64);
    // A scrape landed while the session ran, and the counters after it equal the bytes.
    prom.wait_for("sluice_sessions_total", 1.0);
    prom.wait_for("sluice_sessions_active", 0.0);
    assert_eq!(
        prom.query("max_over_time(sluice_sessions_active[10m])"),
        Some(1.0)
    );
    prom.wait_for("sluice_payload_bytes_total", bytes);
    prom.wait_for("sum(sluice_stage_bytes_total{stage=\"write\"})", bytes);
    prom.wait_for("sum(sluice_stage_chunks_total{stage=\"recv\"})", 192.0);
    // The text itself passes promtool's checks.
    let (status, text) = http_get(
        &metrics,
        "/metrics",
        "Authorization: Bearer scrape-secret\r\n",
    );
    assert!(status.contains("200"), "{status}");
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    for family in [
        "sluice_stage_busy_seconds_total{stage=\"write\",channel=\"0\"}",
        "sluice_pool_slots_in_use{channel=\"0\"",
        "sluice_node_cpu_seconds_total{node=\"0\"",
        "sluice_node_numa_miss_pages_total{node=\"0\"}",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
}

#[test]
fn the_endpoint_wants_its_token_and_serves_nothing_else() {
    let (root, etc) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_d, metrics) = Daemon::with_metrics(root.path(), &etc.path().join("t"), "tok", &[]);
    assert!(http_get(&metrics, "/metrics", "").0.contains("401"));
    assert!(
        http_get(&metrics, "/metrics", "Authorization: Bearer tokx\r\n")
            .0
            .contains("401")
    );
    let (status, body) = http_get(&metrics, "/metrics", "Authorization: Bearer tok\r\n");
    assert!(
        status.contains("200") && body.contains("sluice_sessions_active 0"),
        "{status}"
    );
    assert!(http_get(&metrics, "/", "Authorization: Bearer tok\r\n")
        .0
        .contains("404"));
}

/// A daemon that sends a large file's chunks from the page cache (a pull; the test hook
/// turns it on toward loopback) counts those bytes in `sluice_sendfile_bytes_total`.
#[test]
fn a_daemon_counts_the_bytes_it_sends_from_the_page_cache() {
    let (root, dst, etc) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let hook = [("SLUICE_SENDFILE_ON_LOOPBACK", "1")];
    let (d, metrics) = Daemon::with_metrics(root.path(), &etc.path().join("t"), "tok", &hook);
    let size = (9 << 20) + 5;
    write_file(&root.path().join("big.bin"), size, 3);
    let back = dst.path().join("big.bin");
    let out = cp(
        &["--buffered", &d.url("big.bin"), back.to_str().unwrap()],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let sent_file = std::fs::read(root.path().join("big.bin")).unwrap();
    assert!(
        std::fs::read(&back).unwrap() == sent_file,
        "the copy differs"
    );
    let (_, body) = http_get(&metrics, "/metrics", "Authorization: Bearer tok\r\n");
    let sent = body
        .lines()
        .find_map(|l| l.strip_prefix("sluice_sendfile_bytes_total "))
        .unwrap_or_else(|| panic!("no sluice_sendfile_bytes_total in:\n{body}"));
    assert_eq!(sent.trim().parse::<f64>().unwrap(), size as f64, "{body}");
}

#[test]
fn metrics_on_an_address_in_use_or_open_without_a_token_is_refused() {
    let (src, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let r = root.path().to_str().unwrap();
    let serve = common::run_in(
        BIN,
        &[
            "serve",
            "--root",
            r,
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            &addr,
        ],
        None,
    );
    assert_eq!(serve.code, Some(2), "{}", serve.stderr);
    assert_eq!(serve.stderr.lines().count(), 1, "{}", serve.stderr);
    assert!(
        serve.stderr.contains(&format!("--metrics {addr}")),
        "{}",
        serve.stderr
    );
    let f = src.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let dest = root.path().join("g");
    let open = cp(
        &[
            "--metrics",
            "10.64.255.1:9100",
            f.to_str().unwrap(),
            dest.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(open.code, Some(2), "{}", open.stderr);
    assert!(
        open.stderr.contains("--metrics-token-file"),
        "{}",
        open.stderr
    );
    assert!(!dest.exists(), "nothing written on bad input");
}

#[test]
fn zstd_on_a_fast_path_is_bound_by_the_compress_stage() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let d = Daemon::start(dst.path());
    let file = src.path().join("f.bin");
    write_file(&file, 32 << 20, 3);
    let out = cp(
        &[
            "--json",
            "--compress",
            "zstd:19",
            file.to_str().unwrap(),
            &d.url("f.bin"),
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let b = &summary(&out.stdout)["bottleneck"];
    assert_eq!(b["resource"], "cpu", "{b}");
    assert_eq!(b["stage"], "compress", "{b}");
    assert!(b["share"].as_f64().unwrap() > 0.5, "{b}");
}

/// A namespace behind a veth pair whose host side sends through tbf at `rate`; the
/// namespace is deleted when dropped.
struct SlowLink {
    ns: String,
}

impl SlowLink {
    fn up(rate: &str) -> Option<SlowLink> {
        let id = std::process::id() % 250;
        let link = SlowLink {
            ns: format!("met-{}", std::process::id()),
        };
        let (host, peer) = (format!("mh{id}"), format!("mp{id}"));
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let ok = ip(&["netns", "add", &link.ns])
            && ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", &link.ns])
            && ip(&["addr", "add", &format!("10.64.{id}.1/24"), "dev", &host])
            && ip(&["link", "set", &host, "up"])
            && ip(&[
                "-n",
                &link.ns,
                "addr",
                "add",
                &format!("10.64.{id}.2/24"),
                "dev",
                &peer,
            ])
            && ip(&["-n", &link.ns, "link", "set", &peer, "up"])
            && ip(&["-n", &link.ns, "link", "set", "lo", "up"])
            && Command::new("tc")
                .args(["qdisc", "add", "dev", &host, "root", "tbf", "rate", rate])
                .args(["burst", "32kb", "latency", "50ms"])
                .status()
                .is_ok_and(|s| s.success());
        ok.then_some(link)
    }

    fn peer_ip(&self) -> String {
        format!("10.64.{}.2", std::process::id() % 250)
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair (and its tbf) with it.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn a_rate_limited_link_is_named_the_bottleneck() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("needs root for a network namespace and tbf");
    }
    let Some(link) = SlowLink::up("100mbit") else {
        return skip("cannot make a namespace with a veth pair and tbf here");
    };
    let (src, dst, etc) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let token = etc.path().join("t");
    std::fs::write(&token, "link-secret\n").unwrap();
    let mut serve = ChildGuard(
        Command::new("ip")
            .args(["netns", "exec", &link.ns, BIN, "serve", "--json"])
            .args(["--root", dst.path().to_str().unwrap()])
            .args(["--listen", &format!("{}:0", link.peer_ip())])
            .args(["--token-file", token.to_str().unwrap()])
            .args(common::SMALL)
            .args(["--state-dir", etc.path().join("state").to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(serve.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let addr = v["listen"].as_str().unwrap().to_string();
    let file = src.path().join("f.bin");
    write_file(&file, 24 << 20, 5);
    let url = format!("sluice://{addr}/f.bin");
    let known = etc.path().join("known_hosts");
    let out = cp(
        &[
            "--json",
            "--token-file",
            token.to_str().unwrap(),
            "--known-hosts",
            known.to_str().unwrap(),
            file.to_str().unwrap(),
            &url,
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let b = &summary(&out.stdout)["bottleneck"];
    assert_eq!(b["resource"], "network", "{b}");
    assert_eq!(b["stage"], "send", "{b}");
    assert!(b["share"].as_f64().unwrap() > 0.5, "{b}");
    serve.kill();
}

#[test]
fn a_copy_serves_its_own_metrics_while_it_runs() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let d = Daemon::start(dst.path());
    let file = src.path().join("f.bin");
    write_file(&file, 4 << 20, 11);
    let metrics = format!("127.0.0.1:{}", free_port());
    let out = cp(
        &[
            "--json",
            "--metrics",
            &metrics,
            file.to_str().unwrap(),
            &d.url("f.bin"),
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("sluice: metrics on http://{metrics}/metrics")),
        "{}",
        out.stderr
    );
    let s = summary(&out.stdout);
    assert_eq!(s["bytes"], 4 << 20);
    assert_eq!(s["bottleneck"]["stages"]["read"]["bytes"], 4 << 20, "{s}");
}
