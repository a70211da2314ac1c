//! Transfers through the real binary over loopback and real files: `sluice serve` runs
//! as a child process on `127.0.0.1:0` with a temporary root (its `--json` line is the
//! readiness signal and names the port), and `sluice cp` pushes and pulls.
//!
//! Every child is killed when its guard is dropped, every wait has a deadline, and every
//! test moves a few MiB at most (`--buffer-mem 64MiB --chunk-size 1MiB`) except the
//! 50 000-file and the resume tests, which stay within seconds in a debug build.
//! Regression tests are named `regression_<the bug>`.

use serde_json::Value;
use sluice_wire::{chunk_checksum, Codec, FileDigest, Frame};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

mod common;

use common::{skip, ChildGuard, Daemon, BIN, COMMAND_TIMEOUT, FAULT_CORRUPT, SMALL};
const MIB: usize = 1 << 20;
/// The chunk size every test uses (`SMALL`).
const CHUNK: usize = MIB;
/// The engine's knob that fails every read of a file of this name with EIO (fault.rs).
const FAULT_READ: &str = "SLUICE_FAULT_READ_FAIL";
/// Test knob: `--compress auto` keeps measuring over loopback (where it sends raw).
const AUTO_ON_LOOPBACK: [(&str, &str); 1] = [("SLUICE_AUTO_ON_LOOPBACK", "1")];

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

/// What one finished `sluice` command left behind.
#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    what: String,
}

impl Out {
    #[track_caller]
    fn ok(&self) -> &Out {
        assert_eq!(self.code, Some(0), "{}: stderr: {}", self.what, self.stderr);
        self
    }

    #[track_caller]
    fn code(&self, want: i32) -> &Out {
        assert_eq!(
            self.code,
            Some(want),
            "{}: want exit {want}; stdout: {}; stderr: {}",
            self.what,
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{}: stdout is not JSON ({e}): {}; stderr: {}",
                self.what, self.stdout, self.stderr
            )
        })
    }
}

fn spawn_sluice(args: &[&str], env: &[(&str, &str)]) -> ChildGuard {
    ChildGuard(
        Command::new(BIN)
            .args(args)
            .env_remove("SLUICE_LOG")
            .env_remove(FAULT_CORRUPT)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sluice runs"),
    )
}

/// Waits for `child` (killing it and failing after `timeout`) and collects its output.
fn finish(mut child: ChildGuard, what: String, timeout: Duration) -> Out {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let stdout = drain(child.0.stdout.take().map(|s| Box::new(s) as _));
    let stderr = drain(child.0.stderr.take().map(|s| Box::new(s) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("waiting for sluice") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill();
            panic!(
                "{what}: still running after {timeout:?}; stderr: {}",
                stderr.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        code: status.code(),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        what,
    }
}

fn sluice_env_timeout(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Out {
    let what = format!("sluice {}", args.join(" "));
    finish(spawn_sluice(args, env), what, timeout)
}

fn sluice(args: &[&str]) -> Out {
    sluice_env_timeout(args, &[], COMMAND_TIMEOUT)
}

/// `sluice cp` with the small settings in front of `args`.
fn cp_args(args: &[&str]) -> Vec<String> {
    ["cp"]
        .iter()
        .chain(SMALL.iter())
        .chain(args.iter())
        .map(|s| s.to_string())
        .collect()
}

fn cp(args: &[&str]) -> Out {
    cp_env(args, &[])
}

fn cp_env(args: &[&str], env: &[(&str, &str)]) -> Out {
    let full = cp_args(args);
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    sluice_env_timeout(&full, env, COMMAND_TIMEOUT)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test path")
}

/// `p` with a trailing '/'.
fn slash(p: &Path) -> String {
    format!("{}/", s(p))
}

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

/// Deterministic incompressible bytes (xorshift64*).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A large file quickly: one random MiB, each copy stamped with its index.
fn write_big(path: &Path, mib: usize, seed: u64) {
    let block = bytes(seed, MIB);
    let mut f = std::fs::File::create(path).expect("create");
    for i in 0..mib {
        let mut b = block.clone();
        b[..8].copy_from_slice(&(i as u64).to_le_bytes());
        f.write_all(&b).expect("write");
    }
}

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir -p");
    }
    std::fs::write(path, data).expect("write");
}

fn set_mtime(path: &Path, secs: u64, nanos: u32) {
    let t = UNIX_EPOCH + Duration::new(secs, nanos);
    std::fs::File::open(path)
        .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(t)))
        .unwrap_or_else(|e| panic!("setting the mtime of {}: {e}", path.display()));
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[track_caller]
fn assert_same_file(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a), std::fs::read(b));
    let (x, y) = match (x, y) {
        (Ok(x), Ok(y)) => (x, y),
        (x, y) => panic!(
            "reading {} ({:?}) / {} ({:?})",
            a.display(),
            x.err(),
            b.display(),
            y.err()
        ),
    };
    assert!(
        x == y,
        "{} ({} bytes) and {} ({} bytes) differ",
        a.display(),
        x.len(),
        b.display(),
        y.len()
    );
}

/// What a tree entry is, as the tests compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File {
        len: u64,
        hash: u64,
        mode: u32,
        mtime: (i64, i64),
    },
    Dir {
        mode: u32,
        mtime: (i64, i64),
    },
    Symlink {
        target: String,
    },
}

fn node(path: &Path) -> Node {
    let m =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()));
    let mtime = (m.mtime(), m.mtime_nsec());
    let mode = m.mode() & 0o7777;
    if m.file_type().is_symlink() {
        let t = std::fs::read_link(path).expect("readlink");
        Node::Symlink {
            target: t.to_str().expect("UTF-8 target").to_string(),
        }
    } else if m.is_dir() {
        Node::Dir { mode, mtime }
    } else {
        let data = std::fs::read(path).expect("read");
        Node::File {
            len: data.len() as u64,
            hash: chunk_checksum(&data),
            mode,
            mtime,
        }
    }
}

/// Every entry under `dir` (not `dir` itself) by relative path.
fn snapshot(dir: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let entries = std::fs::read_dir(dir.join(&rel))
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.join(&rel).display()));
        for e in entries {
            let e = e.expect("dir entry");
            let r = rel.join(e.file_name());
            let n = node(&dir.join(&r));
            if matches!(n, Node::Dir { .. }) {
                stack.push(r.clone());
            }
            out.insert(r.to_str().expect("UTF-8 name").to_string(), n);
        }
    }
    out
}

/// The two trees hold the same entries with the same kinds, bytes, modes, mtimes and
/// link targets; on a difference, names the first one.
#[track_caller]
fn assert_same_tree(a: &Path, b: &Path) {
    let (x, y) = (snapshot(a), snapshot(b));
    for (k, v) in &x {
        match y.get(k) {
            None => panic!("{k:?} is in {} but not in {}", a.display(), b.display()),
            Some(w) => assert_eq!(
                v,
                w,
                "{k:?} differs between {} and {}",
                a.display(),
                b.display()
            ),
        }
    }
    for k in y.keys() {
        assert!(
            x.contains_key(k),
            "{k:?} is in {} but not in {}",
            b.display(),
            a.display()
        );
    }
}

/// Names in `dir` (none if it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.expect("entry").file_name().into_string().expect("UTF-8"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The digest `FileDone` carries for `data` at the tests' chunk size, in hex.
fn expected_digest(data: &[u8]) -> String {
    let count = data.len().div_ceil(CHUNK) as u64;
    let mut d = FileDigest::new(count).expect("digest");
    for (i, c) in data.chunks(CHUNK).enumerate() {
        d.add(i as u64, chunk_checksum(c)).expect("add");
    }
    d.finish()
        .expect("finish")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The summary's report row for `path`.
#[track_caller]
fn row<'a>(summary: &'a Value, path: &str) -> &'a Value {
    summary["file_report"]
        .as_array()
        .expect("file_report is an array")
        .iter()
        .find(|r| r["path"] == path)
        .unwrap_or_else(|| panic!("no file_report row for {path:?}: {summary}"))
}

/// A tree with every kind of entry the issue names. Returns the source directory
/// (`base/src`); `base/outside/secret` is a file outside it that a link points to.
fn rich_tree(base: &Path) -> PathBuf {
    let src = base.join("src");
    write(&base.join("outside/secret"), b"not to be followed");
    write(&src.join("a/b/c/deep.txt"), b"deep in the tree\n");
    write(&src.join("a/one.bin"), &bytes(1, 3 * MIB + 17));
    write(&src.join("a/small.txt"), &bytes(2, 1500));
    write(&src.join("empty.txt"), b"");
    write(&src.join("données/日本語 ☃.txt"), "unicode ☃\n".as_bytes());
    std::fs::create_dir_all(src.join("empty-dir/nested-empty")).expect("mkdir");
    // Sparse: 8 MiB with data at both ends and a hole between.
    {
        let f = std::fs::File::create(src.join("sparse.bin")).expect("create");
        f.set_len(8 * MIB as u64).expect("set_len");
        use std::os::unix::fs::FileExt;
        f.write_all_at(&bytes(3, 64 << 10), 0).expect("write");
        f.write_all_at(&bytes(4, 4096), 7 * MIB as u64)
            .expect("write");
    }
    // Links: inside, absolute out, relative out of the tree, dangling.
    std::fs::create_dir_all(src.join("links")).expect("mkdir");
    symlink("../données/日本語 ☃.txt", src.join("links/inside")).expect("symlink");
    symlink("/etc/passwd", src.join("links/absolute")).expect("symlink");
    symlink("../../outside/secret", src.join("links/out")).expect("symlink");
    symlink("no/such/target", src.join("links/dangling")).expect("symlink");
    // Permission bits.
    write(&src.join("perm/run.sh"), b"#!/bin/sh\necho hi\n");
    chmod(&src.join("perm/run.sh"), 0o751);
    write(&src.join("perm/private"), b"private");
    chmod(&src.join("perm/private"), 0o600);
    write(&src.join("perm/readonly"), b"read only");
    chmod(&src.join("perm/readonly"), 0o444);
    std::fs::create_dir_all(src.join("perm/d751")).expect("mkdir");
    chmod(&src.join("perm/d751"), 0o751);
    // A read-only directory with a file in it: the sink writes into it with the owner's
    // bits added and gives it its own mode back at the end (it arrived 0o755 before).
    write(
        &src.join("perm/d555/inside.txt"),
        b"in a read-only directory",
    );
    chmod(&src.join("perm/d555"), 0o555);
    // Mtimes, files first, then directories deepest first.
    let snap = snapshot(&src);
    let mut k = 0u64;
    for (rel, n) in &snap {
        if let Node::File { .. } = n {
            k += 1;
            set_mtime(&src.join(rel), 1_500_000_000 + k * 1000, 123_456_789);
        }
    }
    let mut dirs: Vec<&String> = snap
        .iter()
        .filter(|(_, n)| matches!(n, Node::Dir { .. }))
        .map(|(r, _)| r)
        .collect();
    dirs.sort_by_key(|r| std::cmp::Reverse(r.matches('/').count()));
    for r in dirs {
        k += 1;
        set_mtime(&src.join(r), 1_400_000_000 + k * 1000, 987_654_321);
    }
    set_mtime(&src, 1_300_000_000, 5);
    src
}

// ---------------------------------------------------------------------------------------
// Single files, streams and pipelines
// ---------------------------------------------------------------------------------------

#[test]
fn single_file_push_and_pull_are_byte_identical() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = t.path().join("one.bin");
    write(&file, &bytes(10, 2 * MIB + 333));
    let mut d = Daemon::start(&root);

    cp(&[s(&file), &d.url("one.bin")]).ok();
    assert_same_file(&file, &root.join("one.bin"));

    let back = t.path().join("back.bin");
    cp(&[&d.url("one.bin"), s(&back)]).ok();
    assert_same_file(&file, &back);
    assert_eq!(names(t.path()), ["back.bin", "one.bin", "root"]);
    d.assert_alive();
}

#[test]
fn direct_and_buffered_io_on_push_and_pull_are_byte_identical_and_reported_by_both_sides() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = t.path().join("big.bin");
    // Whole chunks, then a tail that is not a multiple of the page size (O_DIRECT takes
    // whole pages; the rest goes through the page cache).
    write(&file, &bytes(12, 5 * MIB + 4096 + 333));
    let mut d = Daemon::start_with(&root, &["--log", "info"], &[]);
    for (flag, mode) in [("--direct", "direct"), ("--buffered", "buffered")] {
        let name = format!("{mode}.bin");
        let out = cp(&["--json", flag, s(&file), &d.url(&name)]);
        assert_eq!(out.ok().json()["io_mode"], mode, "{}", out.what);
        assert_same_file(&file, &root.join(&name));
        let back = t.path().join(format!("back-{mode}.bin"));
        let out = cp(&["--json", flag, &d.url(&name), s(&back)]);
        assert_eq!(out.ok().json()["io_mode"], mode, "{}", out.what);
        assert_same_file(&file, &back);
    }
    // Without either flag: direct.
    let out = cp(&["--json", s(&file), &d.url("default.bin")]);
    assert_eq!(out.ok().json()["io_mode"], "direct", "{}", out.what);
    assert_same_file(&file, &root.join("default.bin"));
    // The daemon did as each client asked, on its side of the pushes and pulls.
    let log = d.log();
    assert_eq!(log.matches("failed, io direct").count(), 3, "{log}");
    assert_eq!(log.matches("failed, io buffered").count(), 2, "{log}");
    d.assert_alive();
}

#[test]
fn large_file_with_one_and_four_streams_on_both_pipelines() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let pulled = t.path().join("pulled");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&pulled).unwrap();
    let file = t.path().join("big.bin");
    // 5.5 chunks: several full ones and a short last one.
    write(&file, &bytes(11, 5 * MIB + MIB / 2));
    let d = Daemon::start(&root);
    for streams in ["1", "4"] {
        for pipeline in ["inline", "queued"] {
            let name = format!("big-{streams}-{pipeline}.bin");
            let common = ["--json", "--streams", streams, "--pipeline", pipeline];
            let mut args: Vec<&str> = common.to_vec();
            let url = d.url(&name);
            args.extend([s(&file), url.as_str()]);
            let out = cp(&args);
            let v = out.ok().json();
            assert_same_file(&file, &root.join(&name));
            assert_eq!(v["pipeline"], pipeline, "{}", out.what);
            assert_eq!(v["bytes"], 5 * MIB as u64 + MIB as u64 / 2);
            let chunks: u64 = v["channels"]
                .as_object()
                .unwrap()
                .values()
                .map(|c| c["chunks"].as_u64().unwrap())
                .sum();
            assert_eq!(chunks, 6, "{}: {v}", out.what);

            let local = pulled.join(&name);
            let mut args: Vec<&str> = common.to_vec();
            args.extend([url.as_str(), s(&local)]);
            let out = cp(&args);
            assert_eq!(out.ok().json()["pipeline"], pipeline, "{}", out.what);
            assert_same_file(&file, &local);
        }
    }
}

#[test]
fn reads_in_flight_at_any_depth_move_files_byte_identical_both_ways() {
    // Large files are read with O_DIRECT through each io-read thread's ring, up to
    // --read-depth chunks at once (the temp dir is on a disk file system; where it is
    // not, reads go one at a time and the summary says so).
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    for (i, mib) in [7usize, 3, 1].into_iter().enumerate() {
        write(
            &src.join(format!("f{i}.bin")),
            &bytes(40 + i as u64, mib * MIB + 4097 * i),
        );
    }
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(src.join("f0.bin"))
            .is_ok()
    };
    let d = Daemon::start_with(&root, &["--read-depth", "8"], &[]);
    for depth in ["1", "2", "8"] {
        let dest = format!("d{depth}");
        let push = cp(&[
            "-r",
            "--json",
            "--read-depth",
            depth,
            &slash(&src),
            &d.url(&dest),
        ]);
        let v = push.ok().json();
        assert_same_tree(&src, &root.join(&dest));
        let used = v["read_depth"].as_u64().unwrap();
        assert!(used >= 1 && used <= depth.parse().unwrap(), "{depth}: {v}");
        // A kernel or sandbox without io_uring (a container's seccomp profile) reads one
        // at a time and says so once; anywhere else reads overlap.
        let no_ring = push.stderr.contains("io_uring unavailable");
        if direct && depth != "1" && !no_ring {
            assert!(used > 1, "{depth}: reads went one at a time: {v}");
        }
        let pulled = t.path().join(format!("pulled{depth}"));
        cp(&[
            "-r",
            "--read-depth",
            depth,
            &d.url(&format!("{dest}/")),
            s(&pulled),
        ])
        .ok();
        assert_same_tree(&src, &pulled);
    }
    let out = cp(&["-r", "--read-depth", "0", s(&src), &d.url("x")]);
    out.code(2);
    assert!(out.stderr.contains("--read-depth"), "{}", out.stderr);
}

#[test]
fn policies_another_topology_fsync_and_io_threads() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = t.path().join("f.bin");
    write(&file, &bytes(12, 3 * MIB + 1));
    // A daemon planned for a synthetic 4-node machine runs unbound here.
    let d = Daemon::start_with(
        &root,
        &[
            "--topology",
            "synthetic:pack:2 numa:2 core:4 pu:1",
            "--policy",
            "nmts",
        ],
        &[],
    );
    for policy in ["os", "bind"] {
        let url = d.url(&format!("{policy}.bin"));
        let args = [
            "--json",
            "--policy",
            policy,
            "--fsync",
            "--streams",
            "3",
            "--io-threads",
            "3",
        ];
        let mut a: Vec<&str> = args.to_vec();
        a.extend([s(&file), url.as_str()]);
        let v = cp(&a).ok().json();
        assert_eq!(v["plan"]["policy"], policy, "{}", v["plan"]);
        assert_same_file(&file, &root.join(format!("{policy}.bin")));
        let back = t.path().join(format!("{policy}-back.bin"));
        let mut a: Vec<&str> = args.to_vec();
        a.extend([url.as_str(), s(&back)]);
        cp(&a).ok();
        assert_same_file(&file, &back);
    }
}

#[test]
fn client_and_daemon_chunk_sizes_differ() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = t.path().join("f.bin");
    write(&file, &bytes(14, 9 * MIB + 5));
    let d = Daemon::start_with(&root, &["--chunk-size", "4MiB"], &[]);
    // The client's 1 MiB (SMALL) is smaller than the daemon's 4 MiB.
    cp(&[s(&file), &d.url("small-chunks.bin")]).ok();
    assert_same_file(&file, &root.join("small-chunks.bin"));
    let back = t.path().join("back.bin");
    cp(&[&d.url("small-chunks.bin"), s(&back)]).ok();
    assert_same_file(&file, &back);
    // A client asking for more than the daemon's chunk.
    let d = Daemon::start(&root);
    let big = ["cp", "--buffer-mem", "64MiB", "--chunk-size", "8MiB"];
    let url = d.url("big-chunks.bin");
    let mut a: Vec<&str> = big.to_vec();
    a.extend([s(&file), url.as_str()]);
    sluice(&a).ok();
    assert_same_file(&file, &root.join("big-chunks.bin"));
    let mut a: Vec<&str> = big.to_vec();
    let back = t.path().join("back8.bin");
    a.extend([url.as_str(), s(&back)]);
    sluice(&a).ok();
    assert_same_file(&file, &back);
}

#[test]
fn concurrent_sessions_share_the_daemon() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = t.path().join("f.bin");
    write(&file, &bytes(13, 3 * MIB + 7));
    std::fs::copy(&file, root.join("served.bin")).unwrap();
    // A small daemon pool: 16 one-MiB slots for every session at once.
    let mut d = Daemon::start_with(&root, &["--buffer-mem", "16MiB"], &[]);
    let mut children = Vec::new();
    for i in 0..3 {
        let push = cp_args(&["--streams", "4", s(&file), &d.url(&format!("p{i}.bin"))]);
        let push: Vec<&str> = push.iter().map(String::as_str).collect();
        children.push((format!("push {i}"), spawn_sluice(&push, &[])));
        let local = t.path().join(format!("q{i}.bin"));
        let pull = cp_args(&["--streams", "4", &d.url("served.bin"), s(&local)]);
        let pull: Vec<&str> = pull.iter().map(String::as_str).collect();
        children.push((format!("pull {i}"), spawn_sluice(&pull, &[])));
    }
    for (what, child) in children {
        finish(child, what, COMMAND_TIMEOUT).ok();
    }
    for i in 0..3 {
        assert_same_file(&file, &root.join(format!("p{i}.bin")));
        assert_same_file(&file, &t.path().join(format!("q{i}.bin")));
    }
    d.assert_alive();
}

// ---------------------------------------------------------------------------------------
// Trees
// ---------------------------------------------------------------------------------------

#[test]
fn tree_push_preserves_content_links_modes_mtimes_and_empty_dirs() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = rich_tree(t.path());
    let d = Daemon::start(&root);
    let out = cp(&["-r", "--json", s(&src), &d.url("")]);
    let v = out.ok().json();
    assert_eq!(v["files_failed"], 0, "{v}");
    assert_same_tree(&src, &root.join("src"));
    // The top directory itself keeps its mode and mtime too.
    assert_eq!(node(&src), node(&root.join("src")));
    // Links arrive as links with their targets verbatim, never followed.
    assert_eq!(
        std::fs::read_link(root.join("src/links/out")).unwrap(),
        Path::new("../../outside/secret")
    );
    assert!(!root.join("outside").exists());
    assert!(std::fs::symlink_metadata(root.join("src/links/absolute"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn tree_pull_preserves_content_links_modes_mtimes_and_empty_dirs() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = rich_tree(&root);
    let dst = t.path().join("dst");
    let d = Daemon::start(&root);
    let out = cp(&["-r", "--json", &d.url("src"), &slash(&dst)]);
    assert_eq!(out.ok().json()["files_failed"], 0);
    assert_same_tree(&src, &dst.join("src"));
    assert_eq!(node(&src), node(&dst.join("src")));
    assert_eq!(names(&dst), ["src"]);
}

#[test]
fn trailing_slash_rules_on_push() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("exists")).unwrap();
    let src = t.path().join("src");
    write(&src.join("x.txt"), b"x");
    write(&src.join("sub/y.txt"), b"y");
    let file = t.path().join("file.txt");
    write(&file, b"a file");
    let other = t.path().join("other.txt");
    write(&other, b"another file");
    let d = Daemon::start(&root);

    // `cp -r src dst/`: dst/src/...
    cp(&["-r", s(&src), &d.url("dst1/")]).ok();
    assert_same_tree(&src, &root.join("dst1/src"));
    assert_eq!(names(&root.join("dst1")), ["src"]);
    // `cp -r src existing-dir`: existing-dir/src/...
    cp(&["-r", s(&src), &d.url("exists")]).ok();
    assert_eq!(names(&root.join("exists")), ["src"]);
    // `cp -r src/ dst/`: the contents.
    cp(&["-r", &slash(&src), &d.url("dst3/")]).ok();
    assert_same_tree(&src, &root.join("dst3"));
    // `cp -r src missing` (cp(1), not rsync): a copy of src named `missing`.
    cp(&["-r", s(&src), &d.url("renamed")]).ok();
    assert_same_tree(&src, &root.join("renamed"));
    // `cp file newname`: renamed.
    cp(&[s(&file), &d.url("newname.txt")]).ok();
    assert_eq!(std::fs::read(root.join("newname.txt")).unwrap(), b"a file");
    // `cp file dir/`: keeps its name in a created directory.
    cp(&[s(&file), &d.url("fdir/")]).ok();
    assert_eq!(names(&root.join("fdir")), ["file.txt"]);
    // Several sources go into a directory, created when missing.
    cp(&["-r", s(&file), s(&other), s(&src), &d.url("multi")]).ok();
    assert_eq!(names(&root.join("multi")), ["file.txt", "other.txt", "src"]);
    assert_same_tree(&src, &root.join("multi/src"));
    // A directory without -r is a usage error.
    cp(&[s(&src), &d.url("nope")]).code(2);
    assert!(!root.join("nope").exists());
}

#[test]
fn regression_contents_into_a_new_destination_renamed_every_top_entry() {
    // `cp -r src/ sluice://host/new` once mapped every top-level entry of src onto the
    // name `new` (each replacing the last); the contents must land in `new/`.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    write(&src.join("a.txt"), b"a");
    write(&src.join("b.bin"), &bytes(5, 2 * MIB));
    write(&src.join("sub/c.txt"), b"c");
    let d = Daemon::start(&root);
    let out = cp(&["-r", "--json", &slash(&src), &d.url("new")]);
    assert_eq!(out.ok().json()["files_failed"], 0);
    assert_same_tree(&src, &root.join("new"));

    // The same on pull: `cp -r sluice://host/new/ local-new`.
    let local = t.path().join("local-new");
    let out = cp(&["-r", "--json", &d.url("new/"), s(&local)]);
    assert_eq!(out.ok().json()["files_failed"], 0);
    assert_same_tree(&src, &local);
}

#[test]
fn trailing_slash_rules_on_pull() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let src = root.join("src");
    write(&src.join("x.txt"), b"x");
    write(&src.join("sub/y.txt"), b"y");
    write(&root.join("file.txt"), b"a file");
    write(&root.join("other.txt"), b"another");
    let d = Daemon::start(&root);
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();

    cp(&["-r", &d.url("src"), &slash(&local.join("d1"))]).ok();
    assert_same_tree(&src, &local.join("d1/src"));
    cp(&["-r", &d.url("src/"), &slash(&local.join("d2"))]).ok();
    assert_same_tree(&src, &local.join("d2"));
    cp(&["-r", &d.url("src"), s(&local.join("renamed"))]).ok();
    assert_same_tree(&src, &local.join("renamed"));
    cp(&[&d.url("file.txt"), s(&local.join("new.txt"))]).ok();
    assert_eq!(std::fs::read(local.join("new.txt")).unwrap(), b"a file");
    std::fs::create_dir(local.join("many")).unwrap();
    cp(&[
        &d.url("file.txt"),
        &d.url("other.txt"),
        s(&local.join("many")),
    ])
    .ok();
    assert_eq!(names(&local.join("many")), ["file.txt", "other.txt"]);
    // Several remote sources into something that is not a directory: usage error.
    cp(&[
        &d.url("file.txt"),
        &d.url("other.txt"),
        s(&local.join("not-a-dir")),
    ])
    .code(2);
}

/// A temp dir in memory where there is one (`/dev/shm`): 50 000 files are created, read
/// and removed there in a fraction of the time a busy disk takes.
fn memory_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temp dir")
}

#[test]
fn fifty_thousand_small_files() {
    let t = memory_tempdir();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("many");
    let t0 = Instant::now();
    let pool = bytes(20, 4096);
    let mut total = 0u64;
    for dir in 0..500u32 {
        let dpath = src.join(format!("d{dir:03}"));
        std::fs::create_dir_all(&dpath).unwrap();
        for f in 0..100u32 {
            let n = dir * 100 + f;
            let len = (n.wrapping_mul(2_654_435_761) >> 7) as usize % 2049;
            let start = n as usize % 2048;
            let mut data = pool[start..start + len].to_vec();
            if len >= 4 {
                data[..4].copy_from_slice(&n.to_le_bytes());
            }
            total += len as u64;
            std::fs::write(dpath.join(format!("f{f:03}")), &data).unwrap();
        }
    }
    eprintln!("50 000 files generated in {:?}", t0.elapsed());
    let d = Daemon::start(&root);
    let started = Instant::now();
    let out = cp(&["-r", "--json", s(&src), &d.url("")]);
    let v = out.ok().json();
    eprintln!("50 000 files pushed in {:?}", started.elapsed());
    let t1 = Instant::now();
    assert_eq!(v["files_failed"], 0);
    assert_eq!(v["files"], 50_000, "{}", v["files"]);
    assert_eq!(v["dirs"], 500 + 1, "{}", v["dirs"]);
    assert_eq!(v["bytes"], total);
    let (a, b) = (snapshot(&src), snapshot(&root.join("many")));
    assert_eq!(a.len(), 50_500);
    assert_eq!(b.len(), a.len());
    assert_same_tree(&src, &root.join("many"));
    eprintln!("50 000 files compared in {:?}", t1.elapsed());
}

// ---------------------------------------------------------------------------------------
// The --json summary and the per-file options
// ---------------------------------------------------------------------------------------

#[test]
fn json_summary_has_every_field_and_true_digests() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    let big = bytes(30, 2 * MIB + 5);
    let small = bytes(31, 777);
    write(&src.join("big.bin"), &big);
    write(&src.join("small.bin"), &small);
    write(&src.join("empty"), b"");
    let d = Daemon::start(&root);
    let v = cp(&["-r", "--json", "--streams", "2", s(&src), &d.url("")])
        .ok()
        .json();
    let total = (big.len() + small.len()) as u64;
    assert_eq!(v["ok"], true);
    assert_eq!(v["bytes"], total);
    assert_eq!(v["wire_bytes"], total, "no compression: wire = payload");
    assert_eq!(v["files"], 3, "big.bin, small.bin, empty: {v}");
    assert_eq!(v["dirs"], 1, "src: {v}");
    assert_eq!(v["symlinks"], 0, "{v}");
    assert_eq!(v["files_failed"], 0);
    let seconds = v["seconds"].as_f64().expect("seconds");
    assert!(seconds > 0.0 && seconds < 60.0, "{seconds}");
    let tput = v["throughput_bytes_per_sec"].as_f64().expect("throughput");
    assert!(
        (tput - total as f64 / seconds).abs() <= tput * 1e-6 + 1.0,
        "{tput}"
    );
    let channels = v["channels"].as_object().expect("channels");
    assert!(!channels.is_empty());
    let (mut b, mut w) = (0, 0);
    for c in channels.values() {
        b += c["bytes"].as_u64().expect("bytes");
        w += c["wire_bytes"].as_u64().expect("wire_bytes");
        assert!(c["chunks"].as_u64().expect("chunks") > 0);
    }
    assert_eq!((b, w), (total, total));
    assert!(v["plan"]["channels"].is_array(), "{}", v["plan"]);
    assert!(v["plan"]["policy"].is_string(), "{}", v["plan"]);
    assert_eq!(v["failures"], serde_json::json!([]));
    assert_eq!(row(&v, "src/big.bin")["digest"], expected_digest(&big));
    assert_eq!(row(&v, "src/small.bin")["digest"], expected_digest(&small));
    assert_eq!(row(&v, "src/empty")["digest"], expected_digest(b""));
    assert_eq!(row(&v, "src/big.bin")["status"], "done");
    assert_eq!(row(&v, "src/big.bin")["size"], big.len());
}

#[test]
fn no_clobber_leaves_an_existing_file_and_reports_it_skipped() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    write(&root.join("src/keep.txt"), b"original");
    write(&root.join("src/keep-big.bin"), b"original big");
    let src = t.path().join("src");
    write(&src.join("keep.txt"), b"replacement");
    write(&src.join("keep-big.bin"), &bytes(40, 2 * MIB));
    write(&src.join("new.txt"), b"new");
    let d = Daemon::start(&root);
    let v = cp(&["-r", "--json", "--no-clobber", s(&src), &d.url("")])
        .ok()
        .json();
    assert_eq!(
        std::fs::read(root.join("src/keep.txt")).unwrap(),
        b"original"
    );
    assert_eq!(
        std::fs::read(root.join("src/keep-big.bin")).unwrap(),
        b"original big"
    );
    assert_eq!(std::fs::read(root.join("src/new.txt")).unwrap(), b"new");
    assert_eq!(row(&v, "src/keep.txt")["status"], "skipped");
    assert_eq!(row(&v, "src/keep-big.bin")["status"], "skipped");
    assert_eq!(row(&v, "src/new.txt")["status"], "done");
    assert_eq!(v["files_skipped"], 2);
    assert_eq!(v["bytes"], 3, "only new.txt travelled: {v}");
}

#[test]
fn regression_no_clobber_failed_on_an_existing_symlink() {
    // A second `cp -r --no-clobber` of a tree with a link failed (exit 1) on the link
    // that the first run had made, instead of skipping it.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    write(&src.join("a.txt"), b"a");
    write(&src.join("empty"), b"");
    symlink("a.txt", src.join("link")).unwrap();
    let d = Daemon::start(&root);
    cp(&["-r", s(&src), &d.url("")]).ok();
    std::fs::remove_file(root.join("src/link")).unwrap();
    symlink("elsewhere", root.join("src/link")).unwrap();
    let v = cp(&["-r", "--json", "--no-clobber", s(&src), &d.url("")])
        .ok()
        .json();
    for f in ["src/a.txt", "src/empty", "src/link"] {
        assert_eq!(row(&v, f)["status"], "skipped", "{f}: {v}");
    }
    assert_eq!(
        std::fs::read_link(root.join("src/link")).unwrap(),
        Path::new("elsewhere"),
        "the existing link is kept"
    );
}

#[test]
fn update_skips_same_size_and_mtime_and_sends_changed_files() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    write(&src.join("a.txt"), b"aaaa");
    write(&src.join("big.bin"), &bytes(41, 3 * MIB));
    write(&src.join("empty"), b"");
    let d = Daemon::start(&root);
    cp(&["-r", s(&src), &d.url("")]).ok();
    let v = cp(&["-r", "--json", "--update", s(&src), &d.url("")])
        .ok()
        .json();
    for f in ["src/a.txt", "src/big.bin", "src/empty"] {
        assert_eq!(row(&v, f)["status"], "skipped", "{f}: {v}");
    }
    assert_eq!(v["bytes"], 0);
    // Same size, new content and mtime: sent again.
    write(&src.join("a.txt"), b"bbbb");
    set_mtime(&src.join("a.txt"), 1_700_000_000, 0);
    let v = cp(&["-r", "--json", "--update", s(&src), &d.url("")])
        .ok()
        .json();
    assert_eq!(row(&v, "src/a.txt")["status"], "done");
    assert_eq!(row(&v, "src/big.bin")["status"], "skipped");
    assert_eq!(v["bytes"], 4);
    assert_same_tree(&src, &root.join("src"));
}

#[test]
fn verify_succeeds_on_push_and_pull() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    write(&src.join("big.bin"), &bytes(50, 4 * MIB + 1));
    write(&src.join("small.txt"), b"small");
    let d = Daemon::start(&root);
    let v = cp(&["-r", "--json", "--verify", s(&src), &d.url("")])
        .ok()
        .json();
    assert_eq!(v["files_failed"], 0);
    assert_same_tree(&src, &root.join("src"));
    let back = t.path().join("back");
    let v = cp(&["-r", "--json", "--verify", &d.url("src"), s(&back)])
        .ok()
        .json();
    assert_eq!(v["files_failed"], 0);
    assert_same_tree(&src, &back);
}

#[test]
fn regression_small_files_answered_after_the_scan_ended_were_never_sent() {
    // With --resume, --update or --no-clobber the source schedules a file only once the
    // sink has answered with `Have`; small files answered after the scan ended sat in
    // the open pack forever and the copy hung.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    for i in 0..20 {
        write(
            &src.join(format!("f{i:02}.txt")),
            format!("small {i}").as_bytes(),
        );
    }
    let d = Daemon::start(&root);
    for (flag, dst) in [
        ("--resume", "r/"),
        ("--update", "u/"),
        ("--no-clobber", "n/"),
    ] {
        let args = cp_args(&["-r", "--json", flag, s(&src), &d.url(dst)]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sluice_env_timeout(&args, &[], Duration::from_secs(30));
        assert_eq!(out.ok().json()["files_failed"], 0);
        assert_same_tree(&src, &root.join(dst).join("src"));
    }
}

// ---------------------------------------------------------------------------------------
// Interrupted transfers and resume
// ---------------------------------------------------------------------------------------

/// Waits until the partial log at `log` records at least `chunks` chunks (a poll on the
/// file the sink writes: there is no other signal of progress), failing after 60 s or if
/// `cp` ends first.
fn wait_for_logged_chunks(log: &Path, chunks: u64, cp: &mut ChildGuard) {
    const HEADER: u64 = 40;
    const RECORD: u64 = 24;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let len = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        if len >= HEADER + chunks * RECORD {
            return;
        }
        assert!(
            cp.is_running(),
            "cp ended before {chunks} chunks were logged in {}",
            log.display()
        );
        assert!(
            Instant::now() < deadline,
            "no progress in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

const RESUME_MIB: usize = 96;

#[test]
fn daemon_killed_mid_push_then_resume_completes_and_never_replaces_the_old_file() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    write(&root.join("big.bin"), b"the previous, good version");
    let file = t.path().join("big.bin");
    write_big(&file, RESUME_MIB, 60);
    let mut d = Daemon::start(&root);
    let args = cp_args(&[
        "--streams",
        "1",
        "--io-threads",
        "1",
        s(&file),
        &d.url("big.bin"),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = spawn_sluice(&args, &[]);
    wait_for_logged_chunks(&root.join(".big.bin.sluice-part.log"), 8, &mut child);
    d.child.kill();
    let out = finish(child, "cp (daemon killed)".into(), COMMAND_TIMEOUT);
    assert_ne!(out.code, Some(0), "the copy cannot have succeeded: {out:?}");
    assert!(out.stderr.contains("sluice: error:"), "{}", out.stderr);
    // The good file is untouched; the partial and its log are kept.
    assert_eq!(
        std::fs::read(root.join("big.bin")).unwrap(),
        b"the previous, good version"
    );
    assert!(root.join(".big.bin.sluice-part").exists());

    let d = Daemon::start(&root);
    let v = cp(&[
        "--json",
        "--resume",
        "--streams",
        "2",
        s(&file),
        &d.url("big.bin"),
    ])
    .ok()
    .json();
    assert_same_file(&file, &root.join("big.bin"));
    let resumed = v["bytes_resumed"].as_u64().unwrap();
    let sent = v["bytes"].as_u64().unwrap();
    assert!(resumed >= 8 * MIB as u64, "{v}");
    assert_eq!(resumed + sent, (RESUME_MIB * MIB) as u64, "{v}");
    assert_eq!(names(&root), ["big.bin"], "partial and log cleaned up");
}

#[test]
fn client_killed_mid_pull_then_resume_completes_and_never_replaces_the_old_file() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    write_big(&root.join("big.bin"), RESUME_MIB, 61);
    let dst = t.path().join("dst");
    write(&dst.join("big.bin"), b"the previous, good version");
    let mut d = Daemon::start(&root);
    let url = d.url("big.bin");
    let target = dst.join("big.bin");
    let args = cp_args(&["--streams", "1", "--io-threads", "1", &url, s(&target)]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = spawn_sluice(&args, &[]);
    wait_for_logged_chunks(&dst.join(".big.bin.sluice-part.log"), 8, &mut child);
    child.kill();
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"the previous, good version"
    );
    d.assert_alive();

    let v = cp(&["--json", "--resume", &url, s(&target)]).ok().json();
    assert_same_file(&root.join("big.bin"), &target);
    let resumed = v["bytes_resumed"].as_u64().unwrap();
    assert!(resumed >= 8 * MIB as u64, "{v}");
    assert_eq!(
        resumed + v["bytes"].as_u64().unwrap(),
        (RESUME_MIB * MIB) as u64,
        "{v}"
    );
    assert_eq!(names(&dst), ["big.bin"], "partial and log cleaned up");
    d.assert_alive();
}

#[test]
fn resume_skips_files_the_destination_already_holds_whole() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    write(&src.join("done-1.bin"), &bytes(62, 2 * MIB));
    write(&src.join("done-2.txt"), b"small and complete");
    let d = Daemon::start(&root);
    cp(&["-r", s(&src), &d.url("")]).ok();
    // An interrupted tree: the files above arrived whole, this one did not arrive.
    write(&src.join("late.txt"), b"late");
    let v = cp(&["-r", "--json", "--resume", s(&src), &d.url("")])
        .ok()
        .json();
    assert_eq!(v["bytes"], 4, "only late.txt should travel: {v}");
    assert_eq!(row(&v, "src/done-1.bin")["status"], "skipped", "{v}");
    assert_same_tree(&src, &root.join("src"));
}

// ---------------------------------------------------------------------------------------
// Corruption on the wire
// ---------------------------------------------------------------------------------------

#[test]
fn corrupted_chunk_is_sent_again_on_push() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    write(&src.join("big.bin"), &bytes(70, 4 * MIB + 3));
    write(&src.join("small.txt"), b"small file, packed");
    let d = Daemon::start(&root);
    for n in ["2", "5"] {
        let out = cp_env(
            &["-r", "--json", s(&src), &d.url(&format!("n{n}/"))],
            &[(FAULT_CORRUPT, n)],
        );
        let v = out.ok().json();
        assert!(v["chunks_resent"].as_u64().unwrap() >= 1, "chunk {n}: {v}");
        assert_eq!(v["files_failed"], 0);
        assert_same_tree(&src, &root.join(format!("n{n}/src")));
    }
    // Without the knob nothing is resent.
    let v = cp(&["-r", "--json", s(&src), &d.url("clean/")]).ok().json();
    assert_eq!(v["chunks_resent"], 0);
}

#[test]
fn corrupted_chunk_is_sent_again_on_pull() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    write(&root.join("src/big.bin"), &bytes(71, 3 * MIB + 9));
    write(&root.join("src/small.txt"), b"small");
    let d = Daemon::start_with(&root, &[], &[(FAULT_CORRUPT, "1")]);
    let dst = t.path().join("dst");
    let v = cp(&["-r", "--json", &d.url("src"), s(&dst)]).ok().json();
    assert!(v["chunks_resent"].as_u64().unwrap() >= 1, "{v}");
    assert_same_tree(&root.join("src"), &dst);
}

/// Toward another host, a clear-text session that does not compress sends a large file's
/// chunks straight from the page cache (`sendfile`); toward this host it does not
/// (slower over loopback), unless `SLUICE_SENDFILE_ON_LOOPBACK=1` says so (as here, to
/// test it). The files arrive whole either way, also when a chunk sent so is damaged.
#[test]
fn large_files_sent_from_the_page_cache_arrive_whole_and_a_damaged_chunk_is_sent_again() {
    const SENDFILE: (&str, &str) = ("SLUICE_SENDFILE_ON_LOOPBACK", "1");
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("src");
    let big = 4 * MIB + 4096 + 77;
    write(&src.join("big.bin"), &bytes(74, big));
    write(&src.join("small.txt"), b"small file, packed");
    let d = Daemon::start(&root);
    let push = |dest: &str, flags: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["-r", "--json", "--buffered"];
        args.extend_from_slice(flags);
        let url = d.url(&format!("{dest}/"));
        args.extend_from_slice(&[s(&src), &url]);
        let v = cp_env(&args, env).ok().json();
        assert_eq!(v["files_failed"], 0, "{dest}: {v}");
        assert_same_tree(&src, &root.join(format!("{dest}/src")));
        v
    };
    let v = push("loopback", &[], &[]);
    assert_eq!(v["sendfile_bytes"], 0, "not toward this host: {v}");
    let v = push("sendfile", &[], &[SENDFILE]);
    assert_eq!(
        v["sendfile_bytes"], big as u64,
        "the large file, not the packed one: {v}"
    );
    assert_eq!(v["chunks_resent"], 0, "{v}");
    let v = push("damaged", &[], &[SENDFILE, (FAULT_CORRUPT, "2")]);
    assert!(v["chunks_resent"].as_u64().unwrap() >= 1, "{v}");
    assert!(
        v["sendfile_bytes"].as_u64().unwrap() > big as u64,
        "sent again so: {v}"
    );
    let v = push("compressed", &["--compress", "lz4"], &[SENDFILE]);
    assert_eq!(
        v["sendfile_bytes"], 0,
        "compressed chunks are in the slot: {v}"
    );
    // A pull from a daemon that sends so.
    let mut served = Daemon::start_with(&root, &[], &[SENDFILE]);
    let back = t.path().join("back");
    cp(&["-r", "--buffered", &served.url("sendfile/src"), s(&back)]).ok();
    assert_same_tree(&src, &back);
    served.assert_alive();
}

/// Regression: a file the source could not read was reported to the sink, which answers
/// nothing for it, and the source waited for its answer for ever: the session hung.
/// Now the file fails (exit 1, listed), the others arrive, on push and on pull.
#[test]
fn regression_a_file_the_source_cannot_read_fails_and_the_session_ends() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let src = root.join("src");
    write(&src.join("bad.bin"), &bytes(72, 3 * MIB + 5));
    write(&src.join("good.bin"), &bytes(73, 2 * MIB + 1));
    write(&src.join("sub/bad.txt"), b"a small file, packed");
    write(&src.join("sub/good.txt"), b"another small file");
    for bad in ["bad.bin", "bad.txt"] {
        let d = Daemon::start(&root);
        let pushed = format!("push-{bad}/");
        let out = cp_env(
            &["-r", "--json", s(&src), &d.url(&pushed)],
            &[(FAULT_READ, bad)],
        );
        let v = out.code(1).json();
        assert_eq!(v["files_failed"], 1, "{bad}: {v}");
        let dst = root.join(&pushed).join("src");
        assert_same_file(&src.join("good.bin"), &dst.join("good.bin"));
        assert_same_file(&src.join("sub/good.txt"), &dst.join("sub/good.txt"));
        assert!(!dst.join("bad.bin").exists() || bad != "bad.bin");
        assert!(!dst.join("sub/bad.txt").exists() || bad != "bad.txt");
        drop(d);
        // The daemon is the source on a pull.
        let d = Daemon::start_with(&root, &[], &[(FAULT_READ, bad)]);
        let pulled = t.path().join(format!("pull-{bad}"));
        let v = cp(&["-r", "--json", &d.url("src"), s(&pulled)])
            .code(1)
            .json();
        assert_eq!(v["files_failed"], 1, "{bad}: {v}");
        assert_same_file(&src.join("good.bin"), &pulled.join("good.bin"));
        assert_same_file(&src.join("sub/good.txt"), &pulled.join("sub/good.txt"));
    }
}

/// A chunk that does not fit its file as the manifest announced it, its bytes and
/// checksum intact (a faulty peer: a piece's `LAST` flag flipped; one byte of length
/// moved between a pack's first two segments), fails that file with `BadFrame` and is
/// never written; the other files arrive, on push and on pull, and the daemon keeps
/// serving. Before, the sink wrote it: of the pack, one small file came out a byte
/// short and the next a byte long, both reported done.
#[test]
fn a_chunk_that_misfits_its_file_fails_it_and_is_never_written() {
    const MISFIT: &str = "SLUICE_FAULT_MISFIT_CHUNK";
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let big = root.join("big");
    write(&big.join("big.bin"), &bytes(75, CHUNK + 7));
    let small = root.join("small");
    for i in 0..40usize {
        write(
            &small.join(format!("f{i:02}")),
            &bytes(76 + i as u64, 100 + i),
        );
    }
    // What arrived of `src` in `dst`: the files missing, after checking the others.
    let missing = |src: &Path, dst: &Path| -> usize {
        let mut gone = 0;
        for e in std::fs::read_dir(src).unwrap() {
            let name = e.unwrap().file_name();
            match dst.join(&name).exists() {
                true => assert_same_file(&src.join(&name), &dst.join(&name)),
                false => gone += 1,
            }
        }
        gone
    };
    let d = Daemon::start(&root);
    for (src, failed) in [(&big, 1), (&small, 2)] {
        let to = format!("push-{}/", src.file_name().unwrap().to_str().unwrap());
        let out = cp_env(&["-r", "--json", s(src), &d.url(&to)], &[(MISFIT, "1")]);
        let v = out.code(1).json();
        assert_eq!(v["files_failed"], failed, "{}: {v}", s(src));
        let why = if failed == 1 {
            "does not fit the file"
        } else {
            "a packed segment of"
        };
        let failures = v["failures"].as_array().expect("failures");
        assert_eq!(failures.len(), failed, "{v}");
        for f in failures {
            let error = f["error"].as_str().unwrap();
            assert!(error.contains(why) && !error.contains(s(&root)), "{f}");
        }
        let dst = root.join(&to).join(src.file_name().unwrap());
        assert_eq!(missing(src, &dst), failed, "{}", s(src));
    }
    // The daemon is the source on a pull.
    let d2 = Daemon::start_with(&root, &[], &[(MISFIT, "1")]);
    let pulled = t.path().join("pulled");
    let v = cp(&["-r", "--json", &d2.url("small"), s(&pulled)])
        .code(1)
        .json();
    assert_eq!(v["files_failed"], 2, "{v}");
    assert_eq!(missing(&small, &pulled), 2);
    // Nothing stuck: the same daemon serves a clean copy of both.
    for src in [&big, &small] {
        let to = format!("clean-{}/", src.file_name().unwrap().to_str().unwrap());
        cp(&["-r", s(src), &d.url(&to)]).ok();
        assert_same_tree(src, &root.join(&to).join(src.file_name().unwrap()));
    }
}

// ---------------------------------------------------------------------------------------
// Compression on the wire
// ---------------------------------------------------------------------------------------

/// Compressible (a short pattern repeated), incompressible (noise) and mixed files, a
/// large one of each spanning several chunks, plus small packed ones.
fn codec_tree(base: &Path) -> PathBuf {
    let src = base.join("src");
    let pattern: Vec<u8> = b"detector frame 0042: counts 17 17 18 17 16 "
        .iter()
        .copied()
        .cycle()
        .take(3 * MIB + 11)
        .collect();
    write(&src.join("compressible.bin"), &pattern);
    write(&src.join("random.bin"), &bytes(80, 2 * MIB + 5));
    let mut mixed = bytes(81, MIB);
    mixed.extend_from_slice(&pattern[..MIB]);
    mixed.extend_from_slice(&bytes(82, MIB / 2));
    write(&src.join("mixed.bin"), &mixed);
    for i in 0..20 {
        write(
            &src.join(format!("small/{i}.txt")),
            &pattern[..1000 + i * 97],
        );
    }
    src
}

#[test]
fn compression_round_trips_every_codec_on_push_and_pull_with_and_without_codec_threads() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = codec_tree(t.path());
    let total: u64 = snapshot(&src)
        .values()
        .map(|n| match n {
            Node::File { len, .. } => *len,
            _ => 0,
        })
        .sum();
    // The daemon compresses (pulls) and decompresses (pushes) with stages of its own.
    let d = Daemon::start_with(
        &root,
        &[
            "--compress-threads",
            "2",
            "--decompress-threads",
            "2",
            "--log",
            "info",
        ],
        &AUTO_ON_LOOPBACK,
    );
    for codec in ["lz4", "zstd:3", "auto"] {
        for threads in ["0", "2"] {
            let tag = format!("{}-{threads}", codec.replace(':', ""));
            let push = cp_env(
                &[
                    "-r",
                    "--json",
                    "--compress",
                    codec,
                    "--compress-threads",
                    threads,
                    s(&src),
                    &d.url(&format!("{tag}/")),
                ],
                &AUTO_ON_LOOPBACK,
            );
            let v = push.ok().json();
            assert_same_tree(&src, &root.join(&tag).join("src"));
            assert_eq!(v["bytes"], total, "{tag}: {v}");
            assert_eq!(v["codec_threads"], threads.parse::<u64>().unwrap(), "{tag}");
            let wire = v["wire_bytes"].as_u64().unwrap();
            if codec != "auto" {
                // auto may rightly send raw on loopback, where the CPU is the bottleneck.
                assert!(
                    wire < total,
                    "{tag}: compressible data shrinks ({wire} of {total})"
                );
            }
            let dst = t.path().join(format!("pulled-{tag}"));
            let pull = cp_env(
                &[
                    "-r",
                    "--json",
                    "--compress",
                    codec,
                    "--decompress-threads",
                    threads,
                    &d.url(&format!("{tag}/src")),
                    s(&dst),
                ],
                &AUTO_ON_LOOPBACK,
            );
            let v = pull.ok().json();
            assert_same_tree(&src, &dst);
            assert_eq!(v["codec_threads"], threads.parse::<u64>().unwrap(), "{tag}");
        }
    }
    let log = d.log();
    assert!(!log.contains("does not decompress"), "{log}");
    // Every session of the daemon ran its stage: 6 pushes decompressed, 6 pulls compressed.
    assert_eq!(
        log.matches("decompress stage: 2 threads").count(),
        6,
        "{log}"
    );
    assert_eq!(
        log.matches(" compress stage: 2 threads").count(),
        6,
        "{log}"
    );
}

#[test]
fn auto_measures_goodput_on_the_sinks_acknowledgements_on_push_and_pull() {
    // With CHUNK_ACKS the source's `auto` counts a chunk when the sink says it was
    // written: an epoch (12 chunks) can only end once those words arrive, so its
    // debug line proves that they do, on both sides of the protocol.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let pattern: Vec<u8> = b"frame 7: 0 0 1 3 9 27 81 243 "
        .iter()
        .copied()
        .cycle()
        .take(40 * MIB + 3)
        .collect();
    let src = t.path().join("frames.bin");
    write(&src, &pattern);
    // Over loopback `auto` sends raw (no codec can beat a memory copy); the test knob
    // keeps it measuring.
    let on_loopback = AUTO_ON_LOOPBACK;
    let log = ["--log", "sluice_engine::codec=debug"];
    let d = Daemon::start_with(&root, &log, &on_loopback);
    let push = cp_env(
        &[
            "--json",
            "--compress",
            "auto",
            log[0],
            log[1],
            s(&src),
            &d.url("pushed.bin"),
        ],
        &on_loopback,
    );
    push.ok();
    assert_same_file(&src, &root.join("pushed.bin"));
    assert!(
        push.stderr.contains("auto: epoch 0 "),
        "push: {}",
        push.stderr
    );
    let pulled = t.path().join("pulled.bin");
    cp_env(
        &["--compress", "auto", &d.url("pushed.bin"), s(&pulled)],
        &on_loopback,
    )
    .ok();
    assert_same_file(&src, &pulled);
    assert!(d.log().contains("auto: epoch 0 "), "pull: {}", d.log());
    // Without it, both directions send raw to this very host and say why.
    let plain = Daemon::start_with(&root, &["--log", "info"], &[]);
    let push = cp(&[
        "--json",
        "--compress",
        "auto",
        "--log",
        "info",
        s(&src),
        &plain.url("raw.bin"),
    ]);
    let v = push.ok().json();
    assert_eq!(v["wire_bytes"], v["bytes"], "{v}");
    assert!(
        push.stderr.contains("the peer is this host"),
        "{}",
        push.stderr
    );
    cp(&[
        "--compress",
        "auto",
        &plain.url("raw.bin"),
        s(&t.path().join("raw-pulled.bin")),
    ])
    .ok();
    assert!(
        plain.log().contains("the peer is this host"),
        "{}",
        plain.log()
    );
}

#[test]
fn corrupted_compressed_chunk_is_never_written_and_is_sent_again() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = codec_tree(t.path());
    // Both data paths on the sink: decompressed by the net-recv thread, and by a
    // decompress stage of its own.
    for (i, daemon_threads) in ["0", "2"].into_iter().enumerate() {
        let d = Daemon::start_with(&root, &["--decompress-threads", daemon_threads], &[]);
        for n in ["1", "3"] {
            let dest = format!("d{i}-n{n}/");
            let out = cp_env(
                &[
                    "-r",
                    "--json",
                    "--compress",
                    "lz4",
                    "--compress-threads",
                    "1",
                    s(&src),
                    &d.url(&dest),
                ],
                &[(FAULT_CORRUPT, n)],
            );
            let v = out.ok().json();
            assert!(v["chunks_resent"].as_u64().unwrap() >= 1, "{dest}: {v}");
            assert_eq!(v["files_failed"], 0, "{dest}");
            assert_same_tree(&src, &root.join(&dest).join("src"));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Confinement
// ---------------------------------------------------------------------------------------

#[test]
fn paths_escaping_the_root_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = t.path().join("f.txt");
    write(&file, b"payload");
    let mut d = Daemon::start(&root);

    let out = cp(&[s(&file), &d.url("../escape")]);
    out.code(1);
    assert!(out.stderr.contains("../escape"), "{}", out.stderr);
    assert!(out.stderr.contains("PathOutsideRoot"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    let out = cp(&[s(&file), &d.url("a/../../escape")]);
    out.code(1);
    assert!(out.stderr.contains("a/../../escape"), "{}", out.stderr);
    assert!(!t.path().join("escape").exists());
    assert_eq!(names(t.path()), ["f.txt", "root"]);
    assert_eq!(names(&root), Vec::<String>::new());

    let local = t.path().join("pulled");
    let out = cp(&[&d.url("../etc/passwd"), s(&local)]);
    out.code(1);
    assert!(out.stderr.contains("../etc/passwd"), "{}", out.stderr);
    assert!(!local.exists());
    d.assert_alive();
    cp(&[s(&file), &d.url("inside.txt")]).ok();
    assert_eq!(std::fs::read(root.join("inside.txt")).unwrap(), b"payload");
}

#[test]
fn a_symlink_leading_out_of_the_root_cannot_be_read_or_written_through() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    write(&t.path().join("outside/x"), b"secret outside the root");
    symlink("../outside", root.join("link")).unwrap();
    symlink(t.path().join("outside/x"), root.join("abs-link")).unwrap();
    let mut d = Daemon::start(&root);

    let local = t.path().join("got-x");
    let out = cp(&[&d.url("link/x"), s(&local)]);
    out.code(1);
    assert!(out.stderr.contains("link/x"), "{}", out.stderr);
    assert!(out.stderr.contains("outside the root"), "{}", out.stderr);
    assert!(!local.exists());
    // Pulling the link itself gives the link, not what it points to.
    cp(&[&d.url("abs-link"), s(&local)]).ok();
    assert!(std::fs::symlink_metadata(&local)
        .unwrap()
        .file_type()
        .is_symlink());
    // Writing through it is refused too.
    let file = t.path().join("evil.txt");
    write(&file, b"evil");
    let out = cp(&[s(&file), &d.url("link/x")]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("link"), "{}", out.stderr);
    assert_eq!(
        std::fs::read(t.path().join("outside/x")).unwrap(),
        b"secret outside the root"
    );
    assert_eq!(names(&t.path().join("outside")), ["x"]);
    d.assert_alive();
}

#[test]
fn regression_pull_hid_the_daemons_scan_errors_and_reported_success() {
    // What the daemon could not scan on a pull (a start leading out of its root, a
    // directory without -r, a non-UTF-8 name) was only logged by the daemon: the client
    // printed "0 file(s)" and exited 0.
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    write(&t.path().join("outside/x"), b"outside");
    write(&root.join("tree/good.txt"), b"good");
    write(
        &root
            .join("tree")
            .join(std::ffi::OsStr::from_bytes(b"bad-\xff.txt")),
        b"bad",
    );
    symlink("../outside", root.join("link")).unwrap();
    let mut d = Daemon::start(&root);

    let got = t.path().join("got-contents");
    let out = cp(&["-r", "--json", &d.url("link/"), s(&got)]);
    out.code(1);
    let v = out.json();
    assert_eq!(v["files_failed"], 1, "{v}");
    let err = v["scan_errors"][0].as_str().expect("a scan error");
    assert!(
        err.contains("link") && err.contains("outside the root"),
        "{err}"
    );
    assert!(!got.join("x").exists());

    let out = cp(&[&d.url("tree"), s(&t.path().join("not-recursive"))]);
    out.code(1);
    assert!(
        out.stderr.contains("not a recursive copy"),
        "{}",
        out.stderr
    );

    let dst = t.path().join("dst");
    let out = cp(&["-r", "--json", &d.url("tree"), s(&dst)]);
    out.code(1);
    let v = out.json();
    assert_eq!(v["files_failed"], 1, "{v}");
    assert!(
        v["scan_errors"][0]
            .as_str()
            .unwrap()
            .contains("not valid UTF-8"),
        "{v}"
    );
    assert_eq!(std::fs::read(dst.join("good.txt")).unwrap(), b"good");
    d.assert_alive();
}

// ---------------------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------------------

/// A daemon on every address with a token (`extra` added to its arguments), and a tree
/// to push to it.
struct Wildcard {
    t: tempfile::TempDir,
    token: PathBuf,
    src: PathBuf,
    d: Daemon,
    port: String,
}

impl Wildcard {
    fn start(extra: &[&str]) -> Wildcard {
        let t = tempfile::tempdir().expect("a temp dir");
        let root = t.path().join("root");
        std::fs::create_dir(&root).expect("the root");
        let token = t.path().join("token");
        write(&token, b"every address\n");
        let src = t.path().join("src");
        write(&src.join("small.txt"), b"small");
        write_big(&src.join("big.bin"), 6, 90);
        let mut args = vec![
            "--listen",
            "0.0.0.0:0",
            "--token-file",
            s(&token),
            "--log",
            "info",
        ];
        args.extend_from_slice(extra);
        let d = Daemon::start_with(&root, &args, &[]);
        let port = d
            .addr
            .rsplit_once(':')
            .map(|(_, p)| p.to_string())
            .expect("a port");
        Wildcard {
            t,
            token,
            src,
            d,
            port,
        }
    }

    /// Pushes the tree over 4 streams to `sluice://HOSTS:PORT/DIR/` and checks it arrived.
    fn push(&self, hosts: &str, dir: &str) {
        let url = format!("sluice://{hosts}:{}/{dir}/", self.port);
        cp(&[
            "-r",
            "--streams",
            "4",
            "--token-file",
            s(&self.token),
            s(&self.src),
            &url,
        ])
        .ok();
        assert_same_tree(&self.src, &self.t.path().join("root").join(dir).join("src"));
    }

    /// The daemon's log, and how many data connections it took on local address `ip`.
    fn data_connections_on(&self, ip: &str) -> (usize, String) {
        let log = self.d.log();
        let n = log
            .lines()
            .filter(|l| l.contains("data connection") && l.contains(&format!(" on {ip}:")))
            .count();
        (n, log)
    }
}

#[test]
fn data_connections_spread_over_every_address_of_the_daemon() {
    // Two addresses of one daemon (two NICs, here two loopback addresses): the control
    // connection goes to the first, the data connections alternate.
    let w = Wildcard::start(&[]);
    w.push("127.0.0.1,127.0.0.2", "two");
    for local in ["127.0.0.1", "127.0.0.2"] {
        let (n, log) = w.data_connections_on(local);
        assert_eq!(n, 2, "two of four data connections on {local}: {log}");
    }
    // A list with an empty member is a usage error.
    let bad = format!("sluice://127.0.0.1,,127.0.0.2:{}/x/", w.port);
    cp(&[
        "--token-file",
        s(&w.token),
        s(&w.src.join("small.txt")),
        &bad,
    ])
    .code(2);
}

#[test]
fn data_connections_go_where_the_daemon_advertises_its_channels_nics() {
    // A daemon on every address, its channel driving `lo` (127.0.0.1): it tells the
    // client to connect every data connection there, although the client dialled
    // 127.0.0.2. An explicit host list still wins.
    let w = Wildcard::start(&["--nic", "lo"]);
    w.push("127.0.0.2", "advertised");
    let (n, log) = w.data_connections_on("127.0.0.1");
    assert!(log.contains("advertising 127.0.0.1"), "{log}");
    assert_eq!(n, 4, "{log}");
    assert_eq!(w.data_connections_on("127.0.0.2").0, 0, "{log}");
    w.push("127.0.0.2,127.0.0.3", "listed");
    for (ip, want) in [("127.0.0.1", 4), ("127.0.0.2", 2), ("127.0.0.3", 2)] {
        let (n, log) = w.data_connections_on(ip);
        assert_eq!(n, want, "{ip}: the list was followed: {log}");
    }
}

#[test]
fn token_is_required_checked_and_the_daemon_keeps_serving() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let token = t.path().join("token");
    write(&token, b"correct horse battery staple\n");
    let wrong = t.path().join("wrong");
    write(&wrong, b"incorrect horse\n");
    let file = t.path().join("f.txt");
    write(&file, b"authenticated");
    let mut d = Daemon::start_with(&root, &["--token-file", s(&token)], &[]);

    let out = cp(&[s(&file), &d.url("f.txt")]);
    out.code(1);
    assert!(out.stderr.contains("token"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);

    let out = cp(&["--token-file", s(&wrong), s(&file), &d.url("f.txt")]);
    out.code(1);
    assert!(out.stderr.contains("AuthFailed"), "{}", out.stderr);
    assert!(out.stderr.contains("wrong token"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(!root.join("f.txt").exists());

    d.assert_alive();
    cp(&["--token-file", s(&token), s(&file), &d.url("f.txt")]).ok();
    assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"authenticated");
    let back = t.path().join("back.txt");
    cp(&["--token-file", s(&token), &d.url("f.txt"), s(&back)]).ok();
    assert_eq!(std::fs::read(&back).unwrap(), b"authenticated");
}

#[test]
fn non_loopback_listen_without_token_is_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let out = sluice(&["serve", "--root", s(t.path()), "--listen", "0.0.0.0:0"]);
    out.code(2);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("0.0.0.0"), "{}", out.stderr);
    assert!(out.stderr.contains("--token-file"), "{}", out.stderr);

    // With a token it serves (only clients that know it). Not tried: the same with
    // --insecure-no-auth, which would open an unauthenticated writer on every interface.
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let token = t.path().join("token");
    write(&token, b"wildcard secret");
    let d = Daemon::start_with(
        &root,
        &["--listen", "0.0.0.0:0", "--token-file", s(&token)],
        &[],
    );
    let file = t.path().join("f.txt");
    write(&file, b"authenticated");
    cp(&["--token-file", s(&token), s(&file), &d.url("f.txt")]).ok();
    assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"authenticated");
}

#[test]
fn exit_codes_for_bad_input_and_failures() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    write(&a, b"a");
    // Both sides local.
    cp(&[s(&a), s(&t.path().join("b"))]).code(2);
    // A URL without a host.
    cp(&[s(&a), "sluice:///x"]).code(2);
    // A bad option value.
    cp(&["--streams", "1000", s(&a), "sluice://127.0.0.1:1/x"]).code(2);
    // A daemon root that is not a directory.
    let out = sluice(&["serve", "--root", s(&a), "--listen", "127.0.0.1:0"]);
    out.code(2);
    assert!(out.stderr.contains("not a directory"), "{}", out.stderr);
    // No daemon listening: a failure (1), not bad input, in one line.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = cp(&[s(&a), &format!("sluice://127.0.0.1:{port}/x")]);
    out.code(1);
    assert!(out.stderr.contains("connecting to"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
}

// ---------------------------------------------------------------------------------------
// Malformed input to the daemon
// ---------------------------------------------------------------------------------------

/// Sends `bytes` on a fresh connection (then half-closes if `close`), and returns every
/// frame the daemon answers with before it closes (or 10 s pass).
fn raw_exchange(addr: &str, bytes: &[u8], close: bool) -> Vec<Frame> {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    c.write_all(bytes).expect("send");
    if close {
        let _ = c.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the daemon neither answered nor closed: {e}"),
        }
    }
    let mut frames = Vec::new();
    let mut at = 0;
    while at < got.len() {
        let (f, used) = Frame::decode(&got[at..])
            .unwrap_or_else(|e| panic!("the daemon sent an undecodable answer ({e}): {got:?}"));
        frames.push(f);
        at += used;
    }
    frames
}

/// A `Hello` offering only protocol versions 5..=7.
fn future_hello() -> Vec<u8> {
    let mut out = Vec::new();
    sluice_wire::Hello {
        version: 7,
        min_version: 5,
        capabilities: sluice_wire::Capabilities::EMPTY,
        client_nonce: [9; 32],
    }
    .encode(&mut out);
    out
}

#[test]
fn regression_a_refused_hello_was_answered_with_two_error_frames() {
    // The handshake's `Error { UnsupportedVersion }` was followed by a second `Error`
    // (code AuthFailed) from the connection handler: one Error, then close.
    let t = tempfile::tempdir().unwrap();
    let d = Daemon::start(t.path());
    match raw_exchange(&d.addr, &future_hello(), false).as_slice() {
        [Frame::Error(e)] => {
            assert_eq!(e.code, sluice_wire::ErrorCode::UnsupportedVersion, "{e:?}");
            assert!(e.message.contains("5..=7"), "{e:?}");
        }
        other => panic!("want exactly one Error frame, got {other:?}"),
    }
}

#[test]
fn regression_daemon_refusals_read_the_peer_reported_twice() {
    // The daemon sent its own refusal as "the peer reported PathOutsideRoot: ...", which
    // the client prefixed again.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let d = Daemon::start(&root);
    let out = cp(&[&d.url("../x"), s(&t.path().join("x"))]);
    out.code(1);
    assert_eq!(
        out.stderr.matches("the peer reported").count(),
        1,
        "{}",
        out.stderr
    );
    let out = cp(&[&d.url("missing.txt"), s(&t.path().join("x"))]);
    out.code(1);
    assert!(out.stderr.contains("NotFound"), "{}", out.stderr);
    assert!(out.stderr.contains("missing.txt"), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("the peer reported").count(),
        1,
        "{}",
        out.stderr
    );
}

#[track_caller]
fn assert_error_or_nothing(frames: &[Frame], what: &str) {
    assert!(frames.len() <= 1, "{what}: {frames:?}");
    if let Some(f) = frames.first() {
        assert!(matches!(f, Frame::Error(_)), "{what}: {f:?}");
    }
}

#[test]
fn malformed_input_is_answered_with_an_error_and_the_daemon_keeps_serving() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let mut d = Daemon::start(&root);
    let addr = d.addr.clone();

    // Garbage (an HTTP request).
    let f = raw_exchange(&addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true);
    assert_error_or_nothing(&f, "garbage");

    // A valid Hello cut short.
    let mut hello = Vec::new();
    sluice_wire::Hello {
        version: 1,
        min_version: 1,
        capabilities: sluice_wire::Capabilities::EMPTY,
        client_nonce: [7; 32],
    }
    .encode(&mut hello);
    let f = raw_exchange(&addr, &hello[..hello.len() - 9], true);
    assert_error_or_nothing(&f, "truncated Hello");

    // A header claiming a 4 GiB body: refused from its 6 bytes, without waiting.
    let f = raw_exchange(&addr, &[0x01, 0, 0xff, 0xff, 0xff, 0xff], false);
    assert_eq!(f.len(), 1, "oversized body: {f:?}");
    assert_error_or_nothing(&f, "oversized body");

    // A Hello for protocol versions the daemon does not speak.
    let f = raw_exchange(&addr, &future_hello(), false);
    assert_error_or_nothing(&f, "unknown version");

    // A Join for a session that does not exist.
    let mut join = Vec::new();
    sluice_wire::Join {
        session_id: 42,
        mac: [0; 32],
        stream_index: 0,
        channel: 0,
    }
    .encode(&mut join);
    let f = raw_exchange(&addr, &join, false);
    assert_error_or_nothing(&f, "join of an unknown session");
    assert_eq!(f.len(), 1, "{f:?}");

    // A good Hello followed by garbage.
    let mut bad = hello.clone();
    bad.extend_from_slice(&[0xee; 64]);
    let f = raw_exchange(&addr, &bad, true);
    assert!(
        matches!(
            f.as_slice(),
            [Frame::Welcome(_)] | [Frame::Welcome(_), Frame::Error(_)]
        ),
        "{f:?}"
    );

    d.assert_alive();
    let file = t.path().join("f.txt");
    write(&file, b"still serving");
    cp(&[s(&file), &d.url("f.txt")]).ok();
    assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"still serving");
}

#[test]
fn client_refuses_a_peer_that_is_not_sluice() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    write(&a, b"a");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        if let Ok((mut c, _)) = listener.accept() {
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            let mut sink = Vec::new();
            let _ = c.read_to_end(&mut sink);
        }
    });
    let out = cp(&[s(&a), &format!("sluice://{addr}/x")]);
    out.code(1);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains(&addr.to_string()), "{}", out.stderr);
    server.join().expect("the fake server ends");
}

/// One whole frame from `c` (header, then exactly its body).
fn read_frame(c: &mut TcpStream) -> Frame {
    let mut buf = vec![0u8; 6];
    c.read_exact(&mut buf).expect("a frame header");
    let body = u32::from_le_bytes([buf[2], buf[3], buf[4], buf[5]]) as usize;
    assert!(body <= 1 << 20, "a frame of {body} bytes");
    buf.resize(6 + body, 0);
    c.read_exact(&mut buf[6..]).expect("a frame body");
    Frame::decode(&buf).expect("a valid frame").0
}

fn encode(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        f.encode(&mut out);
    }
    out
}

#[test]
fn regression_pull_failed_when_data_followed_the_joined_answer_at_once() {
    // The client read a data connection's `Joined` through a buffered reader; when the
    // daemon's first frame on that connection arrived with it (a busy client, a quick
    // source), the client failed with "data before the join was answered". A scripted
    // daemon sends `Joined` and `Close` in one write, every time.
    use sluice_wire::{
        Accept, Close, CloseReason, HandshakeStatus, JoinTable, ManifestEnd, ServerConfig,
        ServerHandshake,
    };
    let t = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let daemon = std::thread::spawn(move || {
        let (mut control, _) = listener.accept().expect("control");
        control
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut hs = ServerHandshake::new(ServerConfig::new(None), [3; 32]);
        let mut out = Vec::new();
        let est = loop {
            let f = read_frame(&mut control);
            out.clear();
            let status = hs.handle(&f, &mut out).expect("handshake");
            control.write_all(&out).expect("send");
            if let HandshakeStatus::Done(est) = status {
                break est;
            }
        };
        assert!(matches!(read_frame(&mut control), Frame::Open(_)));
        let accept = Accept {
            session_id: 7,
            session_secret: [5; 32],
            channels: 1,
            streams_per_channel: 1,
            chunk_bytes: 1 << 20,
        };
        let mut table = JoinTable::new(&accept, est.join_key(&accept.session_secret));
        // Both ends offer every capability: `Addresses` (none) follows `Accept`.
        assert!(est
            .capabilities
            .contains(sluice_wire::Capabilities::ADDRESSES));
        control
            .write_all(&encode(&[
                Frame::Accept(accept.clone()),
                Frame::Addresses(sluice_wire::Addresses::default()),
            ]))
            .expect("send");
        let (mut data, _) = listener.accept().expect("data");
        data.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let Frame::Join(join) = read_frame(&mut data) else {
            panic!("want Join")
        };
        let mut out = Vec::new();
        table.handle(&join, &mut out).expect("join");
        // Joined and the end of the data, in one segment.
        out.extend(encode(&[Frame::Close(Close {
            reason: CloseReason::Done,
        })]));
        data.write_all(&out).expect("send");
        control
            .write_all(&encode(&[
                Frame::ManifestEnd(ManifestEnd { files: 0, bytes: 0 }),
                Frame::Close(Close {
                    reason: CloseReason::Done,
                }),
            ]))
            .expect("send");
        let ack = read_frame(&mut control);
        assert!(matches!(ack, Frame::CloseAck(_)), "{ack:?}");
    });
    let out = cp(&[
        "--streams",
        "1",
        &format!("sluice://{addr}/nothing/"),
        &slash(&t.path().join("dst")),
    ]);
    out.ok();
    daemon
        .join()
        .expect("the scripted daemon saw a clean session");
}

// ---------------------------------------------------------------------------------------
// A full disk on the receiver
// ---------------------------------------------------------------------------------------

/// A 4 MiB tmpfs mounted for the test and unmounted when dropped.
struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    /// `None` (with the test reported skipped, see [`skip`]) where mounting is not
    /// allowed.
    fn mount() -> Option<SmallTmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallTmpfs { dir }),
            Ok(o) => {
                skip(&format!(
                    "cannot mount a tmpfs (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                None
            }
            Err(e) => {
                skip(&format!("cannot run mount: {e}"));
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).output();
    }
}

#[test]
fn full_disk_fails_the_file_clearly_and_the_daemon_keeps_serving() {
    let Some(fs) = SmallTmpfs::mount() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("big.bin");
    write(&file, &bytes(80, 8 * MIB));
    let mut d = Daemon::start(fs.path());
    let out = cp(&["--json", s(&file), &d.url("big.bin")]);
    out.code(1);
    let v = out.json();
    assert_eq!(v["files_failed"], 1, "{v}");
    let err = v["failures"][0]["error"]
        .as_str()
        .expect("an error message");
    assert!(err.contains("No space left"), "{err}");
    assert!(err.contains("big.bin"), "{err}");
    assert_eq!(v["failures"][0]["path"], "big.bin");
    assert!(!fs.path().join("big.bin").exists());
    assert_eq!(
        names(fs.path()),
        Vec::<String>::new(),
        "nothing left behind"
    );

    d.assert_alive();
    let small = t.path().join("small.txt");
    write(&small, b"fits");
    cp(&[s(&small), &d.url("small.txt")]).ok();
    assert_eq!(std::fs::read(fs.path().join("small.txt")).unwrap(), b"fits");
}

#[test]
fn regression_chunks_of_a_file_failed_at_the_sink_stalled_their_connection() {
    // Each chunk of a file the sink had already failed waited 60 s for a manifest entry
    // that would never come again, holding up every later file on its data connection.
    let Some(fs) = SmallTmpfs::mount() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("tree");
    write(&src.join("a/big.bin"), &bytes(81, 12 * MIB));
    for i in 0..3 {
        write(&src.join(format!("a/z{i}.txt")), format!("z{i}").as_bytes());
    }
    let mut d = Daemon::start(fs.path());
    let args = cp_args(&["-r", "--json", "--streams", "1", s(&src), &d.url("")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sluice_env_timeout(&args, &[], Duration::from_secs(30));
    out.code(1);
    let v = out.json();
    assert_eq!(v["files_failed"], 1, "{v}");
    assert_eq!(v["failures"][0]["path"], "tree/a/big.bin");
    assert_eq!(
        names(&fs.path().join("tree/a")),
        ["z0.txt", "z1.txt", "z2.txt"]
    );
    d.assert_alive();
}
