//! A file's end: every chunk is in, so verify (with `--verify`, re-read it), rename
//! into place and report; or report why it failed.

use super::{redact_root, Entry, Shared};
use crate::fs::{file_error, SinkFile};
use crate::stats::FileOutcome;
use sluice_session::sink::{ended_frame, FileError};
use sluice_wire::{chunk_checksum, chunk_count, chunk_range, ErrorCode, FileDigest, FileEntry};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Every chunk of `e` is in (its chunks say so, and have ended it): verify, rename,
/// report. `handle` is the partial, taken from the entry.
pub(super) fn complete(
    shared: &Shared,
    e: &Entry,
    handle: Option<Arc<SinkFile>>,
    digest: [u8; 16],
) {
    let Some(file) = handle else {
        let missing = FileError::new(ErrorCode::Internal, "internal: file handle missing");
        finish_entry(shared, &e.entry, Err(missing));
        return;
    };
    // Another writer may still hold the handle for a moment (one stray duplicate at
    // most: the file has one writer); finishing takes `&SinkFile`, so no wait for it.
    let result = complete_file(shared, e, &file, digest);
    drop(file);
    finish_entry(shared, &e.entry, result);
}

/// Verifies (with `--verify`: re-reads the written file) and renames into place.
fn complete_file(
    shared: &Shared,
    e: &Entry,
    f: &SinkFile,
    digest: [u8; 16],
) -> Result<[u8; 16], FileError> {
    if shared.opts.verify {
        let reread = reread_digest(f.file(), e.entry.size, shared.chunk_bytes).map_err(|err| {
            file_error(
                format_args!("re-reading {:?} to verify it", e.dest.as_str()),
                &err,
            )
        })?;
        if reread != digest {
            // Kept as partial: dropping the last handle abandons it.
            return Err(FileError::new(
                ErrorCode::Io,
                format!(
                    "{:?}: the written data does not match what was received (re-read digest differs); kept as partial",
                    e.dest.as_str()
                ),
            ));
        }
    }
    f.finish(e.entry.mode, e.entry.mtime_ns, shared.opts.fsync)?;
    Ok(digest)
}

/// The per-file digest of a file's current content, read back chunk by chunk.
/// Uses one scratch buffer per writer thread, allocated on its first `--verify`.
pub(super) fn reread_digest(
    file: &std::fs::File,
    size: u64,
    chunk_bytes: u32,
) -> std::io::Result<[u8; 16]> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let count = chunk_count(size, chunk_bytes);
    let mut digest = FileDigest::new(count).map_err(std::io::Error::other)?;
    SCRATCH.with(|scratch| {
        let mut buf = scratch.borrow_mut();
        buf.resize(chunk_bytes as usize, 0);
        for index in 0..count {
            let Some((offset, len)) = chunk_range(size, chunk_bytes, index) else {
                break;
            };
            let len = len as usize;
            file.read_exact_at(&mut buf[..len], offset)?;
            digest
                .add(index, chunk_checksum(&buf[..len]))
                .map_err(std::io::Error::other)?;
        }
        digest.finish().map_err(std::io::Error::other)
    })
}

/// Reports an entry's end to the source (`FileDone`, or `FileFailed` with the error's
/// own code) and to the statistics; forgets it. A data file leaves the files in flight
/// once its word is queued.
pub(super) fn finish_entry(
    shared: &Shared,
    entry: &FileEntry,
    result: Result<[u8; 16], FileError>,
) {
    let file_id = entry.file_id;
    let was_in_flight = shared.table.remove(file_id).is_some();
    if let Err(e) = &result {
        tracing::warn!("{e}");
        shared.settle.file_failed();
    }
    // The peer learns what failed, not where this side keeps its files.
    let frame = ended_frame(file_id, &result, |m| redact_root(m, &shared.root));
    shared.control.send(frame);
    let outcome = match result {
        Ok(digest) => FileOutcome::Done { digest },
        Err(e) => FileOutcome::Failed { message: e.message },
    };
    shared.stats.file_done(entry, outcome);
    if was_in_flight {
        shared.settle.ended();
    }
}
