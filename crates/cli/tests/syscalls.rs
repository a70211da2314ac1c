//! System calls per file (issue 16): an `strace -c -f` of both sides of a push of many
//! small files over loopback, counted per syscall, so that a regression in the cost per
//! file fails here: one `statx` per file on the source (the scan's), no failing
//! `unlinkat`, no `rename` and no `fchmod` per small file on the sink, at most about one
//! `openat` per file on each side, and no `sched_yield` spinning.
//!
//! Needs `strace` (apt-get install -y strace) and ptrace; skips LOUDLY without them.

// Test data and counters are small; truncation cannot happen.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{run_in, skip, ChildGuard, BIN, SMALL};

/// Files pushed: enough that a per-file syscall stands out of the fixed costs.
const FILES: u64 = 2000;

/// Opens (most failing) of every process start, whatever it moves: the topology probe
/// reads /sys, the dynamic loader, the TLS state (about 700 here).
const FIXED_OPENS: u64 = 1000;

/// `name -> (calls, errors)` from an `strace -c` summary.
type Counts = BTreeMap<String, (u64, u64)>;

/// Parses `strace -c -o FILE`: `% time seconds usecs/call calls [errors] syscall`.
fn parse(path: &Path) -> Counts {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("strace summary {}: {e}", path.display()));
    let mut counts = Counts::new();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if !(5..=6).contains(&t.len()) || t[0].parse::<f64>().is_err() || t[t.len() - 1] == "total"
        {
            continue;
        }
        let name = t[t.len() - 1];
        let calls = t[3].parse().unwrap_or(0);
        let errors = if t.len() == 6 {
            t[4].parse().unwrap_or(0)
        } else {
            0
        };
        let e = counts.entry(name.to_owned()).or_insert((0, 0));
        e.0 += calls;
        e.1 += errors;
    }
    assert!(
        !counts.is_empty(),
        "no syscall counts in {}: {text}",
        path.display()
    );
    counts
}

fn calls(c: &Counts, name: &str) -> u64 {
    c.get(name).map_or(0, |v| v.0)
}

fn errors(c: &Counts, name: &str) -> u64 {
    c.get(name).map_or(0, |v| v.1)
}

/// Whether `strace` runs here and may trace (a container may refuse ptrace).
fn strace_works() -> bool {
    Command::new("strace")
        .args(["-f", "-c", "-o", "/dev/null", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `FILES` files of 1-4 KiB in 6 directories, mode 0o600 (kept exactly by any umask
/// that leaves the owner's read and write).
fn make_tree(src: &Path) {
    for i in 0..FILES {
        let dir = src.join(format!("d{}", i % 6));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("f{i:04}"));
        let len = 1024 + (i as usize * 37) % 3072;
        std::fs::write(&path, vec![(i % 251) as u8; len]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// Starts `strace -f -c -o OUT sluice serve` on `root`; returns its guard and address.
fn traced_daemon(root: &Path, out: &Path, state: &Path) -> (ChildGuard, String) {
    let mut child = ChildGuard(
        Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(out)
            .args([BIN, "serve", "--listen", "127.0.0.1:0", "--json", "--root"])
            .arg(root)
            .arg("--state-dir")
            .arg(state)
            .args(SMALL)
            .env_remove("SLUICE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace runs"),
    );
    let stdout = child.0.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the readiness line");
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let addr = v["listen"].as_str().expect("listen").to_owned();
    (child, addr)
}

/// Stops the daemon under strace (SIGINT to strace's child: strace itself waits) and
/// waits for strace to write its summary.
fn stop_traced(mut guard: ChildGuard) {
    let pid = guard.0.id();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace() {
        let child: i32 = child.parse().expect("a pid");
        // SAFETY: kill(2) with a pid strace started for this test and a valid signal.
        unsafe { libc::kill(child, libc::SIGINT) };
    }
    let status = guard.0.wait().expect("strace ends");
    assert!(status.code().is_some(), "strace was killed: {status:?}");
}

#[test]
fn a_small_file_push_costs_one_statx_per_file_and_no_failing_or_spinning_syscalls() {
    if !strace_works() {
        skip("strace is missing or may not trace here (apt-get install -y strace)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    std::fs::create_dir_all(&dst).unwrap();
    make_tree(&src);
    let (dout, cout) = (
        t.path().join("daemon.strace"),
        t.path().join("client.strace"),
    );
    let (daemon, addr) = traced_daemon(&dst, &dout, &t.path().join("state"));
    let src_arg = format!("{}/", src.display());
    let url = format!("sluice://{addr}/");
    let mut args = vec!["-f", "-c", "-o", cout.to_str().unwrap(), BIN, "cp"];
    args.extend(SMALL);
    args.extend(["-r", &src_arg, &url]);
    let out = run_in("strace", &args, None);
    stop_traced(daemon);
    assert_eq!(out.code, Some(0), "push failed: {}", out.stderr);
    let (c, d) = (parse(&cout), parse(&dout));
    eprintln!("client: {c:?}\ndaemon: {d:?}");
    assert_pushed(&src, &dst);
    // Source: the scan's statx, one open, one read per file.
    assert!(
        calls(&c, "statx") + calls(&c, "newfstatat") < FILES * 5 / 4,
        "statx: {c:?}"
    );
    let c_opens = calls(&c, "openat") + calls(&c, "openat2");
    assert!(c_opens < FILES * 5 / 4 + FIXED_OPENS, "client opens: {c:?}");
    // One read a file (a pack's files are asked with preadv2(RWF_NOWAIT); only those not
    // in the page cache, or on a file system without it, are read again), none failing
    // but the one EOPNOTSUPP a reader may get where the file system has no RWF_NOWAIT.
    let c_reads = calls(&c, "pread64") + calls(&c, "preadv") + calls(&c, "preadv2");
    assert!(c_reads < FILES * 5 / 4, "client reads: {c:?}");
    assert!(errors(&c, "preadv2") < 8, "failing preadv2: {c:?}");
    // Sink: nothing that fails per file, no per-file rename, chmod or temporary name.
    assert!(
        errors(&d, "unlinkat") < FILES / 10,
        "failing unlinkat: {d:?}"
    );
    assert!(calls(&d, "unlinkat") < FILES / 10, "unlinkat: {d:?}");
    assert!(
        calls(&d, "renameat") + calls(&d, "renameat2") < FILES / 10,
        "rename: {d:?}"
    );
    assert!(calls(&d, "fchmod") < FILES / 10, "fchmod: {d:?}");
    let d_opens = calls(&d, "openat") + calls(&d, "openat2");
    assert!(d_opens < FILES * 5 / 4 + FIXED_OPENS, "daemon opens: {d:?}");
    assert!(calls(&d, "utimensat") < FILES * 5 / 4, "utimensat: {d:?}");
    // No spinning: a blocked thread sleeps, it does not yield in a loop.
    for (side, counts) in [("client", &c), ("daemon", &d)] {
        let yields = calls(counts, "sched_yield");
        assert!(
            yields < FILES / 4,
            "{side} sched_yield {yields}: {counts:?}"
        );
    }
}

/// Every file arrived with its bytes and its mode.
fn assert_pushed(src: &Path, dst: &Path) {
    for i in 0..FILES {
        let rel = format!("d{}/f{i:04}", i % 6);
        let (a, b) = (src.join(&rel), dst.join(&rel));
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{rel}"
        );
        let mode = std::fs::metadata(&b).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600, "{rel}");
    }
}
