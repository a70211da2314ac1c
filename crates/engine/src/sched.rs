//! The source's master scheduler (seed 000's MT): hands chunk work to I/O threads.
//!
//! Large files are cut into file-relative chunks; small files are packed back to back
//! into one chunk (seed 002's "large virtual file"). I/O threads ask for work; among the
//! first few active files, the chunk whose storage target has the fewest reads in flight
//! goes first (LADS's layout-aware scheduling, seed 000), so no OST or disk is hammered
//! while another idles. Memory is bounded: at most [`MAX_ACTIVE_FILES`] large files and
//! [`MAX_QUEUED_PACKS`] packs wait here; the master stops scanning while it is full.

use crate::fs::layout::Layout;
use crate::fs::Root;
use sluice_wire::{chunk_count, chunk_range, ChunkSet, RelPath, MAX_PACK_SEGMENTS};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Large files waiting for readers at most.
pub const MAX_ACTIVE_FILES: usize = 256;
/// Full packs waiting for readers at most.
pub const MAX_QUEUED_PACKS: usize = 64;
/// How many active files the layout-aware choice looks at.
const LOOKAHEAD_FILES: usize = 8;

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
        /// Storage target (for in-flight accounting).
        target: u32,
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

#[derive(Debug, Default)]
struct State {
    retries: VecDeque<Work>,
    files: VecDeque<Active>,
    packs: VecDeque<Vec<Arc<SrcFile>>>,
    open_pack: Vec<Arc<SrcFile>>,
    open_pack_bytes: u64,
    in_flight: Vec<u32>,
    closed: bool,
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
        s.retries.is_empty() && s.files.is_empty() && s.packs.is_empty() && s.open_pack.is_empty()
    }

    /// The next piece of work, blocking until there is some; `None` once closed and
    /// drained (or after `timeout` with nothing, so callers can check for aborts).
    pub fn next(&self, timeout: Duration) -> Option<Result<Work, ()>> {
        let mut s = self.lock();
        loop {
            if let Some(w) = s.retries.pop_front() {
                return Some(Ok(w));
            }
            if let Some(w) = self.next_chunk(&mut s) {
                return Some(Ok(w));
            }
            if let Some(p) = s.packs.pop_front() {
                return Some(Ok(Work::Pack(p)));
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

    /// Picks, among the first active files, the chunk whose target is least busy.
    fn next_chunk(&self, s: &mut State) -> Option<Work> {
        // Drop files whose remaining chunks are all held by the sink.
        loop {
            let front_done = match s.files.front_mut() {
                Some(a) => {
                    while a.next < a.count && a.skip.as_ref().is_some_and(|k| k.contains(a.next)) {
                        a.next += 1;
                    }
                    a.next >= a.count
                }
                None => return None,
            };
            if front_done {
                s.files.pop_front();
            } else {
                break;
            }
        }
        let mut best: Option<(usize, u32, u32)> = None; // (file position, target, load)
        for (pos, a) in s.files.iter_mut().take(LOOKAHEAD_FILES).enumerate() {
            while a.next < a.count && a.skip.as_ref().is_some_and(|k| k.contains(a.next)) {
                a.next += 1;
            }
            if a.next >= a.count {
                continue;
            }
            let offset = a.next * u64::from(self.chunk_bytes);
            let target = a.file.layout.target(offset).0;
            let load = s.in_flight.get(target as usize).copied().unwrap_or(0);
            if best.is_none_or(|(_, _, l)| load < l) {
                best = Some((pos, target, load));
            }
        }
        let (pos, target, _) = best?;
        let a = &mut s.files[pos];
        let index = a.next;
        a.next += 1;
        let (offset, len) = chunk_range(a.file.size, self.chunk_bytes, index)?;
        let file = Arc::clone(&a.file);
        if a.next >= a.count {
            s.files.remove(pos);
        }
        let t = target as usize;
        if s.in_flight.len() <= t {
            s.in_flight.resize(t + 1, 0);
        }
        s.in_flight[t] += 1;
        Some(Work::Chunk {
            file,
            index,
            offset,
            len,
            target,
        })
    }

    /// A chunk read from `target` has finished.
    pub fn done(&self, target: u32) {
        let mut s = self.lock();
        if let Some(n) = s.in_flight.get_mut(target as usize) {
            *n = n.saturating_sub(1);
        }
    }
}
