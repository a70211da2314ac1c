//! The walk itself: the start, then one name at a time from the directory on top of the
//! stack, each stat-ed without following links and turned into an entry or an error.

use std::path::PathBuf;

use cap_fs_ext::DirExt;
use cap_std::fs::FileTypeExt;
use sluice_wire::{FileEntry, FileKind, RelPath, MAX_SYMLINK_TARGET_BYTES};

use super::{Frame, Names, Pending, ScanError, Scanner, KEEP_OPEN_DIRS};
use crate::fs::error::{FsError, Op};
use crate::fs::root::EntryMeta;
use crate::fs::sink::is_partial_name;

impl Scanner {
    /// The first step: look at `start`; emit it (unit mode) or queue its contents.
    pub(super) fn begin(&mut self) -> Option<Result<FileEntry, ScanError>> {
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
            kind: crate::fs::error::kind_name(&ft),
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
    pub(super) fn descend(&mut self, p: Pending) -> Result<(), ScanError> {
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
    pub(super) fn visit(&mut self) -> Option<Result<FileEntry, ScanError>> {
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
