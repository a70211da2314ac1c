//! The sink's writers: large files through a [`SinkFile`] (temporary name, resume log,
//! atomic rename), small files, symlinks and directories.
//!
//! # Crash safety
//! Nothing is ever written at a destination path. A file is written as
//! `.NAME.sluice-part` in the destination's directory and renamed over `NAME` only when
//! complete (and, with `fsync`, durable), so a reader sees the old file or the new one,
//! never a half. A failure before the rename leaves the previous destination untouched
//! and keeps the partial and its log (`.NAME.sluice-part.log`) for `--resume`.
//!
//! # Resume
//! The log records `(chunk index, checksum)` for each chunk written (see
//! `partial_log`); [`SinkFile::create`] with [`ResumeMode::Resume`] re-reads every logged
//! chunk from the partial and reports only those whose bytes still match. A log written
//! for another version of the source (size, mtime or chunk size differ) is discarded.
//!
//! # No-clobber
//! With [`Clobber::Refuse`] the rename uses `renameat2(RENAME_NOREPLACE)`, so a
//! destination created meanwhile is not replaced either (on file systems without it, an
//! existence check just before the rename is the fallback).

mod file;
mod links_dirs;
mod partial;
mod small;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use sluice_wire::{chunk_checksum, RelPath};

use super::error::{FsError, Op};
use super::root::{system_time_of, Root};

pub use file::SinkFile;
pub use links_dirs::{finish_dir, make_dir, make_symlink, same_size_and_mtime};
pub use small::{write_small_file, SmallWriter};

/// Suffix of a partial file's name (after a leading `.` and the destination's name).
pub const PART_SUFFIX: &str = ".sluice-part";
/// Suffix added to the partial's name for its resume log.
pub const LOG_SUFFIX: &str = ".log";

/// Whether to continue an existing partial file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeMode {
    /// Discard any partial and start from nothing.
    Fresh,
    /// Keep the chunks of an existing partial that still verify.
    Resume,
}

/// What to do when the destination exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clobber {
    /// Replace it (atomically, by rename).
    Replace,
    /// Fail with [`FsError::AlreadyExists`].
    Refuse,
}

/// The source file a [`SinkFile`] receives: its size and mtime (recorded in the resume
/// log, so that a partial of another version is not resumed) and the session's chunk size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incoming {
    /// Bytes.
    pub size: u64,
    /// Modification time of the source, ns since the epoch.
    pub mtime_ns: i64,
    /// The session's chunk size (a valid one, see `sluice_wire::is_valid_chunk_bytes`).
    pub chunk_bytes: u32,
}

/// The temporary name of `name` while it is written: `.NAME.sluice-part`. Names too
/// long for that (and the log's extra suffix) within 255 bytes are cut and made unique
/// with a hash: `.CUT~HASH16.sluice-part`.
pub fn temp_name(name: &str) -> String {
    const MAX_NAME: usize = 255;
    let room = MAX_NAME - 1 - PART_SUFFIX.len() - LOG_SUFFIX.len();
    if name.len() <= room {
        return format!(".{name}{PART_SUFFIX}");
    }
    let mut cut = room - 17;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = chunk_checksum(name.as_bytes());
    format!(".{}~{hash:016x}{PART_SUFFIX}", &name[..cut])
}

/// Whether `name` is a partial file or resume log of this module (the scanner skips them).
pub fn is_partial_name(name: &str) -> bool {
    name.starts_with('.')
        && (name.ends_with(PART_SUFFIX) || name.ends_with(&format!("{PART_SUFFIX}{LOG_SUFFIX}")))
}

fn io_err<'a>(
    root: &'a Root,
    rel: &'a RelPath,
    op: Op,
) -> impl FnOnce(std::io::Error) -> FsError + 'a {
    let rel = rel.as_str();
    move |e| root.err(op, rel, e)
}

/// Removes `name` from `dir`; a missing file is fine.
fn remove_if_exists(dir: &Dir, name: &str) -> std::io::Result<()> {
    match dir.remove_file(name) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn refuse_if_exists(
    root: &Root,
    dir: &Dir,
    rel: &RelPath,
    name: &str,
    clobber: Clobber,
) -> Result<(), FsError> {
    if clobber == Clobber::Refuse {
        match dir.symlink_metadata(name) {
            Ok(_) => {
                return Err(FsError::AlreadyExists {
                    path: rel.as_str().to_owned(),
                    root: root.path().to_path_buf(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(root.err(Op::Stat, rel.as_str(), e)),
        }
    }
    Ok(())
}

/// Renames `tmp` over `name` in `dir`; with [`Clobber::Refuse`], never replaces.
fn rename_into_place(
    root: &std::path::Path,
    rel: &RelPath,
    dir: &Dir,
    tmp: &str,
    name: &str,
    clobber: Clobber,
) -> Result<(), FsError> {
    let exists = || FsError::AlreadyExists {
        path: rel.as_str().to_owned(),
        root: root.to_path_buf(),
    };
    let res = match clobber {
        Clobber::Replace => dir.rename(tmp, dir, name),
        Clobber::Refuse => {
            match rustix::fs::renameat_with(dir, tmp, dir, name, rustix::fs::RenameFlags::NOREPLACE)
            {
                Ok(()) => Ok(()),
                Err(rustix::io::Errno::EXIST) => return Err(exists()),
                Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {
                    if dir.symlink_metadata(name).is_ok() {
                        return Err(exists());
                    }
                    dir.rename(tmp, dir, name)
                }
                Err(e) => Err(e.into()),
            }
        }
    };
    res.map_err(|e| FsError::io(Op::Rename, root, rel.as_str(), e))
}

fn set_mode_and_mtime(file: &File, mode: u32, mtime_ns: i64) -> Result<(), (Op, std::io::Error)> {
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| (Op::SetMode, e))?;
    file.set_times(std::fs::FileTimes::new().set_modified(system_time_of(mtime_ns)))
        .map_err(|e| (Op::SetTimes, e))
}

/// Opens the directory `name` in `dir` as a readable descriptor (not `O_PATH`), so that
/// it can be `fchmod`ed, `futimens`ed and `fsync`ed; a symlink is not followed.
fn open_dir_fd(dir: &Dir, name: &str) -> std::io::Result<File> {
    let mut o = open_opts(true, false);
    o.maybe_dir(true);
    OpenOptionsExt::custom_flags(&mut o, libc::O_DIRECTORY);
    dir.open_with(name, &o).map(cap_std::fs::File::into_std)
}

fn open_opts(read: bool, write: bool) -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(read).write(write).follow(FollowSymlinks::No);
    o
}

#[cfg(test)]
mod tests;
