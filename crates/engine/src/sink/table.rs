//! The session core's [`FileTable`] shared by the receiving threads: a mutex, and a
//! condition variable on which a chunk that overtook its manifest entry waits for it.

use super::{lock, Entry, Shared, ABORT_POLL};
use sluice_session::sink::{FileTable, Forgotten, Lookup, TableError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Where a received chunk's file stands after [`Table::wait`].
pub(super) enum Waited {
    /// In the table.
    Found(Arc<Entry>),
    /// Ended already (or the session is ending): drop the chunk and acknowledge it.
    Gone,
    /// Not announced in time: ask the source for the chunk again.
    Late,
}

/// Files announced and not finished, by id (bounded by the source's in-flight window).
#[derive(Debug, Default)]
pub(super) struct Table {
    files: Mutex<FileTable<Arc<Entry>>>,
    added: Condvar,
    /// Chunks waiting in [`Table::wait`] (changed under `files`' lock): with none, an
    /// announcement wakes nobody (a `notify_all` is a `futex` call even then).
    waiting: AtomicUsize,
}

impl Table {
    /// Registers a data file announced by the manifest.
    pub(super) fn insert(&self, e: Arc<Entry>) -> Result<(), TableError> {
        let id = e.entry.file_id;
        let mut files = lock(&self.files);
        files.insert(id, e)?;
        self.wake(files);
        Ok(())
    }

    /// Records that the manifest has announced `id` (after its entry, if any, is in).
    pub(super) fn announced(&self, id: u64) {
        let mut files = lock(&self.files);
        files.announced(id);
        self.wake(files);
    }

    /// Wakes the chunks waiting for an entry, if any (counted while `files` is held).
    fn wake(&self, files: MutexGuard<'_, FileTable<Arc<Entry>>>) {
        let any = self.waiting.load(Ordering::Relaxed) > 0;
        drop(files);
        if any {
            self.added.notify_all();
        }
    }

    pub(super) fn remove(&self, id: u64) -> Option<Arc<Entry>> {
        lock(&self.files).remove(id)
    }

    pub(super) fn forget(&self, id: u64) -> Forgotten<Arc<Entry>> {
        lock(&self.files).forget(id)
    }

    /// The entry for `id`, waiting for the manifest to announce it: [`Waited::Gone`] at
    /// once for a file announced and already finished (or once the session aborts),
    /// [`Waited::Late`] when the deadline passes first.
    pub(super) fn wait(&self, id: u64, shared: &Shared) -> Waited {
        let deadline = FileTable::<Arc<Entry>>::deadline(shared.now());
        let mut files = lock(&self.files);
        loop {
            let now = shared.now();
            match files.lookup(id, now, deadline) {
                Lookup::Found(e) => return Waited::Found(Arc::clone(e)),
                Lookup::Gone => return Waited::Gone,
                Lookup::Late => return Waited::Late,
                Lookup::Wait if shared.aborted() => return Waited::Gone,
                Lookup::Wait => {}
            }
            let left = deadline.saturating_since(now).min(ABORT_POLL);
            self.waiting.fetch_add(1, Ordering::Relaxed);
            files = self
                .added
                .wait_timeout(files, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
