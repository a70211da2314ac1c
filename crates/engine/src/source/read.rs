//! Reading one piece of work into a slot: a large file's chunk (through the page cache,
//! or `O_DIRECT` where asked and supported) or a pack of small files. Where the session
//! may send from the page cache (clear text, no compression), a large file's chunk is
//! only checksummed here, read through a small scratch buffer, and left where it is.

use super::dispatch::InFile;
use super::packs::PackReads;
use crate::sched::{SrcFile, Work};
use crossbeam_channel::Sender;
use sluice_buffers::Slot;
use sluice_wire::{chunk_checksum, ChunkChecksum, ChunkFlags, ChunkHeader, Segment};
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
    /// Where chunks read through the page cache are checksummed a piece at a time and
    /// then sent from the page cache ([`InFile`]); `None`: they are read into the slot.
    scratch: Option<Box<[u8]>>,
}

/// The scratch a chunk left in the page cache is checksummed through: small enough to
/// stay in the core's L2 cache between the read that fills it and the hash that reads
/// it, large enough that a 4 MiB chunk takes 16 reads.
pub(super) const SCRATCH_BYTES: usize = 256 << 10;

impl OpenFile {
    /// `in_place`: chunks read through the page cache are sent from it.
    pub(super) fn new(direct: bool, stride: u64, in_place: bool) -> OpenFile {
        OpenFile {
            direct,
            stride,
            current: None,
            scratch: in_place.then(|| vec![0; SCRATCH_BYTES].into_boxed_slice()),
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

/// A piece of work read: its chunk header, and where its payload is when it was left in
/// the page cache (else it is in the slot).
pub(super) type Readout = (ChunkHeader, Option<InFile>);

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
/// the thread's `packs` scratch); returns its chunk header, and where its payload is
/// when it was left in the page cache (`slot` then stays empty). Files that cannot be
/// read are reported failed and left out.
pub(super) fn read_work(
    work: &Work,
    open: &mut OpenFile,
    packs: &mut PackReads,
    slot: &mut Slot,
    segments: &mut Vec<Segment>,
    failures: Failures<'_>,
) -> Option<Readout> {
    match work {
        Work::Chunk {
            file, offset, len, ..
        } => read_chunk(file, *offset, *len, open, slot, failures),
        Work::Pack(files) => read_pack(files, packs, slot, segments, failures).map(|h| (h, None)),
    }
}

fn read_chunk(
    file: &SrcFile,
    offset: u64,
    chunk_len: u32,
    open: &mut OpenFile,
    slot: &mut Slot,
    failures: Failures<'_>,
) -> Option<Readout> {
    let len = chunk_len as usize;
    let result = open
        .get(file)
        .map_err(|e| e.to_string())
        .and_then(|(f, direct)| {
            let read = match (direct, open.scratch.as_deref_mut()) {
                (true, _) => read_direct_at(&f, slot, len, offset).map(|()| None),
                (false, Some(scratch)) => checksum_at(&f, scratch, len, offset).map(Some),
                (false, None) => read_full_at(&f, &mut slot[..len], offset).map(|()| None),
            };
            read.map(|sum| (f, sum))
                .map_err(|e| format!("reading {:?} at {offset}: {e}", file.src_path.as_str()))
        });
    match result {
        Ok((f, Some(checksum))) => {
            open.prefetch(file.size, offset, chunk_len);
            slot.set_filled(0);
            let last = offset + u64::from(chunk_len) >= file.size;
            let header = ChunkHeader::plain_checked(file.id, offset, len, checksum, last);
            Some((header, Some(InFile { file: f, offset })))
        }
        Ok((_, None)) => {
            open.prefetch(file.size, offset, chunk_len);
            slot.set_filled(len);
            Some((chunk_header(file, offset, slot), None))
        }
        Err(msg) => {
            failures.fail(file, &msg);
            None
        }
    }
}

/// The checksum of the `len` bytes of `f` at `offset`, read `scratch` at a time (each
/// piece hashed while it is in the cache); the bytes stay in the page cache, from
/// where they are sent. A file shorter than that is an error.
fn checksum_at(f: &File, scratch: &mut [u8], len: usize, offset: u64) -> std::io::Result<u64> {
    debug_assert!(!scratch.is_empty(), "a scratch to read through");
    let mut sum = ChunkChecksum::new();
    let mut done = 0;
    while done < len {
        let piece = (len - done).min(scratch.len());
        read_full_at(f, &mut scratch[..piece], offset + done as u64)?;
        sum.update(&scratch[..piece]);
        done += piece;
    }
    Ok(sum.value())
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
/// A file in memory (tmpfs, which takes `O_DIRECT` since Linux 6.6 and copies all the
/// same) is read through the page cache: synchronous reads, no ring, fewer slots in
/// flight, and its chunks can be sent from there.
fn open_chunk_file(file: &SrcFile, direct: bool) -> Result<(File, bool), crate::fs::FsError> {
    static NO_DIRECT: std::sync::Once = std::sync::Once::new();
    if direct {
        match file.root.open_read_direct(&file.src_path) {
            Ok(f) if crate::fs::memory_fs(&f).is_some() => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::layout::{SingleTarget, TargetId};
    use crate::fs::Root;
    use sluice_wire::RelPath;

    /// A file of `len` bytes under a fresh root, scanned at `size` bytes.
    fn scanned(dir: &std::path::Path, len: usize, size: usize) -> (Arc<SrcFile>, Vec<u8>) {
        let bytes: Vec<u8> = (0..len)
            .map(|i| u8::try_from(i * 13 % 241).expect("a byte"))
            .collect();
        std::fs::write(dir.join("big"), &bytes).expect("write");
        let file = Arc::new(SrcFile {
            id: 3,
            root: Arc::new(Root::open(dir).expect("root")),
            src_path: RelPath::parse("big").expect("path"),
            size: size as u64,
            layout: Arc::new(SingleTarget(TargetId(0))),
        });
        (file, bytes)
    }

    fn read(
        open: &mut OpenFile,
        file: &Arc<SrcFile>,
        offset: u64,
        len: u32,
    ) -> (Option<Readout>, Vec<u8>, Vec<ReadFailure>) {
        let pool =
            Arc::new(sluice_buffers::BufferPool::new(None, 1 << 20, 1 << 20).expect("a pool"));
        let mut slot = pool.try_acquire().expect("a slot");
        let (tx, rx) = crossbeam_channel::unbounded();
        let work = Work::Chunk {
            file: Arc::clone(file),
            index: offset / u64::from(len),
            offset,
            len,
            target: None,
        };
        let got = read_work(
            &work,
            open,
            &mut PackReads::default(),
            &mut slot,
            &mut Vec::new(),
            Failures { to_master: &tx },
        );
        (got, slot.filled_bytes().to_vec(), rx.try_iter().collect())
    }

    /// Asked for `O_DIRECT`, a file in memory is read through the page cache (tmpfs
    /// copies either way); one on a disk's file system that takes `O_DIRECT` is not.
    #[test]
    fn a_file_in_memory_is_read_through_the_page_cache_even_when_direct_is_asked() {
        let Some(in_memory) = crate::testing::in_memory_dir() else {
            return;
        };
        let (file, _) = scanned(in_memory.path(), 8192, 8192);
        let (_, direct) = open_chunk_file(&file, true).expect("open");
        assert!(!direct, "tmpfs: through the page cache");
        let on_disk = tempfile::tempdir().expect("tempdir");
        let (file, _) = scanned(on_disk.path(), 8192, 8192);
        let disk_takes_direct = file.root.open_read_direct(&file.src_path).is_ok();
        let memory = crate::fs::memory_fs(&std::fs::File::open(on_disk.path()).expect("dir"));
        if disk_takes_direct && memory.is_none() {
            let (_, direct) = open_chunk_file(&file, true).expect("open");
            assert!(direct, "a disk that takes O_DIRECT is read with it");
        } else {
            crate::testing::skip("the temp dir is in memory or refuses O_DIRECT here", true);
        }
    }

    #[test]
    fn a_chunk_left_in_the_page_cache_has_the_header_a_chunk_read_into_its_slot_has() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Three reads of the scratch and a part of one.
        let len = 3 * SCRATCH_BYTES + 1000;
        let (file, bytes) = scanned(dir.path(), 2 * len, 2 * len);
        let mut in_place = OpenFile::new(false, 1, true);
        let mut into_slot = OpenFile::new(false, 1, false);
        let len32 = u32::try_from(len).expect("a chunk length");
        for start in [0, len] {
            let offset = u64::try_from(start).expect("an offset");
            let (got, slot, failed) = read(&mut in_place, &file, offset, len32);
            assert!(failed.is_empty(), "{failed:?}");
            let (header, in_file) = got.expect("read");
            let in_file = in_file.expect("left in the page cache");
            assert_eq!(in_file.offset, offset);
            assert!(slot.is_empty(), "nothing copied into the slot");
            let part = &bytes[start..start + len];
            assert_eq!(header, ChunkHeader::plain(3, offset, part, offset > 0));
            let (copied, slot, _) = read(&mut into_slot, &file, offset, len32);
            let (copied, none) = copied.expect("read");
            assert!(none.is_none());
            assert_eq!(copied, header, "the same header either way");
            assert_eq!(slot, part);
        }
    }

    #[test]
    fn a_chunk_left_in_the_page_cache_of_a_file_shorter_than_scanned_fails_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, _) = scanned(dir.path(), SCRATCH_BYTES + 10, 2 * SCRATCH_BYTES);
        let mut open = OpenFile::new(false, 1, true);
        let len = u32::try_from(2 * SCRATCH_BYTES).expect("a chunk length");
        let (got, _, failed) = read(&mut open, &file, 0, len);
        assert!(got.is_none());
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0].1.contains("shorter than when it was scanned"),
            "{failed:?}"
        );
    }
}
