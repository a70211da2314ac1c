//! The file-system layer end to end: scan a tree, write it through the sink into a second
//! root, compare the trees; then crash-like abandon and resume, corruption, no-clobber
//! and a failed finish.
// Helpers outside #[test] fns unwrap too: a panic is a failed assertion. Test data
// patterns truncate on purpose.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

use std::collections::BTreeMap;
use std::fs::{self, File, FileTimes};
use std::os::unix::fs::{symlink, FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use sluice_engine::fs::{
    finish_dir, make_dir, make_symlink, write_small_file, Clobber, FsError, Incoming, ResumeMode,
    Root, Scanner, SinkFile,
};
use sluice_wire::{chunk_checksum, chunk_count, chunk_range, FileKind, RelPath};

const CB: u32 = 64 << 10;
/// Files up to this size go through `write_small_file` (as packed small files would).
const SMALL: u64 = 16 << 10;

fn rel(s: &str) -> RelPath {
    RelPath::parse(s).unwrap()
}

fn set_mtime(p: &Path, ns: u64) {
    let t = UNIX_EPOCH + Duration::from_nanos(ns);
    File::open(p)
        .unwrap()
        .set_times(FileTimes::new().set_modified(t))
        .unwrap();
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The source tree of the round trip.
fn make_source(r: &Path) {
    fs::create_dir_all(r.join("nested/x/y")).unwrap();
    fs::create_dir_all(r.join("données")).unwrap();
    fs::create_dir_all(r.join("emptydir")).unwrap();
    fs::write(r.join("nested/x/y/deep.txt"), b"deep inside").unwrap();
    fs::write(r.join("zero"), b"").unwrap();
    fs::write(r.join("données/日本語.txt"), "こんにちは世界".as_bytes()).unwrap();
    fs::write(r.join("exec.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(r.join("exec.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    fs::write(r.join("secret"), b"s3cr3t").unwrap();
    fs::set_permissions(r.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(r.join("big.bin"), pattern(2 * CB as usize + 1000, 3)).unwrap();
    fs::write(r.join("medium.bin"), pattern(40_000, 9)).unwrap();
    symlink("données/日本語.txt", r.join("link")).unwrap();
    symlink("/etc/does-not-matter", r.join("abs_link")).unwrap();
    let files = [
        "nested/x/y/deep.txt",
        "zero",
        "données/日本語.txt",
        "exec.sh",
        "secret",
        "big.bin",
        "medium.bin",
    ];
    for (i, f) in files.iter().enumerate() {
        set_mtime(
            &r.join(f),
            1_600_000_000_000_000_000 + i as u64 * 1_000_000_007,
        );
    }
    fs::set_permissions(r.join("nested/x"), fs::Permissions::from_mode(0o750)).unwrap();
    // Directories last, deepest first, so writing inside does not move their mtimes.
    for (i, d) in ["nested/x/y", "nested/x", "nested", "données", "emptydir"]
        .iter()
        .enumerate()
    {
        set_mtime(&r.join(d), 1_500_000_000_123_456_789 + i as u64);
    }
}

/// Copies everything `Scanner` yields from `src` into `dst` through the sink API.
fn copy_tree(src: &Root, dst: &Root) {
    let mut dirs = Vec::new();
    for item in Scanner::new(src, None, None, 0, true).unwrap() {
        let e = item.unwrap();
        match e.kind {
            FileKind::Dir => {
                make_dir(dst, &e.path, e.mode).unwrap();
                dirs.push(e);
            }
            FileKind::Symlink => {
                let target = e.symlink_target.as_deref().unwrap();
                make_symlink(dst, &e.path, target, e.mtime_ns, Clobber::Refuse).unwrap();
            }
            FileKind::File if e.size <= SMALL => {
                let f = src.open_read(&e.path).unwrap();
                let mut data = vec![0u8; e.size as usize];
                f.read_exact_at(&mut data, 0).unwrap();
                write_small_file(
                    dst,
                    &e.path,
                    &data,
                    e.mode,
                    e.mtime_ns,
                    false,
                    Clobber::Refuse,
                )
                .unwrap();
            }
            FileKind::File => {
                let inc = Incoming {
                    size: e.size,
                    mtime_ns: e.mtime_ns,
                    chunk_bytes: CB,
                };
                let (sink, held) =
                    SinkFile::create(dst, &e.path, inc, ResumeMode::Resume, Clobber::Refuse)
                        .unwrap();
                assert!(held.is_empty());
                let f = src.open_read(&e.path).unwrap();
                let mut buf = vec![0u8; CB as usize];
                for i in 0..chunk_count(e.size, CB) {
                    let (off, len) = chunk_range(e.size, CB, i).unwrap();
                    let chunk = &mut buf[..len as usize];
                    f.read_exact_at(chunk, off).unwrap();
                    sink.write_at(off, chunk).unwrap();
                    sink.record_chunk(i, chunk_checksum(chunk)).unwrap();
                }
                sink.finish(e.mode, e.mtime_ns, true).unwrap();
            }
        }
    }
    // Directories get their mode and mtime after their contents, deepest first.
    for d in dirs.iter().rev() {
        finish_dir(dst, &d.path, d.mode, d.mtime_ns).unwrap();
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Node {
    File {
        data: Vec<u8>,
        mode: u32,
        mtime: (i64, i64),
    },
    Dir {
        mode: u32,
        mtime: (i64, i64),
    },
    Link {
        target: String,
        mtime: (i64, i64),
    },
}

fn snapshot(base: &Path) -> BTreeMap<String, Node> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let key = p.strip_prefix(base).unwrap().to_str().unwrap().to_owned();
            let mtime = (m.mtime(), m.mtime_nsec());
            let mode = m.mode() & 0o7777;
            let node = if m.file_type().is_symlink() {
                Node::Link {
                    target: fs::read_link(&p).unwrap().to_str().unwrap().to_owned(),
                    mtime,
                }
            } else if m.is_dir() {
                walk(base, &p, out);
                Node::Dir { mode, mtime }
            } else {
                Node::File {
                    data: fs::read(&p).unwrap(),
                    mode,
                    mtime,
                }
            };
            out.insert(key, node);
        }
    }
    let mut out = BTreeMap::new();
    walk(base, base, &mut out);
    out
}

#[test]
fn tree_round_trip_preserves_contents_modes_times_and_links() {
    let t = tempfile::tempdir().unwrap();
    let (s, d) = (t.path().join("src"), t.path().join("dst"));
    fs::create_dir(&s).unwrap();
    make_source(&s);
    let src = Root::open(&s).unwrap();
    let dst = Root::create(&d).unwrap();
    copy_tree(&src, &dst);
    let (a, b) = (snapshot(&s), snapshot(&d));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert_eq!(Some(v), b.get(k), "{k}");
    }
    assert!(a.contains_key("emptydir") && a.contains_key("zero"));
    // Nothing left behind: no partial or log.
    assert!(b.keys().all(|k| !k.contains("sluice-part")));
    // Copying again with no-clobber refuses at the first file.
    let e =
        write_small_file(&dst, &rel("secret"), b"x", 0o644, 0, false, Clobber::Refuse).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    assert_eq!(fs::read(d.join("secret")).unwrap(), b"s3cr3t");
}

struct Partial {
    _t: tempfile::TempDir,
    root: Root,
    data: Vec<u8>,
    inc: Incoming,
    path: RelPath,
}

/// A 3-chunk file whose chunks 0 and 2 were written before a crash.
fn crashed_partial() -> Partial {
    let t = tempfile::tempdir().unwrap();
    let root = Root::open(t.path()).unwrap();
    let data = pattern(2 * CB as usize + 777, 5);
    let inc = Incoming {
        size: data.len() as u64,
        mtime_ns: 1_234_567_890_123,
        chunk_bytes: CB,
    };
    let path = rel("out/big.bin");
    let (sink, held) =
        SinkFile::create(&root, &path, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
    assert!(held.is_empty());
    for i in [0u64, 2] {
        let (off, len) = chunk_range(inc.size, CB, i).unwrap();
        let chunk = &data[off as usize..(off + u64::from(len)) as usize];
        sink.write_at(off, chunk).unwrap();
        sink.record_chunk(i, chunk_checksum(chunk)).unwrap();
    }
    sink.abandon();
    Partial {
        _t: t,
        root,
        data,
        inc,
        path,
    }
}

fn sum_of(p: &Partial, i: u64) -> u64 {
    let (off, len) = chunk_range(p.inc.size, CB, i).unwrap();
    chunk_checksum(&p.data[off as usize..(off + u64::from(len)) as usize])
}

#[test]
fn resume_after_abandon_returns_exactly_the_written_chunks() {
    let p = crashed_partial();
    assert!(!p.root.path().join("out/big.bin").exists());
    let (sink, held) = SinkFile::create(
        &p.root,
        &p.path,
        p.inc,
        ResumeMode::Resume,
        Clobber::Replace,
    )
    .unwrap();
    assert_eq!(held, vec![(0, sum_of(&p, 0)), (2, sum_of(&p, 2))]);
    let (off, len) = chunk_range(p.inc.size, CB, 1).unwrap();
    sink.write_at(off, &p.data[off as usize..(off + u64::from(len)) as usize])
        .unwrap();
    sink.record_chunk(1, sum_of(&p, 1)).unwrap();
    sink.finish(0o644, p.inc.mtime_ns, false).unwrap();
    assert_eq!(fs::read(p.root.path().join("out/big.bin")).unwrap(), p.data);
    // Without --resume the partial is thrown away.
    let p = crashed_partial();
    let (_s, held) =
        SinkFile::create(&p.root, &p.path, p.inc, ResumeMode::Fresh, Clobber::Replace).unwrap();
    assert!(held.is_empty());
}

#[test]
fn a_corrupted_chunk_is_not_reported_as_held() {
    let p = crashed_partial();
    let part = p.root.path().join("out/.big.bin.sluice-part");
    let f = fs::OpenOptions::new().write(true).open(&part).unwrap();
    let (off, _) = chunk_range(p.inc.size, CB, 2).unwrap();
    f.write_all_at(b"X", off + 10).unwrap();
    drop(f);
    let (_s, held) = SinkFile::create(
        &p.root,
        &p.path,
        p.inc,
        ResumeMode::Resume,
        Clobber::Replace,
    )
    .unwrap();
    assert_eq!(held, vec![(0, sum_of(&p, 0))]);
}

#[test]
fn no_clobber_refuses_and_keeps_the_destination() {
    let t = tempfile::tempdir().unwrap();
    let root = Root::open(t.path()).unwrap();
    fs::write(t.path().join("exists"), b"old").unwrap();
    let inc = Incoming {
        size: 3,
        mtime_ns: 0,
        chunk_bytes: CB,
    };
    let e = SinkFile::create(
        &root,
        &rel("exists"),
        inc,
        ResumeMode::Fresh,
        Clobber::Refuse,
    )
    .unwrap_err();
    assert!(e.to_string().contains("\"exists\" already exists"), "{e}");
    let e = make_symlink(&root, &rel("exists"), "t", 0, Clobber::Refuse).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    assert_eq!(fs::read(t.path().join("exists")).unwrap(), b"old");
}

#[test]
fn a_failed_finish_leaves_the_old_destination_untouched_and_the_partial_resumable() {
    let t = tempfile::tempdir().unwrap();
    let root = Root::open(t.path()).unwrap();
    // The destination is a non-empty directory: renaming a file over it fails.
    fs::create_dir(t.path().join("dest")).unwrap();
    fs::write(t.path().join("dest/keep"), b"old").unwrap();
    let data = pattern(CB as usize + 5, 1);
    let inc = Incoming {
        size: data.len() as u64,
        mtime_ns: 9,
        chunk_bytes: CB,
    };
    let (sink, _) = SinkFile::create(
        &root,
        &rel("dest"),
        inc,
        ResumeMode::Fresh,
        Clobber::Replace,
    )
    .unwrap();
    for i in 0..2 {
        let (off, len) = chunk_range(inc.size, CB, i).unwrap();
        let c = &data[off as usize..(off + u64::from(len)) as usize];
        sink.write_at(off, c).unwrap();
        sink.record_chunk(i, chunk_checksum(c)).unwrap();
    }
    let e = sink.finish(0o644, 9, true).unwrap_err();
    assert!(
        e.to_string().contains("cannot rename into place \"dest\""),
        "{e}"
    );
    assert_eq!(fs::read(t.path().join("dest/keep")).unwrap(), b"old");
    let (_s, held) = SinkFile::create(
        &root,
        &rel("dest"),
        inc,
        ResumeMode::Resume,
        Clobber::Replace,
    )
    .unwrap();
    assert_eq!(held.len(), 2);
}
