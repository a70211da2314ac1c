//! Small files, written whole: one of a packed chunk's segments, or an empty file.
//!
//! Where the file system has `O_TMPFILE`, a small file is written into an unnamed
//! file, given its mtime (and its mode, where the umask would not give it already) and
//! then linked in under its name with `linkat`: no temporary name, no failing
//! `unlinkat`, no `rename`, no `fchmod` in the common case. The link is atomic and never
//! replaces anything, so a reader sees no file or the whole one. A destination that
//! exists already is replaced through a temporary name and `rename` as before (or
//! refused, with [`Clobber::Refuse`]). File systems without `O_TMPFILE` take the
//! temporary-name path for every file.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cap_std::fs::{Dir, OpenOptionsExt};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use sluice_wire::RelPath;

use super::super::error::{FsError, Op};
use super::super::root::{system_time_of, Root};
use super::{
    io_err, open_dir_fd, open_opts, refuse_if_exists, rename_into_place, set_mode_and_mtime,
    temp_name, Clobber,
};

/// Writes a whole small file (one of a packed chunk's segments) so that a failure never
/// leaves a half file at the destination. See [`SmallWriter::write`].
///
/// # Errors
/// [`FsError::AlreadyExists`] with [`Clobber::Refuse`]; [`FsError::OutsideRoot`];
/// [`FsError::Io`].
pub fn write_small_file(
    root: &Root,
    rel: &RelPath,
    data: &[u8],
    mode: u32,
    mtime_ns: i64,
    fsync: bool,
    clobber: Clobber,
) -> Result<(), FsError> {
    SmallWriter::new(root).write(rel, data, (mode, mtime_ns), fsync, clobber)
}

/// Writes the small files of one packed chunk, keeping the last parent directory open
/// between them (the files of a pack are mostly siblings: one `openat` per directory,
/// not per file). Hold one only for the files at hand: a directory renamed meanwhile is
/// still the one written into.
pub struct SmallWriter<'r> {
    root: &'r Root,
    parent: Option<(Option<RelPath>, Dir)>,
}

impl<'r> SmallWriter<'r> {
    /// A writer under `root`, with no directory open yet.
    pub fn new(root: &'r Root) -> SmallWriter<'r> {
        SmallWriter { root, parent: None }
    }

    /// Writes `data` as `rel` with `meta` = (mode, mtime in ns): unnamed (`O_TMPFILE`)
    /// and linked in, or to a temporary name and renamed over `rel`; with `fsync`, the
    /// file and then its directory are synced. Missing parent directories are created.
    ///
    /// # Errors
    /// [`FsError::AlreadyExists`] with [`Clobber::Refuse`]; [`FsError::OutsideRoot`];
    /// [`FsError::Io`].
    pub fn write(
        &mut self,
        rel: &RelPath,
        data: &[u8],
        meta: (u32, i64),
        fsync: bool,
        clobber: Clobber,
    ) -> Result<(), FsError> {
        let root = self.root;
        let dir = self.parent_dir(rel)?;
        let name = rel.file_name();
        let err = |op| io_err(root, rel, op);
        let Some(file) = unnamed(dir, data, meta, fsync).map_err(|(op, e)| err(op)(e))? else {
            return write_named(root, rel, dir, data, meta, fsync, clobber);
        };
        match link_in(&file, dir, name) {
            Ok(()) => {}
            Err(Errno::EXIST) if clobber == Clobber::Refuse => {
                return Err(FsError::AlreadyExists {
                    path: rel.as_str().to_owned(),
                    root: root.path().to_path_buf(),
                })
            }
            Err(Errno::EXIST) => replace_with(root, rel, dir, &file)?,
            // Linking an unnamed file needs a capability or /proc: without, name it.
            Err(Errno::NOENT) if NO_TMPFILE.load(Ordering::Relaxed) => {
                return write_named(root, rel, dir, data, meta, fsync, clobber)
            }
            Err(e) => return Err(err(Op::Rename)(e.into())),
        }
        if fsync {
            sync_dir(dir).map_err(err(Op::Sync))?;
        }
        Ok(())
    }

    /// The directory holding `rel`: the one kept open if it is the same.
    fn parent_dir(&mut self, rel: &RelPath) -> Result<&Dir, FsError> {
        let parent = rel.parent();
        let same = matches!(&self.parent, Some((p, _)) if *p == parent);
        if !same {
            let (dir, _) = self.root.parent_of(rel, true)?;
            self.parent = Some((parent, dir));
        }
        match &self.parent {
            Some((_, dir)) => Ok(dir),
            None => Err(self.root.err(
                Op::Open,
                rel.as_str(),
                std::io::Error::other("internal: parent directory not kept"),
            )),
        }
    }
}

/// Set once `O_TMPFILE` (or linking it in) failed as unsupported: every later small
/// file takes the temporary-name path.
static NO_TMPFILE: AtomicBool = AtomicBool::new(false);

/// Writes `data` into a new unnamed file in `dir`, with the mtime and mode of `meta`
/// (and, with `fsync`, synced). `None` where the file system has no `O_TMPFILE`.
fn unnamed(
    dir: &Dir,
    data: &[u8],
    (mode, mtime_ns): (u32, i64),
    fsync: bool,
) -> Result<Option<File>, (Op, std::io::Error)> {
    if NO_TMPFILE.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
    let file = match rustix::fs::openat(dir, ".", flags, Mode::from_raw_mode(mode & 0o7777)) {
        Ok(fd) => File::from(fd),
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOSYS) => {
            NO_TMPFILE.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        Err(e) => return Err((Op::Create, e.into())),
    };
    (&file).write_all(data).map_err(|e| (Op::Write, e))?;
    if umask_keeps(mode) {
        file.set_times(std::fs::FileTimes::new().set_modified(system_time_of(mtime_ns)))
            .map_err(|e| (Op::SetTimes, e))?;
    } else {
        set_mode_and_mtime(&file, mode, mtime_ns)?;
    }
    if fsync {
        file.sync_all().map_err(|e| (Op::Sync, e))?;
    }
    Ok(Some(file))
}

/// Whether creating a file with `mode` gives it exactly `mode`: no set-id or sticky
/// bits, and none the process's umask clears. (A default ACL on the directory can only
/// clear bits, never add them.)
fn umask_keeps(mode: u32) -> bool {
    static UMASK: OnceLock<Option<u32>> = OnceLock::new();
    let umask = *UMASK.get_or_init(read_umask);
    umask.is_some_and(|u| mode & 0o7000 == 0 && mode & 0o777 & u == 0)
}

/// The process's umask, from `/proc/self/status` (reading it with `umask(2)` would
/// change it for a moment under other threads).
fn read_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Umask:"))?;
    u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).ok()
}

/// Links the unnamed `file` into `dir` as `name` (never replacing anything):
/// `linkat(AT_EMPTY_PATH)`, or through `/proc/self/fd` where that needs a capability
/// this process lacks.
fn link_in(file: &File, dir: &Dir, name: &str) -> Result<(), Errno> {
    /// Set once `AT_EMPTY_PATH` was refused (it needs `CAP_DAC_READ_SEARCH` before Linux
    /// 6.10): later links go through /proc at once, with no failing `linkat` per file.
    static NO_EMPTY_PATH: AtomicBool = AtomicBool::new(false);
    if !NO_EMPTY_PATH.load(Ordering::Relaxed) {
        match rustix::fs::linkat(file, "", dir, name, AtFlags::EMPTY_PATH) {
            Err(Errno::NOENT | Errno::PERM) => NO_EMPTY_PATH.store(true, Ordering::Relaxed),
            other => return other,
        }
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    let proc = format!("/proc/self/fd/{fd}");
    let cwd = rustix::fs::CWD;
    match rustix::fs::linkat(cwd, proc.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW) {
        Err(Errno::NOENT | Errno::PERM | Errno::ACCESS) => {
            NO_TMPFILE.store(true, Ordering::Relaxed);
            Err(Errno::NOENT)
        }
        other => other,
    }
}

/// Replaces an existing `rel` with the unnamed `file`: linked in under a temporary name
/// (a stale one is removed first) and renamed over it.
fn replace_with(root: &Root, rel: &RelPath, dir: &Dir, file: &File) -> Result<(), FsError> {
    let name = rel.file_name();
    let tmp = temp_name(name);
    let err = |op| io_err(root, rel, op);
    let linked = match link_in(file, dir, &tmp) {
        Err(Errno::EXIST) => {
            dir.remove_file(&tmp).map_err(err(Op::Remove))?;
            link_in(file, dir, &tmp)
        }
        other => other,
    };
    linked.map_err(|e| err(Op::Rename)(e.into()))?;
    let renamed = rename_into_place(root.path(), rel, dir, &tmp, name, Clobber::Replace);
    if renamed.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    renamed
}

/// The temporary-name path: write `.NAME.sluice-part`, set mode and mtime, rename over
/// `rel` (the temporary is removed on failure).
fn write_named(
    root: &Root,
    rel: &RelPath,
    dir: &Dir,
    data: &[u8],
    (mode, mtime_ns): (u32, i64),
    fsync: bool,
    clobber: Clobber,
) -> Result<(), FsError> {
    let name = rel.file_name();
    refuse_if_exists(root, dir, rel, name, clobber)?;
    let tmp = temp_name(name);
    let err = |op| io_err(root, rel, op);
    let mut o = open_opts(false, true);
    o.create_new(true).mode(0o600);
    let file = match dir.open_with(&tmp, &o) {
        // A stale partial of an earlier run: remove it (only then: no failing unlinkat).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            dir.remove_file(&tmp).map_err(err(Op::Remove))?;
            dir.open_with(&tmp, &o)
        }
        other => other,
    }
    .map_err(err(Op::Create))?
    .into_std();
    let result = (|| {
        (&file).write_all(data).map_err(err(Op::Write))?;
        set_mode_and_mtime(&file, mode, mtime_ns)
            .map_err(|(op, e)| root.err(op, rel.as_str(), e))?;
        if fsync {
            file.sync_all().map_err(err(Op::Sync))?;
        }
        rename_into_place(root.path(), rel, dir, &tmp, name, clobber)?;
        if fsync {
            sync_dir(dir).map_err(err(Op::Sync))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

fn sync_dir(dir: &Dir) -> std::io::Result<()> {
    open_dir_fd(dir, ".").and_then(|d| d.sync_all())
}
