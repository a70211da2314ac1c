//! The streaming scanner: walks a tree under a [`Root`] lazily and yields one
//! [`FileEntry`] at a time, never holding the tree in memory.
//!
//! # Order and file ids
//! Depth-first, pre-order: a directory's entry comes before anything inside it. Inside a
//! directory, names are sorted bytewise (as `LC_ALL=C ls`), so the same tree always gets
//! the same file ids; ids are consecutive from `first_file_id`, one per emitted entry
//! (errors take none).
//!
//! # Memory
//! The scanner keeps one frame per directory on the current path: the sorted names of
//! that directory (its name bytes plus 8 bytes a name, in one arena) and, for the
//! innermost [`KEEP_OPEN_DIRS`] levels, an open directory handle. So memory is bounded by
//! the sizes of the directories on the current path, never by the tree: a tree of
//! 1,000,000 files in 1,000 directories costs a few KiB; one flat directory of 1,000,000
//! names of 20 bytes costs about 28 MiB while it is listed. Depth is bounded by the path
//! limit ([`sluice_wire::MAX_PATH_BYTES`]: at most 2,048 levels).
//!
//! # What is emitted
//! Regular files, directories and symlinks (never followed; the target is read verbatim
//! with `readlink`). Everything else is reported as a [`ScanError`] for that entry and the
//! scan goes on: sockets, fifos and devices ([`ScanError::Special`]), names that are not
//! UTF-8 ([`ScanError::NonUtf8Name`]), paths over the limits, entries that vanish while
//! scanning, directories that cannot be listed, and the sink's own partial files
//! (`.NAME.sluice-part`, `.NAME.sluice-part.log`). Only a failure on the start itself
//! ends the scan (the error is the last item).

mod error;
mod source_map;
mod walk;

use std::path::PathBuf;

use cap_std::fs::Dir;
use sluice_wire::{FileEntry, FileKind, RelPath};

use super::error::{FsError, Op};
use super::root::{EntryMeta, Root};
pub use error::ScanError;
pub use source_map::SourceMap;

/// Directory handles kept open on the current path; deeper frames reopen their
/// directory by path when the walk returns to them (bounds file descriptors).
pub const KEEP_OPEN_DIRS: usize = 64;

/// The sorted names of one directory, in one arena: `bytes[start..start + len]`.
#[derive(Debug, Default)]
struct Names {
    bytes: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

impl Names {
    fn get(&self, i: usize) -> &[u8] {
        let (start, len) = self.spans[i];
        &self.bytes[start as usize..start as usize + len as usize]
    }
}

/// One directory on the current path.
#[derive(Debug)]
struct Frame {
    /// Open handle, or `None` when dropped to bound descriptors (reopen by `src`).
    dir: Option<Dir>,
    /// Path relative to the root (`None`: the root).
    src: Option<RelPath>,
    /// Path as emitted (`None`: top level, no prefix).
    out: Option<RelPath>,
    names: Names,
    next: usize,
}

/// A directory whose entry was emitted and whose contents come next.
#[derive(Debug)]
struct Pending {
    src: Option<RelPath>,
    out: Option<RelPath>,
    /// Open it relative to the top frame by its name, without following a symlink.
    from_parent: bool,
}

/// Lazily walks a tree; an [`Iterator`] of entries, or drive it into a channel with
/// [`Scanner::scan`].
///
/// ```no_run
/// # use sluice_engine::fs::{Root, Scanner};
/// let root = Root::open("/srv/data")?;
/// for item in Scanner::new(&root, None, None, 0, true)? {
///     match item {
///         Ok(entry) => println!("{} {}", entry.file_id, entry.path),
///         Err(e) => eprintln!("warning: {e}"),
///     }
/// }
/// # Ok::<(), sluice_engine::fs::FsError>(())
/// ```
#[derive(Debug)]
pub struct Scanner {
    root_path: PathBuf,
    root_dir: Dir,
    start: Option<RelPath>,
    prefix: Option<RelPath>,
    recursive: bool,
    next_id: u64,
    started: bool,
    stack: Vec<Frame>,
    pending: Option<Pending>,
}

impl Scanner {
    /// A scanner of `start` (relative to `root`; `None`: the root itself), emitting paths
    /// under `prefix`:
    ///
    /// * `prefix` = `Some(p)`: `start` is sent as a unit named `p` (a file `p`, or a
    ///   directory `p` and then `p/...`); a symlink `start` is sent as a symlink.
    /// * `prefix` = `None`: a directory `start` sends its *contents* at the top level (a
    ///   symlink to a directory inside the root is followed, as rsync does for `src/`);
    ///   a file `start` is sent under its own name.
    ///
    /// Without `recursive`, no directory is descended except a `start` whose contents
    /// are asked for; each directory met is reported as [`ScanError::NotRecursive`].
    ///
    /// # Errors
    /// [`FsError`] if the root handle cannot be duplicated (descriptor limit).
    pub fn new(
        root: &Root,
        start: Option<RelPath>,
        prefix: Option<RelPath>,
        first_file_id: u64,
        recursive: bool,
    ) -> Result<Scanner, FsError> {
        Ok(Scanner {
            root_path: root.path().to_path_buf(),
            root_dir: root.open_dir(None)?,
            start,
            prefix,
            recursive,
            next_id: first_file_id,
            started: false,
            stack: Vec::new(),
            pending: None,
        })
    }

    /// The map from emitted paths back to paths under the root.
    pub fn source_map(&self) -> SourceMap {
        SourceMap::new(self.start.clone(), self.prefix.clone())
    }

    /// Sends every item into `tx` (a bounded channel gives back-pressure, so memory
    /// stays bounded). Stops early if the receiver is gone. Returns the entries sent.
    pub fn scan(self, tx: crossbeam_channel::Sender<Result<FileEntry, ScanError>>) -> u64 {
        let mut sent = 0;
        for item in self {
            let ok = item.is_ok();
            if tx.send(item).is_err() {
                break;
            }
            sent += u64::from(ok);
        }
        sent
    }

    fn fs_err(&self, op: Op, path: &str, e: std::io::Error) -> ScanError {
        ScanError::Fs(FsError::io(op, &self.root_path, path, e))
    }

    fn entry(
        &mut self,
        path: RelPath,
        kind: FileKind,
        meta: &EntryMeta,
        target: Option<String>,
    ) -> FileEntry {
        let id = self.next_id;
        self.next_id += 1;
        FileEntry {
            file_id: id,
            path,
            kind,
            size: if kind == FileKind::File { meta.size } else { 0 },
            mode: meta.mode & 0o7777,
            mtime_ns: meta.mtime_ns,
            symlink_target: target,
        }
    }
}

impl Iterator for Scanner {
    type Item = Result<FileEntry, ScanError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            if let Some(item) = self.begin() {
                return Some(item);
            }
        }
        loop {
            if let Some(p) = self.pending.take() {
                if let Err(e) = self.descend(p) {
                    return Some(Err(e));
                }
            }
            let frame = self.stack.last()?;
            if frame.next >= frame.names.spans.len() {
                self.stack.pop();
                continue;
            }
            if let Some(item) = self.visit() {
                return Some(item);
            }
        }
    }
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s).unwrap()
    }

    fn tree() -> (tempfile::TempDir, Root) {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("b/deep/er")).unwrap();
        std::fs::create_dir_all(r.join("a")).unwrap();
        std::fs::create_dir_all(r.join("données")).unwrap();
        std::fs::write(r.join("b/deep/er/f.txt"), b"deep").unwrap();
        std::fs::write(r.join("a/z"), b"zz").unwrap();
        std::fs::write(r.join("a/m"), b"").unwrap();
        std::fs::write(r.join("données/日本語.txt"), "こんにちは").unwrap();
        std::fs::write(r.join("top"), b"12345").unwrap();
        std::fs::set_permissions(r.join("top"), std::fs::Permissions::from_mode(0o751)).unwrap();
        symlink("/etc/passwd", r.join("link")).unwrap();
        let root = Root::open(r).unwrap();
        (t, root)
    }

    fn paths(items: &[Result<FileEntry, ScanError>]) -> Vec<String> {
        items
            .iter()
            .filter_map(|i| i.as_ref().ok())
            .map(|e| e.path.to_string())
            .collect()
    }

    #[test]
    fn contents_of_root_sorted_depth_first_dirs_first() {
        let (_t, root) = tree();
        let items: Vec<_> = Scanner::new(&root, None, None, 10, true).unwrap().collect();
        assert!(items.iter().all(|i| i.is_ok()), "{items:?}");
        assert_eq!(
            paths(&items),
            [
                "a",
                "a/m",
                "a/z",
                "b",
                "b/deep",
                "b/deep/er",
                "b/deep/er/f.txt",
                "données",
                "données/日本語.txt",
                "link",
                "top"
            ]
        );
        let ids: Vec<u64> = items.iter().map(|i| i.as_ref().unwrap().file_id).collect();
        assert_eq!(ids, (10..21).collect::<Vec<_>>());
        let by = |p: &str| {
            items
                .iter()
                .map(|i| i.as_ref().unwrap())
                .find(|e| e.path.as_str() == p)
                .unwrap()
                .clone()
        };
        let top = by("top");
        assert_eq!((top.kind, top.size, top.mode), (FileKind::File, 5, 0o751));
        let link = by("link");
        assert_eq!(link.kind, FileKind::Symlink);
        assert_eq!(link.symlink_target.as_deref(), Some("/etc/passwd"));
        assert_eq!(link.size, 0);
        assert_eq!(by("b").kind, FileKind::Dir);
        assert_eq!(by("b").size, 0);
        assert_eq!(by("données/日本語.txt").size, "こんにちは".len() as u64);
    }

    #[test]
    fn unit_mode_puts_everything_under_the_prefix() {
        let (_t, root) = tree();
        let items: Vec<_> = Scanner::new(&root, Some(rel("b")), Some(rel("x/b")), 0, true)
            .unwrap()
            .collect();
        assert_eq!(
            paths(&items),
            ["x/b", "x/b/deep", "x/b/deep/er", "x/b/deep/er/f.txt"]
        );
        // A single file under a new name.
        let items: Vec<_> = Scanner::new(&root, Some(rel("a/z")), Some(rel("renamed")), 0, true)
            .unwrap()
            .collect();
        assert_eq!(paths(&items), ["renamed"]);
        // A file with no prefix keeps its name.
        let items: Vec<_> = Scanner::new(&root, Some(rel("a/z")), None, 0, false)
            .unwrap()
            .collect();
        assert_eq!(paths(&items), ["z"]);
        // A symlink start is sent as a symlink.
        let items: Vec<_> = Scanner::new(&root, Some(rel("link")), Some(rel("link")), 0, true)
            .unwrap()
            .collect();
        assert_eq!(items[0].as_ref().unwrap().kind, FileKind::Symlink);
    }

    #[test]
    fn source_map_inverts_the_naming() {
        let (_t, root) = tree();
        for (start, prefix) in [
            (None, None),
            (Some(rel("b")), Some(rel("x/b"))),
            (Some(rel("b")), None),
            (None, Some(rel("all"))),
            (Some(rel("a/z")), Some(rel("renamed"))),
        ] {
            let s = Scanner::new(&root, start.clone(), prefix.clone(), 0, true).unwrap();
            let map = s.source_map();
            for e in s.map(Result::unwrap) {
                if e.kind != FileKind::File {
                    continue;
                }
                let src = map.to_source(&e.path).unwrap();
                let a = std::fs::read(root.path().join(src.as_str())).unwrap();
                assert_eq!(a.len() as u64, e.size, "{start:?} {prefix:?} {}", e.path);
            }
        }
        let map = SourceMap::new(Some(rel("b")), Some(rel("x/b")));
        assert_eq!(map.to_source(&rel("x/bb")), None);
        assert_eq!(map.to_source(&rel("y")), None);
        assert_eq!(map.to_source(&rel("x/b")), Some(rel("b")));
    }

    #[test]
    fn not_recursive_skips_directories() {
        let (_t, root) = tree();
        let items: Vec<_> = Scanner::new(&root, None, None, 0, false).unwrap().collect();
        assert_eq!(paths(&items), ["link", "top"]);
        let skipped = items
            .iter()
            .filter(|i| matches!(i, Err(ScanError::NotRecursive { .. })))
            .count();
        assert_eq!(skipped, 3);
        let items: Vec<_> = Scanner::new(&root, Some(rel("a")), Some(rel("a")), 0, false)
            .unwrap()
            .collect();
        assert!(matches!(items[..], [Err(ScanError::NotRecursive { .. })]));
    }

    #[test]
    fn missing_start_ends_the_scan_with_one_error() {
        let (_t, root) = tree();
        let items: Vec<_> = Scanner::new(&root, Some(rel("nope")), None, 0, true)
            .unwrap()
            .collect();
        assert_eq!(items.len(), 1);
        let e = items[0].as_ref().unwrap_err();
        assert!(e.to_string().contains("\"nope\""), "{e}");
    }

    #[test]
    fn non_utf8_names_are_reported_per_entry_and_the_scan_goes_on() {
        let (_t, root) = tree();
        let bad = std::ffi::OsStr::from_bytes(b"bad\xff name");
        std::fs::write(root.path().join("a").join(bad), b"x").unwrap();
        std::fs::create_dir(root.path().join(bad)).unwrap();
        std::fs::write(root.path().join(bad).join("inside"), b"x").unwrap();
        let items: Vec<_> = Scanner::new(&root, None, None, 0, true).unwrap().collect();
        let errs: Vec<String> = items
            .iter()
            .filter_map(|i| i.as_ref().err())
            .map(|e| {
                assert!(matches!(e, ScanError::NonUtf8Name { .. }), "{e}");
                e.to_string()
            })
            .collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs.iter().all(|e| e.contains("bad\u{fffd} name")),
            "{errs:?}"
        );
        assert_eq!(paths(&items).len(), 11);
    }

    #[test]
    fn special_files_and_partials_are_skipped() {
        let (_t, root) = tree();
        let sock = root.path().join("a/sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        std::fs::write(root.path().join("a/.x.sluice-part"), b"p").unwrap();
        let items: Vec<_> = Scanner::new(&root, Some(rel("a")), None, 0, true)
            .unwrap()
            .collect();
        assert_eq!(paths(&items), ["m", "z"]);
        let kinds: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                Err(ScanError::Special { kind, .. }) => Some(*kind),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, ["a sluice partial file", "a socket"]);
        assert!(items
            .iter()
            .filter_map(|i| i.as_ref().err())
            .all(ScanError::is_skip));
    }

    #[test]
    fn deep_trees_reopen_dropped_handles() {
        let t = tempfile::tempdir().unwrap();
        let mut p = t.path().to_path_buf();
        let depth = KEEP_OPEN_DIRS + 20;
        for _ in 0..depth {
            p.push("d");
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("f"), b"x").unwrap();
            // Also a sibling after the subdirectory, visited after returning to the frame.
        }
        let mut q = t.path().to_path_buf();
        for _ in 0..depth {
            q.push("d");
            std::fs::write(q.join("z"), b"y").unwrap();
        }
        let root = Root::open(t.path()).unwrap();
        let items: Vec<_> = Scanner::new(&root, None, None, 0, true).unwrap().collect();
        assert!(items.iter().all(|i| i.is_ok()));
        assert_eq!(items.len(), depth * 3);
        let last = items.last().unwrap().as_ref().unwrap();
        assert_eq!(last.path.as_str(), "d/z");
    }

    #[test]
    fn scan_feeds_a_bounded_channel() {
        let (_t, root) = tree();
        let (tx, rx) = crossbeam_channel::bounded(2);
        let s = Scanner::new(&root, None, None, 0, true).unwrap();
        let h = std::thread::spawn(move || s.scan(tx));
        let got: Vec<_> = rx.iter().collect();
        assert_eq!(h.join().unwrap(), 11);
        assert_eq!(got.len(), 11);
    }
}
