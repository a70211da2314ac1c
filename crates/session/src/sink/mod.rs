//! The receiving side of a session: announce -> `Have`/`Skip`, chunk accounting,
//! completion, with no I/O.
//!
//! Four pieces, each a value the engine keeps where its threads need it (a simulation
//! keeps them all in one place and drives them without threads or files):
//!
//! * [`Master`] (the engine's master thread): control frames in ([`Master::on_frame`]);
//!   for each manifest entry, the destination facts it needs ([`Master::probe`]) and its
//!   decision ([`Master::announce`]); the results of the file-system work it asked for
//!   ([`Master::made`]); [`Action`]s out ([`Master::poll_action`]), `Close` included
//!   (directories' modes and times deepest first, then `CloseAck`), and the close it
//!   starts itself once the session has settled ([`Master::settled`], `SINK_CLOSES`).
//! * [`FileTable`] (under a mutex shared by the receiving threads): where a chunk finds
//!   its file, waits for the manifest to announce it (until a deadline, time passed in),
//!   or learns that it has ended (dropped at once).
//! * [`FileChunks`] (under each file's mutex): which chunks are written, the digest,
//!   completion, and the one-writer-per-file rule.
//! * [`ack`], [`nacks`], [`ended_frame`]: the frames a chunk or a file's end produces.
//! * [`check_piece`], [`check_segment`]: whether a verified chunk fits its file as
//!   announced (one that does not ends the file with `BadFrame`).
//!
//! One chunk, as the engine carries it: it is received and decoded; a chunk that does
//! not decode or verify is answered with [`nacks`] (the source sends it again) and never
//! written. Otherwise its file is looked up in the [`FileTable`]; `Gone` drops it (and
//! [`ack`]s it); one that does not fit the file ([`check_piece`]) ends it.
//! [`FileChunks::offer`] makes this thread the file's writer or leaves the
//! chunk to the writer there is; the writer writes (skipping a chunk
//! [`FileChunks::is_held`]), [`ack`]s, and reports [`FileChunks::written`], which hands
//! it the next chunk or says the file is complete (verify, rename, [`ended_frame`]).
//!
//! ```
//! use sluice_session::sink::{Action, DestFacts, Flow, Master, Options};
//! use sluice_wire::{FileEntry, FileKind, Frame, Manifest, RelPath};
//!
//! let opts = Options {
//!     resume: false, update: false, no_clobber: false, chunk_bytes: 1 << 16, sink_closes: false,
//! };
//! let mut sink = Master::new(opts);
//! let entry = FileEntry {
//!     file_id: 1, path: RelPath::parse("a.bin")?, kind: FileKind::File,
//!     size: 100_000, mode: 0o644, mtime_ns: 0, symlink_target: None,
//! };
//! let mut m = Manifest::new();
//! m.try_push(entry.clone()).expect("room");
//! let Ok(Flow::Announce(entries)) = sink.on_frame(Frame::Manifest(m)) else { panic!() };
//! assert!(sink.probe(&entries[0], &DestFacts::default()).is_none(), "nothing to look up");
//! sink.announce(&entries[0], Some(entry.path.clone()), DestFacts::default());
//! match sink.poll_action() {
//!     Some(Action::Receive { account, .. }) => assert_eq!(account.remaining(), 2),
//!     other => panic!("{other:?}"),
//! }
//! assert_eq!(sink.poll_action(), Some(Action::Announced { file_id: 1 }));
//! # Ok::<(), sluice_wire::PathError>(())
//! ```

mod action;
mod chunks;
mod error;
mod master;
mod table;

pub use action::{Action, DestFacts, Flow, Options, PartialFacts, Probe};
pub use chunks::{ChunkAccount, FileChunks, Next, Offer};
pub use error::FileError;
pub use master::Master;
pub use table::{
    FileTable, Forgotten, Lookup, TableError, ENTRY_WAIT, MAX_OPEN_FILES, UNDESCRIBED_FILE_ID,
};

use sluice_wire::{
    ChunkAck, ChunkHeader, ChunkNack, ErrorCode, FileDone, FileFailed, Frame, Segment,
};

/// The reason a chunk is asked for again: its bytes did not decode or verify, so the
/// source sends it again ([`sluice_wire::Recovery::Retry`]).
pub const NACK_REASON: ErrorCode = ErrorCode::ChecksumMismatch;

/// The `ChunkAck` for a chunk delivered (written, or dropped because its file had
/// ended), where the session acknowledges chunks (`chunk_acks`).
#[must_use]
pub fn ack(chunk_acks: bool, header: &ChunkHeader) -> Option<Frame> {
    chunk_acks.then_some(Frame::ChunkAck(ChunkAck {
        file_id: header.file_id,
        offset: header.offset,
    }))
}

/// The `ChunkNack`s for a chunk whose bytes did not decode or verify: one for a piece of
/// a large file; one per file of a packed chunk (each is sent again whole, offset 0).
pub fn nacks<'a>(
    header: &'a ChunkHeader,
    segments: &'a [Segment],
) -> impl Iterator<Item = Frame> + 'a {
    let packed = header.is_packed();
    let each_file = segments
        .iter()
        .filter(move |_| packed)
        .map(move |s| nack(s.file_id, 0));
    let this_piece = (!packed).then(|| nack(header.file_id, header.offset));
    each_file.chain(this_piece)
}

/// The `ChunkNack` asking the source to send the chunk of `file_id` at `offset` again
/// (a packed small file: offset 0, the file whole).
#[must_use]
pub fn nack(file_id: u64, offset: u64) -> Frame {
    Frame::ChunkNack(ChunkNack {
        file_id,
        offset,
        reason: NACK_REASON,
    })
}

/// The frame that reports a file's end to the source: `FileDone` with its digest, or
/// `FileFailed` with the error's code and its message as `redact` rewrites it (the peer
/// learns what failed, not where this side keeps its files).
pub fn ended_frame(
    file_id: u64,
    result: &Result<[u8; 16], FileError>,
    redact: impl FnOnce(&str) -> String,
) -> Frame {
    match result {
        Ok(digest) => Frame::FileDone(FileDone {
            file_id,
            digest: *digest,
        }),
        Err(e) => Frame::FileFailed(FileFailed::new(file_id, e.code, redact(&e.message))),
    }
}

/// Whether a piece of a large file fits the file as its manifest entry announced it
/// (`size`, in the session's `chunk_bytes`): its offset on a chunk boundary inside the
/// file, its `raw_len` that chunk's length, `LAST` on the file's last chunk and only
/// there ([`ChunkHeader::validate_geometry`]). A chunk that does not fit ends its file
/// with `BadFrame`, naming `dest`; it is never written.
///
/// # Errors
/// The [`FileError`] the file ends with.
pub fn check_piece(
    header: &ChunkHeader,
    chunk_bytes: u32,
    size: u64,
    dest: &str,
) -> Result<(), FileError> {
    header.validate_geometry(chunk_bytes, size).map_err(|e| {
        FileError::new(
            ErrorCode::BadFrame,
            format!(
                "{dest:?}: the chunk at offset {} does not fit the file of {size} bytes ({e})",
                header.offset
            ),
        )
    })
}

/// Whether a small file's segment of a packed chunk is the whole file its manifest
/// entry announced (`len` equal to its `size`). One that is not ends the file with
/// `BadFrame`, naming `dest`; it is never written.
///
/// # Errors
/// The [`FileError`] the file ends with.
pub fn check_segment(segment: &Segment, size: u64, dest: &str) -> Result<(), FileError> {
    if u64::from(segment.len) == size {
        return Ok(());
    }
    Err(FileError::new(
        ErrorCode::BadFrame,
        format!(
            "{dest:?}: a packed segment of {} bytes for a file of {size} bytes",
            segment.len
        ),
    ))
}

#[cfg(test)]
mod tests;
