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

use std::path::PathBuf;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, FileTypeExt};
use sluice_wire::{FileEntry, FileKind, PathError, RelPath, MAX_SYMLINK_TARGET_BYTES};

use super::error::{FsError, Op};
use super::root::{EntryMeta, Root};
use super::sink::is_partial_name;

/// Directory handles kept open on the current path; deeper frames reopen their
/// directory by path when the walk returns to them (bounds file descriptors).
pub const KEEP_OPEN_DIRS: usize = 64;

/// An entry the scanner left out, with the reason. Only [`ScanError::Fs`] on the start
/// ends the scan; every other error concerns one entry (or one directory's subtree).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// An operation failed: the entry (or the directory's subtree) is left out.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A name that is not valid UTF-8 (shown lossily); the entry is left out.
    #[error("skipped {name:?} in {dir:?} under {}: the name is not valid UTF-8", root.display())]
    NonUtf8Name {
        /// The root.
        root: PathBuf,
        /// The directory holding it, relative to the root (`.` for the root).
        dir: String,
        /// The name, with invalid bytes replaced by U+FFFD.
        name: String,
    },
    /// A path the protocol cannot carry (too long, or a component too long).
    #[error("skipped {path:?} under {}: {error}", root.display())]
    BadPath {
        /// The root.
        root: PathBuf,
        /// The path as far as it could be built.
        path: String,
        /// Why it is refused.
        error: PathError,
    },
    /// A socket, fifo, device, or a partial file of an unfinished transfer.
    #[error("skipped {path:?} under {}: it is {kind}, which is not transferred", root.display())]
    Special {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
        /// What it is ("a socket", "a sluice partial file", ...).
        kind: &'static str,
    },
    /// A directory found without `recursive`.
    #[error("skipped the directory {path:?} under {}: not a recursive copy", root.display())]
    NotRecursive {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
    },
    /// The entry disappeared between listing and `lstat`.
    #[error("skipped {path:?} under {}: it vanished during the scan", root.display())]
    Vanished {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
    },
    /// A symlink whose target the protocol cannot carry.
    #[error("skipped the symlink {path:?} under {}: its target {reason}", root.display())]
    BadSymlink {
        /// The root.
        root: PathBuf,
        /// The path, relative to the root.
        path: String,
        /// Why ("is not valid UTF-8", "is too long").
        reason: &'static str,
    },
}

impl ScanError {
    /// Whether this is a deliberate skip (special file, not recursive, vanished, partial)
    /// that a user sees as a warning, rather than a failure to read something.
    pub fn is_skip(&self) -> bool {
        matches!(
            self,
            ScanError::Special { .. } | ScanError::NotRecursive { .. } | ScanError::Vanished { .. }
        )
    }
}

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

/// Maps a path the scanner emitted back to the path under the root it was read from,
/// so that the source can open the file a manifest entry names.
///
/// `prefix` = `None` means `start` is a directory whose *contents* were sent (what
/// [`map_copy`](super::map_copy) produces; a single file is always sent with a prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMap {
    start: Option<RelPath>,
    prefix: Option<RelPath>,
}

impl SourceMap {
    /// The map of a [`Scanner`] built with the same `start` and `prefix`.
    pub fn new(start: Option<RelPath>, prefix: Option<RelPath>) -> SourceMap {
        SourceMap { start, prefix }
    }

    /// The path under the root that `emitted` was read from; `None` if `emitted` is not
    /// under the prefix, or names the root itself (never a file).
    pub fn to_source(&self, emitted: &RelPath) -> Option<RelPath> {
        let rest = match &self.prefix {
            None => Some(emitted.as_str()),
            Some(p) if emitted == p => None,
            Some(p) => Some(
                emitted
                    .as_str()
                    .strip_prefix(p.as_str())?
                    .strip_prefix('/')?,
            ),
        };
        match (&self.start, rest) {
            (start, None) => start.clone(),
            (None, Some(rest)) => RelPath::parse(rest).ok(),
            (Some(s), Some(rest)) => s.join(rest).ok(),
        }
    }
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

    /// The first step: look at `start`; emit it (unit mode) or queue its contents.
    fn begin(&mut self) -> Option<Result<FileEntry, ScanError>> {
        let start_name = self.start.as_ref().map_or(".", |s| s.as_str()).to_owned();
        let contents = self.prefix.is_none();
        // Unit mode describes a symlink start as a symlink; contents mode follows it.
        let meta = match (&self.start, contents) {
            (None, _) => self.root_dir.dir_metadata(),
            (Some(s), true) => self.root_dir.metadata(s.as_str()),
            (Some(s), false) => self.root_dir.symlink_metadata(s.as_str()),
        };
        let meta = match meta {
            Ok(m) => m,
            Err(e) => return Some(Err(self.fs_err(Op::Stat, &start_name, e))),
        };
        let ft = meta.file_type();
        let em = EntryMeta::from_cap(&meta);
        if ft.is_dir() && contents {
            self.pending = Some(Pending {
                src: self.start.clone(),
                out: None,
                from_parent: false,
            });
            return None;
        }
        // A unit: its name is the prefix, or (contents of a non-directory) its own name.
        let out = match (&self.prefix, &self.start) {
            (Some(p), _) => p.clone(),
            (None, Some(s)) => match RelPath::parse(s.file_name()) {
                Ok(p) => p,
                Err(error) => {
                    return Some(Err(ScanError::BadPath {
                        root: self.root_path.clone(),
                        path: start_name,
                        error,
                    }))
                }
            },
            // The root is always a directory; handled above.
            (None, None) => return None,
        };
        if ft.is_dir() {
            if !self.recursive {
                return Some(Err(ScanError::NotRecursive {
                    root: self.root_path.clone(),
                    path: start_name,
                }));
            }
            self.pending = Some(Pending {
                src: self.start.clone(),
                out: Some(out.clone()),
                from_parent: false,
            });
            return Some(Ok(self.entry(out, FileKind::Dir, &em, None)));
        }
        if ft.is_file() {
            return Some(Ok(self.entry(out, FileKind::File, &em, None)));
        }
        if ft.is_symlink() {
            let target = self.root_dir.read_link_contents(&start_name);
            return Some(self.symlink_entry(out, &start_name, &em, target));
        }
        Some(Err(ScanError::Special {
            root: self.root_path.clone(),
            path: start_name,
            kind: super::error::kind_name(&ft),
        }))
    }

    fn symlink_entry(
        &mut self,
        out: RelPath,
        src: &str,
        meta: &EntryMeta,
        target: std::io::Result<PathBuf>,
    ) -> Result<FileEntry, ScanError> {
        let target = target.map_err(|e| self.fs_err(Op::ReadLink, src, e))?;
        let bad = |reason| ScanError::BadSymlink {
            root: self.root_path.clone(),
            path: src.to_owned(),
            reason,
        };
        let target = target
            .into_os_string()
            .into_string()
            .map_err(|_| bad("is not valid UTF-8"))?;
        if target.is_empty() {
            return Err(bad("is empty"));
        }
        if target.len() > MAX_SYMLINK_TARGET_BYTES {
            return Err(bad("is longer than the protocol's limit"));
        }
        Ok(self.entry(out, FileKind::Symlink, meta, Some(target)))
    }

    /// Opens and lists a pending directory, pushing its frame.
    fn descend(&mut self, p: Pending) -> Result<(), ScanError> {
        let name = p.src.as_ref().map_or(".", |s| s.as_str()).to_owned();
        let parent = if p.from_parent {
            self.stack.last().and_then(|f| f.dir.as_ref())
        } else {
            None
        };
        let dir = match (parent, &p.src) {
            (Some(parent), Some(src)) => parent.open_dir_nofollow(src.file_name()),
            (_, Some(src)) => self.root_dir.open_dir(src.as_str()),
            (_, None) => self.root_dir.try_clone(),
        }
        .map_err(|e| self.fs_err(Op::Open, &name, e))?;
        let mut names = Names::default();
        let entries = dir.entries().map_err(|e| self.fs_err(Op::List, &name, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| self.fs_err(Op::List, &name, e))?;
            let n = entry.file_name();
            let b = n.as_encoded_bytes();
            if b == b"." || b == b".." {
                continue;
            }
            let start = u32::try_from(names.bytes.len()).map_err(|_| {
                self.fs_err(
                    Op::List,
                    &name,
                    std::io::Error::other("directory names exceed 4 GiB"),
                )
            })?;
            // A name is at most NAME_MAX (255) bytes.
            let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
            names.bytes.extend_from_slice(b);
            names.spans.push((start, len));
        }
        let Names { bytes, mut spans } = names;
        spans.sort_unstable_by(|a, b| {
            let (a, b) = (
                &bytes[a.0 as usize..(a.0 + a.1) as usize],
                &bytes[b.0 as usize..(b.0 + b.1) as usize],
            );
            a.cmp(b)
        });
        if self.stack.len() >= KEEP_OPEN_DIRS {
            let i = self.stack.len() - KEEP_OPEN_DIRS;
            self.stack[i].dir = None;
        }
        self.stack.push(Frame {
            dir: Some(dir),
            src: p.src,
            out: p.out,
            names: Names { bytes, spans },
            next: 0,
        });
        Ok(())
    }

    /// Visits the next name of the top frame; `None` when it yields nothing to report.
    fn visit(&mut self) -> Option<Result<FileEntry, ScanError>> {
        let named = match self.next_name()? {
            Ok(named) => named,
            Err(e) => return Some(Err(e)),
        };
        let (meta, link) = match self.stat_in_top(&named)? {
            Ok(found) => found,
            Err(e) => return Some(Err(e)),
        };
        Some(self.entry_of(named, &meta, link))
    }

    /// Takes the next name of the top frame, with its paths under the root and in the
    /// transfer; an error for a name that is not UTF-8, not a valid path, or a partial
    /// file of sluice's own.
    fn next_name(&mut self) -> Option<Result<Named, ScanError>> {
        let root = &self.root_path;
        let frame = self.stack.last_mut()?;
        let name_bytes = frame.names.get(frame.next).to_vec();
        frame.next += 1;
        let dir_label = frame.src.as_ref().map_or(".", |s| s.as_str()).to_owned();
        let name = match String::from_utf8(name_bytes) {
            Ok(name) => name,
            Err(e) => {
                return Some(Err(ScanError::NonUtf8Name {
                    root: root.clone(),
                    dir: dir_label,
                    name: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                }))
            }
        };
        let join = |base: &Option<RelPath>| match base {
            Some(b) => b.join(&name),
            None => RelPath::parse(&name),
        };
        let bad_path = |error| ScanError::BadPath {
            root: root.clone(),
            path: format!("{dir_label}/{name}"),
            error,
        };
        let (src, out) = match (join(&frame.src), join(&frame.out)) {
            (Ok(src), Ok(out)) => (src, out),
            (Err(e), _) | (_, Err(e)) => return Some(Err(bad_path(e))),
        };
        if is_partial_name(&name) {
            return Some(Err(ScanError::Special {
                root: root.clone(),
                path: src.into_string(),
                kind: "a sluice partial file",
            }));
        }
        Some(Ok(Named {
            name,
            src,
            out,
            dir_label,
        }))
    }

    /// Stats `named` in the top frame's directory (reopened by path if it was closed to
    /// bound open descriptors) without following a link, and reads a link's target.
    fn stat_in_top(&mut self, named: &Named) -> Option<Result<Stat, ScanError>> {
        let root = &self.root_path;
        let frame = self.stack.last_mut()?;
        if frame.dir.is_none() {
            match self.root_dir.open_dir(named.dir_label.as_str()) {
                Ok(d) => frame.dir = Some(d),
                Err(e) => {
                    let e = FsError::io(Op::Open, root, &named.dir_label, e);
                    return Some(Err(ScanError::Fs(e)));
                }
            }
        }
        let dir = frame.dir.as_ref()?;
        let meta = match dir.symlink_metadata(&named.name) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some(Err(ScanError::Vanished {
                    root: root.clone(),
                    path: named.src.as_str().to_owned(),
                }))
            }
            Err(e) => {
                let e = FsError::io(Op::Stat, root, named.src.as_str(), e);
                return Some(Err(ScanError::Fs(e)));
            }
        };
        let link = meta
            .file_type()
            .is_symlink()
            .then(|| dir.read_link_contents(&named.name));
        Some(Ok((meta, link)))
    }

    /// The entry of a visited name, by its type; a directory is queued for descent.
    fn entry_of(
        &mut self,
        named: Named,
        meta: &cap_std::fs::Metadata,
        link: Option<std::io::Result<PathBuf>>,
    ) -> Result<FileEntry, ScanError> {
        let Named { src, out, .. } = named;
        let ft = meta.file_type();
        let em = EntryMeta::from_cap(meta);
        if ft.is_file() {
            Ok(self.entry(out, FileKind::File, &em, None))
        } else if ft.is_dir() {
            if !self.recursive {
                return Err(ScanError::NotRecursive {
                    root: self.root_path.clone(),
                    path: src.into_string(),
                });
            }
            self.pending = Some(Pending {
                src: Some(src),
                out: Some(out.clone()),
                from_parent: true,
            });
            Ok(self.entry(out, FileKind::Dir, &em, None))
        } else if let Some(target) = link {
            self.symlink_entry(out, src.as_str(), &em, target)
        } else {
            let kind = if ft.is_socket() {
                "a socket"
            } else if ft.is_fifo() {
                "a fifo"
            } else if ft.is_block_device() || ft.is_char_device() {
                "a device"
            } else {
                "an unknown kind of file"
            };
            Err(ScanError::Special {
                root: self.root_path.clone(),
                path: src.into_string(),
                kind,
            })
        }
    }
}

/// A name taken from a directory being listed: the name, its path under the root and
/// in the transfer, and the directory's label for messages.
struct Named {
    name: String,
    src: RelPath,
    out: RelPath,
    dir_label: String,
}

/// What [`Scanner::stat_in_top`] found: the name's metadata (links not followed) and,
/// for a symlink, the result of reading its target.
type Stat = (cap_std::fs::Metadata, Option<std::io::Result<PathBuf>>);

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
