//! The sink side of a session: receive → verify → write → rename.
//!
//! Threads: the master (the calling thread) applies the manifest (directories ahead,
//! links, empty files, resume answers); one net-recv thread per data connection, pinned
//! by the plan, reads each chunk straight into a slot of its channel's NUMA-local pool,
//! verifies its checksum (a corrupted chunk is re-requested, never written) and writes
//! it itself (inline) or hands it to the channel's io-write threads (queued). A file is
//! renamed into place only when every chunk is written (and, with `--verify`, re-read).

use crate::codec::{CompressMode, Decompressor};
use crate::control::{ControlEvent, ControlTx, Wiring};
use crate::error::EngineError;
use crate::fs::Root;
use crate::fs::{self as sinkfs, Clobber, Incoming, ResumeMode, SinkFile};
use crate::runtime::{queue_for, Queues, Runtime};
use crate::session::DestMap;
use crate::stats::{FileOutcome, Stats};
use crate::transport::{ChunkReceiver, DataEvent};
use crate::{Pipeline, SessionOptions};
use crossbeam_channel::{bounded, Receiver, Sender};
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_wire::{
    chunk_checksum, chunk_count, chunk_range, ChunkAck, ChunkHeader, ChunkNack, ChunkSet, CloseAck,
    Compression, ErrorCode, FileDigest, FileDone, FileEntry, FileFailed, FileKind, Frame, Have,
    HaveState, RelPath, Segment, SkipReason,
};
use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a chunk may wait for its file's manifest entry.
const ENTRY_WAIT: Duration = Duration::from_secs(60);

/// A file being received.
#[derive(Debug)]
struct Entry {
    entry: FileEntry,
    dest: RelPath,
    state: Mutex<EntryState>,
}

#[derive(Debug)]
struct EntryState {
    /// The open partial; written outside this lock by the file's one writer.
    file: Option<Arc<SinkFile>>,
    /// A thread is writing this file's chunks (it drains `pending` before it stops).
    writing: bool,
    /// Verified chunks that arrived while another thread was writing this file: that
    /// thread writes them too (bounded by the pools' slots, which they hold).
    pending: VecDeque<(ChunkHeader, Slot)>,
    /// Chunks written (a chunk delivered twice counts once).
    received: Option<ChunkSet>,
    remaining: u64,
    digest: Option<FileDigest>,
    done: bool,
}

/// Files announced by the source and not finished, by id. Bounded by the source's
/// in-flight window.
#[derive(Debug, Default)]
struct Table {
    map: Mutex<HashMap<u64, Arc<Entry>>>,
    added: Condvar,
    /// The highest file id the manifest has announced (written under `map`'s lock). The
    /// source numbers entries in manifest order, so a chunk whose id is at most this and
    /// that has no entry belongs to a file already finished (failed, skipped): it is
    /// dropped at once instead of waiting for an entry that will never come.
    announced_max: std::sync::atomic::AtomicU64,
}

impl Table {
    fn insert(&self, e: Arc<Entry>) {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(e.entry.file_id, e);
        self.added.notify_all();
    }

    /// Records that the manifest has announced `id` (after its entry, if any, is in).
    fn announced(&self, id: u64) {
        let _map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.announced_max.fetch_max(id, Ordering::Relaxed);
        self.added.notify_all();
    }

    fn remove(&self, id: u64) -> Option<Arc<Entry>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id)
    }

    /// The entry for `id`, waiting for the manifest to announce it; `None` at once for a
    /// file announced and already finished.
    fn wait(&self, id: u64, abort: &AtomicBool) -> Option<Arc<Entry>> {
        let deadline = Instant::now() + ENTRY_WAIT;
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(e) = map.get(&id) {
                return Some(Arc::clone(e));
            }
            let finished = id <= self.announced_max.load(Ordering::Relaxed);
            let now = Instant::now();
            if finished || now >= deadline || abort.load(Ordering::Relaxed) {
                return None;
            }
            let (m, _) = self
                .added
                .wait_timeout(map, (deadline - now).min(Duration::from_millis(200)))
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            map = m;
        }
    }
}

/// Everything the receiving threads share.
struct Shared {
    root: Arc<Root>,
    dest: DestMap,
    opts: SessionOptions,
    chunk_bytes: u32,
    table: Table,
    control: ControlTx,
    stats: Arc<Stats>,
    abort: AtomicBool,
}

/// A chunk on its way to a decompress thread (as received) or to an io-write thread
/// (verified).
struct Received {
    header: ChunkHeader,
    segments: Vec<Segment>,
    slot: Slot,
}

/// Runs the sink side to completion, writing where `dest` maps inside `root`.
///
/// # Errors
/// A fatal session error; per-file failures are reported to the source and in `stats`.
pub fn run(
    runtime: &Arc<Runtime>,
    root: Arc<Root>,
    dest: DestMap,
    opts: &SessionOptions,
    wiring: Wiring<'_>,
    conns: Vec<ChunkReceiver>,
) -> Result<(), EngineError> {
    let Wiring {
        control,
        events,
        stats,
    } = wiring;
    let shared = Arc::new(Shared {
        root,
        dest,
        opts: opts.clone(),
        chunk_bytes: opts.chunk_bytes,
        table: Table::default(),
        control: control.clone(),
        stats: Arc::clone(stats),
        abort: AtomicBool::new(false),
    });
    let stream_count = u32::try_from(conns.len()).unwrap_or(u32::MAX);
    let inline = match opts.pipeline {
        Pipeline::Inline => true,
        Pipeline::Queued => false,
        Pipeline::Auto => opts.io_threads <= 2 * stream_count,
    };
    stats.set_pipeline(if inline { "inline" } else { "queued" });
    stats.set_io_mode(opts.direct);

    let mut threads = Vec::new();
    let mut queues: Queues<Received> = HashMap::new();
    if !inline {
        for w in 0..opts.io_threads.max(1) {
            let (channel, pool) = runtime.pool_for(Role::IoWrite, w);
            let (_, rx) = queues
                .entry(channel)
                .or_insert_with(|| bounded(pool.slots() as usize))
                .clone();
            let shared = Arc::clone(&shared);
            threads.push(
                runtime
                    .spawn(Role::IoWrite, w, move || -> Result<(), EngineError> {
                        while let Ok(inc) = rx.recv() {
                            write_chunk(&shared, &inc.header, &inc.segments, inc.slot);
                        }
                        Ok(())
                    })
                    .map_err(|e| EngineError::io("starting an io-write thread", e))?,
            );
        }
    }
    // Decompression stage (seed 001): when the session compresses and the plan has
    // decompress threads, net-recv threads hand compressed chunks to them through
    // bounded per-channel queues; each decompresses, verifies and writes (or queues for
    // the writers). Otherwise the net-recv thread decompresses itself.
    let decompress_threads = runtime.planned(Role::Decompress);
    let mut stage: Queues<Received> = HashMap::new();
    if opts.compress != CompressMode::None && decompress_threads > 0 {
        stats.set_codec_threads(decompress_threads);
        tracing::info!("decompress stage: {decompress_threads} threads");
        for d in 0..decompress_threads {
            let (channel, _) = runtime.pool_for(Role::Decompress, d);
            // Short: a deep queue would only hide from the source's `auto` what its
            // choice costs here (TCP back pressure has to reach it within an epoch).
            let (_, rx) = stage
                .entry(channel)
                .or_insert_with(|| bounded(2 * decompress_threads as usize))
                .clone();
            let to_writer = queue_for(&queues, channel, d).filter(|_| !inline);
            let shared = Arc::clone(&shared);
            threads.push(
                runtime
                    .spawn(Role::Decompress, d, move || -> Result<(), EngineError> {
                        let mut decompressor = Decompressor::new();
                        while let Ok(inc) = rx.recv() {
                            let chunk = (inc.header, &inc.segments[..], inc.slot);
                            if !accept_chunk(
                                &shared,
                                &mut decompressor,
                                channel,
                                chunk,
                                to_writer.as_ref(),
                            ) {
                                break;
                            }
                        }
                        Ok(())
                    })
                    .map_err(|e| EngineError::io("starting a decompress thread", e))?,
            );
        }
    }
    for (i, mut conn) in conns.into_iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (channel, pool) = runtime.pool_for(Role::NetRecv, i);
        // A channel without io-write (decompress) threads of its own hands its chunks to
        // every channel's, connection by connection.
        let to_writer = queue_for(&queues, channel, i).filter(|_| !inline);
        let to_decompress = queue_for(&stage, channel, i);
        let shared = Arc::clone(&shared);
        threads.push(
            runtime
                .spawn(Role::NetRecv, i, move || -> Result<(), EngineError> {
                    let mut decompressor = Decompressor::new();
                    loop {
                        let header = match conn.next_event()? {
                            DataEvent::Chunk(h) => h,
                            DataEvent::Frame(_) | DataEvent::End => return Ok(()),
                        };
                        // A slot, or the session's end: never wait forever on slots held
                        // by a queue whose writers are gone.
                        let mut slot = loop {
                            if shared.abort.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                            if let Some(s) = pool.acquire_timeout(Duration::from_millis(200)) {
                                break s;
                            }
                        };
                        let wire = header.wire_len as usize;
                        if wire > slot.len() {
                            return Err(EngineError::Config(format!(
                                "chunk of {wire} bytes exceeds the {}-byte buffer slot",
                                slot.len()
                            )));
                        }
                        conn.payload(&mut slot[..wire])?;
                        slot.set_filled(wire);
                        shared.stats.add_wire(channel, u64::from(header.wire_len));
                        if let (Some(q), true) =
                            (&to_decompress, header.compression() != Compression::None)
                        {
                            let inc = Received {
                                header,
                                segments: conn.segments().to_vec(),
                                slot,
                            };
                            if q.send(inc).is_err() {
                                return Ok(());
                            }
                            continue;
                        }
                        let chunk = (header, conn.segments(), slot);
                        if !accept_chunk(
                            &shared,
                            &mut decompressor,
                            channel,
                            chunk,
                            to_writer.as_ref(),
                        ) {
                            return Ok(());
                        }
                    }
                })
                .map_err(|e| EngineError::io("starting a net-recv thread", e))?,
        );
    }
    drop(stage);
    drop(queues);

    let result = master(&shared, events);
    if result.is_err() {
        shared.abort.store(true, Ordering::Relaxed);
    }
    let mut thread_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                thread_error.get_or_insert(e);
            }
            Err(_) => {
                thread_error.get_or_insert(EngineError::Aborted("a data thread panicked".into()));
            }
        }
    }
    result?;
    match thread_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Decodes (a compressed chunk that does not decode is corrupt: re-sent, never
/// written), verifies (a mismatch is re-sent, never written) and writes a received
/// chunk (its header, segment table and slot, as they came off the wire), itself or
/// through `to_writer`. `false`: the writers are gone.
fn accept_chunk(
    shared: &Shared,
    decompressor: &mut Decompressor,
    channel: u32,
    (header, segments, mut slot): (ChunkHeader, &[Segment], Slot),
    to_writer: Option<&Sender<Received>>,
) -> bool {
    let compression = header.compression();
    if compression != Compression::None {
        let (wire, raw) = (header.wire_len as usize, header.raw_len as usize);
        if let Err(e) = decompressor.decompress(compression, &mut slot, wire, raw) {
            tracing::warn!("chunk of file {} does not decompress: {e}", header.file_id);
            nack(shared, &header, segments);
            return true;
        }
        slot.set_filled(raw);
    }
    if !header.verify(slot.filled_bytes()) {
        nack(shared, &header, segments);
        return true;
    }
    shared.stats.add_payload(channel, u64::from(header.raw_len));
    match to_writer {
        Some(q) => q
            .send(Received {
                header,
                segments: segments.to_vec(),
                slot,
            })
            .is_ok(),
        None => {
            write_chunk(shared, &header, segments, slot);
            true
        }
    }
}

/// Asks the source to send a corrupted chunk again (each file of a packed chunk).
fn nack(shared: &Shared, header: &ChunkHeader, segments: &[Segment]) {
    tracing::warn!(
        "chunk of file {} at offset {} failed its checksum: asking the source to send it again",
        header.file_id,
        header.offset
    );
    let reason = ErrorCode::ChecksumMismatch;
    // Counted here too, so that a pull's summary (the client is the sink) shows it.
    shared.stats.chunk_resent();
    if header.is_packed() {
        for s in segments {
            shared.control.send(Frame::ChunkNack(ChunkNack {
                file_id: s.file_id,
                offset: 0,
                reason,
            }));
        }
    } else {
        shared.control.send(Frame::ChunkNack(ChunkNack {
            file_id: header.file_id,
            offset: header.offset,
            reason,
        }));
    }
}

/// Tells the source that a chunk was delivered (written, or dropped because its file
/// had already ended), where the session acknowledges chunks.
fn delivered(shared: &Shared, header: &ChunkHeader) {
    if shared.opts.chunk_acks {
        shared.control.send(Frame::ChunkAck(ChunkAck {
            file_id: header.file_id,
            offset: header.offset,
        }));
    }
}

/// [`delivered`] for each chunk of `chunks`, which are dropped.
fn delivered_all(shared: &Shared, chunks: impl IntoIterator<Item = (ChunkHeader, Slot)>) {
    for (header, slot) in chunks {
        drop(slot);
        delivered(shared, &header);
    }
}

/// Writes a verified chunk: a piece of a large file, or the small files of a pack.
fn write_chunk(shared: &Shared, header: &ChunkHeader, segments: &[Segment], slot: Slot) {
    if !header.is_packed() {
        write_large(shared, *header, slot);
        return;
    }
    let data = slot.filled_bytes();
    let mut at = 0usize;
    for seg in segments {
        let len = seg.len as usize;
        let bytes = &data[at..at + len];
        at += len;
        let Some(e) = shared.table.wait(seg.file_id, &shared.abort) else {
            tracing::warn!(
                "file {} already ended or never announced: dropped",
                seg.file_id
            );
            continue;
        };
        let digest = FileDigest::of_ordered(&[chunk_checksum(bytes)]);
        let result = sinkfs::write_small_file(
            &shared.root,
            &e.dest,
            bytes,
            e.entry.mode,
            e.entry.mtime_ns,
            shared.opts.fsync,
            clobber(&shared.opts),
        );
        finish_entry(
            shared,
            &e,
            result.map(|()| digest).map_err(|err| err.to_string()),
        );
    }
    drop(slot);
    delivered(shared, header);
}

/// Writes a chunk of a large file. One thread at a time writes a given file: a chunk
/// that arrives while another thread writes it is left with that thread, which writes
/// it before it stops (flat combining). Two writers of one file would only contend for
/// the kernel's inode lock (spinning on it burnt 14 % of the receiver's CPU), while this
/// way the thread that handed its chunk over goes back to its socket.
fn write_large(shared: &Shared, header: ChunkHeader, slot: Slot) {
    let Some(e) = shared.table.wait(header.file_id, &shared.abort) else {
        tracing::warn!(
            "file {} already ended or never announced: chunk dropped",
            header.file_id
        );
        delivered_all(shared, [(header, slot)]);
        return;
    };
    let chunk_bytes = u64::from(shared.chunk_bytes);
    // Become the file's writer, or leave the chunk to the one there is.
    let file = {
        let mut st = lock(&e.state);
        if st.done {
            drop(st);
            delivered_all(shared, [(header, slot)]);
            return;
        }
        if st.writing {
            st.pending.push_back((header, slot));
            return;
        }
        let file = match &st.file {
            Some(f) => Arc::clone(f),
            None => match SinkFile::create(
                &shared.root,
                &e.dest,
                incoming(shared, &e.entry),
                ResumeMode::Fresh,
                clobber(&shared.opts),
            ) {
                Ok((mut f, _)) => {
                    direct_writes(shared, &mut f);
                    let f = Arc::new(f);
                    st.file = Some(Arc::clone(&f));
                    f
                }
                Err(err) => {
                    st.done = true;
                    drop(st);
                    finish_entry(shared, &e, Err(err.to_string()));
                    delivered_all(shared, [(header, slot)]);
                    return;
                }
            },
        };
        st.writing = true;
        file
    };
    let mut next = Some((header, slot));
    while let Some((header, slot)) = next.take() {
        let index = header.offset / chunk_bytes;
        let held = lock(&e.state)
            .received
            .as_ref()
            .is_some_and(|r| r.contains(index));
        // Written without the lock, so chunks keep arriving meanwhile.
        if !held {
            if let Err(err) = file.write_at(header.offset, slot.filled_bytes()) {
                drop(file);
                let dropped = {
                    let mut st = lock(&e.state);
                    st.writing = false;
                    std::mem::take(&mut st.pending)
                };
                fail_entry(shared, &e, err.to_string());
                delivered_all(shared, std::iter::once((header, slot)).chain(dropped));
                return;
            }
            let _ = file.record_chunk(index, header.checksum);
        }
        drop(slot);
        delivered(shared, &header);
        let mut st = lock(&e.state);
        if st.done {
            st.writing = false;
            let dropped = std::mem::take(&mut st.pending);
            drop(st);
            delivered_all(shared, dropped);
            return;
        }
        let new = !held && st.received.as_mut().is_none_or(|r| r.insert(index));
        if new {
            if let Some(d) = st.digest.as_mut() {
                let _ = d.add(index, header.checksum);
            }
            st.remaining = st.remaining.saturating_sub(1);
            if st.remaining == 0 {
                // Whatever else waits is a duplicate of a chunk already written.
                st.writing = false;
                let dropped = std::mem::take(&mut st.pending);
                drop(file);
                complete_locked(shared, &e, st);
                delivered_all(shared, dropped);
                return;
            }
        }
        next = st.pending.pop_front();
        if next.is_none() {
            st.writing = false;
        }
    }
}

/// With `--direct`, makes `file` write its aligned blocks with `O_DIRECT` (one warning
/// per process where the file system refuses it).
fn direct_writes(shared: &Shared, file: &mut SinkFile) {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn incoming(shared: &Shared, entry: &FileEntry) -> Incoming {
    Incoming {
        size: entry.size,
        mtime_ns: entry.mtime_ns,
        chunk_bytes: shared.chunk_bytes,
    }
}

/// Marks a file failed (keeping its partial for resume) and reports it.
fn fail_entry(shared: &Shared, e: &Entry, message: String) {
    let mut st = lock(&e.state);
    if st.done {
        return;
    }
    st.done = true;
    st.file = None;
    drop(st);
    finish_entry(shared, e, Err(message));
}

/// Every chunk is in: verify, rename, report. Called with the entry's lock held.
fn complete_locked(shared: &Shared, e: &Entry, mut st: std::sync::MutexGuard<'_, EntryState>) {
    st.done = true;
    let file = st.file.take();
    let digest = st
        .digest
        .as_ref()
        .and_then(|d| d.finish().ok())
        .unwrap_or_default();
    drop(st);
    let Some(mut file) = file else {
        finish_entry(shared, e, Err("internal: file handle missing".to_string()));
        return;
    };
    // Other writers drop their handle right after their write; wait for them.
    let file = loop {
        match Arc::try_unwrap(file) {
            Ok(f) => break f,
            Err(f) => {
                file = f;
                std::thread::yield_now();
            }
        }
    };
    let result = complete_file(shared, e, file, digest);
    finish_entry(shared, e, result);
}

/// Verifies (with `--verify`: re-reads the written file) and renames into place.
fn complete_file(
    shared: &Shared,
    e: &Entry,
    f: SinkFile,
    digest: [u8; 16],
) -> Result<[u8; 16], String> {
    if shared.opts.verify {
        let reread = reread_digest(f.file(), e.entry.size, shared.chunk_bytes)
            .map_err(|err| format!("re-reading {:?} to verify it: {err}", e.dest.as_str()))?;
        if reread != digest {
            f.abandon();
            return Err(format!(
                "{:?}: the written data does not match what was received (re-read digest differs); kept as partial",
                e.dest.as_str()
            ));
        }
    }
    f.finish(e.entry.mode, e.entry.mtime_ns, shared.opts.fsync)
        .map_err(|err| err.to_string())?;
    Ok(digest)
}

/// The per-file digest of a file's current content, read back chunk by chunk.
/// Uses one scratch buffer per writer thread, allocated on its first `--verify`.
fn reread_digest(file: &std::fs::File, size: u64, chunk_bytes: u32) -> std::io::Result<[u8; 16]> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let count = chunk_count(size, chunk_bytes);
    let mut digest = FileDigest::new(count).map_err(|e| std::io::Error::other(e.to_string()))?;
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
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        digest
            .finish()
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
}

fn clobber(opts: &SessionOptions) -> Clobber {
    if opts.no_clobber {
        Clobber::Refuse
    } else {
        Clobber::Replace
    }
}

/// Reports a file's end to the source and to the statistics; forgets it.
/// `message` with this side's root directory replaced by `<root>`.
pub(crate) fn redact_root(message: &str, root: &Root) -> String {
    let path = root.path().display().to_string();
    if path.is_empty() || path == "/" {
        return message.to_string();
    }
    message.replace(&path, "<root>")
}

fn finish_entry(shared: &Shared, e: &Entry, result: Result<[u8; 16], String>) {
    shared.table.remove(e.entry.file_id);
    match result {
        Ok(digest) => {
            shared.control.send(Frame::FileDone(FileDone {
                file_id: e.entry.file_id,
                digest,
            }));
            shared
                .stats
                .file_done(&e.entry, FileOutcome::Done { digest });
        }
        Err(message) => {
            tracing::warn!("{message}");
            let code = if message.contains("No space left") {
                ErrorCode::NoSpace
            } else {
                ErrorCode::Io
            };
            // The peer learns what failed, not where this side keeps its files.
            shared.control.send(Frame::FileFailed(FileFailed::new(
                e.entry.file_id,
                code,
                redact_root(&message, &shared.root),
            )));
            shared
                .stats
                .file_done(&e.entry, FileOutcome::Failed { message });
        }
    }
}

/// The destination path of a manifest entry.
fn dest_of(shared: &Shared, path: &RelPath) -> Option<RelPath> {
    shared.dest.map(path)
}

/// Directories whose mtime is set once their contents are in.
struct DirTimes(Vec<(RelPath, i64)>);

fn master(shared: &Arc<Shared>, events: &Receiver<ControlEvent>) -> Result<(), EngineError> {
    let mut dirs = DirTimes(Vec::new());
    let negotiate = shared.opts.resume || shared.opts.update || shared.opts.no_clobber;
    loop {
        let ev = events.recv().map_err(|_| EngineError::Disconnected {
            peer: "source".into(),
            state: "receiving files".into(),
        })?;
        let frame = ev.into_frame("source", "receiving files")?;
        match frame {
            Frame::Manifest(m) => {
                for entry in m.entries {
                    let id = entry.file_id;
                    announce(shared, entry, negotiate, &mut dirs);
                    shared.table.announced(id);
                }
            }
            Frame::ManifestEnd(_) => {}
            Frame::FileFailed(f) => {
                // The source could not read it: forget it, keep any partial for resume.
                if let Some(e) = shared.table.remove(f.file_id) {
                    let mut st = lock(&e.state);
                    st.done = true;
                    st.file = None; // dropped = abandoned: the partial stays for resume
                    drop(st);
                    shared
                        .stats
                        .file_done(&e.entry, FileOutcome::Failed { message: f.message });
                } else if f.file_id == crate::source::UNDESCRIBED_FILE_ID {
                    // An entry the source could not scan (on a pull: the daemon's side).
                    shared.stats.scan_error(&f.message);
                }
            }
            Frame::Close(_) => {
                shared.abort.store(true, Ordering::Relaxed);
                for (path, mtime) in dirs.0.iter().rev() {
                    let _ = sinkfs::set_dir_times(&shared.root, path, *mtime);
                }
                shared.control.send(Frame::CloseAck(CloseAck));
                return Ok(());
            }
            Frame::Error(e) => {
                return Err(EngineError::Remote {
                    code: e.code,
                    message: e.message,
                })
            }
            other => tracing::debug!("sink ignores {:?}", other.frame_type()),
        }
    }
}

/// Applies one manifest entry: directories, links and empty files at once; data files
/// registered for their chunks (after a resume/update/no-clobber answer if asked).
fn announce(shared: &Arc<Shared>, entry: FileEntry, negotiate: bool, dirs: &mut DirTimes) {
    let Some(dest) = dest_of(shared, &entry.path) else {
        shared.control.send(Frame::FileFailed(FileFailed::new(
            entry.file_id,
            ErrorCode::PathOutsideRoot,
            format!("{:?}: destination path too long", entry.path.as_str()),
        )));
        return;
    };
    let e = Arc::new(Entry {
        dest: dest.clone(),
        state: Mutex::new(EntryState {
            file: None,
            writing: false,
            pending: VecDeque::new(),
            received: None,
            remaining: 0,
            digest: None,
            done: false,
        }),
        entry,
    });
    let entry = &e.entry;
    match entry.kind {
        FileKind::Dir => {
            let r = sinkfs::make_dir(&shared.root, &dest, entry.mode);
            if r.is_ok() {
                dirs.0.push((dest, entry.mtime_ns));
            }
            finish_entry(
                shared,
                &e,
                r.map(|()| [0; 16]).map_err(|err| err.to_string()),
            );
        }
        FileKind::Symlink => {
            // No-clobber keeps an existing link (skipped, not failed); --update always
            // re-creates links, which is cheap.
            if shared.opts.no_clobber && skip_existing(shared, &e) {
                return;
            }
            let target = entry.symlink_target.clone().unwrap_or_default();
            let r = sinkfs::make_symlink(
                &shared.root,
                &dest,
                &target,
                entry.mtime_ns,
                clobber(&shared.opts),
            );
            finish_entry(
                shared,
                &e,
                r.map(|()| [0; 16]).map_err(|err| err.to_string()),
            );
        }
        FileKind::File if entry.size == 0 => {
            if skip_existing(shared, &e) {
                return;
            }
            let r = sinkfs::write_small_file(
                &shared.root,
                &dest,
                &[],
                entry.mode,
                entry.mtime_ns,
                shared.opts.fsync,
                clobber(&shared.opts),
            );
            finish_entry(
                shared,
                &e,
                r.map(|()| FileDigest::of_ordered(&[]))
                    .map_err(|err| err.to_string()),
            );
        }
        FileKind::File => {
            let count = chunk_count(entry.size, shared.chunk_bytes);
            {
                let mut st = lock(&e.state);
                st.remaining = count;
                st.received = ChunkSet::new(count);
                st.digest = FileDigest::new(count).ok();
            }
            if negotiate {
                if skip_existing(shared, &e) {
                    return;
                }
                let state = if shared.opts.resume {
                    resume_state(shared, &e, count)
                } else {
                    HaveState::Missing
                };
                if let HaveState::Partial { .. } = &state {
                    tracing::info!("resuming {:?}", dest.as_str());
                }
                if let HaveState::Complete { digest, .. } = &state {
                    // Whole already: answered, counted as skipped, never in the table.
                    let digest = *digest;
                    shared.control.send(Frame::Have(Have {
                        file_id: entry.file_id,
                        state,
                    }));
                    shared.stats.file_skipped(entry);
                    tracing::debug!("{:?} already whole ({digest:02x?})", dest.as_str());
                    return;
                }
                let all_held =
                    matches!(&state, HaveState::Partial { .. }) && lock(&e.state).remaining == 0;
                shared.table.insert(Arc::clone(&e));
                shared.control.send(Frame::Have(Have {
                    file_id: entry.file_id,
                    state,
                }));
                if all_held {
                    // The partial already holds every chunk: no data will come.
                    complete_locked(shared, &e, lock(&e.state));
                }
            } else {
                shared.table.insert(Arc::clone(&e));
            }
        }
    }
}

/// `--no-clobber` / `--update`: answers `Skip` for a destination that stays.
fn skip_existing(shared: &Shared, e: &Arc<Entry>) -> bool {
    let entry = &e.entry;
    let exists = shared.opts.no_clobber && shared.root.exists(&e.dest).unwrap_or(false);
    let same = shared.opts.update
        && sinkfs::same_size_and_mtime(&shared.root, &e.dest, entry.size, entry.mtime_ns);
    let reason = (exists || same).then_some(SkipReason::Exists);
    match reason {
        Some(r) => {
            shared.control.send(Frame::Have(Have {
                file_id: entry.file_id,
                state: HaveState::Skip(r),
            }));
            shared.stats.file_skipped(entry);
            true
        }
        None => false,
    }
}

/// Opens the partial of a file for resume and reports the chunks that still verify.
fn resume_state(shared: &Shared, e: &Arc<Entry>, count: u64) -> HaveState {
    let entry = &e.entry;
    // Already whole at the destination (same size and mtime, rsync's quick check): the
    // digest of what is there goes back, and nothing travels.
    if sinkfs::same_size_and_mtime(&shared.root, &e.dest, entry.size, entry.mtime_ns) {
        let digest = shared
            .root
            .open_read(&e.dest)
            .map_err(|err| err.to_string())
            .and_then(|f| {
                reread_digest(&f, entry.size, shared.chunk_bytes).map_err(|err| err.to_string())
            });
        match digest {
            Ok(digest) => {
                return HaveState::Complete {
                    size: entry.size,
                    mtime_ns: entry.mtime_ns,
                    digest,
                }
            }
            Err(err) => tracing::warn!(
                "cannot read {:?} to resume it: {err}; sending it again",
                e.dest.as_str()
            ),
        }
    }
    // Nothing to resume: create nothing now (a small file travels packed and is written
    // whole, so a partial made here would be left behind).
    if !SinkFile::has_partial(&shared.root, &e.dest) {
        return HaveState::Missing;
    }
    match SinkFile::create(
        &shared.root,
        &e.dest,
        incoming(shared, entry),
        ResumeMode::Resume,
        clobber(&shared.opts),
    ) {
        Ok((mut file, held)) => {
            if held.is_empty() {
                // Another version's partial, now reset: the file is written afresh.
                file.discard();
                return HaveState::Missing;
            }
            direct_writes(shared, &mut file);
            let mut st = lock(&e.state);
            st.file = Some(Arc::new(file));
            let Some(mut set) = ChunkSet::new(count) else {
                return HaveState::Missing;
            };
            for (index, checksum) in &held {
                if set.insert(*index) {
                    if let Some(r) = st.received.as_mut() {
                        r.insert(*index);
                    }
                    if let Some(d) = st.digest.as_mut() {
                        let _ = d.add(*index, *checksum);
                    }
                }
            }
            st.remaining = count - set.len();
            // Counted here too, so that a pull's summary (the client is the sink) shows it.
            let held_bytes: u64 = held
                .iter()
                .filter_map(|(i, _)| chunk_range(entry.size, shared.chunk_bytes, *i))
                .map(|(_, len)| u64::from(len))
                .sum();
            shared.stats.resumed_bytes(held_bytes);
            HaveState::Partial {
                size: entry.size,
                mtime_ns: entry.mtime_ns,
                chunks: set,
            }
        }
        Err(err) => {
            tracing::warn!(
                "cannot resume {:?}: {err}; sending it whole",
                e.dest.as_str()
            );
            HaveState::Missing
        }
    }
}
