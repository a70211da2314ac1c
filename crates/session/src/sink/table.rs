//! The files announced by the source and not finished, by id: where a chunk finds its
//! file, and how long it may wait for the manifest to announce it.

use std::collections::HashMap;
use std::time::Duration;

use crate::time::Instant;

/// How long a chunk may wait for its file's manifest entry (chunks and the manifest
/// travel on different connections, so a chunk may overtake its entry).
pub const ENTRY_WAIT: Duration = Duration::from_secs(60);

/// Files in the table at most. The source announces no more than this many files that
/// the sink has not answered (its in-flight window), and the sink removes a file before
/// it reports its end, so a peer that goes past it is broken.
pub const MAX_OPEN_FILES: usize = crate::source::MAX_FILES_IN_FLIGHT;

pub use crate::source::UNDESCRIBED_FILE_ID;

/// Why a file could not enter the table: the peer broke the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableError {
    /// More than [`MAX_OPEN_FILES`] files announced and not finished.
    Full {
        /// [`MAX_OPEN_FILES`].
        limit: usize,
    },
    /// The id is in the table already.
    Duplicate {
        /// The id.
        file_id: u64,
    },
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::Full { limit } => {
                write!(f, "the source announced more than {limit} files in flight")
            }
            TableError::Duplicate { file_id } => {
                write!(f, "the source announced file {file_id} twice")
            }
        }
    }
}

impl std::error::Error for TableError {}

/// Where a chunk's file stands ([`FileTable::lookup`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a, T> {
    /// In the table.
    Found(&'a T),
    /// Announced and already finished (failed, skipped, complete): drop the chunk (and
    /// acknowledge it).
    Gone,
    /// Not announced by the deadline: ask for the chunk again (`ChunkNack`), never drop
    /// it. Dropped, it was lost for a file announced after all, which then never
    /// completed while the source waited for its answer (found by the simulation).
    Late,
    /// Not announced yet: wait for the manifest (until the deadline).
    Wait,
}

/// What [`FileTable::forget`] found for a `FileFailed` from the source.
#[derive(Debug, PartialEq, Eq)]
pub enum Forgotten<T> {
    /// The file, now out of the table: end it (its partial stays for resume) and count
    /// it failed.
    Entry(T),
    /// An entry the source could not scan: count it as a scan error.
    Undescribed,
    /// Nothing to do (finished already, or never announced).
    Unknown,
}

/// Files announced and not finished, by id, with the highest id announced. The engine
/// keeps it under a mutex (with a condition variable for chunks that wait); `T` is
/// whatever the caller keeps per file.
///
/// The source numbers entries in manifest order, so a chunk whose id is at most the
/// highest announced and that has no entry belongs to a file already finished: it is
/// dropped at once instead of waiting for an entry that will never come.
#[derive(Debug)]
pub struct FileTable<T> {
    files: HashMap<u64, T>,
    announced_max: u64,
    capacity: usize,
}

impl<T> Default for FileTable<T> {
    fn default() -> Self {
        FileTable::with_capacity(MAX_OPEN_FILES)
    }
}

impl<T> FileTable<T> {
    /// An empty table of at most `capacity` files.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> FileTable<T> {
        assert!(capacity > 0);
        FileTable {
            files: HashMap::new(),
            announced_max: 0,
            capacity,
        }
    }

    /// The deadline of a chunk that starts waiting for its file at `now`.
    #[must_use]
    pub fn deadline(now: Instant) -> Instant {
        now + ENTRY_WAIT
    }

    /// Files in the table.
    #[must_use]
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the table is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The highest file id announced so far (0: none).
    #[must_use]
    pub fn announced_max(&self) -> u64 {
        self.announced_max
    }

    /// Registers a data file announced by the manifest (before [`FileTable::announced`]).
    ///
    /// # Errors
    /// [`TableError`]: the table is full, or the id is in it already (a broken peer).
    pub fn insert(&mut self, file_id: u64, file: T) -> Result<(), TableError> {
        if self.files.contains_key(&file_id) {
            return Err(TableError::Duplicate { file_id });
        }
        if self.files.len() >= self.capacity {
            return Err(TableError::Full {
                limit: self.capacity,
            });
        }
        self.files.insert(file_id, file);
        debug_assert!(self.files.len() <= self.capacity);
        Ok(())
    }

    /// Records that the manifest has announced `file_id` (after its entry, if any, is in).
    pub fn announced(&mut self, file_id: u64) {
        self.announced_max = self.announced_max.max(file_id);
    }

    /// Where the file of a chunk stands at `now`, for a chunk waiting until `deadline`.
    pub fn lookup(&self, file_id: u64, now: Instant, deadline: Instant) -> Lookup<'_, T> {
        if let Some(f) = self.files.get(&file_id) {
            return Lookup::Found(f);
        }
        if file_id <= self.announced_max {
            return Lookup::Gone;
        }
        if now >= deadline {
            return Lookup::Late;
        }
        Lookup::Wait
    }

    /// Removes a finished file.
    pub fn remove(&mut self, file_id: u64) -> Option<T> {
        self.files.remove(&file_id)
    }

    /// The source could not read `file_id` (`FileFailed`): forgets it.
    pub fn forget(&mut self, file_id: u64) -> Forgotten<T> {
        match self.files.remove(&file_id) {
            Some(f) => Forgotten::Entry(f),
            None if file_id == UNDESCRIBED_FILE_ID => Forgotten::Undescribed,
            None => Forgotten::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn a_chunk_waits_for_an_unannounced_file_until_its_deadline_then_is_late() {
        let mut t: FileTable<&str> = FileTable::default();
        let deadline = FileTable::<&str>::deadline(at(0));
        assert_eq!(deadline, at(60_000));
        assert_eq!(t.lookup(5, at(0), deadline), Lookup::Wait);
        assert_eq!(t.lookup(5, at(59_999), deadline), Lookup::Wait);
        assert_eq!(
            t.lookup(5, at(60_000), deadline),
            Lookup::Late,
            "asked for again, not dropped"
        );
        t.insert(5, "five").expect("room");
        t.announced(5);
        assert_eq!(t.lookup(5, at(1), deadline), Lookup::Found(&"five"));
    }

    #[test]
    fn a_chunk_of_a_file_announced_and_finished_is_dropped_at_once() {
        let mut t: FileTable<&str> = FileTable::default();
        let deadline = FileTable::<&str>::deadline(at(0));
        t.announced(3); // a directory, or a file skipped: never in the table
        assert_eq!(t.lookup(2, at(0), deadline), Lookup::Gone);
        assert_eq!(t.lookup(3, at(0), deadline), Lookup::Gone);
        assert_eq!(t.lookup(4, at(0), deadline), Lookup::Wait);
        t.insert(4, "four").expect("room");
        t.announced(4);
        assert_eq!(t.remove(4), Some("four"));
        assert_eq!(t.lookup(4, at(0), deadline), Lookup::Gone);
        t.announced(1);
        assert_eq!(t.announced_max(), 4, "the highest stays");
    }

    #[test]
    fn the_table_is_bounded_and_refuses_a_duplicate() {
        let mut t: FileTable<u64> = FileTable::with_capacity(2);
        t.insert(1, 1).expect("room");
        assert_eq!(t.insert(1, 1), Err(TableError::Duplicate { file_id: 1 }));
        t.insert(2, 2).expect("room");
        assert_eq!(t.insert(3, 3), Err(TableError::Full { limit: 2 }));
        assert_eq!(t.len(), 2);
        let e = t.insert(3, 3).expect_err("full");
        assert!(e.to_string().contains("more than 2 files"), "{e}");
    }

    #[test]
    fn forgetting_tells_a_file_from_a_scan_error() {
        let mut t: FileTable<&str> = FileTable::default();
        t.insert(7, "seven").expect("room");
        assert_eq!(t.forget(7), Forgotten::Entry("seven"));
        assert_eq!(t.forget(7), Forgotten::Unknown);
        assert_eq!(t.forget(UNDESCRIBED_FILE_ID), Forgotten::Undescribed);
        assert!(t.is_empty());
    }
}
