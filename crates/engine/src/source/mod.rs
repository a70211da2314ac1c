//! The source side of a session: scan → manifest → schedule → read → send.
//!
//! The protocol (the window of announced files, `Have` → schedule, `ChunkNack` →
//! resend, the close) is [`sluice_session::source::SourceCore`]; this module is its I/O
//! shell. Threads: a scanner streams the tree; the master (the calling thread, in
//! `master`) feeds its entries and the sink's answers to the core and carries out its
//! actions, handing files to the [`Scheduler`]; io-read threads (`reader`), pinned by
//! the plan, take work from it, read chunks (`read`) into their channel's NUMA-local
//! slots and ship them (`dispatch`): to the compress stage when there is one, else
//! sent by the reader itself (Tyche's inline path) or through a bounded queue to the
//! channel's net-send threads (the queued pipeline).

mod dispatch;
mod earliest;
mod master;
mod packs;
mod read;
mod reader;
mod scanq;

use crate::codec::{CodecInputs, CodecPlan, CodecSite, SharedAuto};
use crate::control::Wiring;
use crate::error::EngineError;
use crate::fs::layout::{BlockDeviceLayout, Layout, SingleTarget, TargetId, TargetTable};
use crate::fs::Root;
use crate::pipeline::{is_inline, Stages};
use crate::runtime::{queue_for, Queues, Runtime};
use crate::sched::{Scheduler, SrcFile};
use crate::transport::ChunkSender;
use crate::SessionOptions;
use crossbeam_channel::{bounded, Sender};
use dispatch::{Conns, Outgoing, Outlets};
use master::Master;
use read::ReadFailure;
use reader::Reader;
use sluice_placement::Role;
use sluice_session::source::{SourceConfig, SourceCore};
use sluice_wire::{ChunkFlags, FileEntry, RelPath};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use sluice_session::source::{MAX_FILES_IN_FLIGHT, SMALL_FILE_MAX_BYTES, UNDESCRIBED_FILE_ID};

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
        let s = self.specs.get(spec)?;
        Some(Arc::new(SrcFile {
            id: entry.file_id,
            root: Arc::clone(&s.root),
            src_path: source_path(s, &entry.path)?,
            size: entry.size,
            layout: Arc::clone(&self.layouts[spec]),
        }))
    }
}

/// One layout per source root: the block device holding it, or a single unknown target
/// where none can be found.
fn layouts_of(specs: &[ScanSpec]) -> Vec<Arc<dyn Layout>> {
    let mut table = TargetTable::new();
    specs
        .iter()
        .map(|s| -> Arc<dyn Layout> {
            match BlockDeviceLayout::discover(s.root.path(), &mut table) {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    tracing::debug!("no block device for {}: {e}", s.root.path().display());
                    Arc::new(SingleTarget(TargetId::UNKNOWN))
                }
            }
        })
        .collect()
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
    // Small files travel packed where the sink takes packs (`PACKED` agreed).
    let small_max_bytes = if opts.chunk_flags.contains(ChunkFlags::PACKED) {
        SMALL_FILE_MAX_BYTES
    } else {
        0
    };
    let sched = Arc::new(Scheduler::new(opts.chunk_bytes, small_max_bytes));
    let sources = Sources::new(specs);
    let abort = Arc::new(AtomicBool::new(false));
    let peer_is_this_host = conns.first().is_some_and(ChunkSender::peer_is_this_host);
    let conns = Conns::group(runtime, conns);
    let codec = CodecPlan::decide(&CodecInputs {
        peer_is_this_host,
        io_threads: opts.io_threads,
        streams: conns.count(),
        ..CodecInputs::on(runtime, CodecSite::Source, opts.compress)
    });
    let inline = is_inline(opts.pipeline, opts.io_threads, conns.count());
    let in_place = sends_from_page_cache(&conns, codec.mode, peer_is_this_host);
    wiring
        .stats
        .set_pipeline(if inline { "inline" } else { "queued" });
    wiring.stats.set_io_mode(opts.direct);
    let auto = codec.auto(opts.chunk_acks);
    let mut stages = Stages::default();
    let (failed, failures) = bounded(read::READ_FAILURES_QUEUED);
    let data = DataPath {
        runtime,
        opts,
        wiring,
        sched: &sched,
        abort: &abort,
        codec: (codec, &auto),
        failed: &failed,
        in_place,
    };
    let outlets = data.start(&mut stages, inline, conns);
    let negotiate = opts.resume || opts.update || opts.no_clobber;
    let mut core = SourceCore::new(SourceConfig {
        sink_closes: opts.sink_closes,
        small_max_bytes,
        ..SourceConfig::new(opts.chunk_bytes, negotiate)
    });
    let master = Master::new(&sources, &sched, wiring, &auto, (failed, failures));
    let (outlets, result) = match outlets {
        Ok(o) => (Some(o), master.run(&mut core, opts.recursive)),
        Err(e) => (None, Err(e)),
    };
    if result.is_err() {
        abort.store(true, Ordering::Relaxed);
    }
    sched.close();
    let thread_error = stages.join(|| abort.store(true, Ordering::Relaxed));
    if let Some(o) = &outlets {
        o.conns.close_all();
    }
    result?;
    if let Some(e) = thread_error {
        return Err(e);
    }
    master.close(&mut core)
}

/// Whether large files' chunks read through the page cache are sent from it
/// (`sendfile`): where nothing must touch their bytes in this process (neither TLS nor
/// a codec), toward a peer on another host. Toward this very host it loses: over
/// loopback a 2 GiB push took 15 % longer and 18 % more CPU (the receiver copies from
/// the page cache's pages more slowly than from the sender's fresh buffers); between
/// two network namespaces joined by a veth pair it took 14 % less, and the client 29 %
/// less CPU (`bench/runs/2026-11-29-vm-sendfile`).
/// `SLUICE_SENDFILE_ON_LOOPBACK=1` (test only: the integration tests run over
/// loopback) sends from the page cache there too.
fn sends_from_page_cache(
    conns: &Conns,
    mode: crate::codec::CompressMode,
    peer_is_this_host: bool,
) -> bool {
    let tested = std::env::var_os("SLUICE_SENDFILE_ON_LOOPBACK").is_some_and(|v| v == "1");
    let clear = conns.all_clear() && mode == crate::codec::CompressMode::None;
    clear && (!peer_is_this_host || tested)
}

/// What the data threads of a source session share.
struct DataPath<'a> {
    runtime: &'a Arc<Runtime>,
    opts: &'a SessionOptions,
    wiring: Wiring<'a>,
    sched: &'a Arc<Scheduler>,
    abort: &'a Arc<AtomicBool>,
    codec: (CodecPlan, &'a Arc<SharedAuto>),
    /// Where readers report files they cannot read.
    failed: &'a Sender<ReadFailure>,
    /// Large files' chunks read through the page cache are sent from it.
    in_place: bool,
}

impl DataPath<'_> {
    /// Starts the net-send threads (queued pipeline), the compress stage and the
    /// io-read threads, in the order a chunk meets them backwards.
    fn start(
        &self,
        stages: &mut Stages,
        inline: bool,
        conns: Conns,
    ) -> Result<Outlets, EngineError> {
        let mut outlets = Outlets::new(inline, conns, self.wiring.stats, &self.opts.pace);
        outlets.start_senders(stages, self.runtime, self.abort)?;
        let stage =
            dispatch::start_compress_stage(stages, self.runtime, &outlets, self.codec, self.abort)?;
        self.start_readers(stages, &outlets, &stage)?;
        outlets.seal();
        Ok(outlets)
    }

    fn start_readers(
        &self,
        stages: &mut Stages,
        outlets: &Outlets,
        stage: &Queues<Outgoing>,
    ) -> Result<(), EngineError> {
        let opts = self.opts;
        for r in 0..opts.io_threads.max(1) {
            let (channel, pool) = self.runtime.pool_for(Role::IoRead, r);
            let reader = Reader {
                pool,
                sched: Arc::clone(self.sched),
                stats: Arc::clone(self.wiring.stats),
                abort: Arc::clone(self.abort),
                failed: self.failed.clone(),
                to_compress: queue_for(stage, channel, r),
                mode: self.codec.0.mode,
                auto: Arc::clone(self.codec.1),
                inline: outlets.inline,
                direct: opts.direct,
                in_place: self.in_place,
                // Readers take a file's chunks in turn: this one's next is `io_threads`
                // ahead.
                prefetch_stride: u64::from(opts.io_threads.max(1)),
                read_depth: opts.read_depth,
            };
            let dispatch = outlets.dispatch(channel, r);
            stages.spawn(self.runtime, Role::IoRead, r, move || reader.run(dispatch))?;
        }
        Ok(())
    }
}
