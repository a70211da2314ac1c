//! The sink side of a session: receive → verify → write → rename, as the I/O shell
//! around [`sluice_session::sink`], which decides; this module does the socket and file
//! work it asks for and reports the results back.
//!
//! Threads: the master (the calling thread, `master`) applies the manifest
//! (directories ahead, links, empty files, resume answers); one net-recv thread per data
//! connection (`recv`), pinned by the plan, reads each chunk straight into a slot of
//! its channel's NUMA-local pool, verifies its checksum (a corrupted chunk is
//! re-requested, never written) and writes it itself (inline) or hands it to the
//! channel's io-write threads ([`write`], queued). A file is renamed into place only
//! when every chunk is written (and, with `--verify`, re-read) (`complete`). Where the
//! sink closes the session by itself, the thread that ends the last file after
//! `ManifestEnd` wakes the master (`settle`).

mod complete;
mod master;
mod recv;
mod settle;
mod table;
mod write;

use crate::control::Wiring;
use crate::error::EngineError;
use crate::fs::{Clobber, Incoming, Root, SinkFile};
use crate::pipeline::{is_inline, Stages};
use crate::runtime::Runtime;
use crate::session::DestMap;
use crate::stats::Stats;
use crate::transport::ChunkReceiver;
use crate::SessionOptions;
use sluice_buffers::Slot;
use sluice_session::sink::FileChunks;
use sluice_wire::{ChunkHeader, FileEntry, RelPath, Segment};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a thread that waits (for a buffer slot, for a file's manifest entry)
/// checks whether the session has ended.
const ABORT_POLL: Duration = Duration::from_millis(200);

/// A data file being received.
#[derive(Debug)]
struct Entry {
    entry: FileEntry,
    dest: RelPath,
    state: Mutex<EntryState>,
}

/// A verified chunk waiting for its file's writer, with the slot that holds its bytes.
type Pending = (ChunkHeader, Slot);

#[derive(Debug)]
struct EntryState {
    /// The open partial; written outside this lock by the file's one writer.
    file: Option<Arc<SinkFile>>,
    /// Which chunks are written, and which thread writes them.
    chunks: FileChunks<Pending>,
}

/// Everything the receiving threads share.
struct Shared {
    root: Arc<Root>,
    opts: SessionOptions,
    chunk_bytes: u32,
    table: table::Table,
    /// Data files in flight, for the sink's own close (`SINK_CLOSES`).
    settle: settle::Settle,
    control: crate::control::ControlTx,
    stats: Arc<Stats>,
    abort: AtomicBool,
    /// The origin of the session core's time.
    origin: std::time::Instant,
}

impl Shared {
    /// Now, as the session core counts time.
    fn now(&self) -> sluice_session::time::Instant {
        sluice_session::time::Instant::from_origin(self.origin.elapsed())
    }

    fn clobber(&self) -> Clobber {
        if self.opts.no_clobber {
            Clobber::Refuse
        } else {
            Clobber::Replace
        }
    }

    fn incoming(&self, entry: &FileEntry) -> Incoming {
        Incoming {
            size: entry.size,
            mtime_ns: entry.mtime_ns,
            chunk_bytes: self.chunk_bytes,
        }
    }

    /// Whether the session has ended (or failed): waiting threads give up.
    fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    fn stop(&self) {
        self.abort.store(true, Ordering::Relaxed);
    }
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
    let (settle, settled) = settle::Settle::new();
    let shared = Arc::new(Shared {
        root,
        opts: opts.clone(),
        chunk_bytes: opts.chunk_bytes,
        table: table::Table::default(),
        settle,
        control: control.clone(),
        stats: Arc::clone(stats),
        abort: AtomicBool::new(false),
        origin: std::time::Instant::now(),
    });
    let streams = u32::try_from(conns.len()).unwrap_or(u32::MAX);
    let inline = is_inline(opts.pipeline, opts.io_threads, streams);
    stats.set_pipeline(if inline { "inline" } else { "queued" });
    stats.set_io_mode(opts.direct);

    let mut stages = Stages::default();
    let writers = write::spawn_writers(&mut stages, runtime, &shared, inline)?;
    let decompressors = recv::spawn_decompressors(&mut stages, runtime, &shared, &writers)?;
    // Empty where the pipeline is inline: each thread then writes what it verified.
    let queues = recv::Queues {
        writers: &writers,
        decompressors: &decompressors,
    };
    let stoppers: Vec<_> = conns.iter().filter_map(|c| c.stopper().ok()).collect();
    recv::spawn_receivers(&mut stages, runtime, &shared, &queues, conns)?;
    drop(decompressors);
    drop(writers);

    let result = master::run(&shared, &dest, events, &settled);
    if result.is_err() {
        shared.stop();
    }
    // Closed by itself with every file whole: every chunk the source sent is in. The
    // receivers need not wait for the source to end its data connections (it does so
    // only once it has read the last `FileDone`, a round trip later).
    // Otherwise they read on to the end, dropping what still comes.
    if result.is_ok() && opts.sink_closes && shared.settle.nothing_more_comes() {
        shared.stop();
        for s in &stoppers {
            let _ = s.shutdown(std::net::Shutdown::Read);
        }
    }
    let thread_error = stages.join(|| shared.stop());
    result?;
    thread_error.map_or(Ok(()), Err)
}

/// `message` with this side's root directory replaced by `<root>`.
pub(crate) fn redact_root(message: &str, root: &Root) -> String {
    let path = root.path().display().to_string();
    if path.is_empty() || path == "/" {
        return message.to_string();
    }
    message.replace(&path, "<root>")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
