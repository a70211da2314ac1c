//! [`Root`]: a directory that confines every path joined to it.
//!
//! Every operation goes through a [`cap_std::fs::Dir`] handle, which resolves paths
//! with `openat2(RESOLVE_BENEATH)` on Linux (or a checked component walk elsewhere): a
//! path can never reach anything outside the root, whether by `..` (already refused by
//! [`RelPath`]), an absolute symlink, or a relative symlink that climbs out. Symlinks
//! that stay inside the root may be crossed in intermediate components; the last
//! component of a file to read is never followed.

use std::fs::File;
use std::path::{Path, PathBuf};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, FileTypeExt, MetadataExt, OpenOptions};
use sluice_wire::RelPath;

use super::error::{kind_name, FsError, Op};

/// A directory that confines every path: the daemon's `--root`, the client's local
/// source or destination base.
///
/// `Root` is `Send + Sync`; share it by reference or in an `Arc`.
#[derive(Debug)]
pub struct Root {
    dir: Dir,
    path: PathBuf,
}

/// What kind of entry a path names (from `lstat`: a symlink is a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A block device.
    BlockDevice,
    /// A character device.
    CharDevice,
    /// Anything else.
    Other,
}

impl EntryKind {
    pub(crate) fn of(ft: &cap_std::fs::FileType) -> EntryKind {
        if ft.is_file() {
            EntryKind::File
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_symlink() {
            EntryKind::Symlink
        } else if ft.is_fifo() {
            EntryKind::Fifo
        } else if ft.is_socket() {
            EntryKind::Socket
        } else if ft.is_block_device() {
            EntryKind::BlockDevice
        } else if ft.is_char_device() {
            EntryKind::CharDevice
        } else {
            EntryKind::Other
        }
    }
}

/// The `lstat` of an entry, reduced to what a transfer needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryMeta {
    /// What the entry is.
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Bytes (`st_size`; for a symlink, the target's length).
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Device holding the entry (`st_dev`).
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

impl EntryMeta {
    pub(crate) fn from_cap(m: &cap_std::fs::Metadata) -> EntryMeta {
        EntryMeta {
            kind: EntryKind::of(&m.file_type()),
            mode: m.mode() & 0o7777,
            size: m.len(),
            mtime_ns: mtime_ns_of(m.mtime(), m.mtime_nsec()),
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// The error cap-std gives for a path leading outside the root.
fn escape() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "a path led outside of the filesystem",
    )
}

/// `secs * 1e9 + nsec`, saturating (a year-2262 mtime does not panic).
pub(crate) fn mtime_ns_of(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// The `SystemTime` of a nanosecond timestamp (negative: before 1970).
pub(crate) fn system_time_of(ns: i64) -> std::time::SystemTime {
    use std::time::{Duration, UNIX_EPOCH};
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

impl Root {
    /// Opens the directory `path` as a root.
    ///
    /// # Errors
    /// [`FsError::Root`] if it does not exist, is not a directory or cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Root, FsError> {
        let path = path.as_ref();
        let dir =
            Dir::open_ambient_dir(path, ambient_authority()).map_err(|cause| FsError::Root {
                root: path.to_path_buf(),
                cause,
            })?;
        Ok(Root {
            dir,
            path: path.to_path_buf(),
        })
    }

    /// Creates the directory `path` (and its parents, like `mkdir -p`) if needed, then
    /// opens it as a root: the destination of a copy into a new directory.
    ///
    /// # Errors
    /// [`FsError::Root`] if it cannot be created or opened.
    pub fn create(path: impl AsRef<Path>) -> Result<Root, FsError> {
        let path = path.as_ref();
        std::fs::create_dir_all(path).map_err(|cause| FsError::Root {
            root: path.to_path_buf(),
            cause,
        })?;
        Root::open(path)
    }

    /// The root's path, as given to [`Root::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error of `op` on `rel`, naming this root.
    pub(crate) fn err(&self, op: Op, rel: &str, cause: std::io::Error) -> FsError {
        FsError::io(op, &self.path, rel, cause)
    }

    /// Opens the regular file `rel` for reading, as a std `File` for `read_at` (pread).
    ///
    /// The last component is opened with `O_NOFOLLOW` (and `O_NONBLOCK`, so a fifo
    /// cannot block the call); intermediate symlinks are followed only while they stay
    /// inside the root.
    ///
    /// # Errors
    /// [`FsError::OutsideRoot`] through a symlink leading out; [`FsError::WrongKind`]
    /// if `rel` is a symlink, a directory, a fifo, ...; [`FsError::Io`] otherwise.
    pub fn open_read(&self, rel: &RelPath) -> Result<File, FsError> {
        self.open_read_flags(rel, 0)
    }

    /// [`Root::open_read`] with `O_DIRECT`: reads bypass the page cache and must use
    /// aligned buffers, offsets and lengths. File systems without direct I/O answer
    /// `EINVAL` ([`FsError::Io`]); callers fall back to [`Root::open_read`].
    ///
    /// # Errors
    /// As [`Root::open_read`].
    pub fn open_read_direct(&self, rel: &RelPath) -> Result<File, FsError> {
        self.open_read_flags(rel, libc::O_DIRECT)
    }

    /// Opens `rel`, which the scan found to be a regular file, for reading: one
    /// `openat2(RESOLVE_BENEATH)`, the last component not followed, and no `fstat` (the
    /// caller knows the kind and size from the scan, and checks the size by reading:
    /// a read past the scanned size, or one that ends before it, finds a file that
    /// changed; a directory or FIFO put in its place fails the read). Falls back to
    /// [`Root::open_read`] where `openat2` is unavailable.
    ///
    /// # Errors
    /// As [`Root::open_read`].
    pub fn open_read_scanned(&self, rel: &RelPath) -> Result<File, FsError> {
        use rustix::fs::{OFlags, ResolveFlags};
        if let Some(e) = crate::fault::read_error(rel.file_name()) {
            return Err(self.err(Op::Open, rel.as_str(), e));
        }
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let mode = rustix::fs::Mode::empty();
        for _ in 0..4 {
            match rustix::fs::openat2(&self.dir, rel.as_str(), flags, mode, resolve) {
                Ok(fd) => return Ok(File::from(fd)),
                // A rename elsewhere raced the lookup: try again.
                Err(rustix::io::Errno::AGAIN) => {}
                Err(rustix::io::Errno::LOOP) => {
                    return Err(self.wrong_kind(Op::Open, rel, "a symlink", "a regular file"))
                }
                Err(rustix::io::Errno::XDEV) => {
                    return Err(self.err(Op::Open, rel.as_str(), escape()))
                }
                Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => break,
                Err(e) => return Err(self.err(Op::Open, rel.as_str(), e.into())),
            }
        }
        self.open_read(rel)
    }

    fn open_read_flags(&self, rel: &RelPath, extra: i32) -> Result<File, FsError> {
        if let Some(e) = crate::fault::read_error(rel.file_name()) {
            return Err(self.err(Op::Open, rel.as_str(), e));
        }
        let mut opts = OpenOptions::new();
        opts.read(true).follow(FollowSymlinks::No);
        cap_std::fs::OpenOptionsExt::custom_flags(
            &mut opts,
            libc::O_NONBLOCK | libc::O_NOCTTY | extra,
        );
        let file = match self.dir.open_with(rel.as_str(), &opts) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(self.wrong_kind(Op::Open, rel, "a symlink", "a regular file"))
            }
            Err(e) => return Err(self.err(Op::Open, rel.as_str(), e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| self.err(Op::Stat, rel.as_str(), e))?;
        if !meta.is_file() {
            return Err(self.wrong_kind(
                Op::Open,
                rel,
                kind_name(&meta.file_type()),
                "a regular file",
            ));
        }
        Ok(file.into_std())
    }

    pub(crate) fn wrong_kind(
        &self,
        op: Op,
        rel: &RelPath,
        found: &'static str,
        expected: &'static str,
    ) -> FsError {
        FsError::WrongKind {
            op,
            path: rel.as_str().to_owned(),
            root: self.path.clone(),
            found,
            expected,
        }
    }

    /// The `lstat` of `rel` (a symlink in the last component is described, not followed).
    ///
    /// # Errors
    /// [`FsError::Io`] (`NotFound` if it does not exist) or [`FsError::OutsideRoot`].
    pub fn entry_metadata(&self, rel: &RelPath) -> Result<EntryMeta, FsError> {
        self.dir
            .symlink_metadata(rel.as_str())
            .map(|m| EntryMeta::from_cap(&m))
            .map_err(|e| self.err(Op::Stat, rel.as_str(), e))
    }

    /// Whether `rel` exists (as anything, a dangling symlink included).
    ///
    /// # Errors
    /// [`FsError`] for errors other than "not found" (permission, escape).
    pub fn exists(&self, rel: &RelPath) -> Result<bool, FsError> {
        match self.dir.symlink_metadata(rel.as_str()) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.err(Op::Stat, rel.as_str(), e)),
        }
    }

    /// Creates `rel` and any missing parents, each with `mode` (minus the umask), like
    /// `mkdir -p -m`. Existing directories are left as they are.
    ///
    /// # Errors
    /// [`FsError`] if a component exists and is not a directory, or on an OS error.
    pub fn create_dir_all(&self, rel: &RelPath, mode: u32) -> Result<(), FsError> {
        let mut b = DirBuilder::new();
        b.recursive(true).mode(mode & 0o7777);
        self.dir.create_dir_with(rel.as_str(), &b).map_err(|e| {
            // A symlink leading out shows as "exists, not a directory": say which it is.
            match self.dir.metadata(rel.as_str()) {
                Err(probe) if super::error::is_escape(&probe) => {
                    self.err(Op::CreateDir, rel.as_str(), escape())
                }
                _ => self.err(Op::CreateDir, rel.as_str(), e),
            }
        })
    }

    /// Opens the directory `rel` (the root itself for `None`): a handle that confines
    /// every path joined to it as the root does (the HTTP face's file operations).
    ///
    /// # Errors
    /// [`FsError`] if it cannot be opened (not found, not a directory, escape).
    pub fn open_dir(&self, rel: Option<&RelPath>) -> Result<Dir, FsError> {
        match rel {
            None => self.dir.try_clone().map_err(|e| self.err(Op::Open, ".", e)),
            Some(rel) => self
                .dir
                .open_dir(rel.as_str())
                .map_err(|e| self.err(Op::Open, rel.as_str(), e)),
        }
    }

    /// The directory holding `rel` (created with default mode if `create`), and the
    /// last component's name.
    pub(crate) fn parent_of<'p>(
        &self,
        rel: &'p RelPath,
        create: bool,
    ) -> Result<(Dir, &'p str), FsError> {
        let parent = rel.parent();
        let mut opened = self.open_dir(parent.as_ref());
        if let (true, Some(p), Err(FsError::Io { cause, .. })) = (create, &parent, &opened) {
            if cause.kind() == std::io::ErrorKind::NotFound {
                self.create_dir_all(p, 0o777)?;
                opened = self.open_dir(parent.as_ref());
            }
        }
        let dir = match opened {
            Err(FsError::Io { cause, .. }) if cause.raw_os_error() == Some(libc::ENOTDIR) => {
                let p = parent.as_ref().map_or(".", |p| p.as_str());
                return Err(FsError::WrongKind {
                    op: Op::Open,
                    path: p.to_owned(),
                    root: self.path.clone(),
                    found: "not a directory",
                    expected: "a directory",
                });
            }
            other => other?,
        };
        Ok((dir, rel.file_name()))
    }
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, FileExt};

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s).unwrap()
    }

    /// `base/root` with `data.txt`, `sub/inner.txt`, and `base/outside/secret.txt`.
    fn setup() -> (tempfile::TempDir, Root) {
        let base = tempfile::tempdir().unwrap();
        let r = base.path().join("root");
        std::fs::create_dir_all(r.join("sub")).unwrap();
        std::fs::write(r.join("data.txt"), b"hello world").unwrap();
        std::fs::write(r.join("sub/inner.txt"), b"inner").unwrap();
        std::fs::create_dir(base.path().join("outside")).unwrap();
        std::fs::write(base.path().join("outside/secret.txt"), b"secret").unwrap();
        let root = Root::open(&r).unwrap();
        (base, root)
    }

    #[test]
    fn reads_regular_files_with_pread() {
        let (_b, root) = setup();
        let f = root.open_read(&rel("data.txt")).unwrap();
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        let m = root.entry_metadata(&rel("data.txt")).unwrap();
        assert_eq!((m.kind, m.size), (EntryKind::File, 11));
        assert!(root.exists(&rel("sub/inner.txt")).unwrap());
        assert!(!root.exists(&rel("nope")).unwrap());
    }

    #[test]
    fn symlinks_leading_out_cannot_be_read_or_written_through() {
        let (base, root) = setup();
        let r = root.path().to_path_buf();
        symlink("/etc", r.join("etc_link")).unwrap();
        symlink("../outside", r.join("out_link")).unwrap();
        symlink("/etc/passwd", r.join("passwd_link")).unwrap();
        symlink("../outside/secret.txt", r.join("secret_link")).unwrap();

        for p in ["etc_link/passwd", "out_link/secret.txt"] {
            let e = root.open_read(&rel(p)).unwrap_err();
            assert!(matches!(e, FsError::OutsideRoot { .. }), "{p}: {e}");
            assert!(e.to_string().contains("outside the root"), "{e}");
            let e = root.entry_metadata(&rel(p)).unwrap_err();
            assert!(matches!(e, FsError::OutsideRoot { .. }), "{p}: {e}");
        }
        // A symlink in the last component is never followed, wherever it points.
        for p in ["passwd_link", "secret_link"] {
            let e = root.open_read(&rel(p)).unwrap_err();
            assert!(
                matches!(
                    e,
                    FsError::WrongKind {
                        found: "a symlink",
                        ..
                    }
                ),
                "{p}: {e}"
            );
        }
        // Writing through them is refused too, and nothing appears outside.
        let e = root
            .create_dir_all(&rel("out_link/new"), 0o755)
            .unwrap_err();
        assert!(matches!(e, FsError::OutsideRoot { .. }), "{e}");
        assert!(!base.path().join("outside/new").exists());
        let e = root.parent_of(&rel("out_link/x.txt"), true).unwrap_err();
        assert!(matches!(e, FsError::OutsideRoot { .. }), "{e}");
        let e = root.parent_of(&rel("etc_link/x.txt"), false).unwrap_err();
        assert!(matches!(e, FsError::OutsideRoot { .. }), "{e}");
    }

    #[test]
    fn symlinks_inside_the_root_are_fine_in_the_middle() {
        let (_b, root) = setup();
        symlink("sub", root.path().join("sub_link")).unwrap();
        let f = root.open_read(&rel("sub_link/inner.txt")).unwrap();
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"inner");
    }

    #[test]
    fn relpath_refuses_lexical_escapes() {
        assert!(RelPath::parse("../outside/secret.txt").is_err());
        assert!(RelPath::parse("sub/../../outside").is_err());
        assert!(RelPath::parse("/etc/passwd").is_err());
    }

    #[test]
    fn directories_and_fifos_are_not_regular_files() {
        let (_b, root) = setup();
        let e = root.open_read(&rel("sub")).unwrap_err();
        assert!(
            matches!(
                e,
                FsError::WrongKind {
                    found: "a directory",
                    ..
                }
            ),
            "{e}"
        );
        let fifo = root.path().join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = root.open_read(&rel("pipe")).unwrap_err();
        assert!(
            matches!(
                e,
                FsError::WrongKind {
                    found: "a fifo",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn create_dir_all_and_missing_root() {
        let (_b, root) = setup();
        root.create_dir_all(&rel("a/b/c"), 0o750).unwrap();
        let m = root.entry_metadata(&rel("a/b/c")).unwrap();
        assert_eq!(m.kind, EntryKind::Dir);
        let e = Root::open("/no/such/sluice/root").unwrap_err();
        assert!(e.to_string().contains("/no/such/sluice/root"), "{e}");
    }

    #[test]
    fn time_conversions_round_trip() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -1_500_000_000] {
            let t = system_time_of(ns);
            let back = match t.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_nanos()).unwrap(),
                Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap(),
            };
            assert_eq!(back, ns);
        }
        assert_eq!(mtime_ns_of(i64::MAX, 5), i64::MAX);
    }
}
