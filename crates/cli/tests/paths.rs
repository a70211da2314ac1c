//! The path rules (README "Path rules", `crates/engine/src/fs/spec.rs`), row by row, in
//! both directions, against what the local tools do with the same input.
//!
//! Each case builds a source tree `S` (`tree/f1`, `tree/sub/f2`, `file`) and a
//! destination `D` holding `exist/keep`, runs `sluice cp -r` (a push into a daemon
//! serving `D`, or a pull from a daemon serving `S`), and compares the resulting `D`
//! with the tree that `cp -r` (or rsync, where a trailing '/' is involved: `cp` ignores
//! it on a source and treats it on a missing destination as a new name) leaves in a copy
//! `RD` of the destination. Where sluice's rule differs from both on purpose, the case
//! says so and asserts the rule:
//!
//! * several sources into a missing destination: a daemon creates the directory (`cp`
//!   refuses); locally it must exist or end with '/' (exit 2);
//! * the daemon's root has no name: it is always sent as its contents, with or without
//!   a trailing '/' (`sluice://HOST/` and `sluice://HOST` alike), as rsync sends a
//!   module's contents.
//!
//! rsync comes from the system; where it is missing, the cases that need it are skipped
//! with a message on stderr (not captured by the test harness), and the suite fails when
//! `CI` is set.

mod common;

use common::{cp, run_in, Daemon};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Which way a case copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Local `S/...` to `sluice://ADDR/...` (the daemon serves `D`).
    Push,
    /// `sluice://ADDR/...` (the daemon serves `S`) to local `D/...`.
    Pull,
}

/// What a case is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// What `cp -r` (or rsync, with a trailing '/') does with the same input.
    Tools,
    /// `cp -r` into the destination created first (several sources into a directory a
    /// daemon creates).
    CreatedDirectory,
    /// sluice refuses with this exit code and leaves the destination as it was (the
    /// tools refuse too).
    Refused(i32),
}

/// Marks the root given with no '/' at all: `sluice://ADDR`, or the local `D`.
const BARE_ROOT: &str = "@";

/// One row: sources and destination as typed, relative to `S` and `D` ("" is the root
/// given as `sluice://ADDR/` or `D/`, [`BARE_ROOT`] the root without the slash).
#[derive(Debug, Clone, Copy)]
struct Case {
    srcs: &'static [&'static str],
    dst: &'static str,
    expect: Expect,
}

const fn case(srcs: &'static [&'static str], dst: &'static str) -> Case {
    Case {
        srcs,
        dst,
        expect: Expect::Tools,
    }
}

/// The rows both ways share: trees and files, sub-paths, a trailing '/' or not, the
/// destination existing or not.
const ROWS: &[Case] = &[
    // `cp -r src DST` with DST missing: a copy of src named DST.
    case(&["tree"], "new"),
    // `cp -r src DST` with DST an existing directory: DST/src.
    case(&["tree"], "exist"),
    // `cp -r src DST/`: DST/src, DST created if missing.
    case(&["tree"], "new/"),
    case(&["tree"], "exist/"),
    // `cp -r src/ DST`: the contents of src into DST, existing or not.
    case(&["tree/"], "new"),
    case(&["tree/"], "exist"),
    case(&["tree/"], "exist/"),
    case(&["tree/."], "new"),
    // Sub-paths on both sides.
    case(&["tree/sub"], "exist/deeper"),
    case(&["tree/sub"], "exist/"),
    case(&["tree/sub/"], "exist/deeper"),
    // `cp file DST` with DST not an existing directory: the file is named DST.
    case(&["file"], "new"),
    case(&["tree/sub/f2"], "exist/renamed"),
    // `cp file DST` with DST a directory, or `DST/`: DST/file.
    case(&["file"], "exist"),
    case(&["file"], "new/"),
    // `cp a b DST` into an existing directory or one ending with '/'.
    case(&["file", "tree"], "exist"),
    case(&["file", "tree/sub"], "new/"),
];

/// Several sources into a missing destination without '/'.
const SEVERAL_INTO_MISSING: Case = case(&["file", "tree"], "new");

/// Pushes into the daemon's root.
const PUSH_INTO_ROOT: &[Case] = &[
    case(&["tree"], ""),
    case(&["tree"], BARE_ROOT),
    case(&["tree/"], ""),
    case(&["tree/"], BARE_ROOT),
    case(&["file"], ""),
    case(&["file"], BARE_ROOT),
    case(&["file", "tree"], BARE_ROOT),
];

/// Pulls of the daemon's root (always its contents) and of a file.
const PULL_ROOT: &[Case] = &[
    case(&[""], "new"),
    case(&[BARE_ROOT], "new"),
    case(&[""], "exist"),
    case(&[BARE_ROOT], "exist"),
    case(&[""], "new/"),
    case(&[BARE_ROOT], "exist/"),
    case(&["."], "new"),
];

// ---------------------------------------------------------------------------------------
// Trees
// ---------------------------------------------------------------------------------------

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir -p");
    }
    std::fs::write(path, data).expect("write");
}

/// The source tree.
fn make_source(s: &Path) {
    write(&s.join("tree/f1"), b"one");
    write(&s.join("tree/sub/f2"), b"two two");
    write(&s.join("file"), b"a file");
}

/// A destination before the copy: one existing directory with a file in it.
fn make_destination(d: &Path) {
    write(&d.join("exist/keep"), b"kept");
}

/// Every entry under `root`: relative path -> file bytes (None for a directory).
fn snapshot(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("a directory entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(std::fs::read(&path).expect("read")));
            }
        }
    }
    out
}

fn show(tree: &BTreeMap<String, Option<Vec<u8>>>) -> String {
    tree.iter()
        .map(|(p, b)| match b {
            None => format!("{p}/"),
            Some(b) => format!("{p} ({} bytes)", b.len()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------
// The reference
// ---------------------------------------------------------------------------------------

fn is_root(p: &str) -> bool {
    p.is_empty() || p == BARE_ROOT
}

/// A local path as typed under `top` ("" -> `top/`, [`BARE_ROOT`] -> `top`).
fn typed(top: &str, p: &str) -> String {
    match p {
        "" => format!("{top}/"),
        BARE_ROOT => top.to_string(),
        _ => format!("{top}/{p}"),
    }
}

/// Whether rsync is the reference: a trailing '/' on a source or the destination, or a
/// daemon's root as the source (its contents).
fn needs_rsync(c: &Case) -> bool {
    c.srcs.iter().any(|s| s.ends_with('/') || is_root(s)) || c.dst.ends_with('/')
}

fn rsync_available() -> bool {
    std::process::Command::new("rsync")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Says loudly that `what` was skipped; fails under CI, which must run everything.
fn skip(what: &str) {
    let _ = std::io::stderr().write_all(
        format!("SKIPPED: {what}: rsync is not installed (apt-get install -y rsync)\n").as_bytes(),
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{what}: rsync is required under CI"
    );
}

/// Runs the local tools on `tmp/S` -> `tmp/RD`; returns whether they succeeded.
fn reference(tmp: &Path, c: &Case) -> bool {
    // The daemon's root is its contents: `S/` locally.
    let srcs: Vec<String> = c
        .srcs
        .iter()
        .map(|s| {
            if is_root(s) {
                "S/".into()
            } else {
                typed("S", s)
            }
        })
        .collect();
    let dst = typed("RD", c.dst);
    if c.expect == Expect::CreatedDirectory {
        std::fs::create_dir_all(tmp.join(&dst)).expect("mkdir");
    }
    let program = if needs_rsync(c) { "rsync" } else { "cp" };
    let mut args = vec!["-r"];
    args.extend(srcs.iter().map(String::as_str));
    args.push(&dst);
    run_in(program, &args, Some(tmp)).code == Some(0)
}

// ---------------------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------------------

/// Runs `c` through sluice in `tmp` (holding `S` and `D`); returns its exit code.
fn run_sluice(tmp: &Path, way: Way, c: &Case) -> (Option<i32>, String) {
    let served = tmp.join(if way == Way::Push { "D" } else { "S" });
    let daemon = Daemon::start(&served);
    let remote = |p: &str| match p {
        BARE_ROOT => format!("sluice://{}", daemon.addr),
        _ => daemon.url(p),
    };
    let mut args: Vec<String> = vec!["-r".into()];
    match way {
        Way::Push => {
            args.extend(c.srcs.iter().map(|s| typed("S", s)));
            args.push(remote(c.dst));
        }
        Way::Pull => {
            args.extend(c.srcs.iter().map(|s| remote(s)));
            args.push(typed("D", c.dst));
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cp(&args, Some(tmp));
    let what = format!(
        "{way:?} sluice cp {}: exit {:?}; stdout: {}; stderr: {}; daemon log: {}",
        args.join(" "),
        out.code,
        out.stdout,
        out.stderr,
        daemon.log()
    );
    (out.code, what)
}

/// Runs one case both through sluice and the local tools and compares the trees.
/// Returns false when it was skipped.
fn check(way: Way, c: &Case, rsync: bool) -> bool {
    if needs_rsync(c) && !rsync {
        skip(&format!("{way:?} {:?} -> {:?}", c.srcs, c.dst));
        return false;
    }
    let tmp = tempfile::tempdir().expect("a temp dir");
    let tmp = tmp.path();
    make_source(&tmp.join("S"));
    make_destination(&tmp.join("D"));
    make_destination(&tmp.join("RD"));
    let before = snapshot(&tmp.join("D"));
    let tools_ok = reference(tmp, c);
    let (code, what) = run_sluice(tmp, way, c);
    let got = snapshot(&tmp.join("D"));
    match c.expect {
        Expect::Refused(want) => {
            assert!(!tools_ok, "{what}: the local tools accept this case");
            assert_eq!(code, Some(want), "{what}");
            assert_eq!(show(&got), show(&before), "{what}: the destination changed");
        }
        Expect::Tools | Expect::CreatedDirectory => {
            assert!(tools_ok, "{what}: the local tools refuse this case");
            assert_eq!(code, Some(0), "{what}");
            let want = snapshot(&tmp.join("RD"));
            assert_eq!(show(&got), show(&want), "{what}");
            assert_eq!(got, want, "{what}: same names, other bytes");
        }
    }
    true
}

fn check_all(way: Way, cases: &[Case]) {
    let rsync = rsync_available();
    let ran = cases.iter().filter(|c| check(way, c, rsync)).count();
    assert!(ran > 0 || !rsync, "no case ran");
}

// ---------------------------------------------------------------------------------------
// The rows
// ---------------------------------------------------------------------------------------

#[test]
fn push_follows_the_path_table() {
    check_all(Way::Push, ROWS);
}

#[test]
fn pull_follows_the_path_table() {
    check_all(Way::Pull, ROWS);
}

#[test]
fn push_into_the_daemons_root() {
    check_all(Way::Push, PUSH_INTO_ROOT);
}

#[test]
fn pull_of_the_daemons_root_is_its_contents() {
    check_all(Way::Pull, PULL_ROOT);
}

#[test]
fn several_sources_into_a_missing_directory_are_created_on_a_daemon_not_locally() {
    let push = Case {
        expect: Expect::CreatedDirectory,
        ..SEVERAL_INTO_MISSING
    };
    let pull = Case {
        expect: Expect::Refused(2),
        ..SEVERAL_INTO_MISSING
    };
    check_all(Way::Push, &[push]);
    check_all(Way::Pull, &[pull]);
}

/// The bug of issue 13, spelled out rather than compared: pulling a daemon's root into
/// a directory that does not exist yet made `new_dir` a copy of `f1`, then failed
/// `sub/f2` ("not a directory"); without the '/', `f1` failed and `sub/` was lost.
#[test]
fn regression_pull_root_into_a_new_directory() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let root = tmp.path().join("R");
    write(&root.join("f1"), b"f1");
    write(&root.join("sub/f2"), b"f2");
    let daemon = Daemon::start(&root);
    for (url, dir) in [
        (daemon.url(""), "new_dir"),
        (format!("sluice://{}", daemon.addr), "new_dir2"),
    ] {
        let dst = tmp.path().join(dir);
        let dst = dst.to_str().expect("UTF-8");
        let out = cp(&["-r", &url, dst], None);
        assert_eq!(out.code, Some(0), "{url} -> {dst}: {}", out.stderr);
        let got = snapshot(Path::new(dst));
        let want: BTreeMap<String, Option<Vec<u8>>> = [
            ("f1".to_string(), Some(b"f1".to_vec())),
            ("sub".to_string(), None),
            ("sub/f2".to_string(), Some(b"f2".to_vec())),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want, "{url} -> {dst}");
    }
}

/// A trailing '/' on a file asks for the contents of something that has none: refused,
/// as `cp` and rsync refuse it, on either side (a pull of `file/` used to hang).
#[test]
fn contents_of_a_file_are_refused_both_ways() {
    for way in [Way::Push, Way::Pull] {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let tmp = tmp.path();
        make_source(&tmp.join("S"));
        make_destination(&tmp.join("D"));
        let before = snapshot(&tmp.join("D"));
        let c = case(&["file/"], "new");
        let (code, what) = run_sluice(tmp, way, &c);
        assert!(matches!(code, Some(1 | 2)), "{what}");
        assert_eq!(show(&snapshot(&tmp.join("D"))), show(&before), "{what}");
    }
}
