//! Reading one piece of work into a slot: a large file's chunk (through the page cache,
//! or `O_DIRECT` where asked and supported) or a pack of small files.

use super::packs::PackReads;
use crate::sched::{SrcFile, Work};
use crossbeam_channel::Sender;
use sluice_buffers::Slot;
use sluice_wire::{chunk_checksum, ChunkFlags, ChunkHeader, Segment};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A reader's open large file: kept while its chunks keep coming (one `open` per file,
/// not per chunk, and the kernel's readahead state survives), with the next chunk this
/// reader is likely to take asked for ahead (`POSIX_FADV_WILLNEED`), so the disk reads
/// it while this one is checksummed and sent.
pub(super) struct OpenFile {
    direct: bool,
    /// Chunks between this reader's successive chunks of a file (the reader count).
    stride: u64,
    current: Option<(u64, Arc<File>, bool)>,
}

impl OpenFile {
    pub(super) fn new(direct: bool, stride: u64) -> OpenFile {
        OpenFile {
            direct,
            stride,
            current: None,
        }
    }

    /// The open file for `file` (a handle a read in flight can keep while this reader
    /// moves on to another file), and whether it reads with `O_DIRECT`.
    pub(super) fn get(&mut self, file: &SrcFile) -> Result<(Arc<File>, bool), crate::fs::FsError> {
        let current = match self.current.take() {
            Some(c) if c.0 == file.id => c,
            _ => {
                let (f, direct) = open_chunk_file(file, self.direct)?;
                (file.id, Arc::new(f), direct)
            }
        };
        let (_, f, direct) = self.current.insert(current);
        Ok((Arc::clone(f), *direct))
    }

    /// Asks the kernel to start reading the chunk after `offset`+`len` this reader will
    /// likely take next (advice only: a failure changes nothing).
    fn prefetch(&self, size: u64, offset: u64, len: u32) {
        let Some((_, f, false)) = &self.current else {
            return;
        };
        let next = offset.saturating_add(u64::from(len).saturating_mul(self.stride));
        if next < size {
            let _ = rustix::fs::fadvise(
                f,
                next,
                std::num::NonZeroU64::new(u64::from(len)),
                rustix::fs::Advice::WillNeed,
            );
        }
    }
}

/// A file the data path could not read: its id and why. The master hands it to the
/// session core, which ends the file (tells the sink, cancels the rest, counts it).
pub(super) type ReadFailure = (u64, String);

/// Read failures queued for the master at most.
pub(super) const READ_FAILURES_QUEUED: usize = 4096;

/// Where a reader reports a file it cannot read: to the master, and to the log.
#[derive(Clone, Copy)]
pub(super) struct Failures<'a> {
    pub(super) to_master: &'a Sender<ReadFailure>,
}

impl Failures<'_> {
    pub(super) fn fail(&self, file: &SrcFile, msg: &str) {
        tracing::warn!("{msg}");
        // Never blocks a reader: the master drains the queue while files are in
        // flight, and it holds more than the reads that can be in flight at once.
        if let Err(e) = self.to_master.try_send((file.id, msg.to_string())) {
            tracing::debug!(
                "file {} failed after the session's files ended: {e}",
                file.id
            );
        }
    }
}

/// Reads one piece of work into `slot` (a pack's segment list into `segments`, with
/// the thread's `packs` scratch); returns its chunk header. Files that cannot be read
/// are reported failed and left out.
pub(super) fn read_work(
    work: &Work,
    open: &mut OpenFile,
    packs: &mut PackReads,
    slot: &mut Slot,
    segments: &mut Vec<Segment>,
    failures: Failures<'_>,
) -> Option<ChunkHeader> {
    match work {
        Work::Chunk {
            file, offset, len, ..
        } => read_chunk(file, *offset, *len, open, slot, failures),
        Work::Pack(files) => read_pack(files, packs, slot, segments, failures),
    }
}

fn read_chunk(
    file: &SrcFile,
    offset: u64,
    chunk_len: u32,
    open: &mut OpenFile,
    slot: &mut Slot,
    failures: Failures<'_>,
) -> Option<ChunkHeader> {
    let len = chunk_len as usize;
    let result = open
        .get(file)
        .map_err(|e| e.to_string())
        .and_then(|(f, direct)| {
            if direct {
                read_direct_at(&f, slot, len, offset)
            } else {
                read_full_at(&f, &mut slot[..len], offset)
            }
            .map_err(|e| format!("reading {:?} at {offset}: {e}", file.src_path.as_str()))
        });
    match result {
        Ok(()) => {
            open.prefetch(file.size, offset, chunk_len);
            slot.set_filled(len);
            Some(chunk_header(file, offset, slot))
        }
        Err(msg) => {
            failures.fail(file, &msg);
            None
        }
    }
}

/// Reads small files back to back into `slot` ([`PackReads`]); those that cannot be
/// read are left out (the pack is `None` if none could).
fn read_pack(
    files: &[Arc<SrcFile>],
    packs: &mut PackReads,
    slot: &mut Slot,
    segments: &mut Vec<Segment>,
    failures: Failures<'_>,
) -> Option<ChunkHeader> {
    let filled = packs.read(files, slot, segments, failures);
    let first = segments.first()?.file_id;
    slot.set_filled(filled);
    let mut header = ChunkHeader::plain(first, 0, slot.filled_bytes(), true);
    header.flags.set(ChunkFlags::PACKED, true);
    header.segments = u16::try_from(segments.len()).unwrap_or(u16::MAX);
    header.checksum = chunk_checksum(slot.filled_bytes());
    Some(header)
}

/// The header of chunk `offset` of `file`, read into `slot` (its checksum computed now).
pub(super) fn chunk_header(file: &SrcFile, offset: u64, slot: &Slot) -> ChunkHeader {
    let last = offset + slot.filled() as u64 >= file.size;
    ChunkHeader::plain(file.id, offset, slot.filled_bytes(), last)
}

/// Opens a large file's chunk source: with `O_DIRECT` when asked and supported (one
/// warning per process when the file system refuses it), else through the page cache.
fn open_chunk_file(file: &SrcFile, direct: bool) -> Result<(File, bool), crate::fs::FsError> {
    static NO_DIRECT: std::sync::Once = std::sync::Once::new();
    if direct {
        match file.root.open_read_direct(&file.src_path) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.io_error().and_then(std::io::Error::raw_os_error) == Some(libc::EINVAL) => {
                NO_DIRECT.call_once(|| {
                    tracing::warn!(
                        "--direct: {} does not support O_DIRECT; reading through the page cache",
                        file.root.path().display()
                    );
                });
            }
            Err(e) => return Err(e),
        }
    }
    file.root.open_read(&file.src_path).map(|f| (f, false))
}

/// An `O_DIRECT` read of `len` bytes at `offset` (a multiple of the chunk size, so
/// aligned) into the page-aligned slot: the length is rounded up to the page size and
/// the file's end returns the short count.
fn read_direct_at(f: &File, slot: &mut Slot, len: usize, offset: u64) -> std::io::Result<()> {
    const ALIGN: usize = 4096;
    let want = len.div_ceil(ALIGN) * ALIGN;
    let dst = slot
        .get_mut(..want)
        .ok_or_else(|| std::io::Error::other("chunk larger than its slot"))?;
    let mut done = 0;
    while done < len {
        match f.read_at(&mut dst[done..], offset + done as u64) {
            Ok(0) => return Err(shorter_than_scanned()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// pread until `dst` is full; a short file is an error.
fn read_full_at(f: &File, dst: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        match f.read_at(&mut dst[done..], offset) {
            Ok(0) => return Err(shorter_than_scanned()),
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn shorter_than_scanned() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the file is shorter than when it was scanned",
    )
}
