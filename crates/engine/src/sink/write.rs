//! Writing verified chunks: the small files of a packed chunk whole, the pieces of a
//! large file through its one writer (flat combining, kept by the session core's
//! [`FileChunks`](sluice_session::sink::FileChunks)).

use super::complete::{complete, finish_entry};
use super::table::Waited;
use super::{lock, Entry, Pending, Received, Shared};
use crate::error::EngineError;
use crate::fs::{self as sinkfs, FsError, ResumeMode, SinkFile};
use crate::monitor::{Stage, Time};
use crate::pipeline::Stages;
use crate::runtime::{Queues, Runtime};
use crossbeam_channel::bounded;
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_session::sink::{check_piece, check_segment, FileError, Next, Offer};
use sluice_wire::{chunk_checksum, ChunkHeader, FileDigest, Segment};
use std::collections::HashMap;
use std::sync::Arc;

/// The io-write threads of a queued pipeline (none inline), with their per-channel
/// queues, bounded by the channel's pool slots.
pub(super) fn spawn_writers(
    stages: &mut Stages,
    runtime: &Arc<Runtime>,
    shared: &Arc<Shared>,
    inline: bool,
) -> Result<Queues<Received>, EngineError> {
    let mut queues: Queues<Received> = HashMap::new();
    if inline {
        return Ok(queues);
    }
    for w in 0..shared.opts.io_threads.max(1) {
        let (channel, pool) = runtime.pool_for(Role::IoWrite, w);
        let (_, rx) = queues
            .entry(channel)
            .or_insert_with(|| bounded(pool.slots() as usize))
            .clone();
        let shared = Arc::clone(shared);
        stages.spawn(runtime, Role::IoWrite, w, move || {
            let mut clock = shared.stats.clock(channel).homed(Stage::Write);
            while let Ok(inc) = rx.recv() {
                clock.dequeued(Stage::Write);
                clock.lap(Stage::Write, Time::Idle);
                write_chunk(&shared, &inc.header, &inc.segments, inc.slot);
                clock.worked(Stage::Write, u64::from(inc.header.raw_len));
            }
            Ok(())
        })?;
    }
    Ok(queues)
}

/// Writes a verified chunk: a piece of a large file, or the small files of a pack.
pub(super) fn write_chunk(shared: &Shared, header: &ChunkHeader, segments: &[Segment], slot: Slot) {
    if header.is_packed() {
        write_packed(shared, header, segments, slot);
    } else {
        write_large(shared, *header, slot);
    }
}

/// A file a packed chunk ended, and how.
type Ended = (Arc<Entry>, Result<[u8; 16], FileError>);

thread_local! {
    /// The files a packed chunk ended, reported together once it is written: the
    /// control writer wakes once per pack and sends their frames in one write.
    static ENDED: std::cell::RefCell<Vec<Ended>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes each small file of a packed chunk whole, and acknowledges the chunk.
fn write_packed(shared: &Shared, header: &ChunkHeader, segments: &[Segment], slot: Slot) {
    let data = slot.filled_bytes();
    let mut at = 0usize;
    let mut writer = sinkfs::SmallWriter::new(&shared.root);
    ENDED.with_borrow_mut(|ended| {
        for seg in segments {
            let len = seg.len as usize;
            let bytes = &data[at..at + len];
            at += len;
            let e = match shared.table.wait(seg.file_id, shared) {
                Waited::Found(e) => e,
                Waited::Gone => {
                    tracing::warn!("file {} already ended: dropped", seg.file_id);
                    continue;
                }
                Waited::Late => {
                    ask_again(shared, seg.file_id, 0);
                    continue;
                }
            };
            if let Err(err) = check_segment(seg, e.entry.size, e.dest.as_str()) {
                ended.push((e, Err(err)));
                continue;
            }
            let digest = FileDigest::of_ordered(&[chunk_checksum(bytes)]);
            let meta = (e.entry.mode, e.entry.mtime_ns);
            let result = writer.write(&e.dest, bytes, meta, shared.opts.fsync, shared.clobber());
            ended.push((e, result.map(|()| digest).map_err(FileError::from)));
        }
        for (e, result) in ended.drain(..) {
            finish_entry(shared, &e.entry, result);
        }
    });
    drop(slot);
    ack(shared, header);
}

/// Writes a chunk of a large file. One thread at a time writes a given file: a chunk
/// that arrives while another thread writes it is left with that thread, which writes
/// it before it stops (flat combining, see `FileChunks`).
fn write_large(shared: &Shared, header: ChunkHeader, slot: Slot) {
    let e = match shared.table.wait(header.file_id, shared) {
        Waited::Found(e) => e,
        Waited::Gone => {
            tracing::warn!("file {} already ended: chunk dropped", header.file_id);
            ack_all(shared, [(header, slot)]);
            return;
        }
        Waited::Late => {
            drop(slot);
            ask_again(shared, header.file_id, header.offset);
            return;
        }
    };
    if let Err(err) = check_piece(&header, shared.chunk_bytes, e.entry.size, e.dest.as_str()) {
        misfit(shared, &e, err, (header, slot));
        return;
    }
    let Some((file, first)) = become_writer(shared, &e, (header, slot)) else {
        return;
    };
    let chunk_bytes = u64::from(shared.chunk_bytes);
    let mut next = Some(first);
    while let Some((header, slot)) = next.take() {
        let index = header.offset / chunk_bytes;
        let held = lock(&e.state).chunks.is_held(index);
        // Written without the lock, so chunks keep arriving meanwhile.
        if !held {
            if let Err(err) = file.write_at(header.offset, slot.filled_bytes()) {
                drop(file);
                write_failed(shared, &e, err, (header, slot));
                return;
            }
            let _ = file.record_chunk(index, header.checksum);
        }
        drop(slot);
        ack(shared, &header);
        let mut st = lock(&e.state);
        match st.chunks.written(index, header.checksum) {
            Next::Write(chunk) => next = Some(chunk),
            Next::Idle => {}
            Next::Ended { dropped } => {
                drop(st);
                ack_all(shared, dropped);
            }
            Next::Complete { digest, dropped } => {
                let handle = st.file.take();
                drop(st);
                drop(file);
                complete(shared, &e, handle, digest);
                ack_all(shared, dropped);
                return;
            }
        }
    }
}

/// Offers `chunk` to its file: this thread becomes the writer (the partial opened if it
/// is not yet) and gets it back, or the chunk is left to the writer there is, or dropped
/// (and acknowledged) because the file has ended.
fn become_writer(shared: &Shared, e: &Entry, chunk: Pending) -> Option<(Arc<SinkFile>, Pending)> {
    let mut st = lock(&e.state);
    let chunk = match st.chunks.offer(chunk) {
        Offer::Write(chunk) => chunk,
        Offer::Queued => return None,
        Offer::Ended(chunk) => {
            drop(st);
            ack_all(shared, [chunk]);
            return None;
        }
    };
    if let Some(f) = &st.file {
        return Some((Arc::clone(f), chunk));
    }
    match open_fresh(shared, e) {
        Ok(f) => {
            let f = Arc::new(f);
            st.file = Some(Arc::clone(&f));
            Some((f, chunk))
        }
        Err(err) => {
            let (first, dropped) = st.chunks.write_failed();
            drop(st);
            if first {
                finish_entry(shared, &e.entry, Err(err.into()));
            }
            ack_all(shared, std::iter::once(chunk).chain(dropped));
            None
        }
    }
}

/// Creates the partial of a file received from its first chunk.
fn open_fresh(shared: &Shared, e: &Entry) -> Result<SinkFile, FsError> {
    let incoming = shared.incoming(&e.entry);
    let clobber = shared.clobber();
    let (mut f, _) = SinkFile::create(&shared.root, &e.dest, incoming, ResumeMode::Fresh, clobber)?;
    direct_writes(shared, &mut f);
    Ok(f)
}

/// A write failed: the file ends (its partial kept for resume) and is reported once;
/// the chunk and those left with this writer are dropped and acknowledged.
fn write_failed(shared: &Shared, e: &Entry, err: FsError, chunk: Pending) {
    let (first, dropped) = {
        let mut st = lock(&e.state);
        st.file = None;
        st.chunks.write_failed()
    };
    if first {
        finish_entry(shared, &e.entry, Err(err.into()));
    }
    ack_all(shared, std::iter::once(chunk).chain(dropped));
}

/// A chunk that does not fit its file as announced: the file ends (a writer busy with
/// it stops after its chunk; the partial stays for resume) and is reported once; the
/// chunk is dropped and acknowledged.
fn misfit(shared: &Shared, e: &Entry, err: FileError, chunk: Pending) {
    let first = {
        let mut st = lock(&e.state);
        st.file = None;
        st.chunks.end()
    };
    if first {
        finish_entry(shared, &e.entry, Err(err));
    }
    ack_all(shared, [chunk]);
}

/// With `--direct`, makes `file` write its aligned blocks with `O_DIRECT` (one warning
/// per process where the file system refuses it; a file in memory is written through
/// the page cache, see [`SinkFile::use_direct`]).
pub(super) fn direct_writes(shared: &Shared, file: &mut SinkFile) {
    static REFUSED: std::sync::Once = std::sync::Once::new();
    if !shared.opts.direct {
        return;
    }
    if let Err(e) = file.use_direct() {
        REFUSED.call_once(|| {
            tracing::warn!(
                "--direct: cannot write {:?} with O_DIRECT ({e}); writing through the page cache",
                file.path().as_str()
            );
        });
    }
}

/// Tells the source that a chunk was delivered (written, or dropped because its file
/// had already ended), where the session acknowledges chunks.
fn ack(shared: &Shared, header: &ChunkHeader) {
    if let Some(frame) = sluice_session::sink::ack(shared.opts.chunk_acks, header) {
        shared.control.send(frame);
    }
}

/// A chunk (or a packed small file, offset 0) whose file the manifest did not announce
/// in time: the source sends it again rather than it being lost.
fn ask_again(shared: &Shared, file_id: u64, offset: u64) {
    tracing::warn!(
        "file {file_id}: a chunk waited {:?} for its manifest entry: asking for it again",
        sluice_session::sink::ENTRY_WAIT
    );
    shared
        .control
        .send(sluice_session::sink::nack(file_id, offset));
}

/// [`ack`] for each chunk of `chunks`, which are dropped.
fn ack_all(shared: &Shared, chunks: impl IntoIterator<Item = Pending>) {
    for (header, slot) in chunks {
        drop(slot);
        ack(shared, &header);
    }
}
