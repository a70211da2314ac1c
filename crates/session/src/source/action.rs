//! What the source core tells its driver: actions to carry out, what it waits for, and
//! why a session fails.

use crate::time::Instant;
use sluice_wire::{ChunkSet, ErrorCode, FileEntry, Frame};

/// A chunk as `auto` names it: (file id, offset) from its header.
pub type ChunkKey = (u64, u64);

/// What to read and send again after a `ChunkNack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// The small file whole, in a pack of its own.
    Pack,
    /// One chunk of a large file (not counted in flight on its storage target).
    Chunk {
        /// Chunk index.
        index: u64,
        /// File-relative offset.
        offset: u64,
        /// Bytes.
        len: u32,
    },
}

/// What the session's statistics learn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The scanner found an entry of `size` bytes.
    Announced {
        /// Bytes.
        size: u64,
    },
    /// An entry of the tree could not be scanned (also told to the sink).
    ScanError(String),
    /// The sink holds the file already (no-clobber, update, a whole earlier copy).
    Skipped(FileEntry),
    /// The sink completed the file.
    Done {
        /// The file.
        entry: FileEntry,
        /// Its digest, as the sink computed it.
        digest: [u8; 16],
    },
    /// The sink gave the file up.
    Failed {
        /// The file.
        entry: FileEntry,
        /// Why.
        message: String,
    },
    /// Bytes the sink already held (resume).
    Resumed {
        /// Bytes.
        bytes: u64,
    },
    /// A chunk is sent again after the sink rejected it.
    ChunkResent,
}

/// What the driver carries out, in order, before the next event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceAction {
    /// Send this frame on the control connection.
    Send(Frame),
    /// Hand file `file_id` (see [`super::SourceCore::entry`]) to the scheduler, less the chunks
    /// in `skip` (the sink holds them).
    Schedule {
        /// The file.
        file_id: u64,
        /// Chunks not to send.
        skip: Option<ChunkSet>,
    },
    /// Read and send this part of file `file_id` again, ahead of other work.
    Resend {
        /// The file.
        file_id: u64,
        /// Which part.
        work: Resend,
    },
    /// The sink gave `file_id` up: read and send none of the rest of it.
    Cancel {
        /// The file.
        file_id: u64,
    },
    /// Release the scheduler's partly filled pack (nothing more may come soon).
    ReleasePacks,
    /// No more files will be scheduled: the scheduler may close once drained.
    EndOfFiles,
    /// The sink delivered this chunk at `at` (for `auto`'s goodput).
    Delivered {
        /// The chunk.
        key: ChunkKey,
        /// When its acknowledgement arrived.
        at: Instant,
    },
    /// The sink refused this chunk (for `auto`).
    Refused {
        /// The chunk.
        key: ChunkKey,
    },
    /// Count this in the session's statistics.
    Report(Report),
}

/// What the core waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Entries from the scanner (and the sink's answers meanwhile).
    Entries,
    /// The scan ended: the sink's answers to the files still in flight.
    Answers,
    /// Every file answered: the data path to finish and close its connections.
    DataSent,
    /// The sink's `CloseAck`, due by `deadline`.
    CloseAck {
        /// When waiting ends in an error.
        deadline: Instant,
    },
    /// Nothing: the session closed in order.
    Finished,
    /// Nothing: the session failed.
    Failed,
}

/// Why a source session cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The sink sent `Error`.
    Remote {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The sink went away (or did not acknowledge the close in time) while this side
    /// was `state`.
    Disconnected {
        /// What this side was doing.
        state: &'static str,
    },
    /// The sink sent a frame it may not send now.
    Unexpected {
        /// The frame.
        got: &'static str,
        /// Why not now.
        state: &'static str,
    },
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Remote { code, message } => write!(f, "sink error {code:?}: {message}"),
            SourceError::Disconnected { state } => write!(f, "sink disconnected while {state}"),
            SourceError::Unexpected { got, state } => {
                write!(f, "the sink sent {got} while {state}")
            }
        }
    }
}

impl std::error::Error for SourceError {}
