//! The source's chunk scheduler (seed 000's master): which piece of work an I/O thread
//! takes next, as plain data (the engine wraps it in a `Mutex` and a `Condvar`).
//!
//! Large files are cut into file-relative chunks; small files are packed back to back
//! into one chunk (seed 002's "large virtual file"). Chunks of the active large files
//! are fed, round-robin over files, into a [`LayoutScheduler`] that hands the next read
//! to the storage target with the fewest reads in flight (LADS's layout-aware
//! scheduling, seed 000), so no disk is hammered while another idles. Memory is bounded:
//! the master adds a file only while [`Scheduler::has_room`] (at most
//! [`MAX_ACTIVE_FILES`] large files and [`MAX_QUEUED_PACKS`] packs wait here), and at
//! most [`PENDING_CHUNKS`] chunks sit in the layout scheduler.
//!
//! Generic over the file handle `F` (the engine's is an `Arc` of an open source file; a
//! simulation's a plain value): see [`ChunkFile`].

pub mod layout;

pub use layout::{Layout, LayoutScheduler, PushError, SingleTarget, TargetId, WorkItem};

use sluice_wire::{chunk_count, chunk_range, ChunkSet, MAX_PACK_SEGMENTS};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Large files waiting for readers at most (while the master respects `has_room`).
pub const MAX_ACTIVE_FILES: usize = 256;
/// Full packs waiting for readers at most (while the master respects `has_room`).
pub const MAX_QUEUED_PACKS: usize = 64;
/// Chunks handed to the layout scheduler ahead of the readers.
pub const PENDING_CHUNKS: usize = 256;

/// What the scheduler needs to know of a file it hands out work for.
pub trait ChunkFile {
    /// The session's file id.
    fn id(&self) -> u64;
    /// Its size at scan time.
    fn size(&self) -> u64;
    /// The storage target holding byte `offset`.
    fn target(&self, offset: u64) -> TargetId;
}

impl<T: ChunkFile + ?Sized> ChunkFile for Arc<T> {
    fn id(&self) -> u64 {
        (**self).id()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn target(&self, offset: u64) -> TargetId {
        (**self).target(offset)
    }
}

/// Whether a file of `size` bytes travels packed with others: it has data and fits
/// `small_max_bytes`, which is at most one chunk.
#[must_use]
pub fn is_small(size: u64, chunk_bytes: u32, small_max_bytes: u64) -> bool {
    size > 0 && size <= small_max_bytes.min(u64::from(chunk_bytes))
}

/// One unit of work for an I/O thread.
#[derive(Debug)]
pub enum Work<F> {
    /// Chunk `index` of a large file.
    Chunk {
        /// The file.
        file: F,
        /// Chunk index.
        index: u64,
        /// File-relative offset.
        offset: u64,
        /// Bytes.
        len: u32,
        /// Storage target to report [`Scheduler::done`] for; `None` for a retry, which is
        /// not counted in flight.
        target: Option<TargetId>,
    },
    /// Several small whole files, back to back.
    Pack(Vec<F>),
}

impl<F> Work<F> {
    /// The target the work is counted in flight on, if any.
    #[must_use]
    pub fn target(&self) -> Option<TargetId> {
        match self {
            Work::Chunk { target, .. } => *target,
            Work::Pack(_) => None,
        }
    }
}

/// A large file with chunks not yet handed to the layout scheduler.
#[derive(Debug)]
struct Active<F> {
    file: F,
    next: u64,
    count: u64,
    skip: Option<ChunkSet>,
}

/// The picking state machine: files in, work out.
#[derive(Debug)]
pub struct Scheduler<F> {
    chunk_bytes: u32,
    small_max_bytes: u64,
    /// Work to do again first (a chunk the sink rejected).
    retries: VecDeque<Work<F>>,
    /// Large files with chunks not yet handed to `layout`.
    files: VecDeque<Active<F>>,
    /// Files with chunks pending in `layout`, and how many.
    pending: BTreeMap<u64, (F, u32)>,
    layout: LayoutScheduler,
    packs: VecDeque<Vec<F>>,
    open_pack: Vec<F>,
    open_pack_bytes: u64,
    closed: bool,
    /// Files cancelled while chunks of theirs were pending in `layout`.
    cancelled: BTreeSet<u64>,
}

impl<F: ChunkFile + Clone> Scheduler<F> {
    /// A scheduler for `chunk_bytes` chunks; files up to `small_max_bytes` (at most one
    /// chunk) are packed.
    #[must_use]
    pub fn new(chunk_bytes: u32, small_max_bytes: u64) -> Scheduler<F> {
        assert!(chunk_bytes > 0, "a chunk holds at least one byte");
        Scheduler {
            chunk_bytes,
            small_max_bytes: small_max_bytes.min(u64::from(chunk_bytes)),
            retries: VecDeque::new(),
            files: VecDeque::new(),
            pending: BTreeMap::new(),
            layout: LayoutScheduler::new(PENDING_CHUNKS),
            packs: VecDeque::new(),
            open_pack: Vec::new(),
            open_pack_bytes: 0,
            closed: false,
            cancelled: BTreeSet::new(),
        }
    }

    /// The chunk size.
    #[must_use]
    pub fn chunk_bytes(&self) -> u32 {
        self.chunk_bytes
    }

    /// Whether the master may add another file without exceeding the bounds.
    #[must_use]
    pub fn has_room(&self) -> bool {
        self.files.len() < MAX_ACTIVE_FILES && self.packs.len() < MAX_QUEUED_PACKS
    }

    /// Whether a file of `size` bytes travels packed with others.
    #[must_use]
    pub fn is_small(&self, size: u64) -> bool {
        is_small(size, self.chunk_bytes, self.small_max_bytes)
    }

    /// Adds a file with data; `skip` lists chunks the sink already holds (resume).
    pub fn add(&mut self, file: F, skip: Option<ChunkSet>) {
        if self.is_small(file.size()) && skip.is_none() {
            let full = self.open_pack_bytes + file.size() > u64::from(self.chunk_bytes)
                || self.open_pack.len() >= usize::from(MAX_PACK_SEGMENTS);
            if full {
                self.flush();
            }
            self.open_pack_bytes += file.size();
            self.open_pack.push(file);
            // Packs are released when full, or by `flush` when the scanner pauses.
        } else {
            let count = chunk_count(file.size(), self.chunk_bytes);
            self.files.push_back(Active {
                file,
                next: 0,
                count,
                skip,
            });
        }
        self.check();
    }

    /// Releases a partly filled pack (the scanner has nothing more right now); `true`
    /// if there was one.
    pub fn flush(&mut self) -> bool {
        if self.open_pack.is_empty() {
            return false;
        }
        debug_assert!(self.open_pack_bytes <= u64::from(self.chunk_bytes));
        self.packs.push_back(std::mem::take(&mut self.open_pack));
        self.open_pack_bytes = 0;
        true
    }

    /// Queues work again (a chunk the sink rejected).
    pub fn retry(&mut self, work: Work<F>) {
        debug_assert!(work.target().is_none(), "a retry is not counted in flight");
        self.retries.push_back(work);
    }

    /// No more files will be added: [`Scheduler::next`] gives `None` once drained.
    pub fn close(&mut self) {
        self.flush();
        self.closed = true;
    }

    /// Whether [`Scheduler::next`] may have work now (a retry, a chunk of an active or
    /// pending file, a released pack, or the end): a reader waiting for work needs
    /// waking only then, not for a small file added to the open pack.
    #[must_use]
    pub fn has_work(&self) -> bool {
        self.closed
            || !self.retries.is_empty()
            || !self.files.is_empty()
            || self.layout.pending() > 0
            || !self.packs.is_empty()
    }

    /// Whether [`Scheduler::close`] was called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Work ready now: a retry, the next chunk by layout, or a full pack (a partly
    /// filled one too once closed). `None`: nothing now (the scheduler is drained if
    /// closed).
    // Not an `Iterator`: `None` means "nothing now", and more may be added.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Work<F>> {
        if self.closed {
            self.flush();
        }
        let work = self
            .retries
            .pop_front()
            .or_else(|| self.next_chunk())
            .or_else(|| self.packs.pop_front().map(Work::Pack));
        self.check();
        work
    }

    /// Tops the layout scheduler up from the active files, one chunk per file in turn
    /// (so several files, hence targets, are pending), then takes its choice.
    fn next_chunk(&mut self) -> Option<Work<F>> {
        self.top_up();
        let item = loop {
            let item = self.layout.next()?;
            if self.take_pending(item.file_id) {
                break item;
            }
            // A cancelled file's chunk: not read; its target is free again.
            self.layout.done(item.target);
        };
        let file = self.handed_out(item.file_id)?;
        Some(Work::Chunk {
            file,
            index: item.offset / u64::from(self.chunk_bytes),
            offset: item.offset,
            len: item.len,
            target: Some(item.target),
        })
    }

    /// Moves chunks of the active files into the layout scheduler while it has room.
    fn top_up(&mut self) {
        while self.layout.has_room() {
            let Some(mut a) = self.files.pop_front() else {
                break;
            };
            while a.next < a.count && a.skip.as_ref().is_some_and(|k| k.contains(a.next)) {
                a.next += 1;
            }
            let Some((offset, len)) = chunk_range(a.file.size(), self.chunk_bytes, a.next) else {
                continue; // every chunk handed on (or held by the sink)
            };
            let item = WorkItem {
                file_id: a.file.id(),
                offset,
                len,
                target: a.file.target(offset),
            };
            if self.layout.push(item).is_err() {
                self.files.push_front(a);
                break;
            }
            self.pending
                .entry(item.file_id)
                .or_insert_with(|| (a.file.clone(), 0))
                .1 += 1;
            a.next += 1;
            if a.next < a.count {
                self.files.push_back(a);
            }
        }
    }

    /// Counts one chunk of `file_id` out of `layout`; `false` if the file was cancelled.
    fn take_pending(&mut self, file_id: u64) -> bool {
        debug_assert!(
            self.pending.contains_key(&file_id),
            "a chunk of file {file_id} not counted pending"
        );
        let Some((_, left)) = self.pending.get_mut(&file_id) else {
            return false;
        };
        debug_assert!(*left > 0);
        *left -= 1;
        if !self.cancelled.contains(&file_id) {
            return true;
        }
        if *left == 0 {
            self.pending.remove(&file_id);
            self.cancelled.remove(&file_id);
        }
        false
    }

    /// The handle of `file_id`, whose chunk was just taken; forgotten after its last.
    fn handed_out(&mut self, file_id: u64) -> Option<F> {
        let (file, left) = self.pending.get(&file_id)?;
        if *left > 0 {
            return Some(file.clone());
        }
        self.pending.remove(&file_id).map(|(f, _)| f)
    }

    /// The sink failed `file_id`: its chunks not yet handed out are dropped (those
    /// pending in the layout scheduler are skipped as they come up), and so are its
    /// chunk retries.
    pub fn cancel(&mut self, file_id: u64) {
        self.files.retain(|a| a.file.id() != file_id);
        self.retries
            .retain(|w| !matches!(w, Work::Chunk { file, .. } if file.id() == file_id));
        if self.pending.contains_key(&file_id) {
            self.cancelled.insert(file_id);
        }
        self.check();
    }

    /// A chunk read from `target` has finished.
    pub fn done(&mut self, target: TargetId) {
        self.layout.done(target);
    }

    /// Reads handed out and not yet reported [`Scheduler::done`].
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.layout.in_flight_total()
    }

    /// The invariants, checked after every change in debug builds.
    fn check(&self) {
        debug_assert!(self.open_pack_bytes <= u64::from(self.chunk_bytes));
        debug_assert!(self.open_pack.len() <= usize::from(MAX_PACK_SEGMENTS));
        debug_assert_eq!(self.open_pack.is_empty(), self.open_pack_bytes == 0);
        debug_assert!(self.packs.iter().all(|p| !p.is_empty()));
        debug_assert_eq!(
            self.pending
                .values()
                .map(|(_, n)| *n as usize)
                .sum::<usize>(),
            self.layout.pending(),
            "chunks counted pending per file and in the layout scheduler differ"
        );
        debug_assert!(self
            .cancelled
            .iter()
            .all(|id| self.pending.contains_key(id)));
    }
}

#[cfg(test)]
mod tests;
