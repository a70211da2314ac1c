//! TLS through the real binary: `--encrypt` on both sides, trust on first use in a
//! known-hosts file, `--ca` with a CA made by `openssl`, `openssl s_client` proving TLS
//! 1.3 on the daemon's port, and a packet capture (`tcpdump`) between two network
//! namespaces showing that a default push leaves no file name and no payload in clear
//! text, while `--encrypt never` does (so the check can fail).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{cp, run_in, ChildGuard, Daemon, Out, BIN};

/// A payload pattern that cannot occur by chance in a capture.
const PATTERN: &[u8] = b"SLUICE-TLS-PLAINTEXT-CANARY-0123456789abcdef";

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A file of `len` bytes made of [`PATTERN`] with a counter (compressible only so much).
fn canary_file(path: &Path, len: usize) {
    let mut data = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while data.len() < len {
        data.extend_from_slice(PATTERN);
        data.extend_from_slice(&i.to_le_bytes());
        i += 1;
    }
    data.truncate(len);
    std::fs::write(path, data).expect("write a source file");
}

#[track_caller]
fn assert_ok(out: &Out, what: &str) {
    assert_eq!(out.code, Some(0), "{what}: stderr: {}", out.stderr);
}

#[track_caller]
fn assert_refused(out: &Out, what: &str) -> String {
    assert_eq!(
        out.code,
        Some(1),
        "{what}: stdout {} stderr {}",
        out.stdout,
        out.stderr
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line: {}", out.stderr);
    lines[0].to_string()
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

/// `cp` with the client's TLS flags in front of `args`.
fn cp_tls(kh: &Path, extra: &[&str], args: &[&str]) -> Out {
    let mut full = vec!["--known-hosts", s(kh)];
    full.extend_from_slice(extra);
    full.extend_from_slice(args);
    cp(&full, None)
}

#[test]
fn an_encrypted_push_and_pull_are_byte_identical_and_pin_the_daemon() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (root, src, back) = (
        dir.path().join("root"),
        dir.path().join("src"),
        dir.path().join("back"),
    );
    for d in [&root, &src, &back] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    canary_file(&src.join("big.bin"), 5 << 20);
    for i in 0..20 {
        canary_file(&src.join(format!("small-{i}")), 1000 + i * 37);
    }
    let daemon = Daemon::start_with(&root, &["--encrypt", "always"], &[]);
    let kh = dir.path().join("kh/known_hosts");
    let always = ["--encrypt", "always"];
    let out = cp_tls(
        &kh,
        &always,
        &["-r", &format!("{}/", s(&src)), &daemon.url("in/")],
    );
    assert_ok(&out, "push");
    let pinned = format!(
        "sluice: pinned {} ({}) in {}",
        daemon.addr,
        daemon.fingerprint,
        kh.display()
    );
    assert!(out.stderr.contains(&pinned), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&kh).expect("the known-hosts file"),
        format!("{} {}\n", daemon.addr, daemon.fingerprint)
    );
    let out = cp_tls(&kh, &always, &["-r", &daemon.url("in/"), s(&back)]);
    assert_ok(&out, "pull");
    assert!(
        !out.stderr.contains("pinned"),
        "pinned once only: {}",
        out.stderr
    );
    for name in std::fs::read_dir(&src).expect("src") {
        let name = name.expect("an entry").file_name();
        let a = std::fs::read(src.join(&name)).expect("source");
        assert_eq!(
            std::fs::read(root.join("in").join(&name)).expect("pushed"),
            a
        );
        assert_eq!(std::fs::read(back.join(&name)).expect("pulled"), a);
    }
}

#[test]
fn clear_text_against_a_daemon_that_requires_tls_names_both_settings() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir");
    let file = dir.path().join("f");
    canary_file(&file, 10_000);
    let daemon = Daemon::start_with(&root, &["--encrypt", "always"], &[]);
    let kh = dir.path().join("known_hosts");
    let out = cp_tls(&kh, &["--encrypt", "never"], &[s(&file), &daemon.url("f")]);
    let line = assert_refused(&out, "clear text");
    assert_eq!(
        line,
        format!("sluice: error: {} requires encryption (daemon: --encrypt always, TLS from every peer; this client: --encrypt never)", daemon.addr)
    );
    assert_eq!(entries(&root), 0, "nothing written");
    assert!(!kh.exists());
}

#[test]
fn a_changed_certificate_is_refused_naming_the_line_and_strict_refuses_unknown_hosts() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir");
    let file = dir.path().join("f");
    canary_file(&file, 10_000);
    let kh = dir.path().join("known_hosts");
    let always = ["--encrypt", "always"];
    let state1 = dir.path().join("state1");
    let mut daemon = Daemon::start_with(&root, &["--state-dir", s(&state1)], &[]);
    // Strict and unknown: refused, nothing pinned, nothing written.
    let strict = ["--encrypt", "always", "--strict-host-key"];
    let line = assert_refused(
        &cp_tls(&kh, &strict, &[s(&file), &daemon.url("f")]),
        "strict",
    );
    assert!(
        line.contains("--strict-host-key refuses unknown hosts"),
        "{line}"
    );
    assert!(line.contains(&daemon.fingerprint), "{line}");
    assert!(!kh.exists() && entries(&root) == 0);
    // First use pins, the second run is verified against the pin.
    assert_ok(
        &cp_tls(&kh, &always, &[s(&file), &daemon.url("f")]),
        "first use",
    );
    assert_ok(
        &cp_tls(&kh, &strict, &[s(&file), &daemon.url("g")]),
        "known",
    );
    // The same address with a new identity (a new state directory).
    let addr = daemon.addr.clone();
    daemon.child.kill();
    let state2 = dir.path().join("state2");
    let daemon = Daemon::start_with(&root, &["--state-dir", s(&state2), "--listen", &addr], &[]);
    std::fs::remove_file(root.join("f")).expect("rm");
    let line = assert_refused(
        &cp_tls(&kh, &always, &[s(&file), &daemon.url("f")]),
        "changed",
    );
    assert!(line.contains("CHANGED"), "{line}");
    assert!(
        line.contains(&format!("remove line 1 of {}", kh.display())),
        "{line}"
    );
    assert!(!root.join("f").exists(), "nothing written");
}

/// `openssl` run with `args` (and `stdin`); its output and exit status.
fn openssl(args: &[&str], cwd: &Path) -> Out {
    run_in("openssl", args, Some(cwd))
}

/// A CA and a leaf certificate for 127.0.0.1 signed by it, made by `openssl` in `dir`.
fn make_ca(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let ca = |f: &str| format!("{name}-{f}");
    let subject = format!("/CN=sluice test CA {name}");
    let mut args = vec!["req", "-x509", "-days", "2", "-subj", &subject];
    args.extend(ec);
    let (ca_key, ca_crt) = (ca("ca.key"), ca("ca.crt"));
    args.extend(["-keyout", &ca_key, "-out", &ca_crt]);
    assert_ok(&openssl(&args, dir), "CA");
    let (key, csr, crt) = (ca("leaf.key"), ca("leaf.csr"), ca("leaf.crt"));
    let mut args = vec![
        "req",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &csr,
    ];
    args.extend(ec);
    assert_ok(&openssl(&args, dir), "leaf request");
    let ext = dir.join(ca("ext.cnf"));
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n").expect("ext");
    let args = [
        "x509",
        "-req",
        "-days",
        "2",
        "-in",
        &csr,
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &crt,
        "-extfile",
        s(&ext),
    ];
    assert_ok(&openssl(&args, dir), "leaf");
    (dir.join(ca_crt), dir.join(crt), dir.join(key))
}

#[test]
fn a_ca_signed_daemon_is_validated_and_a_wrong_ca_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir");
    let file = dir.path().join("f");
    canary_file(&file, 100_000);
    let (ca, crt, key) = make_ca(dir.path(), "site");
    let (other_ca, _, _) = make_ca(dir.path(), "other");
    let daemon = Daemon::start_with(
        &root,
        &["--encrypt", "always", "--cert", s(&crt), "--key", s(&key)],
        &[],
    );
    let with_ca = |ca: &Path, name: &str| {
        let args = [
            "--encrypt",
            "always",
            "--ca",
            s(ca),
            s(&file),
            &daemon.url(name),
        ];
        cp(&args, None)
    };
    let missing = with_ca(&dir.path().join("no-such-ca.pem"), "g");
    assert_eq!(missing.code, Some(2), "bad input: {}", missing.stderr);
    assert!(missing.stderr.contains("--ca") && missing.stderr.contains("no-such-ca.pem"));
    let line = assert_refused(&with_ca(&other_ca, "g"), "wrong CA");
    assert!(line.contains("UnknownIssuer"), "{line}");
    assert_eq!(entries(&root), 0, "nothing written");
    assert_ok(&with_ca(&ca, "f"), "the site CA");
    assert_eq!(
        std::fs::read(root.join("f")).expect("copied"),
        std::fs::read(&file).expect("source")
    );
}

#[test]
fn openssl_s_client_sees_tls_1_3_with_aes_gcm_and_tls_1_2_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir");
    let daemon = Daemon::start_with(&root, &[], &[]);
    // The daemon serves control and data connections on its one port: the first
    // connection stands for a control connection, the second for a data connection.
    for _ in 0..2 {
        let out = openssl(
            &["s_client", "-connect", &daemon.addr, "-tls1_3"],
            dir.path(),
        );
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(
            text.contains("New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"),
            "{text}"
        );
        // No session ticket follows the handshake (the daemon sends none).
        assert!(!text.contains("session ticket lifetime hint"), "{text}");
    }
    let out = openssl(
        &["s_client", "-connect", &daemon.addr, "-tls1_2"],
        dir.path(),
    );
    let text = format!("{}{}", out.stdout, out.stderr);
    assert_ne!(out.code, Some(0), "TLS 1.2 must be refused: {text}");
    assert!(!text.contains("New, TLSv1.2"), "{text}");
    // The fingerprint the daemon announced is the certificate's, as openssl computes it.
    let script = format!(
        "openssl s_client -connect {} -tls1_3 </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256",
        daemon.addr
    );
    let out = run_in("sh", &["-c", &script], None);
    let hex: String = out
        .stdout
        .trim()
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .replace(':', "")
        .to_lowercase();
    assert_eq!(
        format!("sha256:{hex}"),
        daemon.fingerprint,
        "{}",
        out.stdout
    );
}

// ---------------------------------------------------------------------------------------
// Two network namespaces and a packet capture
// ---------------------------------------------------------------------------------------

/// Two network namespaces joined by a veth pair (10.41.0.1 and 10.41.0.2), deleted
/// when dropped.
struct Netns {
    a: String,
    b: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

impl Netns {
    fn new() -> Result<Netns, String> {
        let id = std::process::id();
        let ns = Netns {
            a: format!("tls-a-{id}"),
            b: format!("tls-b-{id}"),
        };
        ip(&["netns", "add", &ns.a])?;
        ip(&["netns", "add", &ns.b])?;
        let (va, vb) = (format!("tlsa{id}"), format!("tlsb{id}"));
        ip(&[
            "link", "add", &va, "netns", &ns.a, "type", "veth", "peer", "name", &vb, "netns", &ns.b,
        ])?;
        for (n, v, addr) in [(&ns.a, &va, "10.41.0.1/24"), (&ns.b, &vb, "10.41.0.2/24")] {
            ip(&["-n", n, "addr", "add", addr, "dev", v])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }

    fn veth_a(&self) -> String {
        format!("tlsa{}", std::process::id())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

/// `sluice serve` in namespace `ns` on 10.41.0.2; returns it and its port.
fn serve_in(ns: &str, root: &Path, state: &Path, token: &Path, encrypt: &str) -> (ChildGuard, u16) {
    let mut child = ChildGuard(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                BIN,
                "serve",
                "--root",
                s(root),
                "--listen",
                "10.41.0.2:0",
            ])
            .args(["--json", "--buffer-mem", "64MiB", "--chunk-size", "1MiB"])
            .args([
                "--state-dir",
                s(state),
                "--token-file",
                s(token),
                "--encrypt",
                encrypt,
            ])
            .env_remove("SLUICE_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sluice serve starts"),
    );
    let mut line = String::new();
    let stdout = child.0.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("ready line");
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let port = v["listen"]
        .as_str()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok());
    (child, port.unwrap_or_else(|| panic!("no port in {line}")))
}

/// Captures on namespace `ns`'s `dev` into `pcap` until dropped.
fn capture(ns: &str, dev: &str, pcap: &Path) -> ChildGuard {
    let mut child = ChildGuard(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "tcpdump",
                "-i",
                dev,
                "-U",
                "--immediate-mode",
                "-B",
                "65536",
                "-s",
                "0",
                "-w",
                s(pcap),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts"),
    );
    // tcpdump says "listening on ..." once it captures.
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().expect("stderr"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).expect("tcpdump line");
    assert!(line.contains("listening on"), "tcpdump: {line}");
    // Keep reading its stderr, so its last words cannot kill it (SIGPIPE).
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    child
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Pushes `file` from namespace a to a daemon in namespace b with `encrypt` on both
/// sides, capturing; returns the capture's bytes.
fn captured_push(ns: &Netns, dir: &Path, file: &Path, encrypt: &str) -> Vec<u8> {
    let tag = encrypt.to_string();
    let (root, state) = (
        dir.join(format!("root-{tag}")),
        dir.join(format!("state-{tag}")),
    );
    std::fs::create_dir_all(&root).expect("mkdir");
    let token = dir.join("token");
    std::fs::write(&token, "a shared secret\n").expect("token");
    let (mut daemon, port) = serve_in(&ns.b, &root, &state, &token, encrypt);
    let pcap = dir.join(format!("{tag}.pcap"));
    let mut tcpdump = capture(&ns.a, &ns.veth_a(), &pcap);
    let kh = dir.join("known_hosts");
    let url = format!("sluice://10.41.0.2:{port}/");
    let out = run_in(
        "ip",
        &[
            "netns",
            "exec",
            &ns.a,
            BIN,
            "cp",
            "--buffer-mem",
            "64MiB",
            "--chunk-size",
            "1MiB",
            "--token-file",
            s(&token),
            "--known-hosts",
            s(&kh),
            "--encrypt",
            encrypt,
            s(file),
            &url,
        ],
        None,
    );
    assert_ok(&out, &format!("push with --encrypt {encrypt}"));
    let name = file.file_name().expect("a name");
    assert_eq!(
        std::fs::read(root.join(name)).expect("pushed"),
        std::fs::read(file).expect("source")
    );
    // Wait until tcpdump has caught up (the file stops growing), then stop it.
    let (mut last, mut still) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while still < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let len = std::fs::metadata(&pcap).map_or(0, |m| m.len());
        (last, still) = (len, if len == last { still + 1 } else { 0 });
    }
    let pid = tcpdump.0.id().to_string();
    assert_ok(
        &run_in("kill", &["-TERM", &pid], None),
        "kill -TERM tcpdump",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while tcpdump.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    tcpdump.kill();
    daemon.kill();
    std::fs::read(&pcap).expect("the capture")
}

#[test]
fn a_capture_between_two_hosts_shows_no_name_and_no_payload_unless_encryption_is_off() {
    let ns = match Netns::new() {
        Ok(ns) => ns,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED: network namespaces: {e}");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this check: {e}"
            );
            return;
        }
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let name = "secret-file-name-tls-canary.dat";
    let file = dir.path().join(name);
    canary_file(&file, 3 << 20);
    let clear = captured_push(&ns, dir.path(), &file, "never");
    assert!(
        clear.len() > 3 << 20,
        "the capture holds the transfer: {} bytes",
        clear.len()
    );
    assert!(
        contains(&clear, name.as_bytes()),
        "the check can fail: the name is in a clear capture"
    );
    assert!(
        contains(&clear, PATTERN),
        "the check can fail: the payload is in a clear capture"
    );
    let tls = captured_push(&ns, dir.path(), &file, "auto");
    assert!(
        tls.len() > 3 << 20,
        "the capture holds the transfer: {} bytes",
        tls.len()
    );
    assert!(
        !contains(&tls, name.as_bytes()),
        "the file name crossed in clear text"
    );
    assert!(!contains(&tls, PATTERN), "payload crossed in clear text");
    // A client asking for clear text across hosts is refused by a default daemon.
    let root = dir.path().join("root-refused");
    std::fs::create_dir_all(&root).expect("mkdir");
    let token = dir.path().join("token");
    let state = dir.path().join("state-auto");
    let (_daemon, port) = serve_in(&ns.b, &root, &state, &token, "auto");
    let url = format!("sluice://10.41.0.2:{port}/");
    let args = [
        "netns",
        "exec",
        &ns.a,
        BIN,
        "cp",
        "--token-file",
        s(&token),
        "--encrypt",
        "never",
        s(&file),
        &url,
    ];
    let line = assert_refused(&run_in("ip", &args, None), "clear text across hosts");
    assert_eq!(line, format!("sluice: error: 10.41.0.2:{port} requires encryption (daemon: --encrypt auto, clear text from loopback only; this client: --encrypt never)"));
    assert_eq!(entries(&root), 0, "nothing written");
}

#[test]
fn a_stream_is_encrypted_end_to_end_and_a_clear_sender_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let input = dir.path().join("input");
    canary_file(&input, 2_500_000);
    let kh = dir.path().join("known_hosts");
    let receiver = |out: &Path| {
        let mut child = ChildGuard(
            Command::new(BIN)
                .args([
                    "stream",
                    "recv",
                    "--listen",
                    "127.0.0.1:0",
                    "--json",
                    "--encrypt",
                    "always",
                ])
                .args([
                    "--buffer-mem",
                    "16MiB",
                    "--chunk-size",
                    "1MiB",
                    "--output",
                    s(out),
                ])
                .args(["--state-dir", s(&dir.path().join("state"))])
                .env_remove("SLUICE_LOG")
                .stderr(Stdio::piped())
                .spawn()
                .expect("the receiver starts"),
        );
        let mut reader = std::io::BufReader::new(child.0.stderr.take().expect("stderr"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).expect("its address line");
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let fp = v["fingerprint"]
            .as_str()
            .expect("a fingerprint")
            .to_string();
        (child, v["listen"].as_str().expect("listen").to_string(), fp)
    };
    let send = |addr: &str, encrypt: &str| {
        let url = format!("sluice://{addr}");
        let args = [
            "stream",
            "send",
            &url,
            s(&input),
            "--buffer-mem",
            "16MiB",
            "--chunk-size",
            "1MiB",
            "--record-size",
            "200000",
            "--encrypt",
            encrypt,
            "--known-hosts",
            s(&kh),
        ];
        run_in(BIN, &args, None)
    };
    let out = dir.path().join("out");
    let (mut rx, addr, fp) = receiver(&out);
    assert_ok(&send(&addr, "always"), "an encrypted stream");
    let deadline = Instant::now() + Duration::from_secs(60);
    while rx.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(rx.0.wait().expect("the receiver's status").code(), Some(0));
    assert_eq!(
        std::fs::read(&out).expect("output"),
        std::fs::read(&input).expect("input")
    );
    assert_eq!(
        std::fs::read_to_string(&kh).expect("pinned"),
        format!("{addr} {fp}\n")
    );
    let out2 = dir.path().join("out2");
    let (_rx, addr, _) = receiver(&out2);
    let line = assert_refused(&send(&addr, "never"), "a clear stream");
    assert!(
        line.contains("requires encryption (daemon: --encrypt always"),
        "{line}"
    );
    assert_eq!(
        std::fs::metadata(&out2).map(|m| m.len()).unwrap_or(0),
        0,
        "nothing written"
    );
}
