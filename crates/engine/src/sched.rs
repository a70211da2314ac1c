//! The source's scheduler shared by the master (producer) and the io-read threads
//! (consumers): the pure picking state machine of [`sluice_session::sched`] behind a
//! `Mutex`, with a `Condvar` for readers waiting for work.

use crate::fs::layout::Layout;
use crate::fs::Root;
use sluice_session::sched::{self, ChunkFile, TargetId};
use sluice_wire::{ChunkSet, RelPath};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use sluice_session::sched::{MAX_ACTIVE_FILES, MAX_QUEUED_PACKS, PENDING_CHUNKS};

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
    /// Where its bytes live (the root's block device).
    pub layout: Arc<dyn Layout>,
}

impl ChunkFile for SrcFile {
    fn id(&self) -> u64 {
        self.id
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn target(&self, offset: u64) -> TargetId {
        self.layout.target(offset)
    }
}

/// One unit of work for an I/O thread.
pub type Work = sched::Work<Arc<SrcFile>>;

/// The scheduler shared by the master and the I/O threads.
#[derive(Debug)]
pub struct Scheduler {
    state: Mutex<sched::Scheduler<Arc<SrcFile>>>,
    ready: Condvar,
    /// Readers blocked in [`Scheduler::next`] (changed under `state`'s lock): with none,
    /// adding work wakes nobody (a `notify_all` is a `futex` call even then).
    waiting: AtomicUsize,
}

type Guard<'a> = MutexGuard<'a, sched::Scheduler<Arc<SrcFile>>>;

impl Scheduler {
    /// A scheduler for `chunk_bytes` chunks; files up to `small_max_bytes` are packed.
    pub fn new(chunk_bytes: u32, small_max_bytes: u64) -> Scheduler {
        Scheduler {
            state: Mutex::new(sched::Scheduler::new(chunk_bytes, small_max_bytes)),
            ready: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> Guard<'_> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the readers waiting for work, if any and if there is work for them (`s`
    /// is held while counting them, so none can be between its check for work and its
    /// wait): a small file that only joins the open pack wakes nobody.
    fn wake(&self, s: Guard<'_>) {
        let any = self.waiting.load(Ordering::Relaxed) > 0 && s.has_work();
        drop(s);
        if any {
            self.ready.notify_all();
        }
    }

    /// Whether the master may add another file without exceeding the bounds.
    pub fn has_room(&self) -> bool {
        self.lock().has_room()
    }

    /// Adds a file with data; `skip` lists chunks the sink already holds (resume).
    pub fn add(&self, file: Arc<SrcFile>, skip: Option<ChunkSet>) {
        let mut s = self.lock();
        s.add(file, skip);
        self.wake(s);
    }

    /// Releases a partly filled pack (the scanner has nothing more right now).
    pub fn flush(&self) {
        let mut s = self.lock();
        if s.flush() {
            self.wake(s);
        }
    }

    /// Queues work again (a chunk the sink rejected).
    pub fn retry(&self, work: Work) {
        let mut s = self.lock();
        s.retry(work);
        self.wake(s);
    }

    /// No more files will be added: I/O threads end once the queues drain.
    pub fn close(&self) {
        let mut s = self.lock();
        s.close();
        self.wake(s);
    }

    /// The next piece of work, blocking until there is some; `None` once closed and
    /// drained (or `Some(Err(()))` after `timeout` with nothing, so callers can check
    /// for aborts).
    pub fn next(&self, timeout: Duration) -> Option<Result<Work, ()>> {
        let mut s = self.lock();
        loop {
            if let Some(w) = s.next() {
                return Some(Ok(w));
            }
            if s.is_closed() {
                return None;
            }
            self.waiting.fetch_add(1, Ordering::Relaxed);
            let (guard, t) = self
                .ready
                .wait_timeout(s, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            s = guard;
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            if t.timed_out() {
                return Some(Err(()));
            }
        }
    }

    /// Work ready now, without waiting: a retry, the next chunk by layout, or a full
    /// pack (an io-read thread with reads in flight tops its queue up with it).
    pub fn try_next(&self) -> Option<Work> {
        self.lock().next()
    }

    /// The sink failed `file_id`: none of its chunks not yet handed out will be.
    pub fn cancel(&self, file_id: u64) {
        self.lock().cancel(file_id);
    }

    /// A chunk read from `target` has finished.
    pub fn done(&self, target: TargetId) {
        self.lock().done(target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_session::sched::SingleTarget;

    #[test]
    fn readers_wait_for_work_and_end_once_closed_and_drained() {
        let s = Arc::new(Scheduler::new(1 << 20, 256 << 10));
        let reader = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    match s.next(Duration::from_millis(5)) {
                        None => return got,
                        Some(Err(())) => {}
                        Some(Ok(w)) => {
                            if let Some(t) = w.target() {
                                s.done(t);
                            }
                            got.push(w);
                        }
                    }
                }
            })
        };
        let root = Arc::new(Root::open(std::env::temp_dir()).expect("a root"));
        for id in 1..=3 {
            s.add(
                Arc::new(SrcFile {
                    id,
                    root: Arc::clone(&root),
                    src_path: RelPath::parse(&format!("f{id}")).expect("a path"),
                    size: if id == 3 { 10 } else { 3 << 20 },
                    layout: Arc::new(SingleTarget(TargetId(0))),
                }),
                None,
            );
        }
        assert!(s.has_room());
        s.close();
        let got = reader.join().expect("the reader");
        let chunks = got
            .iter()
            .filter(|w| matches!(w, Work::Chunk { .. }))
            .count();
        let packs = got.iter().filter(|w| matches!(w, Work::Pack(_))).count();
        assert_eq!((chunks, packs), (6, 1));
        assert!(s.try_next().is_none());
    }
}
