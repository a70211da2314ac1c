//! The source side of a session: scan → manifest → schedule → read → send.
//!
//! Threads: a scanner streams the tree; the master (the calling thread) sends the
//! manifest, feeds the [`Scheduler`] and handles the sink's answers; io-read threads,
//! pinned by the plan, read chunks into their channel's NUMA-local slots and either send
//! them themselves (Tyche's inline path) or hand them to the channel's net-send threads
//! through a bounded queue (the queued pipeline).

use crate::codec::{CompressMode, Compressor, SharedAuto};
use crate::control::{ControlEvent, ControlTx, Wiring};
use crate::error::EngineError;
use crate::fs::layout::{BlockDeviceLayout, Layout, SimulatedStripes, TargetTable};
use crate::fs::Root;
use crate::fs::Scanner;
use crate::readahead::{self, ReadAhead};
use crate::runtime::{queue_for, Queues, Runtime};
use crate::sched::{Scheduler, SrcFile, Work};
use crate::stats::{FileOutcome, Stats};
use crate::transport::ChunkSender;
use crate::{Pipeline, SessionOptions};
use crossbeam_channel::{bounded, Receiver, Sender};
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_wire::{
    chunk_checksum, ChunkFlags, ChunkHeader, Close, CloseReason, Compression, ErrorCode, FileEntry,
    FileFailed, FileKind, Frame, HaveState, Manifest, ManifestEnd, RelPath, Segment,
};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Files announced but not yet answered by the sink, at most (bounds source memory).
pub const MAX_FILES_IN_FLIGHT: usize = 16_384;
/// Files up to this size travel packed (when the chunk is larger).
pub const SMALL_FILE_MAX_BYTES: u64 = 256 << 10;

/// The `file_id` of a `FileFailed` for an entry the source could not describe (it
/// could not be scanned, so it has no manifest entry); the message names it. Scanned
/// entries are numbered from 1.
pub const UNDESCRIBED_FILE_ID: u64 = 0;

/// What to scan: a root, where to start in it, and the name it gets at the destination.
#[derive(Debug)]
pub struct ScanSpec {
    /// The confined directory read from.
    pub root: Arc<Root>,
    /// What to send, relative to `root` (None: the root's contents).
    pub start: Option<RelPath>,
    /// Its name under the destination (None: its contents go directly there).
    pub prefix: Option<RelPath>,
}

/// Maps a manifest path back to the path under the source root.
fn source_path(spec: &ScanSpec, dest: &RelPath) -> Option<RelPath> {
    let rest: Option<&str> = match &spec.prefix {
        Some(p) if dest.as_str() == p.as_str() => None,
        Some(p) => Some(dest.as_str().strip_prefix(p.as_str())?.strip_prefix('/')?),
        None => Some(dest.as_str()),
    };
    match (&spec.start, rest) {
        (Some(s), None) => Some(s.clone()),
        (Some(s), Some(r)) => RelPath::parse(&format!("{}/{r}", s.as_str())).ok(),
        (None, Some(r)) => RelPath::parse(r).ok(),
        (None, None) => None,
    }
}

/// One data connection's sending half, shared by the threads that may use it.
type Conn = Mutex<ChunkSender>;

/// A chunk ready to go out on the queued pipeline.
struct Outgoing {
    header: ChunkHeader,
    segments: Vec<Segment>,
    slot: Slot,
}

/// How a thread holding a chunk ready to go (an io-read thread, or a compress thread)
/// gets it onto the wire: compressed when the session compresses, then sent on one of
/// its channel's connections (inline, seed 003) or queued for the channel's senders.
struct Dispatch {
    channel: u32,
    inline: bool,
    queue: Option<Sender<Outgoing>>,
    /// Connections this thread sends on inline: its channel's, or every one.
    own: Vec<Arc<Conn>>,
    /// Round-robin start over `own`.
    rr: usize,
    stats: Arc<Stats>,
}

impl Dispatch {
    /// Compresses (when on) and sends or queues one chunk. Gives back the chunk's
    /// segment list for reuse when it sent it itself (empty when queued); `Ok(None)`: the
    /// senders are gone (the session is ending).
    fn ship(
        &mut self,
        mut out: Outgoing,
        compressor: &mut Compressor,
    ) -> Result<Option<Vec<Segment>>, EngineError> {
        if !compressor.is_off() {
            let raw_len = out.header.raw_len;
            let done = compressor.compress(&mut out.slot, raw_len as usize);
            if done.compression != Compression::None {
                let wire = u32::try_from(done.wire_len).unwrap_or(raw_len);
                out.header = out.header.compressed(done.compression, wire);
                out.slot.set_filled(done.wire_len);
            }
        }
        let filled = out.slot.filled();
        crate::fault::corrupt_if_chosen(&mut out.slot[..filled]);
        self.stats
            .add_payload(self.channel, u64::from(out.header.raw_len));
        let wire = out.header.wire_len as usize;
        let payload = out.header.raw_len as usize;
        let key = (out.header.file_id, out.header.offset);
        let handing = std::time::Instant::now();
        match &self.queue {
            Some(q) if !self.inline => {
                // A full queue holds the thread back: `auto` sees the senders' pace.
                if q.send(out).is_err() {
                    return Ok(None);
                }
                compressor.record_sent(key, payload, handing.elapsed());
                Ok(Some(Vec::new()))
            }
            _ => {
                // Inline: take a free connection of our channel, or wait for one.
                let n = self.own.len();
                let mut sent = false;
                for k in 0..n {
                    if let Ok(mut c) = self.own[(self.rr + k) % n].try_lock() {
                        c.send(&out.header, &out.segments, out.slot.filled_bytes())?;
                        sent = true;
                        break;
                    }
                }
                if !sent {
                    let mut c = self.own[self.rr % n]
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    c.send(&out.header, &out.segments, out.slot.filled_bytes())?;
                }
                self.rr = self.rr.wrapping_add(1);
                self.stats.add_wire(self.channel, wire as u64);
                compressor.record_sent(key, payload, handing.elapsed());
                out.segments.clear();
                Ok(Some(out.segments))
            }
        }
    }
}

/// What an io-read thread is given; [`Reader::run`] is its body.
struct Reader {
    pool: Arc<sluice_buffers::BufferPool>,
    sched: Arc<Scheduler>,
    stats: Arc<Stats>,
    abort: Arc<AtomicBool>,
    control: ControlTx,
    /// The channel's compress stage, when the session has one.
    to_compress: Option<Sender<Outgoing>>,
    mode: CompressMode,
    auto: Arc<SharedAuto>,
    inline: bool,
    direct: bool,
    prefetch_stride: u64,
    /// Large-file reads kept in flight through io_uring (1: none, read in turn).
    read_depth: u32,
}

/// An io-read thread at work: its scratch state besides what it was given.
struct Reading {
    compressor: Compressor,
    open: OpenFile,
    /// A packed chunk's segment list, reused (inline, it travels and comes back).
    segments: Vec<Segment>,
    ahead: Option<ReadAhead>,
    /// Reads the ring finished, waiting to be shipped (room for `read_depth`, reused).
    finished: Vec<readahead::Finished>,
    /// The most reads this thread had in flight at once (reported when it ends).
    deepest: u32,
}

impl Reader {
    /// Takes work from the scheduler until it closes (or the session aborts), reads it
    /// into this channel's slots and ships each chunk. A large file's chunks opened with
    /// `O_DIRECT` go through the thread's ring, up to `read_depth` at a time: the disk
    /// keeps requests queued while the thread checksums and sends; everything else
    /// (packs, the page cache) is read in turn.
    fn run(self, mut dispatch: Dispatch) -> Result<(), EngineError> {
        let ahead = if self.direct && self.read_depth > 1 {
            ReadAhead::new(self.read_depth)
                .inspect_err(|e| {
                    static NO_RING: std::sync::Once = std::sync::Once::new();
                    NO_RING.call_once(|| {
                        tracing::warn!(
                            "io_uring unavailable ({e}): large files are read one chunk at a time"
                        );
                    });
                })
                .ok()
        } else {
            None
        };
        let mut r = Reading {
            compressor: Compressor::sharing(self.mode, &self.auto),
            open: OpenFile::new(self.direct, self.prefetch_stride),
            segments: Vec::new(),
            ahead,
            finished: Vec::with_capacity(self.read_depth as usize),
            deepest: 1,
        };
        let result = self.work(&mut r, &mut dispatch);
        self.stats.note_read_depth(r.deepest);
        result
    }

    fn work(&self, r: &mut Reading, dispatch: &mut Dispatch) -> Result<(), EngineError> {
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let idle = r.ahead.as_ref().is_none_or(ReadAhead::is_empty);
            let next = if idle {
                match self.sched.next(Duration::from_millis(200)) {
                    None => return Ok(()),
                    Some(Err(())) => continue,
                    Some(Ok(work)) => match self.acquire() {
                        Some(slot) => Some((work, slot)),
                        None => return Ok(()),
                    },
                }
            } else if r.ahead.as_ref().is_some_and(ReadAhead::has_room) {
                // Top the ring up only with what is ready now, and a slot free now.
                self.pool
                    .try_acquire()
                    .and_then(|slot| self.sched.try_next().map(|work| (work, slot)))
            } else {
                None
            };
            let going = match next {
                Some((work, slot)) => self.take(r, dispatch, work, slot)?,
                None => self.reap(r, dispatch)?,
            };
            if !going {
                return Ok(());
            }
        }
    }

    /// A slot of this channel's pool, or `None` once the session aborts: never wait for
    /// ever on slots held by a queue whose senders are gone.
    fn acquire(&self) -> Option<Slot> {
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(s) = self.pool.acquire_timeout(Duration::from_millis(200)) {
                return Some(s);
            }
        }
    }

    /// Starts `work` on the ring when it is a large file's chunk read with `O_DIRECT`,
    /// else reads it now and ships it. `false`: the session is ending.
    fn take(
        &self,
        r: &mut Reading,
        dispatch: &mut Dispatch,
        mut work: Work,
        mut slot: Slot,
    ) -> Result<bool, EngineError> {
        let target = match &work {
            Work::Chunk { target, .. } => *target,
            Work::Pack(_) => None,
        };
        if let (Some(ahead), Work::Chunk { file, .. }) = (r.ahead.as_mut(), &work) {
            if let Ok((f, true)) = r.open.get(file) {
                match ahead.start(work, slot, f) {
                    Ok(()) => {
                        r.deepest = r.deepest.max(ahead.in_flight());
                        return Ok(true);
                    }
                    Err((w, s, e)) => {
                        tracing::debug!("read-ahead refused a chunk ({e}): read in turn");
                        (work, slot) = (w, s);
                    }
                }
            }
        }
        r.segments.clear();
        let read = read_work(
            &work,
            &mut r.open,
            &mut slot,
            &mut r.segments,
            &self.control,
            &self.stats,
        );
        if let Some(t) = target {
            self.sched.done(t);
        }
        match read {
            Some(header) => self.ship(r, dispatch, header, slot),
            None => Ok(true),
        }
    }

    /// Waits for reads on the ring to finish and ships them. `false`: the session is
    /// ending.
    fn reap(&self, r: &mut Reading, dispatch: &mut Dispatch) -> Result<bool, EngineError> {
        let Some(ahead) = r.ahead.as_mut() else {
            return Ok(true);
        };
        let mut finished = std::mem::take(&mut r.finished);
        ahead
            .complete(|f| finished.push(f))
            .map_err(|e| EngineError::io("waiting for reads in flight", e))?;
        let mut going = true;
        for f in finished.drain(..) {
            let (p, result) = match f {
                Ok(p) => (p, Ok(())),
                Err((p, e)) => (p, Err(e)),
            };
            let Work::Chunk {
                file,
                offset,
                target,
                ..
            } = &p.work
            else {
                continue;
            };
            if let Some(t) = target {
                self.sched.done(*t);
            }
            match result {
                Ok(()) if going => {
                    let header = chunk_header(file, *offset, &p.slot);
                    r.segments.clear();
                    going = self.ship(r, dispatch, header, p.slot)?;
                }
                Ok(()) => {}
                Err(e) => fail_file(
                    &self.control,
                    &self.stats,
                    file,
                    &format!("reading {:?} at {offset}: {e}", file.src_path.as_str()),
                ),
            }
        }
        r.finished = finished;
        Ok(going)
    }

    /// Hands a chunk read into `slot` on: to the compress stage, or compressed (when on)
    /// and sent by this thread or queued for the senders. `false`: the session is ending.
    fn ship(
        &self,
        r: &mut Reading,
        dispatch: &mut Dispatch,
        header: ChunkHeader,
        slot: Slot,
    ) -> Result<bool, EngineError> {
        // While `auto` sends raw, the hand-off to a compress thread would only cost a
        // context switch: ship it from here.
        let stage = self
            .to_compress
            .as_ref()
            .filter(|_| self.mode != CompressMode::Auto || self.auto.compressing());
        // Inline, the segment list goes out and comes back (no allocation); a queue gets
        // its own copy (packed chunks only: a large file's chunk has none).
        let handed = if stage.is_some() || !self.inline {
            r.segments.clone()
        } else {
            std::mem::take(&mut r.segments)
        };
        let out = Outgoing {
            header,
            segments: handed,
            slot,
        };
        match stage {
            Some(q) => Ok(q.send(out).is_ok()),
            None => match dispatch.ship(out, &mut r.compressor)? {
                Some(back) if self.inline => {
                    r.segments = back;
                    Ok(true)
                }
                Some(_) => Ok(true),
                None => Ok(false),
            },
        }
    }
}

/// Runs the source side to completion. `conns` are the joined data connections in
/// stream order.
///
/// # Errors
/// A fatal session error (the control connection failed, the peer aborted). Per-file
/// failures are reported in `stats`, not here.
pub fn run(
    runtime: &Arc<Runtime>,
    specs: Vec<ScanSpec>,
    opts: &SessionOptions,
    wiring: Wiring<'_>,
    conns: Vec<ChunkSender>,
) -> Result<(), EngineError> {
    let Wiring {
        control,
        events,
        stats,
    } = wiring;
    let chunk_bytes = opts.chunk_bytes;
    let sched = Arc::new(Scheduler::new(chunk_bytes, SMALL_FILE_MAX_BYTES));
    let sources = Sources::new(specs);
    let abort = Arc::new(AtomicBool::new(false));

    let compress = opts
        .compress
        .toward(conns.first().is_some_and(ChunkSender::peer_is_this_host));
    // Connections grouped by the channel their net thread belongs to on this host.
    let stream_count = u32::try_from(conns.len()).unwrap_or(u32::MAX);
    let mut by_channel: HashMap<u32, Vec<Arc<Conn>>> = HashMap::new();
    let mut all: Vec<Arc<Conn>> = Vec::new();
    for (i, c) in conns.into_iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (channel, _) = runtime.pool_for(Role::NetSend, i);
        let conn = Arc::new(Mutex::new(c));
        by_channel
            .entry(channel)
            .or_default()
            .push(Arc::clone(&conn));
        all.push(conn);
    }
    let inline = match opts.pipeline {
        Pipeline::Inline => true,
        Pipeline::Queued => false,
        // Tyche (seed 003): the inline path wins when the protocol is NUMA-aware; the
        // queue only pays when readers outnumber connections by far.
        Pipeline::Auto => opts.io_threads <= 2 * stream_count,
    };
    stats.set_pipeline(if inline { "inline" } else { "queued" });
    stats.set_io_mode(opts.direct);

    // Queued pipeline: one bounded queue per channel, drained by that channel's senders.
    let mut queues: Queues<Outgoing> = HashMap::new();
    let mut threads = Vec::new();
    if !inline {
        for (i, conn) in all.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let (channel, pool) = runtime.pool_for(Role::NetSend, i);
            let (_, rx) = queues
                .entry(channel)
                .or_insert_with(|| bounded(pool.slots() as usize))
                .clone();
            let conn = Arc::clone(conn);
            let stats = Arc::clone(stats);
            let abort = Arc::clone(&abort);
            threads.push(
                runtime
                    .spawn(Role::NetSend, i, move || -> Result<(), EngineError> {
                        while let Ok(out) = rx.recv() {
                            if abort.load(Ordering::Relaxed) {
                                break;
                            }
                            let mut c = conn
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            c.send(&out.header, &out.segments, out.slot.filled_bytes())?;
                            stats.add_wire(channel, u64::from(out.header.wire_len));
                        }
                        Ok(())
                    })
                    .map_err(|e| EngineError::io("starting a net-send thread", e))?,
            );
        }
    }
    let dispatch_for = |channel: u32, k: u32| Dispatch {
        channel,
        inline,
        queue: queue_for(&queues, channel, k),
        own: by_channel
            .get(&channel)
            .cloned()
            .unwrap_or_else(|| all.clone()),
        rr: k as usize,
        stats: Arc::clone(stats),
    };

    // Compression stage (seed 001): when the session compresses and the plan has
    // compress threads, io-read threads hand their chunks to them through bounded
    // per-channel queues; each compress thread compresses and sends (or queues for the
    // senders). Otherwise the io-read thread compresses itself.
    let compress_threads = runtime.planned(Role::Compress);
    // One `auto` controller for the session: it judges the goodput of all threads.
    let auto = SharedAuto::new();
    if opts.chunk_acks {
        auto.measure_on_ack();
    }
    // Raw chunks are handed to the wire by the io-read threads themselves.
    auto.set_senders(opts.io_threads.max(1));
    let staged = compress != CompressMode::None && compress_threads > 0;
    auto.set_threads(if staged {
        compress_threads
    } else {
        opts.io_threads
    });
    let mut stage: Queues<Outgoing> = HashMap::new();
    if staged {
        stats.set_codec_threads(compress_threads);
        tracing::info!("compress stage: {compress_threads} threads");
        for c in 0..compress_threads {
            let (channel, _) = runtime.pool_for(Role::Compress, c);
            // Two read-ahead slots per compress thread keep it busy; more would only
            // hold slots the readers could use.
            let (_, rx) = stage
                .entry(channel)
                .or_insert_with(|| bounded(2 * compress_threads as usize))
                .clone();
            let mut dispatch = dispatch_for(channel, c);
            let abort = Arc::clone(&abort);
            let mode = compress;
            let auto = Arc::clone(&auto);
            threads.push(
                runtime
                    .spawn(Role::Compress, c, move || -> Result<(), EngineError> {
                        let mut compressor = Compressor::sharing(mode, &auto);
                        while let Ok(out) = rx.recv() {
                            if abort.load(Ordering::Relaxed)
                                || dispatch.ship(out, &mut compressor)?.is_none()
                            {
                                break;
                            }
                        }
                        Ok(())
                    })
                    .map_err(|e| EngineError::io("starting a compress thread", e))?,
            );
        }
    }

    // I/O threads.
    for r in 0..opts.io_threads.max(1) {
        let (channel, pool) = runtime.pool_for(Role::IoRead, r);
        let reader = Reader {
            pool,
            sched: Arc::clone(&sched),
            stats: Arc::clone(stats),
            abort: Arc::clone(&abort),
            control: control.clone(),
            to_compress: queue_for(&stage, channel, r),
            mode: compress,
            auto: Arc::clone(&auto),
            inline,
            direct: opts.direct,
            // Readers take a file's chunks in turn: this one's next is `io_threads` ahead.
            prefetch_stride: u64::from(opts.io_threads.max(1)),
            read_depth: opts.read_depth,
        };
        let dispatch = dispatch_for(channel, r);
        threads.push(
            runtime
                .spawn(Role::IoRead, r, move || reader.run(dispatch))
                .map_err(|e| EngineError::io("starting an io-read thread", e))?,
        );
    }
    drop(stage);
    drop(queues);

    let result = master(&sources, opts, control, events, &sched, stats, &auto);
    if result.is_err() {
        abort.store(true, Ordering::Relaxed);
    }
    sched.close();
    let mut thread_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                abort.store(true, Ordering::Relaxed);
                thread_error.get_or_insert(e);
            }
            Err(_) => {
                thread_error.get_or_insert(EngineError::Aborted("a data thread panicked".into()));
            }
        }
    }
    // Tell the sink that no more chunks follow on each data connection.
    for conn in &all {
        let mut c = conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = c.send_frame(&Close {
            reason: CloseReason::Done,
        });
        c.shutdown();
    }
    result?;
    if let Some(e) = thread_error {
        return Err(e);
    }
    // Orderly close: the sink sets directory times, then acknowledges.
    control.send(Frame::Close(Close {
        reason: CloseReason::Done,
    }));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match events.recv_timeout(left) {
            Ok(ControlEvent::Frame(Frame::CloseAck(_))) => return Ok(()),
            Ok(ControlEvent::Frame(Frame::Error(e))) => {
                return Err(EngineError::Remote {
                    code: e.code,
                    message: e.message,
                })
            }
            Ok(ControlEvent::Frame(_) | ControlEvent::Ack(..)) => {}
            Ok(ControlEvent::Closed) | Err(_) => {
                return Err(EngineError::Disconnected {
                    peer: "sink".into(),
                    state: "waiting for the close to be acknowledged".into(),
                })
            }
            Ok(ControlEvent::Failed(e)) => return Err(e),
        }
    }
}

/// A reader's open large file: kept while its chunks keep coming (one `open` per file,
/// not per chunk, and the kernel's readahead state survives), with the next chunk this
/// reader is likely to take asked for ahead (`POSIX_FADV_WILLNEED`), so the disk reads
/// it while this one is checksummed and sent.
struct OpenFile {
    direct: bool,
    /// Chunks between this reader's successive chunks of a file (the reader count).
    stride: u64,
    current: Option<(u64, Arc<std::fs::File>, bool)>,
}

impl OpenFile {
    fn new(direct: bool, stride: u64) -> OpenFile {
        OpenFile {
            direct,
            stride,
            current: None,
        }
    }

    /// The open file for `file` (a handle a read in flight can keep while this reader
    /// moves on to another file), and whether it reads with `O_DIRECT`.
    fn get(&mut self, file: &SrcFile) -> Result<(Arc<std::fs::File>, bool), crate::fs::FsError> {
        let current = match self.current.take() {
            Some(c) if c.0 == file.id => c,
            _ => {
                let (f, direct) = open_chunk_file(file, self.direct)?;
                (file.id, Arc::new(f), direct)
            }
        };
        let (_, f, direct) = self.current.insert(current);
        Ok((Arc::clone(f), *direct))
    }

    /// Asks the kernel to start reading the chunk after `offset`+`len` this reader will
    /// likely take next (advice only: a failure changes nothing).
    fn prefetch(&self, size: u64, offset: u64, len: u32) {
        let Some((_, f, false)) = &self.current else {
            return;
        };
        let next = offset.saturating_add(u64::from(len).saturating_mul(self.stride));
        if next < size {
            let _ = rustix::fs::fadvise(
                f,
                next,
                std::num::NonZeroU64::new(u64::from(len)),
                rustix::fs::Advice::WillNeed,
            );
        }
    }
}

/// Reads one piece of work into `slot`; returns its chunk header. Files that cannot be
/// read are reported to the sink as failed and left out.
fn read_work(
    work: &Work,
    open: &mut OpenFile,
    slot: &mut Slot,
    segments: &mut Vec<Segment>,
    control: &ControlTx,
    stats: &Stats,
) -> Option<ChunkHeader> {
    match work {
        Work::Chunk {
            file, offset, len, ..
        } => {
            let chunk_len = *len;
            let len = *len as usize;
            let result = open
                .get(file)
                .map_err(|e| e.to_string())
                .and_then(|(f, direct)| {
                    if direct {
                        read_direct_at(&f, slot, len, *offset)
                    } else {
                        read_full_at(&f, &mut slot[..len], *offset)
                    }
                    .map_err(|e| format!("reading {:?} at {offset}: {e}", file.src_path.as_str()))
                });
            if result.is_ok() {
                open.prefetch(file.size, *offset, chunk_len);
            }
            match result {
                Ok(()) => {
                    slot.set_filled(len);
                    Some(chunk_header(file, *offset, slot))
                }
                Err(msg) => {
                    fail_file(control, stats, file, &msg);
                    None
                }
            }
        }
        Work::Pack(files) => {
            let mut filled = 0usize;
            let mut first = None;
            for f in files {
                let (Ok(len), Ok(seg_len)) = (usize::try_from(f.size), u32::try_from(f.size))
                else {
                    fail_file(control, stats, f, "too large to pack");
                    continue;
                };
                if filled + len > slot.len() {
                    fail_file(control, stats, f, "grew past the pack while being read");
                    continue;
                }
                let r = f
                    .root
                    .open_read(&f.src_path)
                    .map_err(|e| e.to_string())
                    .and_then(|h| {
                        let meta_len = h.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
                        if meta_len != f.size {
                            return Err(format!(
                                "{:?} changed size during the transfer ({} -> {meta_len} bytes)",
                                f.src_path.as_str(),
                                f.size
                            ));
                        }
                        read_full_at(&h, &mut slot[filled..filled + len], 0)
                            .map_err(|e| format!("reading {:?}: {e}", f.src_path.as_str()))
                    });
                match r {
                    Ok(()) => {
                        first.get_or_insert(f.id);
                        segments.push(Segment {
                            file_id: f.id,
                            len: seg_len,
                        });
                        filled += len;
                    }
                    Err(msg) => fail_file(control, stats, f, &msg),
                }
            }
            let first = first?;
            slot.set_filled(filled);
            let mut header = ChunkHeader::plain(first, 0, slot.filled_bytes(), true);
            header.flags.set(ChunkFlags::PACKED, true);
            header.segments = u16::try_from(segments.len()).unwrap_or(u16::MAX);
            header.checksum = chunk_checksum(slot.filled_bytes());
            Some(header)
        }
    }
}

/// The header of chunk `offset` of `file`, read into `slot` (its checksum computed now).
fn chunk_header(file: &SrcFile, offset: u64, slot: &Slot) -> ChunkHeader {
    let last = offset + slot.filled() as u64 >= file.size;
    ChunkHeader::plain(file.id, offset, slot.filled_bytes(), last)
}

fn fail_file(control: &ControlTx, stats: &Stats, file: &SrcFile, msg: &str) {
    tracing::warn!("{msg}");
    control.send(Frame::FileFailed(FileFailed::new(
        file.id,
        ErrorCode::Io,
        msg,
    )));
    stats.file_failed_at_source(file.id, msg);
}

/// Opens a large file's chunk source: with `O_DIRECT` when asked and supported (one
/// warning per process when the file system refuses it), else through the page cache.
fn open_chunk_file(
    file: &SrcFile,
    direct: bool,
) -> Result<(std::fs::File, bool), crate::fs::FsError> {
    static NO_DIRECT: std::sync::Once = std::sync::Once::new();
    if direct {
        match file.root.open_read_direct(&file.src_path) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.io_error().and_then(std::io::Error::raw_os_error) == Some(libc::EINVAL) => {
                NO_DIRECT.call_once(|| {
                    tracing::warn!(
                        "--direct: {} does not support O_DIRECT; reading through the page cache",
                        file.root.path().display()
                    );
                });
            }
            Err(e) => return Err(e),
        }
    }
    file.root.open_read(&file.src_path).map(|f| (f, false))
}

/// An `O_DIRECT` read of `len` bytes at `offset` (a multiple of the chunk size, so
/// aligned) into the page-aligned slot: the length is rounded up to the page size and
/// the file's end returns the short count.
fn read_direct_at(
    f: &std::fs::File,
    slot: &mut Slot,
    len: usize,
    offset: u64,
) -> std::io::Result<()> {
    const ALIGN: usize = 4096;
    let want = len.div_ceil(ALIGN) * ALIGN;
    let dst = slot
        .get_mut(..want)
        .ok_or_else(|| std::io::Error::other("chunk larger than its slot"))?;
    let mut done = 0;
    while done < len {
        match f.read_at(&mut dst[done..], offset + done as u64) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is shorter than when it was scanned",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// pread until `dst` is full; a short file is an error.
fn read_full_at(f: &std::fs::File, dst: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        match f.read_at(&mut dst[done..], offset) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is shorter than when it was scanned",
                ))
            }
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The master loop: scan, announce, schedule, collect answers.
fn master(
    sources: &Sources,
    opts: &SessionOptions,
    control: &ControlTx,
    events: &Receiver<ControlEvent>,
    sched: &Arc<Scheduler>,
    stats: &Arc<Stats>,
    auto: &SharedAuto,
) -> Result<(), EngineError> {
    let (entry_tx, entry_rx) = bounded::<(usize, Result<FileEntry, String>)>(1024);
    let spec_handles: Vec<(Arc<Root>, Option<RelPath>, Option<RelPath>)> = sources
        .specs
        .iter()
        .map(|s| (Arc::clone(&s.root), s.start.clone(), s.prefix.clone()))
        .collect();
    let recursive = opts.recursive;
    let scanner = std::thread::Builder::new()
        .name("scan".into())
        .spawn(move || {
            let mut next_id = 1u64;
            for (i, (root, start, prefix)) in spec_handles.into_iter().enumerate() {
                let scanner = match Scanner::new(&root, start, prefix, next_id, recursive) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = entry_tx.send((i, Err(e.to_string())));
                        continue;
                    }
                };
                for item in scanner {
                    let item = item.map_err(|e| e.to_string());
                    if let Ok(e) = &item {
                        next_id = next_id.max(e.file_id + 1);
                    }
                    if entry_tx.send((i, item)).is_err() {
                        return;
                    }
                }
            }
        })
        .map_err(|e| EngineError::io("starting the scanner", e))?;

    let negotiate = opts.resume || opts.update || opts.no_clobber;
    // Files announced and not yet answered: id -> (spec index, entry) — bounded.
    let mut pending: HashMap<u64, (usize, FileEntry)> = HashMap::new();
    let mut manifest = Manifest::new();
    let mut scanning = true;
    let (mut files_total, mut bytes_total) = (0u64, 0u64);
    loop {
        // 1. Everything the sink said so far.
        loop {
            let ev = if scanning || pending.is_empty() {
                match events.try_recv() {
                    Ok(ev) => ev,
                    Err(_) => break,
                }
            } else {
                // Small files answered by `Have` after the scan ended wait in the open
                // pack: release it before waiting, or they would never be sent.
                if events.is_empty() {
                    sched.flush();
                }
                match events.recv_timeout(Duration::from_millis(100)) {
                    Ok(ev) => ev,
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => break,
                    Err(_) => {
                        return Err(EngineError::Disconnected {
                            peer: "sink".into(),
                            state: "waiting for file completions".into(),
                        })
                    }
                }
            };
            handle_event(ev, sources, &mut pending, sched, stats, auto)?;
        }
        if !scanning && pending.is_empty() {
            break;
        }
        // 2. More of the tree, while there is room.
        if scanning {
            if pending.len() >= MAX_FILES_IN_FLIGHT || !sched.has_room() {
                if !manifest.is_empty() {
                    control.send(Frame::Manifest(std::mem::take(&mut manifest)));
                }
                sched.flush();
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            match entry_rx.recv_timeout(Duration::from_millis(5)) {
                Ok((spec, Ok(entry))) => {
                    files_total += 1;
                    bytes_total += entry.size;
                    stats.file_announced(entry.size);
                    let is_data = entry.kind == FileKind::File && entry.size > 0;
                    if let Err(entry) = manifest.try_push(entry.clone()) {
                        control.send(Frame::Manifest(std::mem::take(&mut manifest)));
                        let _ = manifest.try_push(entry);
                    }
                    if is_data && !negotiate {
                        sources.schedule(spec, &entry, None, sched);
                    }
                    pending.insert(entry.file_id, (spec, entry));
                }
                Ok((_, Err(msg))) => {
                    tracing::warn!("scan: {msg}");
                    stats.scan_error(&msg);
                    // The sink reports it too: on a pull it is the user's side.
                    control.send(Frame::FileFailed(FileFailed::new(
                        UNDESCRIBED_FILE_ID,
                        ErrorCode::Io,
                        msg,
                    )));
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if !manifest.is_empty() {
                        control.send(Frame::Manifest(std::mem::take(&mut manifest)));
                    }
                    sched.flush();
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    scanning = false;
                    if !manifest.is_empty() {
                        control.send(Frame::Manifest(std::mem::take(&mut manifest)));
                    }
                    control.send(Frame::ManifestEnd(ManifestEnd {
                        files: files_total,
                        bytes: bytes_total,
                    }));
                    sched.flush();
                }
            }
        }
    }
    let _ = scanner.join();
    sched.close();
    Ok(())
}

/// What a session sends: its scan specs, each with the storage layout of its root.
struct Sources {
    specs: Vec<ScanSpec>,
    layouts: Vec<Arc<dyn Layout>>,
}

impl Sources {
    fn new(specs: Vec<ScanSpec>) -> Sources {
        let layouts = layouts_of(&specs);
        Sources { specs, layouts }
    }

    /// The file to read for `entry`, found by scan spec `spec` (`None`: its path does
    /// not map back into the spec's root).
    fn file(&self, spec: usize, entry: &FileEntry) -> Option<Arc<SrcFile>> {
        let s = &self.specs[spec];
        Some(Arc::new(SrcFile {
            id: entry.file_id,
            root: Arc::clone(&s.root),
            src_path: source_path(s, &entry.path)?,
            size: entry.size,
            layout: Arc::clone(&self.layouts[spec]),
        }))
    }

    /// Hands `entry`'s chunks (less `skip`, those the sink holds) to the scheduler.
    fn schedule(
        &self,
        spec: usize,
        entry: &FileEntry,
        skip: Option<sluice_wire::ChunkSet>,
        sched: &Scheduler,
    ) {
        if let Some(file) = self.file(spec, entry) {
            sched.add(file, skip);
        }
    }
}

fn handle_event(
    ev: ControlEvent,
    sources: &Sources,
    pending: &mut HashMap<u64, (usize, FileEntry)>,
    sched: &Scheduler,
    stats: &Stats,
    auto: &SharedAuto,
) -> Result<(), EngineError> {
    if let ControlEvent::Ack(ack, at) = ev {
        auto.delivered((ack.file_id, ack.offset), at);
        return Ok(());
    }
    let frame = ev.into_frame("sink", "sending files")?;
    match frame {
        Frame::Have(have) => {
            let Some((spec, entry)) = pending.get(&have.file_id).cloned() else {
                return Ok(());
            };
            match have.state {
                HaveState::Missing => {
                    if entry.kind == FileKind::File && entry.size > 0 {
                        sources.schedule(spec, &entry, None, sched);
                    }
                }
                HaveState::Partial {
                    size,
                    mtime_ns,
                    chunks,
                } => {
                    // The partial is only trusted if the source has not changed since.
                    let same = size == entry.size && mtime_ns == entry.mtime_ns;
                    if same {
                        // Whole chunks, less what the last one lacks if it is held.
                        let chunk = u64::from(sched.chunk_bytes());
                        let count = sluice_wire::chunk_count(entry.size, sched.chunk_bytes());
                        let mut held = chunks.len() * chunk;
                        if count > 0 && chunks.contains(count - 1) {
                            held -= count * chunk - entry.size;
                        }
                        stats.resumed_bytes(held);
                    }
                    sources.schedule(spec, &entry, same.then_some(chunks), sched);
                }
                HaveState::Complete { size, mtime_ns, .. }
                    if size != entry.size || mtime_ns != entry.mtime_ns =>
                {
                    // The destination holds another version: send this one whole.
                    if entry.kind == FileKind::File && entry.size > 0 {
                        sources.schedule(spec, &entry, None, sched);
                    }
                }
                HaveState::Complete { .. } | HaveState::Skip(_) => {
                    pending.remove(&have.file_id);
                    stats.file_skipped(&entry);
                }
            }
        }
        Frame::FileDone(done) => {
            if let Some((_, entry)) = pending.remove(&done.file_id) {
                stats.file_done(
                    &entry,
                    FileOutcome::Done {
                        digest: done.digest,
                    },
                );
            }
        }
        Frame::FileFailed(f) => {
            // The sink gave the file up: read and send none of the rest of it.
            sched.cancel(f.file_id);
            if let Some((_, entry)) = pending.remove(&f.file_id) {
                stats.file_done(
                    &entry,
                    FileOutcome::Failed {
                        message: f.message.clone(),
                    },
                );
            }
        }
        Frame::ChunkNack(nack) => {
            // The sink saw a corrupted chunk and wrote nothing: read and send it again.
            auto.refused((nack.file_id, nack.offset));
            if let Some((spec, entry)) = pending.get(&nack.file_id) {
                stats.chunk_resent();
                if let Some(file) = sources.file(*spec, entry) {
                    let chunk = u64::from(sched.chunk_bytes());
                    let work = if sched.is_small(entry.size) {
                        Work::Pack(vec![file])
                    } else {
                        let index = nack.offset / chunk;
                        let len =
                            u32::try_from((entry.size - nack.offset.min(entry.size)).min(chunk))
                                .unwrap_or(0);
                        // A retry is not counted in flight on its target.
                        Work::Chunk {
                            file,
                            index,
                            offset: nack.offset,
                            len,
                            target: None,
                        }
                    };
                    sched.retry(work);
                }
            }
        }
        Frame::Error(e) => {
            return Err(EngineError::Remote {
                code: e.code,
                message: e.message,
            });
        }
        other => {
            tracing::debug!("source ignores {:?}", other.frame_type());
        }
    }
    Ok(())
}

/// One layout per source root: Lustre stripes where the root is on Lustre (per file it
/// would need `lfs` calls; the root's default is used), else the root's block device.
fn layouts_of(specs: &[ScanSpec]) -> Vec<Arc<dyn Layout>> {
    let mut table = TargetTable::new();
    specs
        .iter()
        .map(|s| -> Arc<dyn Layout> {
            match BlockDeviceLayout::discover(s.root.path(), &mut table) {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    tracing::debug!("no block device for {}: {e}", s.root.path().display());
                    Arc::new(SimulatedStripes {
                        stripe_bytes: u64::MAX,
                        targets: Vec::new(),
                    })
                }
            }
        })
        .collect()
}
