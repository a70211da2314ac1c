//! The source's master scheduler (seed 000's MT): hands chunk work to I/O threads.
//!
//! Large files are cut into file-relative chunks; small files are packed back to back
//! into one chunk (seed 002's "large virtual file"). Chunks of the active large files are
//! fed, round-robin over files, into a [`LayoutScheduler`] that hands the next read to
//! the storage target (block device, Lustre OST) with the fewest reads in flight (LADS's
//! layout-aware scheduling, seed 000), so no OST or disk is hammered while another idles.
//! Memory is bounded: at most [`MAX_ACTIVE_FILES`] large files, [`PENDING_CHUNKS`] chunks
//! and [`MAX_QUEUED_PACKS`] packs wait here; the master stops scanning while it is full.

use crate::fs::layout::{Layout, LayoutScheduler, TargetId, WorkItem};
use crate::fs::Root;
use sluice_wire::{chunk_count, chunk_range, ChunkSet, RelPath, MAX_PACK_SEGMENTS};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Large files waiting for readers at most.
pub const MAX_ACTIVE_FILES: usize = 256;
/// Full packs waiting for readers at most.
pub const MAX_QUEUED_PACKS: usize = 64;
/// Chunks handed to the layout scheduler ahead of the readers.
pub const PENDING_CHUNKS: usize = 256;

/// A source file being sent.
#[derive(Debug)]
pub struct SrcFile {
    /// Session file id.
    pub id: u64,
    /// The root it is read from.
    pub root: Arc<Root>,
    /// Its path under that root.
    pub src_path: RelPath,
    /// Size at scan time.
    pub size: u64,
    /// Where its bytes live (block device, Lustre OSTs).
    pub layout: Arc<dyn Layout>,
}

/// One unit of work for an I/O thread.
#[derive(Debug)]
pub enum Work {
    /// Chunk `index` of a large file.
    Chunk {
        /// The file.
        file: Arc<SrcFile>,
        /// Chunk index.
        index: u64,
        /// File-relative offset.
        offset: u64,
        /// Bytes.
        len: u32,
        /// Storage target to report `done` for; `None` for a retry, which is not counted.
        target: Option<u32>,
    },
    /// Several small whole files, back to back.
    Pack(Vec<Arc<SrcFile>>),
}

#[derive(Debug)]
struct Active {
    file: Arc<SrcFile>,
    next: u64,
    count: u64,
    skip: Option<ChunkSet>,
}

#[derive(Debug)]
struct State {
    retries: VecDeque<Work>,
    /// Large files with chunks not yet handed to `layout`.
    files: VecDeque<Active>,
    /// Files with chunks pending in `layout`, and how many.
    pending: HashMap<u64, (Arc<SrcFile>, u32)>,
    layout: LayoutScheduler,
    packs: VecDeque<Vec<Arc<SrcFile>>>,
    open_pack: Vec<Arc<SrcFile>>,
    open_pack_bytes: u64,
    closed: bool,
    /// Files the sink gave up on while chunks of theirs were still queued here.
    cancelled: std::collections::HashSet<u64>,
}

impl Default for State {
    fn default() -> Self {
        State {
            retries: VecDeque::new(),
            files: VecDeque::new(),
            pending: HashMap::new(),
            layout: LayoutScheduler::new(PENDING_CHUNKS),
            packs: VecDeque::new(),
            open_pack: Vec::new(),
            open_pack_bytes: 0,
            closed: false,
            cancelled: std::collections::HashSet::new(),
        }
    }
}

/// The scheduler shared by the master (producer) and the I/O threads (consumers).
pub struct Scheduler {
    state: Mutex<State>,
    ready: Condvar,
    chunk_bytes: u32,
    small_max_bytes: u64,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("chunk_bytes", &self.chunk_bytes)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler for `chunk_bytes` chunks; files up to `small_max_bytes` are packed.
    pub fn new(chunk_bytes: u32, small_max_bytes: u64) -> Scheduler {
        Scheduler {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            chunk_bytes,
            small_max_bytes: small_max_bytes.min(u64::from(chunk_bytes)),
        }
    }

    /// The chunk size.
    pub fn chunk_bytes(&self) -> u32 {
        self.chunk_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the master may add another file without exceeding the bounds.
    pub fn has_room(&self) -> bool {
        let s = self.lock();
        s.files.len() < MAX_ACTIVE_FILES && s.packs.len() < MAX_QUEUED_PACKS
    }

    /// Whether a file of `size` bytes travels packed with others.
    pub fn is_small(&self, size: u64) -> bool {
        size > 0 && size <= self.small_max_bytes
    }

    /// Adds a file with data; `skip` lists chunks the sink already holds (resume).
    pub fn add(&self, file: Arc<SrcFile>, skip: Option<ChunkSet>) {
        let mut s = self.lock();
        if self.is_small(file.size) && skip.is_none() {
            if s.open_pack_bytes + file.size > u64::from(self.chunk_bytes)
                || s.open_pack.len() >= usize::from(MAX_PACK_SEGMENTS)
            {
                let full = std::mem::take(&mut s.open_pack);
                s.open_pack_bytes = 0;
                s.packs.push_back(full);
            }
            s.open_pack_bytes += file.size;
            s.open_pack.push(file);
            // Packs are released when full, or by `flush` when the scanner pauses.
        } else {
            let count = chunk_count(file.size, self.chunk_bytes);
            s.files.push_back(Active {
                file,
                next: 0,
                count,
                skip,
            });
        }
        drop(s);
        self.ready.notify_all();
    }

    /// Releases a partly filled pack (the scanner has nothing more right now).
    pub fn flush(&self) {
        let mut s = self.lock();
        if !s.open_pack.is_empty() {
            let pack = std::mem::take(&mut s.open_pack);
            s.open_pack_bytes = 0;
            s.packs.push_back(pack);
            drop(s);
            self.ready.notify_all();
        }
    }

    /// Queues work again (a chunk the sink rejected).
    pub fn retry(&self, work: Work) {
        self.lock().retries.push_back(work);
        self.ready.notify_all();
    }

    /// No more files will be added: I/O threads end once the queues drain.
    pub fn close(&self) {
        self.flush();
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Whether everything handed out so far has been taken and nothing waits.
    pub fn is_idle(&self) -> bool {
        let s = self.lock();
        s.retries.is_empty()
            && s.files.is_empty()
            && s.layout.pending() == 0
            && s.packs.is_empty()
            && s.open_pack.is_empty()
    }

    /// The next piece of work, blocking until there is some; `None` once closed and
    /// drained (or after `timeout` with nothing, so callers can check for aborts).
    pub fn next(&self, timeout: Duration) -> Option<Result<Work, ()>> {
        let mut s = self.lock();
        loop {
            if let Some(w) = self.ready_work(&mut s) {
                return Some(Ok(w));
            }
            if s.closed {
                if s.open_pack.is_empty() {
                    return None;
                }
                let p = std::mem::take(&mut s.open_pack);
                s.open_pack_bytes = 0;
                return Some(Ok(Work::Pack(p)));
            }
            let (guard, t) = self
                .ready
                .wait_timeout(s, timeout)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s = guard;
            if t.timed_out() {
                return Some(Err(()));
            }
        }
    }

    /// Tops the layout scheduler up from the active files, one chunk per file in turn
    /// (so several files, hence targets, are pending), then takes its choice.
    /// Work ready now, without waiting: a retry, the next chunk by layout, or a full
    /// pack (an io-read thread with reads in flight tops its queue up with it).
    pub fn try_next(&self) -> Option<Work> {
        self.ready_work(&mut self.lock())
    }

    fn ready_work(&self, s: &mut State) -> Option<Work> {
        if let Some(w) = s.retries.pop_front() {
            return Some(w);
        }
        if let Some(w) = self.next_chunk(s) {
            return Some(w);
        }
        s.packs.pop_front().map(Work::Pack)
    }

    fn next_chunk(&self, s: &mut State) -> Option<Work> {
        while s.layout.has_room() {
            let Some(mut a) = s.files.pop_front() else {
                break;
            };
            while a.next < a.count && a.skip.as_ref().is_some_and(|k| k.contains(a.next)) {
                a.next += 1;
            }
            if a.next >= a.count {
                continue;
            }
            let Some((offset, len)) = chunk_range(a.file.size, self.chunk_bytes, a.next) else {
                continue;
            };
            let item = WorkItem::new(a.file.id, offset, len, a.file.layout.as_ref());
            if s.layout.push(item).is_err() {
                s.files.push_front(a);
                break;
            }
            s.pending
                .entry(a.file.id)
                .or_insert_with(|| (Arc::clone(&a.file), 0))
                .1 += 1;
            a.next += 1;
            if a.next < a.count {
                s.files.push_back(a);
            }
        }
        let (item, file) = loop {
            let item = s.layout.next()?;
            let (file, left) = s.pending.get_mut(&item.file_id)?;
            let file = Arc::clone(file);
            *left -= 1;
            let last = *left == 0;
            if last {
                s.pending.remove(&item.file_id);
            }
            if !s.cancelled.contains(&item.file_id) {
                break (item, file);
            }
            // A cancelled file's chunk: not read; its target is free again.
            s.layout.done(item.target);
            if last {
                s.cancelled.remove(&item.file_id);
            }
        };
        let index = item.offset / u64::from(self.chunk_bytes);
        Some(Work::Chunk {
            file,
            index,
            offset: item.offset,
            len: item.len,
            target: Some(item.target.0),
        })
    }

    /// The sink failed `file_id`: its chunks not yet handed out are dropped (those
    /// already pending in the layout scheduler are skipped as they come up).
    pub fn cancel(&self, file_id: u64) {
        let mut s = self.lock();
        s.files.retain(|a| a.file.id != file_id);
        if s.pending.contains_key(&file_id) {
            s.cancelled.insert(file_id);
        }
    }

    /// A chunk read from `target` has finished.
    pub fn done(&self, target: u32) {
        self.lock().layout.done(TargetId(target));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::SimulatedStripes;

    const MIB: u32 = 1 << 20;

    fn file(id: u64, size: u64, layout: Arc<dyn Layout>) -> Arc<SrcFile> {
        let dir = std::env::temp_dir();
        Arc::new(SrcFile {
            id,
            root: Arc::new(Root::open(&dir).unwrap()),
            src_path: RelPath::parse(&format!("f{id}")).unwrap(),
            size,
            layout,
        })
    }

    fn stripes(n: u32) -> Arc<dyn Layout> {
        Arc::new(SimulatedStripes {
            stripe_bytes: u64::from(MIB),
            targets: (0..n).map(TargetId).collect(),
        })
    }

    fn take(s: &Scheduler) -> Option<Work> {
        match s.next(Duration::from_millis(1)) {
            Some(Ok(w)) => Some(w),
            _ => None,
        }
    }

    #[test]
    fn readers_spread_over_striped_targets() {
        // 4 OSTs, 1 MiB stripes, 1 MiB chunks, 3 readers: while every OST has work, no
        // two reads are in flight on one OST.
        let s = Scheduler::new(MIB, 0);
        s.add(file(1, 64 * u64::from(MIB), stripes(4)), None);
        let mut in_flight: Vec<u32> = Vec::new();
        for _ in 0..3 {
            let Some(Work::Chunk {
                target: Some(t), ..
            }) = take(&s)
            else {
                panic!("no chunk")
            };
            in_flight.push(t);
        }
        let mut sorted = in_flight.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            3,
            "three reads on three distinct OSTs: {in_flight:?}"
        );
        // Each finished read is replaced by one on the least busy OST.
        let mut seen = 3;
        while let Some(done) = in_flight.pop() {
            s.done(done);
            if let Some(Work::Chunk {
                target: Some(t), ..
            }) = take(&s)
            {
                assert!(
                    !in_flight.contains(&t),
                    "OST {t} given a second read while others idle"
                );
                in_flight.insert(0, t);
                seen += 1;
            }
            if seen >= 40 {
                break;
            }
        }
    }

    #[test]
    fn every_chunk_is_handed_out_once_and_held_chunks_are_skipped() {
        let s = Scheduler::new(MIB, 0);
        let mut held = ChunkSet::new(10).unwrap();
        held.insert(0);
        held.insert(7);
        s.add(file(1, 10 * u64::from(MIB) - 5, stripes(2)), Some(held));
        s.add(file(2, 3 * u64::from(MIB), stripes(2)), None);
        s.close();
        let mut got = Vec::new();
        while let Some(w) = take(&s) {
            if let Work::Chunk {
                file,
                index,
                target,
                len,
                ..
            } = w
            {
                got.push((file.id, index, len));
                s.done(target.unwrap());
            }
        }
        got.sort_unstable();
        let want: Vec<(u64, u64)> = [1, 2, 3, 4, 5, 6, 8, 9]
            .iter()
            .map(|&i| (1, i))
            .chain((0..3).map(|i| (2, i)))
            .collect();
        assert_eq!(
            got.iter().map(|&(f, i, _)| (f, i)).collect::<Vec<_>>(),
            want
        );
        assert_eq!(
            got.iter().find(|g| g.0 == 1 && g.1 == 9).unwrap().2,
            MIB - 5
        );
    }

    #[test]
    fn a_cancelled_file_hands_out_no_more_chunks() {
        let s = Scheduler::new(MIB, 0);
        s.add(file(1, 40 * u64::from(MIB), stripes(2)), None);
        s.add(file(2, 2 * u64::from(MIB), stripes(2)), None);
        let Some(Work::Chunk {
            file: first,
            target,
            ..
        }) = take(&s)
        else {
            panic!("a chunk")
        };
        s.done(target.unwrap());
        s.cancel(first.id);
        s.close();
        let mut rest = Vec::new();
        while let Some(w) = take(&s) {
            if let Work::Chunk { file, target, .. } = w {
                rest.push(file.id);
                s.done(target.unwrap());
            }
        }
        assert!(
            !rest.contains(&first.id),
            "chunks of the cancelled file: {rest:?}"
        );
        assert!(!rest.is_empty(), "the other file still travels");
    }

    #[test]
    fn small_files_are_packed_up_to_the_chunk_size() {
        let s = Scheduler::new(MIB, 256 << 10);
        for id in 0..10 {
            s.add(file(id, 200 << 10, stripes(1)), None);
        }
        s.close();
        let mut packs = Vec::new();
        while let Some(w) = take(&s) {
            let Work::Pack(p) = w else {
                panic!("small files travel packed")
            };
            packs.push(p.iter().map(|f| f.id).collect::<Vec<_>>());
        }
        // 5 x 200 KiB fit in 1 MiB, the sixth does not.
        assert_eq!(packs, vec![vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 9]]);
    }
}
