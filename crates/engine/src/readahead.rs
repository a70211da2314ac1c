//! Large-file reads kept in flight with io_uring (seed 002's I/O-centric pipeline).
//!
//! With `O_DIRECT` there is no kernel readahead: a thread that reads one chunk, then
//! checksums and sends it, leaves the disk idle meanwhile and keeps at most one request
//! queued. Adding threads deepens the queue but costs context switches on a machine with
//! few cores (and the same threads copying from the page cache contend for them). So each
//! io-read thread keeps up to `depth` chunk reads submitted to its own ring and checksums
//! and sends whichever finishes: the disk always has work queued, the thread does CPU work
//! in the meantime, and the slots being read into are the pool's, bounded like any other.
//!
//! A read's slot is held by the ring until its completion has been reaped; dropping a
//! [`ReadAhead`] waits for every read still in flight, so no slot returns to its pool
//! while the kernel may still write into it.

use crate::sched::Work;
use io_uring::{opcode, types, IoUring};
use sluice_buffers::Slot;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// `O_DIRECT` wants offsets, lengths and buffers aligned to the logical block size; 4 KiB
/// covers every device in use.
const ALIGN: usize = 4096;

/// A read the ring is doing: the chunk's work, the slot it lands in and the open file.
#[derive(Debug)]
pub struct Pending {
    /// What the scheduler handed out (always [`Work::Chunk`]).
    pub work: Work,
    /// The slot the chunk is read into.
    pub slot: Slot,
    file: Arc<File>,
    offset: u64,
    /// Bytes of the chunk (the file's end may make the last one short).
    len: usize,
    /// Bytes read so far.
    done: usize,
}

/// How a read ended: the whole chunk is in its slot, or why not.
pub type Finished = Result<Pending, (Pending, io::Error)>;

/// One io-read thread's ring and the reads in flight on it.
pub struct ReadAhead {
    ring: IoUring,
    /// In flight, indexed by the completion's `user_data`.
    pending: Vec<Option<Pending>>,
    in_flight: usize,
    /// Completions reaped, (user_data, result): room for `depth`, reused.
    reaped: Vec<(u64, i32)>,
}

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead")
            .field("depth", &self.pending.len())
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl ReadAhead {
    /// A ring for up to `depth` reads at once.
    ///
    /// # Errors
    /// The kernel refused io_uring (too old, disabled by `kernel.io_uring_disabled`, a
    /// seccomp filter): reads then go one at a time.
    pub fn new(depth: u32) -> io::Result<ReadAhead> {
        let depth = depth.max(1);
        let ring = IoUring::new(depth.next_power_of_two())?;
        Ok(ReadAhead {
            ring,
            pending: (0..depth).map(|_| None).collect(),
            in_flight: 0,
            reaped: Vec::with_capacity(depth as usize),
        })
    }

    /// Whether another read may start.
    pub fn has_room(&self) -> bool {
        self.in_flight < self.pending.len()
    }

    /// Reads in flight.
    pub fn in_flight(&self) -> u32 {
        u32::try_from(self.in_flight).unwrap_or(u32::MAX)
    }

    /// Whether no read is in flight.
    pub fn is_empty(&self) -> bool {
        self.in_flight == 0
    }

    /// Starts reading chunk `work` (a [`Work::Chunk`] of `file`, opened with `O_DIRECT`)
    /// into `slot`. On error the work and slot come back, for a read done otherwise.
    ///
    /// # Errors
    /// The ring is full, the work is not a chunk, or the submission failed.
    pub fn start(
        &mut self,
        work: Work,
        slot: Slot,
        file: Arc<File>,
    ) -> Result<(), (Work, Slot, io::Error)> {
        let (offset, len) = match &work {
            Work::Chunk { offset, len, .. } => (*offset, *len as usize),
            Work::Pack(_) => return Err((work, slot, io::Error::other("not a chunk"))),
        };
        let Some(free) = self.pending.iter().position(Option::is_none) else {
            return Err((work, slot, io::Error::other("no room for another read")));
        };
        let mut p = Pending {
            work,
            slot,
            file,
            offset,
            len,
            done: 0,
        };
        if let Err(e) = self.submit(free, &mut p) {
            return Err((p.work, p.slot, e));
        }
        self.pending[free] = Some(p);
        self.in_flight += 1;
        Ok(())
    }

    /// Queues the rest of `p`'s read (from `p.done`) as entry `index` and submits it.
    fn submit(&mut self, index: usize, p: &mut Pending) -> io::Result<()> {
        let want = p.len.div_ceil(ALIGN) * ALIGN;
        if !p.done.is_multiple_of(ALIGN) || want > p.slot.len() {
            return Err(io::Error::other(format!(
                "a direct read of {} bytes at {} cannot continue at byte {}",
                p.len, p.offset, p.done
            )));
        }
        let dst = &mut p.slot[p.done..want];
        let entry = opcode::Read::new(
            types::Fd(p.file.as_raw_fd()),
            dst.as_mut_ptr(),
            u32::try_from(dst.len()).map_err(io::Error::other)?,
        )
        .offset(p.offset + p.done as u64)
        .build()
        .user_data(index as u64);
        // SAFETY: the buffer is `p.slot`'s memory, which lies in its pool's mapping and
        // stays valid and exclusively ours until the completion is reaped: the `Pending`
        // (holding the slot, and the file whose descriptor the entry names) is stored in
        // `self.pending` until `complete` takes it out after its completion, and `Drop`
        // reaps every completion before anything is freed. Moving the `Slot` handle does
        // not move the memory it points to.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        self.ring.submit()?;
        Ok(())
    }

    /// Waits until at least one read has finished and hands every finished one to
    /// `each`: with its slot filled (`filled()` = the chunk's length), or with the error.
    /// A read cut short (by a signal, a device limit) is continued first.
    ///
    /// # Errors
    /// Waiting on the ring failed.
    pub fn complete(&mut self, mut each: impl FnMut(Finished)) -> io::Result<()> {
        if self.in_flight == 0 {
            return Ok(());
        }
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // At most `depth` completions: the vector keeps its first capacity.
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.clear();
        reaped.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(user_data, result) in &reaped {
            let index = usize::try_from(user_data).unwrap_or(usize::MAX);
            let Some(mut p) = self.pending.get_mut(index).and_then(Option::take) else {
                continue;
            };
            self.in_flight -= 1;
            let outcome = match usize::try_from(result) {
                Err(_) => Err(io::Error::from_raw_os_error(-result)),
                Ok(0) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file is shorter than when it was scanned",
                )),
                Ok(n) => {
                    p.done += n;
                    if p.done >= p.len {
                        p.done = p.len;
                        Ok(())
                    } else {
                        // Short, and not at the file's end: read the rest.
                        match self.submit(index, &mut p) {
                            Ok(()) => {
                                self.pending[index] = Some(p);
                                self.in_flight += 1;
                                continue;
                            }
                            Err(e) => Err(e),
                        }
                    }
                }
            };
            match outcome {
                Ok(()) => {
                    p.slot.set_filled(p.len);
                    each(Ok(p));
                }
                Err(e) => each(Err((p, e))),
            }
        }
        self.reaped = reaped;
        Ok(())
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Reap every read still in flight before the slots go back to their pools.
        while self.in_flight > 0 {
            if self.complete(drop).is_err() {
                // The ring cannot be waited on: keep the slots out of their pools for
                // ever rather than let the kernel write into memory reused elsewhere.
                for p in self.pending.iter_mut().filter_map(Option::take) {
                    std::mem::forget(p.slot);
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Root, SingleTarget, TargetId};
    use crate::sched::SrcFile;
    use sluice_wire::RelPath;
    use std::io::Write;

    fn pool(slots: u32, slot_bytes: usize) -> Arc<sluice_buffers::BufferPool> {
        Arc::new(
            sluice_buffers::BufferPool::new(None, u64::from(slots) * slot_bytes as u64, slot_bytes)
                .expect("a pool"),
        )
    }

    fn src(dir: &std::path::Path, size: u64) -> Arc<SrcFile> {
        Arc::new(SrcFile {
            id: 1,
            root: Arc::new(Root::open(dir).expect("root")),
            src_path: RelPath::parse("f").expect("path"),
            size,
            layout: Arc::new(SingleTarget(TargetId(0))),
        })
    }

    fn direct(path: &std::path::Path) -> Option<File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()
    }

    #[test]
    fn reads_in_flight_arrive_whole_in_their_slots_including_a_short_last_chunk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let chunk = 64 << 10;
        let size = 5 * chunk + 1234; // the last chunk is short and unaligned
        let data: Vec<u8> = (0..size)
            .map(|i| u8::try_from(i * 7 % 251).expect("a byte"))
            .collect();
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&data))
            .expect("write");
        let Some(file) = direct(&path) else {
            crate::testing::skip(&format!("no O_DIRECT on {}", dir.path().display()), false);
            return;
        };
        let Ok(mut ahead) = ReadAhead::new(4) else {
            crate::testing::skip(
                "no io_uring here (a container's seccomp profile may refuse it)",
                true,
            );
            return;
        };
        let file = Arc::new(file);
        let src = src(dir.path(), size as u64);
        let pool = pool(8, chunk);
        let mut got = vec![Vec::new(); 6];
        let mut next = 0usize;
        while next < 6 || !ahead.is_empty() {
            while next < 6 && ahead.has_room() {
                let work = Work::Chunk {
                    file: Arc::clone(&src),
                    index: next as u64,
                    offset: (next * chunk) as u64,
                    len: u32::try_from(chunk.min(size - next * chunk)).expect("len"),
                    target: None,
                };
                let slot = pool.try_acquire().expect("a slot");
                ahead
                    .start(work, slot, Arc::clone(&file))
                    .map_err(|(_, _, e)| e)
                    .expect("started");
                next += 1;
            }
            ahead
                .complete(|r| {
                    let p = r.map_err(|(_, e)| e).expect("read");
                    let Work::Chunk { index, .. } = p.work else {
                        panic!("a chunk")
                    };
                    got[usize::try_from(index).expect("index")] = p.slot.filled_bytes().to_vec();
                })
                .expect("complete");
        }
        assert_eq!(got.concat(), data);
        assert_eq!(pool.stats().free, 8, "every slot back in the pool");
    }

    #[test]
    fn a_file_shorter_than_scanned_is_an_error_and_dropping_reaps_reads_in_flight() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 8192]).expect("write");
        let Some(file) = direct(&path) else {
            crate::testing::skip(&format!("no O_DIRECT on {}", dir.path().display()), false);
            return;
        };
        let Ok(mut ahead) = ReadAhead::new(2) else {
            crate::testing::skip(
                "no io_uring here (a container's seccomp profile may refuse it)",
                true,
            );
            return;
        };
        let file = Arc::new(file);
        let src = src(dir.path(), 64 << 10);
        let pool = pool(4, 64 << 10);
        let chunk = |offset: u64| Work::Chunk {
            file: Arc::clone(&src),
            index: offset / (16 << 10),
            offset,
            len: 16 << 10,
            target: None,
        };
        // Past the end: nothing to read.
        ahead
            .start(
                chunk(32 << 10),
                pool.try_acquire().expect("slot"),
                Arc::clone(&file),
            )
            .map_err(|(_, _, e)| e)
            .expect("started");
        let mut errors = 0;
        ahead
            .complete(|r| {
                let (_, e) = r.expect_err("short");
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
                errors += 1;
            })
            .expect("complete");
        assert_eq!(errors, 1);
        // A read left in flight is reaped by drop; its slot then returns.
        ahead
            .start(chunk(0), pool.try_acquire().expect("slot"), file)
            .map_err(|(_, _, e)| e)
            .expect("started");
        drop(ahead);
        assert_eq!(pool.stats().free, 4);
    }
}
