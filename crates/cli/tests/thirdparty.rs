//! Third-party copies: `sluice cp sluice://A/x sluice://B/y` between two real daemons.
//! On loopback for the outcomes (a tree arrives exact, refusals leave nothing), and in
//! network namespaces joined by a bridge for the claim that matters: the payload goes
//! from A to B and not through the client (the client's own interface counts only the
//! control frames).

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::{cp, run_in, ChildGuard, Daemon, BIN};

/// Every entry under `dir`: kind, bytes, mode and mtime, by relative path.
fn snapshot(dir: &Path) -> BTreeMap<String, (bool, Vec<u8>, u32, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(dir.join(&rel)).expect("listing") {
            let r = rel.join(e.expect("entry").file_name());
            let p = dir.join(&r);
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let data = if m.is_dir() {
                stack.push(r.clone());
                Vec::new()
            } else {
                std::fs::read(&p).expect("read")
            };
            let key = r.to_str().expect("UTF-8").to_string();
            out.insert(key, (m.is_dir(), data, m.mode() & 0o7777, m.mtime()));
        }
    }
    out
}

/// A small tree: nested directories, an empty file, a file of several chunks, odd modes.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
    std::fs::write(root.join("empty"), b"").expect("write");
    let big: Vec<u8> = (0..3_500_000u32)
        .map(|i| (i * 7 % 251).to_le_bytes()[0])
        .collect();
    std::fs::write(root.join("a/big.bin"), &big).expect("write");
    for i in 0..40 {
        std::fs::write(root.join(format!("a/b/c/f{i}.txt")), format!("file {i}\n")).expect("w");
    }
    std::fs::set_permissions(root.join("empty"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
}

#[test]
fn a_tree_goes_from_one_daemon_to_another_exact() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    make_tree(&a.path().join("src"));
    let (da, db) = (Daemon::start(a.path()), Daemon::start(b.path()));
    let out = cp(&["-r", "--json", &da.url("src"), &db.url("dst")], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        snapshot(&a.path().join("src")),
        snapshot(&b.path().join("dst"))
    );
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON summary");
    assert_eq!(v["files"], 42, "{v}");
    assert_eq!(v["files_failed"], 0, "{v}");
    // A trailing '/' sends the contents, into an existing directory, like cp -r.
    std::fs::create_dir(b.path().join("into")).unwrap();
    let out = cp(&["-r", &da.url("src/"), &db.url("into")], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        snapshot(&a.path().join("src")),
        snapshot(&b.path().join("into"))
    );
}

#[test]
fn a_missing_source_is_one_line_and_nothing_on_the_destination() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (da, db) = (Daemon::start(a.path()), Daemon::start(b.path()));
    let out = cp(&["-r", &da.url("nope"), &db.url("dst")], None);
    assert_ne!(out.code, Some(0));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].contains("does not exist"), "{}", out.stderr);
    assert!(std::fs::read_dir(b.path()).unwrap().next().is_none());
}

#[test]
fn a_source_path_outside_the_root_is_refused() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (da, db) = (Daemon::start(a.path()), Daemon::start(b.path()));
    let out = cp(&["-r", &da.url("../etc"), &db.url("dst")], None);
    assert_ne!(out.code, Some(0));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(std::fs::read_dir(b.path()).unwrap().next().is_none());
}

// ---------------------------------------------------------------------------------------
// Namespaces: A, B and the client C on a bridge, each with its own interface.
// ---------------------------------------------------------------------------------------

/// Three namespaces on one bridge in the root namespace, removed on drop.
struct Lan {
    tag: String,
}

const SUBNET: &str = "10.45";

fn sh(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Lan {
    /// `None` (with a loud skip) where namespaces cannot be made (not root).
    fn up() -> Option<Lan> {
        let tag = format!("{}", std::process::id() % 100_000);
        let lan = Lan { tag };
        let t = &lan.tag;
        let mut script = format!("ip link add tpbr{t} type bridge && ip link set tpbr{t} up");
        for (i, n) in ["a", "b", "c"].iter().enumerate() {
            let ns = format!("tp{n}{t}");
            script += &format!(
                " && ip netns add {ns} && ip link add tp{n}h{t} type veth peer name eth0 netns {ns} \
                 && ip link set tp{n}h{t} master tpbr{t} up \
                 && ip -n {ns} addr add {SUBNET}.0.{}/24 dev eth0 && ip -n {ns} link set eth0 up \
                 && ip -n {ns} link set lo up",
                i + 2
            );
        }
        if !sh(&script) {
            common::skip("cannot create network namespaces here (not root?): third-party over a LAN not tested");
            return None;
        }
        Some(lan)
    }

    fn ns(&self, n: &str) -> String {
        format!("tp{n}{}", self.tag)
    }

    fn ip(n: &str) -> String {
        let host = match n {
            "a" => 2,
            "b" => 3,
            _ => 4,
        };
        format!("{SUBNET}.0.{host}")
    }

    /// Bytes received + sent by namespace `n`'s interface.
    fn bytes(&self, n: &str) -> u64 {
        ["rx_bytes", "tx_bytes"]
            .iter()
            .map(|f| {
                let out = Command::new("ip")
                    .args(["netns", "exec", &self.ns(n), "cat"])
                    .arg(format!("/sys/class/net/eth0/statistics/{f}"))
                    .output()
                    .expect("ip netns exec");
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<u64>()
                    .expect("a byte counter")
            })
            .sum()
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        let t = &self.tag;
        sh(&format!(
            "ip netns del tpa{t}; ip netns del tpb{t}; ip netns del tpc{t}; ip link del tpbr{t}"
        ));
    }
}

/// `sluice serve` inside namespace `ns` on `ip:7878`, with `token`.
fn serve_in(ns: &str, ip: &str, root: &Path, token: &Path) -> ChildGuard {
    let child = Command::new("ip")
        .args(["netns", "exec", ns, BIN, "serve", "--root"])
        .arg(root)
        .args(["--listen", &format!("{ip}:7878"), "--token-file"])
        .arg(token)
        .args(["--buffer-mem", "64MiB", "--chunk-size", "1MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sluice serve in a namespace");
    let guard = ChildGuard(child);
    // Ready when it accepts a connection.
    for _ in 0..200 {
        if sh(&format!(
            "ip netns exec {ns} bash -c 'exec 3<>/dev/tcp/{ip}/7878' 2>/dev/null"
        )) {
            return guard;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("sluice serve in {ns} did not start");
}

#[test]
fn the_payload_goes_from_a_to_b_and_not_through_the_client() {
    let Some(lan) = Lan::up() else { return };
    let (a, b, tmp) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let token = tmp.path().join("token");
    std::fs::write(&token, "third-party test token\n").unwrap();
    let payload: Vec<u8> = (0..24u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
        .collect();
    std::fs::write(a.path().join("big.bin"), &payload).unwrap();
    let _da = serve_in(&lan.ns("a"), &Lan::ip("a"), a.path(), &token);
    let _db = serve_in(&lan.ns("b"), &Lan::ip("b"), b.path(), &token);
    let before = (lan.bytes("a"), lan.bytes("b"), lan.bytes("c"));
    let src = format!("sluice://{}:7878/big.bin", Lan::ip("a"));
    let dst = format!("sluice://{}:7878/copy.bin", Lan::ip("b"));
    let tok = token.to_str().unwrap();
    let c_ns = lan.ns("c");
    let out = run_in(
        "ip",
        &[
            "netns",
            "exec",
            &c_ns,
            BIN,
            "cp",
            "--token-file",
            tok,
            &src,
            &dst,
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(std::fs::read(b.path().join("copy.bin")).unwrap() == payload);
    let moved = |i: u64, j: u64| j - i;
    let (a_bytes, b_bytes, c_bytes) = (
        moved(before.0, lan.bytes("a")),
        moved(before.1, lan.bytes("b")),
        moved(before.2, lan.bytes("c")),
    );
    let n = payload.len() as u64;
    eprintln!("interface bytes: A {a_bytes}, B {b_bytes}, client {c_bytes} for a {n}-byte file");
    assert!(a_bytes >= n && b_bytes >= n, "A and B carried the payload");
    assert!(
        c_bytes < n / 20,
        "the client's interface carried {c_bytes} bytes of a {n}-byte payload"
    );
}
