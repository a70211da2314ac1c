//! The values the sink's control plane exchanges with the engine: its options, the
//! destination facts it asks for, the actions it asks for, and what to do after a frame.

use sluice_wire::{FileEntry, Frame, FrameType, RelPath};

use super::chunks::ChunkAccount;
use super::error::FileError;
#[cfg(doc)]
use super::Master;

/// What the session asked of the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Continue from what the destination already holds (`--resume`).
    pub resume: bool,
    /// Skip files whose destination has the same size and mtime (`--update`).
    pub update: bool,
    /// Never replace an existing destination (`--no-clobber`).
    pub no_clobber: bool,
    /// The session's chunk size.
    pub chunk_bytes: u32,
    /// The sink ends the session by itself (`SINK_CLOSES` negotiated): once
    /// `ManifestEnd` has come and the engine reports no data file in flight
    /// ([`Master::settled`]), it finishes the directories and sends `CloseAck` unasked.
    pub sink_closes: bool,
}

impl Options {
    /// Whether each data file is answered with a `Have` before its chunks come.
    #[must_use]
    pub fn negotiates(&self) -> bool {
        self.resume || self.update || self.no_clobber
    }
}

/// A fact about an entry's destination that [`Master::announce`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Does the destination exist (as anything)? Fill [`DestFacts::exists`].
    Exists,
    /// Is it a regular file of the entry's size and mtime? Fill
    /// [`DestFacts::same_size_and_mtime`].
    SameSizeAndMtime,
    /// The digest of the destination's content, read back chunk by chunk. Fill
    /// [`DestFacts::whole_digest`].
    WholeDigest,
    /// Open the destination's partial for resume (verifying the chunks its log names).
    /// Fill [`DestFacts::partial`]; keep the open partial until the actions say what
    /// becomes of it ([`Action::Receive`] with `resumed`, or [`Action::DiscardPartial`]).
    Partial,
}

/// What the destination of one entry is, as far as [`Master::probe`] asked. `None`: not
/// looked up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestFacts {
    /// The destination exists (a lookup error counts as `false`).
    pub exists: Option<bool>,
    /// It is a regular file of the entry's size and mtime (an error counts as `false`).
    pub same_size_and_mtime: Option<bool>,
    /// The digest of what is there, or why it could not be read.
    pub whole_digest: Option<Result<[u8; 16], FileError>>,
    /// What a partial of the file holds.
    pub partial: Option<PartialFacts>,
}

/// What the destination's partial holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartialFacts {
    /// No partial.
    Absent,
    /// A partial whose log was written for this version of the file (size, mtime, chunk
    /// size), holding these chunks, `(index, checksum)`, each re-read and verified. Empty:
    /// a partial of another version, reset.
    Held(Vec<(u64, u64)>),
    /// It could not be opened or read.
    Failed(FileError),
}

/// What the engine does for the sink: frames to send, file-system work to carry out
/// (reporting each result back), and bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send this frame to the source.
    Send(Frame),
    /// Create the directory `dest` (writable by its owner until [`Action::FinishDir`]
    /// at `Close`); report with [`Master::made`].
    MakeDir {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// Its permission bits.
        mode: u32,
    },
    /// Create the symlink `dest` -> `target`; report with [`Master::made`].
    MakeSymlink {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// The target, stored verbatim.
        target: String,
        /// Its mtime.
        mtime_ns: i64,
    },
    /// Write the empty file `dest`; report with [`Master::made`].
    WriteEmpty {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// Its permission bits.
        mode: u32,
        /// Its mtime.
        mtime_ns: i64,
    },
    /// A data file: put it in the file table with this account; its chunks will come.
    Receive {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// What is written already (the partial's chunks when `resumed`).
        account: ChunkAccount,
        /// Write into the partial opened by [`Probe::Partial`].
        resumed: bool,
    },
    /// Remove the partial opened by [`Probe::Partial`]: it is of another version.
    DiscardPartial {
        /// The entry.
        file_id: u64,
    },
    /// The partial held every chunk: complete the file just received (no data comes).
    Complete {
        /// The entry.
        file_id: u64,
    },
    /// The file stays as it is: count it skipped.
    Skipped {
        /// The entry.
        file_id: u64,
        /// The destination's digest, when it was whole already.
        whole: Option<[u8; 16]>,
    },
    /// The partial held this many bytes (counted, so that a pull's summary shows them).
    Resumed {
        /// The entry.
        file_id: u64,
        /// Bytes held.
        bytes: u64,
    },
    /// The entry ended (made, or failed): report it with `FileDone`/`FileFailed` (see
    /// [`super::ended_frame`]) and count it.
    Ended {
        /// The entry.
        file_id: u64,
        /// Its digest, or why it failed.
        result: Result<[u8; 16], FileError>,
    },
    /// The manifest has announced `file_id` (after its entry, if any, is in the table).
    Announced {
        /// The entry.
        file_id: u64,
    },
    /// The source could not read the file: [`super::FileTable::forget`] it (its partial
    /// stays for resume).
    Forget {
        /// The entry.
        file_id: u64,
        /// The source's message.
        message: String,
    },
    /// `Close` arrived: the data threads stop (nothing more comes).
    Stop,
    /// Give a received directory its exact permission bits and its mtime, now that its
    /// contents are in (deepest first): it was made writable by its owner meanwhile.
    FinishDir {
        /// The directory.
        dest: RelPath,
        /// Its permission bits.
        mode: u32,
        /// Its mtime.
        mtime_ns: i64,
    },
    /// A frame the sink does not handle.
    Ignored(FrameType),
}

/// What the engine does after [`Master::on_frame`] (then it drains the actions).
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// Wait for the next frame.
    Continue,
    /// Announce these entries, in order: for each, probe, [`Master::announce`], drain.
    Announce(Vec<FileEntry>),
    /// The session is closed: drain the actions (the last is `CloseAck`) and stop.
    Closed,
}
