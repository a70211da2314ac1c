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

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};

use cap_fs_ext::{
    DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt, SystemTimeSpec,
};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, OpenOptions, OpenOptionsExt};
use sluice_wire::{chunk_checksum, chunk_count, chunk_range, RelPath};

use super::error::{FsError, Op};
use super::partial_log::{self, Header, HEADER_BYTES, RECORD_BYTES};
use super::root::{system_time_of, EntryKind, Root};

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

/// A file being received: a preallocated temporary file that several writer threads
/// fill with [`SinkFile::write_at`], and its resume log.
///
/// Dropping it without [`SinkFile::finish`] is [`SinkFile::abandon`]: the partial and its
/// log stay for a later resume; the destination is untouched.
#[derive(Debug)]
pub struct SinkFile {
    root: std::path::PathBuf,
    rel: RelPath,
    dir: Dir,
    name: String,
    tmp: String,
    log_name: String,
    file: File,
    /// The same file opened with `O_DIRECT` ([`SinkFile::use_direct`]): whole aligned
    /// blocks of a chunk go through it straight from the buffer slot to the device.
    direct: Option<File>,
    log: File,
    size: u64,
    clobber: Clobber,
}

/// Alignment of `O_DIRECT` buffers, offsets and lengths: the page size, a multiple of
/// every logical block size in use.
const DIRECT_ALIGN: usize = 4096;

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

/// tmpfs and ramfs: memory, not blocks.
const MEMORY_FS_MAGIC: [i64; 2] = [0x0102_1994, 0x8584_58f6];

/// Makes `file` `size` bytes long, with blocks allocated where the file system can
/// (`fallocate`), else by `ftruncate` (sparse). On tmpfs there are no blocks to keep
/// contiguous and `fallocate` only front-loads page allocation (about half a second per
/// GiB here, stalling the receiver at the file's first chunk): there the free space is
/// checked instead, so a file that cannot fit still fails before any byte is written.
fn preallocate(file: &File, size: u64) -> std::io::Result<()> {
    if size == 0 {
        return Ok(());
    }
    if let Ok(st) = rustix::fs::fstatfs(file) {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        if MEMORY_FS_MAGIC.contains(&(st.f_type as i64)) {
            #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
            let free = (st.f_bavail as u64).saturating_mul(st.f_bsize as u64);
            if free < size && st.f_blocks != 0 {
                return Err(std::io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                ));
            }
            return file.set_len(size);
        }
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP)
        | Err(rustix::io::Errno::NOSYS)
        | Err(rustix::io::Errno::INVAL) => file.set_len(size),
        Err(e) => Err(e.into()),
    }
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

/// An existing partial, its log, and the chunks that verified.
type Resumed = (File, File, Vec<(u64, u64)>);

impl SinkFile {
    /// Prepares `rel` to receive `incoming`: creates missing parent directories, then
    /// either resumes the existing partial (with [`ResumeMode::Resume`], if its log was
    /// written for the same size, mtime and chunk size) or starts a fresh one, truncated
    /// and preallocated to `incoming.size`.
    ///
    /// Returns the file and the chunks it already holds, `(index, checksum)` sorted by
    /// index, each re-read and verified (empty when fresh). Verification reads each
    /// logged chunk once into one buffer of `chunk_bytes`.
    ///
    /// # Errors
    /// [`FsError::AlreadyExists`] with [`Clobber::Refuse`] if `rel` exists;
    /// [`FsError::OutsideRoot`], [`FsError::WrongKind`] for a parent that is not a
    /// directory; [`FsError::Io`] (e.g. `ENOSPC` from preallocation).
    pub fn create(
        root: &Root,
        rel: &RelPath,
        incoming: Incoming,
        resume: ResumeMode,
        clobber: Clobber,
    ) -> Result<(SinkFile, Vec<(u64, u64)>), FsError> {
        let (dir, name) = root.parent_of(rel, true)?;
        refuse_if_exists(root, &dir, rel, name, clobber)?;
        let tmp = temp_name(name);
        let log_name = format!("{tmp}{LOG_SUFFIX}");
        let header = Header {
            chunk_bytes: incoming.chunk_bytes,
            size: incoming.size,
            mtime_ns: incoming.mtime_ns,
        };
        let make = |dir: Dir, file: File, log: File| SinkFile {
            root: root.path().to_path_buf(),
            rel: rel.clone(),
            dir,
            name: name.to_owned(),
            tmp: tmp.clone(),
            log_name: log_name.clone(),
            file,
            direct: None,
            log,
            size: incoming.size,
            clobber,
        };
        if resume == ResumeMode::Resume {
            if let Some((file, log, held)) =
                Self::try_resume(root, rel, &dir, &tmp, &log_name, &header)?
            {
                return Ok((make(dir, file, log), held));
            }
        }
        let err = |op| io_err(root, rel, op);
        remove_if_exists(&dir, &log_name).map_err(err(Op::Remove))?;
        remove_if_exists(&dir, &tmp).map_err(err(Op::Remove))?;
        let mut o = open_opts(true, true);
        o.create_new(true).mode(0o600);
        let file = dir.open_with(&tmp, &o).map_err(err(Op::Create))?.into_std();
        if let Err(e) = preallocate(&file, incoming.size) {
            // Nothing worth resuming (e.g. ENOSPC): leave nothing behind.
            let _ = dir.remove_file(&tmp);
            return Err(err(Op::Preallocate)(e));
        }
        let mut o = open_opts(true, false);
        o.append(true).create_new(true).mode(0o600);
        let mut log = dir
            .open_with(&log_name, &o)
            .map_err(err(Op::Create))?
            .into_std();
        log.write_all(&partial_log::encode_header(&header))
            .map_err(err(Op::Write))?;
        Ok((make(dir, file, log), Vec::new()))
    }

    /// Opens an existing partial and its log if they match `header`; verifies the
    /// logged chunks. `None`: nothing usable, start fresh.
    fn try_resume(
        root: &Root,
        rel: &RelPath,
        dir: &Dir,
        tmp: &str,
        log_name: &str,
        header: &Header,
    ) -> Result<Option<Resumed>, FsError> {
        let err = |op| io_err(root, rel, op);
        let file = match dir.open_with(tmp, &open_opts(true, true)) {
            Ok(f) => f.into_std(),
            Err(_) => return Ok(None),
        };
        let meta = file.metadata().map_err(err(Op::Stat))?;
        if !meta.is_file() || meta.len() != header.size {
            return Ok(None);
        }
        let mut o = open_opts(true, false);
        o.append(true);
        let log = match dir.open_with(log_name, &o) {
            Ok(f) => f.into_std(),
            Err(_) => return Ok(None),
        };
        let mut head = [0u8; HEADER_BYTES];
        if log.read_exact_at(&mut head, 0).is_err()
            || partial_log::decode_header(&head) != Some(*header)
        {
            return Ok(None);
        }
        // Read records until the first torn or corrupt one.
        let chunks = chunk_count(header.size, header.chunk_bytes);
        let mut records = Vec::new();
        let mut buf = vec![0u8; RECORD_BYTES * 2730];
        let mut at = HEADER_BYTES as u64;
        'read: loop {
            let n = read_full_at(&log, &mut buf, at).map_err(err(Op::Read))?;
            let whole = n - n % RECORD_BYTES;
            for rec in buf[..whole].chunks_exact(RECORD_BYTES) {
                match partial_log::decode_record(rec) {
                    Some((index, sum)) if index < chunks => records.push((index, sum)),
                    _ => break 'read,
                }
                at += RECORD_BYTES as u64;
            }
            if n < buf.len() {
                break;
            }
        }
        // Drop a torn tail so that new records follow valid ones.
        log.set_len(at).map_err(err(Op::Write))?;
        let records = partial_log::last_per_index(records);
        let mut held = Vec::with_capacity(records.len());
        if !records.is_empty() {
            let cap = u64::from(header.chunk_bytes).min(header.size);
            let mut data = vec![0u8; usize::try_from(cap).unwrap_or(0)];
            for (index, sum) in records {
                let Some((offset, len)) = chunk_range(header.size, header.chunk_bytes, index)
                else {
                    continue;
                };
                let chunk = &mut data[..len as usize];
                match file.read_exact_at(chunk, offset) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => continue,
                    Err(e) => return Err(root.err(Op::Read, rel.as_str(), e)),
                }
                if chunk_checksum(chunk) == sum {
                    held.push((index, sum));
                }
            }
        }
        Ok(Some((file, log, held)))
    }

    /// The destination path.
    pub fn path(&self) -> &RelPath {
        &self.rel
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The temporary file, for callers that drive their own I/O on it.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// From now on, writes whole aligned blocks with `O_DIRECT`: DMA from the caller's
    /// buffer to the device, no copy into the page cache and no write-back later (what
    /// is left unaligned, a file's tail, still goes through the page cache).
    ///
    /// # Errors
    /// The file system refuses `O_DIRECT` (`EINVAL`) or the partial cannot be reopened;
    /// writes then keep going through the page cache.
    pub fn use_direct(&mut self) -> std::io::Result<()> {
        let mut o = open_opts(false, true);
        OpenOptionsExt::custom_flags(&mut o, libc::O_DIRECT);
        let f = self.dir.open_with(&self.tmp, &o)?.into_std();
        // The name could have been replaced since it was created: write only to the
        // file this `SinkFile` made.
        let (a, b) = (self.file.metadata()?, f.metadata()?);
        if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
            return Err(std::io::Error::other("the partial was replaced"));
        }
        self.direct = Some(f);
        Ok(())
    }

    /// Writes `data` at `offset` (`pwrite`, looping until all is written). Takes `&self`:
    /// writer threads share one `SinkFile`. After [`SinkFile::use_direct`], the whole
    /// 4 KiB blocks of a page-aligned `data` at an aligned `offset` are written with
    /// `O_DIRECT` and only the rest through the page cache.
    ///
    /// # Errors
    /// [`FsError::OutOfRange`] past the announced size; [`FsError::Io`].
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let len = data.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(FsError::OutOfRange {
                path: self.rel.as_str().to_owned(),
                root: self.root.clone(),
                offset,
                len,
                size: self.size,
            });
        }
        let err = |e| FsError::io(Op::Write, &self.root, self.rel.as_str(), e);
        let mut done = 0;
        if let Some(direct) = &self.direct {
            let aligned =
                offset % DIRECT_ALIGN as u64 == 0 && (data.as_ptr() as usize) % DIRECT_ALIGN == 0;
            let body = data.len() / DIRECT_ALIGN * DIRECT_ALIGN;
            if aligned && body > 0 {
                match direct.write_all_at(&data[..body], offset) {
                    Ok(()) => done = body,
                    // A device with larger blocks than we align to: the page cache takes it.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    Err(e) => return Err(err(e)),
                }
            }
        }
        self.file
            .write_all_at(&data[done..], offset + done as u64)
            .map_err(err)
    }

    /// Records that chunk `index`, whose original bytes have `checksum`, was written.
    /// Call it after the chunk's [`SinkFile::write_at`]. One append, not synced.
    ///
    /// # Errors
    /// [`FsError::Io`] if the log cannot be written.
    pub fn record_chunk(&self, index: u64, checksum: u64) -> Result<(), FsError> {
        (&self.log)
            .write_all(&partial_log::encode_record(index, checksum))
            .map_err(|e| FsError::io(Op::Write, &self.root, &self.log_path(), e))
    }

    fn log_path(&self) -> String {
        match self.rel.parent() {
            Some(p) => format!("{p}/{}", self.log_name),
            None => self.log_name.clone(),
        }
    }

    /// Completes the file: with `fsync`, syncs its data; sets the permission bits (`mode
    /// & 0o7777`) and mtime; renames it over the destination (refusing to replace with
    /// [`Clobber::Refuse`]); with `fsync`, syncs the directory; removes the log.
    ///
    /// # Errors
    /// [`FsError`]; the partial and its log are kept for resume and the destination is
    /// untouched when the error comes before the rename.
    pub fn finish(self, mode: u32, mtime_ns: i64, fsync: bool) -> Result<(), FsError> {
        let err = |op, e| FsError::io(op, &self.root, self.rel.as_str(), e);
        if fsync {
            self.file.sync_all().map_err(|e| err(Op::Sync, e))?;
        }
        set_mode_and_mtime(&self.file, mode, mtime_ns).map_err(|(op, e)| err(op, e))?;
        rename_into_place(
            &self.root,
            &self.rel,
            &self.dir,
            &self.tmp,
            &self.name,
            self.clobber,
        )?;
        if fsync {
            open_dir_fd(&self.dir, ".")
                .and_then(|d| d.sync_all())
                .map_err(|e| err(Op::Sync, e))?;
        }
        if let Err(e) = self.dir.remove_file(&self.log_name) {
            tracing::warn!(path = %self.log_path(), error = %e, "cannot remove a finished file's resume log");
        }
        Ok(())
    }

    /// Stops without completing: the partial and its log stay for resume. (Dropping the
    /// `SinkFile` does the same.)
    pub fn abandon(self) {}

    /// Stops and removes the partial and its log (nothing in them is worth resuming);
    /// the destination is untouched. Best effort: a file that cannot be removed stays.
    pub fn discard(self) {
        let _ = remove_if_exists(&self.dir, &self.tmp);
        let _ = remove_if_exists(&self.dir, &self.log_name);
    }

    /// Whether `rel` has a partial file to resume from (a cheap `lstat`).
    pub fn has_partial(root: &Root, rel: &RelPath) -> bool {
        let tmp = temp_name(rel.file_name());
        let partial = match rel.parent() {
            Some(p) => format!("{}/{tmp}", p.as_str()),
            None => tmp,
        };
        RelPath::parse(&partial).is_ok_and(|p| root.exists(&p).unwrap_or(false))
    }
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns bytes read.
fn read_full_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes a whole small file (one of a packed chunk's segments): to a temporary name,
/// then mode, mtime, optional `fsync`, and a rename over `rel`, so a failure never
/// leaves a half file at the destination (the temporary is removed on failure).
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
    let (dir, name) = root.parent_of(rel, true)?;
    refuse_if_exists(root, &dir, rel, name, clobber)?;
    let tmp = temp_name(name);
    let err = |op| io_err(root, rel, op);
    remove_if_exists(&dir, &tmp).map_err(err(Op::Remove))?;
    let mut o = open_opts(false, true);
    o.create_new(true).mode(0o600);
    let file = dir.open_with(&tmp, &o).map_err(err(Op::Create))?.into_std();
    let result = (|| {
        (&file).write_all(data).map_err(err(Op::Write))?;
        set_mode_and_mtime(&file, mode, mtime_ns)
            .map_err(|(op, e)| root.err(op, rel.as_str(), e))?;
        if fsync {
            file.sync_all().map_err(err(Op::Sync))?;
        }
        rename_into_place(root.path(), rel, &dir, &tmp, name, clobber)?;
        if fsync {
            open_dir_fd(&dir, ".")
                .and_then(|d| d.sync_all())
                .map_err(err(Op::Sync))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

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
                Ok(m) => super::error::kind_name(&m.file_type()),
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

/// Sets only a directory's mtime (mode unchanged); see [`finish_dir`].
///
/// # Errors
/// As [`finish_dir`].
pub fn set_dir_times(root: &Root, rel: &RelPath, mtime_ns: i64) -> Result<(), FsError> {
    let (dir, name) = root.parent_of(rel, false)?;
    let d = open_dir_nofollow(root, &dir, rel, name)?;
    d.set_times(std::fs::FileTimes::new().set_modified(system_time_of(mtime_ns)))
        .map_err(|e| root.err(Op::SetTimes, rel.as_str(), e))
}

/// For `--update`: whether `rel` is a regular file of `size` bytes with mtime
/// `mtime_ns` (so it need not be sent). Any error (missing, unreadable) is `false`.
pub fn same_size_and_mtime(root: &Root, rel: &RelPath, size: u64, mtime_ns: i64) -> bool {
    root.entry_metadata(rel)
        .is_ok_and(|m| m.kind == EntryKind::File && m.size == size && m.mtime_ns == mtime_ns)
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

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
        let n = 3 * CB as usize + 1000;
        let mut buf = vec![0u8; n + DIRECT_ALIGN];
        let at = buf.as_ptr().align_offset(DIRECT_ALIGN);
        let d = &mut buf[at..at + n];
        d.copy_from_slice(&data(n));
        let inc = Incoming {
            size: n as u64,
            mtime_ns: 5,
            chunk_bytes: CB,
        };
        let p = rel("direct.bin");
        let (mut f, _) =
            SinkFile::create(&root, &p, inc, ResumeMode::Fresh, Clobber::Replace).unwrap();
        if let Err(e) = f.use_direct() {
            // The test's file system refuses O_DIRECT: nothing to prove here.
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            eprintln!("skipped: O_DIRECT refused under {}", root.path().display());
            return;
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
        let (f, held) =
            SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
        assert!(held.is_empty());
        assert_eq!(
            std::fs::metadata(root.path().join("dir/sub/.big.bin.sluice-part"))
                .unwrap()
                .len(),
            d.len() as u64
        );
        write_chunks(&f, &d, &[0, 2]);
        drop(f); // crash-like
        let (f, held) =
            SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
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
        let (f, held) =
            SinkFile::create(&root, &p, inc, ResumeMode::Resume, Clobber::Replace).unwrap();
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
    fn small_files_symlinks_and_dirs() {
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
        set_dir_times(&root, &rel("ro"), 10_000_000_000).unwrap();
        assert_eq!(
            std::fs::metadata(root.path().join("ro")).unwrap().mtime(),
            10
        );
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
}
