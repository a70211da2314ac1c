//! The `Have` and `ChunkNack` rules, as pure functions of one file's entry.

use super::{Resend, SourceConfig};
use crate::sched::is_small;
use sluice_wire::{chunk_count, ChunkNack, ChunkSet, FileEntry, FileKind, HaveState};

/// What to do with a file the sink answered with `state`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Schedule it, less `skip`; `resumed` bytes are held already.
    Send {
        skip: Option<ChunkSet>,
        resumed: Option<u64>,
    },
    /// Nothing to schedule (no data); its `FileDone` will come.
    Nothing,
    /// The sink keeps what it has.
    Skipped,
    /// The sink's final word names another version of the file (a `Complete` whose
    /// size or mtime differ from the entry's): the file fails, and nothing is sent.
    Mismatch,
}

pub(super) fn decide(entry: &FileEntry, state: HaveState, chunk_bytes: u32) -> Decision {
    let data = entry.kind == FileKind::File && entry.size > 0;
    let whole = if data {
        Decision::Send {
            skip: None,
            resumed: None,
        }
    } else {
        Decision::Nothing
    };
    match state {
        HaveState::Missing => whole,
        HaveState::Partial {
            size,
            mtime_ns,
            chunks,
        } => {
            // The partial is only trusted if the source has not changed since.
            if size == entry.size && mtime_ns == entry.mtime_ns {
                let resumed = held_bytes(entry.size, chunk_bytes, &chunks);
                Decision::Send {
                    skip: Some(chunks),
                    resumed: Some(resumed),
                }
            } else {
                Decision::Send {
                    skip: None,
                    resumed: None,
                }
            }
        }
        // A final word about another version: a broken sink (`BadFrame`).
        HaveState::Complete { size, mtime_ns, .. }
            if size != entry.size || mtime_ns != entry.mtime_ns =>
        {
            Decision::Mismatch
        }
        HaveState::Complete { .. } | HaveState::Skip(_) => Decision::Skipped,
    }
}

/// Whether the source keeps the sink's copy of `entry` when the sink answers `state`:
/// the file is then skipped, and no `FileDone` will come for it. (A relay that watches
/// a session from outside, as a third-party client does, applies the same rule.)
pub fn sink_keeps(entry: &FileEntry, state: &HaveState) -> bool {
    matches!(
        decide(entry, state.clone(), sluice_wire::MIN_CHUNK_BYTES),
        Decision::Skipped
    )
}

/// Whether the sink's answer `state` is a final word about another version of `entry`
/// (a `Complete` whose size or mtime differ): the source fails the file, and no
/// `FileDone` will come for it. (A relay applies the same rule.)
pub fn names_another_version(entry: &FileEntry, state: &HaveState) -> bool {
    matches!(
        decide(entry, state.clone(), sluice_wire::MIN_CHUNK_BYTES),
        Decision::Mismatch
    )
}

/// Bytes of a file of `size` the sink holds in `chunks`: whole chunks, less what the
/// last one lacks if it is held.
pub(super) fn held_bytes(size: u64, chunk_bytes: u32, chunks: &ChunkSet) -> u64 {
    let chunk = u64::from(chunk_bytes);
    let count = chunk_count(size, chunk_bytes);
    let held = chunks.len().saturating_mul(chunk);
    if count > 0 && chunks.contains(count - 1) {
        held.saturating_sub(count * chunk - size)
    } else {
        held
    }
}

/// What to send again of a file of `size` after a `ChunkNack` at `offset`.
pub(super) fn resend(cfg: &SourceConfig, size: u64, nack: &ChunkNack) -> Resend {
    if is_small(size, cfg.chunk_bytes, cfg.small_max_bytes) {
        return Resend::Pack;
    }
    let chunk = u64::from(cfg.chunk_bytes);
    let len = (size - nack.offset.min(size)).min(chunk);
    Resend::Chunk {
        index: nack.offset / chunk,
        offset: nack.offset,
        len: u32::try_from(len).unwrap_or(0),
    }
}
