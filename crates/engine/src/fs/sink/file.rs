//! [`SinkFile`]: a large file received into a preallocated partial, chunk by chunk, from
//! several writer threads, then renamed into place.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};

use cap_std::fs::{Dir, OpenOptionsExt};
use sluice_wire::RelPath;

use super::super::error::{FsError, Op};
use super::super::partial_log::{self, Header};
use super::super::root::Root;
use super::{
    io_err, open_dir_fd, open_opts, partial, refuse_if_exists, remove_if_exists, rename_into_place,
    set_mode_and_mtime, temp_name, Clobber, Incoming, ResumeMode, LOG_SUFFIX,
};

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
pub(super) const DIRECT_ALIGN: usize = 4096;

/// Makes `file` `size` bytes long, with blocks allocated where the file system can
/// (`fallocate`), else by `ftruncate` (sparse). On tmpfs there are no blocks to keep
/// contiguous and `fallocate` only front-loads page allocation (about half a second per
/// GiB here, stalling the receiver at the file's first chunk): there the free space is
/// checked instead, so a file that cannot fit still fails before any byte is written.
fn preallocate(file: &File, size: u64) -> std::io::Result<()> {
    if size == 0 {
        return Ok(());
    }
    if let Some(free) = crate::fs::memory_fs(file) {
        if free.is_some_and(|free| free < size) {
            return Err(std::io::Error::from_raw_os_error(
                rustix::io::Errno::NOSPC.raw_os_error(),
            ));
        }
        return file.set_len(size);
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP)
        | Err(rustix::io::Errno::NOSYS)
        | Err(rustix::io::Errno::INVAL) => file.set_len(size),
        Err(e) => Err(e.into()),
    }
}

/// Creates `name` with `o` (which has `create_new`); a stale one of an earlier run is
/// removed first, only when there is one (no failing `unlinkat` per file).
fn create_new_over_stale(
    dir: &Dir,
    name: &str,
    o: &cap_std::fs::OpenOptions,
) -> std::io::Result<cap_std::fs::File> {
    match dir.open_with(name, o) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            remove_if_exists(dir, name)?;
            dir.open_with(name, o)
        }
        other => other,
    }
}

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
                partial::try_resume(root, rel, &dir, (&tmp, &log_name), &header)?
            {
                return Ok((make(dir, file, log), held));
            }
        }
        let err = |op| io_err(root, rel, op);
        let mut o = open_opts(true, true);
        o.create_new(true).mode(0o600);
        let file = create_new_over_stale(&dir, &tmp, &o)
            .map_err(err(Op::Create))?
            .into_std();
        if let Err(e) = preallocate(&file, incoming.size) {
            // Nothing worth resuming (e.g. ENOSPC): leave nothing behind.
            let _ = dir.remove_file(&tmp);
            return Err(err(Op::Preallocate)(e));
        }
        let mut o = open_opts(true, false);
        o.append(true).create_new(true).mode(0o600);
        let mut log = create_new_over_stale(&dir, &log_name, &o)
            .map_err(err(Op::Create))?
            .into_std();
        log.write_all(&partial_log::encode_header(&header))
            .map_err(err(Op::Write))?;
        Ok((make(dir, file, log), Vec::new()))
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
    /// is left unaligned, a file's tail, still goes through the page cache). Returns
    /// whether it does: not for a file in memory (tmpfs, which takes `O_DIRECT` since
    /// Linux 6.6 and copies such a write as it does any other; there is no device to
    /// bypass the page cache to).
    ///
    /// # Errors
    /// The file system refuses `O_DIRECT` (`EINVAL`) or the partial cannot be reopened;
    /// writes then keep going through the page cache.
    pub fn use_direct(&mut self) -> std::io::Result<bool> {
        if super::super::memory_fs(&self.file).is_some() {
            return Ok(false);
        }
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
        Ok(true)
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
            let aligned = offset.is_multiple_of(DIRECT_ALIGN as u64)
                && (data.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN);
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
    ///
    /// Takes `&self`: the thread that completes a file need not wait for another writer
    /// to drop its handle (all chunks are in, so any such writer is done, or rewriting
    /// bytes that are already there).
    pub fn finish(&self, mode: u32, mtime_ns: i64, fsync: bool) -> Result<(), FsError> {
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
}
