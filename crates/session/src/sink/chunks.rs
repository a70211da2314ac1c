//! Per-file chunk accounting: which chunks are written, the digest they make, when the
//! file is complete, and which thread writes it.
//!
//! [`ChunkAccount`] is the bookkeeping; [`FileChunks`] adds the one-writer-per-file rule
//! (flat combining): a chunk that arrives while another thread writes its file is left
//! with that thread, which writes it before it stops. Two writers of one file would only
//! contend for the kernel's inode lock (spinning on it burnt 14 % of the receiver's CPU),
//! while this way the thread that handed its chunk over goes back to its socket. The
//! engine keeps a [`FileChunks`] under each file's mutex; a simulation keeps it as is.

use std::collections::VecDeque;

use sluice_wire::{ChunkSet, DigestError, FileDigest, MAX_FILE_CHUNKS};

/// Which chunks of one data file are written, how many remain, and the file's digest so
/// far. Invariant: `remaining == count - received.len()`, and the digest holds exactly
/// the received chunks.
#[derive(Debug, Clone)]
pub struct ChunkAccount {
    received: ChunkSet,
    remaining: u64,
    digest: FileDigest,
}

impl ChunkAccount {
    /// The account of a file of `count` chunks (at least 1), none written yet.
    ///
    /// # Errors
    /// [`DigestError::TooManyChunks`] above [`MAX_FILE_CHUNKS`] (the memory bound).
    pub fn new(count: u64) -> Result<ChunkAccount, DigestError> {
        debug_assert!(count > 0, "an empty file has no chunks to account for");
        let too_many = DigestError::TooManyChunks {
            chunks: count,
            limit: MAX_FILE_CHUNKS,
        };
        let digest = FileDigest::new(count)?;
        let received = ChunkSet::new(count).ok_or(too_many)?;
        Ok(ChunkAccount {
            received,
            remaining: count,
            digest,
        })
    }

    /// Chunks in the file.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.received.chunk_count()
    }

    /// Chunks not yet written.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Whether chunk `index` is written already.
    #[must_use]
    pub fn contains(&self, index: u64) -> bool {
        self.received.contains(index)
    }

    /// The chunks written.
    #[must_use]
    pub fn received(&self) -> &ChunkSet {
        &self.received
    }

    /// Records that chunk `index`, of original `checksum`, is written. `Ok(true)` if it is
    /// new; `Ok(false)` for a chunk written already (a duplicate counts once, whatever its
    /// checksum: the bytes on disk are the first ones).
    ///
    /// # Errors
    /// [`DigestError::OutOfRange`] for an index past the file's end (nothing recorded).
    pub fn add(&mut self, index: u64, checksum: u64) -> Result<bool, DigestError> {
        if self.received.contains(index) {
            return Ok(false);
        }
        self.digest.add(index, checksum)?;
        let inserted = self.received.insert(index);
        assert!(inserted, "the digest took chunk {index}, so it is in range");
        assert!(self.remaining > 0, "a new chunk with none remaining");
        self.remaining -= 1;
        self.check();
        Ok(true)
    }

    /// Whether every chunk is written.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.remaining == 0
    }

    /// The file's digest, once complete.
    ///
    /// # Errors
    /// [`DigestError::Incomplete`] while chunks are missing.
    pub fn digest(&self) -> Result<[u8; 16], DigestError> {
        self.digest.finish()
    }

    fn check(&self) {
        assert_eq!(self.remaining, self.digest.missing());
        debug_assert_eq!(self.remaining, self.count() - self.received.len());
    }
}

/// Two accounts are equal when they hold the same chunks of the same file (their
/// checksums, which only the digest keeps, are not compared).
impl PartialEq for ChunkAccount {
    fn eq(&self, other: &ChunkAccount) -> bool {
        self.received == other.received && self.remaining == other.remaining
    }
}

/// What a thread does with a chunk it brings to [`FileChunks::offer`].
#[derive(Debug, PartialEq, Eq)]
pub enum Offer<P> {
    /// Write it: this thread is the file's writer until [`FileChunks::written`] says
    /// otherwise.
    Write(P),
    /// Left with the file's writer, which writes it (the thread goes back to its socket).
    Queued,
    /// The file has ended (failed, complete): drop the chunk and acknowledge it.
    Ended(P),
}

/// What the writer does after a chunk ([`FileChunks::written`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Next<P> {
    /// Write this chunk, left by another thread.
    Write(P),
    /// Nothing left: this thread is no longer the writer.
    Idle,
    /// Every chunk is in: complete the file (verify, rename) with this digest. The
    /// chunks still waiting are duplicates: drop and acknowledge them.
    Complete {
        /// The file's digest.
        digest: [u8; 16],
        /// Duplicates to drop.
        dropped: VecDeque<P>,
    },
    /// The file ended meanwhile (the source gave it up): drop and acknowledge these.
    Ended {
        /// Chunks to drop.
        dropped: VecDeque<P>,
    },
}

/// One data file's chunks as its writers see them: the account, whether a thread is
/// writing it, the chunks left for that thread, and whether the file has ended.
///
/// Invariants: `pending` is empty unless `writing`; nothing is written after `ended`;
/// the file completes once.
#[derive(Debug)]
pub struct FileChunks<P> {
    account: ChunkAccount,
    writing: bool,
    /// Chunks that arrived while another thread was writing the file: that thread writes
    /// them too (bounded by the caller's buffers, which they hold).
    pending: VecDeque<P>,
    ended: bool,
}

impl<P> FileChunks<P> {
    /// A file about to receive chunks, with what `account` says is written already.
    #[must_use]
    pub fn new(account: ChunkAccount) -> FileChunks<P> {
        FileChunks {
            account,
            writing: false,
            pending: VecDeque::new(),
            ended: false,
        }
    }

    /// The account.
    #[must_use]
    pub fn account(&self) -> &ChunkAccount {
        &self.account
    }

    /// Whether the file has ended (complete, failed, given up).
    #[must_use]
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Whether a thread is writing the file.
    #[must_use]
    pub fn is_writing(&self) -> bool {
        self.writing
    }

    /// Chunks waiting for the writer.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether chunk `index` is written already: the writer skips writing it again.
    #[must_use]
    pub fn is_held(&self, index: u64) -> bool {
        self.account.contains(index)
    }

    /// A verified chunk arrived: become the file's writer, leave it with the writer there
    /// is, or drop it (the file has ended).
    pub fn offer(&mut self, chunk: P) -> Offer<P> {
        self.check();
        if self.ended {
            return Offer::Ended(chunk);
        }
        if self.writing {
            self.pending.push_back(chunk);
            return Offer::Queued;
        }
        self.writing = true;
        Offer::Write(chunk)
    }

    /// The writer wrote chunk `index` of original `checksum` (or skipped it, held
    /// already): counts it and says what to do next.
    pub fn written(&mut self, index: u64, checksum: u64) -> Next<P> {
        assert!(self.writing, "only the writer reports a write");
        if self.ended {
            self.writing = false;
            let dropped = std::mem::take(&mut self.pending);
            return Next::Ended { dropped };
        }
        // An index past the end was refused by the write already; it counts for nothing.
        let new = self.account.add(index, checksum).unwrap_or(false);
        if new && self.account.is_complete() {
            self.writing = false;
            let dropped = std::mem::take(&mut self.pending);
            return match self.finish() {
                Ok(digest) => Next::Complete { digest, dropped },
                Err(_) => unreachable!("a complete account has a digest"),
            };
        }
        match self.pending.pop_front() {
            Some(chunk) => Next::Write(chunk),
            None => {
                self.writing = false;
                Next::Idle
            }
        }
    }

    /// The writer could not open or write the file: it stops being the writer and the
    /// file ends. Returns whether the file ended just now (so its failure is reported
    /// once) and the chunks left with the writer, to drop and acknowledge.
    pub fn write_failed(&mut self) -> (bool, VecDeque<P>) {
        assert!(self.writing, "only the writer reports a failed write");
        self.writing = false;
        let dropped = std::mem::take(&mut self.pending);
        (self.end(), dropped)
    }

    /// Ends the file from outside (the source gave it up): a writer stops after its
    /// current chunk. Returns whether it had not ended before.
    pub fn end(&mut self) -> bool {
        let first = !self.ended;
        self.ended = true;
        first
    }

    /// Every chunk is in (the partial held them all at announce, or the last one was
    /// written): ends the file and gives its digest. Called once per file. A writer busy
    /// with a stray duplicate meanwhile stops after it ([`Next::Ended`]).
    ///
    /// # Errors
    /// [`DigestError::Incomplete`] if a chunk is missing (the file is not ended then).
    pub fn finish(&mut self) -> Result<[u8; 16], DigestError> {
        assert!(!self.ended, "a file completes once");
        let digest = self.account.digest()?;
        self.ended = true;
        Ok(digest)
    }

    fn check(&self) {
        debug_assert!(self.writing || self.pending.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(count: u64) -> ChunkAccount {
        ChunkAccount::new(count).expect("a small file")
    }

    #[test]
    fn a_duplicate_counts_once_and_completion_gives_the_ordered_digest() {
        let mut a = account(3);
        assert_eq!(a.add(2, 22), Ok(true));
        assert_eq!(a.add(2, 99), Ok(false));
        assert_eq!(a.remaining(), 2);
        assert!(a.add(3, 1).is_err(), "past the end");
        assert_eq!(a.remaining(), 2);
        assert!(a.digest().is_err());
        assert_eq!(a.add(0, 10), Ok(true));
        assert_eq!(a.add(1, 11), Ok(true));
        assert!(a.is_complete());
        assert_eq!(a.received().len(), 3);
        assert_eq!(
            a.digest().expect("complete"),
            FileDigest::of_ordered(&[10, 11, 22])
        );
    }

    #[test]
    fn too_many_chunks_is_refused_up_front() {
        assert!(matches!(
            ChunkAccount::new(MAX_FILE_CHUNKS + 1),
            Err(DigestError::TooManyChunks { .. })
        ));
        assert_eq!(account(MAX_FILE_CHUNKS).remaining(), MAX_FILE_CHUNKS);
    }

    #[test]
    fn one_writer_per_file_takes_the_chunks_left_to_it_in_order() {
        let mut f: FileChunks<u64> = FileChunks::new(account(3));
        assert_eq!(f.offer(0), Offer::Write(0));
        assert_eq!(f.offer(1), Offer::Queued);
        assert_eq!(f.offer(2), Offer::Queued);
        assert_eq!(f.pending(), 2);
        assert_eq!(f.written(0, 100), Next::Write(1));
        assert_eq!(f.written(1, 101), Next::Write(2));
        match f.written(2, 102) {
            Next::Complete { digest, dropped } => {
                assert_eq!(digest, FileDigest::of_ordered(&[100, 101, 102]));
                assert!(dropped.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(f.is_ended() && !f.is_writing());
        assert_eq!(f.offer(1), Offer::Ended(1), "a late duplicate is dropped");
    }

    #[test]
    fn a_writer_goes_idle_and_the_next_chunk_makes_a_new_writer() {
        let mut f: FileChunks<u64> = FileChunks::new(account(2));
        assert_eq!(f.offer(0), Offer::Write(0));
        assert_eq!(f.written(0, 1), Next::Idle);
        assert!(!f.is_writing());
        assert_eq!(f.offer(0), Offer::Write(0), "a duplicate is offered again");
        assert!(f.is_held(0));
        assert_eq!(f.written(0, 1), Next::Idle, "and counts once");
        assert_eq!(f.account().remaining(), 1);
    }

    #[test]
    fn duplicates_waiting_at_completion_are_dropped() {
        let mut f: FileChunks<u64> = FileChunks::new(account(1));
        assert_eq!(f.offer(0), Offer::Write(0));
        assert_eq!(f.offer(0), Offer::Queued);
        match f.written(0, 5) {
            Next::Complete { dropped, .. } => assert_eq!(dropped, [0]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_ended_meanwhile_stops_its_writer() {
        let mut f: FileChunks<u64> = FileChunks::new(account(3));
        assert_eq!(f.offer(0), Offer::Write(0));
        assert_eq!(f.offer(1), Offer::Queued);
        assert!(f.end(), "the source gave it up");
        assert!(!f.end(), "once");
        assert_eq!(
            f.written(0, 1),
            Next::Ended {
                dropped: [1].into()
            }
        );
        assert!(!f.is_writing());
        assert_eq!(f.offer(2), Offer::Ended(2));
    }

    #[test]
    fn a_failed_write_is_reported_once_and_drops_what_waits() {
        let mut f: FileChunks<u64> = FileChunks::new(account(3));
        assert_eq!(f.offer(0), Offer::Write(0));
        assert_eq!(f.offer(1), Offer::Queued);
        let (first, dropped) = f.write_failed();
        assert!(first);
        assert_eq!(dropped, [1]);
        assert!(f.is_ended() && !f.is_writing());
        let mut g: FileChunks<u64> = FileChunks::new(account(3));
        assert_eq!(g.offer(0), Offer::Write(0));
        assert!(g.end());
        assert!(!g.write_failed().0, "already ended: not reported twice");
    }

    #[test]
    fn a_partial_holding_every_chunk_completes_without_a_write() {
        let mut a = account(2);
        assert_eq!(a.add(0, 7), Ok(true));
        assert_eq!(a.add(1, 8), Ok(true));
        let mut f: FileChunks<u64> = FileChunks::new(a);
        assert_eq!(f.finish(), Ok(FileDigest::of_ordered(&[7, 8])));
        assert!(f.is_ended());
        let mut g: FileChunks<u64> = FileChunks::new(account(2));
        assert!(g.finish().is_err(), "incomplete");
        assert!(!g.is_ended());
    }

    #[test]
    #[should_panic(expected = "a file completes once")]
    fn completing_twice_is_a_bug() {
        let mut a = account(1);
        assert_eq!(a.add(0, 7), Ok(true));
        let mut f: FileChunks<u64> = FileChunks::new(a);
        let _ = f.finish();
        let _ = f.finish();
    }
}
