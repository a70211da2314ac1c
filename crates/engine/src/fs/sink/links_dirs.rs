//! Symlinks and directories, and the `--update` comparison.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;

use cap_fs_ext::{DirExt, SystemTimeSpec};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt};
use sluice_wire::RelPath;

use super::super::error::{FsError, Op};
use super::super::root::{system_time_of, EntryKind, Root};
use super::{
    io_err, open_dir_fd, refuse_if_exists, remove_if_exists, rename_into_place, set_mode_and_mtime,
    temp_name, Clobber,
};

/// Creates the symlink `rel` → `target` (stored verbatim, never followed or checked:
/// it may point anywhere, it is only data) with mtime `mtime_ns`, via a temporary name
/// and a rename.
///
/// # Errors
/// [`FsError::AlreadyExists`] with [`Clobber::Refuse`]; [`FsError::Io`].
pub fn make_symlink(
    root: &Root,
    rel: &RelPath,
    target: &str,
    mtime_ns: i64,
    clobber: Clobber,
) -> Result<(), FsError> {
    let (dir, name) = root.parent_of(rel, true)?;
    refuse_if_exists(root, &dir, rel, name, clobber)?;
    let tmp = temp_name(name);
    let err = |op| io_err(root, rel, op);
    remove_if_exists(&dir, &tmp).map_err(err(Op::Remove))?;
    dir.symlink_contents(target, &tmp)
        .map_err(err(Op::CreateSymlink))?;
    let result = (|| {
        let t = SystemTimeSpec::Absolute(cap_std::time::SystemTime::from_std(system_time_of(
            mtime_ns,
        )));
        dir.set_symlink_times(&tmp, None, Some(t))
            .map_err(err(Op::SetTimes))?;
        rename_into_place(root.path(), rel, &dir, &tmp, name, clobber)
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

/// Creates the directory `rel` (and missing parents) or accepts an existing one, and
/// gives it `mode | 0o700` so that its contents can be written; [`finish_dir`] sets the
/// exact mode and the mtime once the contents are done.
///
/// # Errors
/// [`FsError::WrongKind`] if `rel` exists and is not a directory (a symlink to one
/// included); [`FsError::Io`].
pub fn make_dir(root: &Root, rel: &RelPath, mode: u32) -> Result<(), FsError> {
    let (dir, name) = root.parent_of(rel, true)?;
    let writable = (mode & 0o7777) | 0o700;
    let mut b = DirBuilder::new();
    b.mode(writable);
    match dir.create_dir_with(name, &b) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(root.err(Op::CreateDir, rel.as_str(), e)),
    }
    let d = open_dir_nofollow(root, &dir, rel, name)?;
    // The umask applied at creation; set the bits exactly.
    d.set_permissions(std::fs::Permissions::from_mode(writable))
        .map_err(|e| root.err(Op::SetMode, rel.as_str(), e))
}

fn open_dir_nofollow(root: &Root, dir: &Dir, rel: &RelPath, name: &str) -> Result<File, FsError> {
    match open_dir_fd(dir, name) {
        Ok(d) => Ok(d),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) => {
            let found = match dir.symlink_metadata(name) {
                Ok(m) => super::super::error::kind_name(&m.file_type()),
                Err(_) => "not a directory",
            };
            Err(root.wrong_kind(Op::Open, rel, found, "a directory"))
        }
        Err(e) => Err(root.err(Op::Open, rel.as_str(), e)),
    }
}

/// Sets a received directory's exact permission bits and mtime; call it after its
/// contents are written (writing inside a directory changes its mtime).
///
/// # Errors
/// [`FsError::WrongKind`] if `rel` is not a directory; [`FsError::Io`].
pub fn finish_dir(root: &Root, rel: &RelPath, mode: u32, mtime_ns: i64) -> Result<(), FsError> {
    let (dir, name) = root.parent_of(rel, false)?;
    let d = open_dir_nofollow(root, &dir, rel, name)?;
    set_mode_and_mtime(&d, mode, mtime_ns).map_err(|(op, e)| root.err(op, rel.as_str(), e))
}

/// For `--update`: whether `rel` is a regular file of `size` bytes with mtime
/// `mtime_ns` (so it need not be sent). Any error (missing, unreadable) is `false`.
pub fn same_size_and_mtime(root: &Root, rel: &RelPath, size: u64, mtime_ns: i64) -> bool {
    root.entry_metadata(rel)
        .is_ok_and(|m| m.kind == EntryKind::File && m.size == size && m.mtime_ns == mtime_ns)
}
