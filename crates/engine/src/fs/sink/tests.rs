//! The sink's writers against a real directory: fresh, resumed, torn logs, no-clobber,
//! small files, symlinks, directories, `O_DIRECT`, and symlinks leading out.

// Test data and counters are small; truncation cannot happen.
#![allow(clippy::cast_possible_truncation)]

use super::*;
use crate::fs::partial_log::{HEADER_BYTES, RECORD_BYTES};
use file::DIRECT_ALIGN;
use sluice_wire::chunk_range;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;

fn rel(s: &str) -> RelPath {
    RelPath::parse(s).unwrap()
}

fn root() -> (tempfile::TempDir, Root) {
    let t = tempfile::tempdir().unwrap();
    let r = Root::open(t.path()).unwrap();
    (t, r)
}

const CB: u32 = 64 << 10;

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn write_chunks(f: &SinkFile, d: &[u8], which: &[u64]) {
    for &i in which {
        let (off, len) = chunk_range(d.len() as u64, CB, i).unwrap();
        let bytes = &d[off as usize..off as usize + len as usize];
        f.write_at(off, bytes).unwrap();
        f.record_chunk(i, chunk_checksum(bytes)).unwrap();
    }
}

/// `n` bytes of [`data`] at a page-aligned range of a buffer (as pool slots are), and a
/// fresh partial of `name` under `root` to receive them.
fn aligned_partial(root: &Root, name: &str, n: usize) -> (Vec<u8>, Range<usize>, SinkFile) {
    let mut buf = vec![0u8; n + DIRECT_ALIGN];
    let at = buf.as_ptr().align_offset(DIRECT_ALIGN);
    buf[at..at + n].copy_from_slice(&data(n));
    let inc = Incoming {
        size: n as u64,
        mtime_ns: 5,
        chunk_bytes: CB,
    };
    let p = rel(name);
    let (f, _) = SinkFile::create(root, &p, inc, ResumeMode::Fresh, Clobber::Replace).unwrap();
    (buf, at..at + n, f)
}

/// How many of the pages of `f` in `range` are in the page cache (`mincore`).
fn cached_pages(f: &File, range: std::ops::Range<usize>) -> usize {
    let page = 4096;
    let len = range.end - range.start;
    // SAFETY: a fresh read-only shared mapping of `len` bytes of an open file; it is
    // only passed to mincore and unmapped before returning.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(f),
            range.start as libc::off_t,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        let mut vec = vec![0u8; len.div_ceil(page)];
        assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
        libc::munmap(addr, len);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }
}

#[test]
fn direct_writes_bypass_the_page_cache_and_keep_every_byte() {
    let (_t, root) = root();
    // 3 chunks and an unaligned tail, in a page-aligned buffer (as pool slots are).
    let (buf, at, mut f) = aligned_partial(&root, "direct.bin", 3 * CB as usize + 1000);
    let d = &buf[at];
    match f.use_direct() {
        Ok(true) => {}
        Ok(false) => {
            crate::testing::skip(&format!("{} is in memory", root.path().display()), false);
            return;
        }
        Err(e) => {
            // The test's file system refuses O_DIRECT: nothing to prove here.
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            crate::testing::skip(
                &format!("O_DIRECT refused under {}", root.path().display()),
                false,
            );
            return;
        }
    }
    // Chunks 0 and 3 (with the tail) from the aligned buffer; chunk 1 from an
    // unaligned copy (the page cache takes it); chunk 2 aligned again.
    write_chunks(&f, d, &[0, 3]);
    let c1 = CB as usize..2 * CB as usize;
    let unaligned = [&[0u8][..], &d[c1.clone()]].concat();
    f.write_at(CB.into(), &unaligned[1..]).unwrap();
    write_chunks(&f, d, &[2]);
    let pages = CB as usize / 4096;
    assert_eq!(
        cached_pages(f.file(), 0..CB as usize),
        0,
        "chunk 0 went direct"
    );
    assert_eq!(cached_pages(f.file(), c1), pages, "chunk 1 was unaligned");
    assert_eq!(cached_pages(f.file(), 2 * CB as usize..3 * CB as usize), 0);
    f.finish(0o644, 5, false).unwrap();
    assert_eq!(std::fs::read(root.path().join("direct.bin")).unwrap(), d);
}

/// A partial in memory (tmpfs) is written through the page cache even where `O_DIRECT`
/// is asked for: tmpfs copies an `O_DIRECT` write all the same.
#[test]
fn a_partial_in_memory_is_written_through_the_page_cache() {
    let Some(t) = crate::testing::in_memory_dir() else {
        return;
    };
    let root = Root::open(t.path()).unwrap();
    let n = 2 * CB as usize;
    let (buf, at, mut f) = aligned_partial(&root, "memory.bin", n);
    let d = &buf[at];
    assert!(!f.use_direct().unwrap(), "in memory: not with O_DIRECT");
    write_chunks(&f, d, &[0, 1]);
    let pages = n / 4096;
    assert_eq!(
        cached_pages(f.file(), 0..n),
        pages,
        "every page in the page cache"
    );
    f.finish(0o644, 5, false).unwrap();
    assert_eq!(std::fs::read(t.path().join("memory.bin")).unwrap(), d);
}

#[test]
fn temp_names() {
    assert_eq!(temp_name("a.txt"), ".a.txt.sluice-part");
    let long = "é".repeat(127); // 254 bytes
    let t = temp_name(&long);
    assert!(t.len() + LOG_SUFFIX.len() <= 255, "{}", t.len());
    assert_ne!(t, temp_name(&"é".repeat(126)));
    assert!(is_partial_name(&t) && is_partial_name(&format!("{t}{LOG_SUFFIX}")));
    assert!(!is_partial_name("x.sluice-part"));
}

#[test]
fn fresh_write_finish_and_resume_cycle() {
    let (_t, root) = root();
    let d = data(3 * CB as usize + 100);
    let inc = Incoming {
        size: d.len() as u64,
        mtime_ns: 5,
        chunk_bytes: CB,
    };
    let p = rel("dir/sub/big.bin");
    let (f, held) = SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
    assert!(held.is_empty());
    assert_eq!(
        std::fs::metadata(root.path().join("dir/sub/.big.bin.sluice-part"))
            .unwrap()
            .len(),
        d.len() as u64
    );
    write_chunks(&f, &d, &[0, 2]);
    drop(f); // crash-like
    let (f, held) = SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
    let idx: Vec<u64> = held.iter().map(|h| h.0).collect();
    assert_eq!(idx, [0, 2]);
    write_chunks(&f, &d, &[1, 3]);
    f.finish(0o640, 1_600_000_000_123_456_789, true).unwrap();
    let out = root.path().join("dir/sub/big.bin");
    assert_eq!(std::fs::read(&out).unwrap(), d);
    let m = std::fs::metadata(&out).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o640);
    use std::os::unix::fs::MetadataExt;
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_000, 123_456_789));
    let names: Vec<_> = std::fs::read_dir(root.path().join("dir/sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["big.bin"]);
}

#[test]
fn resume_rejects_another_version_and_fresh_truncates() {
    let (_t, root) = root();
    let d = data(2 * CB as usize);
    let inc = Incoming {
        size: d.len() as u64,
        mtime_ns: 5,
        chunk_bytes: CB,
    };
    let p = rel("f");
    let (f, _) = SinkFile::create(&root, &p, inc, ResumeMode::Fresh, Clobber::Replace).unwrap();
    write_chunks(&f, &d, &[0, 1]);
    f.abandon();
    let changed = Incoming { mtime_ns: 6, ..inc };
    let (_f, held) =
        SinkFile::create(&root, &p, changed, ResumeMode::Resume, Clobber::Replace).unwrap();
    assert!(held.is_empty());
    let (f, _) = SinkFile::create(&root, &p, inc, ResumeMode::Fresh, Clobber::Replace).unwrap();
    write_chunks(&f, &d, &[1]);
    drop(f);
    let (_f, held) =
        SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
    assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), [1]);
}

#[test]
fn torn_log_tail_is_ignored_and_cut() {
    let (_t, root) = root();
    let d = data(3 * CB as usize);
    let inc = Incoming {
        size: d.len() as u64,
        mtime_ns: 0,
        chunk_bytes: CB,
    };
    let p = rel("f");
    let (f, _) = SinkFile::create(&root, &p, inc, ResumeMode::Fresh, Clobber::Replace).unwrap();
    write_chunks(&f, &d, &[0, 1]);
    drop(f);
    let log = root.path().join(".f.sluice-part.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.truncate(bytes.len() - 5);
    std::fs::write(&log, &bytes).unwrap();
    let (f, held) = SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
    assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), [0]);
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        (HEADER_BYTES + RECORD_BYTES) as u64
    );
    write_chunks(&f, &d, &[2]);
    drop(f);
    let (_f, held) =
        SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
    assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), [0, 2]);
}

#[test]
fn zero_byte_file_and_out_of_range_write() {
    let (_t, root) = root();
    let inc = Incoming {
        size: 0,
        mtime_ns: 0,
        chunk_bytes: CB,
    };
    let (f, held) = SinkFile::create(
        &root,
        &rel("empty"),
        inc,
        ResumeMode::Resume,
        Clobber::Replace,
    )
    .unwrap();
    assert!(held.is_empty());
    let e = f.write_at(0, b"x").unwrap_err();
    assert!(matches!(e, FsError::OutOfRange { .. }), "{e}");
    f.write_at(0, b"").unwrap();
    f.finish(0o600, 0, false).unwrap();
    assert_eq!(
        std::fs::metadata(root.path().join("empty")).unwrap().len(),
        0
    );
}

#[test]
fn no_clobber_refuses_everything() {
    let (_t, root) = root();
    std::fs::write(root.path().join("x"), b"old").unwrap();
    let p = rel("x");
    let inc = Incoming {
        size: 3,
        mtime_ns: 0,
        chunk_bytes: CB,
    };
    let e = SinkFile::create(&root, &p, inc, ResumeMode::Fresh, Clobber::Refuse).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    assert!(e.to_string().contains("\"x\" already exists"), "{e}");
    let e = write_small_file(&root, &p, b"new", 0o644, 0, false, Clobber::Refuse).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }));
    let e = make_symlink(&root, &p, "t", 0, Clobber::Refuse).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }));
    // Created while the file was being written: the rename still refuses.
    let (f, _) =
        SinkFile::create(&root, &rel("y"), inc, ResumeMode::Fresh, Clobber::Refuse).unwrap();
    f.write_at(0, b"new").unwrap();
    std::fs::write(root.path().join("y"), b"raced").unwrap();
    let e = f.finish(0o644, 0, false).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    assert_eq!(std::fs::read(root.path().join("y")).unwrap(), b"raced");
    assert_eq!(std::fs::read(root.path().join("x")).unwrap(), b"old");
    // Replace replaces.
    write_small_file(&root, &p, b"new", 0o644, 0, false, Clobber::Replace).unwrap();
    assert_eq!(std::fs::read(root.path().join("x")).unwrap(), b"new");
}

#[test]
fn small_files_and_symlinks() {
    let (_t, root) = root();
    write_small_file(
        &root,
        &rel("d/s.txt"),
        b"small",
        0o604,
        7_000_000_001,
        false,
        Clobber::Replace,
    )
    .unwrap();
    assert_eq!(
        std::fs::read(root.path().join("d/s.txt")).unwrap(),
        b"small"
    );
    assert!(same_size_and_mtime(
        &root,
        &rel("d/s.txt"),
        5,
        7_000_000_001
    ));
    assert!(!same_size_and_mtime(
        &root,
        &rel("d/s.txt"),
        5,
        7_000_000_002
    ));
    assert!(!same_size_and_mtime(
        &root,
        &rel("d/none"),
        5,
        7_000_000_001
    ));
    make_symlink(
        &root,
        &rel("d/l"),
        "/etc/passwd",
        3_000_000_000,
        Clobber::Replace,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_link(root.path().join("d/l"))
            .unwrap()
            .to_str(),
        Some("/etc/passwd")
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::symlink_metadata(root.path().join("d/l"))
            .unwrap()
            .mtime(),
        3
    );
}

#[test]
fn directories_get_their_exact_mode_and_mtime_after_their_contents() {
    use std::os::unix::fs::MetadataExt;
    let (_t, root) = root();
    write_small_file(
        &root,
        &rel("d/s.txt"),
        b"small",
        0o604,
        0,
        false,
        Clobber::Replace,
    )
    .unwrap();
    make_symlink(&root, &rel("d/l"), "/etc/passwd", 0, Clobber::Replace).unwrap();
    make_dir(&root, &rel("ro/inner"), 0o500).unwrap();
    write_small_file(
        &root,
        &rel("ro/inner/f"),
        b"x",
        0o644,
        0,
        false,
        Clobber::Replace,
    )
    .unwrap();
    finish_dir(&root, &rel("ro/inner"), 0o500, 9_000_000_000).unwrap();
    let m = std::fs::metadata(root.path().join("ro/inner")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.mtime()), (0o500, 9));
    // A file where a directory should be.
    let e = make_dir(&root, &rel("d/s.txt"), 0o755).unwrap_err();
    assert!(matches!(e, FsError::WrongKind { .. }), "{e}");
    let e = make_dir(&root, &rel("d/l"), 0o755).unwrap_err();
    assert!(
        matches!(
            e,
            FsError::WrongKind {
                found: "a symlink",
                ..
            }
        ),
        "{e}"
    );
    std::fs::set_permissions(
        root.path().join("ro/inner"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
}

#[test]
fn writes_never_go_through_a_symlink_leading_out() {
    let base = tempfile::tempdir().unwrap();
    let r = base.path().join("root");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::create_dir(base.path().join("outside")).unwrap();
    std::fs::write(base.path().join("outside/victim"), b"keep").unwrap();
    std::os::unix::fs::symlink("../outside", r.join("out")).unwrap();
    std::os::unix::fs::symlink("../outside/victim", r.join("victim_link")).unwrap();
    let root = Root::open(&r).unwrap();
    let e = write_small_file(
        &root,
        &rel("out/victim"),
        b"evil",
        0o644,
        0,
        false,
        Clobber::Replace,
    )
    .unwrap_err();
    assert!(matches!(e, FsError::OutsideRoot { .. }), "{e}");
    let inc = Incoming {
        size: 4,
        mtime_ns: 0,
        chunk_bytes: CB,
    };
    let e = SinkFile::create(
        &root,
        &rel("out/new"),
        inc,
        ResumeMode::Fresh,
        Clobber::Replace,
    )
    .unwrap_err();
    assert!(matches!(e, FsError::OutsideRoot { .. }), "{e}");
    // Replacing a symlink replaces the link, not what it points to.
    write_small_file(
        &root,
        &rel("victim_link"),
        b"evil",
        0o644,
        0,
        false,
        Clobber::Replace,
    )
    .unwrap();
    assert_eq!(
        std::fs::read(base.path().join("outside/victim")).unwrap(),
        b"keep"
    );
    assert!(std::fs::symlink_metadata(r.join("victim_link"))
        .unwrap()
        .is_file());
    assert!(!base.path().join("outside/new").exists());
}

/// The names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn small_writer_links_whole_files_with_exact_mode_and_mtime_and_leaves_no_temporaries() {
    use std::os::unix::fs::MetadataExt;
    let (_t, root) = root();
    let mut w = SmallWriter::new(&root);
    let mtime = 1_600_000_000_123_456_789;
    // 0o666 and 0o4755: bits a usual umask clears, and set-id bits, must still be exact.
    let modes = [0o600, 0o644, 0o666, 0o400, 0o4755];
    for (i, mode) in modes.iter().enumerate() {
        let p = rel(&format!("d/f{i}"));
        w.write(&p, &data(100 + i), (*mode, mtime), i == 1, Clobber::Refuse)
            .unwrap();
    }
    for (i, mode) in modes.iter().enumerate() {
        let path = root.path().join(format!("d/f{i}"));
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, *mode, "f{i}");
        assert_eq!(
            m.mtime() as i64 * 1_000_000_000 + m.mtime_nsec(),
            mtime,
            "f{i}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), data(100 + i), "f{i}");
        assert_eq!(m.nlink(), 1, "f{i}: linked once");
    }
    assert_eq!(
        names(&root.path().join("d")),
        ["f0", "f1", "f2", "f3", "f4"]
    );
}

#[test]
fn small_writer_replaces_refuses_and_ignores_a_stale_partial() {
    let (_t, root) = root();
    std::fs::write(root.path().join("x"), b"old").unwrap();
    std::fs::write(root.path().join(".x.sluice-part"), b"stale").unwrap();
    let mut w = SmallWriter::new(&root);
    let e = w
        .write(&rel("x"), b"new", (0o644, 0), false, Clobber::Refuse)
        .unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    assert_eq!(std::fs::read(root.path().join("x")).unwrap(), b"old");
    w.write(&rel("x"), b"new", (0o640, 0), false, Clobber::Replace)
        .unwrap();
    assert_eq!(std::fs::read(root.path().join("x")).unwrap(), b"new");
    let m = std::fs::metadata(root.path().join("x")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o640);
    assert_eq!(names(root.path()), ["x"], "the stale partial is gone too");
    // A symlink in the way is refused (not followed), and replaced with Replace.
    symlink_at(root.path(), "l", "x");
    let e = w
        .write(&rel("l"), b"n", (0o644, 0), false, Clobber::Refuse)
        .unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    w.write(&rel("l"), b"n", (0o644, 0), false, Clobber::Replace)
        .unwrap();
    assert!(std::fs::symlink_metadata(root.path().join("l"))
        .unwrap()
        .is_file());
    assert_eq!(std::fs::read(root.path().join("x")).unwrap(), b"new");
}

fn symlink_at(dir: &std::path::Path, name: &str, target: &str) {
    std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
}
