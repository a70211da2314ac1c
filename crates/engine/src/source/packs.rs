//! Packs of small files read a batch at a time, with the disk kept busy.
//!
//! A pack holds hundreds of small files. Read one `pread` after another, a cold cache
//! waits for the disk once per file, one request at a time: on the kernel tree read
//! from disk the readers were busy 93-94 % of a push, almost all of it waiting. So a
//! reader opens up to [`BATCH`] files of the pack and first asks each for its bytes
//! with `preadv2(RWF_NOWAIT)`: what the page cache holds is copied at once, and a file
//! it does not hold answers `EAGAIN` with its readahead already started. Only then are
//! those read with a plain `preadv`, which waits for what is still on its way: the disk
//! has had the whole batch queued. On the page cache the cost is what it was, one read
//! a file. A file system without `RWF_NOWAIT` (tmpfs, which holds everything in memory
//! anyway) answers `EOPNOTSUPP` once, and the thread then reads each file in turn.
//!
//! io_uring was tried first: on tmpfs, which cannot read without blocking, it handed
//! every read to a kernel worker thread, and the context switches cost more than the
//! reads.
//!
//! Each read asks for one byte more than the scanned size, into a byte of its own (the
//! next file's first byte is the next file's): a file that grew since the scan fails
//! instead of being cut short, with no `fstat`.

use super::read::Failures;
use crate::sched::SrcFile;
use rustix::io::{Errno, ReadWriteFlags};
use sluice_buffers::Slot;
use sluice_wire::Segment;
use std::fs::File;
use std::io::{self, IoSliceMut};
use std::sync::Arc;

/// Files opened and asked for their bytes together at most.
const BATCH: usize = 32;

/// A page of the page cache (4 KiB divides every page size): a read the cache cuts
/// short stops at a multiple of it.
const PAGE: usize = 4096;

/// One io-read thread's scratch for a batch, sized once.
#[derive(Debug)]
pub(super) struct PackReads {
    /// The batch's open files and how far each read got (`None`: failed, reported).
    open: Vec<Option<(File, Read)>>,
    /// Each read's byte past the file's scanned end.
    past_end: Vec<u8>,
    /// Whether the source's file system answers `RWF_NOWAIT` (until it says it cannot).
    nowait: bool,
}

/// How far a file's read got in the first pass.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// These bytes are in (its size + 1: the file is longer than scanned).
    Done(usize),
    /// These bytes are in and the rest is on its way from the disk.
    Started(usize),
}

impl Default for PackReads {
    fn default() -> Self {
        PackReads {
            open: (0..BATCH).map(|_| None).collect(),
            past_end: vec![0; BATCH],
            nowait: true,
        }
    }
}

impl PackReads {
    /// Reads `files` back to back into `slot` from byte 0, [`BATCH`] at a time, each
    /// segment pushed onto `segments`; files that cannot be read are reported to
    /// `failures` and left out (the segments after them close up). Returns the bytes
    /// filled.
    pub(super) fn read(
        &mut self,
        files: &[Arc<SrcFile>],
        slot: &mut Slot,
        segments: &mut Vec<Segment>,
        failures: Failures<'_>,
    ) -> usize {
        let mut filled = 0;
        for batch in files.chunks(BATCH) {
            filled = self.batch(batch, slot, filled, segments, failures);
        }
        filled
    }

    /// One batch placed from `at` on: opened and asked for (pass 1), then finished,
    /// checked and closed up in order (pass 2); the bytes filled after it.
    fn batch(
        &mut self,
        batch: &[Arc<SrcFile>],
        slot: &mut Slot,
        at: usize,
        segments: &mut Vec<Segment>,
        failures: Failures<'_>,
    ) -> usize {
        debug_assert!(batch.len() <= BATCH);
        let places = places(batch, at, slot.len());
        for (i, f) in batch.iter().enumerate() {
            self.open[i] = None;
            let Some(place) = places[i] else {
                failures.fail(f, "grew past the pack while being read");
                continue;
            };
            let h = match f.root.open_read_scanned(&f.src_path) {
                Ok(h) => h,
                Err(e) => {
                    failures.fail(f, &e.to_string());
                    continue;
                }
            };
            let dst = &mut slot[place..place + len(f)];
            match self.start(&h, dst, i) {
                Ok(read) => self.open[i] = Some((h, read)),
                Err(e) => failures.fail(f, &reading(f, &e)),
            }
        }
        let mut end = at;
        for (i, f) in batch.iter().enumerate() {
            let (Some((h, read)), Some(place)) = (self.open[i].take(), places[i]) else {
                continue;
            };
            let n = len(f);
            let got = match read {
                Read::Done(got) => Ok(got),
                Read::Started(from) => {
                    finish(&h, &mut slot[place..place + n], &mut self.past_end[i], from)
                }
            };
            match got.map_err(|e| reading(f, &e)) {
                Ok(got) if got == n => {
                    slot.copy_within(place..place + n, end);
                    end += n;
                    segments.push(Segment {
                        file_id: f.id,
                        len: u32::try_from(n).unwrap_or(u32::MAX),
                    });
                }
                Ok(got) => failures.fail(f, &changed_size(f, got)),
                Err(msg) => failures.fail(f, &msg),
            }
        }
        end
    }

    /// Pass 1 for open file `h` (batch index `i`) into `dst`: what the page cache holds
    /// now, with the rest's readahead started; where `RWF_NOWAIT` is not supported,
    /// the whole read.
    fn start(&mut self, h: &File, dst: &mut [u8], i: usize) -> io::Result<Read> {
        if self.nowait {
            let past_end = std::slice::from_mut(&mut self.past_end[i]);
            let want = dst.len();
            let mut bufs = [IoSliceMut::new(dst), IoSliceMut::new(past_end)];
            match rustix::io::preadv2(h, &mut bufs, 0, ReadWriteFlags::NOWAIT) {
                // A read cut short by the cache stops at a page boundary, so one that
                // ends inside a page ended at the file's end.
                Ok(n) if n > want || (n == want && !want.is_multiple_of(PAGE)) => {
                    return Ok(Read::Done(n))
                }
                Ok(n) if n > 0 => return Ok(Read::Started(n)),
                // Nothing yet (or the file is empty): the blocking read tells.
                Ok(_) | Err(Errno::AGAIN | Errno::INTR) => return Ok(Read::Started(0)),
                Err(Errno::OPNOTSUPP) => self.nowait = false,
                Err(e) => return Err(e.into()),
            }
        }
        finish(h, dst, &mut self.past_end[i], 0).map(Read::Done)
    }
}

/// Why a file whose read failed with `e` is left out of its pack.
fn reading(f: &SrcFile, e: &io::Error) -> String {
    format!("reading {:?}: {e}", f.src_path.as_str())
}

/// Why a file read to `got` bytes is left out of its pack.
fn changed_size(f: &SrcFile, got: usize) -> String {
    let more = if got as u64 > f.size { " or more" } else { "" };
    format!(
        "{:?} changed size during the transfer ({} -> {got}{more} bytes)",
        f.src_path.as_str(),
        f.size
    )
}

/// Where each file of `batch` lands in a slot of `room` bytes when they follow one
/// another from `at` (`None`: past the slot's end).
fn places(batch: &[Arc<SrcFile>], at: usize, room: usize) -> [Option<usize>; BATCH] {
    let mut places = [None; BATCH];
    let mut next = at;
    for (place, f) in places.iter_mut().zip(batch) {
        let end = usize::try_from(f.size)
            .ok()
            .and_then(|n| next.checked_add(n));
        if let Some(end) = end.filter(|&e| e <= room) {
            *place = Some(next);
            next = end;
        }
    }
    places
}

/// A packed file's length (its scanned size; `places` has checked that it fits).
fn len(f: &SrcFile) -> usize {
    usize::try_from(f.size).unwrap_or(usize::MAX)
}

/// Reads `h` from byte `from` until `dst` is full and one byte more into `past_end`, or
/// the file ends; the bytes read in all (`dst.len() + 1`: the file is longer).
fn finish(h: &File, dst: &mut [u8], past_end: &mut u8, from: usize) -> io::Result<usize> {
    let mut done = from;
    loop {
        let (_, rest) = dst.split_at_mut(done);
        let mut bufs = [
            IoSliceMut::new(rest),
            IoSliceMut::new(std::slice::from_mut(past_end)),
        ];
        match rustix::io::preadv(h, &mut bufs, done as u64) {
            Ok(0) => return Ok(done),
            Ok(n) => done += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if done >= dst.len() {
            return Ok(done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Root, SingleTarget, TargetId};
    use crate::source::read::ReadFailure;
    use sluice_wire::RelPath;
    use std::os::fd::AsFd;

    /// Bytes of file `i` (`n` of them), distinct per file.
    fn content(i: usize, n: usize) -> Vec<u8> {
        (0..n)
            .map(|k| u8::try_from((k * 31 + i * 7) % 251).expect("a byte"))
            .collect()
    }

    /// `count` files of sizes 0.. in `dir`, each scanned at `scanned(i, size)`; the
    /// files as the scan saw them, and what each holds.
    fn tree(
        dir: &std::path::Path,
        count: usize,
        scanned: impl Fn(usize, usize) -> usize,
    ) -> (Vec<Arc<SrcFile>>, Vec<Vec<u8>>) {
        let root = Arc::new(Root::open(dir).expect("root"));
        let mut files = Vec::new();
        let mut bytes = Vec::new();
        for i in 0..count {
            let size = (i * 977) % 9000;
            let data = content(i, size);
            let name = format!("f{i:03}");
            std::fs::write(dir.join(&name), &data).expect("write");
            files.push(Arc::new(SrcFile {
                id: i as u64 + 1,
                root: Arc::clone(&root),
                src_path: RelPath::parse(&name).expect("path"),
                size: scanned(i, size) as u64,
                layout: Arc::new(SingleTarget(TargetId(0))),
            }));
            bytes.push(data);
        }
        (files, bytes)
    }

    /// Reads `files` as one pack: the slot's bytes, the segments and the failures.
    fn read(
        packs: &mut PackReads,
        files: &[Arc<SrcFile>],
    ) -> (Vec<u8>, Vec<Segment>, Vec<ReadFailure>) {
        let pool =
            Arc::new(sluice_buffers::BufferPool::new(None, 1 << 20, 1 << 20).expect("a pool"));
        let mut slot = pool.try_acquire().expect("a slot");
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut segments = Vec::new();
        let failures = Failures { to_master: &tx };
        let filled = packs.read(files, &mut slot, &mut segments, failures);
        (slot[..filled].to_vec(), segments, rx.try_iter().collect())
    }

    #[test]
    fn a_pack_of_several_batches_arrives_in_order_with_the_files_that_failed_left_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let count = 3 * BATCH + 5;
        // File 7 grew after the scan, file 40 shrank, file 70 is gone.
        let (files, bytes) = tree(dir.path(), count, |i, size| match i {
            7 => size - 10,
            40 => size + 3,
            _ => size,
        });
        std::fs::remove_file(dir.path().join("f070")).expect("remove");
        let mut packs = PackReads::default();
        let (got, segments, failed) = read(&mut packs, &files);
        let left: Vec<usize> = (0..count).filter(|i| ![7, 40, 70].contains(i)).collect();
        let want: Vec<u8> = left.iter().flat_map(|&i| bytes[i].clone()).collect();
        assert_eq!(got, want, "the bytes of every other file, back to back");
        let ids: Vec<u64> = segments.iter().map(|s| s.file_id).collect();
        let want_ids: Vec<u64> = left.iter().map(|&i| i as u64 + 1).collect();
        assert_eq!(ids, want_ids);
        for (s, &i) in segments.iter().zip(&left) {
            assert_eq!(s.len as usize, bytes[i].len(), "file {i}");
        }
        let failed: Vec<(u64, &str)> = failed.iter().map(|(id, m)| (*id, m.as_str())).collect();
        assert_eq!(failed.len(), 3, "{failed:?}");
        assert_eq!(failed[0].0, 8);
        assert!(
            failed[0].1.contains("changed size") && failed[0].1.contains("or more"),
            "{failed:?}"
        );
        assert_eq!(failed[1].0, 41);
        assert!(
            failed[1].1.contains("changed size") && !failed[1].1.contains("or more"),
            "{failed:?}"
        );
        assert_eq!(failed[2].0, 71);
        // The scratch is reused: a second pack reads the same way.
        let (again, _, _) = read(&mut packs, &files[..BATCH]);
        let first: Vec<u8> = (0..BATCH)
            .filter(|&i| i != 7)
            .flat_map(|i| bytes[i].clone())
            .collect();
        assert_eq!(again, first);
    }

    #[test]
    fn files_out_of_the_page_cache_are_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (files, bytes) = tree(dir.path(), BATCH + 3, |_, size| size);
        for f in &files {
            let h = std::fs::File::open(dir.path().join(f.src_path.as_str())).expect("open");
            h.sync_all().expect("sync");
            // Dropped from the cache where the file system can (not tmpfs): its first
            // read answers EAGAIN and the second waits for it.
            let _ = rustix::fs::fadvise(h.as_fd(), 0, None, rustix::fs::Advice::DontNeed);
        }
        let mut packs = PackReads::default();
        let (got, segments, failed) = read(&mut packs, &files);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(segments.len(), files.len());
        assert_eq!(got, bytes.concat());
    }
}
